//! The HTTP endpoints: `/healthz` (the process is alive), `/readyz` (the cluster caches are
//! synced and the cloud is set up) and `/metrics` (Prometheus).
//!
//! They start before anything else so the kubelet's liveness probe passes while the caches fill;
//! readiness says what is still missing.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::metrics::Metrics;

type Probe = Box<dyn Fn() -> bool + Send + Sync>;

/// What `/readyz` checks. Cheap to clone: clones share the state.
#[derive(Clone, Default)]
pub struct Health(Arc<HealthState>);

#[derive(Default)]
struct HealthState {
    store: OnceLock<Probe>,
    cloud: AtomicBool,
}

impl Health {
    /// From now on, readiness asks `ready` whether the cluster caches are synced.
    pub fn set_store(&self, ready: impl Fn() -> bool + Send + Sync + 'static) {
        let _ = self.0.store.set(Box::new(ready));
    }

    /// The cloud provider is constructed.
    pub fn set_cloud_ready(&self) {
        self.0.cloud.store(true, Ordering::Release);
    }

    /// Ok when ready, else what is missing.
    pub fn readiness(&self) -> Result<(), &'static str> {
        match self.0.store.get() {
            None => return Err("the cluster caches are starting"),
            Some(ready) if !ready() => return Err("the cluster caches are not synced"),
            Some(_) => {}
        }
        if !self.0.cloud.load(Ordering::Acquire) {
            return Err("the cloud provider is not set up yet");
        }
        Ok(())
    }
}

async fn healthz() -> &'static str {
    "ok\n"
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
        // A watch failing again makes the replica unready, not dead.
        synced.store(false, Ordering::Release);
        assert_eq!(get(health_addr, "/readyz").await.0, 503);
        assert_eq!(get(health_addr, "/healthz").await.0, 200);

        metrics.set_leader(true);
        let (status, body) = get(metrics_addr, "/metrics").await;
        assert_eq!(status, 200);
        assert!(body.lines().any(|l| l == "joiner_leader 1"), "{body}");
        assert!(
            body.contains("# TYPE karpenter_scheduler_scheduling_duration_seconds histogram"),
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
