use std::time::Duration;

use joiner_controller::{DisruptionEvent, NodeClaimEvent};

use super::*;
use crate::metrics::conditions::{ConditionKind, ConditionState};

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn report() -> StepReport {
    StepReport {
        nominated: vec![("lab/a".into(), "gpu-1".into())],
        unschedulable: vec![("lab/b".into(), "needs 9 GPUs".into())],
        ..StepReport::default()
    }
}

fn subjects() -> Subjects {
    Subjects {
        uids: [
            (Involved::Pod("lab/a".into()), "uid-a".to_string()),
            (Involved::NodeClaim("gpu-1".into()), "uid-c1".to_string()),
            (Involved::Node("ip-10-0-0-1".into()), "uid-n1".to_string()),
        ]
        .into(),
        nodes: [("gpu-1".to_string(), "ip-10-0-0-1".to_string())].into(),
    }
}

fn said(events: &[ObjectEvent]) -> Vec<(&'static str, bool, Involved)> {
    events
        .iter()
        .map(|e| (e.reason(), e.is_warning(), e.about.clone()))
        .collect()
}

fn disruption(
    action: DisruptionAction,
    reason: &str,
    claims: &[&str],
    detail: &[&str],
) -> DisruptionEvent {
    DisruptionEvent {
        action,
        reason: joiner_controller::DisruptionCause::parse(reason).expect("a cause"),
        node_claims: s(claims),
        detail: s(detail),
    }
}

#[test]
fn a_plan_gives_nominated_and_failed_scheduling_events_on_pods() {
    let events = events_of(&report(), &subjects());
    assert_eq!(
        said(&events),
        [
            ("Nominated", false, Involved::Pod("lab/a".into())),
            ("FailedScheduling", true, Involved::Pod("lab/b".into())),
        ]
    );
    assert_eq!(events[0].uid.as_deref(), Some("uid-a"));
    assert_eq!(events[0].message, "Pod should schedule on: nodeclaim/gpu-1");
    assert_eq!(events[1].uid, None);
    assert!(events[1].message.contains("needs 9 GPUs"));
}

#[test]
fn a_disruption_is_told_on_the_node_claim_its_node_and_its_replacement() {
    let report = StepReport {
        disruption: vec![
            disruption(
                DisruptionAction::Decided,
                "Underutilized",
                &["gpu-1", "gpu-2"],
                &[],
            ),
            disruption(
                DisruptionAction::Replacing,
                "Underutilized",
                &["gpu-1", "gpu-2"],
                &["gpu-r"],
            ),
        ],
        ..StepReport::default()
    };
    let events = events_of(&report, &subjects());
    let terminating = EventKind::DisruptionTerminating(DisruptionReason::Underutilized);
    assert_eq!(
        events
            .iter()
            .map(|e| (e.kind, e.about.clone()))
            .collect::<Vec<_>>(),
        [
            (terminating, Involved::NodeClaim("gpu-1".into())),
            (terminating, Involved::Node("ip-10-0-0-1".into())),
            // gpu-2 has no Node yet: only its NodeClaim is told.
            (terminating, Involved::NodeClaim("gpu-2".into())),
            (
                EventKind::DisruptionLaunching(DisruptionReason::Underutilized),
                Involved::NodeClaim("gpu-r".into())
            ),
        ]
    );
    assert_eq!(events[0].reason(), "DisruptionTerminating");
    assert_eq!(events[0].message, "Disrupting NodeClaim: Underutilized");
    assert_eq!(events[1].message, "Disrupting Node: Underutilized");
    assert_eq!(events[1].uid.as_deref(), Some("uid-n1"));
    assert_eq!(events[3].reason(), "DisruptionLaunching");
    assert_eq!(events[3].message, "Launching NodeClaim: Underutilized");
    assert!(events.iter().all(|e| !e.is_warning()));
}

