//! [`KubeStore`]: the controller's [`ClusterStore`](joiner_controller::store::ClusterStore) over
//! an API server.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use joiner_controller::store::{Resource, StoreError};
use kube::Client;
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::cache::KindCache;
use crate::error::KubeError;
use crate::health::KindHealth;
use crate::kinds;
use crate::options::StoreOptions;
use crate::registry::{Registry, Watched};

mod writes;

/// The cluster as the controller sees it: one reflector cache per kind it reads, and writes
/// sent to the API server (see the crate documentation for the consistency argument).
///
/// Cheap to clone; the watch tasks stop when the last clone is dropped.
///
/// The [`ClusterStore`](joiner_controller::store::ClusterStore) methods are synchronous: reads take a lock and copy from the caches;
/// writes run the API call to completion on the runtime given to [`KubeStore::start`] with
/// `Handle::block_on`. Call them from a blocking thread (`tokio::task::spawn_blocking`, or a
/// thread of one's own), never from inside an async task: `block_on` there panics.
#[derive(Clone)]
pub struct KubeStore {
    inner: Arc<Inner>,
}

// The CLI shares one store between its HTTP probes, its loop and blocking steps.
const _: fn() = || {
    fn shareable<T: Clone + Send + Sync + 'static>() {}
    shareable::<KubeStore>();
};

impl std::fmt::Debug for KubeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeStore")
            .field("ready", &self.is_ready())
            .field("kinds", &self.inner.watched.len())
            .finish()
    }
}

struct Inner {
    client: Client,
    handle: Handle,
    options: StoreOptions,
    /// `Arc<KindCache<K>>`s by `TypeId::of::<K>()`, one per watch of the kind.
    caches: HashMap<TypeId, Vec<Arc<dyn Any + Send + Sync>>>,
    watched: Vec<Arc<dyn Watched>>,
    changes: watch::Sender<u64>,
    tasks: Vec<AbortHandle>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl KubeStore {
    /// Starts one reflector per kind the controller reads and waits until every cache has its
    /// first full list, or knows its kind is not served (a CRD not installed: see
    /// [`KubeStore::health`]), or fails after `timeout` naming the kinds still waiting and why.
    ///
    /// Watches the device-plugin ConfigMap of [`StoreOptions::default`]; use
    /// [`KubeStore::start_with`] to follow the settings.
    pub async fn start(
        client: Client,
        handle: Handle,
        timeout: Duration,
    ) -> Result<KubeStore, KubeError> {
        KubeStore::start_with(client, handle, timeout, StoreOptions::default()).await
    }

    /// [`KubeStore::start`] with options (the device-plugin ConfigMap from the settings, say).
    pub async fn start_with(
        client: Client,
        handle: Handle,
        timeout: Duration,
        options: StoreOptions,
    ) -> Result<KubeStore, KubeError> {
        for (what, (ns, name)) in [
            ("device-plugin", &options.device_plugin_config_map),
            ("MIG manager", &options.mig_parted_config_map),
        ] {
            if ns.is_empty() || name.is_empty() {
                return Err(KubeError::Options(format!(
                    "the {what} ConfigMap needs a namespace and a name, got {ns:?}/{name:?}"
                )));
            }
        }
        let (changes, _) = watch::channel(0);
        let mut registry = Registry::new(client, handle, options, changes);
        kinds::watch_all(&mut registry);
        let store = KubeStore {
            inner: Arc::new(Inner {
                client: registry.client,
                handle: registry.handle,
                options: registry.options,
                caches: registry.caches,
                watched: registry.watched,
                changes: registry.changes,
                tasks: registry.tasks,
            }),
        };
        store.settle(timeout).await?;
        Ok(store)
    }

    async fn settle(&self, timeout: Duration) -> Result<(), KubeError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let health = self.health();
            if health.iter().all(KindHealth::settled) {
                for h in health.iter().filter(|h| h.missing) {
                    tracing::warn!("{h}");
                }
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(KubeError::SyncTimeout {
                    timeout,
                    pending: health.into_iter().filter(|h| !h.settled()).collect(),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// True once every cache has synced and no watch is failing. A kind the API server does
    /// not serve counts as synced (and empty) only when it is optional: the DRA kinds on a
    /// cluster without `resource.k8s.io/v1`. A missing NodePool, NodeClaim or EC2NodeClass CRD
    /// makes the store not ready.
    pub fn is_ready(&self) -> bool {
        self.inner.watched.iter().all(|w| w.health().ready())
    }

    /// Every kind's cache state, for `/readyz` bodies and logs (each displays as one line).
    pub fn health(&self) -> Vec<KindHealth> {
        self.inner.watched.iter().map(|w| w.health()).collect()
    }

    /// Resolves at the first change to any watched object after this call (an event, or a
    /// re-list completing), so the controller can step soon after an event instead of only on
    /// its timer. The future owns what it needs (`'static`); create it *before* a step and
    /// await it after, so that events during the step are not missed:
    ///
    /// ```text
    /// loop {
    ///     let changed = store.changed();
    ///     step().await;
    ///     tokio::select! { _ = changed => {}, _ = tokio::time::sleep(period) => {} }
    /// }
    /// ```
    ///
    /// It also resolves when the store is dropped. Busy clusters change constantly: debounce.
    pub fn changed(&self) -> impl Future<Output = ()> + Send + use<> {
        let mut changes = self.inner.changes.subscribe();
        async move {
            let _ = changes.changed().await;
        }
    }

    /// The cache of kind `K` that writes go through: its first watch.
    pub(crate) fn cache<K: Resource>(&self) -> Result<Arc<KindCache<K>>, StoreError> {
        self.caches::<K>()?
            .into_iter()
            .next()
            .ok_or_else(|| not_watched::<K>())
    }

    /// Every cache of kind `K`: more than one where the kind is watched by name in several
    /// places (the ConfigMaps). Nothing writes those kinds, so reads join them.
    pub(crate) fn caches<K: Resource>(&self) -> Result<Vec<Arc<KindCache<K>>>, StoreError> {
        let caches: Vec<Arc<KindCache<K>>> = self
            .inner
            .caches
            .get(&TypeId::of::<K>())
            .into_iter()
            .flatten()
            .filter_map(|c| c.clone().downcast::<KindCache<K>>().ok())
            .collect();
        if caches.is_empty() {
            return Err(not_watched::<K>());
        }
        Ok(caches)
    }
}

fn not_watched<K: Resource>() -> StoreError {
    StoreError::Unavailable(format!("{} is not watched by this store", K::KIND))
}
