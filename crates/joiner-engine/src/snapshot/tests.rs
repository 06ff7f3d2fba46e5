//! DRA through the snapshot and the planner: existing nodes judged by their slices, planned
//! nodes by their instance type's templates, shared claims, devices freed by deleting pods.

use joiner_model::settings::Settings;
use joiner_model::{Manifests, parse_documents};

use super::{ClusterSnapshot, Options};
use crate::plan::Plan;

pub(super) const POOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}
      requirements:
      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [g6, g6e, p5, p5en]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: gpu}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
"#;

/// An existing node with two GPUs published by the NVIDIA driver.
const NODE_WITH_SLICE: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node-a, labels: {kubernetes.io/hostname: node-a, kubernetes.io/arch: amd64, kubernetes.io/os: linux}}
status: {allocatable: {cpu: "16", memory: 64Gi, pods: "100"}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: node-a-gpu}
spec:
  driver: gpu.nvidia.com
  nodeName: node-a
  pool: {name: node-a, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-0
    attributes: {type: {string: gpu}, productName: {string: NVIDIA L4}}
    capacity: {memory: {value: 23034Mi}}
  - name: gpu-1
    attributes: {type: {string: gpu}, productName: {string: NVIDIA L4}}
    capacity: {memory: {value: 23034Mi}}
"#;

pub(super) fn pod(name: &str, claims: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  resourceClaims:\n{claims}  containers:\n  - name: c\n    resources: {{requests: {{cpu: 100m}}}}\n"
    )
}

pub(super) fn from_template(name: &str) -> String {
    pod(
        name,
        "  - {name: gpu, resourceClaimTemplateName: one-gpu}\n",
    )
}

pub(super) fn plan_with(docs: &[&str], dra: bool) -> Plan {
    let mut m = Manifests::default();
    for (i, text) in docs.iter().enumerate() {
        for (origin, doc) in parse_documents(&format!("doc{i}.yaml"), text).unwrap() {
            m.add_document(origin, doc).unwrap();
        }
    }
    m.finish();
    let values = serde_json::json!({"settings": {"enableDRA": dra}});
    let (settings, _) = Settings::from_values(&values).unwrap();
    ClusterSnapshot::build(&m, &settings, &Options::default())
        .unwrap()
        .plan()
}

fn plan_dra(docs: &[&str]) -> Plan {
    plan_with(docs, true)
}

fn node_of(plan: &Plan, pod: &str) -> String {
    plan.bindings
        .iter()
        .find(|b| b.pod == pod)
        .map(|b| b.node.clone())
        .unwrap_or_default()
}

#[test]
fn existing_nodes_serve_claims_from_their_slices_first() {
    let (a, b, c) = (from_template("a"), from_template("b"), from_template("c"));
    let plan = plan_dra(&[POOL, NODE_WITH_SLICE, &a, &b, &c]);
    assert_eq!(node_of(&plan, "default/a"), "node-a");
    assert_eq!(node_of(&plan, "default/b"), "node-a");
    // Both GPUs are taken: the third pod needs a new node.
    assert_eq!(plan.node_claims.len(), 1, "{:?}", plan.unschedulable);
    assert_eq!(node_of(&plan, "default/c"), plan.node_claims[0].name);
    let on_a: Vec<_> = plan.claims.iter().filter(|c| c.node == "node-a").collect();
    assert_eq!(on_a.len(), 2);
    assert_eq!(on_a[0].claim, "default/a-gpu-*");
    let result = &on_a[0]
        .allocation
        .devices
        .as_ref()
        .unwrap()
        .results
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        (result.driver.as_str(), result.pool.as_str()),
        ("gpu.nvidia.com", "node-a")
    );
}

const ALLOCATED: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: held, namespace: default}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.nvidia.com}
status:
  allocation:
    devices:
      results: [{request: gpu, driver: gpu.nvidia.com, pool: node-a, device: gpu-0}]
  reservedFor: [{resource: pods, name: holder, uid: "1"}]
