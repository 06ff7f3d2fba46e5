//! The HTTP endpoints: `/healthz` (the process is alive: no step has been stuck for
//! [`STEP_STALL`]), `/readyz` (the cluster caches are synced and following their watches, the
//! cloud is set up and answering) and `/metrics` (Prometheus).
//!
//! They start before anything else so the kubelet's liveness probe passes while the caches fill;
//! readiness says what is still missing. A replica that loses its Lease does not need either:
//! it exits (see [`crate::leader`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use joiner_controller::{ControllerError, StepReport};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use joiner_telemetry::metrics::Metrics;

type Probe = Box<dyn Fn() -> bool + Send + Sync>;

/// What `/readyz` checks. Cheap to clone: clones share the state.
#[derive(Clone, Default)]
pub struct Health(Arc<HealthState>);

#[derive(Default)]
struct HealthState {
    store: OnceLock<Probe>,
    cloud: AtomicBool,
    /// When the step in progress began; `None` between steps (and while following).
    stepping_since: Mutex<Option<Instant>>,
    /// Steps in a row whose cloud calls failed (not throttling, not a refusal), with the last
    /// error.
    cloud_failures: Mutex<(u32, String)>,
    /// Why another controller keeps this one from acting, while it does.
    rival: Mutex<Option<String>>,
}

/// A step running this long is stuck (a call that never returns, a deadlock): `/healthz` fails,
/// so the kubelet restarts the process. The longest honest step (a plan over thousands of pods)
/// takes seconds.
pub const STEP_STALL: Duration = Duration::from_secs(10 * 60);

/// Steps in a row whose cloud calls fail before `/readyz` says the cloud is unreachable (about
/// ten seconds at one step a second): one failure is routine, a run of them is an outage.
pub const CLOUD_FAILURES_BEFORE_NOT_READY: u32 = 10;

impl Health {
    /// From now on, readiness asks `ready` whether the cluster caches are synced.
    pub fn set_store(&self, ready: impl Fn() -> bool + Send + Sync + 'static) {
        let _ = self.0.store.set(Box::new(ready));
    }

    /// The cloud provider is constructed.
    pub fn set_cloud_ready(&self) {
        self.0.cloud.store(true, Ordering::Release);
    }

    /// Another controller runs (`Some(why)`) or no longer does.
    pub fn set_rival(&self, why: Option<String>) {
        *lock(&self.0.rival) = why;
    }

    /// A step begins (called on the step's own thread).
    pub fn step_began(&self) {
        *lock(&self.0.stepping_since) = Some(Instant::now());
    }

    /// A step ended with `report`: it is not stuck, and its cloud errors count.
    pub fn step_ended(&self, report: &StepReport) {
        *lock(&self.0.stepping_since) = None;
        let failed = report.errors.iter().find(|e| {
            matches!(
                e,
                ControllerError::Cloud(joiner_controller::cloud::CloudError::Other(_))
            )
        });
        let mut f = lock(&self.0.cloud_failures);
        match failed {
            Some(e) => *f = (f.0.saturating_add(1), e.to_string()),
            None => *f = (0, String::new()),
        }
    }

    /// Ok when ready, else what is missing.
    pub fn readiness(&self) -> Result<(), String> {
        match self.0.store.get() {
            None => return Err("the cluster caches are starting".into()),
            Some(ready) if !ready() => {
                return Err("the cluster caches are not synced or a watch is failing".into());
            }
            Some(_) => {}
        }
        if !self.0.cloud.load(Ordering::Acquire) {
            return Err("the cloud provider is not set up yet".into());
        }
        if let Some(why) = lock(&self.0.rival).clone() {
            return Err(format!("{why}: Joiner does nothing until it stops"));
        }
        let (failures, last) = lock(&self.0.cloud_failures).clone();
        if failures >= CLOUD_FAILURES_BEFORE_NOT_READY {
            return Err(format!(
                "the cloud has failed {failures} steps in a row: {last}"
            ));
        }
        Ok(())
    }

    /// Ok while no step has been running for [`STEP_STALL`].
    pub fn liveness(&self) -> Result<(), String> {
        self.liveness_at(Instant::now())
    }

    fn liveness_at(&self, now: Instant) -> Result<(), String> {
        match *lock(&self.0.stepping_since) {
            Some(since) if now.saturating_duration_since(since) >= STEP_STALL => Err(format!(
                "a controller step has been running for {} s",
                now.saturating_duration_since(since).as_secs()
            )),
            _ => Ok(()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn healthz(State(health): State<Health>) -> (StatusCode, String) {
    match health.liveness() {
        Ok(()) => (StatusCode::OK, "ok\n".into()),
        Err(why) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{why}\n")),
    }
}

async fn readyz(State(health): State<Health>) -> (StatusCode, String) {
    match health.readiness() {
        Ok(()) => (StatusCode::OK, "ok\n".into()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

async fn metrics(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.render(),
    )
}

pub fn health_router(health: Health) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(health)
}

pub fn metrics_router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(self::metrics))
        .with_state(metrics)
}

/// Why an endpoint could not be served.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {source}")]
pub struct BindError {
    addr: SocketAddr,
    source: std::io::Error,
}

/// Listens on both addresses (once when they are the same; port 0 means a new port each) and
/// serves until `shutdown` turns true. Returns the bound addresses (the port chosen for `:0`) and the server tasks.
pub async fn serve(
    metrics_addr: SocketAddr,
    health_addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Health,
    shutdown: watch::Receiver<bool>,
) -> Result<Vec<(SocketAddr, JoinHandle<()>)>, BindError> {
    let routers = if metrics_addr == health_addr && metrics_addr.port() != 0 {
        vec![(
            metrics_addr,
            metrics_router(metrics).merge(health_router(health)),
        )]
    } else {
        vec![
            (metrics_addr, metrics_router(metrics)),
            (health_addr, health_router(health)),
        ]
    };
    let mut servers = Vec::new();
    for (addr, router) in routers {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| BindError { addr, source })?;
        let bound = listener
            .local_addr()
            .map_err(|source| BindError { addr, source })?;
        let mut stop = shutdown.clone();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    while !*stop.borrow_and_update() {
                        if stop.changed().await.is_err() {
                            break;
                        }
                    }
                })
                .await;
            if let Err(e) = served {
                tracing::error!(addr = %bound, error = %e, "HTTP server failed");
            }
        });
        servers.push((bound, task));
    }
    Ok(servers)
}

