//! The resource claim controller and kube-scheduler's DRA half, for `joiner simulate`: when a
//! pod is bound, the claims it uses get the allocation the plan made for them on that node, as
//! kube-scheduler writes it, and a claim from a template is created first, named and owned as
//! the resource claim controller does (`<pod>-<claim>-<suffix>`, recorded in the pod's
//! `status.resourceClaimStatuses`). When a pod is gone its generated claims go too, and a
//! shared claim no pod reserves any more is deallocated, so its devices are free again.
//!
//! Without this, a device held by a running pod would look free to the next plan, which is not
//! how a cluster behaves.

use std::collections::BTreeSet;

use joiner_controller::ControllerError;
use joiner_controller::store::{ClusterStore, StoreError};
use joiner_engine::plan::ClaimAllocation;
use k8s_openapi::api::core::v1::{Pod, PodExtendedResourceClaimStatus, PodResourceClaimStatus};
use k8s_openapi::api::resource::v1::{
    ResourceClaim, ResourceClaimConsumerReference, ResourceClaimSpec, ResourceClaimStatus,
    ResourceClaimTemplate,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// The annotation the resource claim controller puts on a claim it generates: the pod's
/// claim it stands for.
const POD_CLAIM_NAME: &str = "resource.kubernetes.io/pod-claim-name";

/// Writes what binding `pod` to `node` allocates: each of its claims the plan allocated there
/// gets that allocation and a reservation for the pod. Returns the pod with its
/// `status.resourceClaimStatuses`, for the caller's update.
pub fn allocate<S: ClusterStore>(
    store: &S,
    mut pod: Pod,
    node: &str,
    planned: &[ClaimAllocation],
) -> Result<Pod, ControllerError> {
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = pod.metadata.name.clone().unwrap_or_default();
    let refs = pod
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.clone())
        .unwrap_or_default();
    let mut statuses = Vec::new();
    for r in refs {
        if let Some(claim) = &r.resource_claim_name {
            if let Some(a) = allocation_for(planned, node, &format!("{ns}/{claim}"))
                && let Some(existing) = store.get::<ResourceClaim>(Some(&ns), claim)?
            {
                write_status(store, existing, &pod, a)?;
            }
        } else if let Some(template) = &r.resource_claim_template_name {
            let planned_key = format!("{ns}/{name}-{}-*", r.name);
            let Some(a) = allocation_for(planned, node, &planned_key) else {
                continue;
            };
            let Some(t) = store.get::<ResourceClaimTemplate>(Some(&ns), template)? else {
                continue;
            };
            let generated = format!("{name}-{}-{}", r.name, suffix(&pod, &r.name));
            let annotation = (POD_CLAIM_NAME, r.name.as_str());
            let spec = joiner_model::dra::template_claim_spec(&t).cloned();
            let Some(created) = create_owned(store, &pod, &generated, annotation, spec)? else {
                continue;
            };
            write_status(store, created, &pod, a)?;
            statuses.push(PodResourceClaimStatus {
                name: r.name.clone(),
                resource_claim_name: Some(generated),
            });
        }
    }
    if !statuses.is_empty() {
        pod.status
            .get_or_insert_with(Default::default)
            .resource_claim_statuses = Some(statuses);
    }
    extended_claim(store, &mut pod, node, planned)?;
    Ok(pod)
}

