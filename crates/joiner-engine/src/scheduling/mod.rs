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

pub mod allowed;
pub mod extended;
mod packing;
pub mod planner;
pub mod pod;
mod resources;
pub mod taints;
mod topology;
pub mod zones;

use std::sync::Arc;

use joiner_model::{Price, ResourceList};
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};

use crate::catalog::PriceBasis;
use crate::catalog::devices::{DeviceTemplates, TemplateOptions};

use crate::requirements::{Labels, Requirements};
pub use planner::{
    Baseline, PodAccount, explain_pod, placements, schedule, schedule_greedy, static_claims,
};
pub use pod::PodInfo;
pub(crate) use pod::compile_term;

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
    /// What it costs per hour (its instance type, zone and capacity type in the catalog), if
    /// known: consolidation weighs it against replacements.
    pub price: Option<Price>,
    /// `karpenter.sh/do-not-disrupt: "true"` on the node.
    pub do_not_disrupt: bool,
    /// Whether consolidation may consider it: not do-not-disrupt, and among the candidates the
    /// controller chose (nodes whose pods have settled for `consolidateAfter`).
    pub consolidation_candidate: bool,
    /// The NodeClaim this machine was launched for, when one is known.
    pub node_claim: Option<String>,
    /// Still launching: a NodeClaim not yet initialized with its Node. Its resources are what
    /// its instance type will offer; pods planned here wait for it.
    pub in_flight: bool,
}

/// When a NodePool lets Joiner remove or replace its nodes to save money.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Consolidation {
    /// Only nodes with no pods (besides DaemonSet pods).
    WhenEmpty,
    /// Also nodes whose pods fit elsewhere, or on cheaper nodes.
    #[default]
    WhenEmptyOrUnderutilized,
    /// As `WhenEmptyOrUnderutilized`, for moves whose saving is worth their disruption
    /// (`crate::disruption::balanced`).
    Balanced,
}

impl Consolidation {
    /// The policy as a NodePool's `consolidationPolicy` names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Consolidation::WhenEmpty => "WhenEmpty",
            Consolidation::WhenEmptyOrUnderutilized => "WhenEmptyOrUnderutilized",
            Consolidation::Balanced => "Balanced",
        }
    }
}

/// One priced way to launch an instance type: a zone and a capacity type.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchOffering {
    pub zone: String,
    /// The zone's ID (`use1-az1`, the `topology.k8s.aws/zone-id` label), when the NodePool's
    /// EC2NodeClass status names a subnet in the zone.
    pub zone_id: Option<String>,
    pub capacity_type: String,
    pub price: Price,
    /// How the price is known; a stand-in price orders offerings all the same, and the plan
    /// says it is one.
    pub price_basis: PriceBasis,
    /// The capacity reservation behind a `reserved` offering; `None` for every other.
    pub reservation: Option<OfferedReservation>,
    /// The partition (`1` to `7`, as the `karpenter.k8s.aws/placement-group-partition` label
    /// writes it) of an offering of a partition placement group; `None` for every other.
    pub partition: Option<String>,
}

impl LaunchOffering {
    /// The value the offering gives a label that belongs to offerings
    /// ([`joiner_model::wellknown::labels::OFFERING_DEFINED`]); `None` when it does not carry
    /// the label (the reservation labels of an offering that is not reserved).
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels().get(key)
    }
}

/// A capacity reservation (an on-demand capacity reservation or a Capacity Block for ML) as one
/// instance type's offering in its zone. Reserved capacity is paid for whether used or not, so
/// it is priced near zero ([`reserved_price`]) and fills first; it holds only `free` more
/// instances, which the planner shares out across every NodeClaim it plans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferedReservation {
    /// The reservation's ID: the `karpenter.k8s.aws/capacity-reservation-id` label.
    pub id: String,
    /// A Capacity Block for ML (`capacity-reservation-type: capacity-block`), launched with the
    /// `capacity-block` market type; else an on-demand capacity reservation (`default`).
    pub capacity_block: bool,
    pub interruptible: bool,
    /// Instances it can still take, less the NodeClaims already bound for it.
    pub free: u32,
}

impl OfferedReservation {
    /// The `karpenter.k8s.aws/capacity-reservation-type` value.
    pub fn reservation_type(&self) -> &'static str {
        if self.capacity_block {
            "capacity-block"
        } else {
            "default"
        }
    }
}

/// What a reserved offering is planned at: the type's on-demand price divided by ten million,
/// as Karpenter prices reservations "near zero". Not zero, so that a smaller reserved type
/// still costs less than a larger one and consolidation can move pods off a big reservation.
pub fn reserved_price(on_demand: Price) -> Price {
    Price::from_nano_usd(on_demand.nano_usd() / 10_000_000)
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
    /// The DRA devices a node of this type will publish once it runs, when DRA is modelled.
    pub devices: Option<DeviceSource>,
}

/// The DRA device templates of an instance type and how a NodePool's nodes publish them.
#[derive(Debug, Clone)]
pub struct DeviceSource {
    pub templates: Arc<DeviceTemplates>,
    pub options: TemplateOptions,
}

/// Dynamic Resource Allocation inputs, present when DRA is on.
#[derive(Debug, Clone, Default)]
pub struct DraInput {
    pub features: joiner_dra::Features,
    pub classes: Vec<DeviceClass>,
    /// Published slices (and the templates of nodes not yet initialized).
    pub slices: Vec<ResourceSlice>,
    /// Every claim pods use, by `namespace/name`: existing objects and claims generated from
    /// templates (`<pod>-<podClaimName>`). Allocated claims hold devices.
    pub claims: std::collections::BTreeMap<String, ResourceClaim>,
    /// Claims allocated in the cluster that no input pod uses: devices in use.
    pub in_use: Vec<ResourceClaim>,
    /// Per pod (same index as `SchedulingInput::pods`): the keys of its claims.
    pub pod_claims: Vec<Vec<String>>,
    /// The claims that serve pods' extended resources (`DRAExtendedResource`), by key: what
    /// each request serves. A node whose device plugin serves a resource (allocatable above
    /// zero) serves those requests itself, so the claim is allocated there without them.
    pub extended: std::collections::BTreeMap<String, Vec<extended::ExtendedRequest>>,
    /// The DeviceTaintRules in force (`DRADeviceTaints` on): every device they select, on
    /// existing and new nodes alike, carries their taint.
    pub taint_rules: Vec<k8s_openapi::api::resource::v1::DeviceTaintRuleSpec>,
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
    pub consolidation: Consolidation,
    /// Whether a NodeClaim may launch with fewer values of a key than the requirement's
    /// `minValues` when no set of types offers them (`settings.minValuesPolicy`).
    pub min_values_policy: joiner_model::settings::MinValuesPolicy,
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
    /// `None` when DRA is off: pods with claims are decided before scheduling.
    pub dra: Option<DraInput>,
}
