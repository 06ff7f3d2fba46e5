//! A simulated cluster for the controller's tests: the learning-lab example in an in-memory
//! store, the built-in catalog as a simulated cloud, a manual clock, a simulated kubelet, and
//! crash injection around every write.

#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use joiner_controller::clock::{Clock, ManualClock};
use joiner_controller::cloud::{
    CloudError, CloudInstanceType, CloudProvider, Instance, InstanceState, LaunchRequest, Launched,
    instance_id_of,
};
use joiner_controller::pods::{is_pending, pod_key};
use joiner_controller::store::{
    CachedClient, ClusterStore, Deleted, InMemoryCluster, ObjectKey, Preconditions, Resource,
    StoreError,
};
use joiner_controller::{Config, Controller, StepReport};
use joiner_engine::catalog::Catalog;
use joiner_model::Manifests;
use joiner_model::api::NodePool;
use joiner_model::api::nodeclaim::{NodeClaim, conditions};
use joiner_model::settings::Settings;
use joiner_model::wellknown::{labels, tags};
use joiner_simulate::scheduler::{collect_orphans, schedule_pending};
use joiner_simulate::{SimulatedCloud, SimulatedKubelet};
use k8s_openapi::api::core::v1::{Node, Pod};

pub const CLUSTER: &str = "lab";

pub fn learning_lab() -> Manifests {
    joiner_test_support::load_example("time-slicing-learning-lab")
}

pub fn config() -> Config {
    let settings = Settings {
        cluster_name: Some(CLUSTER.to_string()),
        ..Settings::default()
    };
    Config::new(settings).expect("config")
}

/// The world outside the controller: survives controller restarts.
pub struct World {
    pub clock: ManualClock,
    pub store: InMemoryCluster,
    pub cloud: SimulatedCloud,
    pub kubelet: SimulatedKubelet,
    /// The configuration every (re)started controller gets.
    pub config: Config,
}

impl World {
    pub fn learning_lab() -> World {
        World::new(&learning_lab())
    }

    /// A world whose cluster holds `manifests`.
    pub fn new(manifests: &Manifests) -> World {
        let clock = ManualClock::new();
        let settings = config().settings;
        let catalog = Catalog::builtin(&settings.region, &settings.zones);
        let world = World {
            store: InMemoryCluster::new(clock.clone()),
            cloud: SimulatedCloud::new(&catalog, clock.clone()),
            kubelet: SimulatedKubelet::default(),
            config: config(),
            clock,
        };
        world.store.load(manifests).expect("load");
        world
    }

    /// Every pod in the cluster now, by key: what their Deployments recreate when they go.
    pub fn pods_by_key(&self) -> BTreeMap<String, Pod> {
        self.store
            .list::<Pod>()
            .expect("pods")
            .into_iter()
            .map(|p| (pod_key(&p), p))
            .collect()
    }

    /// The rest of the cluster before a controller step: the Deployments create again the pods
    /// of `workload` the cluster no longer has (fresh, unbound), the pod garbage collector
    /// deletes the pods of Nodes that are gone, and the scheduler binds pending pods.
    pub fn before_step(&self, workload: &BTreeMap<String, Pod>) {
        for (key, pod) in workload {
            let (ns, name) = key.split_once('/').expect("key");
            if self
                .store
                .get::<Pod>(Some(ns), name)
                .expect("get")
                .is_none()
            {
                let mut fresh = pod.clone();
                fresh.metadata.resource_version = None;
                fresh.metadata.uid = None;
                fresh.spec.as_mut().expect("spec").node_name = None;
                self.store.create(&fresh).expect("recreate");
            }
        }
        collect_orphans(&self.store).expect("orphans");
        schedule_pending(&self.store, &self.config, self.clock.now()).expect("schedule");
    }

    /// No pod is waiting for a node.
    pub fn assert_nothing_pending(&self) {
        let pending: Vec<String> = self
            .store
            .list::<Pod>()
            .expect("pods")
            .iter()
            .filter(|p| is_pending(p))
            .map(pod_key)
            .collect();
        assert!(pending.is_empty(), "pending pods: {pending:?}");
    }

    /// The instance-side world acts, then time moves on by a second.
    pub fn tick(&self) {
        self.kubelet
            .step(&self.store, &self.cloud, self.clock.now())
            .expect("kubelet");
        self.clock.advance(Duration::from_secs(1));
    }

