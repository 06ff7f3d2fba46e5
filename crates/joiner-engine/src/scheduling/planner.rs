//! The planner: places pending pods and decides which NodeClaims to launch.
//!
//! Pods are taken largest first (GPU and other extended resources, then CPU, then memory).
//! Each goes, in this order of preference, to
//! 1. an existing node where it fits (costs nothing),
//! 2. a NodeClaim planned earlier in this run whose cheapest fitting instance type still holds
//!    it (costs nothing),
//! 3. whichever is cheaper of: growing a planned NodeClaim to a larger instance type (the price
//!    difference), or a new NodeClaim in the highest-weight NodePool that can take it (the
//!    price of the cheapest instance type that holds the pod).
//!
//! Karpenter keeps adding pods to an in-flight NodeClaim while any instance type can still
//! hold them all, then launches the cheapest type that does; eight one-GPU pods thus become one
//! eight-GPU node even when eight one-GPU nodes cost far less. Comparing the marginal price of
//! each placement avoids that: a pod joins a node only when that is no dearer than a node of
//! its own. The tests compare the result with an exact search on small inputs.
//!
//! Preferences (preferred node and pod affinity, `ScheduleAnyway` spread) are first treated as
//! requirements; a pod that cannot be placed that way is placed without them.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;

use joiner_model::Price;
use joiner_model::settings::MinValuesPolicy;
use joiner_model::wellknown::labels;

use super::SchedulingInput;

use super::resources::{self, Amounts, ResourceIndex};
use super::taints;
use super::topology::{Constraint, Domains, Topology};
use crate::plan::{Plan, Unschedulable};
use crate::requirements::{Labels, Requirements};
use dra::Dra;
use joiner_dra::ClaimAllocation;

mod candidates;
mod dra;
mod exact;
mod explain;
mod finish;
mod pools;
mod rejections;
mod reservations;
mod room;
mod statics;

use pools::{Pool, build_pool, cheapest_offering, copies_that_fit, option_price};
use rejections::{NewRejections, Rejected, Rejection, clear_among, clear_bit, set_bit, with_bits};
use reservations::Reservations;
pub use statics::static_claims;

/// How many of the most recent compatible NodeClaims are considered for growing to a larger
/// instance type. Growing is rarely cheaper than a new node except for the newest, least full
/// NodeClaims; the bound keeps planning linear in the number of pods.
const GROW_WINDOW: usize = 16;

#[derive(Clone)]
struct ExistingState {
    name: String,
    labels: Rc<Labels>,
    free: Amounts,
    zone: Option<u32>,
    /// Taken away for a what-if (consolidation): takes no pods.
    removed: bool,
}

/// Options of a pool (by index) with their cheapest allowed offering price, cheapest first.
type Allowed = Vec<(Price, usize)>;

/// A pool's requirements with the zone fixed, and the options they allow.
type Pinned = (Requirements, Rc<Allowed>);

/// Cache of [`Planner::allowed_for`]: per pool, by requirements.
type AllowedCache = Vec<HashMap<Requirements, Rc<Allowed>>>;

#[derive(Clone)]
struct Claim {
    pool: usize,
    name: String,
    requirements: Requirements,
    /// Allowed options (index into the pool's options) with their cheapest allowed offering
    /// price, cheapest first.
    allowed: Rc<Allowed>,
    /// Index into `allowed` of the cheapest option that holds `used`.
    chosen: usize,
    used: Amounts,
    pods: Vec<usize>,
    zone: Option<u32>,
    /// Holds DRA allocations, so its instance type (and so its devices) may not change.
    devices_pinned: bool,
    /// The capacity reservation it has an instance of booked, if its offering is reserved.
    reservation: Option<String>,
}

impl Claim {
    fn price(&self) -> Price {
        self.allowed
            .get(self.chosen)
            .map(|a| a.0)
            .unwrap_or(Price::MAX)
    }
}

/// The node-requirement alternatives of a scheduling class, the zones they allow, and whether
/// its pods have pod affinity.
struct ClassView {
    alts: Vec<Requirements>,
    zones: Vec<u32>,
    has_affinity: bool,
}

/// A placement found for a pod, not yet applied.
enum Placement {
    /// An existing node, with the DRA allocations the pod's claims get there.
    Existing(usize, Vec<ClaimAllocation>),
    Claim(ClaimChange),
    New(NewClaim),
}

struct ClaimChange {
    claim: usize,
    requirements: Option<Requirements>,
    allowed: Option<Rc<Allowed>>,
    chosen: usize,
    zone: Option<u32>,
    delta: Price,
    allocations: Vec<ClaimAllocation>,
}

struct NewClaim {
    pool: usize,
    requirements: Requirements,
    allowed: Rc<Allowed>,
    chosen: usize,
    zone: Option<u32>,
    price: Price,
    /// How many pending pods like this one the new node is expected to take.
    copies: u32,
}

