//! Provisioning: pending pods in, NodeClaims out.
//!
//! On a closed batch the cluster is planned exactly as `joiner plan` plans it, with every
//! in-flight NodeClaim (created, maybe launched, not yet initialized) counted as a node of its
//! instance type, so pods already covered by a launch never cause another. Each new NodeClaim is
//! created before its instance is launched, under a name derived from the need it serves: a
//! crash between the two leaves a NodeClaim the lifecycle launches later, and a retried create
//! conflicts instead of duplicating.

use std::collections::{BTreeMap, BTreeSet};

use joiner_engine::catalog::CapacityType;
use joiner_engine::plan::PlannedNodeClaim;
use joiner_engine::snapshot::ClusterSnapshot;
use joiner_model::api::NodePool;
use joiner_model::api::nodepool::{NodeSelectorRequirementWithMinValues, Operator};
use joiner_model::{Manifests, ResourceList, Source, Sourced};
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::batcher::fnv1a;
use crate::cloud::{CloudProvider, OfferingKey};
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::lifecycle;
use crate::nodeclaim::{
    NodeClaim, NodeClaimSpec, ResourceRequirements, TERMINATION_FINALIZER, conditions, labels,
};
use crate::pools::PoolOptions;
use crate::store::{ClusterStore, StoreError};

/// A pod waiting for a node: not bound, not finished, not being deleted.
pub fn is_pending(pod: &Pod) -> bool {
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    !bound && !finished && pod.metadata.deletion_timestamp.is_none()
}

/// `namespace/name`.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// What the batcher watches: the pending pods and the live NodeClaims. Returns the fingerprint
/// and whether any pod is pending.
pub fn fingerprint(pods: &[Pod], claims: &[NodeClaim]) -> (u64, bool) {
    let pending: BTreeSet<String> = pods.iter().filter(|p| is_pending(p)).map(pod_key).collect();
    let live: BTreeSet<&str> = claims
        .iter()
        .filter(|c| !c.is_deleting())
        .map(NodeClaim::name)
        .collect();
    let mut parts: Vec<&str> = pending.iter().map(String::as_str).collect();
    parts.push("--");
    parts.extend(live);
    (fnv1a(&parts), !pending.is_empty())
}

/// Whether a NodeClaim still stands for a node that does not fully exist yet: not deleting, and
/// not initialized with its Node present.
pub fn is_in_flight(claim: &NodeClaim, nodes: &BTreeSet<String>) -> bool {
    if claim.is_deleting() {
        return false;
    }
    let node_present = claim
        .status
        .node_name
        .as_ref()
        .is_some_and(|n| nodes.contains(n));
    !(claim.is_true(conditions::INITIALIZED) && node_present)
}

/// Replaces each in-flight NodeClaim's Node (if it registered) by a node built from the
/// NodeClaim: its labels, its taints (startup taints are not, pods need not tolerate them) and
/// the resources its instance type will offer. A registered but uninitialized Node does not yet
/// show its GPUs, so judging by it would launch a second node for pods already covered.
pub fn add_in_flight(
    m: &mut Manifests,
    claims: &[NodeClaim],
    options: &PoolOptions,
) -> Vec<String> {
    let names: BTreeSet<String> = m
        .nodes
        .iter()
        .filter_map(|n| n.object.metadata.name.clone())
        .collect();
    let mut warnings = Vec::new();
    for claim in claims.iter().filter(|c| is_in_flight(c, &names)) {
        let name = claim
            .status
            .node_name
            .clone()
            .unwrap_or_else(|| claim.name().to_string());
        let expected = expected_resources(claim, options);
        let Some((allocatable, capacity)) = expected else {
            warnings.push(format!(
                "NodeClaim {}: its NodePool or instance type is unknown; its capacity is not counted",
                claim.name()
            ));
            continue;
        };
        m.nodes
            .retain(|n| n.object.metadata.name.as_deref() != Some(name.as_str()));
        let mut node_labels = claim.labels();
        node_labels.remove(labels::INITIALIZED);
        node_labels.remove(labels::NEED_HASH);
        m.nodes.push(Sourced {
            origin: Source::new(format!("NodeClaim/{}", claim.name()), 0),
            object: Node {
                metadata: ObjectMeta {
                    name: Some(name),
                    labels: Some(node_labels),
                    ..ObjectMeta::default()
                },
                spec: Some(NodeSpec {
                    taints: (!claim.spec.taints.is_empty()).then(|| claim.spec.taints.clone()),
                    provider_id: claim.status.provider_id.clone(),
                    ..NodeSpec::default()
                }),
                status: Some(NodeStatus {
                    allocatable: Some(k8s_list(&allocatable)),
                    capacity: Some(k8s_list(&capacity)),
                    ..NodeStatus::default()
                }),
            },
        });
    }
    warnings
}

