use joiner_model::settings::Settings;
use joiner_model::{Manifests, parse_documents};

use super::*;
use crate::snapshot::{ClusterSnapshot, Options};

const POOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5, g6]}
  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
"#;

/// A node of the default pool: instance type, allocatable, extra labels.
fn node(name: &str, it: &str, cpu: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels: {{karpenter.sh/nodepool: default, karpenter.sh/initialized: \"true\", node.kubernetes.io/instance-type: {it}, karpenter.sh/capacity-type: on-demand, topology.kubernetes.io/zone: us-east-1a, kubernetes.io/arch: amd64, kubernetes.io/os: linux, kubernetes.io/hostname: {name}{extra}}}\nstatus: {{allocatable: {{cpu: \"{cpu}\", memory: 60Gi, pods: \"50\"}}}}\n"
    )
}

fn pod(name: &str, node: &str, cpu: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  nodeName: {node}\n  containers: [{{name: c, resources: {{requests: {{cpu: {cpu}}}}}}}]\n"
    )
}

fn decide(docs: &[&str], dra: bool) -> Vec<Decision> {
    decide_with(docs, serde_json::json!({"settings": {"enableDRA": dra}}))
}

fn decide_with(docs: &[&str], values: serde_json::Value) -> Vec<Decision> {
    snapshot(docs, values).consolidate()
}

fn snapshot(docs: &[&str], values: serde_json::Value) -> ClusterSnapshot {
    let mut m = Manifests::default();
    for (i, text) in docs.iter().enumerate() {
        for (origin, doc) in parse_documents(&format!("doc{i}.yaml"), text).unwrap() {
            m.add_document(origin, doc).unwrap();
        }
    }
    m.finish();
    let (settings, _) = Settings::from_values(&values).unwrap();
    ClusterSnapshot::build(&m, &settings, &Options::default()).unwrap()
}

#[test]
fn empty_nodes_are_deleted() {
    let (a, b) = (
        node("a", "m5.xlarge", "3", ""),
        node("b", "m5.xlarge", "3", ""),
    );
    let p = pod("web", "a", "1");
    let d = decide(&[POOL, &a, &b, &p], false);
    assert_eq!(d[0].reason, DisruptionReason::Empty);
    assert_eq!(d[0].nodes, vec!["b"]);
    assert_eq!(d[0].savings_per_hour, Price::from_usd(0.192).unwrap());
}

#[test]
fn pods_that_fit_elsewhere_free_their_node() {
    let (a, b) = (
        node("a", "m5.2xlarge", "7", ""),
        node("b", "m5.2xlarge", "7", ""),
    );
    let (p, q) = (pod("one", "a", "2"), pod("two", "b", "2"));
    let d = decide(&[POOL, &a, &b, &p, &q], false);
    // Replacing both by one m5.2xlarge saves as much as deleting one: the gentler move wins.
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].reason, DisruptionReason::Underutilized);
    assert_eq!(d[0].nodes.len(), 1);
    assert!(d[0].replacements.is_empty());
    assert_eq!(d[0].savings_per_hour, Price::from_usd(0.384).unwrap());
}

#[test]
fn a_large_node_is_replaced_by_a_cheaper_one() {
    let big = node("big", "m5.4xlarge", "15", "");
    let p = pod("small", "big", "500m");
    let d = decide(&[POOL, &big, &p], false);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].replacements.len(), 1);
    assert_eq!(d[0].replacements[0].instance_type, "m5.large");
    assert_eq!(
        d[0].savings_per_hour,
        Price::from_usd(0.768 - 0.096).unwrap()
    );
}

#[test]
fn do_not_disrupt_pods_and_nodes_are_left_alone() {
    let big = node("big", "m5.4xlarge", "15", "");
    let p = "apiVersion: v1\nkind: Pod\nmetadata: {name: pinned, namespace: default, annotations: {karpenter.sh/do-not-disrupt: \"true\"}}\nspec:\n  nodeName: big\n  containers: [{name: c, resources: {requests: {cpu: 500m}}}]\n";
    assert!(decide(&[POOL, &big, p], false).is_empty());
    let annotated = big.replace(
        "metadata:\n  name: big\n",
        "metadata:\n  name: big\n  annotations: {karpenter.sh/do-not-disrupt: \"true\"}\n",
    );
    let q = pod("small", "big", "500m");
    assert!(decide(&[POOL, &annotated, &q], false).is_empty());
}

