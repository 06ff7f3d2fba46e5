//! Termination through the controller: every way a node ends drains it first, a drain ends only
//! when the API server says its pods are gone, and no node is left a ghost.
//!
//! The learning lab runs in the in-memory cluster with a simulated cloud and kubelet, a
//! scheduler, and Deployments that recreate their pods once the old ones are gone. Deleted pods
//! stay Terminating for their grace period, as a kubelet keeps them.

use crate::common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Deref;

use joiner_controller::clock::{Clock, ManualClock};
use joiner_controller::pods::pod_key;
use joiner_controller::store::{
    ClusterStore, Deleted, InMemoryCluster, ObjectKey, Preconditions, Resource, StoreError,
};
use joiner_controller::termination::drain::waits_for;
use joiner_controller::{Controller, DisruptionEvent, StepReport};
use joiner_model::api::nodeclaim::{NodeClaim, conditions};
use joiner_model::wellknown::{DisruptionAction, finalizers, taints};
use joiner_simulate::{SimulatedAttacher, SimulatedCloud};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// How long the lab's pods take to stop once deleted.
const GRACE_SECONDS: i64 = 20;

struct World {
    lab: common::World,
    /// Pods their Deployment recreates when they go.
    workload: RefCell<BTreeMap<String, Pod>>,
    /// Persistent volumes attached where their pods run.
    attacher: RefCell<SimulatedAttacher>,
}

impl Deref for World {
    type Target = common::World;

    fn deref(&self) -> &common::World {
        &self.lab
    }
}

type Ctl<'a> = Controller<&'a InMemoryCluster, &'a SimulatedCloud, ManualClock>;

impl World {
    /// The learning lab with four replicas, slow to stop, never consolidated.
    fn new() -> World {
        World::with(|_| {})
    }

    /// [`World::new`] with the lab's pod template changed.
    fn with(change: impl Fn(&mut k8s_openapi::api::core::v1::PodSpec)) -> World {
        let mut m = joiner_test_support::load_example("time-slicing-learning-lab");
        for d in &mut m.deployments {
            let spec = &mut d.object.spec;
            spec.replicas = Some(4);
            if let Some(pod) = spec.template.spec.as_mut() {
                pod.termination_grace_period_seconds = Some(GRACE_SECONDS);
                change(pod);
            }
        }
        let lab = common::World::new(&m);
        let mut pool = lab.node_pool();
        pool.spec.disruption.consolidate_after = "Never".into();
        lab.store.update(&pool).expect("update");
        World::around(lab)
    }

    fn around(lab: common::World) -> World {
        World {
            workload: RefCell::new(lab.pods_by_key()),
            attacher: RefCell::new(SimulatedAttacher::default()),
            lab,
        }
    }

    fn controller(&self) -> Ctl<'_> {
        Controller::new(
            &self.store,
            &self.cloud,
            self.clock.clone(),
            self.config.clone(),
        )
    }

    fn step<S: ClusterStore>(
        &self,
        c: &mut Controller<S, &SimulatedCloud, ManualClock>,
    ) -> StepReport {
        self.before_step(&self.workload.borrow());
        let r = c.step();
        self.attacher
            .borrow_mut()
            .step(&self.store, self.clock.now())
            .expect("attacher");
        self.tick();
        r
    }

    fn run(&self, c: &mut Ctl<'_>, seconds: u64) -> Vec<StepReport> {
        (0..seconds).map(|_| self.step(c)).collect()
    }

    /// A PodDisruptionBudget over the lab's pods allowing `max_unavailable` at a time.
    fn budget(&self, max_unavailable: i32) {
        self.store
            .create(&PodDisruptionBudget {
                metadata: ObjectMeta {
                    name: Some("lab".into()),
                    namespace: Some("default".into()),
                    ..ObjectMeta::default()
                },
                spec: Some(PodDisruptionBudgetSpec {
                    max_unavailable: Some(IntOrString::Int(max_unavailable)),
                    selector: Some(LabelSelector {
                        match_labels: Some(
                            [("app".to_string(), "learning-lab".to_string())].into(),
                        ),
                        ..LabelSelector::default()
                    }),
                    ..PodDisruptionBudgetSpec::default()
                }),
                status: None,
            })
            .expect("pdb");
    }

    /// The settled lab's NodeClaim with the most pods, and its Node's name.
    fn busiest(&self) -> (NodeClaim, String) {
        let pods = self.store.list::<Pod>().expect("pods");
        self.live_claims()
            .into_iter()
            .filter_map(|c| {
                let node = c.status.node_name.clone()?;
                let n = pods
                    .iter()
                    .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&node))
                    .count();
                Some((n, c, node))
            })
            .max_by_key(|(n, c, _)| (*n, c.name().to_string()))
            .map(|(_, c, node)| (c, node))
            .expect("a NodeClaim with a node")
    }

    /// Pods a drain of `node` still waits for, by a read of the API server.
    fn left_on(&self, node: &str) -> Vec<String> {
        self.store
            .pods_on_node_uncached(node)
            .expect("pods")
            .iter()
            .filter(|p| waits_for(p, node, self.clock.now()))
            .map(pod_key)
            .collect()
    }
}

