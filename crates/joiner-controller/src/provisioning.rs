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
use joiner_engine::snapshot::machines::is_in_flight;
use joiner_model::api::NodePool;
use joiner_model::api::ec2nodeclass::EC2NodeClass;
use joiner_model::api::nodeclaim::NodeClaim;
use joiner_model::wellknown::annotations;
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::cloud::CloudProvider;
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::lifecycle;
use crate::nodeclaim::stamp::stamp;
use crate::nodeclaim::{instance_types_of, node_claim_for};
use crate::pods::pod_key;
use crate::store::{ClusterStore, StoreError};

/// Plans the cluster with in-flight NodeClaims counted, creates a NodeClaim for each new node
/// and launches it.
pub fn provision<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
) -> Result<(), ControllerError> {
    let started = std::time::Instant::now();
    let view = ctx.view()?;
    let plan = view.plan();
    // A pod the plan puts on an in-flight machine waits for that NodeClaim.
    let in_flight: BTreeMap<String, String> = view
        .machines()
        .iter()
        .filter(|n| n.in_flight)
        .filter_map(|n| Some((n.name.clone(), n.node_claim.clone()?)))
        .collect();
    ctx.report.planned = true;
    ctx.report.scheduling_duration = Some(started.elapsed());
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
    let pools: BTreeMap<String, NodePool> = ctx
        .store
        .list::<NodePool>()?
        .into_iter()
        .filter_map(|p| p.metadata.name.clone().map(|n| (n, p)))
        .collect();
    let pods: BTreeMap<String, Pod> = ctx
        .store
        .list::<Pod>()?
        .into_iter()
        .map(|p| (pod_key(&p), p))
        .collect();
    for planned in &plan.node_claims {
        let Some(pool) = pools.get(&planned.node_pool) else {
            continue;
        };
        let mut claim = node_claim_for(planned, pool, &pods, ctx.cloud_zones(planned)?);
        // The drift hashes of what the NodeClaim is created from.
        let class = ctx
            .store
            .get::<EC2NodeClass>(None, &pool.spec.template.spec.node_class_ref.name)?;
        stamp(&mut claim, pool, class.as_ref());
        let Some(created) = create_claim(ctx, claim)? else {
            continue;
        };
        tracing::info!(nodeclaim = created.name(), pods = ?planned.pods, "created NodeClaim");
        ctx.invalidate_view();
        ctx.report.created.push(created.name().to_string());
        for pod in &planned.pods {
            ctx.report
                .nominated
                .push((pod.clone(), created.name().to_string()));
        }
        if let Err(e) = lifecycle::launch(ctx, created) {
            ctx.error("launching a NodeClaim", e);
        }
    }
    Ok(())
}

/// How many suffixed names to try when the need's name is held by another NodeClaim.
const NAME_ATTEMPTS: usize = 16;

/// Creates the NodeClaim under its need's name. The name is taken by a NodeClaim for the same
/// still in-flight need when a create is retried (by another replica, or before a crash): then
/// nothing is created. It is taken by a different NodeClaim when the same pods were planned
/// before and that node now serves others (after a registration timeout the pods are shuffled):
/// then the next name `<name>-<k>` is tried. Returns the created NodeClaim, if any.
fn create_claim<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: NodeClaim,
) -> Result<Option<NodeClaim>, ControllerError> {
    let base = claim.name().to_string();
    let pods = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::PLANNED_PODS))
        .cloned();
    let nodes: Vec<String> = ctx
        .store
        .list::<Node>()?
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    let nodes: BTreeSet<&str> = nodes.iter().map(String::as_str).collect();
    for k in 0..NAME_ATTEMPTS {
        let mut attempt = claim.clone();
        attempt.metadata.name = Some(if k == 0 {
            base.clone()
        } else {
            format!("{base}-{k}")
        });
        match ctx.store.create(&attempt) {
            Ok(created) => return Ok(Some(created)),
            Err(StoreError::AlreadyExists(_)) => {
                let name = attempt.name().to_string();
                let Some(existing) = ctx.store.get::<NodeClaim>(None, &name)? else {
                    continue;
                };
                let same_pods = existing
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(annotations::PLANNED_PODS))
                    == pods.as_ref();
                if same_pods && is_in_flight(&existing, &nodes) {
                    return Ok(None);
                }
            }
            Err(e) => {
                ctx.error("creating a NodeClaim", e);
                return Ok(None);
            }
        }
    }
    ctx.error(
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
        let types = instance_types_of(planned);
        let mut zones: BTreeSet<String> = self
            .instance_types()?
            .iter()
            .filter(|t| types.contains(&t.name))
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
