//! Disruption: removing and replacing nodes once the work shrinks, a node has lived too long,
//! no longer matches its NodePool, or the cloud is taking it away.
//!
//! One step of [`disrupt`] runs after provisioning:
//!
//! 0. Bookkeeping: NodeClaims without this version's NodePool/EC2NodeClass hashes are stamped,
//!    and the `Drifted` condition is set (or cleared) as [`drift::drift_of`] finds.
//! 1. Interruptions ([`crate::interruption`] marked the NodeClaims in this same step, or this
//!    step marked them because their Capacity Block ends soon): the pods of every newly
//!    interrupted node get replacement capacity, planned without those nodes and launched at
//!    once, whatever the budgets. Then each node drains as its notice's kind allows
//!    ([`joiner_model::wellknown::InterruptionKind`]): a spot reclaim, a stopping instance or a
//!    Capacity Block's end at once (the GPU node the pods need is already booting when they are
//!    evicted: a GPU node takes minutes to initialize, longer than the two minutes a spot
//!    warning gives); a scheduled change days ahead once its replacements are initialized, or
//!    [`INTERRUPTION_DRAIN_LEAD`] before its deadline. The drain's deadline is the
//!    interruption's ([`crate::interruption::marked`]); a spot or stopping node's drain evicts
//!    every pod at once, do-not-disrupt notwithstanding.
//! 2. A disruption in progress (old NodeClaims annotated with [`annotations::DISRUPTION_REASON`] and the
//!    replacements they wait for in [`annotations::REPLACED_BY`]) is carried on: once every replacement is
//!    initialized the old nodes are tainted `karpenter.sh/disrupted:NoSchedule` and their
//!    NodeClaims deleted; the termination finalizer ([`crate::termination`]) drains them (pods
//!    marked `karpenter.sh/do-not-disrupt` wait, the rest are evicted only as far as their
//!    PodDisruptionBudgets allow) and terminates the instances. A replacement that went away
//!    (no capacity) aborts the move. A move that fails is reported and holds back no other's
//!    step. While one waits for its replacements no new voluntary move starts (the next plan
//!    would count on the same planned capacity); once its old NodeClaim is deleted, its drain
//!    holds back nothing but its own node.
//! 3. Otherwise expiry: the oldest NodeClaim older than its `expireAfter` and not yet being
//!    disrupted gets replacement capacity for its pods (planned without it), launched first,
//!    then is drained. Expiry is not budgeted (as in Karpenter v1).
//! 4. Otherwise drift: the oldest drifted NodeClaim, within the budgets for `Drifted`, is
//!    replaced the same way. A node or pod marked do-not-disrupt, or a pod whose
//!    PodDisruptionBudget allows no eviction, holds it back unless the NodeClaim has a
//!    `terminationGracePeriod`.
//! 5. Otherwise consolidation:
//!    [`joiner_engine::disruption::consolidate`] over the same snapshot provisioning plans
//!    (in-flight NodeClaims counted as nodes), with only the nodes whose bound pods have not
//!    changed for their NodePool's `consolidateAfter` (and that no PodDisruptionBudget pins) as
//!    candidates, and only while the cluster is not settling ([`settling`]: what cannot
//!    progress is excluded, not waited for). The first decision is taken within the NodePools'
//!    disruption budgets ([`budgets`]), once it has stayed the decision for
//!    [`VALIDATION_PERIOD`].
//!
//! Replacements for expiry, drift and interruption are planned by
//! [`joiner_engine::disruption::replacements`]. Draining is termination's: it counts the
//! NodeClaim's `terminationGracePeriod` from the NodeClaim's deletion, as Karpenter does, and
//! records the deadline in [`annotations::TERMINATION_TIMESTAMP`].
//!
//! All durable state is in annotations, conditions and taints; what is kept in memory (since when
//! each node's pods are unchanged, the last state consolidation found nothing in) is rebuilt by a
//! new controller, which at worst waits `consolidateAfter` again.

mod blocked;
pub mod budgets;
pub mod consolidatable;
pub mod drift;
mod statics;

use std::collections::{BTreeMap, BTreeSet};

use joiner_engine::plan::PlannedNodeClaim;
use joiner_model::api::NodePool;
use joiner_model::api::ec2nodeclass::EC2NodeClass;
use joiner_model::api::nodepool::ConsolidationPolicy;
use joiner_model::wellknown::{ConsolidationType, DisruptionAction, DisruptionReason};
use joiner_model::wellknown::{annotations, labels, taints};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;

pub use budgets::allowed_disruptions;

use crate::batcher::fnv1a;
use crate::clock::{add, duration_setting, elapsed, k8s_time};
use crate::cloud::CloudProvider;
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::interruption::is_interrupted;
use crate::lifecycle;
use crate::nodeclaim::node_claim_for;
use crate::nodeclaim::stamp::{restamp, stamp};
use crate::pods::{is_held, is_node_held, is_pending, pod_key};
use crate::report::Reconciler;
use crate::report::{DisruptionCause, DisruptionEvent, StepReport};
use crate::store::{ClusterStore, StoreError};
use joiner_model::api::nodeclaim::{NodeClaim, conditions};

/// What the disruption step remembers between steps (a cache; see the module docs).
#[derive(Debug, Default)]
pub struct DisruptionState {
    /// Node name to the hash of its bound pods and since when it has been that.
    pods_since: BTreeMap<String, (u64, Timestamp)>,
    /// The state in which consolidation last found nothing to do.
    quiet: Option<u64>,
    /// The consolidation decided and not yet acted on: its fingerprint, when it was first
    /// decided ([`VALIDATION_PERIOD`]) and its kind.
    validating: Option<(u64, Timestamp, ConsolidationType)>,
    /// What consolidation last said it goes on without ([`settling`]).
    excluded: Option<u64>,
    /// The pending pods the last plan placed, and the state of the cluster it planned
    /// ([`placed_pending`]): while nothing changes, a pod no node can take is not planned again
    /// every step.
    placed: Option<(u64, BTreeSet<String>)>,
    /// The moves consolidation last weighed: the same moves weighed again, step after step
    /// while a decision validates, are counted once.
    weighed: Option<u64>,
}

