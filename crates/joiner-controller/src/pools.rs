//! How each NodePool would launch each instance type (allocatable with device-plugin sharing,
//! labels), from the same snapshot code the planner uses, so a NodeClaim's expected resources
//! are exactly what the plan assumed.

use std::collections::BTreeMap;

use joiner_engine::scheduling::{LaunchOption, PoolInput};
use joiner_engine::snapshot::ClusterSnapshot;
use joiner_model::{InputError, Manifests};

use crate::config::Config;

/// The launch options of every NodePool.
#[derive(Debug, Clone, Default)]
pub struct PoolOptions {
    pools: BTreeMap<String, PoolInput>,
}

impl PoolOptions {
    /// Builds the options from the cluster's NodePools, EC2NodeClasses, device-plugin config and
    /// instance types; workloads are left out, they do not change what a node offers.
    pub fn build(m: &Manifests, config: &Config) -> Result<PoolOptions, InputError> {
        let mut bare = m.clone();
        bare.pods.clear();
        bare.nodes.clear();
        bare.deployments.clear();
        bare.replica_sets.clear();
        bare.stateful_sets.clear();
        bare.jobs.clear();
        bare.daemon_sets.clear();
        bare.resource_claims.clear();
        let snapshot = ClusterSnapshot::build(&bare, &config.settings, &config.options)?;
        Ok(PoolOptions::from_pools(snapshot.input.pools))
    }

    pub fn from_pools(pools: Vec<PoolInput>) -> PoolOptions {
        PoolOptions {
            pools: pools.into_iter().map(|p| (p.name.clone(), p)).collect(),
        }
    }

    pub fn pool(&self, name: &str) -> Option<&PoolInput> {
        self.pools.get(name)
    }

    pub fn option(&self, pool: &str, instance_type: &str) -> Option<&LaunchOption> {
        self.pools
            .get(pool)?
            .options
            .iter()
            .find(|o| o.instance_type == instance_type)
    }
}
