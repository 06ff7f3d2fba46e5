//! Node repair's reboot, as Karpenter v1.15 does it behind the AWS `RebootForRepair` gate: a
//! node whose fault a reboot clears (a GPU XID such as 119, [`super::policy`]) is rebooted in
//! place before anything replaces it, since a replacement GPU node costs a cold boot of 5–15
//! minutes and a reboot a few.
//!
//! A reboot goes through the NodeClaim's `Rebooting` condition, so every step can be picked up
//! again after a restart:
//! 1. **Requested** (`True`, `RebootRequested`): the Node is tainted
//!    `karpenter.sh/rebooting:NoSchedule` and its pods (not DaemonSet, mirror or finished ones)
//!    are evicted through the Eviction API, so PodDisruptionBudgets pace them, for at most
//!    [`DRAIN_BOUND`] (or the NodeClaim's `terminationGracePeriod`, if shorter); pods left then
//!    stay on the node through the reboot, as in Karpenter.
//! 2. **Issued** (`True`, `RebootIssued`): the Node's boot id is recorded
//!    (`karpenter.sh/reboot-pre-boot-id`) and the cloud reboots the instance. A refused call, or
//!    one that keeps failing for [`RETRY_FOR`], fails the reboot.
//! 3. **Succeeded** (`False`, `RebootSucceeded`): the Node came back with a new boot id and
//!    `Ready`; the taint goes. Whether the fault is gone is node repair's to judge again, its
//!    toleration counted from now ([`finished_at`]).
//! 4. **Failed** (`False`, `RebootFailed`): no new Ready boot within [`RECOVERY_WINDOW`]; the
//!    node is replaced.
//!
//! At most [`MAX_REBOOTS`] reboots a NodeClaim within [`REBOOT_WINDOW`]; a node still broken
//! after them is replaced. The reboots are kept on the NodeClaim
//! (`joiner.dev/repair-reboots`), so a restart does not forget them.

use std::time::Duration;

use joiner_model::api::nodeclaim::{NodeClaim, conditions};
use joiner_model::wellknown::{DisruptionAction, DisruptionReason, annotations, taints};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;

use crate::clock::{add, duration_setting, elapsed, k8s_time};
use crate::cloud::{CloudError, CloudProvider, instance_id_of};
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::pods::{is_daemon_pod, is_finished, pod_key};
use crate::report::{DisruptionCause, DisruptionEvent, RebootFailure, RebootPhase, RebootStep};
use crate::store::{ClusterStore, Preconditions, StoreError};
use crate::termination::drain::is_mirror;
use crate::termination::set_taint;

use super::policy::Broken;

/// The reboots a NodeClaim gets within [`REBOOT_WINDOW`] before it is replaced instead.
pub const MAX_REBOOTS: usize = 2;
pub const REBOOT_WINDOW: Duration = Duration::from_secs(24 * 3600);
/// The longest a drain before a reboot waits for pods to leave.
pub const DRAIN_BOUND: Duration = Duration::from_secs(600);
/// How long past the drain a reboot call that fails (throttled, a timeout) is retried.
pub const RETRY_FOR: Duration = Duration::from_secs(300);
/// How long after the reboot call the node has to come back Ready with a new boot.
pub const RECOVERY_WINDOW: Duration = Duration::from_secs(1200);

const REQUESTED: &str = "RebootRequested";
const ISSUED: &str = "RebootIssued";
const SUCCEEDED: &str = "RebootSucceeded";
const FAILED: &str = "RebootFailed";

/// Whether a reboot of this NodeClaim is under way.
pub fn in_progress(claim: &NodeClaim) -> bool {
    claim.is_true(conditions::REBOOTING)
}

/// When the last reboot came back, if it did: a fault is judged again from then.
pub fn finished_at(claim: &NodeClaim) -> Option<Timestamp> {
    claim
        .condition(conditions::REBOOTING)
        .filter(|c| c.status == "False" && c.reason == SUCCEEDED)
        .map(|c| c.last_transition_time.0)
}

/// The reboots node repair decided for this NodeClaim, oldest first.
fn reboots(claim: &NodeClaim) -> Vec<Timestamp> {
    claim
        .annotation(annotations::REPAIR_REBOOTS)
        .unwrap_or_default()
        .split(',')
        .filter_map(|t| t.trim().parse().ok())
        .collect()
}

