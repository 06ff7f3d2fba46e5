//! The election itself, with no I/O: fed what the Lease said and when (on this process's
//! monotonic clock), it says what to write next, and keeps the [`Fence`] that says whether this
//! replica may act right now.
//!
//! Two rules keep two replicas from ever acting at once, whatever their wall clocks say:
//!
//! - **A follower measures expiry on its own clock.** It remembers the record it last saw
//!   (`resourceVersion`, holder, `renewTime`) and the local instant it first saw it; the Lease
//!   has expired only once that same record has stayed unchanged for longer than its
//!   `leaseDurationSeconds`. `renewTime` is compared for equality, never with a clock (as
//!   client-go's `observedTime` does), so a skewed clock cannot shorten a Lease.
//! - **A leader stops at its renew deadline.** It leads only until the instant it *sent* its
//!   last successful renewal plus the renew deadline, which is shorter than the Lease. A
//!   follower's count starts after that renewal was stored, so it reaches the Lease duration
//!   after the leader's deadline has passed: `lease − renew deadline` (5 s) apart at least.
//!
//! Once it has led and stopped (its deadline passed, or another replica holds the Lease), a
//! replica never leads again: its caches may be stale, so the process exits and restarts clean.

use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;

use super::fence::{Fence, IN_FLIGHT_MARGIN, Revoked};

/// How long a Lease lasts, how long a leader goes on without renewing it, and how often
/// replicas try (client-go's and controller-runtime's defaults: 15 s, 10 s, 2 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl Timings {
    /// Whether the timings keep leaders apart: the renew deadline must be shorter than the
    /// Lease (the gap is the margin for a write in flight at the deadline), and leave room for
    /// a few tries.
    pub fn check(&self) -> Result<(), String> {
        if self.renew_deadline + IN_FLIGHT_MARGIN >= self.lease_duration {
            return Err(format!(
                "the renew deadline ({:?}) must be shorter than the Lease ({:?}) by more than \
                 {IN_FLIGHT_MARGIN:?}, the time left to a write in flight at the deadline",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.retry_period.mul_f64(1.2) >= self.renew_deadline {
            return Err(format!(
                "the retry period ({:?}) leaves no second try before the renew deadline ({:?})",
                self.retry_period, self.renew_deadline
            ));
        }
        Ok(())
    }
}

/// The Lease as read from (or stored by) the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    /// `spec.holderIdentity`; empty when released or never held.
    pub holder: String,
    /// `spec.leaseDurationSeconds`.
    pub lease_duration: Duration,
    /// `spec.renewTime` as the holder wrote it, by its wall clock. Compared, never measured.
    pub renew_time: Option<Timestamp>,
    pub acquire_time: Option<Timestamp>,
    pub transitions: i32,
    pub resource_version: String,
}

/// What to do after an observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// There is no Lease: create it, holding it.
    Create,
    /// Replace the Lease (with `resourceVersion` `over`), holding it: taking it over when
    /// `take` (a new `acquireTime`, one more transition), renewing it otherwise.
    Write { over: LeaseRecord, take: bool },
    /// Another replica holds the Lease (or this one lost it): try again later.
    Wait,
}

/// Where this replica stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    Follower,
    Leader,
    /// Led, and no longer does: stop for good.
    Lost,
}

/// The record a follower judges expiry by: what must stay the same.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    resource_version: String,
    holder: String,
    renew_time: Option<Timestamp>,
}

impl Seen {
    fn of(r: &LeaseRecord) -> Seen {
        Seen {
            resource_version: r.resource_version.clone(),
            holder: r.holder.clone(),
            renew_time: r.renew_time,
        }
    }
}

/// One replica's side of the election.
#[derive(Debug)]
pub struct Elector {
    identity: String,
    timings: Timings,
    /// The last record seen, and when (locally) it was first seen.
    seen: Option<(Seen, Instant)>,
    fence: Fence,
    led: bool,
}

impl Elector {
    pub fn new(identity: impl Into<String>, timings: Timings, fence: Fence) -> Elector {
        Elector {
            identity: identity.into(),
            timings,
            seen: None,
            fence,
            led: false,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    pub fn timings(&self) -> Timings {
        self.timings
    }

    /// The fence this elector extends and revokes.
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// Where this replica stands at `now` (monotonic).
    pub fn standing(&self, now: Instant) -> Standing {
        if self.fence.holds_at(now) {
            Standing::Leader
        } else if self.led {
            Standing::Lost
        } else {
            Standing::Follower
        }
    }

    /// The Lease as read at `at` (the local instant the answer arrived; `None`: no Lease).
    pub fn observe(&mut self, lease: Option<&LeaseRecord>, at: Instant) -> Next {
        if self.standing(at) == Standing::Lost {
            self.fence.revoke(Revoked::Expired);
            return Next::Wait;
        }
        let Some(lease) = lease else {
            if self.led {
                // Someone deleted the Lease under us: another replica may create it now.
                self.lose(Revoked::TakenOver);
                return Next::Wait;
            }
            return Next::Create;
        };
        let seen = Seen::of(lease);
        if self.seen.as_ref().is_none_or(|(s, _)| *s != seen) {
            self.seen = Some((seen, at));
        }
        if self.led && lease.holder == self.identity {
            return Next::Write {
                over: lease.clone(),
                take: false,
            };
        }
        // A record naming this identity that this process did not write is an earlier
        // process's (a restarted container, or another process on the same host): it is
        // waited out like anyone else's, since that process may still be writing.
        if self.led {
            self.lose(Revoked::TakenOver);
            return Next::Wait;
        }
        if lease.holder.is_empty() || self.expired_at(lease, at) {
            return Next::Write {
                over: lease.clone(),
                take: true,
            };
        }
        Next::Wait
    }

    /// Whether the record seen has stayed unchanged for longer than its duration, by the local
    /// clock.
    fn expired_at(&self, lease: &LeaseRecord, now: Instant) -> bool {
        self.seen
            .as_ref()
            .is_some_and(|(_, since)| now.saturating_duration_since(*since) > lease.lease_duration)
    }

    /// A create or replace written with this replica as holder succeeded; `sent_at` is the
    /// local instant taken before the request was sent. Leads until `sent_at + renew
    /// deadline`; writes started by then must end by `sent_at + Lease duration` less
    /// [`IN_FLIGHT_MARGIN`] (see [`Fence::check`]).
    pub fn wrote(&mut self, sent_at: Instant, stored: &LeaseRecord) {
        if self.standing(sent_at) == Standing::Lost {
            return;
        }
        self.led = true;
        self.seen = Some((Seen::of(stored), sent_at));
        let writes_until = (sent_at + stored.lease_duration.min(self.timings.lease_duration))
            .checked_sub(IN_FLIGHT_MARGIN)
            .unwrap_or(sent_at);
        self.fence
            .extend_to(sent_at + self.timings.renew_deadline, writes_until);
    }

    /// Stepping down on purpose (shutdown): the fence closes before the Lease is released.
    pub fn resign(&mut self) {
        self.fence.revoke(Revoked::Resigned);
    }

    fn lose(&mut self, why: Revoked) {
        tracing::error!(identity = %self.identity, reason = ?why, "lost the leader Lease");
        self.fence.revoke(why);
    }
}

#[cfg(test)]
#[path = "elector_tests.rs"]
mod tests;
