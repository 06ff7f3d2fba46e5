//! The election as a pure state machine: replicas sharing one in-memory Lease record, each with
//! its own monotonic clock and a wall clock skewed from the others'.

use std::sync::Arc;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::*;
use crate::lease::fence::{ManualTicker, SystemTicker, Ticker};

const SECOND: Duration = Duration::from_secs(1);

/// The API server's side: one Lease, written only over the version read (409 otherwise).
#[derive(Default)]
struct Server {
    lease: Option<LeaseRecord>,
    version: u64,
}

impl Server {
    fn write(
        &mut self,
        over: Option<&LeaseRecord>,
        mut record: LeaseRecord,
    ) -> Option<LeaseRecord> {
        let current = self.lease.as_ref().map(|l| &l.resource_version);
        if current != over.map(|o| &o.resource_version) {
            return None;
        }
        self.version += 1;
        record.resource_version = self.version.to_string();
        self.lease = Some(record.clone());
        Some(record)
    }
}

/// One replica: its elector, its monotonic clock (an arbitrary base), its skewed wall clock,
/// and whether it can reach the server.
struct Replica {
    elector: Elector,
    base: Instant,
    skew: SignedDuration,
    reachable: bool,
    /// Local instant of the last successful write, as sent.
    last_sent: Option<Instant>,
    /// Local instant at which it first saw the record it finally took over, for the check that
    /// it waited long enough.
    took_over: Option<(Duration, Duration)>,
}

impl Replica {
    fn new(name: &str, base: Instant, skew_seconds: i64) -> Replica {
        let fence = Fence::new(Arc::new(SystemTicker));
        Replica {
            elector: Elector::new(name, Timings::default(), fence),
            base,
            skew: SignedDuration::from_secs(skew_seconds),
            reachable: true,
            last_sent: None,
            took_over: None,
        }
    }

    /// This replica's monotonic instant at real time `t`.
    fn mono(&self, t: Duration) -> Instant {
        self.base + t
    }

    fn wall(&self, t: Duration) -> Timestamp {
        let real = Timestamp::from_second(1_800_000_000).expect("a time")
            + SignedDuration::try_from(t).expect("short");
        real + self.skew
    }

    fn leads(&self, t: Duration) -> bool {
        self.elector.standing(self.mono(t)) == Standing::Leader
    }

    /// One try at real time `t`: read the Lease, and write it if the elector says so.
    fn tick(&mut self, server: &mut Server, t: Duration) {
        if !self.reachable {
            return;
        }
        let now = self.mono(t);
        let first_seen = self.elector.seen.as_ref().map(|(_, at)| *at);
        let next = self.elector.observe(server.lease.as_ref(), now);
        let (over, take) = match next {
            Next::Create => (None, true),
            Next::Write { over, take } => (Some(over), take),
            Next::Wait => return,
        };
        let record = LeaseRecord {
            holder: self.elector.identity().to_string(),
            lease_duration: Timings::default().lease_duration,
            renew_time: Some(self.wall(t)),
            acquire_time: Some(self.wall(t)),
            transitions: over.as_ref().map_or(0, |o| o.transitions + 1),
            resource_version: String::new(),
        };
        let had_holder = over.as_ref().is_some_and(|o| !o.holder.is_empty());
        if let Some(stored) = server.write(over.as_ref(), record) {
            self.elector.wrote(now, &stored);
            self.last_sent = Some(now);
            if take
                && had_holder
                && let Some(seen) = first_seen
            {
                self.took_over = Some((seen - self.base, t));
            }
        }
    }
}

