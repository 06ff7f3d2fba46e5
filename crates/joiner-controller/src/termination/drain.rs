//! Draining a node before its instance goes, as Karpenter's terminator drains it.
//!
//! Which pods a drain waits for ([`waits_for`]): every pod bound to the node except those that
//! have finished, mirror (static) pods, pods that tolerate the `karpenter.sh/disrupted` taint
//! (they would only come back) and pods stuck terminating a minute past their
//! `deletionTimestamp` (their kubelet is gone; the instance's end stops them). The rest are
//! evicted one group at a time ([`Group`]): a group starts only once every pod of the groups
//! before it is gone, so critical pods and DaemonSet pods serve the others to the end.
//!
//! A drain ends only when the API server says so: the watch cache may trail an eviction or
//! hide a pod still in its grace period, so before reporting [`Drain::Drained`] the pods bound
//! to the node are read afresh ([`ClusterStore::pods_on_node_uncached`]).

use std::time::Duration;

use joiner_model::wellknown::taints;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use crate::clock::{add, elapsed};
use crate::cloud::CloudProvider;
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::pods::{grace_period_of, is_daemon_pod, is_finished, is_held, pod_key};
use crate::report::Reconciler;
use crate::report::{DisruptionCause, DisruptionEvent, NotDrained};
use crate::store::{ClusterStore, Deleted, Preconditions, StoreError};
use joiner_model::wellknown::DisruptionAction;

/// How long past its `deletionTimestamp` a terminating pod is waited for: after that its
/// kubelet is taken to be gone (Karpenter's `IsStuckTerminating`).
pub const STUCK_AFTER: Duration = Duration::from_secs(60);

/// What one drain step found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drain {
    /// No pod the drain waits for is left, by a fresh read of the API server (or the
    /// termination grace period is over and every pod has been deleted).
    Drained,
    /// Pods remain; the next step goes on.
    Waiting(Blocked),
}

/// The pods that hold a drain up by something other than time: nothing but the budget or the
/// annotation changing lets them go.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Blocked {
    /// Pods whose eviction a PodDisruptionBudget refused this step.
    pub refused: Vec<String>,
    /// Pods marked `karpenter.sh/do-not-disrupt`, which a drain waits for.
    pub held: Vec<String>,
}

impl Blocked {
    pub fn is_empty(&self) -> bool {
        self.refused.is_empty() && self.held.is_empty()
    }
}

/// The eviction groups, in the order they are drained (Karpenter's terminator): a pod is
/// critical when its priority class is `system-cluster-critical` or `system-node-critical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    Workload,
    Daemon,
    CriticalWorkload,
    CriticalDaemon,
}

impl Group {
    pub fn of(pod: &Pod) -> Group {
        let critical = pod
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.as_deref())
            .is_some_and(|c| c == "system-cluster-critical" || c == "system-node-critical");
        match (critical, is_daemon_pod(pod)) {
            (false, false) => Group::Workload,
            (false, true) => Group::Daemon,
            (true, false) => Group::CriticalWorkload,
            (true, true) => Group::CriticalDaemon,
        }
    }
}

/// How the drain of one node goes this step.
pub struct Terms<'a> {
    /// The NodeClaim, for events and logs.
    pub claim: &'a str,
    /// The node's name.
    pub node: &'a str,
    /// Why the node goes, which events carry.
    pub cause: DisruptionCause,
    /// When every pod must be gone and the instance goes: the end of the NodeClaim's
    /// `terminationGracePeriod` or the interruption's deadline, whichever comes first; `None`
    /// without either.
    pub deadline: Option<Timestamp>,
    /// Every pod is evicted at once, do-not-disrupt notwithstanding, not group by group: the
    /// cloud takes the instance within minutes (see
    /// [`joiner_model::wellknown::InterruptionKind::honours_do_not_disrupt`]).
    pub rushed: bool,
}

/// Mirror pods (a static pod's API object, owned by its Node) are the kubelet's, not the
/// API server's to evict.
pub fn is_mirror(pod: &Pod) -> bool {
    let annotated = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    let owned_by_node = pod
        .metadata
        .owner_references
        .as_ref()
        .is_some_and(|o| o.iter().any(|r| r.kind == "Node"));
    annotated || owned_by_node
}

/// Whether the pod tolerates `karpenter.sh/disrupted:NoSchedule` (it would be scheduled right
/// back, so evicting it drains nothing).
fn tolerates_disrupted(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .is_some_and(|ts| {
            ts.iter().any(|t| {
                let effect_ok = t
                    .effect
                    .as_deref()
                    .is_none_or(|e| e.is_empty() || e == "NoSchedule");
                let key_ok = match t.key.as_deref() {
                    None | Some("") => t.operator.as_deref() == Some("Exists"),
                    Some(k) => k == taints::DISRUPTED,
                };
                key_ok && effect_ok
            })
        })
}

/// Terminating for more than [`STUCK_AFTER`] past its `deletionTimestamp`.
pub fn is_stuck_terminating(pod: &Pod, now: Timestamp) -> bool {
    pod.metadata
        .deletion_timestamp
        .as_ref()
        .is_some_and(|t| now > t.0 && elapsed(now, t.0) > STUCK_AFTER)
}

