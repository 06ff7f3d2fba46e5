//! The disruption step on the learning-lab example: an in-memory cluster, the simulated cloud
//! and kubelet, a scheduler binding pods, and Deployments recreating evicted pods.

use crate::common;

use joiner_simulate::bench::{CloudCall, CountingCloud};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Deref;
use std::time::Duration;

use joiner_controller::DisruptionEvent;
use joiner_controller::clock::{Clock, ManualClock, add, elapsed};
use joiner_controller::cloud::InstanceState;
use joiner_controller::disruption::allowed_disruptions;
use joiner_controller::pods::pod_key;
use joiner_controller::store::{ClusterStore, InMemoryCluster};
use joiner_controller::{
    Controller, DisruptionBlock, DoNotDisruptNote, StepReport, Unconsolidatable,
};
use joiner_model::Manifests;
use joiner_model::api::NodePool;
use joiner_model::api::nodeclaim::{NodeClaim, conditions};
use joiner_model::wellknown::{ConsolidationType, DisruptionAction, DisruptionReason};
use joiner_model::wellknown::{annotations, labels};
use joiner_simulate::SimulatedCloud;
use k8s_openapi::api::core::v1::Pod;

/// The NodeClaim's annotation `key`, if it has it.
/// The pods bound to `node` and not being deleted.
fn bound_to<'a>(pods: &'a [Pod], node: &str) -> impl Iterator<Item = &'a Pod> {
    pods.iter().filter(move |p| {
        p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
            && p.metadata.deletion_timestamp.is_none()
    })
}

/// The learning-lab example with its Deployments at `replicas`.
fn learning_lab(replicas: i32) -> Manifests {
    let mut m = joiner_test_support::load_example("time-slicing-learning-lab");
    for d in &mut m.deployments {
        d.object.spec.replicas = Some(replicas);
    }
    m
}

/// The learning lab whose Deployments recreate evicted pods.
struct World {
    lab: common::World,
    /// Pods their Deployment recreates when they go.
    workload: RefCell<BTreeMap<String, Pod>>,
}

impl Deref for World {
    type Target = common::World;

    fn deref(&self) -> &common::World {
        &self.lab
    }
}

impl World {
    fn new(replicas: i32, change: impl Fn(&mut NodePool)) -> World {
        let lab = common::World::new(&learning_lab(replicas));
        let mut pool = lab.node_pool();
        change(&mut pool);
        lab.store.update(&pool).expect("update");
        let workload = RefCell::new(lab.pods_by_key());
        World { lab, workload }
    }

    /// Runs `seconds` one-second ticks; returns every step's report.
    fn run(
        &self,
        controller: &mut Controller<&InMemoryCluster, &SimulatedCloud, ManualClock>,
        seconds: u64,
    ) -> Vec<StepReport> {
        let mut reports = Vec::new();
        for _ in 0..seconds {
            self.before_step(&self.workload.borrow());
            reports.push(controller.step());
            self.tick();
        }
        reports
    }

    fn controller(&self) -> Controller<&InMemoryCluster, &SimulatedCloud, ManualClock> {
        Controller::new(
            &self.store,
            &self.cloud,
            self.clock.clone(),
            self.config.clone(),
        )
    }

    /// Deletes pods and stops recreating them (the Deployment scaled down).
    fn scale_away(&self, keep: impl Fn(&str) -> bool) {
        self.workload.borrow_mut().retain(|k, _| keep(k));
        for p in self.store.list::<Pod>().expect("pods") {
            if !keep(&pod_key(&p)) {
                self.store
                    .delete::<Pod>(
                        p.metadata.namespace.as_deref(),
                        p.metadata.name.as_deref().unwrap_or_default(),
                    )
                    .expect("delete");
            }
        }
    }
}

fn events(
    reports: &[StepReport],
    action: DisruptionAction,
) -> impl Iterator<Item = &DisruptionEvent> {
    reports
        .iter()
        .flat_map(|r| &r.disruption)
        .filter(move |e| e.action == action)
}

/// How many nodes the disruption step found `reason` could take, in this step's report.
fn eligible(report: &StepReport, reason: DisruptionReason) -> Option<usize> {
    report
        .eligible
        .as_ref()
        .and_then(|e| e.iter().find(|(r, _)| *r == reason))
        .map(|(_, n)| *n)
}

fn settled(world: &World, nodes: usize) {
    let live = world.live_claims();
    assert_eq!(
        live.len(),
        nodes,
        "{:?}",
        live.iter().map(NodeClaim::name).collect::<Vec<_>>()
    );
    assert!(live.iter().all(|c| c.is_true(conditions::INITIALIZED)));
    world.assert_nothing_pending();
}

#[test]
fn empty_nodes_go_after_consolidate_after() {
    let world = World::new(4, |p| p.spec.disruption.consolidate_after = "5m".into());
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 2);
    world.scale_away(|_| false);
    // Not before consolidateAfter.
    let early = world.run(&mut c, 240);
    assert_eq!(events(&early, DisruptionAction::Deleted).count(), 0);
    assert_eq!(world.live_claims().len(), 2);
    // Not eligible either (karpenter_voluntary_disruption_eligible_nodes).
    assert!(
        early
            .iter()
            .all(|r| eligible(r, DisruptionReason::Empty).unwrap_or(0) == 0)
    );
    let later = world.run(&mut c, 300);
    assert_eq!(
        later
            .iter()
            .filter_map(|r| eligible(r, DisruptionReason::Empty))
            .max(),
        Some(2)
    );
    let deleted: Vec<_> = events(&later, DisruptionAction::Deleted).collect();
    assert_eq!(deleted.len(), 2, "{deleted:?}");
    assert!(deleted.iter().all(|e| e.reason == "Empty"));
    assert!(world.live_claims().is_empty());
    // Each drain finished once (Drained=True; karpenter_nodes_drained_total).
    let drained: Vec<_> = later.iter().flat_map(|r| &r.drained).collect();
    assert_eq!(drained.len(), 2, "{drained:?}");
    let running = world
        .cloud
        .all_instances()
        .into_iter()
        .filter(|i| i.state == InstanceState::Running)
        .count();
    assert_eq!(running, 0, "the finalizer terminated the instances");
}

/// A consolidation decided is validated for 15 s before anything is cordoned; nodes that stop
/// being empty within it drop the decision, which counts as a failed validation (Karpenter's
/// `karpenter_voluntary_disruption_failed_validations_total`), and nothing is deleted.
#[test]
fn a_consolidation_that_stops_holding_within_its_validation_fails_it() {
    let world = World::new(4, |p| p.spec.disruption.consolidate_after = "30s".into());
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 2);
    let workload = world.workload.borrow().clone();
    world.scale_away(|_| false);
    // Until the nodes are eligible: consolidation decides and starts validating.
    let mut waited = 0;
    while world
        .run(&mut c, 1)
        .iter()
        .all(|r| eligible(r, DisruptionReason::Empty).unwrap_or(0) == 0)
    {
        waited += 1;
        assert!(waited < 300, "the empty nodes never became eligible");
    }
    // The Deployments scale back up within the 15 s: the nodes are not empty any more.
    *world.workload.borrow_mut() = workload;
    let r = world.run(&mut c, 60);
    let failed: Vec<_> = r.iter().flat_map(|s| &s.failed_validations).collect();
    assert!(!failed.is_empty(), "the decision was dropped");
    assert!(
        failed.iter().all(|k| **k == ConsolidationType::Empty),
        "{failed:?}"
    );
    assert_eq!(events(&r, DisruptionAction::Deleted).count(), 0);
    assert_eq!(world.live_claims().len(), 2);
}

