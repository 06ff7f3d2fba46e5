//! `karpenter.sh/do-not-disrupt`, read as Karpenter v1.12+ reads it.
//!
//! On a pod the value is `"true"` (protected for as long as it runs) or a positive Go duration
//! (`"30m"`, `"1h30m"`: protected for that long after the pod started, counted from
//! `status.startTime`, and still protected while that is unknown). Any other value protects
//! nothing, as in Karpenter, which ignores it with an event. On a node only `"true"` counts.
//!
//! Protection keeps a node out of voluntary disruption and makes a drain wait for the pod;
//! what overrides it (a NodeClaim's terminationGracePeriod, interruptions) is the caller's.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::duration::parse_duration;
use crate::wellknown::annotations;

/// What a pod's annotation says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DoNotDisrupt {
    /// `"true"`.
    Always,
    /// A positive duration, counted from the pod's start.
    For(Duration),
    /// A value Karpenter ignores (`"false"`, `"True"`, `"1d"`, `"0s"`), kept to report it.
    Ignored(String),
}

impl DoNotDisrupt {
    /// The annotation on `meta`, if set.
    pub fn of(meta: &ObjectMeta) -> Option<DoNotDisrupt> {
        let value = meta
            .annotations
            .as_ref()?
            .get(annotations::DO_NOT_DISRUPT)?;
        Some(match value.as_str() {
            "true" => DoNotDisrupt::Always,
            v => match parse_duration(v) {
                Ok(d) if !d.is_zero() => DoNotDisrupt::For(d),
                _ => DoNotDisrupt::Ignored(v.to_string()),
            },
        })
    }
}

/// Whether `pod` is protected at `now`; with no `now` (a plan of no particular moment) a
/// duration protects, as it does before the pod's start is known.
pub fn pod_protected(pod: &Pod, now: Option<Timestamp>) -> bool {
    match DoNotDisrupt::of(&pod.metadata) {
        None | Some(DoNotDisrupt::Ignored(_)) => false,
        Some(DoNotDisrupt::Always) => true,
        Some(DoNotDisrupt::For(d)) => match (protected_until(pod, d), now) {
            (Some(until), Some(now)) => now < until,
            _ => true,
        },
    }
}

/// When a pod's duration protection ends: its start plus `d` (`None` before it starts).
pub fn protected_until(pod: &Pod, d: Duration) -> Option<Timestamp> {
    let start = pod.status.as_ref()?.start_time.as_ref()?.0;
    Some(
        SignedDuration::try_from(d)
            .ok()
            .and_then(|d| start.checked_add(d).ok())
            .unwrap_or(Timestamp::MAX),
    )
}

/// Whether a node is marked: only `"true"` counts on nodes.
pub fn node_protected(meta: &ObjectMeta) -> bool {
    DoNotDisrupt::of(meta) == Some(DoNotDisrupt::Always)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(value: &str, started: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                annotations: Some(
                    [(annotations::DO_NOT_DISRUPT.to_string(), value.to_string())].into(),
                ),
                ..ObjectMeta::default()
            },
            status: started.map(|s| PodStatus {
                start_time: Some(Time(s.parse().unwrap())),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn at(s: &str) -> Option<Timestamp> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn a_duration_protects_from_the_pod_s_start_for_that_long() {
        let p = pod("30m", Some("2026-12-05T10:00:00Z"));
        assert!(pod_protected(&p, at("2026-12-05T10:29:59Z")));
        assert!(!pod_protected(&p, at("2026-12-05T10:30:00Z")));
        // Not started yet, or no moment given: protected.
        assert!(pod_protected(&pod("30m", None), at("2030-01-01T00:00:00Z")));
        assert!(pod_protected(&p, None));
        assert!(pod_protected(
            &pod("1h30m", Some("2026-12-05T10:00:00Z")),
            at("2026-12-05T11:00:00Z")
        ));
    }

    #[test]
    fn true_protects_always_and_other_values_not_at_all() {
        assert!(pod_protected(
            &pod("true", None),
            at("2030-01-01T00:00:00Z")
        ));
        for ignored in ["false", "True", "1d", "0s", "-5m", ""] {
            let p = pod(ignored, Some("2026-12-05T10:00:00Z"));
            assert!(
                !pod_protected(&p, at("2026-12-05T10:00:01Z")),
                "{ignored:?}"
            );
            assert_eq!(
                DoNotDisrupt::of(&p.metadata),
                Some(DoNotDisrupt::Ignored(ignored.to_string()))
            );
        }
    }

    #[test]
    fn nodes_count_only_true() {
        assert!(node_protected(&pod("true", None).metadata));
        assert!(!node_protected(&pod("30m", None).metadata));
    }
}
