//! What the disruption step tells about the nodes it looks at, as Karpenter tells it: what
//! keeps a node out of voluntary disruption (`DisruptionBlocked`), which nodes their NodePool
//! does not let consolidation take (`Unconsolidatable`), and what a pod's
//! `karpenter.sh/do-not-disrupt` duration comes to (`DoNotDisruptUntil`,
//! `DoNotDisruptGracePeriodElapsed`, `InvalidDoNotDisruptAnnotation`).
//!
//! Karpenter also says `Node isn't initialized` of every node still starting; Joiner leaves
//! that out, as a node that is launching is no news.

use joiner_model::api::NodeClaim;
use joiner_model::api::nodeclaim::conditions;
use joiner_model::api::nodepool::ConsolidationPolicy;
use joiner_model::do_not_disrupt::{DoNotDisrupt, protected_until};
use joiner_model::wellknown::annotations;
use k8s_openapi::jiff::Timestamp;

use super::View;
use crate::pods::{is_daemon_pod, is_held, is_node_held, pod_key};
use crate::report::{DisruptionBlock, DoNotDisruptNote, Unconsolidatable};

/// The NodeClaims the disruption step looks at: live, initialized, not being disrupted, with
/// a Node.
fn looked_at(view: &View) -> impl Iterator<Item = (&NodeClaim, &str)> {
    view.claims
        .iter()
        .filter(|c| {
            !c.is_deleting()
                && c.is_true(conditions::INITIALIZED)
                && c.annotation(annotations::DISRUPTION_REASON).is_none()
        })
        .filter_map(|c| Some((c, c.status.node_name.as_deref()?)))
}

/// What keeps each node out of voluntary disruption now: the node's own annotation first,
/// then a protected pod, then a PodDisruptionBudget that allows no eviction.
pub(super) fn blocks(view: &View, now: Timestamp) -> Vec<(String, DisruptionBlock)> {
    looked_at(view)
        .filter_map(|(claim, node)| {
            let node_held = view
                .nodes
                .iter()
                .any(|n| n.metadata.name.as_deref() == Some(node) && is_node_held(&n.metadata));
            let block = if node_held {
                DisruptionBlock::NodeAnnotated
            } else if let Some(pod) = view.pods_on(node).find(|p| is_held(p, now)) {
                DisruptionBlock::PodAnnotated(pod_key(pod))
            } else {
                DisruptionBlock::Budget(view.blocked_by_budget(claim)?)
            };
            Some((claim.name().to_string(), block))
        })
        .collect()
}

/// The nodes their NodePool does not let consolidation take: `consolidateAfter: Never`, or
/// `WhenEmpty` and running pods (DaemonSet pods apart).
pub(super) fn unconsolidatable(view: &View) -> Vec<(String, Unconsolidatable)> {
    looked_at(view)
        .filter_map(|(claim, node)| {
            let pool = view.pool_of(claim)?;
            let name = pool.metadata.name.clone().unwrap_or_default();
            let disruption = &pool.spec.disruption;
            let why = if disruption.consolidate_after == "Never" {
                Unconsolidatable::Disabled(name)
            } else if disruption.consolidation_policy == ConsolidationPolicy::WhenEmpty
                && view.pods_on(node).any(|p| !is_daemon_pod(p))
            {
                Unconsolidatable::NotEmpty(name)
            } else {
                return None;
            };
            Some((claim.name().to_string(), why))
        })
        .collect()
}

/// The pods on Joiner's nodes whose `karpenter.sh/do-not-disrupt` is a duration (still
/// protecting, or run out) or a value that cannot be read, with the value.
pub(super) fn do_not_disrupt_notes(
    view: &View,
    now: Timestamp,
) -> Vec<(String, String, DoNotDisruptNote)> {
    let mut out = Vec::new();
    for (_, node) in looked_at(view) {
        for pod in view.pods_on(node) {
            let note = match DoNotDisrupt::of(&pod.metadata) {
                Some(DoNotDisrupt::For(d)) => match protected_until(pod, d) {
                    Some(until) if now < until => DoNotDisruptNote::Until(until),
                    Some(_) => DoNotDisruptNote::Elapsed,
                    // Not started: protected, and its end not known yet.
                    None => continue,
                },
                Some(DoNotDisrupt::Ignored(_)) => DoNotDisruptNote::Invalid,
                Some(DoNotDisrupt::Always) | None => continue,
            };
            let value = pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(annotations::DO_NOT_DISRUPT))
                .cloned()
                .unwrap_or_default();
            out.push((pod_key(pod), value, note));
        }
    }
    out
}