"#;

#[test]
fn allocated_claims_hold_their_devices() {
    let (a, b) = (from_template("a"), from_template("b"));
    let plan = plan_dra(&[POOL, NODE_WITH_SLICE, ALLOCATED, &a, &b]);
    let on_a = plan.bindings.iter().filter(|b| b.node == "node-a").count();
    assert_eq!(on_a, 1, "gpu-0 is held by another claim");
    let device = |claim: &str| {
        plan.claims.iter().find(|c| c.claim == claim).and_then(|c| {
            c.allocation
                .devices
                .as_ref()?
                .results
                .as_ref()?
                .first()
                .map(|r| (c.node.clone(), r.device.clone()))
        })
    };
    let taken: Vec<_> = ["default/a-gpu-*", "default/b-gpu-*"]
        .iter()
        .filter_map(|c| device(c))
        .filter(|(n, _)| n == "node-a")
        .collect();
    assert_eq!(taken, vec![("node-a".to_string(), "gpu-1".to_string())]);
}

#[test]
fn devices_held_only_by_deleting_pods_are_free() {
    let holder = "apiVersion: v1\nkind: Pod\nmetadata: {name: holder, namespace: default, deletionTimestamp: \"2026-11-29T00:00:00Z\"}\nspec:\n  nodeName: node-a\n  containers: [{name: c}]\n";
    let (a, b) = (from_template("a"), from_template("b"));
    let plan = plan_dra(&[POOL, NODE_WITH_SLICE, ALLOCATED, holder, &a, &b]);
    assert_eq!(
        plan.bindings.iter().filter(|b| b.node == "node-a").count(),
        2
    );
    assert!(plan.node_claims.is_empty());
}

#[test]
fn a_shared_claim_is_allocated_once_and_its_pods_go_where_its_devices_are() {
    let shared = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: shared, namespace: default}\nspec:\n  devices:\n    requests:\n    - name: gpu\n      exactly: {deviceClassName: gpu.nvidia.com}\n";
    let a = pod("a", "  - {name: gpu, resourceClaimName: shared}\n");
    let b = pod("b", "  - {name: gpu, resourceClaimName: shared}\n");
    // No existing node: both pods share one planned node and one GPU.
    let plan = plan_dra(&[POOL, shared, &a, &b]);
    assert_eq!(plan.node_claims.len(), 1, "{:?}", plan.unschedulable);
    assert_eq!(node_of(&plan, "default/a"), node_of(&plan, "default/b"));
    assert_eq!(plan.claims.len(), 1);
    assert_eq!(plan.claims[0].claim, "default/shared");
}

#[test]
fn nodes_joiner_launched_are_judged_by_templates_until_initialized() {
    let launched = "apiVersion: v1\nkind: Node\nmetadata:\n  name: gpu-x\n  labels: {karpenter.sh/nodepool: gpu, node.kubernetes.io/instance-type: g6.xlarge, kubernetes.io/arch: amd64, kubernetes.io/os: linux}\nstatus: {allocatable: {cpu: \"3\", memory: 12Gi, pods: \"50\"}}\n";
    let a = from_template("a");
    let plan = plan_dra(&[POOL, launched, &a]);
    assert_eq!(node_of(&plan, "default/a"), "gpu-x");
    assert!(plan.node_claims.is_empty());
    // Once initialized it is judged by what it published: nothing here.
    let initialized = launched.replace(
        "node.kubernetes.io/instance-type: g6.xlarge",
        "node.kubernetes.io/instance-type: g6.xlarge, karpenter.sh/initialized: \"true\"",
    );
    let plan = plan_dra(&[POOL, &initialized, &a]);
    assert_ne!(node_of(&plan, "default/a"), "gpu-x");
}