/// Cloning copies what placing pods changes and shares the rest, so what-if questions
/// (consolidation) start from one planner with every bound pod in place.
#[derive(Clone)]
struct Planner<'a> {
    input: &'a SchedulingInput,
    index: ResourceIndex,
    requests: Rc<Vec<Amounts>>,
    pools: Vec<Pool<'a>>,
    /// Pools in the order new NodeClaims try them: weight descending, then name.
    pool_order: Vec<usize>,
    /// Shared with the clones a consolidation what-if makes, and copied only where that plan
    /// places a pod or removes a node: cloning ten thousand nodes' states for every what-if
    /// was most of the time of evaluating a large cluster's candidates.
    existing: Vec<Rc<ExistingState>>,
    claims: Vec<Claim>,
    /// Per NodeClaim whose zone is still open: the room its chosen type has left, one
    /// resource after another in one flat array (a NodeClaim's resources at `c * resources`).
    /// A pod that must fix its node's zone never grows such a NodeClaim (a new node serves it
    /// as well), so one without room for it is passed over here, reading a few numbers, rather
    /// than evaluated: a plan of thousands of NodeClaims has most of them full for any one pod.
    open_room: Vec<i128>,
    /// Per NodeClaim: whether its zone is open and [`Planner::open_room`] holds its room.
    open_zone: Vec<bool>,
    /// NodeClaims short of room, for all of them at once ([`room::RoomIndex`]).
    room_index: room::RoomIndex,
    topology: Topology,
    /// Every zone any NodePool or node offers, sorted; topology counts zones by index here.
    zone_names: Vec<String>,
    zone_ids: HashMap<String, u32>,
    /// Per scheduling class (and strictness): existing nodes and NodeClaims that rejected it
    /// for a reason that cannot go away, so later pods of the class skip them.
    rejected: Vec<Rejected>,
    /// The same per shape (a class without its requests), for reasons size does not change.
    rejected_shape: Vec<Rejected>,
    /// Per pod; shared, like `class_of`, by the clones consolidation's what-ifs make.
    shape_of: Rc<Vec<usize>>,
    class_of: Rc<Vec<usize>>,
    /// Per scheduling class: pending pods not yet placed.
    remaining: Vec<u32>,
    /// Per scheduling class and strictness: what every pod of the class computes alike.
    class_views: RefCell<Vec<Option<Rc<ClassView>>>>,
    allowed_cache: RefCell<AllowedCache>,
    pin_cache: RefCell<HashMap<(usize, u32), Pinned>>,
    bindings: Vec<(usize, String)>,
    dra: Option<Dra>,
    /// Per existing node: the bound pods on it.
    bound: Rc<Vec<Vec<usize>>>,
    /// Capacity reservations and how many instances of each the NodeClaims have booked.
    reservations: Reservations,
}

/// The orders in which pending pods may be taken. Packing largest-first is a heuristic, and which
/// measure of "largest" packs best depends on the mix of pods and instance types, so small
/// batches are planned in each order and the cheapest plan wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    /// By the largest share of any one resource relative to the biggest node on offer.
    DominantShare,
    /// GPUs and other extended resources first, then CPU, then memory (Karpenter's order with
    /// extended resources ahead).
    ExtendedFirst,
}

/// Batches up to this many pending pods are planned in every [`Order`].
const MULTI_ORDER_LIMIT: usize = 2_000;

/// What a plan computes beyond placing pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Passes {
    /// The exact packing pass (see [`exact`]).
    exact: bool,
    /// The reason of each unschedulable pod (empty when not asked).
    reasons: bool,
}

/// Plans the given input.
pub fn schedule(input: &SchedulingInput) -> Plan {
    schedule_with(
        input,
        Passes {
            exact: true,
            reasons: true,
        },
    )
}

/// Which pending pods the plan places, and where, without the exact pass and with every
/// unschedulable pod's reason left empty: for a caller that only asks whether pods would be
/// placed (the exact pass moves pods between new nodes, never in or out of the plan), at a
/// fraction of the cost when thousands of pods cannot be placed.
pub fn placements(input: &SchedulingInput) -> Plan {
    schedule_with(
        input,
        Passes {
            exact: false,
            reasons: false,
        },
    )
}

/// Plans in each order greedily and keeps the best plan; with `exact`, that order is then
/// planned again with the exact pass, which only ever makes a plan cheaper, so it runs once.
fn schedule_with(input: &SchedulingInput, passes: Passes) -> Plan {
    let pending = input.pods.iter().filter(|p| p.node_name.is_none()).count();
    let orders: &[Order] = if pending <= MULTI_ORDER_LIMIT {
        &[Order::DominantShare, Order::ExtendedFirst]
    } else {
        &[Order::DominantShare]
    };
    let single = orders.len() == 1;
    let mut best: Option<(Order, Plan)> = None;
    for &order in orders {
        let first = Passes {
            exact: passes.exact && single,
            ..passes
        };
        let plan = schedule_in_order(input, order, first);
        // Fewest unschedulable pods first, then the lowest price; ties keep the earlier order.
        let better = best.as_ref().is_none_or(|(_, b)| {
            (plan.unschedulable.len(), plan.total_price_per_hour)
                < (b.unschedulable.len(), b.total_price_per_hour)
        });
        if better {
            best = Some((order, plan));
        }
    }
    match best {
        Some((order, plan)) if passes.exact && !single && !plan.node_claims.is_empty() => {
            schedule_in_order(input, order, passes)
        }
        Some((_, plan)) => plan,
        None => Plan::default(),
    }
}

/// The plan without the exact pass (see [`exact`]): what the greedy planner alone makes of
/// the input, for benchmarks and comparisons.
pub fn schedule_greedy(input: &SchedulingInput) -> Plan {
    schedule_with(
        input,
        Passes {
            exact: false,
            reasons: true,
        },
    )
}

/// The full account of one pod, for `joiner explain pod`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodAccount {
    /// `namespace/name`.
    pub pod: String,
    /// Where the plan puts the pod, or why it cannot.
    pub outcome: String,
    /// One line per NodePool and instance type: what a new node of that type makes of the
    /// pod, on its own.
    pub instance_types: Vec<String>,
    /// For a pod placed on a new NodeClaim: how that NodeClaim's batch was packed, and what
    /// the exact pass saved over the greedy packing.
    pub packing: Option<crate::plan::PackedBatch>,
}

/// Explains one pending pod (`namespace/name`); `None` if there is no such pod.
pub fn explain_pod(input: &SchedulingInput, pod: &str) -> Option<PodAccount> {
    let p = input.pods.iter().position(|x| x.key() == pod)?;
    let plan = schedule(input);
    let outcome = match (
        plan.bindings.iter().find(|b| b.pod == pod),
        plan.unschedulable.iter().find(|u| u.pod == pod),
    ) {
        (Some(b), _) => format!("placed on {}", b.node),
        (None, Some(u)) => format!("unschedulable: {}", u.reason),
        (None, None) => match &input.pods[p].node_name {
            Some(node) => format!("already bound to {node}"),
            None => "not planned".into(),
        },
    };
    let packing = plan
        .bindings
        .iter()
        .find(|b| b.pod == pod)
        .and_then(|b| {
            plan.packing
                .iter()
                .find(|batch| batch.node_claims.contains(&b.node))
        })
        .cloned();
    let planner = Planner::new(input);
    Some(PodAccount {
        pod: pod.to_string(),
        outcome,
        instance_types: explain::account(&planner, p),
        packing,
    })
}

