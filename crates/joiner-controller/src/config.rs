//! What the controller is told: the Helm settings the planner reads, and the lifecycle's own
//! timings.

use std::time::Duration;

use joiner_engine::snapshot::Options;
use joiner_model::settings::Settings;

use crate::ControllerError;

/// The controller's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The same settings `joiner plan` takes, so a decision in the cluster equals the plan.
    pub settings: Settings,
    pub options: Options,
    /// `settings.clusterName`: instances are tagged with it and garbage collection only ever
    /// touches instances carrying it.
    pub cluster_name: String,
    /// A NodeClaim whose Node has not registered this long after its creation is deleted and
    /// its instance terminated (Karpenter's 15 minutes).
    pub registration_timeout: Duration,
    /// An instance tagged as Joiner's whose NodeClaim is gone is terminated once it is this
    /// old, so an instance whose NodeClaim update is still in flight is not mistaken for a leak.
    pub gc_grace: Duration,
    /// How often garbage collection runs (Karpenter's instance garbage collection: every 2
    /// minutes). It lists every instance of the cluster, so not on every step; the first step
    /// of a controller always runs it.
    pub gc_period: Duration,
    /// A launched NodeClaim whose instance the cloud does not find is deleted only this long
    /// after its launch: EC2's API is eventually consistent, and a fresh instance reads as
    /// NotFound for a while. An instance the cloud reports terminated needs no wait.
    pub instance_not_found_grace: Duration,
    /// How long a NodeClaim whose launch the cloud rejected (unauthorized, invalid parameter)
    /// waits before it is tried again; it doubles with each rejection up to 10 times this.
    pub launch_backoff: Duration,
    /// How long an offering that failed with insufficient capacity is not tried again
    /// (Karpenter's 3 minutes).
    pub unavailable_ttl: Duration,
    /// How often each EC2NodeClass is resolved again (its subnets, security groups, AMIs and
    /// instance profile), as Karpenter's nodeclass controller does; a changed spec is resolved
    /// at once. 1 minute.
    pub node_class_period: Duration,
    /// How soon a class whose resolution failed (throttled, timed out) is tried again; its last
    /// status stands meanwhile. 10 seconds.
    pub node_class_retry: Duration,
    /// An instance profile made for the cluster is deleted once this process has seen nothing
    /// use it for this long (15 minutes): listings trail launches, and a restart starts over.
    pub instance_profile_grace: Duration,
}

impl Config {
    /// Defaults for everything the settings do not say. Fails without a cluster name: without
    /// one, garbage collection cannot tell this cluster's instances from any other's.
    pub fn new(settings: Settings) -> Result<Config, ControllerError> {
        let cluster_name = settings
            .cluster_name
            .clone()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                ControllerError::Config(
                    "settings.clusterName is required: instances are tagged with it".into(),
                )
            })?;
        Ok(Config {
            settings,
            options: Options::default(),
            cluster_name,
            registration_timeout: Duration::from_secs(15 * 60),
            gc_grace: Duration::from_secs(30),
            gc_period: Duration::from_secs(2 * 60),
            instance_not_found_grace: Duration::from_secs(2 * 60),
            launch_backoff: Duration::from_secs(30),
            unavailable_ttl: Duration::from_secs(3 * 60),
            node_class_period: Duration::from_secs(60),
            node_class_retry: Duration::from_secs(10),
            instance_profile_grace: Duration::from_secs(15 * 60),
        })
    }
}
