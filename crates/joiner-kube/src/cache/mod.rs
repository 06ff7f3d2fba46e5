//! One kind's cache: the reflector's objects, plus what this process wrote and the watch has not
//! delivered yet.
//!
//! # Read-your-writes
//!
//! The controller lists NodeClaims right after creating one; if the watch has not delivered the
//! new object yet, the next plan would place the same pods again and create a second NodeClaim.
//! So every successful write is kept in an overlay, keyed by object, until the cache has caught
//! up with it, and reads see the cache with the overlay on top.
//!
//! `resourceVersion`s are opaque: they are compared for equality only, never ordered. An entry
//! written with version `R` is superseded when
//!
//! - the watch delivers an event for that object with version `R` (a watch delivers every version
//!   in order, so after `R` the cache is at least as new as the write), or
//! - a re-list that started after the write completes (lists are `MostRecent`, quorum reads, so
//!   they hold `R` or something newer), or
//! - the cache already held `R` when the write returned (checked, with the events seen during the
//!   write, under the same lock that applies events, so a fast watch cannot slip past).
//!
//! A delete leaves a tombstone that hides the object until the watch delivers its deletion or
//! shows it with `deletionTimestamp` (an eviction or a graceful delete). A write that fails with
//! 409 drops the entry: the caller's view was stale and the cache is the better guess. Entries
//! older than the TTL are dropped with a warning, so a write whose version never shows up on the
//! watch (an object outside a field selector) cannot shadow the cache forever.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use joiner_controller::store::{ObjectKey, Resource, StoreError};
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher;

use crate::health::KindHealth;
use crate::typed::Typed;

/// Events remembered while writes are in flight: enough for any write that takes less than a
/// few seconds on a busy cluster. A write outliving it can leave an entry until the TTL. Nothing
/// is remembered while no write is in flight.
const HISTORY: usize = 4096;

/// A write in flight: marks the events applied before it was sent. Dropping the last ticket
/// forgets the events remembered for it.
pub(crate) struct Ticket<'a, K: Resource> {
    cache: &'a KindCache<K>,
    seq: u64,
}

impl<K: Resource> Drop for Ticket<'_, K> {
    fn drop(&mut self) {
        let mut inner = self.cache.lock();
        inner.in_flight = inner.in_flight.saturating_sub(1);
        if inner.in_flight == 0 {
            inner.history.clear();
        }
    }
}

/// One object event, as remembered for writes in flight.
#[derive(Clone)]
struct Seen {
    seq: u64,
    key: ObjectKey,
    resource_version: Option<String>,
    /// A `Delete` event.
    gone: bool,
    /// The object carries `deletionTimestamp`.
    deleting: bool,
}

enum Pending<K> {
    /// Created or updated by this process; the server answered with `resource_version`.
    Written {
        object: K,
        resource_version: String,
        inits: u64,
        since: Instant,
    },
    /// Deleted (or evicted) by this process.
    Deleted { inits: u64, since: Instant },
}

impl<K> Pending<K> {
    fn since(&self) -> Instant {
        match self {
            Pending::Written { since, .. } | Pending::Deleted { since, .. } => *since,
        }
    }
    fn inits(&self) -> u64 {
        match self {
            Pending::Written { inits, .. } | Pending::Deleted { inits, .. } => *inits,
        }
    }
    /// Whether an event shows the cache has caught up with this write.
    fn settled_by(&self, seen: &Seen) -> bool {
        match self {
            Pending::Written {
                resource_version, ..
            } => seen.resource_version.as_ref() == Some(resource_version),
            Pending::Deleted { .. } => seen.gone || seen.deleting,
        }
    }
}

struct Inner<K: Resource> {
    writer: Writer<Typed<K>>,
    reader: Store<Typed<K>>,
    /// Object events applied so far.
    seq: u64,
    /// `Init` events seen so far: each starts a re-list.
    inits: u64,
    history: VecDeque<Seen>,
    /// Tickets alive.
    in_flight: usize,
    overlay: BTreeMap<ObjectKey, Pending<K>>,
    health: KindHealth,
}

/// The cache of kind `K`: fed by its watch task, read and written by the store.
pub(crate) struct KindCache<K: Resource> {
    inner: Mutex<Inner<K>>,
    overlay_ttl: Duration,
}

