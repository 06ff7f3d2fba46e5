//! The cheapest set of nodes for a small batch of pods, found exactly.
//!
//! The planner packs greedily, pricing each placement at the margin; on small batches that is
//! usually optimal but not always (a time-sliced GPU mix can cost a quarter more than it must).
//! This module solves the packing itself: pods that request the same amounts form a group, a
//! node is an instance type with room and a price, and the answer is a multiset of nodes, each
//! holding so many pods of each group, of least total price.
//!
//! The search is a dynamic programme over what is left to place. Two facts keep it small:
//! * Every pod must go somewhere, so some node holds a pod of the first group with pods left;
//!   the programme only ever opens such a node, which fixes the order of nodes without losing
//!   any packing.
//! * A node priced at its type holds, without costing more, any further pod that still fits
//!   that type, and the node that pod came from gets no dearer. So only *maximal* nodes are
//!   tried: none of the pods left would still fit its type.
//!
//! The cost of a remaining set depends on nothing else, so it is remembered per set. The search
//! is bounded: a set is only searched for a packing below a cap (at first, the greedy plan's
//! price), branches whose lower bound (the resources asked for, weighed together and priced at
//! the cheapest rate any type offers them at) reaches the cap are cut, and what a failed search proved is remembered
//! as a bound. The work is counted against a budget; a batch over budget is left to the greedy
//! plan. Counting work rather than time keeps plans deterministic: the same input gets
//! the same plan on a loaded machine as on an idle one.
//!
//! Why not a MILP solver: HiGHS builds from C++ (minutes of build on small CI machines) and
//! bounds its runs by time, which would make plans depend on machine load; the pure-Rust
//! MILP solvers take a model, and the strong model for bin packing is this one (nodes as
//! patterns of pods), so the patterns would have to be enumerated here anyway.

use std::collections::HashMap;

use joiner_model::Price;

use super::resources;

/// An instance type the batch may be packed onto.
#[derive(Debug, Clone)]
pub struct NodeType {
    pub price: Price,
    /// Room for pods: one amount per resource, as the groups' requests.
    pub room: Vec<i128>,
    /// Per group: whether a pod of the group may run on this type at all (beyond room).
    pub admits: Vec<bool>,
}

/// A batch: groups of identical pods and the types they may go to, cheapest first.
#[derive(Debug, Clone)]
pub struct Problem {
    /// Per group: what one pod requests.
    pub requests: Vec<Vec<i128>>,
    /// Per group: how many pods.
    pub counts: Vec<u32>,
    /// Cheapest first; among types of one price the earlier is taken.
    pub types: Vec<NodeType>,
}

/// One node of a packing: its type (index into [`Problem::types`]) and pods per group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub node_type: usize,
    pub counts: Vec<u32>,
}

/// The packing found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packing {
    pub price: Price,
    pub nodes: Vec<Node>,
}

/// What a search came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Solved {
    /// The cheapest packing there is, and it costs less than asked.
    Optimal(Packing),
    /// No packing costs less than asked (with [`Price::MAX`] asked: none exists).
    NoneCheaper,
    /// The search needed more work than it was given.
    OverBudget,
}

/// What is known of the least price that clears one remaining set.
#[derive(Debug, Clone)]
enum Known {
    /// Exactly this, starting with this node.
    Exact(Price, Node),
    /// At least this.
    AtLeast(Price),
}

struct OverBudget;

struct Search<'p> {
    problem: &'p Problem,
    memo: HashMap<Vec<u32>, Known>,
    /// Per weighing of the resources, per group: what one pod costs at least (see
    /// [`pod_values`]).
    values: Vec<Vec<f64>>,
    /// The most room any type has of each resource: contents that do not fit it fit nothing.
    widest: Vec<i128>,
    /// Work done, and the most allowed.
    work: u64,
    budget: u64,
}

/// Work a caller allows a series of searches, in units of [`solve`]; each search takes what it
/// uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub left: u64,
}

