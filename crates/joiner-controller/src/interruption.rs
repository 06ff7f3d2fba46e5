//! Interruption messages: the cloud telling us an instance is about to go.
//!
//! On AWS these are EventBridge events (spot interruption warnings, rebalance recommendations,
//! scheduled maintenance, instance state changes) delivered to the SQS queue named by
//! `settings.interruptionQueue`. The AWS edge receives the raw message bodies through
//! [`InterruptionQueue`]; what they mean and what the controller does about them (replacement
//! launched before the node drains) is decided in the pure core.
//!
//! [`poll`] needs only the store and the queue, so it runs on its own: the live controller
//! polls in a loop of its own, beside the step loop, so a two-minute spot warning never waits
//! for a plan; `joiner simulate` and the tests give the queue to
//! [`crate::Controller::set_interruption_queue`], which polls first in every step. Each message
//! is read ([`messages::parse`]); for an instance that is going away its NodeClaim is marked
//! (annotation [`annotations::INTERRUPTED`] and condition `Interrupted`, whose reason names the
//! notice and whose transition time is when it came), and the message is deleted. Unknown and
//! malformed messages are logged and deleted too, so they never block the queue; a message whose
//! NodeClaim could not be written is kept and handled again. Marking is the only write, so
//! handling a message twice (a duplicate, or a restart before the delete) changes nothing.
//!
//! Everything else follows from the mark, in the controller's next step: the disruption step
//! launches the replacements and drains the node (see [`crate::disruption`]), and
//! [`avoid_reclaimed_offerings`] keeps planning off a spot offering that was just reclaimed.
//! Because the mark is in the NodeClaim, a restarted controller does the same.

pub mod messages;

use joiner_model::wellknown::{annotations, labels};
use k8s_openapi::jiff::Timestamp;

use crate::clock::k8s_time;
use crate::cloud::{CloudError, OfferingKey, instance_id_of};
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::report::Reconciler;
use crate::report::{DisruptionCause, DisruptionEvent, StepReport};
use crate::store::{ClusterStore, StoreError};
use joiner_model::api::EC2NodeClass;
use joiner_model::api::nodeclaim::{NodeClaim, conditions};
use joiner_model::api::nodeclass_status::CAPACITY_BLOCK_DRAIN_LEAD_SECONDS;
use joiner_model::wellknown::DisruptionAction;
use joiner_model::wellknown::InterruptionKind;
use messages::Interruption;
use std::collections::BTreeMap;

/// Messages taken per step (the most one SQS ReceiveMessage returns).
pub const BATCH: usize = 10;

/// One message as the queue delivered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueMessage {
    /// The handle that deletes the message once it has been acted on (SQS `ReceiptHandle`).
    pub receipt: String,
    /// The message body: an EventBridge event as JSON.
    pub body: String,
}

/// A queue of interruption messages.
///
/// Messages are deleted only after they have been acted on, so a controller that restarts
/// between receiving and acting sees the message again (SQS redelivers it after its
/// visibility timeout).
pub trait InterruptionQueue {
    /// Up to `max` messages waiting now; an empty queue gives an empty list.
    fn receive(&self, max: usize) -> Result<Vec<QueueMessage>, CloudError>;
    /// Deletes a message that has been handled.
    fn delete(&self, receipt: &str) -> Result<(), CloudError>;
}

/// A reference to a queue, or a shared one, is a queue.
macro_rules! forward_queue {
    ($($wrapper:ty),*) => {$(
        impl<Q: InterruptionQueue + ?Sized> InterruptionQueue for $wrapper {
            fn receive(&self, max: usize) -> Result<Vec<QueueMessage>, CloudError> {
                (**self).receive(max)
            }
            fn delete(&self, receipt: &str) -> Result<(), CloudError> {
                (**self).delete(receipt)
            }
        }
    )*};
}

forward_queue!(&Q, std::sync::Arc<Q>);

