//! Karpenter's disruption evaluation times, and its consolidation verdicts (v1.14): how long
//! each kind of move took to weigh
//! (`karpenter_voluntary_disruption_decision_evaluation_duration_seconds`; Karpenter's times
//! include the 15 s validation wait of a move found, Joiner's only the weighing, since its
//! validation spans steps); every move consolidation weighed, by the
//! NodePools it takes nodes from, approved or rejected (`karpenter_consolidation_moves_total`),
//! and each Balanced pool's score for it (`karpenter_consolidation_score`). A move is counted
//! when weighed, before its validation period, so an approved move may still be dropped, as in
//! Karpenter.

use joiner_controller::StepReport;
use joiner_model::wellknown::ConsolidationType;
use prometheus_client::registry::Registry;

use super::conditions::Buckets;
use super::lifetimes::DURATION_BUCKETS;
use super::{Counters, Histograms, labels};

/// Karpenter's buckets for the score, around the 0.5 a Balanced move needs.
const SCORE_BUCKETS: [f64; 8] = [0.1, 0.25, 0.33, 0.5, 1.0, 2.0, 5.0, 10.0];

pub(super) struct ConsolidationMetrics {
    moves: Counters,
    score: Histograms,
    evaluation: Histograms,
}

fn decision(approved: bool) -> &'static str {
    if approved { "approved" } else { "rejected" }
}

impl ConsolidationMetrics {
    pub(super) fn register(registry: &mut Registry) -> ConsolidationMetrics {
        let moves = Counters::default();
        registry.register(
            "karpenter_consolidation_moves",
            "Consolidation moves weighed, by decision, NodePool and consolidation policy",
            moves.clone(),
        );
        let score = Histograms::new_with_constructor(Buckets(SCORE_BUCKETS.to_vec()));
        registry.register(
            "karpenter_consolidation_score",
            "Balanced NodePools' scores of the consolidation moves weighed (0.5 or more approves)",
            score.clone(),
        );
        let evaluation = Histograms::new_with_constructor(Buckets(DURATION_BUCKETS.to_vec()));
        registry.register(
            "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
            "Time to weigh each kind of voluntary disruption, by reason and consolidation type",
            evaluation.clone(),
        );
        ConsolidationMetrics {
            moves,
            score,
            evaluation,
        }
    }

    pub(super) fn record(&self, report: &StepReport) {
        for (kind, took) in &report.decision_evaluations {
            // Karpenter's labels: drift has no consolidation type.
            let (reason, kind) = match kind {
                Some(ConsolidationType::Empty) => ("empty", "empty"),
                Some(k) => ("underutilized", k.as_str()),
                None => ("drifted", ""),
            };
            self.evaluation
                .get_or_create(&labels(&[("reason", reason), ("consolidation_type", kind)]))
                .observe(took.as_secs_f64());
        }
        for v in &report.consolidation_moves {
            self.moves
                .get_or_create(&labels(&[
                    ("decision", decision(v.approved)),
                    ("nodepool", &v.nodepool),
                    ("policy", v.policy),
                ]))
                .inc();
            // The pool's own decision labels its score, as Karpenter's multi-node moves do.
            if let Some((score, approved)) = v.score {
                self.score
                    .get_or_create(&labels(&[
                        ("decision", decision(approved)),
                        ("nodepool", &v.nodepool),
                        ("policy", v.policy),
                    ]))
                    .observe(score);
            }
        }
    }
}