/// NodeClaims record when their pods last changed and say when they have been quiet for
/// `consolidateAfter` (Karpenter's `lastPodEventTime` and `Consolidatable`); a restarted
/// controller reads the record rather than start every node's quiet time over.
#[test]
fn node_claims_record_pod_events_and_say_when_they_are_consolidatable() {
    let world = World::new(4, |p| p.spec.disruption.consolidate_after = "5m".into());
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 2);
    let consolidatable = |world: &World| {
        world
            .live_claims()
            .iter()
            .filter(|c| c.is_true(conditions::CONSOLIDATABLE))
            .count()
    };
    for claim in world.live_claims() {
        assert!(
            claim.status.last_pod_event_time.is_some(),
            "{}",
            claim.name()
        );
    }
    assert_eq!(consolidatable(&world), 0, "pods just landed");
    world.run(&mut c, 300);
    assert_eq!(consolidatable(&world), 2, "quiet for 5 minutes");
    let recorded: Vec<_> = world
        .live_claims()
        .iter()
        .map(|c| c.status.last_pod_event_time.clone())
        .collect();
    // A restart: a new controller knows at once that the nodes have been quiet.
    let mut restarted = world.controller();
    world.run(&mut restarted, 1);
    assert_eq!(
        consolidatable(&world),
        2,
        "the restart started the quiet time over"
    );
    let after: Vec<_> = world
        .live_claims()
        .iter()
        .map(|c| c.status.last_pod_event_time.clone())
        .collect();
    assert_eq!(after, recorded, "nothing happened to the pods");
    // The pods go: a pod event, and the nodes are not consolidatable until quiet again.
    world.scale_away(|_| false);
    world.run(&mut restarted, 10);
    assert_eq!(consolidatable(&world), 0);
    for (claim, before) in world.live_claims().iter().zip(&recorded) {
        assert!(
            claim.status.last_pod_event_time > *before,
            "{}",
            claim.name()
        );
    }
}

/// A NodePool whose requirements name no instance type that exists launches nothing, and the
/// planning step says so (Karpenter's `NoCompatibleInstanceTypes` on the NodePool).
#[test]
fn a_pool_whose_requirements_leave_no_instance_type_is_reported() {
    let world = World::new(2, |p| allow_types(p, &["x9.nonexistent"]));
    let mut c = world.controller();
    let reports = world.run(&mut c, 30);
    assert!(world.live_claims().is_empty());
    let named: Vec<&String> = reports.iter().flat_map(|r| &r.no_instance_types).collect();
    assert!(!named.is_empty(), "never reported");
    assert!(named.iter().all(|p| *p == "g4-nodepool"), "{named:?}");
    // A pool that can launch is not.
    let lab = World::new(2, |_| {});
    let mut c = lab.controller();
    let reports = lab.run(&mut c, 30);
    assert!(reports.iter().all(|r| r.no_instance_types.is_empty()));
}

/// The node of the claim whose pods are `keys`' first, and that claim.
fn claim_with_pods(world: &World) -> (NodeClaim, Vec<String>) {
    let claim = world.live_claims()[0].clone();
    let node = claim.status.node_name.clone().expect("node");
    let pods = bound_to(&world.store.list::<Pod>().expect("pods"), &node)
        .map(pod_key)
        .collect();
    (claim, pods)
}

/// A NodeClaim deleted by hand whose drain a PodDisruptionBudget holds up for good (no
/// `terminationGracePeriod`) holds up only its own node: the other node expires and is replaced
/// and drained within the hour.
#[test]
fn a_drain_held_by_a_budget_does_not_hold_back_expiry_elsewhere() {
    let world = World::new(4, |p| {
        p.spec.disruption.consolidate_after = "Never".into();
        p.spec.template.spec.expire_after = "30m".into();
    });
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 2);
    let (held, pods) = claim_with_pods(&world);
    protect(&world, &[&pods[0]]);
    world
        .store
        .delete::<NodeClaim>(None, held.name())
        .expect("delete");
    let other = world
        .live_claims()
        .into_iter()
        .find(|c| c.name() != held.name())
        .expect("the other node");
    let hour = world.run(&mut c, 3600);
    let expired: Vec<&DisruptionEvent> = events(&hour, DisruptionAction::Decided)
        .filter(|e| e.reason == "Expired")
        .collect();
    assert!(
        expired
            .iter()
            .any(|e| e.node_claims == [other.name().to_string()]),
        "the other node expired and was replaced: {expired:?}"
    );
    assert!(
        world
            .store
            .get::<NodeClaim>(None, other.name())
            .expect("get")
            .is_none(),
        "and is gone"
    );
    let still: NodeClaim = world
        .store
        .get(None, held.name())
        .expect("get")
        .expect("the held node is still draining");
    assert!(still.is_deleting());
    let node = held.status.node_name.clone().expect("node");
    assert!(
        bound_to(&world.store.list::<Pod>().expect("pods"), &node).any(|p| pod_key(p) == pods[0]),
        "the protected pod has not been evicted"
    );
}

/// The same held drain does not stop consolidation elsewhere: the other node, emptied, goes
/// after `consolidateAfter`, and the timeline says what consolidation went on without.
#[test]
fn a_drain_held_by_a_budget_does_not_hold_back_consolidation_elsewhere() {
    let world = World::new(4, |p| {
        p.spec.disruption.consolidate_after = "2m".into();
        // The held node counts against the budget, as in Karpenter: allow both.
        p.spec.disruption.budgets[0].nodes = "2".into();
    });
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 2);
    let (held, pods) = claim_with_pods(&world);
    protect(&world, &[&pods[0]]);
    world
        .store
        .delete::<NodeClaim>(None, held.name())
        .expect("delete");
    // Every pod but the protected one goes; the pods evicted from the held node come back
    // nowhere.
    let keep = pods[0].clone();
    world.scale_away(|k| k == keep);
    let later = world.run(&mut c, 900);
    let excluded: Vec<&DisruptionEvent> = events(&later, DisruptionAction::Excluded).collect();
    assert!(
        excluded.iter().any(|e| e
            .detail
            .iter()
            .any(|d| d.contains(held.name()) && d.contains("deleting for"))),
        "{excluded:?}"
    );
    let empty: Vec<&DisruptionEvent> = events(&later, DisruptionAction::Decided)
        .filter(|e| e.reason == "Empty")
        .collect();
    assert_eq!(empty.len(), 1, "the other node was consolidated: {empty:?}");
    let live: Vec<NodeClaim> = world.live_claims();
    assert!(
        live.is_empty(),
        "{:?}",
        live.iter().map(NodeClaim::name).collect::<Vec<_>>()
    );
}

