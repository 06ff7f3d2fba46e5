//! The controller: one step of every reconciler at the clock's now.

use crate::report::Reconciler;
use crate::throttle::Throttle;
use k8s_openapi::api::core::v1::Pod;

use crate::batcher::Batcher;
use crate::batcher::fingerprint;
use crate::clock::Clock;
use crate::cloud::CloudProvider;
use crate::config::Config;
use crate::consistency::Mispredictions;
use crate::context::Ctx;
use crate::context::Learned;
use crate::disruption::{DisruptionState, disrupt};
use crate::interruption::InterruptionQueue;
use crate::nodeclass::NodeClassState;
use crate::provisioning::provision;
use crate::report::StepReport;
use crate::store::ClusterStore;
use crate::unavailable::UnavailableOfferings;
use crate::{gc, lifecycle};
use joiner_model::api::nodeclaim::NodeClaim;

/// The reconcilers over one store, one cloud and one clock.
///
/// All durable state lives in the store and the cloud; what the controller keeps (the open
/// batch, offerings out of capacity) is a cache that a new controller rebuilds. Dropping a
/// controller at any point and building a new one over the same store and cloud is a restart.
pub struct Controller<S, C, K> {
    store: S,
    cloud: C,
    clock: K,
    config: Config,
    batcher: Batcher,
    unavailable: UnavailableOfferings,
    mispredicted: Mispredictions,
    disruption: DisruptionState,
    /// When garbage collection last ran; `None` before this controller's first step.
    last_gc: Option<k8s_openapi::jiff::Timestamp>,
    /// Where the cloud's interruption warnings arrive, when one is configured.
    interruption: Option<Box<dyn InterruptionQueue + Send>>,
    /// When each EC2NodeClass was last resolved.
    node_classes: NodeClassState,
    /// The placement groups the classes select, found by the nodeclass step.
    placement_groups: crate::placement::PlacementGroups,
    /// Since when each of the cluster's instance profiles has been seen unused.
    profile_use: gc::profiles::ProfileUse,
    /// The pause the cloud's throttling asks for.
    throttle: Throttle,
}

impl<S: ClusterStore, C: CloudProvider, K: Clock> Controller<S, C, K> {
    pub fn new(store: S, cloud: C, clock: K, config: Config) -> Self {
        let batcher = Batcher::new(
            config.settings.batch_idle_duration,
            config.settings.batch_max_duration,
        );
        Controller {
            store,
            cloud,
            clock,
            config,
            batcher,
            unavailable: UnavailableOfferings::default(),
            mispredicted: Mispredictions::default(),
            disruption: DisruptionState::default(),
            last_gc: None,
            interruption: None,
            node_classes: NodeClassState::default(),
            placement_groups: Default::default(),
            profile_use: gc::profiles::ProfileUse::default(),
            throttle: Throttle::default(),
        }
    }

