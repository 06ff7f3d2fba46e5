//! The campaign against a fake API server holding one Lease with the API server's contract:
//! GET answers 404 until it is created, POST of an existing Lease is 409, and PUT is stored only
//! over the current `resourceVersion` (409 otherwise).

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use http::{Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use serde_json::{Value, json};

use super::*;
use crate::lease::{Fence, SystemTicker, Timings};

type Body = StreamBody<BoxStream<'static, Result<Frame<Bytes>, Infallible>>>;

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/joiner/leases/joiner-leader-election";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/joiner/leases";

#[derive(Default)]
struct Stored {
    lease: Option<Value>,
    version: u64,
    /// Method and the `resourceVersion` sent, of every write.
    writes: Vec<(String, Option<String>)>,
}

fn reply(code: u16, body: &Value) -> Response<Body> {
    let bytes = Bytes::from(body.to_string());
    let mut r = Response::new(StreamBody::new(
        stream::once(async move { Ok(Frame::data(bytes)) }).boxed(),
    ));
    *r.status_mut() = http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::OK);
    r
}

fn failure(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
           "message": reason, "details": {"name": "joiner-leader-election", "kind": "leases"}})
}

impl Stored {
    fn answer(&mut self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let sent_version = body
            .as_ref()
            .and_then(|b| b["metadata"]["resourceVersion"].as_str().map(String::from));
        match (method, path) {
            ("GET", LEASE) => match &self.lease {
                Some(l) => (200, l.clone()),
                None => (404, failure(404, "NotFound")),
            },
            ("POST", LEASES) | ("PUT", LEASE) => {
                self.writes.push((method.to_string(), sent_version.clone()));
                let current = self
                    .lease
                    .as_ref()
                    .and_then(|l| l["metadata"]["resourceVersion"].as_str().map(String::from));
                let fits = if method == "POST" {
                    self.lease.is_none()
                } else {
                    current.is_some() && current == sent_version
                };
                if !fits {
                    let reason = if method == "POST" {
                        "AlreadyExists"
                    } else {
                        "Conflict"
                    };
                    return (409, failure(409, reason));
                }
                self.version += 1;
                let mut stored = body.unwrap_or(Value::Null);
                stored["metadata"]["resourceVersion"] = self.version.to_string().into();
                stored["metadata"]["namespace"] = "joiner".into();
                self.lease = Some(stored.clone());
                (if method == "POST" { 201 } else { 200 }, stored)
            }
            _ => (404, failure(404, "NotFound")),
        }
    }
}

/// A client of the shared Lease server, cut off while `reachable` is false.
fn client(stored: Arc<Mutex<Stored>>, reachable: Arc<AtomicBool>) -> kube::Client {
    let (service, mut handle) =
        tower_test::mock::pair::<Request<kube::client::Body>, Response<Body>>();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            if !reachable.load(Ordering::SeqCst) {
                send.send_error(std::io::Error::other("network unreachable"));
                continue;
            }
            let (code, value) = stored
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .answer(
                    parts.method.as_str(),
                    parts.uri.path(),
                    serde_json::from_slice(&bytes).ok(),
                );
            send.send_response(reply(code, &value));
        }
    });
    kube::Client::new(service, "joiner")
}

fn fast() -> Timings {
    Timings {
        lease_duration: Duration::from_millis(1500),
        renew_deadline: Duration::from_millis(1000),
        retry_period: Duration::from_millis(100),
    }
}

struct Replica {
    fence: Fence,
    state: watch::Receiver<Leadership>,
    stop: watch::Sender<bool>,
    reachable: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

fn join(stored: &Arc<Mutex<Stored>>, identity: &str) -> Replica {
    let reachable = Arc::new(AtomicBool::new(true));
    let lease = LeaseApi::new(
        client(stored.clone(), reachable.clone()),
        "joiner",
        "joiner-leader-election",
        Duration::from_millis(300),
    );
    let fence = Fence::new(Arc::new(SystemTicker));
    let elector = Elector::new(identity, fast(), fence.clone());
    let (tx, state) = watch::channel(Leadership::Waiting);
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(campaign(
        lease,
        elector,
        Arc::new(SystemTicker),
        Timestamp::now,
        tx,
        stop_rx,
    ));
    Replica {
        fence,
        state,
        stop,
        reachable,
        task,
    }
}

/// Waits up to 10 s for `condition`, checking every 10 ms that `a` and `b` never both hold.
async fn until_exclusive(what: &str, a: &Fence, b: &Fence, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        let now = Instant::now();
        assert!(!(a.holds_at(now) && b.holds_at(now)), "both lead");
        assert!(now < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn holder(stored: &Arc<Mutex<Stored>>) -> Option<String> {
    let s = stored.lock().unwrap_or_else(PoisonError::into_inner);
    s.lease
        .as_ref()
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(String::from))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_stops_before_the_follower_takes_over() {
    let stored = Arc::new(Mutex::new(Stored::default()));
    let a = join(&stored, "a");
    let nobody = Fence::new(Arc::new(SystemTicker));
    until_exclusive("a to lead", &a.fence, &nobody, || {
        *a.state.borrow() == Leadership::Leading
    })
    .await;
    assert_eq!(holder(&stored).as_deref(), Some("a"));
    let b = join(&stored, "b");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(*b.state.borrow(), Leadership::Waiting, "A renews: B waits");
    assert!(b.fence.check().is_err());
    {
        let s = stored.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!(
            s.writes[0],
            ("POST".to_string(), None),
            "created when absent"
        );
        let renewals: Vec<_> = s.writes.iter().filter(|(m, _)| m == "PUT").collect();
        assert!(renewals.len() >= 3, "{:?}", s.writes);
        assert!(
            renewals.iter().all(|(_, v)| v.is_some()),
            "PUT carries the version read"
        );
    }

    a.reachable.store(false, Ordering::SeqCst);
    let cut = Instant::now();
    until_exclusive("b to lead", &a.fence, &b.fence, || {
        *b.state.borrow() == Leadership::Leading
    })
    .await;
    assert!(
        cut.elapsed() >= Duration::from_millis(500),
        "{:?}",
        cut.elapsed()
    );
    assert_eq!(holder(&stored).as_deref(), Some("b"));
    assert!(a.fence.check().is_err());
    // A's campaign says so on its next try (its fence closed before B could lead, above).
    let noticed = Instant::now();
    while *a.state.borrow() != Leadership::Lost {
        assert!(
            noticed.elapsed() < Duration::from_secs(5),
            "A never noticed it lost the Lease"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    while !a.task.is_finished() {
        assert!(
            noticed.elapsed() < Duration::from_secs(5),
            "A's campaign goes on"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = b.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lease_is_taken_over_at_once() {
    let stored = Arc::new(Mutex::new(Stored::default()));
    let a = join(&stored, "a");
    let nobody = Fence::new(Arc::new(SystemTicker));
    until_exclusive("a to lead", &a.fence, &nobody, || {
        *a.state.borrow() == Leadership::Leading
    })
    .await;
    let b = join(&stored, "b");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = a.stop.send(true);
    a.task.await.expect("the campaign ends");
    assert!(
        a.fence.check().is_err(),
        "the fence closes before the release"
    );
    assert_eq!(holder(&stored), None, "released");
    let released = Instant::now();
    until_exclusive("b to lead", &a.fence, &b.fence, || {
        *b.state.borrow() == Leadership::Leading
    })
    .await;
    assert!(
        released.elapsed() < fast().lease_duration,
        "took {:?}",
        released.elapsed()
    );
    let _ = b.stop.send(true);
}
