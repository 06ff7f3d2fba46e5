//! Templates for the built-in AWS GPU types, compiled in from `data/dra-devices.json` (see
//! `data/README.md`): what the NVIDIA driver and DRANET published on live nodes of each type, as
//! Karpenter's AWS provider records it.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::resource::v1::{Device, DeviceAttribute, DeviceCapacity};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::Deserialize;

use super::{
    DRANET_DRIVER, DeviceTemplates, EFA_POOL, GPU_POOL, GPU_RUNTIME_ATTRIBUTES, NVIDIA_GPU_DRIVER,
    PCIE_ROOT, RuntimeAttribute, TemplatePool,
};

const DATA: &str = include_str!("../../../data/dra-devices.json");

#[derive(Debug, Deserialize)]
struct Data {
    types: Vec<RawType>,
}

/// One type as the data file holds it: attributes every GPU (EFA) shares once, the rest per
/// device, devices in the driver's index order.
#[derive(Debug, Deserialize)]
pub(super) struct RawType {
    pub name: String,
    gpu: RawGpus,
    efa: Option<RawEfas>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawGpus {
    product_name: String,
    architecture: String,
    brand: String,
    #[serde(rename = "type")]
    kind: String,
    cuda_compute_capability: String,
    memory: String,
    pcie_roots: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEfas {
    pci_device: String,
    pci_vendor: String,
    devices: Vec<RawEfa>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEfa {
    pcie_root: String,
    numa_node: Option<i64>,
    rdma: bool,
    pci_subsystem: String,
}

/// The parsed data, once per process. The data is compiled in and a test parses it, so a
/// failure here is a build defect; it is logged and yields no templates rather than a panic.
pub(super) fn raw_types() -> &'static [RawType] {
    static PARSED: OnceLock<Vec<RawType>> = OnceLock::new();
    PARSED.get_or_init(|| match serde_json::from_str::<Data>(DATA) {
        Ok(data) => data.types,
        Err(error) => {
            tracing::error!(%error, "built-in DRA device data does not parse");
            Vec::new()
        }
    })
}

/// The templates of a built-in type, `None` for types without DRA devices (every non-GPU type).
/// Built once per process and shared: catalogs are rebuilt per plan and copied while planning,
/// and a p5.48xlarge template alone holds 40 devices.
pub fn builtin_templates(instance_type: &str) -> Option<Arc<DeviceTemplates>> {
    static BUILT: OnceLock<BTreeMap<&'static str, Arc<DeviceTemplates>>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            raw_types()
                .iter()
                .map(|raw| (raw.name.as_str(), Arc::new(templates(raw))))
                .collect()
        })
        .get(instance_type)
        .cloned()
}

fn templates(raw: &RawType) -> DeviceTemplates {
    let gpus = gpu_devices(&raw.gpu);
    let gpu_names: Vec<String> = gpus.iter().map(|d| d.name.clone()).collect();
    let mut pools = vec![pool(NVIDIA_GPU_DRIVER, GPU_POOL, gpus)];
    if let Some(efa) = &raw.efa {
        pools.push(pool(DRANET_DRIVER, EFA_POOL, efa_devices(efa)));
    }
    let runtime_attributes = GPU_RUNTIME_ATTRIBUTES
        .iter()
        .map(|attribute| RuntimeAttribute {
            driver: NVIDIA_GPU_DRIVER.to_string(),
            attribute: attribute.to_string(),
            devices: gpu_names.clone(),
        })
        .collect();
    DeviceTemplates {
        pools,
        runtime_attributes,
    }
}

fn pool(driver: &str, name: &str, devices: Vec<Device>) -> TemplatePool {
    TemplatePool {
        driver: driver.to_string(),
        pool: name.to_string(),
        published: None,
        devices,
        shared_counters: Vec::new(),
    }
}

/// One device per GPU, `gpu-<i>` as the driver names whole GPUs. Attribute names are the
/// driver's: unqualified ones are in the `gpu.nvidia.com` domain.
fn gpu_devices(g: &RawGpus) -> Vec<Device> {
    g.pcie_roots
        .iter()
        .enumerate()
        .map(|(i, root)| {
            let attributes = [
                ("productName", string(&g.product_name)),
                ("architecture", string(&g.architecture)),
                ("brand", string(&g.brand)),
                ("type", string(&g.kind)),
                ("cudaComputeCapability", version(&g.cuda_compute_capability)),
                (PCIE_ROOT, string(root)),
            ];
            let capacity = [(
                "memory".to_string(),
                DeviceCapacity {
                    value: Quantity(g.memory.clone()),
                    request_policy: None,
                },
            )];
            Device {
                name: format!("gpu-{i}"),
                attributes: Some(named(attributes)),
                capacity: Some(capacity.into_iter().collect()),
                ..Device::default()
            }
        })
        .collect()
}

/// One device per EFA interface. The real driver names them after PCI addresses, which no
/// template can know; `efa-<i>` is Karpenter's stand-in. NUMA node is left out where unknown.
fn efa_devices(e: &RawEfas) -> Vec<Device> {
    e.devices
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let mut attributes = named([
                ("dra.net/pciDevice", string(&e.pci_device)),
                ("dra.net/pciVendor", string(&e.pci_vendor)),
                ("dra.net/pciSubsystem", string(&d.pci_subsystem)),
                (
                    "dra.net/rdma",
                    DeviceAttribute {
                        bool: Some(d.rdma),
                        ..DeviceAttribute::default()
                    },
                ),
                (PCIE_ROOT, string(&d.pcie_root)),
            ]);
            if let Some(numa) = d.numa_node {
                let int = DeviceAttribute {
                    int: Some(numa),
                    ..DeviceAttribute::default()
                };
                attributes.insert("dra.net/numaNode".to_string(), int);
            }
            Device {
                name: format!("efa-{i}"),
                attributes: Some(attributes),
                ..Device::default()
            }
        })
        .collect()
}

fn named<const N: usize>(pairs: [(&str, DeviceAttribute); N]) -> BTreeMap<String, DeviceAttribute> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

fn string(value: &str) -> DeviceAttribute {
    DeviceAttribute {
        string: Some(value.to_string()),
        ..DeviceAttribute::default()
    }
}

fn version(value: &str) -> DeviceAttribute {
    DeviceAttribute {
        version: Some(value.to_string()),
        ..DeviceAttribute::default()
    }
}
