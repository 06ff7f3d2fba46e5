//! Termination: the one way a node ends, whatever ended it.
//!
//! Voluntary disruption, `kubectl delete nodeclaim`, `kubectl delete node`, a NodePool's
//! deletion, the registration timeout, expiry and interruption all come here the same way: the
//! NodeClaim is deleted, and its `karpenter.sh/termination` finalizer ([`finalize`]) takes the
//! node down in Karpenter's order:
//!
//! 1. the termination deadline is recorded: the NodeClaim's `deletionTimestamp` plus its
//!    `terminationGracePeriod`, in `karpenter.sh/nodeclaim-termination-timestamp`;
//! 2. the Node (matched by provider ID, never by name alone) is tainted
//!    `karpenter.sh/disrupted:NoSchedule` and drained ([`drain`]): PodDisruptionBudgets are
//!    honoured until the deadline, and the drain ends only when a fresh read of the API server
//!    finds no pod left to wait for;
//! 3. the node's persistent volumes are waited for until their VolumeAttachments are gone
//!    (bounded by the same deadline);
//! 4. the instance is terminated (the recorded one and any tagged with the NodeClaim);
//! 5. the Node's finalizer is removed and the Node deleted, then the NodeClaim's finalizer.
//!
//! A Node Joiner registered carries the same finalizer, so deleting the Node by hand deletes
//! its NodeClaim ([`node_deleted`]) and drains through the same path instead of leaving an
//! instance running under a Node that is gone.
//!
//! Every VolumeAttachment of a persistent volume on the node is waited for, including one of a
//! pod the drain does not wait for (Karpenter leaves those out, which needs the PVs and PVCs
//! Joiner does not watch): at worst that waits until the deadline.

pub mod drain;

use joiner_model::api::nodeclaim::NodeClaim;
use joiner_model::wellknown::{
    DisruptionAction, DisruptionReason, TerminationEvent, annotations, finalizers, taints,
};
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::jiff::Timestamp;

use crate::clock::{add, k8s_time};
use crate::cloud::{CloudProvider, InstanceState, instance_id_of};
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::interruption::is_interrupted;
use crate::report::{DisruptionCause, DisruptionEvent, NodeClaimEvent};
use crate::store::{ClusterStore, StoreError};
use drain::{Drain, Terms};
use joiner_model::api::nodeclaim::conditions;

/// Why a node is being terminated, as its events name it: the disruption that deleted its
/// NodeClaim, or a deletion from outside disruption (by hand, a timeout, its NodePool going).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    Disrupted(DisruptionReason),
    Deleted,
}

impl Cause {
    pub fn of(claim: &NodeClaim) -> Cause {
        if is_interrupted(claim) {
            return Cause::Disrupted(DisruptionReason::Interrupted);
        }
        claim
            .annotation(annotations::DISRUPTION_REASON)
            .and_then(DisruptionReason::parse)
            .map_or(Cause::Deleted, Cause::Disrupted)
    }

    pub fn as_str(self) -> &'static str {
        DisruptionCause::from(self).as_str()
    }
}

impl From<Cause> for DisruptionCause {
    fn from(cause: Cause) -> DisruptionCause {
        match cause {
            Cause::Disrupted(r) => DisruptionCause::Reason(r),
            Cause::Deleted => DisruptionCause::Deleted,
        }
    }
}

/// The Node of a NodeClaim: the one whose provider ID is the NodeClaim's. A Node that only
/// has the recorded name may be another instance's (EC2 reuses private DNS names).
pub fn node_of<'a>(claim: &NodeClaim, nodes: &'a [Node]) -> Option<&'a Node> {
    let pid = claim.status.provider_id.as_deref()?;
    nodes.iter().find(|n| provider_id(n) == Some(pid))
}

pub fn provider_id(node: &Node) -> Option<&str> {
    node.spec.as_ref().and_then(|s| s.provider_id.as_deref())
}

/// Whether the object carries the termination finalizer (a NodeClaim, or a Node Joiner
/// registered).
pub fn has_finalizer(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == finalizers::TERMINATION))
}

