//! Joiner's decision engine.
//!
//! A pure, synchronous core: it takes one immutable [`snapshot::ClusterSnapshot`] of a cluster
//! (nodes, pods, NodePools, the instance catalog) and returns a [`plan::Plan`] value: which
//! NodeClaims to launch, where every pending pod goes, what it costs, and why anything cannot
//! fit. Reading files, talking to clusters and clouds, and printing all happen outside.
//!
//! - [`catalog`]: instance types, their offerings, prices, labels and allocatable resources.
//! - [`requirements`]: the node requirement algebra (In, NotIn, Exists, DoesNotExist, Gt, Lt).
//! - [`deviceplugin`]: the NVIDIA device plugin's time-slicing, so GPU replicas are counted
//!   before the node exists.
//! - [`scheduling`]: the scheduling simulation that places pods on existing, planned and new
//!   nodes.
//! - [`listing`]: what each NodePool may launch (`joiner catalog`).

pub mod bench;
pub mod catalog;
pub mod deviceplugin;
pub mod disruption;
pub mod listing;
pub mod migmanager;
pub mod plan;
pub mod requirements;
pub mod scheduling;
pub mod snapshot;