fn key_of<K: Resource>(object: &Typed<K>) -> ObjectKey {
    let meta = kube::Resource::meta(object);
    ObjectKey::of::<K>(
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

fn is_deleting<K: Resource>(object: &Typed<K>) -> bool {
    kube::Resource::meta(object).deletion_timestamp.is_some()
}

impl<K: Resource> KindCache<K> {
    pub(crate) fn new(required: bool, overlay_ttl: Duration) -> KindCache<K> {
        let writer = Writer::<Typed<K>>::new(());
        let reader = writer.as_reader();
        let resource = format!("{}/{}", K::API_VERSION, K::PLURAL);
        KindCache {
            inner: Mutex::new(Inner {
                writer,
                reader,
                seq: 0,
                inits: 0,
                history: VecDeque::new(),
                in_flight: 0,
                overlay: BTreeMap::new(),
                health: KindHealth::new(K::KIND, resource, required),
            }),
            overlay_ttl,
        }
    }

    /// A panic elsewhere while holding the lock leaves the maps consistent (each change below
    /// is one map operation), so the cache stays usable.
    fn lock(&self) -> MutexGuard<'_, Inner<K>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn health(&self) -> KindHealth {
        self.lock().health.clone()
    }

    /// Applies one watch event. Returns whether the objects visible to readers may have
    /// changed (an object event or the end of a list).
    pub(crate) fn apply(&self, event: watcher::Event<Typed<K>>) -> bool {
        let mut inner = self.lock();
        inner.writer.apply_watcher_event(&event);
        match &event {
            watcher::Event::Init => {
                inner.inits += 1;
                false
            }
            watcher::Event::InitApply(object) => {
                warn_if_invalid(object);
                inner.remember(object, false);
                false
            }
            watcher::Event::Apply(object) | watcher::Event::Delete(object) => {
                let gone = matches!(event, watcher::Event::Delete(_));
                if !gone {
                    warn_if_invalid(object);
                }
                inner.health.consecutive_failures = 0;
                let seen = inner.remember(object, gone);
                if inner
                    .overlay
                    .get(&seen.key)
                    .is_some_and(|p| p.settled_by(&seen))
                {
                    inner.overlay.remove(&seen.key);
                }
                true
            }
            watcher::Event::InitDone => {
                let inits = inner.inits;
                let h = &mut inner.health;
                h.synced = true;
                h.missing = false;
                h.consecutive_failures = 0;
                h.last_error = None;
                // A list that began after a write returned holds that write or something newer.
                inner.overlay.retain(|_, p| p.inits() >= inits);
                let reader = inner.reader.clone();
                inner
                    .overlay
                    .retain(|key, p| !settled_by_cache(&reader, key, p));
                true
            }
        }
    }

    /// Records a failed list or watch. A 404 on the list means the kind is not served.
    pub(crate) fn failed(&self, error: &watcher::Error) {
        let missing = matches!(
            error,
            watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 404
        );
        let mut inner = self.lock();
        let h = &mut inner.health;
        h.consecutive_failures += 1;
        h.last_error = Some(error.to_string());
        if missing && !h.missing {
            h.missing = true;
            if h.required {
                tracing::error!(kind = K::KIND, resource = %h.resource, "the API server does not serve this required kind: reads of it fail until it does");
            } else {
                tracing::warn!(kind = K::KIND, resource = %h.resource, "the API server does not serve this optional kind: it reads as empty until it does");
            }
        } else {
            tracing::warn!(kind = K::KIND, failures = h.consecutive_failures, %error, "watch failed; retrying with backoff");
        }
    }

    /// Every object, in name order (namespace, then name), this process's writes included.
    pub(crate) fn list(&self) -> Result<Vec<K>, StoreError> {
        let mut inner = self.readable()?;
        inner.expire(self.overlay_ttl);
        let mut objects: BTreeMap<ObjectKey, K> = inner
            .reader
            .state()
            .iter()
            .filter_map(|o| o.as_valid())
            .map(|k| (ObjectKey::for_object(k), k.clone()))
            .collect();
        for (key, pending) in &inner.overlay {
            match pending {
                Pending::Written { object, .. } => {
                    objects.insert(key.clone(), object.clone());
                }
                Pending::Deleted { .. } => {
                    objects.remove(key);
                }
            }
        }
        Ok(objects.into_values().collect())
    }

    pub(crate) fn get(&self, key: &ObjectKey) -> Result<Option<K>, StoreError> {
        let mut inner = self.readable()?;
        inner.expire(self.overlay_ttl);
        match inner.overlay.get(key) {
            Some(Pending::Written { object, .. }) => Ok(Some(object.clone())),
            Some(Pending::Deleted { .. }) => Ok(None),
            None => Ok(inner
                .reader
                .get(&object_ref(key))
                .and_then(|o| o.as_valid().cloned())),
        }
    }

    /// Keys of the objects the server has that do not decode as `K` (so [`KindCache::list`]
    /// leaves them out), in name order. An object this process wrote or deleted since is the
    /// overlay's, not the cache's: it is not named.
    pub(crate) fn undecodable(&self) -> Result<Vec<ObjectKey>, StoreError> {
        let inner = self.readable()?;
        let mut keys: Vec<ObjectKey> = inner
            .reader
            .state()
            .iter()
            .filter(|o| o.as_valid().is_none())
            .map(|o| key_of(&**o))
            .filter(|key| !inner.overlay.contains_key(key))
            .collect();
        keys.sort();
        Ok(keys)
    }

    /// The cache, once it has something to say: listed once, or known not to exist. A
    /// *required* kind the server does not serve (a CRD not installed, or removed) is not
    /// readable: an empty answer would tell garbage collection that every NodeClaim is gone.
    /// Only an optional kind (DRA) that is not served reads as empty.
    fn readable(&self) -> Result<MutexGuard<'_, Inner<K>>, StoreError> {
        let inner = self.lock();
        let h = &inner.health;
        if h.settled() && !(h.missing && h.required) {
            Ok(inner)
        } else {
            Err(StoreError::Unavailable(h.to_string()))
        }
    }

    /// To be taken before a write is sent, and kept until its outcome is recorded.
    pub(crate) fn ticket(&self) -> Ticket<'_, K> {
        let mut inner = self.lock();
        inner.in_flight += 1;
        Ticket {
            cache: self,
            seq: inner.seq,
        }
    }

    /// The server stored `object` (create, update, or a delete that left it with finalizers).
    pub(crate) fn wrote(&self, ticket: &Ticket<'_, K>, object: &K) {
        let Some(resource_version) = object.meta().resource_version.clone() else {
            return;
        };
        let key = ObjectKey::for_object(object);
        let mut inner = self.lock();
        let pending = Pending::Written {
            object: object.clone(),
            resource_version,
            inits: inner.inits,
            since: Instant::now(),
        };
        inner.settle_or_keep(ticket.seq, key, pending);
    }

    /// The server deleted the object, or accepted its eviction.
    pub(crate) fn deleted(&self, ticket: &Ticket<'_, K>, key: ObjectKey) {
        let mut inner = self.lock();
        let pending = Pending::Deleted {
            inits: inner.inits,
            since: Instant::now(),
        };
        inner.settle_or_keep(ticket.seq, key, pending);
    }

    /// The caller's view of the object was stale (409): fall back to the cache.
    pub(crate) fn forget(&self, key: &ObjectKey) {
        self.lock().overlay.remove(key);
    }

    #[cfg(test)]
    pub(crate) fn overlaid(&self) -> usize {
        self.lock().overlay.len()
    }
}