/// How long a consolidation decision must keep being the decision before anything is
/// cordoned: Karpenter's validation period. A pod that was on its way to a node that looked
/// empty, or a cache that was behind, shows within it and changes or cancels the decision.
pub const VALIDATION_PERIOD: std::time::Duration = std::time::Duration::from_secs(15);

struct View {
    pools: BTreeMap<String, NodePool>,
    classes: BTreeMap<String, EC2NodeClass>,
    claims: Vec<NodeClaim>,
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    pdbs: Vec<PodDisruptionBudget>,
    /// Each node's pods (indices into `pods`, those being deleted left out, as
    /// [`crate::pods::bound_to`]), built once per step: every pass over the nodes asks for them.
    by_node: BTreeMap<String, Vec<usize>>,
    /// Karpenter's `StaticCapacity` gate: off, static pools' nodes are left alone
    /// ([`statics`]).
    static_capacity: bool,
}

impl View {
    /// The pods bound to `node`, less those being deleted.
    fn pods_on<'a>(&'a self, node: &str) -> impl Iterator<Item = &'a Pod> + 'a {
        self.by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|&i| self.pods.get(i))
    }
    fn claim_of_node(&self, node: &str) -> Option<&NodeClaim> {
        self.claims
            .iter()
            .find(|c| c.status.node_name.as_deref() == Some(node))
    }
    fn pool_of(&self, claim: &NodeClaim) -> Option<&NodePool> {
        self.pools.get(claim.label(labels::NODEPOOL)?)
    }
    fn class_of(&self, claim: &NodeClaim) -> Option<&EC2NodeClass> {
        self.classes.get(&claim.spec.node_class_ref.name)
    }
    /// Live NodeClaims of a pool, and how many of them are being disrupted.
    fn pool_counts(&self, pool: &str) -> (usize, usize) {
        let of_pool: Vec<&NodeClaim> = self
            .claims
            .iter()
            .filter(|c| c.label(labels::NODEPOOL) == Some(pool))
            .collect();
        let disrupting = of_pool
            .iter()
            .filter(|c| {
                c.is_deleting()
                    || c.annotation(annotations::DISRUPTION_REASON).is_some()
                    || c.is_true(conditions::REBOOTING)
            })
            .count();
        let total = of_pool.iter().filter(|c| !c.is_deleting()).count();
        (total, disrupting)
    }
    /// How many more of the pool's nodes may be disrupted now for `reason`.
    fn budget_left(&self, pool_name: &str, reason: DisruptionReason, now: Timestamp) -> usize {
        let Some(pool) = self.pools.get(pool_name) else {
            return 0;
        };
        let (total, disrupting) = self.pool_counts(pool_name);
        allowed_disruptions(pool, reason, total, now).saturating_sub(disrupting)
    }
    /// The PodDisruptionBudget that would hold up a drain of the claim's node now, if any: such
    /// a node is no candidate for a graceful move (drift, consolidation), as in Karpenter.
    fn blocked_by_budget(&self, claim: &NodeClaim) -> Option<String> {
        let node = claim.status.node_name.as_deref()?;
        self.pods_on(node)
            .filter(|p| !crate::pods::is_daemon_pod(p))
            .find_map(|p| crate::store::pdb::blocking(&self.pdbs, &self.pods, p))
    }
    /// Whether the claim's node is marked do-not-disrupt, or one of its pods is held by it at
    /// `now`.
    fn do_not_disrupt(&self, claim: &NodeClaim, now: Timestamp) -> bool {
        let Some(node) = claim.status.node_name.as_deref() else {
            return false;
        };
        self.nodes
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(node) && is_node_held(&n.metadata))
            || self.pods_on(node).any(|p| is_held(p, now))
    }
}

/// Each node's pods, as indices into `pods`: those [`crate::pods::bound_to`] it.
fn pods_by_node(pods: &[Pod]) -> BTreeMap<String, Vec<usize>> {
    let mut out: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, p) in pods.iter().enumerate() {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            out.entry(node.to_string()).or_default().push(i);
        }
    }
    out
}

fn by_name<T>(items: Vec<T>, name: impl Fn(&T) -> Option<String>) -> BTreeMap<String, T> {
    items
        .into_iter()
        .filter_map(|i| name(&i).map(|n| (n, i)))
        .collect()
}