#[test]
fn claims_for_drivers_without_device_data_never_launch_nodes() {
    let class = "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: compute-domain-default-channel.nvidia.com}\nspec:\n  selectors: [{cel: {expression: 'device.driver == \"compute-domain.nvidia.com\"'}}]\n";
    let template = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: channel, namespace: default}\nspec:\n  spec:\n    devices:\n      requests:\n      - name: channel\n        exactly: {deviceClassName: compute-domain-default-channel.nvidia.com}\n";
    let a = pod(
        "a",
        "  - {name: channel, resourceClaimTemplateName: channel}\n",
    );
    let plan = plan_dra(&[POOL, class, template, &a]);
    assert!(plan.node_claims.is_empty());
    assert!(
        plan.unschedulable[0]
            .reason
            .contains("compute-domain-default-channel.nvidia.com"),
        "{}",
        plan.unschedulable[0].reason
    );
}

#[test]
fn gpu_types_without_dra_data_are_named_as_device_plugin_only() {
    // g7e has NVIDIA GPUs but no DRA metadata: a claim cannot be planned on it, and the reason
    // says its GPUs are there for the device plugin's resource.
    let pool = POOL.replace("[g6, g6e, p5, p5en]", "[g7e]");
    let plan = plan_dra(&[&pool, &from_template("a")]);
    assert!(plan.node_claims.is_empty());
    let reason = &plan.unschedulable[0].reason;
    assert!(
        reason.contains("served by the device plugin as nvidia.com/gpu only")
            && reason.contains("g7e."),
        "{reason}"
    );
}

#[test]
fn first_available_makes_a_type_that_serves_only_the_second_alternative_eligible() {
    let template = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: flexible, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        firstAvailable:
        - name: h100s
          deviceClassName: gpu.nvidia.com
          count: 8
          selectors: [{cel: {expression: 'device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100")'}}]
        - name: l4
          deviceClassName: gpu.nvidia.com
          selectors: [{cel: {expression: 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L4"'}}]
"#;
    let a = pod(
        "a",
        "  - {name: gpu, resourceClaimTemplateName: flexible}\n",
    );
    let plan = plan_dra(&[POOL, template, &a]);
    assert_eq!(plan.node_claims[0].instance_type, "g6.xlarge");
    let r = &plan.claims[0]
        .allocation
        .devices
        .as_ref()
        .unwrap()
        .results
        .as_ref()
        .unwrap()[0];
    assert_eq!(r.request, "gpu/l4");
}

#[test]
fn allocation_mode_all_takes_every_matching_device_of_the_node() {
    let template = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: all, namespace: default}\nspec:\n  spec:\n    devices:\n      requests:\n      - name: gpus\n        exactly: {deviceClassName: gpu.nvidia.com, allocationMode: All}\n";
    let a = pod("a", "  - {name: gpus, resourceClaimTemplateName: all}\n");
    let plan = plan_dra(&[POOL, template, &a]);
    let results = plan.claims[0]
        .allocation
        .devices
        .as_ref()
        .unwrap()
        .results
        .as_ref()
        .unwrap();
    let gpus = plan.node_claims[0]
        .labels
        .get("karpenter.k8s.aws/instance-gpu-count")
        .cloned()
        .unwrap_or_default();
    assert_eq!(results.len().to_string(), gpus);
}

#[test]
fn runtime_only_attributes_match_across_gpus_but_cannot_be_selected_on() {
    let same_driver = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: pair, namespace: default}\nspec:\n  spec:\n    devices:\n      requests:\n      - name: gpus\n        exactly: {deviceClassName: gpu.nvidia.com, count: 2}\n      constraints:\n      - matchAttribute: gpu.nvidia.com/driverVersion\n";
    let a = pod("a", "  - {name: gpus, resourceClaimTemplateName: pair}\n");
    let plan = plan_dra(&[POOL, same_driver, &a]);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let by_version = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: pair, namespace: default}\nspec:\n  spec:\n    devices:\n      requests:\n      - name: gpus\n        exactly:\n          deviceClassName: gpu.nvidia.com\n          selectors: [{cel: {expression: 'device.attributes[\"gpu.nvidia.com\"].driverVersion.compareTo(semver(\"550.0.0\")) >= 0'}}]\n";
    let plan = plan_dra(&[POOL, by_version, &a]);
    assert!(plan.node_claims.is_empty());
    assert!(
        plan.unschedulable[0]
            .reason
            .contains("known only once the node runs"),
        "{}",
        plan.unschedulable[0].reason
    );
}

