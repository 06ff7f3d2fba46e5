//! The controller against the in-memory cluster and the simulated cloud, on the learning-lab
//! example: two g4dn.xlarge nodes for four time-sliced GPU pods.

use crate::common;

use std::collections::BTreeMap;

use crate::common::{CLUSTER, Fuse, World, config, run_with_crashes};
use joiner_controller::Controller;
use joiner_controller::cloud::{CloudProvider, InstanceState, OfferingKey};
use joiner_controller::store::ClusterStore;
use joiner_engine::catalog::CapacityType;
use joiner_model::Quantity;
use joiner_model::api::nodeclaim::{NodeClaim, conditions};
use joiner_model::wellknown::{annotations, finalizers, labels, tags};
use joiner_simulate::{Registration, SimulatedCloud};
use k8s_openapi::api::core::v1::Node;

#[test]
fn pending_pods_become_two_initialized_nodes() {
    let world = World::learning_lab();
    let fuse = Fuse::new(BTreeMap::new());
    let reports = run_with_crashes(&world, &fuse, 60, |_, _| {});
    world.assert_settled(2);

    // Planned once the batch went idle (1 s after the pods were seen), both at once.
    let first = reports
        .iter()
        .position(|r| r.planned)
        .expect("a batch closed");
    assert_eq!(first, 1);
    assert_eq!(reports[first].created.len(), 2);
    assert_eq!(reports[first].launched.len(), 2);
    // Later batches (the NodeClaims changed what is pending) create nothing more.
    assert!(reports.iter().skip(first + 1).all(|r| r.created.is_empty()));
    assert!(
        reports.iter().all(|r| r.errors.is_empty()),
        "{:?}",
        reports.iter().flat_map(|r| &r.errors).collect::<Vec<_>>()
    );

    for c in world.live_claims() {
        // Karpenter's shape: finalizer, provider ID, predicted time-sliced GPUs.
        assert_eq!(
            c.metadata.finalizers.as_deref(),
            Some(&[finalizers::TERMINATION.to_string()][..])
        );
        assert!(
            c.status
                .provider_id
                .as_deref()
                .is_some_and(|p| p.starts_with("aws:///us-east-1"))
        );
        assert_eq!(
            c.status.allocatable.get("nvidia.com/gpu"),
            Some(&Quantity::from_units(3))
        );
        assert_eq!(c.label(labels::CAPACITY_TYPE), Some("on-demand"));
        assert_eq!(c.label(labels::NODEPOOL), Some("g4-nodepool"));
        for t in [
            conditions::LAUNCHED,
            conditions::REGISTERED,
            conditions::INITIALIZED,
            conditions::READY,
        ] {
            assert!(c.is_true(t), "{t}");
        }
        let json = serde_json::to_value(&c).expect("serializes");
        assert_eq!(json["apiVersion"], "karpenter.sh/v1");
        assert!(json["status"]["providerID"].is_string());
        assert_eq!(json["status"]["conditions"][0]["type"], "Launched");
        assert!(json["status"]["conditions"][0]["lastTransitionTime"].is_string());
        let pods = c
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotations::PLANNED_PODS))
            .cloned()
            .unwrap_or_default();
        assert!(!pods.is_empty());
    }
    let planned: usize = world
        .live_claims()
        .iter()
        .map(|c| {
            c.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(annotations::PLANNED_PODS))
                .map_or(0, |p| p.split(',').count())
        })
        .sum();
    assert_eq!(planned, 4);

    // The nodes carry the NodePool's labels and taint, and the GPUs the plan predicted.
    for n in world.store.list::<Node>().expect("nodes") {
        let l = n.metadata.labels.clone().unwrap_or_default();
        assert_eq!(l.get("nvidia.com/gpu").map(String::as_str), Some("true"));
        assert_eq!(l.get(labels::REGISTERED).map(String::as_str), Some("true"));
        let taints = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        assert!(taints.iter().any(|t| t.key == "nvidia.com/gpu"));
        let gpus = n
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| a.get("nvidia.com/gpu"))
            .cloned();
        assert_eq!(gpus.map(|q| q.0), Some("3".to_string()));
    }
}

