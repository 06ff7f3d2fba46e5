//! The state gauges of a small GPU cluster: one Joiner node with a DaemonSet pod and a
//! training pod, a node Joiner does not manage, one NodePool with limits.

use joiner_controller::StepReport;
use joiner_model::api::{EC2NodeClass, NodeClaim, NodePool};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::state::{ClusterState, Objects, label_name};

const EMPTY: Objects<'static> = Objects {
    nodes: &[],
    claims: &[],
    pools: &[],
    classes: &[],
    pods: &[],
};
use std::time::Duration;

use super::*;

/// A condition `Ready` of this status since the start of 2026.
fn ready(status: &str) -> serde_json::Value {
    json!([{"type": "Ready", "status": status, "reason": if status == "True" { "Ready" } else { "NotReady" }, "lastTransitionTime": "2026-01-01T00:00:00Z"}])
}

fn node(name: &str, managed: bool, status: &str) -> Node {
    let mut labels =
        json!({"kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": "us-east-1a"});
    if managed {
        labels["karpenter.sh/nodepool"] = json!("gpu");
        labels["karpenter.sh/capacity-type"] = json!("spot");
        labels["node.kubernetes.io/instance-type"] = json!("g5.xlarge");
        labels["karpenter.k8s.aws/instance-gpu-name"] = json!("a10g");
        labels["karpenter.k8s.aws/ec2nodeclass"] = json!("default");
        labels["karpenter.sh/initialized"] = json!("true");
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {
            "capacity": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1", "pods": "58"},
            "allocatable": {"cpu": "3920m", "memory": "15Gi", "nvidia.com/gpu": "1", "pods": "58"},
            "conditions": ready(status)
        }
    }))
    .unwrap()
}

fn pod(name: &str, node: &str, daemon: bool, requests: serde_json::Value) -> Pod {
    let owner = if daemon {
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "dcgm", "uid": "d"})
    } else {
        json!({"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j"})
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ml", "ownerReferences": [owner]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": requests, "limits": requests}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

fn claim(status: &str, at: &str) -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "gpu-abc", "labels": {"karpenter.sh/nodepool": "gpu"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []},
        "status": {"nodeName": "ip-1", "conditions": [{"type": "Ready", "status": status, "reason": "R", "lastTransitionTime": at}]}
    }))
    .unwrap()
}

fn pool(status: &str) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "gpu"},
        "spec": {
            "limits": {"cpu": "100", "nvidia.com/gpu": "8"},
            "template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []}}
        },
        "status": {"nodes": 1, "resources": {"cpu": "4", "nvidia.com/gpu": "1"}, "conditions": ready(status)}
    }))
    .unwrap()
}

fn class(status: &str) -> EC2NodeClass {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}], "subnetSelectorTerms": [{"id": "s"}], "securityGroupSelectorTerms": [{"id": "g"}]},
        "status": {"conditions": ready(status)}
    }))
    .unwrap()
}

pub(super) fn cluster() -> ClusterState {
    cluster_at("False", "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z")
}

/// [`cluster`] ten minutes later: the NodeClaim became Ready; its class, pool and node stopped
/// being.
pub(super) fn cluster_later() -> ClusterState {
    cluster_at("True", "2026-01-01T01:05:00Z", "2026-01-01T01:10:00Z")
}

fn cluster_at(claim_status: &str, since: &str, now: &str) -> ClusterState {
    // Ten minutes later the class, the pool and the node are no longer Ready.
    let others = if claim_status == "True" {
        "False"
    } else {
        "True"
    };
    let nodes = [node("ip-1", true, others), node("ip-2", false, "True")];
    let pods = [
        pod(
            "dcgm-1",
            "ip-1",
            true,
            json!({"cpu": "100m", "memory": "128Mi"}),
        ),
        pod(
            "train-1",
            "ip-1",
            false,
            json!({"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"}),
        ),
        pod("web", "ip-2", false, json!({"cpu": "1"})),
    ];
    let now: Timestamp = now.parse().unwrap();
    let objects = Objects {
        nodes: &nodes,
        claims: &[claim(claim_status, since)],
        pools: &[pool(others)],
        classes: &[class(others)],
        pods: &pods,
    };
    ClusterState::of(&objects, true, now)
}

