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

pub mod conditions;
pub mod lifetimes;
pub mod state;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use joiner_controller::cloud::CloudError;
use joiner_controller::{ControllerError, StepReport};
use joiner_model::api::NodeClaim;
use joiner_model::wellknown::{
    DisruptionAction, DisruptionReason, InterruptionKind, labels as node_labels,
};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use self::state::{ClusterState, resource_type};

type Labels = Vec<(&'static str, String)>;
type Counters = Family<Labels, Counter>;
type Gauges = Family<Labels, Gauge<f64, AtomicU64>>;

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

/// The state gauges, set wholesale after each step.
struct StateGauges {
    nodes_allocatable: Gauges,
    nodes_pod_requests: Gauges,
    nodes_pod_limits: Gauges,
    nodes_daemon_requests: Gauges,
    nodes_daemon_limits: Gauges,
    nodes_overhead: Gauges,
    nodes_lifetime: Gauges,
    pools_usage: Gauges,
    pools_limit: Gauges,
    pods_state: Gauges,
    utilization: Gauges,
    node_count: Gauge,
    synced: Gauge,
    unsynced_time: Gauge<f64, AtomicU64>,
    /// Since when (epoch seconds) the view has been out of sync, while it is.
    unsynced_since: std::sync::Mutex<Option<f64>>,
}

/// Every metric the controller exports, and the registry that renders them.
pub struct Metrics {
    registry: Registry,
    /// `aws` or `simulated`: the `provider` label of cloud errors.
    provider: &'static str,
    nodeclaims_created: Counters,
    nodeclaims_terminated: Counters,
    nodeclaims_disrupted: Counters,
    nodes_created: Counters,
    nodes_terminated: Counters,
    disruption_decisions: Counters,
    disruption_decisions_by_pool: Counters,
    pods_drained: Counters,
    eviction_requests: Counters,
    interruption_messages: Counters,
    scheduling_duration: Family<Labels, Histogram>,
    unschedulable_pods: Family<Labels, Gauge>,
    cloudprovider_errors: Counters,
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
    state: StateGauges,
    conditions: conditions::ConditionMetrics,
    lifetimes: lifetimes::Lifetimes,
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
        let nodes_created = counters(
            "karpenter_nodes_created",
            "Nodes registered for Joiner's NodeClaims, by NodePool and zone",
        );
        let nodes_terminated = counters(
            "karpenter_nodes_terminated",
            "Nodes of Joiner's NodeClaims deleted, by NodePool and zone",
        );
        let disruption_decisions = counters(
            "karpenter_voluntary_disruption_decisions",
            "Disruption decisions, by decision (delete or replace), reason and consolidation type",
        );
        let disruption_decisions_by_pool = counters(
            "karpenter_voluntary_disruption_decisions_by_nodepool",
            "Disruption decisions, by NodePool, decision, reason and consolidation type",
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
        let cloudprovider_errors = counters(
            "karpenter_cloudprovider_errors",
            "Errors from the cloud provider, by controller (what the step was doing), provider and error",
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
        Metrics {
            registry,
            provider,
            nodeclaims_created,
            nodeclaims_terminated,
            nodeclaims_disrupted,
            nodes_created,
            nodes_terminated,
            disruption_decisions,
            disruption_decisions_by_pool,
            pods_drained,
            eviction_requests,
            interruption_messages,
            scheduling_duration,
            unschedulable_pods,
            cloudprovider_errors,
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
            state,
            conditions,
            lifetimes,
        }
    }

    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Sets the state gauges to `state`, dropping the series of objects that are gone.
    pub fn set_state(&self, state: &ClusterState) {
        self.state.set(state);
        self.conditions.set(&state.conditions);
        self.lifetimes.set(&state.claims, &state.started, state.at);
    }

    /// The Prometheus text exposition (OpenMetrics) of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

impl StateGauges {
    fn register(registry: &mut Registry) -> StateGauges {
        let mut gauges = |name: &str, help: &str| {
            let family = Gauges::default();
            registry.register(name, help, family.clone());
            family
        };
        let state = StateGauges {
            nodes_allocatable: gauges(
                "karpenter_nodes_allocatable",
                "Node allocatable, by node and resource type",
            ),
            nodes_pod_requests: gauges(
                "karpenter_nodes_total_pod_requests",
                "Requests of the node's pods other than DaemonSet pods, by node and resource type",
            ),
            nodes_pod_limits: gauges(
                "karpenter_nodes_total_pod_limits",
                "Limits of the node's pods other than DaemonSet pods, by node and resource type",
            ),
            nodes_daemon_requests: gauges(
                "karpenter_nodes_total_daemon_requests",
                "Requests of the node's DaemonSet pods, by node and resource type",
            ),
            nodes_daemon_limits: gauges(
                "karpenter_nodes_total_daemon_limits",
                "Limits of the node's DaemonSet pods, by node and resource type",
            ),
            nodes_overhead: gauges(
                "karpenter_nodes_system_overhead",
                "Node capacity less allocatable, by node and resource type",
            ),
            nodes_lifetime: gauges(
                "karpenter_nodes_current_lifetime_seconds",
                "Age of each node, in seconds",
            ),
            pools_usage: gauges(
                "karpenter_nodepools_usage",
                "Resources of the NodePool's nodes (its status.resources), by resource type",
            ),
            pools_limit: gauges(
                "karpenter_nodepools_limit",
                "The NodePool's limits, by resource type",
            ),
            pods_state: gauges(
                "karpenter_pods_state",
                "One series of value 1 per pod, saying where it runs and how it is doing",
            ),
            utilization: gauges(
                "karpenter_cluster_utilization_percent",
                "Pod requests on Joiner's nodes as a percentage of their allocatable, by resource type",
            ),
            node_count: Gauge::default(),
            synced: Gauge::default(),
            unsynced_time: Gauge::default(),
            unsynced_since: std::sync::Mutex::new(None),
        };
        registry.register(
            "karpenter_cluster_state_unsynced_time_seconds",
            "How long the controller's view of the cluster has been out of sync, in seconds (0 while in sync)",
            state.unsynced_time.clone(),
        );
        registry.register(
            "karpenter_cluster_state_node_count",
            "Nodes in the controller's view of the cluster",
            state.node_count.clone(),
        );
        registry.register(
            "karpenter_cluster_state_synced",
            "1 when every cache the controller reads is in sync with the API server, else 0",
            state.synced.clone(),
        );
        state
    }

    fn set(&self, state: &ClusterState) {
        let per_resource =
            |family: &Gauges, base: &Labels, list: &joiner_model::resources::ResourceList| {
                for (name, q) in list {
                    let mut l = base.clone();
                    l.push(("resource_type", resource_type(name)));
                    family.get_or_create(&l).set(q.nanos() as f64 / 1e9);
                }
            };
        for family in [
            &self.nodes_allocatable,
            &self.nodes_pod_requests,
            &self.nodes_pod_limits,
            &self.nodes_daemon_requests,
            &self.nodes_daemon_limits,
            &self.nodes_overhead,
            &self.nodes_lifetime,
            &self.pools_usage,
            &self.pools_limit,
            &self.pods_state,
            &self.utilization,
        ] {
            family.clear();
        }
        for n in &state.nodes {
            per_resource(&self.nodes_allocatable, &n.labels, &n.allocatable);
            per_resource(&self.nodes_pod_requests, &n.labels, &n.pod_requests);
            per_resource(&self.nodes_pod_limits, &n.labels, &n.pod_limits);
            per_resource(&self.nodes_daemon_requests, &n.labels, &n.daemon_requests);
            per_resource(&self.nodes_daemon_limits, &n.labels, &n.daemon_limits);
            per_resource(&self.nodes_overhead, &n.labels, &n.overhead);
            self.nodes_lifetime
                .get_or_create(&n.labels)
                .set(n.lifetime_seconds);
        }
        for (pool, usage) in &state.pool_usage {
            per_resource(&self.pools_usage, &vec![("nodepool", pool.clone())], usage);
        }
        for (pool, limits) in &state.pool_limits {
            per_resource(&self.pools_limit, &vec![("nodepool", pool.clone())], limits);
        }
        for pod in &state.pods {
            self.pods_state.get_or_create(pod).set(1.0);
        }
        for (name, percent) in state.utilization() {
            self.utilization
                .get_or_create(&vec![("resource_type", resource_type(&name))])
                .set(percent);
        }
        self.node_count
            .set(i64::try_from(state.nodes.len()).unwrap_or(i64::MAX));
        self.synced.set(i64::from(state.synced));
        let mut since = self
            .unsynced_since
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if state.synced {
            *since = None;
            self.unsynced_time.set(0.0);
        } else {
            let from = *since.get_or_insert(state.at);
            self.unsynced_time.set((state.at - from).max(0.0));
        }
    }
}

fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, (*v).to_string())).collect()
}

