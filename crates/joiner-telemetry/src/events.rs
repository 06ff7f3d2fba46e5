//! Kubernetes Events, as Karpenter emits them: on pods (which NodeClaim a pending pod waits
//! for, why it cannot be placed, that a drain evicted it), on NodeClaims and their Nodes (a
//! disruption, a replacement launching, the cloud's notice about an instance, what holds a
//! termination up, a launch out of capacity), so `kubectl describe` and tools watching for
//! Karpenter's reasons keep working.
//!
//! Which events a step calls for is [`events_of`], pure; [`Recorder`] then drops the repeats as
//! Karpenter's recorder does (see its docs). Publishing them is the runtime's.

mod recorder;

use std::collections::{BTreeMap, BTreeSet};

use joiner_controller::store::ClusterStore;
use joiner_controller::{DisruptionCause, DoNotDisruptNote, NotDrained, StepReport};
use joiner_model::api::{NodeClaim, NodePool};
use joiner_model::wellknown::{
    DisruptionAction, DisruptionReason, InterruptionKind, TerminationEvent,
};

use crate::metrics::conditions::{ConditionKind, ConditionState};
use k8s_openapi::api::core::v1::{Node, Pod};

pub use recorder::Recorder;

/// What an event says, one variant per reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventKind {
    /// The plan put the pod on a NodeClaim being launched.
    Nominated,
    /// The plan could not place the pod anywhere.
    FailedScheduling,
    /// A drain evicted the pod.
    Evicted,
    /// A drain deleted the pod whatever blocked it (its node's deadline, or an interruption).
    Disrupted,
    /// A drain leaves the pod on its node, and why (Joiner's own: Karpenter says nothing).
    NotDrained(NotDrained),
    /// Termination tells about a NodeClaim (and its Node).
    Termination(TerminationEvent),
    /// The NodeClaim (and its Node) is being disrupted for this reason.
    DisruptionTerminating(DisruptionReason),
    /// A replacement NodeClaim was created for a disruption of this reason.
    DisruptionLaunching(DisruptionReason),
    /// The cloud's notice about the NodeClaim's instance.
    Interruption(InterruptionKind),
    /// The NodePool's requirements leave no instance type with an available offering.
    NoCompatibleInstanceTypes,
    /// The NodePool's budgets allow no disruption of this reason now.
    DisruptionBlocked(DisruptionReason),
    /// Something keeps the NodeClaim's node out of voluntary disruption (Karpenter's
    /// `DisruptionBlocked` on a NodeClaim and its Node).
    NodeBlocked,
    /// The NodeClaim's NodePool does not let consolidation take it.
    Unconsolidatable,
    /// The NodeClaim's node is broken, but node repair leaves it: too many of its NodePool's
    /// nodes are.
    NodeRepairBlocked,
    /// Node repair rebooted the NodeClaim's node and it came back Ready on a new boot.
    RebootObserved,
    /// Node repair's reboot failed (refused, or no new Ready boot in time); the node is
    /// replaced.
    RebootFailed,
    /// What a pod's `karpenter.sh/do-not-disrupt` comes to now.
    DoNotDisrupt(DoNotDisruptNote),
    /// The NodeClaim's Node offers less than the plan predicted (Karpenter's consistency
    /// check's reason).
    FailedConsistencyCheck,
    /// Every offering the NodeClaim allows is out of capacity; it is deleted and its pods are
    /// planned again.
    InsufficientCapacityError,
    /// A condition of a NodeClaim, NodePool, EC2NodeClass or Joiner's Node changed status: the
    /// reason is the condition's type, as Karpenter's operator library names these events.
    Transitioned(&'static str),
    /// On Joiner's own pod: another controller (Karpenter) holds its Lease, so Joiner stands
    /// down (`true`), or none does any more and Joiner acts again (`false`).
    Rival(bool),
}

