//! Provisioning: pending pods in, NodeClaims out.
//!
//! On a closed batch the step's cluster view is planned exactly as `joiner plan` plans it, with
//! every in-flight NodeClaim (created, maybe launched, not yet initialized) a machine of its
//! instance type, so pods already covered by a launch never cause another. Each new NodeClaim is
//! created before its instance is launched, under a name derived from the need it serves: a
//! crash between the two leaves a NodeClaim the lifecycle launches later, and a retried create
//! conflicts instead of duplicating.

use std::collections::{BTreeMap, BTreeSet};

use joiner_engine::plan::PlannedNodeClaim;
use joiner_model::api::NodePool;
use joiner_model::api::ec2nodeclass::EC2NodeClass;
use joiner_model::api::nodeclaim::{NodeClaim, conditions};
use joiner_model::wellknown::{annotations, labels};
use k8s_openapi::api::core::v1::Pod;

use crate::cloud::CloudProvider;
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::lifecycle;
use crate::nodeclaim::stamp::stamp;
use crate::nodeclaim::{instance_types_of, node_claim_for};
use crate::pods::pod_key;
use crate::report::Reconciler;
use crate::store::{ClusterStore, StoreError};

/// Plans the cluster with in-flight NodeClaims counted, creates a NodeClaim for each new node
/// and launches it.
pub fn provision<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
) -> Result<(), ControllerError> {
    let started = std::time::Instant::now();
    let view = ctx.view()?;
    let plan = view.plan();
    // NodePools whose requirements leave nothing to launch (Karpenter's
    // NoCompatibleInstanceTypes).
    let no_instance_types: Vec<String> = view
        .pools()
        .iter()
        .filter(|p| p.options.iter().all(|o| o.offerings.is_empty()))
        .map(|p| p.name.clone())
        .collect();
    let catalog = offered_types(view);
    // CapacityBuffers' virtual pods stand for room, not pods: nothing is said of them.
    let virtual_pods: BTreeSet<String> = view
        .input()
        .pods
        .iter()
        .filter(|p| p.capacity_buffer.is_some())
        .map(|p| p.key())
        .collect();
    let ignored = view.ignored_pods();
    let by_zone = view.pending_by_effective_zone().into_iter().collect();
    // A pod the plan puts on an in-flight machine waits for that NodeClaim.
    let in_flight: BTreeMap<String, String> = view
        .machines()
        .iter()
        .filter(|n| n.in_flight)
        .filter_map(|n| Some((n.name.clone(), n.node_claim.clone()?)))
        .collect();
    ctx.report.planned = true;
    ctx.report.scheduling_duration = Some(started.elapsed());
    ctx.report.no_instance_types = no_instance_types;
    ctx.report.catalog = Some(catalog);
    ctx.report.buffers = Some(plan.capacity_buffers.clone());
    let placed: BTreeSet<&String> = plan
        .bindings
        .iter()
        .map(|b| &b.pod)
        .chain(plan.node_claims.iter().flat_map(|c| &c.pods))
        .filter(|p| !virtual_pods.contains(*p))
        .collect();
    ctx.report.placed = placed.into_iter().cloned().collect();
    ctx.report.ignored_pods = Some(ignored);
    ctx.report.pending_by_zone = Some(by_zone);
    for b in &plan.bindings {
        if let Some(claim) = in_flight.get(&b.node) {
            ctx.report.nominated.push((b.pod.clone(), claim.clone()));
        }
    }
    for u in &plan.unschedulable {
        ctx.report
            .unschedulable
            .push((u.pod.clone(), u.reason.clone()));
    }
    let pools = node_pools_by_name(ctx.store)?;
    let pods: BTreeMap<String, Pod> = ctx
        .store
        .list::<Pod>()?
        .into_iter()
        .map(|p| (pod_key(&p), p))
        .collect();
    // A static pool's NodeClaims are created by its own reconciler ([`crate::statics`]),
    // whether or not pods are pending.
    for planned in plan.node_claims.iter().filter(|c| !c.is_static) {
        let Some(pool) = pools.get(&planned.node_pool) else {
            continue;
        };
        let mut claim = node_claim_for(planned, pool, &pods, ctx.cloud_zones(planned)?);
        // The drift hashes of what the NodeClaim is created from.
        let class = ctx
            .store
            .get::<EC2NodeClass>(None, &pool.spec.template.spec.node_class_ref.name)?;
        stamp(&mut claim, pool, class.as_ref());
        let Some((created, adopted)) = create_claim(ctx, claim)? else {
            continue;
        };
        ctx.invalidate_view();
        if !adopted {
            tracing::info!(nodeclaim = created.name(), pods = ?planned.pods, "created NodeClaim");
            ctx.report.created.push(created.name().to_string());
        }
        for pod in planned.pods.iter().filter(|p| !virtual_pods.contains(*p)) {
            ctx.report
                .nominated
                .push((pod.clone(), created.name().to_string()));
        }
        ctx.during(Reconciler::Launching);
        if let Err(e) = lifecycle::launch(ctx, created) {
            ctx.error(Reconciler::Launching, "launching a NodeClaim", e);
        }
        ctx.during(Reconciler::Provisioning);
    }
    Ok(())
}

/// The NodePools as the cache has them, by name.
pub(crate) fn node_pools_by_name<S: ClusterStore>(
    store: &S,
) -> Result<BTreeMap<String, NodePool>, StoreError> {
    Ok(store
        .list::<NodePool>()?
        .into_iter()
        .filter_map(|p| p.metadata.name.clone().map(|n| (n, p)))
        .collect())
}

