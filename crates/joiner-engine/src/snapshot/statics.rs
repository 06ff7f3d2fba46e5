//! Static NodePools (`spec.replicas`, Karpenter's `StaticCapacity` gate): a fixed number of
//! nodes, whatever pods are pending.
//!
//! A static pool never takes part in pod-driven planning: the planner launches nothing in it
//! and consolidation never removes its nodes. Its nodes (and its in-flight NodeClaims) are
//! machines like any other, which pending pods may land on. What it does is keep its count,
//! as Karpenter's static provisioning and deprovisioning controllers do:
//!
//! - its NodeClaims are counted as Karpenter's NodePool state counts them: *active*,
//!   *pending disruption* (a move has started: [`annotations::DISRUPTION_REASON`]) and
//!   *deleting*;
//! - while active and pending disruption together are fewer than `replicas`, the difference
//!   to active is launched, as far as `limits.nodes` allows counting every NodeClaim of the
//!   pool (a drift replacement may burst over `replicas`, never over the limit);
//! - while active are more than `replicas`, the excess is removed: NodeClaims not launched
//!   yet first, then empty nodes, then the nodes whose pods cost least to evict, a node
//!   marked do-not-disrupt (or running such a pod) last. Removal is deleting the NodeClaim;
//!   termination drains it.
//!
//! Static NodeClaims are named by slot, `<pool>-static-<k>` with the lowest `k` no NodeClaim
//! holds, so a create retried after a timeout, or planned again from a cache that has not seen
//! it yet, meets the same name instead of making a second node.
//!
//! With the gate off (Karpenter's default) a static pool launches and removes nothing, and a
//! warning says so.

use std::collections::{BTreeMap, BTreeSet};

use joiner_model::api::{NodeClaim, NodePool};
use joiner_model::feature_gates::{FeatureGate, FeatureGates};
use joiner_model::wellknown::{annotations, labels};
use joiner_model::{Sourced, names};

use crate::plan::{Plan, PlannedNodeClaim};
use crate::scheduling::{ExistingNode, LaunchOption, PodInfo, PoolInput};

/// A static pool's NodeClaims by state, as Karpenter's NodePool state counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeCounts {
    pub active: u32,
    pub pending_disruption: u32,
    pub deleting: u32,
}

/// Whether a NodeClaim counts as active: not deleting, and no move started for it.
pub fn is_active(claim: &NodeClaim) -> bool {
    !claim.is_deleting() && claim.annotation(annotations::DISRUPTION_REASON).is_none()
}

impl NodeCounts {
    /// Counts `claims` (the pool's).
    pub fn of<'a>(claims: impl Iterator<Item = &'a NodeClaim>) -> NodeCounts {
        let mut counts = NodeCounts::default();
        for claim in claims {
            if claim.is_deleting() {
                counts.deleting += 1;
            } else if is_active(claim) {
                counts.active += 1;
            } else {
                counts.pending_disruption += 1;
            }
        }
        counts
    }

    /// Whether a pool of `replicas` has NodeClaims to launch or to remove.
    pub fn off(&self, replicas: u32) -> bool {
        self.active + self.pending_disruption < replicas || self.active > replicas
    }

    /// Every NodeClaim of the pool, whatever its state: what `limits.nodes` counts.
    pub fn total(&self) -> u32 {
        self.active + self.pending_disruption + self.deleting
    }
}

/// One static NodePool and what keeping its count takes now.
#[derive(Debug, Clone)]
pub struct StaticPool {
    pub name: String,
    pub replicas: u32,
    /// `spec.limits.nodes`, when set.
    pub node_limit: Option<u32>,
    pub counts: NodeCounts,
    /// Names of the NodeClaims to create now.
    pub launch: Vec<String>,
    /// NodeClaims to delete now, in the order they go.
    pub remove: Vec<String>,
    /// Why it launches and removes nothing (the gate is off, the pool cannot launch), if so.
    pub idle: Option<String>,
    /// The pool with its instance types resolved; `None` when it cannot launch.
    pub(super) input: Option<PoolInput>,
}

impl StaticPool {
    /// How many NodeClaims it launches now, and whether `limits.nodes` held it back.
    fn deficit(&self) -> (u32, bool) {
        let c = self.counts;
        if c.active + c.pending_disruption >= self.replicas {
            return (0, false);
        }
        let wanted = self.replicas - c.active;
        let room = self
            .node_limit
            .map_or(u32::MAX, |l| l.saturating_sub(c.total()));
        (wanted.min(room), room < wanted)
    }

