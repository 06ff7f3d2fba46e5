//! Never two controllers: while Karpenter runs, Joiner does nothing.
//!
//! Both read and write the same NodeClaims. Karpenter launches without a client token, so a
//! fresh NodeClaim could get an instance from each; both use the same finalizer and both would
//! drain, replace and terminate the same nodes. So the controller watches Karpenter's leader
//! Lease (`karpenter-leader-election`, in the namespaces given; `kube-system` and `karpenter`
//! by default) and while one is held by a running Karpenter it leads nothing: no step, no
//! interruption poll, `/readyz` failing with the reason, a log line each time that changes.
//!
//! A Lease is held by a running controller while its holder is set and it keeps changing: one
//! unchanged for its `leaseDurationSeconds` (plus [`MARGIN`]) on this process's own clock is
//! expired (the holder's wall clock is never compared with ours). On first sight a held Lease
//! counts as running until that long has passed. A Lease that cannot be read (no permission,
//! a timeout) counts as held: Joiner acts only once it knows Karpenter is not there.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::lease::{Leadership, LeaseApi, LeaseRecord};

/// Karpenter's leader Lease name (controller-runtime's, as Karpenter's operator sets it).
pub const KARPENTER_LEASE: &str = "karpenter-leader-election";
/// The namespaces Karpenter is commonly installed in.
pub const KARPENTER_NAMESPACES: [&str; 2] = ["kube-system", "karpenter"];
/// How often the Leases are read.
pub const POLL_EVERY: Duration = Duration::from_secs(5);
/// Slack beyond a Lease's duration before an unchanged Lease counts as expired.
pub const MARGIN: Duration = Duration::from_secs(5);
/// The most one read may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(4);

/// What was last seen of each rival Lease, and since when unchanged.
#[derive(Debug, Default)]
pub struct RivalWatch {
    seen: BTreeMap<String, (String, String, Instant)>,
}

impl RivalWatch {
    /// Records a reading of `lease` (`namespace/name`) at `at`; says why a controller holds it,
    /// or `None` when none does.
    pub fn observe(
        &mut self,
        lease: &str,
        reading: Result<Option<LeaseRecord>, String>,
        at: Instant,
    ) -> Option<String> {
        let record = match reading {
            Err(e) => {
                return Some(format!(
                    "Lease {lease} cannot be read ({e}): Karpenter may be running"
                ));
            }
            Ok(Some(r)) if !r.holder.is_empty() => r,
            Ok(_) => {
                self.seen.remove(lease);
                return None;
            }
        };
        let changed = self.seen.get(lease).is_none_or(|(version, holder, _)| {
            *version != record.resource_version || *holder != record.holder
        });
        if changed {
            self.seen.insert(
                lease.to_string(),
                (record.resource_version.clone(), record.holder.clone(), at),
            );
        }
        let since = self.seen.get(lease).map_or(at, |(_, _, t)| *t);
        let expired = at.saturating_duration_since(since) > record.lease_duration + MARGIN;
        (!expired).then(|| {
            format!(
                "Karpenter is running: {} holds Lease {lease}",
                record.holder
            )
        })
    }
}

