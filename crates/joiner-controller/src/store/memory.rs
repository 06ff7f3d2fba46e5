//! An in-process cluster store with the API server's write semantics, for tests and
//! `joiner simulate`.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use joiner_model::kinds::{KINDS, Kind};
use joiner_model::{Manifests, Source, Sourced};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::{ClusterStore, Deleted, ObjectKey, Preconditions, Resource, StoreError, pdb};
use crate::clock::{Clock, k8s_time};
use crate::pods::grace_period_of;

/// Objects kept typed (no serialization round trip, so nothing the serde types skip is lost).
/// A stored object is never changed in place, only replaced, so a snapshot of the map (what
/// a client's watch cache holds) shares them.
pub(super) type Stored = Arc<dyn Any + Send + Sync>;

/// An object stored as the raw JSON no typed read can decode.
struct Undecodable(#[allow(dead_code)] serde_json::Value);

struct Inner {
    objects: BTreeMap<ObjectKey, Stored>,
    /// The last resourceVersion handed out; one counter for all kinds, as etcd's revision.
    revision: u64,
    /// How far the watch caches of [`super::CachedClient`]s trail this server.
    cache_lag: Duration,
    /// Kinds whose watch trails by another amount than `cache_lag`.
    kind_lag: BTreeMap<&'static str, Duration>,
    /// How many more creates through a client commit and then answer a timeout.
    create_timeouts: u32,
    /// Creates committed, by kind: what happened, whatever the callers were answered.
    created: BTreeMap<&'static str, u64>,
    /// Pods evicted and not yet created again, with when: the API server's PodDisruptionBudget
    /// status counts them as expected and unhealthy (`status.disruptedPods`, and the owner's
    /// scale in `expectedPods`) until their controller replaces them, or for 2 minutes.
    evicted: BTreeMap<ObjectKey, (Pod, k8s_openapi::jiff::Timestamp)>,
    /// Kinds whose watch, in every client's cache, has failed after its first sync (`*`: every
    /// kind), each with what the server held when it failed: reads of them through a
    /// [`super::CachedClient`] answer that, however stale, until it recovers.
    failing_watches: BTreeMap<&'static str, BTreeMap<ObjectKey, Stored>>,
    /// Pods deleted while bound to a Node, Terminating until their kubelet has stopped them:
    /// when each is gone (its `deletionTimestamp`, which the API server sets to the deletion's
    /// time plus the pod's grace period).
    terminating: BTreeMap<ObjectKey, k8s_openapi::jiff::Timestamp>,
}

/// How long an evicted pod counts against its budgets without a replacement (the disruption
/// controller's `DeletionTimeout`).
const EVICTION_MEMORY: Duration = Duration::from_secs(2 * 60);

/// A cluster held in memory. Shared by reference between the controller, the simulated kubelet
/// and the test, which stand for different processes talking to one API server.
pub struct InMemoryCluster {
    inner: Mutex<Inner>,
    clock: Box<dyn Clock + Send + Sync>,
}

impl std::fmt::Debug for InMemoryCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("InMemoryCluster")
            .field("objects", &inner.objects.len())
            .field("revision", &inner.revision)
            .finish()
    }
}

impl InMemoryCluster {
    /// An empty cluster whose timestamps (creation, deletion) come from `clock`.
    pub fn new(clock: impl Clock + Send + Sync + 'static) -> InMemoryCluster {
        InMemoryCluster {
            inner: Mutex::new(Inner {
                objects: BTreeMap::new(),
                revision: 0,
                cache_lag: Duration::ZERO,
                kind_lag: BTreeMap::new(),
                create_timeouts: 0,
                created: BTreeMap::new(),
                evicted: BTreeMap::new(),
                terminating: BTreeMap::new(),
                failing_watches: Default::default(),
            }),
            clock: Box::new(clock),
        }
    }

