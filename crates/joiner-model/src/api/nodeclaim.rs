//! Karpenter's NodeClaim (`karpenter.sh/v1`): one node Joiner asked for, from the decision to
//! launch until the instance is gone. Field names and condition shapes follow Karpenter's CRD so
//! `kubectl get nodeclaims` and existing tooling read Joiner's objects unchanged.

use std::collections::BTreeMap;

use crate::ResourceList;
use crate::api::nodepool::{NodeClassReference, NodeSelectorRequirementWithMinValues, Operator};
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube_derive::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use super::schema;

pub const API_VERSION: &str = "karpenter.sh/v1";
pub const KIND: &str = "NodeClaim";

/// Condition types, as Karpenter names them.
pub mod conditions {
    pub const LAUNCHED: &str = "Launched";
    pub const REGISTERED: &str = "Registered";
    pub const INITIALIZED: &str = "Initialized";
    /// True once the three above are.
    pub const READY: &str = "Ready";
    /// The NodeClaim no longer matches its NodePool or EC2NodeClass (the reason says how).
    pub const DRIFTED: &str = "Drifted";
    /// The cloud is taking the instance away (spot interruption, scheduled change, stopping).
    pub const INTERRUPTED: &str = "Interrupted";
    /// `True` once the NodeClaim is chosen for a voluntary disruption or an interruption; the
    /// reason (`Underutilized`, `Empty`, `Drifted`, `Expired`, `Interrupted`) says why, as
    /// Karpenter's disruption queue writes it.
    pub const DISRUPTION_REASON: &str = "DisruptionReason";
    /// Termination: whether the node's drain is done; `False` says what holds it up.
    pub const DRAINED: &str = "Drained";
    /// Termination: whether the node's volumes have detached; `False` names those left.
    pub const VOLUMES_DETACHED: &str = "VolumesDetached";
    /// Termination: `False` says why the instance could not be terminated.
    pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
    /// `True` once the NodeClaim is initialized and its pods have not changed for its
    /// NodePool's `consolidateAfter` (absent otherwise, and when consolidation is off), as
    /// Karpenter writes it.
    pub const CONSOLIDATABLE: &str = "Consolidatable";
    /// Whether the Node offers what the NodeClaim said it would: `False` (reason
    /// `ConsistencyCheckFailed`) when it registered with less, as Karpenter's consistency check
    /// writes it.
    pub const CONSISTENT_STATE_FOUND: &str = "ConsistentStateFound";
    /// Node repair's reboot, as Karpenter v1.15 writes it: `True` with reason `RebootRequested`
    /// (draining) then `RebootIssued` (the cloud rebooting it); `False` with `RebootSucceeded`
    /// (a new boot came up Ready) or `RebootFailed` (then the node is replaced).
    pub const REBOOTING: &str = "Rebooting";
}

/// A `karpenter.sh/v1` NodeClaim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaim {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: NodeClaimSpec,
    #[serde(default)]
    pub status: NodeClaimStatus,
}

/// What a NodeClaim asks for. Its schema is the NodeClaim CRD's (see [`crate::api::crds`]);
/// `NodeClaimResource` is the root kube's derive generates for it, used only for the CRD: Joiner
/// reads and writes [`NodeClaim`], which keeps the API version and kind it was given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, CustomResource)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    root = "NodeClaimResource",
    status = "NodeClaimStatus",
    category = "karpenter",
    shortname = "nc",
    doc = "NodeClaim is the Schema for the NodeClaims API",
    crates(
        kube_core = "::kube_core",
        k8s_openapi = "::k8s_openapi",
        schemars = "::schemars",
        serde = "::serde",
        serde_json = "::serde_json"
    ),
    printcolumn = r#"{"name": "Type", "type": "string", "jsonPath": ".metadata.labels.node\\.kubernetes\\.io/instance-type"}"#,
    printcolumn = r#"{"name": "Capacity", "type": "string", "jsonPath": ".metadata.labels.karpenter\\.sh/capacity-type"}"#,
    printcolumn = r#"{"name": "Zone", "type": "string", "jsonPath": ".metadata.labels.topology\\.kubernetes\\.io/zone"}"#,
    printcolumn = r#"{"name": "Node", "type": "string", "jsonPath": ".status.nodeName"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "ImageID", "type": "string", "jsonPath": ".status.imageID", "priority": 1}"#,
    printcolumn = r#"{"name": "ID", "type": "string", "jsonPath": ".status.providerID", "priority": 1}"#,
    printcolumn = r#"{"name": "NodePool", "type": "string", "jsonPath": ".metadata.labels.karpenter\\.sh/nodepool", "priority": 1}"#,
    printcolumn = r#"{"name": "NodeClass", "type": "string", "jsonPath": ".spec.nodeClassRef.name", "priority": 1}"#,
    printcolumn = r#"{"name": "Drifted", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Drifted\")].status", "priority": 1}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(
    extend("x-kubernetes-validations" = [schema::rule("self == oldSelf", "spec is immutable")]),
    transform = nodeclaim_spec_schema
)]
pub struct NodeClaimSpec {
    pub node_class_ref: NodeClassReference,
    /// What the instance must satisfy: instance types, zones and capacity types allowed, with
    /// the NodePool's other requirements.
    #[serde(default)]
    #[schemars(
        length(max = 100),
        extend("x-kubernetes-list-type" = "atomic", "x-kubernetes-validations" = schema::requirements_rules())
    )]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// The resources the pods planned onto the node request.
    #[serde(default)]
    pub resources: ResourceRequirements,
    /// Taints the node is created with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::taints")]
    pub taints: Vec<Taint>,
    /// Taints the node starts with and a daemon removes; the NodeClaim is not initialized while
    /// any remains.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::taints")]
    pub startup_taints: Vec<Taint>,
    /// How long the node may live before it is replaced: a Go duration or `Never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(schema::DURATION_OR_NEVER), extend("default" = "720h"))]
    pub expire_after: Option<String>,
    /// How long a draining node may wait for its pods before they are deleted regardless of
    /// PodDisruptionBudgets and `do-not-disrupt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(schema::DURATION))]
    pub termination_grace_period: Option<String>,
}

