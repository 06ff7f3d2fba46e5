//! The ResourceSlices a hypothetical node would carry, so the DRA allocator can place claims on
//! a node before it is launched.

use std::collections::BTreeMap;

use joiner_model::api::instancetype::NODE_PLACEHOLDER;
use k8s_openapi::api::resource::v1::{
    Device, DeviceAttribute, ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{
    ConsumableCapacity, DRANET_DRIVER, DeviceTemplates, NVIDIA_GPU_DRIVER, RuntimeAttribute,
    TemplatePool,
};

/// The value runtime-only attributes get in predicted slices. One string shared by all the
/// listed devices keeps `matchAttribute` true across a node's GPUs (they do share one driver
/// version), while a selector that compares it to a real value, or as a version, fails: the
/// prediction never promises what only the running node can tell.
pub const RUNTIME_PLACEHOLDER: &str = "<runtime>";

/// What the node's class says about its DRA drivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TemplateOptions {
    /// The NVIDIA GPU DRA driver runs on the node (`gpu.nvidia.com` slices).
    pub nvidia_gpu: bool,
    /// DRANET runs on the node (`dra.net` slices).
    pub efa: bool,
    /// GPU sharing mode, applied to `gpu.nvidia.com` whole GPUs.
    pub consumable: ConsumableCapacity,
    /// The NVIDIA driver runs with its `DynamicMIG` gate (the EC2NodeClass's
    /// `joiner.dev/nvidia-dynamic-mig`): MIG-capable GPUs publish their profiles as
    /// partitionable devices ([`DeviceTemplates::with_dynamic_mig`]).
    pub dynamic_mig: bool,
}

impl TemplateOptions {
    /// Whether the node runs `driver`. Drivers Joiner has no switch for (those of user-defined
    /// types) are assumed to run: the user declared them for this type.
    pub fn driver_enabled(&self, driver: &str) -> bool {
        match driver {
            NVIDIA_GPU_DRIVER => self.nvidia_gpu,
            DRANET_DRIVER => self.efa,
            _ => true,
        }
    }
}

impl DeviceTemplates {
    /// How many devices each driver the node runs will publish on it: what a running node's
    /// slices are checked against.
    pub fn device_counts(&self, opts: &TemplateOptions) -> BTreeMap<String, u32> {
        let mut counts = BTreeMap::new();
        for p in self.pools.iter().filter(|p| opts.driver_enabled(&p.driver)) {
            let n = u32::try_from(p.devices.len()).unwrap_or(u32::MAX);
            *counts.entry(p.driver.clone()).or_insert(0u32) += n;
        }
        counts
    }

    /// These templates with `driver` publishing at most `keep` devices: its pools' last devices
    /// are dropped (nodes of the type were found to publish only that many).
    pub fn with_at_most(&self, driver: &str, keep: u32) -> DeviceTemplates {
        let mut out = self.clone();
        let mut left = usize::try_from(keep).unwrap_or(usize::MAX);
        for p in out.pools.iter_mut().filter(|p| p.driver == driver) {
            p.devices.truncate(left);
            left -= p.devices.len();
        }
        out
    }

    /// The node-local slices of a node named `node_name`: one per enabled driver and template
    /// pool, complete in one slice (`resourceSliceCount: 1`, generation 0), pooled under the
    /// node's name as the real drivers do, so each hypothetical node has pools of its own. A
    /// driver with several template pools gets `<node>/<pool>` for each instead.
    pub fn node_slices(&self, node_name: &str, opts: &TemplateOptions) -> Vec<ResourceSlice> {
        self.pools
            .iter()
            .filter(|p| opts.driver_enabled(&p.driver))
            .map(|p| {
                let pool_name = match &p.published {
                    Some(pattern) => pattern.replace(NODE_PLACEHOLDER, node_name),
                    None if self.pools_of(&p.driver).count() == 1 => node_name.to_string(),
                    None => format!("{node_name}/{}", p.pool),
                };
                self.slice(p, node_name, pool_name, opts)
            })
            .collect()
    }

    fn slice(
        &self,
        p: &TemplatePool,
        node_name: &str,
        pool_name: String,
        opts: &TemplateOptions,
    ) -> ResourceSlice {
        let runtime: Vec<&RuntimeAttribute> = self
            .runtime_attributes
            .iter()
            .filter(|r| r.driver == p.driver)
            .collect();
        let devices = p
            .devices
            .iter()
            .map(|d| node_device(d, &p.driver, &runtime, opts))
            .collect();
        let name = format!("{}-{}", pool_name.replace('/', "-"), p.driver);
        ResourceSlice {
            metadata: ObjectMeta {
                name: Some(name),
                ..ObjectMeta::default()
            },
            spec: ResourceSliceSpec {
                driver: p.driver.clone(),
                node_name: Some(node_name.to_string()),
                pool: ResourcePool {
                    name: pool_name,
                    generation: 0,
                    resource_slice_count: 1,
                },
                devices: Some(devices),
                shared_counters: (!p.shared_counters.is_empty()).then(|| p.shared_counters.clone()),
                ..ResourceSliceSpec::default()
            },
        }
    }
}

fn node_device(
    template: &Device,
    driver: &str,
    runtime: &[&RuntimeAttribute],
    opts: &TemplateOptions,
) -> Device {
    let mut device = template.clone();
    for r in runtime.iter().filter(|r| r.devices.contains(&device.name)) {
        let attributes = device.attributes.get_or_insert_with(BTreeMap::new);
        attributes.insert(
            r.attribute.clone(),
            DeviceAttribute {
                string: Some(RUNTIME_PLACEHOLDER.to_string()),
                ..DeviceAttribute::default()
            },
        );
    }
    // MIG devices are not shared: the driver's consumable capacity is a whole GPU's.
    if driver == NVIDIA_GPU_DRIVER && super::device_type(&device) != Some("mig") {
        opts.consumable.apply(&mut device);
    }
    device
}
