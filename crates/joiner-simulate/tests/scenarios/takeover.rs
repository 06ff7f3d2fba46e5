//! Taking over a fleet Karpenter launched (`examples/karpenter-takeover`): Karpenter is stopped
//! with 20 GPU nodes running, their NodeClaims, Nodes and instances as Karpenter left them, and
//! Joiner starts. Nothing may be launched, terminated, drained or found drifted: a GPU node
//! relaunched for a change of controller is hours of lost training.

use crate::common;

use std::collections::BTreeMap;

use crate::common::{CLUSTER, World, instance_of};
use joiner_controller::Controller;
use joiner_controller::cloud::{InstanceState, OfferingKey};
use joiner_controller::store::ClusterStore;

use joiner_model::api::NodePool;
use joiner_model::api::ec2nodeclass::{EC2NodeClass, PlacementGroupSelector};
use joiner_model::api::nodeclaim::{NodeClaim, conditions};
use joiner_model::settings::Settings;
use joiner_model::wellknown::{CapacityType, annotations, finalizers, labels, tags};
use joiner_simulate::scenario::Scenario;
use joiner_test_support::{example_dir, load_example};
use k8s_openapi::api::core::v1::Node;

const EXAMPLE: &str = "karpenter-takeover";

/// The zone of a provider ID (`aws:///<zone>/<instance-id>`).
fn zone_of(claim: &NodeClaim) -> String {
    let provider_id = claim.status.provider_id.as_deref().expect("provider ID");
    let rest = provider_id.trim_start_matches("aws:///");
    rest.split('/').next().expect("zone").to_string()
}

/// The world with the example's cluster, and in the cloud each NodeClaim's instance with the
/// tags Karpenter gives its instances.
fn karpenter_fleet() -> (World, Vec<NodeClaim>) {
    let world = World::new(&load_example(EXAMPLE));
    let claims = world.live_claims();
    for claim in &claims {
        let mut instance_tags = tags::ownership(CLUSTER, "gpu", "gpu");
        instance_tags.insert(tags::NODECLAIM.into(), claim.name().into());
        let offering = OfferingKey {
            instance_type: claim.label(labels::INSTANCE_TYPE).expect("type").into(),
            zone: zone_of(claim),
            capacity_type: CapacityType::OnDemand,
        };
        world
            .cloud
            .add_instance(&instance_of(claim), &offering, instance_tags)
            .expect("add the instance");
    }
    (world, claims)
}

#[test]
fn a_karpenter_fleet_is_taken_over_without_a_launch_a_termination_or_a_drift() {
    let (world, before) = karpenter_fleet();
    assert_eq!(before.len(), 20);
    let nodes_before = world.store.list::<Node>().expect("nodes");
    let workload: BTreeMap<_, _> = world.pods_by_key();
    let mut controller =
        Controller::new(&world.store, &world.cloud, &world.clock, common::config());
    // Two hours: past consolidation's wait, drift checks and garbage collection's grace.
    for _ in 0..7200 {
        world.before_step(&workload);
        let report = controller.step();
        assert!(report.created.is_empty(), "created {:?}", report.created);
        assert!(
            report.terminated.is_empty(),
            "terminated {:?}",
            report.terminated
        );
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        world.tick();
    }
    world.assert_nothing_pending();
    assert!(world.cloud.terminate_calls().is_empty());
    let after = world.live_claims();
    assert_eq!(common::names(&after), common::names(&before));
    for (claim, was) in after.iter().zip(&before) {
        let name = claim.name();
        assert_eq!(claim.status.provider_id, was.status.provider_id, "{name}");
        assert_eq!(
            world.instance_state(claim),
            Some(InstanceState::Running),
            "{name}"
        );
        assert!(!claim.is_true(conditions::DRIFTED), "{name} drifted");
        assert!(claim.is_true(conditions::READY), "{name} not ready");
        // Karpenter's hash stamps are replaced by Joiner's, not judged against them.
        assert_eq!(
            claim.annotation(annotations::NODEPOOL_HASH_VERSION),
            Some("joiner-v1"),
            "{name}"
        );
        assert_eq!(
            claim.metadata.finalizers.as_deref(),
            Some(&[finalizers::TERMINATION.to_string()][..]),
            "{name}"
        );
    }
    // No node was cordoned, tainted for disruption or deleted.
    let nodes_after = world.store.list::<Node>().expect("nodes");
    assert_eq!(nodes_after.len(), nodes_before.len());
    for node in &nodes_after {
        let spec = node.spec.as_ref().expect("spec");
        assert_ne!(
            spec.unschedulable,
            Some(true),
            "{:?} cordoned",
            node.metadata.name
        );
        let taints: Vec<&str> = spec
            .taints
            .iter()
            .flatten()
            .map(|t| t.key.as_str())
            .collect();
        assert_eq!(taints, ["nvidia.com/gpu"], "{:?}", node.metadata.name);
    }
}