    /// Poisoning only means another thread panicked mid-call; every write below is a single
    /// map operation, so the map is consistent and stays usable (a simulated crash must not
    /// take the "API server" down with it).
    ///
    /// Every call first lets the kubelets finish the pods whose grace period is over.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        let now = self.clock.now();
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        reap(&mut inner, now);
        inner
    }

    /// Adds every object `m` holds that a cluster would store (workloads are expanded into
    /// their pods, as their controllers would). Existing names are replaced.
    pub fn load(&self, m: &Manifests) -> Result<(), StoreError> {
        fn put<K: Resource>(
            store: &InMemoryCluster,
            list: &[Sourced<K>],
        ) -> Result<(), StoreError> {
            for o in list {
                let key = ObjectKey::for_object(&o.object);
                let existing: Option<K> = store.get(key.namespace.as_deref(), &key.name)?;
                match existing {
                    Some(old) => {
                        let mut new = o.object.clone();
                        new.meta_mut().resource_version = old.meta().resource_version.clone();
                        store.update(&new)?;
                    }
                    None => {
                        store.create(&o.object)?;
                    }
                }
            }
            Ok(())
        }
        for k in KINDS {
            match k.kind {
                // A cluster holds the pods its workloads' controllers made.
                Kind::Pod => put(self, &joiner_model::workloads::expand_workloads(m))?,
                Kind::Node => put(self, &m.nodes)?,
                Kind::DaemonSet => put(self, &m.daemon_sets)?,
                Kind::NodePool => put(self, &m.node_pools)?,
                Kind::NodeClaim => put(self, &m.node_claims)?,
                Kind::EC2NodeClass => put(self, &m.node_classes)?,
                Kind::ConfigMap => put(self, &m.config_maps)?,
                Kind::DeviceClass => put(self, &m.device_classes)?,
                Kind::DeviceTaintRule => put(self, &m.device_taint_rules)?,
                Kind::ResourceClaim => put(self, &m.resource_claims)?,
                Kind::ResourceClaimTemplate => put(self, &m.resource_claim_templates)?,
                Kind::ResourceSlice => put(self, &m.resource_slices)?,
                Kind::PodDisruptionBudget => put(self, &m.pod_disruption_budgets)?,
                Kind::VolumeAttachment => put(self, &m.volume_attachments)?,
                Kind::PersistentVolumeClaim => put(self, &m.persistent_volume_claims)?,
                Kind::PersistentVolume => put(self, &m.persistent_volumes)?,
                Kind::StorageClass => put(self, &m.storage_classes)?,
                Kind::NodeOverlay => put(self, &m.node_overlays)?,
                Kind::PodTemplate => put(self, &m.pod_templates)?,
                Kind::CapacityBuffer => put(self, &m.capacity_buffers)?,
                // Held as a cluster holds them (a CapacityBuffer's `scalableRef` reads them);
                // their pods are expanded above, and the planner reads those.
                Kind::Deployment => put(self, &m.deployments)?,
                Kind::ReplicaSet => put(self, &m.replica_sets)?,
                Kind::StatefulSet => put(self, &m.stateful_sets)?,
                // The catalog is not a cluster object; a Job's pods are expanded above.
                Kind::Job | Kind::InstanceType => {}
            }
        }
        Ok(())
    }

    /// The cluster as the planner reads it: every kind [`joiner_model::Manifests`] holds that
    /// is stored here, NodeClaims included.
    pub fn manifests(&self) -> Result<Manifests, StoreError> {
        manifests_of(self)
    }

    /// Stores an object that no typed read can decode, as an API server holds one written
    /// through a newer CRD or by another tool (a NodeClaim with a `Gte` requirement, say):
    /// `list` and `get` leave it out and [`ClusterStore::undecodable`] names it.
    pub fn put_undecodable(&self, key: ObjectKey, raw: serde_json::Value) {
        let mut inner = self.lock();
        Self::next_revision(&mut inner);
        inner.objects.insert(key, Arc::new(Undecodable(raw)));
    }

    /// The watch caches of the controllers' clients ([`super::CachedClient`]) trail this
    /// server by up to `lag` (zero: they read the server).
    pub fn set_cache_lag(&self, lag: Duration) {
        self.lock().cache_lag = lag;
    }

    /// The watch of `kind` (`"Pod"`; `"*"` for every kind) fails in every client from now on,
    /// after its first sync, as a watch whose connection keeps breaking does: reads of it
    /// through a [`super::CachedClient`] answer what the server held now, as kube-rs's reflector
    /// store keeps answering, until [`Self::heal_watch`]; [`ClusterStore::synced`] fails
    /// meanwhile (the server's own, too: it stands for the controller's view in the tests that
    /// read it directly).
    pub fn fail_watch(&self, kind: &'static str) {
        let mut inner = self.lock();
        let frozen = inner.objects.clone();
        inner.failing_watches.entry(kind).or_insert(frozen);
    }

    pub fn heal_watch(&self, kind: &str) {
        self.lock().failing_watches.remove(kind);
    }

    /// What a client's cache of `kind` holds while its watch is failing (every kind's objects
    /// as of the failure); `None` while it is not.
    pub(super) fn frozen(&self, kind: &str) -> Option<BTreeMap<ObjectKey, Stored>> {
        let inner = self.lock();
        inner
            .failing_watches
            .get(kind)
            .or_else(|| inner.failing_watches.get("*"))
            .cloned()
    }

    pub(super) fn now(&self) -> k8s_openapi::jiff::Timestamp {
        self.clock.now()
    }

    /// The watch cache of `kind` trails this server by `lag`, whatever
    /// [`Self::set_cache_lag`] says: each kind has a watch of its own, and one may be further
    /// behind than another (a client may see a NodePool's new spec before it sees a NodeClaim
    /// deleted earlier).
    pub fn set_kind_lag(&self, kind: &'static str, lag: Duration) {
        self.lock().kind_lag.insert(kind, lag);
    }

    /// How far the watch cache of `kind` trails.
    pub(super) fn cache_lag_of(&self, kind: &str) -> Duration {
        let inner = self.lock();
        inner.kind_lag.get(kind).copied().unwrap_or(inner.cache_lag)
    }

    /// The next `n` creates through a client commit and then answer a timeout, as a create
    /// whose answer was lost does.
    pub fn time_out_next_creates(&self, n: u32) {
        let mut inner = self.lock();
        inner.create_timeouts = inner.create_timeouts.saturating_add(n);
    }

    /// How many objects of `kind` creates have committed (loading objects is not creating
    /// them), including creates whose answer was a timeout.
    pub fn creates_committed(&self, kind: &str) -> u64 {
        self.lock().created.get(kind).copied().unwrap_or(0)
    }

    /// Whether the create about to be sent through a client is one that times out.
    pub(super) fn take_create_timeout(&self) -> bool {
        let mut inner = self.lock();
        let due = inner.create_timeouts > 0;
        inner.create_timeouts = inner.create_timeouts.saturating_sub(1);
        due
    }

    /// Every object as stored now: what a watch cache holds after a full list.
    pub(super) fn snapshot(&self) -> BTreeMap<ObjectKey, Stored> {
        self.lock().objects.clone()
    }

    pub(super) fn stored(&self, key: &ObjectKey) -> Option<Stored> {
        self.lock().objects.get(key).cloned()
    }

    fn next_revision(inner: &mut Inner) -> String {
        inner.revision += 1;
        inner.revision.to_string()
    }
}