/// The claim kube-scheduler makes for the pod's extended resources that DRA serves on `node`,
/// when the plan made one: created as kube-scheduler creates it (`<pod>-extended-resources-`
/// and a suffix, its annotation, owned by the pod), allocated as planned, and named in the
/// pod's `status.extendedResourceClaimStatus` with the request serving each container. A pod
/// whose status names one already keeps it, allocated where the plan moves it.
fn extended_claim<S: ClusterStore>(
    store: &S,
    pod: &mut Pod,
    node: &str,
    planned: &[ClaimAllocation],
) -> Result<(), ControllerError> {
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = pod.metadata.name.clone().unwrap_or_default();
    if let Some(status) = pod
        .status
        .as_ref()
        .and_then(|s| s.extended_resource_claim_status.as_ref())
    {
        let key = format!("{ns}/{}", status.resource_claim_name);
        if let Some(a) = allocation_for(planned, node, &key)
            && let Some(existing) =
                store.get::<ResourceClaim>(Some(&ns), &status.resource_claim_name)?
        {
            write_status(store, existing, pod, a)?;
        }
        return Ok(());
    }
    let part = joiner_engine::snapshot::CLAIM_NAME_PART;
    let Some(a) = allocation_for(planned, node, &format!("{ns}/{name}-{part}-*")) else {
        return Ok(());
    };
    let Some(spec) = a.spec.clone() else {
        return Ok(());
    };
    let generated = format!("{name}-{part}-{}", suffix(pod, part));
    let mappings = joiner_engine::snapshot::request_mappings(pod, &spec);
    let annotation = (joiner_engine::snapshot::EXTENDED_CLAIM_ANNOTATION, "true");
    let Some(created) = create_owned(store, pod, &generated, annotation, Some(spec))? else {
        return Ok(());
    };
    write_status(store, created, pod, a)?;
    pod.status
        .get_or_insert_with(Default::default)
        .extended_resource_claim_status = Some(PodExtendedResourceClaimStatus {
        resource_claim_name: generated,
        request_mappings: mappings,
    });
    Ok(())
}

