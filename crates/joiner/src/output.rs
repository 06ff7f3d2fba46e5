//! Printing a plan: a table for people, JSON or YAML for programs.

use std::fmt::Write as _;

use joiner_engine::plan::Plan;
use joiner_launch::preview::LaunchPreview;

use crate::cluster::{NotRead, not_read_lines};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A table of new nodes, placements and unschedulable pods.
    Table,
    /// The table plus offerings and per-node resource use.
    Wide,
    Json,
    Yaml,
    /// `nodeclaim/<name>` per NodeClaim the plan would create, as `kubectl get -o name` prints.
    Name,
}

/// The plan in `format`. With `launches`, each NodeClaim of a JSON or YAML plan carries its
/// `launch`: what the controller would send EC2 for it, or `launchError` saying why it cannot
/// be put together. Kinds a cluster would not list are named at the end of a table and under
/// `notRead` in JSON and YAML.
pub fn render(
    plan: &Plan,
    launches: Option<&[Result<LaunchPreview, String>]>,
    not_read: &[NotRead],
    format: Format,
) -> anyhow::Result<String> {
    Ok(match format {
        // The plan alone is written as it serializes (YAML keeps its own number formatting).
        Format::Json if launches.is_none() && not_read.is_empty() => {
            serde_json::to_string_pretty(plan)? + "\n"
        }
        Format::Yaml if launches.is_none() && not_read.is_empty() => serde_saphyr::to_string(plan)?,
        Format::Json | Format::Yaml => {
            let doc = document(plan, launches, not_read)?;
            match format {
                Format::Yaml => serde_saphyr::to_string(&doc)?,
                _ => serde_json::to_string_pretty(&doc)? + "\n",
            }
        }
        Format::Table => table(plan, false) + &not_read_lines(not_read),
        Format::Wide => table(plan, true) + &not_read_lines(not_read),
        Format::Name => plan
            .node_claims
            .iter()
            .map(|c| format!("nodeclaim/{}\n", c.name))
            .collect(),
    })
}

fn document(
    plan: &Plan,
    launches: Option<&[Result<LaunchPreview, String>]>,
    not_read: &[NotRead],
) -> anyhow::Result<serde_json::Value> {
    let mut doc = serde_json::to_value(plan)?;
    if let Some(launches) = launches
        && let Some(claims) = doc.get_mut("nodeClaims").and_then(|c| c.as_array_mut())
    {
        for (claim, launch) in claims.iter_mut().zip(launches) {
            let Some(claim) = claim.as_object_mut() else {
                continue;
            };
            match launch {
                Ok(preview) => claim.insert("launch".into(), serde_json::to_value(preview)?),
                Err(why) => claim.insert("launchError".into(), why.clone().into()),
            };
        }
    }
    if !not_read.is_empty()
        && let Some(map) = doc.as_object_mut()
    {
        map.insert("notRead".into(), serde_json::to_value(not_read)?);
    }
    Ok(doc)
}

