//! A fake API server behind `kube::Client`, for the store's tests.
//!
//! It answers LISTs from per-path lists (empty by default), keeps WATCHes open so a test can push
//! events into them, and answers every other request (and a GET the test scripted) from replies
//! the test scripts by method and path. Every request is recorded (method, path, query, JSON body) for assertions.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::channel::mpsc;
use futures::stream::{self, BoxStream, StreamExt};
use http::{Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use serde_json::{Value, json};

pub(crate) type MockBody = StreamBody<BoxStream<'static, Result<Frame<Bytes>, Infallible>>>;

/// One request the fake server received.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: Option<Value>,
}

impl Recorded {
    pub(crate) fn param(&self, name: &str) -> Option<String> {
        self.query.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k == name).then(|| v.replace("%3D", "=").replace("%2F", "/"))
        })
    }
    fn is_watch(&self) -> bool {
        self.param("watch").is_some_and(|v| v == "true" || v == "1")
    }
}

type WatchSender = mpsc::UnboundedSender<Result<Frame<Bytes>, Infallible>>;

type Responder = Box<dyn FnOnce(&Recorded) -> (u16, Value) + Send>;

/// What the server does with a scripted request.
enum Scripted {
    Reply(Responder),
    /// The connection fails (a transport error).
    Fail,
    /// No answer, ever.
    Hang,
}

enum Outcome {
    Respond(Response<MockBody>),
    Fail,
    Hang,
}

#[derive(Default)]
struct State {
    requests: Vec<Recorded>,
    /// LIST answers by path: a status code and a body.
    lists: HashMap<String, (u16, Value)>,
    /// Answers to WATCH requests by path, one each, before watches are held open.
    watch_refusals: HashMap<String, VecDeque<(u16, Value)>>,
    watches: HashMap<String, Vec<WatchSender>>,
    replies: Vec<(String, String, Scripted)>,
    /// When set, writes without a scripted reply are stored as an API server would (a new
    /// `resourceVersion`, a `uid`, `creationTimestamp` from this clock) and echoed back.
    accept_writes: Option<Box<dyn Fn() -> String + Send>>,
    revision: u64,
    /// Requests left unanswered on purpose.
    hung: Vec<tower_test::mock::SendResponse<Response<MockBody>>>,
}

/// The test's side of the fake API server.
#[derive(Clone)]
pub(crate) struct FakeApi {
    state: Arc<Mutex<State>>,
}

fn body_of(value: &Value) -> MockBody {
    let bytes = Bytes::from(value.to_string());
    StreamBody::new(stream::once(async move { Ok(Frame::data(bytes)) }).boxed())
}

fn response(code: u16, value: &Value) -> Response<MockBody> {
    let mut r = Response::new(body_of(value));
    *r.status_mut() =
        http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    r
}

/// A `Status` body as the API server sends with errors.
pub(crate) fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": if code < 300 { "Success" } else { "Failure" },
           "code": code, "reason": reason, "message": message})
}

pub(crate) fn list_of(items: Vec<Value>, resource_version: &str) -> Value {
    json!({"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": resource_version}, "items": items})
}

