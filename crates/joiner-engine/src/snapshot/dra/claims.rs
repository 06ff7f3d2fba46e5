//! A pod's `resourceClaims[]` resolved to the claims it uses. A reference that leads nowhere
//! (a ResourceClaim or ResourceClaimTemplate not yet created) holds back that pod alone, as
//! kube-scheduler holds it back, with the words kube-scheduler and the resource claim
//! controller use.

use std::collections::BTreeMap;

use joiner_model::{InputError, ObjectRef, Sourced};

use super::extended::{self, ExtendedNames, ExtendedRequest};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub(super) fn pending(pod: &Sourced<Pod>) -> bool {
    pod.object
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_none()
}

/// The keys of a pod's claims, claims generated from templates added to `claims`; or the first
/// reference that leads nowhere.
pub(super) fn pod_claim_keys(
    pod: &Sourced<Pod>,
    claims: &mut BTreeMap<String, ResourceClaim>,
    templates: &BTreeMap<String, &ResourceClaimTemplate>,
) -> Result<Vec<String>, Missing> {
    let ns = pod
        .object
        .metadata
        .namespace
        .as_deref()
        .unwrap_or("default");
    let pod_name = pod.object.metadata.name.as_deref().unwrap_or_default();
    let refs = pod
        .object
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref());
    let generated = pod
        .object
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref());
    let mut keys = Vec::new();
    for (i, r) in refs.into_iter().flatten().enumerate() {
        let field = format!("spec.resourceClaims[{i}]");
        if let Some(name) = &r.resource_claim_name {
            let k = format!("{ns}/{name}");
            if !claims.contains_key(&k) {
                return Err(Missing::Claim { field, key: k });
            }
            keys.push(k);
        } else if let Some(template) = &r.resource_claim_template_name {
            // Once the resource claim controller has handled the pod, its status names the
            // claim it created (or says none was needed); only before that does the template
            // stand for the claim.
            let recorded = generated.into_iter().flatten().find(|s| s.name == r.name);
            if let Some(entry) = recorded {
                let Some(name) = &entry.resource_claim_name else {
                    // "Generating a ResourceClaim was not necessary": the entry is ignored.
                    continue;
                };
                let k = format!("{ns}/{name}");
                if !claims.contains_key(&k) {
                    // Never a fresh copy from the template: the real claim exists (or is
                    // being created) and may hold devices already.
                    return Err(Missing::Generated {
                        field: format!("status.resourceClaimStatuses[{}]", r.name),
                        key: k,
                    });
                }
                keys.push(k);
                continue;
            }
            let Some(t) = templates.get(&format!("{ns}/{template}")) else {
                return Err(Missing::Template {
                    field,
                    name: template.clone(),
                });
            };
            let name = planned_claim_name(pod_name, &r.name);
            let k = format!("{ns}/{name}");
            claims.entry(k.clone()).or_insert_with(|| ResourceClaim {
                metadata: ObjectMeta {
                    name: Some(name),
                    namespace: Some(ns.to_string()),
                    ..ObjectMeta::default()
                },
                spec: joiner_model::dra::template_claim_spec(t).cloned(),
                status: None,
            });
            keys.push(k);
        } else {
            return Err(Missing::Neither {
                field,
                pod: format!("{ns}/{pod_name}"),
                claim: r.name.clone(),
            });
        }
    }
    Ok(keys)
}

/// The claim that serves the pod's extended resources through DRA, added to `claims`, with
/// what each of its requests serves recorded in `served`: the claim the pod's status names
/// (kube-scheduler made it; it holds the devices), else, for a pending pod that asks for a
/// resource some DeviceClass serves, the claim kube-scheduler would make, named
/// `<pod>-extended-resources-*` until it exists. A bound pod whose status names none is served
/// by its node's device plugin.
pub(super) fn extended_claim(
    pod: &Sourced<Pod>,
    names: &ExtendedNames,
    claims: &mut BTreeMap<String, ResourceClaim>,
    served: &mut BTreeMap<String, Vec<ExtendedRequest>>,
) -> Result<Option<String>, Missing> {
    let ns = pod
        .object
        .metadata
        .namespace
        .as_deref()
        .unwrap_or("default");
    let recorded = pod
        .object
        .status
        .as_ref()
        .and_then(|s| s.extended_resource_claim_status.as_ref());
    if let Some(status) = recorded {
        let key = format!("{ns}/{}", status.resource_claim_name);
        if !claims.contains_key(&key) {
            return Err(Missing::Generated {
                field: "status.extendedResourceClaimStatus".into(),
                key,
            });
        }
        let requests = status
            .request_mappings
            .iter()
            .map(|m| ExtendedRequest {
                request: m.request_name.clone(),
                resource: m.resource_name.clone(),
            })
            .collect();
        served.insert(key.clone(), requests);
        return Ok(Some(key));
    }
    if !pending(pod) {
        return Ok(None);
    }
    let pod_name = pod.object.metadata.name.as_deref().unwrap_or_default();
    let name = planned_claim_name(pod_name, extended::CLAIM_NAME_PART);
    let Some((claim, requests)) = extended::claim_for(&pod.object, names, name.clone()) else {
        return Ok(None);
    };
    let key = format!("{ns}/{name}");
    claims.insert(key.clone(), claim);
    served.insert(key.clone(), requests);
    Ok(Some(key))
}

