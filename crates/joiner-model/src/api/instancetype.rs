//! Joiner's own `joiner.dev/v1alpha1` InstanceType: a machine shape the user describes (for
//! hardware the built-in catalog lacks, or to try a hypothetical one), with its offerings and,
//! for DRA, the devices its nodes publish.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{CounterSet, Device};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::FieldError;
use crate::{Price, ResourceList};

pub const API_VERSION: &str = "joiner.dev/v1alpha1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceType {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: InstanceTypeSpec,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceTypeSpec {
    /// The node's `kubernetes.io/arch`; `amd64` when not given.
    #[serde(default)]
    pub architecture: Architecture,
    /// What the node reports as capacity before the kubelet reserves anything.
    pub capacity: ResourceList,
    /// Taken off capacity (with the kubelet's reservations) to give allocatable.
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    pub overhead: ResourceList,
    /// Labels every node of this type carries, beyond the well-known ones Joiner derives.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    pub offerings: Vec<Offering>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceTemplate>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtime_attributes: Vec<RuntimeAttribute>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    #[default]
    Amd64,
    Arm64,
}

impl Architecture {
    /// The `kubernetes.io/arch` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Architecture::Amd64 => "amd64",
            Architecture::Arm64 => "arm64",
        }
    }
}

/// Where and how the type can be bought, and at what hourly price.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Offering {
    pub zone: String,
    pub capacity_type: CapacityType,
    pub price: Price,
    /// `false` models an insufficient-capacity error: the offering exists but cannot be launched.
    #[serde(default = "yes")]
    pub available: bool,
}

fn yes() -> bool {
    true
}

/// `karpenter.sh/capacity-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CapacityType {
    OnDemand,
    Spot,
    Reserved,
}

impl CapacityType {
    /// The `karpenter.sh/capacity-type` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityType::OnDemand => "on-demand",
            CapacityType::Spot => "spot",
            CapacityType::Reserved => "reserved",
        }
    }
}

/// What a device template's pool name writes for the name of the node that publishes it.
pub const NODE_PLACEHOLDER: &str = "{node}";

/// The devices one DRA driver publishes on each node of this type, as a ResourceSlice would.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceTemplate {
    pub driver: String,
    /// The name of the resource pool the driver publishes on each node, with `{node}` standing
    /// for the node's name (node-local drivers name their pool after the node, so each node's
    /// pool is its own); `{node}` when not given, as the NVIDIA GPU driver and DRANET do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    #[serde(default)]
    pub devices: Vec<Device>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_counters: Vec<CounterSet>,
}

impl DeviceTemplate {
    /// The pool name pattern (see [`DeviceTemplate::pool`]).
    pub fn pool_name(&self) -> &str {
        self.pool.as_deref().unwrap_or(NODE_PLACEHOLDER)
    }
}

/// A device attribute whose value is known only once the node runs (a driver version, say):
/// claims that select on it cannot be proven satisfiable before the node exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeAttribute {
    pub driver: String,
    pub attribute: String,
    /// The devices it applies to; all of the driver's devices when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
}