/// How many reboots within [`REBOOT_WINDOW`] before `now`.
pub fn recent_reboots(claim: &NodeClaim, now: Timestamp) -> usize {
    reboots(claim)
        .into_iter()
        .filter(|t| *t <= now && elapsed(now, *t) < REBOOT_WINDOW)
        .count()
}

/// Starts a reboot of `claim`'s node: records it and sets `Rebooting` (the next steps drain
/// and reboot). The caller has read the Node afresh and found it still broken.
pub fn commit<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    node: &str,
    claim: &NodeClaim,
    broken: &Broken,
    reason: &str,
) -> Result<(), ControllerError> {
    let now = ctx.now;
    let mut c = claim.clone();
    let kept: Vec<String> = reboots(claim)
        .into_iter()
        .filter(|t| elapsed(now, *t) < REBOOT_WINDOW)
        .chain(std::iter::once(now))
        .map(|t| t.to_string())
        .collect();
    c.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(annotations::REPAIR_REBOOTS.into(), kept.join(","));
    let message = format!("rebooting for {}/{reason}", broken.policy.condition);
    c.set_condition(
        conditions::REBOOTING,
        true,
        REQUESTED,
        &message,
        k8s_time(now),
    );
    match ctx.store.update(&c) {
        Ok(_) => {}
        Err(StoreError::Conflict(_) | StoreError::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    tracing::warn!(
        nodeclaim = claim.name(),
        node,
        condition = broken.policy.condition,
        reason,
        "node repair: rebooting an unhealthy node"
    );
    report(ctx, claim, node, RebootPhase::Requested, message);
    Ok(())
}

/// What a reboot under way needs next.
pub enum Next {
    /// Nothing more this step.
    Wait,
    /// The reboot did not help or could not be made: replace the node, saying why.
    Replace(String),
}

/// Carries a reboot under way one step further.
pub fn advance<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
    node: &Node,
    pods: &[Pod],
) -> Result<Next, ControllerError> {
    let Some(cond) = claim.condition(conditions::REBOOTING) else {
        return Ok(Next::Wait);
    };
    let name = node.metadata.name.as_deref().unwrap_or_default();
    match cond.reason.as_str() {
        ISSUED => recovered(ctx, claim, node),
        _ => {
            let requested = cond.last_transition_time.0;
            set_taint(ctx, node, taints::REBOOTING, true)?;
            let deadline = add(requested, drain_bound(claim));
            if ctx.now < deadline && !drained(ctx, claim.name(), name, pods)? {
                return Ok(Next::Wait);
            }
            issue(ctx, claim, node, add(deadline, RETRY_FOR))
        }
    }
}

/// The drain's bound: [`DRAIN_BOUND`], or the NodeClaim's `terminationGracePeriod` if shorter.
fn drain_bound(claim: &NodeClaim) -> Duration {
    bounded(claim, DRAIN_BOUND)
}

/// `bound`, or the NodeClaim's `terminationGracePeriod` if shorter: how long a drain node
/// repair starts may take.
pub fn bounded(claim: &NodeClaim, bound: Duration) -> Duration {
    claim
        .spec
        .termination_grace_period
        .as_deref()
        .and_then(duration_setting)
        .map_or(bound, |d| d.min(bound))
}

/// Whether a drain before a reboot waits for the pod: not a DaemonSet's (it serves the node
/// and comes back with it), not a mirror pod, not finished, not already going.
fn evictable(pod: &Pod, node: &str) -> bool {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
        && !is_finished(pod)
        && !is_daemon_pod(pod)
        && pod.metadata.deletion_timestamp.is_none()
        && !is_mirror(pod)
}

/// Evicts what is left on the node; true once the API server shows none of it.
fn drained<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &str,
    node: &str,
    pods: &[Pod],
) -> Result<bool, ControllerError> {
    let left: Vec<&Pod> = pods.iter().filter(|p| evictable(p, node)).collect();
    if left.is_empty() {
        let fresh = ctx.store.pods_on_node_uncached(node)?;
        return Ok(!fresh.iter().any(|p| evictable(p, node)));
    }
    let mut evicted = Vec::new();
    for pod in left {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        match ctx
            .store
            .evict(namespace, name, Preconditions::of(&pod.metadata))
        {
            Ok(_) => evicted.push(pod_key(pod)),
            // A PodDisruptionBudget allows no more now: tried again next step.
            Err(StoreError::Refused(..)) => ctx.report.eviction_refused.push(pod_key(pod)),
            Err(StoreError::NotFound(_) | StoreError::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if !evicted.is_empty() {
        ctx.invalidate_view();
        ctx.report.disruption.push(DisruptionEvent {
            action: DisruptionAction::Evicted,
            reason: DisruptionCause::Reason(DisruptionReason::Unhealthy),
            node_claims: vec![claim.to_string()],
            detail: evicted,
        });
    }
    Ok(false)
}

/// Records the boot id and asks the cloud to reboot the instance.
fn issue<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
    node: &Node,
    give_up_at: Timestamp,
) -> Result<Next, ControllerError> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let Some(instance) = claim.status.provider_id.as_deref().and_then(instance_id_of) else {
        return fail(
            ctx,
            claim,
            name,
            RebootFailure::InvalidRequest,
            "the NodeClaim names no instance".into(),
        );
    };
    let boot_id = boot_id(node).unwrap_or_default().to_string();
    // The boot id first: a reboot that happens is then always told from the boot before it.
    let mut c = claim.clone();
    if c.annotation(annotations::REBOOT_PRE_BOOT_ID) != Some(boot_id.as_str()) {
        c.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(annotations::REBOOT_PRE_BOOT_ID.into(), boot_id);
        c = match ctx.store.update(&c) {
            Ok(c) => c,
            Err(StoreError::Conflict(_) | StoreError::NotFound(_)) => return Ok(Next::Wait),
            Err(e) => return Err(e.into()),
        };
    } else if !still_requested(ctx, claim)? {
        // Nothing was written to prove the cache current: the API server's NodeClaim must
        // still ask for this reboot (not issued already, not being deleted).
        return Ok(Next::Wait);
    }
    match ctx.cloud.reboot(instance) {
        Ok(()) => {}
        Err(CloudError::Rejected(why)) => {
            return fail(ctx, claim, name, RebootFailure::ProviderError, why);
        }
        Err(e) if ctx.now >= give_up_at => {
            return fail(
                ctx,
                claim,
                name,
                RebootFailure::ProviderError,
                format!("the reboot call kept failing: {e}"),
            );
        }
        Err(e) => {
            tracing::info!(nodeclaim = claim.name(), error = %e, "node repair: reboot call failed; trying again next step");
            return Ok(Next::Wait);
        }
    }
    c.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(annotations::REBOOT_ISSUED.into(), ctx.now.to_string());
    let message = format!("rebooted instance {instance}");
    c.set_condition(
        conditions::REBOOTING,
        true,
        ISSUED,
        &message,
        k8s_time(ctx.now),
    );
    match ctx.store.update(&c) {
        // A lost write reboots once more on the next step: better than not at all.
        Ok(_) | Err(StoreError::Conflict(_) | StoreError::NotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    report(ctx, claim, name, RebootPhase::Issued, message);
    Ok(Next::Wait)
}

/// After the reboot call: done once the Node is Ready on a new boot, failed past the window.
fn recovered<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
    node: &Node,
) -> Result<Next, ControllerError> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let before = claim.annotation(annotations::REBOOT_PRE_BOOT_ID);
    let issued = claim
        .annotation(annotations::REBOOT_ISSUED)
        .and_then(|t| t.parse::<Timestamp>().ok())
        .unwrap_or(ctx.now);
    let back = |n: &Node| boot_id(n).is_some_and(|b| Some(b) != before) && is_ready(n);
    if back(node) {
        return succeed(ctx, claim, node);
    }
    if elapsed(ctx.now, issued) >= RECOVERY_WINDOW {
        // The node is replaced only if the API server, not just the cache, says it is not back.
        if let Some(fresh) = ctx.store.get_uncached::<Node>(None, name)?
            && back(&fresh)
        {
            return succeed(ctx, claim, &fresh);
        }
        return fail(
            ctx,
            claim,
            name,
            RebootFailure::RecoveryTimeout,
            format!(
                "the node did not come back Ready on a new boot within {} minutes",
                RECOVERY_WINDOW.as_secs() / 60
            ),
        );
    }
    Ok(Next::Wait)
}

/// Marks the reboot done: the taint goes, `Rebooting` turns `False` (`RebootSucceeded`).
fn succeed<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
    node: &Node,
) -> Result<Next, ControllerError> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    set_taint(ctx, node, taints::REBOOTING, false)?;
    let mut c = claim.clone();
    let message = format!("{name} came back Ready on a new boot");
    c.set_condition(
        conditions::REBOOTING,
        false,
        SUCCEEDED,
        &message,
        k8s_time(ctx.now),
    );
    match ctx.store.update(&c) {
        Ok(_) => report(ctx, claim, name, RebootPhase::Succeeded, message),
        Err(StoreError::Conflict(_) | StoreError::NotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Next::Wait)
}