#[test]
fn cloud_notices_get_the_aws_providers_reasons() {
    let notice = |kind: InterruptionKind| StepReport {
        disruption: vec![disruption(
            if kind.replaces() {
                DisruptionAction::Interrupted
            } else {
                DisruptionAction::Recommended
            },
            kind.reason(),
            &["gpu-1"],
            &["i-1"],
        )],
        ..StepReport::default()
    };
    let reasons: Vec<(&str, bool)> = InterruptionKind::ALL
        .into_iter()
        .map(|k| {
            let events = events_of(&notice(k), &subjects());
            assert_eq!(events.len(), 2, "{k:?}: on the NodeClaim and its Node");
            (events[0].reason(), events[0].is_warning())
        })
        .collect();
    assert_eq!(
        reasons,
        [
            ("SpotInterrupted", true),
            ("SpotRebalanceRecommendation", false),
            ("InstanceUnhealthy", true),
            ("InstanceStopping", true),
            ("CapacityReservationInstanceInterrupted", true),
        ]
    );
}

#[test]
fn drains_and_termination_give_karpenters_events() {
    let report = StepReport {
        disruption: vec![
            disruption(
                DisruptionAction::Evicted,
                "Expired",
                &["gpu-1"],
                &["lab/a", "lab/b"],
            ),
            disruption(DisruptionAction::Forced, "Expired", &["gpu-2"], &["lab/c"]),
        ],
        node_claim_events: vec![NodeClaimEvent {
            node_claim: "gpu-1".into(),
            uid: Some("uid-from-report".into()),
            kind: TerminationEvent::FailedDraining,
            message: "the drain waits for lab/d".into(),
        }],
        ..StepReport::default()
    };
    let events = events_of(&report, &subjects());
    assert_eq!(
        said(&events),
        [
            ("Evicted", false, Involved::Pod("lab/a".into())),
            ("Evicted", false, Involved::Pod("lab/b".into())),
            ("Disrupted", false, Involved::Pod("lab/c".into())),
            ("FailedDraining", true, Involved::NodeClaim("gpu-1".into())),
            ("FailedDraining", true, Involved::Node("ip-10-0-0-1".into())),
        ]
    );
    assert_eq!(events[0].message, "Evicted pod: Expired");
    assert_eq!(events[3].uid.as_deref(), Some("uid-from-report"));
}

#[test]
fn a_launch_out_of_capacity_is_an_insufficient_capacity_error_on_the_node_claim() {
    let report = StepReport {
        insufficient_capacity: vec![(
            "gpu-9".into(),
            "insufficient capacity for p5.48xlarge/us-east-1a/spot".into(),
        )],
        ..StepReport::default()
    };
    let events = events_of(&report, &subjects());
    assert_eq!(
        said(&events),
        [(
            "InsufficientCapacityError",
            true,
            Involved::NodeClaim("gpu-9".into())
        )]
    );
    assert!(
        events[0]
            .message
            .starts_with("NodeClaim gpu-9 event: insufficient capacity")
    );
}

#[test]
fn standing_down_is_a_warning_on_joiners_own_pod_and_resuming_is_normal() {
    let down = rival_event(
        "kube-system/joiner-0",
        Some("Karpenter is running: k-1 holds Lease x"),
    );
    assert_eq!(down.about, Involved::Pod("kube-system/joiner-0".into()));
    assert_eq!(
        (down.reason(), down.is_warning()),
        ("AnotherControllerRunning", true)
    );
    assert!(down.message.contains("k-1 holds Lease x"));
    let up = rival_event("kube-system/joiner-0", None);
    assert_eq!((up.reason(), up.is_warning()), ("NoOtherController", false));
}

