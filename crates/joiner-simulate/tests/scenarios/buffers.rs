//! CapacityBuffers through the controller, on `examples/capacity-buffer-lab` with no lab pods
//! yet: the buffer's warm node is launched with nothing pending, its status says so as
//! Karpenter writes it, and consolidation leaves the warm node alone.

use crate::common;

use std::collections::BTreeMap;

use joiner_controller::Controller;
use joiner_controller::store::ClusterStore;
use joiner_model::api::capacitybuffer::CapacityBuffer;
use joiner_model::feature_gates::FeatureGates;

fn world(gate: bool) -> common::World {
    let mut m = joiner_test_support::load_example("capacity-buffer-lab");
    for d in &mut m.deployments {
        d.object.spec.replicas = Some(0);
    }
    let mut world = common::World::new(&m);
    let mut warnings = Vec::new();
    world.config.settings.feature_gates = FeatureGates::from_values(
        "settings.featureGates",
        &[("capacityBuffer".to_string(), gate)].into(),
        &mut warnings,
    );
    world
}

fn condition(b: &CapacityBuffer, t: &str) -> Option<(String, String)> {
    b.status
        .conditions
        .iter()
        .find(|c| c.type_ == t)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[test]
fn a_buffer_gets_its_warm_node_and_keeps_it() {
    let world = world(true);
    let mut c = Controller::new(
        &world.store,
        &world.cloud,
        world.clock.clone(),
        world.config.clone(),
    );
    let none = BTreeMap::new();
    let mut created = Vec::new();
    let mut statuses = Vec::new();
    for _ in 0..30 {
        world.before_step(&none);
        let r = c.step();
        created.extend(r.created);
        world.tick();
        let b = world.store.list::<CapacityBuffer>().expect("buffers");
        statuses.push(condition(&b[0], "Provisioning"));
    }
    assert_eq!(
        created.len(),
        1,
        "one warm node for three seats: {created:?}"
    );
    let buffer = world.store.list::<CapacityBuffer>().expect("buffers")[0].clone();
    assert_eq!(buffer.status.replicas, Some(3));
    assert_eq!(
        condition(&buffer, "ReadyForProvisioning"),
        Some(("True".into(), "Resolved".into()))
    );
    // The first plan needed new capacity; once the warm node is in flight its seats fit there.
    assert!(
        statuses.contains(&Some(("False".into(), "RequiresNewCapacity".into()))),
        "{statuses:?}"
    );
    assert_eq!(
        condition(&buffer, "Provisioning"),
        Some(("True".into(), "FitsExistingCapacity".into()))
    );
    // An hour on, the warm node is still there: not consolidated as empty, not launched again.
    let mut later = Vec::new();
    for _ in 0..360 {
        world.before_step(&none);
        let r = c.step();
        later.extend(r.created);
        later.extend(r.deleted);
        world.clock.advance(std::time::Duration::from_secs(9));
        world.tick();
    }
    assert!(later.is_empty(), "{later:?}");
    assert_eq!(world.live_claims().len(), 1);
}

#[test]
fn without_the_gate_nothing_is_kept_or_written() {
    let world = world(false);
    let mut c = Controller::new(
        &world.store,
        &world.cloud,
        world.clock.clone(),
        world.config.clone(),
    );
    let none = BTreeMap::new();
    for _ in 0..30 {
        world.before_step(&none);
        assert!(c.step().created.is_empty());
        world.tick();
    }
    let buffer = world.store.list::<CapacityBuffer>().expect("buffers")[0].clone();
    assert!(buffer.status.conditions.is_empty());
}

#[test]
fn a_buffer_of_a_share_of_a_deployment_reads_the_deployment_from_the_cluster() {
    let mut m = joiner_test_support::load_example("capacity-buffer-lab");
    // Three quarters of the lab's 4 replicas, rounded up: 3 seats.
    m.capacity_buffers[0].object.spec = serde_json::from_value(serde_json::json!({
        "scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "learning-lab"},
        "percentage": 75,
    }))
    .expect("a spec");
    let mut world = common::World::new(&m);
    let mut warnings = Vec::new();
    world.config.settings.feature_gates = FeatureGates::from_values(
        "settings.featureGates",
        &[("capacityBuffer".to_string(), true)].into(),
        &mut warnings,
    );
    let mut c = Controller::new(
        &world.store,
        &world.cloud,
        world.clock.clone(),
        world.config.clone(),
    );
    let workload = world.pods_by_key();
    let mut created = Vec::new();
    for _ in 0..60 {
        world.before_step(&workload);
        created.extend(c.step().created);
        world.tick();
    }
    let buffer = world.store.list::<CapacityBuffer>().expect("buffers")[0].clone();
    assert_eq!(buffer.status.replicas, Some(3), "{:?}", buffer.status);
    assert_eq!(
        condition(&buffer, "ReadyForProvisioning"),
        Some(("True".into(), "Resolved".into()))
    );
    assert_eq!(
        buffer.status.pod_template_ref, None,
        "a scalableRef buffer names no template"
    );
    // The lab's 4 pods and 3 seats: 7 time-sliced GPUs, three nodes.
    assert_eq!(created.len(), 3, "{created:?}");
    world.assert_nothing_pending();
}
