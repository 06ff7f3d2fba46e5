//! Kubernetes Events on pods: which NodeClaim a pending pod waits for, and why a pod cannot be
//! placed, so `kubectl describe pod` answers "why is my pod pending?".
//!
//! Reasons are Karpenter's (`Nominated`, Normal; `FailedScheduling`, Warning), so tools that
//! watch for them keep working. The controller steps every second and plans the same pending
//! pods again and again; an event is published again for a pod only when its message changes or
//! after [`REPEAT_AFTER`], so the API server is not flooded.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use joiner_controller::StepReport;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use tokio::sync::mpsc;

/// How long the same event for the same pod is not published again.
pub const REPEAT_AFTER: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodEventKind {
    /// The plan put the pod on a NodeClaim being launched.
    Nominated,
    /// The plan could not place the pod anywhere.
    FailedScheduling,
}

/// One event to publish on one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEvent {
    /// `namespace/name`.
    pub pod: String,
    /// The pod's uid, when the cluster still has the pod (`kubectl describe` matches on it).
    pub uid: Option<String>,
    pub kind: PodEventKind,
    pub message: String,
}

impl PodEvent {
    pub fn reason(&self) -> &'static str {
        match self.kind {
            PodEventKind::Nominated => "Nominated",
            PodEventKind::FailedScheduling => "FailedScheduling",
        }
    }

    fn to_event(&self) -> Event {
        Event {
            type_: match self.kind {
                PodEventKind::Nominated => EventType::Normal,
                PodEventKind::FailedScheduling => EventType::Warning,
            },
            reason: self.reason().to_string(),
            // The Events API caps notes at 1 kB; the plan's reasons can be longer.
            note: Some(truncate(&self.message, 1000)),
            action: match self.kind {
                PodEventKind::Nominated => "Nominate".to_string(),
                PodEventKind::FailedScheduling => "Schedule".to_string(),
            },
            secondary: None,
        }
    }

    fn reference(&self) -> ObjectReference {
        let (namespace, name) = self
            .pod
            .split_once('/')
            .unwrap_or(("default", self.pod.as_str()));
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(namespace.to_string()),
            name: Some(name.to_string()),
            uid: self.uid.clone(),
            ..ObjectReference::default()
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

/// The events a step's report calls for. `uids` maps `namespace/name` to the pod's uid.
pub fn events_of(report: &StepReport, uids: &BTreeMap<String, String>) -> Vec<PodEvent> {
    let nominated = report.nominated.iter().map(|(pod, claim)| PodEvent {
        pod: pod.clone(),
        uid: uids.get(pod).cloned(),
        kind: PodEventKind::Nominated,
        message: format!("Joiner is launching nodeclaim/{claim} for this pod; it will run there once the node is ready"),
    });
    let failed = report.unschedulable.iter().map(|(pod, reason)| PodEvent {
        pod: pod.clone(),
        uid: uids.get(pod).cloned(),
        kind: PodEventKind::FailedScheduling,
        message: format!("Joiner cannot place this pod on any node it could launch: {reason}"),
    });
    nominated.chain(failed).collect()
}

/// What was last published for each pod, and when: an event is repeated only when it says
/// something new or after the memory of it has faded.
#[derive(Debug)]
pub struct EventMemory {
    ttl: Duration,
    last: BTreeMap<String, (&'static str, String, Instant)>,
}

impl EventMemory {
    pub fn new(ttl: Duration) -> EventMemory {
        EventMemory {
            ttl,
            last: BTreeMap::new(),
        }
    }

    /// Whether `event` should be published at `now`; if so, remembers it.
    pub fn should_publish(&mut self, event: &PodEvent, now: Instant) -> bool {
        self.last
            .retain(|_, (_, _, at)| now.saturating_duration_since(*at) < self.ttl);
        let same = self
            .last
            .get(&event.pod)
            .is_some_and(|(reason, message, _)| {
                *reason == event.reason() && *message == event.message
            });
        if same {
            return false;
        }
        self.last.insert(
            event.pod.clone(),
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
pub async fn publish(recorder: Recorder, mut rx: mpsc::Receiver<Vec<PodEvent>>) {
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
                tracing::warn!(pod = %event.pod, reason = event.reason(), error = %e, "could not publish an event");
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
        e.kind = PodEventKind::FailedScheduling;
        assert!(memory.should_publish(&e, t0 + Duration::from_secs(2)));
        assert!(!memory.should_publish(&e, t0 + Duration::from_secs(3)));
    }

    #[test]
    fn pods_no_longer_mentioned_are_forgotten() {
        let mut memory = EventMemory::new(Duration::from_secs(60));
        let t0 = Instant::now();
        for i in 0..100 {
            let e = PodEvent {
                pod: format!("ns/p{i}"),
                uid: None,
                kind: PodEventKind::Nominated,
                message: "m".into(),
            };
            assert!(memory.should_publish(&e, t0));
        }
        assert_eq!(memory.len(), 100);
        let later = PodEvent {
            pod: "ns/other".into(),
            uid: None,
            kind: PodEventKind::Nominated,
            message: "m".into(),
        };
        assert!(memory.should_publish(&later, t0 + Duration::from_secs(61)));
        assert_eq!(memory.len(), 1);
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