/// The instance reads of one step do not grow with the NodeClaims: one listing, shared by
/// every NodeClaim launching and every NodeClaim terminating, where each used to list (or
/// describe) the instances on its own. `JOINER_CALLS_PODS` sets the size (the closing figures of
/// the issue were measured with 1,000).
#[test]
fn one_step_reads_the_instances_once_however_many_nodeclaims() {
    let pods: i32 = std::env::var("JOINER_CALLS_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    // Every pod pending at once: as many NodeClaims launch in one step.
    let world = World::new(pods, |p| {
        p.spec.disruption.consolidate_after = "Never".into();
        p.spec.disruption.budgets[0].nodes = "100%".into();
    });
    let counting = CountingCloud::new(&world.cloud);
    let mut c = Controller::new(
        &world.store,
        &counting,
        world.clock.clone(),
        world.config.clone(),
    );
    let mut step = |world: &World| -> (StepReport, u64, u64) {
        counting.take();
        world.before_step(&world.workload.borrow());
        let r = c.step();
        world.tick();
        let calls = counting.take();
        let count = |call| calls.get(&call).copied().unwrap_or(0);
        (
            r,
            count(CloudCall::ListInstances),
            count(CloudCall::DescribeInstance),
        )
    };
    let mut launching = (0, 0, 0);
    for _ in 0..180 {
        let (r, lists, gets) = step(&world);
        if r.launched.len() > launching.0 {
            launching = (r.launched.len(), lists, gets);
        }
    }
    let claims = world.live_claims().len();
    assert!(claims >= 2, "{claims} NodeClaims");
    world.assert_nothing_pending();
    eprintln!(
        "{} NodeClaims launched in one step: {} listings, {} instance reads",
        launching.0, launching.1, launching.2
    );
    assert!(launching.0 >= 2, "{launching:?}");
    assert!(
        launching.1 <= 2,
        "one listing (and GC's), not one per launch: {launching:?}"
    );
    assert_eq!(launching.2, 0);
    // Every NodeClaim deleting, every drain held by a PodDisruptionBudget.
    create_pdb(&world, "all", ("app", "learning-lab"), 0);
    for claim in world.live_claims() {
        world
            .store
            .delete::<NodeClaim>(None, claim.name())
            .expect("delete");
    }
    let mut worst = (0, 0);
    for _ in 0..30 {
        let (_, lists, gets) = step(&world);
        worst = (worst.0.max(lists), worst.1.max(gets));
    }
    eprintln!(
        "{claims} NodeClaims deleting: at most {} listings and {} instance reads a step",
        worst.0, worst.1
    );
    assert!(worst.0 <= 2, "{worst:?}");
    assert_eq!(
        worst.1, 0,
        "a running instance in the listing is not asked for again"
    );
}

/// The Pod watch fails for ten minutes after the nodes emptied, and the pods come back
/// meanwhile: the controller's cache still shows the nodes empty, past `consolidateAfter`, but
/// nothing is decided on it; each step says it is waiting. Once the watch recovers the nodes
/// are seen busy and stay.
#[test]
fn nothing_is_disrupted_on_a_cache_whose_watch_is_down() {
    use joiner_controller::store::CachedClient;

    let world = World::new(4, |p| p.spec.disruption.consolidate_after = "2m".into());
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 2);
    let everyone = world.workload.borrow().clone();
    world.scale_away(|_| false);
    let mut cached = Controller::new(
        CachedClient::new(&world.store),
        &world.cloud,
        world.clock.clone(),
        world.config.clone(),
    );
    let mut run = |seconds: u64| -> Vec<StepReport> {
        (0..seconds)
            .map(|_| {
                world.before_step(&world.workload.borrow());
                let r = cached.step();
                world.tick();
                r
            })
            .collect()
    };
    // The pods take their 30 s of grace to stop; then the nodes are empty.
    run(45);
    world.store.fail_watch("Pod");
    // The pods come back and are bound while the controller's Pod cache still says the nodes
    // are empty.
    *world.workload.borrow_mut() = everyone;
    let blind = run(600);
    assert_eq!(events(&blind, DisruptionAction::Decided).count(), 0);
    assert!(
        blind
            .iter()
            .all(|r| r.deleted.is_empty() && r.terminated.is_empty())
    );
    assert!(
        blind.iter().all(|r| r
            .errors
            .iter()
            .any(|e| e.to_string().contains("watch of Pod"))),
        "each step says why it waits"
    );
    assert_eq!(world.live_claims().len(), 2);
    world.store.heal_watch("Pod");
    let seen = run(300);
    assert_eq!(
        events(&seen, DisruptionAction::Decided).count(),
        0,
        "the nodes are busy"
    );
    settled(&world, 2);
}

/// Marks the pod `key` `karpenter.sh/do-not-disrupt: "true"`.
fn mark_do_not_disrupt(world: &World, key: &str) {
    mark_do_not_disrupt_with(world, key, "true");
}

/// Sets the pod `key`'s `karpenter.sh/do-not-disrupt` to `value`.
fn mark_do_not_disrupt_with(world: &World, key: &str, value: &str) {
    let (_, name) = key.split_once('/').expect("key");
    let mut pod: Pod = world
        .store
        .get(Some("default"), name)
        .expect("get")
        .expect("pod");
    pod.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(annotations::DO_NOT_DISRUPT.into(), value.into());
    world.store.update(&pod).expect("annotate");
}

#[test]
fn do_not_disrupt_pods_keep_their_node() {
    let (lone, lone_node, now_on, reports) = do_not_disrupt_case("true");
    assert_eq!(now_on, lone_node, "the do-not-disrupt pod never moved");
    // The step says what blocks the node (Karpenter's DisruptionBlocked on it).
    assert!(
        reports.iter().any(|r| r
            .disruption_blocked
            .iter()
            .any(|(_, b)| *b == DisruptionBlock::PodAnnotated(lone.clone()))),
        "{lone}'s node was never said to be blocked"
    );
    // A duration (Karpenter v1.12) counts from the pod's start, which the kubelet records:
    // 30 minutes hold the pod through the 10 minutes run, and the pod is told until when.
    let (lone, lone_node, now_on, reports) = do_not_disrupt_case("30m");
    assert_eq!(now_on, lone_node, "{lone}: held for 30 minutes");
    assert!(reports.iter().any(|r| {
        r.do_not_disrupt
            .iter()
            .any(|(p, v, n)| *p == lone && v == "30m" && matches!(n, DoNotDisruptNote::Until(_)))
    }));
    // Two minutes run out within the ten; a value Karpenter cannot read protects nothing.
    let (lone, _, _, reports) = do_not_disrupt_case("2m");
    assert!(reports.iter().any(|r| {
        r.do_not_disrupt
            .iter()
            .any(|(p, _, n)| *p == lone && *n == DoNotDisruptNote::Elapsed)
    }));
    let (lone, _, _, reports) = do_not_disrupt_case("1d");
    assert!(reports.iter().any(|r| {
        r.do_not_disrupt
            .iter()
            .any(|(p, _, n)| *p == lone && *n == DoNotDisruptNote::Invalid)
    }));
}

