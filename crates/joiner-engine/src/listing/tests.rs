//! The listing and Karpenter's label semantics, through the snapshot as `joiner catalog` and
//! `joiner plan` see them.

use joiner_model::settings::Settings;
use joiner_model::{Manifests, parse_documents};

use crate::snapshot::{ClusterSnapshot, Options};

fn snapshot(text: &str, values: serde_json::Value) -> ClusterSnapshot {
    let mut m = Manifests::default();
    for (origin, doc) in parse_documents("test.yaml", text).unwrap() {
        m.add_document(origin, doc).unwrap();
    }
    m.finish();
    let (settings, _) = Settings::from_values(&values).unwrap();
    ClusterSnapshot::build(&m, &settings, &Options::default()).unwrap()
}

/// A NodePool with `requirements` (YAML flow items), its class, and one CPU pod.
fn pool(requirements: &str, class_extra: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: np}}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}}
      requirements: [{requirements}]
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: c}}
spec:
  role: R
  amiSelectorTerms: [{{alias: al2023@latest}}]
  {class_extra}
---
apiVersion: v1
kind: Pod
metadata: {{name: p, namespace: default}}
spec:
  containers:
  - name: c
    resources: {{requests: {{cpu: 500m, memory: 512Mi}}}}
"#
    )
}

fn names(s: &ClusterSnapshot) -> Vec<String> {
    s.listing().node_pools[0]
        .instance_types
        .iter()
        .map(|t| t.name.clone())
        .collect()
}

fn planned_type(s: &ClusterSnapshot) -> String {
    let plan = s.plan();
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    plan.node_claims[0].instance_type.clone()
}

#[test]
fn a_requirement_on_a_label_a_type_lacks_fails_as_does_not_exist() {
    // Issue 13: this used to plan a t3.medium for a CPU pod.
    let s = snapshot(
        &pool(
            "{key: karpenter.k8s.aws/instance-gpu-count, operator: Gt, values: ['0']}",
            "",
        ),
        serde_json::json!({}),
    );
    let listed = names(&s);
    assert!(!listed.is_empty());
    assert!(!listed.iter().any(|n| n == "t3.medium"));
    let planned = planned_type(&s);
    let it = s.launch_option("np", &planned).unwrap();
    assert!(
        it.labels["karpenter.k8s.aws/instance-gpu-count"] != "0",
        "{planned}"
    );

    // Karpenter's own example: local NVMe over 300 GB never gives a c5.large.
    let s = snapshot(
        &pool(
            "{key: karpenter.k8s.aws/instance-local-nvme, operator: Gt, values: ['300']}",
            "",
        ),
        serde_json::json!({}),
    );
    let planned = planned_type(&s);
    let nvme: u64 =
        s.launch_option("np", &planned).unwrap().labels["karpenter.k8s.aws/instance-local-nvme"]
            .parse()
            .unwrap();
    assert!(nvme > 300, "{planned} has {nvme} GB");

    // NotIn and DoesNotExist hold for a type without the label.
    let s = snapshot(
        &pool(
            "{key: karpenter.k8s.aws/instance-gpu-count, operator: DoesNotExist}, {key: node.kubernetes.io/instance-type, operator: In, values: [t3.medium, g4dn.xlarge]}",
            "",
        ),
        serde_json::json!({}),
    );
    assert_eq!(names(&s), ["t3.medium"]);
}

#[test]
fn custom_keys_the_node_pool_defines_still_hold() {
    let s = snapshot(
        &pool(
            "{key: example.com/team, operator: In, values: [ml]}, {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}",
            "",
        ),
        serde_json::json!({}),
    );
    assert_eq!(names(&s), ["m5.large"]);
    assert_eq!(planned_type(&s), "m5.large");
}