/// Whether the API server's copy of the NodeClaim still asks for its reboot to be issued.
fn still_requested<S: ClusterStore, C>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
) -> Result<bool, ControllerError> {
    Ok(ctx
        .store
        .get_uncached::<NodeClaim>(None, claim.name())?
        .is_some_and(|c| {
            !c.is_deleting()
                && c.condition(conditions::REBOOTING)
                    .is_some_and(|r| r.status == "True" && r.reason == REQUESTED)
        }))
}

/// Marks the reboot failed; the node is replaced.
fn fail<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
    node: &str,
    failure: RebootFailure,
    why: String,
) -> Result<Next, ControllerError> {
    let mut c = claim.clone();
    c.set_condition(
        conditions::REBOOTING,
        false,
        FAILED,
        &why,
        k8s_time(ctx.now),
    );
    match ctx.store.update(&c) {
        Ok(_) => {}
        Err(StoreError::Conflict(_) | StoreError::NotFound(_)) => return Ok(Next::Wait),
        Err(e) => return Err(e.into()),
    }
    tracing::warn!(
        nodeclaim = claim.name(),
        node,
        why,
        "node repair: the reboot failed; replacing the node"
    );
    report(ctx, claim, node, RebootPhase::Failed(failure), why.clone());
    Ok(Next::Replace(format!("reboot failed: {why}")))
}