/// Solves `problem` exactly: the cheapest packing if it costs less than `below`, within the
/// budget's units of work (a count of a group tried while building a node's contents, or a
/// type looked at for a node: each costs about the same, some tens of nanoseconds).
pub fn solve(problem: &Problem, below: Price, budget: &mut Budget) -> Solved {
    let values = pod_values(problem);
    let mut search = Search {
        problem,
        memo: HashMap::new(),
        widest: (0..problem.requests.first().map_or(0, Vec::len))
            .map(|k| problem.types.iter().map(|t| t.room[k]).max().unwrap_or(0))
            .collect(),
        values,
        work: 0,
        budget: budget.left,
    };
    let outcome = search.best(&problem.counts, below);
    budget.left = budget.left.saturating_sub(search.work);
    match outcome {
        Err(OverBudget) => Solved::OverBudget,
        Ok(Known::AtLeast(_)) => Solved::NoneCheaper,
        Ok(Known::Exact(price, _)) => {
            let mut nodes = Vec::new();
            let mut left = problem.counts.clone();
            while let Some(Known::Exact(_, node)) = search.memo.get(&left) {
                for (l, c) in left.iter_mut().zip(&node.counts) {
                    *l -= c;
                }
                nodes.push(node.clone());
            }
            Solved::Optimal(Packing { price, nodes })
        }
    }
}

