//! EC2NodeClass placement groups through the snapshot and the planner: the types a group's
//! strategy takes, the group's label on every node, one offering per partition of a partition
//! group, and a plan from files that does not know the group.

use std::collections::BTreeMap;

use joiner_model::placement::{PlacementGroup, PlacementStrategy};
use joiner_model::settings::Settings;
use joiner_model::wellknown::labels;

use super::{ClusterSnapshot, Options};

/// A pool of burstable (t3, which EC2 never launches into a cluster group) and general-purpose
/// (m5) types of one class with a placement group.
const POOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: training}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: training}
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [t3.large, m5.large]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: training}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  placementGroupSelector: {name: training}
"#;

fn pod(name: &str, selector: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  nodeSelector: {{{selector}}}\n  containers: [{{name: c, resources: {{requests: {{cpu: \"1\"}}}}}}]\n"
    )
}

fn group(strategy: PlacementStrategy, partitions: u32) -> PlacementGroup {
    PlacementGroup {
        id: "pg-0123456789abcdef0".into(),
        name: "training".into(),
        strategy,
        partitions,
    }
}

/// The snapshot of `docs`, with the class's group found (`Some`) or not known (`None`).
fn snapshot(docs: &[&str], found: Option<PlacementGroup>) -> ClusterSnapshot {
    let m = super::overlay_tests::manifests(docs);
    let settings = Settings::default();
    let options = Options::default();
    let groups: BTreeMap<String, PlacementGroup> = found
        .into_iter()
        .map(|g| ("training".to_string(), g))
        .collect();
    let builder = ClusterSnapshot::builder(&m, &settings, &options);
    if groups.is_empty() {
        builder.build().unwrap()
    } else {
        builder.placement_groups(&groups).build().unwrap()
    }
}

#[test]
fn a_cluster_group_takes_only_the_types_ec2_places_in_one_and_labels_every_node() {
    let p = pod("a", "");
    // t3.large is cheaper than m5.large, but EC2 does not launch burstable types into a cluster
    // placement group.
    let free = snapshot(&[POOL, &p], None).plan();
    assert_eq!(free.node_claims[0].instance_type, "t3.large");
    let s = snapshot(&[POOL, &p], Some(group(PlacementStrategy::Cluster, 0)));
    let plan = s.plan();
    let claim = &plan.node_claims[0];
    assert_eq!(claim.instance_type, "m5.large", "{claim:?}");
    assert_eq!(
        claim
            .labels
            .get(labels::PLACEMENT_GROUP_ID)
            .map(String::as_str),
        Some("pg-0123456789abcdef0")
    );
    assert!(!claim.labels.contains_key(labels::PLACEMENT_GROUP_PARTITION));
    // A spread group takes t3 again.
    let spread = snapshot(&[POOL, &p], Some(group(PlacementStrategy::Spread, 0))).plan();
    assert_eq!(spread.node_claims[0].instance_type, "t3.large");
}

#[test]
fn a_partition_group_offers_each_partition_and_pods_may_ask_for_one() {
    let any = pod("any", "");
    let third = pod(
        "third",
        "karpenter.k8s.aws/placement-group-partition: \"3\"",
    );
    let beyond = pod(
        "beyond",
        "karpenter.k8s.aws/placement-group-partition: \"8\"",
    );
    let s = snapshot(
        &[POOL, &any, &third, &beyond],
        Some(group(PlacementStrategy::Partition, 7)),
    );
    let plan = s.plan();
    let partition_of = |pod: &str| {
        plan.node_claims
            .iter()
            .find(|c| c.pods.iter().any(|p| p == pod))
            .and_then(|c| c.labels.get(labels::PLACEMENT_GROUP_PARTITION).cloned())
    };
    // Without a preference, the first partition (as Karpenter launches, its lowest value).
    assert_eq!(partition_of("default/any").as_deref(), Some("1"));
    assert_eq!(partition_of("default/third").as_deref(), Some("3"));
    assert!(
        plan.unschedulable.iter().any(|u| u.pod == "default/beyond"),
        "the group has 7 partitions: {:?}",
        plan.node_claims
    );
}

#[test]
fn a_plan_from_files_does_not_know_the_group_and_says_so() {
    let p = pod("a", "");
    let s = snapshot(&[POOL, &p], None);
    let warnings: Vec<&String> = s
        .warnings()
        .iter()
        .filter(|w| w.contains("spec.placementGroupSelector"))
        .collect();
    assert_eq!(warnings.len(), 1, "{:?}", s.warnings());
    assert!(
        warnings[0].contains("EC2NodeClass/training"),
        "{warnings:?}"
    );
    let plan = s.plan();
    assert!(
        !plan.node_claims[0]
            .labels
            .contains_key(labels::PLACEMENT_GROUP_ID)
    );
}
