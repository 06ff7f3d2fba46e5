//! The interruption loop: the cloud's interruption messages handled on their own, beside the
//! step loop, so a two-minute spot warning is acted on within a poll of arriving, never behind
//! a plan or a drain that takes long.
//!
//! Handling a message only marks its NodeClaim (see `joiner_controller::interruption`), which
//! the step loop then acts on; the two loops share the store, and a NodeClaim written by both
//! at once is sorted out by `resourceVersion` like any other conflict (the message is kept and
//! handled again). Like the step loop, this one runs only while this replica leads, and its
//! writes (the NodeClaim marks and the message deletes) go through the same fence.

use joiner_controller::Reconciler;
use std::time::{Duration, Instant};

use joiner_controller::StepReport;
use joiner_controller::clock::Clock;
use joiner_controller::interruption::{self, BATCH, InterruptionQueue};
use joiner_controller::store::ClusterStore;
use joiner_telemetry::events::Subjects;
use tokio::sync::watch;

use crate::leader::Leadership;
use crate::run_loop::{LoopEnd, next_change, until_leading};

/// How often the queue is asked when the last answer was empty. SQS's long poll makes the
/// wait inside the receive itself (see `SqsInterruptionQueue::with_long_poll`); this pause only
/// keeps a queue that answers at once from being asked in a tight loop.
pub const POLL_EVERY: Duration = Duration::from_secs(1);
/// After a failed poll, the pause doubles from [`POLL_EVERY`] up to this.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// One poll of the queue: what it did, for logs, metrics and Events.
#[derive(Debug, Clone, Default)]
pub struct Polled {
    /// Messages received (handled or not).
    pub received: usize,
    /// Whether the poll failed as a whole (the queue or the NodeClaims could not be read).
    pub failed: bool,
    /// The NodeClaims marked (as disruption events) and what failed.
    pub report: StepReport,
    /// Uids and Nodes of the NodeClaims marked, for their Events.
    pub subjects: Subjects,
    pub took: Duration,
}

/// The store, the queue and the clock one poll needs; it travels to a blocking thread and back.
pub struct Poller<S, K> {
    store: S,
    queue: Box<dyn InterruptionQueue + Send>,
    clock: K,
}

impl<S: ClusterStore, K: Clock> Poller<S, K> {
    pub fn new(store: S, queue: Box<dyn InterruptionQueue + Send>, clock: K) -> Self {
        Poller {
            store,
            queue,
            clock,
        }
    }

    /// Receives one batch and handles it.
    pub fn poll(&self) -> Polled {
        let started = Instant::now();
        let mut report = StepReport::default();
        let now = self.clock.now();
        let (received, failed) =
            match interruption::poll(&self.store, self.queue.as_ref(), now, &mut report) {
                Ok(n) => (n, false),
                Err(e) => {
                    report.error(Reconciler::Interruption, "interruption queue", e);
                    (0, true)
                }
            };
        let subjects = if report.disruption.is_empty() {
            Subjects::default()
        } else {
            Subjects::read(&self.store, &report)
        };
        Polled {
            received,
            failed,
            report,
            subjects,
            took: started.elapsed(),
        }
    }
}

/// How long to wait before the next poll after one that received `received` messages, with
/// `failures` polls failed in a row.
fn pause(received: usize, failures: u32) -> Duration {
    if failures > 0 {
        return POLL_EVERY
            .saturating_mul(2u32.saturating_pow(failures.min(16)))
            .min(MAX_BACKOFF);
    }
    if received >= BATCH {
        // A full batch: more are likely waiting.
        Duration::ZERO
    } else {
        POLL_EVERY
    }
}

/// Polls until `shutdown` turns true or leadership is lost, while leading only, handing each
/// poll to `observe`.
pub async fn drive<S, K>(
    mut poller: Poller<S, K>,
    mut leadership: watch::Receiver<Leadership>,
    mut shutdown: watch::Receiver<bool>,
    mut observe: impl FnMut(Polled),
) -> LoopEnd
where
    S: ClusterStore + Send + 'static,
    K: Clock + Send + 'static,
{
    let mut failures = 0u32;
    loop {
        if let Some(end) = until_leading(&mut shutdown, &mut leadership).await {
            return end;
        }
        // The store and the queue block on async calls inside (SQS's long poll too).
        let task = tokio::task::spawn_blocking(move || {
            let out = poller.poll();
            (poller, out)
        });
        let out = match task.await {
            Ok((p, out)) => {
                poller = p;
                out
            }
            Err(e) => {
                tracing::error!(error = %e, "an interruption poll panicked");
                return LoopEnd::StepPanicked;
            }
        };
        failures = if out.failed { failures + 1 } else { 0 };
        let wait = pause(out.received, failures);
        observe(out);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = next_change(&mut shutdown) => {}
            _ = next_change(&mut leadership) => {}
        }
    }
}

#[cfg(test)]
#[path = "interruptions_tests.rs"]
mod tests;
