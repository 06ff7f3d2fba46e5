//! `joiner bench`: the scheduling benchmark, with figures as ratios from one run.

use std::time::Instant;

pub mod process;

use joiner_engine::bench::{distinct_anti_affinity_input, scheduling_input};
use joiner_engine::scheduling::schedule;

/// Peak resident memory of this process so far, in MiB (Linux `VmHWM`), if known.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

pub fn scheduling(sizes: &[usize]) -> anyhow::Result<()> {
    println!(
        "Scheduling benchmark (Karpenter's shape: 400 instance types; plain, zone/hostname spread, hostname/zone affinity, hostname anti-affinity pods)"
    );
    println!(
        "{:>8}  {:>8}  {:>10}  {:>12}  {:>14}  {:>12}",
        "PODS", "NODES", "SECONDS", "PODS/S", "S PER 1K PODS", "PEAK RSS MiB"
    );
    let mut first_rate = None;
    for &n in sizes {
        let input = scheduling_input(n);
        let start = Instant::now();
        let plan = schedule(&input);
        let secs = start.elapsed().as_secs_f64();
        if let Some(first) = plan.unschedulable.first() {
            anyhow::bail!(
                "{} pods unschedulable in the benchmark, e.g. {}: {}",
                plan.unschedulable.len(),
                first.pod,
                first.reason
            );
        }
        let rate = n as f64 / secs;
        first_rate.get_or_insert(rate);
        println!(
            "{n:>8}  {:>8}  {secs:>10.3}  {rate:>12.0}  {:>14.4}  {:>12.1}",
            plan.node_claims.len(),
            secs * 1000.0 / n as f64,
            peak_rss_mib().unwrap_or(f64::NAN)
        );
    }
    // Distinct shapes: as many pods as the largest size, no two in one topology group.
    if let Some(&n) = sizes.iter().max() {
        let input = distinct_anti_affinity_input(n);
        let start = Instant::now();
        let plan = schedule(&input);
        let secs = start.elapsed().as_secs_f64();
        println!(
            "distinct anti-affinity terms ({n} pods, each repelling its own label): {secs:.3} s, {} nodes, {} unschedulable",
            plan.node_claims.len(),
            plan.unschedulable.len()
        );
    }
    Ok(())
}

/// The DRA benchmarks: claims on existing nodes' slices, then with new nodes from templates.
pub fn dra(nodes: usize, gpus: usize, pods: usize) -> anyhow::Result<()> {
    use joiner_engine::snapshot::{ClusterSnapshot, Options};
    println!(
        "\nDRA benchmark ({nodes} existing nodes x {gpus} GPUs in node-local slices; {pods} pending pods, one claim template each: 1 GPU, CEL selector on productName and memory)"
    );
    println!(
        "{:<44}  {:>8}  {:>8}  {:>8}  {:>10}  {:>10}",
        "CASE", "ON NODES", "NEW", "UNSCHED", "SECONDS", "PODS/S"
    );
    for (label, launch, distinct) in [
        ("existing nodes only", false, false),
        ("existing nodes + NVIDIA GPU types (templates)", true, false),
        ("the same, a distinct claim selector per pod", true, true),
    ] {
        let (manifests, settings) =
            joiner_engine::bench::dra_manifests(nodes, gpus, pods, launch, distinct);
        let snapshot = ClusterSnapshot::build(&manifests, &settings, &Options::default())?;
        let start = Instant::now();
        let plan = snapshot.plan();
        let secs = start.elapsed().as_secs_f64();
        let new_nodes: std::collections::BTreeSet<&str> =
            plan.node_claims.iter().map(|c| c.name.as_str()).collect();
        let on_new = plan
            .bindings
            .iter()
            .filter(|b| new_nodes.contains(b.node.as_str()))
            .count();
        println!(
            "{label:<44}  {:>8}  {:>8}  {:>8}  {secs:>10.3}  {:>10.0}",
            plan.bindings.len() - on_new,
            on_new,
            plan.unschedulable.len(),
            pods as f64 / secs
        );
    }
    println!("peak RSS {:.1} MiB", peak_rss_mib().unwrap_or(f64::NAN));
    Ok(())
}