impl<K: Resource> Inner<K> {
    fn remember(&mut self, object: &Typed<K>, gone: bool) -> Seen {
        self.seq += 1;
        let seen = Seen {
            seq: self.seq,
            key: key_of(object),
            resource_version: kube::Resource::meta(object).resource_version.clone(),
            gone,
            deleting: is_deleting(object),
        };
        if self.in_flight > 0 {
            if self.history.len() == HISTORY {
                self.history.pop_front();
            }
            self.history.push_back(seen.clone());
        }
        seen
    }

    fn settle_or_keep(&mut self, since: u64, key: ObjectKey, pending: Pending<K>) {
        let seen_during_write = self
            .history
            .iter()
            .filter(|s| s.seq > since && s.key == key)
            .any(|s| pending.settled_by(s));
        if seen_during_write || settled_by_cache(&self.reader, &key, &pending) {
            self.overlay.remove(&key);
        } else {
            self.overlay.insert(key, pending);
        }
    }

    fn expire(&mut self, ttl: Duration) {
        self.overlay.retain(|key, p| {
            let keep = p.since().elapsed() < ttl;
            if !keep {
                tracing::warn!(%key, ?ttl, "the watch never showed this process's write; reading the cache again");
            }
            keep
        });
    }
}

fn object_ref<K: Resource>(key: &ObjectKey) -> ObjectRef<Typed<K>> {
    let r = ObjectRef::new(&key.name);
    match &key.namespace {
        Some(ns) => r.within(ns),
        None => r,
    }
}

/// Whether the cache already shows the write: the same version, or (for a delete) no object. A
/// cached `deletionTimestamp` does not count here: it may predate the write (the update that
/// removes the last finalizer of a deleting object); only one delivered after the write does.
fn settled_by_cache<K: Resource>(
    reader: &Store<Typed<K>>,
    key: &ObjectKey,
    pending: &Pending<K>,
) -> bool {
    let cached = reader.get(&object_ref(key));
    match pending {
        Pending::Written {
            resource_version, ..
        } => cached.is_some_and(|o| {
            kube::Resource::meta(&*o).resource_version.as_ref() == Some(resource_version)
        }),
        Pending::Deleted { .. } => cached.is_none(),
    }
}

fn warn_if_invalid<K: Resource>(object: &Typed<K>) {
    if let Typed::Invalid { metadata, error } = object {
        tracing::warn!(
            kind = K::KIND,
            namespace = metadata.namespace.as_deref().unwrap_or_default(),
            name = metadata.name.as_deref().unwrap_or_default(),
            %error,
            "object skipped: it does not decode"
        );
    }
}

#[cfg(test)]
mod tests;