    /// A copy of a learning-lab pod under a new name, as its ReplicaSet would create it.
    pub fn another_lab_pod(&self, name: &str) {
        let mut pod = self
            .store
            .get::<Pod>(Some("default"), "learning-lab-0")
            .expect("get")
            .expect("the lab pod");
        pod.metadata.name = Some(name.to_string());
        pod.metadata.uid = None;
        pod.metadata.resource_version = None;
        self.store.create(&pod).expect("create");
    }

    /// The learning lab's NodePool, as the cluster has it now.
    pub fn node_pool(&self) -> NodePool {
        self.store
            .get(None, "g4-nodepool")
            .expect("get")
            .expect("the lab's NodePool")
    }

    /// Adds a label to the NodePool's node template: every node it made drifts.
    pub fn label_node_template(&self, key: &str, value: &str) {
        let mut pool = self.node_pool();
        pool.spec
            .template
            .metadata
            .labels
            .insert(key.into(), value.into());
        self.store.update(&pool).expect("update");
    }

    /// The names of [`World::live_claims`].
    pub fn live_names(&self) -> Vec<String> {
        self.live_claims()
            .iter()
            .map(|c| c.name().to_string())
            .collect()
    }

    /// The state the cloud reports for the instance of a NodeClaim, if it reports one.
    pub fn instance_state(&self, claim: &NodeClaim) -> Option<InstanceState> {
        self.cloud
            .get(&instance_of(claim))
            .expect("get")
            .map(|i| i.state)
    }

    pub fn live_claims(&self) -> Vec<NodeClaim> {
        self.store
            .list::<NodeClaim>()
            .expect("list")
            .into_iter()
            .filter(|c| !c.is_deleting())
            .collect()
    }

    pub fn running(&self) -> Vec<Instance> {
        self.cloud
            .all_instances()
            .into_iter()
            .filter(|i| i.state != InstanceState::Terminated)
            .filter(|i| tags::is_owned(&i.tags, CLUSTER))
            .collect()
    }

    /// Never two NodeClaims in flight (not deleting, not yet initialized) for the same need:
    /// checked after every step.
    pub fn assert_no_duplicate_need(&self) {
        let mut seen = BTreeSet::new();
        for c in self
            .live_claims()
            .iter()
            .filter(|c| !c.is_true(conditions::INITIALIZED))
        {
            let need = c.label(labels::NEED).unwrap_or_default().to_string();
            assert!(
                seen.insert(need.clone()),
                "two in-flight NodeClaims for need {need}"
            );
        }
    }

    /// Never two live instances for one NodeClaim: checked after every step.
    pub fn assert_one_instance_per_claim(&self) {
        let mut per: BTreeMap<String, usize> = BTreeMap::new();
        for i in self.running() {
            if let Some(n) = i.tags.get(tags::NODECLAIM) {
                *per.entry(n.clone()).or_default() += 1;
            }
        }
        for (claim, n) in per {
            assert!(n <= 1, "NodeClaim {claim} has {n} running instances");
        }
    }

    /// The end state of the learning lab: two initialized NodeClaims for distinct needs, each
    /// with exactly its one instance, no instance without a NodeClaim, two initialized nodes.
    pub fn assert_settled(&self, instances_ever: usize) {
        let claims = self.live_claims();
        assert_eq!(claims.len(), 2, "NodeClaims: {:?}", names(&claims));
        for c in &claims {
            assert!(
                c.is_true(conditions::INITIALIZED),
                "{} not initialized: {:?}",
                c.name(),
                c.status
            );
            assert!(c.is_true(conditions::READY));
            assert_eq!(c.label(labels::INSTANCE_TYPE), Some("g4dn.xlarge"));
        }
        let running = self.running();
        assert_eq!(running.len(), 2, "running instances: {running:#?}");
        for i in &running {
            let owners: Vec<_> = claims
                .iter()
                .filter(|c| c.status.provider_id.as_deref() == Some(i.provider_id().as_str()))
                .collect();
            assert_eq!(
                owners.len(),
                1,
                "instance {} has {} NodeClaims",
                i.id,
                owners.len()
            );
        }
        assert_eq!(
            self.cloud.all_instances().len(),
            instances_ever,
            "instances launched"
        );
        let nodes = self.store.list::<Node>().expect("nodes");
        let initialized = nodes
            .iter()
            .filter(|n| {
                n.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(labels::INITIALIZED))
                    .map(String::as_str)
                    == Some("true")
            })
            .count();
        assert_eq!(initialized, 2);
    }
}

pub fn names(claims: &[NodeClaim]) -> Vec<&str> {
    claims.iter().map(NodeClaim::name).collect()
}