fn events(reports: &[StepReport], action: DisruptionAction) -> Vec<&DisruptionEvent> {
    reports
        .iter()
        .flat_map(|r| &r.disruption)
        .filter(|e| e.action == action)
        .collect()
}

fn settle(world: &World, c: &mut Ctl<'_>) {
    world.run(c, 120);
    assert_eq!(world.live_claims().len(), 2);
    world.assert_nothing_pending();
}

#[test]
fn a_nodeclaim_deleted_by_hand_drains_pod_by_pod_and_terminates_after_the_last_pod() {
    let world = World::new();
    world.budget(1);
    let mut c = world.controller();
    settle(&world, &mut c);
    let (claim, node) = world.busiest();
    let instance = common::instance_of(&claim);
    let mine = world.left_on(&node);
    assert!(mine.len() >= 2, "the busiest node has pods: {mine:?}");
    assert_eq!(
        world.store.delete::<NodeClaim>(None, claim.name()),
        Ok(Deleted::Pending),
        "kubectl delete nodeclaim: the finalizer holds it"
    );
    let mut reports = Vec::new();
    let mut terminated_at = None;
    for step in 0..600 {
        let r = world.step(&mut c);
        let done = r.terminated.contains(&instance);
        if done {
            assert!(
                world.left_on(&node).is_empty(),
                "terminated under pods: {:?}",
                world.left_on(&node)
            );
            terminated_at = Some(step);
        }
        reports.push(r);
        if done {
            break;
        }
    }
    let terminated_at = terminated_at.expect("the instance is terminated");
    let evicted = events(&reports, DisruptionAction::Evicted);
    assert!(
        evicted
            .iter()
            .all(|e| e.detail.len() == 1 && e.node_claims == [claim.name()]),
        "one pod at a time: {evicted:?}"
    );
    let pods: Vec<&String> = evicted.iter().flat_map(|e| &e.detail).collect();
    for p in &mine {
        assert!(pods.contains(&p), "{p} was evicted: {pods:?}");
    }
    assert!(events(&reports, DisruptionAction::Forced).is_empty());
    // The last eviction's pod took its grace period to stop before the instance went.
    let last_eviction = reports
        .iter()
        .rposition(|r| {
            r.disruption
                .iter()
                .any(|e| e.action == DisruptionAction::Evicted)
        })
        .expect("evictions");
    assert!(
        terminated_at >= last_eviction + GRACE_SECONDS as usize,
        "terminated {} s after the last eviction",
        terminated_at - last_eviction
    );
    // The first eviction tainted the node and nothing was terminated before it.
    assert!(
        reports[..last_eviction]
            .iter()
            .all(|r| r.terminated.is_empty())
    );
    assert!(
        world
            .store
            .get::<NodeClaim>(None, claim.name())
            .expect("get")
            .is_none(),
        "the finalizer let the NodeClaim go"
    );
    assert!(world.store.get::<Node>(None, &node).expect("get").is_none());
    world.run(&mut c, 180);
    world.assert_nothing_pending();
    world.assert_one_instance_per_claim();
}