#[cfg(test)]
pub mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    /// GETs `path` from `addr` over plain HTTP/1.1 and returns the status code and body.
    pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        let status = response
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }

    fn local() -> SocketAddr {
        "127.0.0.1:0".parse().unwrap()
    }

    #[tokio::test]
    async fn endpoints_answer_and_readiness_follows_the_store_and_the_cloud() {
        let health = Health::default();
        let metrics = Arc::new(Metrics::new("simulated"));
        let (stop, shutdown) = watch::channel(false);
        let servers = serve(local(), local(), metrics.clone(), health.clone(), shutdown)
            .await
            .unwrap();
        let (metrics_addr, health_addr) = (servers[0].0, servers[1].0);

        assert_eq!(get(health_addr, "/healthz").await.0, 200);
        let (status, body) = get(health_addr, "/readyz").await;
        assert_eq!(
            (status, body.as_str()),
            (503, "the cluster caches are starting\n")
        );

        let synced = Arc::new(AtomicBool::new(false));
        let probe = synced.clone();
        health.set_store(move || probe.load(Ordering::Acquire));
        assert_eq!(get(health_addr, "/readyz").await.0, 503);
        synced.store(true, Ordering::Release);
        let (status, body) = get(health_addr, "/readyz").await;
        assert_eq!(
            (status, body.as_str()),
            (503, "the cloud provider is not set up yet\n")
        );
        health.set_cloud_ready();
        assert_eq!(get(health_addr, "/readyz").await.0, 200);
        // A cloud that fails step after step makes it unready; one good step ready again.
        let mut failing = StepReport::default();
        failing.error(
            joiner_controller::Reconciler::Launching,
            "launching",
            joiner_controller::cloud::CloudError::Other("connection refused".into()),
        );
        for _ in 0..CLOUD_FAILURES_BEFORE_NOT_READY {
            health.step_began();
            health.step_ended(&failing);
        }
        let (status, body) = get(health_addr, "/readyz").await;
        assert_eq!(status, 503);
        assert!(body.contains("connection refused"), "{body}");
        health.step_ended(&StepReport::default());
        assert_eq!(get(health_addr, "/readyz").await.0, 200);
        // A watch failing again makes the replica unready, not dead.
        synced.store(false, Ordering::Release);
        assert_eq!(get(health_addr, "/readyz").await.0, 503);
        assert_eq!(get(health_addr, "/healthz").await.0, 200);

        metrics.set_leader(true);
        let (status, body) = get(metrics_addr, "/metrics").await;
        assert_eq!(status, 200);
        assert!(body.lines().any(|l| l == "joiner_leader 1"), "{body}");
        assert!(
            body.contains("# TYPE karpenter_cluster_state_synced gauge"),
            "{body}"
        );
        // Each endpoint lives on its own address.
        assert_eq!(get(metrics_addr, "/healthz").await.0, 404);
        assert_eq!(get(health_addr, "/metrics").await.0, 404);

        stop.send(true).unwrap();
        for (_, task) in servers {
            task.await.unwrap();
        }
    }

    /// A step stuck past [`STEP_STALL`] fails liveness, so the kubelet restarts the process; a
    /// replica between steps, or following, is alive.
    #[test]
    fn a_stuck_step_fails_liveness() {
        let health = Health::default();
        let now = Instant::now();
        assert!(health.liveness_at(now).is_ok());
        health.step_began();
        assert!(health.liveness_at(Instant::now()).is_ok());
        let later = Instant::now() + STEP_STALL + Duration::from_secs(1);
        let e = health.liveness_at(later).expect_err("stuck");
        assert!(e.contains("running for"), "{e}");
        health.step_ended(&StepReport::default());
        assert!(health.liveness_at(later).is_ok());
    }

    #[tokio::test]
    async fn one_address_serves_everything_when_both_are_the_same() {
        let listener = std::net::TcpListener::bind(local()).unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let (_stop, shutdown) = watch::channel(false);
        let servers = serve(
            addr,
            addr,
            Arc::new(Metrics::new("aws")),
            Health::default(),
            shutdown,
        )
        .await
        .unwrap();
        assert_eq!(servers.len(), 1);
        assert_eq!(get(addr, "/healthz").await.0, 200);
        assert_eq!(get(addr, "/metrics").await.0, 200);
    }

    #[tokio::test]
    async fn a_taken_address_is_a_clear_error() {
        let taken = std::net::TcpListener::bind(local()).unwrap();
        let addr = taken.local_addr().unwrap();
        let (_stop, shutdown) = watch::channel(false);
        let e = serve(
            addr,
            local(),
            Arc::new(Metrics::new("aws")),
            Health::default(),
            shutdown,
        )
        .await
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("cannot listen on {addr}")),
            "{e}"
        );
    }
}
