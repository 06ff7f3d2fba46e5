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
    /// Leads until then (monotonic), unless revoked.
    until: Option<Instant>,
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
                revoked: None,
            })),
            ticker,
        }
    }

    /// A fence that always holds: a single replica without an election.
    pub fn always() -> Fence {
        let fence = Fence::new(Arc::new(SystemTicker));
        fence.lock().until = Some(Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600));
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

    /// `Ok` while this replica holds the Lease now; else why not, as "not the leader: …".
    pub fn check(&self) -> Result<(), String> {
        let now = self.ticker.now();
        let s = self.lock();
        let why = match (s.revoked, s.until) {
            (Some(Revoked::TakenOver), _) => "another replica holds the Lease".to_string(),
            (Some(Revoked::Resigned), _) => "stepped down".to_string(),
            (Some(Revoked::Expired), _) => "the Lease was not renewed in time".to_string(),
            (None, None) => "the Lease is not held yet".to_string(),
            (None, Some(u)) if now < u => return Ok(()),
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

    /// Leads until `until`, unless revoked. Never moves the deadline back.
    pub(crate) fn extend_to(&self, until: Instant) {
        let mut s = self.lock();
        if s.revoked.is_none() && s.until.is_none_or(|u| u < until) {
            s.until = Some(until);
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
