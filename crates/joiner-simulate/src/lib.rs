//! Joiner's simulated world, and `joiner simulate` as a library.
//!
//! The controller core (`joiner-controller`) decides over three seams: a cluster store, a cloud
//! and a clock. This crate is everything around it that a real cluster would be, in process and
//! deterministic, so the controller can be run, tested and fuzzed faster than real time:
//!
//! - [`cloud::SimulatedCloud`]: a cloud selling the engine's catalog, with injectable faults
//!   (no capacity, launch errors, throttling, late or missing registration, spot reclaims);
//! - [`kubelet::SimulatedKubelet`]: what an instance does on its own after launch (registers a
//!   Node, publishes device plugin resources and DRA ResourceSlices, drops startup taints);
//! - [`interruption_queue::SimulatedInterruptionQueue`]: the interruption queue the cloud warns on;
//! - [`scheduler`]: kube-scheduler and the pod garbage collector, as far as the controller
//!   needs them;
//! - [`volumes::SimulatedAttacher`]: persistent volumes attached to the nodes of the pods that
//!   use them, detaching a while after the last one stops;
//! - [`scenario`], [`run`], [`report`] and [`command`]: `joiner simulate` itself, a scenario
//!   file's timed steps over that world, with its timeline, summary and HTML report.
//!
//! It lives apart from the controller core so the core carries no test doubles, and apart from
//! the `joiner` binary so the fuzz harness, the live controller's `--cloud simulated` and the
//! tests of other crates use the very code `joiner simulate` runs.

pub mod bench;
pub mod claims;
pub mod cloud;
pub mod command;
mod error;
mod gpus;
pub mod interruption_queue;
pub mod kubelet;
pub mod network;
pub mod placement;
mod progress;
pub mod report;
mod reservations;
pub mod run;
pub mod scenario;
pub mod scheduler;
pub mod takeover;
pub mod telemetry;
pub mod volumes;

pub use cloud::{Registration, SimulatedCloud};
pub use command::Request;
pub use error::Error;
pub use interruption_queue::SimulatedInterruptionQueue;
pub use kubelet::SimulatedKubelet;
pub use network::{SimulatedNetwork, SimulatedSecurityGroup, SimulatedSubnet};
pub use run::{Outcome, Sample, Summary, TypeUsage, clock_text, simulate, simulate_observed};
pub use scheduler::{collect_orphans, schedule_pending};
pub use volumes::SimulatedAttacher;