fn report<S, C>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
    node: &str,
    phase: RebootPhase,
    message: String,
) {
    ctx.report.reboots.push(RebootStep {
        node_claim: claim.name().to_string(),
        node: node.to_string(),
        phase,
        message,
    });
}

fn boot_id(node: &Node) -> Option<&str> {
    node.status
        .as_ref()?
        .node_info
        .as_ref()
        .map(|i| i.boot_id.as_str())
        .filter(|b| !b.is_empty())
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_model::api::nodeclaim::NodeClaimSpec;
    use joiner_model::api::nodepool::NodeClassReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn at(minutes: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + minutes * 60).expect("a time")
    }

    fn claim(reboots: &[i64]) -> NodeClaim {
        let mut c = NodeClaim::new(
            ObjectMeta {
                name: Some("gpu-a".into()),
                ..ObjectMeta::default()
            },
            NodeClaimSpec::new(NodeClassReference::ec2("default")),
        );
        let list: Vec<String> = reboots.iter().map(|m| at(*m).to_string()).collect();
        c.metadata.annotations =
            Some([(annotations::REPAIR_REBOOTS.to_string(), list.join(","))].into());
        c
    }

    #[test]
    fn reboots_older_than_a_day_do_not_count() {
        let c = claim(&[0, 60, 1000]);
        assert_eq!(recent_reboots(&c, at(1000)), 3);
        assert_eq!(recent_reboots(&c, at(1441)), 2, "the first is a day old");
        assert_eq!(recent_reboots(&c, at(1001 + 24 * 60)), 0);
        assert_eq!(recent_reboots(&claim(&[]), at(0)), 0);
    }

    #[test]
    fn the_drain_is_bounded_by_the_shorter_of_ten_minutes_and_the_grace_period() {
        let mut c = claim(&[]);
        assert_eq!(drain_bound(&c), DRAIN_BOUND);
        c.spec.termination_grace_period = Some("2m".into());
        assert_eq!(drain_bound(&c), Duration::from_secs(120));
        c.spec.termination_grace_period = Some("1h".into());
        assert_eq!(drain_bound(&c), DRAIN_BOUND);
    }
}
