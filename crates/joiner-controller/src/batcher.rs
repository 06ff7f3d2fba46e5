//! Batching pending pods, so a Deployment scaled to 100 replicas is planned once with all of
//! them rather than 100 times with one more each.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use joiner_model::api::NodeClaim;
use k8s_openapi::api::core::v1::Pod;

use crate::clock::elapsed;
use crate::pods::{is_pending, pod_key};

/// A batch window: it opens when something new is pending, stays open while new pending pods
/// keep arriving within `idle`, and closes `idle` after the last one or `max` after it opened.
///
/// What counts as "new" is a fingerprint of the pending pods and the live NodeClaims: a new
/// pending pod, or a NodeClaim going away (its pods need a new plan), opens or extends the
/// window; an unchanged cluster does not re-plan. The batcher is in memory only: a restarted
/// controller plans once more, which is safe because planning counts in-flight NodeClaims.
#[derive(Debug, Clone)]
pub struct Batcher {
    idle: Duration,
    max: Duration,
    /// When the open window started and when it last saw something new.
    window: Option<(Timestamp, Timestamp)>,
    last: Option<u64>,
}

impl Batcher {
    pub fn new(idle: Duration, max: Duration) -> Batcher {
        Batcher {
            idle,
            max,
            window: None,
            last: None,
        }
    }

    /// Records what is pending now. `fingerprint` identifies the pending pods and live
    /// NodeClaims; `pending` says whether any pod is pending at all.
    pub fn observe(&mut self, now: Timestamp, fingerprint: u64, pending: bool) {
        let changed = self.last != Some(fingerprint);
        self.last = Some(fingerprint);
        if !pending {
            self.window = None;
            return;
        }
        if changed {
            self.window = Some(match self.window {
                Some((start, _)) => (start, now),
                None => (now, now),
            });
        }
    }

    /// Forgets what was last seen, so the next observation with pending pods opens a window even
    /// if nothing changed: for events that call for a new plan without changing the pending pods
    /// (a NodeClaim deleted, a plan that failed, an offering available again).
    pub fn poke(&mut self) {
        self.last = None;
    }

    /// Whether the open window closes at `now`; closing it starts a new, empty one.
    pub fn close(&mut self, now: Timestamp) -> bool {
        let Some((start, last)) = self.window else {
            return false;
        };
        if elapsed(now, last) >= self.idle || elapsed(now, start) >= self.max {
            self.window = None;
            true
        } else {
            false
        }
    }

    pub fn is_open(&self) -> bool {
        self.window.is_some()
    }
}

/// FNV-1a: a stable 64-bit hash for names and fingerprints. `std`'s hasher is not guaranteed
/// stable across Rust releases, and a NodeClaim name must not change when the controller is
/// rebuilt.
pub fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain(std::iter::once(0xff)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// What the batcher watches: the pending pods and the live NodeClaims. Returns the fingerprint
/// and whether any pod is pending.
///
/// With `buffers` (CapacityBuffers to keep), the buffers' virtual pods count as pending and
/// where every pod runs is watched too: a pod that starts on a buffer's warm room takes it
/// without ever being pending, and the buffer then needs new room planned.
pub fn fingerprint(pods: &[Pod], claims: &[NodeClaim], buffers: bool) -> (u64, bool) {
    let mut pending: BTreeSet<String> =
        pods.iter().filter(|p| is_pending(p)).map(pod_key).collect();
    let any_pending = buffers || !pending.is_empty();
    if buffers {
        pending.extend(pods.iter().filter_map(|p| {
            let node = p.spec.as_ref()?.node_name.as_deref()?;
            Some(format!("{}@{node}", pod_key(p)))
        }));
    }
    let live: BTreeSet<&str> = claims
        .iter()
        .filter(|c| !c.is_deleting())
        .map(NodeClaim::name)
        .collect();
    let mut parts: Vec<&str> = pending.iter().map(String::as_str).collect();
    parts.push("--");
    parts.extend(live);
    (fnv1a(&parts), any_pending)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};

    #[test]
    fn closes_after_idle_and_at_most_after_max() {
        let clock = ManualClock::new();
        let mut b = Batcher::new(Duration::from_secs(1), Duration::from_secs(10));
        b.observe(clock.now(), 1, true);
        clock.advance(Duration::from_millis(500));
        assert!(!b.close(clock.now()));
        clock.advance(Duration::from_millis(500));
        assert!(b.close(clock.now()));
        // A pod arriving every 0.5 s keeps the window open until 10 s.
        let mut b = Batcher::new(Duration::from_secs(1), Duration::from_secs(10));
        for i in 0..20 {
            b.observe(clock.now(), 100 + i, true);
            assert!(!b.close(clock.now()));
            clock.advance(Duration::from_millis(500));
        }
        b.observe(clock.now(), 200, true);
        assert!(b.close(clock.now()));
        // Nothing new: no new window.
        b.observe(clock.now(), 200, true);
        clock.advance(Duration::from_secs(5));
        assert!(!b.close(clock.now()));
    }

    #[test]
    fn fnv_is_stable() {
        assert_eq!(fnv1a(&[]), 0xcbf2_9ce4_8422_2325);
        assert_ne!(fnv1a(&["a", "b"]), fnv1a(&["ab"]));
    }
}
