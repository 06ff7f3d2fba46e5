//! Disruption of static NodePools' nodes, as Karpenter applies it to them.
//!
//! Consolidation never removes them (the view makes none of them a candidate). Drift, expiry
//! and interruption replace one for one: each old NodeClaim gets one new NodeClaim of the same
//! pool under a free slot name, planned from the pool's template as its other replicas are,
//! never from its pods (kube-scheduler puts them where they fit). A replacement may take the
//! pool over `replicas` for the length of the move, never over `limits.nodes`:
//!
//! - a drifted node is a candidate only while the pool is not over its replicas (a scale-down
//!   goes first) and `limits.nodes` has room for its replacement, as Karpenter's static drift
//!   waits;
//! - an expired or interrupted node goes whatever the limit says, without a replacement when
//!   the limit has no room; the pool's own reconciler ([`crate::statics`]) launches one once
//!   the old NodeClaim is deleting;
//! - with the `StaticCapacity` gate off, drift and expiry leave the pool's nodes alone and an
//!   interrupted node gets no replacement: Joiner neither launches nor removes a static pool's
//!   nodes then.

use std::collections::BTreeSet;

use joiner_engine::plan::PlannedNodeClaim;
use joiner_engine::snapshot::statics::{NodeCounts, node_limit};
use joiner_model::api::NodePool;
use joiner_model::api::nodeclaim::NodeClaim;
use joiner_model::wellknown::{DisruptionReason, labels};

use super::View;
use crate::cloud::CloudProvider;
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::store::ClusterStore;

impl View {
    /// The claim's NodePool, when it is a static one.
    pub(super) fn static_pool(&self, claim: &NodeClaim) -> Option<&NodePool> {
        self.pool_of(claim).filter(|p| p.spec.replicas.is_some())
    }

    /// The pool's NodeClaims by state, as the view counts them for static pools.
    fn static_counts(&self, pool: &str) -> NodeCounts {
        NodeCounts::of(
            self.claims
                .iter()
                .filter(|c| c.label(labels::NODEPOOL) == Some(pool)),
        )
    }

    /// How many more NodeClaims the static pool may have before `limits.nodes`.
    fn static_room(&self, pool: &NodePool) -> u32 {
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        let limit = node_limit(pool).unwrap_or(u32::MAX);
        limit.saturating_sub(self.static_counts(name).total())
    }
}

/// Whether a static pool's node may be considered for drift or expiry at all: with the gate
/// off, never.
pub(super) fn may_disrupt(view: &View, claim: &NodeClaim) -> bool {
    view.static_capacity || view.static_pool(claim).is_none()
}

/// Whether a drifted static node can be replaced now (see the module docs); true for a node
/// of a dynamic pool.
pub(super) fn drift_ready(view: &View, claim: &NodeClaim) -> bool {
    let Some(pool) = view.static_pool(claim) else {
        return true;
    };
    let name = pool.metadata.name.as_deref().unwrap_or_default();
    let counts = view.static_counts(name);
    let replicas = joiner_engine::snapshot::statics::replicas(pool).unwrap_or(0);
    counts.active + counts.pending_disruption <= replicas && view.static_room(pool) > 0
}

/// One-for-one replacements for the static NodeClaims among `old` (see the module docs).
pub(super) fn replacements<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    view: &View,
    old: &[&NodeClaim],
) -> Result<Vec<PlannedNodeClaim>, ControllerError> {
    if !view.static_capacity {
        return Ok(Vec::new());
    }
    let snapshot = ctx.view()?;
    let mut planned: Vec<PlannedNodeClaim> = Vec::new();
    for claim in old {
        let Some(pool) = view.static_pool(claim) else {
            continue;
        };
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        let already = planned.iter().filter(|p| p.node_pool == name).count() as u32;
        if view.static_room(pool) <= already {
            tracing::info!(
                nodeclaim = claim.name(),
                nodepool = name,
                "no room under limits.nodes for a replacement; the pool launches one once this NodeClaim is deleting"
            );
            continue;
        }
        let taken: BTreeSet<String> = planned.iter().map(|p| p.name.clone()).collect();
        planned.extend(snapshot.static_replacements(name, 1, &taken));
    }
    Ok(planned)
}

/// Whether a move for `reason` waits rather than go without a replacement for a static node:
/// only a drift does.
pub(super) fn waits_without_replacement(reason: DisruptionReason) -> bool {
    reason == DisruptionReason::Drifted
}
