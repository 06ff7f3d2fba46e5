//! [`Fence`]: "do I still hold the Lease right now?", answered from a local deadline without a
//! network call, so every write can ask it.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A monotonic clock: the fence and the elector measure only with it, never with wall time.
pub trait Ticker: Send + Sync + 'static {
    fn now(&self) -> Instant;
}

/// The process's monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemTicker;

impl Ticker for SystemTicker {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A monotonic clock moved by hand, for tests.
#[derive(Debug, Clone)]
pub struct ManualTicker {
    base: Instant,
    offset: Arc<Mutex<Duration>>,
}

impl Default for ManualTicker {
    fn default() -> Self {
        ManualTicker {
            base: Instant::now(),
            offset: Arc::new(Mutex::new(Duration::ZERO)),
        }
    }
}

impl ManualTicker {
    pub fn advance(&self, by: Duration) {
        *self.offset.lock().unwrap_or_else(PoisonError::into_inner) += by;
    }
}

impl Ticker for ManualTicker {
    fn now(&self) -> Instant {
        self.base + *self.offset.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How long before another replica could hold the Lease every write must have ended: a
/// request the API server or AWS had already received when the client gave up may still be
/// applied a moment later.
pub const IN_FLIGHT_MARGIN: Duration = Duration::from_secs(1);

/// Why the fence no longer holds, for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revoked {
    /// The renew deadline passed without a successful renewal.
    Expired,
    /// Another replica holds the Lease, or it was deleted.
    TakenOver,
    /// This replica stepped down (shutdown).
    Resigned,
}

#[derive(Debug)]
struct State {
    /// Leads until then (monotonic), unless revoked: no write starts after it.
    until: Option<Instant>,
    /// No write may still be in flight after then: the earliest another replica could take
    /// the Lease over, less a margin (see [`Fence::check`]).
    writes_until: Option<Instant>,
    revoked: Option<Revoked>,
}

/// Whether this replica holds the leader Lease at this instant: until its renew deadline, and
/// never again once revoked. Cheap to clone (all clones share one state), `Send + Sync`.
#[derive(Clone)]
pub struct Fence {
    state: Arc<Mutex<State>>,
    ticker: Arc<dyn Ticker>,
}

impl fmt::Debug for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fence")
            .field("state", &*self.lock())
            .finish()
    }
}

impl Fence {
    /// A fence that does not hold until an elector extends it.
    pub fn new(ticker: Arc<dyn Ticker>) -> Fence {
        Fence {
            state: Arc::new(Mutex::new(State {
                until: None,
                writes_until: None,
                revoked: None,
            })),
            ticker,
        }
    }

    /// A fence that always holds: a single replica without an election.
    pub fn always() -> Fence {
        let fence = Fence::new(Arc::new(SystemTicker));
        let forever = Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600);
        fence.extend_to(forever, forever);
        fence
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the fence holds at `now`.
    pub fn holds_at(&self, now: Instant) -> bool {
        let s = self.lock();
        s.revoked.is_none() && s.until.is_some_and(|u| now < u)
    }

    /// While this replica holds the Lease now, the instant by which a write starting now must
    /// have ended (run it `joiner_controller::deadline::within` that instant, so the call gives
    /// up then); else why not, as "not the leader: …".
    ///
    /// A write may start up to the renew deadline and must end before another replica could
    /// hold the Lease: that is `lease duration` after this replica sent its last successful
    /// renewal (a follower counts from when it saw that renewal stored), less
    /// [`IN_FLIGHT_MARGIN`] for a request the API server is still applying when the client
    /// gives up. With client-go's timings that leaves every write at least 4 s.
    pub fn check(&self) -> Result<Instant, String> {
        let now = self.ticker.now();
        let s = self.lock();
        let why = match (s.revoked, s.until) {
            (Some(Revoked::TakenOver), _) => "another replica holds the Lease".to_string(),
            (Some(Revoked::Resigned), _) => "stepped down".to_string(),
            (Some(Revoked::Expired), _) => "the Lease was not renewed in time".to_string(),
            (None, None) => "the Lease is not held yet".to_string(),
            (None, Some(u)) if now < u => return Ok(s.writes_until.unwrap_or(u)),
            (None, Some(u)) => format!(
                "the Lease was not renewed in time (renew deadline passed {:?} ago)",
                now.saturating_duration_since(u)
            ),
        };
        Err(format!("not the leader: {why}"))
    }

    /// The instant now, by the fence's clock.
    pub fn now(&self) -> Instant {
        self.ticker.now()
    }

    /// Leads until `until`, with writes in flight until `writes_until`, unless revoked. Never
    /// moves either back.
    pub(crate) fn extend_to(&self, until: Instant, writes_until: Instant) {
        let mut s = self.lock();
        if s.revoked.is_some() {
            return;
        }
        if s.until.is_none_or(|u| u < until) {
            s.until = Some(until);
        }
        if s.writes_until.is_none_or(|u| u < writes_until) {
            s.writes_until = Some(writes_until.max(until));
        }
    }

    /// Stops holding, for good.
    pub(crate) fn revoke(&self, why: Revoked) {
        let mut s = self.lock();
        if s.revoked.is_none() {
            s.revoked = Some(why);
        }
    }
}
