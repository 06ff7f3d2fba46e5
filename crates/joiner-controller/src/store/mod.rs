//! The cluster as the controller reads and writes it.
//!
//! [`ClusterStore`] is the seam between the reconcilers and the API server: the kube-rs edge
//! implements it over reflector caches and API calls, [`InMemoryCluster`] implements it for
//! tests and simulation. Semantics follow the API server where the reconcilers depend on them:
//! create fails on an existing name, update fails on a stale `resourceVersion`, and delete of an
//! object with finalizers only sets `deletionTimestamp`.

mod client;
mod memory;
pub use client::CachedClient;
pub use memory::manifests_of;
mod object;
pub mod pdb;

pub use memory::InMemoryCluster;
pub use object::{ObjectKey, Resource};

/// Why a store call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// An object of that kind and name exists (HTTP 409 on create).
    #[error("{0} already exists")]
    AlreadyExists(ObjectKey),
    /// The object changed since it was read (HTTP 409 on update): re-read and retry.
    #[error("{0} was modified: the resourceVersion given is stale")]
    Conflict(ObjectKey),
    #[error("{0} not found")]
    NotFound(ObjectKey),
    /// The object cannot be written as given (no name, say).
    #[error("{0}: invalid: {1}")]
    Invalid(ObjectKey, String),
    /// The API server refused the write for now (HTTP 429 on an Eviction: a
    /// PodDisruptionBudget allows no more disruptions). Nothing changed; try again later.
    #[error("{0}: refused for now: {1}")]
    Refused(ObjectKey, String),
    /// The API server could not be reached or failed, or the call timed out. A write that
    /// answers this may still have committed: re-read before acting on it.
    #[error("the cluster is unavailable: {0}")]
    Unavailable(String),
}

/// What must still hold of an object for a delete or an eviction to go ahead: the API
/// server's `DeleteOptions.preconditions`, answered [`StoreError::Conflict`] when it does not.
///
/// The controller reads pods from a cache and acts on them by name; with the uid it read, a
/// pod that has since been replaced by another of the same name (a StatefulSet's, recreated on
/// another node) is never the one removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Preconditions<'a> {
    /// The object must have this uid.
    pub uid: Option<&'a str>,
}

impl<'a> Preconditions<'a> {
    /// No precondition: whatever object has the name.
    pub const NONE: Preconditions<'static> = Preconditions { uid: None };