fn schedule_in_order(input: &SchedulingInput, order: Order, passes: Passes) -> Plan {
    let planner = Planner::new(input);
    let pending: Vec<usize> = (0..input.pods.len())
        .filter(|&i| input.pods[i].node_name.is_none())
        .collect();
    planner.plan_pods(pending, order, passes)
}

/// A planner with every bound pod in place and nothing pending: the starting point for
/// asking, many times over, where the pods of some nodes would go if those nodes were gone.
pub struct Baseline<'a> {
    planner: Planner<'a>,
}

impl<'a> Baseline<'a> {
    /// Pending pods in `input` are left out: only bound pods are placed.
    pub fn new(input: &'a SchedulingInput) -> Baseline<'a> {
        Baseline {
            planner: Planner::new(input),
        }
    }

    /// The pods bound to existing node `n` (indices into the input's pods), DaemonSet pods
    /// included.
    pub fn pods_on(&self, n: usize) -> &[usize] {
        self.planner.bound.get(n).map_or(&[], Vec::as_slice)
    }

    /// Plans the pods of the existing nodes `nodes` (indices into the input's nodes) as if
    /// those nodes were gone: their pods (not their DaemonSet pods) become pending, their DRA
    /// claims are released, and the plan says where they go and what new nodes they need.
    pub fn without(&self, nodes: &[usize]) -> Plan {
        let mut planner = self.planner.clone();
        let mut moved = Vec::new();
        for &n in nodes {
            moved.extend(planner.remove_existing(n));
        }
        planner.plan_pods(
            moved,
            Order::DominantShare,
            Passes {
                exact: false,
                reasons: true,
            },
        )
    }
}

impl<'a> Planner<'a> {
    fn new(input: &'a SchedulingInput) -> Planner<'a> {
        // Every resource name in the input, indexed in name order so that nothing (the first
        // resource a reason names, say) depends on the order of the input.
        let mut names = BTreeSet::new();
        let lists = input
            .pods
            .iter()
            .map(|p| &p.requests)
            .chain(input.daemon_sets.iter().map(|d| &d.pod.requests))
            .chain(
                input
                    .nodes
                    .iter()
                    .flat_map(|n| [&n.allocatable, &n.capacity]),
            )
            .chain(input.pools.iter().map(|p| &p.limits))
            .chain(
                input
                    .pools
                    .iter()
                    .flat_map(|p| p.options.iter().flat_map(|o| [&o.allocatable, &o.capacity])),
            );
        for list in lists {
            names.extend(list.keys().cloned());
        }
        let mut index = ResourceIndex::default();
        index.intern_names(names);
        if let Some(dra) = &input.dra {
            index.delegate_to_dra(dra.extended.values().flatten().map(|r| r.resource.as_str()));
        }
        let requests: Vec<Amounts> = input
            .pods
            .iter()
            .map(|p| index.amounts(&p.requests))
            .collect();
        let topology = Topology::new(&input.pods);

        let mut zones = BTreeSet::new();
        let pools: Vec<Pool> = input
            .pools
            .iter()
            .map(|p| build_pool(p, input, &index, &mut zones))
            .collect();
        zones.extend(
            input
                .nodes
                .iter()
                .filter_map(|n| n.labels.get(labels::ZONE).cloned()),
        );
        let zone_names: Vec<String> = zones.into_iter().collect();
        let zone_ids: HashMap<String, u32> = zone_names
            .iter()
            .enumerate()
            .map(|(i, z)| (z.clone(), i as u32))
            .collect();
        let mut pool_order: Vec<usize> = (0..pools.len()).collect();
        pool_order.sort_by(|&a, &b| {
            input.pools[b]
                .weight
                .cmp(&input.pools[a].weight)
                .then_with(|| input.pools[a].name.cmp(&input.pools[b].name))
        });

        let room_index = room::RoomIndex::new(&requests, index.len());
        let mut planner = Planner {
            input,
            requests: Rc::new(requests),
            pools,
            pool_order,
            existing: Vec::new(),
            claims: Vec::new(),
            open_room: Vec::new(),
            open_zone: Vec::new(),
            room_index,
            topology,
            zone_names,
            zone_ids,
            rejected: Vec::new(),
            rejected_shape: Vec::new(),
            shape_of: Rc::new(Vec::new()),
            class_of: Rc::new(Vec::new()),
            remaining: Vec::new(),
            class_views: RefCell::new(Vec::new()),
            allowed_cache: RefCell::new(vec![HashMap::new(); input.pools.len()]),
            pin_cache: RefCell::new(HashMap::new()),
            bindings: Vec::new(),
            bound: Rc::new(Vec::new()),
            reservations: Reservations::of(input),
            dra: input
                .dra
                .as_ref()
                .map(|d| Dra::new(d, &input.pools, &input.nodes, input.pods.len())),
            index,
        };
        planner.classify();
        planner.load_existing();
        planner
    }

    /// Pods with identical scheduling inputs form a class; a node that rejected a pod for a
    /// reason that cannot go away rejects every pod of its class.
    fn classify(&mut self) {
        let mut ids: HashMap<String, usize> = HashMap::new();
        let mut shapes: HashMap<String, usize> = HashMap::new();
        let (mut class_of, mut shape_of) = (Vec::new(), Vec::new());
        for (i, p) in self.input.pods.iter().enumerate() {
            // The shape: what decides rejections that size does not change.
            let shape = format!(
                "{:?}|{:?}|{:?}|{:?}|{:?}|{}|{:?}",
                p.node_requirements,
                p.preferred_node_requirements,
                p.tolerations,
                p.spread,
                p.affinity,
                p.namespace,
                p.labels
            );
            // The class: the shape, the requests and the DRA claims.
            let dra = self
                .dra
                .as_ref()
                .map(|d| d.class_key(i))
                .unwrap_or_default();
            let key = format!("{:?}|{shape}|{dra}", self.requests[i]);
            let next = ids.len();
            let id = *ids.entry(key).or_insert(next);
            class_of.push(id);
            let next = shapes.len();
            let id = *shapes.entry(shape).or_insert(next);
            shape_of.push(id);
        }
        self.class_of = Rc::new(class_of);
        self.shape_of = Rc::new(shape_of);
        self.rejected_shape = (0..shapes.len() * 2).map(|_| Rejected::default()).collect();
        let classes = ids.len();
        self.remaining = vec![0; classes];
        self.rejected = (0..classes * 2).map(|_| Rejected::default()).collect();
        *self.class_views.borrow_mut() = vec![None; classes * 2];
    }

    /// Places `pending` pods in `order` and returns the plan; with `passes.exact`, the new
    /// NodeClaims are then packed again exactly where that is possible and cheaper (see
    /// [`exact`]).
    fn plan_pods(mut self, mut pending: Vec<usize>, order: Order, passes: Passes) -> Plan {
        self.sort_pending(&mut pending, order);
        for &p in &pending {
            self.remaining[self.class_of[p]] += 1;
        }
        // Pods whose affinity needs other pods placed first are retried while progress is made.
        let mut failed = Vec::new();
        loop {
            let mut progress = false;
            for &p in &pending {
                if self.place(p) {
                    progress = true;
                } else {
                    failed.push(p);
                }
            }
            if failed.is_empty() || !progress {
                break;
            }
            pending = std::mem::take(&mut failed);
        }
        // Pods of one class fail for the same reasons, so each class is explained once
        // (thousands of replicas of one workload that cannot be placed cost one explanation).
        // Pods with DRA claims are explained one by one: their reasons name their own claims.
        let mut explained: HashMap<usize, String> = HashMap::new();
        let unschedulable: Vec<Unschedulable> = failed
            .iter()
            .map(|&p| {
                let reason = if !passes.reasons {
                    String::new()
                } else if self.dra.as_ref().is_some_and(|d| d.uses_claims(p)) {
                    self.explain(p)
                } else {
                    explained
                        .entry(self.class_of[p])
                        .or_insert_with(|| self.explain(p))
                        .clone()
                };
                Unschedulable {
                    pod: self.input.pods[p].key(),
                    reason,
                }
            })
            .collect();
        let packing = if passes.exact {
            self.pack_exactly()
        } else {
            Vec::new()
        };
        let mut plan = self.finish(unschedulable);
        plan.packing = packing;
        plan
    }

    /// Takes existing node `n` away: its pods leave its domains and give back its room, its
    /// DRA claims are released, and it counts no more against its NodePool's limits. Returns
    /// its pods (not DaemonSet pods), now pending.
    fn remove_existing(&mut self, n: usize) -> Vec<usize> {
        let Some(node) = self.existing.get_mut(n).map(Rc::make_mut) else {
            return Vec::new();
        };
        if node.removed {
            return Vec::new();
        }
        node.removed = true;
        let at = Domains {
            hostname: self.node_domain(n),
            zone: self.existing[n].zone,
        };
        let node_input = &self.input.nodes[n];
        if let Some(pool) = node_input
            .node_pool
            .as_ref()
            .and_then(|p| self.pools.iter_mut().find(|x| &x.input.name == p))
        {
            resources::sub(
                &mut pool.usage,
                &self.index.node_usage(&node_input.capacity),
            );
        }
        let mut moved = Vec::new();
        for &p in self.bound.get(n).into_iter().flatten() {
            self.topology.unplace(p, at);
            if self.input.pods[p].daemon_set.is_none() {
                moved.push(p);
                if let Some(dra) = &mut self.dra {
                    dra.release_claims_of(p);
                }
            }
        }
        moved
    }

    fn load_existing(&mut self) {
        let mut by_name: HashMap<&str, usize> = HashMap::new();
        for (i, n) in self.input.nodes.iter().enumerate() {
            by_name.insert(&n.name, i);
            let zone = n
                .labels
                .get(labels::ZONE)
                .and_then(|z| self.zone_ids.get(z))
                .copied();
            self.existing.push(Rc::new(ExistingState {
                name: n.name.clone(),
                labels: Rc::new(n.labels.clone()),
                free: self.index.allocatable(&n.allocatable),
                zone,
                removed: false,
            }));
            if let Some(pool) = n
                .node_pool
                .as_ref()
                .and_then(|p| self.pools.iter_mut().find(|x| &x.input.name == p))
            {
                resources::add(&mut pool.usage, &self.index.node_usage(&n.capacity));
            }
        }
        // Bound pods consume their node and count in its domains.
        let mut bound = vec![Vec::new(); self.existing.len()];
        let mut daemon_present: BTreeSet<(String, String)> = BTreeSet::new();
        for (i, p) in self.input.pods.iter().enumerate() {
            let Some(node) = p.node_name.as_deref().and_then(|n| by_name.get(n).copied()) else {
                continue;
            };
            if let Some(ds) = &p.daemon_set {
                daemon_present.insert((ds.clone(), self.existing[node].name.clone()));
            }
            resources::sub(
                &mut Rc::make_mut(&mut self.existing[node]).free,
                &self.requests[i],
            );
            bound[node].push(i);
            self.topology.place(
                i,
                Domains {
                    hostname: node as u32,
                    zone: self.existing[node].zone,
                },
            );
        }
        self.bound = Rc::new(bound);
        // DaemonSet pods land on every node they match, unless already listed as bound pods.
        for d in &self.input.daemon_sets {
            let req = self.index.amounts(&d.pod.requests);
            for (n, node) in self.input.nodes.iter().enumerate() {
                let name = format!("{}/{}", d.pod.namespace, d.pod.name);
                if daemon_present.contains(&(name, node.name.clone())) {
                    continue;
                }
                if taints::first_untolerated(&node.taints, &d.pod.tolerations).is_none()
                    && d.pod
                        .node_requirements
                        .iter()
                        .any(|r| r.matches(&node.labels))
                {
                    resources::sub(&mut Rc::make_mut(&mut self.existing[n]).free, &req);
                }
            }
        }
    }

    fn sort_pending(&self, pending: &mut [usize], order: Order) {
        let cpu = self.index.position("cpu");
        let mem = self.index.position("memory");
        let extended: Vec<usize> = (0..self.index.len())
            .filter(|&i| {
                !matches!(
                    self.index.name(i),
                    "cpu" | "memory" | "pods" | "ephemeral-storage"
                )
            })
            .collect();
        // The biggest room any instance type offers, per resource, for dominant shares.
        let mut biggest = vec![0i128; self.index.len()];
        for opt in self.pools.iter().flat_map(|p| p.options.iter()) {
            for (b, r) in biggest.iter_mut().zip(&opt.room) {
                *b = (*b).max(*r);
            }
        }
        // Computed for the pending pods only: a consolidation what-if plans a node's few pods
        // in an input of tens of thousands.
        let dominant = |p: usize| -> i128 {
            if order == Order::ExtendedFirst {
                return 0;
            }
            self.requests[p]
                .iter()
                .zip(&biggest)
                .filter(|(_, b)| **b > 0)
                .map(|(r, b)| r.saturating_mul(1_000_000) / b)
                .max()
                .unwrap_or(0)
        };
        let get = |p: usize, i: Option<usize>| i.map(|i| self.requests[p][i]).unwrap_or(0);
        let ext = |p: usize| extended.iter().map(|&i| self.requests[p][i]).sum::<i128>();
        let buffer = |p: usize| self.input.pods[p].capacity_buffer.is_some();
        let mut keyed: Vec<(i128, usize)> = pending.iter().map(|&p| (dominant(p), p)).collect();
        keyed.sort_by(|&(dominant_a, a), &(dominant_b, b)| {
            // Real pods take the room there is before any buffer's virtual pods do.
            buffer(a)
                .cmp(&buffer(b))
                .then(dominant_b.cmp(&dominant_a))
                .then_with(|| ext(b).cmp(&ext(a)))
                .then_with(|| get(b, cpu).cmp(&get(a, cpu)))
                .then_with(|| get(b, mem).cmp(&get(a, mem)))
                .then_with(|| {
                    self.input.pods[a]
                        .namespace
                        .cmp(&self.input.pods[b].namespace)
                })
                .then_with(|| self.input.pods[a].name.cmp(&self.input.pods[b].name))
        });
        for (slot, (_, p)) in pending.iter_mut().zip(keyed) {
            *slot = p;
        }
    }

    /// The node-requirement alternatives to try: with preferences when `strict`.
    fn alternatives(&self, p: usize, strict: bool) -> Vec<Requirements> {
        let pod = &self.input.pods[p];
        if !strict || pod.preferred_node_requirements.is_empty() {
            return pod.node_requirements.clone();
        }
        // The highest-weight preferred term that is compatible with each required alternative.
        pod.node_requirements
            .iter()
            .map(|alt| {
                pod.preferred_node_requirements
                    .iter()
                    .find_map(|pref| alt.intersect(pref).ok())
                    .unwrap_or_else(|| alt.clone())
            })
            .collect()
    }

    fn has_preferences(&self, p: usize) -> bool {
        let pod = &self.input.pods[p];
        !pod.preferred_node_requirements.is_empty()
            || self.topology.constraints(p).iter().any(|c| !c.hard)
    }

    fn place(&mut self, p: usize) -> bool {
        let attempts: &[bool] = if self.has_preferences(p) {
            &[true, false]
        } else {
            &[false]
        };
        for &strict in attempts {
            let mut rejections = NewRejections::default();
            let found = self.find(p, strict, &mut rejections);
            let s = usize::from(strict);
            self.rejected[self.class_of[p] * 2 + s].absorb(&rejections.class);
            self.rejected_shape[self.shape_of[p] * 2 + s].absorb(&rejections.shape);
            if let Some(placement) = found {
                self.apply(p, placement);
                return true;
            }
        }
        false
    }

    /// Hostname domain number of existing node `n` or NodeClaim `c`.
    fn node_domain(&self, n: usize) -> u32 {
        n as u32
    }

    fn claim_domain(&self, c: usize) -> u32 {
        (self.existing.len() + c) as u32
    }

    /// What every pod of `p`'s class computes alike, computed once.
    fn class_view(&self, p: usize, strict: bool) -> Rc<ClassView> {
        let slot = self.class_of[p] * 2 + usize::from(strict);
        if let Some(Some(view)) = self.class_views.borrow().get(slot) {
            return view.clone();
        }
        let alts = self.alternatives(p, strict);
        let view = Rc::new(ClassView {
            zones: self.pod_zones(&alts),
            alts,
            has_affinity: self
                .topology
                .constraints(p)
                .iter()
                .any(|c| c.kind == Constraint::Affinity),
        });
        if let Some(cell) = self.class_views.borrow_mut().get_mut(slot) {
            *cell = Some(view.clone());
        }
        view
    }

    fn find(&self, p: usize, strict: bool, rejections: &mut NewRejections) -> Option<Placement> {
        let pod = &self.input.pods[p];
        let view = self.class_view(p, strict);
        let (alts, zones, pod_has_affinity) = (&view.alts, &view.zones, view.has_affinity);
        if alts.is_empty() {
            return None;
        }
        let req = &self.requests[p];
        let skip = &self.rejected[self.class_of[p] * 2 + usize::from(strict)];
        let skip_shape = &self.rejected_shape[self.shape_of[p] * 2 + usize::from(strict)];
        // Nodes and NodeClaims whose devices are all taken, for a pod that needs one of its
        // own: each pod with claims of its own makes its own class, so its class's bits
        // would not carry from pod to pod.
        let taken = self.dra.as_ref().and_then(|d| d.taken_for(p));
        let (mut node_bits, mut claim_bits) = (Vec::new(), Vec::new());
        let skip_nodes = with_bits(&skip.nodes, taken.map(|t| &t.nodes[..]), &mut node_bits);
        let skip_claims = with_bits(&skip.claims, taken.map(|t| &t.claims[..]), &mut claim_bits);
        // NodeClaims the pod has no room on and that may not grow for it: passed over without
        // visiting them one by one, and rejected for its class as evaluating each would have
        // (below, for those the search reaches).
        let mut short = Vec::new();
        if !pod_has_affinity {
            self.room_index.short_of(req, &mut short);
            for c in self.claims.len().saturating_sub(GROW_WINDOW)..self.claims.len() {
                clear_bit(&mut short, c);
            }
        }
        let mut merged = Vec::new();
        let skip_claims = with_bits(skip_claims, Some(&short[..]), &mut merged);

        // A pod that must join its peers' node is only asked of their nodes: every other one
        // would refuse it, and a large plan has thousands.
        let hosts = self.topology.required_hosts(p);
        let (host_nodes, host_claims) = match &hosts {
            Some(hosts) => {
                let (nodes, claims): (Vec<usize>, Vec<usize>) = hosts
                    .iter()
                    .map(|&d| d as usize)
                    .partition(|&d| d < self.existing.len());
                let claims: Vec<usize> = claims.iter().map(|d| d - self.existing.len()).collect();
                (Some(nodes), Some(claims))
            }
            None => (None, None),
        };

        // 1. Existing nodes.
        for n in clear_among(
            host_nodes.as_deref(),
            skip_nodes,
            &skip_shape.nodes,
            self.existing.len(),
        ) {
            let node = &self.existing[n];
            if node.removed {
                continue;
            }
            if taints::first_untolerated(&self.input.nodes[n].taints, &pod.tolerations).is_some()
                || !alts.iter().any(|a| a.matches(&node.labels))
            {
                set_bit(&mut rejections.shape.nodes, n);
                continue;
            }
            let at = Domains {
                hostname: self.node_domain(n),
                zone: node.zone,
            };
            match self.topology.check(p, at, strict, zones) {
                Err(v) if v.is_permanent() => set_bit(&mut rejections.shape.nodes, n),
                Err(_) => {}
                Ok(()) if !resources::fits_in(req, &node.free) => {
                    set_bit(&mut rejections.class.nodes, n)
                }
                Ok(()) => match &self.dra {
                    Some(dra) if dra.uses_claims(p) => match dra.fits_existing(p, n) {
                        Some(allocations) => return Some(Placement::Existing(n, allocations)),
                        // Devices only get taken, so this node will not do later either.
                        None => set_bit(&mut rejections.class.nodes, n),
                    },
                    _ => return Some(Placement::Existing(n, Vec::new())),
                },
            }
        }

        // 2. Planned NodeClaims with room; failing that, the cheapest one to grow. Growing
        // only pays when it costs less per pod than a new node, so the new node is priced
        // first and bounds the search.
        let mut growable = Vec::new();
        let must_fix_zone = self.topology.needs_zone(p);
        let (mut found, mut stop) = (None, self.claims.len());
        'claims: for c in clear_among(
            host_claims.as_deref(),
            skip_claims,
            &skip_shape.claims,
            self.claims.len(),
        ) {
            if must_fix_zone && self.open_and_full(c, req) {
                // As evaluating it would find: no room without growing, which it may not.
                set_bit(&mut rejections.class.claims, c);
                continue;
            }
            let claim = &self.claims[c];
            let pool = &self.pools[claim.pool];
            if taints::first_untolerated(&pool.input.taints, &pod.tolerations).is_some() {
                set_bit(&mut rejections.shape.claims, c);
                continue;
            }
            // Pods with affinity may need exactly the node their peers are on to grow.
            let may_grow = self.claims.len() - c <= GROW_WINDOW || pod_has_affinity;
            if !may_grow && !self.claim_has_room(c, p) {
                // As evaluating it would find (room is checked before anything else): no
                // room, and it may not grow. Most of a large plan's NodeClaims are full for
                // any one pod, and each new shape of pod (a workload with labels of its own)
                // meets all of them once.
                set_bit(&mut rejections.class.claims, c);
                continue;
            }
            let (mut never, mut not_now, mut room) = (true, false, false);
            for alt in alts {
                match self.evaluate_claim(p, c, alt, strict, Price::ZERO, zones) {
                    Ok(change) => {
                        (found, stop) = (Some(change), c);
                        break 'claims;
                    }
                    Err(Rejection::NoRoom { growable }) => {
                        never = false;
                        room |= growable;
                    }
                    Err(Rejection::NotNow) => not_now = true,
                    Err(Rejection::Never) => {}
                }
            }
            if may_grow && room {
                growable.push(c);
            } else if never && !not_now {
                set_bit(&mut rejections.shape.claims, c);
            } else if !not_now {
                set_bit(&mut rejections.class.claims, c);
            }
        }
        reject_short(
            &mut rejections.class.claims,
            &short,
            stop,
            host_claims.as_deref(),
        );
        if let Some(change) = found {
            return Some(Placement::Claim(change));
        }
        let new = self.new_claim(p, alts, strict, zones);
        let per_pod = new.as_ref().map_or(Price::MAX, |n| {
            Price::from_nano_usd(n.price.nano_usd() / i64::from(n.copies.max(1)))
        });
        let mut best_grow: Option<ClaimChange> = None;
        // The newest NodeClaims, and for pods with affinity every one that only lacks room.
        let window = if pod_has_affinity {
            usize::MAX
        } else {
            GROW_WINDOW
        };
        for c in growable.into_iter().rev().take(window) {
            let bound = best_grow.as_ref().map_or(per_pod, |b| b.delta.min(per_pod));
            for alt in alts {
                if let Ok(change) = self.evaluate_claim(p, c, alt, strict, bound, zones)
                    && best_grow.as_ref().is_none_or(|b| change.delta < b.delta)
                {
                    best_grow = Some(change);
                }
            }
        }

        match (best_grow, new) {
            // Growing wins when it adds no more than the new node's share per pod.
            (Some(g), Some(n))
                if (g.delta.nano_usd() as i128) * (n.copies as i128)
                    <= n.price.nano_usd() as i128 =>
            {
                Some(Placement::Claim(g))
            }
            (_, Some(n)) => Some(Placement::New(n)),
            (Some(g), None) => Some(Placement::Claim(g)),
            (None, None) => None,
        }
    }

