//! [`CachedClient`]: a controller's connection to the in-memory API server, with what a real
//! connection through a watch cache has and the server alone does not.
//!
//! - Reads come from a cache that trails the server by up to
//!   [`InMemoryCluster::set_cache_lag`]: objects other processes wrote since (the kubelet's
//!   Node, the scheduler's bindings, another leader's NodeClaim) appear only when the cache
//!   catches up. Each kind is cached on its own, as each has its own watch, and may trail by
//!   its own amount ([`InMemoryCluster::set_kind_lag`]). The client's own successful writes show at once, as the kube edge's cache
//!   records the answers to its writes.
//! - A create may commit on the server and then answer a timeout
//!   ([`InMemoryCluster::time_out_next_creates`]); the cache does not learn of it.
//! - [`ClusterStore::get_uncached`] reads the server itself.
//! - A kind's watch can fail after its first sync ([`InMemoryCluster::fail_watch`]): reads of
//!   it then answer what the cache held when it failed, as a kube-rs reflector store keeps
//!   answering, and [`ClusterStore::synced`] says the cache is stale.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use super::memory::Stored;
use super::{
    ClusterStore, Deleted, InMemoryCluster, ObjectKey, Preconditions, Resource, StoreError,
};
use crate::clock::elapsed;

/// What the cache of one kind holds: its objects as of `taken`, with this client's writes
/// since.
struct Cache {
    taken: Timestamp,
    objects: BTreeMap<ObjectKey, Stored>,
}

/// One controller's client of an [`InMemoryCluster`] (see the module docs). With no cache lag
/// configured it reads the server directly.
pub struct CachedClient<'a> {
    server: &'a InMemoryCluster,
    /// By kind.
    cache: Mutex<BTreeMap<&'static str, Cache>>,
}

impl<'a> CachedClient<'a> {
    pub fn new(server: &'a InMemoryCluster) -> CachedClient<'a> {
        CachedClient {
            server,
            cache: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<&'static str, Cache>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads `kind` through its cache, re-listing it first once it is older than its lag.
    fn read<T>(&self, kind: &'static str, f: impl FnOnce(&BTreeMap<ObjectKey, Stored>) -> T) -> T {
        let now = self.server.now();
        let lag = self.server.cache_lag_of(kind);
        let mut caches = self.lock();
        let stale = caches
            .get(kind)
            .is_none_or(|c| elapsed(now, c.taken) >= lag);
        if stale {
            let objects = self
                .server
                .snapshot()
                .into_iter()
                .filter(|(k, _)| k.kind == kind)
                .collect();
            caches.insert(
                kind,
                Cache {
                    taken: now,
                    objects,
                },
            );
        }
        match caches.get(kind) {
            Some(c) => f(&c.objects),
            None => f(&BTreeMap::new()),
        }
    }

    /// Records this client's own write in its cache: the object as the server has it now.
    fn learn(&self, key: ObjectKey) {
        let stored = self.server.stored(&key);
        if let Some(c) = self.lock().get_mut(key.kind) {
            match stored {
                Some(o) => c.objects.insert(key, o),
                None => c.objects.remove(&key),
            };
        }
    }

    /// Whether reads of `kind` go to the server (no lag configured for it).
    fn direct(&self, kind: &str) -> bool {
        self.server.cache_lag_of(kind).is_zero()
    }
}

impl ClusterStore for CachedClient<'_> {
    fn list<K: Resource>(&self) -> Result<Vec<K>, StoreError> {
        if let Some(frozen) = self.server.frozen(K::KIND) {
            return Ok(frozen
                .iter()
                .filter(|(k, _)| k.kind == K::KIND)
                .filter_map(|(_, v)| v.downcast_ref::<K>().cloned())
                .collect());
        }
        if self.direct(K::KIND) {
            return self.server.list();
        }
        Ok(self.read(K::KIND, |objects| {
            objects
                .iter()
                .filter(|(k, _)| k.kind == K::KIND)
                .filter_map(|(_, v)| v.downcast_ref::<K>().cloned())
                .collect()
        }))
    }

    fn get<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, StoreError> {
        let key = ObjectKey::of::<K>(namespace, name);
        if let Some(frozen) = self.server.frozen(K::KIND) {
            return Ok(frozen
                .get(&key)
                .and_then(|v| v.downcast_ref::<K>().cloned()));
        }
        if self.direct(K::KIND) {
            return self.server.get(namespace, name);
        }
        Ok(self.read(K::KIND, |objects| {
            objects
                .get(&key)
                .and_then(|v| v.downcast_ref::<K>().cloned())
        }))
    }

    fn get_uncached<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, StoreError> {
        self.server.get(namespace, name)
    }

    fn undecodable<K: Resource>(&self) -> Result<Vec<ObjectKey>, StoreError> {
        self.server.undecodable::<K>()
    }

    fn synced(&self) -> Result<(), StoreError> {
        self.server.synced()
    }

    fn pods_on_node_uncached(&self, node: &str) -> Result<Vec<Pod>, StoreError> {
        self.server.pods_on_node_uncached(node)
    }

    fn create<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
        let timeout = self.server.take_create_timeout();
        let created = self.server.create(object)?;
        let key = ObjectKey::for_object(&created);
        if timeout {
            return Err(StoreError::Unavailable(format!(
                "creating {key}: the request timed out (it may have been applied)"
            )));
        }
        self.learn(key);
        Ok(created)
    }

    fn update<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
        let updated = self.server.update(object)?;
        self.learn(ObjectKey::for_object(object));
        Ok(updated)
    }

