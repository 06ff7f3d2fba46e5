//! The election over a real `coordination.k8s.io/v1` Lease: GET it, and create it or PUT it
//! back with the `resourceVersion` read (a 409 means another replica wrote first: the next GET
//! shows what it wrote). Every call has a timeout, so a hung API server cannot hold a renewal
//! past the renew deadline.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;

use super::Leadership;
use super::elector::{Elector, LeaseRecord, Next, Standing};
use super::fence::Ticker;

/// Why a write of the Lease did not take.
#[derive(Debug)]
enum WriteError {
    /// Someone else wrote (or created) it first.
    Conflict,
    Other(String),
}

/// One Lease on the API server.
#[derive(Clone)]
pub struct LeaseApi {
    api: Api<Lease>,
    name: String,
    /// The most one GET or PUT may take: a renewal (both) ends well within the renew deadline.
    call_timeout: Duration,
}

impl LeaseApi {
    pub fn new(client: kube::Client, namespace: &str, name: &str, call_timeout: Duration) -> Self {
        LeaseApi {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            call_timeout,
        }
    }

    async fn within<T>(
        &self,
        call: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, WriteError> {
        match tokio::time::timeout(self.call_timeout, call).await {
            Ok(Ok(t)) => Ok(t),
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => Err(WriteError::Conflict),
            Ok(Err(e)) => Err(WriteError::Other(e.to_string())),
            Err(_) => Err(WriteError::Other(format!(
                "no answer within {:?}",
                self.call_timeout
            ))),
        }
    }

    /// The Lease as stored, if it exists (to watch another controller's).
    pub(crate) async fn read(&self) -> Result<Option<LeaseRecord>, String> {
        self.get().await
    }

    async fn get(&self) -> Result<Option<LeaseRecord>, String> {
        match self.within(self.api.get_opt(&self.name)).await {
            Ok(lease) => lease.map(|l| record_of(&l)).transpose(),
            Err(WriteError::Conflict) => Err("409 on a GET".into()),
            Err(WriteError::Other(e)) => Err(e),
        }
    }

    /// Writes the Lease held by `holder` (an empty holder releases it): a create when `over`
    /// is `None`, else a PUT over that version.
    async fn write(
        &self,
        over: Option<&LeaseRecord>,
        spec: LeaseSpec,
    ) -> Result<LeaseRecord, WriteError> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                resource_version: over.map(|o| o.resource_version.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(spec),
        };
        let pp = PostParams::default();
        let stored = match over {
            None => self.within(self.api.create(&pp, &lease)).await?,
            Some(_) => {
                self.within(self.api.replace(&self.name, &pp, &lease))
                    .await?
            }
        };
        record_of(&stored).map_err(WriteError::Other)
    }
}

/// Every Lease named `name` in any namespace, by namespace: a list with a `metadata.name` field
/// selector, so that RBAC can grant it for that one name.
pub(crate) async fn list_named(
    client: kube::Client,
    name: &str,
    call_timeout: Duration,
) -> Result<Vec<(String, LeaseRecord)>, String> {
    let api: Api<Lease> = Api::all(client);
    let params = kube::api::ListParams::default().fields(&format!("metadata.name={name}"));
    let list = match tokio::time::timeout(call_timeout, api.list(&params)).await {
        Ok(Ok(list)) => list,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err(format!("no answer within {call_timeout:?}")),
    };
    list.items
        .iter()
        .filter(|l| l.metadata.name.as_deref() == Some(name))
        .map(|l| {
            Ok((
                l.metadata.namespace.clone().unwrap_or_default(),
                record_of(l)?,
            ))
        })
        .collect()
}

fn record_of(lease: &Lease) -> Result<LeaseRecord, String> {
    let spec = lease.spec.clone().unwrap_or_default();
    let resource_version = lease
        .metadata
        .resource_version
        .clone()
        .ok_or("the Lease has no resourceVersion")?;
    Ok(LeaseRecord {
        holder: spec.holder_identity.unwrap_or_default(),
        lease_duration: Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        ),
        renew_time: spec.renew_time.map(|t| t.0),
        acquire_time: spec.acquire_time.map(|t| t.0),
        transitions: spec.lease_transitions.unwrap_or(0),
        resource_version,
    })
}

