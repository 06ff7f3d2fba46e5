//! Predictions that running nodes proved wrong. Joiner predicts before launch what a node will
//! advertise (time-sliced GPU replicas, MIG slices, devices); when a node of a type registers
//! with less, the controller records what it found, and plans from then on use that instead of
//! the prediction, so pods are not planned onto capacity that does not exist.
//!
//! A correction is keyed by the prediction it corrects (type, resource and the predicted
//! amount): when the catalog, an overlay or a NodePool's device-plugin config changes what is
//! predicted, the old finding no longer applies and the new prediction is trusted again.

use std::collections::BTreeMap;

use joiner_model::Quantity;

use crate::scheduling::LaunchOption;

/// What nodes were found to offer, by the prediction they contradicted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Corrections {
    /// (instance type, resource, predicted) to found.
    found: BTreeMap<(String, String, Quantity), Quantity>,
}

impl Corrections {
    /// Nodes of `instance_type` predicted to offer `predicted` of `resource` offer `found`.
    pub fn insert(
        &mut self,
        instance_type: &str,
        resource: &str,
        predicted: Quantity,
        found: Quantity,
    ) {
        self.found.insert(
            (instance_type.to_string(), resource.to_string(), predicted),
            found,
        );
    }

    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    /// Every correction, as (instance type, resource, predicted, found).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, Quantity, Quantity)> {
        self.found
            .iter()
            .map(|((t, r, p), f)| (t.as_str(), r.as_str(), *p, *f))
    }

    /// Applies the corrections to a launch option whose prediction they contradict.
    pub fn apply(&self, option: &mut LaunchOption) {
        for (resource, q) in option.allocatable.iter_mut() {
            let key = (option.instance_type.clone(), resource.clone(), *q);
            if let Some(found) = self.found.get(&key) {
                *q = *found;
            }
        }
    }
}