#[test]
fn a_node_deleted_by_hand_ends_its_nodeclaim_and_its_pods_are_served_again() {
    let world = World::new();
    let mut c = world.controller();
    settle(&world, &mut c);
    let (claim, node) = world.busiest();
    let registered: Node = world.store.get(None, &node).expect("get").expect("node");
    assert!(
        registered
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == finalizers::TERMINATION),
        "registration put Joiner's finalizer on the Node"
    );
    assert_eq!(
        world.store.delete::<Node>(None, &node),
        Ok(Deleted::Pending),
        "kubectl delete node: the finalizer holds it"
    );
    let first = world.step(&mut c);
    assert!(
        first.deleted.contains(&claim.name().to_string()),
        "{first:?}"
    );
    let tainted: Node = world.store.get(None, &node).expect("get").expect("node");
    assert!(
        tainted
            .spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == taints::DISRUPTED)
    );
    let reports = world.run(&mut c, 300);
    let evicted = events(std::slice::from_ref(&first), DisruptionAction::Evicted);
    assert!(
        !evicted.is_empty(),
        "drained in the step that saw the deletion: {first:?}"
    );
    assert!(
        world
            .store
            .get::<NodeClaim>(None, claim.name())
            .expect("get")
            .is_none()
            && world.store.get::<Node>(None, &node).expect("get").is_none(),
        "the NodeClaim and its Node are gone"
    );
    assert!(
        world
            .running()
            .iter()
            .all(|i| i.id != common::instance_of(&claim)),
        "its instance is terminated"
    );
    // The evicted pods were planned onto a new NodeClaim at the first plan after they went
    // pending.
    let first_plan = reports.iter().find(|r| r.planned).expect("a plan");
    assert!(!first_plan.created.is_empty(), "{first_plan:?}");
    assert_eq!(world.live_claims().len(), 2);
    world.assert_nothing_pending();
}

#[test]
fn a_registered_nodeclaim_whose_node_vanished_is_not_left_a_ghost() {
    let world = World::new();
    let mut c = world.controller();
    settle(&world, &mut c);
    let (claim, node) = world.busiest();
    // Gone past Joiner's finalizer (removed by hand, or a Node registered before Joiner added
    // one).
    let mut n: Node = world.store.get(None, &node).expect("get").expect("node");
    n.metadata.finalizers = None;
    world.store.update(&n).expect("update");
    world.store.delete::<Node>(None, &node).expect("delete");
    let r = world.step(&mut c);
    assert!(r.deleted.contains(&claim.name().to_string()), "{r:?}");
    world.run(&mut c, 240);
    assert!(
        world
            .store
            .get::<NodeClaim>(None, claim.name())
            .expect("get")
            .is_none()
    );
    assert!(
        world
            .running()
            .iter()
            .all(|i| i.id != common::instance_of(&claim))
    );
    assert_eq!(world.live_claims().len(), 2);
    assert!(
        world
            .live_claims()
            .iter()
            .all(|c| c.is_true(conditions::INITIALIZED))
    );
    world.assert_nothing_pending();
}

/// A NodePool name of 60 characters: every NodeClaim, replacements included, gets a name that
/// fits the Node's `karpenter.sh/nodeclaim` label value, so nodes launch, register and are
/// replaced instead of timing out in a loop.
#[test]
fn a_nodepool_with_a_sixty_character_name_launches_registers_and_is_replaced() {
    let long = format!("{}h10", "gpu-inference-pool-".repeat(3));
    assert_eq!(long.len(), 60);
    let mut m = joiner_test_support::load_example("time-slicing-learning-lab");
    m.node_pools[0].object.metadata.name = Some(long.clone());
    let world = World::around(common::World::new(&m));
    let mut c = world.controller();
    let mut reports = world.run(&mut c, 120);
    assert_eq!(world.live_claims().len(), 2);
    world.assert_nothing_pending();
    let registered: Vec<String> = reports.iter().flat_map(|r| r.registered.clone()).collect();
    assert_eq!(registered.len(), 2, "{registered:?}");
    // Drift replaces both nodes: the replacements' names fit too.
    let mut pool: joiner_model::api::NodePool =
        world.store.get(None, &long).expect("get").expect("pool");
    pool.spec
        .template
        .metadata
        .labels
        .insert("team".into(), "research".into());
    world.store.update(&pool).expect("update");
    reports.extend(world.run(&mut c, 900));
    let created: Vec<String> = reports.iter().flat_map(|r| r.created.clone()).collect();
    assert!(created.len() >= 4, "{created:?}");
    for name in &created {
        assert!(
            joiner_model::names::is_label_value(name),
            "{name} ({} characters)",
            name.len()
        );
    }
    assert!(
        reports.iter().all(|r| r.errors.is_empty()),
        "no write was refused"
    );
    let live = world.live_claims();
    assert_eq!(live.len(), 2);
    assert!(
        live.iter()
            .all(|c| c.name().contains("-r") && c.is_true(conditions::INITIALIZED))
    );
    for node in world.store.list::<Node>().expect("nodes") {
        let labels = node.metadata.labels.unwrap_or_default();
        assert_eq!(labels.get("karpenter.sh/nodepool"), Some(&long));
    }
    world.assert_nothing_pending();
}