/// The termination finalizer of one deleting NodeClaim: one step of the sequence in the module
/// docs. `nodes` and `pods` are the cached listings of this step.
pub fn finalize<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    mut claim: NodeClaim,
    nodes: &[Node],
    pods: &[Pod],
) -> Result<(), ControllerError> {
    if !has_finalizer(&claim.metadata) {
        return Ok(());
    }
    let cause = Cause::of(&claim);
    let deadline = termination_deadline(ctx, &claim)?;
    let node = node_of(&claim, nodes).cloned();
    // An instance the cloud has already taken (reclaimed, terminated by hand) has nothing left
    // to drain or detach: its pods are gone with it, and waiting on them would wedge the
    // finalizer (Karpenter lets such a node go at once too).
    let gone = instance_gone(ctx, &claim)?;
    if let Some(node) = node.as_ref().filter(|_| !gone) {
        taint(ctx, node)?;
        // An interruption brings its own deadline (the cloud takes the instance then) and may
        // leave no time to honour do-not-disrupt.
        let interruption = crate::interruption::marked(&claim);
        let deadline = match interruption.and_then(|i| i.deadline) {
            Some(d) => Some(deadline.map_or(d, |own| own.min(d))),
            None => deadline,
        };
        let terms = Terms {
            claim: claim.name(),
            node: node.metadata.name.as_deref().unwrap_or_default(),
            cause: cause.into(),
            deadline,
            rushed: interruption.is_some_and(|i| !i.kind.honours_do_not_disrupt()),
        };
        if let Drain::Waiting(blocked) = drain::drain(ctx, &terms, pods)? {
            return say_blocked(ctx, &claim, &blocked, deadline);
        }
        let node_name = terms.node.to_string();
        // Drained, as Karpenter's `Drained` condition says; termination goes on with the
        // NodeClaim as written.
        if !claim.is_true(conditions::DRAINED) {
            let mut c = claim.clone();
            c.set_condition(conditions::DRAINED, true, "Drained", "", k8s_time(ctx.now));
            match ctx.store.update(&c) {
                Ok(written) => {
                    ctx.report.drained.push(claim.name().to_string());
                    claim = written;
                }
                // Written since it was read: the next step says it.
                Err(StoreError::Conflict(_) | StoreError::NotFound(_)) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        if !volumes_detached(ctx, &claim, &node_name, deadline)? {
            return Ok(());
        }
    }
    if let Err(e) = terminate_instances(ctx, &claim) {
        let hint = match &e {
            ControllerError::Cloud(crate::cloud::CloudError::Throttled) => String::new(),
            _ => format!(
                " If the instance is no longer Joiner's (its ownership tags were changed), \
                 terminate it yourself, then remove the finalizer {} from this NodeClaim.",
                finalizers::TERMINATION
            ),
        };
        let message =
            format!("terminating the instance failed: {e}; Joiner tries again every step.{hint}");
        say(
            ctx,
            &claim,
            conditions::INSTANCE_TERMINATING,
            TerminationEvent::FailedTermination,
            &message,
        )?;
        return Err(e);
    }
    if let Some(node) = node {
        release_node(ctx, node)?;
    }
    remove_finalizer(ctx, claim.name())?;
    ctx.invalidate_view();
    ctx.report.disruption.push(DisruptionEvent {
        action: DisruptionAction::Deleted,
        reason: cause.into(),
        node_claims: vec![claim.name().to_string()],
        detail: Vec::new(),
    });
    Ok(())
}

/// Whether the cloud says the NodeClaim's instance is terminated. Only a definite answer counts:
/// an instance the cloud does not know (EC2 forgets terminated ones after a while, and answers
/// NotFound just after a launch) is gone only if the NodeClaim registered, so it did run.
fn instance_gone<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
) -> Result<bool, ControllerError> {
    let Some(id) = claim.status.provider_id.as_deref().and_then(instance_id_of) else {
        return Ok(false);
    };
    // This step's listing answers for every NodeClaim at once; only an instance missing from
    // it (terminated, or a listing that trails) is asked for by itself.
    if ctx
        .instances()?
        .get(id)
        .is_some_and(|i| i.state != InstanceState::Terminated)
    {
        return Ok(false);
    }
    Ok(match ctx.instance(id)? {
        Some(i) => i.state == InstanceState::Terminated,
        None => claim.is_true(conditions::REGISTERED),
    })
}

/// Whether the drained node's persistent volumes have detached, so that the instance can go
/// without cutting a write short: none of its VolumeAttachments (those of persistent volumes;
/// inline volumes have nothing to wait for) is left, or the termination deadline has passed.
/// While some are left the NodeClaim's `VolumesDetached=False` names them.
fn volumes_detached<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
    node: &str,
    deadline: Option<Timestamp>,
) -> Result<bool, ControllerError> {
    if deadline.is_some_and(|d| d <= ctx.now) {
        return Ok(true);
    }
    let mut left: Vec<String> = ctx
        .store
        .list::<VolumeAttachment>()?
        .into_iter()
        .filter(|v| v.spec.node_name == node)
        .filter_map(|v| v.spec.source.persistent_volume_name)
        .collect();
    if left.is_empty() {
        return Ok(true);
    }
    left.sort();
    let message = format!(
        "waiting for {} volume(s) to detach: {}",
        left.len(),
        left.join(", ")
    );
    say(
        ctx,
        claim,
        conditions::VOLUMES_DETACHED,
        TerminationEvent::AwaitingVolumeDetachment,
        &message,
    )?;
    Ok(false)
}