/// The kubelets of the cluster: a Terminating pod whose grace period is over is stopped and
/// its object removed, as a kubelet's final delete (grace period 0) does.
fn reap(inner: &mut Inner, now: k8s_openapi::jiff::Timestamp) {
    if inner.terminating.is_empty() {
        return;
    }
    let due: Vec<ObjectKey> = inner
        .terminating
        .iter()
        .filter(|(_, gone_at)| **gone_at <= now)
        .map(|(k, _)| k.clone())
        .collect();
    for key in due {
        inner.terminating.remove(&key);
        inner.objects.remove(&key);
        InMemoryCluster::next_revision(inner);
    }
}

/// Reads a planner input from any store.
pub fn manifests_of<S: ClusterStore + ?Sized>(store: &S) -> Result<Manifests, StoreError> {
    fn all<K: Resource, S: ClusterStore + ?Sized>(
        store: &S,
    ) -> Result<Vec<Sourced<K>>, StoreError> {
        Ok(store
            .list::<K>()?
            .into_iter()
            .map(|object| Sourced {
                origin: Source::new("cluster", 0),
                object,
            })
            .collect())
    }
    let mut m = Manifests::default();
    for k in KINDS {
        match k.kind {
            Kind::Pod => m.pods = all(store)?,
            Kind::Node => m.nodes = all(store)?,
            Kind::DaemonSet => m.daemon_sets = all(store)?,
            Kind::NodePool => m.node_pools = all(store)?,
            Kind::NodeClaim => m.node_claims = all(store)?,
            Kind::EC2NodeClass => m.node_classes = all(store)?,
            Kind::ConfigMap => m.config_maps = all(store)?,
            Kind::DeviceClass => m.device_classes = all(store)?,
            Kind::DeviceTaintRule => m.device_taint_rules = all(store)?,
            Kind::ResourceClaim => m.resource_claims = all(store)?,
            Kind::ResourceClaimTemplate => m.resource_claim_templates = all(store)?,
            Kind::ResourceSlice => m.resource_slices = all(store)?,
            Kind::PodDisruptionBudget => m.pod_disruption_budgets = all(store)?,
            Kind::VolumeAttachment => m.volume_attachments = all(store)?,
            Kind::PersistentVolumeClaim => m.persistent_volume_claims = all(store)?,
            Kind::PersistentVolume => m.persistent_volumes = all(store)?,
            Kind::StorageClass => m.storage_classes = all(store)?,
            Kind::NodeOverlay => m.node_overlays = all(store)?,
            Kind::PodTemplate => m.pod_templates = all(store)?,
            Kind::CapacityBuffer => m.capacity_buffers = all(store)?,
            // Not stored in a cluster Joiner reads (see the table's `live` column).
            Kind::Deployment
            | Kind::ReplicaSet
            | Kind::StatefulSet
            | Kind::Job
            | Kind::InstanceType => {}
        }
    }
    Ok(m)
}

