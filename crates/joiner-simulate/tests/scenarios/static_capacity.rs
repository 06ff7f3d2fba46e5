//! Static NodePools in the controller (`examples/static-gpu-fleet`): exactly `replicas`
//! NodeClaims, launched without pods, scaled down through termination, replaced one for one on
//! drift, never duplicated behind a lagging cache, and left alone with the gate off.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::{CLUSTER, World};
use joiner_controller::clock::ManualClock;
use joiner_controller::cloud::CloudProvider;
use joiner_controller::store::{CachedClient, ClusterStore, InMemoryCluster};
use joiner_controller::{Config, Controller, StepReport};
use joiner_model::api::NodePool;
use joiner_model::settings::Settings;
use joiner_simulate::SimulatedCloud;
use k8s_openapi::api::core::v1::Pod;

type Ctl<'a> = Controller<&'a InMemoryCluster, &'a SimulatedCloud, ManualClock>;

fn config(gate: bool) -> Config {
    let values = serde_json::json!({"settings": {
        "clusterName": CLUSTER,
        "featureGates": {"staticCapacity": gate},
    }});
    let (settings, _) = Settings::from_values(&values).expect("settings");
    Config::new(settings).expect("config")
}

fn world(gate: bool) -> (World, BTreeMap<String, Pod>) {
    let mut world = World::new(&joiner_test_support::load_example("static-gpu-fleet"));
    world.config = config(gate);
    let workload = world.pods_by_key();
    (world, workload)
}

fn controller(world: &World) -> Ctl<'_> {
    Controller::new(
        &world.store,
        &world.cloud,
        world.clock.clone(),
        world.config.clone(),
    )
}

/// A controller reading through watch caches, as the live one does
/// ([`InMemoryCluster::set_cache_lag`] and [`InMemoryCluster::set_kind_lag`] make them trail).
fn cached_controller(world: &World) -> Controller<CachedClient<'_>, &SimulatedCloud, ManualClock> {
    Controller::new(
        CachedClient::new(&world.store),
        &world.cloud,
        world.clock.clone(),
        world.config.clone(),
    )
}

fn run<S: ClusterStore, C: CloudProvider>(
    world: &World,
    c: &mut Controller<S, C, ManualClock>,
    workload: &BTreeMap<String, Pod>,
    secs: u64,
) -> Vec<StepReport> {
    let mut reports = Vec::new();
    for _ in 0..secs {
        world.before_step(workload);
        let r = c.step();
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        reports.push(r);
        world.assert_one_instance_per_claim();
        world.tick();
    }
    reports
}

fn scale(world: &World, replicas: i64) {
    let mut pool: NodePool = world
        .store
        .get(None, "gpu-fleet")
        .expect("get")
        .expect("the pool");
    pool.spec.replicas = Some(replicas);
    world.store.update(&pool).expect("scale");
}

#[test]
fn a_static_pool_of_three_launches_three_and_scales_down_through_termination() {
    let (world, workload) = world(true);
    let mut c = controller(&world);
    run(&world, &mut c, &workload, 120);
    let mut names = world.live_names();
    names.sort();
    assert_eq!(
        names,
        [
            "gpu-fleet-static-0",
            "gpu-fleet-static-1",
            "gpu-fleet-static-2"
        ]
    );
    assert_eq!(world.running().len(), 3);
    // The pods run on the static nodes; nothing else was launched for them.
    world.assert_nothing_pending();

    scale(&world, 1);
    let reports = run(&world, &mut c, &workload, 180);
    let deleted: Vec<&String> = reports.iter().flat_map(|r| &r.deleted).collect();
    // The empty node first, then the one whose pod costs least to evict (ties by name).
    assert_eq!(deleted, ["gpu-fleet-static-2", "gpu-fleet-static-0"]);
    // Termination drained the busy one: its pod was evicted, not deleted.
    let evicted: usize = reports
        .iter()
        .flat_map(|r| &r.disruption)
        .filter(|e| e.action == joiner_model::wellknown::DisruptionAction::Evicted)
        .count();
    assert_eq!(evicted, 1);
    assert_eq!(world.live_names(), ["gpu-fleet-static-1"]);
    assert_eq!(world.running().len(), 1);
    // The evicted pod waits: the static pool never grows for pods.
    let created: usize = reports.iter().map(|r| r.created.len()).sum();
    assert_eq!(created, 0);

    // Scaling up again fills the lowest free slots.
    scale(&world, 3);
    run(&world, &mut c, &workload, 120);
    let mut names = world.live_names();
    names.sort();
    assert_eq!(
        names,
        [
            "gpu-fleet-static-0",
            "gpu-fleet-static-1",
            "gpu-fleet-static-2"
        ]
    );
    world.assert_nothing_pending();
}

