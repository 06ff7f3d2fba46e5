//! Karpenter's `Balanced` consolidation policy (v1.14): a move is worth making only when what
//! it saves is large next to the disruption it causes.
//!
//! For each NodePool with the policy that a move removes nodes from:
//! - its savings fraction is the move's saving (split across pools by their share of the
//!   removed nodes' price) over the hourly price of all the pool's nodes;
//! - its disruption fraction is the disruption cost of the pool's removed nodes over that of
//!   all the pool's nodes, where a node costs 1 plus the eviction cost of each of its pods
//!   ([`crate::scheduling::pod::eviction_cost`]; negative costs count as 0);
//! - the score is the first over the second, and must be at least `1 / k`, with Karpenter's
//!   fixed `k = 2`. A move with no saving scores 0; one with no disruption passes.
//!
//! Every Balanced pool the move touches must approve it; pools with other policies are not
//! scored. Deleting empty nodes is never scored (as in Karpenter, emptiness acts under every
//! policy).

use joiner_model::Price;

use crate::scheduling::{Consolidation, SchedulingInput};

/// Karpenter's `k`: a move passes with a score of at least `1 / k`.
const BALANCED_K: f64 = 2.0;

/// Whether every Balanced pool that the removal of `removed` (node indices, with their prices)
/// touches approves a move saving `savings` an hour.
pub(super) fn approves(
    input: &SchedulingInput,
    removed: &[(usize, Price)],
    savings: Price,
) -> bool {
    let source: f64 = removed.iter().map(|(_, p)| usd(*p)).sum();
    let mut pools: Vec<&str> = removed
        .iter()
        .filter_map(|(n, _)| input.nodes[*n].node_pool.as_deref())
        .collect();
    pools.sort_unstable();
    pools.dedup();
    pools
        .into_iter()
        .filter(|name| {
            input
                .pools
                .iter()
                .any(|p| p.name == *name && p.consolidation == Consolidation::Balanced)
        })
        .all(|name| score(input, name, removed, usd(savings), source) >= 1.0 / BALANCED_K)
}

/// The pool's score for the move: its savings fraction over its disruption fraction.
fn score(
    input: &SchedulingInput,
    pool: &str,
    removed: &[(usize, Price)],
    savings: f64,
    source: f64,
) -> f64 {
    let in_pool = |n: usize| input.nodes[n].node_pool.as_deref() == Some(pool);
    let members: Vec<usize> = (0..input.nodes.len()).filter(|&n| in_pool(n)).collect();
    let pool_cost: f64 = members
        .iter()
        .filter_map(|&n| input.nodes[n].price)
        .map(usd)
        .sum();
    let pool_disruption: f64 = members.iter().map(|&n| disruption_cost(input, n)).sum();
    let moved: Vec<&(usize, Price)> = removed.iter().filter(|(n, _)| in_pool(*n)).collect();
    let moved_source: f64 = moved.iter().map(|(_, p)| usd(*p)).sum();
    let moved_disruption: f64 = moved.iter().map(|(n, _)| disruption_cost(input, *n)).sum();
    let share = if source > 0.0 {
        moved_source / source
    } else {
        0.0
    };
    let pool_savings = savings * share;
    if pool_savings <= 0.0 || pool_cost <= 0.0 {
        return 0.0;
    }
    if moved_disruption <= 0.0 || pool_disruption <= 0.0 {
        return f64::INFINITY;
    }
    (pool_savings / pool_cost) / (moved_disruption / pool_disruption)
}

/// A node's disruption cost: 1 for the node, plus each of its pods' eviction cost (DaemonSet
/// pods stay, so they cost nothing).
fn disruption_cost(input: &SchedulingInput, node: usize) -> f64 {
    let name = input.nodes[node].name.as_str();
    1.0 + input
        .pods
        .iter()
        .filter(|p| p.node_name.as_deref() == Some(name) && p.daemon_set.is_none())
        .map(|p| p.eviction_cost.max(0.0))
        .sum::<f64>()
}

fn usd(p: Price) -> f64 {
    p.as_usd()
}