/// Reads the Leases every [`POLL_EVERY`] and publishes on `tx` why Joiner must stand aside
/// (every reason, joined), or `None`; logs each change.
pub async fn watch(
    client: kube::Client,
    leases: Vec<(String, String)>,
    tx: watch::Sender<Option<String>>,
) {
    let apis: Vec<(String, LeaseApi)> = leases
        .iter()
        .map(|(ns, name)| {
            (
                format!("{ns}/{name}"),
                LeaseApi::new(client.clone(), ns, name, CALL_TIMEOUT),
            )
        })
        .collect();
    let mut rivals = RivalWatch::default();
    loop {
        let mut reasons = Vec::new();
        for (key, api) in &apis {
            let reading = api.read().await;
            reasons.extend(rivals.observe(key, reading, Instant::now()));
        }
        let now = (!reasons.is_empty()).then(|| reasons.join("; "));
        if *tx.borrow() != now {
            match &now {
                Some(why) => tracing::error!(
                    "{why}: Joiner does nothing while another controller acts on the same NodeClaims; scale Karpenter's Deployment to zero to switch (README: Switching from Karpenter)"
                ),
                None => tracing::info!("no other controller holds a watched Lease: Joiner acts"),
            }
            tx.send_replace(now);
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// This replica's leadership as the loops should see it: waiting while a rival runs.
pub fn gate(
    mut leadership: watch::Receiver<Leadership>,
    mut rival: watch::Receiver<Option<String>>,
) -> watch::Receiver<Leadership> {
    let gated = |l: Leadership, r: &Option<String>| match (l, r) {
        (Leadership::Leading, Some(_)) => Leadership::Waiting,
        (l, _) => l,
    };
    let first = gated(*leadership.borrow_and_update(), &rival.borrow_and_update());
    let (tx, rx) = watch::channel(first);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                changed = leadership.changed() => if changed.is_err() { return },
                changed = rival.changed() => if changed.is_err() { return },
                () = tx.closed() => return,
            }
            let next = gated(*leadership.borrow_and_update(), &rival.borrow_and_update());
            tx.send_if_modified(|l| std::mem::replace(l, next) != next);
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    fn held(holder: &str, version: &str) -> Result<Option<LeaseRecord>, String> {
        Ok(Some(LeaseRecord {
            holder: holder.into(),
            lease_duration: Duration::from_secs(15),
            renew_time: None,
            acquire_time: None,
            transitions: 0,
            resource_version: version.into(),
        }))
    }

    #[test]
    fn a_lease_counts_while_it_changes_and_expires_once_it_stops() {
        let t0 = Instant::now();
        let mut w = RivalWatch::default();
        let key = "kube-system/karpenter-leader-election";
        // First sight: running, until it has stood still for its duration.
        let why = w
            .observe(key, held("karpenter-abc", "1"), t0)
            .expect("running");
        assert!(why.contains("karpenter-abc") && why.contains(key), "{why}");
        assert!(
            w.observe(
                key,
                held("karpenter-abc", "1"),
                t0 + Duration::from_secs(19)
            )
            .is_some()
        );
        assert!(
            w.observe(
                key,
                held("karpenter-abc", "1"),
                t0 + Duration::from_secs(21)
            )
            .is_none()
        );
        // Renewed again (Karpenter scaled back up): running again at once.
        assert!(
            w.observe(
                key,
                held("karpenter-abc", "2"),
                t0 + Duration::from_secs(22)
            )
            .is_some()
        );
        // Released, or gone: nobody.
        assert!(
            w.observe(key, held("", "3"), t0 + Duration::from_secs(23))
                .is_none()
        );
        assert!(
            w.observe(key, Ok(None), t0 + Duration::from_secs(24))
                .is_none()
        );
        // Unreadable: assumed running.
        assert!(w.observe(key, Err("403".into()), t0).is_some());
    }

    /// A fake API server holding Karpenter's Lease in `kube-system` while `held` (renewed on
    /// every read, as a running Karpenter renews it), and no Lease anywhere else.
    fn api_server(held: Arc<AtomicBool>) -> kube::Client {
        use http::{Request, Response};
        let (service, mut handle) =
            tower_test::mock::pair::<Request<kube::client::Body>, Response<kube::client::Body>>();
        tokio::spawn(async move {
            let mut version = 0u64;
            while let Some((request, send)) = handle.next_request().await {
                let path = request.uri().path().to_string();
                let found = path
                    == "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/karpenter-leader-election"
                    && held.load(Ordering::SeqCst);
                version += 1;
                let (code, body) = if found {
                    (
                        200,
                        serde_json::json!({
                            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                            "metadata": {"name": "karpenter-leader-election", "namespace": "kube-system",
                                         "resourceVersion": version.to_string()},
                            "spec": {"holderIdentity": "karpenter-7d9f_1", "leaseDurationSeconds": 15}
                        }),
                    )
                } else {
                    (
                        404,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "code": 404, "reason": "NotFound", "message": "not found"}),
                    )
                };
                let mut response =
                    Response::new(kube::client::Body::from(body.to_string().into_bytes()));
                *response.status_mut() = http::StatusCode::from_u16(code).expect("status");
                send.send_response(response);
            }
        });
        kube::Client::new(service, "joiner")
    }

    /// Started beside a running Karpenter, the controller leads nothing until Karpenter's
    /// Lease is gone.
    #[tokio::test(start_paused = true)]
    async fn beside_a_running_karpenter_the_controller_leads_nothing() {
        let held = Arc::new(AtomicBool::new(true));
        let (tx, rival) = watch::channel(None);
        let leases = KARPENTER_NAMESPACES
            .iter()
            .map(|ns| (ns.to_string(), KARPENTER_LEASE.to_string()))
            .collect();
        let task = tokio::spawn(watch(api_server(held.clone()), leases, tx));
        let (_lead, leadership) = watch::channel(Leadership::Leading);
        let mut gated = gate(leadership, rival.clone());
        let mut rival_seen = rival.clone();
        rival_seen
            .wait_for(Option::is_some)
            .await
            .expect("a reading");
        let why = rival.borrow().clone().expect("running");
        assert_eq!(
            why,
            "Karpenter is running: karpenter-7d9f_1 holds Lease kube-system/karpenter-leader-election"
        );
        gated
            .wait_for(|l| *l == Leadership::Waiting)
            .await
            .expect("waiting");
        // Karpenter is uninstalled: its Lease goes, and the controller leads.
        held.store(false, Ordering::SeqCst);
        gated
            .wait_for(|l| *l == Leadership::Leading)
            .await
            .expect("leading");
        assert!(rival.borrow().is_none());
        task.abort();
    }

    #[tokio::test]
    async fn the_gate_holds_a_leader_back_while_a_rival_runs() {
        let (lead_tx, lead_rx) = watch::channel(Leadership::Leading);
        let (rival_tx, rival_rx) = watch::channel(Some("Karpenter is running".to_string()));
        let mut gated = gate(lead_rx, rival_rx);
        assert_eq!(*gated.borrow_and_update(), Leadership::Waiting);
        rival_tx.send_replace(None);
        gated.changed().await.expect("changes");
        assert_eq!(*gated.borrow_and_update(), Leadership::Leading);
        lead_tx.send_replace(Leadership::Lost);
        gated.changed().await.expect("changes");
        assert_eq!(*gated.borrow_and_update(), Leadership::Lost);
    }
}
