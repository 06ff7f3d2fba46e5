//! The exact pass: after greedy placement, the new NodeClaims of each batch are packed again
//! by [`packing::solve`] and replaced when that is cheaper.
//!
//! A batch is the new NodeClaims of one NodePool that share their requirements (so any of
//! their pods may go to any node of the batch) and hold only pods whose place matters to no
//! one but themselves: no topology spread, no pod affinity or anti-affinity of their own or
//! selecting them, no DRA claims. NodeClaims holding other pods keep their greedy packing, as
//! do static NodeClaims, NodeClaims in a reservation, and NodeClaims with a zone fixed. The
//! greedy packing stays unless the exact one is strictly cheaper, so plans only ever get
//! cheaper and ties keep the plan they had.
//!
//! A batch of more pods than the search takes at once is improved instead: its NodeClaims,
//! dearest first, are taken in windows of up to [`EXACT_PODS`] pods and each window is packed
//! exactly. One budget of work serves the whole step, so a plan with many batches costs no
//! more time than one with a single hard one.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use joiner_model::Price;

use super::super::packing::{self, Budget, NodeType, Problem, Solved};
use super::super::resources::{self, Amounts};
use super::{Claim, Planner};
use crate::plan::{GreedyReason, PackedBatch, Solver};
use crate::requirements::Requirements;

/// Batches of up to this many pods are solved exactly. A GPU provisioning step is usually a
/// few workloads of tens of replicas; the search's cost grows with the number of distinct pod
/// sizes more than with the count.
pub(super) const EXACT_PODS: usize = 64;

/// Work the searches of one plan may do together (see [`packing::solve`]): about 40 ms of one
/// core on the CI machine, whatever the shape of the batches (`joiner bench --only packing`).
/// Counted rather than timed so that plans stay deterministic.
pub(super) const EXACT_BUDGET: u64 = 500_000;

/// A batch: NodeClaims by index, all of one pool and one set of requirements.
struct Batch {
    pool: usize,
    claims: Vec<usize>,
}