#[test]
fn nodes_of_a_pool_that_never_consolidates_are_said_to_be_unconsolidatable() {
    let world = World::new(4, |p| p.spec.disruption.consolidate_after = "Never".into());
    let mut c = world.controller();
    let reports = world.run(&mut c, 120);
    settled(&world, 2);
    let last = reports.last().expect("a step");
    let live = world.live_names();
    assert_eq!(last.unconsolidatable.len(), live.len(), "{last:?}");
    for (claim, why) in &last.unconsolidatable {
        assert!(live.contains(claim), "{claim}");
        assert!(matches!(why, Unconsolidatable::Disabled(_)), "{why:?}");
    }
}

/// Two nodes, one with a lone pod marked `value` and one busy; all but the lone pod and one
/// other go. Returns the lone pod, its node, its node after ten minutes, and the reports of
/// those ten minutes.
fn do_not_disrupt_case(value: &str) -> (String, String, String, Vec<StepReport>) {
    let world = World::new(4, |_| {});
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 2);
    // The lone pod's node (the one with one pod) keeps it; the other node empties.
    let pods = world.store.list::<Pod>().expect("pods");
    let mut per_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in &pods {
        let n = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .expect("bound");
        per_node.entry(n).or_default().push(pod_key(p));
    }
    let (lone_node, lone) = per_node
        .iter()
        .find(|(_, ps)| ps.len() == 1)
        .map(|(n, ps)| (n.clone(), ps[0].clone()))
        .expect("a node with one pod");
    mark_do_not_disrupt_with(&world, &lone, value);
    // Keep only the do-not-disrupt pod and one pod of the full node: moving the do-not-disrupt
    // pod would save a node, but it may not move; the other node is drained instead.
    let other = per_node
        .iter()
        .find(|(n, _)| **n != lone_node)
        .map(|(_, ps)| ps[0].clone())
        .expect("other");
    let keep = [lone.clone(), other.clone()];
    world.scale_away(|k| keep.iter().any(|x| x == k));
    let reports = world.run(&mut c, 600);
    settled(&world, 1);
    let node_of = |key: &str| -> String {
        let pod: Pod = world
            .store
            .get(Some("default"), key.split_once('/').expect("key").1)
            .expect("get")
            .expect("pod");
        pod.spec.and_then(|s| s.node_name).expect("bound")
    };
    let now_on = node_of(&lone);
    assert_eq!(node_of(&other), now_on, "one node is left");
    let evicted: Vec<String> = events(&reports, DisruptionAction::Evicted)
        .flat_map(|e| e.detail.clone())
        .collect();
    assert_eq!(
        evicted.contains(&lone),
        now_on != lone_node,
        "{value}: {evicted:?}"
    );
    (lone, lone_node, now_on, reports)
}

#[test]
fn expiry_launches_the_replacement_before_draining() {
    let world = World::new(4, |p| {
        p.spec.template.spec.expire_after = "30m".into();
        p.spec.disruption.consolidate_after = "Never".into();
    });
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 2);
    let before = world.live_names();
    let mut replaced_at = None;
    let mut evicted_at = None;
    let mut replacement = String::new();
    let mut seconds = 120u64;
    while seconds < 1860 + 600 && evicted_at.is_none() {
        let r = world.run(&mut c, 1);
        seconds += 1;
        if let Some(e) = events(&r, DisruptionAction::Replacing).next() {
            assert_eq!(e.reason, "Expired");
            replacement = e.detail[0].clone();
            replaced_at.get_or_insert(seconds);
            // The old node still has its pods while the replacement starts.
            let old = world
                .store
                .get::<NodeClaim>(None, &e.node_claims[0])
                .expect("get")
                .expect("old claim");
            let node = old.status.node_name.clone().expect("node");
            let pods = world.store.list::<Pod>().expect("pods");
            assert!(bound_to(&pods, &node).count() > 0);
            // Karpenter's DisruptionReason condition says why it goes.
            let why = old
                .status
                .conditions
                .iter()
                .find(|c| c.type_ == conditions::DISRUPTION_REASON)
                .expect("DisruptionReason");
            assert_eq!(
                (why.status.as_str(), why.reason.as_str()),
                ("True", "Expired")
            );
        }
        if events(&r, DisruptionAction::Evicted).next().is_some() {
            evicted_at = Some(seconds);
            let fresh = world
                .store
                .get::<NodeClaim>(None, &replacement)
                .expect("get")
                .expect("replacement");
            assert!(
                fresh.is_true(conditions::INITIALIZED),
                "drained only once the replacement is up"
            );
        }
    }
    let (replaced_at, evicted_at) = (replaced_at.expect("replaced"), evicted_at.expect("evicted"));
    assert!(
        replaced_at >= 1800 && evicted_at > replaced_at + 30,
        "{replaced_at} {evicted_at}"
    );
    world.run(&mut c, 120);
    settled(&world, 2);
    let after = world.live_names();
    assert_ne!(before, after);
}

#[test]
fn budgets_limit_how_many_nodes_go_at_once() {
    let world = World::new(12, |p| {
        p.spec.disruption.budgets[0].nodes = "2".into();
    });
    let mut c = world.controller();
    world.run(&mut c, 180);
    settled(&world, 4);
    world.scale_away(|_| false);
    let reports = world.run(&mut c, 120);
    assert!(world.live_claims().is_empty());
    let per_step: Vec<usize> = reports
        .iter()
        .map(|r| {
            r.disruption
                .iter()
                .filter(|e| e.action == DisruptionAction::Deleted)
                .count()
        })
        .filter(|n| *n > 0)
        .collect();
    assert_eq!(per_step, vec![2, 2], "deletions per step");
    // A percentage: 10% of 4 nodes rounds up to one.
    let pool = NodePool::default_for_test();
    assert_eq!(
        allowed_disruptions(&pool, DisruptionReason::Empty, 4, world.clock.now()),
        1
    );
    assert_eq!(
        allowed_disruptions(&pool, DisruptionReason::Empty, 25, world.clock.now()),
        3
    );
}

trait TestPool {
    fn default_for_test() -> NodePool;
}

impl TestPool for NodePool {
    fn default_for_test() -> NodePool {
        World::new(0, |_| {}).node_pool()
    }
}

#[test]
fn pod_disruption_budgets_pace_the_drain() {
    let world = World::new(4, |p| {
        p.spec.template.spec.expire_after = "30m".into();
        p.spec.disruption.consolidate_after = "Never".into();
    });
    create_pdb(&world, "lab", ("app", "learning-lab"), 1);
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 2);
    // Expiry at 30 minutes, then each evicted pod takes its 30 s grace period to stop before
    // the budget allows the next.
    let reports = world.run(&mut c, 2400);
    let evictions: Vec<&DisruptionEvent> = events(&reports, DisruptionAction::Evicted).collect();
    assert!(evictions.len() >= 3, "{evictions:?}");
    assert!(
        evictions.iter().all(|e| e.detail.len() == 1),
        "one pod at a time: {evictions:?}"
    );
    // Never more than one lab pod missing or pending at any step.
    assert!(events(&reports, DisruptionAction::Deleted).count() >= 1);
    world.run(&mut c, 120);
    settled(&world, 2);
}

