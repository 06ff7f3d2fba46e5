//! The `ClusterStore` implementation: reads from the caches, and the API calls behind
//! `get_uncached`, `create`, `update`, `delete` and `evict`, with how their answers enter the
//! overlay.

use std::future::Future;

use either::Either;
use joiner_controller::store::{
    ClusterStore, Deleted, ObjectKey, Preconditions, Resource, StoreError,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};

use super::KubeStore;
use crate::cache::{KindCache, Ticket};
use crate::error::{Verb, store_error};
use crate::typed::{Typed, to_json};

impl KubeStore {
    fn api<K: Resource>(&self, key: &ObjectKey) -> Api<Typed<K>> {
        let client = self.inner.client.clone();
        match &key.namespace {
            Some(ns) => Api::namespaced_with(client, ns, &()),
            None => Api::all_with(client, &()),
        }
    }

    /// Runs one API call to completion on the store's runtime, within the write timeout, cut
    /// to the deadline of the write in progress when there is one (a leader's fence sets it:
    /// see `joiner_controller::deadline`). A call that gives up may still have reached the
    /// server: the answer is `Unavailable`, which callers re-read after.
    fn call<T>(
        &self,
        verb: Verb,
        key: &ObjectKey,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, StoreError> {
        let limit = joiner_controller::deadline::bound(self.inner.options.write_timeout);
        // The timer is made inside `block_on`, where the runtime is entered.
        let answer = self
            .inner
            .handle
            .block_on(async move { tokio::time::timeout(limit, request).await });
        match answer {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(store_error(verb, key, e)),
            Err(_) => Err(StoreError::Unavailable(format!(
                "{verb:?} {key}: no answer within {limit:?}"
            ))),
        }
    }

    /// Writes `sent`'s status through the status subresource when the main write did not
    /// store it (the API server ignores `status` on the main resource of kinds that have one).
    fn write_status<K: Resource>(
        &self,
        cache: &KindCache<K>,
        ticket: &Ticket<'_, K>,
        key: &ObjectKey,
        sent: &K,
        stored: K,
    ) -> Result<K, StoreError> {
        let wanted = match with_status_of(&self.inner.options.status_kinds, sent, &stored) {
            Ok(Some(wanted)) => wanted,
            Ok(None) => {
                cache.wrote(ticket, &stored);
                return Ok(stored);
            }
            Err(e) => {
                cache.wrote(ticket, &stored);
                return Err(StoreError::Invalid(key.clone(), e.to_string()));
            }
        };
        let api = self.api::<K>(key);
        let answer = self
            .call(
                Verb::Update,
                key,
                api.replace_status(&key.name, &PostParams::default(), &Typed::Valid(wanted)),
            )
            .and_then(|t| decoded(key, t));
        match answer {
            Ok(object) => {
                cache.wrote(ticket, &object);
                Ok(object)
            }
            Err(e) => {
                // The main write stands; the next step sees it and writes the status again.
                cache.wrote(ticket, &stored);
                Err(e)
            }
        }
    }

    /// Evicts a pod: `POST pods/<name>/eviction` with a `policy/v1` Eviction. (kube's own
    /// `Api::evict` sends no `apiVersion`/`kind` and a snake_case `delete_options`, which a
    /// server with strict field validation would warn about.)
    fn post_eviction(
        &self,
        cache: &KindCache<Pod>,
        ticket: &Ticket<'_, Pod>,
        key: ObjectKey,
        only: Preconditions<'_>,
    ) -> Result<Deleted, StoreError> {
        let ns = key.namespace.as_deref().unwrap_or("default");
        let eviction = Eviction {
            metadata: ObjectMeta {
                name: Some(key.name.clone()),
                namespace: Some(ns.to_string()),
                ..ObjectMeta::default()
            },
            delete_options: delete_options(only),
        };
        let url = format!(
            "{}/{}/eviction",
            <Pod as kube::Resource>::url_path(&(), Some(ns)),
            key.name
        );
        let request = serde_json::to_vec(&eviction)
            .map_err(|e| StoreError::Invalid(key.clone(), e.to_string()))
            .and_then(|body| {
                http::Request::post(url)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(body)
                    .map_err(|e| StoreError::Invalid(key.clone(), e.to_string()))
            })?;
        let client = self.inner.client.clone();
        match self.call(Verb::Evict, &key, async move {
            client.request::<kube::core::Status>(request).await
        }) {
            Ok(_) => {
                // The kubelet stops the pod within its grace period; until the watch shows it
                // terminating, it is hidden. A drain never takes this for the pod being gone:
                // it asks the API server (`pods_on_node_uncached`) before it ends.
                cache.deleted(ticket, key);
                Ok(Deleted::Pending)
            }
            Err(StoreError::NotFound(k)) => {
                cache.deleted(ticket, key);
                Err(StoreError::NotFound(k))
            }
            Err(e) => Err(e),
        }
    }
}

/// The Eviction's `deleteOptions`: the preconditions, when there are any.
fn delete_options(
    only: Preconditions<'_>,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions> {
    let uid = only.uid?;
    Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions {
            preconditions: Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Preconditions {
                    uid: Some(uid.to_string()),
                    resource_version: None,
                },
            ),
            ..Default::default()
        },
    )
}

