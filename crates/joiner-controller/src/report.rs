//! The account of one step: what each reconciler did, for logs, metrics, events, the
//! simulation timeline and tests.

use joiner_model::wellknown::{
    DisruptionAction, DisruptionReason, DriftReason, InterruptionKind, TerminationEvent,
};
use serde::Serialize;

use crate::error::ControllerError;

/// What one [`crate::Controller::step`] did, for logs, metrics and tests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepReport {
    /// Whether a provisioning batch closed and was planned.
    pub planned: bool,
    /// NodeClaims created.
    pub created: Vec<String>,
    /// NodeClaim name and instance id of each launch (or adoption after a restart).
    pub launched: Vec<(String, String)>,
    pub registered: Vec<String>,
    pub initialized: Vec<String>,
    /// NodeClaims deleted (registration timeout, no capacity, instance gone).
    pub deleted: Vec<String>,
    /// NodeClaims whose Node's drain finished (their `Drained` condition turned `True`).
    pub drained: Vec<String>,
    /// Instances terminated, by id.
    pub terminated: Vec<String>,
    /// Instance id and NodeClaim name of instances garbage collection kept because their
    /// NodeClaim exists but does not decode.
    pub kept: Vec<(String, String)>,
    /// Pods (`namespace/name`) whose eviction a PodDisruptionBudget refused this step; they are
    /// tried again on the next.
    pub eviction_refused: Vec<String>,
    /// Launch templates garbage collection deleted, by name.
    pub launch_templates_deleted: Vec<String>,
    /// Instance profiles garbage collection deleted, by name.
    pub instance_profiles_deleted: Vec<String>,
    /// How long cloud work still pauses because the cloud throttled an earlier step; the step
    /// did nothing but read interruption notices.
    pub cloud_paused: Option<std::time::Duration>,
    /// Whether garbage collection ran in this step.
    pub collected: bool,
    /// Offerings marked unavailable after insufficient capacity.
    pub unavailable: Vec<String>,
    /// NodeClaims deleted because every offering they allow is out of capacity, with what the
    /// cloud said: an `InsufficientCapacityError` event on each.
    pub insufficient_capacity: Vec<(String, String)>,
    /// Pods the plan could not place, with the reason.
    pub unschedulable: Vec<(String, String)>,
    /// NodePools whose requirements leave no instance type with an available offering, when a
    /// batch was planned: a `NoCompatibleInstanceTypes` event on each.
    pub no_instance_types: Vec<String>,
    /// The instance types the NodePools may launch and their offerings as the plan priced
    /// them, when a batch was planned (Karpenter's `karpenter_cloudprovider_instance_type_*`
    /// gauges), each type once.
    pub catalog: Option<Vec<OfferedType>>,
    /// Pod (`namespace/name`) and NodeClaim of every pod the plan put on a NodeClaim created in
    /// this step or still in flight: the live controller tells each pod which node it waits for.
    pub nominated: Vec<(String, String)>,
    /// Every pod (`namespace/name`) the plan found a place for, when a batch was planned: on a
    /// running node, one in flight or a new NodeClaim (when Karpenter's provisioning clock
    /// starts).
    pub placed: Vec<String>,
    /// Pending pods the plan left out because they cannot be read, when a batch was planned.
    pub ignored_pods: Option<usize>,
    /// How many pending pods have each effective zone (a zone, `flexible` or `none`), when a
    /// batch was planned.
    pub pending_by_zone: Option<Vec<(String, usize)>>,
    /// How long planning took (snapshot and plan), when a batch was planned.
    pub scheduling_duration: Option<std::time::Duration>,
    /// What the disruption step did (consolidation, expiry).
    pub disruption: Vec<DisruptionEvent>,
    /// How many nodes each voluntary disruption could take, when the disruption step looked
    /// (empty, underutilized, drifted).
    pub eligible: Option<Vec<(joiner_model::wellknown::DisruptionReason, usize)>>,
    /// What each NodePool's budgets allow each voluntary disruption now, when the disruption
    /// step looked.
    pub budgets: Option<Vec<PoolBudget>>,
    /// Pods on a draining node that the drain does not wait for, and why (each step while it
    /// goes on): the runtime says so on each pod.
    pub not_drained: Vec<(String, NotDrained)>,
    /// NodeClaims whose node something keeps out of voluntary disruption, and what, when the
    /// disruption step looked.
    pub disruption_blocked: Vec<(String, DisruptionBlock)>,
    /// NodeClaims their NodePool does not let consolidation take, and why, when the
    /// disruption step looked.
    pub unconsolidatable: Vec<(String, Unconsolidatable)>,
    /// Pods (`namespace/name`) on Joiner's nodes whose `karpenter.sh/do-not-disrupt` is a
    /// duration or cannot be read, with the value and what it comes to now.
    pub do_not_disrupt: Vec<(String, String, DoNotDisruptNote)>,
    /// What termination has to tell about NodeClaims (a blocked drain, volumes to detach, a
    /// deadline, a failed termination), once per change: Kubernetes events on the NodeClaim.
    pub node_claim_events: Vec<NodeClaimEvent>,
    /// NodeClaims whose Node offers less than the plan predicted, by resource
    /// ([`crate::consistency`]).
    pub mispredicted: Vec<crate::consistency::Misprediction>,
    /// How long the disruption step took to weigh each kind of move: consolidation's empty,
    /// multi-node and single-node moves by their kind, drift as `None`.
    pub decision_evaluations: Vec<(
        Option<joiner_model::wellknown::ConsolidationType>,
        std::time::Duration,
    )>,
    /// The consolidation moves weighed this step, per NodePool they take nodes from, with
    /// each Balanced pool's score.
    pub consolidation_moves: Vec<joiner_engine::disruption::MoveVerdict>,
    /// Consolidations decided and dropped before their validation period ended (no longer the
    /// decision when looked at again), by kind.
    pub failed_validations: Vec<joiner_model::wellknown::ConsolidationType>,
    /// The zone of each instance whose termination the cloud refused or failed (`""` when not
    /// known).
    pub termination_failures: Vec<String>,
    /// Interruption messages handled and deleted from the queue.
    pub interruption_deleted: usize,
    /// For each interruption message handled, how long after its event it was (the event's
    /// `time` to now), when the event says its time.
    pub interruption_latency: Vec<std::time::Duration>,
    /// Every call the step made to the cloud, timed ([`CloudCall`]).
    pub cloud_calls: Vec<CloudCall>,
    /// The user data size in bytes of each launch template a launch created, by EC2NodeClass.
    pub user_data_bytes: Vec<(String, usize)>,
    /// Each offering a launch found out of capacity, whether the launch then succeeded on
    /// another or not.
    pub launch_failures: Vec<crate::cloud::OfferingKey>,
    /// NodeClaims node repair deleted, with the condition that broke them.
    pub repaired: Vec<Repaired>,
    /// NodeClaims whose broken node is not repaired because too many of its NodePool's nodes
    /// are broken, with what to tell (`NodeRepairBlocked`).
    pub repair_blocked: Vec<(String, String)>,
    /// What node repair's reboots did this step ([`crate::repair::reboot`]).
    pub reboots: Vec<RebootStep>,
    /// What the plan made of each CapacityBuffer, when provisioning planned this step.
    pub buffers: Option<Vec<joiner_engine::plan::PlannedBuffer>>,
    /// What failed and will be retried.
    pub errors: Vec<ControllerError>,
    /// The part of the controller each of `errors` happened in, in the same order, so failures
    /// can be counted by reconciler.
    pub errors_during: Vec<Reconciler>,
}