fn allow_types(pool: &mut NodePool, types: &[&str]) {
    for r in &mut pool.spec.template.spec.requirements {
        if r.key == labels::INSTANCE_TYPE {
            r.values = types.iter().map(|t| t.to_string()).collect();
        }
    }
}

#[test]
fn a_cheaper_replacement_is_up_before_the_old_node_drains() {
    // One lab pod on a g4dn.2xlarge (the only type allowed at first).
    let world = World::new(1, |p| {
        allow_types(p, &["g4dn.2xlarge"]);
        p.spec.disruption.consolidate_after = "1m".into();
    });
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 1);
    let old = world.live_claims()[0].clone();
    assert_eq!(old.label(labels::INSTANCE_TYPE), Some("g4dn.2xlarge"));
    // The pool now allows the cheaper g4dn.xlarge: consolidation replaces the node.
    let mut pool = world.node_pool();
    allow_types(&mut pool, &["g4dn.xlarge", "g4dn.2xlarge"]);
    world.store.update(&pool).expect("update");
    let reports = world.run(&mut c, 300);
    let replacing: Vec<_> = events(&reports, DisruptionAction::Replacing).collect();
    assert_eq!(replacing.len(), 1, "{replacing:?}");
    assert_eq!(replacing[0].reason, "Underutilized");
    assert_eq!(replacing[0].node_claims, vec![old.name().to_string()]);
    let new = replacing[0].detail[0].clone();
    let step_of = |pred: &dyn Fn(&StepReport) -> bool| reports.iter().position(pred);
    let replaced = step_of(&|r| {
        r.disruption
            .iter()
            .any(|e| e.action == DisruptionAction::Replacing)
    })
    .expect("replacing");
    let initialized = step_of(&|r| r.initialized.contains(&new)).expect("initialized");
    let evicted = step_of(&|r| {
        r.disruption
            .iter()
            .any(|e| e.action == DisruptionAction::Evicted)
    })
    .expect("evicted");
    assert!(
        replaced < initialized && initialized <= evicted,
        "{replaced} {initialized} {evicted}"
    );
    settled(&world, 1);
    let now = world.live_claims()[0].clone();
    assert_eq!(now.name(), new);
    assert_eq!(now.label(labels::INSTANCE_TYPE), Some("g4dn.xlarge"));
}

/// Claims being moved right now (annotated, not yet deleting).
fn moving(world: &World) -> usize {
    world
        .live_claims()
        .iter()
        .filter(|c| c.annotation(annotations::DISRUPTION_REASON).is_some())
        .count()
}

#[test]
fn a_changed_node_pool_drifts_its_nodes_and_they_are_replaced_one_at_a_time() {
    let world = World::new(4, |p| {
        p.spec.disruption.consolidate_after = "Never".into();
    });
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 2);
    let before = world.live_names();
    for claim in world.live_claims() {
        assert_eq!(
            claim.annotation(annotations::NODEPOOL_HASH_VERSION),
            Some(joiner_controller::nodeclaim::stamp::HASH_VERSION)
        );
        assert!(claim.annotation(annotations::NODECLASS_HASH).is_some());
        assert!(claim.condition(conditions::DRIFTED).is_none());
    }
    world.label_node_template("team", "ml");
    let mut reports = Vec::new();
    for _ in 0..600 {
        reports.extend(world.run(&mut c, 1));
        assert!(moving(&world) <= 1, "one drift replacement at a time");
    }
    let drifted: Vec<_> = events(&reports, DisruptionAction::Drifted).collect();
    assert_eq!(drifted.len(), 2, "{drifted:?}");
    assert_eq!(
        reports
            .iter()
            .filter_map(|r| eligible(r, DisruptionReason::Drifted))
            .max(),
        Some(2),
        "both drifted nodes were eligible"
    );
    assert!(drifted.iter().all(|e| e.reason == "NodePoolDrifted"));
    assert!(events(&reports, DisruptionAction::Replacing).all(|e| e.reason == "Drifted"));
    assert!(events(&reports, DisruptionAction::Deleted).count() >= 2);
    let live = world.live_claims();
    assert!(!live.is_empty());
    for claim in &live {
        assert!(
            !before.contains(&claim.name().to_string()),
            "{}",
            claim.name()
        );
        assert_eq!(claim.label("team"), Some("ml"));
        assert!(claim.condition(conditions::DRIFTED).is_none());
    }
    world.assert_nothing_pending();
}

#[test]
fn a_node_outside_the_new_requirements_is_replaced_by_one_inside() {
    let world = World::new(1, |p| {
        p.spec.disruption.consolidate_after = "Never".into();
    });
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 1);
    let old = world.live_claims()[0].clone();
    let mut pool = world.node_pool();
    allow_types(&mut pool, &["g4dn.2xlarge"]);
    world.store.update(&pool).expect("update");
    let reports = world.run(&mut c, 300);
    let drifted: Vec<_> = events(&reports, DisruptionAction::Drifted).collect();
    assert_eq!(drifted.len(), 1);
    assert_eq!(drifted[0].reason, "RequirementsDrifted");
    let new = events(&reports, DisruptionAction::Replacing)
        .next()
        .expect("replacing")
        .detail[0]
        .clone();
    let step_of = |pred: &dyn Fn(&StepReport) -> bool| reports.iter().position(pred);
    let initialized = step_of(&|r| r.initialized.contains(&new)).expect("initialized");
    let evicted = step_of(&|r| {
        r.disruption
            .iter()
            .any(|e| e.action == DisruptionAction::Evicted)
    })
    .expect("evicted");
    assert!(initialized <= evicted, "{initialized} {evicted}");
    settled(&world, 1);
    let now = world.live_claims()[0].clone();
    assert_ne!(now.name(), old.name());
    assert_eq!(now.label(labels::INSTANCE_TYPE), Some("g4dn.2xlarge"));
}

