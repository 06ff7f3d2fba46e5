//! The runtime of Joiner's live controller: the process `joiner controller` runs in a cluster.
//!
//! The decisions are the controller core's (`joiner-controller`), made over the cluster as the
//! kube-rs edge (`joiner-kube`) sees it and the cloud as the AWS edge (`joiner-aws`) drives it,
//! or the simulated cloud (`joiner-simulate`) on a kind or kwok cluster. This crate is the
//! process around them: logs, leader election, the step loop, Kubernetes Events for pods, the
//! health and metrics endpoints, and how it all ended as an exit status.
//!
//! It is a crate of its own, apart from the `joiner` binary's argument parsing (as linkerd2's
//! policy controller keeps its runtime apart from its main), because it carries the heavy
//! dependencies: kube-rs, the AWS SDK, an async runtime, HTTP and metrics. The binary depends on
//! it only with its `controller` feature, so a newcomer running `joiner plan` does not spend
//! minutes compiling them.

use std::net::SocketAddr;
use std::time::Duration;

mod error;
mod events;
mod http;
mod interruptions;
mod leader;
pub mod lease;
mod live;
pub mod rivals;
mod run_loop;
mod stepper;

pub use live::main;

/// How the controller process runs, as `joiner controller`'s flags say. The settings (Helm
/// values) are given to [`main`] separately.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where instances come from.
    pub cloud: CloudKind,
    /// With [`CloudKind::Simulated`]: annotate the fake Nodes `kwok.x-k8s.io/node: fake` so
    /// kwok marks them Ready and runs their pods.
    pub kwok: bool,
    /// Address of the Prometheus `/metrics` endpoint.
    pub metrics_addr: SocketAddr,
    /// Address of `/healthz` and `/readyz`.
    pub health_addr: SocketAddr,
    /// Elect a leader through a Lease so that of several replicas only one acts; `None` for a
    /// single replica that always leads.
    pub leader_election: Option<LeaderElection>,
    pub log_format: LogFormat,
    /// How long to wait for the cluster caches to fill at start-up before giving up.
    pub cache_sync_timeout: Duration,
    /// Leases (`namespace`, `name`) of other controllers acting on the same NodeClaims
    /// (Karpenter's): while one is held, Joiner does nothing ([`rivals`]).
    pub rival_leases: Vec<(String, String)>,
}

/// The `coordination.k8s.io/v1` Lease replicas elect their leader through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    /// Namespace of the Lease: when `None`, the `POD_NAMESPACE` environment variable, else the
    /// kubeconfig's namespace.
    pub namespace: Option<String>,
    pub name: String,
}

/// Where instances come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloudKind {
    /// EC2, through the AWS SDK.
    Aws,
    /// An in-process simulated cloud whose instances register as fake Nodes.
    Simulated,
}

/// How log lines are written on standard error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line, for log collectors.
    Json,
    /// Text, for a terminal.
    Text,
}