    /// The new NodeClaim a pod would get: in the first NodePool (by weight) that can hold it.
    fn new_claim(
        &self,
        p: usize,
        alts: &[Requirements],
        strict: bool,
        zones: &[u32],
    ) -> Option<NewClaim> {
        self.pool_order.iter().find_map(|&pool| {
            alts.iter()
                .find_map(|alt| self.evaluate_new(p, pool, alt, strict, zones))
        })
    }

    /// Zones a pod may use, for its spread minimum.
    fn pod_zones(&self, alts: &[Requirements]) -> Vec<u32> {
        (0..self.zone_names.len() as u32)
            .filter(|&z| {
                alts.iter().any(|a| {
                    a.get(labels::ZONE)
                        .is_none_or(|r| r.matches(Some(&self.zone_names[z as usize])))
                })
            })
            .collect()
    }

    /// Whether every key the pod requires to be present is one a node of this pool can carry.
    fn defined(&self, pool: &Pool, alt: &Requirements) -> bool {
        alt.iter().all(|(k, r)| {
            !r.requires_presence()
                || labels::defined_by_offering(k)
                || pool.defined_keys.contains(k)
                || pool.options.iter().any(|o| o.labels.contains_key(k))
        })
    }

    /// Whether NodeClaim `c`'s chosen instance type has room for pod `p` as it is, without
    /// growing: the first thing [`Planner::evaluate_claim`] asks when growth is not allowed.
    pub(super) fn claim_has_room(&self, c: usize, p: usize) -> bool {
        let claim = &self.claims[c];
        match claim.allowed.get(claim.chosen) {
            Some(&(_, o)) => self.option_holds_more(&self.pools[claim.pool], o, &claim.used, p),
            None => true,
        }
    }

