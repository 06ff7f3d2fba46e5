//! The plan: what `joiner plan` prints and what the controller acts on.
//!
//! Field names are part of Joiner's interface (`-o json`, `-o yaml`); keys may be added, never
//! renamed.

use std::collections::BTreeMap;

use joiner_model::{Price, ResourceList};
use serde::Serialize;

use crate::catalog::PriceBasis;

/// A decision over one cluster snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub api_version: &'static str,
    pub kind: &'static str,
    /// New nodes to launch.
    pub node_claims: Vec<PlannedNodeClaim>,
    /// Every pending pod that was placed, on an existing node or a planned NodeClaim.
    pub bindings: Vec<Binding>,
    pub unschedulable: Vec<Unschedulable>,
    /// Device allocations of the pods' ResourceClaims (DRA), one per claim allocated.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<ClaimAllocation>,
    pub total_price_per_hour: Price,
    /// How each batch of new NodeClaims was packed: exactly, or greedily and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub packing: Vec<PackedBatch>,
    /// What each CapacityBuffer keeps (behind the `CapacityBuffer` gate). Its virtual pods are
    /// counted here, not in `bindings` or `unschedulable`; the NodeClaims that hold them list
    /// them among their `pods` (`capacity-buffer-<buffer>-<i>`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub capacity_buffers: Vec<PlannedBuffer>,
}

impl Plan {
    pub fn new() -> Plan {
        Plan {
            api_version: "joiner.dev/v1alpha1",
            kind: "Plan",
            node_claims: Vec::new(),
            bindings: Vec::new(),
            unschedulable: Vec::new(),
            claims: Vec::new(),
            total_price_per_hour: Price::ZERO,
            packing: Vec::new(),
            capacity_buffers: Vec::new(),
        }
    }
}

impl Default for Plan {
    fn default() -> Self {
        Plan::new()
    }
}

/// A node to launch.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedNodeClaim {
    /// `<nodepool>-<n>`, n counting from 0 per NodePool.
    pub name: String,
    pub node_pool: String,
    pub instance_type: String,
    /// `on-demand`, `spot` or `reserved`.
    pub capacity_type: String,
    pub zone: String,
    /// The capacity reservation it launches into, when its capacity type is `reserved` (also
    /// in its `karpenter.k8s.aws/capacity-reservation-id` label).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_id: Option<String>,
    pub price_per_hour: Price,
    /// What the price is when it is not a listed one (an estimate, a stand-in for a spot price
    /// not known offline, reserved capacity planned near zero); absent for a listed price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price_note: Option<String>,
    /// `<namespace>/<pod>` of every pending pod placed here.
    pub pods: Vec<String>,
    pub resources: ClaimResources,
    /// Labels the node will carry (NodePool template, instance type, zone, capacity type).
    pub labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Other instance types of equal fit, cheapest first, that a launch may fall back to.
    pub instance_type_options: Vec<String>,
    /// The chosen type's offerings this NodeClaim may use, cheapest first.
    pub offerings: Vec<PlannedOffering>,
    /// One of a static NodePool's replicas (`spec.replicas`): launched for the count, not for
    /// pods; `pods` are pending pods that will fit on it once it runs.
    #[serde(rename = "static", skip_serializing_if = "std::ops::Not::not")]
    pub is_static: bool,
}

/// A zone and capacity type an instance type can be launched in, at its hourly price.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedOffering {
    pub zone: String,
    pub capacity_type: String,
    /// For a `reserved` offering, the reservation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_id: Option<String>,
    pub price_per_hour: Price,
    /// How the price is known, when it is not listed (`spot-snapshot`, `other-region`,
    /// `on-demand-bound`).
    #[serde(skip_serializing_if = "PriceBasis::is_listed")]
    pub price_basis: PriceBasis,
}

/// What a planned node's pods (and DaemonSet pods) request against what it offers.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimResources {
    pub requested: ResourceList,
    pub allocatable: ResourceList,
}

