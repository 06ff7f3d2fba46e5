//! Predictions checked against each node Joiner launched.
//!
//! Joiner's promise is knowing before launch what a GPU node will advertise: its time-sliced
//! replicas, MIG slices, extended resources, DRA devices and gpu-feature-discovery labels. The
//! NodeClaim carries the prediction (`status.allocatable`, its `nvidia.com/` labels, and
//! `joiner.dev/predicted-dra-devices`); a node that turns out otherwise proves it wrong:
//!
//! - [`resources`]: once the node is Ready and its startup taints are gone, its device plugin
//!   published less than predicted (or nothing after [`PUBLISH_GRACE`]);
//! - [`devices`]: once every DRA driver the plan counted on published its complete pools, one
//!   published fewer devices than its templates;
//! - [`labels`]: once gpu-feature-discovery labelled the node, it wrote another value for a
//!   label the plan predicted.
//!
//! Then:
//!
//! - the NodeClaim's `ConsistentStateFound` condition turns `False` (reason
//!   `ConsistencyCheckFailed`, Karpenter's), and the step reports the finding (a
//!   `FailedConsistencyCheck` event, a metric by instance type and resource);
//! - a short extended resource's `status.allocatable` is corrected to what the node offers, so
//!   the node initializes and is planned on for what it has, and pods that needed the rest are
//!   planned elsewhere (a node's DRA devices and labels are read from the node itself);
//! - the finding is kept (the `joiner.dev/mispredicted` annotation, and in memory once the
//!   NodeClaim is gone), and every later plan uses it for that type's prediction
//!   ([`joiner_engine::snapshot::corrections`]), until what is predicted changes.
//!
//! Karpenter's own check compares a node's capacity with 90% of its NodeClaim's once
//! initialized; a GPU node with fewer devices than predicted never initializes in Joiner (it
//! waits for every predicted device), so this check runs before initialization instead.

pub mod devices;
pub mod labels;
pub mod resources;

use std::collections::BTreeMap;
use std::time::Duration;

use joiner_engine::snapshot::corrections::Corrections;
use joiner_model::Quantity;
use joiner_model::api::nodeclaim::{NodeClaim, conditions};
use joiner_model::wellknown::{annotations, labels as well_known};
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

pub use resources::{Shortfall, shortfalls};

/// How long a Ready node may go without publishing a predicted extended resource at all before
/// the prediction is taken to be wrong: a GPU operator installing drivers on first boot takes
/// minutes, and Karpenter's registration timeout is 15.
pub const PUBLISH_GRACE: Duration = Duration::from_secs(15 * 60);

/// Karpenter's reason for a `False` `ConsistentStateFound`.
pub const REASON_FAILED: &str = "ConsistencyCheckFailed";

/// What kind of prediction a node contradicted.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "camelCase")]
pub enum Predicted {
    /// An extended resource's allocatable amount (`nvidia.com/gpu`).
    #[default]
    ExtendedResource,
    /// How many devices a DRA driver publishes (`gpu.nvidia.com`).
    DraDevices,
    /// A label gpu-feature-discovery writes (`nvidia.com/gpu.product`).
    Label,
}

impl Predicted {
    fn is_default(&self) -> bool {
        *self == Predicted::ExtendedResource
    }
}

/// One prediction a node contradicted.
#[derive(Debug, Clone, PartialEq)]
pub struct Contradiction {
    pub of: Predicted,
    /// The resource, driver or label.
    pub subject: String,
    pub predicted: String,
    pub found: String,
    /// What was found as a share of what was predicted, for amounts.
    pub share: Option<f64>,
}