impl EventKind {
    /// The event's `reason`: Karpenter's where it has one.
    pub fn reason(self) -> &'static str {
        match self {
            EventKind::Nominated => "Nominated",
            EventKind::FailedScheduling => "FailedScheduling",
            EventKind::Evicted => "Evicted",
            EventKind::Disrupted => "Disrupted",
            EventKind::NotDrained(_) => "NotDrained",
            EventKind::Termination(t) => t.as_str(),
            EventKind::DisruptionTerminating(_) => "DisruptionTerminating",
            EventKind::DisruptionLaunching(_) => "DisruptionLaunching",
            EventKind::Interruption(kind) => interruption_reason(kind),
            EventKind::InsufficientCapacityError => "InsufficientCapacityError",
            EventKind::FailedConsistencyCheck => "FailedConsistencyCheck",
            EventKind::NoCompatibleInstanceTypes => "NoCompatibleInstanceTypes",
            EventKind::DisruptionBlocked(_) | EventKind::NodeBlocked => "DisruptionBlocked",
            EventKind::Unconsolidatable => "Unconsolidatable",
            EventKind::NodeRepairBlocked => "NodeRepairBlocked",
            EventKind::RebootObserved => "RebootObserved",
            EventKind::RebootFailed => "RebootFailed",
            EventKind::DoNotDisrupt(DoNotDisruptNote::Until(_)) => "DoNotDisruptUntil",
            EventKind::DoNotDisrupt(DoNotDisruptNote::Elapsed) => "DoNotDisruptGracePeriodElapsed",
            EventKind::DoNotDisrupt(DoNotDisruptNote::Invalid) => "InvalidDoNotDisruptAnnotation",
            EventKind::Transitioned(type_) => type_,
            EventKind::Rival(true) => "AnotherControllerRunning",
            EventKind::Rival(false) => "NoOtherController",
        }
    }

    /// Whether Kubernetes shows it as a warning (as Karpenter types each reason).
    pub fn is_warning(self) -> bool {
        match self {
            EventKind::Nominated
            | EventKind::Evicted
            | EventKind::Disrupted
            | EventKind::NotDrained(_)
            | EventKind::DisruptionTerminating(_)
            | EventKind::DisruptionLaunching(_)
            | EventKind::Transitioned(_)
            | EventKind::DisruptionBlocked(_)
            | EventKind::NodeBlocked
            | EventKind::Unconsolidatable
            | EventKind::RebootObserved
            | EventKind::DoNotDisrupt(DoNotDisruptNote::Until(_) | DoNotDisruptNote::Elapsed)
            | EventKind::Interruption(InterruptionKind::RebalanceRecommendation) => false,
            EventKind::FailedScheduling
            | EventKind::InsufficientCapacityError
            | EventKind::FailedConsistencyCheck
            | EventKind::NoCompatibleInstanceTypes
            | EventKind::NodeRepairBlocked
            | EventKind::RebootFailed
            | EventKind::DoNotDisrupt(DoNotDisruptNote::Invalid)
            | EventKind::Interruption(_) => true,
            EventKind::Termination(t) => t.is_warning(),
            EventKind::Rival(running) => running,
        }
    }

    /// The Events API's `action`: what Joiner was doing.
    pub fn action(self) -> &'static str {
        match self {
            EventKind::Nominated => "Nominate",
            EventKind::FailedScheduling => "Schedule",
            EventKind::Evicted | EventKind::Disrupted | EventKind::NotDrained(_) => "Evict",
            EventKind::Termination(_) => "Terminate",
            EventKind::DisruptionTerminating(_) | EventKind::Interruption(_) => "Disrupt",
            EventKind::DisruptionLaunching(_) | EventKind::InsufficientCapacityError => "Launch",
            EventKind::FailedConsistencyCheck => "Check",
            EventKind::NoCompatibleInstanceTypes => "Schedule",
            EventKind::DisruptionBlocked(_)
            | EventKind::NodeBlocked
            | EventKind::Unconsolidatable
            | EventKind::NodeRepairBlocked
            | EventKind::DoNotDisrupt(_) => "Disrupt",
            EventKind::RebootObserved | EventKind::RebootFailed => "Reboot",
            EventKind::Transitioned(_) => "Transition",
            EventKind::Rival(true) => "StandDown",
            EventKind::Rival(false) => "Resume",
        }
    }
}

