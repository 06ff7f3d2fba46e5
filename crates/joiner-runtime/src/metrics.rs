//! The Prometheus metrics of the live controller, derived from each step's report.
//!
//! Names follow Karpenter's where the meaning is the same, so its dashboards and alerts keep
//! working: `karpenter_nodeclaims_created_total{reason,nodepool}`,
//! `karpenter_nodeclaims_terminated_total{nodepool}`,
//! `karpenter_nodeclaims_disrupted_total{reason,nodepool}`,
//! `karpenter_voluntary_disruption_decisions_total{decision,reason,consolidation_type}`,
//! `karpenter_scheduler_scheduling_duration_seconds`,
//! `karpenter_scheduler_unschedulable_pods_count` and
//! `karpenter_cloudprovider_errors_total{controller,provider,error}` (Karpenter also labels the
//! cloud method; the core's report does not carry it). Karpenter 1.x dropped its launched,
//! registered and initialized counters for status-condition metrics; Joiner keeps simple
//! counters under its own prefix, with its other metrics.

use std::collections::BTreeMap;
use std::time::Duration;

use joiner_controller::cloud::CloudError;
use joiner_controller::{ControllerError, StepReport};
use joiner_model::wellknown::{DisruptionAction, DisruptionReason};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;
type Counters = Family<Labels, Counter>;

/// Every metric the controller exports, and the registry that renders them.
pub struct Metrics {
    registry: Registry,
    /// `aws` or `simulated`: the `provider` label of cloud errors.
    provider: &'static str,
    nodeclaims_created: Counters,
    nodeclaims_terminated: Counters,
    nodeclaims_disrupted: Counters,
    disruption_decisions: Counters,
    scheduling_duration: Histogram,
    unschedulable_pods: Gauge,
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
            "NodeClaims deleted, by NodePool",
        );
        let nodeclaims_disrupted = counters(
            "karpenter_nodeclaims_disrupted",
            "NodeClaims chosen for voluntary disruption, by reason and NodePool",
        );
        let disruption_decisions = counters(
            "karpenter_voluntary_disruption_decisions",
            "Disruption decisions, by decision (delete or replace), reason and consolidation type",
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
        let scheduling_duration = duration_buckets();
        registry.register(
            "karpenter_scheduler_scheduling_duration_seconds",
            "Time to plan the pending pods (snapshot and plan), in seconds",
            scheduling_duration.clone(),
        );
        let unschedulable_pods = Gauge::default();
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
        Metrics {
            registry,
            provider,
            nodeclaims_created,
            nodeclaims_terminated,
            nodeclaims_disrupted,
            disruption_decisions,
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
        }
    }

    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// The Prometheus text exposition (OpenMetrics) of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, (*v).to_string())).collect()
}

/// The NodePool of a NodeClaim, or `unknown` when it is gone from the cluster and was never seen.
fn pool_of<'a>(pools: &'a BTreeMap<String, String>, claim: &str) -> &'a str {
    pools.get(claim).map_or("unknown", String::as_str)
}

/// Karpenter's `reason` label values are lower case (`underutilized`, `empty`, `expired`).
fn reason_label(reason: &str) -> String {
    reason.to_ascii_lowercase()
}

fn cloud_error_label(e: &CloudError) -> &'static str {
    match e {
        CloudError::InsufficientCapacity(_) => "InsufficientCapacity",
        CloudError::Throttled => "Throttled",
        CloudError::NoOfferings => "NoOfferings",
        CloudError::Rejected(_) => "Rejected",
        CloudError::Other(_) => "Other",
    }
}

/// Counts what one step did. `pools` names the NodePool of each NodeClaim the step touched
/// (read from the cluster before and after the step, so deleted ones are known too);
/// `took` is how long the step ran.
pub fn record(
    report: &StepReport,
    pools: &BTreeMap<String, String>,
    took: Duration,
    metrics: &Metrics,
) {
    metrics.step_duration.observe(took.as_secs_f64());
    record_outcomes(report, pools, metrics);
}

