//! Predictions that running nodes proved wrong. Joiner predicts before launch what a node will
//! advertise (time-sliced GPU replicas, MIG slices, DRA devices, gpu-feature-discovery labels);
//! when a node of a type registers with something else, the controller records what it found,
//! and plans from then on use that instead of the prediction, so pods are not planned onto
//! capacity that does not exist, nor onto labels the node does not carry.
//!
//! A correction is keyed by the prediction it corrects (type, what, and the predicted value):
//! when the catalog, an overlay or a NodePool's device-plugin config changes what is predicted,
//! the old finding no longer applies and the new prediction is trusted again.

use std::collections::BTreeMap;
use std::sync::Arc;

use joiner_model::Quantity;

use crate::scheduling::LaunchOption;

/// What nodes were found to offer, by the prediction they contradicted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Corrections {
    /// (instance type, extended resource, predicted) to found.
    found: BTreeMap<(String, String, Quantity), Quantity>,
    /// (instance type, DRA driver, devices predicted) to devices found.
    devices: BTreeMap<(String, String, u32), u32>,
    /// (instance type, gpu-feature-discovery label, value predicted) to value found.
    labels: BTreeMap<(String, String, String), String>,
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

    /// Nodes of `instance_type` predicted to get `predicted` devices from the DRA `driver`
    /// get `found`.
    pub fn insert_devices(
        &mut self,
        instance_type: &str,
        driver: &str,
        predicted: u32,
        found: u32,
    ) {
        self.devices.insert(
            (instance_type.to_string(), driver.to_string(), predicted),
            found,
        );
    }

    /// Nodes of `instance_type` predicted to carry `label` = `predicted` carry `found`.
    pub fn insert_label(&mut self, instance_type: &str, label: &str, predicted: &str, found: &str) {
        self.labels.insert(
            (
                instance_type.to_string(),
                label.to_string(),
                predicted.to_string(),
            ),
            found.to_string(),
        );
    }

    pub fn is_empty(&self) -> bool {
        self.found.is_empty() && self.devices.is_empty() && self.labels.is_empty()
    }

    /// Every extended-resource correction, as (instance type, resource, predicted, found).
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
        for (label, value) in option.labels.iter_mut() {
            let key = (option.instance_type.clone(), label.clone(), value.clone());
            if let Some(found) = self.labels.get(&key) {
                value.clone_from(found);
            }
        }
        self.apply_devices(option);
    }

    /// A driver found to publish fewer devices than its templates is planned with only as many:
    /// the templates' last devices are the ones left out.
    fn apply_devices(&self, option: &mut LaunchOption) {
        let Some(source) = option.devices.as_mut() else {
            return;
        };
        let counts = source.templates.device_counts(&source.options);
        for (driver, predicted) in counts {
            let key = (option.instance_type.clone(), driver, predicted);
            if let Some(&found) = self.devices.get(&key) {
                let fewer = source.templates.with_at_most(&key.1, found);
                source.templates = Arc::new(fewer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::devices::{TemplateOptions, builtin_templates};
    use crate::scheduling::DeviceSource;

    fn option(instance_type: &str) -> LaunchOption {
        LaunchOption {
            instance_type: instance_type.to_string(),
            labels: [("nvidia.com/gpu.replicas".to_string(), "4".to_string())].into(),
            allocatable: [("nvidia.com/gpu".to_string(), Quantity::from_units(32))].into(),
            capacity: Default::default(),
            offerings: Vec::new(),
            at_most_one_per_pod: Vec::new(),
            devices: builtin_templates(instance_type).map(|templates| DeviceSource {
                templates,
                options: TemplateOptions {
                    nvidia_gpu: true,
                    efa: true,
                    ..TemplateOptions::default()
                },
            }),
        }
    }

    #[test]
    fn a_type_found_short_is_planned_with_what_was_found() {
        let mut c = Corrections::default();
        c.insert(
            "p5.48xlarge",
            "nvidia.com/gpu",
            Quantity::from_units(32),
            Quantity::from_units(8),
        );
        c.insert_label("p5.48xlarge", "nvidia.com/gpu.replicas", "4", "1");
        c.insert_devices("p5.48xlarge", "gpu.nvidia.com", 8, 7);
        let mut o = option("p5.48xlarge");
        let before = o
            .devices
            .as_ref()
            .map(|d| d.templates.device_counts(&d.options));
        assert_eq!(
            before.as_ref().and_then(|b| b.get("gpu.nvidia.com")),
            Some(&8)
        );
        c.apply(&mut o);
        assert_eq!(o.allocatable["nvidia.com/gpu"], Quantity::from_units(8));
        assert_eq!(o.labels["nvidia.com/gpu.replicas"], "1");
        let after = o
            .devices
            .as_ref()
            .map(|d| d.templates.device_counts(&d.options))
            .unwrap_or_default();
        assert_eq!(after.get("gpu.nvidia.com"), Some(&7));
        // The other driver's devices are untouched.
        assert_eq!(
            after.get("dra.net"),
            before.as_ref().and_then(|b| b.get("dra.net"))
        );
    }

    #[test]
    fn a_changed_prediction_is_trusted_again() {
        let mut c = Corrections::default();
        c.insert_label("p5.48xlarge", "nvidia.com/gpu.replicas", "2", "1");
        c.insert_devices("p5.48xlarge", "gpu.nvidia.com", 16, 7);
        c.insert_devices("g6.xlarge", "gpu.nvidia.com", 8, 7);
        let mut o = option("p5.48xlarge");
        c.apply(&mut o);
        assert_eq!(o.labels["nvidia.com/gpu.replicas"], "4");
        let counts = o
            .devices
            .as_ref()
            .map(|d| d.templates.device_counts(&d.options))
            .unwrap_or_default();
        assert_eq!(counts.get("gpu.nvidia.com"), Some(&8));
    }
}
