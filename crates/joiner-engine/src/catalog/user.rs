//! Instance types the user defines (types Joiner has no data for, or corrections to built-in
//! ones). They get the same well-known labels as built-in types as far as their name and
//! capacity allow, so that NodePool requirements select them the same way.

use std::collections::BTreeMap;

use joiner_model::{Quantity, ResourceList};

use joiner_model::wellknown::labels as l;

use super::names::parse_name;
use super::{GpuInfo, InstanceType, Offering, resources};

/// Pods a node runs when nothing else says (the kubelet's default `maxPods`).
const DEFAULT_PODS: i64 = 110;
/// Ephemeral storage when the capacity does not say: AL2023's default root volume.
const DEFAULT_EPHEMERAL_STORAGE: i64 = 20 << 30;
const MIB_NANOS: i128 = (1 << 20) * 1_000_000_000;

/// Builds a user-defined type.
///
/// `capacity` is what the node has (no VM overhead is taken off it); `pods` defaults to 110 and
/// `ephemeral-storage` to 20Gi when absent, so that a type without them can still hold pods.
/// `overhead`, when given, replaces Karpenter's computed defaults (the node class's explicit
/// kubelet reservations still add to it); when `None`, Karpenter's AL2023 model applies, with
/// the capacity's pod count standing for the ENI limit. Pass `None` for an empty overhead only
/// if the defaults are wanted.
///
/// Labels: instance type, `arch`, `os` (linux), family, category, generation and size when the
/// name has Karpenter's shape, `instance-cpu` and `instance-memory` (MiB) from the capacity when
/// whole, `instance-gpu-count` from `nvidia.com/gpu`; then `extra_labels`, which win. GPU details
/// (name, memory, manufacturer, `nvidia.com/gpu.product`) are read from `extra_labels` when
/// given there.
pub fn user_instance_type(
    name: &str,
    architecture: &str,
    mut capacity: ResourceList,
    overhead: Option<ResourceList>,
    extra_labels: BTreeMap<String, String>,
    offerings: Vec<Offering>,
) -> InstanceType {
    capacity
        .entry(resources::PODS.to_string())
        .or_insert_with(|| Quantity::from_units(DEFAULT_PODS));
    capacity
        .entry(resources::EPHEMERAL_STORAGE.to_string())
        .or_insert_with(|| Quantity::from_bytes_binary(DEFAULT_EPHEMERAL_STORAGE));

    let mut labels = BTreeMap::new();
    let mut put = |key: &str, value: String| {
        labels.insert(key.to_string(), value);
    };
    put(l::INSTANCE_TYPE, name.to_string());
    put(l::ARCH, architecture.to_string());
    put(l::OS, "linux".to_string());
    let parts = parse_name(name);
    for (key, value) in [
        (l::INSTANCE_FAMILY, parts.family),
        (l::INSTANCE_SIZE, parts.size),
        (l::INSTANCE_CATEGORY, parts.category),
        (l::INSTANCE_GENERATION, parts.generation),
    ] {
        if let Some(value) = value {
            put(key, value.to_string());
        }
    }
    if let Some(cpu) = capacity.get(resources::CPU).and_then(whole_units) {
        put(l::INSTANCE_CPU, cpu.to_string());
    }
    if let Some(memory) = capacity.get(resources::MEMORY)
        && memory.nanos() % MIB_NANOS == 0
    {
        put(l::INSTANCE_MEMORY, (memory.nanos() / MIB_NANOS).to_string());
    }
    let gpus = capacity.get(resources::NVIDIA_GPU).and_then(whole_units);
    if let Some(count) = gpus.filter(|&c| c > 0) {
        put(l::INSTANCE_GPU_COUNT, count.to_string());
    }
    labels.extend(extra_labels);

    let gpu = gpus
        .and_then(|c| u32::try_from(c).ok())
        .filter(|&c| c > 0)
        .map(|count| gpu_from_labels(count, &labels));
    // The instance store a RAID0 node class stripes: what the type's own label says it has.
    let instance_store_gb = labels
        .get(l::INSTANCE_LOCAL_NVME)
        .and_then(|gb| gb.parse().ok());
    InstanceType {
        name: name.to_string(),
        capacity,
        labels,
        offerings,
        gpu,
        overhead_override: overhead,
        // Set by the caller from `spec.devices` ([`super::devices::DeviceTemplates::from_spec`]).
        devices: None,
        instance_store_gb,
        // A user-defined type says nothing of its network cards: any layout is taken.
        network: None,
        // Nor of its placement and CPU options: any group and CPU option is taken.
        launch: None,
    }
}

fn whole_units(q: &Quantity) -> Option<i128> {
    (q.nanos() % 1_000_000_000 == 0).then(|| q.nanos() / 1_000_000_000)
}

fn gpu_from_labels(count: u32, labels: &BTreeMap<String, String>) -> GpuInfo {
    let get = |key: &str| labels.get(key).cloned();
    let memory_mib = get(l::INSTANCE_GPU_MEMORY).and_then(|m| m.parse().ok());
    GpuInfo {
        manufacturer: get(l::INSTANCE_GPU_MANUFACTURER).unwrap_or_else(|| "nvidia".to_string()),
        name: get(l::INSTANCE_GPU_NAME).unwrap_or_default(),
        count,
        memory_mib,
        // GFD writes the product with dashes for spaces; reading it back that way is the best
        // guess at the driver's name.
        product_name: get("nvidia.com/gpu.product").map(|p| p.replace('-', " ")),
        driver_memory_mib: get("nvidia.com/gpu.memory")
            .and_then(|m| m.parse().ok())
            .or(memory_mib),
        compute_capability: None,
        devices: count,
    }
}