/// The labels of a NodeClaim, or `unknown` ones when it is gone from the cluster and was never
/// seen.
fn claim<'a>(claims: &'a Claims, name: &str) -> std::borrow::Cow<'a, ClaimLabels> {
    match claims.get(name) {
        Some(c) => std::borrow::Cow::Borrowed(c),
        None => std::borrow::Cow::Owned(ClaimLabels {
            nodepool: "unknown".into(),
            ..ClaimLabels::default()
        }),
    }
}

/// Karpenter's `reason` label values are lower case (`underutilized`, `empty`, `expired`).
fn reason_label(reason: &str) -> String {
    reason.to_ascii_lowercase()
}

/// Karpenter's `error` label: the cloud provider errors it has a type for, else empty.
fn cloud_error_label(e: &CloudError) -> &'static str {
    match e {
        CloudError::InsufficientCapacity(_) | CloudError::NoOfferings => {
            "InsufficientCapacityError"
        }
        CloudError::Throttled | CloudError::Rejected(_) | CloudError::Other(_) => "",
    }
}

/// The `message_type` of Karpenter's interruption counter for a notice.
fn message_type(kind: InterruptionKind) -> &'static str {
    match kind {
        InterruptionKind::SpotInterruption => "spot_interrupted",
        InterruptionKind::RebalanceRecommendation => "rebalance_recommendation",
        InterruptionKind::ScheduledChange => "scheduled_change",
        InterruptionKind::StateChange => "instance_stopped",
        InterruptionKind::CapacityReservationEnding => "capacity_reservation_interrupted",
    }
}

