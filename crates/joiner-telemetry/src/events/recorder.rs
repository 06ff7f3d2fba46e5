//! Which events are published and which are dropped as repeats, as Karpenter's recorder
//! decides (kubernetes-sigs/karpenter `pkg/events`):
//!
//! - An event is keyed by its reason and the object it is about (its uid, else its name); a
//!   few reasons add what they are about to the key (the disruption reason, the notice).
//! - Once published, the same key is dropped for a fixed window from that first publication
//!   (not from the last repeat): 5 minutes for `FailedScheduling`, 15 for `Unconsolidatable`,
//!   1 for `NoCompatibleInstanceTypes` and a NodePool's `DisruptionBlocked`, 2 for everything
//!   else. The message is not part of the key, so a pod nominated to another
//!   NodeClaim within the window is not told again, as in Karpenter.
//! - `Nominated`, the one event every pending pod gets, is also rate-limited across all pods:
//!   a token bucket of 5 a second with a burst of 10. A pod whose event the bucket refused is
//!   not told again within its window either.
//!
//! The controller steps every second and plans the same pending pods again and again; without
//! this the API server would get an event per pod per second.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{EventKind, Involved, ObjectEvent};

/// How long a published event keeps its repeats away, by kind.
pub fn window(kind: EventKind) -> Duration {
    match kind {
        EventKind::FailedScheduling => Duration::from_secs(5 * 60),
        EventKind::NoCompatibleInstanceTypes | EventKind::DisruptionBlocked(_) => {
            Duration::from_secs(60)
        }
        EventKind::Unconsolidatable => Duration::from_secs(15 * 60),
        _ => Duration::from_secs(2 * 60),
    }
}

/// `Nominated` events a second, and how many may go at once.
const NOMINATED_PER_SECOND: f64 = 5.0;
const NOMINATED_BURST: f64 = 10.0;

/// The identity of an event for de-duplication: reason (with what it is about) and object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    kind: EventKind,
    object: Involved,
    uid: Option<String>,
}

/// Remembers what was published and when, on a monotonic clock the caller gives (seconds
/// since the process or the simulation started), so a simulated run de-duplicates on its own
/// time as the live controller does on the wall clock.
#[derive(Debug)]
pub struct Recorder {
    published: BTreeMap<Key, Duration>,
    /// When expired keys were last dropped: once per instant, not once per event, so a step
    /// that nominates thousands of pods does not rescan the memory for each.
    pruned_at: Option<Duration>,
    /// `Nominated` tokens left, and when they were last counted.
    tokens: f64,
    counted_at: Duration,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            published: BTreeMap::new(),
            pruned_at: None,
            tokens: NOMINATED_BURST,
            counted_at: Duration::ZERO,
        }
    }
}

impl Recorder {
    /// Whether `event` should be published at `now`; if so (or if only the rate limit held it
    /// back), it is remembered for its window.
    pub fn should_publish(&mut self, event: &ObjectEvent, now: Duration) -> bool {
        if self.pruned_at != Some(now) {
            self.published
                .retain(|key, at| now.saturating_sub(*at) < window(key.kind));
            self.pruned_at = Some(now);
        }
        let key = Key {
            kind: event.kind,
            object: event.about.clone(),
            uid: event.uid.clone(),
        };
        if self.published.contains_key(&key) {
            return false;
        }
        self.published.insert(key, now);
        event.kind != EventKind::Nominated || self.take_token(now)
    }

    fn take_token(&mut self, now: Duration) -> bool {
        let elapsed = now.saturating_sub(self.counted_at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * NOMINATED_PER_SECOND).min(NOMINATED_BURST);
        self.counted_at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Events remembered now.
    pub fn remembered(&self) -> usize {
        self.published.len()
    }
}
