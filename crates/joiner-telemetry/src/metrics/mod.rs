//! The Prometheus metrics of the controller, under Karpenter's names, types and labels where
//! Joiner has the same meaning, so its dashboards and alerts keep working.
//!
//! Counters come from each step's report ([`record`]); gauges from the cluster as it stands
//! after the step ([`Metrics::set_state`], see [`state`]). Which of Karpenter's metrics Joiner
//! serves, and why each other one does not apply, is kept in `data/karpenter-metrics.json`
//! beside this crate, checked by the tests against what [`Metrics::render`] serves.
//!
//! Labels are bounded: reasons, kinds and reconcilers are closed enums, and the object names
//! Karpenter puts in labels (`nodepool`, `node_name`, a pod's `name`) are those of objects that
//! exist: a gauge's series go with their object, and counters are labelled by NodePool, never
//! by NodeClaim, pod or instance.

mod catalog;
mod cloud;
pub mod conditions;
mod consolidation;
mod gauges;
mod interruption;
pub mod lifetimes;
mod objects;
mod provisioning;
mod record;
pub mod state;
pub mod termination;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use joiner_model::api::NodeClaim;
use joiner_model::wellknown::labels as node_labels;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use self::gauges::StateGauges;
use self::state::ClusterState;

pub use self::record::{record, record_outcomes};

use self::state::Labels;

/// Label pairs as a family's key.
fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, (*v).to_string())).collect()
}
type Counters = Family<Labels, Counter>;
type Gauges = Family<Labels, Gauge<f64, AtomicU64>>;
/// Histograms of a family whose buckets are chosen when it is registered.
type Histograms = Family<Labels, Histogram, conditions::Buckets>;

/// What the counters need to know of a NodeClaim a step touched: the labels Karpenter gives
/// its NodeClaim and Node counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimLabels {
    pub nodepool: String,
    pub capacity_type: String,
    pub zone: String,
    /// Whether it had a Node (so its deletion also ends a node).
    pub registered: bool,
}

impl ClaimLabels {
    pub fn of(claim: &NodeClaim) -> ClaimLabels {
        let label = |k| claim.label(k).unwrap_or_default().to_string();
        ClaimLabels {
            nodepool: label(node_labels::NODEPOOL),
            capacity_type: label(node_labels::CAPACITY_TYPE),
            zone: label(node_labels::ZONE),
            registered: claim.status.node_name.is_some(),
        }
    }
}

/// The labels of every NodeClaim a step may name, by name: read before and after the step so
/// that those it deleted are known too.
pub type Claims = BTreeMap<String, ClaimLabels>;

/// The labels of these NodeClaims.
pub fn claims_of(claims: &[NodeClaim]) -> Claims {
    claims
        .iter()
        .map(|c| (c.name().to_string(), ClaimLabels::of(c)))
        .collect()
}

/// Every metric the controller exports, and the registry that renders them.
pub struct Metrics {
    registry: Registry,
    /// `aws` or `simulated`: the `provider` label of cloud errors.
    provider: &'static str,
    nodeclaims_created: Counters,
    nodeclaims_terminated: Counters,
    nodeclaims_disrupted: Counters,
    nodeclaims_unhealthy_disrupted: Counters,
    nodes_reboots: Counters,
    nodes_created: Counters,
    nodes_terminated: Counters,
    nodes_drained: Counters,
    disruption_decisions: Counters,
    disruption_decisions_by_pool: Counters,
    failed_validations: Counters,
    pods_drained: Counters,
    eviction_requests: Counters,
    interruption_messages: Counters,
    scheduling_duration: Family<Labels, Histogram>,
    unschedulable_pods: Family<Labels, Gauge>,
    termination_failures: Counters,
    nodeclaims_launched: Counters,
    nodeclaims_registered: Counters,
    nodeclaims_initialized: Counters,
    instances_terminated: Counter,
    pods_nominated: Counter,
    step_duration: Histogram,
    errors: Counters,
    leader: Gauge,
    offerings_unavailable: Counters,
    mispredicted: Counters,
    eligible: Family<Labels, Gauge>,
    allowed: Family<Labels, Gauge>,
    consuming: Family<Labels, Gauge>,
    state: StateGauges,
    conditions: conditions::ConditionMetrics,
    lifetimes: lifetimes::Lifetimes,
    termination: termination::TerminationMetrics,
    catalog: catalog::CatalogGauges,
    interruption: interruption::InterruptionMetrics,
    provisioning: provisioning::ProvisioningMetrics,
    cloud: cloud::CloudMetrics,
    consolidation: consolidation::ConsolidationMetrics,
}

