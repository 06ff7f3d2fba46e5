//! NodeClaims of static NodePools (`spec.replicas`): launched for the count, not for pods.
//!
//! Karpenter creates a static pool's NodeClaims from its template alone and lets the cloud
//! provider launch the cheapest instance type the requirements allow. Joiner plans them the
//! same way, with the planner's own offering order (reservations, then spot, then on-demand)
//! and reservation counts, and one choice of its own: the cheapest type whose allocatable holds
//! the pool's DaemonSet pods, since a node that cannot run them serves nobody.

use super::super::{DaemonInput, PoolInput, SchedulingInput, resources};
use super::{Claim, Planner};
use crate::plan::PlannedNodeClaim;

impl Planner<'_> {
    /// Opens an empty NodeClaim in pool `pool` under `name`; false when the pool allows no
    /// offering at all.
    fn open_empty(&mut self, pool: usize, name: String) -> bool {
        let requirements = self.pools[pool].requirements.clone();
        let allowed = self.allowed_for(pool, &requirements);
        let options = &self.pools[pool].options;
        let daemons_fit = |o: usize| options[o].room.iter().all(|r| *r >= 0);
        let Some(chosen) = allowed
            .iter()
            .position(|&(_, o)| daemons_fit(o))
            .or((!allowed.is_empty()).then_some(0))
        else {
            return false;
        };
        let o = allowed[chosen].1;
        let state = &mut self.pools[pool];
        resources::add(&mut state.usage, &state.options[o].capacity);
        self.claims.push(Claim {
            pool,
            name,
            requirements,
            allowed,
            chosen,
            used: vec![0; self.index.len()],
            pods: Vec::new(),
            zone: None,
            // Its type is decided now, without pods; pods never grow it.
            devices_pinned: true,
            reservation: None,
        });
        self.rebook(self.claims.len() - 1);
        true
    }
}

/// The NodeClaims a static NodePool launches under `names`, one each: the cheapest instance
/// type and offering the pool allows (see the module docs), whatever pods are pending. Fewer
/// come back when the pool offers nothing to launch.
pub fn static_claims(
    pool: &PoolInput,
    daemon_sets: &[DaemonInput],
    names: &[String],
) -> Vec<PlannedNodeClaim> {
    let input = SchedulingInput {
        pools: vec![pool.clone()],
        daemon_sets: daemon_sets.to_vec(),
        ..SchedulingInput::default()
    };
    let mut planner = Planner::new(&input);
    for name in names {
        if !planner.open_empty(0, name.clone()) {
            break;
        }
    }
    planner.finish(Vec::new()).node_claims
}
