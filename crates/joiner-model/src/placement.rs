//! EC2 placement groups as an EC2NodeClass's `placementGroupSelector` finds them: one group per
//! class, by name or ID, resolved in EC2 by the controller (Karpenter keeps the resolved group
//! in memory, not in the class's status, and so does Joiner).
//!
//! What a group changes, as in Karpenter: only instance types whose EC2 `PlacementGroupInfo`
//! lists the group's strategy are offered; every node carries
//! `karpenter.k8s.aws/placement-group-id`; a partition group's offerings are one per partition,
//! each with `karpenter.k8s.aws/placement-group-partition`, so pods may ask for a partition and
//! a NodeClaim is launched into the one it was planned for.

use serde::{Deserialize, Serialize};

/// How EC2 places a group's instances.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum PlacementStrategy {
    /// Close together in one zone, for low-latency networking (training clusters).
    Cluster,
    /// Spread over partitions that share no racks.
    Partition,
    /// Each instance on distinct hardware (at most 7 per zone at rack level).
    Spread,
}

impl PlacementStrategy {
    /// Every strategy, in EC2's order.
    pub const ALL: [PlacementStrategy; 3] = [
        PlacementStrategy::Cluster,
        PlacementStrategy::Partition,
        PlacementStrategy::Spread,
    ];
}

/// A placement group as `DescribePlacementGroups` has it, once found and `available`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementGroup {
    /// `pg-…`: what instances are launched into and what nodes are labelled with.
    pub id: String,
    pub name: String,
    pub strategy: PlacementStrategy,
    /// Partitions of a partition group (1 to 7 per zone); 0 for the other strategies.
    #[serde(default)]
    pub partitions: u32,
}

impl PlacementGroup {
    /// The partitions a node may be launched into, `1..=partitions`; none but for a partition
    /// group.
    pub fn partition_numbers(&self) -> impl Iterator<Item = u32> {
        let n = if self.strategy == PlacementStrategy::Partition {
            self.partitions
        } else {
            0
        };
        1..=n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_partition_group_has_partitions_to_launch_into() {
        let mut g = PlacementGroup {
            id: "pg-0a".into(),
            name: "training".into(),
            strategy: PlacementStrategy::Partition,
            partitions: 3,
        };
        assert_eq!(g.partition_numbers().collect::<Vec<_>>(), [1, 2, 3]);
        g.strategy = PlacementStrategy::Cluster;
        assert_eq!(g.partition_numbers().count(), 0);
        assert_eq!("spread".parse(), Ok(PlacementStrategy::Spread));
    }
}