/// The name a claim the resource claim controller has not created yet goes by in a plan.
/// Kubernetes will name it `<pod>-<claim>-<five random characters>`; the `*` stands for the
/// suffix, and since no object name may contain it, a planned claim never shares its name (and
/// so its devices) with a real one.
pub(super) fn planned_claim_name(pod: &str, claim: &str) -> String {
    format!("{pod}-{claim}-*")
}

/// A pod's claim reference that leads nowhere. kube-scheduler keeps such a pod pending (and
/// only that pod) until the object appears; the reasons are worded as it and the resource
/// claim controller word them.
pub(super) enum Missing {
    /// `resourceClaimName` names a ResourceClaim that does not exist.
    Claim { field: String, key: String },
    /// `resourceClaimTemplateName` names a template that does not exist, and no claim was
    /// generated from it yet.
    Template { field: String, name: String },
    /// The pod's status names the claim generated for it, and that claim is not in the input
    /// (not created yet, or not listed yet).
    Generated { field: String, key: String },
    /// Neither is set: the API server refuses such a pod.
    Neither {
        field: String,
        pod: String,
        claim: String,
    },
}

impl Missing {
    /// Whether the pod itself is malformed (the API server refuses it), rather than waiting
    /// for an object that may yet appear.
    pub(super) fn is_invalid(&self) -> bool {
        matches!(self, Missing::Neither { .. })
    }

    fn field(&self) -> String {
        match self {
            Missing::Claim { field, .. } => format!("{field}.resourceClaimName"),
            Missing::Template { field, .. } => format!("{field}.resourceClaimTemplateName"),
            Missing::Generated { field, .. } => format!("{field}.resourceClaimName"),
            Missing::Neither { field, .. } => field.clone(),
        }
    }

    fn message(&self) -> String {
        match self {
            Missing::Claim { key, .. } => format!("could not find ResourceClaim {key:?}"),
            Missing::Generated { key, .. } => {
                let name = key.split_once('/').map_or(key.as_str(), |(_, n)| n);
                format!("resourceclaim.resource.k8s.io {name:?} not found")
            }
            Missing::Template { name, .. } => format!(
                "resource claim template {name:?}: resourceclaimtemplate.resource.k8s.io {name:?} not found"
            ),
            Missing::Neither { pod, claim, .. } => format!(
                "pod {pod:?}, spec.resourceClaim {claim:?}: none of the supported fields are set"
            ),
        }
    }

    /// The pending pod's unschedulable reason.
    pub(super) fn reason(&self) -> String {
        let wait = match self {
            Missing::Claim { .. } => "the pod waits until the claim exists",
            Missing::Generated { .. } => "the pod waits until the claim generated for it is listed",
            Missing::Template { .. } => {
                "its ResourceClaim is not created until the template exists"
            }
            Missing::Neither { .. } => "the pod's claim cannot be resolved",
        };
        format!(
            "{} ({}); {wait}, and nothing is launched for it",
            self.message(),
            self.field()
        )
    }

    pub(super) fn to_input_error(&self, pod: &Sourced<Pod>) -> InputError {
        let object = ObjectRef::new(
            "Pod",
            Some(
                pod.object
                    .metadata
                    .namespace
                    .as_deref()
                    .unwrap_or("default"),
            ),
            pod.object.metadata.name.as_deref().unwrap_or_default(),
        );
        InputError::new(&pod.origin, &object, self.field(), self.message())
    }
}
