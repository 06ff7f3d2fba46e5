//! MIG devices as the NVIDIA DRA driver (`gpu.nvidia.com`, v25.12) publishes them, so a claim
//! for a MIG profile (device class `mig.nvidia.com`) can be placed before the node exists.
//!
//! - **Static MIG**: the GPU operator's MIG manager has split a GPU (the NodePool's
//!   `nvidia.com/mig.config`). The driver then publishes no whole-GPU device for it, only its MIG
//!   devices, named `gpu-<i>-mig-<profile>-<giProfileId>-<start>` (`gpu-0-mig-1g5gb-19-0`), typed
//!   `mig`, with the parent's attributes, `profile`, `parentUUID`, and capacities `memory` and
//!   `memorySlice<j>` for the memory slices the instance holds.
//! - **Dynamic MIG** (the driver's `DynamicMIG` gate; here the EC2NodeClass annotation
//!   `joiner.dev/nvidia-dynamic-mig`): MIG devices are created at allocation time. Each GPU has
//!   a counter set `gpu-<i>-counter-set` with one counter per memory slice (`memory-slice-<j>`)
//!   and its one set of media engines (`ofa-engines`); every profile at every placement is a
//!   device consuming the slices it would hold, and the whole GPU consumes them all, so the
//!   allocator picks only layouts the GPU can take (Kubernetes' partitionable devices).
//!
//! What the templates cannot know is written so that no claim is promised more than the node
//! will give: `parentUUID` is `<runtime>gpu-<i>` (distinct per GPU, so `matchAttribute` on it
//! groups devices of one GPU, as NVIDIA's `gpu-test4` asks, yet never equal to a real UUID), and
//! `memory` is the profile's name read as decimal gigabytes (`5gb` is `5G`), below what the
//! driver reports (`1g.5gb` is 4864Mi on an A100-40GB).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{
    Counter, CounterSet, Device, DeviceAttribute, DeviceCapacity, DeviceCounterConsumption,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{DeviceTemplates, NVIDIA_GPU_DRIVER, RUNTIME_PLACEHOLDER, device_type};
use crate::catalog::mig::{MigGpu, MigProfile, NodeMigLayout};

/// Memory slices of a MIG-capable GPU.
const MEMORY_SLICES: u8 = 8;
/// The counter of a GPU's one set of media engines, which a `+me` instance or the whole GPU
/// takes.
const MEDIA_COUNTER: &str = "ofa-engines";

/// The templates of a node whose GPUs are `mig`'s model: with dynamic MIG, every profile at
/// every placement; else split as the MIG manager's `layout` says, if it splits any; else as
/// they are. Dynamic MIG leaves the MIG manager nothing to do, so it wins over a layout.
pub fn with_mig(
    templates: Arc<DeviceTemplates>,
    mig: &MigGpu,
    layout: Option<&NodeMigLayout>,
    dynamic: bool,
) -> Arc<DeviceTemplates> {
    match layout {
        _ if dynamic => Arc::new(templates.with_dynamic_mig(mig)),
        Some(layout) => Arc::new(templates.with_static_mig(mig, layout)),
        None => templates,
    }
}

impl DeviceTemplates {
    /// These templates on a node whose GPUs the MIG manager split as `layout` says: each split
    /// GPU's whole device is replaced by its MIG instances. GPUs left whole, and devices of other
    /// drivers, are kept.
    pub fn with_static_mig(&self, mig: &MigGpu, layout: &NodeMigLayout) -> DeviceTemplates {
        self.map_gpus(|gpu, index| {
            let Some(split) = layout.gpus.get(index).and_then(Option::as_ref) else {
                return vec![gpu];
            };
            // Checked when the NodePool was read; a layout that does not fit keeps the GPU.
            let Some(placed) = mig.placements(split) else {
                return vec![gpu];
            };
            placed
                .into_iter()
                .map(|(profile, start)| {
                    let mut device = mig_device(&gpu, index, profile, start);
                    let capacity = device.capacity.get_or_insert_with(BTreeMap::new);
                    for slice in start..start + profile.memory_slices {
                        capacity.insert(format!("memorySlice{slice}"), capacity_of("1"));
                    }
                    device
                })
                .collect()
        })
    }