#[test]
fn a_budget_schedule_holds_disruption_back_while_it_is_active() {
    // No disruption for the first ten minutes of every day; the clock starts at midnight UTC.
    let world = World::new(4, |p| {
        p.spec
            .disruption
            .budgets
            .push(joiner_model::api::nodepool::DisruptionBudget {
                nodes: "0".into(),
                reasons: None,
                schedule: Some("0 0 * * *".into()),
                duration: Some("10m".into()),
            });
    });
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 2);
    world.scale_away(|_| false);
    // 00:02 to 00:09:50: blocked.
    let inside = world.run(&mut c, 470);
    assert_eq!(events(&inside, DisruptionAction::Deleted).count(), 0);
    assert_eq!(world.live_claims().len(), 2);
    // What karpenter_nodepools_allowed_disruptions says meanwhile: nothing, for any reason.
    let allowed =
        |r: &StepReport| -> Vec<usize> { r.budgets.iter().flatten().map(|b| b.allowed).collect() };
    let last = inside.last().expect("a report");
    assert_eq!(allowed(last), [0, 0, 0], "{:?}", last.budgets);
    assert!(
        last.budgets.iter().flatten().all(|b| b.nodes == 2),
        "{:?}",
        last.budgets
    );
    // Past 00:10 the default 10% budget alone applies: one node at a time.
    let after = world.run(&mut c, 120);
    assert_eq!(events(&after, DisruptionAction::Deleted).count(), 2);
    assert!(world.live_claims().is_empty());
    let first = after
        .iter()
        .position(|r| {
            r.disruption
                .iter()
                .any(|e| e.action == DisruptionAction::Deleted)
        })
        .expect("deleted");
    assert!(first >= 10, "not before 00:10 ({first})");
    // Past 00:10 the default 10% of two nodes, rounded up: one.
    assert!(
        after.iter().any(|r| allowed(r).contains(&1)),
        "{:?}",
        after.last().map(|r| &r.budgets)
    );
}

#[test]
fn termination_grace_period_overrides_do_not_disrupt_once_it_runs_out() {
    let world = World::new(1, |p| {
        p.spec.template.spec.expire_after = "10m".into();
        p.spec.template.spec.termination_grace_period = Some("5m".into());
        p.spec.disruption.consolidate_after = "Never".into();
    });
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 1);
    let old = world.live_claims()[0].clone();
    assert_eq!(old.spec.termination_grace_period.as_deref(), Some("5m"));
    let mut pod = world.store.list::<Pod>().expect("pods")[0].clone();
    pod.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(annotations::DO_NOT_DISRUPT.into(), "true".into());
    world.store.update(&pod).expect("annotate");
    let mut drain_started = None;
    let mut forced = None;
    for second in 0..1200u64 {
        let r = world.run(&mut c, 1);
        if drain_started.is_none()
            && world
                .store
                .get::<NodeClaim>(None, old.name())
                .expect("get")
                .is_some_and(|c| c.annotation(annotations::TERMINATION_TIMESTAMP).is_some())
        {
            drain_started = Some(second);
        }
        if let Some(e) = events(&r, DisruptionAction::Forced).next() {
            assert_eq!(e.node_claims, vec![old.name().to_string()]);
            forced = Some(second);
            break;
        }
        // Blocked until then: the do-not-disrupt pod stays.
        assert!(events(&r, DisruptionAction::Evicted).all(|e| !e.detail.contains(&pod_key(&pod))));
    }
    let (started, forced) = (drain_started.expect("drained"), forced.expect("forced"));
    // The pod is deleted when its own grace period (30 s, the default) would end at the
    // deadline, 5 minutes after the drain started, as Karpenter deletes it.
    assert!(
        (269..=271).contains(&(forced - started)),
        "{started} {forced}"
    );
    world.run(&mut c, 60);
    assert!(
        world
            .store
            .get::<NodeClaim>(None, old.name())
            .expect("get")
            .is_none()
    );
    assert_eq!(world.instance_state(&old), Some(InstanceState::Terminated));
    settled(&world, 1);
}

/// Puts `pods` (keys) under a PodDisruptionBudget that allows no disruption.
fn protect(world: &World, pods: &[&str]) {
    for key in pods {
        let (_, name) = key.split_once('/').expect("key");
        let mut pod: Pod = world
            .store
            .get(Some("default"), name)
            .expect("get")
            .expect("pod");
        pod.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("protected".into(), "yes".into());
        world.store.update(&pod).expect("label");
    }
    create_pdb(world, "protected", ("protected", "yes"), 0);
}

/// A PodDisruptionBudget in `default` over the pods labelled `label`.
fn create_pdb(world: &World, name: &str, label: (&str, &str), max_unavailable: i32) {
    use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    world
        .store
        .create(&PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                max_unavailable: Some(IntOrString::Int(max_unavailable)),
                selector: Some(LabelSelector {
                    match_labels: Some([(label.0.to_string(), label.1.to_string())].into()),
                    ..LabelSelector::default()
                }),
                ..PodDisruptionBudgetSpec::default()
            }),
            status: None,
        })
        .expect("pdb");
}

mod interruption {
    use joiner_controller::cloud::CloudError;
    use joiner_controller::interruption::messages::spot_interruption_warning;
    use joiner_controller::interruption::{InterruptionQueue, QueueMessage};
    use joiner_simulate::SimulatedInterruptionQueue;

    use super::*;
    use crate::common::instance_of;

    fn spot_world() -> World {
        World::new(4, |p| {
            p.spec.disruption.consolidate_after = "Never".into();
            for r in &mut p.spec.template.spec.requirements {
                if r.key == labels::CAPACITY_TYPE {
                    r.values = vec!["spot".into()];
                }
            }
        })
    }

    fn warn(world: &World, queue: &SimulatedInterruptionQueue, claim: &NodeClaim) -> String {
        let id = instance_of(claim);
        assert!(world.cloud.reclaim_after(&id, Duration::from_secs(120)));
        let body = spot_interruption_warning("evt-1", &id, &world.clock.now().to_string());
        queue.send(body.clone());
        body
    }

    /// The pods of the interrupted node, by key.
    fn pods_on(world: &World, claim: &NodeClaim) -> Vec<String> {
        let node = claim.status.node_name.clone().expect("node");
        bound_to(&world.store.list::<Pod>().expect("pods"), &node)
            .map(pod_key)
            .collect()
    }

