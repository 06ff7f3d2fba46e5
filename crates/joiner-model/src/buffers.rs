//! What a CapacityBuffer keeps: the pod template of one chunk and how many chunks, as
//! Karpenter's buffer controller works it out, and the virtual pods that stand for them in a
//! plan (pending pods no API server holds, placed after every real pod so that real pods take
//! existing room first).
//!
//! - `podTemplateRef`: a PodTemplate in the buffer's namespace.
//! - `scalableRef`: a Deployment, StatefulSet or ReplicaSet (`apps`, Karpenter's three) in the
//!   buffer's namespace; its `spec.template`, its `spec.replicas` (default 1) for `percentage`.
//! - Chunks: the larger of `replicas` and `percentage` of the workload's replicas (rounded up,
//!   at least 1 when both are above 0), capped by `limits`: for each resource the template
//!   requests and `limits` names, how many chunks fit, the least of those. With `limits` alone,
//!   that many; with a `scalableRef` and none of the three, none (`BufferEmpty`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::capacitybuffer::{ACTIVE_CAPACITY, CapacityBuffer, conditions};
use crate::manifests::{Manifests, Sourced};
use crate::resources::pod_requests;

/// Annotations on a buffer's virtual pods (Karpenter's).
pub mod annotations {
    pub const FAKE_POD: &str = "karpenter.sh/capacity-buffer-fake-pod";
    pub const NAME: &str = "karpenter.sh/capacity-buffer-name";
    pub const NAMESPACE: &str = "karpenter.sh/capacity-buffer-namespace";
}

pub use crate::api::capacitybuffer::ScaleTarget;

/// A buffer worked out: its template, how many chunks, and the PodTemplate's generation when
/// it names one.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub template: PodTemplateSpec,
    pub replicas: i32,
    pub pod_template_generation: Option<i64>,
}

/// Why a buffer cannot be worked out: the `ReadyForProvisioning` reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unresolved {
    pub reason: &'static str,
    pub message: String,
}

fn unresolved(reason: &'static str, message: impl Into<String>) -> Unresolved {
    Unresolved {
        reason,
        message: message.into(),
    }
}

/// Works out `buffer` against the objects of `m`.
pub fn resolve(buffer: &CapacityBuffer, m: &Manifests) -> Result<Resolved, Unresolved> {
    let ns = buffer.namespace();
    let spec = &buffer.spec;
    let (template, scalable, generation) = if let Some(r) = &spec.pod_template_ref {
        let found = m
            .pod_templates
            .iter()
            .map(|t| &t.object)
            .find(|t| same(&t.metadata, ns, &r.name))
            .ok_or_else(|| {
                unresolved(
                    conditions::POD_TEMPLATE_NOT_FOUND,
                    format!("podtemplates \"{}\" not found", r.name),
                )
            })?;
        let template = found.template.clone().unwrap_or_default();
        (template, None, found.metadata.generation)
    } else if let Some(r) = &spec.scalable_ref {
        let group = r
            .api_group
            .as_deref()
            .filter(|g| !g.is_empty())
            .unwrap_or("apps");
        if group != "apps" {
            return Err(unresolved(
                conditions::RESOLUTION_FAILED,
                format!("unsupported API group {group:?}"),
            ));
        }
        let (template, replicas) = workload(m, ns, &r.kind, &r.name)?;
        (template, Some(replicas), None)
    } else {
        return Err(unresolved(
            conditions::RESOLUTION_FAILED,
            "Neither podTemplateRef nor scalableRef is set",
        ));
    };
    let requests = template
        .spec
        .as_ref()
        .map(pod_requests)
        .transpose()
        .map_err(|(field, e)| {
            unresolved(
                conditions::RESOLUTION_FAILED,
                format!("the pod template's {field}: {e}"),
            )
        })?
        .unwrap_or_default();
    Ok(Resolved {
        replicas: chunks(buffer, scalable, &requests),
        template,
        pod_template_generation: generation,
    })
}

fn same(meta: &ObjectMeta, namespace: &str, name: &str) -> bool {
    meta.name.as_deref() == Some(name)
        && meta.namespace.as_deref().unwrap_or("default") == namespace
}