/// The node name the plan sees for each in-flight NodeClaim (its Node's name once registered,
/// else its own name, as [`add_in_flight`] names them), to the NodeClaim's name: a pod the plan
/// binds there waits for that NodeClaim.
pub fn in_flight_nodes(m: &Manifests, claims: &[NodeClaim]) -> BTreeMap<String, String> {
    let names: BTreeSet<String> = m
        .nodes
        .iter()
        .filter_map(|n| n.object.metadata.name.clone())
        .collect();
    claims
        .iter()
        .filter(|c| is_in_flight(c, &names))
        .map(|c| {
            let node = c
                .status
                .node_name
                .clone()
                .unwrap_or_else(|| c.name().to_string());
            (node, c.name().to_string())
        })
        .collect()
}

/// The NodeClaim's expected allocatable and capacity: recorded at launch, else what its NodePool
/// gives its planned instance type.
pub fn expected_resources(
    claim: &NodeClaim,
    options: &PoolOptions,
) -> Option<(ResourceList, ResourceList)> {
    if !claim.status.allocatable.is_empty() {
        return Some((
            claim.status.allocatable.clone(),
            claim.status.capacity.clone(),
        ));
    }
    let pool = claim.label(labels::NODEPOOL)?;
    let instance_type = claim
        .label(labels::INSTANCE_TYPE)
        .map(str::to_string)
        .or_else(|| {
            claim
                .requirement_values(labels::INSTANCE_TYPE)
                .into_iter()
                .next()
        })?;
    let o = options.option(pool, &instance_type)?;
    Some((o.allocatable.clone(), o.capacity.clone()))
}

fn k8s_list(list: &ResourceList) -> BTreeMap<String, K8sQuantity> {
    list.iter()
        .map(|(k, v)| (k.clone(), K8sQuantity::from(*v)))
        .collect()
}

