//! Consolidation: which nodes to remove, or replace with cheaper ones, once the work shrinks.
//!
//! Every move is checked by planning again with the candidates gone and their pods pending
//! (their DRA claims released, their device-plugin GPUs re-counted by the planner), and is taken
//! only if every one of those pods still fits and the result is strictly cheaper. As in
//! Karpenter, empty nodes are deleted together, then one multi-node move (the longest prefix of
//! the candidates, by binary search) or else one single-node move is proposed per round; the
//! caller acts, and asks again. Unlike Karpenter, a replacement may be several nodes (one large
//! node split into smaller, cheaper ones) since the planner minimises the total price.
//!
//! Moves that must happen whatever they cost (expiry, drift, interruption) ask
//! [`replacements`] for the new nodes their pods need: the same planning, without the saving.
//!
//! Not modelled here: disruption budgets, `consolidateAfter`, PodDisruptionBudgets, and when a
//! node expires, drifts or is interrupted (they need the controller's clock, objects and events).

use joiner_model::Price;
use joiner_model::feature_gates::{FeatureGate, FeatureGates};
use joiner_model::wellknown::{CapacityType, ConsolidationType, DisruptionReason, labels};
use serde::Serialize;

use crate::plan::{Binding, PlannedNodeClaim, Unschedulable};
use crate::scheduling::{Baseline, Consolidation, SchedulingInput};

pub use balanced::MoveVerdict;

/// How many candidates a multi-node move considers at most (Karpenter's limit too).
const MAX_MULTI_NODE: usize = 100;

/// How many cheaper spot instance types a single spot node's spot replacement must be able to
/// launch as (Karpenter's rule): fewer, and the replacement would soon be the next candidate
/// for interruption, so the move is not made.
const MIN_SPOT_TO_SPOT_TYPES: usize = 15;

/// One consolidation move.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// `Empty` or `Underutilized`.
    pub reason: DisruptionReason,
    /// The nodes to remove.
    pub nodes: Vec<String>,
    /// New nodes to launch first (empty: the pods fit on the remaining nodes).
    pub replacements: Vec<PlannedNodeClaim>,
    /// Hourly price of the removed nodes less that of the replacements.
    pub savings_per_hour: Price,
}

/// A node that may be consolidated, and what it costs.
struct Candidate {
    node: usize,
    price: Price,
    /// Its pods that move with it: those not of a DaemonSet.
    pods: usize,
}

/// The consolidation moves for this round. `gates` switch what Karpenter's feature gates
/// switch: spot nodes are replaced by spot nodes only under `SpotToSpotConsolidation`.
pub fn consolidate(input: &SchedulingInput, gates: &FeatureGates) -> Vec<Decision> {
    consolidate_weighed(input, gates, &mut |_| {}).0
}