impl FakeApi {
    /// A fake server and a client talking to it. The server runs on the current runtime.
    pub(crate) fn start() -> (FakeApi, kube::Client) {
        let (service, mut handle) =
            tower_test::mock::pair::<Request<kube::client::Body>, Response<MockBody>>();
        let fake = FakeApi {
            state: Arc::new(Mutex::new(State::default())),
        };
        let server = fake.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let server = server.clone();
                tokio::spawn(async move {
                    let (parts, body) = request.into_parts();
                    let bytes = body
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    let recorded = Recorded {
                        method: parts.method.to_string(),
                        path: parts.uri.path().to_string(),
                        query: parts.uri.query().unwrap_or_default().to_string(),
                        body: serde_json::from_slice(&bytes).ok(),
                    };
                    match server.answer(recorded) {
                        Outcome::Respond(r) => send.send_response(r),
                        Outcome::Fail => send.send_error(std::io::Error::other("connection reset")),
                        Outcome::Hang => server.lock().hung.push(send),
                    }
                });
            }
        });
        (fake, kube::Client::new(service, "default"))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn answer(&self, r: Recorded) -> Outcome {
        let mut s = self.lock();
        s.requests.push(r.clone());
        if r.method == "GET" && r.is_watch() {
            if let Some(queue) = s.watch_refusals.get_mut(&r.path)
                && let Some((code, body)) = queue.pop_front()
            {
                return Outcome::Respond(response(code, &body));
            }
            let (tx, rx) = mpsc::unbounded();
            s.watches.entry(r.path.clone()).or_default().push(tx);
            return Outcome::Respond(Response::new(StreamBody::new(rx.boxed())));
        }
        let scripted = s
            .replies
            .iter()
            .any(|(m, p, _)| *m == r.method && *p == r.path);
        if r.method == "GET" && !scripted {
            let (code, mut body) = s
                .lists
                .get(&r.path)
                .cloned()
                .unwrap_or_else(|| (200, list_of(Vec::new(), "1")));
            // The API server applies a field selector on the name; so does the double.
            if let (Some(name), Some(items)) = (
                r.param("fieldSelector")
                    .and_then(|f| f.strip_prefix("metadata.name=").map(str::to_string)),
                body.get_mut("items").and_then(Value::as_array_mut),
            ) {
                items.retain(|o| o["metadata"]["name"] == name.as_str());
            }
            return Outcome::Respond(response(code, &body));
        }
        match s
            .replies
            .iter()
            .position(|(m, p, _)| *m == r.method && *p == r.path)
        {
            Some(i) => {
                let (_, _, scripted) = s.replies.remove(i);
                match scripted {
                    Scripted::Reply(reply) => {
                        let (code, body) = reply(&r);
                        Outcome::Respond(response(code, &body))
                    }
                    Scripted::Fail => Outcome::Fail,
                    Scripted::Hang => Outcome::Hang,
                }
            }
            None if s.accept_writes.is_some() => Outcome::Respond(s.store(&r)),
            None => Outcome::Respond(response(
                500,
                &status(
                    500,
                    "InternalError",
                    &format!("no reply scripted for {} {}", r.method, r.path),
                ),
            )),
        }
    }

    /// Accepts every write without a scripted reply, timestamped by `now` (RFC 3339).
    pub(crate) fn accept_writes(&self, now: impl Fn() -> String + Send + 'static) {
        self.lock().accept_writes = Some(Box::new(now));
    }

    /// What a LIST of `path` answers.
    pub(crate) fn set_list(&self, path: &str, code: u16, body: Value) {
        self.lock().lists.insert(path.to_string(), (code, body));
    }

    /// Refuses the next WATCHes of `path` with these answers, one each.
    pub(crate) fn refuse_watches(&self, path: &str, answers: Vec<(u16, Value)>) {
        self.lock()
            .watch_refusals
            .insert(path.to_string(), answers.into());
    }

    /// Answers the next `method path` with `reply(request)`.
    pub(crate) fn reply(
        &self,
        method: &str,
        path: &str,
        reply: impl FnOnce(&Recorded) -> (u16, Value) + Send + 'static,
    ) {
        self.lock()
            .replies
            .push((method.into(), path.into(), Scripted::Reply(Box::new(reply))));
    }

    /// Fails the connection of the next `method path`.
    pub(crate) fn fail(&self, method: &str, path: &str) {
        self.lock()
            .replies
            .push((method.into(), path.into(), Scripted::Fail));
    }

    /// Never answers the next `method path`.
    pub(crate) fn hang(&self, method: &str, path: &str) {
        self.lock()
            .replies
            .push((method.into(), path.into(), Scripted::Hang));
    }

    /// Sends a watch event (`ADDED`, `MODIFIED`, `DELETED`, `ERROR`) to every open watch of
    /// `path`. Returns how many watches got it.
    pub(crate) fn push(&self, path: &str, kind: &str, object: Value) -> usize {
        let line = format!("{}\n", json!({"type": kind, "object": object}));
        let mut s = self.lock();
        let watches = s.watches.entry(path.to_string()).or_default();
        watches.retain(|tx| {
            tx.unbounded_send(Ok(Frame::data(Bytes::from(line.clone()))))
                .is_ok()
        });
        watches.len()
    }

    /// Ends every open watch of `path`, as an API server does when its watch timeout passes:
    /// the client watches again from the last version it saw.
    pub(crate) fn end_watches(&self, path: &str) {
        self.lock().watches.remove(path);
    }

    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.lock().requests.clone()
    }

    /// Requests of `method` to exactly `path`, watches excluded.
    pub(crate) fn calls(&self, method: &str, path: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && r.path == path && !r.is_watch())
            .collect()
    }

    /// Waits until `path` has an open watch, so pushed events reach the cache.
    pub(crate) async fn watching(&self, path: &str) {
        eventually(&format!("a watch of {path}"), || {
            self.lock()
                .watches
                .get(path)
                .is_some_and(|w| w.iter().any(|tx| !tx.is_closed()))
        })
        .await;
    }
}

impl State {
    fn store(&mut self, r: &Recorded) -> Response<MockBody> {
        if r.method == "DELETE" || r.path.ends_with("/eviction") {
            return response(200, &status(200, "", ""));
        }
        self.revision += 1;
        let mut body = r.body.clone().unwrap_or(Value::Null);
        body["metadata"]["resourceVersion"] = self.revision.to_string().into();
        if r.method == "POST" {
            body["metadata"]["uid"] = format!("uid-{}", self.revision).into();
            if let Some(now) = &self.accept_writes {
                body["metadata"]["creationTimestamp"] = now().into();
            }
        }
        response(if r.method == "POST" { 201 } else { 200 }, &body)
    }
}

/// Waits up to 15 seconds for `condition`, failing the test with `what` otherwise.
pub(crate) async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs a synchronous store call on a blocking thread, as the controller must.
pub(crate) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(t) => t,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Object JSON as the API server stores it.
pub(crate) fn object(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    rv: &str,
) -> Value {
    let mut metadata = json!({"name": name, "resourceVersion": rv, "uid": format!("uid-{name}")});
    if let Some(ns) = namespace {
        metadata["namespace"] = ns.into();
    }
    json!({"apiVersion": api_version, "kind": kind, "metadata": metadata})
}

pub(crate) fn pod(namespace: &str, name: &str, rv: &str) -> Value {
    let mut p = object("v1", "Pod", Some(namespace), name, rv);
    p["spec"] = json!({"containers": [{"name": "main", "image": "busybox"}], "nodeName": "node-1"});
    p
}

pub(crate) fn node_claim(name: &str, rv: &str) -> Value {
    let mut c = object("karpenter.sh/v1", "NodeClaim", None, name, rv);
    c["spec"] = json!({"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}});
    c
}

pub(crate) fn node_pool(name: &str, rv: &str) -> Value {
    let mut p = object("karpenter.sh/v1", "NodePool", None, name, rv);
    p["spec"] = json!({"template": {"spec": {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "requirements": []}}});
    p
}
