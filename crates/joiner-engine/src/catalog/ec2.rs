//! EC2's own facts about every instance type, compiled in from `data/ec2-catalog.json` (see
//! `data/README.md`): what `DescribeInstanceTypes` says of each type, where
//! `DescribeInstanceTypeOfferings` offers it in 30 regions, and its us-east-1 on-demand price.
//! This module only reads the data; [`super::builtin`] turns it into instance types.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use joiner_model::Price;
use joiner_model::placement::PlacementStrategy;
use serde::Deserialize;

const DATA: &str = include_str!("../../data/ec2-catalog.json");

/// The data lists a type's strategies only when it lacks one of them.
fn all_strategies() -> Vec<PlacementStrategy> {
    PlacementStrategy::ALL.to_vec()
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    price_region: String,
    types: Vec<Ec2Type>,
    /// Region -> zone letters (`abd`) -> the types offered in exactly those zones.
    offerings: BTreeMap<String, BTreeMap<String, Vec<String>>>,
}

/// One type as EC2 describes it (field meanings in `data/README.md`): the built-in data's
/// shape, and what the AWS edge makes of a live `DescribeInstanceTypes` answer for a type the
/// data does not have ([`super::Catalog::describe`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ec2Type {
    pub name: String,
    /// EC2's architectures in EC2's order (`x86_64`, `arm64`, `i386`, `x86_64_mac`).
    pub arch: Vec<String>,
    pub cpu_manufacturer: String,
    pub vcpu: u32,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
    /// `nitro` or `xen`; none on bare metal.
    pub hypervisor: Option<String>,
    /// Network interfaces of the default network card: what the VPC CNI can use.
    pub enis: u32,
    pub ipv4_per_eni: u32,
    /// Baseline bandwidth of the only network card, in Mbps; none with several cards, whose
    /// baselines do not add up to the instance's.
    pub bandwidth_mbps: Option<u64>,
    pub efa: u32,
    /// Interfaces per network card, by card index, for types with more than one card; empty
    /// for one card (with `enis` interfaces).
    #[serde(default)]
    pub cards: Vec<u32>,
    pub encryption_in_transit: bool,
    /// `on-demand`, `spot`, `capacity-block`.
    pub usage: Vec<String>,
    /// The placement group strategies EC2 launches the type into (`PlacementGroupInfo`).
    #[serde(default = "all_strategies")]
    pub placement_strategies: Vec<PlacementStrategy>,
    /// Whether its processors support nested virtualization (`ProcessorInfo.SupportedFeatures`).
    #[serde(default)]
    pub nested_virtualization: bool,
    #[serde(default)]
    pub gpus: Vec<Ec2Gpu>,
    #[serde(default)]
    pub accelerators: Vec<Ec2Accelerator>,
    pub storage: Option<Ec2Storage>,
    /// us-east-1 Linux on-demand USD per hour, where Karpenter's price table has one.
    pub on_demand_usd: Option<Price>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ec2Gpu {
    pub manufacturer: String,
    pub name: String,
    /// Whole GPUs: 0 on the fractional (vGPU) types.
    pub count: u32,
    /// Memory of one GPU.
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AcceleratorKind {
    /// EC2's `InferenceAcceleratorInfo`.
    Inference,
    /// EC2's `NeuronInfo` (Trainium): what the Neuron device plugin advertises.
    Neuron,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Ec2Accelerator {
    pub kind: AcceleratorKind,
    pub manufacturer: String,
    pub name: String,
    pub count: u32,
    /// Neuron cores per device (Neuron devices only).
    #[serde(default)]
    pub cores: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ec2Storage {
    #[serde(rename = "totalGB")]
    pub total_gb: u64,
    /// `required`, `supported` or `unsupported`.
    pub nvme: String,
}

impl Ec2Type {
    /// `kubernetes.io/arch`: the first of EC2's architectures Kubernetes names (`i386` and the
    /// Mac architectures are not), as Karpenter picks it; `None` for Mac types, which
    /// Karpenter never lists (its `DescribeInstanceTypes` asks only for `x86_64` and `arm64`).
    pub fn kube_arch(&self) -> Option<&'static str> {
        self.arch.iter().find_map(|a| match a.as_str() {
            "x86_64" => Some("amd64"),
            "arm64" => Some("arm64"),
            _ => None,
        })
    }

    /// Karpenter's ENI-limited pod count: interfaces of the default card times (addresses per
    /// interface - 1) + 2, with no interfaces reserved.
    pub fn eni_limited_pods(&self) -> u32 {
        if self.enis == 0 {
            return 0;
        }
        self.enis
            .saturating_mul(self.ipv4_per_eni.saturating_sub(1))
            .saturating_add(2)
    }

    /// Total local NVMe in GB: the `instance-local-nvme` label (none when the instance store is
    /// not NVMe).
    pub fn local_nvme_gb(&self) -> Option<u64> {
        self.storage
            .as_ref()
            .filter(|s| s.nvme != "unsupported")
            .map(|s| s.total_gb)
    }

    /// Whether EC2 sells it as `usage` (`on-demand`, `spot`).
    pub fn sold_as(&self, usage: &str) -> bool {
        self.usage.iter().any(|u| u == usage)
    }
}

/// The parsed data, once per process.
pub(super) struct Ec2Catalog {
    pub price_region: String,
    pub types: Vec<Ec2Type>,
    /// Region -> type -> zones it is offered in.
    offerings: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    /// Region -> every zone any type is offered in.
    zones: BTreeMap<String, BTreeSet<String>>,
}

/// Where the data places a type in a region's zones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Placement<'a> {
    /// The data does not know the region: the type may be offered anywhere.
    UnknownRegion,
    /// Offered in these zones of the region (empty: not offered there).
    Zones(&'a [String]),
}

impl Ec2Catalog {
    /// Where `instance_type` is offered in `region`.
    pub fn placement(&self, region: &str, instance_type: &str) -> Placement<'_> {
        match self.offerings.get(region) {
            None => Placement::UnknownRegion,
            Some(types) => Placement::Zones(types.get(instance_type).map_or(&[], Vec::as_slice)),
        }
    }

    /// Whether the data knows `zone` as a zone of `region`.
    pub fn knows_zone(&self, region: &str, zone: &str) -> bool {
        self.zones.get(region).is_some_and(|z| z.contains(zone))
    }

    /// The regions the data has offerings for.
    pub fn regions(&self) -> impl Iterator<Item = &str> {
        self.offerings.keys().map(String::as_str)
    }
}

/// The data compiled in, parsed once. A test parses it, so a failure is a build defect: it is
/// logged and yields an empty catalog rather than a panic.
pub(super) fn catalog() -> &'static Ec2Catalog {
    static PARSED: OnceLock<Ec2Catalog> = OnceLock::new();
    PARSED.get_or_init(|| match serde_json::from_str::<Data>(DATA) {
        Ok(data) => expand(data),
        Err(error) => {
            tracing::error!(%error, "built-in EC2 data does not parse");
            Ec2Catalog {
                price_region: String::new(),
                types: Vec::new(),
                offerings: BTreeMap::new(),
                zones: BTreeMap::new(),
            }
        }
    })
}

fn expand(data: Data) -> Ec2Catalog {
    let mut offerings = BTreeMap::new();
    let mut zones = BTreeMap::new();
    for (region, groups) in data.offerings {
        let mut by_type = BTreeMap::new();
        let mut all = BTreeSet::new();
        for (letters, names) in groups {
            let list: Vec<String> = letters.chars().map(|c| format!("{region}{c}")).collect();
            all.extend(list.iter().cloned());
            for name in names {
                by_type.insert(name, list.clone());
            }
        }
        zones.insert(region.clone(), all);
        offerings.insert(region, by_type);
    }
    Ec2Catalog {
        price_region: data.price_region,
        types: data.types,
        offerings,
        zones,
    }
}
