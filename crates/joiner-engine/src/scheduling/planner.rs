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
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

use joiner_model::Price;

use super::pod::ZONE_KEY;
use super::resources::{self, Amounts, ResourceIndex};
use super::taints;
use super::topology::{Constraint, Domains, Topology};
use super::{LaunchOffering, PoolInput, SchedulingInput};
use crate::plan::{Binding, ClaimResources, Plan, PlannedNodeClaim, Unschedulable};
use crate::requirements::{Labels, Requirement, Requirements};
use dra::Dra;
use joiner_dra::ClaimAllocation;

mod dra;
mod explain;

pub const CAPACITY_TYPE_KEY: &str = "karpenter.sh/capacity-type";
/// NodeClaim annotation listing the DRA drivers whose devices its pods were given.
pub const REQUESTED_DRA_DRIVERS: &str = "karpenter.sh/requested-dra-drivers";
pub const NODEPOOL_KEY: &str = "karpenter.sh/nodepool";
pub const INSTANCE_TYPE_KEY: &str = "node.kubernetes.io/instance-type";

/// How many of the most recent compatible NodeClaims are considered for growing to a larger
/// instance type. Growing is rarely cheaper than a new node except for the newest, least full
/// NodeClaims; the bound keeps planning linear in the number of pods.
const GROW_WINDOW: usize = 16;

/// An instance type of one NodePool, resolved for packing.
struct Opt {
    name: String,
    /// Allocatable less DaemonSet overhead.
    room: Amounts,
    daemon: Amounts,
    capacity: Amounts,
    /// Template labels, instance type labels, NodePool label.
    labels: Labels,
    at_most_one: Vec<usize>,
    /// Index of this option in the NodePool input (options the NodePool rules out are dropped).
    source: usize,
}

struct Pool<'a> {
    input: &'a PoolInput,
    requirements: Requirements,
    options: Vec<Opt>,
    /// Per option, offerings allowed by the NodePool.
    offerings: Vec<Vec<&'a LaunchOffering>>,
    /// Keys the NodePool defines beyond instance-type labels (custom requirement keys).
    defined_keys: BTreeSet<String>,
    limits: Option<Amounts>,
    usage: Amounts,
    claims_made: usize,
}

struct ExistingState {
    name: String,
    labels: Labels,
    free: Amounts,
    zone: Option<u32>,
}

/// Options of a pool (by index) with their cheapest allowed offering price, cheapest first.
type Allowed = Vec<(Price, usize)>;

/// A pool's requirements with the zone fixed, and the options they allow.
type Pinned = (Requirements, Rc<Allowed>);

/// Cache of [`Planner::allowed_for`]: per pool, by requirements.
type AllowedCache = Vec<HashMap<Requirements, Rc<Allowed>>>;

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

/// Bit sets over existing nodes and NodeClaims.
#[derive(Default)]
struct Rejected {
    nodes: Vec<u64>,
    claims: Vec<u64>,
}

/// Indices below `n` whose bit is clear in both sets, skipping whole words of set bits at once
/// (most NodeClaims are full for most pods, so most words are all ones).
fn clear_bits<'s>(a: &'s [u64], b: &'s [u64], n: usize) -> impl Iterator<Item = usize> + 's {
    (0..n.div_ceil(64)).flat_map(move |w| {
        let mut free = !(a.get(w).copied().unwrap_or(0) | b.get(w).copied().unwrap_or(0));
        std::iter::from_fn(move || {
            if free == 0 {
                return None;
            }
            let b = free.trailing_zeros() as usize;
            free &= free - 1;
            Some(w * 64 + b)
        })
        .filter(move |&i| i < n)
    })
}

impl Rejected {
    fn absorb(&mut self, other: &Rejected) {
        for (mine, theirs) in [
            (&mut self.nodes, &other.nodes),
            (&mut self.claims, &other.claims),
        ] {
            if mine.len() < theirs.len() {
                mine.resize(theirs.len(), 0);
            }
            for (m, t) in mine.iter_mut().zip(theirs) {
                *m |= t;
            }
        }
    }
}

fn set_bit(set: &mut Vec<u64>, i: usize) {
    if set.len() <= i / 64 {
        set.resize(i / 64 + 1, 0);
    }
    set[i / 64] |= 1 << (i % 64);
}

