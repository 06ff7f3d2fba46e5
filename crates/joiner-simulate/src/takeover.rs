//! `joiner migrate`: what Joiner would do to a fleet Karpenter launched, found by doing it to a
//! copy. The exported NodePools, EC2NodeClasses, NodeClaims, Nodes and pods go into the
//! simulated cluster, each NodeClaim's instance into the simulated cloud with the tags Karpenter
//! gives its instances, and the controller runs over simulated time exactly as it would run in
//! the cluster. What it launched, terminated, disrupted and rewrote is the preview: the same
//! engine decides, so the preview cannot disagree with the controller on what taking over means.
//!
//! Nothing about the migration needs a write of its own: Joiner reads Karpenter's NodeClaims,
//! instance tags and finalizer as its own. The preview shows the writes the controller makes
//! when it starts (Karpenter's hash stamps replaced by Joiner's) and anything disruptive.

use std::collections::BTreeMap;
use std::time::Duration;

use joiner_controller::cloud::instance_id_of;
use joiner_model::Manifests;
use joiner_model::api::NodeClaim;
use joiner_model::settings::Settings;
use joiner_model::wellknown::{labels, tags};
use serde_json::Value;

use crate::error::Error;
use crate::run::{Outcome, Summary, simulate};
use crate::scenario::{AddInstance, Resolved, Step};

/// The cluster name the preview runs under when the settings name none.
const CLUSTER: &str = "simulation";

/// What taking over one NodeClaim does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimPreview {
    pub name: String,
    pub node_pool: String,
    /// The instance its provider ID records, if any.
    pub instance: Option<String>,
    /// Whether the NodeClaim and its instance are still there at the end, untouched by
    /// disruption.
    pub kept: bool,
    /// What Joiner decided about it and wrote to it, in order: `rewrote <hash stamp> (<old
    /// version> -> <new>)`, `annotation <key>: <old> -> <new>`, `disruption.<action>
    /// (<reason>)`, `terminated <instance>`, `deleted`.
    pub changes: Vec<String>,
}

/// What taking over the fleet does.
#[derive(Debug, Clone)]
pub struct Preview {
    pub claims: Vec<ClaimPreview>,
    pub summary: Summary,
    /// The reasons the controller gave for what it could not do (a NodePool or EC2NodeClass it
    /// refuses, say), each once.
    pub problems: Vec<String>,
}

impl Preview {
    /// Whether taking over launches, terminates, deletes or disrupts anything.
    pub fn disturbs(&self) -> bool {
        self.summary.instances_launched > 0
            || self.summary.node_claims_created > 0
            || !self.summary.disruptions.is_empty()
            || self.claims.iter().any(|c| !c.kept)
    }
}

/// Runs the takeover of the fleet in `manifests` for `duration` of simulated time.
pub fn preview(
    manifests: &Manifests,
    mut settings: Settings,
    duration: Duration,
) -> Result<Preview, Error> {
    let cluster = settings
        .cluster_name
        .clone()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| CLUSTER.to_string());
    settings.cluster_name = Some(cluster.clone());
    let before: Vec<NodeClaim> = manifests
        .node_claims
        .iter()
        .map(|c| c.object.clone())
        .collect();
    let step = Step {
        note: Some("the instances of Karpenter's NodeClaims, with its tags".into()),
        add_instances: before
            .iter()
            .filter_map(|c| instance_of(c, &cluster))
            .collect(),
        ..Step::default()
    };
    let scenario = Resolved {
        name: "takeover".into(),
        start: None,
        tick: Duration::from_secs(10),
        duration,
        steps: vec![(Duration::ZERO, step)],
    };
    let outcome = simulate(manifests, settings, &scenario, &mut |_, _| {})?;
    Ok(Preview {
        claims: before.iter().map(|c| claim_preview(c, &outcome)).collect(),
        problems: problems(&outcome.events),
        summary: outcome.summary,
    })
}

/// The instance a NodeClaim records, as Karpenter tagged it; none before it recorded one.
fn instance_of(claim: &NodeClaim, cluster: &str) -> Option<AddInstance> {
    let provider_id = claim.status.provider_id.as_deref()?;
    let (zone, id) = provider_id.strip_prefix("aws:///")?.split_once('/')?;
    let pool = claim.label(labels::NODEPOOL).unwrap_or_default();
    let class = &claim.spec.node_class_ref.name;
    let mut instance_tags = tags::ownership(cluster, pool, class);
    instance_tags.insert(tags::NODECLAIM.into(), claim.name().into());
    Some(AddInstance {
        id: id.to_string(),
        instance_type: claim.label(labels::INSTANCE_TYPE)?.to_string(),
        zone: zone.to_string(),
        capacity_type: claim
            .label(labels::CAPACITY_TYPE)
            .unwrap_or("on-demand")
            .to_string(),
        tags: instance_tags,
    })
}

