//! What Joiner knew of 93 AWS instance types before it had EC2's own data for all of them,
//! compiled in from `data/instance-types.json` (see `data/README.md`): Karpenter's published
//! figures (allocatable, network and EBS bandwidth, branch interfaces for pod ENIs), the typical
//! spot prices of an older snapshot, and what the NVIDIA driver reports for the GPU types.
//! EC2's facts ([`super::ec2`]) say none of these, so for these 93 types they stand beside them
//! (see [`super::builtin`]).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use joiner_model::Price;
#[cfg(test)]
use joiner_model::Quantity;
use serde::Deserialize;

const DATA: &str = include_str!("../../data/instance-types.json");

#[derive(Debug, Deserialize)]
struct Data {
    types: Vec<Published>,
}

/// One type as the data file holds it (see `data/README.md` for each field). Facts EC2's data
/// also has (vCPU, memory, GPUs, EFA, max pods) are not read: a test checks they agree.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Published {
    pub name: String,
    pub network_bandwidth_mbps: Option<u64>,
    pub ebs_bandwidth_mbps: Option<u64>,
    pub pod_eni: u32,
    pub gpu: Option<PublishedGpu>,
    pub spot_typical_usd: Option<Price>,
    /// Cross-checked against EC2's data by a test.
    #[cfg(test)]
    pub max_pods: u32,
    #[cfg(test)]
    pub vcpu: u32,
    /// Karpenter's published figures, kept only to test [`super::InstanceType::allocatable`].
    #[cfg(test)]
    pub karpenter_allocatable: BTreeMap<String, Quantity>,
}

/// What the NVIDIA driver reports on a node of the type (from the DRA device metadata).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PublishedGpu {
    pub product_name: String,
    #[serde(rename = "driverMemoryMiB")]
    pub driver_memory_mib: u64,
    /// `major.minor`.
    pub compute_capability: String,
    /// GPU devices the driver sees: 1 on the fractional types, where EC2 counts no whole GPU.
    pub devices: u32,
}

impl PublishedGpu {
    pub fn compute_capability(&self) -> Option<(u32, u32)> {
        let (major, minor) = self.compute_capability.split_once('.')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    }
}

/// The published figures by type name, once per process. The data is compiled in and a test
/// parses it, so a failure here is a build defect: it is logged and yields no figures.
pub(super) fn published() -> &'static BTreeMap<String, Published> {
    static PARSED: OnceLock<BTreeMap<String, Published>> = OnceLock::new();
    PARSED.get_or_init(|| match serde_json::from_str::<Data>(DATA) {
        Ok(data) => data
            .types
            .into_iter()
            .map(|t| (t.name.clone(), t))
            .collect(),
        Err(error) => {
            tracing::error!(%error, "built-in published instance data does not parse");
            BTreeMap::new()
        }
    })
}