impl StepReport {
    /// Records a failure that a later step retries: logged with `what` was being done (which
    /// may name objects), counted by `reconciler` (which never does).
    pub fn error(&mut self, reconciler: Reconciler, what: &str, e: impl Into<ControllerError>) {
        let e = e.into();
        tracing::warn!(error = %e, reconciler = reconciler.as_str(), "{what}");
        self.errors.push(e);
        self.errors_during.push(reconciler);
    }
}

/// The part of the controller a failure happened in. A closed set: it labels metrics
/// (`joiner_controller_errors_total{reconciler}`, the `controller` of
/// `karpenter_cloudprovider_errors_total`), so however many objects fail, the series stay
/// bounded; which object failed goes to the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reconciler {
    /// Waiting for the caches to follow the API server.
    ClusterState,
    /// Batching and planning pending pods, creating NodeClaims.
    Provisioning,
    /// Launching instances for NodeClaims.
    Launching,
    /// Registration, initialization and liveness of NodeClaims and Nodes.
    Lifecycle,
    /// Consolidation, drift and expiry.
    Disruption,
    /// Draining and deleting nodes.
    Termination,
    /// Instances, launch templates and instance profiles nothing owns any more.
    GarbageCollection,
    /// The interruption queue.
    Interruption,
    /// EC2NodeClass status.
    NodeClass,
    /// NodePool status.
    NodePool,
    /// NodeOverlay status.
    NodeOverlay,
    /// Static NodePools' replicas: launching what they lack, removing what they have too many
    /// of.
    StaticCapacity,
    /// Node repair: replacing nodes whose conditions show them broken.
    Repair,
}

