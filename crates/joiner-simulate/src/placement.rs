//! EC2 placement groups in the simulated cloud, as EC2 treats them: a selector finds only an
//! `available` group by name or ID; a launch into a group that does not exist is refused
//! (`InvalidPlacementGroup.Unknown`); a spread group holds at most 7 running instances per
//! zone, and a launch past that fails for lack of capacity, as EC2 answers it; a partition
//! number past the group's partitions is refused.

use std::collections::BTreeMap;

use joiner_controller::cloud::{CloudError, LaunchRequest, Resolved};
use joiner_model::api::ec2nodeclass::PlacementGroupSelector;
use joiner_model::placement::{PlacementGroup, PlacementStrategy};
use joiner_model::wellknown::labels;

/// Instances a spread group takes per zone (EC2's rack-level limit).
pub const SPREAD_PER_ZONE: usize = 7;

/// Where one instance was launched: its group's ID and partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub group_id: String,
    pub partition: Option<u32>,
}

/// The account's placement groups, and where each instance launched into one was placed.
#[derive(Debug, Default)]
pub struct SimulatedPlacement {
    groups: Vec<PlacementGroup>,
    placed: BTreeMap<String, Placed>,
}

impl SimulatedPlacement {
    pub fn add(&mut self, group: PlacementGroup) {
        self.groups
            .retain(|g| g.id != group.id && g.name != group.name);
        self.groups.push(group);
    }

    /// Deletes the group named `name` (a later one may take the name with another ID).
    pub fn delete(&mut self, name: &str) {
        self.groups.retain(|g| g.name != name);
    }

    /// What `DescribePlacementGroups` with the selector finds.
    pub fn resolve(
        &self,
        selector: Option<&PlacementGroupSelector>,
    ) -> Resolved<Option<PlacementGroup>> {
        let Some(selector) = selector else {
            return Resolved::Found(None);
        };
        let found = self
            .groups
            .iter()
            .find(|g| match (&selector.id, &selector.name) {
                (Some(id), _) => &g.id == id,
                (None, Some(name)) => &g.name == name,
                (None, None) => false,
            });
        match found {
            Some(g) => Resolved::Found(Some(g.clone())),
            None => Resolved::NotFound(format!("placement group {:?} not found", selector.named())),
        }
    }

    /// Where `request` launches, as its launch template would say: the group and partition of
    /// its NodeClaim's labels, when its class selects a group. Refused as EC2 refuses a group it
    /// does not know or a partition the group does not have.
    pub fn target(&self, request: &LaunchRequest) -> Result<Option<Placed>, CloudError> {
        let selects = request
            .node_class_spec
            .as_ref()
            .is_some_and(|c| c.spec.placement_group_selector.is_some());
        let Some(id) = request
            .labels
            .get(labels::PLACEMENT_GROUP_ID)
            .filter(|_| selects)
        else {
            return Ok(None);
        };
        let Some(group) = self.groups.iter().find(|g| &g.id == id) else {
            return Err(CloudError::Rejected(format!(
                "InvalidPlacementGroup.Unknown: The placement group '{id}' is unknown."
            )));
        };
        let partition = request
            .labels
            .get(labels::PLACEMENT_GROUP_PARTITION)
            .and_then(|p| p.parse::<u32>().ok());
        if partition.is_some_and(|p| p == 0 || p > group.partitions) {
            return Err(CloudError::Rejected(format!(
                "InvalidParameterValue: partition {} is not in placement group {id}",
                partition.unwrap_or_default()
            )));
        }
        Ok(Some(Placed {
            group_id: id.clone(),
            partition,
        }))
    }

    /// Whether the group of `target` has no room left in `zone` among the `running` instances
    /// (by ID, with their zones).
    pub fn full<'a>(
        &self,
        target: &Placed,
        zone: &str,
        running: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> bool {
        let spread = self
            .groups
            .iter()
            .any(|g| g.id == target.group_id && g.strategy == PlacementStrategy::Spread);
        spread
            && running
                .filter(|(id, z)| {
                    *z == zone
                        && self
                            .placed
                            .get(*id)
                            .is_some_and(|p| p.group_id == target.group_id)
                })
                .count()
                >= SPREAD_PER_ZONE
    }

    pub fn record(&mut self, instance_id: &str, target: Placed) {
        self.placed.insert(instance_id.to_string(), target);
    }

    pub fn of(&self, instance_id: &str) -> Option<&Placed> {
        self.placed.get(instance_id)
    }
}