#[test]
fn user_defined_instance_types_bring_their_own_devices() {
    let it = r#"
apiVersion: joiner.dev/v1alpha1
kind: InstanceType
metadata: {name: acc.large}
spec:
  capacity: {cpu: "8", memory: 32Gi, pods: "110"}
  labels: {karpenter.k8s.aws/instance-family: acc}
  offerings: [{zone: us-east-1a, capacityType: on-demand, price: 1.25}]
  devices:
  - driver: accel.example.com
    devices:
    - {name: acc-0, attributes: {model: {string: x1}}}
    - {name: acc-1, attributes: {model: {string: x1}}}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: accel}
spec:
  selectors: [{cel: {expression: 'device.driver == "accel.example.com"'}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: acc, namespace: default}
spec:
  spec:
    devices:
      requests:
      - {name: acc, exactly: {deviceClassName: accel}}
"#;
    let pool = POOL.replace("values: [g6, g6e, p5, p5en]", "values: [acc]");
    let pods: Vec<String> = (0..3)
        .map(|i| {
            pod(
                &format!("p{i}"),
                "  - {name: acc, resourceClaimTemplateName: acc}\n",
            )
        })
        .collect();
    let mut docs = vec![pool.as_str(), it];
    docs.extend(pods.iter().map(String::as_str));
    let plan = plan_dra(&docs);
    assert_eq!(plan.node_claims.len(), 2, "{:?}", plan.unschedulable);
    assert!(
        plan.node_claims
            .iter()
            .all(|c| c.instance_type == "acc.large")
    );
    assert_eq!(
        plan.node_claims[0]
            .annotations
            .get("karpenter.sh/requested-dra-drivers")
            .map(String::as_str),
        Some("accel.example.com")
    );
}

#[test]
fn with_dra_ignored_pods_with_claims_launch_nothing() {
    let a = from_template("a");
    let plan = plan_with(&[POOL, &a], false);
    assert!(plan.node_claims.is_empty());
    assert!(plan.unschedulable[0].reason.contains("DRA support is off"));
    // A pod asking for the extended resource is not a DRA pod.
    let extended = "apiVersion: v1\nkind: Pod\nmetadata: {name: ext, namespace: default}\nspec:\n  containers: [{name: c, resources: {limits: {nvidia.com/gpu: \"1\"}}}]\n";
    let plan = plan_with(&[POOL, extended], false);
    assert_eq!(plan.node_claims.len(), 1);
}

#[test]
fn gpu_pairs_on_one_pcie_root_need_a_type_that_has_them() {
    let template = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: pair, namespace: default}\nspec:\n  spec:\n    devices:\n      requests:\n      - name: gpus\n        exactly: {deviceClassName: gpu.nvidia.com, count: 2}\n      constraints:\n      - matchAttribute: resource.kubernetes.io/pcieRoot\n";
    let a = pod("a", "  - {name: gpus, resourceClaimTemplateName: pair}\n");
    // g6 types give every GPU a root of its own; g5.12xlarge has four GPUs on one.
    let pool = POOL.replace("values: [g6, g6e, p5, p5en]", "values: [g5, g6]");
    let plan = plan_dra(&[&pool, template, &a]);
    assert_eq!(
        plan.node_claims[0].instance_type, "g5.12xlarge",
        "{:?}",
        plan.unschedulable
    );
    let pool = POOL.replace("values: [g6, g6e, p5, p5en]", "values: [g6]");
    let plan = plan_dra(&[&pool, template, &a]);
    assert!(
        plan.unschedulable[0]
            .reason
            .contains("matchAttribute: resource.kubernetes.io/pcieRoot"),
        "{}",
        plan.unschedulable[0].reason
    );
}