#[test]
fn when_empty_pools_only_delete_empty_nodes() {
    let pool = POOL.replace(
        "consolidationPolicy: WhenEmptyOrUnderutilized",
        "consolidationPolicy: WhenEmpty",
    );
    let big = node("big", "m5.4xlarge", "15", "");
    let p = pod("small", "big", "500m");
    assert!(decide(&[&pool, &big, &p], false).is_empty());
}

#[test]
fn a_node_that_is_cheapest_already_stays() {
    let small = node("small-node", "m5.large", "1930m", "");
    let p = pod("busy", "small-node", "1500m");
    assert!(decide(&[POOL, &small, &p], false).is_empty());
}

/// One g6.12xlarge (4 L4s) serving eight claims that each take a quarter of a GPU becomes two
/// g6.xlarge: their claims are allocated again on the replacements.
#[test]
fn one_large_gpu_node_splits_into_two_small_ones() {
    let class = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata:\n  name: default\n  annotations: {karpenter.k8s.aws/nvidia-consumable-capacity: \"4\"}\nspec:\n  role: KarpenterNodeRole\n  amiSelectorTerms: [{alias: al2023@latest}]\n";
    let pool = POOL.split("---").next().unwrap().to_string();
    // A node Joiner launched and that is not initialized yet is judged by its templates.
    let big =
        node("big", "g6.12xlarge", "47", "").replace("karpenter.sh/initialized: \"true\", ", "");
    let template = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: quarter, namespace: default}\nspec:\n  spec:\n    devices:\n      requests:\n      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}\n";
    let mut docs: Vec<String> = vec![pool, class.to_string(), big, template.to_string()];
    for i in 0..8 {
        let gpu = i / 4;
        docs.push(format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, namespace: default}}\nspec:\n  nodeName: big\n  resourceClaims: [{{name: gpu, resourceClaimTemplateName: quarter}}]\n  containers: [{{name: c, resources: {{requests: {{cpu: 100m}}, claims: [{{name: gpu}}]}}}}]\n"));
        docs.push(format!("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: p{i}-gpu, namespace: default}}\nspec:\n  devices:\n    requests:\n    - {{name: gpu, exactly: {{deviceClassName: gpu.nvidia.com}}}}\nstatus:\n  allocation:\n    devices:\n      results: [{{request: gpu, driver: gpu.nvidia.com, pool: big, device: gpu-{gpu}, consumedCapacity: {{shares: \"1\"}}, shareID: \"00000000-0000-0000-0000-00000000000{i}\"}}]\n  reservedFor: [{{resource: pods, name: p{i}, uid: \"{i}\"}}]\n"));
    }
    let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
    let d = decide(&refs, true);
    assert_eq!(d.len(), 1, "{d:?}");
    let types: Vec<&str> = d[0]
        .replacements
        .iter()
        .map(|c| c.instance_type.as_str())
        .collect();
    assert_eq!(types, vec!["g6.xlarge", "g6.xlarge"]);
    assert!(d[0].savings_per_hour > Price::ZERO);
}

#[test]
fn several_nodes_are_merged_when_that_saves_most() {
    let nodes: Vec<String> = (0..3)
        .map(|i| node(&format!("n{i}"), "m5.xlarge", "3920m", ""))
        .collect();
    let pods: Vec<String> = (0..3)
        .map(|i| pod(&format!("p{i}"), &format!("n{i}"), "1"))
        .collect();
    let mut docs = vec![POOL];
    docs.extend(nodes.iter().map(String::as_str));
    docs.extend(pods.iter().map(String::as_str));
    let d = decide(&docs, false);
    // Three 1-CPU pods fit on one of the three nodes: two can go.
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].nodes.len(), 2, "{d:?}");
    assert!(d[0].replacements.is_empty());
}