/// Counts what one step did. `claims` labels each NodeClaim the step touched; `took` is how
/// long the step ran.
pub fn record(report: &StepReport, claims: &Claims, took: Duration, metrics: &Metrics) {
    metrics.step_duration.observe(took.as_secs_f64());
    record_outcomes(report, claims, metrics);
}

/// Counts what a report says was done, whichever loop did it (a step, or a poll of the
/// interruption queue): NodeClaims created, launched, disrupted, errors by reconciler.
pub fn record_outcomes(report: &StepReport, claims: &Claims, metrics: &Metrics) {
    record_lifecycle(report, claims, metrics);
    record_disruption(report, claims, metrics);
    if report.planned {
        // Karpenter's `controller` is the one that planned: here always provisioning.
        let provisioner = labels(&[("controller", "provisioner")]);
        if let Some(d) = report.scheduling_duration {
            metrics
                .scheduling_duration
                .get_or_create(&provisioner)
                .observe(d.as_secs_f64());
        }
        metrics
            .unschedulable_pods
            .get_or_create(&provisioner)
            .set(i64::try_from(report.unschedulable.len()).unwrap_or(i64::MAX));
    }
    metrics.pods_nominated.inc_by(report.nominated.len() as u64);
    record_errors(report, metrics);
    if let Some(allowed) = &report.allowed {
        // Set wholesale: a deleted NodePool's series go with it.
        metrics.allowed.clear();
        for (pool, reason, n) in allowed {
            // Karpenter labels this one with the reason as written (`Underutilized`).
            metrics
                .allowed
                .get_or_create(&labels(&[("nodepool", pool), ("reason", reason.as_str())]))
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
    }
    for (reason, n) in report.eligible.iter().flatten() {
        metrics
            .eligible
            .get_or_create(&labels(&[("reason", &reason_label(reason.as_str()))]))
            .set(i64::try_from(*n).unwrap_or(i64::MAX));
    }
    for m in &report.mispredicted {
        metrics
            .mispredicted
            .get_or_create(&labels(&[
                ("instance_type", &m.instance_type),
                ("resource", &m.resource),
            ]))
            .inc();
    }
    for offering in &report.unavailable {
        // `instance-type/zone/capacity-type`, as `OfferingKey` prints it.
        let mut parts = offering.splitn(3, '/');
        let (t, z, c) = (parts.next(), parts.next(), parts.next());
        metrics
            .offerings_unavailable
            .get_or_create(&labels(&[
                ("instance_type", t.unwrap_or_default()),
                ("zone", z.unwrap_or_default()),
                ("capacity_type", c.unwrap_or_default()),
            ]))
            .inc();
    }
}

/// NodeClaims and Nodes created, launched, registered and deleted.
fn record_lifecycle(report: &StepReport, claims: &Claims, metrics: &Metrics) {
    // As Karpenter labels them: `provisioned`, or the lower-cased reason of the voluntary
    // disruption a replacement was made for (Karpenter replaces an expired or interrupted
    // node by provisioning for its pods); Joiner never relaxes minValues.
    let replacements: BTreeMap<&String, String> = report
        .disruption
        .iter()
        .filter(|e| e.action == DisruptionAction::Replacing && is_voluntary(&e.reason))
        .flat_map(|e| e.detail.iter().map(|c| (c, reason_label(&e.reason))))
        .collect();
    for name in &report.created {
        let reason = replacements.get(name).map_or("provisioned", String::as_str);
        metrics
            .nodeclaims_created
            .get_or_create(&labels(&[
                ("reason", reason),
                ("nodepool", &claim(claims, name).nodepool),
                ("min_values_relaxed", "false"),
            ]))
            .inc();
    }
    for name in &report.deleted {
        let c = claim(claims, name);
        metrics
            .nodeclaims_terminated
            .get_or_create(&labels(&[
                ("nodepool", &c.nodepool),
                ("capacity_type", &c.capacity_type),
                ("zone", &c.zone),
            ]))
            .inc();
        if c.registered {
            metrics
                .nodes_terminated
                .get_or_create(&labels(&[("nodepool", &c.nodepool), ("zone", &c.zone)]))
                .inc();
        }
    }
    for (name, _) in &report.insufficient_capacity {
        let c = claim(claims, name);
        metrics
            .nodeclaims_disrupted
            .get_or_create(&labels(&[
                ("reason", "insufficient_capacity"),
                ("nodepool", &c.nodepool),
                ("capacity_type", &c.capacity_type),
            ]))
            .inc();
    }
    for name in &report.registered {
        let c = claim(claims, name);
        metrics
            .nodes_created
            .get_or_create(&labels(&[("nodepool", &c.nodepool), ("zone", &c.zone)]))
            .inc();
    }
    let by_pool = |family: &Counters, names: &mut dyn Iterator<Item = &String>| {
        for name in names {
            family
                .get_or_create(&labels(&[("nodepool", &claim(claims, name).nodepool)]))
                .inc();
        }
    };
    by_pool(
        &metrics.nodeclaims_launched,
        &mut report.launched.iter().map(|(c, _)| c),
    );
    by_pool(
        &metrics.nodeclaims_registered,
        &mut report.registered.iter(),
    );
    by_pool(
        &metrics.nodeclaims_initialized,
        &mut report.initialized.iter(),
    );
    metrics
        .instances_terminated
        .inc_by(report.terminated.len() as u64);
}

/// Disruption decisions, drains and interruption notices.
fn record_disruption(report: &StepReport, claims: &Claims, metrics: &Metrics) {
    for d in &report.disruption {
        match d.action {
            DisruptionAction::Decided => record_decision(report, d, claims, metrics),
            DisruptionAction::Evicted => {
                metrics
                    .eviction_requests
                    .get_or_create(&labels(&[("code", "200")]))
                    .inc_by(d.detail.len() as u64);
                metrics
                    .pods_drained
                    .get_or_create(&labels(&[("reason", &d.reason)]))
                    .inc_by(d.detail.len() as u64);
            }
            DisruptionAction::Forced => {
                metrics
                    .pods_drained
                    .get_or_create(&labels(&[("reason", "Forceful Termination")]))
                    .inc_by(d.detail.len() as u64);
            }
            DisruptionAction::Interrupted | DisruptionAction::Recommended => {
                if let Some(kind) = InterruptionKind::from_reason(&d.reason) {
                    metrics
                        .interruption_messages
                        .get_or_create(&labels(&[("message_type", message_type(kind))]))
                        .inc();
                }
            }
            _ => {}
        }
    }
    if !report.eviction_refused.is_empty() {
        metrics
            .eviction_requests
            .get_or_create(&labels(&[("code", "429")]))
            .inc_by(report.eviction_refused.len() as u64);
    }
}

/// Whether Karpenter counts a disruption of this reason as voluntary (budgeted: empty,
/// underutilized, drifted); expiry and interruption are forceful.
fn is_voluntary(reason: &str) -> bool {
    DisruptionReason::parse(reason).is_some_and(DisruptionReason::is_budgeted)
}

fn record_decision(
    report: &StepReport,
    decided: &joiner_controller::DisruptionEvent,
    claims: &Claims,
    metrics: &Metrics,
) {
    let reason = reason_label(&decided.reason);
    for name in &decided.node_claims {
        let c = claim(claims, name);
        metrics
            .nodeclaims_disrupted
            .get_or_create(&labels(&[
                ("reason", &reason),
                ("nodepool", &c.nodepool),
                ("capacity_type", &c.capacity_type),
            ]))
            .inc();
    }
    if !is_voluntary(&decided.reason) {
        return;
    }
    let replaced = report
        .disruption
        .iter()
        .any(|e| e.action == DisruptionAction::Replacing && e.node_claims == decided.node_claims);
    let decision = if replaced { "replace" } else { "delete" };
    let consolidation_type = match DisruptionReason::parse(&decided.reason) {
        Some(DisruptionReason::Empty) => "empty",
        Some(DisruptionReason::Underutilized) if decided.node_claims.len() > 1 => "multi",
        Some(DisruptionReason::Underutilized) => "single",
        _ => "",
    };
    metrics
        .disruption_decisions
        .get_or_create(&labels(&[
            ("decision", decision),
            ("reason", &reason),
            ("consolidation_type", consolidation_type),
        ]))
        .inc();
    let pools: std::collections::BTreeSet<String> = decided
        .node_claims
        .iter()
        .map(|n| claim(claims, n).nodepool.clone())
        .collect();
    for pool in &pools {
        metrics
            .disruption_decisions_by_pool
            .get_or_create(&labels(&[
                ("nodepool", pool),
                ("decision", decision),
                ("reason", &reason),
                ("consolidation_type", consolidation_type),
            ]))
            .inc();
    }
}

fn record_errors(report: &StepReport, metrics: &Metrics) {
    for (i, e) in report.errors.iter().enumerate() {
        let during = report
            .errors_during
            .get(i)
            .map_or("unknown", |r| r.as_str());
        metrics
            .errors
            .get_or_create(&labels(&[("reconciler", during)]))
            .inc();
        if let ControllerError::Cloud(c) = e {
            metrics
                .cloudprovider_errors
                .get_or_create(&labels(&[
                    ("controller", during),
                    ("provider", metrics.provider),
                    ("error", cloud_error_label(c)),
                ]))
                .inc();
        }
    }
}

#[cfg(test)]
mod kept;
#[cfg(test)]
mod state_tests;
#[cfg(test)]
mod tests;
