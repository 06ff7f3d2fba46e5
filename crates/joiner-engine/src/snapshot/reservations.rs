//! Capacity reservations as offerings. An EC2NodeClass's `status.capacityReservations` (what
//! its `capacityReservationSelectorTerms` resolved to) makes each reserved instance type
//! offerable as `reserved` in the reservation's zone, to the NodePools that use the class.
//!
//! How many instances a reservation can still take is what EC2 last said
//! (`availableInstanceCount`, one when not recorded) less the NodeClaims already bound for it
//! that have no instance yet: those are about to take a place EC2 has not counted. Instances
//! launched since the count was read are not known here; EC2 then rejects the launch
//! (`ReservationCapacityExceeded`), which the controller treats as insufficient capacity and
//! plans past.

use std::collections::BTreeMap;

use joiner_model::api::{EC2NodeClass, NodeClaim};
use joiner_model::wellknown::{CapacityType, labels};
use joiner_model::{Price, Sourced};
use k8s_openapi::jiff::Timestamp;

use crate::catalog::{InstanceType, PriceBasis};
use crate::scheduling::{LaunchOffering, OfferedReservation, reserved_price};

/// Free instances per reservation ID, for the reservations some class selects and that can be
/// launched into at `now` (active, and for a Capacity Block not yet draining).
pub(super) fn free_counts(
    classes: &[Sourced<EC2NodeClass>],
    claims: &[Sourced<NodeClaim>],
    now: Option<Timestamp>,
) -> BTreeMap<String, u32> {
    let mut free: BTreeMap<String, u32> = BTreeMap::new();
    let reservations = classes
        .iter()
        .filter_map(|c| c.object.status.as_ref())
        .flat_map(|s| s.capacity_reservations.iter());
    for r in reservations.filter(|r| r.launchable(now)) {
        free.entry(r.id.clone())
            .and_modify(|f| *f = (*f).min(r.free_instances()))
            .or_insert(r.free_instances());
    }
    let waiting = claims
        .iter()
        .map(|c| &c.object)
        .filter(|c| !c.is_deleting() && c.status.provider_id.is_none());
    for claim in waiting {
        if let Some(f) = claim
            .label(labels::CAPACITY_RESERVATION_ID)
            .and_then(|id| free.get_mut(id))
        {
            *f = f.saturating_sub(1);
        }
    }
    free
}

/// The reserved offerings of `it` that `class` selects, one per reservation. A reservation is
/// offered at [`reserved_price`] of the type's on-demand price in its zone (or anywhere, when
/// the zone has none).
pub(super) fn offerings(
    class: &EC2NodeClass,
    it: &InstanceType,
    free: &BTreeMap<String, u32>,
) -> Vec<LaunchOffering> {
    let Some(status) = class.status.as_ref() else {
        return Vec::new();
    };
    status
        .capacity_reservations
        .iter()
        .filter(|r| r.instance_type == it.name)
        .filter_map(|r| {
            let free = *free.get(&r.id)?;
            let on_demand = it
                .offering(&r.availability_zone, CapacityType::OnDemand)
                .or_else(|| {
                    it.offerings
                        .iter()
                        .find(|o| o.capacity_type == CapacityType::OnDemand)
                })
                .map_or(Price::ZERO, |o| o.price);
            Some(LaunchOffering {
                zone: r.availability_zone.clone(),
                zone_id: None,
                capacity_type: CapacityType::Reserved.as_str().to_string(),
                price: reserved_price(on_demand),
                price_basis: PriceBasis::Listed,
                reservation: Some(OfferedReservation {
                    id: r.id.clone(),
                    capacity_block: r.is_capacity_block(),
                    interruptible: r.interruptible,
                    free,
                }),
                partition: None,
            })
        })
        .collect()
}