fn input_of(docs: &[&str]) -> SchedulingInput {
    let mut m = Manifests::default();
    for (i, text) in docs.iter().enumerate() {
        for (origin, doc) in parse_documents(&format!("doc{i}.yaml"), text).unwrap() {
            m.add_document(origin, doc).unwrap();
        }
    }
    m.finish();
    ClusterSnapshot::build(&m, &Settings::default(), &Options::default())
        .unwrap()
        .input()
        .clone()
}

/// Expiry, drift and interruption replace a node even when the replacement costs as much: the
/// pods of the only node get a new node of their own, and pending pods are not planned here.
#[test]
fn replacements_need_no_saving_and_leave_pending_pods_to_provisioning() {
    let small = node("small-node", "m5.large", "1930m", "");
    let busy = pod("busy", "small-node", "1500m");
    let pending = pod("waiting", "small-node", "1").replace("  nodeName: small-node\n", "");
    let input = input_of(&[POOL, &small, &busy, &pending]);
    // Consolidation sees no saving here.
    assert!(consolidate(&input, &FeatureGates::default()).is_empty());
    let r = replacements(&input, &["small-node".to_string()]);
    assert!(r.complete(), "{r:?}");
    assert_eq!(r.node_claims.len(), 1);
    assert_eq!(r.node_claims[0].pods, vec!["default/busy"]);
    assert_eq!(r.node_claims[0].instance_type, "m5.large");
}

/// Pods that fit on the nodes that stay (an in-flight replacement, say) need no new node: asking
/// twice for the same node after the first answer was launched asks for nothing more.
#[test]
fn pods_that_fit_on_remaining_nodes_need_no_replacement() {
    let old = node("old", "m5.xlarge", "3", "");
    let spare = node("spare", "m5.xlarge", "3", "");
    let p = pod("web", "old", "2");
    let r = replacements(&input_of(&[POOL, &old, &spare, &p]), &["old".to_string()]);
    assert!(r.complete());
    assert!(r.node_claims.is_empty(), "{r:?}");
    assert_eq!(r.bindings.len(), 1);
    assert_eq!(
        (r.bindings[0].pod.as_str(), r.bindings[0].node.as_str()),
        ("default/web", "spare")
    );
}

#[test]
fn pods_that_fit_nowhere_are_reported() {
    let pool = POOL.replace("values: [m5, g6]", "values: [m5]");
    let old = node("old", "m5.xlarge", "3", "");
    let gpu = "apiVersion: v1\nkind: Pod\nmetadata: {name: trainer, namespace: default}\nspec:\n  nodeName: old\n  containers: [{name: c, resources: {requests: {cpu: 100m}, limits: {nvidia.com/gpu: \"1\"}}}]\n";
    let r = replacements(&input_of(&[&pool, &old, gpu]), &["old".to_string()]);
    assert!(!r.complete());
    assert_eq!(r.unschedulable[0].pod, "default/trainer");
    assert!(r.node_claims.is_empty());
}

/// A GPU node whose GPU pods are gone while CPU-only pods remain: a CPU NodePool offers a far
/// cheaper node, so the GPU node is replaced by a CPU one and its pods move there.
#[test]
fn cpu_pods_left_on_a_gpu_node_move_to_a_cheaper_cpu_node() {
    let pools = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [g6]}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: cpu}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
"#;
    let gpu_node = node(
        "gpu-node",
        "g6.2xlarge",
        "7",
        ", nvidia.com/gpu.count: \"1\"",
    )
    .replace(
        "karpenter.sh/nodepool: default",
        "karpenter.sh/nodepool: gpu",
    )
    .replace("pods: \"50\"", "pods: \"50\", nvidia.com/gpu: \"1\"");
    let (a, b) = (
        pod("api", "gpu-node", "500m"),
        pod("cron", "gpu-node", "250m"),
    );
    let d = decide(&[pools, &gpu_node, &a, &b], false);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].reason, DisruptionReason::Underutilized);
    assert_eq!(d[0].nodes, vec!["gpu-node"]);
    assert_eq!(d[0].replacements.len(), 1);
    let r = &d[0].replacements[0];
    assert_eq!(r.node_pool, "cpu");
    assert!(r.instance_type.starts_with("m5."), "{}", r.instance_type);
    let mut moved = r.pods.clone();
    moved.sort();
    assert_eq!(moved, vec!["default/api", "default/cron"]);
    assert!(d[0].savings_per_hour > Price::from_usd(0.5).unwrap());
}

