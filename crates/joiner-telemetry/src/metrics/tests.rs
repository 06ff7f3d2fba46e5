use joiner_controller::store::StoreError;
use joiner_controller::{DisruptionEvent, Reconciler};

use std::collections::BTreeMap;
use std::time::Duration;

use joiner_controller::CloudCall;
use joiner_controller::ControllerError;
use joiner_controller::StepReport;
use joiner_controller::cloud::{CloudError, CloudMethod};
use joiner_model::wellknown::{DisruptionAction, DisruptionReason};

use super::*;

fn event(
    action: DisruptionAction,
    reason: &str,
    claims: &[&str],
    detail: &[&str],
) -> DisruptionEvent {
    DisruptionEvent {
        action,
        reason: joiner_controller::DisruptionCause::parse(reason).expect("a cause"),
        node_claims: claims.iter().map(|s| s.to_string()).collect(),
        detail: detail.iter().map(|s| s.to_string()).collect(),
    }
}

/// Spot NodeClaims in us-east-1a with Nodes, in these pools.
fn claims(of: &[(&str, &str)]) -> Claims {
    of.iter()
        .map(|(name, pool)| {
            let labels = ClaimLabels {
                nodepool: pool.to_string(),
                capacity_type: "spot".into(),
                zone: "us-east-1a".into(),
                registered: true,
            };
            (name.to_string(), labels)
        })
        .collect()
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// The lines of the exposition that carry a value (not `# HELP`/`# TYPE`).
fn samples(m: &Metrics) -> Vec<String> {
    m.render()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

fn has(lines: &[String], want: &str) {
    assert!(
        lines.iter().any(|l| l == want),
        "no line `{want}` in\n{}",
        lines.join("\n")
    );
}

#[test]
fn a_step_report_becomes_karpenter_and_joiner_metrics() {
    let m = Metrics::new("aws");
    let report = StepReport {
        planned: true,
        created: s(&["gpu-a", "gpu-b", "gpu-r1"]),
        launched: vec![("gpu-a".into(), "i-1".into())],
        registered: s(&["gpu-old"]),
        initialized: s(&["gpu-old"]),
        deleted: s(&["cpu-x"]),
        drained: s(&["cpu-x"]),
        terminated: s(&["i-9", "i-8"]),
        kept: Vec::new(),
        eviction_refused: Vec::new(),
        launch_templates_deleted: Vec::new(),
        instance_profiles_deleted: Vec::new(),
        cloud_paused: None,
        collected: true,
        unavailable: s(&["g4dn.xlarge/us-east-1a/spot"]),
        insufficient_capacity: Vec::new(),
        mispredicted: Vec::new(),
        eligible: None,
        no_instance_types: Vec::new(),
        catalog: None,
        budgets: Some(vec![joiner_controller::PoolBudget {
            nodepool: "gpu".into(),
            reason: DisruptionReason::Underutilized,
            allowed: 2,
            disrupting: 1,
            nodes: 3,
        }]),
        unschedulable: vec![("lab/big".into(), "too big".into())],
        nominated: vec![("lab/p1".into(), "gpu-a".into())],
        placed: s(&["lab/p1"]),
        ignored_pods: Some(1),
        pending_by_zone: Some(vec![("us-east-1a".into(), 2), ("flexible".into(), 3)]),
        scheduling_duration: Some(Duration::from_millis(30)),
        disruption: vec![
            event(
                DisruptionAction::Decided,
                "Underutilized",
                &["gpu-old", "gpu-old2"],
                &[],
            ),
            event(
                DisruptionAction::Replacing,
                "Underutilized",
                &["gpu-old", "gpu-old2"],
                &["gpu-r1"],
            ),
            event(DisruptionAction::Decided, "Empty", &["cpu-x"], &[]),
        ],
        not_drained: Vec::new(),
        disruption_blocked: Vec::new(),
        unconsolidatable: Vec::new(),
        do_not_disrupt: Vec::new(),
        node_claim_events: Vec::new(),
        repaired: vec![joiner_controller::Repaired {
            node_claim: "a".into(),
            node_pool: "gpu".into(),
            condition: "AcceleratedHardwareReady",
            capacity_type: "spot".into(),
            image_id: "ami-0123".into(),
        }],
        repair_blocked: vec![("a".into(), "blocked".into())],
        reboots: vec![
            joiner_controller::RebootStep {
                node_claim: "a".into(),
                node: "n-a".into(),
                phase: joiner_controller::RebootPhase::Issued,
                message: "rebooted instance i-1".into(),
            },
            joiner_controller::RebootStep {
                node_claim: "b".into(),
                node: "n-b".into(),
                phase: joiner_controller::RebootPhase::Failed(
                    joiner_controller::RebootFailure::RecoveryTimeout,
                ),
                message: "not back".into(),
            },
        ],
        buffers: None,
        errors: vec![
            ControllerError::Cloud(CloudError::Throttled),
            ControllerError::Store(StoreError::Unavailable("down".into())),
        ],
        errors_during: vec![Reconciler::Launching, Reconciler::Lifecycle],
        decision_evaluations: vec![
            (
                Some(joiner_model::wellknown::ConsolidationType::Single),
                Duration::from_millis(40),
            ),
            (None, Duration::from_millis(2)),
        ],
        consolidation_moves: vec![
            joiner_controller::MoveVerdict {
                nodepool: "gpu".into(),
                policy: "Balanced",
                approved: false,
                score: Some((0.3, false)),
            },
            joiner_controller::MoveVerdict {
                nodepool: "cpu".into(),
                policy: "WhenEmptyOrUnderutilized",
                approved: true,
                score: None,
            },
        ],
        user_data_bytes: vec![("gpu".into(), 1834)],
        launch_failures: vec![joiner_controller::cloud::OfferingKey {
            instance_type: "g6.xlarge".into(),
            zone: "us-east-1b".into(),
            capacity_type: joiner_model::wellknown::CapacityType::Spot,
        }],
        cloud_calls: vec![
            CloudCall {
                during: Reconciler::Launching,
                method: CloudMethod::Create,
                took: Duration::from_millis(300),
                error: Some(CloudError::Throttled),
            },
            CloudCall {
                during: Reconciler::Lifecycle,
                method: CloudMethod::List,
                took: Duration::from_millis(20),
                error: None,
            },
        ],
        termination_failures: vec!["us-east-1a".into()],
        failed_validations: vec![joiner_model::wellknown::ConsolidationType::Multi],
        interruption_deleted: 2,
        interruption_latency: vec![Duration::from_secs(3), Duration::from_millis(800)],
    };
    let pools = claims(&[
        ("gpu-a", "gpu"),
        ("gpu-b", "gpu"),
        ("gpu-r1", "gpu"),
        ("gpu-old", "gpu"),
        ("gpu-old2", "gpu"),
        ("cpu-x", "cpu"),
    ]);
    record(&report, &pools, Duration::from_millis(120), &m);
    let lines = samples(&m);
    has(
        &lines,
        r#"karpenter_nodeclaims_created_total{reason="provisioned",nodepool="gpu",min_values_relaxed="false"} 2"#,
    );
    has(
        &lines,
        r#"karpenter_nodeclaims_created_total{reason="underutilized",nodepool="gpu",min_values_relaxed="false"} 1"#,
    );
    has(
        &lines,
        r#"karpenter_nodeclaims_terminated_total{nodepool="cpu",capacity_type="spot",zone="us-east-1a"} 1"#,
    );
    has(
        &lines,
        r#"karpenter_nodeclaims_disrupted_total{reason="underutilized",nodepool="gpu",capacity_type="spot"} 2"#,
    );
    has(
        &lines,
        r#"karpenter_nodeclaims_unhealthy_disrupted_total{condition="AcceleratedHardwareReady",nodepool="gpu",capacity_type="spot",image_id="ami-0123"} 1"#,
    );
    has(
        &lines,
        r#"karpenter_nodes_reboots_total{result="recovery_timeout"} 1"#,
    );
    assert!(
        !lines.iter().any(|l| l.contains(r#"result="issued""#)),
        "a reboot under way has no result yet"
    );
    has(
        &lines,
        r#"karpenter_nodeclaims_disrupted_total{reason="empty",nodepool="cpu",capacity_type="spot"} 1"#,
    );
    has(
        &lines,
        r#"karpenter_voluntary_disruption_decisions_total{decision="replace",reason="underutilized",consolidation_type="multi"} 1"#,
    );
    has(
        &lines,
        r#"karpenter_voluntary_disruption_decisions_total{decision="delete",reason="empty",consolidation_type="empty"} 1"#,
    );
    has(
        &lines,
        r#"karpenter_scheduler_scheduling_duration_seconds_count{controller="provisioner"} 1"#,
    );
    has(
        &lines,
        r#"karpenter_scheduler_scheduling_duration_seconds_sum{controller="provisioner"} 0.03"#,
    );
    has(
        &lines,
        r#"karpenter_scheduler_unschedulable_pods_count{controller="provisioner"} 1"#,
    );
    has(
        &lines,
        r#"karpenter_cloudprovider_errors_total{controller="launching",method="Create",provider="aws",error=""} 1"#,
    );
    has(
        &lines,
        r#"karpenter_cloudprovider_duration_seconds_sum{controller="launching",method="Create",provider="aws"} 0.3"#,
    );
    has(
        &lines,
        r#"karpenter_cloudprovider_instance_launch_failures_total{zone="us-east-1b",zone_id="",capacity_type="spot",reason="LaunchFailed"} 1"#,
    );
    has(
        &lines,
        r#"karpenter_scheduler_pending_pods_by_effective_zone_count{controller="provisioner",zone="flexible"} 3.0"#,
    );
    has(&lines, "karpenter_scheduler_ignored_pods_count 1");
    has(
        &lines,
        r#"karpenter_ec2nodeclasses_userdata_bytes{nodeclass="gpu"} 1834.0"#,
    );
    has(
        &lines,
        r#"karpenter_consolidation_moves_total{decision="rejected",nodepool="gpu",policy="Balanced"} 1"#,
    );
    has(
        &lines,
        r#"karpenter_consolidation_moves_total{decision="approved",nodepool="cpu",policy="WhenEmptyOrUnderutilized"} 1"#,
    );
    has(
        &lines,
        r#"karpenter_consolidation_score_bucket{le="0.33",decision="rejected",nodepool="gpu",policy="Balanced"} 1"#,
    );
    has(
        &lines,
        r#"karpenter_voluntary_disruption_decision_evaluation_duration_seconds_count{reason="underutilized",consolidation_type="single"} 1"#,
    );
    has(
        &lines,
        r#"karpenter_voluntary_disruption_decision_evaluation_duration_seconds_count{reason="drifted",consolidation_type=""} 1"#,
    );
    // Only Balanced pools are scored.
    assert!(
        !lines
            .iter()
            .any(|l| l.starts_with("karpenter_consolidation_score") && l.contains("cpu"))
    );
    has(
        &lines,
        r#"karpenter_cloudprovider_duration_seconds_bucket{le="0.025",controller="lifecycle",method="List",provider="aws"} 1"#,
    );
    has(
        &lines,
        r#"joiner_controller_errors_total{reconciler="launching"} 1"#,
    );
    has(
        &lines,
        r#"joiner_controller_errors_total{reconciler="lifecycle"} 1"#,
    );
    has(
        &lines,
        r#"joiner_nodeclaims_launched_total{nodepool="gpu"} 1"#,
    );
    has(
        &lines,
        r#"joiner_nodeclaims_registered_total{nodepool="gpu"} 1"#,
    );
    has(
        &lines,
        r#"joiner_nodeclaims_initialized_total{nodepool="gpu"} 1"#,
    );
    has(&lines, "joiner_instances_terminated_total 2");
    has(&lines, "karpenter_interruption_deleted_messages_total 2");
    has(
        &lines,
        r#"karpenter_voluntary_disruption_failed_validations_total{consolidation_type="multi"} 1"#,
    );
    has(
        &lines,
        r#"karpenter_cloudprovider_instance_termination_failures_total{zone="us-east-1a",zone_id=""} 1"#,
    );
    has(
        &lines,
        "karpenter_interruption_message_queue_duration_seconds_sum 3.8",
    );
    has(
        &lines,
        r#"karpenter_interruption_message_queue_duration_seconds_bucket{le="1.0"} 1"#,
    );
    has(&lines, r#"karpenter_nodes_drained_total{nodepool="cpu"} 1"#);
    // As Karpenter labels this one: the reason as written.
    has(
        &lines,
        r#"karpenter_nodepools_allowed_disruptions{nodepool="gpu",reason="Underutilized"} 2"#,
    );
    has(
        &lines,
        r#"karpenter_nodepools_nodes_consuming_budgets{nodepool="gpu",reason="Underutilized"} 1"#,
    );
    has(
        &lines,
        r#"karpenter_nodes_created_total{nodepool="gpu",zone="us-east-1a"} 1"#,
    );
    has(
        &lines,
        r#"karpenter_nodes_terminated_total{nodepool="cpu",zone="us-east-1a"} 1"#,
    );
    has(
        &lines,
        r#"karpenter_voluntary_disruption_decisions_by_nodepool_total{nodepool="gpu",decision="replace",reason="underutilized",consolidation_type="multi"} 1"#,
    );
    has(&lines, "joiner_pods_nominated_total 1");
    has(&lines, "joiner_controller_step_duration_seconds_count 1");
    has(&lines, "joiner_controller_step_duration_seconds_sum 0.12");
    has(
        &lines,
        r#"joiner_offerings_unavailable_total{instance_type="g4dn.xlarge",zone="us-east-1a",capacity_type="spot"} 1"#,
    );
    // Only the failed cloud call counts as a cloud provider error.
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("karpenter_cloudprovider_errors_total"))
            .count(),
        1
    );
}

#[test]
fn counters_accumulate_over_steps_and_unknown_pools_are_labelled() {
    let m = Metrics::new("simulated");
    let report = StepReport {
        created: s(&["gone"]),
        ..StepReport::default()
    };
    record(&report, &BTreeMap::new(), Duration::ZERO, &m);
    record(&report, &BTreeMap::new(), Duration::ZERO, &m);
    let lines = samples(&m);
    has(
        &lines,
        r#"karpenter_nodeclaims_created_total{reason="provisioned",nodepool="unknown",min_values_relaxed="false"} 2"#,
    );
    has(&lines, "joiner_controller_step_duration_seconds_count 2");
    // No batch was planned: no scheduling time is made up.
    assert!(
        !lines
            .iter()
            .any(|l| l.starts_with("karpenter_scheduler_scheduling_duration_seconds_count")),
        "{lines:?}"
    );
}

#[test]
fn the_leader_gauge_follows_the_lease() {
    let m = Metrics::new("aws");
    has(&samples(&m), "joiner_leader 0");
    m.set_leader(true);
    has(&samples(&m), "joiner_leader 1");
    m.set_leader(false);
    has(&samples(&m), "joiner_leader 0");
}

/// However many distinct objects fail, and whatever the log says of each, the error
/// metrics keep one series per reconciler (and cloud error kind).
#[test]
fn error_series_stay_bounded_whatever_fails() {
    let m = Metrics::new("aws");
    let mut report = StepReport::default();
    for i in 0..10_000 {
        let reconciler = Reconciler::ALL[i % Reconciler::ALL.len()];
        let e = if i % 2 == 0 {
            ControllerError::Cloud(CloudError::Other(format!("instance i-{i:08x} failed")))
        } else {
            ControllerError::Store(StoreError::Unavailable(format!("NodeClaim gpu-{i}")))
        };
        report.error(reconciler, &format!("NodeClaim gpu-{i}"), e);
        report.cloud_calls.push(CloudCall {
            during: reconciler,
            method: CloudMethod::Get,
            took: Duration::from_millis(1),
            error: Some(CloudError::Other(format!("instance i-{i:08x} failed"))),
        });
    }
    record(&report, &BTreeMap::new(), Duration::from_millis(1), &m);
    let series = |name: &str| samples(&m).iter().filter(|l| l.starts_with(name)).count();
    assert_eq!(
        series("joiner_controller_errors_total{"),
        Reconciler::ALL.len()
    );
    assert_eq!(
        series("karpenter_cloudprovider_errors_total{"),
        Reconciler::ALL.len()
    );
    assert_eq!(
        series("karpenter_cloudprovider_duration_seconds_count{"),
        Reconciler::ALL.len()
    );
    assert!(
        samples(&m).iter().all(|l| !l.contains("gpu-")),
        "no object names in labels"
    );
}

/// Expiry and interruption are forceful in Karpenter: they are disruptions, not voluntary
/// decisions, and the nodes that take over their pods are provisioned, not replacements.
#[test]
fn forceful_disruptions_are_not_voluntary_decisions() {
    let m = Metrics::new("aws");
    let report = StepReport {
        created: s(&["new"]),
        disruption: vec![
            event(DisruptionAction::Decided, "Expired", &["old"], &[]),
            event(DisruptionAction::Replacing, "Expired", &["old"], &["new"]),
        ],
        insufficient_capacity: vec![("short".into(), "no capacity".into())],
        ..StepReport::default()
    };
    let pools = claims(&[("old", "gpu"), ("new", "gpu"), ("short", "gpu")]);
    record(&report, &pools, Duration::ZERO, &m);
    let lines = samples(&m);
    has(
        &lines,
        r#"karpenter_nodeclaims_created_total{reason="provisioned",nodepool="gpu",min_values_relaxed="false"} 1"#,
    );
    has(
        &lines,
        r#"karpenter_nodeclaims_disrupted_total{reason="expired",nodepool="gpu",capacity_type="spot"} 1"#,
    );
    has(
        &lines,
        r#"karpenter_nodeclaims_disrupted_total{reason="insufficient_capacity",nodepool="gpu",capacity_type="spot"} 1"#,
    );
    assert!(
        !lines
            .iter()
            .any(|l| l.starts_with("karpenter_voluntary_disruption_decisions")),
        "{lines:#?}"
    );
}

/// The instance-type gauges follow the types the NodePools may launch, as the last plan priced
/// them: a type no NodePool allows any more loses its series.
#[test]
fn instance_type_gauges_follow_the_last_plan() {
    use joiner_controller::{OfferedAt, OfferedType};
    let m = Metrics::new("aws");
    let offered = |it: &str, price: f64| OfferedType {
        instance_type: it.into(),
        cpu_cores: 4.0,
        memory_bytes: 17_179_869_184.0,
        offerings: vec![
            OfferedAt {
                zone: "us-east-1a".into(),
                capacity_type: "on-demand".into(),
                price_usd: price,
            },
            OfferedAt {
                zone: "us-east-1b".into(),
                capacity_type: "spot".into(),
                price_usd: price / 3.0,
            },
        ],
    };
    let report = |types: Vec<OfferedType>| StepReport {
        planned: true,
        catalog: Some(types),
        ..StepReport::default()
    };
    record(
        &report(vec![
            offered("g6.xlarge", 0.8048),
            offered("g5.xlarge", 1.006),
        ]),
        &Claims::default(),
        Duration::ZERO,
        &m,
    );
    let lines = samples(&m);
    has(
        &lines,
        "karpenter_cloudprovider_instance_type_offering_price_estimate{instance_type=\"g6.xlarge\",capacity_type=\"on-demand\",zone=\"us-east-1a\"} 0.8048",
    );
    has(
        &lines,
        "karpenter_cloudprovider_instance_type_offering_available{instance_type=\"g5.xlarge\",capacity_type=\"spot\",zone=\"us-east-1b\"} 1",
    );
    has(
        &lines,
        "karpenter_cloudprovider_instance_type_cpu_cores{instance_type=\"g6.xlarge\"} 4.0",
    );
    has(
        &lines,
        "karpenter_cloudprovider_instance_type_memory_bytes{instance_type=\"g6.xlarge\"} 17179869184.0",
    );
    record(
        &report(vec![offered("g6.xlarge", 0.5)]),
        &Claims::default(),
        Duration::ZERO,
        &m,
    );
    let lines = samples(&m);
    has(
        &lines,
        "karpenter_cloudprovider_instance_type_offering_price_estimate{instance_type=\"g6.xlarge\",capacity_type=\"on-demand\",zone=\"us-east-1a\"} 0.5",
    );
    assert!(!lines.iter().any(|l| l.contains("g5.xlarge")), "{lines:?}");
    // A step that planned nothing leaves the gauges as the last plan set them.
    record(
        &StepReport::default(),
        &Claims::default(),
        Duration::ZERO,
        &m,
    );
    has(
        &samples(&m),
        "karpenter_cloudprovider_instance_type_cpu_cores{instance_type=\"g6.xlarge\"} 4.0",
    );
}

/// A class's user data size stays until the class is gone, and an unsynced look proves nothing
/// gone.
#[test]
fn user_data_series_go_with_their_class() {
    let m = Metrics::new("aws");
    let report = StepReport {
        user_data_bytes: vec![("gpu".into(), 2048)],
        ..StepReport::default()
    };
    record(&report, &BTreeMap::new(), Duration::from_millis(1), &m);
    let series = |m: &Metrics| {
        samples(m)
            .iter()
            .filter(|l| l.starts_with("karpenter_ec2nodeclasses_userdata_bytes{"))
            .count()
    };
    assert_eq!(series(&m), 1);
    m.set_state(&state::ClusterState {
        synced: false,
        ..Default::default()
    });
    assert_eq!(series(&m), 1, "an unsynced look proves nothing gone");
    m.set_state(&state::ClusterState {
        synced: true,
        ..Default::default()
    });
    assert_eq!(series(&m), 0);
}
