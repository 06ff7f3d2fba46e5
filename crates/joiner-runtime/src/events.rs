//! Kubernetes Events: on pods, which NodeClaim a pending pod waits for, why a pod cannot be
//! placed, and that a drain evicted or deleted it, so `kubectl describe pod` answers "why is my
//! pod pending?" and "why did it move?"; on NodeClaims, what holds their termination up.
//!
//! Reasons are Karpenter's (`Nominated`, `Evicted`, `AwaitingVolumeDetachment`: Normal;
//! `FailedScheduling`, `Disrupted`, `FailedDraining`, `TerminationGracePeriodExpiring`,
//! `FailedTermination`: Warning), so tools that watch for them keep working. The controller
//! steps every second and plans the same pending pods again and again; an event is published
//! again for an object only when its message changes or after [`REPEAT_AFTER`], so the API
//! server is not flooded.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use joiner_controller::{NotDrained, StepReport};
use joiner_model::wellknown::{DisruptionAction, TerminationEvent};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use tokio::sync::mpsc;

/// How long the same event for the same object is not published again.
pub const REPEAT_AFTER: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The plan put the pod on a NodeClaim being launched.
    Nominated,
    /// The plan could not place the pod anywhere.
    FailedScheduling,
    /// A drain evicted the pod.
    Evicted,
    /// A drain deleted the pod whatever blocked it (its node's deadline, or an interruption).
    Disrupted,
    /// A drain leaves the pod on its node, and why.
    NotDrained(NotDrained),
    /// Termination tells about a NodeClaim.
    Termination(TerminationEvent),
    /// On Joiner's own pod: another controller (Karpenter) holds its Lease, so Joiner stands
    /// down (`true`), or none does any more and Joiner acts again (`false`).
    Rival(bool),
}

