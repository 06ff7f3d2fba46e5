//! Node repair, as Karpenter v1.14 does it behind its `NodeRepair` gate (off by default): a node
//! of Joiner's whose condition shows it broken for longer than its policy tolerates (a GPU fault
//! reported as `AcceleratedHardwareReady: False` for 10 minutes, say) is replaced. Its NodeClaim
//! gets a termination deadline of now and is deleted, so the termination finalizer drains it at
//! once, as Karpenter's forceful repair does (budgets and `do-not-disrupt` do not hold a broken
//! node), and the provisioner plans its pods again.
//!
//! The world is not trusted further than it must be:
//! - only nodes of a NodeClaim (one Joiner launched) are repaired;
//! - a NodePool with more than a fifth of its nodes broken repairs none ([`policy`]), and says
//!   so on each with a `NodeRepairBlocked` event;
//! - the cache may be behind the API server: before acting, the Node is read again from the
//!   server, and a node that has recovered meanwhile is left alone.

use joiner_model::api::nodeclaim::NodeClaim;
use joiner_model::feature_gates::FeatureGate;
use joiner_model::wellknown::{DisruptionAction, DisruptionReason, annotations, labels};
use k8s_openapi::api::core::v1::Node;

use crate::cloud::CloudProvider;
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::report::{DisruptionCause, DisruptionEvent, Reconciler, Repaired};
use crate::store::{ClusterStore, StoreError};
use crate::termination;

pub mod policy;

use policy::{AWS_REPAIR_POLICIES, Broken, Verdict};

/// One pass of node repair over every node; nothing unless the `NodeRepair` gate is on.
pub fn reconcile<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
) -> Result<(), ControllerError> {
    if !ctx
        .config
        .settings
        .feature_gates
        .enabled(FeatureGate::NodeRepair)
    {
        return Ok(());
    }
    let nodes = ctx.store.list::<Node>()?;
    let claims = ctx.store.list::<NodeClaim>()?;
    for (name, verdict) in policy::verdicts(&nodes, &AWS_REPAIR_POLICIES, ctx.now) {
        let Some(claim) = nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name.as_str()))
            .and_then(|n| {
                claims
                    .iter()
                    .find(|c| termination::node_of(c, std::slice::from_ref(n)).is_some())
            })
        else {
            // Not a node Joiner launched: not Joiner's to replace.
            continue;
        };
        if claim.is_deleting() {
            continue;
        }
        match verdict {
            Verdict::Repair(broken) => {
                if let Err(e) = repair(ctx, &name, claim, &broken) {
                    ctx.error(Reconciler::Repair, &format!("Node {name}"), e);
                }
            }
            Verdict::Blocked {
                broken,
                node_pool,
                unhealthy,
                total,
            } => ctx.report.repair_blocked.push((
                claim.name().to_string(),
                format!(
                    "Node repair blocked: {unhealthy} of NodePool {node_pool}'s {total} nodes are unhealthy, more than {}%; this node's {} has been {} since {}",
                    policy::UNHEALTHY_LIMIT_PERCENT,
                    broken.policy.condition,
                    broken.policy.status,
                    broken.since
                ),
            )),
            Verdict::Wait(_) => {}
        }
    }
    Ok(())
}

/// Replaces the broken node of `claim`, if the API server still says it is broken.
fn repair<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    node: &str,
    claim: &NodeClaim,
    broken: &Broken,
) -> Result<(), ControllerError> {
    let fresh = ctx.store.get_uncached::<Node>(None, node)?;
    let still = fresh
        .as_ref()
        .and_then(|n| policy::broken(n, &AWS_REPAIR_POLICIES))
        .is_some_and(|b| b.repair_at <= ctx.now);
    if !still {
        tracing::info!(
            node,
            "node repair: the node recovered, or the cache was behind"
        );
        return Ok(());
    }
    // The drain ends now (a deadline already earlier stays), and says why.
    let mut c = claim.clone();
    let earlier = c
        .annotation(annotations::TERMINATION_TIMESTAMP)
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .is_some_and(|t| t <= ctx.now);
    let reason = DisruptionReason::Unhealthy.as_str();
    if !earlier || c.annotation(annotations::DISRUPTION_REASON) != Some(reason) {
        let a = c.metadata.annotations.get_or_insert_with(Default::default);
        if !earlier {
            a.insert(
                annotations::TERMINATION_TIMESTAMP.into(),
                ctx.now.to_string(),
            );
        }
        a.insert(annotations::DISRUPTION_REASON.into(), reason.into());
        match ctx.store.update(&c) {
            Ok(_) => {}
            // Changed or gone since read: looked at again next step.
            Err(StoreError::Conflict(_) | StoreError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
    match ctx.store.delete::<NodeClaim>(None, claim.name()) {
        Ok(_) => {}
        Err(StoreError::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let condition = broken.policy.condition;
    tracing::warn!(
        nodeclaim = claim.name(),
        node,
        condition,
        status = broken.policy.status,
        since = %broken.since,
        "node repair: replacing an unhealthy node"
    );
    ctx.report.disruption.push(DisruptionEvent {
        action: DisruptionAction::Decided,
        reason: DisruptionCause::Reason(DisruptionReason::Unhealthy),
        node_claims: vec![claim.name().to_string()],
        detail: vec![format!(
            "{condition}={} since {}",
            broken.policy.status, broken.since
        )],
    });
    ctx.report.repaired.push(Repaired {
        node_claim: claim.name().to_string(),
        node_pool: claim
            .label(labels::NODEPOOL)
            .unwrap_or_default()
            .to_string(),
        condition,
        capacity_type: claim
            .label(labels::CAPACITY_TYPE)
            .unwrap_or_default()
            .to_string(),
        image_id: claim.status.image_id.clone().unwrap_or_default(),
    });
    ctx.invalidate_view();
    Ok(())
}
