//! What the device plugin and gpu-feature-discovery make of a node's GPUs under a config: the
//! extended resources advertised and the node labels, as the plugin's own code derives them.

use std::collections::BTreeMap;

use joiner_model::wellknown::resources;
use joiner_model::{Quantity, ResourceList};

use super::{DevicePluginConfig, SharingStrategy};
use crate::catalog::GpuInfo;

/// The GPUs of a node, as the device plugin and gpu-feature-discovery see them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeGpus<'a> {
    /// Whole GPUs advertised (before sharing).
    pub count: u32,
    /// The driver's product name (`Tesla T4`), if known.
    pub product_name: Option<&'a str>,
    /// Memory per GPU in MiB as the driver reports it, if known.
    pub memory_mib: Option<u64>,
    /// CUDA compute capability, if known.
    pub compute_capability: Option<(u32, u32)>,
    /// The machine type gpu-feature-discovery reads from DMI: the instance type on EC2.
    pub machine: Option<&'a str>,
}

impl<'a> NodeGpus<'a> {
    /// The GPUs of a catalog instance type. The count is the whole GPUs Karpenter counts, so
    /// fractional (vGPU) types have none, consistent with their capacity.
    pub fn of(gpu: &'a GpuInfo, instance_type: &'a str) -> NodeGpus<'a> {
        NodeGpus {
            count: gpu.count,
            product_name: gpu.product_name.as_deref(),
            memory_mib: gpu.driver_memory_mib.or(gpu.memory_mib),
            compute_capability: gpu.compute_capability,
            machine: Some(instance_type),
        }
    }
}

/// What the device plugin and gpu-feature-discovery make of a node's GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeGpuResources {
    /// Extended resources advertised: `nvidia.com/gpu` = GPUs x replicas, or the renamed
    /// resource (`nvidia.com/gpu.shared`) instead when replicas are renamed.
    pub resources: ResourceList,
    /// Replicas per GPU (1 when unshared).
    pub replicas: u32,
    /// The sharing strategy when GPUs are shared (more than one replica).
    pub sharing: Option<SharingStrategy>,
    /// Containers asking for more than one replica fail on such a node.
    pub fail_requests_greater_than_one: bool,
    /// Labels gpu-feature-discovery (and the GPU operator's node feature rules) put on the node.
    pub labels: BTreeMap<String, String>,
}

impl NodeGpuResources {
    /// Puts the advertised resources into a node's capacity or allocatable, replacing the whole
    /// GPU count there (which a renamed resource hides entirely).
    pub fn apply(&self, resources: &mut ResourceList) {
        resources.remove(resources::NVIDIA_GPU);
        resources.extend(self.resources.iter().map(|(k, v)| (k.clone(), *v)));
    }
}

/// The device plugin's resources and gpu-feature-discovery's labels for a node's GPUs under a
/// config (`None`: the plugin runs without a config, so nothing is shared). A node without
/// GPUs gets nothing.
pub fn node_resources(gpus: &NodeGpus, config: Option<&DevicePluginConfig>) -> NodeGpuResources {
    if gpus.count == 0 {
        return NodeGpuResources::default();
    }
    let replication = config.and_then(|c| c.replication(resources::NVIDIA_GPU));
    let replicas = replication.map_or(1, |(_, r)| r.replicas);
    let shared = replicas > 1;
    let renamed = replication.and_then(|(_, r)| r.rename.as_deref());
    let sharing = replication.filter(|_| shared).map(|(s, _)| s.strategy);

    let mut resources = ResourceList::new();
    resources.insert(
        renamed.unwrap_or(resources::NVIDIA_GPU).to_string(),
        Quantity::from_units(i64::from(gpus.count) * i64::from(replicas)),
    );

    let mut labels = BTreeMap::new();
    let mut put = |suffix: &str, value: String| {
        labels.insert(format!("{}.{suffix}", resources::NVIDIA_GPU), value);
    };
    put("present", "true".to_string());
    put("count", gpus.count.to_string());
    put("replicas", replicas.to_string());
    put(
        "sharing-strategy",
        sharing.map_or("none", SharingStrategy::as_str).to_string(),
    );
    if let Some(product) = gpus.product_name.map(sanitise).filter(|p| !p.is_empty()) {
        let suffix = if shared && renamed.is_none() {
            "-SHARED"
        } else {
            ""
        };
        put("product", format!("{product}{suffix}"));
    }
    if let Some(memory) = gpus.memory_mib.filter(|&m| m > 0) {
        put("memory", memory.to_string());
    }
    if let Some((major, minor)) = gpus.compute_capability {
        put("compute.major", major.to_string());
        put("compute.minor", minor.to_string());
        if let Some(family) = arch_family(major, minor) {
            put("family", family.to_string());
        }
    }
    if let Some(machine) = gpus.machine.map(sanitise).filter(|m| !m.is_empty()) {
        put("machine", machine);
    }
    NodeGpuResources {
        resources,
        replicas,
        sharing,
        fail_requests_greater_than_one: replication
            .is_some_and(|(s, _)| s.fail_requests_greater_than_one),
        labels,
    }
}

/// gpu-feature-discovery's label-safe form of a name: characters other than letters, digits,
/// `-`, `_`, `.` and space dropped, runs of spaces joined by one `-`.
fn sanitise(name: &str) -> String {
    let kept: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ' '))
        .collect();
    kept.split_whitespace().collect::<Vec<_>>().join("-")
}

/// The architecture family gpu-feature-discovery names for a compute capability; `None` for
/// capabilities the GFD source Joiner follows does not name.
fn arch_family(major: u32, minor: u32) -> Option<&'static str> {
    Some(match (major, minor) {
        (1, _) => "tesla",
        (2, _) => "fermi",
        (3, _) => "kepler",
        (5, _) => "maxwell",
        (6, _) => "pascal",
        (7, m) if m < 5 => "volta",
        (7, _) => "turing",
        (8, m) if m < 9 => "ampere",
        (8, _) => "ada-lovelace",
        (9, _) => "hopper",
        _ => return None,
    })
}