/// The same takeover through `joiner simulate` on the example's files: the scenario adds the
/// instances with Karpenter's tags at the start, and six simulated hours later the fleet is as
/// it was.
#[test]
fn the_takeover_example_simulates_without_a_launch_or_a_disruption() {
    let dir = example_dir(EXAMPLE);
    let manifests = load_example(EXAMPLE);
    let resolved = Scenario::load(&dir.join("scenario.yaml")).expect("scenario");
    let outcome =
        joiner_simulate::simulate(&manifests, Settings::default(), &resolved, &mut |_, _| {})
            .expect("simulates");
    let s = &outcome.summary;
    assert_eq!(s.instances_launched, 0);
    assert_eq!(s.node_claims_created, 0);
    assert_eq!((s.peak_nodes, s.final_nodes), (20, 20));
    assert!(s.disruptions.is_empty(), "{:?}", s.disruptions);
    assert_eq!(s.errors, 0);
    assert_eq!(s.pods_still_pending, 0);
    let ended: Vec<_> = outcome
        .events
        .iter()
        .filter(|e| {
            let kind = e["event"].as_str().unwrap_or_default();
            kind == "terminated" || kind == "deleted" || kind.starts_with("disruption.")
        })
        .collect();
    assert!(ended.is_empty(), "{ended:?}");
}

/// What a test does to the world, and what it says it did.
type Edit = (&'static str, fn(&World));

/// A fleet whose NodePool Joiner leaves alone (a static pool while the StaticCapacity gate is
/// off, as it is by default) or whose EC2NodeClass it refuses (a class with a placement group)
/// is left exactly as it is: launches stop for the pool, never the nodes it already has.
#[test]
fn a_fleet_of_a_pool_or_class_joiner_refuses_is_left_as_it_is() {
    let edits: [Edit; 2] = [
        ("a static NodePool", |world| {
            let mut pool: NodePool = world
                .store
                .get(None, "gpu")
                .expect("get")
                .expect("the pool");
            pool.spec.replicas = Some(20);
            world.store.update(&pool).expect("update the pool");
        }),
        ("a class with a placement group", |world| {
            let mut class = world
                .store
                .get::<EC2NodeClass>(None, "gpu")
                .expect("get")
                .expect("the class");
            class.spec.placement_group_selector = Some(PlacementGroupSelector {
                name: Some("training".into()),
                id: None,
            });
            world.store.update(&class).expect("update the class");
        }),
    ];
    for (what, edit) in edits {
        let (world, before) = karpenter_fleet();
        edit(&world);
        let workload: BTreeMap<_, _> = world.pods_by_key();
        let mut controller =
            Controller::new(&world.store, &world.cloud, &world.clock, common::config());
        for _ in 0..3600 {
            world.before_step(&workload);
            let report = controller.step();
            assert!(
                report.created.is_empty(),
                "{what}: created {:?}",
                report.created
            );
            assert!(
                report.terminated.is_empty(),
                "{what}: terminated {:?}",
                report.terminated
            );
            world.tick();
        }
        assert!(world.cloud.terminate_calls().is_empty(), "{what}");
        assert_eq!(
            common::names(&world.live_claims()),
            common::names(&before),
            "{what}"
        );
        world.assert_nothing_pending();
    }
}