/// Receives up to [`BATCH`] messages, acts on each and deletes those handled (see the module
/// docs); what was done goes to `report` (disruption events, errors). Returns how many were
/// received.
pub fn poll<S: ClusterStore>(
    store: &S,
    queue: &dyn InterruptionQueue,
    now: Timestamp,
    report: &mut StepReport,
) -> Result<usize, ControllerError> {
    let received = queue.receive(BATCH)?;
    if received.is_empty() {
        return Ok(0);
    }
    let claims = store.list::<NodeClaim>()?;
    // A stale NodeClaim cache may not hold the NodeClaim of a new instance yet: its message is
    // kept for a later poll rather than deleted as no one's.
    let synced = store.synced().is_ok();
    // Marked by an earlier message of this batch (a duplicate may follow).
    let mut marked = std::collections::BTreeSet::new();
    for m in &received {
        let parsed = messages::parse(&m.body);
        let event_time = parsed.as_ref().ok().and_then(|e| e.time);
        let handled = match parsed {
            Ok(event) if !synced && claims_of(&claims, &event).len() < event.instance_ids.len() => {
                Err(ControllerError::Store(StoreError::Unavailable(format!(
                    "event {}: an instance's NodeClaim is not in the cache, which is not synced",
                    event.id
                ))))
            }
            Ok(event) => act(store, now, report, &claims, &event, &mut marked),
            Err(e) => {
                tracing::warn!(error = %e, "interruption message ignored");
                Ok(())
            }
        };
        match handled {
            Ok(()) => {
                if let Some(t) = event_time {
                    report
                        .interruption_latency
                        .push(crate::clock::elapsed(now, t));
                }
                match queue.delete(&m.receipt) {
                    Ok(()) => report.interruption_deleted += 1,
                    Err(e) => report.error(
                        Reconciler::Interruption,
                        "deleting an interruption message",
                        e,
                    ),
                }
            }
            Err(e) => report.error(
                Reconciler::Interruption,
                "handling an interruption message (kept for later)",
                e,
            ),
        }
    }
    Ok(received.len())
}

/// Marks interrupted the NodeClaims that run in a Capacity Block whose end is near: from
/// [`CAPACITY_BLOCK_DRAIN_LEAD_SECONDS`] before it (ten minutes before EC2 starts terminating
/// the block's instances, when EC2 warns), as Karpenter drains them. The end time is the one
/// the NodeClaim's class recorded in `status.capacityReservations`; a block that is not there
/// (the class not resolved yet, the read failed) drains nothing: the instance's fate is not
/// known, and EC2's own warning still comes through the queue. Returns how many were marked.
pub fn mark_ending_capacity_blocks<S: ClusterStore, C>(
    ctx: &mut Ctx<'_, S, C>,
) -> Result<usize, ControllerError> {
    let classes = ctx.store.list::<EC2NodeClass>()?;
    let ends: BTreeMap<&str, Timestamp> = classes
        .iter()
        .filter_map(|c| c.status.as_ref())
        .flat_map(|s| s.capacity_reservations.iter())
        .filter_map(|r| Some((r.id.as_str(), r.drain_from()?)))
        .collect();
    if ends.is_empty() {
        return Ok(0);
    }
    let mut marked = 0;
    for claim in ctx.store.list::<NodeClaim>()? {
        let Some(from) = claim
            .label(labels::CAPACITY_RESERVATION_ID)
            .and_then(|id| ends.get(id))
        else {
            continue;
        };
        if ctx.now < *from || claim.is_deleting() || is_interrupted(&claim) {
            continue;
        }
        let id = claim
            .label(labels::CAPACITY_RESERVATION_ID)
            .unwrap_or_default()
            .to_string();
        let terminations_start = from
            .checked_add(
                k8s_openapi::jiff::SignedDuration::from_secs(CAPACITY_BLOCK_DRAIN_LEAD_SECONDS)
                    - messages::CAPACITY_BLOCK_TERMINATION_LEAD,
            )
            .ok();
        mark(
            ctx.store,
            ctx.now,
            &claim,
            InterruptionKind::CapacityReservationEnding,
            terminations_start,
            &format!("Capacity Block {id} ends at {from} + {CAPACITY_BLOCK_DRAIN_LEAD_SECONDS}s"),
        )?;
        tracing::warn!(nodeclaim = claim.name(), reservation = %id, "Capacity Block ending: replacing and draining now");
        ctx.report.disruption.push(DisruptionEvent {
            action: DisruptionAction::Interrupted,
            reason: DisruptionCause::Notice(InterruptionKind::CapacityReservationEnding),
            node_claims: vec![claim.name().to_string()],
            detail: vec![id],
        });
        marked += 1;
    }
    Ok(marked)
}

