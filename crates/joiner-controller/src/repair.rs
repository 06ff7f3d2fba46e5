//! Node repair, as Karpenter does it behind its `NodeRepair` gate (off by default): a node of
//! Joiner's whose condition shows it broken for longer than its policy tolerates (a GPU fault
//! reported as `AcceleratedHardwareReady: False` for 10 minutes, say) is repaired.
//!
//! - With the AWS gate `RebootForRepair` (Karpenter v1.15, off by default), a fault a reboot
//!   clears is first rebooted in place ([`reboot`]), at most twice a day; a node still broken
//!   a toleration after its reboot came back is rebooted again or replaced.
//! - Otherwise it is replaced: its NodeClaim gets a termination deadline of the policy's drain
//!   bound (10 minutes; none for `Ready: Unknown`; the NodeClaim's `terminationGracePeriod` if
//!   shorter) and is deleted, so the termination finalizer drains it through the Eviction API
//!   as PodDisruptionBudgets allow until then and deletes what is left, as Karpenter v1.15's
//!   repair does (the NodePool's budgets and `do-not-disrupt` do not hold a broken node past
//!   the bound); the provisioner plans its pods again.
//! - `karpenter.sh/do-not-repair: "true"` on the Node or NodeClaim keeps repair off it.
//!
//! The world is not trusted further than it must be:
//! - only nodes of a NodeClaim (one Joiner launched) are repaired;
//! - a NodePool with more than a fifth of its nodes broken repairs none ([`policy`]), and says
//!   so on each with a `NodeRepairBlocked` event;
//! - the cache may be behind the API server: before acting, the Node is read again from the
//!   server, and a node that has recovered meanwhile is left alone.

use std::collections::BTreeMap;

use joiner_model::api::NodePool;
use joiner_model::api::nodeclaim::NodeClaim;
use joiner_model::feature_gates::FeatureGate;
use joiner_model::wellknown::{DisruptionAction, DisruptionReason, annotations, labels};
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::cloud::CloudProvider;
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::report::{DisruptionCause, DisruptionEvent, Reconciler, Repaired};
use crate::store::{ClusterStore, StoreError};
use crate::termination;

pub mod policy;
pub mod reboot;

