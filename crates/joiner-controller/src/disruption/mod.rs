//! Disruption: removing and replacing nodes once the work shrinks or a node has lived too long.
//!
//! One step of [`disrupt`] runs after provisioning:
//!
//! 1. A disruption in progress (old NodeClaims annotated with [`DISRUPTION_REASON`] and the
//!    replacements they wait for in [`REPLACED_BY`]) is carried on: once every replacement is
//!    initialized the old nodes are drained (tainted `karpenter.sh/disrupted:NoSchedule`, their
//!    pods evicted except those marked `karpenter.sh/do-not-disrupt`, and only as far as their
//!    PodDisruptionBudgets allow; the rest on later steps) and their NodeClaims deleted
//!    (the termination finalizer terminates the instance). A replacement that went away (no
//!    capacity) aborts the move. Only one move is in progress at a time.
//! 2. Otherwise expiry: the oldest NodeClaim older than its `expireAfter` gets replacement
//!    capacity for its pods (planned without it), launched first, then is drained.
//! 3. Otherwise consolidation: [`joiner_engine::disruption::consolidate`] over the same snapshot
//!    provisioning plans (in-flight NodeClaims counted as nodes), with only the nodes whose bound
//!    pods have not changed for their NodePool's `consolidateAfter` as candidates, and only while
//!    nothing is pending or in flight. The first decision is taken within the NodePools'
//!    disruption budgets (`nodes` as a count or a percentage, default 10%, rounded up).
//!
//! All durable state is in annotations and taints; what is kept in memory (since when each
//! node's pods are unchanged, the last state consolidation found nothing in) is rebuilt by a new
//! controller, which at worst waits `consolidateAfter` again.

pub mod pdb;
pub mod simulated;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use joiner_engine::disruption::{Reason, consolidate};
use joiner_engine::plan::PlannedNodeClaim;
use joiner_engine::snapshot::ClusterSnapshot;
use joiner_model::api::NodePool;
use joiner_model::duration::parse_duration;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::batcher::fnv1a;
use crate::clock::{add, elapsed};
use crate::cloud::CloudProvider;
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::lifecycle;
use crate::nodeclaim::{NodeClaim, conditions, labels};
use crate::pools::PoolOptions;
use crate::provisioning::{add_in_flight, is_pending, node_claim_for, pod_key};
use crate::store::{ClusterStore, StoreError};

/// Annotation on a NodeClaim being disrupted: why (`Empty`, `Underutilized`, `Expired`).
pub const DISRUPTION_REASON: &str = "joiner.dev/disruption";
/// Annotation on a NodeClaim being disrupted: the NodeClaims launched to replace it.
pub const REPLACED_BY: &str = "joiner.dev/replaced-by";
/// The taint that keeps new pods off a node being disrupted.
pub const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";
/// On a pod or a node: never disrupt voluntarily.
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";

/// One thing the disruption step did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionEvent {
    /// `decided`, `replacing`, `evicted`, `deleted`, `aborted`.
    pub action: String,
    /// `Empty`, `Underutilized` or `Expired`.
    pub reason: String,
    /// The NodeClaims disrupted.
    pub node_claims: Vec<String>,
    /// Replacement NodeClaims (for `replacing`), pods (for `evicted`), or a note.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub detail: Vec<String>,
}

/// What the disruption step remembers between steps (a cache; see the module docs).
#[derive(Debug, Default)]
pub struct DisruptionState {
    /// Node name to the hash of its bound pods and since when it has been that.
    pods_since: BTreeMap<String, (u64, Timestamp)>,
    /// The state in which consolidation last found nothing to do.
    quiet: Option<u64>,
}

fn annotation<'a>(claim: &'a NodeClaim, key: &str) -> Option<&'a str> {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn is_do_not_disrupt(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(DO_NOT_DISRUPT))
        .is_some_and(|v| v == "true")
}

fn is_daemon_pod(pod: &Pod) -> bool {
    pod.metadata
        .owner_references
        .as_ref()
        .is_some_and(|o| o.iter().any(|r| r.kind == "DaemonSet"))
        || pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(joiner_model::workloads::OWNER_ANNOTATION))
            .is_some_and(|o| o.starts_with("DaemonSet/"))
}

