//! End-to-end: the built `joiner` binary on scenario files, as a user runs it.

use std::process::{Command, Output};

use joiner_test_support::example_dir;

fn joiner(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(args)
        .output()
        .expect("the joiner binary runs")
}

fn plan_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["plan", "-o", "json"];
    all.extend_from_slice(args);
    let out = joiner(&all);
    assert!(
        out.status.success(),
        "joiner {all:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("plan output is JSON")
}

fn lab(file: &str) -> String {
    example_dir("time-slicing-learning-lab")
        .join(file)
        .display()
        .to_string()
}

#[test]
fn learning_lab_packs_three_time_sliced_pods_per_gpu() {
    let dir = example_dir("time-slicing-learning-lab")
        .display()
        .to_string();
    let plan = plan_json(&["-f", &dir]);
    assert_eq!(plan["apiVersion"], "joiner.dev/v1alpha1");
    assert_eq!(plan["kind"], "Plan");
    let claims = plan["nodeClaims"].as_array().unwrap();
    assert_eq!(claims.len(), 2);
    for c in claims {
        assert_eq!(c["instanceType"], "g4dn.xlarge");
        assert_eq!(c["capacityType"], "on-demand");
        assert_eq!(c["nodePool"], "g4-nodepool");
        assert_eq!(c["pricePerHour"], 0.526);
        assert_eq!(c["resources"]["allocatable"]["nvidia.com/gpu"], "3");
        assert_eq!(c["labels"]["nvidia.com/gpu.replicas"], "3");
    }
    let mut sizes: Vec<usize> = claims
        .iter()
        .map(|c| c["pods"].as_array().unwrap().len())
        .collect();
    sizes.sort();
    assert_eq!(sizes, vec![1, 3]);
    assert_eq!(plan["unschedulable"].as_array().unwrap().len(), 0);
    assert_eq!(plan["bindings"].as_array().unwrap().len(), 4);
    assert_eq!(plan["totalPricePerHour"], 1.052);
}

#[test]
fn learning_lab_without_the_device_plugin_config_needs_a_node_per_pod() {
    let plan = plan_json(&[
        "-f",
        &lab("deployment.yaml"),
        "-f",
        &lab("nodepool.yaml"),
        "-f",
        &lab("ec2nodeclass.yaml"),
    ]);
    assert_eq!(plan["nodeClaims"].as_array().unwrap().len(), 4);
    assert_eq!(plan["totalPricePerHour"], 2.104);
}

