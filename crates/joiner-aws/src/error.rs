//! Errors of the AWS edge, each naming the API call and the object it was about, and how the
//! controller should read them.
//!
//! EC2's error codes fall in four kinds ([`ErrorKind`]): no capacity now, slow down, a request
//! that cannot succeed as given, and everything else. Only the last leaves the outcome unknown;
//! the controller retries those idempotently. The lists follow the codes EC2 documents and the
//! ones Karpenter's AWS provider reads (`pkg/errors`); codes not listed are `Other`, the
//! cautious reading.

use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use joiner_controller::cloud::CloudError;

/// Codes that mean "no capacity for this offering right now" (Karpenter's unfulfillable-capacity
/// codes, and the subnet and reservation ones a fleet reports per override).
pub const CAPACITY_CODES: &[&str] = &[
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientHostCapacity",
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "UnfulfillableCapacity",
    "Unsupported",
    "InsufficientFreeAddressesInSubnet",
    "ReservationCapacityExceeded",
];

/// Codes that mean "slow down": retried with backoff by the SDK, then on a later step.
pub const THROTTLING_CODES: &[&str] = &[
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "EC2ThrottledException",
];

/// Codes that mean the request cannot succeed as given: retrying it unchanged fails again.
pub const REJECTED_CODES: &[&str] = &[
    "UnauthorizedOperation",
    "AuthFailure",
    "AccessDenied",
    "AccessDeniedException",
    "OptInRequired",
    "Blocked",
    "InvalidParameter",
    "InvalidParameterValue",
    "InvalidParameterCombination",
    "MissingParameter",
    "InvalidLaunchTemplateName.NotFoundException",
    "InvalidLaunchTemplateName.MalformedException",
    "InvalidLaunchTemplateId.NotFound",
    "InvalidLaunchTemplateId.Malformed",
    "InvalidSubnetID.NotFound",
    "InvalidSubnetID.Malformed",
    "InvalidGroup.NotFound",
    "InvalidGroupId.Malformed",
    "InvalidKeyPair.NotFound",
    "InvalidBlockDeviceMapping",
    "InvalidUserData.Malformed",
    "InvalidInstanceType",
];

/// Code prefixes that are all rejections (`InvalidAMIID.NotFound`, `.Malformed`,
/// `.Unavailable`; `InvalidIAMInstanceProfile.NotFound`, ...).
const REJECTED_PREFIXES: &[&str] = &["InvalidAMIID.", "InvalidIAMInstanceProfile."];

/// How the controller reads an EC2 error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No capacity for the offering now: marked unavailable, the next cheapest is tried.
    Capacity,
    /// Rate limited: retried later.
    Throttled,
    /// Cannot succeed as given (permissions, parameters, missing template or image).
    Rejected,
    /// Unknown outcome (timeouts, 5xx, codes not listed): retried idempotently.
    Other,
}

/// The kind of an EC2 error code.
pub fn classify(code: &str) -> ErrorKind {
    if CAPACITY_CODES.contains(&code) {
        ErrorKind::Capacity
    } else if THROTTLING_CODES.contains(&code) {
        ErrorKind::Throttled
    } else if REJECTED_CODES.contains(&code)
        || REJECTED_PREFIXES.iter().any(|p| code.starts_with(p))
    {
        ErrorKind::Rejected
    } else {
        ErrorKind::Other
    }
}

/// Why an AWS call, or the input it needed, failed.
#[derive(Debug, thiserror::Error)]
pub enum AwsError {
    /// An AWS API call failed. `code` is the AWS error code when the service sent one
    /// (`InvalidInstanceID.NotFound`, `RequestLimitExceeded`, ...).
    #[error("{call} ({object}): {message}")]
    Api {
        call: &'static str,
        object: String,
        code: Option<String>,
        message: String,
    },
    /// The EC2NodeClass cannot be launched as it is (no subnet matched, no AMI, ...).
    #[error("EC2NodeClass {node_class}: {message}")]
    NodeClass { node_class: String, message: String },
    /// A setting the AWS edge needs is missing or unusable.
    #[error("settings: {0}")]
    Settings(String),
    /// Asked to terminate or reboot an instance that lacks the cluster's ownership tags:
    /// refused, the call (`call`) not sent.
    #[error("instance {instance} lacks the ownership tags of cluster {cluster}: {call} not sent")]
    NotOwned {
        instance: String,
        cluster: String,
        call: &'static str,
    },
    /// The call was given up at the deadline of the write in progress (the leader's fence):
    /// it may or may not have reached AWS.
    #[error("gave up after {0:?}, at the deadline of this write (the leader Lease)")]
    Deadline(std::time::Duration),
}