/// The reasons of Karpenter's AWS provider for each notice (a scheduled change is its
/// `InstanceUnhealthy`; Joiner's Capacity Block notice has no counterpart there).
fn interruption_reason(kind: InterruptionKind) -> &'static str {
    match kind {
        InterruptionKind::SpotInterruption => "SpotInterrupted",
        InterruptionKind::RebalanceRecommendation => "SpotRebalanceRecommendation",
        InterruptionKind::ScheduledChange => "InstanceUnhealthy",
        InterruptionKind::StateChange => "InstanceStopping",
        InterruptionKind::CapacityReservationEnding => "CapacityReservationInstanceInterrupted",
    }
}

/// What an event is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Involved {
    /// `namespace/name`.
    Pod(String),
    NodeClaim(String),
    Node(String),
    NodePool(String),
    EC2NodeClass(String),
}

/// One event to publish on one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectEvent {
    pub about: Involved,
    /// The object's uid, when known (`kubectl describe` matches on it).
    pub uid: Option<String>,
    pub kind: EventKind,
    pub message: String,
}

impl ObjectEvent {
    pub fn reason(&self) -> &'static str {
        self.kind.reason()
    }

    pub fn is_warning(&self) -> bool {
        self.kind.is_warning()
    }
}

/// What the cluster says of the objects a report names, read right after the step: uids for
/// `kubectl describe` to match events on, and the Node of each NodeClaim.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subjects {
    /// Uid of pods (`namespace/name`), NodeClaims and Nodes.
    pub uids: BTreeMap<Involved, String>,
    /// Node name of each NodeClaim that has registered one.
    pub nodes: BTreeMap<String, String>,
}

impl Subjects {
    fn event(&self, about: Involved, kind: EventKind, message: String) -> ObjectEvent {
        ObjectEvent {
            uid: self.uids.get(&about).cloned(),
            about,
            kind,
            message,
        }
    }

    /// The event on the NodeClaim and, as Karpenter also tells the Node, on its Node.
    fn on_claim(&self, claim: &str, kind: EventKind, message: String) -> Vec<ObjectEvent> {
        let mut out = vec![self.event(
            Involved::NodeClaim(claim.to_string()),
            kind,
            message.clone(),
        )];
        if let Some(node) = self.nodes.get(claim) {
            out.push(self.event(Involved::Node(node.clone()), kind, message));
        }
        out
    }
}

impl Subjects {
    /// Reads from `store` the uids of the objects `report` names and the Node of each
    /// NodeClaim. A failed read leaves that object without a uid: an event is a courtesy.
    pub fn read<S: ClusterStore>(store: &S, report: &StepReport) -> Subjects {
        let mut subjects = Subjects::default();
        for key in pods_named(report) {
            let Some((namespace, name)) = key.split_once('/') else {
                continue;
            };
            if let Ok(Some(pod)) = store.get::<Pod>(Some(namespace), name)
                && let Some(uid) = pod.metadata.uid
            {
                subjects.uids.insert(Involved::Pod(key.clone()), uid);
            }
        }
        let blocked = report
            .budgets
            .iter()
            .flatten()
            .filter(|b| b.allowed == 0)
            .map(|b| &b.nodepool);
        for name in report.no_instance_types.iter().chain(blocked) {
            if let Ok(Some(pool)) = store.get::<NodePool>(None, name)
                && let Some(uid) = pool.metadata.uid
            {
                subjects.uids.insert(Involved::NodePool(name.clone()), uid);
            }
        }
        for name in claims_named(report) {
            let Ok(Some(claim)) = store.get::<NodeClaim>(None, name) else {
                continue;
            };
            if let Some(uid) = claim.metadata.uid.clone() {
                subjects.uids.insert(Involved::NodeClaim(name.clone()), uid);
            }
            let Some(node) = claim.status.node_name.clone() else {
                continue;
            };
            if let Ok(Some(n)) = store.get::<Node>(None, &node)
                && let Some(uid) = n.metadata.uid
            {
                subjects.uids.insert(Involved::Node(node.clone()), uid);
            }
            subjects.nodes.insert(name.clone(), node);
        }
        subjects
    }
}