/// One disruption pass (see the module docs).
pub fn disrupt<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    state: &mut DisruptionState,
) -> Result<(), ControllerError> {
    // A Capacity Block about to end takes its nodes as an interruption does.
    crate::interruption::mark_ending_capacity_blocks(ctx)?;
    let view = View {
        pools: by_name(ctx.store.list::<NodePool>()?, |p| p.metadata.name.clone()),
        classes: by_name(ctx.store.list::<EC2NodeClass>()?, |c| {
            c.metadata.name.clone()
        }),
        claims: ctx.store.list::<NodeClaim>()?,
        nodes: ctx.store.list::<Node>()?,
        pods: ctx.store.list::<Pod>()?,
        pdbs: ctx.store.list::<PodDisruptionBudget>()?,
        by_node: BTreeMap::new(),
        static_capacity: ctx
            .config
            .settings
            .feature_gates
            .enabled(joiner_model::feature_gates::FeatureGate::StaticCapacity),
    };
    let view = View {
        by_node: pods_by_node(&view.pods),
        ..view
    };
    track_pods(ctx.now, &view, state);

    // 0. Hash stamps and Drifted conditions; pod events and Consolidatable.
    let drifted = mark_drift(ctx, &view)?;
    record_pod_events(ctx, &view, state);
    ctx.report.eligible = Some(eligible_counts(ctx.now, &view, state, &drifted));
    ctx.report.budgets = Some(budgets_left(ctx.now, &view));
    ctx.report.disruption_blocked = blocked::blocks(&view, ctx.now);
    ctx.report.unconsolidatable = blocked::unconsolidatable(&view);
    ctx.report.do_not_disrupt = blocked::do_not_disrupt_notes(&view, ctx.now);

    // 1. Interruptions, whatever else is going on.
    let interrupted: Vec<NodeClaim> = view
        .claims
        .iter()
        .filter(|c| {
            !c.is_deleting()
                && is_interrupted(c)
                && c.annotation(annotations::DISRUPTION_REASON)
                    != Some(DisruptionReason::Interrupted.as_str())
        })
        .cloned()
        .collect();
    if !interrupted.is_empty() {
        start_move(
            ctx,
            &view,
            &interrupted,
            DisruptionReason::Interrupted,
            None,
        )?;
    }
    let just_interrupted: BTreeSet<&str> = interrupted.iter().map(NodeClaim::name).collect();

    // 2. Moves in progress.
    let in_progress: Vec<&NodeClaim> = view
        .claims
        .iter()
        .filter(|c| {
            !c.is_deleting()
                && c.annotation(annotations::DISRUPTION_REASON).is_some()
                && !just_interrupted.contains(c.name())
        })
        .collect();
    let voluntary_in_progress = in_progress.iter().any(|c| {
        c.annotation(annotations::DISRUPTION_REASON) != Some(DisruptionReason::Interrupted.as_str())
    });
    for claim in &in_progress {
        // One move that cannot go on does not hold back the others.
        if let Err(e) = continue_move(ctx, &view, claim) {
            ctx.error(
                Reconciler::Disruption,
                &format!("disrupting NodeClaim {}", claim.name()),
                e,
            );
        }
    }
    // A move waiting for its replacements holds back the start of the next one: the
    // replacements it waits for are planned capacity that the next move's plan would count on
    // again. A move whose old NodeClaim is deleted is over as far as disruption goes: its drain
    // (held up by a PodDisruptionBudget, say), like an interrupted node's, counts against the
    // budgets but holds back no other node.
    if voluntary_in_progress || !interrupted.is_empty() {
        return Ok(());
    }

    // 3. Expiry.
    if let Some(claim) = expired(ctx.now, &view) {
        let claim = claim.clone();
        return start_move(ctx, &view, &[claim], DisruptionReason::Expired, None);
    }

    // 4. Drift.
    let started = std::time::Instant::now();
    let drift = drift_candidates(ctx.now, &view, &drifted);
    ctx.report
        .decision_evaluations
        .push((None, started.elapsed()));
    if let Some(claim) = drift.into_iter().next() {
        let claim = claim.clone();
        return start_move(ctx, &view, &[claim], DisruptionReason::Drifted, None);
    }

    // 5. Consolidation.
    consolidation(ctx, &view, state)
}

