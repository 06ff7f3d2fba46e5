//! Which instance types and offerings a NodePool allows: the one rule the planner packs by and
//! `joiner catalog` lists by, so that what the catalog shows is what a plan may launch.

use joiner_model::wellknown::labels;

use crate::requirements::{Labels, Requirement, Requirements, holds_for_type};

use super::{LaunchOffering, OfferedReservation, PoolInput};

/// The NodePool's requirements as Karpenter applies them: on-demand capacity unless the
/// NodePool explicitly allows other capacity types.
pub fn effective_requirements(pool: &PoolInput) -> Requirements {
    let mut requirements = pool.requirements.clone();
    if requirements.get(labels::CAPACITY_TYPE).is_none() {
        requirements.add(labels::CAPACITY_TYPE, Requirement::equals("on-demand"));
    }
    requirements
}

/// Whether an instance type whose node labels (the type's, with the NodePool's template labels)
/// are `labels` meets `requirements` on everything but the labels that belong to offerings
/// (zone, capacity type, reservation). A well-known label the type lacks fails as
/// `DoesNotExist` would.
pub fn type_allowed(requirements: &Requirements, labels: &Labels) -> bool {
    requirements.iter().all(|(k, r)| {
        labels::defined_by_offering(k)
            || holds_for_type(k, r, labels.get(k).map(String::as_str), true)
    })
}

/// The value an offering in `zone` as `capacity_type`, in `reservation` if reserved, gives the
/// offering label `key`.
pub fn offering_label<'a>(offering: &'a LaunchOffering, key: &str) -> Option<&'a str> {
    offering_label_of(
        &offering.zone,
        offering.zone_id.as_deref(),
        &offering.capacity_type,
        offering.reservation.as_ref(),
        key,
    )
}

fn offering_label_of<'a>(
    zone: &'a str,
    zone_id: Option<&'a str>,
    capacity_type: &'a str,
    reservation: Option<&'a OfferedReservation>,
    key: &str,
) -> Option<&'a str> {
    match key {
        labels::ZONE => Some(zone),
        labels::ZONE_ID => zone_id,
        labels::CAPACITY_TYPE => Some(capacity_type),
        labels::CAPACITY_RESERVATION_ID => reservation.map(|r| r.id.as_str()),
        labels::CAPACITY_RESERVATION_TYPE => reservation.map(|r| r.reservation_type()),
        labels::CAPACITY_RESERVATION_INTERRUPTIBLE => {
            reservation.map(|r| if r.interruptible { "true" } else { "false" })
        }
        _ => None,
    }
}

/// Whether an offering in `zone` (of ID `zone_id`, if known) as `capacity_type` (in
/// `reservation`, if reserved) meets `requirements` on the labels offerings define.
pub fn offering_allowed(
    (zone, zone_id): (&str, Option<&str>),
    capacity_type: &str,
    reservation: Option<&OfferedReservation>,
    requirements: &Requirements,
) -> bool {
    labels::OFFERING_DEFINED.iter().all(|key| {
        requirements.get(key).is_none_or(|r| {
            r.matches(offering_label_of(
                zone,
                zone_id,
                capacity_type,
                reservation,
                key,
            ))
        })
    })
}