/// The id of the instance a NodeClaim launched (from its provider id).
pub fn instance_of(claim: &NodeClaim) -> String {
    claim
        .status
        .provider_id
        .as_deref()
        .and_then(instance_id_of)
        .expect("the NodeClaim has an instance")
        .to_string()
}

/// A simulated crash, unwound with `resume_unwind` so no panic message is printed.
pub struct Crash;

/// Counts the controller's writes (store creates, updates, deletes; cloud launches and
/// terminations) and crashes the controller at chosen ones, before or after the write took
/// effect (after: the effect happened but the controller never saw the answer).
pub struct Fuse {
    writes: Cell<u64>,
    /// Write numbers (1-based) to crash at, with `true` for after the write.
    at: RefCell<BTreeMap<u64, bool>>,
    pub crashes: Cell<u64>,
}

impl Fuse {
    pub fn new(at: BTreeMap<u64, bool>) -> Fuse {
        Fuse {
            writes: Cell::new(0),
            at: RefCell::new(at),
            crashes: Cell::new(0),
        }
    }

    pub fn writes(&self) -> u64 {
        self.writes.get()
    }

    fn write<T>(&self, f: impl FnOnce() -> T) -> T {
        let n = self.writes.get() + 1;
        self.writes.set(n);
        let crash = self.at.borrow_mut().remove(&n);
        if crash == Some(false) {
            self.crashes.set(self.crashes.get() + 1);
            std::panic::resume_unwind(Box::new(Crash));
        }
        let out = f();
        if crash == Some(true) {
            self.crashes.set(self.crashes.get() + 1);
            std::panic::resume_unwind(Box::new(Crash));
        }
        out
    }
}

/// The controller's client of the world's API server (a fresh watch cache per process), with
/// crashes around its writes.
pub struct FusedStore<'a> {
    pub inner: CachedClient<'a>,
    pub fuse: &'a Fuse,
}

impl ClusterStore for FusedStore<'_> {
    fn list<K: Resource>(&self) -> Result<Vec<K>, StoreError> {
        self.inner.list()
    }
    fn get<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, StoreError> {
        self.inner.get(namespace, name)
    }
    fn get_uncached<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, StoreError> {
        self.inner.get_uncached(namespace, name)
    }
    fn undecodable<K: Resource>(&self) -> Result<Vec<ObjectKey>, StoreError> {
        self.inner.undecodable::<K>()
    }
    fn synced(&self) -> Result<(), StoreError> {
        self.inner.synced()
    }
    fn pods_on_node_uncached(&self, node: &str) -> Result<Vec<Pod>, StoreError> {
        self.inner.pods_on_node_uncached(node)
    }
    fn evict(
        &self,
        namespace: &str,
        name: &str,
        only: Preconditions<'_>,
    ) -> Result<Deleted, StoreError> {
        self.fuse.write(|| self.inner.evict(namespace, name, only))
    }
    fn create<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
        self.fuse.write(|| self.inner.create(object))
    }
    fn update<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
        self.fuse.write(|| self.inner.update(object))
    }
    fn delete_if<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
        only: Preconditions<'_>,
    ) -> Result<Deleted, StoreError> {
        self.fuse
            .write(|| self.inner.delete_if::<K>(namespace, name, only))
    }
}

pub struct FusedCloud<'a> {
    pub inner: &'a SimulatedCloud,
    pub fuse: &'a Fuse,
}

impl CloudProvider for FusedCloud<'_> {
    fn launch(&self, request: &LaunchRequest) -> Result<Launched, CloudError> {
        self.fuse.write(|| self.inner.launch(request))
    }
    fn terminate(&self, instance_id: &str) -> Result<(), CloudError> {
        self.fuse.write(|| self.inner.terminate(instance_id))
    }
    fn reboot(&self, instance_id: &str) -> Result<(), CloudError> {
        self.fuse.write(|| self.inner.reboot(instance_id))
    }
    fn get(&self, instance_id: &str) -> Result<Option<Instance>, CloudError> {
        self.inner.get(instance_id)
    }
    fn list(&self, cluster_name: &str) -> Result<Vec<Instance>, CloudError> {
        self.inner.list(cluster_name)
    }
    fn instance_types(&self) -> Result<Vec<CloudInstanceType>, CloudError> {
        self.inner.instance_types()
    }
    fn delete_unused_launch_templates(
        &self,
        node_classes: &[joiner_model::api::EC2NodeClass],
    ) -> Result<Vec<String>, CloudError> {
        self.fuse
            .write(|| self.inner.delete_unused_launch_templates(node_classes))
    }
    fn list_instance_profiles(&self) -> Result<Vec<String>, CloudError> {
        self.inner.list_instance_profiles()
    }
    fn delete_instance_profile(&self, name: &str) -> Result<(), CloudError> {
        self.fuse.write(|| self.inner.delete_instance_profile(name))
    }
    fn resolve_node_class(
        &self,
        class: &joiner_model::api::EC2NodeClass,
    ) -> joiner_controller::cloud::NodeClassResolution {
        self.inner.resolve_node_class(class)
    }
}

