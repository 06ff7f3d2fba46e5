//! What each NodePool may launch, for `joiner catalog`: every instance type the NodePool's
//! requirements allow, as the NodePool would launch it (InstanceType objects applied, the
//! EC2NodeClass's kubelet settings, root volume and instance-store policy, device-plugin
//! sharing), with its offerings and prices. The types and offerings are chosen by the same
//! rules the planner packs by ([`crate::scheduling::allowed`]).
//!
//! Field names are part of Joiner's interface (`-o json`); keys may be added, never renamed.

use std::collections::BTreeMap;

use joiner_model::wellknown::{labels, resources};
use joiner_model::{Price, Quantity, ResourceList};
use serde::Serialize;

use crate::catalog::devices::DeviceTemplates;
use crate::catalog::{Catalog, InstanceType, NodeShape, PriceBasis};
use crate::scheduling::allowed::{OfferingLabels, effective_requirements, type_allowed};
use crate::scheduling::{LaunchOffering, LaunchOption, PoolInput};

/// Every NodePool's instance types.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Listing {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub region: String,
    pub node_pools: Vec<PoolListing>,
}

/// One NodePool's instance types, cheapest first (types without a known price last).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolListing {
    /// The NodePool, or `-` for the built-in catalog with no NodePool.
    pub node_pool: String,
    pub instance_types: Vec<ListedType>,
}

/// An instance type as a NodePool would launch it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedType {
    pub name: String,
    /// What pods can request on such a node.
    pub allocatable: ResourceList,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<ListedGpu>,
    /// EFA interfaces (`vpc.amazonaws.com/efa`).
    pub efa: u32,
    /// Devices the DRA drivers will publish, per driver; empty when Joiner knows none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub dra_devices: BTreeMap<String, usize>,
    /// The offerings the NodePool allows, cheapest first.
    pub offerings: Vec<ListedOffering>,
    /// The cheapest available offering's price, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price_per_hour: Option<Price>,
    /// How that price is known, when it is not listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price_note: Option<String>,
}

/// An instance type's GPUs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedGpu {
    /// Karpenter's `instance-gpu-name` (`t4`, `h100`).
    pub name: String,
    pub manufacturer: String,
    pub count: u32,
    #[serde(rename = "memoryMiB", skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// How pods ask for them: the device plugin's resource (`nvidia.com/gpu`), `dra` when
    /// Joiner knows the devices the DRA driver will publish, and `mig` when the GPUs can be split.
    pub served_by: Vec<String>,
    /// The MIG profiles one GPU offers, when it is MIG-capable: what a NodePool's
    /// `nvidia.com/mig.config` can make of it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mig_profiles: Vec<ListedMigProfile>,
}

/// One MIG profile of a GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedMigProfile {
    /// As `nvidia-smi` names it (`1g.5gb`, `1g.5gb+me`).
    pub name: String,
    /// The device plugin's resource under the `mixed` strategy (`nvidia.com/mig-1g.5gb`).
    pub resource: String,
    /// How many fit one GPU.
    pub per_gpu: u8,
    #[serde(rename = "memoryGiB")]
    pub memory_gib: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedOffering {
    pub zone: String,
    pub capacity_type: String,
    pub price_per_hour: Price,
    #[serde(skip_serializing_if = "PriceBasis::is_listed")]
    pub price_basis: PriceBasis,
    pub available: bool,
    /// For a `reserved` offering: the reservation, and how many instances it can still take.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation: Option<ListedReservation>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedReservation {
    pub id: String,
    /// `default` or `capacity-block`.
    #[serde(rename = "type")]
    pub type_: &'static str,
    pub free_instances: u32,
}

/// The instance types each of `pools` allows, from `catalog` (the one the pools were built
/// from, which holds every offering, the unavailable ones too).
pub fn list(region: &str, catalog: &Catalog, pools: &[PoolInput]) -> Listing {
    Listing {
        api_version: "joiner.dev/v1alpha1",
        kind: "InstanceTypeListing",
        region: region.to_string(),
        node_pools: pools.iter().map(|p| list_pool(catalog, p)).collect(),
    }
}

/// The whole catalog with no NodePool: every type with the default node shape and every
/// offering (on-demand and spot alike).
pub fn list_catalog(region: &str, catalog: &Catalog) -> Listing {
    let types = catalog
        .types()
        .iter()
        .filter_map(|it| {
            let allocatable = it.allocatable(&NodeShape::default()).ok()?;
            let offerings = it.offerings.iter().map(catalog_offering).collect();
            Some(listed(it, allocatable, it.devices.as_deref(), offerings))
        })
        .collect();
    Listing {
        api_version: "joiner.dev/v1alpha1",
        kind: "InstanceTypeListing",
        region: region.to_string(),
        node_pools: vec![PoolListing {
            node_pool: "-".to_string(),
            instance_types: sorted(types),
        }],
    }
}

