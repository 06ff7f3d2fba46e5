//! What a NodeClaim's launch asks of the cloud, as pure functions of the NodeClaim, the cloud's
//! offerings and the step's cluster view: the offers in price order, and the launch request
//! with its tags, EFA interfaces and pod counts. The lifecycle sends it; `joiner plan --launch`
//! builds the same request from a plan, so what it shows is what the controller would send.

use std::collections::{BTreeMap, HashMap};

use joiner_engine::catalog::devices::DRANET_DRIVER;
use joiner_engine::snapshot::ClusterSnapshot;
use joiner_model::api::EC2NodeClass;
use joiner_model::api::nodeclaim::NodeClaim;
use joiner_model::wellknown::{annotations, labels, resources, tags};

use crate::cloud::{LaunchRequest, Offer, OfferingKey, SoldTypes};
use crate::error::ControllerError;
use joiner_engine::catalog::CapacityType;

/// The reservations the NodeClaim's class offers for the types and reservations it allows, as
/// the step's view has them (reservations belong to the class, not to what the cloud sells).
/// Their free counts are not checked: the view counts this very NodeClaim as holding its place,
/// and EC2 has the last word.
pub fn reserved_offers(claim: &NodeClaim, view: &ClusterSnapshot) -> Vec<Offer> {
    let Some(pool) = claim.label(labels::NODEPOOL) else {
        return Vec::new();
    };
    let ids = claim.requirement_values(labels::CAPACITY_RESERVATION_ID);
    claim
        .requirement_values(labels::INSTANCE_TYPE)
        .iter()
        .filter_map(|t| view.launch_option(pool, t))
        .flat_map(|option| {
            option.offerings.iter().filter_map(|o| {
                let r = o.reservation.as_ref()?;
                (ids.is_empty() || ids.contains(&r.id)).then(|| Offer {
                    offering: OfferingKey {
                        instance_type: option.instance_type.clone(),
                        zone: o.zone.clone(),
                        capacity_type: CapacityType::Reserved,
                    },
                    price: o.price,
                    reservation: Some(r.clone()),
                })
            })
        })
        .collect()
}

/// The offerings the NodeClaim allows, cheapest first, without unavailable ones (the cloud's
/// or `unavailable`'s): what the cloud sells (`cloud_types`) and the class's reservations
/// (`reserved`, see [`reserved_offers`]). Ties keep the order of the requirements (the planned
/// type and zone first).
pub fn offers_for(
    claim: &NodeClaim,
    cloud_types: &SoldTypes,
    reserved: Vec<Offer>,
    unavailable: impl Fn(&OfferingKey) -> bool,
) -> Vec<Offer> {
    let types = claim.requirement_values(labels::INSTANCE_TYPE);
    let zones = claim.requirement_values(labels::ZONE);
    let capacity_types = claim.requirement_values(labels::CAPACITY_TYPE);
    let mut rank: HashMap<&str, usize> = HashMap::new();
    for (i, t) in types.iter().enumerate() {
        rank.entry(t.as_str()).or_insert(i);
    }
    let sold = types.iter().flat_map(|t| {
        cloud_types
            .named(t)
            .into_iter()
            .flat_map(|c| c.offerings.iter().filter(|o| o.available))
            .map(move |o| Offer {
                offering: OfferingKey {
                    instance_type: t.clone(),
                    zone: o.zone.clone(),
                    capacity_type: o.capacity_type,
                },
                price: o.price,
                reservation: None,
            })
    });
    let mut ranked = Vec::new();
    for offer in sold.chain(reserved) {
        let key = &offer.offering;
        let Some(&ti) = rank.get(key.instance_type.as_str()) else {
            continue;
        };
        let zi = match zones.iter().position(|z| *z == key.zone) {
            Some(i) => i,
            None if zones.is_empty() => 0,
            None => continue,
        };
        if !capacity_types.is_empty()
            && !capacity_types
                .iter()
                .any(|c| c == key.capacity_type.as_str())
        {
            continue;
        }
        if unavailable(key) {
            continue;
        }
        ranked.push((offer.price, ti, zi, offer));
    }
    ranked.sort_by_key(|a| (a.0, a.1, a.2));
    ranked.into_iter().map(|r| r.3).collect()
}

