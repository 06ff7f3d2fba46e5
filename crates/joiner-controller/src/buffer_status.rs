//! CapacityBuffer status as Karpenter writes it (behind the `CapacityBuffer` gate):
//! `status.replicas`, `status.podTemplateRef` and `status.podTemplateGeneration` (for a
//! `podTemplateRef` buffer), `status.provisioningStrategy`, the `ReadyForProvisioning`
//! condition (the template and chunk count could be worked out, or why not), and the
//! `Provisioning` condition from the last plan: whether the chunks fit the capacity there is
//! (`FitsExistingCapacity`) or needed new (`RequiresNewCapacity`), or there is nothing to keep
//! (`BufferEmpty`, `NotReadyForProvisioning`).
//!
//! Written through the status subresource (the buffer is the user's), only on change; a
//! buffer of another provisioning strategy is left to whatever implements it.

use joiner_engine::plan::PlannedBuffer;
use joiner_model::Manifests;
use joiner_model::api::capacitybuffer::{
    CapacityBuffer, CapacityBufferStatus, LocalObjectRef, conditions,
};
use joiner_model::api::nodeclaim::set_bool;
use joiner_model::buffers::{self, Resolved, Unresolved};
use joiner_model::feature_gates::FeatureGate;
use joiner_model::manifests::Sourced;
use k8s_openapi::api::core::v1::PodTemplate;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::cloud::CloudProvider;
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::report::Reconciler;
use crate::store::{ClusterStore, StoreError};

/// Writes the status of every CapacityBuffer whose status changed.
pub fn reconcile<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
) -> Result<(), ControllerError> {
    if !ctx
        .config
        .settings
        .feature_gates
        .enabled(FeatureGate::CapacityBuffer)
    {
        return Ok(());
    }
    let list = ctx.store.list::<CapacityBuffer>()?;
    if list.is_empty() {
        return Ok(());
    }
    // What resolving a buffer reads from the cluster: its PodTemplates, and the workloads its
    // `scalableRef`s name.
    let mut m = Manifests::default();
    m.pod_templates = ctx
        .store
        .list::<PodTemplate>()?
        .into_iter()
        .map(|t| Sourced {
            origin: joiner_model::Source::new("cluster", 0),
            object: t,
        })
        .collect();
    m.scale_targets = crate::scale_targets::read(ctx.store, &list);
    let planned = ctx.report.buffers.clone();
    let now = crate::clock::k8s_time(ctx.now);
    for buffer in list.into_iter().filter(buffers::is_active) {
        let key = format!("{}/{}", buffer.namespace(), buffer.name());
        let plan = planned.as_ref().map(|p| p.iter().find(|b| b.buffer == key));
        let want = status_of(&buffer, &buffers::resolve(&buffer, &m), plan, now.clone());
        if buffer.status == want {
            continue;
        }
        let mut updated = buffer;
        updated.status = want;
        match ctx.store.update(&updated) {
            Ok(_) => {}
            // Changed since it was read: written from the new one on the next step.
            Err(StoreError::Conflict(_) | StoreError::NotFound(_)) => {}
            Err(e) => ctx.error(
                Reconciler::Provisioning,
                &format!("writing the status of CapacityBuffer {key}"),
                e,
            ),
        }
    }
    Ok(())
}