#[test]
fn insufficient_capacity_on_the_cheapest_offering_falls_back_to_the_next() {
    let world = World::learning_lab();
    let ice = OfferingKey {
        instance_type: "g4dn.xlarge".into(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::OnDemand,
    };
    world.cloud.set_insufficient_capacity(ice.clone(), true);
    let fuse = Fuse::new(BTreeMap::new());
    let reports = run_with_crashes(&world, &fuse, 60, |_, _| {});
    world.assert_settled(2);
    // The planned (cheapest, first) zone had no capacity: marked, and the next zone used.
    assert!(
        reports
            .iter()
            .any(|r| r.unavailable.contains(&ice.to_string())),
        "the ICE path was not taken"
    );
    for i in world.running() {
        assert_ne!(i.zone, "us-east-1a");
        assert_eq!(i.instance_type, "g4dn.xlarge");
    }
    // One launch call per NodeClaim: the fallback happened inside the launch.
    assert_eq!(world.cloud.launch_calls(), 2);
}

/// The controller plans on what EC2 sells now, not on the built-in prices: once g5.xlarge costs
/// less than g4dn.xlarge, a NodePool allowing both launches g5.xlarge.
#[test]
fn the_plan_follows_the_prices_the_cloud_reports_now() {
    let world = World::learning_lab();
    let mut pool = world.node_pool();
    for r in &mut pool.spec.template.spec.requirements {
        if r.key == labels::INSTANCE_TYPE {
            r.values.push("g5.xlarge".into());
        }
    }
    world.store.update(&pool).expect("update");
    let g5 = world
        .cloud
        .instance_types()
        .expect("types")
        .into_iter()
        .find(|t| t.name == "g5.xlarge")
        .expect("g5.xlarge is sold");
    for o in g5
        .offerings
        .iter()
        .filter(|o| o.capacity_type == CapacityType::OnDemand)
    {
        world.cloud.set_price(
            OfferingKey {
                instance_type: g5.name.clone(),
                zone: o.zone.clone(),
                capacity_type: o.capacity_type,
            },
            joiner_model::Price::from_usd(0.10).expect("price"),
        );
    }
    let fuse = Fuse::new(BTreeMap::new());
    run_with_crashes(&world, &fuse, 60, |_, _| {});
    let claims = world.live_claims();
    assert_eq!(claims.len(), 2, "NodeClaims: {:?}", common::names(&claims));
    for c in &claims {
        assert!(c.is_true(conditions::INITIALIZED), "{}", c.name());
        assert_eq!(
            c.label(labels::INSTANCE_TYPE),
            Some("g5.xlarge"),
            "the cheaper type now"
        );
    }
    assert_eq!(world.running().len(), 2);
}

#[test]
fn insufficient_capacity_everywhere_deletes_the_nodeclaim_and_replans_later() {
    let world = World::learning_lab();
    let keys: Vec<_> = ["us-east-1a", "us-east-1b", "us-east-1c"]
        .iter()
        .map(|z| OfferingKey {
            instance_type: "g4dn.xlarge".into(),
            zone: (*z).into(),
            capacity_type: CapacityType::OnDemand,
        })
        .collect();
    for k in &keys {
        world.cloud.set_insufficient_capacity(k.clone(), true);
    }
    let fuse = Fuse::new(BTreeMap::new());
    let reports = run_with_crashes(&world, &fuse, 10, |_, _| {});
    assert!(world.cloud.all_instances().is_empty());
    assert!(reports.iter().any(|r| !r.deleted.is_empty()));
    // With every offering out of capacity the pods are unschedulable, and nothing is left over.
    assert!(world.store.list::<NodeClaim>().expect("list").is_empty());
    assert!(reports.iter().any(|r| r.unschedulable.len() == 4));
    // Capacity returns after the 3-minute window: the pods get their nodes.
    for k in &keys {
        world.cloud.set_insufficient_capacity(k.clone(), false);
    }
    let mut controller = common::fused_controller(&world, &fuse);
    for _ in 0..240 {
        controller.step();
        world.tick();
    }
    world.assert_settled(2);
}

#[test]
fn registration_timeout_deletes_the_nodeclaim_and_terminates_its_instance() {
    let world = World::learning_lab();
    let broken = SimulatedCloud::instance_id(1);
    world.cloud.set_registration(&broken, Registration::Never);
    let fuse = Fuse::new(BTreeMap::new());
    let reports = run_with_crashes(&world, &fuse, 15 * 60 + 90, |_, _| {});
    let instance = world.cloud.get(&broken).expect("get").expect("exists");
    assert_eq!(instance.state, InstanceState::Terminated);
    let timed_out = instance
        .tags
        .get(tags::NODECLAIM)
        .cloned()
        .unwrap_or_default();
    let deleted_at = reports
        .iter()
        .position(|r| r.deleted.contains(&timed_out))
        .expect("deleted");
    // Deleted 15 minutes after creation (step 1), not before.
    assert!(
        (15 * 60..15 * 60 + 5).contains(&deleted_at),
        "deleted at step {deleted_at}"
    );
    // Its pods were planned again: a third instance replaced it, and the end state is whole.
    world.assert_settled(3);
}

#[test]
fn garbage_collection_terminates_an_orphan_after_the_grace_period() {
    let world = World::learning_lab();
    let offering = OfferingKey {
        instance_type: "g4dn.xlarge".into(),
        zone: "us-east-1b".into(),
        capacity_type: CapacityType::OnDemand,
    };
    let mut ours = tags::ownership(CLUSTER, "g4-nodepool", "default");
    ours.insert(tags::NODECLAIM.to_string(), "g4-nodepool-gone".to_string());
    let orphan = world.cloud.launch_untracked(&offering, ours);
    let theirs = tags::ownership("another-cluster", "g4-nodepool", "default");
    let foreign = world.cloud.launch_untracked(&offering, theirs);
    // Collection every 10 s here, to see the 30 s grace exactly.
    let mut every_10s = config();
    every_10s.gc_period = std::time::Duration::from_secs(10);
    let mut controller = Controller::new(&world.store, &world.cloud, &world.clock, every_10s);
    let mut terminated_at = None;
    for step in 0..60 {
        let r = controller.step();
        if r.terminated.contains(&orphan.id) {
            terminated_at = Some(step);
        }
        world.tick();
    }
    assert_eq!(terminated_at, Some(30), "terminated once 30 s old");
    let state = |id: &str| world.cloud.get(id).expect("get").map(|i| i.state);
    assert_eq!(state(&orphan.id), Some(InstanceState::Terminated));
    assert_eq!(
        state(&foreign.id),
        Some(InstanceState::Running),
        "another cluster's instance"
    );
    world.assert_settled(4);
}

/// An instance with the ownership tags but no `karpenter.sh/nodeclaim` tag (Karpenter tags it
/// only at registration) is collected once past the grace period when no NodeClaim records
/// it; one a NodeClaim records is kept.
#[test]
fn garbage_collection_takes_an_owned_instance_that_names_no_nodeclaim_only_when_unrecorded() {
    let world = World::learning_lab();
    let offering = OfferingKey {
        instance_type: "g4dn.xlarge".into(),
        zone: "us-east-1b".into(),
        capacity_type: CapacityType::OnDemand,
    };
    let untagged = world.cloud.launch_untracked(
        &offering,
        tags::ownership(CLUSTER, "g4-nodepool", "default"),
    );
    let mut every_10s = config();
    every_10s.gc_period = std::time::Duration::from_secs(10);
    let mut controller = Controller::new(&world.store, &world.cloud, &world.clock, every_10s);
    let mut terminated_at = None;
    for step in 0..60 {
        let r = controller.step();
        if r.terminated.contains(&untagged.id) {
            terminated_at = Some(step);
        }
        world.tick();
    }
    assert_eq!(terminated_at, Some(30), "terminated once 30 s old");
    // The lab's own instances are recorded by their NodeClaims: none of them was touched, even
    // with the NodeClaim tag taken off one.
    let claim = world.live_claims().into_iter().next().expect("a NodeClaim");
    let id = common::instance_of(&claim);
    assert!(world.cloud.remove_tag(&id, tags::NODECLAIM));
    for _ in 0..60 {
        let r = controller.step();
        assert!(
            !r.terminated.contains(&id),
            "a recorded instance was terminated"
        );
        world.tick();
    }
    world.assert_settled(3);
}

/// Garbage collection lists every instance of the cluster: it runs at a controller's first
/// step and then every 2 minutes, not on every step.
#[test]
fn garbage_collection_runs_on_its_own_period() {
    let world = World::learning_lab();
    let mut controller = Controller::new(&world.store, &world.cloud, &world.clock, config());
    let mut runs = Vec::new();
    for step in 0..300 {
        if controller.step().collected {
            runs.push(step);
        }
        world.tick();
    }
    assert_eq!(runs, [0, 120, 240]);
}

#[test]
fn throttling_and_launch_errors_are_retried() {
    let world = World::learning_lab();
    world.cloud.fail_next_launches(1, "InternalError");
    let fuse = Fuse::new(BTreeMap::new());
    let reports = run_with_crashes(&world, &fuse, 90, |step, w| {
        if step == 1 || step == 20 {
            w.cloud.throttle_next_calls(3);
        }
    });
    assert!(reports.iter().any(|r| !r.errors.is_empty()));
    world.assert_settled(2);
}

#[test]
fn deleting_a_nodeclaim_drains_it_before_its_instance_goes() {
    let world = World::learning_lab();
    let fuse = Fuse::new(BTreeMap::new());
    // With the scheduler binding the pods to the nodes as they come up.
    run_with_crashes(&world, &fuse, 90, |_, w| w.before_step(&BTreeMap::new()));
    let serving = |w: &World, node: &str| {
        w.store
            .pods_on_node_uncached(node)
            .expect("pods")
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .count()
    };
    let claim = world
        .live_claims()
        .into_iter()
        .find(|c| {
            c.status
                .node_name
                .as_deref()
                .is_some_and(|n| serving(&world, n) > 0)
        })
        .expect("a NodeClaim whose node serves pods");
    let node = claim.status.node_name.clone().expect("node");
    let on_node = |w: &World| serving(w, &node);
    world
        .store
        .delete::<NodeClaim>(None, claim.name())
        .expect("delete");
    let marked = world
        .store
        .get::<NodeClaim>(None, claim.name())
        .expect("get")
        .expect("still there");
    assert!(
        marked.metadata.deletion_timestamp.is_some(),
        "the finalizer holds it"
    );
    let id = claim
        .status
        .provider_id
        .as_deref()
        .and_then(joiner_controller::cloud::instance_id_of)
        .expect("id")
        .to_string();
    let mut controller = Controller::new(&world.store, &world.cloud, &world.clock, config());
    let first = controller.step();
    assert!(
        !first.terminated.contains(&id),
        "not terminated under running pods"
    );
    assert!(
        first
            .disruption
            .iter()
            .any(|e| e.action == joiner_model::wellknown::DisruptionAction::Evicted),
        "{first:?}"
    );
    let mut terminated = false;
    for _ in 0..120 {
        world.tick();
        let r = controller.step();
        if r.terminated.contains(&id) {
            assert_eq!(on_node(&world), 0, "terminated only once its pods are gone");
            terminated = true;
            break;
        }
    }
    assert!(terminated, "the instance is terminated once drained");
    assert!(
        world
            .store
            .get::<NodeClaim>(None, claim.name())
            .expect("get")
            .is_none()
    );
    assert!(world.store.get::<Node>(None, &node).expect("get").is_none());
}

#[test]
fn pods_arriving_while_nodes_are_in_flight_use_their_room() {
    // The plan put three pods on one g4dn.xlarge and one on the other: two GPU replicas are
    // free on the second. A pod arriving while it is launching, and one arriving while it is
    // registered but its GPUs are not yet advertised, both fit there: no third node.
    let world = World::learning_lab();
    let fuse = Fuse::new(BTreeMap::new());
    let reports = run_with_crashes(&world, &fuse, 90, |step, w| match step {
        5 => w.another_lab_pod("learning-lab-4"),
        // Registered at 31 s, GPUs advertised at 41 s.
        35 => w.another_lab_pod("learning-lab-5"),
        _ => {}
    });
    assert!(
        reports.iter().filter(|r| r.planned).count() >= 3,
        "the new pods were planned"
    );
    assert!(reports.iter().all(|r| r.unschedulable.is_empty()));
    world.assert_settled(2);
}
