//! Karpenter's interruption-queue metrics beyond the messages received: how many handled
//! messages were deleted from the queue, and how long after its event each was handled (the
//! event's `time` to the step that acted on it), in Karpenter's duration buckets.

use joiner_controller::StepReport;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::lifetimes::DURATION_BUCKETS;

pub(super) struct InterruptionMetrics {
    deleted: Counter,
    latency: Histogram,
}

impl InterruptionMetrics {
    pub(super) fn register(registry: &mut Registry) -> InterruptionMetrics {
        let deleted = Counter::default();
        registry.register(
            "karpenter_interruption_deleted_messages",
            "Interruption messages deleted from the queue once handled",
            deleted.clone(),
        );
        let latency = Histogram::new(DURATION_BUCKETS.iter().copied());
        registry.register(
            "karpenter_interruption_message_queue_duration_seconds",
            "Time from an interruption event to the step that handled it, in seconds",
            latency.clone(),
        );
        InterruptionMetrics { deleted, latency }
    }

    pub(super) fn record(&self, report: &StepReport) {
        self.deleted.inc_by(report.interruption_deleted as u64);
        for d in &report.interruption_latency {
            self.latency.observe(d.as_secs_f64());
        }
    }
}