/// A watch cache that hides a pod from the moment its eviction is accepted (as the kube edge's
/// does, until the watch shows it terminating): the listing says the node is empty while the
/// API server still has its pods in their grace period.
struct HidesEvictedPods<'a>(&'a InMemoryCluster);

impl ClusterStore for HidesEvictedPods<'_> {
    fn list<K: Resource>(&self) -> Result<Vec<K>, StoreError> {
        let all = self.0.list::<K>()?;
        Ok(all
            .into_iter()
            .filter(|o| {
                (o as &dyn std::any::Any)
                    .downcast_ref::<Pod>()
                    .is_none_or(|p| p.metadata.deletion_timestamp.is_none())
            })
            .collect())
    }
    fn get<K: Resource>(&self, ns: Option<&str>, name: &str) -> Result<Option<K>, StoreError> {
        self.0.get(ns, name)
    }
    fn get_uncached<K: Resource>(
        &self,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, StoreError> {
        self.0.get_uncached(ns, name)
    }
    fn undecodable<K: Resource>(&self) -> Result<Vec<ObjectKey>, StoreError> {
        self.0.undecodable::<K>()
    }
    fn synced(&self) -> Result<(), StoreError> {
        self.0.synced()
    }
    fn pods_on_node_uncached(&self, node: &str) -> Result<Vec<Pod>, StoreError> {
        self.0.pods_on_node_uncached(node)
    }
    fn create<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
        self.0.create(object)
    }
    fn update<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
        self.0.update(object)
    }
    fn delete_if<K: Resource>(
        &self,
        ns: Option<&str>,
        name: &str,
        only: Preconditions<'_>,
    ) -> Result<Deleted, StoreError> {
        self.0.delete_if::<K>(ns, name, only)
    }
    fn evict(&self, ns: &str, name: &str, only: Preconditions<'_>) -> Result<Deleted, StoreError> {
        self.0.evict(ns, name, only)
    }
}

#[test]
fn a_drain_ends_when_the_api_server_says_the_pods_are_gone_not_the_cache() {
    let world = World::new();
    let mut c = world.controller();
    settle(&world, &mut c);
    let (claim, node) = world.busiest();
    let instance = common::instance_of(&claim);
    let mut blind = Controller::new(
        HidesEvictedPods(&world.store),
        &world.cloud,
        world.clock.clone(),
        world.config.clone(),
    );
    world
        .store
        .delete::<NodeClaim>(None, claim.name())
        .expect("delete");
    let first = world.step(&mut blind);
    assert!(!events(std::slice::from_ref(&first), DisruptionAction::Evicted).is_empty());
    let mut terminated_at = None;
    for second in 1..=120 {
        let r = world.step(&mut blind);
        if r.terminated.contains(&instance) {
            assert!(
                world.left_on(&node).is_empty(),
                "{:?}",
                world.left_on(&node)
            );
            terminated_at = Some(second);
            break;
        }
    }
    let at = terminated_at.expect("terminated once the pods stopped");
    assert!(
        at >= GRACE_SECONDS as u64 - 1,
        "the cache showed the node empty at once; the instance waited {at} s for the pods' grace period"
    );
}