/// Deletes the generated claims of pods that are gone, and takes gone pods' reservations off
/// shared claims, deallocating those no pod reserves any more. Returns the claims deleted.
pub fn collect<S: ClusterStore>(store: &S) -> Result<Vec<String>, ControllerError> {
    let pods: BTreeSet<String> = store
        .list::<Pod>()?
        .into_iter()
        .filter_map(|p| p.metadata.uid)
        .collect();
    let mut deleted = Vec::new();
    for mut c in store.list::<ResourceClaim>()? {
        let ns = c.metadata.namespace.clone();
        let name = c.metadata.name.clone().unwrap_or_default();
        let owner = c
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.kind == "Pod");
        if let Some(o) = owner {
            if !pods.contains(&o.uid) {
                match store.delete::<ResourceClaim>(ns.as_deref(), &name) {
                    Ok(_) | Err(StoreError::NotFound(_)) => deleted.push(name),
                    Err(e) => return Err(e.into()),
                }
            }
            continue;
        }
        let Some(status) = c.status.as_mut() else {
            continue;
        };
        let Some(reserved) = status.reserved_for.as_mut() else {
            continue;
        };
        let before = reserved.len();
        reserved.retain(|r| r.resource != "pods" || pods.contains(&r.uid));
        if reserved.len() == before {
            continue;
        }
        if reserved.is_empty() {
            status.reserved_for = None;
            status.allocation = None;
        }
        match store.update(&c) {
            Ok(_) | Err(StoreError::Conflict(_) | StoreError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(deleted)
}

/// Creates the claim `name` in the pod's namespace, owned by the pod and annotated as its
/// maker annotates it, or finds it made by an earlier try; `None` when it went in between.
fn create_owned<S: ClusterStore>(
    store: &S,
    pod: &Pod,
    name: &str,
    (key, value): (&str, &str),
    spec: Option<ResourceClaimSpec>,
) -> Result<Option<ResourceClaim>, ControllerError> {
    let ns = Some(
        pod.metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
    );
    let claim = ResourceClaim {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: ns.clone(),
            annotations: Some([(key.to_string(), value.to_string())].into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    };
    match store.create(&claim) {
        Ok(c) => Ok(Some(c)),
        Err(StoreError::AlreadyExists(_) | StoreError::Conflict(_)) => {
            Ok(store.get::<ResourceClaim>(ns.as_deref(), name)?)
        }
        Err(e) => Err(e.into()),
    }
}

fn allocation_for<'a>(
    planned: &'a [ClaimAllocation],
    node: &str,
    key: &str,
) -> Option<&'a ClaimAllocation> {
    planned.iter().find(|a| a.node == node && a.claim == key)
}

/// The claim allocated as planned (unless it already is) and reserved for `pod`.
fn write_status<S: ClusterStore>(
    store: &S,
    mut claim: ResourceClaim,
    pod: &Pod,
    planned: &ClaimAllocation,
) -> Result<(), ControllerError> {
    let status = claim
        .status
        .get_or_insert_with(ResourceClaimStatus::default);
    if status.allocation.is_none() {
        status.allocation = Some(planned.allocation.clone());
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let reserved = status.reserved_for.get_or_insert_with(Vec::new);
    if !reserved.iter().any(|r| r.uid == uid) {
        reserved.push(ResourceClaimConsumerReference {
            api_group: None,
            resource: "pods".into(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid,
        });
    }
    match store.update(&claim) {
        Ok(_) | Err(StoreError::Conflict(_) | StoreError::NotFound(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Five lowercase characters from the pod's uid and claim, standing for the resource claim
/// controller's random suffix: stable across steps, so a retried bind finds its claim.
fn suffix(pod: &Pod, claim: &str) -> String {
    let seed = format!(
        "{}/{claim}",
        pod.metadata.uid.as_deref().unwrap_or_default()
    );
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in seed.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (0..5)
        .map(|i| {
            let c = ((h >> (i * 5)) % 26) as u8;
            char::from(b'a' + c)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_controller::clock::ManualClock;
    use joiner_controller::store::InMemoryCluster;
    use k8s_openapi::api::core::v1::{PodResourceClaim, PodSpec};
    use k8s_openapi::api::resource::v1::{
        AllocationResult, DeviceAllocationResult, DeviceRequestAllocationResult,
        ResourceClaimTemplateSpec,
    };

    fn pod(store: &InMemoryCluster, name: &str, claim: PodResourceClaim) -> Pod {
        store
            .create(&Pod {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    namespace: Some("ml".into()),
                    ..ObjectMeta::default()
                },
                spec: Some(PodSpec {
                    resource_claims: Some(vec![claim]),
                    ..PodSpec::default()
                }),
                status: None,
            })
            .expect("pod")
    }

    fn planned(claim: &str, device: &str) -> ClaimAllocation {
        ClaimAllocation {
            spec: None,
            claim: claim.into(),
            node: "n1".into(),
            allocation: AllocationResult {
                devices: Some(DeviceAllocationResult {
                    results: Some(vec![DeviceRequestAllocationResult {
                        device: device.into(),
                        driver: "gpu.nvidia.com".into(),
                        pool: "n1".into(),
                        request: "gpu".into(),
                        ..DeviceRequestAllocationResult::default()
                    }]),
                    config: None,
                }),
                ..AllocationResult::default()
            },
        }
    }

    #[test]
    fn a_bound_pods_claims_hold_their_devices_until_the_pod_is_gone() {
        let store = InMemoryCluster::new(ManualClock::new());
        store
            .create(&ResourceClaimTemplate {
                metadata: ObjectMeta {
                    name: Some("one-gpu".into()),
                    namespace: Some("ml".into()),
                    ..ObjectMeta::default()
                },
                spec: Some(ResourceClaimTemplateSpec::default()),
            })
            .expect("template");
        store
            .create(&ResourceClaim {
                metadata: ObjectMeta {
                    name: Some("shared".into()),
                    namespace: Some("ml".into()),
                    ..ObjectMeta::default()
                },
                ..ResourceClaim::default()
            })
            .expect("shared claim");
        let own = pod(
            &store,
            "a",
            PodResourceClaim {
                name: "gpu".into(),
                resource_claim_template_name: Some("one-gpu".into()),
                ..PodResourceClaim::default()
            },
        );
        let sharer = pod(
            &store,
            "b",
            PodResourceClaim {
                name: "gpu".into(),
                resource_claim_name: Some("shared".into()),
                ..PodResourceClaim::default()
            },
        );
        let plan = [
            planned("ml/a-gpu-*", "gpu-0"),
            planned("ml/shared", "gpu-1"),
        ];
        let own = allocate(&store, own, "n1", &plan).expect("allocate");
        store.update(&own).expect("pod status");
        let sharer = allocate(&store, sharer, "n1", &plan).expect("allocate");
        store.update(&sharer).expect("pod status");

        // The generated claim: named as the controller names it, recorded on the pod, owned by
        // it, allocated as planned and reserved for it.
        let statuses = own
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.clone())
            .expect("claim statuses");
        let generated = statuses[0].resource_claim_name.clone().expect("a name");
        assert!(generated.starts_with("a-gpu-") && generated.len() == "a-gpu-".len() + 5);
        let claim = store
            .get::<ResourceClaim>(Some("ml"), &generated)
            .expect("get")
            .expect("created");
        let status = claim.status.expect("status");
        assert_eq!(status.allocation, Some(plan[0].allocation.clone()));
        assert_eq!(status.reserved_for.map(|r| r.len()), Some(1));
        let shared = store
            .get::<ResourceClaim>(Some("ml"), "shared")
            .expect("get")
            .expect("there");
        assert!(shared.status.and_then(|s| s.allocation).is_some());

        // Both pods go: the generated claim with its pod, the shared one deallocated.
        for p in ["a", "b"] {
            store.delete::<Pod>(Some("ml"), p).expect("delete");
        }
        assert_eq!(
            collect(&store).expect("collect"),
            std::slice::from_ref(&generated)
        );
        assert!(
            store
                .get::<ResourceClaim>(Some("ml"), &generated)
                .expect("get")
                .is_none()
        );
        let shared = store
            .get::<ResourceClaim>(Some("ml"), "shared")
            .expect("get")
            .expect("there");
        assert!(shared.status.and_then(|s| s.allocation).is_none());
    }

    #[test]
    fn a_pod_asking_for_nvidia_gpu_gets_the_claim_kube_scheduler_makes_and_keeps_it() {
        let store = InMemoryCluster::new(ManualClock::new());
        let trainer: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "trainer", "namespace": "ml", "uid": "u-1"},
            "spec": {
                "initContainers": [{"name": "fetch", "resources": {"limits": {"nvidia.com/gpu": "3"}}}],
                "containers": [{"name": "train", "resources": {
                    "requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}}]
            }
        }))
        .expect("pod");
        let trainer = store.create(&trainer).expect("pod");
        let mut a = planned("ml/trainer-extended-resources-*", "gpu-0");
        a.spec = Some(serde_json::from_value(serde_json::json!({"devices": {"requests": [
            {"name": "container-0-request-0", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}},
            {"name": "container-1-request-1", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}
        ]}}))
        .expect("spec"));
        let plan = [a];
        let bound = allocate(&store, trainer.clone(), "n1", &plan).expect("allocate");
        let status = bound
            .status
            .as_ref()
            .and_then(|s| s.extended_resource_claim_status.clone())
            .expect("extendedResourceClaimStatus");
        let name = status.resource_claim_name.clone();
        assert!(
            name.starts_with("trainer-extended-resources-")
                && name.len() == "trainer-extended-resources-".len() + 5
        );
        let mappings: Vec<(&str, &str, &str)> = status
            .request_mappings
            .iter()
            .map(|m| {
                (
                    m.container_name.as_str(),
                    m.resource_name.as_str(),
                    m.request_name.as_str(),
                )
            })
            .collect();
        assert_eq!(
            mappings,
            [
                ("fetch", "nvidia.com/gpu", "container-0-request-0"),
                ("train", "nvidia.com/gpu", "container-1-request-1")
            ]
        );
        let claim = store
            .get::<ResourceClaim>(Some("ml"), &name)
            .expect("get")
            .expect("created");
        assert_eq!(
            claim
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("resource.kubernetes.io/extended-resource-claim"))
                .map(String::as_str),
            Some("true")
        );
        assert_eq!(claim.spec, plan[0].spec);
        let claim_status = claim.status.expect("status");
        assert_eq!(claim_status.allocation, Some(plan[0].allocation.clone()));
        assert_eq!(claim_status.reserved_for.map(|r| r.len()), Some(1));

        // A retried bind (the pod not yet updated) finds the same claim, not a second one.
        let again = allocate(&store, trainer, "n1", &plan).expect("retry");
        assert_eq!(
            again
                .status
                .and_then(|s| s.extended_resource_claim_status)
                .map(|s| s.resource_claim_name),
            Some(name.clone())
        );
        assert_eq!(store.list::<ResourceClaim>().expect("list").len(), 1);

        store.delete::<Pod>(Some("ml"), "trainer").expect("delete");
        assert_eq!(collect(&store).expect("collect"), [name]);
    }
}
