//! `joiner migrate`: a preview of taking over a fleet Karpenter launched, from its exported
//! objects (`kubectl get nodepools,ec2nodeclasses,nodeclaims,nodes,pods -A -o yaml`). It writes
//! nothing anywhere: migrating needs no write of its own (see README, "Switching from
//! Karpenter"); it shows what the controller will do once started.

use std::time::Duration;

use anyhow::Context as _;
use joiner_simulate::takeover::{Preview, preview};

use crate::InputArgs;

/// Runs the preview and prints it; fails when taking over would disturb the fleet.
pub fn run(input: &InputArgs, run_for: &str) -> anyhow::Result<()> {
    let duration: Duration = joiner_model::duration::parse_duration(run_for)
        .with_context(|| format!("--for {run_for:?}"))?;
    let (manifests, settings) = crate::manifests_and_settings(input, &|_| false)?;
    if manifests.node_claims.is_empty() {
        anyhow::bail!(
            "no NodeClaim in the input: export Karpenter's with `kubectl get nodeclaims -o yaml`"
        );
    }
    let preview = preview(&manifests, settings, duration)?;
    print!("{}", render(&preview, run_for));
    if preview.disturbs() {
        anyhow::bail!(
            "taking this fleet over would launch, terminate or disrupt nodes (above); nothing was changed"
        );
    }
    Ok(())
}

fn render(preview: &Preview, run_for: &str) -> String {
    let mut rows = vec![[
        "NODECLAIM".to_string(),
        "NODEPOOL".to_string(),
        "INSTANCE".to_string(),
        "KEPT".to_string(),
        "WHAT JOINER DOES".to_string(),
    ]];
    for c in &preview.claims {
        let what = if c.changes.is_empty() {
            "nothing".to_string()
        } else {
            c.changes.join("; ")
        };
        rows.push([
            c.name.clone(),
            c.node_pool.clone(),
            c.instance.clone().unwrap_or_else(|| "-".into()),
            if c.kept { "yes" } else { "no" }.to_string(),
            what,
        ]);
    }
    let widths: Vec<usize> = (0..4)
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in &rows {
        for (cell, width) in r.iter().zip(&widths) {
            out.push_str(&format!("{cell:width$}  "));
        }
        out.push_str(&r[4]);
        out.push('\n');
    }
    for p in &preview.problems {
        out.push_str(&format!("problem: {p}\n"));
    }
    let s = &preview.summary;
    let kept = preview.claims.iter().filter(|c| c.kept).count();
    out.push_str(&format!(
        "\nOver {run_for} of simulated time: {kept} of {} NodeClaims kept, {} instances launched, {} NodeClaims created, {} disruptions.\n",
        preview.claims.len(),
        s.instances_launched,
        s.node_claims_created,
        s.disruptions.values().sum::<usize>(),
    ));
    if !preview.disturbs() {
        out.push_str(
            "Joiner takes this fleet over in place: nothing is launched, terminated or drained.\n",
        );
    }
    out
}