impl Contradiction {
    /// As Karpenter's consistency check words it (for amounts).
    pub fn message(&self) -> String {
        let share = self
            .share
            .map(|s| format!(" ({:.1}% of expected)", s * 100.0))
            .unwrap_or_default();
        match self.of {
            Predicted::ExtendedResource => format!(
                "expected {} of resource {}, but found {}{share}",
                self.predicted, self.subject, self.found
            ),
            Predicted::DraDevices => format!(
                "expected {} devices of DRA driver {}, but found {}{share}",
                self.predicted, self.subject, self.found
            ),
            Predicted::Label => format!(
                "expected label {}={}, but found {}",
                self.subject, self.predicted, self.found
            ),
        }
    }
}

/// A NodeClaim whose Node contradicts a prediction, as the step reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Misprediction {
    pub node_claim: String,
    pub uid: Option<String>,
    pub instance_type: String,
    /// The resource, DRA driver or label.
    pub resource: String,
    /// Karpenter's wording of it.
    pub message: String,
}

/// One finding, as the annotation keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Finding {
    #[serde(default, skip_serializing_if = "Predicted::is_default")]
    of: Predicted,
    predicted: String,
    found: String,
}

/// Records the contradictions on the NodeClaim: the findings in its annotation,
/// `ConsistentStateFound` `False`, and a short extended resource's allocatable (and capacity)
/// corrected to what the node offers.
pub fn mark(
    claim: &mut NodeClaim,
    found: &[Contradiction],
    now: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) {
    let mut findings = findings(claim);
    for c in found {
        findings.insert(
            c.subject.clone(),
            Finding {
                of: c.of,
                predicted: c.predicted.clone(),
                found: c.found.clone(),
            },
        );
        if c.of != Predicted::ExtendedResource {
            continue;
        }
        let Ok(q) = Quantity::parse(&c.found) else {
            continue;
        };
        claim.status.allocatable.insert(c.subject.clone(), q);
        if let Some(cap) = claim.status.capacity.get_mut(&c.subject)
            && *cap > q
        {
            *cap = q;
        }
    }
    if let Ok(text) = serde_json::to_string(&findings) {
        claim
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(annotations::MISPREDICTED.to_string(), text);
    }
    // Earlier findings still stand: the condition names them all.
    let message: Vec<String> = findings
        .iter()
        .map(|(subject, f)| {
            Contradiction {
                of: f.of,
                subject: subject.clone(),
                predicted: f.predicted.clone(),
                found: f.found.clone(),
                share: found
                    .iter()
                    .find(|c| c.subject == *subject)
                    .and_then(|c| c.share),
            }
            .message()
        })
        .collect();
    claim.set_condition(
        conditions::CONSISTENT_STATE_FOUND,
        false,
        REASON_FAILED,
        &message.join("; "),
        now,
    );
}

/// Whether the NodeClaim already records a finding about `subject`.
pub fn already_found(claim: &NodeClaim, subject: &str) -> bool {
    findings(claim).contains_key(subject)
}

/// The findings a NodeClaim's annotation keeps; none when it has none or they do not read.
fn findings(claim: &NodeClaim) -> BTreeMap<String, Finding> {
    claim
        .annotation(annotations::MISPREDICTED)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

/// What nodes were found to offer, by the prediction they contradicted: learned from the
/// NodeClaims that carry a finding, and kept after they are gone for as long as the process
/// runs (a restart learns again from the NodeClaims still there).
#[derive(Debug, Clone, Default)]
pub struct Mispredictions {
    corrections: Corrections,
}

impl Mispredictions {
    /// Learns the findings of these NodeClaims.
    pub fn learn<'a>(&mut self, claims: impl Iterator<Item = &'a NodeClaim>) {
        for claim in claims {
            let Some(instance_type) = claim.label(well_known::INSTANCE_TYPE) else {
                continue;
            };
            for (subject, f) in findings(claim) {
                self.learn_one(instance_type, &subject, &f);
            }
        }
    }

    fn learn_one(&mut self, instance_type: &str, subject: &str, f: &Finding) {
        let c = &mut self.corrections;
        match f.of {
            Predicted::ExtendedResource => {
                if let (Ok(p), Ok(found)) =
                    (Quantity::parse(&f.predicted), Quantity::parse(&f.found))
                {
                    c.insert(instance_type, subject, p, found);
                }
            }
            Predicted::DraDevices => {
                if let (Ok(p), Ok(found)) = (f.predicted.parse(), f.found.parse()) {
                    c.insert_devices(instance_type, subject, p, found);
                }
            }
            Predicted::Label => c.insert_label(instance_type, subject, &f.predicted, &f.found),
        }
    }

    pub fn corrections(&self) -> &Corrections {
        &self.corrections
    }
}

