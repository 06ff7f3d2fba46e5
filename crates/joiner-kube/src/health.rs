//! How each watch is doing: what `is_ready` and `/readyz` report.

use std::fmt;

/// A watch that failed this many times in a row (kube's backoff waits up to 0.8 s, then 1.6 s,
/// between tries: a few seconds in all) makes the store not ready. One failure is routine (a watch timing out,
/// an API server rolling); several mean the cache is going stale.
pub(crate) const FAILURES_BEFORE_NOT_READY: u32 = 3;

/// The state of one kind's cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindHealth {
    /// `Resource::KIND` of the watched kind.
    pub kind: &'static str,
    /// `apiVersion/plural`, for messages about a missing CRD.
    pub resource: String,
    /// Whether a full list has been read at least once.
    pub synced: bool,
    /// The API server answered 404 to the list: the kind is not served (CRD not installed, or
    /// `resource.k8s.io/v1` off). The kind reads as empty; the watch keeps trying.
    pub missing: bool,
    /// Whether the controller cannot work without this kind (every kind but DRA's).
    pub required: bool,
    /// Watch errors since the last event that succeeded.
    pub consecutive_failures: u32,
    pub last_error: Option<String>,
}

impl KindHealth {
    pub(crate) fn new(kind: &'static str, resource: String, required: bool) -> KindHealth {
        KindHealth {
            kind,
            resource,
            synced: false,
            missing: false,
            required,
            consecutive_failures: 0,
            last_error: None,
        }
    }

    /// The cache can be read: listed at least once, or known not to exist.
    pub fn settled(&self) -> bool {
        self.synced || self.missing
    }

    /// Counts for readiness: settled, a missing kind only if optional, and not failing.
    pub fn ready(&self) -> bool {
        let present = self.synced || (self.missing && !self.required);
        present && self.consecutive_failures < FAILURES_BEFORE_NOT_READY
    }
}

impl fmt::Display for KindHealth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.kind, self.resource)?;
        if self.missing {
            f.write_str(": not served by the API server (is its CRD installed?)")?;
        } else if !self.synced {
            f.write_str(": not listed yet")?;
        } else if self.consecutive_failures > 0 {
            write!(
                f,
                ": watch failing ({} in a row)",
                self.consecutive_failures
            )?;
        } else {
            f.write_str(": ok")?;
        }
        if let Some(e) = &self.last_error
            && !self.ready()
        {
            write!(f, ": {e}")?;
        }
        Ok(())
    }
}