/// The launch request for `claim` over `offers`. `node_class` is its EC2NodeClass as the
/// cluster has it (`None` when missing); `view` is the step's cluster view, which says how the
/// NodePool launches each type (its EFA interfaces and pod capacity).
pub fn request_for(
    claim: &NodeClaim,
    node_class: Option<EC2NodeClass>,
    cluster_name: &str,
    offers: Vec<Offer>,
    view: &ClusterSnapshot,
) -> Result<LaunchRequest, ControllerError> {
    // Without a NodePool the instance could not carry the ownership tags, and an instance
    // without them is one Joiner would never find, terminate or collect again.
    let Some(pool) = claim.label(labels::NODEPOOL).filter(|p| !p.is_empty()) else {
        return Err(ControllerError::Config(format!(
            "NodeClaim {} has no {} label: its instance could not be tagged as Joiner's",
            claim.name(),
            labels::NODEPOOL
        )));
    };
    let mut request_tags = tags::ownership(cluster_name, pool, &claim.spec.node_class_ref.name);
    request_tags.insert(tags::NODECLAIM.to_string(), claim.name().to_string());
    let mut node_labels = claim.labels();
    node_labels.remove(labels::NEED);
    let wants_efa = needs_efa(claim);
    let mut efa_interfaces = BTreeMap::new();
    let mut max_pods = BTreeMap::new();
    for offer in &offers {
        let name = &offer.offering.instance_type;
        let Some(option) = view.launch_option(pool, name) else {
            continue;
        };
        // What the instance type defines (its well-known labels, what GPU feature discovery
        // will add) differs between the types one launch may fall back to: the controller
        // labels the Node with the launched type's at registration, not the kubelet.
        for key in option.labels.keys() {
            node_labels.remove(key);
        }
        let count = |resource: &str| {
            option
                .capacity
                .get(resource)
                .map_or(0, |q| u32::try_from(q.units_ceil()).unwrap_or(u32::MAX))
        };
        if wants_efa && count(resources::EFA) > 0 {
            efa_interfaces.insert(name.clone(), count(resources::EFA));
        }
        if count(resources::PODS) > 0 {
            max_pods.insert(name.clone(), count(resources::PODS));
        }
    }
    Ok(LaunchRequest {
        node_claim: claim.name().to_string(),
        node_class: claim.spec.node_class_ref.name.clone(),
        offers,
        tags: request_tags,
        // The uid, not the name: a NodeClaim deleted and created again under the same name
        // (the same need after insufficient capacity) must launch anew.
        client_token: claim
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| claim.name().to_string()),
        node_class_spec: node_class,
        labels: node_labels,
        taints: claim.spec.taints.clone(),
        startup_taints: claim.spec.startup_taints.clone(),
        efa_interfaces,
        max_pods,
    })
}

/// Whether the node needs EFA: its pods request `vpc.amazonaws.com/efa`, or the plan expects
/// DRANET's `dra.net` driver. Nodes that do not keep their network cards free.
fn needs_efa(claim: &NodeClaim) -> bool {
    claim
        .spec
        .resources
        .requests
        .get(resources::EFA)
        .is_some_and(|q| !q.is_zero())
        || requested_dra_drivers(claim).any(|d| d == DRANET_DRIVER)
}

/// The DRA drivers the plan expects on the node (the NodeClaim's annotation).
pub fn requested_dra_drivers(claim: &NodeClaim) -> impl Iterator<Item = &str> {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::REQUESTED_DRA_DRIVERS))
        .into_iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|d| !d.is_empty())
}
