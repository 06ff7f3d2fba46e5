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

use std::collections::HashMap;

use joiner_model::Price;
use serde::Serialize;

use crate::scheduling::{Consolidation, SchedulingInput};

/// Karpenter's `k`: a move passes with a score of at least `1 / k`.
const BALANCED_K: f64 = 2.0;

/// What scoring needs of the cluster, computed once per consolidation round: each node's
/// disruption cost, and each Balanced pool's hourly price and disruption cost in all.
pub(super) struct Balance<'a> {
    input: &'a SchedulingInput,
    node_cost: Vec<f64>,
    /// Balanced pool name to (hourly price, disruption cost) of all its nodes.
    pools: HashMap<&'a str, (f64, f64)>,
}

impl<'a> Balance<'a> {
    /// `None` when no NodePool is Balanced: every move is approved without scoring.
    pub(super) fn new(input: &'a SchedulingInput) -> Option<Balance<'a>> {
        let mut pools: HashMap<&str, (f64, f64)> = input
            .pools
            .iter()
            .filter(|p| p.consolidation == Consolidation::Balanced)
            .map(|p| (p.name.as_str(), (0.0, 0.0)))
            .collect();
        if pools.is_empty() {
            return None;
        }
        // A node costs 1, plus each of its pods' eviction cost (DaemonSet pods stay, so they
        // cost nothing; negative costs count as 0).
        let index: HashMap<&str, usize> = input
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        let mut node_cost = vec![1.0; input.nodes.len()];
        for p in input.pods.iter().filter(|p| p.daemon_set.is_none()) {
            if let Some(&n) = p.node_name.as_deref().and_then(|name| index.get(name)) {
                node_cost[n] += p.eviction_cost.max(0.0);
            }
        }
        for (n, node) in input.nodes.iter().enumerate() {
            if let Some(total) = node.node_pool.as_deref().and_then(|p| pools.get_mut(p)) {
                total.0 += node.price.map_or(0.0, usd);
                total.1 += node_cost[n];
            }
        }
        Some(Balance {
            input,
            node_cost,
            pools,
        })
    }

    /// The score each Balanced pool that the removal of `removed` (node indices, with their
    /// prices) touches gives a move saving `savings` an hour.
    fn scores(&self, removed: &[(usize, Price)], savings: Price) -> Vec<(&'a str, f64)> {
        let source: f64 = removed.iter().map(|(_, p)| usd(*p)).sum();
        let input = self.input;
        let pool_of = |n: usize| input.nodes[n].node_pool.as_deref();
        let mut touched: Vec<&str> = removed.iter().filter_map(|(n, _)| pool_of(*n)).collect();
        touched.sort_unstable();
        touched.dedup();
        touched
            .into_iter()
            .filter_map(|pool| {
                let &(pool_cost, pool_disruption) = self.pools.get(pool)?;
                let moved = removed.iter().filter(|(n, _)| pool_of(*n) == Some(pool));
                let (moved_source, moved_disruption) = moved.fold((0.0, 0.0), |(s, d), (n, p)| {
                    (s + usd(*p), d + self.node_cost[*n])
                });
                let share = if source > 0.0 {
                    moved_source / source
                } else {
                    0.0
                };
                let s = score(
                    usd(savings) * share,
                    pool_cost,
                    moved_disruption,
                    pool_disruption,
                );
                Some((pool, s))
            })
            .collect()
    }
}

/// One consolidation move weighed, for one NodePool it takes nodes from: what Karpenter's
/// `karpenter_consolidation_moves_total` and `karpenter_consolidation_score` count.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MoveVerdict {
    pub nodepool: String,
    /// The pool's consolidation policy, as its NodePool names it.
    pub policy: &'static str,
    /// Whether the move as a whole passed (every Balanced pool it touches approved it).
    pub approved: bool,
    /// This pool's own score and whether it approved, for a Balanced pool.
    pub score: Option<(f64, bool)>,
}

/// The verdicts of a move removing `removed` (node indices, with their prices) and saving
/// `savings` an hour: one per NodePool it touches, each Balanced pool's with its score.
pub(super) fn verdicts(
    input: &SchedulingInput,
    balance: Option<&Balance<'_>>,
    removed: &[(usize, Price)],
    savings: Price,
) -> Vec<MoveVerdict> {
    let scores = balance
        .map(|b| b.scores(removed, savings))
        .unwrap_or_default();
    let passes = |s: f64| s >= 1.0 / BALANCED_K;
    let approved = scores.iter().all(|(_, s)| passes(*s));
    let mut pools: Vec<&str> = removed
        .iter()
        .filter_map(|(n, _)| input.nodes[*n].node_pool.as_deref())
        .collect();
    pools.sort_unstable();
    pools.dedup();
    pools
        .into_iter()
        .filter_map(|name| {
            let pool = input.pools.iter().find(|p| p.name == name)?;
            let score = scores
                .iter()
                .find(|(p, _)| *p == name)
                .map(|(_, s)| (*s, passes(*s)));
            Some(MoveVerdict {
                nodepool: name.to_string(),
                policy: pool.consolidation.as_str(),
                approved,
                score,
            })
        })
        .collect()
}

/// A pool's score for a move: its savings fraction over its disruption fraction; 0 with no
/// saving, unbounded with no disruption.
fn score(savings: f64, pool_cost: f64, disruption: f64, pool_disruption: f64) -> f64 {
    if savings <= 0.0 || pool_cost <= 0.0 {
        return 0.0;
    }
    if disruption <= 0.0 || pool_disruption <= 0.0 {
        return f64::INFINITY;
    }
    (savings / pool_cost) / (disruption / pool_disruption)
}

fn usd(p: Price) -> f64 {
    p.as_usd()
}