/// Every pod (`namespace/name`) an event of `report` may be about.
fn pods_named(report: &StepReport) -> impl Iterator<Item = &String> {
    let drained = report
        .disruption
        .iter()
        .filter(|d| {
            matches!(
                d.action,
                DisruptionAction::Evicted | DisruptionAction::Forced
            )
        })
        .flat_map(|d| &d.detail);
    report
        .nominated
        .iter()
        .map(|(p, _)| p)
        .chain(report.unschedulable.iter().map(|(p, _)| p))
        .chain(report.not_drained.iter().map(|(p, _)| p))
        .chain(report.do_not_disrupt.iter().map(|(p, _, _)| p))
        .chain(drained)
}

/// Every NodeClaim an event of `report` may be about.
fn claims_named(report: &StepReport) -> BTreeSet<&String> {
    let disrupted = report.disruption.iter().flat_map(|d| {
        let replacements = (d.action == DisruptionAction::Replacing).then_some(&d.detail);
        d.node_claims
            .iter()
            .chain(replacements.into_iter().flatten())
    });
    disrupted
        .chain(report.node_claim_events.iter().map(|e| &e.node_claim))
        .chain(report.insufficient_capacity.iter().map(|(c, _)| c))
        .chain(report.mispredicted.iter().map(|m| &m.node_claim))
        .chain(report.disruption_blocked.iter().map(|(c, _)| c))
        .chain(report.unconsolidatable.iter().map(|(c, _)| c))
        .collect()
}

/// The event on Joiner's own pod (`namespace/name`) when another controller is seen running
/// (`why`) or no longer is.
pub fn rival_event(own_pod: &str, why: Option<&str>) -> ObjectEvent {
    ObjectEvent {
        about: Involved::Pod(own_pod.to_string()),
        uid: None,
        kind: EventKind::Rival(why.is_some()),
        message: match why {
            Some(why) => format!(
                "{why}: Joiner does nothing while another controller acts on the same NodeClaims"
            ),
            None => "no other controller holds a watched Lease: Joiner acts".to_string(),
        },
    }
}

/// The events a step's report calls for, before de-duplication.
pub fn events_of(report: &StepReport, subjects: &Subjects) -> Vec<ObjectEvent> {
    let mut out = Vec::new();
    let pod = |key: &String| Involved::Pod(key.clone());
    for (p, claim) in &report.nominated {
        out.push(subjects.event(
            pod(p),
            EventKind::Nominated,
            format!("Pod should schedule on: nodeclaim/{claim}"),
        ));
    }
    for (p, reason) in &report.unschedulable {
        out.push(subjects.event(
            pod(p),
            EventKind::FailedScheduling,
            format!("Failed to schedule pod, {reason}"),
        ));
    }
    for d in &report.disruption {
        disruption_events(d, subjects, &mut out);
    }
    for (p, why) in &report.not_drained {
        out.push(subjects.event(
            pod(p),
            EventKind::NotDrained(*why),
            format!(
                "The drain of this pod's node does not wait for it: {}",
                why.describe()
            ),
        ));
    }
    for e in &report.node_claim_events {
        let kind = EventKind::Termination(e.kind);
        let mut claim = subjects.event(
            Involved::NodeClaim(e.node_claim.clone()),
            kind,
            e.message.clone(),
        );
        // The report knows the uid even when the NodeClaim is already gone.
        claim.uid = e.uid.clone().or(claim.uid);
        out.push(claim);
        // Karpenter tells the drain's troubles on the Node.
        if let Some(node) = subjects.nodes.get(&e.node_claim) {
            out.push(subjects.event(Involved::Node(node.clone()), kind, e.message.clone()));
        }
    }
    for pool in &report.no_instance_types {
        out.push(subjects.event(
            Involved::NodePool(pool.clone()),
            EventKind::NoCompatibleInstanceTypes,
            "NodePool requirements filtered out all compatible available instance types".into(),
        ));
    }
    // A pool with nodes whose budgets allow no disruption of a reason now, as Karpenter tells it.
    for b in report
        .budgets
        .iter()
        .flatten()
        .filter(|b| b.allowed == 0 && b.nodes > 0)
    {
        out.push(subjects.event(
            Involved::NodePool(b.nodepool.clone()),
            EventKind::DisruptionBlocked(b.reason),
            format!(
                "No allowed disruptions for disruption reason {} due to blocking budget",
                b.reason.as_str()
            ),
        ));
    }
    for m in &report.mispredicted {
        let mut e = subjects.event(
            Involved::NodeClaim(m.node_claim.clone()),
            EventKind::FailedConsistencyCheck,
            m.message.clone(),
        );
        e.uid = m.uid.clone().or(e.uid);
        out.push(e);
    }
    for (claim, block) in &report.disruption_blocked {
        out.extend(subjects.on_claim(claim, EventKind::NodeBlocked, block.message()));
    }
    for (claim, why) in &report.unconsolidatable {
        out.extend(subjects.on_claim(claim, EventKind::Unconsolidatable, why.message()));
    }
    for (claim, why) in &report.repair_blocked {
        out.extend(subjects.on_claim(claim, EventKind::NodeRepairBlocked, why.clone()));
    }
    for r in &report.reboots {
        let kind = match r.phase {
            joiner_controller::RebootPhase::Succeeded => EventKind::RebootObserved,
            joiner_controller::RebootPhase::Failed(_) => EventKind::RebootFailed,
            _ => continue,
        };
        out.extend(subjects.on_claim(&r.node_claim, kind, r.message.clone()));
    }
    for (p, value, note) in &report.do_not_disrupt {
        out.push(subjects.event(
            pod(p),
            EventKind::DoNotDisrupt(*note),
            do_not_disrupt_message(value, *note),
        ));
    }
    for (claim, why) in &report.insufficient_capacity {
        out.extend(subjects.on_claim(
            claim,
            EventKind::InsufficientCapacityError,
            format!("NodeClaim {claim} event: {why}"),
        ));
    }
    out
}

