//! Extended resources: what the device plugin publishes in the Node's allocatable.

use std::time::Duration;

use joiner_model::Quantity;
use joiner_model::resources::ResourceList;

use super::{Contradiction, PUBLISH_GRACE, Predicted};

/// One resource a node offers less of than its NodeClaim predicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shortfall<'a> {
    pub resource: &'a str,
    pub predicted: Quantity,
    pub found: Quantity,
}

impl Shortfall<'_> {
    pub fn contradiction(&self) -> Contradiction {
        Contradiction {
            of: Predicted::ExtendedResource,
            subject: self.resource.to_string(),
            predicted: self.predicted.to_string(),
            found: self.found.to_string(),
            share: Some(self.found.nanos() as f64 / self.predicted.nanos() as f64),
        }
    }
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
            found[0].contradiction().message(),
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