impl InstanceType {
    /// Checks that the type can hold pods at all and can be bought.
    pub fn validate(&self) -> Result<(), FieldError> {
        let spec = &self.spec;
        for required in ["cpu", "memory", "pods"] {
            if !spec.capacity.contains_key(required) {
                return Err(FieldError::new(
                    "spec.capacity",
                    format!("must include {required}"),
                ));
            }
        }
        for (list, field) in [(&spec.capacity, "capacity"), (&spec.overhead, "overhead")] {
            for (name, q) in list {
                if q.is_negative() {
                    return Err(FieldError::new(
                        format!("spec.{field}.{name}"),
                        "must not be negative",
                    ));
                }
            }
        }
        if spec.offerings.is_empty() {
            return Err(FieldError::new(
                "spec.offerings",
                "at least one offering is needed",
            ));
        }
        for (i, o) in spec.offerings.iter().enumerate() {
            if o.zone.is_empty() {
                return Err(FieldError::new(
                    format!("spec.offerings[{i}].zone"),
                    "must not be empty",
                ));
            }
            // Prices are non-negative by construction (`Price` rejects negatives when read).
        }
        for (i, d) in spec.devices.iter().enumerate() {
            if d.driver.is_empty() {
                return Err(FieldError::new(
                    format!("spec.devices[{i}].driver"),
                    "must not be empty",
                ));
            }
            let mut names = std::collections::BTreeSet::new();
            for (j, dev) in d.devices.iter().enumerate() {
                if !names.insert(dev.name.as_str()) {
                    return Err(FieldError::new(
                        format!("spec.devices[{i}].devices[{j}].name"),
                        format!("device {:?} is listed twice", dev.name),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Quantity;

    const GPU_IT: &str = r#"
apiVersion: joiner.dev/v1alpha1
kind: InstanceType
metadata: {name: gpu-it}
spec:
  architecture: amd64
  capacity: {cpu: "8", memory: 32Gi, pods: "110", nvidia.com/gpu: "2"}
  overhead: {cpu: 100m, memory: 1Gi}
  labels: {karpenter.k8s.aws/instance-family: gpu}
  offerings:
  - {zone: us-east-1a, capacityType: on-demand, price: 1.5}
  - {zone: us-east-1b, capacityType: spot, price: 0.45, available: false}
  devices:
  - driver: gpu.example.com
    devices:
    - name: gpu-0
      attributes: {model: {string: X100}}
      capacity: {memory: {value: 80Gi}}
    - name: gpu-1
  runtimeAttributes:
  - {driver: gpu.nvidia.com, attribute: driverVersion, devices: [gpu-0, gpu-1]}
"#;

    fn parse(yaml: &str) -> Result<InstanceType, serde_json::Error> {
        let v: serde_json::Value = serde_saphyr::from_str(yaml).unwrap();
        serde_json::from_value(v)
    }

    #[test]
    fn reads_the_documented_example() {
        let it = parse(GPU_IT).unwrap();
        it.validate().unwrap();
        let s = &it.spec;
        assert_eq!(s.architecture.as_str(), "amd64");
        assert_eq!(s.capacity["memory"], Quantity::parse("32Gi").unwrap());
        assert_eq!(s.overhead["cpu"], Quantity::from_milli(100));
        assert_eq!(s.offerings[0].capacity_type, CapacityType::OnDemand);
        assert_eq!(s.offerings[0].price, Price::from_usd(1.5).unwrap());
        assert!(s.offerings[0].available);
        assert!(!s.offerings[1].available);
        assert_eq!(s.devices[0].pool_name(), NODE_PLACEHOLDER);
        assert_eq!(s.devices[0].devices.len(), 2);
        assert_eq!(s.runtime_attributes[0].devices, ["gpu-0", "gpu-1"]);
    }

    #[test]
    fn rejects_unknown_capacity_type_and_negative_price() {
        let e =
            parse(&GPU_IT.replace("capacityType: spot", "capacityType: preemptible")).unwrap_err();
        assert!(e.to_string().contains("preemptible"), "{e}");
        let e = parse(&GPU_IT.replace("price: 1.5", "price: -1.5")).unwrap_err();
        assert!(e.to_string().contains("non-negative"), "{e}");
    }

    #[test]
    fn requires_cpu_memory_pods_and_an_offering() {
        let it = parse(&GPU_IT.replace("pods: \"110\", ", "")).unwrap();
        let e = it.validate().unwrap_err();
        assert_eq!(e.field, "spec.capacity");
        assert!(e.message.contains("pods"));
        let mut it = parse(GPU_IT).unwrap();
        it.spec.offerings.clear();
        assert_eq!(it.validate().unwrap_err().field, "spec.offerings");
    }
}
