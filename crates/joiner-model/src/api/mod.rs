//! Custom resources Joiner reads: Karpenter's NodePool and NodeClaim (`karpenter.sh`), the AWS
//! EC2NodeClass (`karpenter.k8s.aws`), and Joiner's own InstanceType (`joiner.dev`).
//!
//! Each type deserializes from the API server's JSON shape and has a `validate` that rejects
//! what the CRD's OpenAPI and CEL rules would reject, where it matters to scheduling. Validation
//! returns a [`FieldError`] (a field path and a message); the caller, which knows the file and the
//! object, turns it into an [`crate::InputError`].

pub mod capacitybuffer;
pub mod crds;
pub mod ec2nodeclass;
pub mod instancetype;
pub mod kubelet;
pub mod nodeclaim;
pub mod nodeclass_status;
pub mod nodeoverlay;
pub mod nodepool;
pub mod schema;

pub use ec2nodeclass::EC2NodeClass;
pub use instancetype::InstanceType;
pub use kubelet::KubeletConfiguration;
pub use nodeclaim::NodeClaim;
pub use nodeoverlay::NodeOverlay;
pub use nodepool::NodePool;

use std::fmt;

/// A field of an object that fails validation: the path from the object's root (such as
/// `spec.template.spec.requirements[2].operator`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl fmt::Display) -> Self {
        FieldError {
            field: field.into(),
            message: message.to_string(),
        }
    }

    /// Converts into an [`crate::InputError`] for the object at `origin`.
    pub fn into_input_error(
        self,
        origin: &crate::Source,
        object: &crate::ObjectRef,
    ) -> crate::InputError {
        crate::InputError::new(origin, object, self.field, self.message)
    }
}

/// Checks a Karpenter duration field (`expireAfter`, `consolidateAfter`, ...): a Go duration or,
/// where `never_allowed`, the word `Never`.
pub(crate) fn check_duration(
    field: &str,
    text: &str,
    never_allowed: bool,
) -> Result<(), FieldError> {
    if never_allowed && text == "Never" {
        return Ok(());
    }
    crate::duration::parse_duration(text)
        .map(|_| ())
        .map_err(|e| FieldError::new(field, e))
}