/// The consolidation benchmark: every node evaluated as a single-node candidate, then a whole
/// consolidation round (empty nodes, the multi-node search, the single-node pass).
pub fn consolidation(nodes: usize) -> anyhow::Result<()> {
    use joiner_engine::snapshot::{ClusterSnapshot, Options};
    let (manifests, settings) = joiner_engine::bench::consolidation_manifests(nodes);
    let snapshot = ClusterSnapshot::build(&manifests, &settings, &Options::default())?;
    let pods = snapshot.input().pods.len();
    println!(
        "\nConsolidation benchmark ({nodes} nodes: m5.2xlarge CPU nodes and g6.xlarge GPU nodes; {pods} bound pods)"
    );
    let start = Instant::now();
    let valid = joiner_engine::disruption::evaluate_every_candidate(snapshot.input());
    let every = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let decisions = joiner_engine::disruption::consolidate(snapshot.input(), &Default::default());
    let round = start.elapsed().as_secs_f64();
    println!("every node as a single-node candidate: {every:.3} s ({valid} would be taken)");
    println!(
        "one consolidation round (empty, multi-node, single-node): {round:.3} s ({} decisions, {} nodes)",
        decisions.len(),
        decisions.iter().map(|d| d.nodes.len()).sum::<usize>()
    );
    println!("total {:.3} s", every + round);
    Ok(())
}

/// The cloud-calls benchmark: what the controller asks of EC2 per step with `nodes` NodeClaims.
pub fn cloud_calls(nodes: usize) -> anyhow::Result<()> {
    use joiner_simulate::bench::CloudCall;
    println!(
        "\nCloud calls benchmark ({nodes} NodeClaims of one g6.xlarge each against the simulated cloud: launch, registration, five quiet minutes, deletion of every NodeClaim; one step a second)"
    );
    let start = Instant::now();
    let phases = joiner_simulate::bench::cloud_calls(nodes).map_err(anyhow::Error::msg)?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{:<16}  {:>6}  {:<32}  {:>8}  {:>12}  {:>14}",
        "PHASE", "STEPS", "CALL", "TOTAL", "MOST IN STEP", "PER STEP (AVG)"
    );
    for phase in &phases {
        for call in CloudCall::ALL {
            let Some(&total) = phase.total.get(&call).filter(|n| **n > 0) else {
                continue;
            };
            println!(
                "{:<16}  {:>6}  {:<32}  {total:>8}  {:>12}  {:>14.2}",
                phase.name,
                phase.steps,
                call.api(),
                phase.most_in_a_step.get(&call).copied().unwrap_or(0),
                total as f64 / phase.steps.max(1) as f64
            );
        }
    }
    println!("({secs:.1} s of CPU time for the whole run)");
    Ok(())
}

/// The packing benchmark: provisioning steps of the size the exact pass solves, planned
/// greedily and then with the exact pass, in one run.
pub fn packing() -> anyhow::Result<()> {
    use joiner_engine::scheduling::schedule_greedy;
    println!(
        "\nPacking benchmark (one NodePool; the greedy plan, then the plan with the exact pass)"
    );
    println!(
        "{:<40}  {:>10}  {:>10}  {:>9}  {:>9}  {:>7}  SOLVER",
        "CASE", "GREEDY USD", "EXACT USD", "GREEDY MS", "EXACT MS", "RATIO"
    );
    for case in joiner_engine::bench::packing_cases() {
        let start = Instant::now();
        let greedy = schedule_greedy(&case.input);
        let greedy_ms = start.elapsed().as_secs_f64() * 1000.0;
        let start = Instant::now();
        let exact = schedule(&case.input);
        let exact_ms = start.elapsed().as_secs_f64() * 1000.0;
        let solver = exact
            .packing
            .iter()
            .map(|b| match b.reason {
                Some(reason) => format!("{:?}", reason),
                None => format!("{:?}", b.solver),
            })
            .collect::<Vec<_>>()
            .join(",");
        println!(
            "{:<40}  {:>10}  {:>10}  {greedy_ms:>9.1}  {exact_ms:>9.1}  {:>7.3}  {solver}",
            case.label,
            greedy.total_price_per_hour.to_string(),
            exact.total_price_per_hour.to_string(),
            greedy.total_price_per_hour.as_usd() / exact.total_price_per_hour.as_usd(),
        );
    }
    Ok(())
}

/// The controller-step benchmark: one provisioning step of the controller on the in-memory
/// cluster (store reads, view, plan, NodeClaims written) against the snapshot and plan alone.
pub fn controller_step(pods: &[usize], nodes: usize) -> anyhow::Result<()> {
    println!(
        "\nController step benchmark (the scheduling benchmark's pods and {nodes} unmanaged nodes in the in-memory cluster; a NodePool over the built-in c, m, r types)"
    );
    println!(
        "{:>8}  {:>8}  {:>12}  {:>12}  {:>10}  {:>12}",
        "PODS", "NODES", "PLAN S", "STEP S", "STEP/PLAN", "NODECLAIMS"
    );
    for &n in pods {
        let f = joiner_simulate::bench::provisioning_step(n, nodes).map_err(anyhow::Error::msg)?;
        println!(
            "{:>8}  {:>8}  {:>12.3}  {:>12.3}  {:>10.2}  {:>12}",
            f.pods,
            f.nodes,
            f.plan_seconds,
            f.step_seconds,
            f.step_seconds / f.plan_seconds,
            f.node_claims
        );
    }
    Ok(())
}