/// An answer the controller can use, or `Unavailable` naming why it did not decode.
fn decoded<K: Resource>(key: &ObjectKey, answer: Typed<K>) -> Result<K, StoreError> {
    answer.into_valid().map_err(|e| {
        StoreError::Unavailable(format!(
            "{key}: the API server's answer does not decode: {e}"
        ))
    })
}

/// `stored` with `sent`'s status, if this process writes the kind's status (`kinds`, from
/// [`StoreOptions::status_kinds`](crate::StoreOptions::status_kinds)) and `sent` asked for a
/// status that `stored` does not have. Another kind's status belongs to someone else (a Node's
/// to its kubelet): the status `sent` carries is only what the cache had, and writing it back
/// would undo newer heartbeats.
fn with_status_of<K: Resource>(
    kinds: &[&str],
    sent: &K,
    stored: &K,
) -> Result<Option<K>, serde_json::Error> {
    if !kinds.contains(&K::KIND) {
        return Ok(None);
    }
    let wanted = to_json(sent)?
        .get("status")
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    let empty = wanted.is_null() || wanted.as_object().is_some_and(|m| m.is_empty());
    let mut back = to_json(stored)?;
    if empty || back.get("status") == Some(&wanted) {
        return Ok(None);
    }
    if let Some(map) = back.as_object_mut() {
        map.insert("status".into(), wanted);
    }
    serde_json::from_value(back).map(Some)
}

/// An update that removed the last finalizer of a deleting object deleted it.
fn finalized(meta: &ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some() && meta.finalizers.as_ref().is_none_or(Vec::is_empty)
}

/// A DELETE answered with the object leaves it in place while finalizers remain or the kubelet
/// has its grace period to finish; otherwise the answer is the object as it was deleted.
fn still_there(meta: &ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some()
        && (meta.finalizers.as_ref().is_some_and(|f| !f.is_empty())
            || meta.deletion_grace_period_seconds.is_some_and(|s| s > 0))
}

impl ClusterStore for KubeStore {
    fn list<K: Resource>(&self) -> Result<Vec<K>, StoreError> {
        let mut caches = self.caches::<K>()?;
        if caches.len() == 1 {
            return caches.remove(0).list();
        }
        let mut all = Vec::new();
        for cache in caches {
            all.extend(cache.list()?);
        }
        all.sort_by_cached_key(ObjectKey::for_object);
        Ok(all)
    }