/// Says on the NodeClaim (condition `Drained=False`) what holds its drain up, and how to let it
/// go, when that changes: a deletion that cannot proceed is never silent.
fn say_blocked<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
    blocked: &drain::Blocked,
    deadline: Option<Timestamp>,
) -> Result<(), ControllerError> {
    if blocked.is_empty() {
        let was_blocked = claim
            .condition(conditions::DRAINED)
            .is_some_and(|c| c.status == "False" && c.reason == REASON_DRAIN_BLOCKED);
        if was_blocked {
            // No longer blocked: the condition stops saying so (no event for good news).
            let mut c = claim.clone();
            c.set_condition(
                conditions::DRAINED,
                false,
                REASON_DRAINING,
                "waiting for pods to stop",
                k8s_time(ctx.now),
            );
            return write(ctx, &c);
        }
        return Ok(());
    }
    let mut why = Vec::new();
    if !blocked.refused.is_empty() {
        why.push(format!(
            "{} refused by a PodDisruptionBudget",
            blocked.refused.join(", ")
        ));
    }
    if !blocked.held.is_empty() {
        why.push(format!(
            "{} marked {}",
            blocked.held.join(", "),
            annotations::DO_NOT_DISRUPT
        ));
    }
    let until = match deadline {
        Some(d) => format!("until {d}, when they are deleted whatever blocks them"),
        None => "with no limit: the NodeClaim has no terminationGracePeriod (set \
                 spec.template.spec.terminationGracePeriod on its NodePool to bound it), or let \
                 the budget allow a disruption or remove the annotation"
            .to_string(),
    };
    let message = format!("the drain waits for {}; it waits {until}", why.join("; "));
    say(
        ctx,
        claim,
        conditions::DRAINED,
        TerminationEvent::FailedDraining,
        &message,
    )
}

/// The condition reason of a drain held up by a budget or do-not-disrupt.
const REASON_DRAIN_BLOCKED: &str = "DrainBlocked";
const REASON_DRAINING: &str = "Draining";

/// The reason the condition `type_` carries for `event`.
fn condition_reason(event: TerminationEvent) -> &'static str {
    match event {
        TerminationEvent::FailedDraining => REASON_DRAIN_BLOCKED,
        TerminationEvent::AwaitingVolumeDetachment => "AwaitingVolumeDetachment",
        TerminationEvent::FailedTermination => "TerminationFailed",
        TerminationEvent::TerminationGracePeriodExpiring => "TerminationGracePeriodExpiring",
    }
}