/// Plans the cluster with in-flight NodeClaims counted, creates a NodeClaim for each new node
/// and launches it.
pub fn provision<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
) -> Result<(), ControllerError> {
    let mut m = ctx.manifests()?;
    let claims = ctx.store.list::<NodeClaim>()?;
    let options = PoolOptions::build(&m, ctx.config)?;
    let in_flight = in_flight_nodes(&m, &claims);
    for w in add_in_flight(&mut m, &claims, &options) {
        tracing::warn!("{w}");
    }
    ctx.set_pool_options(options);
    let started = std::time::Instant::now();
    let mut snapshot = ClusterSnapshot::build(&m, &ctx.config.settings, &ctx.config.options)?;
    // Offerings that just ran out of capacity are not planned on.
    let now = ctx.now;
    for pool in &mut snapshot.input.pools {
        for option in &mut pool.options {
            let it = option.instance_type.clone();
            option.offerings.retain(|o| {
                CapacityType::parse(&o.capacity_type).is_none_or(|capacity_type| {
                    !ctx.unavailable.is_unavailable(
                        &OfferingKey {
                            instance_type: it.clone(),
                            zone: o.zone.clone(),
                            capacity_type,
                        },
                        now,
                    )
                })
            });
        }
    }
    let plan = snapshot.plan();
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
    let pods: BTreeMap<String, Pod> = m
        .pods
        .iter()
        .map(|p| (pod_key(&p.object), p.object.clone()))
        .collect();
    for planned in &plan.node_claims {
        let Some(pool) = pools.get(&planned.node_pool) else {
            continue;
        };
        let mut claim = node_claim_for(planned, pool, &pods, ctx.cloud_zones(planned)?);
        // The drift hashes of what the NodeClaim is created from.
        let class = ctx
            .store
            .get::<joiner_model::api::ec2nodeclass::EC2NodeClass>(
                None,
                &pool.spec.template.spec.node_class_ref.name,
            )?;
        crate::disruption::drift::stamp(&mut claim, pool, class.as_ref());
        let Some(created) = create_claim(ctx, claim)? else {
            continue;
        };
        tracing::info!(nodeclaim = created.name(), pods = ?planned.pods, "created NodeClaim");
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
        .and_then(|a| a.get(labels::PLANNED_PODS))
        .cloned();
    let nodes: BTreeSet<String> = ctx
        .store
        .list::<Node>()?
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
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
                    .and_then(|a| a.get(labels::PLANNED_PODS))
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

/// The planned type first, then the fallbacks the plan allows.
fn instance_types_of(planned: &PlannedNodeClaim) -> Vec<String> {
    let mut types = vec![planned.instance_type.clone()];
    for t in &planned.instance_type_options {
        if !types.contains(t) {
            types.push(t.clone());
        }
    }
    types
}

/// The deterministic name of the NodeClaim for a need: its NodePool and the pods it is for.
/// The same need planned again (after a restart) gets the same name.
pub fn need_name(node_pool: &str, pods: &[String]) -> (String, String) {
    let mut sorted: Vec<&str> = pods.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    let mut parts = vec![node_pool];
    parts.extend(sorted);
    let hash = format!("{:012x}", fnv1a(&parts) & 0xffff_ffff_ffff);
    (format!("{node_pool}-{hash}"), hash)
}

/// Whether any of the pods constrains zones (selector, affinity, spread): then the NodeClaim
/// keeps the planned zone; otherwise it may launch in any zone, which gives insufficient
/// capacity somewhere to fall back to.
fn pins_zone(pods: &[&Pod]) -> bool {
    pods.iter().any(|p| {
        serde_json::to_string(&p.spec)
            .map(|s| s.contains(labels::ZONE))
            .unwrap_or(true)
    })
}

fn requirement(key: &str, values: Vec<String>) -> NodeSelectorRequirementWithMinValues {
    NodeSelectorRequirementWithMinValues {
        key: key.to_string(),
        operator: Operator::In,
        values,
        min_values: None,
    }
}

/// The NodeClaim object for one planned node.
pub fn node_claim_for(
    planned: &PlannedNodeClaim,
    pool: &NodePool,
    pods: &BTreeMap<String, Pod>,
    zones: Vec<String>,
) -> NodeClaim {
    let (name, hash) = need_name(&planned.node_pool, &planned.pods);
    let template = &pool.spec.template;
    let its_pods: Vec<&Pod> = planned.pods.iter().filter_map(|p| pods.get(p)).collect();
    let zones = if pins_zone(&its_pods) {
        vec![planned.zone.clone()]
    } else {
        zones
    };
    let decided = [
        labels::INSTANCE_TYPE,
        labels::ZONE,
        labels::CAPACITY_TYPE,
        labels::NODEPOOL,
    ];
    let mut requirements: Vec<_> = template
        .spec
        .requirements
        .iter()
        .filter(|r| !decided.contains(&r.key.as_str()))
        .cloned()
        .collect();
    requirements.push(requirement(
        labels::NODEPOOL,
        vec![planned.node_pool.clone()],
    ));
    requirements.push(requirement(
        labels::INSTANCE_TYPE,
        instance_types_of(planned),
    ));
    requirements.push(requirement(labels::ZONE, zones));
    requirements.push(requirement(
        labels::CAPACITY_TYPE,
        vec![planned.capacity_type.clone()],
    ));

    let mut claim_labels = planned.labels.clone();
    claim_labels.extend(template.metadata.labels.clone());
    claim_labels.insert(labels::NODEPOOL.into(), planned.node_pool.clone());
    claim_labels.insert(
        labels::NODECLASS.into(),
        template.spec.node_class_ref.name.clone(),
    );
    claim_labels.insert(labels::NEED_HASH.into(), hash);
    let mut annotations = planned.annotations.clone();
    annotations.extend(template.metadata.annotations.clone());
    annotations.insert(labels::PLANNED_PODS.into(), planned.pods.join(","));
    NodeClaim::new(
        ObjectMeta {
            name: Some(name),
            labels: Some(claim_labels),
            annotations: Some(annotations),
            finalizers: Some(vec![TERMINATION_FINALIZER.to_string()]),
            ..ObjectMeta::default()
        },
        NodeClaimSpec {
            node_class_ref: template.spec.node_class_ref.clone(),
            requirements,
            resources: ResourceRequirements {
                requests: planned.resources.requested.clone(),
            },
            taints: template.spec.taints.clone(),
            startup_taints: template.spec.startup_taints.clone(),
            expire_after: Some(template.spec.expire_after.clone()),
            termination_grace_period: template.spec.termination_grace_period.clone(),
        },
    )
}