/// [`consolidate`], with the verdicts of the moves it weighed: every single-node move that
/// would save money, and the multi-node move chosen, as Karpenter counts them (before the
/// move's validation, so an approved move may still be dropped). `lap` is told as each kind of
/// move has been weighed (empty, multi-node, single-node, in that order), so a caller with a
/// clock can time each as Karpenter times its disruption methods.
pub fn consolidate_weighed(
    input: &SchedulingInput,
    gates: &FeatureGates,
    lap: &mut dyn FnMut(ConsolidationType),
) -> (Vec<Decision>, Vec<MoveVerdict>) {
    let baseline = Baseline::new(input);
    let candidates = candidates(input, &baseline);
    let spot_to_spot = gates.enabled(FeatureGate::SpotToSpotConsolidation);
    let balance = balanced::Balance::new(input);
    let weighed = std::cell::RefCell::new(Vec::new());
    let removal = |removed: &[&Candidate]| -> Vec<(usize, Price)> {
        removed.iter().map(|c| (c.node, c.price)).collect()
    };
    let saving = |removed: &[&Candidate]| {
        evaluate(input, &baseline, removed)
            .filter(|d| spot_rule_allows(input, removed, d, spot_to_spot))
            .filter(|d| {
                let v = balanced::verdicts(
                    input,
                    balance.as_ref(),
                    &removal(removed),
                    d.savings_per_hour,
                );
                let approved = v.iter().all(|x| x.approved);
                if removed.len() == 1 {
                    weighed.borrow_mut().extend(v);
                }
                approved
            })
    };
    let mut decisions = Vec::new();
    let (empty, busy): (Vec<&Candidate>, Vec<&Candidate>) =
        candidates.iter().partition(|c| c.pods == 0);
    if !empty.is_empty() {
        decisions.push(Decision {
            reason: DisruptionReason::Empty,
            nodes: empty
                .iter()
                .map(|c| input.nodes[c.node].name.clone())
                .collect(),
            replacements: Vec::new(),
            savings_per_hour: empty.iter().map(|c| c.price).sum(),
        });
    }
    lap(ConsolidationType::Empty);
    // Busy nodes only where the NodePool consolidates underutilized nodes.
    let busy: Vec<&Candidate> = busy
        .into_iter()
        .filter(|c| {
            pool_of(input, c.node).is_some_and(|p| {
                matches!(
                    p.consolidation,
                    Consolidation::WhenEmptyOrUnderutilized | Consolidation::Balanced
                )
            })
        })
        .collect();
    // Multi-node: the longest prefix (cheapest to disrupt first) that is still a saving.
    let limit = busy.len().min(MAX_MULTI_NODE);
    let (mut lo, mut hi, mut best) = (2, limit, None);
    while lo <= hi {
        let mid = (lo + hi) / 2;
        match saving(&busy[..mid]) {
            Some(d) => {
                best = Some(d);
                lo = mid + 1;
            }
            None => hi = mid - 1,
        }
    }
    // The longest prefix may save no more than a shorter one that needs no new node.
    let shorter = best
        .as_ref()
        .filter(|b| b.nodes.len() > 2)
        .and_then(|b| saving(&busy[..b.nodes.len() - 1]));
    lap(ConsolidationType::Multi);
    // Single-node: the first candidate that is a saving.
    let single = busy.iter().find_map(|c| saving(std::slice::from_ref(c)));
    lap(ConsolidationType::Single);
    // The largest saving wins; for equal savings, the move that disrupts fewer nodes.
    let chosen = [best, shorter, single]
        .into_iter()
        .flatten()
        .min_by(|a, b| {
            b.savings_per_hour
                .cmp(&a.savings_per_hour)
                .then(a.nodes.len().cmp(&b.nodes.len()))
        });
    // The multi-node move chosen is counted once, as Karpenter counts its final command.
    let multi = chosen.as_ref().filter(|d| d.nodes.len() > 1).map(|d| {
        let removed: Vec<&Candidate> = busy
            .iter()
            .copied()
            .filter(|c| d.nodes.contains(&input.nodes[c.node].name))
            .collect();
        balanced::verdicts(
            input,
            balance.as_ref(),
            &removal(&removed),
            d.savings_per_hour,
        )
    });
    decisions.extend(chosen);
    let mut weighed = weighed.into_inner();
    weighed.extend(multi.into_iter().flatten());
    (decisions, weighed)
}

fn pool_of(input: &SchedulingInput, node: usize) -> Option<&crate::scheduling::PoolInput> {
    let name = input.nodes[node].node_pool.as_ref()?;
    input.pools.iter().find(|p| &p.name == name)
}

/// Nodes a NodePool manages that are consolidation candidates (not marked do-not-disrupt),
/// with a known price and running no pod marked do-not-disrupt; fewest pods first (cheapest to disrupt), then the most expensive.
fn candidates(input: &SchedulingInput, baseline: &Baseline) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = input
        .nodes
        .iter()
        .enumerate()
        .filter(|(i, n)| pool_of(input, *i).is_some() && n.consolidation_candidate)
        .filter_map(|(i, n)| {
            let on_node = || baseline.pods_on(i).iter().map(|&p| &input.pods[p]);
            if on_node().any(|p| p.do_not_disrupt) {
                return None;
            }
            let pods = on_node().filter(|p| p.daemon_set.is_none()).count();
            Some(Candidate {
                node: i,
                price: n.price?,
                pods,
            })
        })
        .collect();
    out.sort_by(|a, b| {
        a.pods
            .cmp(&b.pods)
            .then(b.price.cmp(&a.price))
            .then(input.nodes[a.node].name.cmp(&input.nodes[b.node].name))
    });
    out
}

/// Plans again without `removed`: a decision if all their pods fit and it saves money.
fn evaluate(
    input: &SchedulingInput,
    baseline: &Baseline,
    removed: &[&Candidate],
) -> Option<Decision> {
    let nodes: Vec<usize> = removed.iter().map(|c| c.node).collect();
    // A candidate counts the pods that move with it: those not of a DaemonSet.
    let moved: usize = removed.iter().map(|c| c.pods).sum();
    let plan = baseline.without(&nodes);
    let old: Price = removed.iter().map(|c| c.price).sum();
    if plan.bindings.len() < moved
        || !plan.unschedulable.is_empty()
        || plan.total_price_per_hour >= old
    {
        return None;
    }
    Some(Decision {
        reason: DisruptionReason::Underutilized,
        nodes: removed
            .iter()
            .map(|c| input.nodes[c.node].name.clone())
            .collect(),
        savings_per_hour: old.saturating_sub(plan.total_price_per_hour),
        replacements: plan.node_claims,
    })
}

