//! Backing off when the cloud throttles.
//!
//! The AWS SDK already retries a throttled call a few times with jittered backoff; a call that
//! still answers "throttled" means the account's request budget is spent (EC2's request token
//! buckets are per account and region, shared with every other tool). Calling again on the
//! next step, a second later, only keeps the bucket empty for everyone. So after a step in
//! which a cloud call was throttled, the controller's cloud work (launches, listings,
//! terminations, resolutions, garbage collection) pauses: 2 seconds, doubling with each
//! throttled step up to 2 minutes, back to nothing after a step with no throttling.
//! Interruption notices are still read during a pause; nothing is decided from them until it
//! ends.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::clock::add;
use crate::cloud::CloudError;
use crate::error::ControllerError;

/// The first pause.
pub const FIRST_PAUSE: Duration = Duration::from_secs(2);
/// The longest pause.
pub const MAX_PAUSE: Duration = Duration::from_secs(120);

/// The pause the cloud's throttling asks for.
#[derive(Debug, Default)]
pub struct Throttle {
    /// No cloud work before this.
    until: Option<Timestamp>,
    /// The pause after the next throttled step.
    next: Option<Duration>,
}

impl Throttle {
    /// How long cloud work still waits at `now`, if it does.
    pub fn paused(&self, now: Timestamp) -> Option<Duration> {
        let until = self.until?;
        (now < until).then(|| crate::clock::elapsed(until, now))
    }

    /// Records the end of a step that ran cloud work: a throttled one pauses the next steps.
    pub fn record(&mut self, now: Timestamp, errors: &[ControllerError]) {
        let throttled = errors
            .iter()
            .any(|e| matches!(e, ControllerError::Cloud(CloudError::Throttled)));
        if !throttled {
            *self = Throttle::default();
            return;
        }
        let pause = self.next.unwrap_or(FIRST_PAUSE);
        self.until = Some(add(now, pause));
        self.next = Some(pause.saturating_mul(2).min(MAX_PAUSE));
        tracing::warn!(pause = ?pause, "the cloud is throttling requests; pausing cloud work");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).expect("time")
    }

    #[test]
    fn throttling_pauses_longer_each_time_and_a_clean_step_resets() {
        let throttled = [ControllerError::Cloud(CloudError::Throttled)];
        let mut t = Throttle::default();
        assert_eq!(t.paused(at(0)), None);
        t.record(at(0), &throttled);
        assert_eq!(t.paused(at(1)), Some(Duration::from_secs(1)));
        assert_eq!(t.paused(at(2)), None);
        let mut last = 0;
        for _ in 0..10 {
            t.record(at(100), &throttled);
            let pause = t.paused(at(100)).expect("paused").as_secs();
            assert!(pause >= last && pause <= MAX_PAUSE.as_secs(), "{pause}");
            last = pause;
        }
        assert_eq!(last, MAX_PAUSE.as_secs());
        // Other failures are not throttling.
        t.record(at(300), &[ControllerError::Cloud(CloudError::NoOfferings)]);
        assert_eq!(t.paused(at(300)), None);
        t.record(at(300), &throttled);
        assert_eq!(t.paused(at(300)), Some(FIRST_PAUSE));
    }
}