impl Reconciler {
    pub const ALL: [Reconciler; 13] = [
        Reconciler::ClusterState,
        Reconciler::Provisioning,
        Reconciler::Launching,
        Reconciler::Lifecycle,
        Reconciler::Disruption,
        Reconciler::Termination,
        Reconciler::GarbageCollection,
        Reconciler::Interruption,
        Reconciler::NodeClass,
        Reconciler::NodePool,
        Reconciler::NodeOverlay,
        Reconciler::StaticCapacity,
        Reconciler::Repair,
    ];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reconciler::ClusterState => "cluster_state",
            Reconciler::Provisioning => "provisioning",
            Reconciler::Launching => "launching",
            Reconciler::Lifecycle => "lifecycle",
            Reconciler::Disruption => "disruption",
            Reconciler::Termination => "termination",
            Reconciler::GarbageCollection => "garbage_collection",
            Reconciler::Interruption => "interruption",
            Reconciler::NodeClass => "nodeclass",
            Reconciler::NodePool => "nodepool",
            Reconciler::NodeOverlay => "nodeoverlay",
            Reconciler::StaticCapacity => "static_capacity",
            Reconciler::Repair => "repair",
        }
    }
}

/// An instance type a NodePool may launch, and where and at what price.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferedType {
    pub instance_type: String,
    pub cpu_cores: f64,
    pub memory_bytes: f64,
    pub offerings: Vec<OfferedAt>,
}

/// One offering of an [`OfferedType`].
#[derive(Debug, Clone, PartialEq)]
pub struct OfferedAt {
    pub zone: String,
    pub capacity_type: String,
    pub price_usd: f64,
}

/// Why a drain does not wait for a pod on its node (as Karpenter's terminator leaves them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NotDrained {
    /// A static pod's mirror: the kubelet's, not the API server's to evict.
    Mirror,
    /// It tolerates `karpenter.sh/disrupted:NoSchedule`: it would only come back.
    ToleratesDisruption,
    /// Terminating a minute past its `deletionTimestamp`: its kubelet is taken to be gone.
    StuckTerminating,
}

impl NotDrained {
    pub fn describe(self) -> &'static str {
        match self {
            NotDrained::Mirror => "it is a mirror pod of a static pod, which the kubelet owns",
            NotDrained::ToleratesDisruption => {
                "it tolerates the karpenter.sh/disrupted taint, so it would only come back"
            }
            NotDrained::StuckTerminating => {
                "it has been terminating for over a minute past its deletion time"
            }
        }
    }
}

/// What keeps a node out of voluntary disruption now, in Karpenter's words
/// (`DisruptionBlocked` on its NodeClaim and Node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DisruptionBlock {
    /// The Node is annotated `karpenter.sh/do-not-disrupt: "true"`.
    NodeAnnotated,
    /// A pod on it (`namespace/name`) is protected by `karpenter.sh/do-not-disrupt`.
    PodAnnotated(String),
    /// A PodDisruptionBudget (`namespace/name`) allows none of its pods' evictions.
    Budget(String),
}

