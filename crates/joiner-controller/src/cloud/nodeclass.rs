//! What an EC2NodeClass's selectors resolve to in the cloud: the answer of
//! [`CloudProvider::resolve_node_class`](super::CloudProvider::resolve_node_class), part by
//! part, each with its own outcome, so a throttled AMI read never undoes subnets that were
//! found, and a read that failed never reads as "nothing matches".

use joiner_model::api::ec2nodeclass::{Ami, SecurityGroup, Subnet};
use joiner_model::api::nodeclass_status::CapacityReservation;
use joiner_model::placement::PlacementGroup;

use super::CloudError;

/// The outcome of resolving one part of a class.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved<T> {
    /// The read succeeded and found this.
    Found(T),
    /// The read succeeded and found nothing usable: the message says what, for the condition.
    NotFound(String),
    /// The read failed (throttled, timed out, refused): nothing is known, the last status
    /// stands and the class is resolved again later.
    Failed(CloudError),
}

/// A class's subnets, security groups, AMIs and instance profile as the cloud has them now.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeClassResolution {
    pub subnets: Resolved<Vec<Subnet>>,
    pub security_groups: Resolved<Vec<SecurityGroup>>,
    pub amis: Resolved<Vec<Ami>>,
    /// The profile nodes get: `spec.instanceProfile` as given, or the one created or adopted
    /// for `spec.role`.
    pub instance_profile: Resolved<String>,
    /// The active reservations `capacityReservationSelectorTerms` select, with their free
    /// counts. Not finding any is no fault of the class (no condition depends on it): the
    /// class launches without reservations.
    pub capacity_reservations: Resolved<Vec<CapacityReservation>>,
    /// The placement group `placementGroupSelector` finds (`available` only); `Found(None)`
    /// for a class without a selector, `NotFound` for a selector EC2 finds nothing for.
    pub placement_group: Resolved<Option<PlacementGroup>>,
}

impl NodeClassResolution {
    /// Every part failed with `error` (the whole resolution could not run).
    pub fn failed(error: CloudError) -> NodeClassResolution {
        NodeClassResolution {
            subnets: Resolved::Failed(error.clone()),
            security_groups: Resolved::Failed(error.clone()),
            amis: Resolved::Failed(error.clone()),
            instance_profile: Resolved::Failed(error.clone()),
            capacity_reservations: Resolved::Failed(error.clone()),
            placement_group: Resolved::Failed(error),
        }
    }
}