    /// Whether option `o` holds `used` plus pod `p`, without building the sum.
    fn option_holds_more(&self, pool: &Pool, o: usize, used: &[i128], p: usize) -> bool {
        let opt = &pool.options[o];
        used.iter()
            .zip(&self.requests[p])
            .zip(&opt.room)
            .all(|((u, r), c)| *r == 0 || u + r <= *c)
            && opt
                .at_most_one
                .iter()
                .all(|&r| self.requests[p][r] <= 1_000_000_000)
    }

    fn option_holds(&self, pool: &Pool, o: usize, used: &[i128], p: usize) -> bool {
        let opt = &pool.options[o];
        resources::fits_in(used, &opt.room)
            && opt
                .at_most_one
                .iter()
                .all(|&r| self.requests[p][r] <= 1_000_000_000)
    }

    /// Whether switching a claim of `pool` from `old` capacity to option `o` keeps the NodePool
    /// within its limits.
    fn within_limits(&self, pool_index: usize, old: Option<Option<&Amounts>>, o: usize) -> bool {
        let pool = &self.pools[pool_index];
        let Some(limits) = &pool.limits else {
            return true;
        };
        let mut usage = pool.usage.clone();
        if let Some(Some(old)) = old {
            resources::sub(&mut usage, old);
        }
        resources::add(&mut usage, &pool.options[o].capacity);
        usage.iter().zip(limits).all(|(u, l)| u <= l)
    }