/// A workload's pod template and replicas.
fn workload(
    m: &Manifests,
    ns: &str,
    kind: &str,
    name: &str,
) -> Result<(PodTemplateSpec, i32), Unresolved> {
    fn find<'a, T>(
        list: &'a [Sourced<T>],
        meta: impl Fn(&T) -> &ObjectMeta,
        ns: &str,
        name: &str,
    ) -> Option<&'a T> {
        list.iter()
            .map(|s| &s.object)
            .find(|o| same(meta(o), ns, name))
    }
    let found = match kind {
        "Deployment" => find(&m.deployments, |d| &d.metadata, ns, name)
            .map(|d| (d.spec.template.clone(), d.spec.replicas)),
        "StatefulSet" => find(&m.stateful_sets, |s| &s.metadata, ns, name)
            .map(|s| (s.spec.template.clone(), s.spec.replicas)),
        "ReplicaSet" => find(&m.replica_sets, |r| &r.metadata, ns, name)
            .map(|r| (r.spec.template.clone().unwrap_or_default(), r.spec.replicas)),
        other => {
            return Err(unresolved(
                conditions::RESOLUTION_FAILED,
                format!("unsupported kind {other:?}: Deployment, StatefulSet or ReplicaSet"),
            ));
        }
    };
    let target = m
        .scale_targets
        .iter()
        .find(|t| t.kind == kind && t.namespace == ns && t.name == name);
    if let Some(why) = target.and_then(|t| t.unreadable.as_ref()) {
        return Err(unresolved(
            conditions::RESOLUTION_FAILED,
            format!("{kind} \"{name}\" could not be read: {why}"),
        ));
    }
    let found = found.or_else(|| target.map(|t| (t.template.clone(), Some(t.replicas))));
    let (template, replicas) = found.ok_or_else(|| {
        unresolved(
            conditions::SCALABLE_REF_NOT_FOUND,
            format!("{kind} \"{name}\" not found"),
        )
    })?;
    Ok((template, replicas.unwrap_or(1)))
}

/// How many chunks: see the module docs.
fn chunks(buffer: &CapacityBuffer, scalable: Option<i32>, requests: &crate::ResourceList) -> i32 {
    let spec = &buffer.spec;
    let by_percentage = match (spec.percentage, scalable) {
        (Some(pct), Some(n)) if pct > 0 && n > 0 => {
            let share = (u64::from(n.unsigned_abs()) * u64::from(pct.unsigned_abs()))
                .div_ceil(100)
                .max(1);
            Some(i32::try_from(share).unwrap_or(i32::MAX))
        }
        (Some(_), Some(_)) => Some(0),
        _ => None,
    };
    let desired = [spec.replicas, by_percentage].into_iter().flatten().max();
    let by_limits = spec.limits.as_ref().and_then(|limits| {
        limits
            .iter()
            .filter_map(|(name, limit)| {
                let request = requests.get(name).filter(|q| !q.is_zero())?;
                let fit = limit.nanos() / request.nanos();
                Some(i32::try_from(fit).unwrap_or(i32::MAX))
            })
            .min()
    });
    match (desired, by_limits) {
        (Some(d), Some(l)) => d.min(l),
        (Some(d), None) => d,
        (None, Some(l)) => l,
        (None, None) => 0,
    }
    .max(0)
}

/// Whether Joiner keeps this buffer's capacity (the active-capacity strategy).
pub fn is_active(buffer: &CapacityBuffer) -> bool {
    buffer.strategy() == ACTIVE_CAPACITY
}

/// The buffer's virtual pods, `capacity-buffer-<buffer>-<i>`: pending, the template's labels
/// and spec, without a node, persistent or ephemeral volumes (they stand for room, not for a
/// pod that will run).
pub fn virtual_pods(buffer: &CapacityBuffer, resolved: &Resolved) -> Vec<Pod> {
    let ns = buffer.namespace();
    let mut spec = resolved.template.spec.clone().unwrap_or_default();
    spec.node_name = None;
    if let Some(volumes) = spec.volumes.as_mut() {
        volumes.retain(|v| v.persistent_volume_claim.is_none() && v.ephemeral.is_none());
    }
    let labels = resolved
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone());
    let marks: BTreeMap<String, String> = [
        (annotations::FAKE_POD, "true"),
        (annotations::NAME, buffer.name()),
        (annotations::NAMESPACE, ns),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    (0..resolved.replicas.max(0))
        .map(|i| Pod {
            metadata: ObjectMeta {
                name: Some(format!("capacity-buffer-{}-{i}", buffer.name())),
                namespace: Some(ns.to_string()),
                labels: labels.clone(),
                annotations: Some(marks.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(spec.clone()),
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                conditions: Some(vec![PodCondition {
                    type_: "PodScheduled".into(),
                    status: "False".into(),
                    reason: Some("Unschedulable".into()),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        })
        .collect()
}

/// The buffer a virtual pod stands for (`namespace/name`), if it is one.
pub fn buffer_of(pod: &Pod) -> Option<String> {
    let a = pod.metadata.annotations.as_ref()?;
    (a.get(annotations::FAKE_POD).map(String::as_str) == Some("true")).then(|| {
        format!(
            "{}/{}",
            a.get(annotations::NAMESPACE)
                .map_or("default", String::as_str),
            a.get(annotations::NAME).map_or("", String::as_str)
        )
    })
}

#[cfg(test)]
mod tests;
