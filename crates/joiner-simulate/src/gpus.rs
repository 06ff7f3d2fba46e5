//! The GPUs a `joiner simulate` sample counts, however the node serves them: those the device
//! plugin advertises (`nvidia.com/gpu` in allocatable), and the whole GPUs the NVIDIA DRA driver
//! publishes on nodes that advertise none. In use: what running pods ask of the device plugin,
//! and the whole GPUs allocated to claims running pods hold (each GPU once, however many
//! claims share it). MIG instances and GPU shares are not whole GPUs and are not counted.

use std::collections::{BTreeMap, BTreeSet};

use joiner_model::Quantity;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};

const NVIDIA_GPU: &str = "nvidia.com/gpu";
const NVIDIA_DRIVER: &str = "gpu.nvidia.com";

/// Allocatable and in-use GPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct GpuCount {
    pub allocatable: f64,
    pub requested: f64,
}

/// Counts the GPUs of `nodes`, and of them those `running` pods use.
pub(crate) fn count(
    nodes: &[Node],
    slices: &[ResourceSlice],
    claims: &[ResourceClaim],
    running: &[&Pod],
) -> GpuCount {
    let whole = whole_gpus(slices);
    let mut out = GpuCount::default();
    for n in nodes {
        let name = n.metadata.name.as_deref().unwrap_or_default();
        let plugin = gpu_of(n.status.as_ref().and_then(|s| s.allocatable.as_ref()));
        out.allocatable += if plugin > 0.0 {
            plugin
        } else {
            whole.get(name).map_or(0, BTreeSet::len) as f64
        };
    }
    let uids: BTreeSet<&str> = running
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    let all_whole: BTreeSet<&(String, String)> = whole.values().flatten().collect();
    let mut held = BTreeSet::new();
    for c in claims {
        let Some(status) = c.status.as_ref() else {
            continue;
        };
        let reserved = status.reserved_for.iter().flatten();
        if !reserved.into_iter().any(|r| uids.contains(r.uid.as_str())) {
            continue;
        }
        let results = status
            .allocation
            .iter()
            .flat_map(|a| a.devices.iter())
            .flat_map(|d| d.results.iter().flatten());
        for r in results.filter(|r| r.driver == NVIDIA_DRIVER) {
            let key = (r.pool.clone(), r.device.clone());
            if all_whole.contains(&key) {
                held.insert(key);
            }
        }
    }
    out.requested = held.len() as f64
        + running
            .iter()
            // A pod DRA serves `nvidia.com/gpu` for holds its GPUs through its claim.
            .filter(|p| {
                p.status
                    .as_ref()
                    .is_none_or(|s| s.extended_resource_claim_status.is_none())
            })
            .map(|p| pod_gpus(p))
            .sum::<f64>();
    out
}

/// Per node: the whole GPUs (pool, device) the NVIDIA DRA driver publishes there.
fn whole_gpus(slices: &[ResourceSlice]) -> BTreeMap<String, BTreeSet<(String, String)>> {
    let mut out: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
    for s in slices.iter().filter(|s| s.spec.driver == NVIDIA_DRIVER) {
        let Some(node) = s.spec.node_name.clone() else {
            continue;
        };
        for d in s.spec.devices.iter().flatten() {
            let kind = d
                .attributes
                .as_ref()
                .and_then(|a| a.get("type"))
                .and_then(|a| a.string.as_deref());
            if kind == Some("gpu") {
                out.entry(node.clone())
                    .or_default()
                    .insert((s.spec.pool.name.clone(), d.name.clone()));
            }
        }
    }
    out
}

fn gpu_of(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> f64 {
    list.and_then(|l| l.get(NVIDIA_GPU))
        .and_then(|q| Quantity::try_from(q).ok())
        .map(|q| q.nanos() as f64 / 1e9)
        .unwrap_or(0.0)
}

/// What a pod's containers ask of the device plugin (a limit alone is the request).
fn pod_gpus(pod: &Pod) -> f64 {
    pod.spec
        .as_ref()
        .map(|s| {
            s.containers
                .iter()
                .map(|c| {
                    let r = c.resources.as_ref();
                    let req = gpu_of(r.and_then(|r| r.requests.as_ref()));
                    if req > 0.0 {
                        req
                    } else {
                        gpu_of(r.and_then(|r| r.limits.as_ref()))
                    }
                })
                .sum()
        })
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn from<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).expect("decodes")
    }

    fn claim(name: &str, pod_uid: &str, devices: &[&str]) -> ResourceClaim {
        let results: Vec<_> = devices
            .iter()
            .map(
                |d| json!({"request": "gpu", "driver": "gpu.nvidia.com", "pool": "b", "device": d}),
            )
            .collect();
        from(json!({
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {},
            "status": {
                "allocation": {"devices": {"results": results}},
                "reservedFor": [{"resource": "pods", "name": "x", "uid": pod_uid}]
            }
        }))
    }

    #[test]
    fn gpus_count_the_same_whichever_way_a_node_serves_them() {
        let nodes: Vec<Node> = vec![
            from(
                json!({"metadata": {"name": "a"}, "status": {"allocatable": {"nvidia.com/gpu": "4"}}}),
            ),
            from(json!({"metadata": {"name": "b"}, "status": {"allocatable": {"cpu": "8"}}})),
        ];
        let gpu =
            |n: &str, kind: &str| json!({"name": n, "attributes": {"type": {"string": kind}}});
        let slices: Vec<ResourceSlice> = vec![from(json!({
            "metadata": {"name": "b-gpu"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "b",
                "pool": {"name": "b", "generation": 1, "resourceSliceCount": 1},
                "devices": [gpu("gpu-0", "gpu"), gpu("gpu-1", "gpu"), gpu("gpu-2", "gpu"),
                    gpu("gpu-3", "gpu"), gpu("gpu-3-mig-1g", "mig")]}
        }))];
        let plugin_pod: Pod = from(json!({"metadata": {"name": "p1", "uid": "u1"}, "spec": {
            "nodeName": "a",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}));
        let claim_pod: Pod = from(json!({"metadata": {"name": "p2", "uid": "u2"},
            "spec": {"nodeName": "b", "containers": [{"name": "c"}]}}));
        let extended_pod: Pod = from(json!({"metadata": {"name": "p3", "uid": "u3"},
            "spec": {"nodeName": "b",
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
            "status": {"extendedResourceClaimStatus": {"resourceClaimName": "p3-extended-resources-abcde",
                "requestMappings": []}}}));
        let claims = vec![
            claim("c1", "u2", &["gpu-0", "gpu-1"]),
            // Shares gpu-1 with c1: counted once. Its pod's own request is not counted again.
            claim("p3-extended-resources-abcde", "u3", &["gpu-1", "gpu-2"]),
            // Held by a pod that is not running, and a MIG instance: neither counts.
            claim("c3", "gone", &["gpu-3"]),
            claim("c4", "u2", &["gpu-3-mig-1g"]),
        ];
        let running = [&plugin_pod, &claim_pod, &extended_pod];
        let counted = count(&nodes, &slices, &claims, &running);
        assert_eq!(
            counted,
            GpuCount {
                allocatable: 8.0,
                requested: 5.0
            }
        );
    }
}
