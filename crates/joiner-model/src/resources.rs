//! Resource lists (`cpu: 500m, memory: 2Gi, nvidia.com/gpu: 1`) with exact quantities, and the
//! pod request arithmetic Kubernetes applies (init containers, sidecars, overhead).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use crate::{Quantity, QuantityError};

/// Resource name to exact quantity, sorted by name so output is deterministic.
pub type ResourceList = BTreeMap<String, Quantity>;

/// Why a resource list could not be read: the resource's name and the parse error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}: {error}")]
pub struct ResourceListError {
    pub name: String,
    pub error: QuantityError,
}

/// Parses a Kubernetes resource list exactly.
pub fn parse_resource_list(
    list: &BTreeMap<String, K8sQuantity>,
) -> Result<ResourceList, ResourceListError> {
    list.iter()
        .map(|(name, q)| {
            Quantity::try_from(q)
                .map(|q| (name.clone(), q))
                .map_err(|error| ResourceListError {
                    name: name.clone(),
                    error,
                })
        })
        .collect()
}

/// Adds `other` into `into`, resource by resource.
pub fn add_into(into: &mut ResourceList, other: &ResourceList) {
    for (name, q) in other {
        let slot = into.entry(name.clone()).or_insert(Quantity::ZERO);
        *slot = slot.saturating_add(*q);
    }
}

/// Raises each resource of `into` to at least its value in `other`.
fn max_into(into: &mut ResourceList, other: &ResourceList) {
    for (name, q) in other {
        let slot = into.entry(name.clone()).or_insert(Quantity::ZERO);
        *slot = (*slot).max(*q);
    }
}

/// A container's effective requests: its requests, with any resource that has only a limit
/// requesting that limit (the API server's defaulting, which manifests have not been through).
pub fn container_requests(
    c: &Container,
    path: &str,
) -> Result<ResourceList, (String, ResourceListError)> {
    let Some(res) = &c.resources else {
        return Ok(ResourceList::new());
    };
    let mut out = match &res.requests {
        Some(r) => parse_resource_list(r).map_err(|e| (format!("{path}.resources.requests"), e))?,
        None => ResourceList::new(),
    };
    if let Some(limits) = &res.limits {
        let limits =
            parse_resource_list(limits).map_err(|e| (format!("{path}.resources.limits"), e))?;
        for (name, q) in limits {
            out.entry(name).or_insert(q);
        }
    }
    Ok(out)
}

/// A pod's effective requests as the scheduler counts them: the larger of the regular
/// containers (plus sidecars) and the peak during initialisation, plus the pod's overhead.
///
/// Sidecars are init containers with `restartPolicy: Always`: they keep running, so they add to
/// every init container that starts after them and to the regular containers.
///
/// On error, returns the field path (relative to the pod spec, e.g. `containers[0].resources.requests`)
/// and the cause.
pub fn pod_requests(spec: &PodSpec) -> Result<ResourceList, (String, ResourceListError)> {
    let mut regular = ResourceList::new();
    for (i, c) in spec.containers.iter().enumerate() {
        add_into(
            &mut regular,
            &container_requests(c, &format!("containers[{i}]"))?,
        );
    }
    let mut sidecars = ResourceList::new();
    let mut init_peak = ResourceList::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let req = container_requests(c, &format!("initContainers[{i}]"))?;
        let mut running = sidecars.clone();
        add_into(&mut running, &req);
        max_into(&mut init_peak, &running);
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars = running;
        }
    }
    add_into(&mut regular, &sidecars);
    max_into(&mut regular, &init_peak);
    if let Some(overhead) = &spec.overhead {
        let overhead = parse_resource_list(overhead).map_err(|e| ("overhead".to_string(), e))?;
        add_into(&mut regular, &overhead);
    }
    Ok(regular)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> PodSpec {
        serde_json::from_value(serde_saphyr::from_str::<serde_json::Value>(yaml).unwrap()).unwrap()
    }

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn sums_containers_and_defaults_requests_to_limits() {
        let s = spec(
            r#"
containers:
- name: a
  resources: {requests: {cpu: 500m}, limits: {cpu: "1", nvidia.com/gpu: "1"}}
- name: b
  resources: {requests: {cpu: 250m, memory: 1Gi}}
"#,
        );
        let r = pod_requests(&s).unwrap();
        assert_eq!(r["cpu"], q("750m"));
        assert_eq!(r["memory"], q("1Gi"));
        assert_eq!(r["nvidia.com/gpu"], q("1"));
    }

    #[test]
    fn init_containers_peak_and_sidecars_add() {
        let s = spec(
            r#"
initContainers:
- name: big-init
  resources: {requests: {cpu: "2"}}
- name: sidecar
  restartPolicy: Always
  resources: {requests: {cpu: 500m}}
- name: late-init
  resources: {requests: {cpu: "1800m"}}
containers:
- name: app
  resources: {requests: {cpu: "1"}}
overhead: {cpu: 100m}
"#,
        );
        // Peak: late-init (1.8) + sidecar (0.5) = 2.3 > app (1) + sidecar (0.5); plus overhead.
        assert_eq!(pod_requests(&s).unwrap()["cpu"], q("2400m"));
    }

    #[test]
    fn names_the_bad_field() {
        let s = spec("containers:\n- name: a\n  resources: {requests: {cpu: lots}}\n");
        let (field, err) = pod_requests(&s).unwrap_err();
        assert_eq!(field, "containers[0].resources.requests");
        assert_eq!(err.name, "cpu");
    }
}