impl AwsError {
    /// Wraps an SDK error with the call and the object, keeping the service's error code.
    pub(crate) fn api<E, R>(
        call: &'static str,
        object: impl Into<String>,
        e: SdkError<E, R>,
    ) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        AwsError::Api {
            call,
            object: object.into(),
            code: e.code().map(str::to_string),
            message: DisplayErrorContext(&e).to_string(),
        }
    }

    pub(crate) fn node_class(node_class: &str, message: impl Into<String>) -> Self {
        AwsError::NodeClass {
            node_class: node_class.to_string(),
            message: message.into(),
        }
    }

    /// The AWS error code, for API errors that carry one.
    pub fn code(&self) -> Option<&str> {
        match self {
            AwsError::Api { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    /// How the controller should read it. An EC2NodeClass or a setting that cannot be used is
    /// a rejection: it fails the same way until someone changes it.
    pub fn kind(&self) -> ErrorKind {
        match self {
            AwsError::Api { code, .. } => code.as_deref().map_or(ErrorKind::Other, classify),
            AwsError::NodeClass { .. } | AwsError::Settings(_) | AwsError::NotOwned { .. } => {
                ErrorKind::Rejected
            }
            AwsError::Deadline(_) => ErrorKind::Other,
        }
    }

    /// Whether AWS asked us to slow down.
    pub fn is_throttling(&self) -> bool {
        self.kind() == ErrorKind::Throttled
    }
}

impl From<AwsError> for CloudError {
    /// A capacity code outside a fleet's per-override errors names no offering, so it cannot
    /// mark one unavailable: it is `Other`, retried.
    fn from(e: AwsError) -> CloudError {
        match e.kind() {
            ErrorKind::Throttled => CloudError::Throttled,
            ErrorKind::Rejected => CloudError::Rejected(e.to_string()),
            ErrorKind::Capacity | ErrorKind::Other => CloudError::Other(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: Option<&str>) -> AwsError {
        AwsError::Api {
            call: "CreateFleet",
            object: "nodeclaim default-abc".into(),
            code: code.map(Into::into),
            message: "boom".into(),
        }
    }

    #[test]
    fn codes_fall_in_the_kind_the_controller_acts_on() {
        for (code, kind) in [
            ("InsufficientInstanceCapacity", ErrorKind::Capacity),
            ("InsufficientCapacity", ErrorKind::Capacity),
            ("UnfulfillableCapacity", ErrorKind::Capacity),
            ("MaxSpotInstanceCountExceeded", ErrorKind::Capacity),
            ("RequestLimitExceeded", ErrorKind::Throttled),
            ("Throttling", ErrorKind::Throttled),
            ("UnauthorizedOperation", ErrorKind::Rejected),
            ("AuthFailure", ErrorKind::Rejected),
            ("InvalidParameterValue", ErrorKind::Rejected),
            ("InvalidParameterCombination", ErrorKind::Rejected),
            ("InvalidParameter", ErrorKind::Rejected),
            (
                "InvalidLaunchTemplateName.NotFoundException",
                ErrorKind::Rejected,
            ),
            ("InvalidAMIID.NotFound", ErrorKind::Rejected),
            ("InvalidAMIID.Malformed", ErrorKind::Rejected),
            ("InvalidSubnetID.NotFound", ErrorKind::Rejected),
            ("InvalidGroup.NotFound", ErrorKind::Rejected),
            ("InvalidIAMInstanceProfile.NotFound", ErrorKind::Rejected),
            ("InternalError", ErrorKind::Other),
            ("ServiceUnavailable", ErrorKind::Other),
            ("InvalidAMIIDs", ErrorKind::Other),
        ] {
            assert_eq!(classify(code), kind, "{code}");
        }
    }

    #[test]
    fn errors_become_the_cloud_error_of_their_kind_with_their_context() {
        assert_eq!(
            CloudError::from(api(Some("RequestLimitExceeded"))),
            CloudError::Throttled
        );
        let CloudError::Rejected(message) = CloudError::from(api(Some("UnauthorizedOperation")))
        else {
            panic!("not Rejected");
        };
        assert!(message.contains("CreateFleet"), "{message}");
        assert!(message.contains("nodeclaim default-abc"), "{message}");
        // No code (a timeout, a dropped connection) and 5xx codes: the outcome is unknown.
        assert!(matches!(CloudError::from(api(None)), CloudError::Other(_)));
        assert!(matches!(
            CloudError::from(api(Some("InternalError"))),
            CloudError::Other(_)
        ));
        // A capacity code outside a fleet's errors names no offering to mark.
        assert!(matches!(
            CloudError::from(api(Some("InsufficientInstanceCapacity"))),
            CloudError::Other(_)
        ));
        assert!(matches!(
            CloudError::from(AwsError::node_class("gpu", "no subnet matches")),
            CloudError::Rejected(_)
        ));
    }
}
