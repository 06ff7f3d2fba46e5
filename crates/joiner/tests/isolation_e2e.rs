//! End-to-end: an object whose reference leads nowhere holds back only itself. The built
//! `joiner` binary on files, as a user runs it: the rest is planned as without the object, the
//! object's pod is listed with its reason in every output, and `joiner explain` gives it.

use std::process::{Command, Output};

use joiner_test_support::{Scratch, example_dir};

fn joiner(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(args)
        .output()
        .expect("the joiner binary runs")
}

/// Runs `joiner`, which must exit 0, and returns its standard output and error.
fn ok(args: &[&str]) -> (String, String) {
    let out = joiner(args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "joiner {args:?} failed: {stderr}");
    (String::from_utf8_lossy(&out.stdout).to_string(), stderr)
}

fn plan_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["plan", "-o", "json"];
    all.extend_from_slice(args);
    serde_json::from_str(&ok(&all).0).expect("plan output is JSON")
}

/// A pod that asks for a GPU through a ResourceClaim nobody has created yet.
const WAITS_FOR_CLAIM: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: waits-for-claim, namespace: default}
spec:
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  resourceClaims:
  - {name: gpu, resourceClaimName: not-created-yet}
  containers:
  - name: train
    resources: {requests: {cpu: "1", memory: 1Gi}}
"#;

const REASON: &str = r#"could not find ResourceClaim "default/not-created-yet" (spec.resourceClaims[0].resourceClaimName)"#;

#[test]
fn the_learning_lab_with_a_pod_whose_claim_is_missing_plans_as_without_it() {
    let lab = example_dir("time-slicing-learning-lab")
        .display()
        .to_string();
    let scratch = Scratch::new("isolation-claim");
    let pod = scratch
        .write("pod.yaml", WAITS_FOR_CLAIM)
        .display()
        .to_string();
    let dra = ["--set", "settings.enableDRA=true"];

    let mut args = vec!["-f", lab.as_str()];
    args.extend(dra);
    let without = plan_json(&args);
    args.extend(["-f", pod.as_str()]);
    let with = plan_json(&args);

    assert_eq!(without["nodeClaims"].as_array().map(Vec::len), Some(2));
    assert_eq!(with["nodeClaims"], without["nodeClaims"]);
    assert_eq!(with["bindings"], without["bindings"]);
    assert_eq!(with["totalPricePerHour"], without["totalPricePerHour"]);
    let unschedulable = with["unschedulable"].as_array().expect("a list");
    assert_eq!(unschedulable.len(), 1, "{unschedulable:?}");
    assert_eq!(unschedulable[0]["pod"], "default/waits-for-claim");
    let reason = unschedulable[0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains(REASON), "{reason}");

    // The table and the wide table list the pod with the same reason.
    for format in ["table", "wide"] {
        let mut args = vec!["plan", "-o", format, "-f", lab.as_str(), "-f", pod.as_str()];
        args.extend(dra);
        let (table, _) = ok(&args);
        let line = format!("default/waits-for-claim: {reason}");
        assert!(table.contains(&line), "{format}: {table}");
        assert!(
            table.contains("2 new node(s), 4 pod(s) placed, 1 unschedulable"),
            "{table}"
        );
    }

    let mut args = vec![
        "explain",
        "pod",
        "default/waits-for-claim",
        "-f",
        &lab,
        "-f",
        &pod,
    ];
    args.extend(dra);
    let (explained, _) = ok(&args);
    assert!(explained.contains("unschedulable"), "{explained}");
    assert!(explained.contains(REASON), "{explained}");
}

/// A CPU NodePool with its EC2NodeClass, and a GPU NodePool whose EC2NodeClass was never made.
const POOLS: &str = r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: cpu}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m7i]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu-class}
      taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: c
        resources: {requests: {cpu: "1", memory: 2Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: default}
spec:
  tolerations: [{key: nvidia.com/gpu, operator: Exists}]
  containers:
  - name: c
    resources: {limits: {nvidia.com/gpu: "1"}}
"#;

#[test]
fn a_node_pool_without_its_node_class_launches_nothing_beside_a_good_one() {
    let scratch = Scratch::new("isolation-pool");
    let file = scratch.write("cluster.yaml", POOLS).display().to_string();
    let (json, stderr) = ok(&["plan", "-o", "json", "-f", &file]);
    assert!(
        stderr.contains(
            r#"NodePool/gpu: spec.template.spec.nodeClassRef: EC2NodeClass "gpu-class" not found"#
        ),
        "{stderr}"
    );
    let plan: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let claims = plan["nodeClaims"].as_array().expect("a list");
    assert!(!claims.is_empty());
    assert!(claims.iter().all(|c| c["nodePool"] == "cpu"), "{claims:?}");
    let placed: Vec<&str> = plan["bindings"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|b| b["pod"].as_str())
        .collect();
    assert_eq!(placed, ["default/web-0", "default/web-1"]);
    let unschedulable = plan["unschedulable"].as_array().expect("a list");
    assert_eq!(unschedulable.len(), 1);
    assert_eq!(unschedulable[0]["pod"], "default/trainer");
    let reason = unschedulable[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(r#"NodePool gpu launches nothing: EC2NodeClass "gpu-class" not found"#),
        "{reason}"
    );

    let (table, _) = ok(&["plan", "-f", &file]);
    assert!(
        table.contains(&format!("default/trainer: {reason}")),
        "{table}"
    );
    let (explained, _) = ok(&["explain", "pod", "default/trainer", "-f", &file]);
    assert!(
        explained.contains(r#"NodePool gpu: launches nothing: EC2NodeClass "gpu-class" not found"#),
        "{explained}"
    );
}