/// Whether a drain of `node` waits for this pod (see the module docs).
pub fn waits_for(pod: &Pod, node: &str, now: Timestamp) -> bool {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
        && !is_finished(pod)
        && left_out(pod, now).is_none()
}

/// Why a drain leaves out a pod that has not finished, if it does.
pub fn left_out(pod: &Pod, now: Timestamp) -> Option<NotDrained> {
    if is_mirror(pod) {
        Some(NotDrained::Mirror)
    } else if tolerates_disrupted(pod) {
        Some(NotDrained::ToleratesDisruption)
    } else if is_stuck_terminating(pod, now) {
        Some(NotDrained::StuckTerminating)
    } else {
        None
    }
}

/// One drain step of `terms.node` over `pods` (the cached listing): evicts or deletes what is
/// due and says whether the node is drained.
pub fn drain<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    terms: &Terms<'_>,
    pods: &[Pod],
) -> Result<Drain, ControllerError> {
    let now = ctx.now;
    let past_deadline = terms.deadline.is_some_and(|d| d <= now);
    let rushed = terms.rushed;
    let on_node = pods.iter().filter(|p| {
        p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(terms.node) && !is_finished(p)
    });
    let mut waiting: Vec<&Pod> = Vec::new();
    for pod in on_node {
        match left_out(pod, now) {
            None => waiting.push(pod),
            Some(why) => ctx.report.not_drained.push((pod_key(pod), why)),
        }
    }
    waiting.sort_by_key(|p| (Group::of(p), pod_key(p)));
    if waiting.is_empty() {
        return confirm(ctx, terms);
    }
    let mut outcome = Outcome::default();
    // Pods whose deletion is due whatever blocks them: past the deadline, or close enough that
    // their own grace period would run past it.
    for pod in &waiting {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if terms.deadline.is_some_and(|d| deletion_due(pod, d, now)) {
            outcome.delete(ctx, pod);
        }
    }
    if past_deadline {
        // Every pod is deleted: the instance goes now, as the period promised (an interrupted
        // one as the cloud takes it).
        outcome.report(ctx, terms);
        return Ok(Drain::Drained);
    }
    // Evictions: the first group with pods left, or every pod of a rushed drain.
    let first = waiting.first().map(|p| Group::of(p));
    for pod in &waiting {
        if pod.metadata.deletion_timestamp.is_some() || outcome.deleted.contains(&pod_key(pod)) {
            continue;
        }
        if !rushed && Some(Group::of(pod)) != first {
            continue;
        }
        if !rushed && is_held(pod, now) {
            outcome.blocked.held.push(pod_key(pod));
            continue;
        }
        outcome.evict(ctx, terms, pod);
    }
    let blocked = std::mem::take(&mut outcome.blocked);
    outcome.report(ctx, terms);
    Ok(Drain::Waiting(blocked))
}

/// Whether a pod must be deleted now so that its own grace period ends by `deadline`.
fn deletion_due(pod: &Pod, deadline: Timestamp, now: Timestamp) -> bool {
    let grace = Duration::from_secs(u64::try_from(grace_period_of(pod)).unwrap_or(0));
    add(now, grace) >= deadline
}

/// The cached listing shows nothing to wait for: the API server has the last word.
fn confirm<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    terms: &Terms<'_>,
) -> Result<Drain, ControllerError> {
    let fresh = ctx.store.pods_on_node_uncached(terms.node)?;
    let left: Vec<String> = fresh
        .iter()
        .filter(|p| waits_for(p, terms.node, ctx.now))
        .map(pod_key)
        .collect();
    if left.is_empty() {
        return Ok(Drain::Drained);
    }
    tracing::info!(nodeclaim = terms.claim, pods = ?left, "the cache shows the node empty but the API server still has pods on it; waiting");
    Ok(Drain::Waiting(Blocked::default()))
}

/// What one drain step did, for the report.
#[derive(Default)]
struct Outcome {
    evicted: Vec<String>,
    deleted: Vec<String>,
    blocked: Blocked,
}

impl Outcome {
    fn evict<S: ClusterStore, C: CloudProvider>(
        &mut self,
        ctx: &mut Ctx<'_, S, C>,
        terms: &Terms<'_>,
        pod: &Pod,
    ) {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let key = pod_key(pod);
        // Only the pod as read: one that took its name since is not this drain's.
        match ctx
            .store
            .evict(namespace, name, Preconditions::of(&pod.metadata))
        {
            Ok(Deleted::Gone | Deleted::Pending) => self.evicted.push(key),
            Err(StoreError::NotFound(_) | StoreError::Conflict(_)) => {
                tracing::debug!(nodeclaim = terms.claim, pod = %key, "pod gone or replaced since it was read");
            }
            Err(StoreError::Refused(..)) => {
                tracing::info!(nodeclaim = terms.claim, pod = %key, "eviction refused by a PodDisruptionBudget; trying again next step");
                ctx.report.eviction_refused.push(key.clone());
                self.blocked.refused.push(key);
            }
            Err(e) => ctx.error(Reconciler::Termination, &format!("evicting pod {key}"), e),
        }
    }