#[test]
fn learning_lab_warns_about_the_unknown_launch_template_field() {
    let dir = example_dir("time-slicing-learning-lab")
        .display()
        .to_string();
    let out = joiner(&["plan", "-f", &dir]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("EC2NodeClass/g4-nodeclass: spec.launchTemplate: unknown field"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("g4-nodepool-0") && stdout.contains("total 1.052 USD/h"),
        "{stdout}"
    );
}

#[test]
fn yaml_output_and_stdin_input() {
    let text = std::fs::read_to_string(lab("deployment.yaml")).unwrap()
        + "---\n"
        + &std::fs::read_to_string(lab("nodepool.yaml")).unwrap()
        + "---\n"
        + &std::fs::read_to_string(lab("ec2nodeclass.yaml")).unwrap()
        + "---\n"
        + &std::fs::read_to_string(lab("device-plugin-config.yaml")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["plan", "-f", "-", "-o", "yaml"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("totalPricePerHour: 1.052"), "{stdout}");
}

#[test]
fn bad_input_exits_1_naming_file_object_and_field() {
    let dir = std::env::temp_dir().join(format!("joiner-e2e-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: broken, namespace: team}\nspec:\n  containers:\n  - name: c\n    resources: {requests: {cpu: lots}}\n",
    )
    .unwrap();
    let out = joiner(&["plan", "-f", &file.display().to_string()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.yaml"), "{stderr}");
    assert!(stderr.contains("Pod/team/broken"), "{stderr}");
    assert!(
        stderr.contains("spec.containers[0].resources.requests.cpu"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing is half-printed");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn user_defined_instance_types_replace_the_catalog() {
    let dir = std::env::temp_dir().join(format!("joiner-e2e-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("cluster.yaml"),
        r#"apiVersion: joiner.dev/v1alpha1
kind: InstanceType
metadata: {name: gpu-it}
spec:
  architecture: amd64
  capacity: {cpu: "8", memory: 32Gi, pods: "110", nvidia.com/gpu: "2"}
  overhead: {cpu: 100m, memory: 1Gi}
  offerings:
  - {zone: us-east-1a, capacityType: on-demand, price: 1.5}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: infer}
spec:
  replicas: 3
  selector: {matchLabels: {app: infer}}
  template:
    metadata: {labels: {app: infer}}
    spec:
      containers:
      - name: c
        resources: {limits: {nvidia.com/gpu: "1"}}
"#,
    )
    .unwrap();
    let plan = plan_json(&["-f", &dir.display().to_string(), "--no-builtin-catalog"]);
    let claims = plan["nodeClaims"].as_array().unwrap();
    assert_eq!(claims.len(), 2);
    assert!(claims.iter().all(|c| c["instanceType"] == "gpu-it"));
    assert_eq!(plan["totalPricePerHour"], 3.0);
    std::fs::remove_dir_all(&dir).ok();
}

fn fixture(name: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

/// A dump of a cluster whose first node is still launching plans that node's pods onto it: one
/// more NodeClaim for the fourth pod, not two.
#[test]
fn in_flight_node_claims_in_a_dump_are_not_launched_again() {
    let dir = example_dir("time-slicing-learning-lab")
        .display()
        .to_string();
    let alone = plan_json(&["-f", &dir]);
    assert_eq!(alone["nodeClaims"].as_array().unwrap().len(), 2);

    let dump = fixture("in-flight/cluster-dump.yaml");
    let plan = plan_json(&["-f", &dir, "-f", &dump]);
    let claims = plan["nodeClaims"].as_array().unwrap();
    assert_eq!(claims.len(), 1, "{plan}");
    assert_eq!(claims[0]["pods"].as_array().unwrap().len(), 1, "{plan}");
    let on_in_flight = plan["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["node"] == "ip-10-0-1-23.ec2.internal")
        .count();
    assert_eq!(on_in_flight, 3, "{plan}");
    // Only the new node is paid for.
    assert_eq!(plan["totalPricePerHour"].as_f64(), Some(0.526));
}

/// A NodeClaim being deleted, with no Node, holds nothing: its pods need new nodes.
#[test]
fn a_deleting_node_claim_without_a_node_holds_nothing() {
    let dir = example_dir("time-slicing-learning-lab")
        .display()
        .to_string();
    let text = std::fs::read_to_string(fixture("in-flight/cluster-dump.yaml")).unwrap();
    let doc: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    let mut claim = doc["items"][0].clone();
    claim["metadata"]["deletionTimestamp"] = "2026-12-01T10:02:00Z".into();
    claim["status"].as_object_mut().unwrap().remove("nodeName");
    let path = std::env::temp_dir().join(format!("joiner-deleting-{}.json", std::process::id()));
    std::fs::write(&path, claim.to_string()).unwrap();
    let plan = plan_json(&["-f", &dir, "-f", path.to_str().unwrap()]);
    assert_eq!(plan["nodeClaims"].as_array().unwrap().len(), 2, "{plan}");
    std::fs::remove_file(&path).ok();
}

/// Karpenter's `Gte` and `Lte` (v1.9) bound an integer label, bounds included: a NodePool
/// asking for 4 to 4 GPUs of the g5 family offers exactly the 4-GPU g5 types and plans on one.
#[test]
fn gte_and_lte_requirements_bound_an_integer_label_inclusively() {
    let dir = std::env::temp_dir().join(format!("joiner-e2e-gte-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("cluster.yaml"),
        r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [g5]}
      - {key: karpenter.k8s.aws/instance-gpu-count, operator: Gte, values: ["4"]}
      - {key: karpenter.k8s.aws/instance-gpu-count, operator: Lte, values: ["4"]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: lab}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: lab}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: train}
spec:
  replicas: 1
  selector: {matchLabels: {app: train}}
  template:
    metadata: {labels: {app: train}}
    spec:
      containers:
      - name: c
        resources: {limits: {nvidia.com/gpu: "2"}}
"#,
    )
    .unwrap();
    let path = dir.display().to_string();
    let out = joiner(&["catalog", "-f", &path, "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let catalog: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut types: Vec<&str> = catalog["nodePools"][0]["instanceTypes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    types.sort();
    assert_eq!(types, ["g5.12xlarge", "g5.24xlarge"]);
    let plan = plan_json(&["-f", &path]);
    let claims = plan["nodeClaims"].as_array().unwrap();
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0]["instanceType"], "g5.12xlarge");
    std::fs::remove_dir_all(&dir).ok();
}

/// A NodePool and EC2NodeClass any test can put pods next to.
const GPU_POOL: &str = r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu}
spec:
  limits: {nodes: 2}
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [g5.xlarge]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: lab}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: lab}}]
"#;

/// Writes `files` into a fresh directory named for `test`.
fn scenario(test: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("joiner-e2e-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    dir
}

/// Karpenter's `limits.nodes` (v1.11) caps how many nodes a pool has: five one-GPU pods on
/// one-GPU types get two nodes, and the other three wait naming the limits.
#[test]
fn limits_nodes_caps_the_number_of_nodes_a_pool_launches() {
    let pods = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: infer}
spec:
  replicas: 5
  selector: {matchLabels: {app: infer}}
  template:
    metadata: {labels: {app: infer}}
    spec:
      containers:
      - name: c
        resources: {limits: {nvidia.com/gpu: "1"}}
"#;
    let dir = scenario(
        "limits-nodes",
        &[("pool.yaml", GPU_POOL), ("pods.yaml", pods)],
    );
    let plan = plan_json(&["-f", &dir.display().to_string()]);
    assert_eq!(plan["nodeClaims"].as_array().unwrap().len(), 2, "{plan}");
    let waiting = plan["unschedulable"].as_array().unwrap();
    assert_eq!(waiting.len(), 3, "{plan}");
    assert!(
        waiting[0]
            .to_string()
            .contains("NodePool limits would be exceeded"),
        "{plan}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A dump of a live cluster (`kubectl get deploy,rs,pods -o yaml`) holds a Deployment, its
/// ReplicaSet and its running pod: the pod is planned once, on its node, and nothing new is
/// launched. A label key written twice keeps its last value, with a warning naming the
/// object and key, as `kubectl apply` takes such a file.
#[test]
fn a_live_dump_plans_each_pod_once_and_a_repeated_key_keeps_its_last_value() {
    let dump = r#"apiVersion: v1
kind: List
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: infer, namespace: ml, managedFields: [{manager: kubectl, operation: Update}]}
  spec:
    replicas: 1
    selector: {matchLabels: {app: infer}}
    template:
      metadata: {labels: {app: infer}}
      spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: "1"}}}]}
  status: {replicas: 1, readyReplicas: 1, availableReplicas: 1}