/// Keeps planning off the spot offerings of NodeClaims marked [`InterruptionKind::SpotInterruption`]
/// for `unavailable_ttl` after the notice: an offering just reclaimed is likely short of
/// capacity. Runs in every step, so it does not matter which loop marked the NodeClaim, and a
/// restarted controller, whose memory of unavailable offerings is empty, learns them again
/// from the NodeClaims (for what is left of the time, never longer).
pub fn avoid_reclaimed_offerings<S: ClusterStore, C>(
    ctx: &mut Ctx<'_, S, C>,
) -> Result<(), ControllerError> {
    let claims = ctx.store.list::<NodeClaim>()?;
    for claim in &claims {
        if claim.annotation(annotations::INTERRUPTED)
            != Some(InterruptionKind::SpotInterruption.reason())
        {
            continue;
        }
        let Some(since) = claim
            .condition(conditions::INTERRUPTED)
            .map(|c| c.last_transition_time.0)
        else {
            continue;
        };
        if let Some(key) = spot_offering(claim) {
            ctx.mark_unavailable_since(key, since);
        }
    }
    Ok(())
}

/// The NodeClaim whose recorded instance is `instance_id`.
fn claim_of<'a>(claims: &'a [NodeClaim], instance_id: &str) -> Option<&'a NodeClaim> {
    claims
        .iter()
        .find(|c| c.status.provider_id.as_deref().and_then(instance_id_of) == Some(instance_id))
}

fn act<S: ClusterStore>(
    store: &S,
    now: Timestamp,
    report: &mut StepReport,
    claims: &[NodeClaim],
    event: &Interruption,
    marked: &mut std::collections::BTreeSet<String>,
) -> Result<(), ControllerError> {
    let kind = event.kind;
    let reason = kind.reason();
    for claim in claims_of(claims, event) {
        let id = claim
            .status
            .provider_id
            .as_deref()
            .and_then(instance_id_of)
            .unwrap_or_default()
            .to_string();
        if !kind.replaces() {
            tracing::info!(nodeclaim = claim.name(), instance = %id, "{reason}");
            report.disruption.push(DisruptionEvent {
                action: DisruptionAction::Recommended,
                reason: DisruptionCause::Notice(kind),
                node_claims: vec![claim.name().to_string()],
                detail: vec![id],
            });
            continue;
        }
        if claim.is_deleting() || is_interrupted(claim) || marked.contains(claim.name()) {
            continue;
        }
        let deadline = event.deadline(now);
        let mut message = format!("{id} (event {})", event.id);
        if !event.detail.is_empty() {
            message.push_str(&format!(": {}", event.detail));
        }
        if let Some(d) = deadline {
            message.push_str(&format!("; the instance goes at {d}"));
        }
        mark(store, now, claim, kind, deadline, &message)?;
        marked.insert(claim.name().to_string());
        tracing::warn!(nodeclaim = claim.name(), instance = %id, deadline = ?deadline, "{reason}: replacing and draining");
        report.disruption.push(DisruptionEvent {
            action: DisruptionAction::Interrupted,
            reason: DisruptionCause::Notice(kind),
            node_claims: vec![claim.name().to_string()],
            detail: vec![id],
        });
    }
    Ok(())
}

