//! CapacityBuffers through the controller, on `examples/capacity-buffer-lab` with no lab pods
//! yet: the buffer's warm node is launched with nothing pending, its status says so as
//! Karpenter writes it, and consolidation leaves the warm node alone.

mod common;

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