impl ClusterStore for InMemoryCluster {
    fn list<K: Resource>(&self) -> Result<Vec<K>, StoreError> {
        let inner = self.lock();
        Ok(inner
            .objects
            .iter()
            .filter(|(k, _)| k.kind == K::KIND)
            .filter_map(|(_, v)| v.downcast_ref::<K>().cloned())
            .collect())
    }

    fn get<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, StoreError> {
        let key = ObjectKey::of::<K>(namespace, name);
        Ok(self
            .lock()
            .objects
            .get(&key)
            .and_then(|v| v.downcast_ref::<K>().cloned()))
    }

    fn get_uncached<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, StoreError> {
        // This store is the API server: nothing stands between. An object that does not
        // decode fails the read, as a real client's GET does; only a cache leaves it out.
        let key = ObjectKey::of::<K>(namespace, name);
        if self
            .lock()
            .objects
            .get(&key)
            .is_some_and(|v| v.is::<Undecodable>())
        {
            return Err(StoreError::Unavailable(format!(
                "{key}: the API server's answer does not decode"
            )));
        }
        self.get(namespace, name)
    }

    fn synced(&self) -> Result<(), StoreError> {
        let inner = self.lock();
        if inner.failing_watches.is_empty() {
            return Ok(());
        }
        let kinds: Vec<&str> = inner.failing_watches.keys().copied().collect();
        Err(StoreError::Unavailable(format!(
            "the watch of {} is failing: the cache is stale",
            kinds.join(", ")
        )))
    }
    fn pods_on_node_uncached(&self, node: &str) -> Result<Vec<Pod>, StoreError> {
        Ok(self
            .list::<Pod>()?
            .into_iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .collect())
    }

    fn undecodable<K: Resource>(&self) -> Result<Vec<ObjectKey>, StoreError> {
        Ok(self
            .lock()
            .objects
            .iter()
            .filter(|(k, v)| k.kind == K::KIND && v.is::<Undecodable>())
            .map(|(k, _)| k.clone())
            .collect())
    }