/// An EC2NodeClass tag that would make Joiner's instances look like a managed node group's:
/// the class is not Ready (its condition names the tag), nothing is launched from it, its pods
/// say why; once the tag is removed, nodes launch.
#[test]
fn a_nodeclass_tag_that_defeats_the_ownership_check_launches_nothing() {
    use joiner_model::api::EC2NodeClass;
    use joiner_model::api::nodeclass_status::{conditions as class_conditions, reasons};

    let world = World::new();
    let mut class = world.store.list::<EC2NodeClass>().expect("classes")[0].clone();
    class
        .spec
        .tags
        .insert("eks:nodegroup-name".into(), "system".into());
    world.store.update(&class).expect("update");
    let mut c = world.controller();
    let reports = world.run(&mut c, 90);
    assert!(world.cloud.all_instances().is_empty(), "nothing launched");
    let class: EC2NodeClass = world
        .store
        .get(None, class.metadata.name.as_deref().unwrap_or_default())
        .expect("get")
        .expect("class");
    // As Karpenter's validation controller says it: ValidationSucceeded is False naming the
    // tag, and Ready is False for it.
    let condition = |t: &str| {
        class
            .status
            .as_ref()
            .and_then(|s| s.condition(t))
            .cloned()
            .expect(t)
    };
    let validation = condition(class_conditions::VALIDATION_SUCCEEDED);
    assert_eq!(
        (validation.status.as_str(), validation.reason.as_str()),
        ("False", reasons::RESTRICTED_TAG)
    );
    let ready = condition(class_conditions::READY);
    assert_eq!(ready.status, "False");
    assert!(
        ready.message.contains("ValidationSucceeded=False")
            && ready.message.contains("eks:nodegroup-name"),
        "{}",
        ready.message
    );
    let reasons: Vec<&String> = reports
        .iter()
        .flat_map(|r| r.unschedulable.iter().map(|(_, why)| why))
        .collect();
    assert!(
        reasons.iter().any(|why| why.contains("eks:nodegroup-name")),
        "{reasons:?}"
    );
    let mut fixed = class;
    fixed.spec.tags.remove("eks:nodegroup-name");
    world.store.update(&fixed).expect("update");
    world.run(&mut c, 120);
    assert_eq!(world.live_claims().len(), 2);
    world.assert_nothing_pending();
}

/// A drain that a PodDisruptionBudget will never let through, on a NodeClaim without a
/// terminationGracePeriod, is not silent: the NodeClaim's `Drained` condition names the pods
/// and how to let them go, written once rather than every step; the instance stays.
#[test]
fn a_drain_that_cannot_proceed_says_why_on_the_nodeclaim() {
    let world = World::new();
    world.budget(0);
    let mut c = world.controller();
    settle(&world, &mut c);
    let (claim, _) = world.busiest();
    world
        .store
        .delete::<NodeClaim>(None, claim.name())
        .expect("delete");
    let first = world.step(&mut c);
    let said: NodeClaim = world
        .store
        .get(None, claim.name())
        .expect("get")
        .expect("kept");
    let drained = said
        .condition(conditions::DRAINED)
        .expect("Drained")
        .clone();
    assert_eq!(
        (drained.status.as_str(), drained.reason.as_str()),
        ("False", "DrainBlocked")
    );
    assert!(
        drained.message.contains("PodDisruptionBudget"),
        "{}",
        drained.message
    );
    assert!(
        drained.message.contains("terminationGracePeriod"),
        "{}",
        drained.message
    );
    let version = said.metadata.resource_version.clone();
    let rest = world.run(&mut c, 60);
    let told: Vec<_> = std::iter::once(&first)
        .chain(&rest)
        .flat_map(|r| &r.node_claim_events)
        .filter(|e| e.kind == joiner_model::wellknown::TerminationEvent::FailedDraining)
        .collect();
    assert_eq!(
        told.len(),
        1,
        "one FailedDraining event, not one per step: {told:?}"
    );
    assert_eq!(told[0].node_claim, claim.name());
    let later: NodeClaim = world
        .store
        .get(None, claim.name())
        .expect("get")
        .expect("kept");
    assert_eq!(
        later.metadata.resource_version, version,
        "said once, not every step"
    );
    assert!(
        world
            .running()
            .iter()
            .any(|i| i.id == common::instance_of(&claim)),
        "the instance stays while its pods cannot leave"
    );
}

