//! What every reconciler works with during one step.

use joiner_model::Manifests;
use k8s_openapi::jiff::Timestamp;

use crate::cloud::{CloudInstanceType, CloudProvider};
use crate::config::Config;
use crate::error::{ControllerError, StepReport};
use crate::pools::PoolOptions;
use crate::store::{ClusterStore, manifests_of};
use crate::unavailable::UnavailableOfferings;

/// One step's view: the time is fixed for the whole step, and what is expensive to read
/// (the planner's pool options, the cloud's price list) is read at most once.
pub struct Ctx<'a, S, C> {
    pub store: &'a S,
    pub cloud: &'a C,
    pub config: &'a Config,
    pub now: Timestamp,
    pub unavailable: &'a mut UnavailableOfferings,
    pub report: &'a mut StepReport,
    pool_options: Option<PoolOptions>,
    instance_types: Option<Vec<CloudInstanceType>>,
}

impl<'a, S: ClusterStore, C: CloudProvider> Ctx<'a, S, C> {
    pub fn new(
        store: &'a S,
        cloud: &'a C,
        config: &'a Config,
        now: Timestamp,
        unavailable: &'a mut UnavailableOfferings,
        report: &'a mut StepReport,
    ) -> Self {
        Ctx {
            store,
            cloud,
            config,
            now,
            unavailable,
            report,
            pool_options: None,
            instance_types: None,
        }
    }

    pub fn manifests(&self) -> Result<Manifests, ControllerError> {
        Ok(manifests_of(self.store)?)
    }

    /// The NodePools' launch options, built on first use in this step.
    pub fn pool_options(&mut self) -> Result<&PoolOptions, ControllerError> {
        if self.pool_options.is_none() {
            let m = self.manifests()?;
            self.pool_options = Some(PoolOptions::build(&m, self.config)?);
        }
        Ok(self.pool_options.get_or_insert_with(PoolOptions::default))
    }

    /// Sets the pool options when the caller already built them.
    pub fn set_pool_options(&mut self, options: PoolOptions) {
        self.pool_options = Some(options);
    }

    /// The cloud's instance types and prices, read on first use in this step.
    pub fn instance_types(&mut self) -> Result<&[CloudInstanceType], ControllerError> {
        if self.instance_types.is_none() {
            self.instance_types = Some(self.cloud.instance_types()?);
        }
        Ok(self.instance_types.get_or_insert_with(Vec::new))
    }

    /// Records a failure to retry on a later step.
    pub fn error(&mut self, what: &str, e: impl Into<ControllerError>) {
        let e = e.into();
        tracing::warn!(error = %e, "{what}");
        self.report.errors.push(e);
        self.report.errors_during.push(what.to_string());
    }
}
