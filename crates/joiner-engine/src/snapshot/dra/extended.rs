//! Extended resources served by DRA (`DRAExtendedResource`): a pod that asks for
//! `nvidia.com/gpu: 2` is given devices of the DeviceClass that names that resource, on every
//! node that does not advertise the resource itself.
//!
//! This follows kube-scheduler (its `DynamicResources` and `NodeResourcesFit` plugins):
//! - A DeviceClass serves `spec.extendedResourceName`, and always its implicit name
//!   `deviceclass.resource.kubernetes.io/<class>`. When several classes name the same
//!   resource, the one created last serves it; at equal times, the name that sorts first.
//! - Per node: where `status.allocatable` has the resource above zero, the device plugin
//!   serves it and the request is counted against allocatable as ever; elsewhere the resource
//!   is not counted and a claim the scheduler makes for the pod is allocated instead.
//! - That claim has one request per container and resource, `container-<i>-request-<j>`
//!   (`i` counts init containers first, then containers; `j` is the resource's place among
//!   the container's requests in name order), each for exactly the quantity asked, from the
//!   class. Init containers that run to completion reuse the devices of containers that start
//!   after them: only the largest shortfall among them is asked for, once.
//!
//! A bound pod whose status names the claim the scheduler made keeps that claim and its
//! devices; one that names none runs on a node whose device plugin serves it.

use std::collections::{BTreeMap, BTreeSet};