#[test]
fn cordoned_nodes_finished_pods_and_gated_pods() {
    let node = "apiVersion: v1\nkind: Node\nmetadata: {name: n1, labels: {kubernetes.io/arch: amd64, kubernetes.io/os: linux}}\nspec: {unschedulable: true}\nstatus: {allocatable: {cpu: \"4\", memory: 16Gi, pods: \"100\"}}\n";
    let web = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\nspec:\n  containers: [{name: c, resources: {requests: {cpu: 100m}}}]\n";
    let done = "apiVersion: v1\nkind: Pod\nmetadata: {name: done, namespace: default}\nspec:\n  containers: [{name: c, resources: {requests: {cpu: 100m}}}]\nstatus: {phase: Succeeded}\n";
    let gated = "apiVersion: v1\nkind: Pod\nmetadata: {name: gated, namespace: default}\nspec:\n  schedulingGates: [{name: example.com/wait}]\n  containers: [{name: c}]\n";
    let preempting = "apiVersion: v1\nkind: Pod\nmetadata: {name: preempting, namespace: default}\nspec:\n  containers: [{name: c, resources: {requests: {cpu: \"64\"}}}]\nstatus: {phase: Pending, nominatedNodeName: n2}\n";
    let plan = plan_with(&[POOL, node, web, done, gated, preempting], false);
    // The cordoned node takes nothing; the finished, the gated and the preempting pod (the
    // scheduler makes room for it on the node it nominated) are not planned.
    assert_ne!(node_of(&plan, "default/web"), "n1");
    assert_eq!(plan.bindings.len(), 1);
    assert!(plan.unschedulable.is_empty());
}

#[test]
fn the_plan_does_not_depend_on_file_order() {
    let (a, b, c) = (from_template("a"), from_template("b"), from_template("c"));
    let second = NODE_WITH_SLICE.replace("node-a", "node-b");
    let one = plan_dra(&[POOL, NODE_WITH_SLICE, &second, &a, &b, &c]);
    let other = plan_dra(&[&c, &second, &b, POOL, &a, NODE_WITH_SLICE]);
    assert_eq!(
        serde_json::to_string(&one).unwrap(),
        serde_json::to_string(&other).unwrap()
    );
}

/// `topology.k8s.aws/zone-id` is an offering label known from the class's subnets: a pod that
/// selects a zone ID lands in the zone it names, and where no subnet says which zone has that
/// ID the label does not exist.
#[test]
fn zone_ids_come_from_the_class_subnets() {
    let pool = |status: &str| {
        format!(
            r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: web}}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: web}}
      requirements: [{{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}}]
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: web}}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{{alias: al2023@latest}}]
{status}"#
        )
    };
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: w, namespace: default}\nspec:\n  nodeSelector: {topology.k8s.aws/zone-id: use1-az6}\n  containers:\n  - name: c\n    resources: {requests: {cpu: 100m}}\n";
    let subnets = "status:\n  subnets:\n  - {id: subnet-a, zone: us-east-1a, zoneID: use1-az4}\n  - {id: subnet-c, zone: us-east-1c, zoneID: use1-az6}\n";
    let plan = plan_with(&[&pool(subnets), pod], false);
    assert_eq!(plan.node_claims.len(), 1, "{:?}", plan.unschedulable);
    assert_eq!(plan.node_claims[0].zone, "us-east-1c");
    assert_eq!(
        plan.node_claims[0].labels["topology.k8s.aws/zone-id"],
        "use1-az6"
    );
    let unknown = plan_with(&[&pool(""), pod], false);
    assert!(unknown.node_claims.is_empty());
    assert_eq!(unknown.unschedulable.len(), 1);
}