    /// These templates with the driver's dynamic MIG: every GPU of `mig`'s model publishes each
    /// profile at each placement as a partitionable device sharing the GPU's counters.
    pub fn with_dynamic_mig(&self, mig: &MigGpu) -> DeviceTemplates {
        let mut sets = Vec::new();
        let mut out = self.map_gpus(|mut gpu, index| {
            let set = format!("gpu-{index}-counter-set");
            let all: Vec<String> = (0..MEMORY_SLICES)
                .map(slice_counter)
                .chain([MEDIA_COUNTER.to_string()])
                .collect();
            sets.push(CounterSet {
                name: set.clone(),
                counters: all.iter().map(|c| (c.clone(), counter("1"))).collect(),
            });
            gpu.consumes_counters = Some(vec![consumption(&set, all)]);
            let mut devices = vec![gpu.clone()];
            for profile in &mig.profiles {
                for &start in &profile.placements {
                    if start + profile.memory_slices > MEMORY_SLICES {
                        continue;
                    }
                    let mut device = mig_device(&gpu, index, profile, start);
                    let mut takes: Vec<String> = (start..start + profile.memory_slices)
                        .map(slice_counter)
                        .collect();
                    if profile.media_extensions || profile.memory_slices == MEMORY_SLICES {
                        takes.push(MEDIA_COUNTER.to_string());
                    }
                    device.consumes_counters = Some(vec![consumption(&set, takes)]);
                    devices.push(device);
                }
            }
            devices
        });
        for pool in out
            .pools
            .iter_mut()
            .filter(|p| p.driver == NVIDIA_GPU_DRIVER)
        {
            pool.shared_counters.append(&mut sets);
        }
        out
    }

    /// Replaces each whole GPU (`gpu-<i>`) of the NVIDIA driver's pools with what `f` makes of
    /// it, and lists the new devices wherever the GPU carried a runtime-only attribute.
    fn map_gpus(&self, mut f: impl FnMut(Device, usize) -> Vec<Device>) -> DeviceTemplates {
        let mut out = self.clone();
        let mut became: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for pool in out
            .pools
            .iter_mut()
            .filter(|p| p.driver == NVIDIA_GPU_DRIVER)
        {
            let mut devices = Vec::with_capacity(pool.devices.len());
            for gpu in std::mem::take(&mut pool.devices) {
                match gpu_index(&gpu) {
                    Some(index) => {
                        let name = gpu.name.clone();
                        let made = f(gpu, index);
                        became.insert(name, made.iter().map(|d| d.name.clone()).collect());
                        devices.extend(made);
                    }
                    None => devices.push(gpu),
                }
            }
            pool.devices = devices;
        }
        for r in out
            .runtime_attributes
            .iter_mut()
            .filter(|r| r.driver == NVIDIA_GPU_DRIVER)
        {
            r.devices = r
                .devices
                .iter()
                .flat_map(|d| became.get(d).cloned().unwrap_or_else(|| vec![d.clone()]))
                .collect();
        }
        out
    }
}

/// The index of a whole-GPU device (`gpu-3` is 3), `None` for anything else.
fn gpu_index(device: &Device) -> Option<usize> {
    let index = device.name.strip_prefix("gpu-")?.parse().ok()?;
    (device_type(device) == Some("gpu")).then_some(index)
}

/// One MIG instance of `gpu`: its attributes (but `type`) and the instance's own.
fn mig_device(gpu: &Device, index: usize, profile: &MigProfile, start: u8) -> Device {
    let mut attributes = gpu.attributes.clone().unwrap_or_default();
    attributes.insert("type".into(), string("mig"));
    attributes.insert("profile".into(), string(&profile.name));
    attributes.insert(
        "parentUUID".into(),
        string(&format!("{RUNTIME_PLACEHOLDER}gpu-{index}")),
    );
    let memory = format!("{}G", profile.memory_gib);
    Device {
        name: device_name(index, profile, start),
        attributes: Some(attributes),
        capacity: Some([("memory".to_string(), capacity_of(&memory))].into()),
        ..Device::default()
    }
}

/// The driver's name for a MIG device: the profile without dots, `+` as `-`.
fn device_name(index: usize, profile: &MigProfile, start: u8) -> String {
    let profile_name: String = profile
        .name
        .chars()
        .filter(|c| *c != '.')
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!(
        "gpu-{index}-mig-{profile_name}-{}-{start}",
        profile.gi_profile_id
    )
}

fn slice_counter(slice: u8) -> String {
    format!("memory-slice-{slice}")
}

fn consumption(set: &str, counters: Vec<String>) -> DeviceCounterConsumption {
    DeviceCounterConsumption {
        compatibility_groups: None,
        counter_set: set.to_string(),
        counters: counters.into_iter().map(|c| (c, counter("1"))).collect(),
    }
}

fn counter(value: &str) -> Counter {
    Counter {
        value: Quantity(value.to_string()),
    }
}

fn capacity_of(value: &str) -> DeviceCapacity {
    DeviceCapacity {
        value: Quantity(value.to_string()),
        request_policy: None,
    }
}

fn string(value: &str) -> DeviceAttribute {
    DeviceAttribute {
        string: Some(value.to_string()),
        ..DeviceAttribute::default()
    }
}

#[cfg(test)]
mod tests;