fn bound_to<'a>(pods: &'a [Pod], node: &str) -> impl Iterator<Item = &'a Pod> {
    pods.iter().filter(move |p| {
        p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
            && p.metadata.deletion_timestamp.is_none()
    })
}

/// `expireAfter`/`consolidateAfter`: `None` for `Never` or nonsense.
fn duration_of(text: &str) -> Option<Duration> {
    if text.eq_ignore_ascii_case("never") {
        return None;
    }
    parse_duration(text).ok()
}

/// How many of the pool's nodes may be disrupted at once for `reason`: the smallest of the
/// applicable budgets (counts, or percentages of `total` rounded up).
pub fn allowed_disruptions(pool: &NodePool, reason: &str, total: usize) -> usize {
    pool.spec
        .disruption
        .budgets
        .iter()
        .filter(|b| {
            b.reasons.as_ref().is_none_or(|rs| {
                rs.iter()
                    .any(|r| format!("{r:?}").eq_ignore_ascii_case(reason))
            })
        })
        .map(|b| {
            let n = b.nodes.trim();
            match n.strip_suffix('%') {
                Some(p) => p
                    .trim()
                    .parse::<usize>()
                    .map(|p| (total * p.min(100)).div_ceil(100))
                    .unwrap_or(0),
                None => n.parse::<usize>().unwrap_or(0),
            }
        })
        .min()
        .unwrap_or(usize::MAX)
}

struct View {
    pools: BTreeMap<String, NodePool>,
    claims: Vec<NodeClaim>,
    nodes: Vec<Node>,
    pods: Vec<Pod>,
}

impl View {
    fn claim_of_node(&self, node: &str) -> Option<&NodeClaim> {
        self.claims
            .iter()
            .find(|c| c.status.node_name.as_deref() == Some(node))
    }
    fn pool_of(&self, claim: &NodeClaim) -> Option<&NodePool> {
        self.pools.get(claim.label(labels::NODEPOOL)?)
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
            .filter(|c| c.is_deleting() || annotation(c, DISRUPTION_REASON).is_some())
            .count();
        let total = of_pool.iter().filter(|c| !c.is_deleting()).count();
        (total, disrupting)
    }
}

/// One disruption pass (see the module docs).
pub fn disrupt<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    state: &mut DisruptionState,
) -> Result<(), ControllerError> {
    let view = View {
        pools: ctx
            .store
            .list::<NodePool>()?
            .into_iter()
            .filter_map(|p| p.metadata.name.clone().map(|n| (n, p)))
            .collect(),
        claims: ctx.store.list::<NodeClaim>()?,
        nodes: ctx.store.list::<Node>()?,
        pods: ctx.store.list::<Pod>()?,
    };
    track_pods(ctx.now, &view, state);

    // 1. A move in progress.
    let in_progress: Vec<&NodeClaim> = view
        .claims
        .iter()
        .filter(|c| !c.is_deleting() && annotation(c, DISRUPTION_REASON).is_some())
        .collect();
    if !in_progress.is_empty() {
        for claim in in_progress {
            continue_move(ctx, &view, claim)?;
        }
        return Ok(());
    }
    // Nodes still terminating count against budgets but block nothing else.

    // 2. Expiry.
    if let Some(claim) = expired(ctx.now, &view) {
        let claim = claim.clone();
        return start_move(ctx, &view, &[claim], "Expired", None);
    }

    // 3. Consolidation.
    consolidation(ctx, &view, state)
}

/// Records since when each node's bound pods have been what they are.
fn track_pods(now: Timestamp, view: &View, state: &mut DisruptionState) {
    let mut seen = BTreeMap::new();
    for node in &view.nodes {
        let Some(name) = node.metadata.name.clone() else {
            continue;
        };
        let keys: Vec<String> = bound_to(&view.pods, &name).map(pod_key).collect();
        let parts: Vec<&str> = keys.iter().map(String::as_str).collect();
        let hash = fnv1a(&parts);
        let entry = match state.pods_since.get(&name) {
            Some((h, since)) if *h == hash => (hash, *since),
            _ => (hash, now),
        };
        seen.insert(name, entry);
    }
    state.pods_since = seen;
}

