//! Karpenter's feature gates, read from the chart's `settings.featureGates` as Karpenter's chart
//! reads them (each gate's Go name with its first letter lowercased), with Karpenter's defaults.
//!
//! A gate Joiner acts on switches the behaviour it names. A gate Joiner does not act on is
//! still accepted, so a Karpenter values file installs unchanged, and turning it on draws one
//! warning saying why nothing changes.

use std::collections::BTreeMap;

/// One of Karpenter's feature gates (v1.14).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
pub enum FeatureGate {
    /// Consolidation may replace spot nodes with spot nodes.
    SpotToSpotConsolidation,
    /// Capacity reservations are offered as capacity type `reserved`.
    ReservedCapacity,
    /// Unhealthy nodes are repaired.
    NodeRepair,
    /// NodeOverlays adjust instance types' prices and capacity.
    NodeOverlay,
    /// NodePools with `spec.replicas` keep a fixed number of nodes.
    StaticCapacity,
    /// CapacityBuffers keep spare capacity provisioned.
    CapacityBuffer,
}

impl FeatureGate {
    /// The key under `settings.featureGates` in Karpenter's chart values.
    pub fn values_key(self) -> &'static str {
        match self {
            FeatureGate::SpotToSpotConsolidation => "spotToSpotConsolidation",
            FeatureGate::ReservedCapacity => "reservedCapacity",
            FeatureGate::NodeRepair => "nodeRepair",
            FeatureGate::NodeOverlay => "nodeOverlay",
            FeatureGate::StaticCapacity => "staticCapacity",
            FeatureGate::CapacityBuffer => "capacityBuffer",
        }
    }

    /// Karpenter's default: only `ReservedCapacity` (beta) is on.
    pub fn default_enabled(self) -> bool {
        matches!(self, FeatureGate::ReservedCapacity)
    }

    /// Where turning the gate on changes less in Joiner than in Karpenter; `None` for the
    /// gates Joiner acts on everywhere.
    pub fn partly_acted_on(self) -> Option<&'static str> {
        match self {
            FeatureGate::SpotToSpotConsolidation
            | FeatureGate::ReservedCapacity
            | FeatureGate::NodeOverlay
            | FeatureGate::StaticCapacity
            | FeatureGate::NodeRepair
            | FeatureGate::CapacityBuffer => None,
        }
    }
}

/// The gates the settings set; every other gate has Karpenter's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeatureGates {
    set: BTreeMap<FeatureGate, bool>,
}

impl FeatureGates {
    /// Whether `gate` is on.
    pub fn enabled(&self, gate: FeatureGate) -> bool {
        self.set
            .get(&gate)
            .copied()
            .unwrap_or(gate.default_enabled())
    }

    /// The gates as `settings.featureGates` (at `path`) sets them; gates left out keep their
    /// default. Keys that name no gate, and gates turned on that Joiner does not act on, each
    /// add a warning.
    pub fn from_values(
        path: &str,
        values: &BTreeMap<String, bool>,
        warnings: &mut Vec<String>,
    ) -> FeatureGates {
        use strum::IntoEnumIterator;
        let mut gates = FeatureGates::default();
        for (key, &on) in values {
            let Some(gate) = FeatureGate::iter().find(|g| g.values_key() == key) else {
                let known: Vec<&str> = FeatureGate::iter().map(FeatureGate::values_key).collect();
                warnings.push(format!(
                    "{path}.{key}: not one of Karpenter's feature gates ({}); ignored",
                    known.join(", ")
                ));
                continue;
            };
            gates.set.insert(gate, on);
            if let Some(why) = gate.partly_acted_on().filter(|_| on) {
                warnings.push(format!(
                    "{path}.{key}: only partly acted on by Joiner: {why}"
                ));
            }
        }
        gates
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &[(&str, bool)]) -> (FeatureGates, Vec<String>) {
        let values = pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let mut warnings = Vec::new();
        let gates = FeatureGates::from_values("settings.featureGates", &values, &mut warnings);
        (gates, warnings)
    }

    #[test]
    fn gates_default_as_karpenter_s_do() {
        let (gates, warnings) = read(&[]);
        assert!(warnings.is_empty());
        assert!(gates.enabled(FeatureGate::ReservedCapacity));
        assert!(!gates.enabled(FeatureGate::SpotToSpotConsolidation));
        assert!(!gates.enabled(FeatureGate::NodeRepair));
    }

    #[test]
    fn gates_are_set_by_their_chart_keys_and_unsupported_ones_say_so() {
        let (gates, warnings) = read(&[
            ("spotToSpotConsolidation", true),
            ("reservedCapacity", false),
            ("nodeOverlay", true),
            ("nodeRepair", true),
            ("capacityBuffer", true),
            ("SpotToSpotConsolidation", true),
        ]);
        assert!(gates.enabled(FeatureGate::SpotToSpotConsolidation));
        assert!(!gates.enabled(FeatureGate::ReservedCapacity));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("settings.featureGates.SpotToSpotConsolidation: not one of"),
            "{warnings:?}"
        );
        assert!(gates.enabled(FeatureGate::NodeOverlay));
        assert!(gates.enabled(FeatureGate::NodeRepair));
    }
}
