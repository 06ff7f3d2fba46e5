//! Static NodePools: `spec.replicas` NodeClaims kept, as Karpenter's static provisioning and
//! deprovisioning controllers keep them, every step whether or not pods are pending.
//!
//! What to launch and what to remove is the view's
//! ([`joiner_engine::snapshot::statics`]); this creates and deletes:
//!
//! - a NodeClaim to launch is created under its slot's name, exactly as provisioning creates
//!   one (a create that timed out, or a cache that has not seen a NodeClaim yet, meets the same
//!   name and adopts or leaves it), then launched;
//! - a scale-down deletes NodeClaims, and termination drains them as it drains any: pods
//!   marked do-not-disrupt wait, PodDisruptionBudgets are honoured, the NodeClaim's
//!   `terminationGracePeriod` bounds the wait. As in Karpenter, a scale-down the user asked for
//!   is not held back by the pool's disruption budgets. The pool and its NodeClaims are read
//!   again from the API server first: a cache behind an earlier deletion would count a deleting
//!   NodeClaim as running, and one behind a scale-up would count to too few replicas; either
//!   would remove a node too many.

use std::collections::BTreeMap;

use joiner_engine::plan::PlannedNodeClaim;
use joiner_engine::snapshot::statics::{NodeCounts, is_active, replicas};
use joiner_model::api::NodePool;
use joiner_model::api::ec2nodeclass::EC2NodeClass;
use joiner_model::api::nodeclaim::NodeClaim;
use joiner_model::wellknown::labels;

use crate::cloud::CloudProvider;
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::lifecycle;
use crate::nodeclaim::node_claim_for;
use crate::nodeclaim::stamp::stamp;
use crate::provisioning::{create_claim, node_pools_by_name};
use crate::report::Reconciler;
use crate::store::{ClusterStore, Preconditions, StoreError};

/// One pass over the static NodePools: launches what they lack, removes what they have too
/// many of. One pool's failure is reported and holds back no other's.
pub fn reconcile<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
) -> Result<(), ControllerError> {
    let pools = node_pools_by_name(ctx.store)?;
    // The view is built only when a static pool's count is off, from what the cache says:
    // most clusters have no static pool, and a pool at its count needs nothing.
    let gate = ctx
        .config
        .settings
        .feature_gates
        .enabled(joiner_model::feature_gates::FeatureGate::StaticCapacity);
    let claims = ctx.store.list::<NodeClaim>()?;
    let off_count = |pool: &NodePool| {
        let (Some(name), Some(replicas)) = (pool.metadata.name.as_deref(), replicas(pool)) else {
            return false;
        };
        NodeCounts::of(
            claims
                .iter()
                .filter(|c| c.label(labels::NODEPOOL) == Some(name)),
        )
        .off(replicas)
    };
    if !gate || !pools.values().any(off_count) {
        return Ok(());
    }
    let view = ctx.view()?;
    let launches = view.static_launches();
    let removals: Vec<(String, Vec<String>)> = view
        .static_pools()
        .iter()
        .filter(|p| !p.remove.is_empty())
        .map(|p| (p.name.clone(), p.remove.clone()))
        .collect();
    for planned in launches {
        let Some(pool) = pools.get(&planned.node_pool) else {
            continue;
        };
        if let Err(e) = launch(ctx, pool, &planned) {
            ctx.error(
                Reconciler::StaticCapacity,
                &format!(
                    "creating NodeClaim {} of static NodePool {}",
                    planned.name, planned.node_pool
                ),
                e,
            );
        }
    }
    for (pool, candidates) in removals {
        if let Err(e) = scale_down(ctx, &pool, &candidates) {
            ctx.error(
                Reconciler::StaticCapacity,
                &format!("scaling static NodePool {pool} down"),
                e,
            );
        }
    }
    Ok(())
}

/// Creates one static NodeClaim (or adopts the one already under its name) and launches it.
fn launch<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    pool: &NodePool,
    planned: &PlannedNodeClaim,
) -> Result<(), ControllerError> {
    let mut claim = node_claim_for(planned, pool, &BTreeMap::new(), zones(planned));
    let class = ctx
        .store
        .get::<EC2NodeClass>(None, &pool.spec.template.spec.node_class_ref.name)?;
    stamp(&mut claim, pool, class.as_ref());
    let Some((created, adopted)) = create_claim(ctx, claim)? else {
        return Ok(());
    };
    ctx.invalidate_view();
    if !adopted {
        tracing::info!(nodeclaim = created.name(), nodepool = %planned.node_pool, "created NodeClaim for a static NodePool's replicas");
        ctx.report.created.push(created.name().to_string());
    }
    lifecycle::launch(ctx, created)
}

/// The zones a static NodeClaim may launch in: any its offerings allow, the planned one
/// first. Nothing pins a static node to a zone but its pool's requirements.
pub fn zones(planned: &PlannedNodeClaim) -> Vec<String> {
    let mut zones = vec![planned.zone.clone()];
    for o in &planned.offerings {
        if !zones.contains(&o.zone) {
            zones.push(o.zone.clone());
        }
    }
    zones
}

/// Deletes `candidates` (in order) until the pool has its replicas running. The count it goes
/// to and the NodeClaims counted are read from the API server rather than the cache (see the
/// module docs): a cache behind a later scale-up, or behind a deletion, never removes a node.
fn scale_down<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    pool: &str,
    candidates: &[String],
) -> Result<(), ControllerError> {
    let fresh_pool = ctx.store.get_uncached::<NodePool>(None, pool)?;
    let Some(replicas) = fresh_pool
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .as_ref()
        .and_then(replicas)
    else {
        // Gone, being deleted or no longer static: not a scale-down.
        return Ok(());
    };
    let running = |c: &NodeClaim| c.label(labels::NODEPOOL) == Some(pool) && is_active(c);
    let cached: Vec<NodeClaim> = ctx
        .store
        .list::<NodeClaim>()?
        .into_iter()
        .filter(|c| running(c))
        .collect();
    let mut fresh = Vec::with_capacity(cached.len());
    for claim in &cached {
        if let Some(now) = ctx.store.get_uncached::<NodeClaim>(None, claim.name())?
            && running(&now)
        {
            fresh.push(now);
        }
    }
    let excess = fresh.len().saturating_sub(replicas as usize);
    let chosen: Vec<&NodeClaim> = candidates
        .iter()
        .filter_map(|name| fresh.iter().find(|c| c.name() == name))
        .take(excess)
        .collect();
    for claim in chosen {
        match ctx.store.delete_if::<NodeClaim>(
            None,
            claim.name(),
            Preconditions::of(&claim.metadata),
        ) {
            Ok(_) => {
                tracing::info!(
                    nodeclaim = claim.name(),
                    nodepool = pool,
                    replicas,
                    "deleting NodeClaim: the static NodePool has more than its replicas"
                );
                ctx.report.deleted.push(claim.name().to_string());
                ctx.invalidate_view();
            }
            // Gone or replaced since it was read: the next step counts again.
            Err(StoreError::NotFound(_) | StoreError::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