/// Left-aligned columns separated by two spaces, as kubectl prints them.
pub fn columns(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, cell)| format!("{cell:<w$}", w = widths[i]))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn table(plan: &Plan, wide: bool) -> String {
    let mut out = String::new();
    if plan.node_claims.is_empty() {
        out.push_str("No new nodes needed.\n");
    } else {
        let mut header = vec![
            "NODECLAIM",
            "NODEPOOL",
            "INSTANCE-TYPE",
            "CAPACITY-TYPE",
            "ZONE",
            "PRICE/H",
            "PODS",
        ];
        if wide {
            header.extend(["REQUESTED/ALLOCATABLE", "OFFERINGS", "FALLBACK-TYPES"]);
        }
        let mut rows = vec![header.into_iter().map(String::from).collect::<Vec<_>>()];
        for c in &plan.node_claims {
            let mut row = vec![
                c.name.clone(),
                c.node_pool.clone(),
                c.instance_type.clone(),
                c.capacity_type.clone(),
                c.zone.clone(),
                c.price_per_hour.to_string(),
                c.pods.len().to_string(),
            ];
            if wide {
                let usage: Vec<String> = c
                    .resources
                    .requested
                    .iter()
                    .map(|(name, q)| {
                        let of = c
                            .resources
                            .allocatable
                            .get(name)
                            .map(ToString::to_string)
                            .unwrap_or_else(|| "0".into());
                        format!("{name}={q}/{of}")
                    })
                    .collect();
                row.push(usage.join(","));
                let offerings: Vec<String> = c
                    .offerings
                    .iter()
                    .take(4)
                    .map(|o| format!("{}/{}={}", o.zone, o.capacity_type, o.price_per_hour))
                    .collect();
                row.push(offerings.join(","));
                row.push(
                    c.instance_type_options
                        .iter()
                        .skip(1)
                        .take(3)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(","),
                );
            }
            rows.push(row);
        }
        out.push_str(&columns(&rows));
        // Prices that are stand-ins (another region, spot not known offline) say so.
        let notes: std::collections::BTreeSet<&str> = plan
            .node_claims
            .iter()
            .filter_map(|c| c.price_note.as_deref())
            .collect();
        for note in notes {
            let _ = writeln!(out, "Price note: {note}");
        }
        let statics: Vec<&str> = plan
            .node_claims
            .iter()
            .filter(|c| c.is_static)
            .map(|c| c.name.as_str())
            .collect();
        if !statics.is_empty() {
            let _ = writeln!(
                out,
                "Static: {} (a static NodePool's replicas, launched for spec.replicas whatever pods are pending)",
                statics.join(", ")
            );
        }
    }
    if !plan.bindings.is_empty() {
        out.push('\n');
        let mut rows = vec![vec!["POD".to_string(), "NODE".to_string()]];
        rows.extend(
            plan.bindings
                .iter()
                .map(|b| vec![b.pod.clone(), b.node.clone()]),
        );
        out.push_str(&columns(&rows));
    }
    if !plan.claims.is_empty() {
        out.push('\n');
        let mut rows = vec![vec![
            "CLAIM".to_string(),
            "NODE".to_string(),
            "DEVICES".to_string(),
        ]];
        for c in &plan.claims {
            let devices: Vec<String> = c
                .allocation
                .devices
                .iter()
                .flat_map(|d| d.results.iter().flatten())
                .map(|r| format!("{}: {}/{}", r.request, r.driver, r.device))
                .collect();
            rows.push(vec![c.claim.clone(), c.node.clone(), devices.join(", ")]);
        }
        out.push_str(&columns(&rows));
    }
    if !plan.unschedulable.is_empty() {
        out.push_str("\nUnschedulable:\n");
        for u in &plan.unschedulable {
            let _ = writeln!(out, "  {}: {}", u.pod, u.reason);
        }
    }
    if !plan.capacity_buffers.is_empty() {
        out.push_str("\nCapacity buffers:\n");
        for b in &plan.capacity_buffers {
            let _ = writeln!(out, "  {}", buffer_line(b));
        }
    }
    if !plan.packing.is_empty() {
        out.push_str("\nPacking:\n");
        for b in &plan.packing {
            let _ = writeln!(out, "  {}", packing_line(b));
        }
    }
    let _ = writeln!(
        out,
        "\n{} new node(s), {} pod(s) placed, {} unschedulable, total {} USD/h",
        plan.node_claims.len(),
        plan.bindings.len(),
        plan.unschedulable.len(),
        plan.total_price_per_hour
    );
    out
}