    fn evict(
        &self,
        namespace: &str,
        name: &str,
        only: Preconditions<'_>,
    ) -> Result<Deleted, StoreError> {
        let key = ObjectKey::of::<Pod>(Some(namespace), name);
        let Some(pod) = self.get::<Pod>(Some(namespace), name)? else {
            return Err(StoreError::NotFound(key));
        };
        if !only.met_by(&pod.metadata) {
            return Err(StoreError::Conflict(key));
        }
        let pdbs = self.list::<PodDisruptionBudget>()?;
        let mut pods = self.list::<Pod>()?;
        let now = self.clock.now();
        {
            let mut inner = self.lock();
            inner
                .evicted
                .retain(|_, (_, at)| crate::clock::elapsed(now, *at) < EVICTION_MEMORY);
            // Evicted pods not replaced yet: expected, not healthy.
            pods.extend(inner.evicted.values().map(|(p, _)| p.clone()));
        }
        if !pdb::Budgets::new(&pdbs, &pods).try_evict(&pod) {
            return Err(StoreError::Refused(
                key,
                "Cannot evict pod as it would violate the pod's disruption budget.".into(),
            ));
        }
        let deleted = self.delete_if::<Pod>(Some(namespace), name, only)?;
        let mut gone = pod;
        if let Some(spec) = gone.spec.as_mut() {
            spec.node_name = None;
        }
        self.lock().evicted.insert(key, (gone, now));
        Ok(deleted)
    }

    fn create<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
        let key = ObjectKey::for_object(object);
        if key.name.is_empty() {
            return Err(StoreError::Invalid(key, "metadata.name is required".into()));
        }
        validate_labels(&key, object.meta())?;
        let now = k8s_time(self.clock.now());
        let mut inner = self.lock();
        if inner.objects.contains_key(&key) {
            return Err(StoreError::AlreadyExists(key));
        }
        // A pod created under an evicted pod's name is its replacement.
        inner.evicted.remove(&key);
        let mut stored = object.clone();
        let revision = Self::next_revision(&mut inner);
        let meta = stored.meta_mut();
        meta.namespace = key.namespace.clone();
        meta.uid = Some(format!("uid-{revision}"));
        meta.resource_version = Some(revision);
        meta.creation_timestamp = Some(now);
        meta.deletion_timestamp = None;
        meta.generation = Some(1);
        *inner.created.entry(key.kind).or_default() += 1;
        inner.objects.insert(key, Arc::new(stored.clone()));
        Ok(stored)
    }

    fn update<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
        let key = ObjectKey::for_object(object);
        validate_labels(&key, object.meta())?;
        let mut inner = self.lock();
        let Some(current) = inner.objects.get(&key).and_then(|v| v.downcast_ref::<K>()) else {
            return Err(StoreError::NotFound(key));
        };
        let current = current.meta().clone();
        if object.meta().resource_version != current.resource_version {
            return Err(StoreError::Conflict(key));
        }
        let mut stored = object.clone();
        let revision = Self::next_revision(&mut inner);
        let meta = stored.meta_mut();
        // Fields only the server sets.
        meta.namespace = key.namespace.clone();
        meta.uid = current.uid;
        meta.creation_timestamp = current.creation_timestamp;
        meta.deletion_timestamp = current.deletion_timestamp.clone();
        meta.resource_version = Some(revision);
        meta.generation = current.generation;
        let finalized =
            meta.deletion_timestamp.is_some() && meta.finalizers.as_ref().is_none_or(Vec::is_empty);
        if finalized {
            inner.objects.remove(&key);
        } else {
            inner.objects.insert(key, Arc::new(stored.clone()));
        }
        Ok(stored)
    }

    fn delete_if<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
        only: Preconditions<'_>,
    ) -> Result<Deleted, StoreError> {
        let key = ObjectKey::of::<K>(namespace, name);
        let now = k8s_time(self.clock.now());
        let mut inner = self.lock();
        let Some(current) = inner.objects.get(&key).and_then(|v| v.downcast_ref::<K>()) else {
            return Err(StoreError::NotFound(key));
        };
        if !only.met_by(current.meta()) {
            return Err(StoreError::Conflict(key));
        }
        if current.meta().deletion_timestamp.is_some() {
            return Ok(Deleted::Pending);
        }
        let grace = terminating_grace(&inner, current as &dyn Any);
        let no_finalizers = current.meta().finalizers.as_ref().is_none_or(Vec::is_empty);
        if no_finalizers && grace.is_none() {
            inner.objects.remove(&key);
            return Ok(Deleted::Gone);
        }
        let mut marked = current.clone();
        let revision = Self::next_revision(&mut inner);
        let meta = marked.meta_mut();
        meta.resource_version = Some(revision);
        match grace {
            // A bound pod: Terminating until its kubelet has stopped it.
            Some(seconds) => {
                let gone_at = crate::clock::add(
                    now.0,
                    Duration::from_secs(u64::try_from(seconds).unwrap_or(0)),
                );
                meta.deletion_timestamp = Some(k8s_time(gone_at));
                meta.deletion_grace_period_seconds = Some(seconds);
                if no_finalizers {
                    inner.terminating.insert(key.clone(), gone_at);
                }
            }
            None => meta.deletion_timestamp = Some(now),
        }
        inner.objects.insert(key, Arc::new(marked));
        Ok(Deleted::Pending)
    }
}