/// Where a ResourceClaim's devices come from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimAllocation {
    /// `namespace/name`; claims made from a template are named `<pod>-<podClaimName>`.
    pub claim: String,
    /// The existing node or planned NodeClaim that holds the devices.
    pub node: String,
    /// Exactly a `resource.k8s.io/v1` AllocationResult.
    pub allocation: k8s_openapi::api::resource::v1::AllocationResult,
    /// For a claim kube-scheduler makes itself (for extended resources DRA serves, named
    /// `<pod>-extended-resources-*`): its spec as the node serves it, since no object holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<k8s_openapi::api::resource::v1::ResourceClaimSpec>,
}

/// A CapacityBuffer's chunks in the plan.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedBuffer {
    /// `namespace/name`.
    pub buffer: String,
    /// The chunks it keeps.
    pub replicas: u32,
    /// Chunks that fit the room existing nodes (and NodeClaims in flight) have left.
    pub on_existing_nodes: u32,
    /// Chunks on new NodeClaims, launched for the buffer.
    pub on_new_node_claims: u32,
    /// The new NodeClaims holding its chunks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub node_claims: Vec<String>,
    /// Chunks no node can hold, and why the first of them cannot be placed.
    pub unplaced: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unplaced_reason: Option<String>,
    /// Why the buffer keeps nothing (`PodTemplateNotFound: ...`), when it cannot be resolved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_ready: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Binding {
    pub pod: String,
    pub node: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Unschedulable {
    pub pod: String,
    pub reason: String,
}

/// The new NodeClaims of one NodePool whose pods share node requirements, and how they were
/// packed. Pods with topology spread, pod (anti-)affinity or DRA claims, and the NodeClaims
/// holding them, form a batch of their own that is always packed greedily.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PackedBatch {
    pub node_pool: String,
    pub pods: u32,
    /// The batch's NodeClaims in the plan, by name.
    pub node_claims: Vec<String>,
    pub solver: Solver,
    /// Why the batch was not solved exactly as a whole; absent when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<GreedyReason>,
    /// What the greedy packing of these pods costs.
    pub greedy_price_per_hour: Price,
    /// What the planned NodeClaims of the batch cost.
    pub price_per_hour: Price,
}

/// Which packing a batch got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Solver {
    /// The least total price there is for these pods on this NodePool's instance types (the
    /// greedy packing when that is already as cheap).
    Exact,
    /// The greedy packing with its dearest NodeClaims packed again exactly, some tens of pods
    /// at a time: for batches larger than the exact search takes at once.
    Improved,
    /// The planner's greedy packing.
    Greedy,
}

/// Why a batch was packed greedily.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GreedyReason {
    /// Its pods have topology spread, pod (anti-)affinity or DRA claims, or are selected by
    /// another pod's: where they go matters beyond their own node.
    PodConstraints,
    /// More pods than the exact search takes at once.
    TooManyPods,
    /// The exact search needed more work than one step allows.
    OverBudget,
    /// The NodePool asks for `minValues`.
    MinValues,
    /// The NodePool's offerings include capacity reservations, which are counted per node.
    CapacityReservations,
    /// The exact packing would take the NodePool past its limits.
    Limits,
}

impl GreedyReason {
    /// The words `joiner plan` prints.
    pub fn describe(self) -> &'static str {
        match self {
            GreedyReason::PodConstraints => {
                "pods with topology spread, pod affinity or DRA claims are placed one by one"
            }
            GreedyReason::TooManyPods => "more pods than the exact search takes at once",
            GreedyReason::OverBudget => "the exact search ran past its work budget",
            GreedyReason::MinValues => "the NodePool asks for minValues",
            GreedyReason::CapacityReservations => "the NodePool offers capacity reservations",
            GreedyReason::Limits => "the exact packing would pass the NodePool's limits",
        }
    }
}