/// The NodeClaims an event is about: those of the instances it names, and for a capacity
/// reservation's end every NodeClaim launched into that reservation.
fn claims_of<'a>(claims: &'a [NodeClaim], event: &'a Interruption) -> Vec<&'a NodeClaim> {
    let mut out: Vec<&NodeClaim> = Vec::new();
    for id in &event.instance_ids {
        match claim_of(claims, id) {
            Some(c) => out.push(c),
            None => {
                tracing::debug!(instance = %id, event = %event.id, "interruption for an instance no NodeClaim owns")
            }
        }
    }
    if let Some(reservation) = event.reservation.as_deref() {
        for c in claims {
            if c.label(labels::CAPACITY_RESERVATION_ID) == Some(reservation)
                && !out.iter().any(|o| o.name() == c.name())
            {
                out.push(c);
            }
        }
    }
    out
}

/// How a NodeClaim marked interrupted is handled: its notice's kind and when its instance
/// goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marked {
    pub kind: InterruptionKind,
    /// When the pods still on the node are deleted whatever blocks them and the instance goes.
    pub deadline: Option<Timestamp>,
}

/// The interruption a NodeClaim is marked with, if any. A mark written before deadlines were
/// recorded (an earlier version's) gets its kind's deadline from when the notice came; a
/// reason this version does not know is handled as the most careful kind, a scheduled change
/// without a deadline: replaced, then drained honouring do-not-disrupt and PodDisruptionBudgets.
pub fn marked(claim: &NodeClaim) -> Option<Marked> {
    let reason = claim.annotation(annotations::INTERRUPTED)?;
    let kind = InterruptionKind::from_reason(reason).unwrap_or(InterruptionKind::ScheduledChange);
    let recorded = claim
        .annotation(annotations::INTERRUPTION_DEADLINE)
        .and_then(|t| t.parse::<Timestamp>().ok());
    let deadline = recorded.or_else(|| {
        let since = claim
            .condition(conditions::INTERRUPTED)
            .map(|c| c.last_transition_time.0)?;
        match kind {
            InterruptionKind::SpotInterruption => since.checked_add(messages::SPOT_NOTICE).ok(),
            InterruptionKind::StateChange => Some(since),
            _ => None,
        }
    });
    Some(Marked { kind, deadline })
}

/// Whether the NodeClaim has been marked interrupted.
pub fn is_interrupted(claim: &NodeClaim) -> bool {
    claim
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(annotations::INTERRUPTED))
}

/// The spot offering the NodeClaim runs on, from its labels.
fn spot_offering(claim: &NodeClaim) -> Option<OfferingKey> {
    let (Some(instance_type), Some(zone)) = (
        claim.label(labels::INSTANCE_TYPE),
        claim.label(labels::ZONE),
    ) else {
        return None;
    };
    Some(OfferingKey {
        instance_type: instance_type.to_string(),
        zone: zone.to_string(),
        capacity_type: joiner_engine::catalog::CapacityType::Spot,
    })
}

fn mark<S: ClusterStore>(
    store: &S,
    now: Timestamp,
    claim: &NodeClaim,
    kind: InterruptionKind,
    deadline: Option<Timestamp>,
    message: &str,
) -> Result<(), ControllerError> {
    let mut c = match store.get::<NodeClaim>(None, claim.name())? {
        Some(c) => c,
        None => return Ok(()),
    };
    let a = c.metadata.annotations.get_or_insert_with(Default::default);
    a.insert(annotations::INTERRUPTED.into(), kind.reason().into());
    if let Some(d) = deadline {
        a.insert(annotations::INTERRUPTION_DEADLINE.into(), d.to_string());
    }
    c.set_condition(
        conditions::INTERRUPTED,
        true,
        kind.reason(),
        message,
        k8s_time(now),
    );
    match store.update(&c) {
        Ok(_) | Err(StoreError::NotFound(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