fn lines(m: &Metrics) -> Vec<String> {
    m.render()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// The value of the one sample of `metric` whose labels include all of `with`.
fn value(lines: &[String], metric: &str, with: &[&str]) -> f64 {
    let found: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with(&format!("{metric}{{")) && with.iter().all(|w| l.contains(w)))
        .collect();
    assert_eq!(found.len(), 1, "{metric} {with:?}: {found:#?}");
    found[0].rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn node_gauges_split_daemon_pods_from_the_rest_and_carry_karpenters_node_labels() {
    let m = Metrics::new("aws");
    m.set_state(&cluster());
    let l = lines(&m);
    let ip1 = r#"node_name="ip-1""#;
    assert_eq!(
        value(
            &l,
            "karpenter_nodes_allocatable",
            &[ip1, r#"resource_type="cpu""#]
        ),
        3.92
    );
    assert_eq!(
        value(
            &l,
            "karpenter_nodes_allocatable",
            &[ip1, r#"resource_type="nvidia.com/gpu""#]
        ),
        1.0
    );
    assert_eq!(
        value(
            &l,
            "karpenter_nodes_total_pod_requests",
            &[ip1, r#"resource_type="cpu""#]
        ),
        2.0
    );
    assert_eq!(
        value(
            &l,
            "karpenter_nodes_total_daemon_requests",
            &[ip1, r#"resource_type="cpu""#]
        ),
        0.1
    );
    assert_eq!(
        value(
            &l,
            "karpenter_nodes_total_pod_limits",
            &[ip1, r#"resource_type="memory""#]
        ),
        8.0 * 1024.0 * 1024.0 * 1024.0
    );
    assert_eq!(
        value(
            &l,
            "karpenter_nodes_system_overhead",
            &[ip1, r#"resource_type="cpu""#]
        ),
        0.08
    );
    assert_eq!(
        value(&l, "karpenter_nodes_current_lifetime_seconds", &[ip1]),
        3600.0
    );
    let labels = [
        r#"nodepool="gpu""#,
        r#"zone="us-east-1a""#,
        r#"arch="amd64""#,
        r#"capacity_type="spot""#,
        r#"instance_type="g5.xlarge""#,
        r#"instance_gpu_name="a10g""#,
        r#"managed="true""#,
        r#"resource_type="pods""#,
    ];
    assert_eq!(
        value(
            &l,
            "karpenter_nodes_allocatable",
            &[&[ip1][..], &labels].concat()
        ),
        58.0
    );
    // The node Joiner does not manage is described too, as Karpenter's state describes every
    // node, with `managed="false"` and no pool.
    assert_eq!(
        value(
            &l,
            "karpenter_nodes_allocatable",
            &[
                r#"node_name="ip-2""#,
                r#"managed="false""#,
                r#"nodepool="""#,
                r#"resource_type="cpu""#
            ]
        ),
        3.92
    );
}

#[test]
fn pools_pods_and_the_cluster_are_gauged() {
    let m = Metrics::new("aws");
    m.set_state(&cluster());
    let l = lines(&m);
    let gpu = r#"nodepool="gpu""#;
    assert_eq!(
        value(
            &l,
            "karpenter_nodepools_usage",
            &[gpu, r#"resource_type="cpu""#]
        ),
        4.0
    );
    assert_eq!(
        value(
            &l,
            "karpenter_nodepools_limit",
            &[gpu, r#"resource_type="nvidia.com/gpu""#]
        ),
        8.0
    );
    assert_eq!(
        value(
            &l,
            "karpenter_pods_state",
            &[
                r#"name="train-1""#,
                r#"namespace="ml""#,
                r#"owner="/apis/batch/v1/namespaces/ml/jobs/train""#,
                r#"node="ip-1""#,
                r#"scheduled="true""#,
                gpu,
                r#"instance_type="g5.xlarge""#,
                r#"capacity_type="spot""#,
                r#"phase="Running""#,
                r#"ready="true""#,
                r#"managed="true""#,
            ]
        ),
        1.0
    );
    assert_eq!(
        value(
            &l,
            "karpenter_pods_state",
            &[r#"name="web""#, r#"managed="false""#]
        ),
        1.0
    );
    // Only Joiner's node counts: 2.1 of 3.92 cores, 1 of 1 GPU.
    let cpu = value(
        &l,
        "karpenter_cluster_utilization_percent",
        &[r#"resource_type="cpu""#],
    );
    assert!((cpu - 2.1 / 3.92 * 100.0).abs() < 1e-9, "{cpu}");
    assert_eq!(
        value(
            &l,
            "karpenter_cluster_utilization_percent",
            &[r#"resource_type="nvidia.com/gpu""#]
        ),
        100.0
    );
    assert!(
        l.contains(&"karpenter_cluster_state_node_count 2".to_string()),
        "{l:#?}"
    );
    assert!(l.contains(&"karpenter_cluster_state_synced 1".to_string()));
}

#[test]
fn series_of_objects_that_are_gone_go_with_them() {
    let m = Metrics::new("aws");
    m.set_state(&cluster());
    let count =
        |m: &Metrics, prefix: &str| lines(m).iter().filter(|l| l.starts_with(prefix)).count();
    assert!(count(&m, "karpenter_nodes_allocatable{") > 0);
    // Every node, pod and pool deleted, and the view not synced.
    let now: Timestamp = "2026-01-01T02:00:00Z".parse().unwrap();
    m.set_state(&ClusterState::of(&EMPTY, false, now));
    for family in [
        "karpenter_nodes_",
        "karpenter_pods_state",
        "karpenter_nodepools_",
        "karpenter_cluster_utilization",
    ] {
        assert_eq!(count(&m, family), 0, "{family}");
    }
    assert!(lines(&m).contains(&"karpenter_cluster_state_synced 0".to_string()));
    // Counters are not state: a report's counts stay.
    record(
        &StepReport {
            created: vec!["x".into()],
            ..StepReport::default()
        },
        &Claims::new(),
        Duration::ZERO,
        &m,
    );
    m.set_state(&ClusterState::of(&EMPTY, true, now));
    assert_eq!(count(&m, "karpenter_nodeclaims_created_total{"), 1);
}

#[test]
fn metric_label_names_are_the_node_label_keys_last_segment() {
    assert_eq!(
        label_name("node.kubernetes.io/instance-type"),
        "instance_type"
    );
    assert_eq!(
        label_name("karpenter.k8s.aws/instance-gpu-name"),
        "instance_gpu_name"
    );
    assert_eq!(label_name("karpenter.sh/capacity-type"), "capacity_type");
    assert_eq!(
        super::state::resource_type("ephemeral-storage"),
        "ephemeral_storage"
    );
    assert_eq!(
        super::state::resource_type("nvidia.com/gpu"),
        "nvidia.com/gpu"
    );
    for (key, name) in super::state::NODE_LABELS {
        assert_eq!(label_name(key), name, "{key}");
    }
}

#[test]
fn conditions_are_gauged_per_object_and_their_transitions_counted() {
    let m = Metrics::new("aws");
    m.set_state(&cluster());
    let l = lines(&m);
    let claim = [
        r#"name="gpu-abc""#,
        r#"type="Ready""#,
        r#"status="False""#,
        r#"karpenter_k8s_aws_ec2nodeclass="default""#,
        r#"karpenter_sh_nodepool="gpu""#,
    ];
    assert_eq!(
        value(&l, "operator_nodeclaim_status_condition_count", &claim),
        1.0
    );
    assert_eq!(
        value(
            &l,
            "operator_nodeclaim_status_condition_current_status_seconds",
            &claim
        ),
        3600.0
    );
    assert_eq!(
        value(
            &l,
            "operator_status_condition_count",
            &[r#"kind="NodeClaim""#, r#"group="karpenter.sh""#]
        ),
        1.0
    );
    assert_eq!(
        value(
            &l,
            "operator_node_status_condition_count",
            &[r#"name="ip-1""#, r#"karpenter_sh_initialized="true""#]
        ),
        1.0
    );
    // Only Joiner's nodes are described.
    assert!(
        !l.iter()
            .any(|x| x.starts_with("operator_node_") && x.contains("ip-2"))
    );
    assert_eq!(
        value(
            &l,
            "operator_nodepool_status_condition_count",
            &[r#"name="gpu""#]
        ),
        1.0
    );
    // The first look only learns: nothing has transitioned yet.
    assert!(
        !l.iter().any(|x| x.contains("_transitions_total")),
        "{l:#?}"
    );

    m.set_state(&cluster_later());
    let l = lines(&m);
    let became = [
        r#"type="Ready""#,
        r#"status="True""#,
        r#"reason="R""#,
        r#"karpenter_sh_nodepool="gpu""#,
    ];
    assert_eq!(
        value(
            &l,
            "operator_nodeclaim_status_condition_transitions_total",
            &became
        ),
        1.0
    );
    // It had been False for 65 minutes.
    assert_eq!(
        value(
            &l,
            "operator_nodeclaim_status_condition_transition_seconds_sum",
            &[r#"status="True""#]
        ),
        3900.0
    );
    assert_eq!(
        value(
            &l,
            "operator_ec2nodeclass_status_condition_transitions_total",
            &[r#"status="False""#]
        ),
        1.0
    );
    assert_eq!(
        value(
            &l,
            "operator_status_condition_transitions_total",
            &[r#"kind="EC2NodeClass""#]
        ),
        1.0
    );
    // The old status's series is gone with it.
    assert!(!l.iter().any(
        |x| x.starts_with("operator_nodeclaim_status_condition_count")
            && x.contains(r#"status="False""#)
    ));
    assert_eq!(
        value(
            &l,
            "operator_node_status_condition_transitions_total",
            &[r#"status="False""#, r#"karpenter_sh_initialized="true""#]
        ),
        1.0
    );
    // The node that stayed Ready did not transition.
    assert!(
        !l.iter()
            .any(|x| x.contains("_transitions_total") && x.contains("ip-2"))
    );
}

#[test]
fn terminations_lifetimes_and_pod_startups_are_timed_from_one_look_to_the_next() {
    use super::lifetimes::ClaimLife;
    let m = Metrics::new("aws");
    let life = |deleting: Option<f64>| ClaimLife {
        nodepool: "gpu".into(),
        created: 0.0,
        deleting_since: deleting,
        offering: None,
    };
    let look = |at: f64, claims: &[(&str, ClaimLife)], started: &[(&str, f64)]| ClusterState {
        at,
        claims: claims
            .iter()
            .map(|(n, l)| (n.to_string(), l.clone()))
            .collect(),
        started: started.iter().map(|(u, s)| (u.to_string(), *s)).collect(),
        ..ClusterState::default()
    };
    // The first look only learns: p-1 started before this process saw it. (The interruption
    // queue's histogram, unlabelled, is always served.)
    m.set_state(&look(
        100.0,
        &[("a", life(Some(100.0))), ("b", life(None))],
        &[("p-1", 5.0)],
    ));
    assert!(
        !lines(&m).iter().any(|l| l.starts_with("karpenter_")
            && !l.starts_with("karpenter_interruption_")
            && l.contains("duration_seconds")),
        "{:#?}",
        lines(&m)
    );
    // a is gone 60 s after its deletion was asked for; b is still there; p-2 started in 12 s.
    m.set_state(&look(
        160.0,
        &[("b", life(None))],
        &[("p-1", 5.0), ("p-2", 12.0)],
    ));
    let l = lines(&m);
    let gpu = r#"nodepool="gpu""#;
    assert_eq!(
        value(
            &l,
            "karpenter_nodeclaims_termination_duration_seconds_sum",
            &[gpu]
        ),
        60.0
    );
    assert_eq!(
        value(
            &l,
            "karpenter_nodeclaims_termination_duration_seconds_count",
            &[gpu]
        ),
        1.0
    );
    assert_eq!(
        value(
            &l,
            "karpenter_nodes_termination_duration_seconds",
            &[gpu, r#"quantile="0.5""#]
        ),
        60.0
    );
    assert_eq!(
        value(&l, "karpenter_nodes_lifetime_duration_seconds_sum", &[gpu]),
        160.0
    );
    assert_eq!(
        value(
            &l,
            "karpenter_pods_startup_duration_seconds",
            &[r#"quantile="1""#]
        ),
        12.0
    );
    assert!(
        l.contains(&"karpenter_pods_startup_duration_seconds_count 1.0".to_string()),
        "{l:#?}"
    );
    // b's deletion is asked for and it goes; another pod starts slowly.
    m.set_state(&look(
        200.0,
        &[("b", life(Some(190.0)))],
        &[("p-2", 12.0), ("p-3", 40.0)],
    ));
    m.set_state(&look(230.0, &[], &[("p-2", 12.0), ("p-3", 40.0)]));
    let l = lines(&m);
    assert_eq!(
        value(
            &l,
            "karpenter_nodes_termination_duration_seconds",
            &[gpu, r#"quantile="0""#]
        ),
        40.0
    );
    assert_eq!(
        value(
            &l,
            "karpenter_nodes_termination_duration_seconds",
            &[gpu, r#"quantile="1""#]
        ),
        60.0
    );
    assert_eq!(
        value(
            &l,
            "karpenter_pods_startup_duration_seconds",
            &[r#"quantile="0""#]
        ),
        12.0
    );
    assert_eq!(
        value(
            &l,
            "karpenter_pods_startup_duration_seconds",
            &[r#"quantile="1""#]
        ),
        40.0
    );
}

#[test]
fn how_long_the_view_has_been_out_of_sync_is_gauged() {
    let m = Metrics::new("aws");
    let look = |at: f64, synced: bool| ClusterState {
        at,
        synced,
        ..ClusterState::default()
    };
    let unsynced = |m: &Metrics| {
        lines(m)
            .into_iter()
            .find_map(|l| {
                l.strip_prefix("karpenter_cluster_state_unsynced_time_seconds ")
                    .map(str::to_string)
            })
            .expect("served")
    };
    m.set_state(&look(100.0, true));
    assert_eq!(unsynced(&m), "0.0");
    m.set_state(&look(110.0, false));
    m.set_state(&look(170.0, false));
    assert_eq!(unsynced(&m), "60.0");
    m.set_state(&look(180.0, true));
    assert_eq!(unsynced(&m), "0.0");
}

#[test]
fn objects_are_timed_while_they_terminate_and_once_they_are_gone() {
    use super::conditions::ConditionKind;
    use super::termination::Terminating;
    let m = Metrics::new("aws");
    let going = |kind, name: &str, since: f64| Terminating {
        kind,
        name: name.into(),
        since,
        extra: Vec::new(),
    };
    let look =
        |at: f64, terminating: Vec<Terminating>, present: &[(ConditionKind, &str)]| ClusterState {
            at,
            present: present.iter().map(|(k, n)| (*k, n.to_string())).collect(),
            terminating,
            ..ClusterState::default()
        };
    m.set_state(&look(
        130.0,
        vec![
            going(ConditionKind::NodePool, "old", 90.0),
            going(ConditionKind::Node, "ip-9", 100.0),
        ],
        &[
            (ConditionKind::NodePool, "old"),
            (ConditionKind::Node, "ip-9"),
        ],
    ));
    let l = lines(&m);
    assert_eq!(
        value(
            &l,
            "operator_nodepool_termination_current_time_seconds",
            &[r#"name="old""#]
        ),
        40.0
    );
    assert_eq!(
        value(
            &l,
            "operator_termination_current_time_seconds",
            &[r#"name="ip-9""#, r#"kind="Node""#]
        ),
        30.0
    );
    // The node is gone; the pool still terminates.
    m.set_state(&look(
        150.0,
        vec![going(ConditionKind::NodePool, "old", 90.0)],
        &[(ConditionKind::NodePool, "old")],
    ));
    let l = lines(&m);
    assert!(
        l.contains(&"operator_node_termination_duration_seconds_sum 50.0".to_string()),
        "{l:#?}"
    );
    assert!(
        !l.iter()
            .any(|x| x.contains("termination_current_time") && x.contains("ip-9"))
    );
    assert_eq!(
        value(
            &l,
            "operator_nodepool_termination_current_time_seconds",
            &[r#"name="old""#]
        ),
        60.0
    );
    assert!(
        !l.iter()
            .any(|x| x.starts_with("operator_nodepool_termination_duration_seconds_count"))
    );
}

#[test]
fn pods_waiting_to_be_bound_or_to_start_are_gauged_and_bindings_timed() {
    use super::lifetimes::PodTimes;
    let m = Metrics::new("aws");
    let pod = |name: &str, bound: Option<f64>, started: bool| PodTimes {
        name: name.into(),
        namespace: "ml".into(),
        uid: format!("uid-{name}"),
        created: 100.0,
        bound,
        started,
    };
    let look = |at: f64, pods: Vec<PodTimes>| ClusterState {
        at,
        pod_times: pods,
        ..ClusterState::default()
    };
    m.set_state(&look(
        130.0,
        vec![pod("a", None, false), pod("old", Some(101.0), true)],
    ));
    let l = lines(&m);
    assert_eq!(
        value(&l, "karpenter_pods_unbound_time_seconds", &[r#"name="a""#]),
        30.0
    );
    assert_eq!(
        value(
            &l,
            "karpenter_pods_unstarted_time_seconds",
            &[r#"name="a""#]
        ),
        30.0
    );
    assert!(
        !l.iter().any(|x| x.contains(r#"name="old""#)),
        "a running pod waits for nothing"
    );
    // a is bound at 140 and pulls its image.
    m.set_state(&look(
        150.0,
        vec![pod("a", Some(140.0), false), pod("old", Some(101.0), true)],
    ));
    let l = lines(&m);
    assert!(
        !l.iter()
            .any(|x| x.starts_with("karpenter_pods_unbound_time_seconds{"))
    );
    assert_eq!(
        value(
            &l,
            "karpenter_pods_unstarted_time_seconds",
            &[r#"name="a""#]
        ),
        50.0
    );
    // Only a's binding, seen happen, is timed: 40 s after its creation.
    assert!(
        l.contains(&"karpenter_pods_bound_duration_seconds_sum 40.0".to_string()),
        "{l:#?}"
    );
    assert!(l.contains(&"karpenter_pods_bound_duration_seconds_count 1".to_string()));
}

/// `karpenter_nodepools_cost_total`: the NodePool's NodeClaims at the prices the last plan
/// offered them at; a NodeClaim whose offering has no price adds nothing, and a pool with no
/// NodeClaims costs 0.
#[test]
fn a_pools_cost_is_its_nodeclaims_at_the_planned_prices() {
    use super::lifetimes::ClaimLife;
    let m = Metrics::new("aws");
    let offered = joiner_controller::OfferedType {
        instance_type: "g6.xlarge".into(),
        cpu_cores: 4.0,
        memory_bytes: 16e9,
        offerings: vec![joiner_controller::OfferedAt {
            zone: "us-east-1a".into(),
            capacity_type: "on-demand".into(),
            price_usd: 0.8048,
        }],
    };
    let report = joiner_controller::StepReport {
        catalog: Some(vec![offered]),
        ..Default::default()
    };
    super::record(&report, &Default::default(), std::time::Duration::ZERO, &m);
    let mut state = cluster();
    let claim = |pool: &str, zone: &str| ClaimLife {
        nodepool: pool.into(),
        created: 0.0,
        deleting_since: None,
        offering: Some(("g6.xlarge".into(), "on-demand".into(), zone.into())),
    };
    state.claims = [
        ("a", claim("gpu", "us-east-1a")),
        ("b", claim("gpu", "us-east-1a")),
        // No price known in this zone.
        ("c", claim("gpu", "us-east-1b")),
        // Of a pool that is gone.
        ("d", claim("old", "us-east-1a")),
    ]
    .into_iter()
    .map(|(n, l)| (n.to_string(), l))
    .collect();
    state.pool_limits.insert("cpu".into(), Default::default());
    m.set_state(&state);
    let lines = lines(&m);
    let cost = |pool: &str| {
        value(
            &lines,
            "karpenter_nodepools_cost_total",
            &[&format!("nodepool=\"{pool}\"")],
        )
    };
    assert!((cost("gpu") - 2.0 * 0.8048).abs() < 1e-9);
    assert_eq!(cost("cpu"), 0.0);
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("nodepool=\"old\"") && l.contains("cost")),
        "{lines:?}"
    );
}
