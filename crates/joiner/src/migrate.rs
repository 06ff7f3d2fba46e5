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
    let mut rows = vec![
        [
            "NODECLAIM",
            "NODEPOOL",
            "INSTANCE",
            "KEPT",
            "WHAT JOINER DOES",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for c in &preview.claims {
        let what = if c.changes.is_empty() {
            "nothing".to_string()
        } else {
            c.changes.join("; ")
        };
        rows.push(vec![
            c.name.clone(),
            c.node_pool.clone(),
            c.instance.clone().unwrap_or_else(|| "-".into()),
            if c.kept { "yes" } else { "no" }.to_string(),
            what,
        ]);
    }
    let mut out = crate::output::columns(&rows);
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
