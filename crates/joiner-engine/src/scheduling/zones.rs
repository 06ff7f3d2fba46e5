//! A pending pod's effective zone, as Karpenter's scheduler counts pending pods by zone
//! (`karpenter_scheduler_pending_pods_by_effective_zone_count`): the one zone its node
//! selector and required node affinity (volume zones included) leave it, `flexible` when they
//! leave several or do not restrict zones, `none` when they leave none.
//!
//! Like Karpenter's, it is the pod's own restriction: NodePools, offerings and capacity are
//! not consulted. Karpenter also narrows by the zones a zone topology spread allows now; Joiner
//! does not, so a spread pod counts as its selectors say.

use std::collections::BTreeSet;

use joiner_model::wellknown::labels;

use super::pod::PodInfo;

/// Where a pending pod can run, as far as its own zone restrictions go.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum EffectiveZone {
    Zone(String),
    Flexible,
    None,
}

impl EffectiveZone {
    /// Karpenter's `zone` label value.
    pub fn label(&self) -> &str {
        match self {
            EffectiveZone::Zone(z) => z,
            EffectiveZone::Flexible => "flexible",
            EffectiveZone::None => "none",
        }
    }
}

/// The effective zone of a pod: the zones its alternatives (ORed required terms) allow, taken
/// together.
pub fn effective_zone(pod: &PodInfo) -> EffectiveZone {
    let mut zones = BTreeSet::new();
    for alternative in &pod.node_requirements {
        let Some(allowed) = alternative
            .get(labels::ZONE)
            .and_then(|r| r.allowed_values())
        else {
            return EffectiveZone::Flexible;
        };
        zones.extend(allowed.map(str::to_string));
    }
    let mut zones = zones.into_iter();
    match (zones.next(), zones.next()) {
        (None, _) => EffectiveZone::None,
        (Some(zone), None) => EffectiveZone::Zone(zone),
        (Some(_), Some(_)) => EffectiveZone::Flexible,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_model::Source;
    use k8s_openapi::api::core::v1::Pod;

    /// A pod with this `spec` (JSON), compiled.
    fn pod(spec: serde_json::Value) -> PodInfo {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ml"},
            "spec": spec,
        }))
        .expect("a pod");
        PodInfo::compile(&pod, &Source::default()).expect("compiles")
    }

    fn affinity(terms: &[&str]) -> serde_json::Value {
        let terms: Vec<serde_json::Value> = terms
            .iter()
            .map(|z| {
                serde_json::json!({"matchExpressions": [
                    {"key": labels::ZONE, "operator": "In", "values": [z]}
                ]})
            })
            .collect();
        serde_json::json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms
        }}})
    }

    #[test]
    fn one_zone_left_is_the_zone_several_or_none_restricted_are_flexible() {
        let one = pod(serde_json::json!({"containers": [],
            "nodeSelector": {labels::ZONE: "us-east-1a"}}));
        assert_eq!(
            effective_zone(&one),
            EffectiveZone::Zone("us-east-1a".into())
        );
        let either = pod(serde_json::json!({"containers": [],
            "affinity": affinity(&["us-east-1a", "us-east-1b"])}));
        assert_eq!(effective_zone(&either), EffectiveZone::Flexible);
        let any = pod(serde_json::json!({"containers": []}));
        assert_eq!(effective_zone(&any), EffectiveZone::Flexible);
        // The selector and the only affinity term contradict each other: no zone at all.
        let neither = pod(serde_json::json!({"containers": [],
            "nodeSelector": {labels::ZONE: "us-east-1a"},
            "affinity": affinity(&["us-east-1b"])}));
        assert_eq!(effective_zone(&neither), EffectiveZone::None);
        assert_eq!(EffectiveZone::None.label(), "none");
    }
}