/// Refuses a label value the API server refuses (HTTP 422), naming the label.
fn validate_labels(
    key: &ObjectKey,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Result<(), StoreError> {
    for (label, value) in meta.labels.iter().flatten() {
        if !joiner_model::names::is_label_value(value) {
            return Err(StoreError::Invalid(
                key.clone(),
                format!(
                    "metadata.labels: Invalid value: {value:?}: a valid label must be an empty string or consist of at most 63 alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (label {label})"
                ),
            ));
        }
    }
    Ok(())
}

/// The grace period a deleted object is given to stop, when it is a pod a kubelet runs (bound
/// to a Node that exists, with a grace period over zero); `None` for everything else, which
/// the API server removes at once (an unscheduled pod has no kubelet to wait for).
fn terminating_grace(inner: &Inner, object: &dyn Any) -> Option<i64> {
    let pod = object.downcast_ref::<Pod>()?;
    let node = pod.spec.as_ref()?.node_name.as_deref()?;
    let node_exists =
        inner
            .objects
            .contains_key(&ObjectKey::of::<k8s_openapi::api::core::v1::Node>(
                None, node,
            ));
    let grace = grace_period_of(pod);
    (node_exists && grace > 0).then_some(grace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn config_map(name: &str, finalizers: &[&str]) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                finalizers: Some(finalizers.iter().map(|f| f.to_string()).collect()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[test]
    fn writes_follow_the_api_server() {
        let store = InMemoryCluster::new(ManualClock::new());
        let created = store.create(&config_map("a", &[])).expect("create");
        assert_eq!(created.metadata.namespace.as_deref(), Some("default"));
        assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
        assert!(matches!(
            store.create(&config_map("a", &[])),
            Err(StoreError::AlreadyExists(_))
        ));
        // An update from a stale read conflicts.
        let updated = store.update(&created).expect("update");
        assert_ne!(
            updated.metadata.resource_version,
            created.metadata.resource_version
        );
        assert!(matches!(
            store.update(&created),
            Err(StoreError::Conflict(_))
        ));
        assert_eq!(store.delete::<ConfigMap>(None, "a"), Ok(Deleted::Gone));
        assert!(matches!(
            store.delete::<ConfigMap>(None, "a"),
            Err(StoreError::NotFound(_))
        ));
    }

    #[test]
    fn evictions_honour_pod_disruption_budgets_and_deletes_do_not() {
        use k8s_openapi::api::core::v1::PodSpec;
        use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

        let store = InMemoryCluster::new(ManualClock::new());
        for name in ["a", "b"] {
            store
                .create(&Pod {
                    metadata: ObjectMeta {
                        name: Some(name.into()),
                        labels: Some([("app".to_string(), "web".to_string())].into()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(PodSpec {
                        node_name: Some("n".into()),
                        ..PodSpec::default()
                    }),
                    ..Pod::default()
                })
                .expect("pod");
        }
        store
            .create(&PodDisruptionBudget {
                metadata: ObjectMeta {
                    name: Some("web".into()),
                    ..ObjectMeta::default()
                },
                spec: Some(PodDisruptionBudgetSpec {
                    min_available: Some(IntOrString::Int(1)),
                    selector: Some(LabelSelector {
                        match_labels: Some([("app".to_string(), "web".to_string())].into()),
                        ..LabelSelector::default()
                    }),
                    ..PodDisruptionBudgetSpec::default()
                }),
                status: None,
            })
            .expect("pdb");
        let any = Preconditions::NONE;
        assert_eq!(store.evict("default", "a", any), Ok(Deleted::Gone));
        assert!(matches!(
            store.evict("default", "b", any),
            Err(StoreError::Refused(..))
        ));
        assert!(store.get::<Pod>(None, "b").expect("get").is_some());
        assert_eq!(store.delete::<Pod>(None, "b"), Ok(Deleted::Gone));
        assert!(matches!(
            store.evict("default", "b", any),
            Err(StoreError::NotFound(_))
        ));
    }

    #[test]
    fn deletes_and_evictions_with_a_uid_spare_an_object_that_took_the_name() {
        let store = InMemoryCluster::new(ManualClock::new());
        let pod = |name: &str| Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        };
        let old = store.create(&pod("web-0")).expect("pod");
        store.delete::<Pod>(None, "web-0").expect("delete");
        // A StatefulSet recreates it under the same name.
        let new = store.create(&pod("web-0")).expect("pod");
        assert_ne!(old.metadata.uid, new.metadata.uid);
        let stale = Preconditions::of(&old.metadata);
        assert!(matches!(
            store.evict("default", "web-0", stale),
            Err(StoreError::Conflict(_))
        ));
        assert!(matches!(
            store.delete_if::<Pod>(None, "web-0", stale),
            Err(StoreError::Conflict(_))
        ));
        assert!(store.get::<Pod>(None, "web-0").expect("get").is_some());
        assert_eq!(
            store.evict("default", "web-0", Preconditions::of(&new.metadata)),
            Ok(Deleted::Gone)
        );
    }

    #[test]
    fn objects_that_do_not_decode_are_named_not_listed() {
        let store = InMemoryCluster::new(ManualClock::new());
        store.create(&config_map("good", &[])).expect("create");
        let key = ObjectKey::of::<ConfigMap>(None, "bad");
        store.put_undecodable(key.clone(), serde_json::json!({"data": 7}));
        let listed: Vec<_> = store
            .list::<ConfigMap>()
            .expect("list")
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect();
        assert_eq!(listed, ["good"]);
        assert_eq!(store.undecodable::<ConfigMap>(), Ok(vec![key]));
        assert!(store.get::<ConfigMap>(None, "bad").expect("get").is_none());
        // A read past the cache fails, as the real client's does; it never says "not found".
        assert!(matches!(
            store.get_uncached::<ConfigMap>(None, "bad"),
            Err(StoreError::Unavailable(_))
        ));
    }

    #[test]
    fn delete_waits_for_finalizers() {
        let store = InMemoryCluster::new(ManualClock::new());
        store.create(&config_map("b", &["x"])).expect("create");
        assert_eq!(store.delete::<ConfigMap>(None, "b"), Ok(Deleted::Pending));
        let mut marked: ConfigMap = store.get(None, "b").expect("get").expect("kept");
        assert!(marked.metadata.deletion_timestamp.is_some());
        // An update cannot clear deletionTimestamp.
        marked.metadata.deletion_timestamp = None;
        let kept = store.update(&marked).expect("update");
        assert!(kept.metadata.deletion_timestamp.is_some());
        // Removing the last finalizer lets the object go.
        let mut last = kept;
        last.metadata.finalizers = Some(Vec::new());
        store.update(&last).expect("update");
        assert!(store.get::<ConfigMap>(None, "b").expect("get").is_none());
    }
}