    /// Karpenter's `minValues`: the instance types a NodeClaim may still launch as must offer
    /// enough distinct values of each such key, unless the policy is `BestEffort`, under which
    /// a NodeClaim launches with what it can offer ([`Planner::min_values_met`] says whether
    /// that was relaxed).
    fn min_values_ok(
        &self,
        pool: &Pool,
        allowed: &[(Price, usize)],
        from: usize,
        used: &[i128],
        reqs: &Requirements,
    ) -> bool {
        pool.input.min_values_policy == MinValuesPolicy::BestEffort
            || self.min_values_met(pool, allowed, from, used, reqs)
    }

    /// Whether the types from `from` on that hold `used` offer every key's `minValues`.
    fn min_values_met(
        &self,
        pool: &Pool,
        allowed: &[(Price, usize)],
        from: usize,
        used: &[i128],
        reqs: &Requirements,
    ) -> bool {
        let mut ok = true;
        for (key, r) in reqs.iter() {
            let Some(min) = r.min_values else { continue };
            let distinct: BTreeSet<&str> = allowed[from..]
                .iter()
                .filter(|(_, o)| resources::fits_in(used, &pool.options[*o].room))
                .filter_map(|(_, o)| pool.options[*o].labels.get(key).map(String::as_str))
                .collect();
            ok &= distinct.len() >= min;
        }
        ok
    }

