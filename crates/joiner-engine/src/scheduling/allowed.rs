//! Which instance types and offerings a NodePool allows: the one rule the planner packs by and
//! `joiner catalog` lists by, so that what the catalog shows is what a plan may launch.

use joiner_model::wellknown::labels;

use crate::requirements::{Labels, Requirement, Requirements, holds_for_type};

use super::PoolInput;

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
/// are `labels` meets `requirements` on everything but zone and capacity type, which belong to
/// offerings. A well-known label the type lacks fails as `DoesNotExist` would.
pub fn type_allowed(requirements: &Requirements, labels: &Labels) -> bool {
    requirements.iter().all(|(k, r)| {
        k == labels::ZONE
            || k == labels::CAPACITY_TYPE
            || holds_for_type(k, r, labels.get(k).map(String::as_str), true)
    })
}

/// Whether an offering in `zone` as `capacity_type` meets `requirements`.
pub fn offering_allowed(zone: &str, capacity_type: &str, requirements: &Requirements) -> bool {
    requirements
        .get(labels::ZONE)
        .is_none_or(|r| r.matches(Some(zone)))
        && requirements
            .get(labels::CAPACITY_TYPE)
            .is_none_or(|r| r.matches(Some(capacity_type)))
}
