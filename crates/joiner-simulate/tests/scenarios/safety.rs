//! Safe in a real cluster: the controller against doubles that behave as EC2 and the API server
//! do when they are not kind. Instances other tools launched are never touched; one need gets
//! one NodeClaim and one instance through timeouts, lagging caches and lagging listings, and
//! with two controllers racing; a NodeClaim, NodePool or EC2NodeClass that does not decode keeps
//! its instances; a launch the cloud
//! rejects backs off.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::{CLUSTER, HookedStore, World};
use joiner_controller::cloud::{CloudProvider, Instance, OfferingKey};
use joiner_controller::store::{CachedClient, ClusterStore, ObjectKey, StoreError};
use joiner_controller::{Config, Controller, StepReport};
use joiner_engine::catalog::CapacityType;
use joiner_model::api::nodeclaim::{NodeClaim, conditions};
use joiner_model::api::{EC2NodeClass, NodePool};
use joiner_model::wellknown::{annotations, tags};

fn offering(instance_type: &str) -> OfferingKey {
    OfferingKey {
        instance_type: instance_type.into(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::OnDemand,
    }
}

/// Steps the controller `steps` times, one second apart, checking after each step that no
/// need has two NodeClaims in flight and no NodeClaim two instances.
fn run<S: ClusterStore, C: CloudProvider>(
    world: &World,
    controller: &mut Controller<S, C, &joiner_controller::clock::ManualClock>,
    steps: usize,
) -> Vec<StepReport> {
    let workload = world.pods_by_key();
    let mut reports = Vec::new();
    for _ in 0..steps {
        world.before_step(&workload);
        reports.push(controller.step());
        world.assert_one_instance_per_claim();
        world.assert_no_duplicate_need();
        world.tick();
    }
    reports
}

fn controller<'a>(
    world: &'a World,
    config: Config,
) -> Controller<
    CachedClient<'a>,
    &'a joiner_simulate::SimulatedCloud,
    &'a joiner_controller::clock::ManualClock,
> {
    Controller::new(
        CachedClient::new(&world.store),
        &world.cloud,
        &world.clock,
        config,
    )
}

/// Instances of a managed node group, a self-managed node and another cluster's Joiner carry
/// the cluster tag or look like Joiner's; none is ever listed, terminated or collected. An
/// orphan with Karpenter's full tags (Joiner replacing Karpenter) is collected.
#[test]
fn instances_other_tools_launched_are_never_touched() {
    let world = World::learning_lab();
    let mut node_group = BTreeMap::from([
        (tags::cluster(CLUSTER), tags::OWNED.to_string()),
        (tags::CLUSTER_NAME.to_string(), CLUSTER.to_string()),
        (tags::NODEGROUP.to_string(), "system".to_string()),
    ]);
    let system = world
        .cloud
        .add_instance(
            "i-0system00000001",
            &offering("m5.large"),
            node_group.clone(),
        )
        .expect("add");
    // A node group instance that also carries NodePool-like tags is still not Joiner's.
    node_group.extend(tags::ownership(CLUSTER, "g4-nodepool", "default"));
    let disguised = world
        .cloud
        .add_instance("i-0system00000002", &offering("m5.large"), node_group)
        .expect("add");
    let self_managed = world
        .cloud
        .add_instance(
            "i-0selfmanaged001",
            &offering("m5.large"),
            BTreeMap::from([(tags::cluster(CLUSTER), tags::OWNED.to_string())]),
        )
        .expect("add");
    let mut elsewhere = tags::ownership("another-cluster", "g4-nodepool", "default");
    elsewhere.insert(tags::NODECLAIM.into(), "g4-nodepool-gone".into());
    let other_cluster = world
        .cloud
        .add_instance("i-0othercluster01", &offering("g4dn.xlarge"), elsewhere)
        .expect("add");
    let mut karpenter = tags::ownership(CLUSTER, "g4-nodepool", "default");
    karpenter.insert(tags::NODECLAIM.into(), "g4-nodepool-abcde".into());
    let orphan = world
        .cloud
        .add_instance("i-0karpenter00001", &offering("g4dn.xlarge"), karpenter)
        .expect("add");
    let listed: Vec<String> = world
        .cloud
        .list(CLUSTER)
        .expect("list")
        .into_iter()
        .map(|i: Instance| i.id)
        .collect();
    assert_eq!(
        listed,
        std::slice::from_ref(&orphan.id),
        "only instances with every ownership tag"
    );

    let mut c = controller(&world, world.config.clone());
    run(&world, &mut c, 300);
    let touched = world.cloud.terminate_calls();
    for foreign in [&system, &disguised, &self_managed, &other_cluster] {
        assert!(
            !touched.contains(&foreign.id),
            "{} was terminated",
            foreign.id
        );
    }
    assert!(
        touched.contains(&orphan.id),
        "the orphan with Karpenter's tags is collected"
    );
    world.assert_settled(2 + 5);
}