- apiVersion: apps/v1
  kind: ReplicaSet
  metadata:
    name: infer-7c9d
    namespace: ml
    ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: infer, uid: d1, controller: true}]
  spec:
    replicas: 1
    selector: {matchLabels: {app: infer}}
    template:
      metadata: {labels: {app: infer}}
      spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: "1"}}}]}
- apiVersion: v1
  kind: Pod
  metadata:
    name: infer-7c9d-q8x2z
    namespace: ml
    labels: {app: infer}
    ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: infer-7c9d, uid: r1, controller: true}]
  spec:
    nodeName: ip-10-0-1-10.ec2.internal
    containers: [{name: c, resources: {limits: {nvidia.com/gpu: "1"}}}]
  status: {phase: Running}
- apiVersion: v1
  kind: Node
  metadata:
    name: ip-10-0-1-10.ec2.internal
    labels:
      karpenter.sh/nodepool: gpu
      NodePool: gpu-old
      node.kubernetes.io/instance-type: g5.xlarge
      NodePool: gpu
  status:
    capacity: {cpu: "4", memory: 16Gi, pods: "58", nvidia.com/gpu: "1"}
    allocatable: {cpu: 3920m, memory: 15Gi, pods: "58", nvidia.com/gpu: "1"}
"#;
    let dir = scenario("live-dump", &[("pool.yaml", GPU_POOL), ("dump.yaml", dump)]);
    let path = dir.display().to_string();
    let out = joiner(&["plan", "-o", "json", "-f", &path]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["nodeClaims"].as_array().unwrap().len(), 0, "{plan}");
    assert_eq!(plan["unschedulable"].as_array().unwrap().len(), 0, "{plan}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Node/ip-10-0-1-10.ec2.internal: metadata.labels.NodePool is set twice"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Each of Karpenter's 22 `examples/v1` manifests (v1.14.1, kept unchanged with their source
/// in `tests/fixtures/karpenter-examples-v1`) plans a pod onto a node of its own NodePool, and
/// a Windows class's nodes run Windows.
#[test]
fn every_karpenter_v1_example_plans() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/karpenter-examples-v1");
    let pod = scenario(
        "karpenter-examples",
        &[(
            "pod.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec:\n  \
             tolerations: [{operator: Exists}]\n  containers: [{name: c, resources: \
             {requests: {cpu: \"1\", memory: 1Gi}}}]\n",
        )],
    );
    let mut examples: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    examples.sort();
    assert_eq!(examples.len(), 22);
    for example in &examples {
        let text = std::fs::read_to_string(example).unwrap();
        let plan = plan_json(&[
            "-f",
            &example.display().to_string(),
            "-f",
            &pod.display().to_string(),
        ]);
        let name = example.file_name().unwrap().to_string_lossy();
        let claims = plan["nodeClaims"].as_array().unwrap();
        assert_eq!(claims.len(), 1, "{name}: {plan}");
        let pool = claims[0]["nodePool"].as_str().unwrap();
        assert!(text.contains(&format!("name: {pool}\n")), "{name}: {pool}");
        let os = claims[0]["labels"]["kubernetes.io/os"].as_str();
        let windows = name.starts_with("windows");
        assert_eq!(
            os,
            Some(if windows { "windows" } else { "linux" }),
            "{name}"
        );
    }
    std::fs::remove_dir_all(&pod).ok();
}

