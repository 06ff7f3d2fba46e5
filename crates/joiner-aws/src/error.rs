//! Errors of the AWS edge, each naming the API call and the object it was about, and how the
//! controller should read them.

use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use joiner_controller::cloud::CloudError;

/// EC2 error codes that mean "slow down": the controller retries on a later step.
const THROTTLING_CODES: &[&str] = &[
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "TooManyRequestsException",
];

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

    /// Whether AWS asked us to slow down.
    pub fn is_throttling(&self) -> bool {
        self.code().is_some_and(|c| THROTTLING_CODES.contains(&c))
    }
}

impl From<AwsError> for CloudError {
    fn from(e: AwsError) -> CloudError {
        if e.is_throttling() {
            CloudError::Throttled
        } else {
            CloudError::Other(e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: &str) -> AwsError {
        AwsError::Api {
            call: "CreateFleet",
            object: "nodeclaim default-abc".into(),
            code: Some(code.into()),
            message: "boom".into(),
        }
    }

    #[test]
    fn throttling_becomes_a_retry_and_other_errors_keep_their_context() {
        assert_eq!(
            CloudError::from(api("RequestLimitExceeded")),
            CloudError::Throttled
        );
        let CloudError::Other(message) = CloudError::from(api("UnauthorizedOperation")) else {
            panic!("not Other");
        };
        assert!(message.contains("CreateFleet"), "{message}");
        assert!(message.contains("nodeclaim default-abc"), "{message}");
    }
}