    fn apply(&mut self, p: usize, placement: Placement) {
        if let Some(r) = self.remaining.get_mut(self.class_of[p]) {
            *r = r.saturating_sub(1);
        }
        match placement {
            Placement::Existing(n, allocations) => {
                if let Some(dra) = &mut self.dra {
                    dra.commit(&self.existing[n].name, allocations);
                }
                resources::sub(
                    &mut Rc::make_mut(&mut self.existing[n]).free,
                    &self.requests[p],
                );
                self.topology.place(
                    p,
                    Domains {
                        hostname: self.node_domain(n),
                        zone: self.existing[n].zone,
                    },
                );
                self.bindings.push((p, self.existing[n].name.clone()));
            }
            Placement::Claim(change) => {
                let claim = &mut self.claims[change.claim];
                let pool = &mut self.pools[claim.pool];
                let old = claim.allowed.get(claim.chosen).map(|a| a.1);
                if let Some(r) = change.requirements {
                    claim.requirements = r;
                }
                if let Some(a) = change.allowed {
                    claim.allowed = a;
                }
                claim.chosen = change.chosen;
                claim.zone = change.zone;
                let new = claim.allowed.get(claim.chosen).map(|a| a.1);
                if old != new {
                    if let Some(o) = old {
                        resources::sub(&mut pool.usage, &pool.options[o].capacity);
                    }
                    if let Some(o) = new {
                        resources::add(&mut pool.usage, &pool.options[o].capacity);
                    }
                }
                resources::add(&mut claim.used, &self.requests[p]);
                claim.pods.push(p);
                let (name, zone) = (claim.name.clone(), claim.zone);
                if let Some(dra) = &mut self.dra {
                    dra.commit(&name, change.allocations);
                }
                let hostname = self.claim_domain(change.claim);
                self.topology.place(p, Domains { hostname, zone });
                self.bindings.push((p, name));
                if old != new {
                    self.rebook(change.claim);
                }
                self.note_room(change.claim);
            }
            Placement::New(n) => {
                let pool = &mut self.pools[n.pool];
                let name = format!("{}-{}", pool.input.name, pool.claims_made);
                pool.claims_made += 1;
                if let Some(&(_, o)) = n.allowed.get(n.chosen) {
                    resources::add(&mut pool.usage, &pool.options[o].capacity);
                }
                let hostname = self.claim_domain(self.claims.len());
                self.topology.place(
                    p,
                    Domains {
                        hostname,
                        zone: n.zone,
                    },
                );
                self.bindings.push((p, name.clone()));
                self.claims.push(Claim {
                    pool: n.pool,
                    name,
                    requirements: n.requirements,
                    allowed: n.allowed,
                    chosen: n.chosen,
                    used: self.requests[p].clone(),
                    pods: vec![p],
                    zone: n.zone,
                    devices_pinned: false,
                    reservation: None,
                });
                self.rebook(self.claims.len() - 1);
                self.note_room(self.claims.len() - 1);
                self.give_devices(p);
            }
        }
    }