impl DisruptionBlock {
    pub fn message(&self) -> String {
        match self {
            DisruptionBlock::NodeAnnotated => {
                r#"Disruption is blocked through the "karpenter.sh/do-not-disrupt" annotation"#
                    .to_string()
            }
            DisruptionBlock::PodAnnotated(pod) => {
                format!(r#"Pod has "karpenter.sh/do-not-disrupt" annotation (Pod={pod})"#)
            }
            DisruptionBlock::Budget(pdb) => {
                format!("Pdb prevents pod evictions (PodDisruptionBudget=[{pdb}])")
            }
        }
    }
}

/// Why a node consolidation could take is not consolidated, as far as its NodePool says
/// (`Unconsolidatable` on its NodeClaim and Node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unconsolidatable {
    /// The NodePool's `consolidateAfter` is `Never`.
    Disabled(String),
    /// The NodePool consolidates only empty nodes, and this one runs pods.
    NotEmpty(String),
}

impl Unconsolidatable {
    pub fn message(&self) -> String {
        match self {
            Unconsolidatable::Disabled(pool) => {
                format!(r#"NodePool "{pool}" has consolidation disabled"#)
            }
            Unconsolidatable::NotEmpty(pool) => format!(
                r#"NodePool "{pool}" has consolidation policy WhenEmpty, but node is not empty"#
            ),
        }
    }
}

/// What a pod's `karpenter.sh/do-not-disrupt` annotation comes to now, as Karpenter tells the
/// pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DoNotDisruptNote {
    /// A duration that still protects the pod, until then.
    Until(k8s_openapi::jiff::Timestamp),
    /// A duration that has run out: the pod no longer holds its node.
    Elapsed,
    /// A value that is neither `"true"` nor a positive duration, ignored.
    Invalid,
}

/// One NodePool's disruption budget for one reason, as the disruption step found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolBudget {
    pub nodepool: String,
    pub reason: joiner_model::wellknown::DisruptionReason,
    /// How many more nodes may be disrupted for the reason now.
    pub allowed: usize,
    /// How many of the pool's nodes are being disrupted (for any reason), counting against it.
    pub disrupting: usize,
    /// How many live nodes the pool has.
    pub nodes: usize,
}

/// One event on a NodeClaim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClaimEvent {
    pub node_claim: String,
    /// The NodeClaim's uid, when known.
    pub uid: Option<String>,
    pub kind: TerminationEvent,
    pub message: String,
}

/// A NodeClaim node repair deleted ([`crate::repair`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repaired {
    pub node_claim: String,
    pub node_pool: String,
    /// The node condition's type that broke it (`AcceleratedHardwareReady`).
    pub condition: &'static str,
    /// Its `karpenter.sh/capacity-type`, `""` if not known.
    pub capacity_type: String,
    /// The image its instance runs (`status.imageID`), `""` if not known.
    pub image_id: String,
}

/// A step of a reboot node repair made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebootStep {
    pub node_claim: String,
    pub node: String,
    pub phase: RebootPhase,
    /// What happened, as the `Rebooting` condition's message says it.
    pub message: String,
}

/// The phases of a reboot, as the `Rebooting` condition's reasons name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RebootPhase {
    /// Decided: the node is tainted and drained.
    Requested,
    /// The cloud was asked to reboot the instance.
    Issued,
    /// The node came back Ready on a new boot.
    Succeeded,
    /// It did not, or the cloud refused: the node is replaced.
    Failed(RebootFailure),
}

/// Why a reboot failed, as Karpenter v1.15's `karpenter_nodes_reboots_total{result}` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RebootFailure {
    /// The cloud refused the reboot, or kept failing for the retry window.
    ProviderError,
    /// The node did not come back Ready on a new boot in time.
    RecoveryTimeout,
    /// There was nothing to reboot (the NodeClaim names no instance).
    InvalidRequest,
}

impl RebootPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            RebootPhase::Requested => "requested",
            RebootPhase::Issued => "issued",
            RebootPhase::Succeeded => "succeeded",
            RebootPhase::Failed(_) => "failed",
        }
    }

    /// The `result` label of a reboot that ended, `None` while it goes on.
    pub fn result(self) -> Option<&'static str> {
        match self {
            RebootPhase::Requested | RebootPhase::Issued => None,
            RebootPhase::Succeeded => Some("succeeded"),
            RebootPhase::Failed(RebootFailure::ProviderError) => Some("provider_error"),
            RebootPhase::Failed(RebootFailure::RecoveryTimeout) => Some("recovery_timeout"),
            RebootPhase::Failed(RebootFailure::InvalidRequest) => Some("invalid_request"),
        }
    }
}

