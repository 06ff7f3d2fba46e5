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

/// What one offering gives the labels offerings define
/// ([`joiner_model::wellknown::labels::OFFERING_DEFINED`]).
#[derive(Debug, Clone, Copy)]
pub struct OfferingLabels<'a> {
    pub zone: &'a str,
    /// Known only where the EC2NodeClass's subnets say it.
    pub zone_id: Option<&'a str>,
    pub capacity_type: &'a str,
    /// The reservation of a `reserved` offering.
    pub reservation: Option<&'a OfferedReservation>,
    /// The partition of an offering of a partition placement group.
    pub partition: Option<&'a str>,
}

impl<'a> OfferingLabels<'a> {
    /// An offering in `zone` as `capacity_type`, with no zone ID, reservation or partition.
    pub fn plain(zone: &'a str, capacity_type: &'a str) -> Self {
        OfferingLabels {
            zone,
            zone_id: None,
            capacity_type,
            reservation: None,
            partition: None,
        }
    }

    /// The value the offering gives the offering label `key`; `None` when it does not carry
    /// the label.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        match key {
            labels::ZONE => Some(self.zone),
            labels::ZONE_ID => self.zone_id,
            labels::CAPACITY_TYPE => Some(self.capacity_type),
            labels::CAPACITY_RESERVATION_ID => self.reservation.map(|r| r.id.as_str()),
            labels::CAPACITY_RESERVATION_TYPE => self.reservation.map(|r| r.reservation_type()),
            labels::CAPACITY_RESERVATION_INTERRUPTIBLE => self
                .reservation
                .map(|r| if r.interruptible { "true" } else { "false" }),
            labels::PLACEMENT_GROUP_PARTITION => self.partition,
            _ => None,
        }
    }

    /// Whether the offering meets `requirements` on the labels offerings define.
    pub fn allowed(&self, requirements: &Requirements) -> bool {
        labels::OFFERING_DEFINED.iter().all(|key| {
            requirements
                .get(key)
                .is_none_or(|r| r.matches(self.get(key)))
        })
    }
}

impl LaunchOffering {
    /// The labels this offering gives a node launched from it.
    pub fn labels(&self) -> OfferingLabels<'_> {
        OfferingLabels {
            zone: &self.zone,
            zone_id: self.zone_id.as_deref(),
            capacity_type: &self.capacity_type,
            reservation: self.reservation.as_ref(),
            partition: self.partition.as_deref(),
        }
    }
}
