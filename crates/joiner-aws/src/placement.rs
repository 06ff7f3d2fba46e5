//! The placement group an EC2NodeClass's `placementGroupSelector` names, as Karpenter finds it:
//! `DescribePlacementGroups` by ID or by name, filtered to `state=available` (a group still
//! being made, or being deleted, is not found), the first answer taken.
//!
//! EC2 answers an unknown name or ID with an error rather than an empty list
//! (`InvalidPlacementGroup.Unknown`); both read as "not found", which makes the class not ready
//! with the reason, where any other failure leaves its last status and the group last found.
//!
//! moto (5.2.1) does not implement placement groups, so the call is not run in the moto tests;
//! what EC2's answer becomes is tested on SDK values ([`group_of`]), and the controller's side
//! against the simulated cloud's groups (`joiner-simulate`'s `placement_groups` tests).

use aws_sdk_ec2::types::{Filter, PlacementGroup as Ec2Group};
use joiner_model::api::ec2nodeclass::PlacementGroupSelector;
use joiner_model::placement::PlacementGroup;

use crate::clients::Clients;
use crate::error::AwsError;

/// EC2's answer for one group in Joiner's shape; `None` when it lacks an ID, a name or a
/// strategy Joiner knows.
pub(crate) fn group_of(g: &Ec2Group) -> Option<PlacementGroup> {
    Some(PlacementGroup {
        id: g.group_id()?.to_string(),
        name: g.group_name()?.to_string(),
        strategy: g.strategy()?.as_str().parse().ok()?,
        partitions: g
            .partition_count()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
    })
}

impl Clients {
    /// The available group `selector` names; `Ok(None)` when EC2 has none.
    pub(crate) async fn placement_group(
        &self,
        node_class: &str,
        selector: &PlacementGroupSelector,
    ) -> Result<Option<PlacementGroup>, AwsError> {
        let mut call = self
            .ec2
            .describe_placement_groups()
            .filters(Filter::builder().name("state").values("available").build());
        call = match (&selector.id, &selector.name) {
            (Some(id), _) => call.group_ids(id),
            (None, Some(name)) => call.group_names(name),
            (None, None) => return Ok(None),
        };
        match call.send().await {
            Ok(answer) => Ok(answer.placement_groups().iter().find_map(group_of)),
            Err(e) => {
                let e = AwsError::api(
                    "DescribePlacementGroups",
                    format!("EC2NodeClass {node_class} placementGroupSelector {selector:?}"),
                    e,
                );
                if e.code()
                    .is_some_and(|c| c.starts_with("InvalidPlacementGroup"))
                {
                    return Ok(None);
                }
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::types::PlacementStrategy as Ec2Strategy;
    use joiner_model::placement::PlacementStrategy;

    #[test]
    fn ec2_groups_read_as_joiner_s() {
        let g = Ec2Group::builder()
            .group_id("pg-0a")
            .group_name("training")
            .strategy(Ec2Strategy::Partition)
            .partition_count(3)
            .build();
        assert_eq!(
            group_of(&g),
            Some(PlacementGroup {
                id: "pg-0a".into(),
                name: "training".into(),
                strategy: PlacementStrategy::Partition,
                partitions: 3,
            })
        );
        let no_id = Ec2Group::builder()
            .group_name("x")
            .strategy(Ec2Strategy::Cluster)
            .build();
        assert_eq!(group_of(&no_id), None);
    }
}
