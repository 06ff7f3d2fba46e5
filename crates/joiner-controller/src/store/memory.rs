//! An in-process cluster store with the API server's write semantics, for tests and
//! `joiner simulate`.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use joiner_model::kinds::{KINDS, Kind};
use joiner_model::{Manifests, Source, Sourced};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::{ClusterStore, Deleted, ObjectKey, Resource, StoreError, pdb};
use crate::clock::{Clock, k8s_time};

/// Objects kept typed (no serialization round trip, so nothing the serde types skip is lost).
type Stored = Box<dyn Any + Send + Sync>;

/// An object stored as the raw JSON no typed read can decode.
struct Undecodable(#[allow(dead_code)] serde_json::Value);

struct Inner {
    objects: BTreeMap<ObjectKey, Stored>,
    /// The last resourceVersion handed out; one counter for all kinds, as etcd's revision.
    revision: u64,
}

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
            }),
            clock: Box::new(clock),
        }
    }

    /// Poisoning only means another thread panicked mid-call; every write below is a single
    /// map operation, so the map is consistent and stays usable (a simulated crash must not
    /// take the "API server" down with it).
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
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
                Kind::ResourceClaim => put(self, &m.resource_claims)?,
                Kind::ResourceClaimTemplate => put(self, &m.resource_claim_templates)?,
                Kind::ResourceSlice => put(self, &m.resource_slices)?,
                Kind::PodDisruptionBudget => put(self, &m.pod_disruption_budgets)?,
                // Expanded into pods above; the catalog is not a cluster object.
                Kind::Deployment
                | Kind::ReplicaSet
                | Kind::StatefulSet
                | Kind::Job
                | Kind::InstanceType => {}
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
        inner.objects.insert(key, Box::new(Undecodable(raw)));
    }

    fn next_revision(inner: &mut Inner) -> String {
        inner.revision += 1;
        inner.revision.to_string()
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
            Kind::ResourceClaim => m.resource_claims = all(store)?,
            Kind::ResourceClaimTemplate => m.resource_claim_templates = all(store)?,
            Kind::ResourceSlice => m.resource_slices = all(store)?,
            Kind::PodDisruptionBudget => m.pod_disruption_budgets = all(store)?,
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
        // This store is the API server: nothing stands between.
        self.get(namespace, name)
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

    fn evict(&self, namespace: &str, name: &str) -> Result<Deleted, StoreError> {
        let key = ObjectKey::of::<Pod>(Some(namespace), name);
        let Some(pod) = self.get::<Pod>(Some(namespace), name)? else {
            return Err(StoreError::NotFound(key));
        };
        let pdbs = self.list::<PodDisruptionBudget>()?;
        let pods = self.list::<Pod>()?;
        if !pdb::Budgets::new(&pdbs, &pods).try_evict(&pod) {
            return Err(StoreError::Refused(
                key,
                "Cannot evict pod as it would violate the pod's disruption budget.".into(),
            ));
        }
        self.delete::<Pod>(Some(namespace), name)
    }

    fn create<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
        let key = ObjectKey::for_object(object);
        if key.name.is_empty() {
            return Err(StoreError::Invalid(key, "metadata.name is required".into()));
        }
        let now = k8s_time(self.clock.now());
        let mut inner = self.lock();
        if inner.objects.contains_key(&key) {
            return Err(StoreError::AlreadyExists(key));
        }
        let mut stored = object.clone();
        let revision = Self::next_revision(&mut inner);
        let meta = stored.meta_mut();
        meta.namespace = key.namespace.clone();
        meta.uid = Some(format!("uid-{revision}"));
        meta.resource_version = Some(revision);
        meta.creation_timestamp = Some(now);
        meta.deletion_timestamp = None;
        meta.generation = Some(1);
        inner.objects.insert(key, Box::new(stored.clone()));
        Ok(stored)
    }

    fn update<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
        let key = ObjectKey::for_object(object);
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
            inner.objects.insert(key, Box::new(stored.clone()));
        }
        Ok(stored)
    }

    fn delete<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Deleted, StoreError> {
        let key = ObjectKey::of::<K>(namespace, name);
        let now = k8s_time(self.clock.now());
        let mut inner = self.lock();
        let Some(current) = inner.objects.get(&key).and_then(|v| v.downcast_ref::<K>()) else {
            return Err(StoreError::NotFound(key));
        };
        if current.meta().finalizers.as_ref().is_none_or(Vec::is_empty) {
            inner.objects.remove(&key);
            return Ok(Deleted::Gone);
        }
        if current.meta().deletion_timestamp.is_some() {
            return Ok(Deleted::Pending);
        }
        let mut marked = current.clone();
        let revision = Self::next_revision(&mut inner);
        marked.meta_mut().deletion_timestamp = Some(now);
        marked.meta_mut().resource_version = Some(revision);
        inner.objects.insert(key, Box::new(marked));
        Ok(Deleted::Pending)
    }
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
