use super::*;
use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

fn at(minutes: i64) -> Timestamp {
    Timestamp::from_second(1_767_225_600 + minutes * 60).expect("a time")
}

fn node(name: &str, pool: Option<&str>, conditions: &[(&str, &str, Option<i64>)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: pool.map(|p| [(labels::NODEPOOL.to_string(), p.to_string())].into()),
            ..ObjectMeta::default()
        },
        status: Some(NodeStatus {
            conditions: Some(
                conditions
                    .iter()
                    .map(|(t, s, since)| NodeCondition {
                        type_: t.to_string(),
                        status: s.to_string(),
                        last_transition_time: since.map(|m| Time(at(m))),
                        ..NodeCondition::default()
                    })
                    .collect(),
            ),
            ..NodeStatus::default()
        }),
        ..Node::default()
    }
}

fn healthy(name: &str) -> Node {
    node(name, Some("gpu"), &[("Ready", "True", Some(0))])
}

#[test]
fn a_gpu_fault_is_repaired_after_its_toleration_and_not_before() {
    let sick = node(
        "a",
        Some("gpu"),
        &[
            ("Ready", "True", Some(0)),
            ("AcceleratedHardwareReady", "False", Some(5)),
        ],
    );
    let nodes = [sick, healthy("b"), healthy("c"), healthy("d"), healthy("e")];
    let v = verdicts(&nodes, &AWS_REPAIR_POLICIES, at(14), &BTreeMap::new());
    assert!(
        matches!(&v["a"], Verdict::Wait(b) if b.repair_at == at(15)),
        "{v:?}"
    );
    assert_eq!(v.len(), 1, "healthy nodes get no verdict");
    let v = verdicts(&nodes, &AWS_REPAIR_POLICIES, at(15), &BTreeMap::new());
    let Verdict::Repair(b) = &v["a"] else {
        panic!("{v:?}");
    };
    assert_eq!(b.policy.condition, "AcceleratedHardwareReady");
}

#[test]
fn the_earliest_deadline_of_several_broken_policies_counts() {
    // NotReady for 30 minutes from minute 0, the GPUs for 10 from minute 15: minute 25 wins.
    let n = node(
        "a",
        Some("gpu"),
        &[
            ("Ready", "False", Some(0)),
            ("AcceleratedHardwareReady", "False", Some(15)),
        ],
    );
    assert_eq!(
        broken(&n, &AWS_REPAIR_POLICIES, None).map(|b| b.repair_at),
        Some(at(25))
    );
    // A condition that does not say since when is never acted on.
    let n = node("a", Some("gpu"), &[("Ready", "Unknown", None)]);
    assert_eq!(broken(&n, &AWS_REPAIR_POLICIES, None), None);
}

#[test]
fn more_than_a_fifth_of_a_node_pool_unhealthy_blocks_its_repairs() {
    assert_eq!(unhealthy_allowed(3), 1);
    assert_eq!(unhealthy_allowed(10), 2);
    assert_eq!(unhealthy_allowed(1), 1);
    let sick = |name: &str| node(name, Some("gpu"), &[("Ready", "False", Some(0))]);
    let mut nodes: Vec<Node> = (0..8).map(|i| healthy(&format!("h{i}"))).collect();
    nodes.extend([sick("s1"), sick("s2")]);
    // Two of ten: repaired.
    let v = verdicts(&nodes, &AWS_REPAIR_POLICIES, at(60), &BTreeMap::new());
    assert!(matches!(v["s1"], Verdict::Repair(_)), "{v:?}");
    // Three of ten: none of them.
    nodes.remove(0);
    nodes.push(sick("s3"));
    let v = verdicts(&nodes, &AWS_REPAIR_POLICIES, at(60), &BTreeMap::new());
    for name in ["s1", "s2", "s3"] {
        assert!(
            matches!(&v[name], Verdict::Blocked { unhealthy: 3, total: 10, node_pool, .. } if node_pool == "gpu"),
            "{v:?}"
        );
    }
    // Another NodePool's nodes count for their own.
    let mut other = nodes.clone();
    other.push(node("x", Some("cpu"), &[("Ready", "False", Some(0))]));
    let v = verdicts(&other, &AWS_REPAIR_POLICIES, at(60), &BTreeMap::new());
    assert!(matches!(v["x"], Verdict::Repair(_)), "{v:?}");
}

