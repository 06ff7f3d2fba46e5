//! Publishing the Kubernetes Events a step calls for ([`joiner_telemetry::events`]) through
//! kube-rs's recorder, after Karpenter's de-duplication.

use std::time::Instant;

use joiner_telemetry::events::{Involved, ObjectEvent, Recorder as Deduplicator};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use tokio::sync::mpsc;

fn to_event(e: &ObjectEvent) -> Event {
    Event {
        type_: if e.is_warning() {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: e.reason().to_string(),
        // The Events API caps notes at 1 kB; the plan's reasons can be longer.
        note: Some(truncate(&e.message, 1000)),
        action: e.kind.action().to_string(),
        secondary: None,
    }
}

fn reference(e: &ObjectEvent) -> ObjectReference {
    let uid = e.uid.clone();
    match &e.about {
        Involved::Pod(key) => {
            let (namespace, name) = key.split_once('/').unwrap_or(("default", key.as_str()));
            ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(namespace.to_string()),
                name: Some(name.to_string()),
                uid,
                ..ObjectReference::default()
            }
        }
        Involved::NodeClaim(name) => ObjectReference {
            api_version: Some(joiner_model::api::nodeclaim::API_VERSION.into()),
            kind: Some(joiner_model::api::nodeclaim::KIND.into()),
            name: Some(name.clone()),
            uid,
            ..ObjectReference::default()
        },
        Involved::Node(name) => ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(name.clone()),
            uid,
            ..ObjectReference::default()
        },
        Involved::NodePool(name) => ObjectReference {
            api_version: Some(joiner_model::api::nodeclaim::API_VERSION.into()),
            kind: Some("NodePool".into()),
            name: Some(name.clone()),
            uid,
            ..ObjectReference::default()
        },
        Involved::EC2NodeClass(name) => ObjectReference {
            api_version: Some("karpenter.k8s.aws/v1".into()),
            kind: Some("EC2NodeClass".into()),
            name: Some(name.clone()),
            uid,
            ..ObjectReference::default()
        },
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

/// Publishes the events sent on `rx` through `recorder`, de-duplicated as Karpenter's recorder
/// does, until the sender is dropped. Failures are logged: an event is a courtesy, not a
/// decision.
pub async fn publish(recorder: Recorder, mut rx: mpsc::Receiver<Vec<ObjectEvent>>) {
    let started = Instant::now();
    let mut dedup = Deduplicator::default();
    while let Some(batch) = rx.recv().await {
        let now = started.elapsed();
        for event in batch {
            if !dedup.should_publish(&event, now) {
                continue;
            }
            if let Err(e) = recorder
                .publish(&to_event(&event), &reference(&event))
                .await
            {
                tracing::warn!(about = ?event.about, reason = event.reason(), error = %e, "could not publish an event");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use joiner_telemetry::events::{EventKind, rival_event};

    use super::*;

    #[test]
    fn events_name_their_object_as_the_api_server_expects() {
        let down = rival_event("kube-system/joiner-0", Some("Karpenter is running"));
        let (event, r) = (to_event(&down), reference(&down));
        assert_eq!(event.type_, EventType::Warning);
        assert_eq!(
            (event.reason.as_str(), event.action.as_str()),
            ("AnotherControllerRunning", "StandDown")
        );
        assert_eq!(
            (r.kind.as_deref(), r.namespace.as_deref(), r.name.as_deref()),
            (Some("Pod"), Some("kube-system"), Some("joiner-0"))
        );
        let on_node = ObjectEvent {
            about: Involved::Node("ip-1".into()),
            uid: Some("u".into()),
            kind: EventKind::InsufficientCapacityError,
            message: "m".into(),
        };
        let r = reference(&on_node);
        assert_eq!(
            (
                r.api_version.as_deref(),
                r.kind.as_deref(),
                r.name.as_deref(),
                r.uid.as_deref(),
                r.namespace
            ),
            (Some("v1"), Some("Node"), Some("ip-1"), Some("u"), None)
        );
        let on_claim = ObjectEvent {
            about: Involved::NodeClaim("gpu-1".into()),
            ..on_node
        };
        let r = reference(&on_claim);
        assert_eq!(
            (r.api_version.as_deref(), r.kind.as_deref()),
            (Some("karpenter.sh/v1"), Some("NodeClaim"))
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
