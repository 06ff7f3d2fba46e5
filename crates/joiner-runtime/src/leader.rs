//! Leader election over a `coordination.k8s.io/v1` Lease, so that of several replicas exactly
//! one writes to the cluster and the cloud. The election is Joiner's own (`crate::lease`):
//! kube-lease-manager judges expiry from the holder's `renewTime` against the local wall clock
//! and offers no deadline a write can be checked against, so a skewed clock or a renewal stuck
//! behind a slow step could leave two replicas writing.
//!
//! Leadership only ever moves forward: waiting, leading, lost. A replica that loses the Lease
//! (another took it, or it could not renew it before its renew deadline) never leads again in
//! this process: its caches (the open batch, offerings out of capacity) may be stale, so its
//! fence refuses every write at once, the loop stops stepping, and the process exits non-zero
//! so the Deployment restarts it clean as a follower.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use crate::lease::Leadership;
use crate::lease::{Elector, Fence, LeaseApi, SystemTicker, Timings, campaign};

/// The most one Lease GET or PUT may take: a renewal (both) ends within the renew deadline.
const LEASE_CALL_TIMEOUT: Duration = Duration::from_secs(4);

/// A replica that leads without an election (`--leader-elect=false`). Keep the sender alive as
/// long as the receiver is used.
pub fn always_leading() -> (watch::Sender<Leadership>, watch::Receiver<Leadership>) {
    watch::channel(Leadership::Leading)
}

/// The running election: its state, and the task that renews the Lease.
pub struct Election {
    pub state: watch::Receiver<Leadership>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Election {
    /// Joins the election for Lease `namespace/name` as `identity`, with the default timings
    /// (15 s Lease, 10 s renew deadline, a try every 2 s). `fence` is the one the controller's
    /// store and cloud are wrapped in: it holds only while this replica leads.
    pub fn start(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        fence: Fence,
    ) -> Election {
        let lease = LeaseApi::new(client, namespace, name, LEASE_CALL_TIMEOUT);
        let elector = Elector::new(identity, Timings::default(), fence);
        let (tx, state) = watch::channel(Leadership::Waiting);
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(campaign(
            lease,
            elector,
            Arc::new(SystemTicker),
            k8s_openapi::jiff::Timestamp::now,
            tx,
            stop_rx,
        ));
        Election { state, stop, task }
    }

    /// Stops renewing and releases the Lease if this replica holds it (its fence closed first),
    /// so another replica can take over at once rather than after the Lease expires.
    pub async fn release(self) {
        let _ = self.stop.send(true);
        if let Err(e) = self.task.await {
            tracing::warn!(error = %e, "the leader election task failed");
        }
    }
}