    /// Polls `queue` for interruption messages first in every step from now on (a simulated
    /// queue; the live controller polls the SQS queue named by `settings.interruptionQueue` in
    /// a loop of its own, see [`crate::interruption`]). Replaces any queue set before.
    pub fn set_interruption_queue(&mut self, queue: Box<dyn InterruptionQueue + Send>) {
        self.interruption = Some(queue);
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Runs the interruption queue, EC2NodeClass status, the lifecycle, garbage collection (on its period),
    /// provisioning and disruption once. Failures are logged and reported; each is retried on a later step.
    /// While the store's caches are not synced ([`ClusterStore::synced`]) only the interruption
    /// queue is read: a notice is recorded, nothing is decided. After a step in which the cloud
    /// throttled a call, the same holds for a pause ([`crate::throttle`]).
    pub fn step(&mut self) -> StepReport {
        let now = self.clock.now();
        if self.unavailable.expire(now) > 0 {
            self.batcher.poke();
        }
        let mut report = StepReport::default();
        let mut ctx = Ctx::new(
            &self.store,
            &self.cloud,
            &self.config,
            now,
            Learned {
                unavailable: &mut self.unavailable,
                mispredicted: &mut self.mispredicted,
                placement_groups: &mut self.placement_groups,
            },
            &mut report,
        );
        // Interruption notices first, never behind a plan: a spot warning gives two minutes.
        // They mark NodeClaims that the disruption step, later in this step, replaces and
        // drains.
        ctx.during(Reconciler::Interruption);
        if let Some(queue) = self.interruption.as_deref()
            && let Err(e) = crate::interruption::poll(ctx.store, queue, now, ctx.report)
        {
            ctx.error(Reconciler::Interruption, "interruption queue", e);
        }
        if let Err(e) = crate::interruption::avoid_reclaimed_offerings(&mut ctx) {
            ctx.error(Reconciler::Interruption, "interruption queue", e);
        }
        // Everything after this decides from the caches: what to launch, what to drain, delete
        // or terminate. While a watch is failing its cache answers what it last saw, however
        // old, so nothing is decided until every cache follows the API server again (as
        // Karpenter's provisioner and disruption wait for a synced cluster state).
        if let Err(e) = ctx.store.synced() {
            ctx.error(
                Reconciler::ClusterState,
                "waiting for the cluster caches (nothing is decided on a stale view)",
                e,
            );
            return report;
        }
        if let Some(pause) = self.throttle.paused(now) {
            report.cloud_paused = Some(pause);
            return report;
        }
        // Node class status before anything plans or launches: the view launches nothing
        // from a class that is not Ready.
        ctx.during(Reconciler::NodeClass);
        match crate::nodeclass::reconcile(&mut ctx, &mut self.node_classes) {
            // A class that became Ready (or stopped being) changes what pending pods can get.
            Ok(true) => self.batcher.poke(),
            Ok(false) => {}
            Err(e) => ctx.error(Reconciler::NodeClass, "EC2NodeClass status", e),
        }
        ctx.during(Reconciler::Lifecycle);
        if let Err(e) = lifecycle::reconcile(&mut ctx) {
            ctx.error(Reconciler::Lifecycle, "lifecycle", e);
        }
        // A node found to offer less than predicted leaves the pods planned onto the rest to
        // plan again, though nothing about them changed.
        if !ctx.report.mispredicted.is_empty() {
            self.batcher.poke();
        }
        // Broken nodes go before anything plans onto them.
        ctx.during(Reconciler::Repair);
        if let Err(e) = crate::repair::reconcile(&mut ctx) {
            ctx.error(Reconciler::Repair, "node repair", e);
        }
        if !ctx.report.repaired.is_empty() {
            self.batcher.poke();
        }
        ctx.during(Reconciler::NodePool);
        if let Err(e) = crate::nodepool_status::reconcile(&mut ctx) {
            ctx.error(Reconciler::NodePool, "NodePool status", e);
        }
        ctx.during(Reconciler::NodeOverlay);
        if let Err(e) = crate::nodeoverlay_status::reconcile(&mut ctx) {
            ctx.error(Reconciler::NodeOverlay, "NodeOverlay status", e);
        }
        let gc_due = self
            .last_gc
            .is_none_or(|t| crate::clock::elapsed(now, t) >= self.config.gc_period);
        if gc_due {
            ctx.during(Reconciler::GarbageCollection);
            ctx.report.collected = true;
            match gc::collect(&mut ctx, &mut self.profile_use) {
                Ok(()) => self.last_gc = Some(now),
                Err(e) => ctx.error(Reconciler::GarbageCollection, "garbage collection", e),
            }
        }
        // Static pools keep their count whether or not pods are pending; their new
        // NodeClaims are machines in flight by the time pending pods are planned.
        ctx.during(Reconciler::StaticCapacity);
        if let Err(e) = crate::statics::reconcile(&mut ctx) {
            ctx.error(Reconciler::StaticCapacity, "static NodePools", e);
        }
        ctx.during(Reconciler::Provisioning);
        let observed = self
            .store
            .list::<Pod>()
            .and_then(|pods| Ok((pods, self.store.list::<NodeClaim>()?)));
        match observed {
            Ok((pods, claims)) => {
                let (fp, pending) =
                    fingerprint(&pods, &claims, keeps_buffers(ctx.config, ctx.store));
                self.batcher.observe(now, fp, pending);
                if self.batcher.close(now)
                    && let Err(e) = provision(&mut ctx)
                {
                    ctx.error(Reconciler::Provisioning, "provisioning", e);
                    self.batcher.poke();
                }
            }
            Err(e) => ctx.error(Reconciler::Provisioning, "reading pods", e),
        }
        if let Err(e) = crate::buffer_status::reconcile(&mut ctx) {
            ctx.error(Reconciler::Provisioning, "CapacityBuffer status", e);
        }
        ctx.during(Reconciler::Disruption);
        if let Err(e) = disrupt(&mut ctx, &mut self.disruption) {
            ctx.error(Reconciler::Disruption, "disruption", e);
        }
        // A NodeClaim that went away leaves its pods to plan again.
        if !report.deleted.is_empty() {
            self.batcher.poke();
        }
        self.throttle.record(now, &report.errors);
        report
    }
}

/// Whether there are CapacityBuffers to keep (the `CapacityBuffer` gate on and at least one
/// buffer): provisioning then plans their virtual pods even with no pod pending.
fn keeps_buffers<S: ClusterStore>(config: &Config, store: &S) -> bool {
    config
        .settings
        .feature_gates
        .enabled(joiner_model::feature_gates::FeatureGate::CapacityBuffer)
        && store
            .list::<joiner_model::api::capacitybuffer::CapacityBuffer>()
            .is_ok_and(|b| !b.is_empty())
}
