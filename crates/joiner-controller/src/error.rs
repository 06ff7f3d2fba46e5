//! The controller's errors and the account of one step.

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

/// What one [`crate::Controller::step`] did, for logs, metrics and tests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepReport {
    /// Whether a provisioning batch closed and was planned.
    pub planned: bool,
    /// NodeClaims created.
    pub created: Vec<String>,
    /// NodeClaim name and instance id of each launch (or adoption after a restart).
    pub launched: Vec<(String, String)>,
    pub registered: Vec<String>,
    pub initialized: Vec<String>,
    /// NodeClaims deleted (registration timeout, no capacity, instance gone).
    pub deleted: Vec<String>,
    /// Instances terminated, by id.
    pub terminated: Vec<String>,
    /// Offerings marked unavailable after insufficient capacity.
    pub unavailable: Vec<String>,
    /// Pods the plan could not place, with the reason.
    pub unschedulable: Vec<(String, String)>,
    /// Pod (`namespace/name`) and NodeClaim of every pod the plan put on a NodeClaim created in
    /// this step or still in flight: the live controller tells each pod which node it waits for.
    pub nominated: Vec<(String, String)>,
    /// How long planning took (snapshot and plan), when a batch was planned.
    pub scheduling_duration: Option<std::time::Duration>,
    /// What the disruption step did (consolidation, expiry).
    pub disruption: Vec<crate::disruption::DisruptionEvent>,
    /// What failed and will be retried.
    pub errors: Vec<ControllerError>,
    /// What was being done when each of `errors` happened (`provisioning`, `lifecycle`, ...), in
    /// the same order, so failures can be counted by reconciler.
    pub errors_during: Vec<String>,
}