#[test]
fn nodes_of_no_node_pool_are_not_joiners_to_repair() {
    let n = node("self-managed", None, &[("Ready", "False", Some(0))]);
    assert!(verdicts(&[n], &AWS_REPAIR_POLICIES, at(600), &BTreeMap::new()).is_empty());
}

fn gpu_fault(reason: &str, since: i64) -> Node {
    let mut n = node(
        "a",
        Some("gpu"),
        &[
            ("Ready", "True", Some(0)),
            ("AcceleratedHardwareReady", "False", Some(since)),
        ],
    );
    if let Some(c) = n
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .and_then(|cs| {
            cs.iter_mut()
                .find(|c| c.type_ == "AcceleratedHardwareReady")
        })
    {
        c.reason = Some(reason.into());
    }
    n
}

#[test]
fn with_reboot_for_repair_a_fault_a_reboot_clears_is_rebooted_and_the_rest_replaced() {
    let policies = aws_policies(true);
    for (reason, action) in [
        ("NvidiaXID119Error", RepairAction::Reboot),
        ("NvidiaXID46Error", RepairAction::Reboot),
        ("NvidiaXID140Error", RepairAction::Reboot),
        ("NvidiaXID79Error", RepairAction::Replace),
        ("NvidiaXID48Error", RepairAction::Replace),
        ("NvidiaNVLinkError", RepairAction::Replace),
        ("DCGMDiagnosticFailure", RepairAction::Replace),
        ("", RepairAction::Replace),
    ] {
        let b = broken(&gpu_fault(reason, 0), &policies, None).expect("broken");
        assert_eq!(b.policy.action, action, "{reason}");
        assert_eq!(
            b.repair_at,
            at(10),
            "{reason}: Karpenter's 10 minutes either way"
        );
    }
    // Without the gate every GPU fault is replaced.
    let b = broken(
        &gpu_fault("NvidiaXID119Error", 0),
        &aws_policies(false),
        None,
    )
    .expect("broken");
    assert_eq!(b.policy.action, RepairAction::Replace);
}

#[test]
fn after_a_reboot_the_toleration_counts_from_the_reboots_end() {
    // The condition never changed through the reboot: it has held only since the new boot.
    let n = gpu_fault("NvidiaXID119Error", 0);
    let b = broken(&n, &aws_policies(true), Some(at(25))).expect("broken");
    assert_eq!((b.since, b.repair_at), (at(25), at(35)));
    // A condition that went False after the reboot counts from then.
    let b = broken(&n, &aws_policies(true), Some(at(-5))).expect("broken");
    assert_eq!(b.since, at(0));
    let v = verdicts(
        &[n, healthy("b"), healthy("c"), healthy("d"), healthy("e")],
        &aws_policies(true),
        at(30),
        &[("a".to_string(), at(25))].into(),
    );
    assert!(matches!(&v["a"], Verdict::Wait(_)), "{v:?}");
}

#[test]
fn xids_are_read_from_the_agents_reasons() {
    assert_eq!(xid_of("NvidiaXID119Error"), Some(119));
    assert_eq!(xid_of("NvidiaXID79Warning"), Some(79));
    assert_eq!(xid_of("NvidiaXIDError"), None);
    assert_eq!(xid_of("KernelBug"), None);
}

#[test]
fn a_node_whose_kubelet_went_silent_is_drained_at_once_and_the_rest_for_ten_minutes() {
    let drain = |condition: &str, status: &str| {
        AWS_REPAIR_POLICIES
            .iter()
            .find(|p| p.condition == condition && p.status == status)
            .map(|p| p.drain)
    };
    assert_eq!(drain("Ready", "Unknown"), Some(Duration::ZERO));
    assert_eq!(drain("Ready", "False"), Some(Duration::from_secs(600)));
    assert_eq!(
        drain("AcceleratedHardwareReady", "False"),
        Some(Duration::from_secs(600))
    );
    assert_eq!(AWS_REBOOT_POLICY.drain, Duration::from_secs(600));
}