/// A node whose pods use a persistent volume: after the last pod has stopped, the instance
/// waits for the volume to detach (a minute here), and the NodeClaim says what it waits for.
#[test]
fn termination_waits_for_the_nodes_volumes_to_detach() {
    use k8s_openapi::api::core::v1::{PersistentVolumeClaimVolumeSource, Volume};
    use k8s_openapi::api::storage::v1::VolumeAttachment;

    let world = World::with(|pod| {
        pod.volumes = Some(vec![Volume {
            name: "data".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: "data".into(),
                read_only: None,
            }),
            ..Volume::default()
        }]);
    });
    world.attacher.borrow_mut().detach_delay = std::time::Duration::from_secs(60);
    // The claim, provisioned where its first pod lands (EBS's gp3 class, as EKS installs it).
    let claim: k8s_openapi::api::core::v1::PersistentVolumeClaim =
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "data", "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "gp3",
                     "resources": {"requests": {"storage": "10Gi"}}}
        }))
        .expect("a claim");
    let class: k8s_openapi::api::storage::v1::StorageClass =
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gp3"}, "provisioner": "ebs.csi.aws.com",
            "volumeBindingMode": "WaitForFirstConsumer"
        }))
        .expect("a class");
    world.store.create(&claim).expect("create the claim");
    world.store.create(&class).expect("create the class");
    let mut c = world.controller();
    settle(&world, &mut c);
    let (claim, node) = world.busiest();
    let instance = common::instance_of(&claim);
    let attached = |w: &World| {
        w.store
            .list::<VolumeAttachment>()
            .expect("attachments")
            .into_iter()
            .filter(|v| v.spec.node_name == node)
            .count()
    };
    assert_eq!(
        attached(&world),
        1,
        "the pods' volume is attached to the node"
    );
    world
        .store
        .delete::<NodeClaim>(None, claim.name())
        .expect("delete");
    let mut drained_at = None;
    let mut terminated_at = None;
    let mut said = false;
    for second in 0..300u64 {
        let r = world.step(&mut c);
        if drained_at.is_none() && world.left_on(&node).is_empty() {
            drained_at = Some(second);
        }
        if let Some(kept) = world
            .store
            .get::<NodeClaim>(None, claim.name())
            .expect("get")
        {
            said |= kept
                .condition(conditions::VOLUMES_DETACHED)
                .is_some_and(|c| c.status == "False" && c.message.contains("pvc-default-data"));
        }
        if r.terminated.contains(&instance) {
            assert_eq!(
                attached(&world),
                0,
                "terminated with a volume still attached"
            );
            terminated_at = Some(second);
            break;
        }
    }
    let (drained, terminated) = (
        drained_at.expect("drained"),
        terminated_at.expect("terminated"),
    );
    assert!(
        terminated >= drained + 59,
        "drained at {drained} s, terminated at {terminated} s: the volume takes 60 s to detach"
    );
    assert!(said, "the NodeClaim named the volume it waited for");
}

/// The Pod watch fails after its first sync in the middle of a drain: the controller cannot
/// see the node's pods, so it terminates nothing; once the watch recovers the drain finishes.
#[test]
fn a_pod_watch_that_fails_mid_drain_terminates_nothing() {
    use joiner_controller::store::CachedClient;

    let world = World::new();
    let mut c = world.controller();
    settle(&world, &mut c);
    let (claim, node) = world.busiest();
    let instance = common::instance_of(&claim);
    let mut through_cache = Controller::new(
        CachedClient::new(&world.store),
        &world.cloud,
        world.clock.clone(),
        world.config.clone(),
    );
    world
        .store
        .delete::<NodeClaim>(None, claim.name())
        .expect("delete");
    world.store.fail_watch("Pod");
    let blind = (0..90)
        .map(|_| world.step(&mut through_cache))
        .collect::<Vec<_>>();
    assert!(
        blind.iter().all(|r| r.terminated.is_empty()),
        "nothing terminated blind"
    );
    assert!(
        blind.iter().all(|r| !r.errors.is_empty()),
        "each step says it cannot read"
    );
    assert!(!world.left_on(&node).is_empty(), "no pod was evicted blind");
    world.store.heal_watch("Pod");
    let mut terminated = false;
    for _ in 0..180 {
        if world
            .step(&mut through_cache)
            .terminated
            .contains(&instance)
        {
            assert!(world.left_on(&node).is_empty());
            terminated = true;
            break;
        }
    }
    assert!(terminated, "the drain finished once the watch recovered");
}

