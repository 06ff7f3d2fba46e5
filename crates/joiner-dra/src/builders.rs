//! Compact constructors for DRA objects: used by the tests, the benchmark, and the planner
//! when it synthesizes the node-local slices of an instance type that does not exist yet.

use k8s_openapi::api::resource::v1::{
    CELDeviceSelector, Device, DeviceAttribute, DeviceCapacity, DeviceClaim, DeviceClass,
    DeviceClassSpec, DeviceRequest, DeviceSelector, ExactDeviceRequest, ResourceClaim,
    ResourceClaimSpec, ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// A device with no attributes or capacity.
pub fn device(name: &str) -> Device {
    Device {
        name: name.to_string(),
        ..Device::default()
    }
}

/// Adds an attribute (`string`, `int`, `bool` or `version`, by the value's type).
pub fn with_attribute(mut d: Device, name: &str, value: AttributeArg) -> Device {
    let attr = match value {
        AttributeArg::Str(s) => DeviceAttribute {
            string: Some(s),
            ..Default::default()
        },
        AttributeArg::Int(i) => DeviceAttribute {
            int: Some(i),
            ..Default::default()
        },
        AttributeArg::Bool(b) => DeviceAttribute {
            bool: Some(b),
            ..Default::default()
        },
        AttributeArg::Version(v) => DeviceAttribute {
            version: Some(v),
            ..Default::default()
        },
    };
    d.attributes
        .get_or_insert_with(Default::default)
        .insert(name.to_string(), attr);
    d
}

/// An attribute value for [`with_attribute`].
#[derive(Debug, Clone)]
pub enum AttributeArg {
    Str(String),
    Int(i64),
    Bool(bool),
    Version(String),
}

/// Adds a capacity.
pub fn with_capacity(mut d: Device, name: &str, value: &str) -> Device {
    d.capacity.get_or_insert_with(Default::default).insert(
        name.to_string(),
        DeviceCapacity {
            value: K8sQuantity(value.to_string()),
            request_policy: None,
        },
    );
    d
}

/// A slice of `driver`'s pool `pool`, local to `node` (or for all nodes when `node` is
/// `None`), generation 1, the only slice of its pool.
pub fn slice(
    name: &str,
    driver: &str,
    pool: &str,
    node: Option<&str>,
    devices: Vec<Device>,
) -> ResourceSlice {
    ResourceSlice {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        spec: ResourceSliceSpec {
            driver: driver.to_string(),
            pool: ResourcePool {
                name: pool.to_string(),
                generation: 1,
                resource_slice_count: 1,
            },
            node_name: node.map(str::to_string),
            all_nodes: node.is_none().then_some(true),
            devices: Some(devices),
            ..ResourceSliceSpec::default()
        },
    }
}

fn selectors(exprs: &[&str]) -> Option<Vec<DeviceSelector>> {
    (!exprs.is_empty()).then(|| {
        exprs
            .iter()
            .map(|e| DeviceSelector {
                cel: Some(CELDeviceSelector {
                    expression: e.to_string(),
                }),
            })
            .collect()
    })
}

/// A device class with CEL selectors.
pub fn class(name: &str, exprs: &[&str]) -> DeviceClass {
    DeviceClass {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        spec: Some(DeviceClassSpec {
            selectors: selectors(exprs),
            ..DeviceClassSpec::default()
        }),
    }
}

/// An `exactly` request for `count` devices of `class` with extra selectors.
pub fn exact(name: &str, class: &str, count: i64, exprs: &[&str]) -> DeviceRequest {
    DeviceRequest {
        name: name.to_string(),
        exactly: Some(ExactDeviceRequest {
            device_class_name: class.to_string(),
            count: Some(count),
            allocation_mode: Some("ExactCount".to_string()),
            selectors: selectors(exprs),
            ..ExactDeviceRequest::default()
        }),
        first_available: None,
    }
}

/// A sub-request of a `firstAvailable` list.
pub fn sub(
    name: &str,
    class: &str,
    count: i64,
    exprs: &[&str],
) -> k8s_openapi::api::resource::v1::DeviceSubRequest {
    k8s_openapi::api::resource::v1::DeviceSubRequest {
        name: name.to_string(),
        device_class_name: class.to_string(),
        count: Some(count),
        allocation_mode: Some("ExactCount".to_string()),
        selectors: selectors(exprs),
        ..Default::default()
    }
}

/// A `firstAvailable` request.
pub fn first_available(
    name: &str,
    subs: Vec<k8s_openapi::api::resource::v1::DeviceSubRequest>,
) -> DeviceRequest {
    DeviceRequest {
        name: name.to_string(),
        exactly: None,
        first_available: Some(subs),
    }
}

/// An unallocated claim.
pub fn claim(namespace: &str, name: &str, requests: Vec<DeviceRequest>) -> ResourceClaim {
    ResourceClaim {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        spec: Some(ResourceClaimSpec {
            devices: Some(DeviceClaim {
                requests: Some(requests),
                ..DeviceClaim::default()
            }),
        }),
        status: None,
    }
}