/// Stamps NodeClaims that lack this version's hashes and sets or clears their `Drifted`
/// condition. Returns the names of the drifted NodeClaims.
fn mark_drift<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    view: &View,
) -> Result<BTreeSet<String>, ControllerError> {
    let mut out = BTreeSet::new();
    for claim in view
        .claims
        .iter()
        .filter(|c| !c.is_deleting() && c.is_true(conditions::LAUNCHED))
    {
        let Some(pool) = view.pool_of(claim) else {
            continue;
        };
        let class = view.class_of(claim);
        let mut updated = claim.clone();
        let restamped = restamp(&mut updated, pool, class);
        let found = drift::drift_of(&updated, pool, class, None).or_else(|| {
            let expected = class.and_then(|c| ctx.placement_groups.expected_id(c));
            drift::placement_drift(&updated, expected)
        });
        let had = claim.condition(conditions::DRIFTED);
        let unchanged = match (&found, had) {
            (None, None) => true,
            (Some(d), Some(c)) => c.status == "True" && c.reason == d.reason(),
            _ => false,
        };
        if let Some(d) = &found {
            out.insert(claim.name().to_string());
            if !unchanged {
                tracing::info!(
                    nodeclaim = claim.name(),
                    reason = d.reason(),
                    "drifted: {}",
                    d.message()
                );
                ctx.report.disruption.push(DisruptionEvent {
                    action: DisruptionAction::Drifted,
                    reason: DisruptionCause::Drift(d.kind()),
                    node_claims: vec![claim.name().to_string()],
                    detail: vec![d.message()],
                });
            }
        }
        if unchanged && !restamped {
            continue;
        }
        match &found {
            Some(d) => updated.set_condition(
                conditions::DRIFTED,
                true,
                d.reason(),
                &d.message(),
                k8s_time(ctx.now),
            ),
            None => updated
                .status
                .conditions
                .retain(|c| c.type_ != conditions::DRIFTED),
        }
        match ctx.store.update(&updated) {
            // Someone else wrote it first: look again next step.
            Ok(_) | Err(StoreError::Conflict(_) | StoreError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

/// Writes each NodeClaim's `lastPodEventTime` and `Consolidatable` where they changed. One
/// that cannot be written waits for the next step; the others go on.
fn record_pod_events<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    view: &View,
    state: &DisruptionState,
) {
    for claim in view.claims.iter().filter(|c| !c.is_deleting()) {
        let Some(node) = claim.status.node_name.as_deref() else {
            continue;
        };
        let Some((_, since)) = state.pods_since.get(node) else {
            continue;
        };
        let after = view
            .pool_of(claim)
            .map_or("Never", |p| p.spec.disruption.consolidate_after.as_str());
        let quiet = consolidatable::consolidatable(claim, after, *since, ctx.now);
        let mut updated = claim.clone();
        if !consolidatable::update(&mut updated, *since, quiet, ctx.now) {
            continue;
        }
        match ctx.store.update(&updated) {
            // Written by someone else meanwhile (the drift mark of this step): next step.
            Ok(_) | Err(StoreError::Conflict(_) | StoreError::NotFound(_)) => {}
            Err(e) => ctx.error(
                Reconciler::Disruption,
                &format!("recording pod events of NodeClaim {}", claim.name()),
                e,
            ),
        }
    }
}

/// The drifted NodeClaim to replace now: initialized, not being disrupted, within its pool's
/// budget for `Drifted`, not held by do-not-disrupt or a PodDisruptionBudget that allows no
/// eviction (unless it has a termination grace period); the oldest first.
fn drift_candidates<'a>(
    now: Timestamp,
    view: &'a View,
    drifted: &BTreeSet<String>,
) -> Vec<&'a NodeClaim> {
    let mut candidates: Vec<&NodeClaim> = view
        .claims
        .iter()
        .filter(|c| drifted.contains(c.name()))
        .filter(|c| !c.is_deleting() && c.is_true(conditions::INITIALIZED))
        .filter(|c| !c.is_true(conditions::REBOOTING))
        .filter(|c| statics::may_disrupt(view, c) && statics::drift_ready(view, c))
        .filter(|c| c.annotation(annotations::DISRUPTION_REASON).is_none())
        // A termination grace period bounds the drain, so neither holds a drift back then (as
        // in Karpenter).
        .filter(|c| {
            c.spec.termination_grace_period.is_some()
                || (!view.do_not_disrupt(c, now) && view.blocked_by_budget(c).is_none())
        })
        .filter(|c| {
            c.label(labels::NODEPOOL)
                .is_some_and(|p| view.budget_left(p, DisruptionReason::Drifted, now) > 0)
        })
        .collect();
    candidates.sort_by(|a, b| {
        let created = |c: &NodeClaim| c.metadata.creation_timestamp.as_ref().map(|t| t.0);
        created(a).cmp(&created(b)).then(a.name().cmp(b.name()))
    });
    candidates
}

/// What each pool's budgets allow each voluntary disruption now, and how many of its nodes are
/// being disrupted (Karpenter's `karpenter_nodepools_allowed_disruptions` and
/// `karpenter_nodepools_nodes_consuming_budgets`).
fn budgets_left(now: Timestamp, view: &View) -> Vec<crate::report::PoolBudget> {
    let reasons = [
        DisruptionReason::Empty,
        DisruptionReason::Underutilized,
        DisruptionReason::Drifted,
    ];
    view.pools
        .keys()
        .flat_map(|pool| {
            let (nodes, disrupting) = view.pool_counts(pool);
            reasons
                .into_iter()
                .map(move |reason| crate::report::PoolBudget {
                    nodepool: pool.clone(),
                    reason,
                    allowed: view.budget_left(pool, reason, now),
                    disrupting,
                    nodes,
                })
        })
        .collect()
}

/// How many nodes each voluntary disruption could take now (Karpenter's
/// `karpenter_voluntary_disruption_eligible_nodes`): drifted NodeClaims drift may replace, and
/// the consolidation candidates, empty ones apart.
fn eligible_counts(
    now: Timestamp,
    view: &View,
    state: &DisruptionState,
    drifted: &BTreeSet<String>,
) -> Vec<(DisruptionReason, usize)> {
    let candidates = consolidation_candidates(now, view, state);
    let empty = candidates
        .iter()
        .filter(|node| {
            !view.pods_on(node).any(|p| {
                !crate::pods::is_daemon_pod(p)
                    && !matches!(
                        p.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Succeeded" | "Failed")
                    )
            })
        })
        .count();
    let underutilized = candidates
        .iter()
        .filter(|node| {
            view.claim_of_node(node)
                .and_then(|c| view.pool_of(c))
                .is_some_and(|p| {
                    p.spec.disruption.consolidation_policy != ConsolidationPolicy::WhenEmpty
                })
        })
        .count();
    vec![
        (DisruptionReason::Empty, empty),
        (DisruptionReason::Underutilized, underutilized),
        (
            DisruptionReason::Drifted,
            drift_candidates(now, view, drifted).len(),
        ),
    ]
}

/// Records since when each node's bound pods have been what they are.
fn track_pods(now: Timestamp, view: &View, state: &mut DisruptionState) {
    let mut seen = BTreeMap::new();
    for node in &view.nodes {
        let Some(name) = node.metadata.name.clone() else {
            continue;
        };
        let keys: Vec<String> = view.pods_on(&name).map(pod_key).collect();
        let parts: Vec<&str> = keys.iter().map(String::as_str).collect();
        let hash = fnv1a(&parts);
        let entry = match state.pods_since.get(&name) {
            Some((h, since)) if *h == hash => (hash, *since),
            Some(_) => (hash, now),
            // First seen (a restart): since its NodeClaim last recorded a pod event, so a
            // restart does not start its `consolidateAfter` over.
            None => {
                let recorded = view
                    .claim_of_node(&name)
                    .and_then(consolidatable::recorded_pod_event);
                (hash, recorded.map_or(now, |t| t.min(now)))
            }
        };
        seen.insert(name, entry);
    }
    state.pods_since = seen;
}

/// The NodeClaim that expired first, if any (initialized ones not already being disrupted).
fn expired(now: Timestamp, view: &View) -> Option<&NodeClaim> {
    view.claims
        .iter()
        .filter(|c| !c.is_deleting() && c.is_true(conditions::INITIALIZED))
        .filter(|c| c.annotation(annotations::DISRUPTION_REASON).is_none())
        .filter(|c| !c.is_true(conditions::REBOOTING))
        .filter(|c| statics::may_disrupt(view, c))
        .filter_map(|c| {
            let after = duration_setting(c.spec.expire_after.as_deref()?)?;
            let created = c.metadata.creation_timestamp.as_ref()?.0;
            let deadline = add(created, after);
            (deadline <= now).then_some((deadline, c))
        })
        .min_by(|a, b| a.0.cmp(&b.0).then(a.1.name().cmp(b.1.name())))
        .map(|(_, c)| c)
}

/// Plans the pods of `nodes` elsewhere, without asking for a saving (see
/// [`joiner_engine::disruption::replacements`]).
fn replacements_for<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    nodes: &[String],
) -> Result<joiner_engine::disruption::Replacements, ControllerError> {
    Ok(ctx.view()?.replacements(nodes))
}