/// Nodes launch into the class's subnets: once its status names them, only their zones are
/// offered; a class not resolved yet offers every zone.
#[test]
fn offerings_stay_in_the_zones_of_the_class_subnets() {
    let class = |status: &str| {
        format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: web}}\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: web}}\n      requirements: [{{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}}]\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: web}}\nspec:\n  role: R\n  amiSelectorTerms: [{{alias: al2023@latest}}]\n{status}"
        )
    };
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: w, namespace: default}\nspec:\n  containers:\n  - name: c\n    resources: {requests: {cpu: 100m}}\n";
    let anywhere = plan_with(&[&class(""), pod], false);
    let zones: Vec<&str> = anywhere.node_claims[0]
        .offerings
        .iter()
        .map(|o| o.zone.as_str())
        .collect();
    assert!(zones.len() > 2, "{zones:?}");
    let only_c = "status:\n  subnets:\n  - {id: subnet-c, zone: us-east-1c, zoneID: use1-az6}\n";
    let plan = plan_with(&[&class(only_c), pod], false);
    assert_eq!(plan.node_claims[0].zone, "us-east-1c");
    assert!(
        plan.node_claims[0]
            .offerings
            .iter()
            .all(|o| o.zone == "us-east-1c"),
        "{:?}",
        plan.node_claims[0].offerings
    );
}

/// A type the built-in data lacks, described by the cloud and sold by it, is planned like any
/// other; described but not sold, it is not.
#[test]
fn a_type_the_cloud_describes_and_sells_is_planned() {
    use crate::catalog::{CapacityType, Ec2Facts, Offering, PriceBasis};
    let facts: Ec2Facts = serde_json::from_value(serde_json::json!({
        "name": "g9dn.xlarge", "arch": ["x86_64"], "cpuManufacturer": "Intel", "vcpu": 4,
        "memoryMiB": 16384, "hypervisor": "nitro", "enis": 3, "ipv4PerEni": 10,
        "bandwidthMbps": 5000, "efa": 0, "encryptionInTransit": true, "usage": ["on-demand"],
        "gpus": [{"manufacturer": "NVIDIA", "name": "T9", "count": 1, "memoryMiB": 16384}]
    }))
    .expect("facts");
    let text = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}
      requirements: [{key: karpenter.k8s.aws/instance-gpu-name, operator: In, values: [t9]}]
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: gpu}
spec:
  role: R
  amiSelectorTerms: [{alias: al2023@latest}]
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default}
spec:
  containers:
  - name: c
    resources: {requests: {nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}
"#;
    let mut m = Manifests::default();
    for (origin, doc) in parse_documents("new.yaml", text).unwrap() {
        m.add_document(origin, doc).unwrap();
    }
    m.finish();
    let settings = Settings::default();
    let options = Options::default();
    let sold = std::collections::BTreeMap::from([(
        "g9dn.xlarge".to_string(),
        vec![Offering {
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::OnDemand,
            price: joiner_model::Price::from_usd(0.40).unwrap(),
            available: true,
            price_basis: PriceBasis::Listed,
        }],
    )]);
    let described = [facts];
    let plan = ClusterSnapshot::builder(&m, &settings, &options)
        .sold(&sold)
        .described(&described)
        .build()
        .unwrap()
        .plan();
    assert_eq!(plan.node_claims.len(), 1, "{:?}", plan.unschedulable);
    assert_eq!(plan.node_claims[0].instance_type, "g9dn.xlarge");
    let unsold = ClusterSnapshot::builder(&m, &settings, &options)
        .sold(&std::collections::BTreeMap::new())
        .described(&described)
        .build()
        .unwrap()
        .plan();
    assert!(unsold.node_claims.is_empty());
}
