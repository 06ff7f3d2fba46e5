//! The scheduling simulation: where every pending pod goes, and which new nodes it needs.
//!
//! The input is a [`SchedulingInput`]: existing nodes, bound and pending pods, DaemonSets, and
//! NodePools whose launchable instance types are already resolved to concrete label sets,
//! allocatable resources and priced offerings (the catalog, kubelet settings and device-plugin
//! sharing are applied before scheduling, so this module knows nothing of them).
//!
//! Pods go to existing nodes first, then to NodeClaims already planned in this run, then to new
//! NodeClaims; among planned and new ones the planner takes the placement that adds the least
//! to the total hourly price (see [`planner`]).

pub mod planner;
pub mod pod;
mod resources;
pub mod taints;
mod topology;

use joiner_model::{Price, ResourceList};
use k8s_openapi::api::core::v1::Taint;

use crate::requirements::{Labels, Requirements};
pub use planner::schedule;
pub use pod::PodInfo;

/// A node that exists already.
#[derive(Debug, Clone)]
pub struct ExistingNode {
    pub name: String,
    pub labels: Labels,
    pub taints: Vec<Taint>,
    pub allocatable: ResourceList,
    /// What counts against its NodePool's limits (the node's capacity).
    pub capacity: ResourceList,
    /// The NodePool that manages it (`karpenter.sh/nodepool` label), if any.
    pub node_pool: Option<String>,
}

/// One priced way to launch an instance type: a zone and a capacity type.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchOffering {
    pub zone: String,
    pub capacity_type: String,
    pub price: Price,
}

/// An instance type as a NodePool would launch it.
#[derive(Debug, Clone)]
pub struct LaunchOption {
    pub instance_type: String,
    /// Labels the node will have apart from zone, capacity type and NodePool template labels:
    /// the instance type's well-known labels and the labels GPU feature discovery will add.
    pub labels: Labels,
    /// What pods can use: capacity less kubelet overhead, with device-plugin sharing applied.
    pub allocatable: ResourceList,
    /// What counts against NodePool limits.
    pub capacity: ResourceList,
    /// Available offerings; unavailable ones are left out.
    pub offerings: Vec<LaunchOffering>,
    /// Extended resources of which a pod may request at most one (the NVIDIA device plugin's
    /// `failRequestsGreaterThanOne`).
    pub at_most_one_per_pod: Vec<String>,
}

/// A NodePool, with its instance types resolved.
#[derive(Debug, Clone)]
pub struct PoolInput {
    pub name: String,
    pub weight: i32,
    /// Template labels.
    pub labels: Labels,
    pub taints: Vec<Taint>,
    pub requirements: Requirements,
    /// Empty means unlimited.
    pub limits: ResourceList,
    pub options: Vec<LaunchOption>,
}

/// A DaemonSet: its pod lands on every node it matches and tolerates.
#[derive(Debug, Clone)]
pub struct DaemonInput {
    pub pod: PodInfo,
}

/// Everything the scheduler decides over.
#[derive(Debug, Clone, Default)]
pub struct SchedulingInput {
    pub nodes: Vec<ExistingNode>,
    /// Bound pods (with `node_name`) and pending pods.
    pub pods: Vec<PodInfo>,
    pub daemon_sets: Vec<DaemonInput>,
    pub pools: Vec<PoolInput>,
}