/// Candidates a search found permanently unsuitable, to record once the search is over.
#[derive(Default)]
struct NewRejections {
    /// Rejected whatever the pod's size (taints, requirements, topology): for its shape.
    shape: Rejected,
    /// Rejected for lack of room: for its class.
    class: Rejected,
}

/// Why a NodeClaim cannot take a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rejection {
    /// Not within the price bound: too full unless it grows by more than allowed. NodeClaims
    /// only fill up, so without growing it never will. `growable` when nothing but room is
    /// missing.
    NoRoom { growable: bool },
    /// Never will: requirements, taints, anti-affinity.
    Never,
    /// Might later: zone spread and affinity change as pods are placed.
    NotNow,
}

impl Rejection {
    fn of(v: super::topology::Violation) -> Rejection {
        if v.is_permanent() {
            Rejection::Never
        } else {
            Rejection::NotNow
        }
    }
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

struct Planner<'a> {
    input: &'a SchedulingInput,
    index: ResourceIndex,
    requests: Vec<Amounts>,
    pools: Vec<Pool<'a>>,
    /// Pools in the order new NodeClaims try them: weight descending, then name.
    pool_order: Vec<usize>,
    existing: Vec<ExistingState>,
    claims: Vec<Claim>,
    topology: Topology,
    /// Every zone any NodePool or node offers, sorted; topology counts zones by index here.
    zone_names: Vec<String>,
    zone_ids: HashMap<String, u32>,
    /// Per scheduling class (and strictness): existing nodes and NodeClaims that rejected it
    /// for a reason that cannot go away, so later pods of the class skip them.
    rejected: Vec<Rejected>,
    /// The same per shape (a class without its requests), for reasons size does not change.
    rejected_shape: Vec<Rejected>,
    shape_of: Vec<usize>,
    class_of: Vec<usize>,
    /// Per scheduling class: pending pods not yet placed.
    remaining: Vec<u32>,
    /// Per scheduling class and strictness: what every pod of the class computes alike.
    class_views: RefCell<Vec<Option<Rc<ClassView>>>>,
    allowed_cache: RefCell<AllowedCache>,
    pin_cache: RefCell<HashMap<(usize, u32), Pinned>>,
    bindings: Vec<(usize, String)>,
    dra: Option<Dra>,
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

/// Plans the given input.
pub fn schedule(input: &SchedulingInput) -> Plan {
    let pending = input.pods.iter().filter(|p| p.node_name.is_none()).count();
    let orders: &[Order] = if pending <= MULTI_ORDER_LIMIT {
        &[Order::DominantShare, Order::ExtendedFirst]
    } else {
        &[Order::DominantShare]
    };
    let mut best: Option<Plan> = None;
    for &order in orders {
        let plan = schedule_in_order(input, order);
        // Fewest unschedulable pods first, then the lowest price; ties keep the earlier order.
        let better = best.as_ref().is_none_or(|b| {
            (plan.unschedulable.len(), plan.total_price_per_hour)
                < (b.unschedulable.len(), b.total_price_per_hour)
        });
        if better {
            best = Some(plan);
        }
    }
    best.unwrap_or_default()
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
    let planner = Planner::new(input);
    Some(PodAccount {
        pod: pod.to_string(),
        outcome,
        instance_types: explain::account(&planner, p),
    })
}

fn schedule_in_order(input: &SchedulingInput, order: Order) -> Plan {
    let mut planner = Planner::new(input);
    let mut pending: Vec<usize> = (0..input.pods.len())
        .filter(|&i| input.pods[i].node_name.is_none())
        .collect();
    planner.sort_pending(&mut pending, order);
    for &p in &pending {
        planner.remaining[planner.class_of[p]] += 1;
    }

    // Pods whose affinity needs other pods placed first are retried while progress is made.
    let mut failed = Vec::new();
    loop {
        let mut progress = false;
        for &p in &pending {
            if planner.place(p) {
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
    let unschedulable: Vec<Unschedulable> = failed
        .iter()
        .map(|&p| Unschedulable {
            pod: input.pods[p].key(),
            reason: planner.explain(p),
        })
        .collect();
    planner.finish(unschedulable)
}

impl<'a> Planner<'a> {
    fn new(input: &'a SchedulingInput) -> Planner<'a> {
        let mut index = ResourceIndex::default();
        for p in &input.pods {
            index.intern(&p.requests);
        }
        for d in &input.daemon_sets {
            index.intern(&d.pod.requests);
        }
        for n in &input.nodes {
            index.intern(&n.allocatable);
            index.intern(&n.capacity);
        }
        for pool in &input.pools {
            index.intern(&pool.limits);
            for o in &pool.options {
                index.intern(&o.allocatable);
                index.intern(&o.capacity);
            }
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
                .filter_map(|n| n.labels.get(ZONE_KEY).cloned()),
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

        let mut planner = Planner {
            input,
            requests,
            pools,
            pool_order,
            existing: Vec::new(),
            claims: Vec::new(),
            topology,
            zone_names,
            zone_ids,
            rejected: Vec::new(),
            rejected_shape: Vec::new(),
            shape_of: Vec::new(),
            class_of: Vec::new(),
            remaining: Vec::new(),
            class_views: RefCell::new(Vec::new()),
            allowed_cache: RefCell::new(vec![HashMap::new(); input.pools.len()]),
            pin_cache: RefCell::new(HashMap::new()),
            bindings: Vec::new(),
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
        for (i, p) in self.input.pods.iter().enumerate() {
            let key = format!(
                "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{}|{:?}|{}",
                self.requests[i],
                p.node_requirements,
                p.preferred_node_requirements,
                p.tolerations,
                p.spread,
                p.affinity,
                p.namespace,
                p.labels,
                self.dra
                    .as_ref()
                    .map(|d| d.class_key(i))
                    .unwrap_or_default()
            );
            let next = ids.len();
            let id = *ids.entry(key).or_insert(next);
            self.class_of.push(id);
            // The same without the requests: what decides rejections that size does not change.
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
            let next = shapes.len();
            let id = *shapes.entry(shape).or_insert(next);
            self.shape_of.push(id);
        }
        self.rejected_shape = (0..shapes.len() * 2).map(|_| Rejected::default()).collect();
        let classes = ids.len();
        self.remaining = vec![0; classes];
        self.rejected = (0..classes * 2).map(|_| Rejected::default()).collect();
        *self.class_views.borrow_mut() = vec![None; classes * 2];
    }

    fn load_existing(&mut self) {
        let mut by_name: HashMap<&str, usize> = HashMap::new();
        for (i, n) in self.input.nodes.iter().enumerate() {
            by_name.insert(&n.name, i);
            let zone = n
                .labels
                .get(ZONE_KEY)
                .and_then(|z| self.zone_ids.get(z))
                .copied();
            self.existing.push(ExistingState {
                name: n.name.clone(),
                labels: n.labels.clone(),
                free: self.index.amounts(&n.allocatable),
                zone,
            });
            if let Some(pool) = n
                .node_pool
                .as_ref()
                .and_then(|p| self.pools.iter_mut().find(|x| &x.input.name == p))
            {
                resources::add(&mut pool.usage, &self.index.amounts(&n.capacity));
            }
        }
        // Bound pods consume their node and count in its domains.
        let mut daemon_present: BTreeSet<(String, String)> = BTreeSet::new();
        for (i, p) in self.input.pods.iter().enumerate() {
            let Some(node) = p.node_name.as_deref().and_then(|n| by_name.get(n).copied()) else {
                continue;
            };
            if let Some(ds) = &p.daemon_set {
                daemon_present.insert((ds.clone(), self.existing[node].name.clone()));
            }
            resources::sub(&mut self.existing[node].free, &self.requests[i]);
            self.topology.place(
                i,
                Domains {
                    hostname: node as u32,
                    zone: self.existing[node].zone,
                },
            );
        }
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
                    resources::sub(&mut self.existing[n].free, &req);
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
        for opt in self.pools.iter().flat_map(|p| &p.options) {
            for (b, r) in biggest.iter_mut().zip(&opt.room) {
                *b = (*b).max(*r);
            }
        }
        let dominant: Vec<i128> = (0..self.requests.len())
            .map(|p| {
                self.requests[p]
                    .iter()
                    .zip(&biggest)
                    .filter(|(_, b)| **b > 0)
                    .map(|(r, b)| r.saturating_mul(1_000_000) / b)
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let get = |p: usize, i: Option<usize>| i.map(|i| self.requests[p][i]).unwrap_or(0);
        let ext = |p: usize| extended.iter().map(|&i| self.requests[p][i]).sum::<i128>();
        pending.sort_by(|&a, &b| {
            let first = match order {
                Order::DominantShare => dominant[b].cmp(&dominant[a]),
                Order::ExtendedFirst => std::cmp::Ordering::Equal,
            };
            first
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

        // 1. Existing nodes.
        for n in clear_bits(&skip.nodes, &skip_shape.nodes, self.existing.len()) {
            let node = &self.existing[n];
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
        for c in clear_bits(&skip.claims, &skip_shape.claims, self.claims.len()) {
            let claim = &self.claims[c];
            let pool = &self.pools[claim.pool];
            if taints::first_untolerated(&pool.input.taints, &pod.tolerations).is_some() {
                set_bit(&mut rejections.shape.claims, c);
                continue;
            }
            // Pods with affinity may need exactly the node their peers are on to grow.
            let may_grow = self.claims.len() - c <= GROW_WINDOW || pod_has_affinity;
            let (mut never, mut not_now, mut room) = (true, false, false);
            for alt in alts {
                match self.evaluate_claim(p, c, alt, strict, Price::ZERO, zones) {
                    Ok(change) => return Some(Placement::Claim(change)),
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
                    a.get(ZONE_KEY)
                        .is_none_or(|r| r.matches(Some(&self.zone_names[z as usize])))
                })
            })
            .collect()
    }

    /// Whether `p` can join claim `c` under alternative `alt`, and at what added price.
    /// Growing to a larger instance type is considered only while it adds at most `max_growth`
    /// to the price (zero: the pod must fit in the room the NodeClaim has).
    fn evaluate_claim(
        &self,
        p: usize,
        c: usize,
        alt: &Requirements,
        strict: bool,
        max_growth: Price,
        zones: &[u32],
    ) -> Result<ClaimChange, Rejection> {
        let claim = &self.claims[c];
        let pool = &self.pools[claim.pool];
        let hostname = self.claim_domain(c);
        // A pod with claims only joins a NodeClaim whose devices are already set (one made for
        // such a pod), and such a NodeClaim keeps its instance type.
        let dra_pod = self.dra.as_ref().is_some_and(|d| d.uses_claims(p));
        if dra_pod && !claim.devices_pinned {
            return Err(Rejection::NoRoom { growable: false });
        }
        let fixed_type = dra_pod || claim.devices_pinned;
        let max_growth = if fixed_type { Price::ZERO } else { max_growth };
        // Cheap rejections first: room when the claim may not grow (a permanent reason, so
        // checked before topology, whose reasons may pass), then topology.
        if max_growth == Price::ZERO
            && let Some(&(_, o)) = claim.allowed.get(claim.chosen)
            && !self.option_holds_more(pool, o, &claim.used, p)
        {
            // Full; but if topology rules the NodeClaim out for good, say so, since that holds
            // for every pod of this shape whatever its size.
            let at = Domains {
                hostname,
                zone: claim.zone,
            };
            return Err(match self.topology.check(p, at, strict, zones) {
                // A full NodeClaim whose zone is still open is not worth growing for a pod
                // that would have to fix its zone: a new node serves it as well.
                Ok(()) if claim.zone.is_none() && self.topology.needs_zone(p) => {
                    Rejection::NoRoom { growable: false }
                }
                Ok(()) => Rejection::NoRoom { growable: true },
                Err(v) if v.is_permanent() => Rejection::Never,
                Err(_) => Rejection::NoRoom { growable: false },
            });
        }
        self.topology
            .check(
                p,
                Domains {
                    hostname,
                    zone: claim.zone,
                },
                strict,
                zones,
            )
            .map_err(Rejection::of)?;
        let (requirements, mut allowed) = if alt.is_empty() {
            (None, None)
        } else {
            // A NodeClaim's requirements only narrow, so a conflict now is a conflict forever.
            let merged = claim
                .requirements
                .intersect(alt)
                .map_err(|_| Rejection::Never)?;
            if merged == claim.requirements {
                (None, None)
            } else {
                if !self.defined(pool, alt) {
                    return Err(Rejection::Never);
                }
                (
                    Some(merged.clone()),
                    Some(self.allowed_for(claim.pool, &merged)),
                )
            }
        };
        let mut zone = claim.zone;
        let mut requirements = requirements;
        if zone.is_none() && self.topology.needs_zone(p) {
            let reqs = requirements.as_ref().unwrap_or(&claim.requirements);
            let (z, r, a) = self
                .pin_zone(p, claim.pool, reqs, hostname, strict)
                .ok_or(Rejection::NotNow)?;
            zone = Some(z);
            requirements = Some(r);
            allowed = Some(a);
        }
        self.topology
            .check(p, Domains { hostname, zone }, strict, zones)
            .map_err(Rejection::of)?;
        let list = allowed.as_ref().unwrap_or(&claim.allowed);
        let mut used = claim.used.clone();
        resources::add(&mut used, &self.requests[p]);
        let current = claim.price();
        let start = if allowed.is_some() { 0 } else { claim.chosen };
        let current_option = claim.allowed.get(claim.chosen).map(|a| a.1);
        for (i, &(price, o)) in list.iter().enumerate().skip(start) {
            // Sorted by price: past the bound, nothing is cheap enough (now; a later pod may
            // find this NodeClaim worth growing).
            if price.saturating_sub(current) > max_growth {
                return Err(Rejection::NoRoom { growable: true });
            }
            if !self.option_holds(pool, o, &used, p) || (fixed_type && Some(o) != current_option) {
                continue;
            }
            if Some(o) != current_option
                && !self.within_limits(
                    claim.pool,
                    Some(current_option.map(|co| &pool.options[co].capacity)),
                    o,
                )
            {
                continue;
            }
            if !self.min_values_ok(
                pool,
                list,
                i,
                &used,
                requirements.as_ref().unwrap_or(&claim.requirements),
            ) {
                continue;
            }
            let allocations = match &self.dra {
                Some(dra) if dra_pod => dra
                    .fits_claim(p, c)
                    .ok_or(Rejection::NoRoom { growable: false })?,
                _ => Vec::new(),
            };
            return Ok(ClaimChange {
                claim: c,
                requirements,
                allowed,
                chosen: i,
                zone,
                delta: price.saturating_sub(current),
                allocations,
            });
        }
        Err(Rejection::NoRoom { growable: false })
    }

    /// A new NodeClaim for `p` in `pool` under `alt`.
    fn evaluate_new(
        &self,
        p: usize,
        pool_index: usize,
        alt: &Requirements,
        strict: bool,
        zones: &[u32],
    ) -> Option<NewClaim> {
        let pool = &self.pools[pool_index];
        let pod = &self.input.pods[p];
        if taints::first_untolerated(&pool.input.taints, &pod.tolerations).is_some() {
            return None;
        }
        let requirements = pool.requirements.intersect(alt).ok()?;
        if !self.defined(pool, alt) {
            return None;
        }
        let hostname = self.claim_domain(self.claims.len());
        let (zone, requirements, allowed) = if self.topology.needs_zone(p) {
            let (z, r, a) = self.pin_zone(p, pool_index, &requirements, hostname, strict)?;
            (Some(z), r, a)
        } else {
            let allowed = self.allowed_for(pool_index, &requirements);
            (None, requirements, allowed)
        };
        self.topology
            .check(p, Domains { hostname, zone }, strict, zones)
            .ok()?;
        // Look ahead at the pending pods of the same class: the node type with the lowest price
        // per pod it can take, so a workload of many pods gets a node it fills.
        let used = self.requests[p].clone();
        let expected = self
            .remaining
            .get(self.class_of[p])
            .copied()
            .unwrap_or(1)
            .min(self.topology.per_node_cap(p, strict))
            .max(1);
        let mut best: Option<(usize, u32)> = None;
        for (i, &(price, o)) in allowed.iter().enumerate() {
            // Sorted by price: once even a node full of `expected` pods cannot beat the best
            // price per pod, nothing later can.
            if let Some((b, bc)) = best
                && (price.nano_usd() as i128) * (bc as i128)
                    >= (allowed[b].0.nano_usd() as i128) * (expected as i128)
            {
                break;
            }
            if !(self.option_holds(pool, o, &used, p)
                && self.within_limits(pool_index, None, o)
                && self.min_values_ok(pool, &allowed, i, &used, &requirements))
            {
                continue;
            }
            let mut copies = copies_that_fit(&used, &pool.options[o].room, expected);
            if let Some(dra) = self.dra.as_ref().filter(|d| d.uses_claims(p)) {
                // The node must serve the pod's claims from the devices its type publishes.
                let served = dra.probe_copies(
                    p,
                    self.class_of[p],
                    pool_index,
                    pool.options[o].source,
                    expected,
                );
                if served == 0 {
                    continue;
                }
                copies = copies.min(served);
            }
            let better = best.is_none_or(|(b, bc)| {
                let (bp, _) = allowed[b];
                // price / copies < bp / bc, compared exactly.
                (price.nano_usd() as i128) * (bc as i128)
                    < (bp.nano_usd() as i128) * (copies as i128)
            });
            if better {
                best = Some((i, copies));
            }
        }
        let (chosen, copies) = best?;
        let price = allowed[chosen].0;
        Some(NewClaim {
            pool: pool_index,
            requirements,
            allowed,
            chosen,
            zone,
            price,
            copies,
        })
    }

    /// Chooses a zone for a planned node so that `p`'s zone constraints hold: the allowed zone
    /// with the fewest pods of its spread groups, then by name.
    fn pin_zone(
        &self,
        p: usize,
        pool_index: usize,
        reqs: &Requirements,
        hostname: u32,
        strict: bool,
    ) -> Option<(u32, Requirements, Rc<Allowed>)> {
        let mut zones: Vec<u32> = self.pod_zones(std::slice::from_ref(reqs));
        let all = zones.clone();
        // Zone ids follow zone names, so ties fall to the first name.
        zones.sort_by_key(|&z| (self.topology.zone_load(p, z), z));
        for z in zones {
            if self
                .topology
                .check(
                    p,
                    Domains {
                        hostname,
                        zone: Some(z),
                    },
                    strict,
                    &all,
                )
                .is_err()
            {
                continue;
            }
            let Some((merged, list)) = self.pinned(pool_index, reqs, z) else {
                continue;
            };
            if list.is_empty() {
                continue;
            }
            return Some((z, merged, list));
        }
        None
    }

    /// `reqs` with the zone fixed to `zone`, and the options that allows. Cached for a pool's
    /// own requirements, which most NodeClaims keep.
    fn pinned(
        &self,
        pool_index: usize,
        reqs: &Requirements,
        zone: u32,
    ) -> Option<(Requirements, Rc<Allowed>)> {
        let base = *reqs == self.pools[pool_index].requirements;
        if base && let Some(hit) = self.pin_cache.borrow().get(&(pool_index, zone)) {
            return Some(hit.clone());
        }
        let mut pin = Requirements::new();
        pin.add(
            ZONE_KEY,
            Requirement::equals(&self.zone_names[zone as usize]),
        );
        let merged = reqs.intersect(&pin).ok()?;
        let list = self.allowed_for(pool_index, &merged);
        if base {
            self.pin_cache
                .borrow_mut()
                .insert((pool_index, zone), (merged.clone(), list.clone()));
        }
        Some((merged, list))
    }

    /// The options of a pool that `reqs` allow, with their prices, cheapest first. Cached,
    /// since many pods share the same requirements.
    fn allowed_for(&self, pool_index: usize, reqs: &Requirements) -> Rc<Allowed> {
        if let Some(hit) = self.allowed_cache.borrow()[pool_index].get(reqs) {
            return hit.clone();
        }
        let pool = &self.pools[pool_index];
        let mut list: Allowed = (0..pool.options.len())
            .filter_map(|o| option_price(pool, o, reqs).map(|pr| (pr, o)))
            .collect();
        list.sort();
        let list = Rc::new(list);
        self.allowed_cache.borrow_mut()[pool_index].insert(reqs.clone(), list.clone());
        list
    }

    /// Whether every key the pod requires to be present is one a node of this pool can carry.
    fn defined(&self, pool: &Pool, alt: &Requirements) -> bool {
        alt.iter().all(|(k, r)| {
            !r.requires_presence()
                || k == ZONE_KEY
                || k == CAPACITY_TYPE_KEY
                || pool.defined_keys.contains(k)
                || pool.options.iter().any(|o| o.labels.contains_key(k))
        })
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
    /// enough distinct values of each such key.
    fn min_values_ok(
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
                resources::sub(&mut self.existing[n].free, &self.requests[p]);
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
                });
                self.give_devices(p);
            }
        }
    }

    /// A NodeClaim just made for pod `p`: if the pod has claims, the node gets its instance
    /// type's devices and the claims their allocation there.
    fn give_devices(&mut self, p: usize) {
        let c = self.claims.len() - 1;
        let Some(dra) = self.dra.as_mut().filter(|d| d.uses_claims(p)) else {
            return;
        };
        let claim = &mut self.claims[c];
        let pool = &self.pools[claim.pool];
        let Some(&(_, o)) = claim.allowed.get(claim.chosen) else {
            return;
        };
        let opt = &pool.options[o];
        let Some(source) = pool
            .input
            .options
            .get(opt.source)
            .and_then(|x| x.devices.as_ref())
        else {
            return;
        };
        dra.add_claim_node(
            c,
            &claim.name,
            &opt.labels,
            claim.pool,
            opt.source,
            &source.options,
        );
        claim.devices_pinned = true;
        match dra.fits_claim(p, c) {
            Some(allocations) => dra.commit(&claim.name, allocations),
            None => {
                tracing::warn!(pod = %self.input.pods[p].key(), node = %claim.name, "claims did not fit the planned node they were probed for")
            }
        }
    }

    fn finish(self, unschedulable: Vec<Unschedulable>) -> Plan {
        let mut plan = Plan::new();
        for claim in &self.claims {
            let pool = &self.pools[claim.pool];
            let Some(&(price, o)) = claim.allowed.get(claim.chosen) else {
                continue;
            };
            let opt = &pool.options[o];
            let Some(offering) = cheapest_offering(pool, o, &claim.requirements) else {
                continue;
            };
            let mut labels = opt.labels.clone();
            for (k, r) in claim.requirements.iter() {
                if !labels.contains_key(k)
                    && let Some(v) = r.any_value()
                {
                    labels.insert(k.clone(), v.to_string());
                }
            }
            labels.insert(ZONE_KEY.into(), offering.zone.clone());
            labels.insert(CAPACITY_TYPE_KEY.into(), offering.capacity_type.clone());
            let mut requested = claim.used.clone();
            resources::add(&mut requested, &opt.daemon);
            let option_input = pool
                .input
                .options
                .iter()
                .find(|x| x.instance_type == opt.name);
            let like = option_input
                .map(|x| x.allocatable.clone())
                .unwrap_or_default();
            let mut pods: Vec<String> = claim
                .pods
                .iter()
                .map(|&p| self.input.pods[p].key())
                .collect();
            pods.sort();
            let instance_type_options = claim.allowed[claim.chosen..]
                .iter()
                .filter(|(_, o)| resources::fits_in(&claim.used, &pool.options[*o].room))
                .map(|(_, o)| pool.options[*o].name.clone())
                .take(20)
                .collect();
            let mut annotations = BTreeMap::new();
            if let Some(dra) = &self.dra {
                let drivers = dra.drivers_on(&claim.name);
                if !drivers.is_empty() {
                    annotations.insert(
                        REQUESTED_DRA_DRIVERS.to_string(),
                        drivers.into_iter().collect::<Vec<_>>().join(","),
                    );
                }
            }
            plan.node_claims.push(PlannedNodeClaim {
                name: claim.name.clone(),
                node_pool: pool.input.name.clone(),
                instance_type: opt.name.clone(),
                capacity_type: offering.capacity_type.clone(),
                zone: offering.zone.clone(),
                price_per_hour: price,
                pods,
                resources: ClaimResources {
                    requested: self.index.list(&requested, &like),
                    allocatable: like.clone(),
                },
                labels,
                annotations,
                instance_type_options,
            });
        }
        plan.total_price_per_hour = plan.node_claims.iter().map(|c| c.price_per_hour).sum();
        plan.bindings = self
            .bindings
            .iter()
            .map(|(p, n)| Binding {
                pod: self.input.pods[*p].key(),
                node: n.clone(),
            })
            .collect();
        plan.bindings.sort_by(|a, b| a.pod.cmp(&b.pod));
        plan.unschedulable = unschedulable;
        plan.unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
        if let Some(dra) = self.dra {
            plan.claims = dra
                .results
                .into_iter()
                .map(|(claim, node, allocation)| crate::plan::ClaimAllocation {
                    claim,
                    node,
                    allocation,
                })
                .collect();
            plan.claims.sort_by(|a, b| a.claim.cmp(&b.claim));
        }
        plan
    }

    /// One line a person can act on: for existing nodes and each NodePool, the first reason
    /// each group of candidates was rejected.
    fn explain(&self, p: usize) -> String {
        explain::explain(self, p)
    }
}

/// How many copies of a pod with requests `one` fit in `room`, at most `limit`.
fn copies_that_fit(one: &[i128], room: &[i128], limit: u32) -> u32 {
    one.iter()
        .zip(room)
        .filter(|(r, _)| **r > 0)
        .map(|(r, c)| (c / r).clamp(0, limit as i128) as u32)
        .min()
        .unwrap_or(limit)
}

/// The cheapest offering of option `o` allowed by `reqs` (zone and capacity type), ties broken
/// by zone then capacity type so the result is deterministic.
fn cheapest_offering<'p>(
    pool: &'p Pool,
    o: usize,
    reqs: &Requirements,
) -> Option<&'p LaunchOffering> {
    pool.offerings[o]
        .iter()
        .copied()
        .filter(|off| offering_allowed(off, reqs))
        .min_by(|a, b| {
            a.price
                .cmp(&b.price)
                .then_with(|| a.zone.cmp(&b.zone))
                .then_with(|| a.capacity_type.cmp(&b.capacity_type))
        })
}

fn offering_allowed(off: &LaunchOffering, reqs: &Requirements) -> bool {
    reqs.get(ZONE_KEY)
        .is_none_or(|r| r.matches(Some(&off.zone)))
        && reqs
            .get(CAPACITY_TYPE_KEY)
            .is_none_or(|r| r.matches(Some(&off.capacity_type)))
}

/// The price of option `o` under `reqs`, or `None` when its labels or offerings do not allow it.
fn option_price(pool: &Pool, o: usize, reqs: &Requirements) -> Option<Price> {
    let opt = &pool.options[o];
    let labels_ok = reqs.iter().all(|(k, r)| {
        if k == ZONE_KEY || k == CAPACITY_TYPE_KEY {
            return true;
        }
        match opt.labels.get(k) {
            Some(v) => r.matches(Some(v)),
            // Keys the NodePool defines take their value from the requirements themselves.
            None => pool.defined_keys.contains(k) || r.matches(None),
        }
    });
    if !labels_ok {
        return None;
    }
    cheapest_offering(pool, o, reqs).map(|off| off.price)
}

fn build_pool<'a>(
    input: &'a PoolInput,
    all: &'a SchedulingInput,
    index: &ResourceIndex,
    zones: &mut BTreeSet<String>,
) -> Pool<'a> {
    let mut requirements = input.requirements.clone();
    // Karpenter launches on-demand capacity unless a NodePool explicitly allows other types.
    if requirements.get(CAPACITY_TYPE_KEY).is_none() {
        requirements.add(CAPACITY_TYPE_KEY, Requirement::equals("on-demand"));
    }
    let defined_keys: BTreeSet<String> = requirements
        .iter()
        .map(|(k, _)| k.clone())
        .chain(input.labels.keys().cloned())
        .collect();
    let mut options = Vec::new();
    let mut offerings = Vec::new();
    for (source, o) in input.options.iter().enumerate() {
        let mut labels = o.labels.clone();
        labels.extend(input.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        labels.insert(NODEPOOL_KEY.into(), input.name.clone());
        labels.insert(INSTANCE_TYPE_KEY.into(), o.instance_type.clone());
        // The NodePool's requirements on instance-type labels filter its instance types.
        let fits_pool = requirements.iter().all(|(k, r)| {
            k == ZONE_KEY
                || k == CAPACITY_TYPE_KEY
                || labels.get(k).map(|v| r.matches(Some(v))).unwrap_or(true)
        });
        let allowed: Vec<&LaunchOffering> = o
            .offerings
            .iter()
            .filter(|off| offering_allowed(off, &requirements))
            .collect();
        if !fits_pool || allowed.is_empty() {
            continue;
        }
        for off in &allowed {
            zones.insert(off.zone.clone());
        }
        let mut daemon = vec![0; index.len()];
        for d in &all.daemon_sets {
            if taints::first_untolerated(&input.taints, &d.pod.tolerations).is_none()
                && d.pod.node_requirements.iter().any(|r| r.matches(&labels))
            {
                resources::add(&mut daemon, &index.amounts(&d.pod.requests));
            }
        }
        let mut room = index.amounts(&o.allocatable);
        resources::sub(&mut room, &daemon);
        options.push(Opt {
            name: o.instance_type.clone(),
            room,
            daemon,
            capacity: index.amounts(&o.capacity),
            labels,
            at_most_one: o
                .at_most_one_per_pod
                .iter()
                .filter_map(|r| index.position(r))
                .collect(),
            source,
        });
        offerings.push(allowed);
    }
    let limits = (!input.limits.is_empty()).then(|| {
        let mut l = vec![i128::MAX; index.len()];
        for (name, q) in &input.limits {
            if let Some(i) = index.position(name) {
                l[i] = q.nanos();
            }
        }
        l
    });
    Pool {
        input,
        requirements,
        options,
        offerings,
        defined_keys,
        limits,
        usage: vec![0; index.len()],
        claims_made: 0,
    }
}

#[cfg(test)]
mod tests;