fn claim_preview(claim: &NodeClaim, outcome: &Outcome) -> ClaimPreview {
    let name = claim.name();
    let instance = claim
        .status
        .provider_id
        .as_deref()
        .and_then(instance_id_of)
        .map(str::to_string);
    let after = outcome.node_claims.iter().find(|c| c.name() == name);
    let mut changes = annotation_changes(claim, after);
    for event in &outcome.events {
        let kind = event["event"].as_str().unwrap_or_default();
        let names_it = event["nodeClaim"] == name
            || event["nodeClaims"]
                .as_array()
                .is_some_and(|a| a.iter().any(|n| n == name));
        let its_instance = instance.is_some() && event["instance"].as_str() == instance.as_deref();
        if kind.starts_with("disruption.") && names_it {
            let reason = event["reason"].as_str().unwrap_or_default();
            changes.push(format!("{kind} ({reason})"));
        } else if kind == "deleted" && names_it {
            changes.push("deleted".into());
        } else if kind == "terminated" && its_instance {
            changes.push(format!(
                "terminated {}",
                instance.as_deref().unwrap_or_default()
            ));
        }
    }
    let kept = after
        .is_some_and(|a| !a.is_deleting() && a.status.provider_id == claim.status.provider_id)
        && !changes
            .iter()
            .any(|c| c.starts_with("disruption.") || c.starts_with("terminated"));
    ClaimPreview {
        name: name.to_string(),
        node_pool: claim
            .label(labels::NODEPOOL)
            .unwrap_or_default()
            .to_string(),
        instance,
        kept,
        changes,
    }
}

/// The annotations the controller added, changed or removed. A hash stamp rewritten with its
/// version is one change: `rewrote <key> (<old version> -> <new version>)`.
fn annotation_changes(before: &NodeClaim, after: Option<&NodeClaim>) -> Vec<String> {
    let Some(after) = after else {
        return Vec::new();
    };
    let empty = BTreeMap::new();
    let old = before.metadata.annotations.as_ref().unwrap_or(&empty);
    let new = after.metadata.annotations.as_ref().unwrap_or(&empty);
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    let changed = |k: &str| old.get(k) != new.get(k);
    let show = |v: Option<&String>| v.map_or("none".to_string(), String::clone);
    keys.into_iter()
        .filter(|k| changed(k.as_str()))
        .filter(|k| !changed(&format!("{k}-version")))
        .map(|k| match k.strip_suffix("-version") {
            Some(stamp) => format!(
                "rewrote {stamp} ({} -> {})",
                show(old.get(k)),
                show(new.get(k))
            ),
            None => format!(
                "annotation {k}: {} -> {}",
                show(old.get(k)),
                show(new.get(k))
            ),
        })
        .collect()
}

/// The controller's errors, each once, in the order first seen.
fn problems(events: &[Value]) -> Vec<String> {
    let mut seen = Vec::new();
    for e in events.iter().filter(|e| e["event"] == "error") {
        let text = e["error"].as_str().unwrap_or_default().to_string();
        if !seen.contains(&text) {
            seen.push(text);
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_test_support::load_example;

    #[test]
    fn the_takeover_example_keeps_every_node_and_only_restamps_hashes() {
        let manifests = load_example("karpenter-takeover");
        let preview =
            preview(&manifests, Settings::default(), Duration::from_secs(3600)).expect("previews");
        assert_eq!(preview.claims.len(), 20);
        assert!(!preview.disturbs(), "{:?}", preview.claims);
        for claim in &preview.claims {
            assert!(claim.kept, "{claim:?}");
            assert!(claim.instance.is_some(), "{claim:?}");
            assert_eq!(
                claim.changes,
                [
                    "rewrote karpenter.k8s.aws/ec2nodeclass-hash (v4 -> joiner-v1)",
                    "rewrote karpenter.sh/nodepool-hash (v3 -> joiner-v1)",
                ],
                "{claim:?}"
            );
        }
    }

    /// NodeClaims owned by a NodePool that is not there are deleted by the API server's
    /// garbage collector, and each drains and ends: the preview says so, and fails the takeover.
    #[test]
    fn nodeclaims_whose_pool_is_gone_are_shown_ending() {
        let mut manifests = load_example("karpenter-takeover");
        manifests.node_pools.clear();
        let preview =
            preview(&manifests, Settings::default(), Duration::from_secs(3600)).expect("previews");
        assert!(preview.disturbs());
        for claim in &preview.claims {
            assert!(!claim.kept, "{claim:?}");
            let instance = claim.instance.clone().expect("instance");
            assert!(claim.changes.contains(&"deleted".to_string()), "{claim:?}");
            assert!(
                claim.changes.contains(&format!("terminated {instance}")),
                "{claim:?}"
            );
        }
    }
}
