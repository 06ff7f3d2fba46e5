//! CreateFleet errors: which offerings had no capacity.
//!
//! An `instant` fleet reports, per override it tried, why it could not launch there. The codes
//! below mean "no capacity for this type in this zone right now" (Karpenter's list of
//! unfulfillable-capacity codes): those offerings are marked unavailable for a while and the next
//! step tries the next cheapest. Other codes (a bad AMI, a missing permission) are not about
//! capacity and are reported as errors.

use std::collections::BTreeMap;

use joiner_controller::cloud::OfferingKey;
use joiner_engine::catalog::CapacityType;

/// Fleet error codes that mean the offering has no capacity now.
pub const UNFULFILLABLE_CAPACITY_CODES: &[&str] = &[
    "InsufficientInstanceCapacity",
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "UnfulfillableCapacity",
    "Unsupported",
    "InsufficientFreeAddressesInSubnet",
    "ReservationCapacityExceeded",
];

/// One error of a CreateFleet response, as far as Joiner reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetError {
    pub code: String,
    pub message: String,
    /// The override it is about.
    pub instance_type: Option<String>,
    pub subnet_id: Option<String>,
    pub zone: Option<String>,
}

/// Whether a fleet error code says the offering has no capacity.
pub fn is_unfulfillable(code: &str) -> bool {
    UNFULFILLABLE_CAPACITY_CODES.contains(&code)
}

/// The offerings the errors say have no capacity, each once, in the order reported. The zone is
/// the override's, else its subnet's (`subnet_zones`); errors naming neither are skipped.
pub fn unavailable_offerings(
    errors: &[FleetError],
    capacity_type: CapacityType,
    subnet_zones: &BTreeMap<String, String>,
) -> Vec<OfferingKey> {
    let mut keys: Vec<OfferingKey> = Vec::new();
    for e in errors.iter().filter(|e| is_unfulfillable(&e.code)) {
        let Some(instance_type) = e.instance_type.clone() else {
            continue;
        };
        let zone = e.zone.clone().or_else(|| {
            e.subnet_id
                .as_ref()
                .and_then(|s| subnet_zones.get(s).cloned())
        });
        let Some(zone) = zone else { continue };
        let key = OfferingKey {
            instance_type,
            zone,
            capacity_type,
        };
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

/// Whether AWS throttled the fleet's launches.
pub fn throttled(errors: &[FleetError]) -> bool {
    errors.iter().any(|e| e.code == "RequestLimitExceeded")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(code: &str, t: &str, subnet: Option<&str>, zone: Option<&str>) -> FleetError {
        FleetError {
            code: code.into(),
            message: format!("{code} for {t}"),
            instance_type: Some(t.into()),
            subnet_id: subnet.map(Into::into),
            zone: zone.map(Into::into),
        }
    }

    #[test]
    fn capacity_errors_name_offerings_and_other_errors_do_not() {
        let subnets = BTreeMap::from([("subnet-b".to_string(), "us-east-1b".to_string())]);
        let errors = [
            err(
                "InsufficientInstanceCapacity",
                "g4dn.xlarge",
                Some("subnet-b"),
                None,
            ),
            err(
                "InsufficientInstanceCapacity",
                "g4dn.xlarge",
                Some("subnet-b"),
                None,
            ),
            err(
                "UnfulfillableCapacity",
                "g5.xlarge",
                None,
                Some("us-east-1a"),
            ),
            err("InvalidAMIID.NotFound", "g6.xlarge", Some("subnet-b"), None),
            err(
                "InsufficientInstanceCapacity",
                "p5.48xlarge",
                Some("subnet-unknown"),
                None,
            ),
        ];
        let keys = unavailable_offerings(&errors, CapacityType::Spot, &subnets);
        let names: Vec<String> = keys.iter().map(ToString::to_string).collect();
        assert_eq!(
            names,
            ["g4dn.xlarge/us-east-1b/spot", "g5.xlarge/us-east-1a/spot"]
        );
        assert!(!throttled(&errors));
        assert!(throttled(&[err(
            "RequestLimitExceeded",
            "g4dn.xlarge",
            None,
            None
        )]));
    }
}