/// What an event is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Involved {
    /// `namespace/name`.
    Pod(String),
    NodeClaim(String),
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
        match self.kind {
            EventKind::Nominated => "Nominated",
            EventKind::FailedScheduling => "FailedScheduling",
            EventKind::Evicted => "Evicted",
            EventKind::Disrupted => "Disrupted",
            // Joiner's own: Karpenter leaves these pods without a word.
            EventKind::NotDrained(_) => "NotDrained",
            EventKind::Termination(t) => t.as_str(),
            EventKind::Rival(true) => "AnotherControllerRunning",
            EventKind::Rival(false) => "NoOtherController",
        }
    }

    fn warning(&self) -> bool {
        match self.kind {
            EventKind::Nominated | EventKind::Evicted | EventKind::NotDrained(_) => false,
            EventKind::FailedScheduling | EventKind::Disrupted => true,
            EventKind::Termination(t) => t.is_warning(),
            EventKind::Rival(running) => running,
        }
    }

    fn to_event(&self) -> Event {
        Event {
            type_: if self.warning() {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: self.reason().to_string(),
            // The Events API caps notes at 1 kB; the plan's reasons can be longer.
            note: Some(truncate(&self.message, 1000)),
            action: match self.kind {
                EventKind::Nominated => "Nominate",
                EventKind::FailedScheduling => "Schedule",
                EventKind::Evicted | EventKind::Disrupted | EventKind::NotDrained(_) => "Evict",
                EventKind::Termination(_) => "Terminate",
                EventKind::Rival(true) => "StandDown",
                EventKind::Rival(false) => "Resume",
            }
            .to_string(),
            secondary: None,
        }
    }

    fn reference(&self) -> ObjectReference {
        match &self.about {
            Involved::Pod(key) => {
                let (namespace, name) = key.split_once('/').unwrap_or(("default", key.as_str()));
                ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    namespace: Some(namespace.to_string()),
                    name: Some(name.to_string()),
                    uid: self.uid.clone(),
                    ..ObjectReference::default()
                }
            }
            Involved::NodeClaim(name) => ObjectReference {
                api_version: Some(joiner_model::api::nodeclaim::API_VERSION.into()),
                kind: Some(joiner_model::api::nodeclaim::KIND.into()),
                name: Some(name.clone()),
                uid: self.uid.clone(),
                ..ObjectReference::default()
            },
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
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

/// The events a step's report calls for. `uids` maps `namespace/name` to the pod's uid.
pub fn events_of(report: &StepReport, uids: &BTreeMap<String, String>) -> Vec<ObjectEvent> {
    let pod = |key: &String, kind: EventKind, message: String| ObjectEvent {
        about: Involved::Pod(key.clone()),
        uid: uids.get(key).cloned(),
        kind,
        message,
    };
    let nominated = report.nominated.iter().map(|(p, claim)| {
        pod(
            p,
            EventKind::Nominated,
            format!("Joiner is launching nodeclaim/{claim} for this pod; it will run there once the node is ready"),
        )
    });
    let failed = report.unschedulable.iter().map(|(p, reason)| {
        pod(
            p,
            EventKind::FailedScheduling,
            format!("Joiner cannot place this pod on any node it could launch: {reason}"),
        )
    });
    let drained = report.disruption.iter().flat_map(|d| {
        let kind = match d.action {
            DisruptionAction::Evicted => Some(EventKind::Evicted),
            DisruptionAction::Forced => Some(EventKind::Disrupted),
            _ => None,
        };
        let claims = d.node_claims.join(", ");
        kind.into_iter().flat_map(move |kind| {
            let claims = claims.clone();
            let reason = d.reason.clone();
            d.detail.iter().map(move |p| {
                let message = match kind {
                    EventKind::Disrupted => format!(
                        "Deleted pod whatever blocked it: nodeclaim/{claims} ({reason}) must be gone by its deadline"
                    ),
                    _ => format!("Evicted pod: draining nodeclaim/{claims} ({reason})"),
                };
                pod(p, kind, message)
            })
        })
    });
    let left = report.not_drained.iter().map(|(p, why)| {
        pod(
            p,
            EventKind::NotDrained(*why),
            format!(
                "The drain of this pod's node does not wait for it: {}",
                why.describe()
            ),
        )
    });
    let claims = report.node_claim_events.iter().map(|e| ObjectEvent {
        about: Involved::NodeClaim(e.node_claim.clone()),
        uid: e.uid.clone(),
        kind: EventKind::Termination(e.kind),
        message: e.message.clone(),
    });
    nominated
        .chain(failed)
        .chain(drained)
        .chain(left)
        .chain(claims)
        .collect()
}

/// What was last published for each pod, and when: an event is repeated only when it says
/// something new or after the memory of it has faded.
#[derive(Debug)]
pub struct EventMemory {
    ttl: Duration,
    last: BTreeMap<Involved, (&'static str, String, Instant)>,
}

impl EventMemory {
    pub fn new(ttl: Duration) -> EventMemory {
        EventMemory {
            ttl,
            last: BTreeMap::new(),
        }
    }

    /// Whether `event` should be published at `now`; if so, remembers it.
    pub fn should_publish(&mut self, event: &ObjectEvent, now: Instant) -> bool {
        self.last
            .retain(|_, (_, _, at)| now.saturating_duration_since(*at) < self.ttl);
        let same = self
            .last
            .get(&event.about)
            .is_some_and(|(reason, message, _)| {
                *reason == event.reason() && *message == event.message
            });
        if same {
            return false;
        }
        self.last.insert(
            event.about.clone(),
            (event.reason(), event.message.clone(), now),
        );
        true
    }

    /// Pods remembered now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.last.len()
    }
}

/// Publishes the events sent on `rx` through `recorder`, de-duplicated, until the sender is
/// dropped. Failures are logged: an event is a courtesy, not a decision.
pub async fn publish(recorder: Recorder, mut rx: mpsc::Receiver<Vec<ObjectEvent>>) {
    let mut memory = EventMemory::new(REPEAT_AFTER);
    while let Some(batch) = rx.recv().await {
        let now = Instant::now();
        for event in batch {
            if !memory.should_publish(&event, now) {
                continue;
            }
            if let Err(e) = recorder
                .publish(&event.to_event(), &event.reference())
                .await
            {
                tracing::warn!(about = ?event.about, reason = event.reason(), error = %e, "could not publish an event");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> StepReport {
        StepReport {
            nominated: vec![("lab/a".into(), "gpu-1".into())],
            unschedulable: vec![("lab/b".into(), "needs 9 GPUs".into())],
            ..StepReport::default()
        }
    }

    #[test]
    fn standing_down_is_a_warning_on_joiners_own_pod_and_resuming_is_normal() {
        let down = rival_event(
            "kube-system/joiner-0",
            Some("Karpenter is running: k-1 holds Lease x"),
        );
        assert_eq!(down.about, Involved::Pod("kube-system/joiner-0".into()));
        assert_eq!(down.reason(), "AnotherControllerRunning");
        let event = down.to_event();
        assert_eq!(event.type_, EventType::Warning);
        assert!(
            event
                .note
                .as_deref()
                .is_some_and(|n| n.contains("k-1 holds Lease x"))
        );
        let reference = down.reference();
        assert_eq!(
            (
                reference.kind.as_deref(),
                reference.namespace.as_deref(),
                reference.name.as_deref()
            ),
            (Some("Pod"), Some("kube-system"), Some("joiner-0"))
        );
        let up = rival_event("kube-system/joiner-0", None);
        assert_eq!(up.reason(), "NoOtherController");
        assert_eq!(up.to_event().type_, EventType::Normal);
    }

    #[test]
    fn a_report_gives_nominated_and_failed_scheduling_events() {
        let uids = [("lab/a".to_string(), "uid-a".to_string())].into();
        let events = events_of(&report(), &uids);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].reason(), "Nominated");
        assert_eq!(events[0].uid.as_deref(), Some("uid-a"));
        assert!(events[0].message.contains("nodeclaim/gpu-1"));
        assert_eq!(events[1].reason(), "FailedScheduling");
        assert_eq!(events[1].uid, None);
        assert!(events[1].message.contains("needs 9 GPUs"));
        let e = events[1].to_event();
        assert_eq!(e.type_, EventType::Warning);
        assert_eq!(events[0].about, Involved::Pod("lab/a".into()));
        let r = events[0].reference();
        assert_eq!(
            (r.kind.as_deref(), r.namespace.as_deref(), r.name.as_deref()),
            (Some("Pod"), Some("lab"), Some("a"))
        );
    }

    #[test]
    fn the_same_event_is_not_repeated_every_step() {
        let mut memory = EventMemory::new(REPEAT_AFTER);
        let t0 = Instant::now();
        let events = events_of(&report(), &BTreeMap::new());
        let published = |memory: &mut EventMemory, at: Instant| {
            events
                .iter()
                .filter(|e| memory.should_publish(e, at))
                .count()
        };
        assert_eq!(published(&mut memory, t0), 2);
        // Every second for four minutes: nothing new.
        for s in 1..240 {
            assert_eq!(published(&mut memory, t0 + Duration::from_secs(s)), 0);
        }
        // Once the memory has faded, the events are said again.
        assert_eq!(published(&mut memory, t0 + REPEAT_AFTER), 2);
    }

    #[test]
    fn a_new_message_for_a_pod_is_published_at_once() {
        let mut memory = EventMemory::new(REPEAT_AFTER);
        let t0 = Instant::now();
        let mut e = events_of(&report(), &BTreeMap::new()).remove(0);
        assert!(memory.should_publish(&e, t0));
        e.message = "Joiner is launching nodeclaim/gpu-2".into();
        assert!(memory.should_publish(&e, t0 + Duration::from_secs(1)));
        // The pod went from nominated to unschedulable: that is news too.
        e.kind = EventKind::FailedScheduling;
        assert!(memory.should_publish(&e, t0 + Duration::from_secs(2)));
        assert!(!memory.should_publish(&e, t0 + Duration::from_secs(3)));
    }

    #[test]
    fn pods_no_longer_mentioned_are_forgotten() {
        let mut memory = EventMemory::new(Duration::from_secs(60));
        let t0 = Instant::now();
        for i in 0..100 {
            let e = ObjectEvent {
                about: Involved::Pod(format!("ns/p{i}")),
                uid: None,
                kind: EventKind::Nominated,
                message: "m".into(),
            };
            assert!(memory.should_publish(&e, t0));
        }
        assert_eq!(memory.len(), 100);
        let later = ObjectEvent {
            about: Involved::Pod("ns/other".into()),
            uid: None,
            kind: EventKind::Nominated,
            message: "m".into(),
        };
        assert!(memory.should_publish(&later, t0 + Duration::from_secs(61)));
        assert_eq!(memory.len(), 1);
    }

    #[test]
    fn drains_and_termination_give_karpenters_events() {
        use joiner_controller::{DisruptionEvent, NodeClaimEvent};
        let report = StepReport {
            disruption: vec![
                DisruptionEvent {
                    action: DisruptionAction::Evicted,
                    reason: "Deleted".into(),
                    node_claims: vec!["gpu-1".into()],
                    detail: vec!["lab/a".into(), "lab/b".into()],
                },
                DisruptionEvent {
                    action: DisruptionAction::Forced,
                    reason: "Expired".into(),
                    node_claims: vec!["gpu-2".into()],
                    detail: vec!["lab/c".into()],
                },
            ],
            node_claim_events: vec![NodeClaimEvent {
                node_claim: "gpu-1".into(),
                uid: Some("uid-1".into()),
                kind: TerminationEvent::FailedDraining,
                message: "the drain waits for lab/d".into(),
            }],
            ..StepReport::default()
        };
        let events = events_of(&report, &BTreeMap::new());
        let said: Vec<(&str, bool)> = events.iter().map(|e| (e.reason(), e.warning())).collect();
        assert_eq!(
            said,
            [
                ("Evicted", false),
                ("Evicted", false),
                ("Disrupted", true),
                ("FailedDraining", true)
            ]
        );
        assert!(
            events[0].message.contains("nodeclaim/gpu-1"),
            "{}",
            events[0].message
        );
        let r = events[3].reference();
        assert_eq!(
            (
                r.kind.as_deref(),
                r.name.as_deref(),
                r.uid.as_deref(),
                r.namespace
            ),
            (Some("NodeClaim"), Some("gpu-1"), Some("uid-1"), None)
        );
    }

    #[test]
    fn long_reasons_are_cut_to_what_the_api_accepts() {
        let long = "é".repeat(800);
        let cut = truncate(&long, 1000);
        assert!(cut.len() <= 1000);
        assert!(cut.ends_with("..."));
        assert_eq!(truncate("short", 1000), "short");
    }
}