/// How long the NodeClaim has been registered at `now` (zero when it is not).
pub fn registered_for(claim: &NodeClaim, now: Timestamp) -> Duration {
    claim
        .condition(conditions::REGISTERED)
        .filter(|c| c.status == "True")
        .and_then(|c| now.duration_since(c.last_transition_time.0).try_into().ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_model::api::nodeclaim::NodeClaimSpec;
    use joiner_model::api::nodepool::NodeClassReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    #[test]
    fn every_kind_of_finding_is_kept_and_learned() {
        let mut claim = NodeClaim::new(
            ObjectMeta {
                labels: Some(
                    [(
                        well_known::INSTANCE_TYPE.to_string(),
                        "p5.48xlarge".to_string(),
                    )]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            NodeClaimSpec::new(NodeClassReference::ec2("default")),
        );
        claim
            .status
            .allocatable
            .insert("nvidia.com/gpu".into(), Quantity::from_units(8));
        let now = Time(Timestamp::UNIX_EPOCH);
        let gpus = Shortfall {
            resource: "nvidia.com/gpu",
            predicted: Quantity::from_units(8),
            found: Quantity::from_units(4),
        };
        mark(&mut claim, &[gpus.contradiction()], now.clone());
        let devices = Contradiction {
            of: Predicted::DraDevices,
            subject: "gpu.nvidia.com".into(),
            predicted: "8".into(),
            found: "4".into(),
            share: Some(0.5),
        };
        let label = Contradiction {
            of: Predicted::Label,
            subject: "nvidia.com/gpu.product".into(),
            predicted: "NVIDIA-H100-80GB-HBM3".into(),
            found: "NVIDIA-H100".into(),
            share: None,
        };
        mark(&mut claim, &[devices, label], now);
        assert_eq!(
            claim.status.allocatable["nvidia.com/gpu"],
            Quantity::from_units(4)
        );
        let cond = claim
            .condition(conditions::CONSISTENT_STATE_FOUND)
            .expect("the condition");
        assert_eq!(cond.status, "False");
        // The first finding still stands in the message.
        assert!(
            cond.message.contains("of resource nvidia.com/gpu"),
            "{}",
            cond.message
        );
        assert!(
            cond.message
                .contains("devices of DRA driver gpu.nvidia.com")
        );
        assert!(already_found(&claim, "nvidia.com/gpu.product"));

        let mut learned = Mispredictions::default();
        learned.learn(std::iter::once(&claim));
        let c = learned.corrections();
        let mut expected = Corrections::default();
        expected.insert(
            "p5.48xlarge",
            "nvidia.com/gpu",
            Quantity::from_units(8),
            Quantity::from_units(4),
        );
        expected.insert_devices("p5.48xlarge", "gpu.nvidia.com", 8, 4);
        expected.insert_label(
            "p5.48xlarge",
            "nvidia.com/gpu.product",
            "NVIDIA-H100-80GB-HBM3",
            "NVIDIA-H100",
        );
        assert_eq!(c, &expected);
    }

    #[test]
    fn a_finding_written_before_kinds_existed_reads_as_an_extended_resource() {
        let f: BTreeMap<String, Finding> =
            serde_json::from_str(r#"{"nvidia.com/gpu": {"predicted": "4", "found": "1"}}"#)
                .expect("reads");
        assert_eq!(f["nvidia.com/gpu"].of, Predicted::ExtendedResource);
    }
}