/// [`POOL`] allowing spot, across enough families for a spot node to have many cheaper spot
/// replacements.
fn spot_pool() -> String {
    POOL.replace(
        "      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5, g6]}\n",
        "      - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}\n      \
         - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}\n      \
         - {key: kubernetes.io/arch, operator: In, values: [amd64]}\n",
    )
}

/// Karpenter's SpotToSpotConsolidation gate (off by default): a spot node whose pods would fit
/// a cheaper spot node is left as it is while the gate is off, and replaced with it on; an
/// on-demand node in the same place is replaced either way.
#[test]
fn spot_nodes_are_replaced_by_spot_nodes_only_under_the_gate() {
    let docs = |capacity: &str| {
        let big = node("big", "m5.8xlarge", "31", "").replace(
            "karpenter.sh/capacity-type: on-demand",
            &format!("karpenter.sh/capacity-type: {capacity}"),
        );
        let p = pod("small", "big", "1");
        [spot_pool(), big, p]
    };
    let off = serde_json::json!({});
    let on = serde_json::json!({"settings": {"featureGates": {"spotToSpotConsolidation": true}}});
    let spot = docs("spot");
    let spot: Vec<&str> = spot.iter().map(String::as_str).collect();
    assert!(decide_with(&spot, off.clone()).is_empty());
    let d = decide_with(&spot, on);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].replacements[0].capacity_type, "spot", "{d:?}");
    let on_demand = docs("on-demand");
    let on_demand: Vec<&str> = on_demand.iter().map(String::as_str).collect();
    assert_eq!(decide_with(&on_demand, off).len(), 1);
}

/// A `do-not-disrupt` duration (Karpenter v1.12) holds the pod's node for that long after the
/// pod started, and no longer; on a node, a duration holds nothing.
#[test]
fn a_do_not_disrupt_duration_holds_the_node_until_it_runs_out() {
    let big = node("big", "m5.4xlarge", "15", "");
    let p = "apiVersion: v1\nkind: Pod\nmetadata: {name: warm, namespace: default, annotations: {karpenter.sh/do-not-disrupt: 30m}}\nspec:\n  nodeName: big\n  containers: [{name: c, resources: {requests: {cpu: 500m}}}]\nstatus: {phase: Running, startTime: \"2026-12-05T10:00:00Z\"}\n";
    let mut m = Manifests::default();
    for (i, text) in [POOL, &big, p].iter().enumerate() {
        for (origin, doc) in parse_documents(&format!("doc{i}.yaml"), text).unwrap() {
            m.add_document(origin, doc).unwrap();
        }
    }
    m.finish();
    let settings = Settings::default();
    let options = Options::default();
    let at = |t: &str| {
        ClusterSnapshot::builder(&m, &settings, &options)
            .at(t.parse().unwrap())
            .build()
            .unwrap()
            .consolidate()
    };
    assert!(at("2026-12-05T10:29:00Z").is_empty());
    assert_eq!(at("2026-12-05T10:30:00Z").len(), 1);
    let marked = big.replace(
        "metadata:\n  name: big\n",
        "metadata:\n  name: big\n  annotations: {karpenter.sh/do-not-disrupt: 30m}\n",
    );
    let q = pod("small", "big", "500m");
    assert_eq!(decide(&[POOL, &marked, &q], false).len(), 1);
}

