//! Time-limited caches of what launches read: without them every launch would read subnets,
//! security groups, images and instance types again, and a burst of NodeClaims would spend
//! EC2's request budget on answers that did not change.
//!
//! Every read may be stale: an entry lives for its TTL ([`Ttls`]) and is then read again. The
//! reads an EC2NodeClass selects are keyed by the class's name *and* the hash of its spec
//! ([`ClassKey`]), so a changed EC2NodeClass misses at once instead of launching with what its
//! old selectors found. Failed reads are not cached.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use joiner_model::api::EC2NodeClass;

/// How long each kind of read is trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttls {
    /// Subnets: their free-address counts pick each zone's subnet, and they move with every
    /// launch. 1 minute.
    pub subnets: Duration,
    /// Security groups. 5 minutes.
    pub security_groups: Duration,
    /// Images: the AMI ids an alias's SSM parameters name, and the images selector terms
    /// match. 5 minutes (EKS publishes AMIs every few weeks).
    pub images: Duration,
    /// Instance types (architecture, GPUs), their offerings per zone, and spot prices (the
    /// controller's `instance_types`). 5 minutes: spot prices change at most every few minutes
    /// and insufficient capacity is tracked by the controller, not by this cache.
    pub instance_types: Duration,
}

impl Default for Ttls {
    fn default() -> Ttls {
        Ttls {
            subnets: Duration::from_secs(60),
            security_groups: Duration::from_secs(5 * 60),
            images: Duration::from_secs(5 * 60),
            instance_types: Duration::from_secs(5 * 60),
        }
    }
}

/// An EC2NodeClass as a cache key: its name and the hash of its spec.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ClassKey {
    pub name: String,
    pub hash: String,
}

impl ClassKey {
    pub(crate) fn of(name: &str, class: &EC2NodeClass) -> ClassKey {
        ClassKey {
            name: name.to_string(),
            hash: spec_hash(class),
        }
    }
}

pub(crate) use joiner_launch::template::node_class_spec_hash as spec_hash;

/// Values by key, each trusted for `ttl` after it was stored.
#[derive(Debug)]
pub(crate) struct TtlCache<K, V> {
    ttl: Duration,
    entries: Mutex<BTreeMap<K, (Instant, V)>>,
}

impl<K: Ord + Clone, V: Clone> TtlCache<K, V> {
    pub(crate) fn new(ttl: Duration) -> Self {
        TtlCache {
            ttl,
            entries: Mutex::new(BTreeMap::new()),
        }
    }

    /// The value stored for `key` less than the TTL ago.
    pub(crate) fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .get(key)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, v)| v.clone())
    }

    /// Stores `value` for `key`, dropping entries that have expired.
    pub(crate) fn insert(&self, key: K, value: V) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.retain(|_, (at, _)| at.elapsed() < self.ttl);
        entries.insert(key, (Instant::now(), value));
    }

    /// The cached value, or `read`'s, stored when it succeeds.
    pub(crate) async fn get_or_read<E, F>(&self, key: &K, read: F) -> Result<V, E>
    where
        F: Future<Output = Result<V, E>>,
    {
        if let Some(v) = self.get(key) {
            return Ok(v);
        }
        let v = read.await?;
        self.insert(key.clone(), v.clone());
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(yaml: &str) -> EC2NodeClass {
        serde_saphyr::from_str(yaml).expect("EC2NodeClass")
    }

    #[test]
    fn entries_expire_and_failed_reads_are_not_kept() {
        let cache: TtlCache<&str, u32> = TtlCache::new(Duration::from_millis(50));
        cache.insert("a", 1);
        assert_eq!(cache.get(&"a"), Some(1));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(cache.get(&"a"), None);

        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let failed: Result<u32, &str> = rt.block_on(cache.get_or_read(&"b", async { Err("no") }));
        assert_eq!(failed, Err("no"));
        assert_eq!(cache.get(&"b"), None);
        let read: Result<u32, &str> = rt.block_on(cache.get_or_read(&"b", async { Ok(2) }));
        assert_eq!(read, Ok(2));
        let again: Result<u32, &str> = rt.block_on(cache.get_or_read(&"b", async { Ok(3) }));
        assert_eq!(again, Ok(2), "a fresh entry is not read again");
    }

    #[test]
    fn a_changed_spec_is_another_key() {
        let yaml = |tag: &str| {
            format!(
                "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata:\n  name: gpu\nspec:\n  subnetSelectorTerms:\n    - tags:\n        karpenter.sh/discovery: {tag}\n"
            )
        };
        let a = ClassKey::of("gpu", &class(&yaml("lab")));
        assert_eq!(a, ClassKey::of("gpu", &class(&yaml("lab"))));
        assert_ne!(a, ClassKey::of("gpu", &class(&yaml("prod"))));
        assert_ne!(a, ClassKey::of("cpu", &class(&yaml("lab"))));
    }
}
