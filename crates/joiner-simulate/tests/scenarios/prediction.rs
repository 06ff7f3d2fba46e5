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

fn resolved(yaml: &str) -> joiner_simulate::scenario::Resolved {
    serde_saphyr::from_str::<Scenario>(yaml)
        .expect("a scenario")
        .resolve()
        .expect("resolves")
}

/// The mispredictions the run's exposition counts for this type and subject.
fn mispredicted(
    telemetry: &joiner_simulate::telemetry::Observer,
    instance_type: &str,
    subject: &str,
) -> u64 {
    let prefix = format!(
        "joiner_nodeclaims_mispredicted_total{{instance_type=\"{instance_type}\",resource=\"{subject}\"}} "
    );
    telemetry
        .exposition()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// A pod claims all 8 GPUs of a p5en.48xlarge through DRA; the NVIDIA DRA driver publishes only
/// 7 there (a GPU fell off the bus). Joiner finds the node short once the driver's pool is
/// complete, says so, and plans the pod onto a type that has 8 (p6-b200.48xlarge), never again
/// onto a p5en.48xlarge.
#[test]
fn a_dra_driver_publishing_fewer_devices_is_found_and_not_planned_on_again() {
    let mut manifests = joiner_test_support::load_example("dra-specific-gpu");
    for t in &mut manifests.resource_claim_templates {
        for r in t
            .object
            .spec
            .iter_mut()
            .flat_map(|s| s.spec.iter_mut())
            .flat_map(|s| s.devices.iter_mut())
            .flat_map(|d| d.requests.iter_mut().flatten())
        {
            if let Some(e) = r.exactly.as_mut() {
                e.count = Some(8);
            }
        }
    }
    let values = joiner_test_support::example_values("dra-specific-gpu");
    let (settings, _) = Settings::from_values(&values).expect("settings");
    let scenario = resolved(
        "name: a GPU fell off the bus
start: 2026-01-01T00:00:00Z
tick: 10s
duration: 30m
steps:
  - at: 0s
    faults:
      draDriver:
        - {instanceType: p5en.48xlarge, driver: gpu.nvidia.com, publishes: 7}
",
    );
    let outcome =
        simulate_observed(&manifests, settings, &scenario, &mut |_, _| {}, true).expect("runs");
    // What was launched, in order (the short node goes once empty).
    let types: Vec<&str> = outcome
        .events
        .iter()
        .filter(|e| e["event"] == "created")
        .filter_map(|e| e["instanceType"].as_str())
        .collect();
    assert_eq!(
        types,
        ["p5en.48xlarge", "p6-b200.48xlarge"],
        "planned again on the disproved prediction, or not planned elsewhere"
    );
    assert_eq!(
        outcome.summary.pods_still_pending, 0,
        "{:#?}",
        outcome.summary
    );
    let telemetry = outcome.telemetry.expect("observed");
    assert_eq!(
        mispredicted(&telemetry, "p5en.48xlarge", "gpu.nvidia.com"),
        1,
        "{}",
        telemetry.exposition()
    );
    let failed: Vec<_> = telemetry
        .events()
        .iter()
        .filter(|e| e.reason == "FailedConsistencyCheck")
        .collect();
    assert_eq!(failed.len(), 1, "{failed:#?}");
    assert_eq!(
        failed[0].message,
        "expected 8 devices of DRA driver gpu.nvidia.com, but found 7 (87.5% of expected)"
    );
}

/// gpu-feature-discovery labels the lab's g4dn.xlarge nodes `nvidia.com/gpu.product=Tesla-T4`
/// where Joiner predicted `Tesla-T4-SHARED` (their sharing config names the resource). Joiner
/// notices on the first nodes, and the nodes launched when the lab grows carry the label as
/// GFD writes it, and are found consistent.
#[test]
fn a_label_gpu_feature_discovery_writes_otherwise_is_found_and_predicted_as_found() {
    let manifests = joiner_test_support::load_example("time-slicing-learning-lab");
    let scenario = resolved(
        "name: GFD says otherwise
start: 2026-01-01T00:00:00Z
tick: 10s
duration: 40m
steps:
  - at: 0s
    faults:
      gpuFeatureDiscovery:
        - {instanceType: g4dn.xlarge, label: nvidia.com/gpu.product, value: Tesla-T4}
  - at: 20m
    scale: {deployment: learning-lab, replicas: 8}
",
    );
    let outcome = simulate_observed(
        &manifests,
        Settings::default(),
        &scenario,
        &mut |_, _| {},
        true,
    )
    .expect("runs");
    assert_eq!(
        outcome.summary.pods_still_pending, 0,
        "{:#?}",
        outcome.summary
    );
    let product = |c: &&joiner_model::api::NodeClaim| {
        c.label("nvidia.com/gpu.product")
            .unwrap_or_default()
            .to_string()
    };
    let (found, later): (Vec<_>, Vec<_>) = outcome
        .node_claims
        .iter()
        .partition(|c| c.annotation(annotations::MISPREDICTED).is_some());
    assert!(!found.is_empty(), "no NodeClaim was found mislabelled");
    for c in &found {
        assert_eq!(product(c), "Tesla-T4-SHARED");
        let cond = c
            .condition(conditions::CONSISTENT_STATE_FOUND)
            .expect("ConsistentStateFound");
        assert_eq!(cond.status, "False", "{}", c.name());
        assert!(
            cond.message.contains(
                "expected label nvidia.com/gpu.product=Tesla-T4-SHARED, but found Tesla-T4"
            ),
            "{}",
            cond.message
        );
    }
    assert!(!later.is_empty(), "nothing launched after the finding");
    for c in &later {
        assert_eq!(
            product(c),
            "Tesla-T4",
            "{} kept the disproved label",
            c.name()
        );
        assert!(
            c.is_true(conditions::CONSISTENT_STATE_FOUND),
            "{}",
            c.name()
        );
    }
    let telemetry = outcome.telemetry.expect("observed");
    assert_eq!(
        mispredicted(&telemetry, "g4dn.xlarge", "nvidia.com/gpu.product"),
        found.len() as u64,
        "{}",
        telemetry.exposition()
    );
}