fn consolidation<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    view: &View,
    state: &mut DisruptionState,
) -> Result<(), ControllerError> {
    if settling(ctx, view, state)? {
        abandon_validation(state, ctx.report);
        return Ok(());
    }
    let eligible = consolidation_candidates(ctx.now, view, state);
    if eligible.is_empty() {
        abandon_validation(state, ctx.report);
        return Ok(());
    }
    let mut parts: Vec<String> = eligible.iter().cloned().collect();
    parts.push("--".into());
    // A changed NodePool (new instance types allowed, say) may open new moves, and so may a
    // budget that a schedule opened.
    for (name, pool) in &view.pools {
        parts.push(format!(
            "{name}@{}:{}:{}",
            pool.metadata
                .resource_version
                .as_deref()
                .unwrap_or_default(),
            view.budget_left(name, DisruptionReason::Empty, ctx.now),
            view.budget_left(name, DisruptionReason::Underutilized, ctx.now),
        ));
    }
    for p in &view.pods {
        parts.push(format!(
            "{}@{}",
            pod_key(p),
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .unwrap_or("")
        ));
    }
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    let fingerprint = fnv1a(&refs);
    if state.quiet == Some(fingerprint) {
        return Ok(());
    }
    ctx.set_consolidation_candidates(eligible);
    let view_now = ctx.view()?;
    let mut timed = Vec::new();
    let mut last = std::time::Instant::now();
    let (decisions, weighed) = view_now.consolidate_weighed(&mut |kind| {
        timed.push((Some(kind), last.elapsed()));
        last = std::time::Instant::now();
    });
    ctx.report.decision_evaluations.extend(timed);
    let said: Vec<String> = weighed.iter().map(|v| format!("{v:?}")).collect();
    let said = fnv1a(&said.iter().map(String::as_str).collect::<Vec<_>>());
    if !weighed.is_empty() && state.weighed != Some(said) {
        state.weighed = Some(said);
        ctx.report.consolidation_moves.extend(weighed);
    }
    for d in decisions {
        let reason = d.reason;
        // Within budgets: empty nodes up to what each pool allows; other moves whole or not.
        let mut left: BTreeMap<String, usize> = BTreeMap::new();
        let mut chosen = Vec::new();
        for node in &d.nodes {
            let Some(claim) = view.claim_of_node(node) else {
                continue;
            };
            let Some(pool_name) = claim.label(labels::NODEPOOL) else {
                continue;
            };
            let allowed = *left
                .entry(pool_name.to_string())
                .or_insert_with(|| view.budget_left(pool_name, reason, ctx.now));
            if allowed == 0 {
                continue;
            }
            left.insert(pool_name.to_string(), allowed - 1);
            chosen.push(claim.clone());
        }
        if chosen.is_empty()
            || (d.reason != DisruptionReason::Empty && chosen.len() < d.nodes.len())
        {
            continue;
        }
        state.quiet = None;
        if !validated(ctx.now, state, ctx.report, reason, &chosen, &d.replacements) {
            return Ok(());
        }
        return start_move(ctx, view, &chosen, reason, Some(d.replacements));
    }
    abandon_validation(state, ctx.report);
    state.quiet = Some(fingerprint);
    Ok(())
}

/// How long a NodeClaim's deletion goes on before consolidation's exclusion event names it.
const SLOW_DRAIN: std::time::Duration = std::time::Duration::from_secs(5 * 60);

/// Consolidation candidates: initialized nodes of a NodePool whose pods have not changed for
/// `consolidateAfter`, not marked do-not-disrupt, not held by a budget.
fn consolidation_candidates(
    now: Timestamp,
    view: &View,
    state: &DisruptionState,
) -> BTreeSet<String> {
    let mut eligible = BTreeSet::new();
    for node in &view.nodes {
        let Some(name) = node.metadata.name.as_deref() else {
            continue;
        };
        let Some(claim) = view.claim_of_node(name) else {
            continue;
        };
        // A node node repair is rebooting is empty for a while, not for good.
        if claim.is_deleting()
            || !claim.is_true(conditions::INITIALIZED)
            || claim.annotation(annotations::DISRUPTION_REASON).is_some()
            || claim.is_true(conditions::REBOOTING)
        {
            continue;
        }
        let Some(pool) = view.pool_of(claim) else {
            continue;
        };
        let Some(after) = duration_setting(&pool.spec.disruption.consolidate_after) else {
            continue;
        };
        let since = state.pods_since.get(name).map(|s| s.1).unwrap_or(now);
        if elapsed(now, since) >= after
            && !is_node_held(&node.metadata)
            && view.blocked_by_budget(claim).is_none()
        {
            eligible.insert(name.to_string());
        }
    }
    eligible
}