/// An instance whose NodeClaim exists but does not decode (written by a newer Karpenter, say)
/// is kept, and reported, however long the controller runs.
#[test]
fn a_nodeclaim_that_does_not_decode_keeps_its_instance() {
    let world = World::learning_lab();
    let mut c = controller(&world, world.config.clone());
    run(&world, &mut c, 120);
    world.assert_settled(2);
    let claim = world.live_claims()[0].clone();
    let instance = common::instance_of(&claim);
    let mut raw = serde_json::to_value(&claim).expect("json");
    raw["spec"]["requirements"][0]["operator"] = "Between".into();
    world
        .store
        .put_undecodable(ObjectKey::of::<NodeClaim>(None, claim.name()), raw);
    let mut c = controller(&world, world.config.clone());
    let reports = run(&world, &mut c, 400);
    assert!(!world.cloud.terminate_calls().contains(&instance));
    assert!(
        reports.iter().any(|r| r
            .kept
            .iter()
            .any(|(i, n)| *i == instance && n == claim.name())),
        "the kept instance is reported"
    );
}

/// A NodePool or an EC2NodeClass that does not decode (written by a newer Karpenter, say)
/// still exists: its NodeClaims are not orphans of a deleted NodePool, nothing of it is
/// drained, deleted or terminated, and the controller goes on stepping.
#[test]
fn a_node_pool_or_class_that_does_not_decode_keeps_its_nodes() {
    let world = World::learning_lab();
    let mut c = controller(&world, world.config.clone());
    run(&world, &mut c, 120);
    world.assert_settled(2);
    let before = world.live_names();
    let pool = world.node_pool();
    let class = pool.spec.template.spec.node_class_ref.name.clone();
    let mut raw = serde_json::to_value(&pool).expect("json");
    raw["spec"]["template"]["spec"]["nodeClassRef"] = 7.into();
    world.store.put_undecodable(
        ObjectKey::of::<NodePool>(None, pool.metadata.name.as_deref().expect("name")),
        raw,
    );
    let mut c = controller(&world, world.config.clone());
    let reports = run(&world, &mut c, 300);
    assert_eq!(world.live_names(), before);
    assert!(world.cloud.terminate_calls().is_empty());
    assert!(
        reports.iter().all(|r| r.deleted.is_empty()),
        "nothing is deleted"
    );

    // The class too: still nothing moves.
    let class_obj: EC2NodeClass = world.store.get(None, &class).expect("get").expect("class");
    let mut raw = serde_json::to_value(&class_obj).expect("json");
    raw["spec"]["role"] = serde_json::json!({"not": "a role"});
    world
        .store
        .put_undecodable(ObjectKey::of::<EC2NodeClass>(None, &class), raw);
    run(&world, &mut c, 300);
    assert_eq!(world.live_names(), before);
    assert!(world.cloud.terminate_calls().is_empty());
}

#[test]
fn an_unreadable_nodeclaim_list_collects_nothing() {
    let world = World::learning_lab();
    let mut c = controller(&world, world.config.clone());
    run(&world, &mut c, 120);
    world.assert_settled(2);
    let instances: Vec<String> = world.running().into_iter().map(|i| i.id).collect();
    // A store whose NodeClaim listing fails (caches not synced, the CRD missing, the API
    // server down): garbage collection must conclude nothing.
    let mut unreadable = HookedStore::new(&world.store);
    unreadable.failing_list = Some((
        "NodeClaim",
        StoreError::Unavailable(
            "NodeClaim (karpenter.sh/v1/nodeclaims): not served by the API server".into(),
        ),
    ));
    let mut blind = Controller::new(unreadable, &world.cloud, &world.clock, world.config.clone());
    for _ in 0..300 {
        let r = blind.step();
        assert!(r.terminated.is_empty() && r.deleted.is_empty(), "{r:?}");
        world.tick();
    }
    assert!(world.cloud.terminate_calls().is_empty());
    let still: Vec<String> = world.running().into_iter().map(|i| i.id).collect();
    assert_eq!(still, instances);
}

/// NodeClaim creates that commit and then answer a timeout, behind a watch cache that trails
/// the API server by 20 s: the retried create finds the committed NodeClaim on the server
/// and adopts it; no need gets a second NodeClaim or instance.
#[test]
fn creates_that_time_out_behind_a_lagging_cache_never_duplicate_a_need() {
    let world = World::learning_lab();
    world.store.set_cache_lag(Duration::from_secs(20));
    world.store.time_out_next_creates(2);
    let mut c = controller(&world, world.config.clone());
    let reports = run(&world, &mut c, 300);
    world.assert_settled(2);
    let created: usize = reports.iter().map(|r| r.created.len()).sum();
    assert!(created <= 2, "{created} NodeClaims reported created");
    let names: Vec<String> = world.live_names();
    assert!(
        names.iter().all(|n| !n.ends_with("-1")),
        "no second name invented for a need: {names:?}"
    );
}

