//! The kinds a store watches, as the store starts them: each kind's cache (by type), its
//! health, and the task that keeps it. Which kinds, and where each is watched, is `kinds`'s.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use joiner_controller::store::Resource;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::cache::KindCache;
use crate::health::KindHealth;
use crate::options::StoreOptions;
use crate::typed::Typed;

/// A kind's cache, as the store asks after its health without knowing its type.
pub(crate) trait Watched: Send + Sync {
    fn health(&self) -> KindHealth;
}

impl<K: Resource> Watched for KindCache<K> {
    fn health(&self) -> KindHealth {
        KindCache::health(self)
    }
}

/// Where a kind is watched.
pub(crate) enum Scope<'a> {
    /// Every namespace (or cluster-scoped).
    All,
    /// One namespace, with a watch configuration (a field selector).
    Namespace(&'a str, watcher::Config),
}

/// Collects the caches and their tasks while the store starts.
pub(crate) struct Registry {
    pub(crate) client: Client,
    pub(crate) handle: Handle,
    pub(crate) options: StoreOptions,
    /// `Arc<KindCache<K>>` by `TypeId::of::<K>()`: one per watch of the kind (two ConfigMaps
    /// by name are two watches).
    pub(crate) caches: HashMap<TypeId, Vec<Arc<dyn Any + Send + Sync>>>,
    pub(crate) watched: Vec<Arc<dyn Watched>>,
    pub(crate) changes: watch::Sender<u64>,
    pub(crate) tasks: Vec<AbortHandle>,
}

impl Registry {
    /// An empty registry: nothing watched yet.
    pub(crate) fn new(
        client: Client,
        handle: Handle,
        options: StoreOptions,
        changes: watch::Sender<u64>,
    ) -> Registry {
        Registry {
            client,
            handle,
            options,
            caches: HashMap::new(),
            watched: Vec::new(),
            changes,
            tasks: Vec::new(),
        }
    }

    /// Starts the watch of kind `K`. `required`: the controller cannot work without it (a kind
    /// the API server does not serve then makes the store not ready).
    pub(crate) fn watch<K: Resource>(&mut self, scope: Scope<'_>, required: bool) {
        let cache = Arc::new(KindCache::<K>::new(required, self.options.overlay_ttl));
        let (api, config) = match scope {
            Scope::All => (
                Api::<Typed<K>>::all_with(self.client.clone(), &()),
                watcher::Config::default(),
            ),
            Scope::Namespace(ns, config) => (
                Api::<Typed<K>>::namespaced_with(self.client.clone(), ns, &()),
                config,
            ),
        };
        let task = self.handle.spawn(crate::watch::run(
            api,
            config,
            cache.clone(),
            self.changes.clone(),
        ));
        self.tasks.push(task.abort_handle());
        self.caches
            .entry(TypeId::of::<K>())
            .or_default()
            .push(cache.clone());
        self.watched.push(cache);
    }

    pub(crate) fn options(&self) -> &StoreOptions {
        &self.options
    }
}