/// The status `buffer` should have. `plan` is `None` when no plan was made this step (the
/// `Provisioning` condition stays as it was), `Some(None)` when the plan did not see the buffer.
pub fn status_of(
    buffer: &CapacityBuffer,
    resolved: &Result<Resolved, Unresolved>,
    plan: Option<Option<&PlannedBuffer>>,
    now: Time,
) -> CapacityBufferStatus {
    let generation = buffer.metadata.generation;
    let mut status = buffer.status.clone();
    status.provisioning_strategy = Some(buffer.strategy().to_string());
    let (ready, reason, message) = match resolved {
        Ok(r) => {
            status.replicas = Some(r.replicas);
            (
                true,
                conditions::RESOLVED,
                "Pod template resolved successfully".to_string(),
            )
        }
        Err(why) => (false, why.reason, why.message.clone()),
    };
    match (&buffer.spec.pod_template_ref, resolved) {
        (Some(r), Ok(resolved)) => {
            status.pod_template_ref = Some(LocalObjectRef {
                name: r.name.clone(),
            });
            status.pod_template_generation = resolved.pod_template_generation;
        }
        _ => {
            status.pod_template_ref = None;
            status.pod_template_generation = None;
        }
    }
    set_bool(
        &mut status.conditions,
        conditions::READY_FOR_PROVISIONING,
        ready,
        reason,
        &message,
        now.clone(),
        generation,
    );
    let provisioning = match (resolved, plan) {
        (_, None) => None,
        (Err(_), _) => Some((
            false,
            conditions::NOT_READY_FOR_PROVISIONING,
            "Buffer is not ReadyForProvisioning".to_string(),
        )),
        (Ok(r), _) if r.replicas == 0 => Some((
            false,
            conditions::BUFFER_EMPTY,
            "Buffer has zero desired replicas".to_string(),
        )),
        (Ok(_), Some(None)) => None,
        (Ok(_), Some(Some(p))) => {
            let new = p.on_new_node_claims + p.unplaced;
            Some(if new == 0 {
                (
                    true,
                    conditions::FITS_EXISTING_CAPACITY,
                    format!("All {} virtual pods fit on existing capacity", p.replicas),
                )
            } else {
                (
                    false,
                    conditions::REQUIRES_NEW_CAPACITY,
                    format!(
                        "{new}/{} virtual pods required new capacity, {} failed",
                        p.replicas, p.unplaced
                    ),
                )
            })
        }
    };
    if let Some((ok, reason, message)) = provisioning {
        set_bool(
            &mut status.conditions,
            conditions::PROVISIONING,
            ok,
            reason,
            &message,
            now,
            generation,
        );
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodTemplateSpec;

    fn buffer() -> CapacityBuffer {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "warm", "namespace": "lab", "generation": 2},
            "spec": {"podTemplateRef": {"name": "seat"}, "replicas": 3},
        }))
        .expect("a buffer")
    }

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_767_225_600).expect("a time"))
    }

    fn resolved(replicas: i32) -> Result<Resolved, Unresolved> {
        Ok(Resolved {
            template: PodTemplateSpec::default(),
            replicas,
            pod_template_generation: Some(5),
        })
    }

    fn condition<'a>(s: &'a CapacityBufferStatus, t: &str) -> (&'a str, &'a str, &'a str) {
        let c = s
            .conditions
            .iter()
            .find(|c| c.type_ == t)
            .expect("the condition");
        (c.status.as_str(), c.reason.as_str(), c.message.as_str())
    }

    #[test]
    fn a_resolved_buffer_says_how_its_chunks_were_placed() {
        let b = buffer();
        let planned = PlannedBuffer {
            buffer: "lab/warm".into(),
            replicas: 3,
            on_existing_nodes: 1,
            on_new_node_claims: 2,
            ..PlannedBuffer::default()
        };
        let s = status_of(&b, &resolved(3), Some(Some(&planned)), now());
        assert_eq!(s.replicas, Some(3));
        assert_eq!(
            s.pod_template_ref.as_ref().map(|r| r.name.as_str()),
            Some("seat")
        );
        assert_eq!(s.pod_template_generation, Some(5));
        assert_eq!(
            s.provisioning_strategy.as_deref(),
            Some("buffer.x-k8s.io/active-capacity")
        );
        assert_eq!(
            condition(&s, "ReadyForProvisioning"),
            ("True", "Resolved", "Pod template resolved successfully")
        );
        assert_eq!(
            condition(&s, "Provisioning"),
            (
                "False",
                "RequiresNewCapacity",
                "2/3 virtual pods required new capacity, 0 failed"
            )
        );
        let fits = PlannedBuffer {
            on_existing_nodes: 3,
            on_new_node_claims: 0,
            ..planned
        };
        let s = status_of(&b, &resolved(3), Some(Some(&fits)), now());
        assert_eq!(
            condition(&s, "Provisioning"),
            (
                "True",
                "FitsExistingCapacity",
                "All 3 virtual pods fit on existing capacity"
            )
        );
        // No plan this step: Provisioning stays as it was.
        let again = status_of(
            &CapacityBuffer {
                status: s.clone(),
                ..b
            },
            &resolved(3),
            None,
            now(),
        );
        assert_eq!(again, s);
    }

    #[test]
    fn an_unresolved_or_empty_buffer_says_so() {
        let why = Err(Unresolved {
            reason: "PodTemplateNotFound",
            message: "podtemplates \"seat\" not found".into(),
        });
        let s = status_of(&buffer(), &why, Some(None), now());
        assert_eq!(
            condition(&s, "ReadyForProvisioning").1,
            "PodTemplateNotFound"
        );
        assert_eq!(
            condition(&s, "Provisioning"),
            (
                "False",
                "NotReadyForProvisioning",
                "Buffer is not ReadyForProvisioning"
            )
        );
        assert_eq!(s.pod_template_ref, None);
        let s = status_of(&buffer(), &resolved(0), Some(None), now());
        assert_eq!(condition(&s, "Provisioning").1, "BufferEmpty");
    }
}