/// Why a [`DisruptionEvent`] happened, in the one closed set the disruption step speaks:
/// metrics and events take it as it is, never parse it back from text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DisruptionCause {
    /// One of Karpenter's disruption reasons.
    Reason(DisruptionReason),
    /// Deleted by hand (or with its NodePool): a termination with no disruption reason.
    Deleted,
    /// A drift found, by the `Drifted` condition's reason.
    Drift(DriftReason),
    /// The cloud's notice about the instance.
    Notice(InterruptionKind),
}

impl DisruptionCause {
    /// As the timeline and events write it: the reason, `Deleted`, the drift's condition
    /// reason, or the notice's recorded reason.
    pub fn as_str(self) -> &'static str {
        match self {
            DisruptionCause::Reason(r) => r.as_str(),
            DisruptionCause::Deleted => "Deleted",
            DisruptionCause::Drift(d) => d.as_str(),
            DisruptionCause::Notice(k) => k.reason(),
        }
    }

    /// The cause a text names, as [`DisruptionCause::as_str`] writes it.
    pub fn parse(text: &str) -> Option<DisruptionCause> {
        if text == "Deleted" {
            return Some(DisruptionCause::Deleted);
        }
        DisruptionReason::parse(text)
            .map(DisruptionCause::Reason)
            .or_else(|| {
                DriftReason::ALL
                    .into_iter()
                    .find(|d| d.as_str() == text)
                    .map(DisruptionCause::Drift)
            })
            .or_else(|| InterruptionKind::from_reason(text).map(DisruptionCause::Notice))
    }

    /// The disruption reason, when it is one.
    pub fn reason(self) -> Option<DisruptionReason> {
        match self {
            DisruptionCause::Reason(r) => Some(r),
            _ => None,
        }
    }
}

impl std::fmt::Display for DisruptionCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A cause equals its text (`cause == "Expired"`), as the timeline writes it.
impl PartialEq<&str> for DisruptionCause {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for DisruptionCause {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One thing the disruption step did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionEvent {
    /// `decided`, `replacing`, `evicted`, `deleted`, `aborted`, `forced` (the termination grace
    /// period ran out), `drifted` (a NodeClaim was found drifted), `interrupted` (the cloud
    /// warned that it takes an instance), `recommended` (a rebalance recommendation: recorded
    /// only).
    pub action: DisruptionAction,
    /// Why: the disruption reason; for `drifted` the kind of drift, for `interrupted` and
    /// `recommended` the notice; `Deleted` for a NodeClaim deleted by hand.
    pub reason: DisruptionCause,
    /// The NodeClaims disrupted.
    pub node_claims: Vec<String>,
    /// Replacement NodeClaims (for `replacing`), pods (for `evicted`), or a note.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub detail: Vec<String>,
}

/// One call a step made to the cloud.
#[derive(Debug, Clone, PartialEq)]
pub struct CloudCall {
    /// The part of the controller that made it.
    pub during: Reconciler,
    pub method: crate::cloud::CloudMethod,
    /// How long it took, answer or failure.
    pub took: std::time::Duration,
    /// How it failed, if it did.
    pub error: Option<crate::cloud::CloudError>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every cause reads back from the text the timeline writes, so the three vocabularies it
    /// spans never collide.
    #[test]
    fn every_cause_reads_back_from_its_text() {
        let reasons = [
            DisruptionReason::Empty,
            DisruptionReason::Underutilized,
            DisruptionReason::Expired,
            DisruptionReason::Drifted,
            DisruptionReason::Interrupted,
        ];
        let causes = reasons
            .into_iter()
            .map(DisruptionCause::Reason)
            .chain(DriftReason::ALL.into_iter().map(DisruptionCause::Drift))
            .chain(
                InterruptionKind::ALL
                    .into_iter()
                    .map(DisruptionCause::Notice),
            )
            .chain([DisruptionCause::Deleted]);
        for cause in causes {
            assert_eq!(
                DisruptionCause::parse(cause.as_str()),
                Some(cause),
                "{cause}"
            );
        }
        assert_eq!(DisruptionCause::parse("Whatever"), None);
    }
}