/// The NodeClaim that expired first, if any (initialized ones only).
fn expired(now: Timestamp, view: &View) -> Option<&NodeClaim> {
    view.claims
        .iter()
        .filter(|c| !c.is_deleting() && c.is_true(conditions::INITIALIZED))
        .filter_map(|c| {
            let after = duration_of(c.spec.expire_after.as_deref()?)?;
            let created = c.metadata.creation_timestamp.as_ref()?.0;
            let deadline = add(created, after);
            (deadline <= now).then_some((deadline, c))
        })
        .min_by(|a, b| a.0.cmp(&b.0).then(a.1.name().cmp(b.1.name())))
        .map(|(_, c)| c)
}

/// The cluster snapshot provisioning plans over, with in-flight NodeClaims as nodes.
fn snapshot<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
) -> Result<(ClusterSnapshot, PoolOptions), ControllerError> {
    let mut m = ctx.manifests()?;
    let claims = ctx.store.list::<NodeClaim>()?;
    let options = PoolOptions::build(&m, ctx.config)?;
    add_in_flight(&mut m, &claims, &options);
    let snapshot = ClusterSnapshot::build(&m, &ctx.config.settings, &ctx.config.options)?;
    Ok((snapshot, options))
}

/// Plans the cluster without `nodes` (their pods pending): the new NodeClaims needed.
fn replacements_for<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    nodes: &[String],
) -> Result<Option<Vec<PlannedNodeClaim>>, ControllerError> {
    let (mut snapshot, _) = snapshot(ctx)?;
    let input = &mut snapshot.input;
    input.nodes.retain(|n| !nodes.contains(&n.name));
    let mut moved = Vec::new();
    input.pods.retain_mut(|p| match p.node_name.as_deref() {
        Some(n) if nodes.iter().any(|x| x == n) => {
            if p.daemon_set.is_some() {
                return false;
            }
            p.node_name = None;
            moved.push(p.key());
            true
        }
        _ => true,
    });
    let plan = snapshot.plan();
    if moved
        .iter()
        .any(|p| !plan.bindings.iter().any(|b| &b.pod == p))
    {
        return Ok(None);
    }
    // Only the new nodes its pods go to: pending pods are provisioning's business.
    Ok(Some(
        plan.node_claims
            .into_iter()
            .filter(|c| c.pods.iter().any(|p| moved.contains(p)))
            .collect(),
    ))
}

