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