    fn delete<S: ClusterStore, C: CloudProvider>(&mut self, ctx: &mut Ctx<'_, S, C>, pod: &Pod) {
        let namespace = pod.metadata.namespace.as_deref();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let key = pod_key(pod);
        match ctx
            .store
            .delete_if::<Pod>(namespace, name, Preconditions::of(&pod.metadata))
        {
            Ok(_) => self.deleted.push(key),
            Err(StoreError::NotFound(_) | StoreError::Conflict(_)) => {}
            Err(e) => ctx.error(Reconciler::Termination, &format!("deleting pod {key}"), e),
        }
    }

    fn report<S: ClusterStore, C: CloudProvider>(self, ctx: &mut Ctx<'_, S, C>, terms: &Terms<'_>) {
        if !self.deleted.is_empty() {
            tracing::warn!(nodeclaim = terms.claim, pods = ?self.deleted, "deleting pods whatever blocks them: the termination grace period or the interruption leaves no time");
            ctx.report.disruption.push(DisruptionEvent {
                action: DisruptionAction::Forced,
                reason: terms.cause,
                node_claims: vec![terms.claim.to_string()],
                detail: self.deleted,
            });
        }
        if !self.evicted.is_empty() {
            ctx.invalidate_view();
            ctx.report.disruption.push(DisruptionEvent {
                action: DisruptionAction::Evicted,
                reason: terms.cause,
                node_claims: vec![terms.claim.to_string()],
                detail: self.evicted,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(extra: serde_json::Value) -> Pod {
        let mut p = serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"nodeName": "n", "containers": []},
            "status": {"phase": "Running"},
        });
        if let (Some(base), Some(more)) = (p.as_object_mut(), extra.as_object()) {
            for (k, v) in more {
                match (base.get_mut(k), v) {
                    (Some(serde_json::Value::Object(b)), serde_json::Value::Object(m)) => {
                        b.extend(m.clone());
                    }
                    _ => {
                        base.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        serde_json::from_value(p).expect("pod")
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).expect("time")
    }

    #[test]
    fn a_drain_leaves_out_mirror_tolerating_and_stuck_pods_as_karpenter_does() {
        let now = at(1_000_000);
        assert_eq!(left_out(&pod(serde_json::json!({})), now), None);
        assert!(waits_for(&pod(serde_json::json!({})), "n", now));
        assert!(!waits_for(&pod(serde_json::json!({})), "other", now));
        let mirror = pod(serde_json::json!({"metadata": {
            "annotations": {"kubernetes.io/config.mirror": "abc"}}}));
        assert_eq!(left_out(&mirror, now), Some(NotDrained::Mirror));
        let owned_by_node = pod(serde_json::json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"}]}}));
        assert_eq!(left_out(&owned_by_node, now), Some(NotDrained::Mirror));
        let tolerates = pod(serde_json::json!({"spec": {"tolerations": [
            {"key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoSchedule"}]}}));
        assert_eq!(
            left_out(&tolerates, now),
            Some(NotDrained::ToleratesDisruption)
        );
        let tolerates_all = pod(serde_json::json!({"spec": {"tolerations": [
            {"operator": "Exists"}]}}));
        assert_eq!(
            left_out(&tolerates_all, now),
            Some(NotDrained::ToleratesDisruption)
        );
        let other_taint = pod(serde_json::json!({"spec": {"tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}));
        assert_eq!(left_out(&other_taint, now), None);
        // Terminating: waited for until a minute past its deletion time.
        let deleting = |since: i64| {
            pod(serde_json::json!({"metadata": {
                "deletionTimestamp": at(since).to_string()}}))
        };
        assert_eq!(left_out(&deleting(1_000_000 - 60), now), None);
        assert_eq!(
            left_out(&deleting(1_000_000 - 61), now),
            Some(NotDrained::StuckTerminating)
        );
        let finished = pod(serde_json::json!({"status": {"phase": "Succeeded"}}));
        assert!(!waits_for(&finished, "n", now));
    }

    #[test]
    fn groups_drain_ordinary_pods_first_and_critical_daemons_last() {
        let daemon = serde_json::json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]}});
        let critical = |mut v: serde_json::Value| {
            v["spec"] = serde_json::json!({"priorityClassName": "system-node-critical"});
            v
        };
        assert_eq!(Group::of(&pod(serde_json::json!({}))), Group::Workload);
        assert_eq!(Group::of(&pod(daemon.clone())), Group::Daemon);
        assert_eq!(
            Group::of(&pod(critical(serde_json::json!({})))),
            Group::CriticalWorkload
        );
        assert_eq!(Group::of(&pod(critical(daemon))), Group::CriticalDaemon);
        assert!(Group::Workload < Group::Daemon);
        assert!(Group::Daemon < Group::CriticalWorkload);
        assert!(Group::CriticalWorkload < Group::CriticalDaemon);
    }
}