/// Sets a `False` condition on the NodeClaim, and says it in an event, when its reason or
/// message changed (a write and an event per change, not per step).
fn say<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
    type_: &str,
    event: TerminationEvent,
    message: &str,
) -> Result<(), ControllerError> {
    let reason = condition_reason(event);
    let said = claim
        .condition(type_)
        .is_some_and(|c| c.status == "False" && c.reason == reason && c.message == message);
    if said {
        return Ok(());
    }
    tracing::warn!(
        nodeclaim = claim.name(),
        condition = type_,
        reason,
        "{message}"
    );
    tell(ctx, claim, event, message);
    let mut c = claim.clone();
    c.set_condition(type_, false, reason, message, k8s_time(ctx.now));
    write(ctx, &c)
}

/// A Kubernetes event on the NodeClaim.
fn tell<S, C>(ctx: &mut Ctx<'_, S, C>, claim: &NodeClaim, kind: TerminationEvent, message: &str) {
    ctx.report.node_claim_events.push(NodeClaimEvent {
        node_claim: claim.name().to_string(),
        uid: claim.metadata.uid.clone(),
        kind,
        message: message.to_string(),
    });
}

fn write<S: ClusterStore, C>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
) -> Result<(), ControllerError> {
    match ctx.store.update(claim) {
        // Written since it was read: said on a later step.
        Ok(_) | Err(StoreError::Conflict(_) | StoreError::NotFound(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The NodeClaim's termination deadline: recorded once, as Karpenter records it, at its
/// `deletionTimestamp` plus its `terminationGracePeriod`; `None` without one.
fn termination_deadline<S: ClusterStore, C>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
) -> Result<Option<Timestamp>, ControllerError> {
    if let Some(t) = claim.annotation(annotations::TERMINATION_TIMESTAMP) {
        return Ok(t.parse().ok());
    }
    let Some(grace) = claim
        .spec
        .termination_grace_period
        .as_deref()
        .and_then(crate::clock::duration_setting)
    else {
        return Ok(None);
    };
    let since = claim
        .metadata
        .deletion_timestamp
        .as_ref()
        .map_or(ctx.now, |t| t.0);
    let deadline = add(since, grace);
    let mut c = claim.clone();
    c.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            annotations::TERMINATION_TIMESTAMP.into(),
            deadline.to_string(),
        );
    match ctx.store.update(&c) {
        Ok(_) => {
            tell(
                ctx,
                claim,
                TerminationEvent::TerminationGracePeriodExpiring,
                &format!("All pods will be deleted by {deadline}"),
            );
            Ok(Some(deadline))
        }
        // Another writer got there first: the deadline is the same, read next step.
        Err(StoreError::Conflict(_)) => Ok(Some(deadline)),
        Err(e) => Err(e.into()),
    }
}

/// Taints the node `karpenter.sh/disrupted:NoSchedule` (once).
pub fn taint<S: ClusterStore, C>(
    ctx: &mut Ctx<'_, S, C>,
    node: &Node,
) -> Result<(), ControllerError> {
    set_taint(ctx, node, taints::DISRUPTED, true)
}

/// Puts the `key:NoSchedule` taint on the node (`on`), or takes it off; writes only on change.
pub fn set_taint<S: ClusterStore, C>(
    ctx: &mut Ctx<'_, S, C>,
    node: &Node,
    key: &str,
    on: bool,
) -> Result<(), ControllerError> {
    let has = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == key));
    if has == on {
        return Ok(());
    }
    let mut node = node.clone();
    let list = node
        .spec
        .get_or_insert_with(Default::default)
        .taints
        .get_or_insert_with(Vec::new);
    if on {
        list.push(Taint {
            key: key.into(),
            effect: "NoSchedule".into(),
            value: None,
            time_added: None,
        });
    } else {
        list.retain(|t| t.key != key);
    }
    match ctx.store.update(&node) {
        // Seen again on the next step.
        Ok(_) | Err(StoreError::Conflict(_) | StoreError::NotFound(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Terminates every instance of the NodeClaim: the recorded one and any tagged with its name
/// (launched before a crash, never recorded).
fn terminate_instances<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
) -> Result<(), ControllerError> {
    let mut ids: Vec<(String, String)> = crate::nodeclaim::tagged_instances(ctx, claim)?
        .into_iter()
        .map(|i| (i.id, i.zone))
        .collect();
    if let Some(id) = claim.status.provider_id.as_deref().and_then(instance_id_of)
        && !ids.iter().any(|(x, _)| x == id)
        && let Some(recorded) = ctx
            .cloud
            .get(id)?
            .filter(|i| i.state != InstanceState::Terminated)
    {
        ids.push((recorded.id, recorded.zone));
    }
    for (id, zone) in ids {
        ctx.terminate(&id, &zone)?;
        ctx.learn_terminated(&id);
        tracing::info!(nodeclaim = claim.name(), instance = %id, "terminated instance");
        ctx.report.terminated.push(id);
    }
    Ok(())
}

/// Lets the Node go once its instance is gone: its finalizer removed, then deleted.
fn release_node<S: ClusterStore, C>(
    ctx: &mut Ctx<'_, S, C>,
    node: Node,
) -> Result<(), ControllerError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    if has_finalizer(&node.metadata) {
        // The Node was read before this step tainted it: the finalizer comes off the Node as
        // the API server has it now.
        let Some(mut n) = ctx.store.get_uncached::<Node>(None, &name)? else {
            return Ok(());
        };
        if let Some(f) = n.metadata.finalizers.as_mut() {
            f.retain(|x| x != finalizers::TERMINATION);
        }
        match ctx.store.update(&n) {
            Ok(_) | Err(StoreError::NotFound(_)) => {}
            // Written since: the next step reads it again (the instance is already gone).
            Err(e) => return Err(e.into()),
        }
    }
    match ctx.store.delete::<Node>(None, &name) {
        Ok(_) | Err(StoreError::NotFound(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn remove_finalizer<S: ClusterStore, C>(
    ctx: &mut Ctx<'_, S, C>,
    name: &str,
) -> Result<(), ControllerError> {
    let Some(mut fresh) = ctx.store.get_uncached::<NodeClaim>(None, name)? else {
        return Ok(());
    };
    if let Some(f) = fresh.metadata.finalizers.as_mut() {
        f.retain(|x| x != finalizers::TERMINATION);
    }
    match ctx.store.update(&fresh) {
        Ok(_) | Err(StoreError::NotFound(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A Node Joiner registered (it carries the termination finalizer) is being deleted: its
/// NodeClaim, found by provider ID, is deleted, and the NodeClaim's finalizer drains the node,
/// terminates the instance and lets the Node go. A Node whose NodeClaim is gone and whose
/// instance the cloud says is no longer running has nothing left to drain: its finalizer is
/// removed. Anything else (the cloud cannot say) waits.
pub fn node_deleted<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    node: &Node,
    claims: &[NodeClaim],
) -> Result<(), ControllerError> {
    let Some(pid) = provider_id(node) else {
        return Ok(());
    };
    if let Some(claim) = claims
        .iter()
        .find(|c| c.status.provider_id.as_deref() == Some(pid))
    {
        if !claim.is_deleting() {
            tracing::info!(nodeclaim = claim.name(), node = ?node.metadata.name, "Node deleted; terminating its NodeClaim");
            match ctx.store.delete::<NodeClaim>(None, claim.name()) {
                Ok(_) | Err(StoreError::NotFound(_)) => {
                    ctx.report.deleted.push(claim.name().to_string())
                }
                Err(e) => return Err(e.into()),
            }
        }
        return Ok(());
    }
    let running = match instance_id_of(pid) {
        Some(id) => ctx
            .cloud
            .get(id)?
            .is_some_and(|i| i.state != InstanceState::Terminated),
        None => return Ok(()),
    };
    if running {
        return Ok(());
    }
    release_node(ctx, node.clone())
}
