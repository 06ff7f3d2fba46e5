//! The controller's errors.

use joiner_model::InputError;

use crate::cloud::CloudError;
use crate::store::StoreError;

/// Why a reconciler could not do something. Most are retried on the next step.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ControllerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Cloud(#[from] CloudError),
    /// The cluster's objects cannot be planned (a malformed NodePool, say): nothing is launched
    /// until it is fixed.
    #[error("cannot plan the cluster: {0}")]
    Input(#[from] InputError),
    #[error("configuration: {0}")]
    Config(String),
}