    #[test]
    fn a_spot_interruption_launches_the_replacement_then_drains_at_once() {
        let world = spot_world();
        let queue = SimulatedInterruptionQueue::new();
        let mut c = world.controller();
        c.set_interruption_queue(Box::new(queue.clone()));
        world.run(&mut c, 120);
        settled(&world, 2);
        let victim = world.live_claims()[0].clone();
        assert_eq!(victim.label(labels::CAPACITY_TYPE), Some("spot"));
        let moved = pods_on(&world, &victim);
        assert!(!moved.is_empty());
        // The same warning delivered twice.
        let body = warn(&world, &queue, &victim);
        queue.send(body);
        let r = world.run(&mut c, 1).remove(0);
        assert_eq!(queue.waiting(), 0, "both copies deleted");
        // Both counted as Karpenter counts deleted messages, each with its event's age.
        assert_eq!(r.interruption_deleted, 2);
        assert_eq!(r.interruption_latency.len(), 2);
        let actions: Vec<&str> = r.disruption.iter().map(|e| e.action.as_str()).collect();
        let at = |a: &str| actions.iter().position(|x| *x == a);
        let (replacing, evicted) = (
            at("replacing").expect("replacing"),
            at("evicted").expect("evicted"),
        );
        assert!(at("interrupted").expect("interrupted") < replacing);
        assert!(replacing < evicted, "launched first: {actions:?}");
        assert_eq!(
            events(std::slice::from_ref(&r), DisruptionAction::Interrupted).count(),
            1
        );
        let replacement = events(std::slice::from_ref(&r), DisruptionAction::Replacing)
            .next()
            .expect("replacing")
            .detail[0]
            .clone();
        assert!(r.launched.iter().any(|(n, _)| *n == replacement));
        let marked: NodeClaim = world
            .store
            .get(None, victim.name())
            .expect("get")
            .expect("still there");
        assert!(marked.is_true(conditions::INTERRUPTED));
        assert_eq!(
            marked.annotation(annotations::INTERRUPTED),
            Some("SpotInterrupted")
        );
        // The spot offering is avoided for a while.
        assert!(!r.unavailable.is_empty());
        // A restart forgets unavailable offerings; the new controller learns the reclaimed one
        // again from the NodeClaim, once, and does not launch the replacement twice.
        let mut c = world.controller();
        c.set_interruption_queue(Box::new(queue.clone()));
        let again = world.run(&mut c, 2);
        assert_eq!(again[0].unavailable, r.unavailable);
        assert!(again[1].unavailable.is_empty());
        world.run(&mut c, 240);
        settled(&world, 2);
        assert_eq!(
            world.cloud.all_instances().len(),
            3,
            "one replacement, launched once"
        );
        let replacement: NodeClaim = world
            .store
            .get(None, &replacement)
            .expect("get")
            .expect("replacement");
        // The moved pods that did not fit on the other node are on the replacement.
        let on_replacement = pods_on(&world, &replacement);
        let survivor = world
            .live_claims()
            .into_iter()
            .find(|c| c.name() != replacement.name())
            .expect("the other node");
        let on_survivor = pods_on(&world, &survivor);
        assert!(!on_replacement.is_empty());
        assert!(
            moved
                .iter()
                .all(|p| on_replacement.contains(p) || on_survivor.contains(p)),
            "{moved:?} {on_replacement:?} {on_survivor:?}"
        );
        assert_eq!(
            world.instance_state(&victim),
            Some(InstanceState::Terminated)
        );
    }

    /// A PodDisruptionBudget that forbids evicting one pod of the interrupted node does not
    /// hold back the others: they are evicted at once; the protected pod is deleted 90 s after
    /// the notice, so that its 30 s of grace end as the cloud reclaims the instance at 120 s,
    /// and then the NodeClaim goes.
    #[test]
    fn an_interruption_drain_goes_past_a_protected_pod_and_finishes_before_the_reclaim() {
        let world = spot_world();
        let queue = SimulatedInterruptionQueue::new();
        let mut c = world.controller();
        c.set_interruption_queue(Box::new(queue.clone()));
        world.run(&mut c, 120);
        settled(&world, 2);
        let victim = world.live_claims()[0].clone();
        let on_victim = pods_on(&world, &victim);
        assert!(on_victim.len() >= 2, "{on_victim:?}");
        // The first pod of the node, by name, may never be evicted.
        let protected = on_victim[0].clone();
        protect(&world, &[&protected]);
        let instance = instance_of(&victim);
        warn(&world, &queue, &victim);
        let first = world.run(&mut c, 1).remove(0);
        let evicted: Vec<&String> = events(std::slice::from_ref(&first), DisruptionAction::Evicted)
            .flat_map(|e| &e.detail)
            .collect();
        for p in on_victim.iter().filter(|p| **p != protected) {
            assert!(evicted.contains(&p), "{p} evicted at once: {evicted:?}");
        }
        assert!(first.eviction_refused.contains(&protected), "{first:?}");
        assert!(!world.cloud.terminate_calls().contains(&instance));
        let rest = world.run(&mut c, 130);
        let deleted_at = rest
            .iter()
            .position(|r| {
                events(std::slice::from_ref(r), DisruptionAction::Forced)
                    .next()
                    .is_some()
            })
            .expect("the protected pod is deleted");
        assert!(
            (85..=92).contains(&deleted_at),
            "deleted {deleted_at} s after the notice"
        );
        // The pod's grace runs to the reclaim: the instance goes then, by Joiner's hand or
        // the cloud's, and the NodeClaim with it.
        assert_eq!(
            world.instance_state(&victim),
            Some(InstanceState::Terminated)
        );
        assert!(
            world
                .store
                .get::<NodeClaim>(None, victim.name())
                .expect("get")
                .is_none(),
            "the NodeClaim is gone"
        );
    }

    /// An AWS Health scheduled change three days ahead is not a spot reclaim: the replacement
    /// is launched at once, the node drains only once it is ready, a do-not-disrupt pod and a
    /// pod a PodDisruptionBudget protects stay where they are for days, and only as the change
    /// starts are they deleted (in time for their grace period) and the instance let go.
    #[test]
    fn a_scheduled_change_days_ahead_honours_do_not_disrupt_and_budgets() {
        use joiner_controller::interruption::messages::scheduled_change;

        let world = spot_world();
        let queue = SimulatedInterruptionQueue::new();
        let mut c = world.controller();
        c.set_interruption_queue(Box::new(queue.clone()));
        world.run(&mut c, 120);
        settled(&world, 2);
        let victim = world.live_claims()[0].clone();
        let on_victim = pods_on(&world, &victim);
        assert!(on_victim.len() >= 3, "{on_victim:?}");
        let (held, protected) = (on_victim[0].clone(), on_victim[1].clone());
        mark_do_not_disrupt(&world, &held);
        protect(&world, &[&protected]);
        let instance = instance_of(&victim);
        let starts = add(world.clock.now(), Duration::from_secs(72 * 3600));
        world
            .cloud
            .reclaim_after(&instance, Duration::from_secs(72 * 3600));
        queue.send(scheduled_change(
            "health-1",
            &[&instance],
            &world.clock.now().to_string(),
            starts,
        ));
        let first = world.run(&mut c, 1);
        assert_eq!(events(&first, DisruptionAction::Replacing).count(), 1);
        assert_eq!(
            events(&first, DisruptionAction::Evicted).count(),
            0,
            "nothing is evicted before the replacement is ready"
        );
        // An hour on: the replacement is up, the others moved, the two held pods stay.
        let hour = world.run(&mut c, 3600);
        let evicted: Vec<&String> = events(&hour, DisruptionAction::Evicted)
            .flat_map(|e| &e.detail)
            .collect();
        assert!(
            !evicted.is_empty(),
            "the node drains once its replacement is ready"
        );
        assert!(
            !evicted.contains(&&held) && !evicted.contains(&&protected),
            "{evicted:?}"
        );
        assert_eq!(events(&hour, DisruptionAction::Forced).count(), 0);
        let left = pods_on(&world, &victim);
        assert!(
            left.contains(&held) && left.contains(&protected),
            "{left:?}"
        );
        assert_eq!(world.instance_state(&victim), Some(InstanceState::Running));
        // Two minutes before the change starts, the held pods are deleted (their 30 s of grace
        // end before it) and the instance goes by the start.
        world
            .clock
            .advance(elapsed(starts, world.clock.now()) - Duration::from_secs(120));
        let end = world.run(&mut c, 180);
        let forced: Vec<&String> = events(&end, DisruptionAction::Forced)
            .flat_map(|e| &e.detail)
            .collect();
        assert!(
            forced.contains(&&held) && forced.contains(&&protected),
            "{forced:?}"
        );
        assert!(
            world
                .store
                .get::<NodeClaim>(None, victim.name())
                .expect("get")
                .is_none(),
            "the NodeClaim is gone"
        );
        assert_eq!(
            world.instance_state(&victim),
            Some(InstanceState::Terminated)
        );
        settled(&world, 2);
    }