fn consolidation<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    view: &View,
    state: &mut DisruptionState,
) -> Result<(), ControllerError> {
    // Only a settled cluster: nothing pending (a pending pod may be on its way to a node that
    // looks empty), nothing in flight, nothing terminating.
    if view.pods.iter().any(is_pending)
        || view
            .claims
            .iter()
            .any(|c| c.is_deleting() || !c.is_true(conditions::INITIALIZED))
    {
        return Ok(());
    }
    // Candidates: initialized nodes of a NodePool whose pods have not changed for
    // `consolidateAfter`, not marked do-not-disrupt.
    let mut eligible = BTreeSet::new();
    for node in &view.nodes {
        let Some(name) = node.metadata.name.as_deref() else {
            continue;
        };
        let Some(claim) = view.claim_of_node(name) else {
            continue;
        };
        let Some(pool) = view.pool_of(claim) else {
            continue;
        };
        let Some(after) = duration_of(&pool.spec.disruption.consolidate_after) else {
            continue;
        };
        let since = state.pods_since.get(name).map(|s| s.1).unwrap_or(ctx.now);
        if elapsed(ctx.now, since) >= after && !is_do_not_disrupt(&node.metadata) {
            eligible.insert(name.to_string());
        }
    }
    if eligible.is_empty() {
        return Ok(());
    }
    let mut parts: Vec<String> = eligible.iter().cloned().collect();
    parts.push("--".into());
    // A changed NodePool (new instance types allowed, say) may open new moves.
    for (name, pool) in &view.pools {
        parts.push(format!(
            "{name}@{}",
            pool.metadata
                .resource_version
                .as_deref()
                .unwrap_or_default()
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
    let (mut snapshot, _) = snapshot(ctx)?;
    for n in &mut snapshot.input.nodes {
        if !eligible.contains(&n.name) {
            n.do_not_disrupt = true;
        }
    }
    let decisions = consolidate(&snapshot.input);
    for d in decisions {
        let reason = match d.reason {
            Reason::Empty => "Empty",
            Reason::Underutilized => "Underutilized",
        };
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
            let Some(pool) = view.pool_of(claim) else {
                continue;
            };
            let allowed = *left.entry(pool_name.to_string()).or_insert_with(|| {
                let (total, disrupting) = view.pool_counts(pool_name);
                allowed_disruptions(pool, reason, total).saturating_sub(disrupting)
            });
            if allowed == 0 {
                continue;
            }
            left.insert(pool_name.to_string(), allowed - 1);
            chosen.push(claim.clone());
        }
        if chosen.is_empty() || (d.reason != Reason::Empty && chosen.len() < d.nodes.len()) {
            continue;
        }
        state.quiet = None;
        return start_move(ctx, view, &chosen, reason, Some(d.replacements));
    }
    state.quiet = Some(fingerprint);
    Ok(())
}

/// Starts a move: taints the old nodes, launches the replacements (planned now when `None`),
/// and drains at once when none are needed.
fn start_move<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    view: &View,
    old: &[NodeClaim],
    reason: &str,
    replacements: Option<Vec<PlannedNodeClaim>>,
) -> Result<(), ControllerError> {
    let names: Vec<String> = old.iter().map(|c| c.name().to_string()).collect();
    let node_names: Vec<String> = old
        .iter()
        .filter_map(|c| c.status.node_name.clone())
        .collect();
    let replacements = match replacements {
        Some(r) => r,
        None => match replacements_for(ctx, &node_names)? {
            Some(r) => r,
            None => {
                // Its pods fit nowhere, not even on new nodes: leave it be for now.
                return Ok(());
            }
        },
    };
    ctx.report.disruption.push(DisruptionEvent {
        action: "decided".into(),
        reason: reason.into(),
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
        let mut claim = node_claim_for(planned, pool, &pods, vec![planned.zone.clone()]);
        let name = format!("{}-r{suffix}", claim.name());
        claim.metadata.name = Some(name);
        let stored = match ctx.store.create(&claim) {
            Ok(c) => c,
            Err(StoreError::AlreadyExists(_)) => continue,
            Err(e) => return Err(e.into()),
        };
        ctx.report.created.push(stored.name().to_string());
        created.push(stored.name().to_string());
        if let Err(e) = lifecycle::launch(ctx, stored) {
            ctx.error("launching a replacement NodeClaim", e);
        }
    }
    if !created.is_empty() {
        ctx.report.disruption.push(DisruptionEvent {
            action: "replacing".into(),
            reason: reason.into(),
            node_claims: names.clone(),
            detail: created.clone(),
        });
    }
    for claim in old {
        taint(ctx, claim)?;
        let mut c = ctx
            .store
            .get::<NodeClaim>(None, claim.name())?
            .unwrap_or_else(|| claim.clone());
        let a = c.metadata.annotations.get_or_insert_with(Default::default);
        a.insert(DISRUPTION_REASON.into(), reason.into());
        a.insert(REPLACED_BY.into(), created.join(","));
        ctx.store.update(&c)?;
    }
    if created.is_empty() {
        // Nothing to wait for.
        let pods = ctx.store.list::<Pod>()?;
        for claim in old {
            drain(ctx, claim, reason, &pods)?;
        }
    }
    Ok(())
}

/// Carries a move on: aborts when a replacement went away, drains when all are initialized.
fn continue_move<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    view: &View,
    claim: &NodeClaim,
) -> Result<(), ControllerError> {
    let reason = annotation(claim, DISRUPTION_REASON)
        .unwrap_or_default()
        .to_string();
    let replacements: Vec<&str> = annotation(claim, REPLACED_BY)
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
    if found.iter().any(Option::is_none) {
        // A replacement failed (no capacity): undo, and decide again later.
        let mut c = claim.clone();
        if let Some(a) = c.metadata.annotations.as_mut() {
            a.remove(DISRUPTION_REASON);
            a.remove(REPLACED_BY);
        }
        ctx.store.update(&c)?;
        untaint(ctx, claim)?;
        ctx.report.disruption.push(DisruptionEvent {
            action: "aborted".into(),
            reason,
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
        drain(ctx, claim, &reason, &view.pods)?;
    }
    Ok(())
}

fn node_of<S: ClusterStore, C>(
    ctx: &Ctx<'_, S, C>,
    claim: &NodeClaim,
) -> Result<Option<Node>, ControllerError> {
    match claim.status.node_name.as_deref() {
        Some(n) => Ok(ctx.store.get::<Node>(None, n)?),
        None => Ok(None),
    }
}

fn taint<S: ClusterStore, C>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
) -> Result<(), ControllerError> {
    let Some(mut node) = node_of(ctx, claim)? else {
        return Ok(());
    };
    let taints = node
        .spec
        .get_or_insert_with(Default::default)
        .taints
        .get_or_insert_with(Vec::new);
    if taints.iter().any(|t| t.key == DISRUPTED_TAINT) {
        return Ok(());
    }
    taints.push(Taint {
        key: DISRUPTED_TAINT.into(),
        effect: "NoSchedule".into(),
        value: None,
        time_added: None,
    });
    ctx.store.update(&node)?;
    Ok(())
}

fn untaint<S: ClusterStore, C>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
) -> Result<(), ControllerError> {
    let Some(mut node) = node_of(ctx, claim)? else {
        return Ok(());
    };
    if let Some(ts) = node.spec.as_mut().and_then(|s| s.taints.as_mut()) {
        ts.retain(|t| t.key != DISRUPTED_TAINT);
    }
    ctx.store.update(&node)?;
    Ok(())
}

/// Taints the node, evicts its pods (not those marked do-not-disrupt, nor DaemonSet pods), and
/// deletes the NodeClaim once only DaemonSet pods are left.
fn drain<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
    reason: &str,
    pods: &[Pod],
) -> Result<(), ControllerError> {
    taint(ctx, claim)?;
    let node = claim.status.node_name.clone().unwrap_or_default();
    let mut evicted = Vec::new();
    let mut blocked = false;
    let pdbs = ctx
        .store
        .list::<k8s_openapi::api::policy::v1::PodDisruptionBudget>()?;
    let mut budgets = pdb::Budgets::new(&pdbs, pods);
    for pod in bound_to(pods, &node).filter(|p| !is_daemon_pod(p)) {
        if is_do_not_disrupt(&pod.metadata) || !budgets.try_evict(pod) {
            blocked = true;
            continue;
        }
        match ctx.store.delete::<Pod>(
            pod.metadata.namespace.as_deref(),
            pod.metadata.name.as_deref().unwrap_or_default(),
        ) {
            Ok(_) | Err(StoreError::NotFound(_)) => evicted.push(pod_key(pod)),
            Err(e) => return Err(e.into()),
        }
    }
    if !evicted.is_empty() {
        ctx.report.disruption.push(DisruptionEvent {
            action: "evicted".into(),
            reason: reason.into(),
            node_claims: vec![claim.name().to_string()],
            detail: evicted,
        });
    }
    if blocked {
        return Ok(());
    }
    match ctx.store.delete::<NodeClaim>(None, claim.name()) {
        Ok(_) | Err(StoreError::NotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    ctx.report.deleted.push(claim.name().to_string());
    ctx.report.disruption.push(DisruptionEvent {
        action: "deleted".into(),
        reason: reason.into(),
        node_claims: vec![claim.name().to_string()],
        detail: Vec::new(),
    });
    Ok(())
}