/// The Lease spec this replica writes to hold it. `renewTime` is the wall clock's: for people
/// and other tools reading the Lease; no replica of Joiner measures with it.
fn held(elector: &Elector, over: Option<&LeaseRecord>, take: bool, wall: Timestamp) -> LeaseSpec {
    let seconds = i32::try_from(elector.timings().lease_duration.as_secs()).unwrap_or(i32::MAX);
    let (acquired, transitions) = match over {
        Some(o) if !take => (o.acquire_time.unwrap_or(wall), o.transitions),
        Some(o) => (wall, o.transitions.saturating_add(1)),
        None => (wall, 0),
    };
    LeaseSpec {
        holder_identity: Some(elector.identity().to_string()),
        lease_duration_seconds: Some(seconds),
        acquire_time: Some(MicroTime(acquired)),
        renew_time: Some(MicroTime(wall)),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    }
}

/// Runs the election until `stop` turns true or the Lease is lost, publishing where this
/// replica stands on `state`. On stop, a leader closes its fence and then releases the Lease
/// (holder emptied), so another replica takes over at once.
pub async fn campaign(
    lease: LeaseApi,
    mut elector: Elector,
    ticker: Arc<dyn Ticker>,
    wall: impl Fn() -> Timestamp + Send,
    state: watch::Sender<Leadership>,
    mut stop: watch::Receiver<bool>,
) {
    let retry = elector.timings().retry_period;
    let mut last: Option<LeaseRecord> = None;
    loop {
        if *stop.borrow_and_update() {
            break;
        }
        let next = match lease.get().await {
            Ok(record) => elector.observe(record.as_ref(), ticker.now()),
            Err(e) => {
                tracing::warn!(error = %e, "could not read the leader Lease");
                Next::Wait
            }
        };
        let write = match &next {
            Next::Create => Some((None, true)),
            Next::Write { over, take } => Some((Some(over.clone()), *take)),
            Next::Wait => None,
        };
        if let Some((over, take)) = write {
            let sent_at = ticker.now();
            let spec = held(&elector, over.as_ref(), take, wall());
            match lease.write(over.as_ref(), spec).await {
                Ok(stored) => {
                    elector.wrote(sent_at, &stored);
                    last = Some(stored);
                }
                Err(WriteError::Conflict) => {
                    tracing::debug!("another replica wrote the Lease first");
                }
                Err(WriteError::Other(e)) => {
                    tracing::warn!(error = %e, "could not write the leader Lease");
                }
            }
        }
        match elector.standing(ticker.now()) {
            Standing::Leader => {
                state.send_if_modified(|s| {
                    let changed = *s != Leadership::Leading;
                    *s = Leadership::Leading;
                    changed
                });
            }
            Standing::Lost => {
                let _ = state.send(Leadership::Lost);
                return;
            }
            Standing::Follower => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(jittered(retry)) => {}
            _ = stop.changed() => {}
        }
    }
    let leading = elector.standing(ticker.now()) == Standing::Leader;
    elector.resign();
    if leading && let Some(over) = last {
        release(&lease, &elector, &over, wall()).await;
    }
}

/// Empties the holder (with a one-second duration, as client-go releases), so the next replica
/// does not wait out the Lease. Sent after the fence closed: nothing this replica still does
/// can be a leader's write.
async fn release(lease: &LeaseApi, elector: &Elector, over: &LeaseRecord, wall: Timestamp) {
    let spec = LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: over.acquire_time.map(MicroTime),
        renew_time: Some(MicroTime(wall)),
        lease_transitions: Some(over.transitions),
        ..LeaseSpec::default()
    };
    match lease.write(Some(over), spec).await {
        Ok(_) => tracing::info!(identity = elector.identity(), "released the leader Lease"),
        Err(e) => tracing::warn!(error = ?e, "could not release the leader Lease"),
    }
}

/// `period` plus up to 20% more, so replicas started together do not keep colliding.
fn jittered(period: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    period + period.mul_f64(f64::from(nanos % 1000) / 5000.0)
}

#[cfg(test)]
#[path = "api_tests.rs"]
mod tests;