/// Karpenter requires `nodeClassRef` and `requirements` of a stored NodeClaim; Joiner's reader
/// defaults the requirements (a NodeClaim it wrote always has them), so the schema says so here.
fn nodeclaim_spec_schema(schema: &mut Schema) {
    schema::require(schema, &["nodeClassRef", "requirements"]);
}

impl NodeClaimSpec {
    /// A spec for a node of `node_class`, with no requirements, resources or taints yet.
    pub fn new(node_class_ref: NodeClassReference) -> NodeClaimSpec {
        NodeClaimSpec {
            node_class_ref,
            requirements: Vec::new(),
            resources: ResourceRequirements::default(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            expire_after: None,
            termination_grace_period: None,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceRequirements {
    /// The sum of the requests of the pods (and DaemonSet pods) planned onto this node.
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    pub requests: ResourceList,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    /// The instance's provider ID (`aws:///<zone>/<instance-id>`), set once it is launched.
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// The Node the instance registered as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The image the instance was launched from.
    #[serde(rename = "imageID", default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// The instance type's resources.
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    pub capacity: ResourceList,
    /// What pods will be able to use, device-plugin sharing included: what the plan expected,
    /// and what initialization waits for.
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    pub allocatable: ResourceList,
    /// The NodeClaim's lifecycle: Launched, Registered, Initialized, Ready, and why not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions_lenient")]
    pub conditions: Vec<Condition>,
    /// When a pod was last scheduled to or removed from the node (Karpenter's consolidation
    /// clock); kept as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<Time>,
}

/// A status condition in the shape Karpenter (and `metav1.Condition`) uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    pub last_transition_time: Time,
    /// Karpenter's NodeClaim CRD lets a condition leave its reason out.
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

impl NodeClaim {
    /// A NodeClaim with the API version and kind set.
    pub fn new(metadata: ObjectMeta, spec: NodeClaimSpec) -> NodeClaim {
        NodeClaim {
            api_version: API_VERSION.to_string(),
            kind: KIND.to_string(),
            metadata,
            spec,
            status: NodeClaimStatus::default(),
        }
    }

    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    pub fn labels(&self) -> BTreeMap<String, String> {
        self.metadata.labels.clone().unwrap_or_default()
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(key))
            .map(String::as_str)
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    }

    pub fn is_deleting(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Whether the condition is `True`.
    pub fn is_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c.status == "True")
    }

    /// Sets a condition, keeping its transition time when the status does not change (as
    /// Karpenter does), and keeps `Ready` as the conjunction of the lifecycle conditions.
    pub fn set_condition(
        &mut self,
        type_: &str,
        status: bool,
        reason: &str,
        message: &str,
        now: Time,
    ) {
        set_bool(
            &mut self.status.conditions,
            type_,
            status,
            reason,
            message,
            now.clone(),
            self.metadata.generation,
        );
        let ready = [
            conditions::LAUNCHED,
            conditions::REGISTERED,
            conditions::INITIALIZED,
        ]
        .iter()
        .all(|t| self.is_true(t));
        let (reason, message) = if ready {
            ("Ready", "")
        } else {
            (
                "NotReady",
                "the node is not yet launched, registered and initialized",
            )
        };
        set_bool(
            &mut self.status.conditions,
            conditions::READY,
            ready,
            reason,
            message,
            now,
            self.metadata.generation,
        );
    }

    /// The values allowed for `key` by an `In` requirement, in the order written.
    pub fn requirement_values(&self, key: &str) -> Vec<String> {
        self.spec
            .requirements
            .iter()
            .filter(|r| r.key == key && r.operator == Operator::In)
            .flat_map(|r| r.values.iter().cloned())
            .collect()
    }
}

/// Sets a condition `True` or `False` in `list`, keeping its transition time while its status
/// stays the same.
pub fn set_bool(
    list: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: Time,
    generation: Option<i64>,
) {
    let status = if status { "True" } else { "False" };
    set_condition(list, type_, status, reason, message, now, generation);
}

/// Sets a condition to `status` (`True`, `False` or `Unknown`) in `list`, keeping its
/// transition time when the status does not change (as Karpenter does).
pub(crate) fn set_condition(
    list: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Time,
    generation: Option<i64>,
) {
    let status = status.to_string();
    match list.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.status = status;
                c.last_transition_time = now;
            }
            c.reason = reason.to_string();
            c.message = message.to_string();
            c.observed_generation = generation;
        }
        None => list.push(Condition {
            type_: type_.to_string(),
            status,
            observed_generation: generation,
            last_transition_time: now,
            reason: reason.to_string(),
            message: message.to_string(),
        }),
    }
}
