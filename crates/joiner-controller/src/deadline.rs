//! The deadline of the write in progress: the instant past which it must not land.
//!
//! A leader may write only while it holds the Lease, and a write that passed that check can
//! still take a whole call timeout to arrive. So whoever knows how long writes may go on (the
//! leader's fence) runs each write [`within`] a deadline, and the edges that send calls (the
//! kube-rs store, the AWS clients) cut their timeouts to what is [`left`] of it: a write then
//! gives up before the Lease could have passed to another replica, instead of landing after.
//!
//! The deadline lives in the calling thread for the extent of the call, as a request context
//! would: the store and cloud traits stay as they are, and a call made outside any deadline
//! (a single replica, the simulation) keeps its own timeout.

use std::cell::Cell;
use std::time::{Duration, Instant};

thread_local! {
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Puts the previous deadline back when the call ends, a panic included.
struct Restore(Option<Instant>);

impl Drop for Restore {
    fn drop(&mut self) {
        DEADLINE.with(|d| d.set(self.0));
    }
}

/// Runs `call` with `until` as its deadline; a deadline already in force that is earlier
/// stays in force.
pub fn within<R>(until: Instant, call: impl FnOnce() -> R) -> R {
    let previous = DEADLINE.with(Cell::get);
    let _restore = Restore(previous);
    let until = previous.map_or(until, |p| p.min(until));
    DEADLINE.with(|d| d.set(Some(until)));
    call()
}

/// What is left of the deadline in force (zero once it has passed); `None` outside any.
pub fn left() -> Option<Duration> {
    DEADLINE
        .with(Cell::get)
        .map(|until| until.saturating_duration_since(Instant::now()))
}

/// `timeout`, cut to what is left of the deadline in force.
pub fn bound(timeout: Duration) -> Duration {
    left().map_or(timeout, |left| left.min(timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_within_a_deadline_gets_no_more_than_is_left_of_it() {
        assert_eq!(bound(Duration::from_secs(30)), Duration::from_secs(30));
        let soon = Instant::now() + Duration::from_secs(3);
        within(soon, || {
            assert!(bound(Duration::from_secs(30)) <= Duration::from_secs(3));
            assert_eq!(bound(Duration::from_millis(5)), Duration::from_millis(5));
            // A later deadline inside does not extend the earlier one.
            within(soon + Duration::from_secs(60), || {
                assert!(bound(Duration::from_secs(30)) <= Duration::from_secs(3));
            });
            within(Instant::now(), || {
                assert_eq!(left(), Some(Duration::ZERO));
            });
            assert!(left().is_some_and(|l| l > Duration::ZERO));
        });
        assert_eq!(left(), None, "restored after the call");
    }

    #[test]
    fn the_deadline_is_restored_when_the_call_panics() {
        let r = std::panic::catch_unwind(|| {
            within(Instant::now(), || panic!("the call failed"));
        });
        assert!(r.is_err());
        assert_eq!(left(), None);
    }
}
