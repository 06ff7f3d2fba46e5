//! When a node's pods last changed (`status.lastPodEventTime`) and whether it has been quiet
//! for its NodePool's `consolidateAfter` (the `Consolidatable` condition), written on each
//! NodeClaim as Karpenter writes them, so `kubectl get nodeclaims` shows which nodes
//! consolidation may take and a restarted controller does not start every node's
//! `consolidateAfter` over.

use joiner_model::api::nodeclaim::{NodeClaim, conditions};
use k8s_openapi::jiff::Timestamp;

use crate::clock::{duration_setting, elapsed, k8s_time};

/// When a NodeClaim's pods last changed, as recorded: its `lastPodEventTime`, else when it
/// initialized (when pods could first be scheduled there), as Karpenter reads it.
pub fn recorded_pod_event(claim: &NodeClaim) -> Option<Timestamp> {
    claim
        .status
        .last_pod_event_time
        .as_ref()
        .map(|t| t.0)
        .or_else(|| {
            claim
                .condition(conditions::INITIALIZED)
                .filter(|c| c.status == "True")
                .map(|c| c.last_transition_time.0)
        })
}

/// Whether the NodeClaim is `Consolidatable` at `now`, its pods last changed at `pods_since`,
/// for a NodePool whose `consolidateAfter` is `after` (text; `Never` means never).
pub fn consolidatable(
    claim: &NodeClaim,
    after: &str,
    pods_since: Timestamp,
    now: Timestamp,
) -> bool {
    claim.is_true(conditions::INITIALIZED)
        && duration_setting(after).is_some_and(|after| elapsed(now, pods_since) >= after)
}

/// Brings the NodeClaim's `lastPodEventTime` and `Consolidatable` up to date; whether anything
/// changed (and needs writing).
pub fn update(
    claim: &mut NodeClaim,
    pods_since: Timestamp,
    consolidatable: bool,
    now: Timestamp,
) -> bool {
    let mut changed = false;
    // Whole seconds, as the API server keeps it. Pods run only on initialized nodes.
    let since = k8s_time(pods_since);
    if claim.is_true(conditions::INITIALIZED)
        && recorded_pod_event(claim).is_none_or(|t| since.0 > t)
    {
        claim.status.last_pod_event_time = Some(since);
        changed = true;
    }
    let has = claim.condition(conditions::CONSOLIDATABLE).is_some();
    if consolidatable && !claim.is_true(conditions::CONSOLIDATABLE) {
        claim.set_condition(
            conditions::CONSOLIDATABLE,
            true,
            "Consolidatable",
            "",
            k8s_time(now),
        );
        changed = true;
    } else if !consolidatable && has {
        claim
            .status
            .conditions
            .retain(|c| c.type_ != conditions::CONSOLIDATABLE);
        changed = true;
    }
    changed
}