pub type FusedController<'a> = Controller<FusedStore<'a>, FusedCloud<'a>, &'a ManualClock>;

pub fn fused_controller<'a>(world: &'a World, fuse: &'a Fuse) -> FusedController<'a> {
    Controller::new(
        FusedStore {
            inner: CachedClient::new(&world.store),
            fuse,
        },
        FusedCloud {
            inner: &world.cloud,
            fuse,
        },
        &world.clock,
        world.config.clone(),
    )
}

/// Runs `steps` seconds of the learning lab with the controller crashing where `fuse` says,
/// restarting it (a new controller over the same store and cloud) after each crash. `before`
/// runs before each step (to inject faults). Returns every step's report.
pub fn run_with_crashes(
    world: &World,
    fuse: &Fuse,
    steps: usize,
    mut before: impl FnMut(usize, &World),
) -> Vec<StepReport> {
    let mut reports = Vec::new();
    let mut controller = fused_controller(world, fuse);
    for step in 0..steps {
        before(step, world);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| controller.step()));
        match result {
            Ok(r) => reports.push(r),
            Err(payload) => {
                assert!(payload.is::<Crash>(), "a real panic, not a simulated crash");
                // The restart: everything the old controller held in memory is gone.
                controller = fused_controller(world, fuse);
            }
        }
        world.assert_one_instance_per_claim();
        world.assert_no_duplicate_need();
        world.tick();
    }
    reports
}

/// A tiny xorshift generator: deterministic, no dependency.
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The in-memory API server with two hooks, for tests of one misbehaviour: a kind whose
/// listing fails, and something another writer does just before each update reaches it.
pub struct HookedStore<'a> {
    pub inner: &'a InMemoryCluster,
    /// The error a listing of this kind answers, if any.
    pub failing_list: Option<(&'static str, StoreError)>,
    /// Called with the server and the object (as JSON) before each update is applied.
    pub before_update: Box<BeforeUpdate<'a>>,
}

/// What another writer does before an update reaches the server: given the server, the kind
/// and the object sent.
pub type BeforeUpdate<'a> = dyn Fn(&InMemoryCluster, &'static str, &serde_json::Value) + 'a;

impl<'a> HookedStore<'a> {
    pub fn new(inner: &'a InMemoryCluster) -> Self {
        HookedStore {
            inner,
            failing_list: None,
            before_update: Box::new(|_, _, _| {}),
        }
    }
}

impl ClusterStore for HookedStore<'_> {
    fn list<K: Resource>(&self) -> Result<Vec<K>, StoreError> {
        match &self.failing_list {
            Some((kind, e)) if *kind == K::KIND => Err(e.clone()),
            _ => self.inner.list(),
        }
    }
    fn get<K: Resource>(&self, ns: Option<&str>, name: &str) -> Result<Option<K>, StoreError> {
        self.inner.get(ns, name)
    }
    fn get_uncached<K: Resource>(
        &self,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, StoreError> {
        self.inner.get_uncached(ns, name)
    }
    fn undecodable<K: Resource>(&self) -> Result<Vec<ObjectKey>, StoreError> {
        self.inner.undecodable::<K>()
    }
    fn synced(&self) -> Result<(), StoreError> {
        self.inner.synced()
    }
    fn pods_on_node_uncached(&self, node: &str) -> Result<Vec<Pod>, StoreError> {
        self.inner.pods_on_node_uncached(node)
    }
    fn create<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
        self.inner.create(object)
    }
    fn update<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
        let json = serde_json::to_value(object).unwrap_or_default();
        (self.before_update)(self.inner, K::KIND, &json);
        self.inner.update(object)
    }
    fn delete_if<K: Resource>(
        &self,
        ns: Option<&str>,
        name: &str,
        only: Preconditions<'_>,
    ) -> Result<Deleted, StoreError> {
        self.inner.delete_if::<K>(ns, name, only)
    }
    fn evict(&self, ns: &str, name: &str, only: Preconditions<'_>) -> Result<Deleted, StoreError> {
        self.inner.evict(ns, name, only)
    }
}