use joiner_model::resources::container_requests;
use k8s_openapi::api::core::v1::{Container, ContainerExtendedResourceRequest, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClaim, DeviceClass, DeviceRequest, ExactDeviceRequest, ResourceClaim, ResourceClaimSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

pub use crate::scheduling::extended::ExtendedRequest;

/// The annotation kube-scheduler puts on the claims it makes for extended resources.
pub const EXTENDED_CLAIM_ANNOTATION: &str = "resource.kubernetes.io/extended-resource-claim";
/// The prefix of the name every DeviceClass serves implicitly.
pub const IMPLICIT_PREFIX: &str = "deviceclass.resource.kubernetes.io/";
/// The claim name (`<pod>-<this>-<suffix>`) kube-scheduler generates.
pub const CLAIM_NAME_PART: &str = "extended-resources";

/// Which DeviceClass serves each extended resource name.
#[derive(Debug, Clone, Default)]
pub struct ExtendedNames {
    by_resource: BTreeMap<String, String>,
}

impl ExtendedNames {
    pub fn new(classes: &[DeviceClass]) -> ExtendedNames {
        // (resource) -> (creation time, class name) of the class serving it so far.
        let mut explicit: BTreeMap<String, (Option<Time>, String)> = BTreeMap::new();
        let mut by_resource = BTreeMap::new();
        for class in classes {
            let Some(name) = class.metadata.name.clone() else {
                continue;
            };
            by_resource.insert(format!("{IMPLICIT_PREFIX}{name}"), name.clone());
            let spec = joiner_model::dra::class_spec(class);
            let Some(resource) = spec.extended_resource_name.clone() else {
                continue;
            };
            let created = class.metadata.creation_timestamp.clone();
            let better = match explicit.get(&resource) {
                None => true,
                Some((t, n)) => created > *t || (created == *t && name < *n),
            };
            if better {
                explicit.insert(resource, (created, name));
            }
        }
        for (resource, (_, class)) in explicit {
            by_resource.entry(resource).or_insert(class);
        }
        ExtendedNames { by_resource }
    }

    /// The class that serves `resource`, if any does.
    pub fn class_for(&self, resource: &str) -> Option<&str> {
        self.by_resource.get(resource).map(String::as_str)
    }

    /// Whether the pod asks for any resource a class serves.
    pub fn requested_by(&self, pod: &Pod) -> bool {
        !self.by_resource.is_empty()
            && containers(pod).any(|(_, c, _)| {
                c.resources.as_ref().is_some_and(|r| {
                    r.requests
                        .iter()
                        .chain(r.limits.iter())
                        .flat_map(|l| l.keys())
                        .any(|k| self.by_resource.contains_key(k))
                })
            })
    }
}

/// The claim kube-scheduler would make for a pending pod, and what each of its requests
/// serves; `None` when the pod asks for no resource a class serves.
pub fn claim_for(
    pod: &Pod,
    names: &ExtendedNames,
    claim_name: String,
) -> Option<(ResourceClaim, Vec<ExtendedRequest>)> {
    let mut long_lived: Vec<(usize, String, String, i64)> = Vec::new();
    let mut short_lived: Vec<(usize, String, String, i64)> = Vec::new();
    for (i, c, runs_to_completion) in containers(pod) {
        let Ok(requests) = container_requests(c, "") else {
            continue;
        };
        for (j, (resource, qty)) in requests.iter().enumerate() {
            if names.class_for(resource).is_none() {
                continue;
            }
            let Some(count) = whole(qty) else {
                continue;
            };
            let entry = (
                i,
                format!("container-{i}-request-{j}"),
                resource.clone(),
                count,
            );
            if runs_to_completion {
                short_lived.push(entry);
            } else {
                long_lived.push(entry);
            }
        }
    }
    let mut requests: Vec<(String, String, i64)> = long_lived
        .iter()
        .map(|(_, n, r, q)| (n.clone(), r.clone(), *q))
        .collect();
    // An init container runs before every container after it: it uses their devices first and
    // needs its own only for what they lack. The largest such need per resource is asked once.
    let mut shortfalls: BTreeMap<String, (String, i64)> = BTreeMap::new();
    for (i, name, resource, count) in &short_lived {
        let after: i64 = long_lived
            .iter()
            .filter(|(k, _, r, _)| k > i && r == resource)
            .map(|(_, _, _, q)| *q)
            .sum();
        let need = count - after;
        if need > 0 && shortfalls.get(resource).is_none_or(|(_, q)| need > *q) {
            shortfalls.insert(resource.clone(), (name.clone(), need));
        }
    }
    requests.extend(shortfalls.into_iter().map(|(r, (n, q))| (n, r, q)));
    if requests.is_empty() {
        return None;
    }
    requests.sort();
    let served = requests
        .iter()
        .map(|(n, r, _)| ExtendedRequest {
            request: n.clone(),
            resource: r.clone(),
        })
        .collect();
    let device_requests = requests
        .into_iter()
        .map(|(name, resource, count)| DeviceRequest {
            name,
            exactly: Some(ExactDeviceRequest {
                device_class_name: names.class_for(&resource).unwrap_or_default().to_string(),
                allocation_mode: Some("ExactCount".into()),
                count: Some(count),
                ..ExactDeviceRequest::default()
            }),
            ..DeviceRequest::default()
        })
        .collect();
    let claim = ResourceClaim {
        metadata: ObjectMeta {
            name: Some(claim_name),
            namespace: Some(
                pod.metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into()),
            ),
            annotations: Some([(EXTENDED_CLAIM_ANNOTATION.to_string(), "true".to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(ResourceClaimSpec {
            devices: Some(DeviceClaim {
                requests: Some(device_requests),
                ..DeviceClaim::default()
            }),
        }),
        status: None,
    };
    Some((claim, served))
}

/// Which of the claim's requests serves each container's extended resource, as kube-scheduler
/// records it in the pod's `status.extendedResourceClaimStatus` for the kubelet: a container
/// that keeps running has its own request; one that runs to completion uses the request made
/// for init containers, when the spec has one for that resource.
pub fn request_mappings(
    pod: &Pod,
    spec: &ResourceClaimSpec,
) -> Vec<ContainerExtendedResourceRequest> {
    let names: BTreeSet<&str> = spec
        .devices
        .iter()
        .flat_map(|d| d.requests.iter().flatten())
        .map(|r| r.name.as_str())
        .collect();
    let mut own: Vec<(String, String, String)> = Vec::new();
    let mut init_request: BTreeMap<String, String> = BTreeMap::new();
    let mut waiting: Vec<(String, String)> = Vec::new();
    for (i, c, runs_to_completion) in containers(pod) {
        let Ok(requests) = container_requests(c, "") else {
            continue;
        };
        for (j, resource) in requests.keys().enumerate() {
            let request = format!("container-{i}-request-{j}");
            let listed = names.contains(request.as_str());
            if runs_to_completion {
                if listed {
                    init_request.insert(resource.clone(), request);
                }
                waiting.push((c.name.clone(), resource.clone()));
            } else if listed {
                own.push((c.name.clone(), resource.clone(), request));
            }
        }
    }
    let init = waiting.into_iter().filter_map(|(container, resource)| {
        let request = init_request.get(&resource)?.clone();
        Some((container, resource, request))
    });
    init.chain(own)
        .map(
            |(container_name, resource_name, request_name)| ContainerExtendedResourceRequest {
                container_name,
                resource_name,
                request_name,
            },
        )
        .collect()
}

/// The pod's containers as the scheduler numbers them: init containers first, each with
/// whether it runs to completion (not a sidecar), then the regular containers.
fn containers(pod: &Pod) -> impl Iterator<Item = (usize, &Container, bool)> {
    let spec = pod.spec.as_ref();
    let init = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|c| (c, c.restart_policy.as_deref() != Some("Always")));
    let regular = spec
        .map(|s| s.containers.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|c| (c, false));
    init.chain(regular)
        .enumerate()
        .map(|(i, (c, short))| (i, c, short))
}

/// A quantity as a whole number of devices; `None` for fractions (which the scheduler skips).
fn whole(q: &joiner_model::Quantity) -> Option<i64> {
    const NANO: i128 = 1_000_000_000;
    let n = q.nanos();
    (n > 0 && n % NANO == 0)
        .then(|| i64::try_from(n / NANO).ok())
        .flatten()
}

#[cfg(test)]
#[path = "extended_tests.rs"]
mod tests;