/// Buckets from 5 ms to about 80 s: a step or a plan of a few pods takes milliseconds, a
/// plan of tens of thousands of pods seconds.
fn duration_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

impl Metrics {
    pub fn new(provider: &'static str) -> Metrics {
        let mut registry = Registry::default();
        let mut counters = |name: &str, help: &str| {
            let family = Counters::default();
            // prometheus-client appends `_total` to counters.
            registry.register(name, help, family.clone());
            family
        };
        let nodeclaims_created = counters(
            "karpenter_nodeclaims_created",
            "NodeClaims created, by reason (provisioned, or the disruption reason of a replacement), NodePool and whether minValues were relaxed",
        );
        let nodeclaims_terminated = counters(
            "karpenter_nodeclaims_terminated",
            "NodeClaims deleted, by NodePool, capacity type and zone",
        );
        let nodeclaims_disrupted = counters(
            "karpenter_nodeclaims_disrupted",
            "NodeClaims chosen for disruption, by reason, NodePool and capacity type",
        );
        let nodeclaims_unhealthy_disrupted = counters(
            "karpenter_nodeclaims_unhealthy_disrupted",
            "NodeClaims node repair replaced, by the node condition that broke them, NodePool, capacity type and image",
        );
        let nodes_reboots = counters(
            "karpenter_nodes_reboots",
            "Reboots node repair made (rebootForRepair), by how they ended: succeeded, provider_error, recovery_timeout or invalid_request",
        );
        let nodes_created = counters(
            "karpenter_nodes_created",
            "Nodes registered for Joiner's NodeClaims, by NodePool and zone",
        );
        let nodes_terminated = counters(
            "karpenter_nodes_terminated",
            "Nodes of Joiner's NodeClaims deleted, by NodePool and zone",
        );
        let nodes_drained = counters(
            "karpenter_nodes_drained",
            "Nodes whose drain finished, by NodePool",
        );
        let disruption_decisions = counters(
            "karpenter_voluntary_disruption_decisions",
            "Disruption decisions, by decision (delete or replace), reason and consolidation type",
        );
        let disruption_decisions_by_pool = counters(
            "karpenter_voluntary_disruption_decisions_by_nodepool",
            "Disruption decisions, by NodePool, decision, reason and consolidation type",
        );
        let failed_validations = counters(
            "karpenter_voluntary_disruption_failed_validations",
            "Consolidations decided and dropped within their validation period, by consolidation type",
        );
        let pods_drained = counters(
            "karpenter_pods_drained",
            "Pods drained from terminating nodes, by the node's disruption reason (Forceful Termination when its deadline deleted them)",
        );
        let eviction_requests = counters(
            "karpenter_pods_eviction_requests",
            "Eviction requests, by response code (200, or 429 when a PodDisruptionBudget refused)",
        );
        let interruption_messages = counters(
            "karpenter_interruption_received_messages",
            "Interruption notices acted on, by message type",
        );
        let termination_failures = counters(
            "karpenter_cloudprovider_instance_termination_failures",
            "Instance terminations the cloud refused or failed, by zone (zone_id empty: Joiner's instances do not carry it)",
        );
        let nodeclaims_launched = counters(
            "joiner_nodeclaims_launched",
            "NodeClaims whose instance was launched (or adopted after a restart), by NodePool",
        );
        let nodeclaims_registered = counters(
            "joiner_nodeclaims_registered",
            "NodeClaims whose Node registered, by NodePool",
        );
        let nodeclaims_initialized = counters(
            "joiner_nodeclaims_initialized",
            "NodeClaims whose Node became initialized (ready, resources published), by NodePool",
        );
        let errors = counters(
            "joiner_controller_errors",
            "Failures the controller will retry, by reconciler",
        );
        let offerings_unavailable = counters(
            "joiner_offerings_unavailable",
            "Offerings marked unavailable after insufficient capacity, by instance type, zone and capacity type",
        );
        let mispredicted = counters(
            "joiner_nodeclaims_mispredicted",
            "NodeClaims whose Node offers less of a resource than the plan predicted, by instance type and resource; later plans use what was found",
        );
        let eligible = Family::<Labels, Gauge>::default();
        registry.register(
            "karpenter_voluntary_disruption_eligible_nodes",
            "Nodes each voluntary disruption could take now, by reason",
            eligible.clone(),
        );
        let allowed = Family::<Labels, Gauge>::default();
        registry.register(
            "karpenter_nodepools_allowed_disruptions",
            "Nodes the NodePool's budgets let each voluntary disruption take now, by NodePool and reason",
            allowed.clone(),
        );
        let consuming = Family::<Labels, Gauge>::default();
        registry.register(
            "karpenter_nodepools_nodes_consuming_budgets",
            "Nodes of the NodePool being disrupted, which count against its budgets, by NodePool and reason",
            consuming.clone(),
        );
        let scheduling_duration = Family::<Labels, Histogram>::new_with_constructor(
            duration_buckets as fn() -> Histogram,
        );
        registry.register(
            "karpenter_scheduler_scheduling_duration_seconds",
            "Time to plan the pending pods (snapshot and plan), in seconds",
            scheduling_duration.clone(),
        );
        let unschedulable_pods = Family::<Labels, Gauge>::default();
        registry.register(
            "karpenter_scheduler_unschedulable_pods_count",
            "Pods the last plan could not place",
            unschedulable_pods.clone(),
        );
        let instances_terminated = Counter::default();
        registry.register(
            "joiner_instances_terminated",
            "Cloud instances terminated (NodeClaim deletion or garbage collection)",
            instances_terminated.clone(),
        );
        let pods_nominated = Counter::default();
        registry.register(
            "joiner_pods_nominated",
            "Pods a plan put on a new or in-flight NodeClaim (counted once per step that did)",
            pods_nominated.clone(),
        );
        let step_duration = duration_buckets();
        registry.register(
            "joiner_controller_step_duration_seconds",
            "Time one controller step took (every reconciler once), in seconds",
            step_duration.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "joiner_leader",
            "1 while this replica holds the leader Lease (or runs without leader election), else 0",
            leader.clone(),
        );
        let state = StateGauges::register(&mut registry);
        let conditions = conditions::ConditionMetrics::register(&mut registry);
        let lifetimes = lifetimes::Lifetimes::register(&mut registry);
        let termination = termination::TerminationMetrics::register(&mut registry);
        let catalog = catalog::CatalogGauges::register(&mut registry);
        let interruption = interruption::InterruptionMetrics::register(&mut registry);
        let provisioning = provisioning::ProvisioningMetrics::register(&mut registry);
        let cloud = cloud::CloudMetrics::register(&mut registry);
        let consolidation = consolidation::ConsolidationMetrics::register(&mut registry);
        Metrics {
            registry,
            provider,
            nodeclaims_created,
            nodeclaims_terminated,
            nodeclaims_disrupted,
            nodeclaims_unhealthy_disrupted,
            nodes_reboots,
            nodes_created,
            nodes_terminated,
            nodes_drained,
            disruption_decisions,
            disruption_decisions_by_pool,
            failed_validations,
            pods_drained,
            eviction_requests,
            interruption_messages,
            scheduling_duration,
            unschedulable_pods,
            termination_failures,
            nodeclaims_launched,
            nodeclaims_registered,
            nodeclaims_initialized,
            instances_terminated,
            pods_nominated,
            step_duration,
            errors,
            leader,
            offerings_unavailable,
            mispredicted,
            eligible,
            allowed,
            consuming,
            state,
            conditions,
            lifetimes,
            termination,
            catalog,
            interruption,
            provisioning,
            cloud,
            consolidation,
        }
    }

    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Sets the state gauges to `state`, dropping the series of objects that are gone.
    pub fn set_state(&self, state: &ClusterState) {
        self.state.set(state);
        self.conditions.set(&state.conditions);
        self.lifetimes
            .set(&state.claims, &state.started, &state.pod_times, state.at);
        self.provisioning
            .set(&state.pod_times, &state.started, state.at);
        let present = |kind, name: &str| state.present.contains(&(kind, name.to_string()));
        // A gone class loses its user data series (Karpenter deletes it with the class); an
        // unsynced look proves nothing gone.
        if state.synced {
            self.cloud
                .keep_classes(|class| present(conditions::ConditionKind::EC2NodeClass, class));
        }
        self.termination.set(&state.terminating, &present, state.at);
        self.catalog.set_costs(
            state.pool_limits.keys().map(String::as_str),
            state.claims.values().filter_map(|c| {
                c.offering
                    .as_ref()
                    .map(|o| (c.nodepool.as_str(), o))
                    .filter(|(pool, _)| !pool.is_empty())
            }),
        );
    }

    /// The Prometheus text exposition (OpenMetrics) of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod kept;
#[cfg(test)]
mod state_tests;
#[cfg(test)]
mod tests;
