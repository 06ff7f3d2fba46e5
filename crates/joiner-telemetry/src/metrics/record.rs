//! The counters of what a step did, from its report: NodeClaims and Nodes created and ended,
//! disruption decisions, drains, interruptions, errors.

use std::collections::BTreeMap;
use std::time::Duration;

use joiner_controller::{DisruptionCause, StepReport};
use joiner_model::wellknown::{
    ConsolidationType, DisruptionAction, DisruptionReason, InterruptionKind,
};

use super::{ClaimLabels, Claims, Counters, Metrics, labels};

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
pub(super) fn reason_label(reason: &str) -> String {
    reason.to_ascii_lowercase()
}

/// Karpenter's `error` label: the cloud provider errors it has a type for, else empty.
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
    metrics.interruption.record(report);
    metrics.provisioning.record(report);
    metrics.cloud.record(report, metrics.provider);
    metrics.consolidation.record(report);
    for kind in &report.failed_validations {
        metrics
            .failed_validations
            .get_or_create(&labels(&[("consolidation_type", kind.as_str())]))
            .inc();
    }
    for zone in &report.termination_failures {
        metrics
            .termination_failures
            .get_or_create(&labels(&[("zone", zone), ("zone_id", "")]))
            .inc();
    }
    record_errors(report, metrics);
    if let Some(types) = &report.catalog {
        metrics.catalog.set(types);
    }
    if let Some(budgets) = &report.budgets {
        // Set wholesale: a deleted NodePool's series go with it.
        metrics.allowed.clear();
        metrics.consuming.clear();
        for b in budgets {
            // Karpenter labels these with the reason as written (`Underutilized`).
            let l = labels(&[("nodepool", &b.nodepool), ("reason", b.reason.as_str())]);
            let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
            metrics.allowed.get_or_create(&l).set(count(b.allowed));
            metrics.consuming.get_or_create(&l).set(count(b.disrupting));
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
        .filter(|e| e.action == DisruptionAction::Replacing && is_voluntary(e.reason))
        .flat_map(|e| {
            e.detail
                .iter()
                .map(|c| (c, reason_label(e.reason.as_str())))
        })
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
    for r in &report.repaired {
        metrics
            .nodeclaims_unhealthy_disrupted
            .get_or_create(&labels(&[
                ("condition", r.condition),
                ("nodepool", &r.node_pool),
                ("capacity_type", &r.capacity_type),
                ("image_id", &r.image_id),
            ]))
            .inc();
    }
    for r in &report.reboots {
        if let Some(result) = r.phase.result() {
            metrics
                .nodes_reboots
                .get_or_create(&labels(&[("result", result)]))
                .inc();
        }
    }
    for name in &report.drained {
        let c = claim(claims, name);
        metrics
            .nodes_drained
            .get_or_create(&labels(&[("nodepool", &c.nodepool)]))
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
                    .get_or_create(&labels(&[("reason", d.reason.as_str())]))
                    .inc_by(d.detail.len() as u64);
            }
            DisruptionAction::Forced => {
                metrics
                    .pods_drained
                    .get_or_create(&labels(&[("reason", "Forceful Termination")]))
                    .inc_by(d.detail.len() as u64);
            }
            DisruptionAction::Interrupted | DisruptionAction::Recommended => {
                if let DisruptionCause::Notice(kind) = d.reason {
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
fn is_voluntary(cause: DisruptionCause) -> bool {
    cause.reason().is_some_and(DisruptionReason::is_budgeted)
}

fn record_decision(
    report: &StepReport,
    decided: &joiner_controller::DisruptionEvent,
    claims: &Claims,
    metrics: &Metrics,
) {
    let reason = reason_label(decided.reason.as_str());
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
    if !is_voluntary(decided.reason) {
        return;
    }
    let replaced = report
        .disruption
        .iter()
        .any(|e| e.action == DisruptionAction::Replacing && e.node_claims == decided.node_claims);
    let decision = if replaced { "replace" } else { "delete" };
    let consolidation_type = decided
        .reason
        .reason()
        .and_then(|r| ConsolidationType::of(r, decided.node_claims.len()))
        .map_or("", ConsolidationType::as_str);
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
    // One reconciler per error; an error without one counts as `unknown`.
    let during = report
        .errors_during
        .iter()
        .map(|r| r.as_str())
        .chain(std::iter::repeat("unknown"));
    for during in during.take(report.errors.len()) {
        metrics
            .errors
            .get_or_create(&labels(&[("reconciler", during)]))
            .inc();
    }
}