/// Runs two replicas for `until`, each trying every 2 s (B half a period after A), with A
/// unreachable from `partition` on; checks at every 100 ms that they never both lead.
fn run(skew_a: i64, skew_b: i64, partition: Duration, until: Duration) -> (Replica, Replica) {
    let mut server = Server::default();
    let origin = Instant::now();
    let mut a = Replica::new("a", origin, skew_a);
    // B's monotonic clock started long before A's: bases need not agree.
    let mut b = Replica::new("b", origin + 1000 * SECOND, skew_b);
    let step = Duration::from_millis(100);
    let mut t = Duration::ZERO;
    while t <= until {
        if t >= partition {
            a.reachable = false;
        }
        let ms = t.as_millis() % 2000;
        if ms == 0 {
            a.tick(&mut server, t);
        }
        if ms == 1000 {
            b.tick(&mut server, t);
        }
        assert!(
            !(a.leads(t) && b.leads(t)),
            "both lead at {t:?} (skews {skew_a} s, {skew_b} s)"
        );
        t += step;
    }
    (a, b)
}

#[test]
fn two_replicas_with_skewed_clocks_never_lead_at_once() {
    for (skew_a, skew_b) in [(-30, 30), (30, -30)] {
        let partition = 40 * SECOND;
        let (a, b) = run(skew_a, skew_b, partition, 120 * SECOND);
        // A led until the partition, and no longer than its renew deadline after.
        let last = a.last_sent.expect("A renewed") - a.base;
        assert!(
            last < partition && last >= partition - 2 * SECOND,
            "{last:?}"
        );
        assert!(a.leads(last + 9 * SECOND));
        assert!(!a.leads(last + 10 * SECOND), "past its renew deadline");
        assert_eq!(a.elector.standing(a.mono(120 * SECOND)), Standing::Lost);
        // B waited, whatever A's renewTime said by B's wall clock (60 s old, or 60 s ahead),
        // and took over only after seeing A's last record unchanged for the Lease duration.
        let (seen, took) = b.took_over.expect("B took over");
        assert!(seen >= last, "B judged the record A wrote last");
        assert!(took - seen > 15 * SECOND, "seen {seen:?}, took {took:?}");
        assert!(took < last + 20 * SECOND, "no later than it must: {took:?}");
        assert!(b.leads(120 * SECOND));
    }
}

#[test]
fn a_follower_takes_over_only_after_seeing_the_record_unchanged_for_the_lease_duration() {
    let mut server = Server::default();
    let origin = Instant::now();
    let mut a = Replica::new("a", origin, 30);
    let mut b = Replica::new("b", origin, -30);
    a.tick(&mut server, Duration::ZERO);
    assert!(a.leads(Duration::ZERO));
    // A dies without releasing. B first sees its record at 1 s.
    for s in (1..=15).step_by(2) {
        b.tick(&mut server, s * SECOND);
        assert!(!b.leads(s * SECOND), "took over at {s} s");
    }
    // 16 s: unchanged for exactly 15 s, not longer: still A's.
    assert_eq!(
        b.elector
            .observe(server.lease.as_ref(), b.mono(16 * SECOND)),
        Next::Wait
    );
    b.tick(&mut server, 17 * SECOND);
    assert!(b.leads(17 * SECOND));
    assert_eq!(server.lease.as_ref().map(|l| l.transitions), Some(1));

    // A record that changes (a leader renewing) restarts the count, even with an old renewTime.
    let mut c = Replica::new("c", origin, 0);
    for s in (18..=60).step_by(2) {
        b.tick(&mut server, s * SECOND);
        c.tick(&mut server, (s + 1) * SECOND);
        assert!(!c.leads((s + 1) * SECOND));
    }
}

