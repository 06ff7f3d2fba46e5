//! Leader election over a `coordination.k8s.io/v1` Lease (kube-lease-manager), so that of
//! several replicas exactly one steps the controller.
//!
//! Leadership only ever moves forward: waiting, leading, lost. A replica that loses the Lease
//! (another took it, or renewing failed) never leads again in this process: its caches (the open
//! batch, offerings out of capacity) may be stale, so it stops stepping at once and exits
//! non-zero, and the Deployment restarts it clean as a follower.

use std::time::Duration;

use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long a Lease is valid after its last renewal, and how long before that the holder renews
/// it (controller-runtime's defaults: 15 s, renewing every 10 s).
const LEASE_SECONDS: u64 = 15;
const RENEW_BEFORE_SECONDS: u64 = 5;
/// Pause after a failed attempt to acquire the Lease.
const RETRY_AFTER: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leadership {
    /// Another replica holds the Lease (or nobody yet): do not step.
    Waiting,
    /// This replica holds the Lease: step.
    Leading,
    /// This replica held the Lease and lost it: stop, and exit.
    Lost,
}

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
    /// Joins the election for Lease `namespace/name` as `identity`.
    pub async fn start(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
    ) -> Result<Election, kube_lease_manager::LeaseManagerError> {
        let manager = LeaseManagerBuilder::new(client, name)
            .with_namespace(namespace)
            .with_identity(identity)
            .with_duration(LEASE_SECONDS)
            .with_grace(RENEW_BEFORE_SECONDS)
            .build()
            .await?;
        let (tx, state) = watch::channel(Leadership::Waiting);
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(campaign(manager, tx, stop_rx));
        Ok(Election { state, stop, task })
    }

    /// Stops renewing and releases the Lease if this replica holds it, so another replica can
    /// take over at once rather than after the Lease expires.
    pub async fn release(self) {
        let _ = self.stop.send(true);
        if let Err(e) = self.task.await {
            tracing::warn!(error = %e, "the leader election task failed");
        }
    }
}

async fn campaign(
    manager: LeaseManager,
    tx: watch::Sender<Leadership>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let leading = *tx.borrow() == Leadership::Leading;
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            changed = manager.changed() => match changed {
                Ok(true) => {
                    tracing::info!("acquired the leader Lease");
                    let _ = tx.send(Leadership::Leading);
                }
                Ok(false) if leading => {
                    tracing::error!("lost the leader Lease");
                    let _ = tx.send(Leadership::Lost);
                    break;
                }
                Ok(false) => {}
                Err(e) if leading => {
                    // Renewal failed: another replica may take the Lease once it expires, so
                    // this one must stop now rather than risk two leaders.
                    tracing::error!(error = %e, "could not renew the leader Lease");
                    let _ = tx.send(Leadership::Lost);
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not acquire the leader Lease; retrying");
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            },
        }
    }
    if let Err(e) = manager.release().await {
        tracing::warn!(error = %e, "could not release the leader Lease");
    }
}
