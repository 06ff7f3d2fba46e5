//! What a Joiner node boots with, as pure data.
//!
//! For one NodeClaim's launch request and its EC2NodeClass this crate works out everything EC2
//! is sent: the AMI family and the SSM parameter an alias names ([`image`]), the user data per
//! family merged with the class's own as Karpenter merges it ([`nodeadm`] for AL2023, [`al2`],
//! [`bottlerocket`], [`mime`] for the multipart documents), and the launch templates and
//! CreateFleet overrides ([`fleet`], [`template`]). Nothing here does I/O: `joiner-aws` resolves
//! the class against EC2 and sends the result, and `joiner plan --launch` shows the same result
//! from the manifests and settings alone.

pub mod al2;
pub mod bootstrap;
pub mod bottlerocket;
pub mod family;
pub mod fleet;
pub mod image;
mod kubelet;
pub mod mime;
pub mod nodeadm;
pub mod preview;
pub mod template;
#[cfg(test)]
mod tests;

pub use bootstrap::{Cluster, NodeBootstrap, kubelet_labels};
pub use family::{default_block_devices, family_of, user_data};
pub use fleet::{Fleet, FleetOverride, FleetTemplate, Resolved, Skip, fleet};
pub use mime::UserDataError;
pub use template::TemplateSpec;

/// Why a launch cannot be put together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    /// An EC2NodeClass field that cannot launch as written (its path, and why).
    #[error("{field}: {message}")]
    Field { field: String, message: String },
    /// The request offers nothing a fleet can launch.
    #[error("no offering to launch")]
    NoOfferings,
    /// A NodeClaim label the launch reads cannot be used (a partition that is not a number).
    #[error("label {key}: {value:?} is not a partition number")]
    Label { key: &'static str, value: String },
}

impl LaunchError {
    pub(crate) fn field(field: impl Into<String>, message: impl Into<String>) -> LaunchError {
        LaunchError::Field {
            field: field.into(),
            message: message.into(),
        }
    }
}
