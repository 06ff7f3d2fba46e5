//! The built-in AWS instance types, compiled in from `data/instance-types.json` (see
//! `data/README.md` for where the figures come from and how to regenerate them).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use joiner_model::{Format, Price, Quantity, ResourceList};
use serde::Deserialize;

use joiner_model::wellknown::labels as l;

use super::names::{lower_kebab, parse_name};
use super::overhead::vm_adjusted_memory_mib;
use super::{CapacityType, GpuInfo, InstanceType, Offering, resources};

/// The region whose prices the built-in data holds.
pub const BUILTIN_PRICE_REGION: &str = "us-east-1";

/// Karpenter's default `vmMemoryOverheadPercent` (0.075) in parts per million.
pub const DEFAULT_VM_MEMORY_OVERHEAD_PPM: u32 = 75_000;

/// The default root volume of AL2023 nodes, which holds ephemeral storage.
const DEFAULT_ROOT_VOLUME_GIB: i64 = 20;

const DATA: &str = include_str!("../../data/instance-types.json");

#[derive(Debug, Deserialize)]
struct Data {
    types: Vec<RawType>,
}

/// One type as the data file holds it (see `data/README.md` for each field).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RawType {
    pub name: String,
    arch: String,
    vcpu: u32,
    #[serde(rename = "memoryMiB")]
    memory_mib: u64,
    cpu_manufacturer: String,
    hypervisor: Option<String>,
    network_bandwidth_mbps: Option<u64>,
    ebs_bandwidth_mbps: Option<u64>,
    #[serde(rename = "localNvmeGB")]
    local_nvme_gb: Option<u64>,
    efa: u32,
    max_pods: u32,
    pod_eni: u32,
    gpu: Option<RawGpu>,
    on_demand_usd: Option<Price>,
    spot_typical_usd: Option<Price>,
    /// Karpenter's published figures, kept only to test [`InstanceType::allocatable`].
    #[cfg(test)]
    pub karpenter_allocatable: BTreeMap<String, Quantity>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawGpu {
    manufacturer: String,
    name: String,
    count: u32,
    #[serde(rename = "memoryMiB")]
    memory_mib: u64,
    resource: u32,
    product_name: String,
    #[serde(rename = "driverMemoryMiB")]
    driver_memory_mib: u64,
    compute_capability: String,
    devices: u32,
}

/// The parsed data, once per process. The data is compiled in and a test parses it, so a
/// failure here is a build defect; it is logged and yields an empty list rather than a panic.
pub(super) fn raw_types() -> &'static [RawType] {
    static PARSED: OnceLock<Vec<RawType>> = OnceLock::new();
    PARSED.get_or_init(|| match serde_json::from_str::<Data>(DATA) {
        Ok(data) => data.types,
        Err(error) => {
            tracing::error!(%error, "built-in instance data does not parse");
            Vec::new()
        }
    })
}

/// Every built-in type, labelled for `region` and offered in `zones`.
pub(super) fn instance_types(region: &str, zones: &[String], vm_ppm: u32) -> Vec<InstanceType> {
    raw_types()
        .iter()
        .map(|raw| instance_type(raw, region, zones, vm_ppm))
        .collect()
}

fn instance_type(raw: &RawType, region: &str, zones: &[String], vm_ppm: u32) -> InstanceType {
    InstanceType {
        name: raw.name.clone(),
        capacity: capacity(raw, vm_ppm),
        labels: labels(raw, region),
        offerings: offerings(raw, zones),
        gpu: raw.gpu.as_ref().map(gpu_info),
        overhead_override: None,
        devices: super::devices::builtin_templates(&raw.name),
    }
}

