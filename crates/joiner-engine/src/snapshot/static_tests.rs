//! Static NodePools through the snapshot and the planner: launched for their count, never for
//! pods' shapes, scaled down in Karpenter's order, behind the StaticCapacity gate.

use super::ClusterSnapshot;

/// A static pool of GPU nodes beside a dynamic pool of CPU nodes.
fn pools(replicas: u32, limits: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: gpu}}
spec:
  replicas: {replicas}
  {limits}
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      requirements:
      - {{key: node.kubernetes.io/instance-type, operator: In, values: [g5.xlarge, g5.2xlarge, g6.xlarge]}}
      - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: cpu}}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      requirements:
      - {{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, m5.xlarge]}}
      - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: default}}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{{alias: al2023@latest}}]
"#
    )
}

fn pod(name: &str, requests: &str, node: Option<&str>) -> String {
    let bound = node.map_or(String::new(), |n| format!("  nodeName: {n}\n"));
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n{bound}  containers: [{{name: c, resources: {{requests: {requests}}}}}]\n"
    )
}

/// A NodeClaim of the gpu pool: `launched` gives it an instance and a Node of its own name.
fn claim(name: &str, launched: bool, deleting: bool) -> String {
    let deletion = if deleting {
        "\n  deletionTimestamp: \"2026-12-01T00:00:00Z\"\n  finalizers: [karpenter.sh/termination]"
    } else {
        ""
    };
    let mut out = format!(
        "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata:\n  name: {name}\n  labels: {{karpenter.sh/nodepool: gpu, node.kubernetes.io/instance-type: g5.xlarge, karpenter.sh/capacity-type: on-demand, topology.kubernetes.io/zone: us-east-1a}}{deletion}\nspec:\n  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n  requirements: []\n"
    );
    if launched {
        out.push_str(&format!(
            "status:\n  providerID: aws:///us-east-1a/i-{name}\n  nodeName: {name}\n  conditions:\n  - {{type: Initialized, status: \"True\", lastTransitionTime: \"2026-12-01T00:00:00Z\", reason: Initialized, message: \"\"}}\n---\napiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels: {{karpenter.sh/nodepool: gpu, karpenter.sh/nodeclaim: {name}, node.kubernetes.io/instance-type: g5.xlarge, karpenter.sh/capacity-type: on-demand, topology.kubernetes.io/zone: us-east-1a, karpenter.sh/initialized: \"true\", karpenter.sh/registered: \"true\"}}\nspec:\n  providerID: aws:///us-east-1a/i-{name}\nstatus:\n  capacity: {{cpu: \"4\", memory: 16Gi, pods: \"58\", nvidia.com/gpu: \"1\"}}\n  allocatable: {{cpu: 3920m, memory: 15Gi, pods: \"58\", nvidia.com/gpu: \"1\"}}\n"
        ));
    }
    out
}

fn snapshot(docs: &[&str], gate: bool) -> ClusterSnapshot {
    super::overlay_tests::with_gate(docs, "staticCapacity", gate)
}

#[test]
fn a_static_pool_of_three_launches_three_whatever_the_pods_need() {
    let pools = pools(3, "");
    // A pod too big for any GPU type the pool allows, and one that fits on a GPU node.
    let big = pod("big", "{cpu: \"30\"}", None);
    let small = pod("small", "{cpu: 500m, nvidia.com/gpu: \"1\"}", None);
    let plan = snapshot(&[&pools, &big, &small], true).plan();
    let statics: Vec<_> = plan.node_claims.iter().filter(|c| c.is_static).collect();
    assert_eq!(
        statics.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        ["gpu-static-0", "gpu-static-1", "gpu-static-2"]
    );
    // Each is the cheapest type the pool allows, chosen without the pods.
    let cheapest = statics[0].instance_type.clone();
    assert!(statics.iter().all(|c| c.instance_type == cheapest));
    assert!(statics.iter().all(|c| c.node_pool == "gpu"));
    // The GPU pod waits for one of them; nothing else is launched in the static pool, and the
    // big pod gets nothing from it (the dynamic pool cannot hold it either).
    let placed: Vec<&str> = statics
        .iter()
        .flat_map(|c| c.pods.iter().map(String::as_str))
        .collect();
    assert_eq!(placed, ["default/small"]);
    assert!(
        plan.node_claims
            .iter()
            .filter(|c| !c.is_static)
            .all(|c| c.node_pool == "cpu"),
        "{:?}",
        plan.node_claims
    );
    assert!(plan.unschedulable.iter().any(|u| u.pod == "default/big"));
    // The price counts every node launched.
    let total: f64 = plan
        .node_claims
        .iter()
        .map(|c| c.price_per_hour.as_usd())
        .sum();
    assert!((plan.total_price_per_hour.as_usd() - total).abs() < 1e-9);
    // `-o json` says which are static.
    let json = serde_json::to_value(&plan).unwrap();
    assert_eq!(json["nodeClaims"][0]["static"], true);
}