impl Search<'_> {
    /// The least price that clears `left` if it is below `cap`; otherwise a bound at or above
    /// `cap`. Exact answers are remembered and reused under any cap, bounds under higher caps.
    fn best(&mut self, left: &[u32], cap: Price) -> Result<Known, OverBudget> {
        let Some(first) = left.iter().position(|&c| c > 0) else {
            let empty = Node {
                node_type: usize::MAX,
                counts: Vec::new(),
            };
            return Ok(if cap > Price::ZERO {
                Known::Exact(Price::ZERO, empty)
            } else {
                Known::AtLeast(Price::ZERO)
            });
        };
        match self.memo.get(left) {
            Some(Known::Exact(price, node)) if *price < cap => {
                return Ok(Known::Exact(*price, node.clone()));
            }
            Some(Known::Exact(price, _)) => return Ok(Known::AtLeast(*price)),
            Some(Known::AtLeast(bound)) if *bound >= cap => return Ok(Known::AtLeast(*bound)),
            _ => {}
        }
        let floor = self.lower_bound(left);
        if floor >= cap {
            return Ok(self.remember_bound(left, floor));
        }
        let mut nodes = self.maximal_nodes(left, first)?;
        self.order_by_value(&mut nodes);
        let mut best: Option<(Price, Node)> = None;
        let mut limit = cap;
        // The least bound among the branches that could not beat `limit`.
        let mut failed = Price::MAX;
        for node in nodes {
            let price = self.problem.types[node.node_type].price;
            let rest: Vec<u32> = left.iter().zip(&node.counts).map(|(l, c)| l - c).collect();
            let bound = price.saturating_add(self.lower_bound(&rest));
            if bound >= limit {
                failed = failed.min(bound);
                continue;
            }
            match self.best(&rest, limit.saturating_sub(price))? {
                Known::Exact(after, _) => {
                    limit = price.saturating_add(after);
                    best = Some((limit, node));
                }
                Known::AtLeast(after) => failed = failed.min(price.saturating_add(after)),
            }
        }
        Ok(match best {
            Some((price, node)) => {
                self.memo
                    .insert(left.to_vec(), Known::Exact(price, node.clone()));
                Known::Exact(price, node)
            }
            None => self.remember_bound(left, failed.max(floor)),
        })
    }

    fn remember_bound(&mut self, left: &[u32], bound: Price) -> Known {
        let entry = self
            .memo
            .entry(left.to_vec())
            .or_insert(Known::AtLeast(bound));
        if let Known::AtLeast(known) = entry {
            *known = (*known).max(bound);
        }
        Known::AtLeast(bound)
    }

    /// No packing of `left` costs less (see [`pod_values`]).
    fn lower_bound(&self, left: &[u32]) -> Price {
        let bound = self
            .values
            .iter()
            .map(|v| {
                v.iter()
                    .zip(left)
                    .map(|(v, &c)| v * f64::from(c))
                    .sum::<f64>()
            })
            .fold(0.0, f64::max);
        // Rounded down, and a hair more, so float error never lifts it above the truth.
        Price::from_nano_usd((bound * (1.0 - 1e-9)).floor() as i64)
    }

    /// Cheapest per share of the work first, so good packings are found early and bound the
    /// rest: a node's value is the lower bound of the pods it takes.
    fn order_by_value(&self, nodes: &mut [Node]) {
        let mut keyed: Vec<(f64, usize)> = nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let value = self.lower_bound(&node.counts).nano_usd().max(1) as f64;
                let price = self.problem.types[node.node_type].price.nano_usd() as f64;
                (price / value, i)
            })
            .collect();
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let sorted: Vec<Node> = keyed.iter().map(|&(_, i)| nodes[i].clone()).collect();
        nodes.clone_from_slice(&sorted);
    }

    /// Every node holding at least one pod of group `first` and only pods in `left` that is
    /// maximal for its cheapest type, in a fixed order (more of earlier groups first).
    fn maximal_nodes(&mut self, left: &[u32], first: usize) -> Result<Vec<Node>, OverBudget> {
        let width = self.problem.requests.first().map_or(0, Vec::len);
        let mut out = Vec::new();
        let mut counts = vec![0; left.len()];
        let mut used = vec![0i128; width];
        self.extend(left, first, first, &mut counts, &mut used, &mut out)?;
        Ok(out)
    }

    fn extend(
        &mut self,
        left: &[u32],
        first: usize,
        group: usize,
        counts: &mut Vec<u32>,
        used: &mut Vec<i128>,
        out: &mut Vec<Node>,
    ) -> Result<(), OverBudget> {
        if group == left.len() {
            if self.work > self.budget {
                return Err(OverBudget);
            }
            if let Some(t) = self.cheapest_holding(counts, used)
                && self.is_maximal(left, counts, used, t)
            {
                out.push(Node {
                    node_type: t,
                    counts: counts.clone(),
                });
            }
            return Ok(());
        }
        let least = u32::from(group == first);
        let problem = self.problem;
        let request = &problem.requests[group];
        if group + 1 == left.len() {
            // The last group: a maximal node holds as many as its type takes (none where the
            // type refuses the group), so only those counts, one per type, need trying.
            let mut takes: Vec<u32> = problem
                .types
                .iter()
                .filter_map(|t| {
                    let limit = if t.admits[group] { left[group] } else { 0 };
                    most_that_fit(used, request, &t.room, limit)
                })
                .filter(|&k| k >= least)
                .collect();
            takes.sort_unstable_by(|a, b| b.cmp(a));
            takes.dedup();
            for k in takes {
                add_times(used, request, i128::from(k));
                counts[group] = k;
                self.extend(left, first, group + 1, counts, used, out)?;
                add_times(used, request, -i128::from(k));
            }
            counts[group] = 0;
            return Ok(());
        }
        for k in (least..=left[group]).rev() {
            self.work += 1;
            add_times(used, request, i128::from(k));
            counts[group] = k;
            if k == 0 || resources::fits_in(used, &self.widest) {
                self.extend(left, first, group + 1, counts, used, out)?;
            }
            add_times(used, request, -i128::from(k));
        }
        counts[group] = 0;
        Ok(())
    }

    /// The first (cheapest) type that admits every group in `counts` and has room for `used`.
    /// Each type looked at counts as a unit of work.
    fn cheapest_holding(&mut self, counts: &[u32], used: &[i128]) -> Option<usize> {
        let found = self.problem.types.iter().position(|t| {
            resources::fits_in(used, &t.room)
                && counts.iter().zip(&t.admits).all(|(&c, &ok)| c == 0 || ok)
        });
        self.work += found.map_or(self.problem.types.len(), |t| t + 1) as u64;
        found
    }

    /// Whether no pod left over (of any group) would still fit type `t` alongside `used`.
    fn is_maximal(&self, left: &[u32], counts: &[u32], used: &[i128], t: usize) -> bool {
        let node_type = &self.problem.types[t];
        (0..left.len()).all(|g| {
            counts[g] == left[g]
                || !node_type.admits[g]
                || resources::first_shortfall(used, &self.problem.requests[g], &node_type.room)
                    .is_some()
        })
    }
}