/// Counts what a report says was done, whichever loop did it (a step, or a poll of the
/// interruption queue): NodeClaims created, launched, disrupted, errors by reconciler.
pub fn record_outcomes(report: &StepReport, pools: &BTreeMap<String, String>, metrics: &Metrics) {
    // As Karpenter labels them: `provisioned`, or the lower-cased disruption reason a
    // replacement was made for; Joiner never relaxes minValues.
    let replacements: BTreeMap<&String, String> = report
        .disruption
        .iter()
        .filter(|e| e.action == DisruptionAction::Replacing)
        .flat_map(|e| e.detail.iter().map(|c| (c, reason_label(&e.reason))))
        .collect();
    for claim in &report.created {
        let reason = replacements
            .get(claim)
            .map_or("provisioned", String::as_str);
        metrics
            .nodeclaims_created
            .get_or_create(&labels(&[
                ("reason", reason),
                ("nodepool", pool_of(pools, claim)),
                ("min_values_relaxed", "false"),
            ]))
            .inc();
    }
    for claim in &report.deleted {
        metrics
            .nodeclaims_terminated
            .get_or_create(&labels(&[("nodepool", pool_of(pools, claim))]))
            .inc();
    }
    let by_pool = |family: &Counters, claims: &mut dyn Iterator<Item = &String>| {
        for claim in claims {
            family
                .get_or_create(&labels(&[("nodepool", pool_of(pools, claim))]))
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
    for decided in report
        .disruption
        .iter()
        .filter(|e| e.action == DisruptionAction::Decided)
    {
        let replaced = report.disruption.iter().any(|e| {
            e.action == DisruptionAction::Replacing && e.node_claims == decided.node_claims
        });
        let reason = reason_label(&decided.reason);
        let consolidation_type = match DisruptionReason::parse(&decided.reason) {
            Some(DisruptionReason::Empty) => "empty",
            Some(DisruptionReason::Underutilized) if decided.node_claims.len() > 1 => "multi",
            Some(DisruptionReason::Underutilized) => "single",
            _ => "",
        };
        metrics
            .disruption_decisions
            .get_or_create(&labels(&[
                ("decision", if replaced { "replace" } else { "delete" }),
                ("reason", reason.as_str()),
                ("consolidation_type", consolidation_type),
            ]))
            .inc();
        for claim in &decided.node_claims {
            metrics
                .nodeclaims_disrupted
                .get_or_create(&labels(&[
                    ("reason", reason.as_str()),
                    ("nodepool", pool_of(pools, claim)),
                ]))
                .inc();
        }
    }
    if report.planned {
        if let Some(d) = report.scheduling_duration {
            metrics.scheduling_duration.observe(d.as_secs_f64());
        }
        metrics
            .unschedulable_pods
            .set(i64::try_from(report.unschedulable.len()).unwrap_or(i64::MAX));
    }
    metrics.pods_nominated.inc_by(report.nominated.len() as u64);
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

#[cfg(test)]
mod tests {
    use joiner_controller::store::StoreError;
    use joiner_controller::{DisruptionEvent, Reconciler};

    use super::*;

    fn event(
        action: DisruptionAction,
        reason: &str,
        claims: &[&str],
        detail: &[&str],
    ) -> DisruptionEvent {
        DisruptionEvent {
            action,
            reason: reason.into(),
            node_claims: claims.iter().map(|s| s.to_string()).collect(),
            detail: detail.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    /// The lines of the exposition that carry a value (not `# HELP`/`# TYPE`).
    fn samples(m: &Metrics) -> Vec<String> {
        m.render()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(str::to_string)
            .collect()
    }

    fn has(lines: &[String], want: &str) {
        assert!(
            lines.iter().any(|l| l == want),
            "no line `{want}` in\n{}",
            lines.join("\n")
        );
    }

    #[test]
    fn a_step_report_becomes_karpenter_and_joiner_metrics() {
        let m = Metrics::new("aws");
        let report = StepReport {
            planned: true,
            created: s(&["gpu-a", "gpu-b", "gpu-r1"]),
            launched: vec![("gpu-a".into(), "i-1".into())],
            registered: s(&["gpu-old"]),
            initialized: s(&["gpu-old"]),
            deleted: s(&["cpu-x"]),
            terminated: s(&["i-9", "i-8"]),
            kept: Vec::new(),
            eviction_refused: Vec::new(),
            launch_templates_deleted: Vec::new(),
            instance_profiles_deleted: Vec::new(),
            cloud_paused: None,
            collected: true,
            unavailable: s(&["g4dn.xlarge/us-east-1a/spot"]),
            unschedulable: vec![("lab/big".into(), "too big".into())],
            nominated: vec![("lab/p1".into(), "gpu-a".into())],
            scheduling_duration: Some(Duration::from_millis(30)),
            disruption: vec![
                event(
                    DisruptionAction::Decided,
                    "Underutilized",
                    &["gpu-old", "gpu-old2"],
                    &[],
                ),
                event(
                    DisruptionAction::Replacing,
                    "Underutilized",
                    &["gpu-old", "gpu-old2"],
                    &["gpu-r1"],
                ),
                event(DisruptionAction::Decided, "Empty", &["cpu-x"], &[]),
            ],
            not_drained: Vec::new(),
            node_claim_events: Vec::new(),
            errors: vec![
                ControllerError::Cloud(CloudError::Throttled),
                ControllerError::Store(StoreError::Unavailable("down".into())),
            ],
            errors_during: vec![Reconciler::Launching, Reconciler::Lifecycle],
        };
        let pools: BTreeMap<String, String> = [
            ("gpu-a", "gpu"),
            ("gpu-b", "gpu"),
            ("gpu-r1", "gpu"),
            ("gpu-old", "gpu"),
            ("gpu-old2", "gpu"),
            ("cpu-x", "cpu"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        record(&report, &pools, Duration::from_millis(120), &m);
        let lines = samples(&m);
        has(
            &lines,
            r#"karpenter_nodeclaims_created_total{reason="provisioned",nodepool="gpu",min_values_relaxed="false"} 2"#,
        );
        has(
            &lines,
            r#"karpenter_nodeclaims_created_total{reason="underutilized",nodepool="gpu",min_values_relaxed="false"} 1"#,
        );
        has(
            &lines,
            r#"karpenter_nodeclaims_terminated_total{nodepool="cpu"} 1"#,
        );
        has(
            &lines,
            r#"karpenter_nodeclaims_disrupted_total{reason="underutilized",nodepool="gpu"} 2"#,
        );
        has(
            &lines,
            r#"karpenter_nodeclaims_disrupted_total{reason="empty",nodepool="cpu"} 1"#,
        );
        has(
            &lines,
            r#"karpenter_voluntary_disruption_decisions_total{decision="replace",reason="underutilized",consolidation_type="multi"} 1"#,
        );
        has(
            &lines,
            r#"karpenter_voluntary_disruption_decisions_total{decision="delete",reason="empty",consolidation_type="empty"} 1"#,
        );
        has(
            &lines,
            "karpenter_scheduler_scheduling_duration_seconds_count 1",
        );
        has(
            &lines,
            "karpenter_scheduler_scheduling_duration_seconds_sum 0.03",
        );
        has(&lines, "karpenter_scheduler_unschedulable_pods_count 1");
        has(
            &lines,
            r#"karpenter_cloudprovider_errors_total{controller="launching",provider="aws",error="Throttled"} 1"#,
        );
        has(
            &lines,
            r#"joiner_controller_errors_total{reconciler="launching"} 1"#,
        );
        has(
            &lines,
            r#"joiner_controller_errors_total{reconciler="lifecycle"} 1"#,
        );
        has(
            &lines,
            r#"joiner_nodeclaims_launched_total{nodepool="gpu"} 1"#,
        );
        has(
            &lines,
            r#"joiner_nodeclaims_registered_total{nodepool="gpu"} 1"#,
        );
        has(
            &lines,
            r#"joiner_nodeclaims_initialized_total{nodepool="gpu"} 1"#,
        );
        has(&lines, "joiner_instances_terminated_total 2");
        has(&lines, "joiner_pods_nominated_total 1");
        has(&lines, "joiner_controller_step_duration_seconds_count 1");
        has(&lines, "joiner_controller_step_duration_seconds_sum 0.12");
        has(
            &lines,
            r#"joiner_offerings_unavailable_total{instance_type="g4dn.xlarge",zone="us-east-1a",capacity_type="spot"} 1"#,
        );
        // Only the cloud error counts as a cloud provider error.
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.starts_with("karpenter_cloudprovider_errors_total"))
                .count(),
            1
        );
    }

    #[test]
    fn counters_accumulate_over_steps_and_unknown_pools_are_labelled() {
        let m = Metrics::new("simulated");
        let report = StepReport {
            created: s(&["gone"]),
            ..StepReport::default()
        };
        record(&report, &BTreeMap::new(), Duration::ZERO, &m);
        record(&report, &BTreeMap::new(), Duration::ZERO, &m);
        let lines = samples(&m);
        has(
            &lines,
            r#"karpenter_nodeclaims_created_total{reason="provisioned",nodepool="unknown",min_values_relaxed="false"} 2"#,
        );
        has(&lines, "joiner_controller_step_duration_seconds_count 2");
        // No batch was planned: no scheduling time is made up.
        has(
            &lines,
            "karpenter_scheduler_scheduling_duration_seconds_count 0",
        );
    }

    #[test]
    fn the_leader_gauge_follows_the_lease() {
        let m = Metrics::new("aws");
        has(&samples(&m), "joiner_leader 0");
        m.set_leader(true);
        has(&samples(&m), "joiner_leader 1");
        m.set_leader(false);
        has(&samples(&m), "joiner_leader 0");
    }

    /// However many distinct objects fail, and whatever the log says of each, the error
    /// metrics keep one series per reconciler (and cloud error kind).
    #[test]
    fn error_series_stay_bounded_whatever_fails() {
        let m = Metrics::new("aws");
        let mut report = StepReport::default();
        for i in 0..10_000 {
            let reconciler = Reconciler::ALL[i % Reconciler::ALL.len()];
            let e = if i % 2 == 0 {
                ControllerError::Cloud(CloudError::Other(format!("instance i-{i:08x} failed")))
            } else {
                ControllerError::Store(StoreError::Unavailable(format!("NodeClaim gpu-{i}")))
            };
            report.error(reconciler, &format!("NodeClaim gpu-{i}"), e);
        }
        record(&report, &BTreeMap::new(), Duration::from_millis(1), &m);
        let series = |name: &str| samples(&m).iter().filter(|l| l.starts_with(name)).count();
        assert_eq!(
            series("joiner_controller_errors_total{"),
            Reconciler::ALL.len()
        );
        assert!(series("karpenter_cloudprovider_errors_total{") <= Reconciler::ALL.len());
        assert!(
            samples(&m).iter().all(|l| !l.contains("gpu-")),
            "no object names in labels"
        );
    }
}