    /// The pool as it launches, when it can.
    pub fn input(&self) -> Option<&PoolInput> {
        self.input.as_ref()
    }
}

/// The name of slot `k` of a static pool.
pub fn slot_name(pool: &str, k: usize) -> String {
    names::fit(pool, &format!("static-{k}"))
}

/// The first `count` slot names of `pool` that no NodeClaim in `taken` holds.
pub fn free_slots(pool: &str, taken: &BTreeSet<String>, count: usize) -> Vec<String> {
    (0..)
        .map(|k| slot_name(pool, k))
        .filter(|n| !taken.contains(n))
        .take(count)
        .collect()
}

/// The replica count of a static NodePool; `None` for a dynamic one.
pub fn replicas(pool: &NodePool) -> Option<u32> {
    pool.spec
        .replicas
        .map(|r| u32::try_from(r.max(0)).unwrap_or(u32::MAX))
}

/// `spec.limits.nodes`: how many NodeClaims the pool may have at once, whatever their state.
pub fn node_limit(pool: &NodePool) -> Option<u32> {
    pool.spec
        .limits
        .get("nodes")
        .map(|q| u32::try_from(q.nanos().max(0) / 1_000_000_000).unwrap_or(u32::MAX))
}

/// Splits the static pools out of `pools` and works out what each needs now. `machines` and
/// `pods` are the snapshot's, for choosing which nodes to remove.
pub(super) fn split(
    node_pools: &[Sourced<NodePool>],
    claims: &[Sourced<NodeClaim>],
    pools: &mut Vec<PoolInput>,
    gates: &FeatureGates,
    warnings: &mut Vec<String>,
    unready: &mut Vec<super::pools::UnreadyPool>,
) -> Vec<StaticPool> {
    let taken: BTreeSet<String> = claims.iter().map(|c| c.object.name().to_string()).collect();
    let mut out = Vec::new();
    for np in node_pools {
        let Some(replicas) = replicas(&np.object) else {
            continue;
        };
        let name = np.object.metadata.name.clone().unwrap_or_default();
        let input = pools
            .iter()
            .position(|p| p.name == name)
            .map(|i| pools.remove(i));
        let of_pool = claims
            .iter()
            .map(|c| &c.object)
            .filter(|c| c.label(labels::NODEPOOL) == Some(name.as_str()));
        // Pending pods it could have served are told why it launches nothing for them.
        if input.is_some() {
            unready.push(super::pools::UnreadyPool::new(
                np,
                format!(
                    "it is a static NodePool, which keeps its {replicas} replicas (spec.replicas) \
                     and launches none for pods"
                ),
            ));
        }
        let counts = NodeCounts::of(of_pool);
        let node_limit = node_limit(&np.object);
        let idle = if !gates.enabled(FeatureGate::StaticCapacity) {
            warnings.push(format!(
                "{}: NodePool/{name}: spec.replicas: a static NodePool ({replicas} replicas) \
                 launches and removes nothing while the StaticCapacity feature gate is off, as it \
                 is by default in Karpenter (settings.featureGates.staticCapacity=true turns it on)",
                np.origin
            ));
            Some("the StaticCapacity feature gate is off".to_string())
        } else if np.object.metadata.deletion_timestamp.is_some() {
            Some("the NodePool is being deleted".to_string())
        } else if input.is_none() {
            // Why it cannot launch is already a warning of its own.
            Some("the NodePool cannot launch".to_string())
        } else {
            None
        };
        let mut pool = StaticPool {
            name,
            replicas,
            node_limit,
            counts,
            launch: Vec::new(),
            remove: Vec::new(),
            idle,
            input,
        };
        if pool.idle.is_none() {
            let (count, limited) = pool.deficit();
            pool.launch = free_slots(&pool.name, &taken, count as usize);
            if limited {
                warnings.push(format!(
                    "{}: NodePool/{}: spec.limits.nodes: {} of {} replicas can launch without \
                     going over the limit of {} nodes",
                    np.origin,
                    pool.name,
                    pool.counts.active + count,
                    pool.replicas,
                    pool.node_limit.unwrap_or_default()
                ));
            }
        }
        out.push(pool);
    }
    out
}