    /// A queue whose deletes fail: every message is delivered again.
    struct Undeletable(SimulatedInterruptionQueue);

    impl InterruptionQueue for Undeletable {
        fn receive(&self, max: usize) -> Result<Vec<QueueMessage>, CloudError> {
            self.0.receive(max)
        }
        fn delete(&self, _: &str) -> Result<(), CloudError> {
            Err(CloudError::Other("connection reset".into()))
        }
    }

    #[test]
    fn a_restart_between_acting_and_deleting_launches_nothing_more() {
        let world = spot_world();
        let queue = SimulatedInterruptionQueue::new();
        let mut c = world.controller();
        c.set_interruption_queue(Box::new(Undeletable(queue.clone())));
        world.run(&mut c, 120);
        settled(&world, 2);
        let victim = world.live_claims()[0].clone();
        warn(&world, &queue, &victim);
        let first = world.run(&mut c, 3);
        assert_eq!(queue.waiting(), 1, "not deleted");
        assert_eq!(
            events(&first, DisruptionAction::Replacing).count(),
            1,
            "handled once"
        );
        let launches = world.cloud.launch_calls();
        drop(c);
        // A new controller sees the message again.
        let mut c = world.controller();
        c.set_interruption_queue(Box::new(queue.clone()));
        let again = world.run(&mut c, 1);
        assert_eq!(queue.waiting(), 0);
        assert!(again[0].created.is_empty(), "{:?}", again[0].created);
        assert_eq!(world.cloud.launch_calls(), launches);
        world.run(&mut c, 240);
        settled(&world, 2);
        assert_eq!(world.cloud.all_instances().len(), 3);
    }

    #[test]
    fn unknown_and_malformed_messages_are_deleted_and_change_nothing() {
        let world = spot_world();
        let queue = SimulatedInterruptionQueue::new();
        let mut c = world.controller();
        c.set_interruption_queue(Box::new(queue.clone()));
        world.run(&mut c, 120);
        settled(&world, 2);
        queue.send("{not json");
        queue.send(r#"{"source":"aws.s3","detail-type":"Object Created","detail":{}}"#);
        queue.send(spot_interruption_warning(
            "e",
            "i-unknown",
            "2026-01-01T00:00:00Z",
        ));
        let victim = world.live_claims()[0].clone();
        queue.send(
            joiner_controller::interruption::messages::rebalance_recommendation(
                "r",
                &instance_of(&victim),
                "2026-01-01T00:00:00Z",
            ),
        );
        let r = world.run(&mut c, 5);
        assert_eq!(queue.waiting(), 0);
        // Every message deleted is counted; only the two interruption notices have an event
        // time to measure from (the malformed and the foreign one are not read as notices).
        assert_eq!(r.iter().map(|s| s.interruption_deleted).sum::<usize>(), 4);
        assert_eq!(
            r.iter()
                .map(|s| s.interruption_latency.len())
                .sum::<usize>(),
            2
        );
        assert_eq!(events(&r, DisruptionAction::Recommended).count(), 1);
        assert_eq!(events(&r, DisruptionAction::Interrupted).count(), 0);
        assert!(
            r.iter()
                .all(|s| s.created.is_empty() && s.errors.is_empty())
        );
        settled(&world, 2);
    }
}

/// The NodePool's status follows its nodes as Karpenter's does: `kubectl get nodepools` shows
/// how many it has and that it is Ready, and its capacity adds up the NodeClaims'.
#[test]
fn the_nodepool_status_counts_its_nodes_and_says_it_is_ready() {
    let world = World::new(4, |_| {});
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 2);
    let name = world.node_pool().metadata.name.clone().expect("name");
    let pool: NodePool = world.store.get(None, &name).expect("get").expect("pool");
    let status = pool.status.clone().expect("a status is written");
    assert_eq!(status.nodes, 2);
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready");
    assert_eq!(ready.status, "True", "{:?}", status.conditions);
    let gpus: i64 = world
        .live_claims()
        .iter()
        .filter_map(|c| c.status.capacity.get("nvidia.com/gpu"))
        .map(|q| q.nanos() as i64 / 1_000_000_000)
        .sum();
    assert_eq!(
        status
            .resources
            .get("nvidia.com/gpu")
            .map(|q| q.nanos() as i64 / 1_000_000_000),
        Some(gpus)
    );
    // Each NodeClaim is owned by the pool, as Karpenter's are, so deleting the pool takes
    // them (through their finalizer) even with no controller running.
    for claim in world.live_claims() {
        let owners = claim.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(owners.len(), 1, "{}", claim.name());
        assert_eq!(owners[0].kind, "NodePool");
        assert_eq!(Some(&owners[0].uid), pool.metadata.uid.as_ref());
        assert_eq!(owners[0].block_owner_deletion, Some(true));
    }
    // Nothing changes, so nothing is written: the stored pool stays as it was.
    let version = world
        .store
        .get::<NodePool>(None, &name)
        .expect("get")
        .expect("pool")
        .metadata
        .resource_version;
    world.run(&mut c, 60);
    let after: NodePool = world.store.get(None, &name).expect("get").expect("pool");
    assert_eq!(after.metadata.resource_version, version);
}

/// With the NodeOverlay gate on, each overlay's status says whether it applies: of two with
/// the same weight pricing the same offerings, the one later in the alphabet applies and the
/// other reports the conflict (`ValidationSucceeded=False`, reason `Conflict`), as Karpenter's
/// overlay controller writes it.
#[test]
fn node_overlays_say_whether_they_apply() {
    use joiner_model::api::NodeOverlay;
    use joiner_model::feature_gates::FeatureGates;

    let mut world = World::new(2, |_| {});
    let gates = BTreeMap::from([("nodeOverlay".to_string(), true)]);
    world.lab.config.settings.feature_gates =
        FeatureGates::from_values("settings.featureGates", &gates, &mut Vec::new());
    for (name, price) in [("a-discount", "0.5"), ("b-discount", "0.6")] {
        let overlay: NodeOverlay = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
            "metadata": {"name": name},
            "spec": {"requirements": [], "price": price, "weight": 10}
        }))
        .expect("an overlay");
        world.store.create(&overlay).expect("create the overlay");
    }
    let mut c = world.controller();
    world.run(&mut c, 30);
    let condition = |name: &str| {
        let o: NodeOverlay = world.store.get(None, name).expect("get").expect("overlay");
        o.status
            .conditions
            .iter()
            .find(|c| c.type_ == "ValidationSucceeded")
            .map(|c| (c.status.clone(), c.reason.clone()))
    };
    assert_eq!(
        condition("b-discount"),
        Some(("True".into(), "ValidationSucceeded".into()))
    );
    assert_eq!(
        condition("a-discount"),
        Some(("False".into(), "Conflict".into()))
    );
}