#[test]
fn pods_that_fit_a_static_pool_still_launch_nothing_there_once_it_is_full() {
    // Two static nodes already run; the GPU pods fill them and the third pod waits: a static
    // pool never grows for pods, and the dynamic pool has no GPUs.
    let docs = [
        pools(2, ""),
        claim("a", true, false),
        claim("b", true, false),
        pod("p1", "{nvidia.com/gpu: \"1\"}", None),
        pod("p2", "{nvidia.com/gpu: \"1\"}", None),
        pod("p3", "{nvidia.com/gpu: \"1\"}", None),
    ];
    let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
    let s = snapshot(&refs, true);
    let plan = s.plan();
    assert!(plan.node_claims.is_empty(), "{:?}", plan.node_claims);
    assert_eq!(plan.bindings.len(), 2);
    assert_eq!(plan.unschedulable.len(), 1);
    // Consolidation never takes a static pool's nodes.
    assert!(s.machines().iter().all(|m| !m.consolidation_candidate));
}

#[test]
fn the_gate_off_launches_nothing_and_says_so() {
    let pools = pools(3, "");
    let small = pod("small", "{nvidia.com/gpu: \"1\"}", None);
    let s = snapshot(&[&pools, &small], false);
    let plan = s.plan();
    assert!(plan.node_claims.is_empty(), "{:?}", plan.node_claims);
    assert!(
        s.warnings().iter().any(|w| w.contains("NodePool/gpu")
            && w.contains("StaticCapacity feature gate is off")),
        "{:?}",
        s.warnings()
    );
    assert_eq!(
        s.static_pools()[0].idle.as_deref(),
        Some("the StaticCapacity feature gate is off")
    );
}

#[test]
fn existing_node_claims_count_and_slots_skip_the_names_taken() {
    // Slot 0 runs, a NodeClaim Karpenter named runs, and one is deleting: two are active, so
    // one more launches, under the first free slot.
    let docs = [
        pools(3, ""),
        claim("gpu-static-0", true, false),
        claim("gpu-x7k2p", true, false),
        claim("gpu-static-1", false, true),
    ];
    let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
    let s = snapshot(&refs, true);
    let pool = &s.static_pools()[0];
    assert_eq!(
        (pool.counts.active, pool.counts.deleting),
        (2, 1),
        "{pool:?}"
    );
    assert_eq!(pool.launch, ["gpu-static-2"]);
    // `limits.nodes` counts every NodeClaim of the pool, the deleting one too.
    let mut limited = vec![pools(3, "limits: {nodes: \"3\"}")];
    limited.extend(docs[1..].iter().cloned());
    let refs: Vec<&str> = limited.iter().map(String::as_str).collect();
    let s = snapshot(&refs, true);
    assert!(s.static_pools()[0].launch.is_empty());
    assert!(
        s.warnings().iter().any(|w| w.contains("spec.limits.nodes")),
        "{:?}",
        s.warnings()
    );
}

#[test]
fn a_pool_scaled_down_removes_unlaunched_then_empty_then_cheapest_to_evict() {
    let held = "apiVersion: v1\nkind: Pod\nmetadata: {name: held, namespace: default, annotations: {karpenter.sh/do-not-disrupt: \"true\"}}\nspec:\n  nodeName: d\n  containers: [{name: c, resources: {requests: {cpu: 100m}}}]\n";
    let docs = [
        pools(1, ""),
        claim("a", true, false),
        claim("b", true, false),
        claim("c", false, false),
        claim("d", true, false),
        pod("busy1", "{cpu: 100m}", Some("a")),
        pod("busy2", "{cpu: 100m}", Some("a")),
        held.to_string(),
    ];
    let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
    let s = snapshot(&refs, true);
    let pool = &s.static_pools()[0];
    assert!(pool.launch.is_empty());
    // Four active for one replica: the unlaunched c, the empty b, then a (two pods); d, which
    // runs a do-not-disrupt pod, stays.
    assert_eq!(pool.remove, ["c", "b", "a"]);
    assert!(
        s.warnings()
            .iter()
            .any(|w| w
                == "NodePool/gpu: 4 NodeClaims run for 1 replicas; scaling down removes c, b, a"),
        "{:?}",
        s.warnings()
    );
    // With the gate off nothing is removed.
    let off = snapshot(&refs, false);
    assert!(off.static_pools()[0].remove.is_empty());
}
