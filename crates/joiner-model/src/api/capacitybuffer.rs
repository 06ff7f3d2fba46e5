//! The CapacityBuffer (`autoscaling.x-k8s.io/v1beta1`, Karpenter's `CapacityBuffer` gate): spare
//! capacity kept provisioned for pods that have not arrived yet, in chunks shaped like a pod
//! template (a PodTemplate named by `podTemplateRef`, or the pods of a workload named by
//! `scalableRef`), as many as `replicas`, a `percentage` of the workload's replicas, or what fits
//! in `limits`. How many chunks and what they look like is [`crate::buffers`]'s.
//!
//! The schema is the one cluster-autoscaler defines and Karpenter v1.14 ships; Joiner reads it
//! and writes its status, it does not serve the CRD.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::FieldError;
use super::nodeclaim::Condition;
use crate::ResourceList;

pub const API_VERSION: &str = "autoscaling.x-k8s.io/v1beta1";
pub const KIND: &str = "CapacityBuffer";

/// The one provisioning strategy there is: keep the capacity running.
pub const ACTIVE_CAPACITY: &str = "buffer.x-k8s.io/active-capacity";

/// Condition types and reasons, as Karpenter writes them.
pub mod conditions {
    /// Whether the buffer's template and replicas could be worked out.
    pub const READY_FOR_PROVISIONING: &str = "ReadyForProvisioning";
    /// Whether its chunks fit the capacity there is, or needed more.
    pub const PROVISIONING: &str = "Provisioning";

    pub const RESOLVED: &str = "Resolved";
    pub const POD_TEMPLATE_NOT_FOUND: &str = "PodTemplateNotFound";
    pub const SCALABLE_REF_NOT_FOUND: &str = "ScalableRefNotFound";
    pub const RESOLUTION_FAILED: &str = "ResolutionFailed";
    pub const NOT_READY_FOR_PROVISIONING: &str = "NotReadyForProvisioning";
    pub const BUFFER_EMPTY: &str = "BufferEmpty";
    pub const FITS_EXISTING_CAPACITY: &str = "FitsExistingCapacity";
    pub const REQUIRES_NEW_CAPACITY: &str = "RequiresNewCapacity";
}

/// An `autoscaling.x-k8s.io/v1beta1` CapacityBuffer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBuffer {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: CapacityBufferSpec,
    #[serde(default)]
    pub status: CapacityBufferStatus,
}

/// What capacity to keep.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferSpec {
    /// `buffer.x-k8s.io/active-capacity` when unset; buffers of other strategies are left to
    /// whatever implements them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
    /// A PodTemplate in the buffer's namespace: the shape of one chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// A workload in the buffer's namespace whose pods are the chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalable_ref: Option<ScalableRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Percent of the `scalableRef` workload's replicas, rounded up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage: Option<i32>,
    /// The most the chunks may request together, resource by resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceList>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalObjectRef {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScalableRef {
    /// `apps` when empty, as Karpenter reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    pub kind: String,
    pub name: String,
}

/// What the buffer controller found, as Karpenter writes it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
}

/// A workload a CapacityBuffer's `scalableRef` names, as the controller reads it for the buffer
/// alone (it reads pods, not workloads, otherwise): never expanded into pods.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleTarget {
    /// `Deployment`, `StatefulSet` or `ReplicaSet`.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// `spec.replicas` (1 when unset).
    pub replicas: i32,
    pub template: PodTemplateSpec,
    /// Why the workload could not be read, if it could not: its buffer is not ready this time
    /// (`ResolutionFailed`), and every other buffer is kept as usual.
    pub unreadable: Option<String>,
}

impl CapacityBuffer {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("default")
    }

    /// The provisioning strategy, its default filled in.
    pub fn strategy(&self) -> &str {
        self.spec
            .provisioning_strategy
            .as_deref()
            .unwrap_or(ACTIVE_CAPACITY)
    }

    /// What the CRD's schema and rules refuse, as its `x-kubernetes-validations` word it.
    pub fn validate(&self) -> Result<(), FieldError> {
        let spec = &self.spec;
        if spec.pod_template_ref.is_some() && spec.scalable_ref.is_some() {
            return Err(FieldError::new(
                "spec",
                "You must define either PodTemplateRef or ScalableRef, but not both",
            ));
        }
        if spec.pod_template_ref.is_some() && spec.replicas.is_none() && spec.limits.is_none() {
            return Err(FieldError::new(
                "spec",
                "If podTemplateRef is set, replicas or limits must also be set",
            ));
        }
        for (field, value) in [("replicas", spec.replicas), ("percentage", spec.percentage)] {
            if value.is_some_and(|v| v < 0) {
                return Err(FieldError::new(
                    format!("spec.{field}"),
                    "should be greater than or equal to 0",
                ));
            }
        }
        if let Some(r) = &spec.pod_template_ref
            && r.name.is_empty()
        {
            return Err(FieldError::new(
                "spec.podTemplateRef.name",
                "should be at least 1 chars long",
            ));
        }
        if let Some(r) = &spec.scalable_ref {
            for (field, value) in [("kind", &r.kind), ("name", &r.name)] {
                if value.is_empty() {
                    return Err(FieldError::new(
                        format!("spec.scalableRef.{field}"),
                        "should be at least 1 chars long",
                    ));
                }
            }
        }
        if let Some(limits) = &spec.limits
            && let Some((name, _)) = limits.iter().find(|(_, q)| q.is_negative())
        {
            return Err(FieldError::new(
                format!("spec.limits.{name}"),
                "must be greater than or equal to 0",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(spec: serde_json::Value) -> CapacityBuffer {
        serde_json::from_value(serde_json::json!({
            "apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": "warm", "namespace": "lab"},
            "spec": spec,
        }))
        .expect("a CapacityBuffer")
    }

    #[test]
    fn the_crds_rules_refuse_what_the_api_server_refuses() {
        let both = buffer(serde_json::json!({
            "podTemplateRef": {"name": "t"}, "scalableRef": {"kind": "Deployment", "name": "d"},
            "replicas": 1
        }));
        assert!(both.validate().unwrap_err().message.contains("not both"));
        let unbounded = buffer(serde_json::json!({"podTemplateRef": {"name": "t"}}));
        assert!(
            unbounded
                .validate()
                .unwrap_err()
                .message
                .contains("replicas or limits")
        );
        let negative = buffer(serde_json::json!({"podTemplateRef": {"name": "t"}, "replicas": -1}));
        assert_eq!(negative.validate().unwrap_err().field, "spec.replicas");
        let fine =
            buffer(serde_json::json!({"podTemplateRef": {"name": "t"}, "limits": {"cpu": "8"}}));
        assert_eq!(fine.validate(), Ok(()));
        assert_eq!(fine.strategy(), ACTIVE_CAPACITY);
        // Neither ref: accepted by the CRD, not ready at run time.
        assert_eq!(
            buffer(serde_json::json!({"replicas": 2})).validate(),
            Ok(())
        );
    }
}