    fn get<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, StoreError> {
        let key = ObjectKey::of::<K>(namespace, name);
        for cache in self.caches::<K>()? {
            if let Some(found) = cache.get(&key)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// `GET` of the object from the API server (a quorum read), within the write timeout. The
    /// cache is left alone: it catches up through its watch, and `resourceVersion`s cannot be
    /// ordered to tell which of the two is newer.
    fn get_uncached<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, StoreError> {
        let key = ObjectKey::of::<K>(namespace, name);
        let api = self.api::<K>(&key);
        match self.call(Verb::Get, &key, api.get(&key.name)) {
            Ok(object) => decoded(&key, object).map(Some),
            Err(StoreError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A LIST of pods with the field selector `spec.nodeName=<node>`, from the API server (a
    /// quorum read), within the write timeout. A pod that does not decode fails the whole read:
    /// a drain that cannot see every pod waits rather than conclude the node is empty.
    fn pods_on_node_uncached(&self, node: &str) -> Result<Vec<Pod>, StoreError> {
        let key = ObjectKey::of::<Pod>(None, &format!("spec.nodeName={node}"));
        let api: Api<Pod> = Api::all(self.inner.client.clone());
        let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
        let list = self.call(Verb::List, &key, async move { api.list(&params).await })?;
        Ok(list.items)
    }

    /// Ready as [`KubeStore::is_ready`] says, else which kinds are not and why.
    fn synced(&self) -> Result<(), StoreError> {
        let behind: Vec<String> = self
            .health()
            .into_iter()
            .filter(|h| !h.ready())
            .map(|h| h.to_string())
            .collect();
        if behind.is_empty() {
            Ok(())
        } else {
            Err(StoreError::Unavailable(format!(
                "the cluster caches are not following the API server: {}",
                behind.join("; ")
            )))
        }
    }

    /// The objects the cache holds that do not decode (their keys, in name order).
    fn undecodable<K: Resource>(&self) -> Result<Vec<ObjectKey>, StoreError> {
        let mut all = Vec::new();
        for cache in self.caches::<K>()? {
            all.extend(cache.undecodable()?);
        }
        all.sort();
        Ok(all)
    }

    /// `POST pods/<name>/eviction`, so the API server enforces PodDisruptionBudgets: a
    /// budget's 429 is `Refused` with the server's message, any other 429 `Unavailable`.
    /// With a uid in `only`, the eviction's `deleteOptions.preconditions.uid` carries it: a pod
    /// replaced under the same name answers 409, `Conflict`.
    fn evict(
        &self,
        namespace: &str,
        name: &str,
        only: Preconditions<'_>,
    ) -> Result<Deleted, StoreError> {
        let key = ObjectKey::of::<Pod>(Some(namespace), name);
        let cache = self.cache::<Pod>()?;
        let ticket = cache.ticket();
        self.post_eviction(&cache, &ticket, key, only)
    }

    /// POST; then PUT `/status` if the object carries a status (the main resource drops it).
    fn create<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
        let key = ObjectKey::for_object(object);
        if key.name.is_empty() {
            return Err(StoreError::Invalid(key, "metadata.name is required".into()));
        }
        let cache = self.cache::<K>()?;
        let ticket = cache.ticket();
        let mut body = object.clone();
        body.meta_mut().namespace = key.namespace.clone();
        let created = self.call(
            Verb::Create,
            &key,
            self.api::<K>(&key)
                .create(&PostParams::default(), &Typed::Valid(body)),
        )?;
        let created = decoded(&key, created)?;
        self.write_status(&cache, &ticket, &key, object, created)
    }

    /// PUT with the object's `resourceVersion` (a stale one is a `Conflict`); then PUT
    /// `/status` when the status changed. For a kind of which this process owns only the
    /// status (`StoreOptions::status_only_kinds`: EC2NodeClass), the `PUT …/status` alone.
    fn update<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
        let key = ObjectKey::for_object(object);
        let cache = self.cache::<K>()?;
        let ticket = cache.ticket();
        let api = self.api::<K>(&key);
        let body = Typed::Valid(object.clone());
        let params = PostParams::default();
        let status_only = self.inner.options.status_only_kinds.contains(&K::KIND);
        let answer = if status_only {
            // The server takes only `status` from the body and checks its resourceVersion.
            self.call(
                Verb::Update,
                &key,
                api.replace_status(&key.name, &params, &body),
            )
        } else {
            self.call(Verb::Update, &key, api.replace(&key.name, &params, &body))
        };
        let updated = match answer {
            Ok(t) => decoded(&key, t)?,
            Err(StoreError::Conflict(k)) => {
                cache.forget(&key);
                return Err(StoreError::Conflict(k));
            }
            Err(StoreError::NotFound(k)) => {
                cache.deleted(&ticket, key);
                return Err(StoreError::NotFound(k));
            }
            Err(e) => return Err(e),
        };
        if finalized(updated.meta()) {
            cache.deleted(&ticket, key);
            return Ok(updated);
        }
        if status_only {
            cache.wrote(&ticket, &updated);
            return Ok(updated);
        }
        self.write_status(&cache, &ticket, &key, object, updated)
    }

    /// DELETE with background propagation (dependents are collected after the object goes, so
    /// an object without finalizers is gone at once). A pod is deleted too, not evicted: no
    /// PodDisruptionBudget stops it (the controller deletes pods only once a drain has outlived
    /// its terminationGracePeriod; drains use [`ClusterStore::evict`]). The pod keeps its own
    /// grace period, and the answer (the pod, terminating) is `Pending`. A uid in `only` is
    /// sent as `preconditions.uid` (a 409 when another object has the name now: `Conflict`).
    fn delete_if<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
        only: Preconditions<'_>,
    ) -> Result<Deleted, StoreError> {
        let key = ObjectKey::of::<K>(namespace, name);
        let cache = self.cache::<K>()?;
        let ticket = cache.ticket();
        let mut params = DeleteParams::background();
        params.preconditions = only.uid.map(|uid| kube::api::Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        });
        let answer = self.call(
            Verb::Delete,
            &key,
            self.api::<K>(&key).delete(&key.name, &params),
        );
        match answer {
            Ok(Either::Right(_status)) => {
                cache.deleted(&ticket, key);
                Ok(Deleted::Gone)
            }
            Ok(Either::Left(object)) => {
                if !still_there(kube::Resource::meta(&object)) {
                    cache.deleted(&ticket, key);
                    return Ok(Deleted::Gone);
                }
                if let Typed::Valid(o) = &object {
                    cache.wrote(&ticket, o);
                }
                Ok(Deleted::Pending)
            }
            Err(StoreError::NotFound(k)) => {
                cache.deleted(&ticket, key);
                Err(StoreError::NotFound(k))
            }
            Err(e) => Err(e),
        }
    }
}