#[test]
fn the_listing_shows_allocatable_gpus_dra_offerings_and_prices() {
    let s = snapshot(
        &pool(
            "{key: node.kubernetes.io/instance-type, operator: In, values: [g4dn.xlarge, g7e.2xlarge, p5e.48xlarge]}, {key: karpenter.sh/capacity-type, operator: In, values: [on-demand, spot]}",
            "",
        ),
        serde_json::json!({"settings": {"zones": ["us-east-1a", "us-east-1c"]}}),
    );
    let listing = s.listing();
    assert_eq!(listing.region, "us-east-1");
    let types = &listing.node_pools[0].instance_types;
    // p5e.48xlarge is not offered in us-east-1: not listed. Cheapest first.
    let listed: Vec<_> = types.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(listed, ["g4dn.xlarge", "g7e.2xlarge"]);
    let g4dn = &types[0];
    assert_eq!(g4dn.allocatable["cpu"].to_string(), "3920m");
    assert_eq!(g4dn.allocatable["pods"].to_string(), "29");
    let gpu = g4dn.gpu.as_ref().unwrap();
    assert_eq!((gpu.name.as_str(), gpu.count), ("t4", 1));
    assert_eq!(gpu.served_by, ["nvidia.com/gpu", "dra"]);
    assert_eq!(g4dn.dra_devices["gpu.nvidia.com"], 1);
    assert_eq!(g4dn.offerings.len(), 4);
    // The cheapest is the old snapshot's spot price, and the listing says what it is.
    assert_eq!(g4dn.price_per_hour.unwrap().to_string(), "0.1869");
    assert!(g4dn.price_note.as_deref().unwrap().contains("snapshot"));

    let g7e = &types[1];
    assert_eq!(g7e.gpu.as_ref().unwrap().served_by, ["nvidia.com/gpu"]);
    assert!(g7e.dra_devices.is_empty());
    assert!(
        g7e.offerings
            .iter()
            .all(|o| o.zone == "us-east-1a" || o.zone == "us-east-1c")
    );
}

#[test]
fn instance_types_and_regions_change_the_listing() {
    let text = format!(
        "{}---\n{}",
        pool(
            "{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, x9.large]}",
            ""
        ),
        r#"apiVersion: joiner.dev/v1alpha1
kind: InstanceType
metadata: {name: x9.large}
spec:
  architecture: amd64
  capacity: {cpu: "2", memory: 8Gi, pods: "20"}
  offerings: [{zone: eu-west-1a, capacityType: on-demand, price: 0.01}]
"#
    );
    let s = snapshot(
        &text,
        serde_json::json!({"settings": {"region": "eu-west-1"}}),
    );
    let types = &s.listing().node_pools[0].instance_types;
    let listed: Vec<_> = types.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(listed, ["x9.large", "m5.large"]);
    let m5 = &types[1];
    assert!(m5.offerings.iter().all(|o| o.zone.starts_with("eu-west-1")));
    assert!(m5.price_note.as_deref().unwrap().contains("us-east-1"));
    // The plan picks the user's cheaper type, and says nothing of its listed price.
    let plan = s.plan();
    assert_eq!(plan.node_claims[0].instance_type, "x9.large");
    assert_eq!(plan.node_claims[0].price_note, None);
}

#[test]
fn raid0_node_classes_list_the_instance_store_as_ephemeral_storage() {
    let s = snapshot(
        &pool(
            "{key: node.kubernetes.io/instance-type, operator: In, values: [m5d.large]}",
            "instanceStorePolicy: RAID0",
        ),
        serde_json::json!({}),
    );
    let m5d = &s.listing().node_pools[0].instance_types[0];
    // 75G less 1Gi kube-reserved and the 10% eviction threshold.
    let want = 75_000_000_000i128 - (1 << 30) - 7_500_000_000;
    assert_eq!(
        m5d.allocatable["ephemeral-storage"].nanos(),
        want * 1_000_000_000
    );
}

#[test]
fn without_node_pools_the_whole_catalog_is_listed() {
    let s = snapshot("", serde_json::json!({}));
    let listing = s.listing();
    assert_eq!(listing.node_pools.len(), 1);
    assert_eq!(listing.node_pools[0].node_pool, "-");
    let types = &listing.node_pools[0].instance_types;
    assert_eq!(types.len(), 1255);
    // Types without any price known come last, with no price.
    let last = types.last().unwrap();
    assert!(last.price_per_hour.is_none(), "{}", last.name);
    assert!(types[0].price_per_hour.is_some());
}

#[test]
fn bottlerocket_keeps_ephemeral_storage_on_its_data_volume() {
    let volumes = "blockDeviceMappings: [{deviceName: /dev/xvda, ebs: {volumeSize: 4Gi}}, {deviceName: /dev/xvdb, ebs: {volumeSize: 100Gi}}]";
    let type_ = "{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}";
    let storage = |class_extra: &str| {
        let s = snapshot(&pool(type_, class_extra), serde_json::json!({}));
        s.listing().node_pools[0].instance_types[0].allocatable["ephemeral-storage"]
    };
    let bottlerocket = storage(&format!("amiFamily: Bottlerocket\n  {volumes}"));
    let al2023 = storage(volumes);
    // 100Gi on Bottlerocket's /dev/xvdb; AL2023 keeps it on its 4Gi root volume.
    assert!(
        bottlerocket.nanos() > 80 * (1i128 << 30) * 1_000_000_000,
        "{bottlerocket:?}"
    );
    assert!(
        al2023.nanos() < 4 * (1i128 << 30) * 1_000_000_000,
        "{al2023:?}"
    );
}