/// The capacity type is Karpenter's choice: spot wherever the NodePool allows it and the type
/// has a spot offering, even where offline data only bounds the spot price by the on-demand
/// one (the plan says so); on-demand where spot is not allowed.
#[test]
fn spot_is_chosen_where_the_pool_allows_it_as_karpenter_chooses() {
    let pool = |types: &str| {
        GPU_POOL.replace("  limits: {nodes: 2}\n", "").replace(
            "      - {key: node.kubernetes.io/instance-type, operator: In, values: [g5.xlarge]}\n",
            &format!(
                "      - {{key: karpenter.sh/capacity-type, operator: In, values: [{types}]}}\n"
            ),
        )
    };
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, \
               resources: {requests: {cpu: 500m}}}]}\n";
    for (types, want) in [("spot, on-demand", "spot"), ("on-demand", "on-demand")] {
        let dir = scenario(
            "capacity-type",
            &[("pool.yaml", &pool(types)), ("pod.yaml", pod)],
        );
        let plan = plan_json(&["-f", &dir.display().to_string()]);
        let claim = &plan["nodeClaims"][0];
        assert_eq!(claim["capacityType"], want, "{types}: {plan}");
        if want == "spot" {
            assert!(
                claim["priceNote"]
                    .as_str()
                    .is_some_and(|n| n.contains("spot price")),
                "{plan}"
            );
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// Karpenter's GPU-slices NodeOverlay blueprint: with the gate on the four one-slice pods share
/// one node whose GPU the overlay advertises four times; with it off (Karpenter's default) the
/// overlays are named as not applied and each pod needs a GPU of its own.
#[test]
fn the_gpu_slices_overlay_blueprint_plans_onto_one_node() {
    let dir = example_dir("node-overlay-gpu-slices");
    let dir = dir.to_str().expect("a UTF-8 path");
    let values = format!("{dir}/values.yaml");
    let plan = plan_json(&["-f", dir, "--values", &values]);
    let claims = plan["nodeClaims"].as_array().expect("nodeClaims");
    assert_eq!(claims.len(), 1, "{plan:#}");
    assert_eq!(claims[0]["instanceType"], "g5g.xlarge");
    assert_eq!(claims[0]["pods"].as_array().map(Vec::len), Some(4));
    assert_eq!(plan["unschedulable"].as_array().map(Vec::len), Some(0));

    let out = joiner(&["plan", "-f", dir, "-o", "json"]);
    assert!(out.status.success());
    let off: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        off["nodeClaims"].as_array().map(Vec::len),
        Some(4),
        "{off:#}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("4 NodeOverlay(s) not applied: the NodeOverlay feature gate is off"),
        "{stderr}"
    );
}