/// One batch of the plan's packing: how it was solved and what that saved.
pub fn packing_line(b: &joiner_engine::plan::PackedBatch) -> String {
    use joiner_engine::plan::{GreedyReason, Solver};
    let what = format!(
        "{}: {} pod(s) on {} node(s)",
        b.node_pool,
        b.pods,
        b.node_claims.len()
    );
    let outcome = if b.price_per_hour < b.greedy_price_per_hour {
        format!(
            "{} USD/h, {} USD/h less than the greedy packing ({} USD/h)",
            b.price_per_hour,
            b.greedy_price_per_hour.saturating_sub(b.price_per_hour),
            b.greedy_price_per_hour
        )
    } else {
        "the greedy packing was already the cheapest".to_string()
    };
    match (b.solver, b.reason) {
        (Solver::Exact, _) => format!("{what}, solved exactly: {outcome}"),
        (Solver::Improved, reason) => {
            let outcome = if b.price_per_hour < b.greedy_price_per_hour {
                outcome
            } else {
                "nothing cheaper found".to_string()
            };
            let ran_out = if reason == Some(GreedyReason::OverBudget) {
                " (the work budget ran out before the last ones)"
            } else {
                ""
            };
            format!(
                "{what}, too many pods to solve whole, so its dearest nodes were packed again exactly some tens of pods at a time{ran_out}: {outcome}"
            )
        }
        (Solver::Greedy, Some(reason)) => {
            format!("{what}, packed greedily: {}", reason.describe())
        }
        (Solver::Greedy, None) => format!("{what}, packed greedily"),
    }
}

/// One CapacityBuffer's line: `lab/warm: 2 chunk(s), 1 on existing nodes, 1 on new g4-nodepool-1`.
fn buffer_line(b: &joiner_engine::plan::PlannedBuffer) -> String {
    if let Some(why) = &b.not_ready {
        return format!("{}: not ready, keeps nothing ({why})", b.buffer);
    }
    let mut parts = vec![format!("{} chunk(s)", b.replicas)];
    if b.on_existing_nodes > 0 {
        parts.push(format!("{} on existing nodes", b.on_existing_nodes));
    }
    if b.on_new_node_claims > 0 {
        parts.push(format!(
            "{} on new {}",
            b.on_new_node_claims,
            b.node_claims.join(", ")
        ));
    }
    if b.unplaced > 0 {
        parts.push(format!(
            "{} not placed ({})",
            b.unplaced,
            b.unplaced_reason.as_deref().unwrap_or("no node fits")
        ));
    }
    format!("{}: {}", b.buffer, parts.join(", "))
}

#[cfg(test)]
mod tests {
    use joiner_engine::plan::{GreedyReason, PackedBatch, Solver};
    use joiner_model::Price;

    use super::packing_line;

    fn batch(solver: Solver, reason: Option<GreedyReason>, greedy: f64, now: f64) -> PackedBatch {
        PackedBatch {
            node_pool: "gpu".into(),
            pods: 120,
            node_claims: vec!["gpu-0".into(), "gpu-1".into()],
            solver,
            reason,
            greedy_price_per_hour: Price::from_usd(greedy).unwrap(),
            price_per_hour: Price::from_usd(now).unwrap(),
        }
    }

    #[test]
    fn each_solver_says_what_it_did_and_what_it_saved() {
        assert_eq!(
            packing_line(&batch(Solver::Exact, None, 1.052, 0.752)),
            "gpu: 120 pod(s) on 2 node(s), solved exactly: 0.752 USD/h, 0.3 USD/h less than the greedy packing (1.052 USD/h)"
        );
        assert_eq!(
            packing_line(&batch(Solver::Exact, None, 1.0, 1.0)),
            "gpu: 120 pod(s) on 2 node(s), solved exactly: the greedy packing was already the cheapest"
        );
        let improved = packing_line(&batch(
            Solver::Improved,
            Some(GreedyReason::OverBudget),
            4.0,
            3.5,
        ));
        assert!(
            improved.contains("too many pods to solve whole"),
            "{improved}"
        );
        assert!(improved.contains("the work budget ran out"), "{improved}");
        assert!(
            improved.ends_with("3.5 USD/h, 0.5 USD/h less than the greedy packing (4 USD/h)"),
            "{improved}"
        );
        assert_eq!(
            packing_line(&batch(
                Solver::Greedy,
                Some(GreedyReason::MinValues),
                2.0,
                2.0
            )),
            "gpu: 120 pod(s) on 2 node(s), packed greedily: the NodePool asks for minValues"
        );
    }
}
