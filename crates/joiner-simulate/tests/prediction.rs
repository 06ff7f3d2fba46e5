//! Predictions checked against reality: the learning lab's NodePool predicts 3 time-sliced
//! GPUs per g4dn.xlarge (its device-plugin ConfigMap says `replicas: 3`), but the nodes' device
//! plugin publishes 1 (the config never reached them). Joiner notices on the first nodes, says
//! so (condition, event, metric), plans on what the nodes offer, and never again launches on
//! the wrong prediction.

use joiner_model::Quantity;
use joiner_model::api::nodeclaim::conditions;
use joiner_model::settings::Settings;
use joiner_model::wellknown::annotations;
use joiner_simulate::scenario::Scenario;
use joiner_simulate::simulate_observed;

const GPU: &str = "nvidia.com/gpu";

fn scenario(publishes: u32) -> joiner_simulate::scenario::Resolved {
    let yaml = format!(
        "name: device plugin publishes {publishes}
start: 2026-01-01T00:00:00Z
tick: 10s
duration: 1h
steps:
  - at: 0s
    faults:
      devicePlugin:
        - {{instanceType: g4dn.xlarge, resource: {GPU}, publishes: {publishes}}}
"
    );
    serde_saphyr::from_str::<Scenario>(&yaml)
        .expect("a scenario")
        .resolve()
        .expect("resolves")
}

#[test]
fn a_node_with_fewer_gpus_than_predicted_is_reported_and_not_planned_on_again() {
    let manifests = joiner_test_support::load_example("time-slicing-learning-lab");
    let outcome = simulate_observed(
        &manifests,
        Settings::default(),
        &scenario(1),
        &mut |_, _| {},
        true,
    )
    .expect("runs");
    // Every lab pod runs in the end, on nodes that have a GPU for it.
    assert_eq!(
        outcome.summary.pods_still_pending, 0,
        "{:#?}",
        outcome.summary
    );
    let claims = &outcome.node_claims;
    let (found_short, planned_right): (Vec<_>, Vec<_>) = claims
        .iter()
        .partition(|c| c.annotation(annotations::MISPREDICTED).is_some());
    assert!(!found_short.is_empty(), "no NodeClaim was found short");
    for c in &found_short {
        let cond = c
            .condition(conditions::CONSISTENT_STATE_FOUND)
            .expect("ConsistentStateFound");
        assert_eq!(
            (cond.status.as_str(), cond.reason.as_str()),
            ("False", "ConsistencyCheckFailed")
        );
        assert!(
            cond.message
                .contains("expected 3 of resource nvidia.com/gpu, but found 1"),
            "{}",
            cond.message
        );
        // Corrected to what the node offers, so it initialized and runs a pod.
        assert_eq!(
            c.status.allocatable.get(GPU),
            Some(&Quantity::from_units(1))
        );
        assert!(c.is_true(conditions::INITIALIZED), "{}", c.name());
    }
    // Nodes planned after the finding were planned with one GPU each, and found consistent.
    assert!(
        !planned_right.is_empty(),
        "nothing planned after the finding"
    );
    for c in &planned_right {
        assert_eq!(
            c.status.allocatable.get(GPU),
            Some(&Quantity::from_units(1)),
            "{} was planned on the wrong prediction",
            c.name()
        );
        assert!(
            c.is_true(conditions::CONSISTENT_STATE_FOUND),
            "{}",
            c.name()
        );
    }
    // Four lab pods, one GPU each.
    assert_eq!(
        claims.len(),
        4,
        "{:?}",
        claims.iter().map(|c| c.name()).collect::<Vec<_>>()
    );

    let telemetry = outcome.telemetry.expect("observed");
    let failed: Vec<_> = telemetry
        .events()
        .iter()
        .filter(|e| e.reason == "FailedConsistencyCheck")
        .collect();
    assert_eq!(failed.len(), found_short.len(), "{failed:#?}");
    assert!(
        failed
            .iter()
            .all(|e| e.type_ == "Warning" && e.object.starts_with("NodeClaim/"))
    );
    let metric = format!(
        "joiner_nodeclaims_mispredicted_total{{instance_type=\"g4dn.xlarge\",resource=\"{GPU}\"}} {}",
        found_short.len()
    );
    assert!(
        telemetry.exposition().lines().any(|l| l == metric),
        "no `{metric}` in\n{}",
        telemetry.exposition()
    );
}

#[test]
fn a_node_whose_device_plugin_never_publishes_is_found_short_after_the_grace() {
    let manifests = joiner_test_support::load_example("time-slicing-learning-lab");
    let outcome = simulate_observed(
        &manifests,
        Settings::default(),
        &scenario(0),
        &mut |_, _| {},
        false,
    )
    .expect("runs");
    // No GPU ever appears: the first nodes are found to offer none (after 15 minutes), the
    // lab's pods wait, and nothing more is launched for them on the disproved prediction.
    assert_eq!(outcome.summary.pods_still_pending, 4);
    // Joiner knows they cannot run: they are unschedulable for want of a GPU, not left waiting
    // for the GPUs the disproved prediction promised on the nodes there are (which then go, as
    // empty nodes do).
    let unschedulable: Vec<_> = outcome
        .events
        .iter()
        .filter(|e| e["event"] == "unschedulable")
        .filter_map(|e| e["reason"].as_str())
        .collect();
    assert!(
        unschedulable
            .iter()
            .any(|r| r.contains("g4dn.xlarge: insufficient nvidia.com/gpu")),
        "{unschedulable:#?}"
    );
    assert_eq!(outcome.summary.final_nodes, 0, "{:#?}", outcome.summary);
    assert_eq!(
        outcome.summary.instances_launched, 2,
        "launched again on a disproved prediction: {:#?}",
        outcome.summary
    );
    for c in &outcome.node_claims {
        assert_eq!(
            c.condition(conditions::CONSISTENT_STATE_FOUND)
                .map(|c| c.status.as_str()),
            Some("False"),
            "{}",
            c.name()
        );
        assert_eq!(c.status.allocatable.get(GPU), Some(&Quantity::ZERO));
    }
}
