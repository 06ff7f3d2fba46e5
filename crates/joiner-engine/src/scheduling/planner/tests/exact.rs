//! The exact pass over the greedy plan (see `planner/exact.rs`).

use super::*;
use crate::plan::{GreedyReason, Solver};

const INFERENCE: &str = "  containers: [{name: c, resources: {requests: {cpu: '3', memory: 10Gi, nvidia.com/gpu: '1'}}}]\n";
const NOTEBOOK: &str = "  containers: [{name: c, resources: {requests: {cpu: '1', memory: 2Gi, nvidia.com/gpu: '1'}}}]\n";

/// Time-sliced GPU types shaped like g4dn (four replicas per GPU): the small ones are short of
/// CPU for inference pods, the large one holds sixteen pods of any mix.
fn sliced_types() -> Vec<LaunchOption> {
    vec![
        option("g4dn.xlarge", "3920m", "14Gi", "4", 0.526),
        option("g4dn.2xlarge", "7920m", "28Gi", "4", 0.752),
        option("g4dn.4xlarge", "15920m", "57Gi", "4", 1.204),
        option("g4dn.12xlarge", "47920m", "172Gi", "16", 3.912),
    ]
}

fn mixed_pods(notebooks: usize, inference: usize) -> Vec<PodInfo> {
    let mut all = pods("notebook", notebooks, NOTEBOOK);
    all.extend(pods("inference", inference, INFERENCE));
    all
}

#[test]
fn a_mixed_gpu_batch_is_packed_for_less_than_the_greedy_plan() {
    // Three notebooks and an inference pod: greedy puts the inference pod on a g4dn.xlarge,
    // whose CPUs it nearly fills, and the notebooks on a second (1.052); all four fit the GPU
    // slots and CPUs of one g4dn.2xlarge (0.752).
    let inp = input(mixed_pods(3, 1), vec![pool("gpu", sliced_types())]);
    let greedy = schedule_greedy(&inp);
    let plan = schedule(&inp);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert!(
        plan.total_price_per_hour < greedy.total_price_per_hour,
        "exact {} greedy {}",
        plan.total_price_per_hour,
        greedy.total_price_per_hour
    );
    assert_eq!(greedy.total_price_per_hour, Price::from_usd(1.052).unwrap());
    assert_eq!(plan.total_price_per_hour, Price::from_usd(0.752).unwrap());
    assert_eq!(plan.node_claims.len(), 1);
    assert_eq!(plan.node_claims[0].instance_type, "g4dn.2xlarge");
    assert_eq!(plan.packing.len(), 1);
    let batch = &plan.packing[0];
    assert_eq!(batch.solver, Solver::Exact);
    assert_eq!(batch.reason, None);
    assert_eq!(batch.pods, 4);
    assert_eq!(batch.greedy_price_per_hour, greedy.total_price_per_hour);
    assert_eq!(batch.price_per_hour, plan.total_price_per_hour);
    assert_eq!(batch.node_claims.len(), plan.node_claims.len());
    // Every pod is bound to a NodeClaim of the plan, and every NodeClaim lists its pods.
    for b in &plan.bindings {
        let claim = plan.node_claims.iter().find(|c| c.name == b.node).unwrap();
        assert!(claim.pods.contains(&b.pod));
    }
    assert_eq!(plan.bindings.len(), 4);
}

#[test]
fn pods_with_pod_constraints_keep_their_greedy_nodes() {
    let spread = "  topologySpreadConstraints: [{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: spread}}}]\n";
    let mut all = pods("spread", 6, &format!("{NOTEBOOK}{spread}"));
    all.extend(mixed_pods(5, 6));
    let inp = input(all, vec![pool("gpu", sliced_types())]);
    let plan = schedule(&inp);
    let constrained = plan
        .packing
        .iter()
        .find(|b| b.reason == Some(GreedyReason::PodConstraints))
        .expect("a batch for the spread pods");
    assert_eq!(constrained.solver, Solver::Greedy);
    // The spread pods still get one node each (max skew 1 over new nodes).
    let mut hosts: Vec<&str> = plan
        .bindings
        .iter()
        .filter(|b| b.pod.contains("/spread-"))
        .map(|b| b.node.as_str())
        .collect();
    hosts.sort();
    hosts.dedup();
    assert_eq!(hosts.len(), 6, "{:?}", plan.bindings);
    assert!(plan.total_price_per_hour <= schedule_greedy(&inp).total_price_per_hour);
}

#[test]
fn a_batch_larger_than_the_exact_search_is_improved_window_by_window() {
    let inp = input(mixed_pods(60, 60), vec![pool("gpu", sliced_types())]);
    let greedy = schedule_greedy(&inp);
    let plan = schedule(&inp);
    assert!(plan.unschedulable.is_empty());
    assert_eq!(plan.bindings.len(), 120);
    assert!(plan.total_price_per_hour <= greedy.total_price_per_hour);
    let batch = &plan.packing[0];
    assert_eq!(batch.solver, Solver::Improved);
    assert_eq!(batch.reason, Some(GreedyReason::TooManyPods));
    assert_eq!(batch.price_per_hour, plan.total_price_per_hour);
    assert_eq!(batch.node_claims.len(), plan.node_claims.len());
}