#[test]
fn a_leader_whose_renewals_fail_stops_at_its_renew_deadline() {
    let mut server = Server::default();
    let origin = Instant::now();
    let mut a = Replica::new("a", origin, 0);
    let mut b = Replica::new("b", origin, 0);
    a.tick(&mut server, Duration::ZERO);
    b.tick(&mut server, SECOND);
    a.tick(&mut server, 2 * SECOND);
    // A's renewals fail from here on, though no one has taken the Lease.
    a.reachable = false;
    assert!(a.leads(11 * SECOND));
    assert!(!a.leads(12 * SECOND), "renew deadline: 2 s + 10 s");
    assert_eq!(a.elector.standing(a.mono(12 * SECOND)), Standing::Lost);
    assert!(!a.elector.fence().holds_at(a.mono(12 * SECOND)));
    // B saw A's last record at 3 s at the earliest; it cannot lead before 18 s.
    for s in (3..18).step_by(2) {
        b.tick(&mut server, s * SECOND);
        assert!(!b.leads(s * SECOND));
    }
    b.tick(&mut server, 19 * SECOND);
    assert!(b.leads(19 * SECOND));
    // A never leads again, even once it can reach the server.
    a.reachable = true;
    a.tick(&mut server, 20 * SECOND);
    assert!(!a.leads(20 * SECOND));
}

#[test]
fn a_leader_that_sees_another_holder_stops_at_once_and_a_released_lease_is_taken_at_once() {
    let mut server = Server::default();
    let origin = Instant::now();
    let mut a = Replica::new("a", origin, 0);
    a.tick(&mut server, Duration::ZERO);
    // Someone (an operator, another tool) wrote the Lease to another holder.
    let over = server.lease.clone();
    let mut other = over.clone().expect("a Lease");
    other.holder = "x".into();
    server.write(over.as_ref(), other);
    a.tick(&mut server, 2 * SECOND);
    assert!(!a.leads(2 * SECOND), "well before its renew deadline");
    assert!(!a.elector.fence().holds_at(a.mono(12 * SECOND)));

    // A Lease released (holder emptied) needs no waiting.
    let over = server.lease.clone();
    let mut released = over.clone().expect("a Lease");
    released.holder = String::new();
    server.write(over.as_ref(), released);
    let mut b = Replica::new("b", origin, 0);
    b.tick(&mut server, 3 * SECOND);
    assert!(b.leads(3 * SECOND));
}

#[test]
fn a_record_naming_this_identity_from_an_earlier_process_is_waited_out() {
    let mut server = Server::default();
    let origin = Instant::now();
    let mut before = Replica::new("a", origin, 0);
    before.tick(&mut server, Duration::ZERO);
    // The container restarts under the same pod name.
    let mut after = Replica::new("a", origin, 0);
    after.tick(&mut server, SECOND);
    assert!(!after.leads(SECOND));
    after.tick(&mut server, 17 * SECOND);
    assert!(after.leads(17 * SECOND));
}

#[test]
fn the_default_timings_keep_leaders_apart() {
    assert_eq!(Timings::default().check(), Ok(()));
    let bad = Timings {
        renew_deadline: Duration::from_secs(15),
        ..Timings::default()
    };
    assert!(bad.check().is_err());
}

#[test]
fn the_fence_follows_the_deadline_and_never_reopens() {
    let ticker = ManualTicker::default();
    let fence = Fence::new(Arc::new(ticker.clone()));
    assert!(fence.check().is_err(), "not held before an election");
    let mut e = Elector::new("a", Timings::default(), fence.clone());
    e.wrote(
        ticker.now(),
        &LeaseRecord {
            holder: "a".into(),
            lease_duration: 15 * SECOND,
            renew_time: None,
            acquire_time: None,
            transitions: 0,
            resource_version: "1".into(),
        },
    );
    let start = ticker.now();
    ticker.advance(9 * SECOND);
    // A write starting now must end a margin before the Lease could pass to another replica.
    assert_eq!(fence.check(), Ok(start + 14 * SECOND));
    ticker.advance(SECOND);
    let why = fence.check().expect_err("past the renew deadline");
    assert!(why.starts_with("not the leader: "), "{why}");
    // A late success (a renewal answered after the deadline) does not reopen it.
    e.observe(None, ticker.now());
    e.wrote(
        ticker.now(),
        &LeaseRecord {
            holder: "a".into(),
            lease_duration: 15 * SECOND,
            renew_time: None,
            acquire_time: None,
            transitions: 0,
            resource_version: "2".into(),
        },
    );
    assert!(fence.check().is_err());
}