/// Chooses each over-provisioned static pool's NodeClaims to remove (see the module docs).
pub(super) fn choose_removals(
    statics: &mut [StaticPool],
    claims: &[Sourced<NodeClaim>],
    machines: &[ExistingNode],
    pods: &[PodInfo],
    warnings: &mut Vec<String>,
) {
    let mut on_node: BTreeMap<&str, Vec<&PodInfo>> = BTreeMap::new();
    for p in pods.iter().filter(|p| p.daemon_set.is_none()) {
        if let Some(node) = p.node_name.as_deref() {
            on_node.entry(node).or_default().push(p);
        }
    }
    for pool in statics.iter_mut().filter(|p| p.idle.is_none()) {
        let excess = pool.counts.active.saturating_sub(pool.replicas) as usize;
        if excess == 0 {
            continue;
        }
        let mut candidates: Vec<(Removal, String)> = claims
            .iter()
            .map(|c| &c.object)
            .filter(|c| c.label(labels::NODEPOOL) == Some(pool.name.as_str()))
            .filter(|c| is_active(c))
            .map(|c| (removal(c, machines, &on_node), c.name().to_string()))
            .collect();
        candidates.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        pool.remove = candidates
            .into_iter()
            .take(excess)
            .map(|(_, name)| name)
            .collect();
        warnings.push(format!(
            "NodePool/{}: {} NodeClaims run for {} replicas; scaling down removes {}",
            pool.name,
            pool.counts.active,
            pool.replicas,
            pool.remove.join(", ")
        ));
    }
}

/// Where a NodeClaim stands in the order of removal: lower goes first.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
enum Removal {
    /// Not launched yet: nothing runs there.
    Unlaunched,
    /// No pods but DaemonSet pods.
    Empty,
    /// Pods whose eviction costs this much in all.
    Busy(f64),
    /// Marked do-not-disrupt, or running a pod that is.
    Held(f64),
}

impl Removal {
    fn cmp(&self, other: &Removal) -> std::cmp::Ordering {
        self.partial_cmp(other).unwrap_or(std::cmp::Ordering::Equal)
    }
}

fn removal(
    claim: &NodeClaim,
    machines: &[ExistingNode],
    on_node: &BTreeMap<&str, Vec<&PodInfo>>,
) -> Removal {
    if claim.status.provider_id.is_none() {
        return Removal::Unlaunched;
    }
    let node = super::machines::machine_name(claim);
    let pods = on_node.get(node.as_str()).map_or(&[][..], Vec::as_slice);
    let cost: f64 = pods.iter().map(|p| p.eviction_cost.max(0.0)).sum();
    let held = pods.iter().any(|p| p.do_not_disrupt)
        || machines.iter().any(|m| m.name == node && m.do_not_disrupt);
    match (held, pods.is_empty()) {
        (true, _) => Removal::Held(cost),
        (false, true) => Removal::Empty,
        (false, false) => Removal::Busy(cost),
    }
}

/// A static NodeClaim planned now as a machine in flight: what the controller's next view makes
/// of it once it is created, so that pending pods are planned onto it in the same plan.
pub(super) fn machine(
    claim: &PlannedNodeClaim,
    pool: &PoolInput,
    option: &LaunchOption,
) -> ExistingNode {
    ExistingNode {
        name: claim.name.clone(),
        labels: claim.labels.clone(),
        taints: pool.taints.clone(),
        allocatable: claim.resources.allocatable.clone(),
        capacity: option.capacity.clone(),
        node_pool: Some(pool.name.clone()),
        price: Some(claim.price_per_hour),
        do_not_disrupt: false,
        consolidation_candidate: false,
        node_claim: Some(claim.name.clone()),
        in_flight: true,
    }
}

/// Puts the static launches at the head of the plan, each with the pending pods the plan
/// placed on it, and counts their price.
pub(super) fn attach(plan: &mut Plan, mut launches: Vec<PlannedNodeClaim>) {
    for claim in &mut launches {
        claim.pods = plan
            .bindings
            .iter()
            .filter(|b| b.node == claim.name)
            .map(|b| b.pod.clone())
            .collect();
    }
    launches.append(&mut plan.node_claims);
    plan.node_claims = launches;
    plan.total_price_per_hour = plan.node_claims.iter().map(|c| c.price_per_hour).sum();
}
