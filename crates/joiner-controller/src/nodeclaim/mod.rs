//! Building NodeClaims: the object for one planned node, named after the need it serves, and
//! the drift stamps written on it ([`stamp`]).

pub mod launch;
pub mod stamp;

use std::collections::BTreeMap;

use joiner_engine::plan::PlannedNodeClaim;
use joiner_model::api::NodePool;
use joiner_model::api::nodeclaim::{NodeClaim, NodeClaimSpec, ResourceRequirements};
use joiner_model::api::nodepool::{NodeSelectorRequirementWithMinValues, Operator};
use joiner_model::wellknown::{annotations, finalizers, labels};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::batcher::fnv1a;
use crate::cloud::{CloudProvider, Instance};
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::store::ClusterStore;

/// The planned type first, then the fallbacks the plan allows.
pub fn instance_types_of(planned: &PlannedNodeClaim) -> Vec<String> {
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
    // The name is the Node's `karpenter.sh/nodeclaim` label value: it must fit 63 characters
    // whatever the pool's name, so the pool's part is cut short and the hash kept.
    (joiner_model::names::fit(node_pool, &hash), hash)
}

/// The need label of a static pool's NodeClaim: its name (its slot) is what makes it unique,
/// not the pods that may land on it.
pub const STATIC_NEED: &str = "static";

/// Whether the NodeClaim is one of a static pool's replicas, created by Joiner.
pub fn is_static(claim: &NodeClaim) -> bool {
    claim.label(labels::NEED) == Some(STATIC_NEED)
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
    let (name, hash) = if planned.is_static {
        (planned.name.clone(), STATIC_NEED.to_string())
    } else {
        need_name(&planned.node_pool, &planned.pods)
    };
    let template = &pool.spec.template;
    // The pods a static NodeClaim is planned with are the scheduler's to place, not its need.
    let planned_pods = if planned.is_static {
        &[][..]
    } else {
        planned.pods.as_slice()
    };
    let its_pods: Vec<&Pod> = planned_pods.iter().filter_map(|p| pods.get(p)).collect();
    // A reservation is for one type in one zone: a NodeClaim planned into one launches
    // there or not at all, so no other NodeClaim's place in it is taken.
    let reserved = planned.capacity_reservation_id.as_ref();
    let zones = if reserved.is_some() || pins_zone(&its_pods) {
        vec![planned.zone.clone()]
    } else {
        zones
    };
    let decided = [
        labels::INSTANCE_TYPE,
        labels::ZONE,
        labels::CAPACITY_TYPE,
        labels::NODEPOOL,
        labels::CAPACITY_RESERVATION_ID,
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
        match reserved {
            Some(_) => vec![planned.instance_type.clone()],
            None => instance_types_of(planned),
        },
    ));
    if let Some(id) = reserved {
        requirements.push(requirement(
            labels::CAPACITY_RESERVATION_ID,
            vec![id.clone()],
        ));
    }
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
    claim_labels.insert(labels::NEED.into(), hash);
    let mut annotations = planned.annotations.clone();
    annotations.extend(template.metadata.annotations.clone());
    annotations.insert(annotations::PLANNED_PODS.into(), planned_pods.join(","));
    NodeClaim::new(
        ObjectMeta {
            name: Some(name),
            labels: Some(claim_labels),
            annotations: Some(annotations),
            finalizers: Some(vec![finalizers::TERMINATION.to_string()]),
            owner_references: owned_by(pool),
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

/// The NodeClaim's owner, as Karpenter sets it: its NodePool, blocking the pool's foreground
/// deletion until the NodeClaim is gone, so that deleting a NodePool ends its nodes through
/// termination even while no controller runs. A pool read without a uid (from files) owns
/// nothing: the API server refuses an owner reference without one.
fn owned_by(pool: &NodePool) -> Option<Vec<OwnerReference>> {
    let uid = pool.metadata.uid.clone()?;
    Some(vec![OwnerReference {
        api_version: "karpenter.sh/v1".to_string(),
        kind: "NodePool".to_string(),
        name: pool.metadata.name.clone()?,
        uid,
        block_owner_deletion: Some(true),
        controller: None,
    }])
}

/// Non-terminated instances tagged with this NodeClaim's name, oldest first.
pub(crate) fn tagged_instances<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
) -> Result<Vec<Instance>, ControllerError> {
    let mut found: Vec<Instance> = ctx.instances()?.of_claim(claim.name()).cloned().collect();
    found.sort_by(|a, b| (a.launch_time, &a.id).cmp(&(b.launch_time, &b.id)));
    Ok(found)
}