/// Whether the cluster is still settling, so consolidation waits: a pending pod the plan
/// places (it is on its way to a node that may look empty), or a NodeClaim launching within its
/// registration timeout (capacity about to exist). What cannot progress holds nothing back and
/// is only excluded: a pending pod no node can take (it waits with its reason) or that waits for
/// scheduling gates, a NodeClaim being deleted (a drain a PodDisruptionBudget holds up: it is
/// no candidate, its pods count where they are), a NodeClaim past its registration timeout
/// without initializing. A [`DisruptionAction::Excluded`] event names them whenever the set
/// changes.
fn settling<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    view: &View,
    state: &mut DisruptionState,
) -> Result<bool, ControllerError> {
    // NodeClaims first: one launching answers without a plan of the pending pods, which with
    // thousands of them is the dearest question of the step (its own provisioning has just
    // created NodeClaims for them).
    let mut claims_excluded: Vec<String> = Vec::new();
    for c in &view.claims {
        if c.is_deleting() {
            // Named once its drain has gone on for a while: most end within minutes.
            let since = c.metadata.deletion_timestamp.as_ref().map(|t| t.0);
            if since.is_some_and(|t| elapsed(ctx.now, t) >= SLOW_DRAIN) {
                claims_excluded.push(format!(
                    "NodeClaim {} has been deleting for {} min",
                    c.name(),
                    SLOW_DRAIN.as_secs() / 60
                ));
            }
        } else if !c.is_true(conditions::INITIALIZED) {
            let launched = c.metadata.creation_timestamp.as_ref().map(|t| t.0);
            if launched.is_none_or(|t| add(t, ctx.config.registration_timeout) > ctx.now) {
                return Ok(true);
            }
            claims_excluded.push(format!(
                "NodeClaim {} has not initialized within {:?}",
                c.name(),
                ctx.config.registration_timeout
            ));
        }
    }
    let mut excluded: Vec<String> = Vec::new();
    let pending: Vec<&Pod> = view.pods.iter().filter(|p| is_pending(p)).collect();
    if !pending.is_empty() {
        let placed = placed_pending(ctx, view, state)?;
        for pod in pending {
            let key = pod_key(pod);
            if placed.contains(key.as_str()) {
                return Ok(true);
            }
            excluded.push(format!(
                "pod {key} can not be placed: consolidation goes on without it"
            ));
        }
    }
    excluded.extend(claims_excluded);
    let parts: Vec<&str> = excluded.iter().map(String::as_str).collect();
    let said = fnv1a(&parts);
    if !excluded.is_empty() && state.excluded != Some(said) {
        tracing::info!(excluded = ?excluded, "consolidation goes on without what cannot progress");
        ctx.report.disruption.push(DisruptionEvent {
            action: DisruptionAction::Excluded,
            reason: DisruptionCause::Reason(DisruptionReason::Underutilized),
            node_claims: Vec::new(),
            detail: excluded,
        });
    }
    state.excluded = Some(said);
    Ok(false)
}

/// The pods the plan places, planned again only when a pod, NodeClaim, Node, NodePool or
/// EC2NodeClass changed (their resourceVersions) since the last time.
fn placed_pending<'s, S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    view: &View,
    state: &'s mut DisruptionState,
) -> Result<&'s BTreeSet<String>, ControllerError> {
    let version = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        format!(
            "{}@{}",
            m.name.as_deref().unwrap_or_default(),
            m.resource_version.as_deref().unwrap_or_default()
        )
    };
    let mut parts: Vec<String> = view.pods.iter().map(|p| version(&p.metadata)).collect();
    parts.extend(view.claims.iter().map(|c| version(&c.metadata)));
    parts.extend(view.nodes.iter().map(|n| version(&n.metadata)));
    parts.extend(view.pools.values().map(|p| version(&p.metadata)));
    parts.extend(view.classes.values().map(|c| version(&c.metadata)));
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    let cluster = fnv1a(&refs);
    if state.placed.as_ref().is_none_or(|(c, _)| *c != cluster) {
        let placed = ctx.view()?.placed_pods();
        state.placed = Some((cluster, placed));
    }
    Ok(&state
        .placed
        .get_or_insert_with(|| (cluster, BTreeSet::new()))
        .1)
}

/// Whether the consolidation decided now was already the decision [`VALIDATION_PERIOD`] ago
/// (the same reason, nodes and replacements), so it may go ahead; otherwise it is recorded as
/// the one to validate, and nothing is done yet.
fn validated(
    now: Timestamp,
    state: &mut DisruptionState,
    report: &mut StepReport,
    reason: DisruptionReason,
    chosen: &[NodeClaim],
    replacements: &[PlannedNodeClaim],
) -> bool {
    let mut parts: Vec<String> = vec![reason.as_str().to_string()];
    parts.extend(chosen.iter().map(|c| c.name().to_string()));
    parts.extend(
        replacements
            .iter()
            .map(|r| format!("{}/{}/{}", r.node_pool, r.instance_type, r.zone)),
    );
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    let decision = fnv1a(&refs);
    match state.validating {
        Some((d, since, _)) if d == decision => {
            if elapsed(now, since) >= VALIDATION_PERIOD {
                state.validating = None;
                true
            } else {
                false
            }
        }
        _ => {
            abandon_validation(state, report);
            tracing::debug!(nodeclaims = ?parts, "consolidation decided; validating it");
            let kind =
                ConsolidationType::of(reason, chosen.len()).unwrap_or(ConsolidationType::Single);
            state.validating = Some((decision, now, kind));
            false
        }
    }
}

/// Drops the consolidation being validated, if any: it is no longer the decision (another
/// move, or none, was decided since), which Karpenter counts as a failed validation.
fn abandon_validation(state: &mut DisruptionState, report: &mut StepReport) {
    if let Some((_, _, kind)) = state.validating.take() {
        tracing::debug!(
            kind = kind.as_str(),
            "the consolidation being validated no longer holds"
        );
        report.failed_validations.push(kind);
    }
}

