//! Pods as the controller sees them: pending or bound, whose, and whether they may be moved.

use joiner_model::wellknown::annotations;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

/// A pod waiting for a node: not bound, not finished, not being deleted.
pub fn is_pending(pod: &Pod) -> bool {
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    !bound && !is_finished(pod) && pod.metadata.deletion_timestamp.is_none()
}

/// A pod that has run to completion or failed: it holds nothing and waits for nothing.
pub fn is_finished(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed")
}

/// `namespace/name`.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Whether `karpenter.sh/do-not-disrupt` holds the pod at `now`: `"true"`, or a duration that
/// has not run out since the pod started ([`joiner_model::do_not_disrupt`]).
pub fn is_held(pod: &Pod, now: Timestamp) -> bool {
    joiner_model::do_not_disrupt::pod_protected(pod, Some(now))
}

/// Whether a node is marked `karpenter.sh/do-not-disrupt: "true"` (durations count only on
/// pods).
pub fn is_node_held(meta: &ObjectMeta) -> bool {
    joiner_model::do_not_disrupt::node_protected(meta)
}

/// A DaemonSet's pod (by its owner, or as `joiner plan` expanded it).
pub fn is_daemon_pod(pod: &Pod) -> bool {
    pod.metadata
        .owner_references
        .as_ref()
        .is_some_and(|o| o.iter().any(|r| r.kind == "DaemonSet"))
        || pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotations::OWNER))
            .is_some_and(|o| o.starts_with("DaemonSet/"))
}

/// The pods bound to `node`, less those being deleted.
pub fn bound_to<'a>(pods: &'a [Pod], node: &str) -> impl Iterator<Item = &'a Pod> {
    pods.iter().filter(move |p| {
        p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
            && p.metadata.deletion_timestamp.is_none()
    })
}

/// Kubernetes' default `terminationGracePeriodSeconds`.
const DEFAULT_GRACE_SECONDS: i64 = 30;

/// How long a pod takes to stop once deleted: its own `terminationGracePeriodSeconds`, the
/// API server's default when unset. Zero (or negative, which the API server reads as one
/// second, then as an immediate stop) means at once.
pub fn grace_period_of(pod: &Pod) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(DEFAULT_GRACE_SECONDS)
        .max(0)
}