/// Karpenter's Balanced policy (v1.14) takes a move only where its saving is worth its
/// disruption. Moving twenty pods off `big` saves 0.672 USD/h of a pool costing 2.304 USD/h
/// (29%) while causing 21 of the pool's 23 units of disruption (91%): a score of 0.32, under
/// the 0.5 Balanced needs, so only WhenEmptyOrUnderutilized makes the move. With one pod to
/// move, deleting `big` saves 0.768 (33%) for 2 units of 4 (50%): 0.67, and it is made.
#[test]
fn balanced_consolidation_weighs_the_saving_against_the_disruption() {
    let big = node("big", "m5.4xlarge", "15", "");
    let other = node("other", "m5.8xlarge", "31", "");
    let mut docs = vec![big, other, pod("huge", "other", "30")];
    docs.extend((0..20).map(|i| pod(&format!("p{i}"), "big", "100m")));
    let with = |policy: &str, docs: &[String]| {
        let pool = POOL.replace(
            "consolidationPolicy: WhenEmptyOrUnderutilized",
            &format!("consolidationPolicy: {policy}"),
        );
        let all: Vec<&str> = std::iter::once(pool.as_str())
            .chain(docs.iter().map(String::as_str))
            .collect();
        decide(&all, false)
    };
    let d = with("WhenEmptyOrUnderutilized", &docs);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].nodes, ["big"]);
    assert!(with("Balanced", &docs).is_empty());
    let d = with("Balanced", &docs[..4]);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].nodes, ["big"]);

    // The verdicts Karpenter's metrics count: the rejected move with its score, and each kind
    // of move timed in order.
    let pool = POOL.replace(
        "consolidationPolicy: WhenEmptyOrUnderutilized",
        "consolidationPolicy: Balanced",
    );
    let all: Vec<&str> = std::iter::once(pool.as_str())
        .chain(docs.iter().map(String::as_str))
        .collect();
    let mut laps = Vec::new();
    let (decisions, weighed) =
        snapshot(&all, serde_json::json!({})).consolidate_weighed(&mut |kind| laps.push(kind));
    assert!(decisions.is_empty());
    assert_eq!(
        laps,
        [
            ConsolidationType::Empty,
            ConsolidationType::Multi,
            ConsolidationType::Single
        ]
    );
    assert_eq!(weighed.len(), 1, "{weighed:?}");
    let v = &weighed[0];
    assert_eq!((v.policy, v.approved), ("Balanced", false));
    let (score, approved) = v.score.expect("a Balanced pool is scored");
    assert!(!approved && (0.31..0.33).contains(&score), "{score}");
}

/// A pod whose persistent volume lives in one zone only moves to nodes in that zone: the node
/// consolidated away is always the one whose pods can leave it.
#[test]
fn pods_with_zonal_volumes_only_move_within_their_zone() {
    let volume = |pod: &str, zone: &str| {
        format!(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {pod}, namespace: default}}\nspec: {{volumeName: pv-{pod}, storageClassName: gp3}}\nstatus: {{phase: Bound}}\n---\napiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: pv-{pod}}}\nspec:\n  csi: {{driver: ebs.csi.aws.com, volumeHandle: vol-{pod}}}\n  nodeAffinity:\n    required:\n      nodeSelectorTerms:\n      - matchExpressions:\n        - {{key: topology.ebs.csi.aws.com/zone, operator: In, values: [{zone}]}}\n"
        )
    };
    let with_volume = |name: &str, node: &str| {
        pod(name, node, "2").replace(
            "  containers:",
            &format!("  volumes: [{{name: data, persistentVolumeClaim: {{claimName: {name}}}}}]\n  containers:"),
        )
    };
    let a = node("a", "m5.2xlarge", "7", "");
    let b = node("b", "m5.2xlarge", "7", "").replace("us-east-1a", "us-east-1b");
    // (pinned pod, its node, the volume's zone, the other node)
    for (pinned, at, zone, other) in [
        ("two", "b", "us-east-1b", "a"),
        ("one", "a", "us-east-1a", "b"),
    ] {
        let one = if pinned == "one" {
            with_volume("one", "a")
        } else {
            pod("one", "a", "2")
        };
        let two = if pinned == "two" {
            with_volume("two", "b")
        } else {
            pod("two", "b", "2")
        };
        let d = decide(&[POOL, &a, &b, &one, &two, &volume(pinned, zone)], false);
        // Two half-empty nodes: consolidation happens, and the pinned pod stays in its zone:
        // on its node, on a replacement there, or on the other node only were that there.
        assert_eq!(d.len(), 1, "{d:?}");
        let key = format!("default/{pinned}");
        let moved = d[0].nodes.iter().any(|n| n == at);
        let to_replacement = d[0].replacements.iter().find(|r| r.pods.contains(&key));
        match to_replacement {
            Some(r) => assert_eq!(r.zone, zone, "{d:?}"),
            None => assert!(
                !moved,
                "{pinned} moved to node {other}, in another zone: {d:?}"
            ),
        }
    }
    // The other way round is what happens without a volume: node a's pod goes to b.
    let d = decide(
        &[POOL, &a, &b, &pod("one", "a", "2"), &pod("two", "b", "2")],
        false,
    );
    assert!(
        d[0].replacements.is_empty() && d[0].nodes.len() == 1,
        "{d:?}"
    );
}