#[test]
fn a_lagging_cache_and_timed_out_creates_never_make_a_fourth_node() {
    let (world, workload) = world(true);
    world.store.set_cache_lag(Duration::from_secs(20));
    world.store.time_out_next_creates(2);
    let mut c = cached_controller(&world);
    for _ in 0..300 {
        world.before_step(&workload);
        c.step();
        world.tick();
        assert!(world.live_names().len() <= 3, "{:?}", world.live_names());
        assert!(world.running().len() <= 3);
    }
    assert_eq!(world.live_names().len(), 3);
    // Scaling down behind the same cache removes exactly two, once each.
    scale(&world, 1);
    let mut deleted = Vec::new();
    for _ in 0..300 {
        world.before_step(&workload);
        deleted.extend(c.step().deleted);
        world.tick();
    }
    deleted.sort();
    deleted.dedup();
    assert_eq!(deleted.len(), 2, "{deleted:?}");
    assert_eq!(world.live_names().len(), 1);
}

/// The uids of the live NodeClaims: a slot's name comes back once its NodeClaim is gone.
fn uids(world: &World) -> Vec<String> {
    world
        .live_claims()
        .iter()
        .filter_map(|c| c.metadata.uid.clone())
        .collect()
}

#[test]
fn a_drifted_static_node_is_replaced_one_for_one() {
    let (world, workload) = world(true);
    let mut c = controller(&world);
    run(&world, &mut c, &workload, 120);
    let before = uids(&world);
    // A new template label: every node drifts. `limits.nodes: 4` lets one replacement in at
    // a time; the budget (10% by default, at least one) one drift at a time.
    let mut pool: NodePool = world
        .store
        .get(None, "gpu-fleet")
        .expect("get")
        .expect("pool");
    pool.spec
        .template
        .metadata
        .labels
        .insert("revision".into(), "2".into());
    world.store.update(&pool).expect("update");
    let mut most = 0;
    for _ in 0..1800 {
        world.before_step(&workload);
        let r = c.step();
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        world.tick();
        let all: usize = world
            .store
            .list::<joiner_model::api::NodeClaim>()
            .expect("claims")
            .len();
        most = most.max(all);
    }
    let after = uids(&world);
    assert_eq!(after.len(), 3, "{after:?}");
    assert!(
        before.iter().all(|n| !after.contains(n)),
        "every node replaced: {before:?} -> {after:?}"
    );
    assert!(
        world
            .live_names()
            .iter()
            .all(|n| n.starts_with("gpu-fleet-static-"))
    );
    assert!(
        most <= 4,
        "limits.nodes: at most 4 NodeClaims at once, saw {most}"
    );
    world.assert_nothing_pending();
}

#[test]
fn with_the_gate_off_nothing_is_launched_or_removed() {
    let (world, workload) = world(false);
    let mut c = controller(&world);
    let reports = run(&world, &mut c, &workload, 120);
    assert!(reports.iter().all(|r| r.created.is_empty()));
    assert!(world.live_names().is_empty());
}

/// `kubectl delete nodeclaim` on one node as the pool is scaled from 3 to 2, while the
/// NodeClaim watch trails by 30 s and the NodePool watch does not: the cache shows the new
/// count while it still shows the deleted NodeClaim running, but the pool's NodeClaims are read
/// again from the API server before any is removed, so no second node goes.
#[test]
fn a_node_deleted_by_hand_during_a_scale_down_is_counted_as_gone() {
    let (world, workload) = world(true);
    let mut c = cached_controller(&world);
    run(&world, &mut c, &workload, 120);
    world
        .store
        .set_kind_lag("NodeClaim", Duration::from_secs(30));
    run(&world, &mut c, &workload, 1);
    world
        .store
        .delete::<joiner_model::api::NodeClaim>(None, "gpu-fleet-static-1")
        .expect("delete by hand");
    scale(&world, 2);
    let mut removed = Vec::new();
    for _ in 0..300 {
        world.before_step(&workload);
        removed.extend(c.step().deleted);
        world.tick();
    }
    removed.retain(|n| n != "gpu-fleet-static-1");
    assert!(
        removed.is_empty(),
        "removed besides the one deleted by hand: {removed:?}"
    );
    assert_eq!(
        world.live_names(),
        ["gpu-fleet-static-0", "gpu-fleet-static-2"]
    );
}