/// A pod that tolerates the disrupted taint is not evicted (it would only come back) and does
/// not hold the drain up; each step says so for it, and the instance goes with it still there.
#[test]
fn a_pod_tolerating_the_disrupted_taint_is_left_and_said_so() {
    use joiner_controller::NotDrained;
    use k8s_openapi::api::core::v1::Toleration;

    let world = World::new();
    let mut c = world.controller();
    settle(&world, &mut c);
    let (claim, node) = world.busiest();
    let instance = common::instance_of(&claim);
    let mut stays = world
        .store
        .pods_on_node_uncached(&node)
        .expect("pods")
        .remove(0);
    stays
        .spec
        .as_mut()
        .expect("spec")
        .tolerations
        .get_or_insert_with(Vec::new)
        .push(Toleration {
            key: Some(taints::DISRUPTED.into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        });
    let stays = world.store.update(&stays).expect("tolerate");
    let key = pod_key(&stays);
    world
        .store
        .delete::<NodeClaim>(None, claim.name())
        .expect("delete");
    let mut reports = Vec::new();
    for _ in 0..120 {
        let r = world.step(&mut c);
        let done = r.terminated.contains(&instance);
        reports.push(r);
        if done {
            break;
        }
    }
    assert!(
        reports.iter().any(|r| r.terminated.contains(&instance)),
        "the drain did not wait for it"
    );
    let evicted: Vec<&String> = events(&reports, DisruptionAction::Evicted)
        .into_iter()
        .flat_map(|e| &e.detail)
        .collect();
    assert!(!evicted.contains(&&key), "{evicted:?}");
    assert!(
        reports[0]
            .not_drained
            .contains(&(key.clone(), NotDrained::ToleratesDisruption)),
        "{:?}",
        reports[0].not_drained
    );
}

/// A Node registered without the finalizer (by an earlier version, or someone removed it) gets
/// it back, so deleting it later still drains it.
#[test]
fn a_running_node_without_the_finalizer_gets_it_back() {
    let world = World::new();
    let mut c = world.controller();
    settle(&world, &mut c);
    let (_, node) = world.busiest();
    let mut n: Node = world.store.get(None, &node).expect("get").expect("node");
    n.metadata.finalizers = None;
    world.store.update(&n).expect("update");
    world.step(&mut c);
    let back: Node = world.store.get(None, &node).expect("get").expect("node");
    assert!(
        back.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == finalizers::TERMINATION),
        "{:?}",
        back.metadata.finalizers
    );
}

/// A drain held up by a budget whose instance the cloud then takes (a spot reclaim, someone
/// terminating it by hand) does not wedge: nothing is left to drain, so the Node and the
/// NodeClaim go.
#[test]
fn a_blocked_drain_whose_instance_the_cloud_took_lets_go() {
    let world = World::new();
    world.budget(0);
    let mut c = world.controller();
    settle(&world, &mut c);
    let (claim, node) = world.busiest();
    let instance = common::instance_of(&claim);
    world
        .store
        .delete::<NodeClaim>(None, claim.name())
        .expect("delete");
    world.run(&mut c, 30);
    assert!(
        world
            .store
            .get::<NodeClaim>(None, claim.name())
            .expect("get")
            .is_some(),
        "held by the budget"
    );
    assert!(
        world
            .cloud
            .reclaim_after(&instance, std::time::Duration::ZERO)
    );
    world.run(&mut c, 5);
    assert!(
        world
            .store
            .get::<NodeClaim>(None, claim.name())
            .expect("get")
            .is_none(),
        "the NodeClaim went with its instance"
    );
    assert!(world.store.get::<Node>(None, &node).expect("get").is_none());
}

/// A TerminateInstances call that fails leaves the NodeClaim (and its finalizer) in place, is
/// counted by the instance's zone (Karpenter's termination failures), and the next step
/// terminates the instance.
#[test]
fn a_failed_termination_is_counted_and_tried_again() {
    let world = World::new();
    let mut c = world.controller();
    settle(&world, &mut c);
    let claim = world.live_claims()[0].clone();
    let instance = common::instance_of(&claim);
    let zone = claim
        .label(joiner_model::wellknown::labels::ZONE)
        .expect("zone")
        .to_string();
    world.cloud.fail_next_terminations(1);
    world
        .store
        .delete::<NodeClaim>(None, claim.name())
        .expect("delete");
    let reports = world.run(&mut c, 300);
    let failed: Vec<&String> = reports
        .iter()
        .flat_map(|r| &r.termination_failures)
        .collect();
    assert_eq!(failed, [&zone]);
    let failed_at = reports
        .iter()
        .position(|r| !r.termination_failures.is_empty())
        .expect("the failure");
    let done_at = reports
        .iter()
        .position(|r| r.terminated.contains(&instance))
        .expect("terminated on a later step");
    assert!(done_at > failed_at);
    assert_eq!(
        world
            .cloud
            .terminate_calls()
            .iter()
            .filter(|i| **i == instance)
            .count(),
        1,
        "the failed call never reached the instance"
    );
}