/// Node `name`'s ResourceSlice: one GPU of the NVIDIA DRA driver.
fn gpu_slice(name: &str) -> String {
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {name}-gpu}}\nspec:\n  driver: gpu.nvidia.com\n  nodeName: {name}\n  pool: {{name: {name}, generation: 1, resourceSliceCount: 1}}\n  devices:\n  - name: gpu-0\n    attributes: {{type: {{string: gpu}}}}\n    capacity: {{memory: {{value: 22Gi}}}}\n"
    )
}

/// A pod on `node` whose claim holds the node's GPU.
fn gpu_pod(name: &str, node: &str) -> [String; 2] {
    [
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default, uid: {name}}}\nspec:\n  nodeName: {node}\n  resourceClaims: [{{name: gpu, resourceClaimName: {name}-gpu}}]\n  containers: [{{name: c, resources: {{requests: {{cpu: 100m}}, claims: [{{name: gpu}}]}}}}]\n"
        ),
        format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: {name}-gpu, namespace: default}}\nspec:\n  devices:\n    requests:\n    - {{name: gpu, exactly: {{deviceClassName: gpu.nvidia.com}}}}\nstatus:\n  allocation:\n    devices:\n      results: [{{request: gpu, driver: gpu.nvidia.com, pool: {node}, device: gpu-0}}]\n  reservedFor: [{{resource: pods, name: {name}, uid: {name}}}]\n"
        ),
    ]
}

/// A pod holding the GPU of a dear node moves to the free GPU of a cheaper one, and the dear
/// node goes; once a DeviceTaintRule taints the free GPU `NoExecute`, that GPU serves nothing
/// the pod does not tolerate, so the dear node is no longer simply deleted.
#[test]
fn a_gpu_tainted_no_execute_takes_no_pods_from_a_node_being_consolidated() {
    let pool = POOL.split("---").next().unwrap().to_string();
    let class = POOL.split("---").nth(1).unwrap().to_string();
    let dear = node("dear", "g6.2xlarge", "7", "");
    let cheap = node("cheap", "g6.xlarge", "3", "");
    let [p, claim] = gpu_pod("inference", "dear");
    let other = pod("web", "cheap", "100m");
    let base: Vec<String> = vec![
        pool,
        class,
        dear,
        cheap,
        gpu_slice("dear"),
        gpu_slice("cheap"),
        p,
        claim,
        other,
    ];
    let refs: Vec<&str> = base.iter().map(String::as_str).collect();
    let d = decide(&refs, true);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].nodes, vec!["dear"], "{d:?}");
    assert!(d[0].replacements.is_empty(), "{d:?}");

    let rule = "apiVersion: resource.k8s.io/v1\nkind: DeviceTaintRule\nmetadata: {name: drain-cheap}\nspec:\n  deviceSelector: {driver: gpu.nvidia.com, pool: cheap}\n  taint: {key: maintenance, value: gpu, effect: NoExecute}\n";
    let mut tainted = refs.clone();
    tainted.push(rule);
    let d = decide(&tainted, true);
    assert!(
        d.iter()
            .all(|d| !(d.nodes.contains(&"dear".to_string()) && d.replacements.is_empty())),
        "{d:?}"
    );
}