/// The instance types the NodePools may launch, each once (the first NodePool's figures), with
/// the offerings the plan would launch them from.
fn offered_types(view: &joiner_engine::snapshot::ClusterSnapshot) -> Vec<crate::OfferedType> {
    let units = |q: Option<&joiner_model::Quantity>| q.map_or(0.0, |q| q.nanos() as f64 / 1e9);
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for option in view.pools().iter().flat_map(|p| p.options.iter()) {
        if !seen.insert(option.instance_type.clone()) {
            continue;
        }
        out.push(crate::OfferedType {
            instance_type: option.instance_type.clone(),
            cpu_cores: units(option.capacity.get("cpu")),
            memory_bytes: units(option.capacity.get("memory")),
            offerings: option
                .offerings
                .iter()
                .map(|o| crate::OfferedAt {
                    zone: o.zone.clone(),
                    capacity_type: o.capacity_type.clone(),
                    price_usd: o.price.as_usd(),
                })
                .collect(),
        });
    }
    out
}

/// How many suffixed names to try when the need's name is held by a settled NodeClaim.
const NAME_ATTEMPTS: usize = 16;

/// What a NodeClaim already under a need's name means for that need.
enum Taken {
    /// The same need, not yet initialized: a create that committed and then answered an error,
    /// another leader's, or one from before a crash. It serves the need; launch it if needed.
    Adopt(Box<NodeClaim>),
    /// The same need, deleting: its name frees up once its instance is gone.
    Wait,
    /// A settled node (initialized) for the same pods that did not take them, or another
    /// need: the next name is tried.
    Next,
    /// The same static slot, launched and settled: the slot is filled, nothing is created
    /// (the cache that counted it missing is behind).
    Filled,
}

fn taken(existing: NodeClaim, wanted: &NodeClaim) -> Taken {
    let need = |c: &NodeClaim| {
        (
            c.label(labels::NEED).map(str::to_string),
            c.annotation(annotations::PLANNED_PODS).map(str::to_string),
        )
    };
    if need(&existing) != need(wanted) {
        Taken::Next
    } else if existing.is_deleting() {
        Taken::Wait
    } else if crate::nodeclaim::is_static(wanted) && existing.status.provider_id.is_some() {
        Taken::Filled
    } else if existing.is_true(conditions::INITIALIZED) {
        Taken::Next
    } else {
        Taken::Adopt(Box::new(existing))
    }
}

/// Creates the NodeClaim under its need's name, or adopts the one already there for the same
/// need; returns the NodeClaim to launch, if any, and whether it was adopted.
///
/// A create that answers AlreadyExists, or fails without saying whether it committed (a
/// timeout), is followed by a read of that name from the API server itself, never the cache,
/// which may trail it: a NodeClaim for the same need there is adopted ([`Taken`]). A failed
/// create whose name the server does not have is retried on a later step under the same name,
/// so one need never gets two NodeClaims. Only a name held by a settled node that did not take
/// the pods moves on to `<name>-<k>`.
pub(crate) fn create_claim<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: NodeClaim,
) -> Result<Option<(NodeClaim, bool)>, ControllerError> {
    let base = claim.name().to_string();
    for k in 0..NAME_ATTEMPTS {
        let mut attempt = claim.clone();
        attempt.metadata.name = Some(if k == 0 {
            base.clone()
        } else {
            format!("{base}-{k}")
        });
        let name = attempt.name().to_string();
        let failure = match ctx.store.create(&attempt) {
            Ok(created) => return Ok(Some((created, false))),
            Err(e @ (StoreError::AlreadyExists(_) | StoreError::Unavailable(_))) => e,
            Err(e) => {
                ctx.error(Reconciler::Provisioning, "creating a NodeClaim", e);
                return Ok(None);
            }
        };
        match ctx.store.get_uncached::<NodeClaim>(None, &name) {
            Ok(Some(existing)) => match taken(existing, &attempt) {
                Taken::Adopt(existing) => {
                    tracing::info!(nodeclaim = %name, "adopting the NodeClaim already created for this need");
                    let unlaunched = existing.status.provider_id.is_none();
                    return Ok(unlaunched.then_some((*existing, true)));
                }
                Taken::Wait | Taken::Filled => return Ok(None),
                Taken::Next => continue,
            },
            Ok(None) => {
                // Not committed (or deleted since): the same name again on a later step.
                ctx.error(
                    Reconciler::Provisioning,
                    &format!("creating NodeClaim {name}"),
                    failure,
                );
                return Ok(None);
            }
            Err(e) => {
                ctx.error(
                    Reconciler::Provisioning,
                    &format!("reading NodeClaim {name} after a failed create"),
                    e,
                );
                return Ok(None);
            }
        }
    }
    ctx.error(
        Reconciler::Provisioning,
        "creating a NodeClaim",
        StoreError::Invalid(
            crate::store::ObjectKey::of::<NodeClaim>(None, &base),
            "every name for this need is taken".into(),
        ),
    );
    Ok(None)
}

impl<S: ClusterStore, C: CloudProvider> Ctx<'_, S, C> {
    /// Zones the cloud offers any of the planned instance types in with the planned capacity
    /// type, the planned zone first.
    fn cloud_zones(&mut self, planned: &PlannedNodeClaim) -> Result<Vec<String>, ControllerError> {
        let sold = self.instance_types()?;
        let mut zones: BTreeSet<String> = instance_types_of(planned)
            .iter()
            .filter_map(|t| sold.named(t))
            .flat_map(|t| t.offerings.iter())
            .filter(|o| o.capacity_type.as_str() == planned.capacity_type)
            .map(|o| o.zone.clone())
            .collect();
        zones.remove(&planned.zone);
        let mut out = vec![planned.zone.clone()];
        out.extend(zones);
        Ok(out)
    }
}