/// What Karpenter tells a pod of its `karpenter.sh/do-not-disrupt` (`value`).
fn do_not_disrupt_message(value: &str, note: DoNotDisruptNote) -> String {
    match note {
        DoNotDisruptNote::Until(at) => format!(
            "The karpenter.sh/do-not-disrupt grace period will elapse at {}",
            at.strftime("%Y-%m-%dT%H:%M:%SZ")
        ),
        DoNotDisruptNote::Elapsed => {
            "The karpenter.sh/do-not-disrupt grace period has elapsed, pod is now disruptable"
                .to_string()
        }
        DoNotDisruptNote::Invalid => format!(
            r#"Invalid karpenter.sh/do-not-disrupt annotation: {value:?} is neither "true" nor a positive duration, ignoring annotation"#
        ),
    }
}

/// Karpenter's events for one thing the disruption step did.
fn disruption_events(
    d: &joiner_controller::DisruptionEvent,
    subjects: &Subjects,
    out: &mut Vec<ObjectEvent>,
) {
    let pod = |key: &String| Involved::Pod(key.clone());
    let reason = d.reason.reason();
    match (d.action, reason) {
        (DisruptionAction::Evicted, _) => {
            for p in &d.detail {
                out.push(subjects.event(
                    pod(p),
                    EventKind::Evicted,
                    format!("Evicted pod: {}", d.reason),
                ));
            }
        }
        (DisruptionAction::Forced, _) => {
            for p in &d.detail {
                out.push(subjects.event(
                    pod(p),
                    EventKind::Disrupted,
                    format!(
                        "Deleted pod whatever blocked it: nodeclaim/{} ({}) must be gone by its deadline",
                        d.node_claims.join(", "),
                        d.reason
                    ),
                ));
            }
        }
        (DisruptionAction::Decided, Some(reason)) => {
            let kind = EventKind::DisruptionTerminating(reason);
            for claim in &d.node_claims {
                out.push(subjects.event(
                    Involved::NodeClaim(claim.clone()),
                    kind,
                    format!("Disrupting NodeClaim: {}", reason.as_str()),
                ));
                if let Some(node) = subjects.nodes.get(claim) {
                    out.push(subjects.event(
                        Involved::Node(node.clone()),
                        kind,
                        format!("Disrupting Node: {}", reason.as_str()),
                    ));
                }
            }
        }
        (DisruptionAction::Replacing, Some(reason)) => {
            for replacement in &d.detail {
                out.push(subjects.event(
                    Involved::NodeClaim(replacement.clone()),
                    EventKind::DisruptionLaunching(reason),
                    format!("Launching NodeClaim: {}", reason.as_str()),
                ));
            }
        }
        (DisruptionAction::Interrupted | DisruptionAction::Recommended, _) => {
            let DisruptionCause::Notice(kind) = d.reason else {
                return;
            };
            for claim in &d.node_claims {
                out.extend(subjects.on_claim(
                    claim,
                    EventKind::Interruption(kind),
                    interruption_message(kind).to_string(),
                ));
            }
        }
        _ => {}
    }
}

