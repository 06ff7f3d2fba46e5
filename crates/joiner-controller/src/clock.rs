//! Time as the controller sees it.
//!
//! Every reconciler reads the time from a [`Clock`] instead of the system, so tests and
//! `joiner simulate` can drive the controller faster than real time and replay a run exactly.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// A source of the current time.
pub trait Clock {
    fn now(&self) -> Timestamp;
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

/// The wall clock, for the live controller.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        // jiff's own `now` needs its `std` feature, which k8s-openapi does not turn on.
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(since_epoch.as_secs())
            .ok()
            .and_then(|s| Timestamp::new(s, since_epoch.subsec_nanos() as i32).ok())
            .unwrap_or(Timestamp::UNIX_EPOCH)
    }
}

/// A clock that moves only when told to. Clones share the same time, so the store, the cloud
/// and the controller of one simulation agree on "now".
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<Timestamp>>,
}

impl ManualClock {
    /// A clock at `start`.
    pub fn at(start: Timestamp) -> ManualClock {
        ManualClock {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// A clock at a fixed, arbitrary instant (2026-01-01T00:00:00Z), so runs are reproducible.
    pub fn new() -> ManualClock {
        ManualClock::at(Timestamp::constant(1_767_225_600, 0))
    }

    /// Moves the clock forward by `by`. Saturates at the end of representable time.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        *now = add(*now, by);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `t + d`, saturating rather than failing: deadlines past the end of time never arrive.
pub fn add(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

/// How long ago `then` was at `now` (zero if `then` is in the future).
pub fn elapsed(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(then)).unwrap_or(Duration::ZERO)
}

/// A Kubernetes timestamp, truncated to whole seconds as the API server stores it.
pub fn k8s_time(t: Timestamp) -> Time {
    Time(Timestamp::from_second(t.as_second()).unwrap_or(t))
}

/// A duration setting (`expireAfter`, `consolidateAfter`, `terminationGracePeriod`): `None` for
/// `Never` or text that is not a duration.
pub fn duration_setting(text: &str) -> Option<std::time::Duration> {
    if text.eq_ignore_ascii_case("never") {
        return None;
    }
    joiner_model::duration::parse_duration(text).ok()
}
