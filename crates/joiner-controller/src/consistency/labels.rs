//! gpu-feature-discovery's labels: what it wrote on the Node against the `nvidia.com/` labels
//! the plan predicted (the NodeClaim's, which the Node was given at registration).
//!
//! Only a node GFD has labelled is judged (it writes `nvidia.com/gfd.timestamp` each time), and
//! only labels GFD rewrote with another value: until then the Node carries the prediction.

use joiner_model::api::NodeClaim;
use k8s_openapi::api::core::v1::Node;

use super::{Contradiction, Predicted};

/// The label gpu-feature-discovery stamps each time it labels a node.
pub const GFD_TIMESTAMP: &str = "nvidia.com/gfd.timestamp";

/// The prefix of the labels gpu-feature-discovery owns.
const GFD_PREFIX: &str = "nvidia.com/";

/// Predicted GFD labels the node carries with another value, leaving out those already
/// `known` (found before).
pub fn mismatches<'a>(
    claim: &NodeClaim,
    node: &Node,
    known: impl Fn(&str) -> bool + 'a,
) -> Vec<Contradiction> {
    let Some(on_node) = node.metadata.labels.as_ref() else {
        return Vec::new();
    };
    if !on_node.contains_key(GFD_TIMESTAMP) {
        return Vec::new();
    }
    claim
        .labels()
        .into_iter()
        .filter(|(key, _)| key.starts_with(GFD_PREFIX) && key != GFD_TIMESTAMP)
        .filter_map(|(key, want)| {
            let found = on_node.get(&key).filter(|v| **v != want)?;
            if known(&key) {
                return None;
            }
            Some(Contradiction {
                of: Predicted::Label,
                subject: key,
                predicted: want,
                found: found.clone(),
                share: None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_model::api::nodeclaim::NodeClaimSpec;
    use joiner_model::api::nodepool::NodeClassReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn labelled(pairs: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            labels: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        }
    }

    fn claim() -> NodeClaim {
        NodeClaim::new(
            labelled(&[
                ("nvidia.com/gpu.product", "Tesla-T4-SHARED"),
                ("nvidia.com/gpu.replicas", "4"),
                ("karpenter.sh/nodepool", "gpu"),
            ]),
            NodeClaimSpec::new(NodeClassReference::ec2("default")),
        )
    }

    fn node(pairs: &[(&str, &str)]) -> Node {
        Node {
            metadata: labelled(pairs),
            ..Node::default()
        }
    }

    #[test]
    fn a_label_gfd_rewrote_with_another_value_is_a_mismatch() {
        let n = node(&[
            (GFD_TIMESTAMP, "1767225600"),
            ("nvidia.com/gpu.product", "Tesla-T4"),
            ("nvidia.com/gpu.replicas", "4"),
            ("karpenter.sh/nodepool", "other"),
        ]);
        let found = mismatches(&claim(), &n, |_| false);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            found[0].message(),
            "expected label nvidia.com/gpu.product=Tesla-T4-SHARED, but found Tesla-T4"
        );
        // Once known, it is not found again.
        assert!(mismatches(&claim(), &n, |k| k == "nvidia.com/gpu.product").is_empty());
    }

    #[test]
    fn a_node_gfd_has_not_labelled_is_not_judged() {
        let n = node(&[("nvidia.com/gpu.product", "Tesla-T4")]);
        assert!(mismatches(&claim(), &n, |_| false).is_empty());
    }
}