fn interruption_message(kind: InterruptionKind) -> &'static str {
    match kind {
        InterruptionKind::SpotInterruption => "Spot interruption warning was triggered",
        InterruptionKind::RebalanceRecommendation => "Spot rebalance recommendation was triggered",
        InterruptionKind::ScheduledChange => {
            "A scheduled maintenance of the instance was announced; it is replaced and drained before it"
        }
        InterruptionKind::StateChange => "Instance is stopping",
        InterruptionKind::CapacityReservationEnding => {
            "Capacity Reservation interruption warning was triggered"
        }
    }
}

#[cfg(test)]
mod tests;

/// The condition types whose transitions are told, by the names Karpenter and the kubelet
/// give them (a closed set: the event's reason is the type).
const TOLD_CONDITIONS: [&str; 24] = [
    "Launched",
    "Registered",
    "Initialized",
    "Ready",
    "Drifted",
    "Consolidatable",
    "ConsistentStateFound",
    "DisruptionReason",
    "Interrupted",
    "Drained",
    "VolumesDetached",
    "InstanceTerminating",
    "NodeClassReady",
    "ValidationSucceeded",
    "SubnetsReady",
    "SecurityGroupsReady",
    "AMIsReady",
    "InstanceProfileReady",
    "CapacityReservationsReady",
    "MemoryPressure",
    "DiskPressure",
    "PIDPressure",
    "NetworkUnavailable",
    "NodeRegistrationHealthy",
];

/// Events for the conditions that changed status between two looks at the cluster, worded
/// as Karpenter's operator library words them (`Status condition transitioned, Type: Ready,
/// Status: False -> True, Reason: Ready`). Conditions that appear or vanish are not
/// transitions; the first look (`before` empty after a restart) tells nothing.
pub fn transition_events(before: &[ConditionState], after: &[ConditionState]) -> Vec<ObjectEvent> {
    let was: BTreeMap<(ConditionKind, &str, &str), &ConditionState> = before
        .iter()
        .map(|c| ((c.kind, c.name.as_str(), c.type_.as_str()), c))
        .collect();
    let mut out = Vec::new();
    for c in after {
        let Some(old) = was.get(&(c.kind, c.name.as_str(), c.type_.as_str())) else {
            continue;
        };
        if old.status == c.status {
            continue;
        }
        let Some(type_) = TOLD_CONDITIONS.iter().find(|t| **t == c.type_) else {
            continue;
        };
        let about = match c.kind {
            ConditionKind::NodeClaim => Involved::NodeClaim(c.name.clone()),
            ConditionKind::NodePool => Involved::NodePool(c.name.clone()),
            ConditionKind::EC2NodeClass => Involved::EC2NodeClass(c.name.clone()),
            ConditionKind::Node => Involved::Node(c.name.clone()),
        };
        let mut message = format!(
            "Status condition transitioned, Type: {}, Status: {} -> {}, Reason: {}",
            c.type_, old.status, c.status, c.reason
        );
        if !c.message.is_empty() {
            message.push_str(&format!(", Message: {}", c.message));
        }
        out.push(ObjectEvent {
            about,
            uid: c.uid.clone(),
            kind: EventKind::Transitioned(type_),
            message,
        });
    }
    out
}