    /// Only the object as it was read: the one with this metadata's uid.
    pub fn of(meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Self {
        Preconditions {
            uid: meta.uid.as_deref(),
        }
    }

    /// Whether `meta` (the object stored now) meets them.
    pub fn met_by(
        &self,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> bool {
        self.uid.is_none_or(|uid| meta.uid.as_deref() == Some(uid))
    }
}

/// What a delete did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// The object is gone.
    Gone,
    /// Finalizers remain: `deletionTimestamp` is set and the object stays until they are removed.
    Pending,
}

/// The objects the controller reads and writes.
///
/// Methods are generic over [`Resource`] so one trait covers every kind; an implementation
/// over the API server can route by [`Resource::API_VERSION`], [`Resource::KIND`] and
/// [`Resource::PLURAL`] and move objects as JSON.
pub trait ClusterStore {
    /// Every object of a kind, in name order (namespace, then name), from a cache that may
    /// trail the API server. Fails while the cache has not listed the kind yet, and for a
    /// required kind the API server does not serve (a missing CRD): an empty answer must mean
    /// that there are none. Objects that do not decode are left out ([`ClusterStore::undecodable`]).
    fn list<K: Resource>(&self) -> Result<Vec<K>, StoreError>;
    /// One object from the same cache as [`ClusterStore::list`].
    fn get<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, StoreError>;
    /// One object read from the API server itself, past every cache: what a create that
    /// answered AlreadyExists or a timeout actually left there.
    fn get_uncached<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, StoreError>;
    /// The pods bound to `node`, read from the API server itself past every cache (a LIST with
    /// the field selector `spec.nodeName=<node>`): what a drain asks before it concludes that
    /// the node is empty, since a watch cache may trail an eviction or hide a pod still
    /// terminating.
    fn pods_on_node_uncached(
        &self,
        node: &str,
    ) -> Result<Vec<k8s_openapi::api::core::v1::Pod>, StoreError>;
    /// Whether every cache [`ClusterStore::list`] reads is following the API server now: each
    /// kind listed and its watch not failing. A watch that fails after its first sync leaves its
    /// cache answering with what it last saw, however old: whoever decides to remove something
    /// asks here first, and a failure ([`StoreError::Unavailable`], naming the kinds) means
    /// "do nothing yet".
    fn synced(&self) -> Result<(), StoreError>;
    /// Objects of the kind that exist but do not decode (a newer API's values, say), which
    /// [`ClusterStore::list`] leaves out. Whoever would conclude from an object's absence that
    /// it is gone (garbage collection) must look here first.
    fn undecodable<K: Resource>(&self) -> Result<Vec<ObjectKey>, StoreError>;
    /// Creates the object and returns it as stored (with `uid`, `resourceVersion` and
    /// `creationTimestamp`). Fails with [`StoreError::AlreadyExists`] if the name is taken.
    fn create<K: Resource>(&self, object: &K) -> Result<K, StoreError>;
    /// Replaces the object. Its `resourceVersion` must be the stored one, else
    /// [`StoreError::Conflict`]. `deletionTimestamp` cannot be changed by an update; an update
    /// that removes the last finalizer of a deleting object removes the object.
    fn update<K: Resource>(&self, object: &K) -> Result<K, StoreError>;
    /// Deletes the object, or marks it for deletion while finalizers remain. For a pod this is
    /// a delete, which no PodDisruptionBudget stops: [`ClusterStore::evict`] is what drains use.
    fn delete<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Deleted, StoreError> {
        self.delete_if::<K>(namespace, name, Preconditions::NONE)
    }
    /// [`ClusterStore::delete`], only while the object meets `only` (else
    /// [`StoreError::Conflict`], nothing deleted).
    fn delete_if<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
        only: Preconditions<'_>,
    ) -> Result<Deleted, StoreError>;
    /// Evicts a pod through the Eviction API, only while it meets `only` (else
    /// [`StoreError::Conflict`]): refused with [`StoreError::Refused`] while a
    /// PodDisruptionBudget covering it allows no more disruptions.
    fn evict(
        &self,
        namespace: &str,
        name: &str,
        only: Preconditions<'_>,
    ) -> Result<Deleted, StoreError>;
}

/// A reference to a store, or a shared one, is a store: the controller and the test harness
/// hold the same cluster.
macro_rules! forward_store {
    ($($wrapper:ty),*) => {$(
        impl<S: ClusterStore + ?Sized> ClusterStore for $wrapper {
            fn list<K: Resource>(&self) -> Result<Vec<K>, StoreError> {
                (**self).list()
            }
            fn get<K: Resource>(&self, namespace: Option<&str>, name: &str) -> Result<Option<K>, StoreError> {
                (**self).get(namespace, name)
            }
            fn get_uncached<K: Resource>(&self, namespace: Option<&str>, name: &str) -> Result<Option<K>, StoreError> {
                (**self).get_uncached(namespace, name)
            }
            fn undecodable<K: Resource>(&self) -> Result<Vec<ObjectKey>, StoreError> {
                (**self).undecodable::<K>()
            }
            fn synced(&self) -> Result<(), StoreError> {
                (**self).synced()
            }
            fn pods_on_node_uncached(&self, node: &str) -> Result<Vec<k8s_openapi::api::core::v1::Pod>, StoreError> {
                (**self).pods_on_node_uncached(node)
            }
            fn evict(&self, namespace: &str, name: &str, only: Preconditions<'_>) -> Result<Deleted, StoreError> {
                (**self).evict(namespace, name, only)
            }
            fn create<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
                (**self).create(object)
            }
            fn update<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
                (**self).update(object)
            }
            fn delete_if<K: Resource>(&self, namespace: Option<&str>, name: &str, only: Preconditions<'_>) -> Result<Deleted, StoreError> {
                (**self).delete_if::<K>(namespace, name, only)
            }
        }
    )*};
}

forward_store!(&S, std::sync::Arc<S>);