fn list_pool(catalog: &Catalog, pool: &PoolInput) -> PoolListing {
    let requirements = effective_requirements(pool);
    let options: BTreeMap<&str, &LaunchOption> = pool
        .options
        .iter()
        .map(|o| (o.instance_type.as_str(), o))
        .collect();
    let types = catalog
        .types()
        .iter()
        .filter_map(|it| {
            let option = options.get(it.name.as_str())?;
            let mut node_labels = option.labels.clone();
            node_labels.extend(pool.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
            node_labels.insert(labels::INSTANCE_TYPE.into(), it.name.clone());
            if !type_allowed(&requirements, &node_labels) {
                return None;
            }
            // The catalog's offerings, unavailable ones too, and the reservations the
            // NodePool's class selects, which only the NodePool has.
            let offerings: Vec<ListedOffering> = it
                .offerings
                .iter()
                .filter(|o| {
                    let zone_id = option
                        .offerings
                        .iter()
                        .find(|l| l.zone == o.zone)
                        .and_then(|l| l.zone_id.as_deref());
                    OfferingLabels {
                        zone_id,
                        ..OfferingLabels::plain(&o.zone, o.capacity_type.as_str())
                    }
                    .allowed(&requirements)
                })
                .map(catalog_offering)
                .chain(
                    option
                        .offerings
                        .iter()
                        .filter(|o| o.reservation.is_some())
                        .filter(|o| o.labels().allowed(&requirements))
                        .map(reserved_offering),
                )
                .collect();
            if offerings.is_empty() {
                return None;
            }
            // The devices as the NodePool's nodes publish them (MIG instances where its
            // nvidia.com/mig.config splits the GPUs), when DRA is modelled.
            let devices = option
                .devices
                .as_ref()
                .map(|d| &*d.templates)
                .or(it.devices.as_deref());
            Some(listed(it, option.allocatable.clone(), devices, offerings))
        })
        .collect();
    PoolListing {
        node_pool: pool.name.clone(),
        instance_types: sorted(types),
    }
}

fn catalog_offering(o: &crate::catalog::Offering) -> ListedOffering {
    ListedOffering {
        zone: o.zone.clone(),
        capacity_type: o.capacity_type.as_str().to_string(),
        price_per_hour: o.price,
        price_basis: o.price_basis,
        available: o.available,
        capacity_reservation: None,
    }
}

fn reserved_offering(o: &LaunchOffering) -> ListedOffering {
    ListedOffering {
        zone: o.zone.clone(),
        capacity_type: o.capacity_type.clone(),
        price_per_hour: o.price,
        price_basis: o.price_basis,
        available: o.reservation.as_ref().is_some_and(|r| r.free > 0),
        capacity_reservation: o.reservation.as_ref().map(|r| ListedReservation {
            id: r.id.clone(),
            type_: r.reservation_type(),
            free_instances: r.free,
        }),
    }
}

fn listed(
    it: &InstanceType,
    allocatable: ResourceList,
    devices: Option<&DeviceTemplates>,
    mut offerings: Vec<ListedOffering>,
) -> ListedType {
    offerings.sort_by(|a, b| {
        (!a.available, a.price_per_hour, &a.zone, &a.capacity_type).cmp(&(
            !b.available,
            b.price_per_hour,
            &b.zone,
            &b.capacity_type,
        ))
    });
    let cheapest = offerings.first().filter(|o| o.available);
    let dra_devices =
        devices
            .iter()
            .flat_map(|t| t.pools.iter())
            .fold(BTreeMap::new(), |mut m, p| {
                *m.entry(p.driver.clone()).or_insert(0) += p.devices.len();
                m
            });
    ListedType {
        name: it.name.clone(),
        gpu: gpu(it, &dra_devices),
        efa: units(it.capacity.get(resources::EFA)),
        dra_devices,
        price_per_hour: cheapest.map(|o| o.price_per_hour),
        price_note: cheapest.and_then(|o| o.price_basis.note().map(str::to_string)),
        offerings,
        allocatable,
    }
}

/// The GPU line: Karpenter's GPU labels, and how pods reach the GPUs.
fn gpu(it: &InstanceType, dra: &BTreeMap<String, usize>) -> Option<ListedGpu> {
    let name = it.labels.get(labels::INSTANCE_GPU_NAME)?;
    let get = |key: &str| it.labels.get(key).and_then(|v| v.parse::<u64>().ok());
    let mut served_by: Vec<String> = [
        resources::NVIDIA_GPU,
        resources::AMD_GPU,
        resources::HABANA_GAUDI,
    ]
    .iter()
    .filter(|r| it.capacity.contains_key(**r))
    .map(|r| r.to_string())
    .collect();
    if dra.contains_key(crate::catalog::devices::NVIDIA_GPU_DRIVER) {
        served_by.push("dra".to_string());
    }
    let mig = it
        .gpu
        .as_ref()
        .and_then(|g| g.product_name.as_deref())
        .and_then(crate::catalog::mig::mig_gpu);
    if mig.is_some() {
        served_by.push("mig".to_string());
    }
    let mig_profiles = mig
        .iter()
        .flat_map(|m| m.profiles.iter())
        .map(|p| ListedMigProfile {
            name: p.name.clone(),
            resource: p.resource_name(),
            per_gpu: p.max_instances,
            memory_gib: p.memory_gib,
        })
        .collect();
    Some(ListedGpu {
        name: name.clone(),
        manufacturer: it
            .labels
            .get(labels::INSTANCE_GPU_MANUFACTURER)
            .cloned()
            .unwrap_or_default(),
        count: get(labels::INSTANCE_GPU_COUNT)
            .and_then(|c| u32::try_from(c).ok())
            .unwrap_or(0),
        memory_mib: get(labels::INSTANCE_GPU_MEMORY),
        served_by,
        mig_profiles,
    })
}

fn units(q: Option<&Quantity>) -> u32 {
    q.map_or(0, |q| u32::try_from(q.units_ceil()).unwrap_or(u32::MAX))
}

/// Cheapest first; types with no available offering (no price known) last; then by name.
fn sorted(mut types: Vec<ListedType>) -> Vec<ListedType> {
    types.sort_by(|a, b| {
        (a.price_per_hour.is_none(), a.price_per_hour, &a.name).cmp(&(
            b.price_per_hour.is_none(),
            b.price_per_hour,
            &b.name,
        ))
    });
    types
}

#[cfg(test)]
mod tests;