    fn delete_if<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
        only: Preconditions<'_>,
    ) -> Result<Deleted, StoreError> {
        let deleted = self.server.delete_if::<K>(namespace, name, only)?;
        self.learn(ObjectKey::of::<K>(namespace, name));
        Ok(deleted)
    }

    fn evict(
        &self,
        namespace: &str,
        name: &str,
        only: Preconditions<'_>,
    ) -> Result<Deleted, StoreError> {
        let evicted = self.server.evict(namespace, name, only)?;
        self.learn(ObjectKey::of::<Pod>(Some(namespace), name));
        Ok(evicted)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::clock::ManualClock;

    fn config_map(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn names(c: &CachedClient<'_>) -> Vec<String> {
        c.list::<ConfigMap>()
            .expect("list")
            .into_iter()
            .filter_map(|m| m.metadata.name)
            .collect()
    }

    #[test]
    fn the_cache_trails_other_writers_but_not_its_own() {
        let clock = ManualClock::new();
        let server = InMemoryCluster::new(clock.clone());
        server.set_cache_lag(Duration::from_secs(20));
        let client = CachedClient::new(&server);
        assert!(names(&client).is_empty());
        server.create(&config_map("theirs")).expect("create");
        client.create(&config_map("mine")).expect("create");
        assert_eq!(
            names(&client),
            ["mine"],
            "another writer's object is not seen yet"
        );
        assert!(
            client
                .get_uncached::<ConfigMap>(None, "theirs")
                .expect("get")
                .is_some(),
            "the server has it"
        );
        clock.advance(Duration::from_secs(20));
        assert_eq!(names(&client), ["mine", "theirs"]);
    }

    #[test]
    fn a_create_can_commit_and_answer_a_timeout() {
        let server = InMemoryCluster::new(ManualClock::new());
        server.set_cache_lag(Duration::from_secs(20));
        let client = CachedClient::new(&server);
        assert!(names(&client).is_empty());
        server.time_out_next_creates(1);
        assert!(matches!(
            client.create(&config_map("a")),
            Err(StoreError::Unavailable(_))
        ));
        assert!(names(&client).is_empty(), "the cache did not learn of it");
        assert!(matches!(
            client.create(&config_map("a")),
            Err(StoreError::AlreadyExists(_))
        ));
        assert!(
            client
                .get_uncached::<ConfigMap>(None, "a")
                .expect("get")
                .is_some()
        );
    }
}
