//! Predictions checked against each node Joiner launched.
//!
//! Joiner's promise is knowing before launch what a GPU node will advertise: its time-sliced
//! replicas, MIG slices, extended resources. A NodeClaim carries the prediction
//! (`status.allocatable`); when its Node is Ready, its startup taints are gone and its device
//! plugin has published less than that (or nothing after [`PUBLISH_GRACE`]), the prediction
//! was wrong. Then:
//!
//! - the NodeClaim's `ConsistentStateFound` condition turns `False` (reason
//!   `ConsistencyCheckFailed`, Karpenter's), and the step reports the finding (a
//!   `FailedConsistencyCheck` event, a metric by instance type and resource);
//! - its `status.allocatable` is corrected to what the node offers, so the node initializes and
//!   is planned on for what it has, and pods that needed the rest are planned elsewhere;
//! - the finding is kept (the `joiner.dev/mispredicted` annotation, and in memory once the
//!   NodeClaim is gone), and every later plan uses it for that type's prediction
//!   ([`joiner_engine::snapshot::corrections`]), until what is predicted changes.
//!
//! Karpenter's own check compares a node's capacity with 90% of its NodeClaim's once
//! initialized; a GPU node with fewer devices than predicted never initializes in Joiner (it
//! waits for every predicted device), so this check runs before initialization instead.

use std::collections::BTreeMap;
use std::time::Duration;

use joiner_engine::snapshot::corrections::Corrections;
use joiner_model::Quantity;
use joiner_model::api::nodeclaim::{NodeClaim, conditions};
use joiner_model::resources::ResourceList;
use joiner_model::wellknown::{annotations, labels};
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// How long a Ready node may go without publishing a predicted extended resource at all before
/// the prediction is taken to be wrong: a GPU operator installing drivers on first boot takes
/// minutes, and Karpenter's registration timeout is 15.
pub const PUBLISH_GRACE: Duration = Duration::from_secs(15 * 60);

/// Karpenter's reason for a `False` `ConsistentStateFound`.
pub const REASON_FAILED: &str = "ConsistencyCheckFailed";

/// One resource a node offers less of than its NodeClaim predicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shortfall<'a> {
    pub resource: &'a str,
    pub predicted: Quantity,
    pub found: Quantity,
}

impl Shortfall<'_> {
    /// As Karpenter's consistency check words it.
    pub fn message(&self) -> String {
        let share = self.found.nanos() as f64 / self.predicted.nanos() as f64 * 100.0;
        format!(
            "expected {} of resource {}, but found {} ({share:.1}% of expected)",
            self.predicted, self.resource, self.found
        )
    }
}

/// A NodeClaim whose Node offers less than predicted, as the step reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misprediction {
    pub node_claim: String,
    pub uid: Option<String>,
    pub instance_type: String,
    pub resource: String,
    pub predicted: Quantity,
    pub found: Quantity,
    /// Karpenter's wording of it.
    pub message: String,
}

/// What a Ready node whose startup taints are gone offers short of its NodeClaim's prediction
/// of extended resources: `None` while it is too early to say (a predicted resource is not
/// published at all and the node has been registered for less than [`PUBLISH_GRACE`]).
pub fn shortfalls<'a>(
    predicted: &'a ResourceList,
    offered: &ResourceList,
    registered_for: Duration,
) -> Option<Vec<Shortfall<'a>>> {
    let mut out = Vec::new();
    for (resource, want) in predicted
        .iter()
        .filter(|(n, q)| n.contains('/') && !q.is_zero())
    {
        let found = offered.get(resource).copied().unwrap_or(Quantity::ZERO);
        if found >= *want {
            continue;
        }
        if found.is_zero() && registered_for < PUBLISH_GRACE {
            return None;
        }
        out.push(Shortfall {
            resource,
            predicted: *want,
            found,
        });
    }
    Some(out)
}

/// One resource's finding, as the annotation keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Finding {
    predicted: String,
    found: String,
}

/// Records the shortfalls on the NodeClaim: its allocatable corrected to what the node offers,
/// the finding in its annotation, `ConsistentStateFound` `False`.
pub fn mark(
    claim: &mut NodeClaim,
    shortfalls: &[Shortfall<'_>],
    now: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) {
    let mut findings = findings(claim);
    for s in shortfalls {
        findings.insert(
            s.resource.to_string(),
            Finding {
                predicted: s.predicted.to_string(),
                found: s.found.to_string(),
            },
        );
        claim
            .status
            .allocatable
            .insert(s.resource.to_string(), s.found);
        if let Some(c) = claim.status.capacity.get_mut(s.resource)
            && *c > s.found
        {
            *c = s.found;
        }
    }
    if let Ok(text) = serde_json::to_string(&findings) {
        claim
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(annotations::MISPREDICTED.to_string(), text);
    }
    let message: Vec<String> = shortfalls.iter().map(Shortfall::message).collect();
    claim.set_condition(
        conditions::CONSISTENT_STATE_FOUND,
        false,
        REASON_FAILED,
        &message.join("; "),
        now,
    );
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
            let Some(instance_type) = claim.label(labels::INSTANCE_TYPE) else {
                continue;
            };
            for (resource, f) in findings(claim) {
                if let (Ok(predicted), Ok(found)) =
                    (Quantity::parse(&f.predicted), Quantity::parse(&f.found))
                {
                    self.corrections
                        .insert(instance_type, &resource, predicted, found);
                }
            }
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

    fn list(pairs: &[(&str, &str)]) -> ResourceList {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap()))
            .collect()
    }

    #[test]
    fn fewer_devices_than_predicted_is_a_shortfall_at_once() {
        let predicted = list(&[("cpu", "3920m"), ("nvidia.com/gpu", "4")]);
        let offered = list(&[("cpu", "3920m"), ("nvidia.com/gpu", "1")]);
        let found = shortfalls(&predicted, &offered, Duration::ZERO).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].resource, "nvidia.com/gpu");
        assert_eq!(
            found[0].message(),
            "expected 4 of resource nvidia.com/gpu, but found 1 (25.0% of expected)"
        );
    }

    #[test]
    fn nothing_published_is_waited_for_then_a_shortfall() {
        let predicted = list(&[("nvidia.com/gpu", "1")]);
        let offered = list(&[("cpu", "4")]);
        assert_eq!(
            shortfalls(&predicted, &offered, Duration::from_secs(60)),
            None
        );
        let late = shortfalls(&predicted, &offered, PUBLISH_GRACE).unwrap();
        assert_eq!(late[0].found, Quantity::ZERO);
    }

    #[test]
    fn as_much_or_more_than_predicted_is_no_shortfall() {
        let predicted = list(&[("nvidia.com/gpu", "4"), ("cpu", "8")]);
        // Less CPU is the kubelet's reservation, not a device plugin's: only extended
        // resources are predictions of this kind.
        let offered = list(&[("nvidia.com/gpu", "8"), ("cpu", "2")]);
        assert_eq!(
            shortfalls(&predicted, &offered, Duration::ZERO),
            Some(vec![])
        );
    }
}