/// A launch that starts its instance and then answers a timeout, while the cloud's listing
/// trails launches by 30 s (so the instance tagged with the NodeClaim cannot be found by
/// listing): the retry carries the same client token and gets the same instance.
#[test]
fn a_launch_that_times_out_is_retried_with_its_client_token() {
    let world = World::learning_lab();
    world.cloud.set_list_lag(Duration::from_secs(30));
    world.cloud.time_out_next_launches(2);
    let mut c = controller(&world, world.config.clone());
    run(&world, &mut c, 400);
    // Exactly two instances ever: a retry without the token would have launched a third and
    // fourth, and garbage collection terminated them later.
    world.assert_settled(2);
    assert!(world.cloud.terminate_calls().is_empty());
}

/// EC2 answers NotFound for a fresh instance and its listings trail launches by 100 s;
/// garbage collection runs every step here. No NodeClaim is deleted for an instance that is
/// merely not visible yet, so nothing is launched twice.
#[test]
fn an_instance_not_yet_visible_keeps_its_nodeclaim() {
    let world = World::learning_lab();
    world.cloud.set_list_lag(Duration::from_secs(100));
    let mut config = world.config.clone();
    config.gc_period = Duration::from_secs(1);
    let mut c = controller(&world, config);
    let reports = run(&world, &mut c, 400);
    let deleted: Vec<&String> = reports.iter().flat_map(|r| &r.deleted).collect();
    assert!(deleted.is_empty(), "deleted {deleted:?}");
    world.assert_settled(2);
}

/// A NodeClaim whose instance the cloud really terminated is deleted at the next collection,
/// without the NotFound grace.
#[test]
fn a_terminated_instance_frees_its_nodeclaim() {
    let world = World::learning_lab();
    let mut c = controller(&world, world.config.clone());
    run(&world, &mut c, 120);
    world.assert_settled(2);
    let claim = world.live_claims()[0].clone();
    world
        .cloud
        .terminate(&common::instance_of(&claim))
        .expect("terminate");
    let reports = run(&world, &mut c, 130);
    assert!(
        reports
            .iter()
            .any(|r| r.deleted.iter().any(|d| d == claim.name()))
    );
}

/// Two controllers (two leaders overlapping), each with its own lagging watch cache, step the
/// same cluster and cloud in turn: still one NodeClaim and one instance per need.
#[test]
fn two_controllers_racing_launch_once_per_need() {
    let world = World::learning_lab();
    world.store.set_cache_lag(Duration::from_secs(5));
    world.cloud.set_list_lag(Duration::from_secs(10));
    let mut a = controller(&world, world.config.clone());
    let mut b = controller(&world, world.config.clone());
    let workload = world.pods_by_key();
    for _ in 0..400 {
        world.before_step(&workload);
        a.step();
        b.step();
        world.assert_one_instance_per_claim();
        world.assert_no_duplicate_need();
        world.tick();
    }
    world.assert_settled(2);
}

/// A launch the cloud rejects (not authorized) marks the NodeClaim and backs off: the
/// following attempts come 30 s, then 60 s later, not on every step.
#[test]
fn a_rejected_launch_backs_off_and_says_why() {
    let world = World::learning_lab();
    world.cloud.reject_next_launches(
        4,
        "UnauthorizedOperation: You are not authorized to perform this operation.",
    );
    let mut c = controller(&world, world.config.clone());
    let mut calls = Vec::new();
    for t in 0..200u64 {
        let before = world.cloud.launch_calls();
        world.before_step(&world.pods_by_key());
        c.step();
        if world.cloud.launch_calls() > before {
            calls.push(t);
        }
        world.tick();
    }
    // Two NodeClaims, each rejected twice (at once, 30 s later), then launched 60 s later.
    assert_eq!(calls.len(), 3, "launch attempts at {calls:?}");
    let (first, second, third) = (calls[0], calls[1], calls[2]);
    assert!((30..=31).contains(&(second - first)), "{calls:?}");
    assert!((60..=61).contains(&(third - second)), "{calls:?}");
    let claim = world.live_claims()[0].clone();
    let launched = claim.condition(conditions::LAUNCHED).expect("Launched");
    assert_eq!(launched.status, "True", "launched in the end");
    assert_eq!(claim.annotation(annotations::LAUNCH_REJECTIONS), Some("2"));
    world.assert_settled(2);
}

