//! CreateFleet errors: which offerings had no capacity, and what a fleet that launched nothing
//! means.
//!
//! An `instant` fleet reports, per override it tried, why it could not launch there. Capacity
//! codes ([`CAPACITY_CODES`], Karpenter's unfulfillable-capacity codes and a few more) mean "no
//! capacity for this type in this zone right now": those offerings are marked unavailable for a
//! while and the next step tries the next cheapest. Other codes are read as any EC2 error is
//! ([`crate::error::classify`]): throttling, a rejection (a bad AMI, a missing permission), or
//! unknown.

use std::collections::BTreeMap;

use aws_sdk_ec2::operation::create_fleet::CreateFleetOutput;

use joiner_controller::cloud::{CloudError, OfferingKey};
use joiner_engine::catalog::CapacityType;

pub use crate::error::CAPACITY_CODES;
use crate::error::{ErrorKind, classify};

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

/// The per-override errors of a CreateFleet answer.
pub(crate) fn fleet_errors(out: &CreateFleetOutput) -> Vec<FleetError> {
    out.errors()
        .iter()
        .map(|e| {
            let over = e
                .launch_template_and_overrides()
                .and_then(|l| l.overrides());
            FleetError {
                code: e.error_code().unwrap_or_default().to_string(),
                message: e.error_message().unwrap_or_default().to_string(),
                instance_type: over
                    .and_then(|o| o.instance_type())
                    .map(|t| t.as_str().to_string()),
                subnet_id: over.and_then(|o| o.subnet_id()).map(str::to_string),
                zone: over.and_then(|o| o.availability_zone()).map(str::to_string),
            }
        })
        .collect()
}

/// Whether a fleet error code says the offering has no capacity.
pub fn is_unfulfillable(code: &str) -> bool {
    classify(code) == ErrorKind::Capacity
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
    errors
        .iter()
        .any(|e| classify(&e.code) == ErrorKind::Throttled)
}

/// What a fleet that launched nothing means, given its errors and the offerings they said had
/// no capacity: insufficient capacity when any had none; else throttled when AWS throttled;
/// else rejected when every error is a rejection (the same request fails the same way again);
/// else unknown. `what` names the request in the message.
pub fn launched_nothing(
    what: &str,
    errors: &[FleetError],
    insufficient: Vec<OfferingKey>,
) -> CloudError {
    if !insufficient.is_empty() {
        return CloudError::InsufficientCapacity(insufficient);
    }
    if throttled(errors) {
        return CloudError::Throttled;
    }
    let reasons: Vec<String> = errors
        .iter()
        .map(|e| format!("{}: {}", e.code, e.message))
        .collect();
    let message = format!(
        "CreateFleet ({what}) launched nothing: {}",
        reasons.join("; ")
    );
    let rejected = !errors.is_empty()
        && errors
            .iter()
            .all(|e| classify(&e.code) == ErrorKind::Rejected);
    if rejected {
        CloudError::Rejected(message)
    } else {
        CloudError::Other(message)
    }
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

    #[test]
    fn a_fleet_that_launched_nothing_says_whether_to_retry() {
        let ice = err("InsufficientInstanceCapacity", "g5.xlarge", None, Some("a"));
        let key = OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone: "a".into(),
            capacity_type: CapacityType::Spot,
        };
        assert_eq!(
            launched_nothing("nc", std::slice::from_ref(&ice), vec![key.clone()]),
            CloudError::InsufficientCapacity(vec![key])
        );
        let throttle = err("RequestLimitExceeded", "g5.xlarge", None, None);
        assert_eq!(
            launched_nothing("nc", &[throttle], Vec::new()),
            CloudError::Throttled
        );
        let ami = err("InvalidAMIID.NotFound", "g5.xlarge", None, None);
        let auth = err("UnauthorizedOperation", "g6.xlarge", None, None);
        let CloudError::Rejected(why) = launched_nothing("nc", &[ami.clone(), auth], Vec::new())
        else {
            panic!("not rejected");
        };
        assert!(why.contains("InvalidAMIID.NotFound"), "{why}");
        // One error of unknown kind among rejections: the outcome is unknown.
        let internal = err("InternalError", "g6.xlarge", None, None);
        assert!(matches!(
            launched_nothing("nc", &[ami, internal], Vec::new()),
            CloudError::Other(_)
        ));
        assert!(matches!(
            launched_nothing("nc", &[], Vec::new()),
            CloudError::Other(_)
        ));
    }
}