fn at(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn the_same_event_is_published_once_per_window_from_its_first_publication() {
    let mut recorder = Recorder::default();
    let events = events_of(&report(), &subjects());
    let published =
        |r: &mut Recorder, t: Duration| events.iter().filter(|e| r.should_publish(e, t)).count();
    assert_eq!(published(&mut recorder, at(0)), 2);
    // Every second for two minutes: nothing new.
    for t in 1..120 {
        assert_eq!(published(&mut recorder, at(t)), 0, "at {t}s");
    }
    // Nominated's window (2 min) has passed; FailedScheduling's (5 min) has not. The window
    // counts from the first publication, not from the last repeat.
    assert_eq!(published(&mut recorder, at(120)), 1);
    assert_eq!(published(&mut recorder, at(239)), 0);
    assert_eq!(published(&mut recorder, at(240)), 1);
    assert_eq!(published(&mut recorder, at(299)), 0);
    assert_eq!(published(&mut recorder, at(300)), 1);
}

#[test]
fn a_new_message_is_not_news_within_the_window_as_in_karpenter() {
    let mut recorder = Recorder::default();
    let mut e = events_of(&report(), &subjects()).remove(0);
    assert!(recorder.should_publish(&e, at(0)));
    e.message = "Pod should schedule on: nodeclaim/gpu-2".into();
    assert!(!recorder.should_publish(&e, at(1)));
    // Another reason for the same pod is another event.
    e.kind = EventKind::FailedScheduling;
    assert!(recorder.should_publish(&e, at(2)));
    // Another disruption reason for the same NodeClaim is another event too.
    let mut d = ObjectEvent {
        about: Involved::NodeClaim("gpu-1".into()),
        uid: None,
        kind: EventKind::DisruptionTerminating(DisruptionReason::Drifted),
        message: String::new(),
    };
    assert!(recorder.should_publish(&d, at(3)));
    assert!(!recorder.should_publish(&d, at(4)));
    d.kind = EventKind::DisruptionTerminating(DisruptionReason::Expired);
    assert!(recorder.should_publish(&d, at(5)));
}

#[test]
fn nominated_events_are_rate_limited_across_pods() {
    let mut recorder = Recorder::default();
    let nominated = |i: usize| ObjectEvent {
        about: Involved::Pod(format!("ns/p{i}")),
        uid: None,
        kind: EventKind::Nominated,
        message: "m".into(),
    };
    // A plan nominating 100 pods at once: a burst of 10 goes out.
    let first = (0..100)
        .filter(|&i| recorder.should_publish(&nominated(i), at(0)))
        .count();
    assert_eq!(first, 10);
    // A second later, 5 more pods are told; the ones refused before are not told again
    // within their window, as in Karpenter.
    let next = (0..110)
        .filter(|&i| recorder.should_publish(&nominated(i), at(1)))
        .count();
    assert_eq!(next, 5);
    // Other reasons are not limited.
    let failed = (0..100)
        .filter(|&i| {
            recorder.should_publish(
                &ObjectEvent {
                    kind: EventKind::FailedScheduling,
                    ..nominated(i)
                },
                at(1),
            )
        })
        .count();
    assert_eq!(failed, 100);
}

#[test]
fn objects_no_longer_mentioned_are_forgotten() {
    let mut recorder = Recorder::default();
    for i in 0..100 {
        let e = ObjectEvent {
            about: Involved::NodeClaim(format!("c{i}")),
            uid: None,
            kind: EventKind::Termination(TerminationEvent::FailedDraining),
            message: "m".into(),
        };
        assert!(recorder.should_publish(&e, at(0)));
    }
    assert_eq!(recorder.remembered(), 100);
    let later = ObjectEvent {
        about: Involved::NodeClaim("other".into()),
        uid: None,
        kind: EventKind::Termination(TerminationEvent::FailedDraining),
        message: "m".into(),
    };
    assert!(recorder.should_publish(&later, at(121)));
    assert_eq!(recorder.remembered(), 1);
}

fn condition(kind: ConditionKind, name: &str, type_: &str, status: &str) -> ConditionState {
    ConditionState {
        kind,
        name: name.into(),
        uid: Some(format!("uid-{name}")),
        type_: type_.into(),
        status: status.into(),
        reason: "Because".into(),
        message: String::new(),
        since: 0.0,
        for_seconds: 0.0,
        extra: Vec::new(),
    }
}

#[test]
fn condition_transitions_are_told_on_their_object_as_karpenter_tells_them() {
    let before = [
        condition(ConditionKind::NodeClaim, "gpu-1", "Ready", "False"),
        condition(ConditionKind::NodePool, "gpu", "Ready", "True"),
        condition(ConditionKind::EC2NodeClass, "default", "AMIsReady", "True"),
        condition(ConditionKind::Node, "ip-1", "Ready", "True"),
        condition(ConditionKind::NodeClaim, "gpu-1", "SomethingElse", "False"),
    ];
    let mut after = before.to_vec();
    after[0].status = "True".into();
    after[1].status = "False".into();
    after[1].message = "NodeClassReady=False".into();
    after[2].status = "False".into();
    // Not a type Karpenter or the kubelet writes: not told (the reasons stay a closed set).
    after[4].status = "True".into();
    // A condition that appears is not a transition.
    after.push(condition(
        ConditionKind::NodeClaim,
        "gpu-1",
        "Drifted",
        "True",
    ));
    let events = transition_events(&before, &after);
    assert_eq!(
        said(&events),
        [
            ("Ready", false, Involved::NodeClaim("gpu-1".into())),
            ("Ready", false, Involved::NodePool("gpu".into())),
            ("AMIsReady", false, Involved::EC2NodeClass("default".into())),
        ]
    );
    assert_eq!(
        events[0].message,
        "Status condition transitioned, Type: Ready, Status: False -> True, Reason: Because"
    );
    assert!(
        events[1]
            .message
            .ends_with(", Message: NodeClassReady=False")
    );
    assert_eq!(events[2].uid.as_deref(), Some("uid-default"));
    // The first look after a start tells nothing.
    assert!(transition_events(&[], &after).is_empty());
}

#[test]
fn a_pool_that_can_launch_nothing_is_told_once_a_minute() {
    let report = StepReport {
        no_instance_types: vec!["gpu".into()],
        ..StepReport::default()
    };
    let mut subjects = subjects();
    subjects
        .uids
        .insert(Involved::NodePool("gpu".into()), "uid-pool".into());
    let events = events_of(&report, &subjects);
    assert_eq!(
        said(&events),
        [(
            "NoCompatibleInstanceTypes",
            true,
            Involved::NodePool("gpu".into())
        )]
    );
    assert_eq!(events[0].uid.as_deref(), Some("uid-pool"));
    assert_eq!(
        events[0].message,
        "NodePool requirements filtered out all compatible available instance types"
    );
    let mut recorder = Recorder::default();
    assert!(recorder.should_publish(&events[0], at(0)));
    assert!(!recorder.should_publish(&events[0], at(59)));
    assert!(recorder.should_publish(&events[0], at(60)));
}

#[test]
fn a_pool_whose_budget_blocks_a_reason_is_told_so_when_it_has_nodes() {
    let budget = |pool: &str, reason, allowed, nodes| joiner_controller::PoolBudget {
        nodepool: pool.into(),
        reason,
        allowed,
        disrupting: 0,
        nodes,
    };
    let report = StepReport {
        budgets: Some(vec![
            budget("gpu", DisruptionReason::Underutilized, 0, 4),
            budget("gpu", DisruptionReason::Drifted, 1, 4),
            // No nodes: nothing is blocked.
            budget("empty", DisruptionReason::Underutilized, 0, 0),
        ]),
        ..StepReport::default()
    };
    let events = events_of(&report, &subjects());
    assert_eq!(
        said(&events),
        [("DisruptionBlocked", false, Involved::NodePool("gpu".into()))]
    );
    assert_eq!(
        events[0].message,
        "No allowed disruptions for disruption reason Underutilized due to blocking budget"
    );
    let mut recorder = Recorder::default();
    assert!(recorder.should_publish(&events[0], at(0)));
    assert!(!recorder.should_publish(&events[0], at(59)));
    assert!(recorder.should_publish(&events[0], at(60)));
}

#[test]
fn what_keeps_a_node_from_disruption_is_told_on_it_and_do_not_disrupt_on_its_pods() {
    use joiner_controller::{DisruptionBlock, DoNotDisruptNote, Unconsolidatable};
    let until: k8s_openapi::jiff::Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
    let report = StepReport {
        disruption_blocked: vec![(
            "gpu-1".into(),
            DisruptionBlock::PodAnnotated("lab/a".into()),
        )],
        unconsolidatable: vec![("gpu-2".into(), Unconsolidatable::NotEmpty("gpu".into()))],
        do_not_disrupt: vec![
            ("lab/a".into(), "1h".into(), DoNotDisruptNote::Until(until)),
            ("lab/b".into(), "30m".into(), DoNotDisruptNote::Elapsed),
            ("lab/c".into(), "1d".into(), DoNotDisruptNote::Invalid),
        ],
        ..StepReport::default()
    };
    let events = events_of(&report, &subjects());
    assert_eq!(
        said(&events),
        [
            (
                "DisruptionBlocked",
                false,
                Involved::NodeClaim("gpu-1".into())
            ),
            (
                "DisruptionBlocked",
                false,
                Involved::Node("ip-10-0-0-1".into())
            ),
            (
                "Unconsolidatable",
                false,
                Involved::NodeClaim("gpu-2".into())
            ),
            ("DoNotDisruptUntil", false, Involved::Pod("lab/a".into())),
            (
                "DoNotDisruptGracePeriodElapsed",
                false,
                Involved::Pod("lab/b".into())
            ),
            (
                "InvalidDoNotDisruptAnnotation",
                true,
                Involved::Pod("lab/c".into())
            ),
        ]
    );
    let messages: Vec<&str> = events.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(
        messages[0],
        r#"Pod has "karpenter.sh/do-not-disrupt" annotation (Pod=lab/a)"#
    );
    assert_eq!(
        messages[2],
        r#"NodePool "gpu" has consolidation policy WhenEmpty, but node is not empty"#
    );
    assert_eq!(
        messages[3],
        "The karpenter.sh/do-not-disrupt grace period will elapse at 2026-01-01T01:00:00Z"
    );
    assert!(messages[5].contains(r#""1d""#), "{}", messages[5]);
    // Unconsolidatable is told once a quarter hour, as Karpenter's recorder keeps it.
    let mut recorder = Recorder::default();
    assert!(recorder.should_publish(&events[2], Duration::ZERO));
    assert!(!recorder.should_publish(&events[2], Duration::from_secs(14 * 60)));
    assert!(recorder.should_publish(&events[2], Duration::from_secs(15 * 60)));
    assert!(recorder.should_publish(&events[0], Duration::ZERO));
    assert!(recorder.should_publish(&events[0], Duration::from_secs(120)));
}

#[test]
fn a_reboot_that_ends_is_told_on_the_node_claim_and_its_node() {
    let step = |phase| joiner_controller::RebootStep {
        node_claim: "gpu-1".into(),
        node: "ip-10-0-0-1".into(),
        phase,
        message: "the reboot".into(),
    };
    let report = StepReport {
        reboots: vec![
            step(joiner_controller::RebootPhase::Requested),
            step(joiner_controller::RebootPhase::Succeeded),
            step(joiner_controller::RebootPhase::Failed(
                joiner_controller::RebootFailure::ProviderError,
            )),
        ],
        ..StepReport::default()
    };
    let events = events_of(&report, &subjects());
    let told: Vec<_> = said(&events)
        .into_iter()
        .filter(|(_, _, about)| *about == Involved::NodeClaim("gpu-1".into()))
        .collect();
    assert_eq!(
        told,
        [
            ("RebootObserved", false, Involved::NodeClaim("gpu-1".into())),
            ("RebootFailed", true, Involved::NodeClaim("gpu-1".into())),
        ]
    );
}