/// A cloud that keeps throttling is left alone for a pause that grows (2 s, 4 s, ... up to two
/// minutes), and within a step the first throttled call stops the NodeClaims' launches; once
/// the throttling ends, the work resumes and settles.
#[test]
fn a_throttling_cloud_is_left_alone_for_a_growing_pause() {
    use joiner_simulate::bench::CountingCloud;
    let world = World::learning_lab();
    world.cloud.throttle_next_calls(1_000_000);
    let cloud = CountingCloud::new(&world.cloud);
    let mut c = Controller::new(
        CachedClient::new(&world.store),
        &cloud,
        &world.clock,
        world.config.clone(),
    );
    let reports = run(&world, &mut c, 120);
    let calls: u64 = cloud.take().values().sum();
    let working: Vec<usize> = reports
        .iter()
        .enumerate()
        .filter(|(_, r)| r.cloud_paused.is_none())
        .map(|(i, _)| i)
        .collect();
    // Steps 0, 2, 6, 14, 30 and 62 work (each after a pause twice the last); the rest wait.
    assert!(working.len() <= 7, "{working:?}");
    assert!(
        calls <= 8 * working.len() as u64,
        "{calls} calls in {} working steps",
        working.len()
    );
    assert!(world.running().is_empty());
    // The throttling ends: within the last pause (two minutes at most) the work resumes.
    world.cloud.throttle_next_calls(0);
    run(&world, &mut c, 300);
    world.assert_settled(2);
}

/// A second instance tagged for a NodeClaim that records another one (two controllers launched
/// for it: a Karpenter not yet stopped) is terminated as a duplicate once past the grace; the
/// recorded instance is never touched, nor an instance of a NodeClaim that records none yet.
#[test]
fn a_duplicate_instance_of_a_recorded_nodeclaim_is_collected() {
    let world = World::learning_lab();
    let mut c = controller(&world, world.config.clone());
    run(&world, &mut c, 120);
    world.assert_settled(2);
    let claim = world.live_claims()[0].clone();
    let recorded = common::instance_of(&claim);
    let real = world
        .running()
        .into_iter()
        .find(|i| i.id == recorded)
        .expect("the recorded instance");
    let duplicate = world.cloud.launch_untracked(
        &OfferingKey {
            instance_type: real.instance_type.clone(),
            zone: real.zone.clone(),
            capacity_type: real.capacity_type,
        },
        real.tags.clone(),
    );
    // Stepped by hand: until it is collected the NodeClaim has two instances, which `run`
    // refuses.
    let workload = world.pods_by_key();
    let mut terminated = Vec::new();
    for _ in 0..300 {
        world.before_step(&workload);
        terminated.extend(c.step().terminated);
        world.tick();
    }
    assert_eq!(terminated, [duplicate.id]);
    assert!(world.running().iter().any(|i| i.id == recorded));
    world.assert_settled(3);
}

/// The instance another controller records on a NodeClaim.
const THEIRS: &str = "aws:///us-east-1a/i-0another0000000000";

/// The API server as another controller races it: just before Joiner records its launch on a
/// NodeClaim, the other records an instance of its own there (Joiner's write then conflicts).
fn another_controller_records_first(world: &World) -> HookedStore<'_> {
    let mut store = HookedStore::new(&world.store);
    store.before_update = Box::new(|server, kind, sent| {
        if kind != "NodeClaim" || sent["status"]["providerID"].is_null() {
            return;
        }
        let name = sent["metadata"]["name"].as_str().unwrap_or_default();
        let stored: Option<NodeClaim> = server.get(None, name).expect("get");
        if let Some(mut stored) = stored.filter(|s| s.status.provider_id.is_none()) {
            stored.status.provider_id = Some(THEIRS.into());
            server
                .update(&stored)
                .expect("the other controller's write");
        }
    });
    store
}

/// When another controller recorded its instance on the NodeClaim first, Joiner's launch is the
/// duplicate: the other's record stands and Joiner terminates the instance it launched.
#[test]
fn a_launch_another_controller_recorded_first_is_terminated_not_recorded() {
    let world = World::learning_lab();
    let mut c = Controller::new(
        another_controller_records_first(&world),
        &world.cloud,
        &world.clock,
        world.config.clone(),
    );
    let workload = world.pods_by_key();
    let mut launched = Vec::new();
    let mut terminated = Vec::new();
    for _ in 0..30 {
        world.before_step(&workload);
        let r = c.step();
        launched.extend(r.launched.into_iter().map(|(_, i)| i));
        terminated.extend(r.terminated);
        world.tick();
    }
    assert_eq!(launched.len(), 2, "{launched:?}");
    assert_eq!(terminated, launched, "each launch is undone");
    for claim in world.live_claims() {
        assert_eq!(claim.status.provider_id.as_deref(), Some(THEIRS));
    }
}