/// Karpenter's rule for replacing spot nodes. Deleting is always allowed, and so is a move
/// that removes an on-demand node. A move replacing only spot nodes with a node that may be
/// spot is made only with `SpotToSpotConsolidation` on, and then, for a single node, only
/// when its replacement may launch as at least [`MIN_SPOT_TO_SPOT_TYPES`] spot instance types
/// cheaper than the node.
fn spot_rule_allows(
    input: &SchedulingInput,
    removed: &[&Candidate],
    decision: &Decision,
    spot_to_spot: bool,
) -> bool {
    let is_spot = |c: &&Candidate| {
        input.nodes[c.node]
            .labels
            .get(labels::CAPACITY_TYPE)
            .map(String::as_str)
            == Some(CapacityType::Spot.as_str())
    };
    let may_be_spot = |claim: &PlannedNodeClaim| {
        claim.capacity_type == CapacityType::Spot.as_str()
            || claim
                .offerings
                .iter()
                .any(|o| o.capacity_type == CapacityType::Spot.as_str())
    };
    if decision.replacements.is_empty()
        || !removed.iter().all(is_spot)
        || !decision.replacements.iter().any(may_be_spot)
    {
        return true;
    }
    if !spot_to_spot {
        return false;
    }
    let [single] = removed else {
        return true;
    };
    decision
        .replacements
        .iter()
        .all(|claim| cheaper_spot_types(input, claim, single.price) >= MIN_SPOT_TO_SPOT_TYPES)
}

/// How many of the instance types `claim` may launch as have a spot offering cheaper than
/// `than` in its NodePool.
fn cheaper_spot_types(input: &SchedulingInput, claim: &PlannedNodeClaim, than: Price) -> usize {
    let Some(pool) = input.pools.iter().find(|p| p.name == claim.node_pool) else {
        return 0;
    };
    std::iter::once(&claim.instance_type)
        .chain(&claim.instance_type_options)
        .filter(|name| {
            pool.options.iter().any(|o| {
                &o.instance_type == *name
                    && o.offerings.iter().any(|off| {
                        off.capacity_type == CapacityType::Spot.as_str() && off.price < than
                    })
            })
        })
        .count()
}

/// The new nodes that the pods of `nodes` need when those nodes go, whatever the price.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Replacements {
    /// New nodes to launch, each with the moved pods it is for (pods that fit on the nodes
    /// that stay, in-flight ones included, need none).
    pub node_claims: Vec<PlannedNodeClaim>,
    /// Where each moved pod goes: a new node's name, or an existing node's (an in-flight
    /// replacement launched earlier, say, which the caller may want to wait for).
    pub bindings: Vec<Binding>,
    /// Moved pods that fit nowhere, with the planner's reason.
    pub unschedulable: Vec<Unschedulable>,
}

impl Replacements {
    /// Whether every moved pod has a place.
    pub fn complete(&self) -> bool {
        self.unschedulable.is_empty()
    }
}

/// Plans the pods bound to `nodes` (by name; DaemonSet pods stay behind) as if those nodes were
/// gone, on top of every other node of `input`, and returns the new nodes they need. Unlike a
/// consolidation move no saving is required: expiry, drift and interruption replace a node
/// because it must go. Pending pods of `input` are left to provisioning. Unknown names are
/// ignored.
pub fn replacements(input: &SchedulingInput, nodes: &[String]) -> Replacements {
    let indices: Vec<usize> = input
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| nodes.contains(&n.name))
        .map(|(i, _)| i)
        .collect();
    let plan = Baseline::new(input).without(&indices);
    Replacements {
        node_claims: plan.node_claims,
        bindings: plan.bindings,
        unschedulable: plan.unschedulable,
    }
}

mod balanced;
#[cfg(test)]
mod tests;

/// Evaluates every candidate as a single-node move and returns how many would be taken: the
/// work `joiner bench` times (a consolidation round looks at the candidates in this order).
pub fn evaluate_every_candidate(input: &SchedulingInput) -> usize {
    let baseline = Baseline::new(input);
    candidates(input, &baseline)
        .iter()
        .filter(|c| evaluate(input, &baseline, std::slice::from_ref(c)).is_some())
        .count()
}
