//! Never two controllers: while Karpenter or another Joiner runs, Joiner does nothing.
//!
//! Both read and write the same NodeClaims. Karpenter launches without a client token, so a
//! fresh NodeClaim could get an instance from each; both use the same finalizer and both would
//! drain, replace and terminate the same nodes. So the controller watches Karpenter's leader
//! Lease (`karpenter-leader-election`, in the namespaces given; `kube-system` and `karpenter`
//! by default) and while one is held by a running Karpenter it leads nothing: no step, no
//! interruption poll, `/readyz` failing with the reason, a log line each time that changes.
//!
//! Another Joiner installed in another namespace elects its leader through its own Lease there,
//! so the two would both lead. So the controller also lists the Leases with its own Lease's
//! name in every namespace (a list with a `metadata.name` field selector, which RBAC grants for
//! that name alone) and treats one held in another namespace as it treats Karpenter's.
//!
//! A Lease is held by a running controller while its holder is set and it keeps changing: one
//! unchanged for its `leaseDurationSeconds` (plus [`MARGIN`]) on this process's own clock is
//! expired (the holder's wall clock is never compared with ours). On first sight a held Lease
//! counts as running until that long has passed. A Lease that cannot be read (no permission,
//! a timeout) counts as held: Joiner acts only once it knows Karpenter is not there.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::lease::{Leadership, LeaseApi, LeaseRecord, list_named};

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
        who: &str,
        reading: Result<Option<LeaseRecord>, String>,
        at: Instant,
    ) -> Option<String> {
        let record = match reading {
            Err(e) => {
                return Some(format!(
                    "Lease {lease} cannot be read ({e}): {who} may be running"
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
        (!expired).then(|| format!("{who} is running: {} holds Lease {lease}", record.holder))
    }
}

/// Reads the Leases every [`POLL_EVERY`] and publishes on `tx` why Joiner must stand aside
/// (every reason, joined), or `None`; logs each change.
/// This Joiner's own leader Lease (`namespace`, `name`): Leases of that name elsewhere are
/// other Joiners'.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnLease {
    pub namespace: String,
    pub name: String,
}

/// Why another Joiner holds a Lease named like ours outside our namespace, if one does;
/// a listing that fails counts as one.
fn other_joiners(
    rivals: &mut RivalWatch,
    own: &OwnLease,
    listed: Result<Vec<(String, LeaseRecord)>, String>,
    at: Instant,
) -> Vec<String> {
    match listed {
        Err(e) => vec![format!(
            "Leases named {} cannot be listed ({e}): another Joiner may be running",
            own.name
        )],
        Ok(leases) => leases
            .into_iter()
            .filter(|(namespace, _)| *namespace != own.namespace)
            .filter_map(|(namespace, record)| {
                let key = format!("{namespace}/{}", own.name);
                rivals.observe(&key, "another Joiner", Ok(Some(record)), at)
            })
            .collect(),
    }
}

pub async fn watch(
    client: kube::Client,
    leases: Vec<(String, String)>,
    own: Option<OwnLease>,
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
            reasons.extend(rivals.observe(key, "Karpenter", reading, Instant::now()));
        }
        if let Some(own) = &own {
            let listed = list_named(client.clone(), &own.name, CALL_TIMEOUT).await;
            reasons.extend(other_joiners(&mut rivals, own, listed, Instant::now()));
        }
        let now = (!reasons.is_empty()).then(|| reasons.join("; "));
        if *tx.borrow() != now {
            match &now {
                Some(why) => tracing::error!(
                    "{why}: Joiner does nothing while another controller acts on the same NodeClaims; scale the other controller's Deployment to zero to switch (README: Switching from Karpenter)"
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
            .observe(key, "Karpenter", held("karpenter-abc", "1"), t0)
            .expect("running");
        assert!(why.contains("karpenter-abc") && why.contains(key), "{why}");
        assert!(
            w.observe(
                key,
                "Karpenter",
                held("karpenter-abc", "1"),
                t0 + Duration::from_secs(19)
            )
            .is_some()
        );
        assert!(
            w.observe(
                key,
                "Karpenter",
                held("karpenter-abc", "1"),
                t0 + Duration::from_secs(21)
            )
            .is_none()
        );
        // Renewed again (Karpenter scaled back up): running again at once.
        assert!(
            w.observe(
                key,
                "Karpenter",
                held("karpenter-abc", "2"),
                t0 + Duration::from_secs(22)
            )
            .is_some()
        );
        // Released, or gone: nobody.
        assert!(
            w.observe(
                key,
                "Karpenter",
                held("", "3"),
                t0 + Duration::from_secs(23)
            )
            .is_none()
        );
        assert!(
            w.observe(key, "Karpenter", Ok(None), t0 + Duration::from_secs(24))
                .is_none()
        );
        // Unreadable: assumed running.
        assert!(w.observe(key, "Karpenter", Err("403".into()), t0).is_some());
    }

    /// A fake API server holding Karpenter's Lease in `kube-system` while `held` (renewed on
    /// every read, as a running Karpenter renews it), and no Lease anywhere else.
    /// A Lease named like Joiner's own in another namespace is another Joiner's: it stands
    /// Joiner down while held; its own namespace's (its replicas' election) never does, and a
    /// listing that fails counts as held.
    #[test]
    fn another_joiner_in_another_namespace_counts_as_a_rival() {
        let t0 = Instant::now();
        let own = OwnLease {
            namespace: "kube-system".into(),
            name: "joiner-leader-election".into(),
        };
        let mut w = RivalWatch::default();
        let ours = ("kube-system".to_string(), record("joiner-0", "1"));
        let theirs = ("gpu-team".to_string(), record("joiner-7f9", "5"));
        assert!(other_joiners(&mut w, &own, Ok(vec![ours.clone()]), t0).is_empty());
        let why = other_joiners(&mut w, &own, Ok(vec![ours.clone(), theirs.clone()]), t0);
        assert_eq!(
            why,
            ["another Joiner is running: joiner-7f9 holds Lease gpu-team/joiner-leader-election"]
        );
        // Unrenewed past its duration, it no longer counts.
        let later = t0 + Duration::from_secs(21);
        assert!(other_joiners(&mut w, &own, Ok(vec![ours, theirs]), later).is_empty());
        let failed = other_joiners(&mut w, &own, Err("403".into()), later);
        assert!(
            failed[0].contains("another Joiner may be running"),
            "{failed:?}"
        );
    }

    fn record(holder: &str, version: &str) -> LeaseRecord {
        held(holder, version).expect("ok").expect("some")
    }

    fn api_server(held: Arc<AtomicBool>) -> kube::Client {
        api_server_with(held, Arc::new(AtomicBool::new(false)))
    }

    /// An API server holding Karpenter's Lease while `karpenter` is set, and Joiner Leases in
    /// `kube-system` (this Joiner's) and, while `other` is set, in `gpu-team`. A list of Leases
    /// without the `metadata.name` field selector is refused, as RBAC scoped to the name would.
    fn api_server_with(karpenter: Arc<AtomicBool>, other: Arc<AtomicBool>) -> kube::Client {
        use http::{Request, Response};
        let (service, mut handle) =
            tower_test::mock::pair::<Request<kube::client::Body>, Response<kube::client::Body>>();
        tokio::spawn(async move {
            let mut version = 0u64;
            while let Some((request, send)) = handle.next_request().await {
                let path = request.uri().path().to_string();
                let query = request.uri().query().unwrap_or_default().to_string();
                version += 1;
                let lease = |namespace: &str, name: &str, holder: &str| {
                    serde_json::json!({
                        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": name, "namespace": namespace,
                                     "resourceVersion": version.to_string()},
                        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}
                    })
                };
                let status = |code: u16, reason: &str| {
                    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "code": code, "reason": reason, "message": reason})
                };
                let (code, body) = if path == "/apis/coordination.k8s.io/v1/leases" {
                    if query.contains("fieldSelector=metadata.name%3Djoiner-leader-election") {
                        let mut items =
                            vec![lease("kube-system", "joiner-leader-election", "joiner-0")];
                        if other.load(Ordering::SeqCst) {
                            items.push(lease("gpu-team", "joiner-leader-election", "joiner-7f9"));
                        }
                        (
                            200,
                            serde_json::json!({"apiVersion": "coordination.k8s.io/v1",
                            "kind": "LeaseList", "metadata": {"resourceVersion": "1"}, "items": items}),
                        )
                    } else {
                        (403, status(403, "Forbidden"))
                    }
                } else if path
                    == "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/karpenter-leader-election"
                    && karpenter.load(Ordering::SeqCst)
                {
                    (
                        200,
                        lease(
                            "kube-system",
                            "karpenter-leader-election",
                            "karpenter-7d9f_1",
                        ),
                    )
                } else {
                    (404, status(404, "NotFound"))
                };
                let mut response =
                    Response::new(kube::client::Body::from(body.to_string().into_bytes()));
                *response.status_mut() = http::StatusCode::from_u16(code).expect("status");
                send.send_response(response);
            }
        });
        kube::Client::new(service, "joiner")
    }

    /// Started while another Joiner leads in another namespace, the controller leads nothing
    /// until that one's Lease is gone; its own namespace's Lease never holds it back.
    #[tokio::test(start_paused = true)]
    async fn beside_another_joiner_the_controller_leads_nothing() {
        let other = Arc::new(AtomicBool::new(true));
        let client = api_server_with(Arc::new(AtomicBool::new(false)), other.clone());
        let own = OwnLease {
            namespace: "kube-system".into(),
            name: "joiner-leader-election".into(),
        };
        let (tx, rival) = watch::channel(None);
        let task = tokio::spawn(watch(client, Vec::new(), Some(own), tx));
        let (_lead, leadership) = watch::channel(Leadership::Leading);
        let mut gated = gate(leadership, rival.clone());
        rival
            .clone()
            .wait_for(Option::is_some)
            .await
            .expect("a reading");
        assert_eq!(
            rival.borrow().clone().expect("running"),
            "another Joiner is running: joiner-7f9 holds Lease gpu-team/joiner-leader-election"
        );
        gated
            .wait_for(|l| *l == Leadership::Waiting)
            .await
            .expect("waiting");
        other.store(false, Ordering::SeqCst);
        gated
            .wait_for(|l| *l == Leadership::Leading)
            .await
            .expect("leading");
        task.abort();
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
        let task = tokio::spawn(watch(api_server(held.clone()), leases, None, tx));
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
