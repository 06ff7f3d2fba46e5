//! Dynamic Resource Allocation for Joiner: the Kubernetes DRA CEL environment and a
//! structured allocator with kube-scheduler's semantics (Kubernetes 1.34–1.36,
//! `resource.k8s.io/v1`).
//!
//! Joiner must never launch a node the scheduler then refuses, nor refuse one it would
//! accept, so this crate decides device allocations exactly as kube-scheduler's structured
//! allocator does. It is pure and synchronous: callers hand in objects and get decisions.
//!
//! - [`inventory`]: pools and devices from ResourceSlices (validity, completeness,
//!   visibility), with dense ids; the planner can add synthesized slices of nodes that do not
//!   exist yet.
//! - [`state`]: devices, capacity and counters already taken.
//! - [`allocator`]: prepare a pod's claims once, then allocate them on any node view;
//!   a [`Session`] answers many nodes in a row, `try_allocate` without building reasons.
//! - [`cel`]: the DRA CEL environment (device variable, `semver`, `quantity`, `cel.bind`,
//!   cost limit, compile cache).
//! - [`mod@bench`]: the allocation benchmark `joiner bench` runs.

pub mod allocator;
pub mod bench;
pub mod builders;
pub mod cel;
pub mod features;
mod hash;
pub mod inventory;
pub mod node;
pub mod state;
#[cfg(test)]
mod tests;

pub use allocator::{
    AllocationFailure, Allocator, ClaimAllocation, FailureReason, PreparedClaims, Session,
};
pub use features::{Features, KubeVersion};
pub use inventory::{DeviceId, Inventory, NodeView};
pub use node::NodeInfo;
pub use state::AllocationState;
