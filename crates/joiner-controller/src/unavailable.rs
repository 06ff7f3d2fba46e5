//! Offerings recently out of capacity. Kept in memory, as Karpenter keeps its cache: after a
//! restart at worst one launch per offering fails again and refills it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::clock::add;
use crate::cloud::OfferingKey;

#[derive(Debug, Clone, Default)]
pub struct UnavailableOfferings {
    until: BTreeMap<OfferingKey, Timestamp>,
}

impl UnavailableOfferings {
    /// Marks `offering` unavailable until `now + ttl`.
    pub fn mark(&mut self, offering: OfferingKey, now: Timestamp, ttl: Duration) {
        self.until.insert(offering, add(now, ttl));
    }

    /// Marks `offering` unavailable until `until`, or later if it already is.
    pub fn mark_until(&mut self, offering: OfferingKey, until: Timestamp) {
        let at = self.until.entry(offering).or_insert(until);
        *at = (*at).max(until);
    }

    /// Until when `offering` is marked unavailable (possibly a time already past).
    pub fn until(&self, offering: &OfferingKey) -> Option<Timestamp> {
        self.until.get(offering).copied()
    }

    pub fn is_unavailable(&self, offering: &OfferingKey, now: Timestamp) -> bool {
        self.until.get(offering).is_some_and(|&until| now < until)
    }

    /// The offerings unavailable at `now`.
    pub fn active(&self, now: Timestamp) -> BTreeSet<OfferingKey> {
        self.until
            .iter()
            .filter(|&(_, &until)| now < until)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Forgets expired entries; returns how many expired (capacity may be back: worth a plan).
    pub fn expire(&mut self, now: Timestamp) -> usize {
        let before = self.until.len();
        self.until.retain(|_, &mut until| now < until);
        before - self.until.len()
    }
}