/// Lower bounds on what pods cost, one list per weighing of the resources: weigh each
/// resource by `w`, and every node of type `t` offers `w . room(t)` for its price, so `n` pods
/// of group `g` cost at least `n * (w . request(g)) * min over t of price(t) / (w . room(t))`.
/// The best weighing is the bound of the linear relaxation (by duality); a grid of weighings
/// over the resources asked for comes close to it, and the bound of a set of pods is then the
/// largest sum, read off in a few multiplications per weighing.
fn pod_values(problem: &Problem) -> Vec<Vec<f64>> {
    let width = problem.requests.first().map_or(0, Vec::len);
    // Resources asked for, each scaled by the batch's total demand so the grid is even.
    let asked: Vec<(usize, f64)> = (0..width)
        .filter_map(|k| {
            let demand: i128 = problem
                .requests
                .iter()
                .zip(&problem.counts)
                .map(|(r, &c)| r[k] * i128::from(c))
                .sum();
            (demand > 0).then(|| (k, 1.0 / demand as f64))
        })
        .collect();
    let steps = if asked.len() <= 4 { 4 } else { 1 };
    let mut weighings = Vec::new();
    grid(asked.len(), steps, &mut Vec::new(), &mut weighings);
    weighings
        .iter()
        .filter_map(|w| {
            let weigh = |amounts: &[i128]| -> f64 {
                asked
                    .iter()
                    .zip(w)
                    .map(|(&(k, scale), &part)| amounts[k].max(0) as f64 * scale * f64::from(part))
                    .sum()
            };
            let rate = problem
                .types
                .iter()
                .filter_map(|t| {
                    let room = weigh(&t.room);
                    (room > 0.0).then(|| t.price.nano_usd() as f64 / room)
                })
                .min_by(f64::total_cmp)?;
            Some(problem.requests.iter().map(|r| weigh(r) * rate).collect())
        })
        .collect()
}

/// Every way to share `steps` parts among `n` resources (each weighing of a grid on the
/// simplex), plus, with one part, each resource alone.
fn grid(n: usize, steps: u32, prefix: &mut Vec<u32>, out: &mut Vec<Vec<u32>>) {
    let used: u32 = prefix.iter().sum();
    if prefix.len() + 1 == n {
        prefix.push(steps - used);
        out.push(prefix.clone());
        prefix.pop();
        return;
    }
    if n == 0 {
        return;
    }
    for part in 0..=steps - used {
        prefix.push(part);
        grid(n, steps, prefix, out);
        prefix.pop();
    }
}

/// How many more pods requesting `request` fit in `room` beside `used`, at most `limit`;
/// `None` when `used` itself does not fit.
fn most_that_fit(used: &[i128], request: &[i128], room: &[i128], limit: u32) -> Option<u32> {
    let mut most = i128::from(limit);
    for ((u, r), c) in used.iter().zip(request).zip(room) {
        if *u > 0 && u > c {
            return None;
        }
        if *r > 0 {
            most = most.min((c - u).max(0) / r);
        }
    }
    u32::try_from(most).ok()
}

fn add_times(used: &mut [i128], request: &[i128], times: i128) {
    for (u, r) in used.iter_mut().zip(request) {
        *u += r * times;
    }
}

#[cfg(test)]
mod tests;