/// Starts a move: launches the replacements (planned now when `None`), marks and taints the old
/// nodes, and drains at once when there is nothing to wait for or the move is an interruption.
///
/// The replacements are created before the old NodeClaims are annotated. After a crash between
/// the two, planning again puts the old nodes' pods on the replacements already in flight; the
/// move then waits for those (found through the plan's bindings) instead of launching more.
fn start_move<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    view: &View,
    old: &[NodeClaim],
    reason: DisruptionReason,
    replacements: Option<Vec<PlannedNodeClaim>>,
) -> Result<(), ControllerError> {
    let names: Vec<String> = old.iter().map(|c| c.name().to_string()).collect();
    let interrupted = reason == DisruptionReason::Interrupted;
    let mut wait_for: Vec<String> = Vec::new();
    let replacements = match replacements {
        Some(r) => r,
        None => {
            // A static pool's node is replaced one for one ([`statics`]); the pods of the
            // others are planned elsewhere.
            let (fixed, dynamic): (Vec<&NodeClaim>, Vec<&NodeClaim>) =
                old.iter().partition(|c| view.static_pool(c).is_some());
            let mut planned = statics::replacements(ctx, view, &fixed)?;
            if planned.len() < fixed.len() && statics::waits_without_replacement(reason) {
                tracing::info!(nodeclaims = ?names, "{reason}: no replacement for a static NodePool's node yet; waiting");
                return Ok(());
            }
            if dynamic.is_empty() {
                planned
            } else {
                // A NodeClaim not registered yet stands in the snapshot under its own name.
                let node_names: Vec<String> = dynamic
                    .iter()
                    .map(|c| {
                        c.status
                            .node_name
                            .clone()
                            .unwrap_or_else(|| c.name().to_string())
                    })
                    .collect();
                let r = replacements_for(ctx, &node_names)?;
                if !r.complete() {
                    let pods: Vec<String> = r.unschedulable.iter().map(|u| u.pod.clone()).collect();
                    if !interrupted {
                        // Its pods fit nowhere, not even on new nodes: leave it be for now.
                        tracing::info!(nodeclaims = ?names, ?pods, "{reason}: no room for every pod; waiting");
                        return Ok(());
                    }
                    tracing::warn!(nodeclaims = ?names, ?pods, "interrupted: no room for some pods");
                }
                for b in &r.bindings {
                    if let Some(c) = view.claims.iter().find(|c| {
                        !c.is_deleting()
                            && !c.is_true(conditions::INITIALIZED)
                            && !names.contains(&c.name().to_string())
                            && (c.name() == b.node
                                || c.status.node_name.as_deref() == Some(&b.node))
                    }) && !wait_for.iter().any(|w| w == c.name())
                    {
                        wait_for.push(c.name().to_string());
                    }
                }
                planned.extend(r.node_claims);
                planned
            }
        }
    };
    ctx.report.disruption.push(DisruptionEvent {
        action: DisruptionAction::Decided,
        reason: DisruptionCause::Reason(reason),
        node_claims: names.clone(),
        detail: Vec::new(),
    });
    let mut created = Vec::new();
    let pods: BTreeMap<String, Pod> = view.pods.iter().map(|p| (pod_key(p), p.clone())).collect();
    let suffix = {
        let parts: Vec<&str> = names.iter().map(String::as_str).collect();
        format!("{:06x}", fnv1a(&parts) & 0xff_ffff)
    };
    for planned in &replacements {
        let Some(pool) = view.pools.get(&planned.node_pool) else {
            continue;
        };
        let zones = if planned.is_static {
            crate::statics::zones(planned)
        } else {
            vec![planned.zone.clone()]
        };
        let mut claim = node_claim_for(planned, pool, &pods, zones);
        stamp(
            &mut claim,
            pool,
            view.classes
                .get(&pool.spec.template.spec.node_class_ref.name),
        );
        // `<pool>-<need hash>-r<suffix>`, cut to fit a label value whatever the pool's name;
        // a static pool's replacement keeps its slot's name.
        let name = if planned.is_static {
            planned.name.clone()
        } else {
            let (_, hash) = crate::nodeclaim::need_name(&planned.node_pool, &planned.pods);
            joiner_model::names::fit(&planned.node_pool, &format!("{hash}-r{suffix}"))
        };
        claim.metadata.name = Some(name.clone());
        let stored = match ctx.store.create(&claim) {
            Ok(c) => c,
            Err(StoreError::AlreadyExists(_)) => {
                // Created before a restart: the lifecycle launches it if it is not yet.
                created.push(name);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        ctx.report.created.push(stored.name().to_string());
        created.push(stored.name().to_string());
        ctx.invalidate_view();
        if let Err(e) = lifecycle::launch(ctx, stored) {
            ctx.error(
                Reconciler::Disruption,
                "launching a replacement NodeClaim",
                e,
            );
        }
    }
    if !created.is_empty() {
        ctx.report.disruption.push(DisruptionEvent {
            action: DisruptionAction::Replacing,
            reason: DisruptionCause::Reason(reason),
            node_claims: names.clone(),
            detail: created.clone(),
        });
    }
    for name in created {
        if !wait_for.contains(&name) {
            wait_for.push(name);
        }
    }
    for claim in old {
        taint(ctx, claim)?;
        let Some(mut c) = ctx.store.get::<NodeClaim>(None, claim.name())? else {
            continue;
        };
        let a = c.metadata.annotations.get_or_insert_with(Default::default);
        // An interrupted node in the middle of another move keeps the replacements it has.
        let mut all: Vec<String> = a
            .get(annotations::REPLACED_BY)
            .map(|r| {
                r.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        for w in &wait_for {
            if !all.contains(w) {
                all.push(w.clone());
            }
        }
        a.insert(
            annotations::DISRUPTION_REASON.into(),
            reason.as_str().into(),
        );
        a.insert(annotations::REPLACED_BY.into(), all.join(","));
        c.set_condition(
            conditions::DISRUPTION_REASON,
            true,
            reason.as_str(),
            reason.as_str(),
            k8s_time(ctx.now),
        );
        ctx.store.update(&c)?;
    }
    let now = ctx.now;
    let due: Vec<&NodeClaim> = old
        .iter()
        .filter(|c| wait_for.is_empty() || drains_now(c, now))
        .collect();
    if !due.is_empty() {
        let pods = ctx.store.list::<Pod>()?;
        for claim in due {
            // One node's failed drain does not hold back the others'.
            if let Err(e) = terminate(ctx, claim, reason, &pods) {
                ctx.error(
                    Reconciler::Disruption,
                    &format!("draining NodeClaim {}", claim.name()),
                    e,
                );
            }
        }
    }
    Ok(())
}

/// Carries a move on: an interrupted node drains at once; otherwise the move aborts when a
/// replacement went away and drains when all are initialized.
fn continue_move<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    view: &View,
    claim: &NodeClaim,
) -> Result<(), ControllerError> {
    let written = claim
        .annotation(annotations::DISRUPTION_REASON)
        .unwrap_or_default();
    let Some(reason) = DisruptionReason::parse(written) else {
        // Not a move Joiner started: leave the NodeClaim alone rather than guess.
        tracing::warn!(
            nodeclaim = claim.name(),
            "unknown {} annotation {written:?}; not acting on it",
            annotations::DISRUPTION_REASON
        );
        return Ok(());
    };
    if reason == DisruptionReason::Interrupted && drains_now(claim, ctx.now) {
        return terminate(ctx, claim, reason, &view.pods);
    }
    let replacements: Vec<&str> = claim
        .annotation(annotations::REPLACED_BY)
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .collect();
    let found: Vec<Option<&NodeClaim>> = replacements
        .iter()
        .map(|r| {
            view.claims
                .iter()
                .find(|c| c.name() == *r && !c.is_deleting())
        })
        .collect();
    if found.iter().any(Option::is_none)
        && claim
            .annotation(annotations::TERMINATION_TIMESTAMP)
            .is_none()
    {
        // A replacement failed (no capacity): undo, and decide again later. (Once draining has
        // begun there is nothing to undo: the drain goes on.)
        let mut c = claim.clone();
        if let Some(a) = c.metadata.annotations.as_mut() {
            a.remove(annotations::DISRUPTION_REASON);
            a.remove(annotations::REPLACED_BY);
        }
        ctx.store.update(&c)?;
        untaint(ctx, claim)?;
        ctx.report.disruption.push(DisruptionEvent {
            action: DisruptionAction::Aborted,
            reason: DisruptionCause::Reason(reason),
            node_claims: vec![claim.name().to_string()],
            detail: vec!["a replacement NodeClaim went away".into()],
        });
        return Ok(());
    }
    if found
        .iter()
        .flatten()
        .all(|c| c.is_true(conditions::INITIALIZED))
    {
        terminate(ctx, claim, reason, &view.pods)?;
    }
    Ok(())
}

/// How long before an interruption's deadline its node drains even while its replacements are
/// not ready: long enough for pods to be evicted as their PodDisruptionBudgets allow and shut
/// down gracefully before the cloud takes the instance.
pub const INTERRUPTION_DRAIN_LEAD: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// Whether an interrupted node drains now rather than once its replacements are ready: its
/// notice's kind drains at once, or its deadline is within [`INTERRUPTION_DRAIN_LEAD`].
fn drains_now(claim: &NodeClaim, now: Timestamp) -> bool {
    crate::interruption::marked(claim).is_some_and(|m| {
        m.kind.drains_at_once()
            || m.deadline
                .is_some_and(|d| d <= add(now, INTERRUPTION_DRAIN_LEAD))
    })
}

/// The claim's Node: by its recorded name, and only while that Node has the claim's provider ID
/// (EC2 reuses private DNS names).
fn node_of<S: ClusterStore, C>(
    ctx: &Ctx<'_, S, C>,
    claim: &NodeClaim,
) -> Result<Option<Node>, ControllerError> {
    let Some(name) = claim.status.node_name.as_deref() else {
        return Ok(None);
    };
    Ok(ctx
        .store
        .get::<Node>(None, name)?
        .filter(|n| crate::termination::node_of(claim, std::slice::from_ref(n)).is_some()))
}

fn taint<S: ClusterStore, C>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
) -> Result<(), ControllerError> {
    match node_of(ctx, claim)? {
        Some(node) => crate::termination::taint(ctx, &node),
        None => Ok(()),
    }
}

fn untaint<S: ClusterStore, C>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
) -> Result<(), ControllerError> {
    let Some(mut node) = node_of(ctx, claim)? else {
        return Ok(());
    };
    if let Some(ts) = node.spec.as_mut().and_then(|s| s.taints.as_mut()) {
        ts.retain(|t| t.key != taints::DISRUPTED);
    }
    ctx.store.update(&node)?;
    Ok(())
}

/// Ends a disrupted node: taints it and deletes its NodeClaim, whose termination finalizer
/// drains it, terminates the instance and lets the objects go ([`crate::termination`]). The
/// reason stays in the NodeClaim's annotation, so the drain knows an interrupted node. The
/// finalizer's first step runs at once, so the drain starts in the step that decided it (a spot
/// warning leaves two minutes).
fn terminate<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
    reason: DisruptionReason,
    pods: &[Pod],
) -> Result<(), ControllerError> {
    taint(ctx, claim)?;
    match ctx.store.delete::<NodeClaim>(None, claim.name()) {
        Ok(_) => {}
        Err(StoreError::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    tracing::info!(nodeclaim = claim.name(), %reason, "terminating");
    ctx.report.deleted.push(claim.name().to_string());
    ctx.invalidate_view();
    let Some(deleting) = ctx.store.get::<NodeClaim>(None, claim.name())? else {
        return Ok(());
    };
    let nodes = ctx.store.list::<Node>()?;
    crate::termination::finalize(ctx, deleting, &nodes, pods)
}