    /// Records the room NodeClaim `c` has left at its chosen type in the room index.
    fn note_room_index(&mut self, c: usize) {
        let claim = &self.claims[c];
        let left: Option<Vec<i128>> = claim.allowed.get(claim.chosen).map(|&(_, o)| {
            let room = &self.pools[claim.pool].options[o].room;
            room.iter().zip(&claim.used).map(|(r, u)| r - u).collect()
        });
        self.room_index.note(c, left.as_deref());
    }

    /// Records the room NodeClaim `c` has left at its chosen type while its zone is open (see
    /// [`Planner::open_room`]), and in the room index.
    fn note_room(&mut self, c: usize) {
        self.note_room_index(c);
        let width = self.index.len();
        if self.open_zone.len() <= c {
            self.open_zone.resize(c + 1, false);
            self.open_room.resize((c + 1) * width, 0);
        }
        let claim = &self.claims[c];
        let chosen = claim.allowed.get(claim.chosen).map(|&(_, o)| o);
        self.open_zone[c] = match (claim.zone, chosen) {
            (None, Some(o)) => {
                let room = &self.pools[claim.pool].options[o].room;
                let left = &mut self.open_room[c * width..(c + 1) * width];
                for ((left, room), used) in left.iter_mut().zip(room).zip(&claim.used) {
                    *left = room - used;
                }
                true
            }
            _ => false,
        };
    }

    /// Whether NodeClaim `c` has its zone open and no room at its chosen type for `req`.
    fn open_and_full(&self, c: usize, req: &[i128]) -> bool {
        if !self.open_zone.get(c).copied().unwrap_or(false) {
            return false;
        }
        let width = self.index.len();
        self.open_room[c * width..(c + 1) * width]
            .iter()
            .zip(req)
            .any(|(left, r)| *r != 0 && r > left)
    }

    /// Books NodeClaim `c` into the reservation of its cheapest offering, giving back the one it
    /// held. A reservation that fills, or stops being full, changes the prices of the options
    /// that offer it, so the cached option lists are dropped.
    fn rebook(&mut self, c: usize) {
        let mut changed = false;
        if let Some(old) = self.claims[c].reservation.take() {
            changed |= self.reservations.release(&old);
        }
        let claim = &self.claims[c];
        let pool = &self.pools[claim.pool];
        let booked = claim
            .allowed
            .get(claim.chosen)
            .and_then(|&(_, o)| cheapest_offering(pool, o, &claim.requirements, &self.reservations))
            .and_then(|off| off.reservation.as_ref())
            .map(|r| r.id.clone());
        if let Some(id) = &booked {
            changed |= self.reservations.book(id);
        }
        self.claims[c].reservation = booked;
        if changed {
            self.allowed_cache
                .borrow_mut()
                .iter_mut()
                .for_each(HashMap::clear);
            self.pin_cache.borrow_mut().clear();
        }
    }

    /// One line a person can act on: for existing nodes and each NodePool, the first reason
    /// each group of candidates was rejected.
    fn explain(&self, p: usize) -> String {
        explain::explain(self, p)
    }
}

/// Marks for the pod's class the NodeClaims of `short` (no room, may not grow) that its
/// search reached: those before `stop`, and among `only` when the search was limited to them.
/// Exactly those would have been evaluated and rejected for lack of room, one at a time.
fn reject_short(class: &mut Vec<u64>, short: &[u64], stop: usize, only: Option<&[usize]>) {
    match only {
        Some(only) => {
            for &c in only.iter().filter(|&&c| c < stop) {
                if rejections::has_bit(short, c) {
                    set_bit(class, c);
                }
            }
        }
        None => {
            if class.len() < short.len() {
                class.resize(short.len(), 0);
            }
            for (w, (mine, s)) in class.iter_mut().zip(short).enumerate() {
                let below = match stop.checked_sub(w * 64) {
                    Some(n) if n >= 64 => u64::MAX,
                    Some(n) => (1u64 << n) - 1,
                    None => 0,
                };
                *mine |= s & below;
            }
        }
    }
}

#[cfg(test)]
mod tests;