use policy::{AWS_REBOOT_POLICY, Broken, RepairAction, RepairPolicy, Verdict};

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
    let policies = policy::aws_policies(ctx.config.settings.reboot_for_repair);
    let nodes = ctx.store.list::<Node>()?;
    let claims = ctx.store.list::<NodeClaim>()?;
    let node_of = |claim: &NodeClaim| termination::node_of(claim, &nodes);
    // Reboots under way go on, whatever the gate says now: one half done is finished.
    let rebooting: Vec<&NodeClaim> = claims
        .iter()
        .filter(|c| !c.is_deleting() && reboot::in_progress(c))
        .collect();
    if !rebooting.is_empty() {
        let pods = ctx.store.list::<Pod>()?;
        for claim in rebooting {
            // A NodeClaim without its Node: nothing to reboot; termination or the lifecycle
            // has it.
            let Some(node) = node_of(claim) else { continue };
            let name = node.metadata.name.clone().unwrap_or_default();
            match reboot::advance(ctx, claim, node, &pods) {
                Ok(reboot::Next::Wait) => {}
                Ok(reboot::Next::Replace(why)) => {
                    // Drained before the reboot already: the broken policy's bound again.
                    let policy = policy::broken(node, &policies, None)
                        .map_or(AWS_REBOOT_POLICY, |b| b.policy);
                    if let Err(e) = replace(ctx, &name, claim, &policy, why) {
                        ctx.error(Reconciler::Repair, &format!("Node {name}"), e);
                    }
                }
                Err(e) => ctx.error(Reconciler::Repair, &format!("rebooting Node {name}"), e),
            }
        }
    }
    let mut budgets = Budgets::new(ctx.store.list::<NodePool>()?, &claims);
    // A condition that held through a reboot counts from the reboot's end.
    let not_before: BTreeMap<String, _> = claims
        .iter()
        .filter_map(|c| Some((node_of(c)?.metadata.name.clone()?, reboot::finished_at(c)?)))
        .collect();
    for (name, verdict) in policy::verdicts(&nodes, &policies, ctx.now, &not_before) {
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
        if claim.is_deleting() || reboot::in_progress(claim) {
            continue;
        }
        match verdict {
            Verdict::Repair(_) if do_not_repair(&nodes, &name, claim) => {
                ctx.report.repair_blocked.push((
                    claim.name().to_string(),
                    format!(
                        "repair is blocked through the \"{}\" annotation",
                        annotations::DO_NOT_REPAIR
                    ),
                ));
            }
            Verdict::Repair(_) if !budgets.take(claim, ctx.now) => {
                ctx.report.repair_blocked.push((
                    claim.name().to_string(),
                    format!(
                        "Node repair blocked by NodePool {}'s disruption budget for Unhealthy",
                        claim.label(labels::NODEPOOL).unwrap_or_default()
                    ),
                ));
            }
            Verdict::Repair(broken) => {
                let since = not_before.get(&name).copied();
                if let Err(e) = repair(ctx, &name, claim, &broken, &policies, since) {
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

/// The NodePools' disruption budgets for `Unhealthy` (Karpenter v1.15: repair is a disruption
/// its budgets limit), counting the repairs this pass makes.
struct Budgets {
    pools: BTreeMap<String, NodePool>,
    /// Per pool: live NodeClaims, and those being disrupted (deleting, moving or rebooting).
    counts: BTreeMap<String, (usize, usize)>,
}

impl Budgets {
    fn new(pools: Vec<NodePool>, claims: &[NodeClaim]) -> Budgets {
        let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for c in claims {
            let Some(pool) = c.label(labels::NODEPOOL) else {
                continue;
            };
            let entry = counts.entry(pool.to_string()).or_default();
            if !c.is_deleting() {
                entry.0 += 1;
            }
            if c.is_deleting()
                || c.annotation(annotations::DISRUPTION_REASON).is_some()
                || reboot::in_progress(c)
            {
                entry.1 += 1;
            }
        }
        Budgets {
            pools: pools
                .into_iter()
                .filter_map(|p| Some((p.metadata.name.clone()?, p)))
                .collect(),
            counts,
        }
    }

    /// Takes one disruption of `claim`'s pool's budget, if it allows one more now. A NodeClaim
    /// whose NodePool is gone is not held (nothing budgets it).
    fn take(&mut self, claim: &NodeClaim, now: k8s_openapi::jiff::Timestamp) -> bool {
        let Some(name) = claim.label(labels::NODEPOOL) else {
            return true;
        };
        let Some(pool) = self.pools.get(name) else {
            return true;
        };
        let (total, disrupting) = self.counts.get(name).copied().unwrap_or_default();
        let allowed = crate::disruption::budgets::allowed_disruptions(
            pool,
            DisruptionReason::Unhealthy,
            total,
            now,
        );
        if disrupting >= allowed {
            return false;
        }
        self.counts.entry(name.to_string()).or_default().1 += 1;
        true
    }
}

/// Whether the Node named `node` or its NodeClaim is marked `karpenter.sh/do-not-repair: "true"`.
fn do_not_repair(nodes: &[Node], node: &str, claim: &NodeClaim) -> bool {
    let marked = |a: Option<&std::collections::BTreeMap<String, String>>| {
        a.and_then(|a| a.get(annotations::DO_NOT_REPAIR))
            .is_some_and(|v| v == "true")
    };
    marked(claim.metadata.annotations.as_ref())
        || nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(node))
            .is_some_and(|n| marked(n.metadata.annotations.as_ref()))
}

/// Reboots or replaces the broken node of `claim`, if the API server still says it is broken:
/// a reboot where the policy says so and the node has had fewer than
/// [`reboot::MAX_REBOOTS`] in the last day, a replacement otherwise.
fn repair<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    node: &str,
    claim: &NodeClaim,
    broken: &Broken,
    policies: &[RepairPolicy],
    not_before: Option<k8s_openapi::jiff::Timestamp>,
) -> Result<(), ControllerError> {
    let fresh = ctx.store.get_uncached::<Node>(None, node)?;
    let still = fresh
        .as_ref()
        .and_then(|n| policy::broken(n, policies, not_before))
        .is_some_and(|b| b.repair_at <= ctx.now);
    if !still {
        tracing::info!(
            node,
            "node repair: the node recovered, or the cache was behind"
        );
        return Ok(());
    }
    if broken.policy.action == RepairAction::Reboot {
        if reboot::recent_reboots(claim, ctx.now) < reboot::MAX_REBOOTS {
            return reboot::commit(ctx, node, claim, broken, &broken.reason);
        }
        tracing::info!(
            nodeclaim = claim.name(),
            "node repair: rebooted {} times within a day and still unhealthy; replacing",
            reboot::MAX_REBOOTS
        );
    }
    let detail = format!(
        "{}={} since {}",
        broken.policy.condition, broken.policy.status, broken.since
    );
    replace(ctx, node, claim, &broken.policy, detail)
}

/// Replaces the node of `claim`: its NodeClaim's drain ends now and it is deleted.
fn replace<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    node: &str,
    claim: &NodeClaim,
    policy: &RepairPolicy,
    detail: String,
) -> Result<(), ControllerError> {
    let condition = policy.condition;
    // The drain is bounded by the policy's grace period, or the NodeClaim's own if shorter (a
    // deadline already earlier stays), and says why.
    let mut c = claim.clone();
    let bound = reboot::bounded(claim, policy.drain);
    let deadline = crate::clock::add(ctx.now, bound);
    let earlier = c
        .annotation(annotations::TERMINATION_TIMESTAMP)
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .is_some_and(|t| t <= deadline);
    let reason = DisruptionReason::Unhealthy.as_str();
    if !earlier || c.annotation(annotations::DISRUPTION_REASON) != Some(reason) {
        let a = c.metadata.annotations.get_or_insert_with(Default::default);
        if !earlier {
            a.insert(
                annotations::TERMINATION_TIMESTAMP.into(),
                deadline.to_string(),
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
    tracing::warn!(
        nodeclaim = claim.name(),
        node,
        condition,
        detail,
        "node repair: replacing an unhealthy node"
    );
    ctx.report.disruption.push(DisruptionEvent {
        action: DisruptionAction::Decided,
        reason: DisruptionCause::Reason(DisruptionReason::Unhealthy),
        node_claims: vec![claim.name().to_string()],
        detail: vec![detail],
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
