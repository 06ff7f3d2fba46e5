//! DRA device templates: the devices the DRA drivers will publish on a node of an instance type,
//! known before the node exists.
//!
//! The NVIDIA GPU driver (`gpu.nvidia.com`) and the EFA driver DRANET (`dra.net`) publish their
//! ResourceSlices only once a node runs, so a pod whose ResourceClaim is pending on an empty
//! cluster could never be placed unless Joiner predicts those slices. Karpenter's AWS provider
//! does the same from per-type metadata scraped from live nodes; Joiner embeds the same facts
//! (`data/dra-devices.json`) and lets a user-defined `joiner.dev/v1alpha1` InstanceType state its
//! own ([`DeviceTemplates::from_spec`]).
//!
//! A template is per instance type; [`DeviceTemplates::node_slices`] turns it into the node-local
//! slices one hypothetical node would carry, with the EC2NodeClass choices (which drivers run,
//! [`ConsumableCapacity`]) applied.

mod builtin;
mod classes;
mod consumable;
mod mig;
mod slices;
mod spec;

use k8s_openapi::api::resource::v1::{CounterSet, Device};

pub use builtin::builtin_templates;
pub use classes::{EFA_DEVICE_CLASS, GPU_DEVICE_CLASS, MIG_DEVICE_CLASS, default_device_classes};
pub use consumable::{ConsumableCapacity, ConsumableCapacityError};
pub use mig::with_mig;
pub use slices::{RUNTIME_PLACEHOLDER, TemplateOptions};

/// The NVIDIA GPU DRA driver.
pub const NVIDIA_GPU_DRIVER: &str = "gpu.nvidia.com";
/// DRANET, which publishes EFA interfaces on AWS.
pub const DRANET_DRIVER: &str = "dra.net";
/// The template pool Karpenter names for NVIDIA GPUs. Real slices use the node name; this is the
/// per-type name the template keeps.
pub const GPU_POOL: &str = "gpus";
/// The template pool Karpenter names for EFA interfaces.
pub const EFA_POOL: &str = "network";
/// The attribute both drivers publish for the PCIe root complex a device hangs off: claims match
/// on it to pair a GPU with an EFA on the same root (GPUDirect RDMA).
pub const PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";
/// GPU attributes the NVIDIA driver reads from the running driver stack: no template can know
/// them, and every GPU of a node shares them.
pub const GPU_RUNTIME_ATTRIBUTES: [&str; 2] = ["driverVersion", "cudaDriverVersion"];

/// Everything the DRA drivers publish on a node of one instance type.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceTemplates {
    /// One entry per (driver, pool); the pool name here is the template's, not the node's.
    pub pools: Vec<TemplatePool>,
    /// Attributes whose values are known only once the node runs.
    pub runtime_attributes: Vec<RuntimeAttribute>,
}

/// The devices one driver publishes in one pool of a node.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplatePool {
    pub driver: String,
    /// The template's pool name (`gpus`, `network`, or the user's); a node's slices are pooled
    /// under the node's name instead (see [`DeviceTemplates::node_slices`]).
    pub pool: String,
    /// How the driver names this pool on a node, with `{node}` for the node's name, when an
    /// InstanceType declares it; otherwise the node's name (`<node>/<pool>` where one driver has
    /// several template pools).
    pub published: Option<String>,
    pub devices: Vec<Device>,
    /// Counters that partitionable devices of this pool draw from (on built-in types, only
    /// the GPUs' under dynamic MIG: Karpenter does not model MIG partitions).
    pub shared_counters: Vec<CounterSet>,
}

/// An attribute a driver sets on some devices only once the node runs (a driver version): a
/// claim that compares it to a value cannot be proven satisfiable before the node exists, while
/// one that only requires it to be equal across devices (`matchAttribute`) can, because all the
/// listed devices share one value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeAttribute {
    pub driver: String,
    /// As the driver writes it: unqualified names belong to the driver's domain.
    pub attribute: String,
    /// The devices (by name, in the driver's pools) that carry it; never empty once built.
    pub devices: Vec<String>,
}

impl DeviceTemplates {
    /// True when no driver publishes anything.
    pub fn is_empty(&self) -> bool {
        self.pools.iter().all(|p| p.devices.is_empty())
    }

    /// The pools of one driver.
    pub fn pools_of<'a>(&'a self, driver: &'a str) -> impl Iterator<Item = &'a TemplatePool> {
        self.pools.iter().filter(move |p| p.driver == driver)
    }

    /// `(driver, attribute)` for every runtime-only attribute, so that a plan can explain that,
    /// say, `gpu.nvidia.com` `driverVersion` is known only once the node runs.
    pub fn runtime_attribute_names(&self) -> impl Iterator<Item = (&str, &str)> {
        self.runtime_attributes
            .iter()
            .map(|r| (r.driver.as_str(), r.attribute.as_str()))
    }

    /// Whether `attribute` (as a claim names it: qualified, or unqualified in `driver`'s
    /// domain) is runtime-only for `driver`.
    pub fn is_runtime_attribute(&self, driver: &str, attribute: &str) -> bool {
        self.runtime_attributes
            .iter()
            .any(|r| r.driver == driver && same_attribute(driver, &r.attribute, attribute))
    }
}

/// A device's `type` attribute as the NVIDIA driver writes it (`gpu`, `mig`), if it has one.
pub(crate) fn device_type(device: &Device) -> Option<&str> {
    device.attributes.as_ref()?.get("type")?.string.as_deref()
}

/// Whether two attribute names denote the same attribute in a slice of `driver`: an unqualified
/// name is short for `<driver>/<name>`, as in Kubernetes.
pub(crate) fn same_attribute(driver: &str, a: &str, b: &str) -> bool {
    fn strip<'s>(driver: &str, name: &'s str) -> &'s str {
        name.strip_prefix(driver)
            .and_then(|rest| rest.strip_prefix('/'))
            .unwrap_or(name)
    }
    strip(driver, a) == strip(driver, b)
}

#[cfg(test)]
mod tests;