fn capacity(raw: &RawType, vm_ppm: u32) -> ResourceList {
    let memory_mib = vm_adjusted_memory_mib(raw.memory_mib, &raw.arch, vm_ppm);
    let mut capacity = ResourceList::new();
    let mut put = |name: &str, q: Quantity| {
        capacity.insert(name.to_string(), q);
    };
    put(resources::CPU, Quantity::from_units(raw.vcpu.into()));
    put(
        resources::MEMORY,
        Quantity::from_nanos(
            i128::from(memory_mib) * (1 << 20) * 1_000_000_000,
            Format::BinarySI,
        ),
    );
    put(
        resources::EPHEMERAL_STORAGE,
        Quantity::from_bytes_binary(DEFAULT_ROOT_VOLUME_GIB << 30),
    );
    put(resources::PODS, Quantity::from_units(raw.max_pods.into()));
    let gpus = raw.gpu.as_ref().map_or(0, |g| g.resource);
    for (name, count) in [
        (resources::NVIDIA_GPU, gpus),
        (resources::EFA, raw.efa),
        (resources::POD_ENI, raw.pod_eni),
    ] {
        if count > 0 {
            put(name, Quantity::from_units(count.into()));
        }
    }
    capacity
}

fn labels(raw: &RawType, region: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut put = |key: &str, value: String| {
        labels.insert(key.to_string(), value);
    };
    put(l::INSTANCE_TYPE, raw.name.clone());
    put(l::ARCH, raw.arch.clone());
    put(l::OS, "linux".to_string());
    put(l::REGION, region.to_string());
    let parts = parse_name(&raw.name);
    for (key, value) in [
        (l::INSTANCE_FAMILY, parts.family),
        (l::INSTANCE_SIZE, parts.size),
        (l::INSTANCE_CATEGORY, parts.category),
        (l::INSTANCE_GENERATION, parts.generation),
        (l::INSTANCE_HYPERVISOR, raw.hypervisor.as_deref()),
    ] {
        if let Some(value) = value {
            put(key, value.to_string());
        }
    }
    put(l::INSTANCE_CPU, raw.vcpu.to_string());
    put(
        l::INSTANCE_CPU_MANUFACTURER,
        lower_kebab(&raw.cpu_manufacturer),
    );
    put(l::INSTANCE_MEMORY, raw.memory_mib.to_string());
    for (key, value) in [
        (l::INSTANCE_NETWORK_BANDWIDTH, raw.network_bandwidth_mbps),
        (l::INSTANCE_EBS_BANDWIDTH, raw.ebs_bandwidth_mbps),
        (l::INSTANCE_LOCAL_NVME, raw.local_nvme_gb),
    ] {
        if let Some(value) = value {
            put(key, value.to_string());
        }
    }
    if let Some(gpu) = &raw.gpu {
        put(l::INSTANCE_GPU_NAME, lower_kebab(&gpu.name));
        put(l::INSTANCE_GPU_MANUFACTURER, lower_kebab(&gpu.manufacturer));
        put(l::INSTANCE_GPU_COUNT, gpu.count.to_string());
        put(l::INSTANCE_GPU_MEMORY, gpu.memory_mib.to_string());
    }
    labels
}

fn offerings(raw: &RawType, zones: &[String]) -> Vec<Offering> {
    let prices = [
        (CapacityType::OnDemand, raw.on_demand_usd),
        (CapacityType::Spot, raw.spot_typical_usd),
    ];
    zones
        .iter()
        .flat_map(|zone| {
            prices.iter().filter_map(move |&(capacity_type, price)| {
                Some(Offering {
                    zone: zone.clone(),
                    capacity_type,
                    price: price?,
                    available: true,
                })
            })
        })
        .collect()
}

fn gpu_info(raw: &RawGpu) -> GpuInfo {
    let compute_capability = raw
        .compute_capability
        .split_once('.')
        .and_then(|(major, minor)| Some((major.parse().ok()?, minor.parse().ok()?)));
    GpuInfo {
        manufacturer: lower_kebab(&raw.manufacturer),
        name: lower_kebab(&raw.name),
        count: raw.count,
        memory_mib: Some(raw.memory_mib),
        product_name: Some(raw.product_name.clone()),
        driver_memory_mib: Some(raw.driver_memory_mib),
        compute_capability,
        devices: raw.devices,
    }
}