impl Planner<'_> {
    /// Packs every batch exactly where it can and says, per batch, what ran.
    pub(super) fn pack_exactly(&mut self) -> Vec<PackedBatch> {
        let (batches, constrained) = self.batches();
        let mut report = Vec::new();
        let mut retired = BTreeSet::new();
        let mut budget = Budget { left: EXACT_BUDGET };
        let mut members = Vec::new();
        for batch in batches {
            let (record, claims) = self.pack_batch(&batch, &mut budget, &mut retired);
            report.push(record);
            members.push(claims);
        }
        for (pool, claims) in constrained {
            let price = claims.iter().map(|&c| self.claims[c].price()).sum();
            members.push(claims.clone());
            report.push(PackedBatch {
                node_pool: self.pools[pool].input.name.clone(),
                pods: claims
                    .iter()
                    .map(|&c| self.claims[c].pods.len() as u32)
                    .sum(),
                node_claims: Vec::new(),
                solver: Solver::Greedy,
                reason: Some(GreedyReason::PodConstraints),
                greedy_price_per_hour: price,
                price_per_hour: price,
            });
        }
        for (record, claims) in report.iter_mut().zip(members) {
            record.node_claims = claims
                .into_iter()
                .filter(|c| !retired.contains(c))
                .map(|c| self.claims[c].name.clone())
                .collect();
            record.node_claims.sort();
        }
        // Indices of NodeClaims matter only while placing; the plan reads names.
        let mut index = 0;
        self.claims.retain(|_| {
            index += 1;
            !retired.contains(&(index - 1))
        });
        report.sort_by(|a, b| a.node_pool.cmp(&b.node_pool));
        report
    }

    /// New NodeClaims with pods, by pool: those that may be repacked grouped by requirements,
    /// and per pool those that may not.
    fn batches(&self) -> (Vec<Batch>, BTreeMap<usize, Vec<usize>>) {
        let mut open: Vec<Batch> = Vec::new();
        let mut index: HashMap<(usize, &Requirements), usize> = HashMap::new();
        let mut constrained: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (c, claim) in self.claims.iter().enumerate() {
            if claim.pods.is_empty() {
                continue;
            }
            if !self.repackable(claim) {
                constrained.entry(claim.pool).or_default().push(c);
                continue;
            }
            let next = open.len();
            match index.entry((claim.pool, &claim.requirements)) {
                Entry::Occupied(at) => open[*at.get()].claims.push(c),
                Entry::Vacant(slot) => {
                    slot.insert(next);
                    open.push(Batch {
                        pool: claim.pool,
                        claims: vec![c],
                    });
                }
            }
        }
        (open, constrained)
    }

    /// Whether a NodeClaim's pods may be moved to other nodes of its batch.
    fn repackable(&self, claim: &Claim) -> bool {
        !claim.devices_pinned
            && claim.reservation.is_none()
            && claim.zone.is_none()
            && claim.pods.iter().all(|&p| {
                self.topology.stands_alone(p)
                    && !self.dra.as_ref().is_some_and(|d| d.uses_claims(p))
            })
    }

    /// Solves one batch (or improves a large one) and, where cheaper, replaces its
    /// NodeClaims (surplus ones are added to `retired`). Returns what ran and the batch's
    /// NodeClaims now (retired ones included).
    fn pack_batch(
        &mut self,
        batch: &Batch,
        budget: &mut Budget,
        retired: &mut BTreeSet<usize>,
    ) -> (PackedBatch, Vec<usize>) {
        let mut members = batch.claims.clone();
        let greedy: Price = batch.claims.iter().map(|&c| self.claims[c].price()).sum();
        let pods: usize = batch
            .claims
            .iter()
            .map(|&c| self.claims[c].pods.len())
            .sum();
        let mut record = PackedBatch {
            node_pool: self.pools[batch.pool].input.name.clone(),
            pods: pods as u32,
            node_claims: Vec::new(),
            solver: Solver::Greedy,
            reason: None,
            greedy_price_per_hour: greedy,
            price_per_hour: greedy,
        };
        if let Some(reason) = self.why_greedy(batch) {
            record.reason = Some(reason);
            return (record, members);
        }
        let windows = if pods <= EXACT_PODS {
            vec![batch.claims.clone()]
        } else {
            self.windows(batch)
        };
        let mut searched = 0;
        for window in &windows {
            match self.solve_window(batch.pool, window, budget) {
                Err(GreedyReason::OverBudget) => {
                    record.reason = Some(GreedyReason::OverBudget);
                    break;
                }
                Err(reason) => record.reason = Some(reason),
                Ok(None) => {}
                Ok(Some(solution)) => {
                    record.price_per_hour = record
                        .price_per_hour
                        .saturating_sub(solution.saved)
                        .max(Price::ZERO);
                    members.extend(self.replace(batch.pool, window, solution, retired));
                }
            }
            searched += 1;
        }
        record.solver = match (pods <= EXACT_PODS, searched) {
            (_, 0) => Solver::Greedy,
            (true, _) => Solver::Exact,
            (false, _) => Solver::Improved,
        };
        // Only a batch solved whole goes without a reason; a large one whose NodeClaims each
        // hold more pods than a window takes is left greedy for its size.
        if record.solver != Solver::Exact && record.reason.is_none() {
            record.reason = Some(GreedyReason::TooManyPods);
        }
        (record, members)
    }

    /// A large batch's NodeClaims, dearest first, in runs of at most [`EXACT_PODS`] pods (a
    /// NodeClaim with more pods than that is left alone).
    fn windows(&self, batch: &Batch) -> Vec<Vec<usize>> {
        let mut order = batch.claims.clone();
        order.sort_by(|&a, &b| {
            self.claims[b]
                .price()
                .cmp(&self.claims[a].price())
                .then(a.cmp(&b))
        });
        let mut windows: Vec<Vec<usize>> = Vec::new();
        let mut current = Vec::new();
        let mut pods = 0;
        for c in order {
            let n = self.claims[c].pods.len();
            if n > EXACT_PODS {
                continue;
            }
            if pods + n > EXACT_PODS {
                windows.push(std::mem::take(&mut current));
                pods = 0;
            }
            current.push(c);
            pods += n;
        }
        windows.push(current);
        windows.retain(|w| !w.is_empty());
        windows
    }

    /// Why a batch cannot be searched at all, if it cannot.
    fn why_greedy(&self, batch: &Batch) -> Option<GreedyReason> {
        let pool = &self.pools[batch.pool];
        let reqs = &self.claims[batch.claims[0]].requirements;
        if reqs.iter().any(|(_, r)| r.min_values.is_some()) {
            return Some(GreedyReason::MinValues);
        }
        if pool
            .offerings
            .iter()
            .flatten()
            .any(|off| off.reservation.is_some())
        {
            return Some(GreedyReason::CapacityReservations);
        }
        None
    }

    /// The exact packing of the pods of NodeClaims `window` (of one pool and one set of
    /// requirements) when it is cheaper than theirs (`None` when it is not), or why there is
    /// none.
    fn solve_window(
        &self,
        pool_index: usize,
        window: &[usize],
        budget: &mut Budget,
    ) -> Result<Option<Solution>, GreedyReason> {
        let pods: Vec<usize> = window
            .iter()
            .flat_map(|&c| self.claims[c].pods.iter().copied())
            .collect();
        let first = &self.claims[window[0]];
        let pool = &self.pools[first.pool];
        // Pods by what they request, in pod order within a group.
        let mut groups: Vec<(Amounts, Vec<usize>)> = Vec::new();
        for &p in &pods {
            let req = &self.requests[p];
            match groups.iter_mut().find(|(r, _)| r == req) {
                Some((_, members)) => members.push(p),
                None => groups.push((req.clone(), vec![p])),
            }
        }
        // Candidate types: the batch's allowed options, cheapest first, that hold some pod.
        let mut choices = Vec::new();
        let mut types = Vec::new();
        for (i, &(price, o)) in first.allowed.iter().enumerate() {
            let opt = &pool.options[o];
            let admits: Vec<bool> = groups
                .iter()
                .map(|(_, members)| {
                    self.option_holds(pool, o, &self.requests[members[0]], members[0])
                })
                .collect();
            if !admits.contains(&true) || dominated(&types, price, &opt.room, &admits) {
                continue;
            }
            choices.push(i);
            types.push(NodeType {
                price,
                room: opt.room.clone(),
                admits,
            });
        }
        let problem = Problem {
            requests: groups.iter().map(|(r, _)| r.clone()).collect(),
            counts: groups.iter().map(|(_, m)| m.len() as u32).collect(),
            types,
        };
        let greedy: Price = window.iter().map(|&c| self.claims[c].price()).sum();
        let packing = match packing::solve(&problem, greedy, budget) {
            Solved::Optimal(packing) => packing,
            Solved::OverBudget => return Err(GreedyReason::OverBudget),
            // Nothing is cheaper: the greedy packing is optimal.
            Solved::NoneCheaper => return Ok(None),
        };
        // Hand out the pods of each group in order.
        let mut next = vec![0usize; groups.len()];
        let nodes = packing
            .nodes
            .iter()
            .map(|node| {
                let mut members = Vec::new();
                for (g, &count) in node.counts.iter().enumerate() {
                    members.extend_from_slice(&groups[g].1[next[g]..next[g] + count as usize]);
                    next[g] += count as usize;
                }
                (choices[node.node_type], members)
            })
            .collect();
        let solution = Solution {
            saved: greedy.saturating_sub(packing.price),
            nodes,
        };
        if !self.within_limits_after(pool_index, window, &solution) {
            return Err(GreedyReason::Limits);
        }
        Ok(Some(solution))
    }

    /// The pool's usage with NodeClaims `window` replaced by the solution's nodes.
    fn usage_after(&self, pool_index: usize, window: &[usize], solution: &Solution) -> Amounts {
        let pool = &self.pools[pool_index];
        let allowed = &self.claims[window[0]].allowed;
        let mut usage = pool.usage.clone();
        for &c in window {
            let claim = &self.claims[c];
            if let Some(&(_, o)) = claim.allowed.get(claim.chosen) {
                resources::sub(&mut usage, &pool.options[o].capacity);
            }
        }
        for (chosen, _) in &solution.nodes {
            resources::add(&mut usage, &pool.options[allowed[*chosen].1].capacity);
        }
        usage
    }

    /// Whether the pool stays within its limits with NodeClaims `window` replaced.
    fn within_limits_after(
        &self,
        pool_index: usize,
        window: &[usize],
        solution: &Solution,
    ) -> bool {
        let Some(limits) = &self.pools[pool_index].limits else {
            return true;
        };
        let usage = self.usage_after(pool_index, window, solution);
        usage.iter().zip(limits).all(|(u, l)| u <= l)
    }

    /// Puts the solution in place of NodeClaims `window`: the first ones keep their names and
    /// take the solution's nodes in order; more nodes get new names, fewer leave the last
    /// NodeClaims retired. Returns the NodeClaims added.
    fn replace(
        &mut self,
        pool_index: usize,
        window: &[usize],
        solution: Solution,
        retired: &mut BTreeSet<usize>,
    ) -> Vec<usize> {
        let mut added = Vec::new();
        let template = self.claims[window[0]].clone();
        self.pools[pool_index].usage = self.usage_after(pool_index, window, &solution);
        let nodes = solution.nodes.len();
        let moved: BTreeSet<usize> = solution
            .nodes
            .iter()
            .flat_map(|(_, m)| m)
            .copied()
            .collect();
        self.bindings.retain(|(p, _)| !moved.contains(p));
        for (i, (chosen, members)) in solution.nodes.into_iter().enumerate() {
            let mut used = vec![0; self.index.len()];
            for &p in &members {
                resources::add(&mut used, &self.requests[p]);
            }
            let pool = &mut self.pools[pool_index];
            let slot = match window.get(i) {
                Some(&c) => c,
                None => {
                    let name = format!("{}-{}", pool.input.name, pool.claims_made);
                    pool.claims_made += 1;
                    self.claims.push(Claim {
                        name,
                        ..template.clone()
                    });
                    added.push(self.claims.len() - 1);
                    self.claims.len() - 1
                }
            };
            let claim = &mut self.claims[slot];
            claim.chosen = chosen;
            claim.used = used;
            claim.pods = members;
            let name = claim.name.clone();
            self.bindings
                .extend(claim.pods.iter().map(|&p| (p, name.clone())));
        }
        for &c in window.iter().skip(nodes) {
            let claim = &mut self.claims[c];
            claim.pods.clear();
            claim.used = vec![0; self.index.len()];
            retired.insert(c);
        }
        // Room changed on every NodeClaim of the window: what the room index holds of them
        // must not say one is short that is not.
        for &c in window.iter().chain(&added) {
            self.note_room_index(c);
        }
        added
    }
}

/// A packing of a window: per node, the index into the window's allowed options and its pods.
struct Solution {
    /// How much less it costs than the NodeClaims it replaces.
    saved: Price,
    nodes: Vec<(usize, Vec<usize>)>,
}

/// Whether a type no cheaper than an earlier one, with no more room and admitting no more
/// groups, adds nothing the search could use.
fn dominated(types: &[NodeType], price: Price, room: &[i128], admits: &[bool]) -> bool {
    types.iter().any(|t| {
        t.price <= price
            && t.room.iter().zip(room).all(|(a, b)| a >= b)
            && t.admits.iter().zip(admits).all(|(a, b)| *a || !*b)
    })
}
