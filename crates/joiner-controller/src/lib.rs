//! Joiner's live controller, without the network.
//!
//! The pure core of the controller: the reconcilers that turn pending pods into NodeClaims and
//! instances and see each through Launched, Registered and Initialized, over three seams that the
//! edges implement:
//!
//! - [`store::ClusterStore`]: the Kubernetes objects (kube-rs later; [`store::InMemoryCluster`]
//!   now);
//! - [`cloud::CloudProvider`]: instances (the AWS SDK in `joiner-aws`; `joiner-simulate`'s
//!   `SimulatedCloud` in tests and simulations);
//! - [`clock::Clock`]: time ([`clock::ManualClock`] lets tests and `joiner simulate` run faster
//!   than real time).
//!
//! The core is synchronous: [`Controller::step`] runs every reconciler once at the clock's now.
//! All durable state is in the store and the cloud, so dropping a controller anywhere and
//! building a new one is a restart, and the reconcilers are written so that a restart never
//! duplicates a NodeClaim or an instance and never leaks one past garbage collection.

pub mod batcher;
pub mod buffer_status;
pub mod clock;
pub mod cloud;
pub mod config;
pub mod consistency;
mod context;
mod controller;
pub mod deadline;
pub mod disruption;
mod error;
pub mod gc;
pub mod instance_listing;
pub mod interruption;
pub mod lifecycle;
pub mod nodeclaim;
pub mod nodeclass;
pub mod nodeoverlay_status;
pub mod nodepool_status;
pub mod placement;
pub mod pods;
pub mod provisioning;
pub mod repair;
mod report;
pub mod scale_targets;
pub mod statics;
pub mod store;
pub mod termination;
pub mod throttle;
pub mod unavailable;

pub use config::Config;
pub use context::Ctx;
pub use controller::Controller;
pub use error::ControllerError;
/// A consolidation move's verdict, as the step report carries it.
pub use joiner_engine::disruption::MoveVerdict;
pub use report::{
    CloudCall, DisruptionBlock, DisruptionCause, DisruptionEvent, DoNotDisruptNote, NodeClaimEvent,
    NotDrained, OfferedAt, OfferedType, PoolBudget, RebootFailure, RebootPhase, RebootStep,
    Reconciler, Repaired, StepReport, Unconsolidatable,
};
