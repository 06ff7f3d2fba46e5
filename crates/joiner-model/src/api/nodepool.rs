//! Karpenter's NodePool (`karpenter.sh/v1`), and the older `v1beta1` shape converted to it the way
//! Karpenter's conversion webhook does, so the engine only ever sees v1.

use std::collections::BTreeMap;

use crate::wellknown::labels;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_derive::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use super::schema;

use super::{FieldError, KubeletConfiguration, check_duration};
use crate::ResourceList;

pub const API_VERSION_V1: &str = "karpenter.sh/v1";
pub const API_VERSION_V1BETA1: &str = "karpenter.sh/v1beta1";

/// A `karpenter.sh/v1` NodePool: the nodes Karpenter may create and when it may remove them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePool {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: NodePoolSpec,
    /// What the controller last wrote: node count, capacity, conditions. Read leniently: a
    /// status Joiner cannot decode (another controller's, a newer version's) reads as none
    /// and is written again, rather than making the pool unreadable.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_status"
    )]
    pub status: Option<NodePoolStatus>,
}

fn lenient_status<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<NodePoolStatus>, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(value).ok())
}

/// What a NodePool allows and when its nodes may go. Its schema is the NodePool CRD's (see
/// [`crate::api::crds`]); `NodePoolResource` is the root kube's derive generates for it, used
/// only for the CRD: Joiner reads [`NodePool`], which keeps the API version it was given so that
/// v1beta1 input can be converted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, CustomResource)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    root = "NodePoolResource",
    status = "NodePoolStatus",
    category = "karpenter",
    shortname = "np",
    doc = "NodePool is the Schema for the NodePools API",
    crates(
        kube_core = "::kube_core",
        k8s_openapi = "::k8s_openapi",
        schemars = "::schemars",
        serde = "::serde",
        serde_json = "::serde_json"
    ),
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.nodes"
    ),
    printcolumn = r#"{"name": "NodeClass", "type": "string", "jsonPath": ".spec.template.spec.nodeClassRef.name"}"#,
    printcolumn = r#"{"name": "Nodes", "type": "string", "jsonPath": ".status.nodes"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Weight", "type": "integer", "jsonPath": ".spec.weight", "priority": 1}"#,
    printcolumn = r#"{"name": "CPU", "type": "string", "jsonPath": ".status.resources.cpu", "priority": 1}"#,
    printcolumn = r#"{"name": "Memory", "type": "string", "jsonPath": ".status.resources.memory", "priority": 1}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    schema::rule(
        "has(self.replicas) == has(oldSelf.replicas)",
        "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
    ),
    schema::rule(
        "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits))",
        "only 'limits.nodes' is supported on static NodePools",
    ),
    schema::rule("!has(self.replicas) || !has(self.weight)", "'weight' is not supported on static NodePools"),
]))]
pub struct NodePoolSpec {
    /// What every NodeClaim of the pool is created from.
    pub template: NodeClaimTemplate,
    /// When the pool's nodes may be consolidated or replaced, and how many at a time.
    #[serde(default)]
    pub disruption: Disruption,
    /// Upper bounds on the sum of the capacity of this pool's nodes.
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    pub limits: ResourceList,
    /// Higher weights are tried first (1..100); unset is lowest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minimum" = 1, "maximum" = 100))]
    pub weight: Option<i32>,
    /// A static pool's fixed node count (Karpenter's static NodePools). Joiner does not run
    /// static pools yet: [`NodePool::validate`] refuses a pool that sets it, so it is skipped
    /// with a reason rather than provisioned as a dynamic one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minimum" = 0))]
    pub replicas: Option<i64>,
}

/// What Karpenter reports about a NodePool. Joiner does not write it yet; the type gives the
/// CRD its shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// The pool's readiness and why not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions_strict")]
    pub conditions: Vec<super::nodeclaim::Condition>,
    /// The generation of the node class the pool was last checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    /// How many nodes the pool has.
    #[serde(default)]
    pub nodes: i64,
    /// The summed capacity of the pool's nodes.
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    pub resources: ResourceList,
}

/// The condition types of a NodePool's status, as Karpenter writes them.
pub mod conditions {
    /// Its EC2NodeClass exists and is Ready.
    pub const NODE_CLASS_READY: &str = "NodeClassReady";
    /// The pool passes the checks Karpenter's runtime validation makes.
    pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
    /// Both of the above: the pool can launch nodes.
    pub const READY: &str = "Ready";
}

impl NodePoolStatus {
    /// Sets a condition, keeping its transition time while its status stays the same.
    pub fn set_condition(
        &mut self,
        type_: &str,
        ok: bool,
        reason: &str,
        message: &str,
        now: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
        generation: Option<i64>,
    ) {
        super::nodeclaim::set_condition(
            &mut self.conditions,
            type_,
            if ok { "True" } else { "False" },
            reason,
            message,
            now,
            generation,
        );
    }
}

/// Labels and annotations every node of the pool gets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TemplateMetadata {
    /// Labels of the pool's nodes (label values: at most 63 characters).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(
        transform = schema::label_values,
        extend(
            "maxProperties" = 100,
            "x-kubernetes-map-type" = "atomic",
            "x-kubernetes-validations" = schema::template_label_rules()
        )
    )]
    pub labels: BTreeMap<String, String>,
    /// Annotations of the pool's nodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("x-kubernetes-map-type" = "granular"))]
    pub annotations: BTreeMap<String, String>,
}

/// The NodeClaim every node of the pool is created from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeClaimTemplate {
    #[serde(default)]
    #[schemars(transform = schema::drop_default)]
    pub metadata: TemplateMetadata,
    pub spec: NodeClaimTemplateSpec,
}

/// The spec of the pool's NodeClaims.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = template_spec_schema)]
pub struct NodeClaimTemplateSpec {
    /// What the pool's instances must satisfy (never the pool's own label, which Joiner sets).
    #[serde(default)]
    #[schemars(
        transform = schema::forbid_nodepool_key,
        length(max = 100),
        extend("x-kubernetes-list-type" = "atomic", "x-kubernetes-validations" = schema::requirements_rules())
    )]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// Taints the pool's nodes are created with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::taints")]
    pub taints: Vec<Taint>,
    /// Taints present only while the node starts (removed by a daemon); pods need not tolerate
    /// them to be scheduled to the node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::taints")]
    pub startup_taints: Vec<Taint>,
    /// The node class the pool's nodes are launched with; its group and kind cannot change.
    #[schemars(extend("x-kubernetes-validations" = [
        schema::rule("self.group == oldSelf.group", "nodeClassRef.group is immutable"),
        schema::rule("self.kind == oldSelf.kind", "nodeClassRef.kind is immutable"),
    ]))]
    pub node_class_ref: NodeClassReference,
    /// A Go duration or `Never`; the API server defaults it to `720h`.
    #[serde(default = "default_expire_after")]
    #[schemars(pattern(schema::DURATION_OR_NEVER))]
    pub expire_after: String,
    /// How long a draining node may wait for its pods before they are deleted regardless of
    /// PodDisruptionBudgets and `do-not-disrupt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(schema::DURATION))]
    pub termination_grace_period: Option<String>,
    /// Only set on NodePools converted from v1beta1, where kubelet settings lived on the NodePool;
    /// v1 moved them to the EC2NodeClass. Not read from v1 input (the API would prune it), so a v1
    /// NodePool that sets it gets an unknown-field warning.
    #[serde(default, skip_deserializing, skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub kubelet: Option<KubeletConfiguration>,
}

fn default_expire_after() -> String {
    "720h".to_string()
}

/// Karpenter requires `nodeClassRef` and `requirements` of a template; Joiner's reader
/// defaults the requirements, so the schema says so here.
fn template_spec_schema(schema: &mut Schema) {
    schema::require(schema, &["nodeClassRef", "requirements"]);
}

/// Karpenter requires `consolidateAfter` of a NodePool's disruption settings (the API server
/// defaults the whole block when it is left out).
fn disruption_schema(schema: &mut Schema) {
    schema::require(schema, &["consolidateAfter"]);
}

/// A node selector requirement with Karpenter's `minValues`: at least that many distinct values
/// of `key` must stay possible among the instance types Karpenter may choose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirementWithMinValues {
    /// The label key the requirement constrains.
    #[schemars(
        length(max = 316),
        pattern(schema::QUALIFIED_NAME),
        extend("x-kubernetes-validations" = schema::requirement_key_rules())
    )]
    pub key: String,
    #[schemars(schema_with = "schema::requirement_operator")]
    pub operator: Operator,
    /// The values for `In` and `NotIn`, or the single integer for `Gt` and `Lt`. (Karpenter's
    /// CRD places the label-value constraints on the list itself, where the API server does not
    /// apply them; so does this one, to accept exactly what Karpenter's accepts.)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "atomic",
        "maxLength" = 63,
        "pattern" = schema::LABEL_VALUE
    ))]
    pub values: Vec<String>,
    /// At least this many values of `key` must stay possible among the instance types chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50))]
    pub min_values: Option<i32>,
}

/// The node selector operators Kubernetes defines, and Karpenter's `Gte` and `Lte` (v1.9):
/// the label's integer value at least, or at most, the one value given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    Gte,
    Lte,
}

impl Operator {
    /// Reads the operator of a node selector requirement (pods' `nodeAffinity` carries them
    /// as plain strings).
    pub fn parse(s: &str) -> Option<Operator> {
        Some(match s {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            "Gte" => Operator::Gte,
            "Lte" => Operator::Lte,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
            Operator::Gte => "Gte",
            Operator::Lte => "Lte",
        }
    }
}

/// The node class (for AWS, an EC2NodeClass) whose settings a node is launched with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NodeClassReference {
    /// The API group of the class (`karpenter.k8s.aws`).
    #[schemars(
        pattern(r"^[^/]*$"),
        extend("x-kubernetes-validations" = [schema::rule("self != ''", "group may not be empty")])
    )]
    pub group: String,
    /// The kind of the class (`EC2NodeClass`).
    #[schemars(extend("x-kubernetes-validations" = [schema::rule("self != ''", "kind may not be empty")]))]
    pub kind: String,
    /// The name of the class.
    #[schemars(extend("x-kubernetes-validations" = [schema::rule("self != ''", "name may not be empty")]))]
    pub name: String,
}

impl NodeClassReference {
    /// A reference to the EC2NodeClass `name` (group `karpenter.k8s.aws`).
    pub fn ec2(name: impl Into<String>) -> NodeClassReference {
        NodeClassReference {
            group: "karpenter.k8s.aws".into(),
            kind: "EC2NodeClass".into(),
            name: name.into(),
        }
    }
}

/// When a pool's nodes may be consolidated or replaced, and how many at a time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = disruption_schema)]
pub struct Disruption {
    /// Which nodes consolidation may remove: empty ones only, underutilized ones too, or
    /// (`Balanced`, Karpenter v1.14) underutilized ones only where the saving is worth the
    /// disruption.
    #[serde(default)]
    #[schemars(extend("enum" = ["WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"]))]
    pub consolidation_policy: ConsolidationPolicy,
    /// A Go duration or `Never`: how long a node must be consolidatable before Karpenter acts.
    #[serde(default = "default_consolidate_after")]
    #[schemars(pattern(schema::DURATION_OR_NEVER))]
    pub consolidate_after: String,
    /// How many of the pool's nodes may be disrupted at once; the most restrictive active
    /// budget applies.
    #[serde(default = "default_budgets")]
    #[schemars(
        length(max = 50),
        extend(
            "x-kubernetes-list-type" = "atomic",
            "x-kubernetes-validations" = [schema::rule(
                "self.all(x, has(x.schedule) == has(x.duration))",
                "'schedule' must be set with 'duration'"
            )]
        )
    )]
    pub budgets: Vec<DisruptionBudget>,
}

impl Default for Disruption {
    fn default() -> Self {
        Disruption {
            consolidation_policy: ConsolidationPolicy::default(),
            consolidate_after: default_consolidate_after(),
            budgets: default_budgets(),
        }
    }
}

fn default_consolidate_after() -> String {
    "0s".to_string()
}

fn default_budgets() -> Vec<DisruptionBudget> {
    vec![DisruptionBudget {
        nodes: default_budget_nodes(),
        reasons: None,
        schedule: None,
        duration: None,
    }]
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConsolidationPolicy {
    WhenEmpty,
    #[default]
    WhenEmptyOrUnderutilized,
    /// Karpenter v1.14: a move must save at least half its share of the pool's cost per share
    /// of the pool's disruption it causes.
    Balanced,
}

/// How many of a pool's nodes may be disrupted at once, for which reasons and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = budget_schema)]
pub struct DisruptionBudget {
    /// A count (`5`) or a percentage of the pool's nodes (`10%`).
    #[serde(default = "default_budget_nodes")]
    #[schemars(pattern(r"^((100|[0-9]{1,2})%|[0-9]+)$"))]
    pub nodes: String,
    /// The disruption reasons the budget limits; all of them when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50), extend("x-kubernetes-list-type" = "set"))]
    pub reasons: Option<Vec<BudgetReason>>,
    /// A cron schedule in UTC; the budget applies for `duration` after each activation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(
        r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$"
    ))]
    pub schedule: Option<String>,
    /// How long the budget applies after each activation of `schedule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$"))]
    pub duration: Option<String>,
}

/// Karpenter requires `nodes` of a budget (and defaults it to `10%`).
fn budget_schema(schema: &mut Schema) {
    schema::require(schema, &["nodes"]);
    if let Some(nodes) = schema
        .get_mut("properties")
        .and_then(|p| p.get_mut("nodes"))
        .and_then(|n| n.as_object_mut())
    {
        nodes.insert("default".into(), default_budget_nodes().into());
    }
}

fn default_budget_nodes() -> String {
    "10%".to_string()
}

/// The disruption reasons a budget may name (Karpenter's CRD allows only the budgeted ones;
/// `Unhealthy`, node repair's, is Karpenter v1.15's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum BudgetReason {
    Underutilized,
    Empty,
    Drifted,
    Unhealthy,
}

impl BudgetReason {
    /// The disruption reason this budget limits.
    pub fn reason(self) -> crate::wellknown::DisruptionReason {
        use crate::wellknown::DisruptionReason as R;
        match self {
            BudgetReason::Underutilized => R::Underutilized,
            BudgetReason::Empty => R::Empty,
            BudgetReason::Drifted => R::Drifted,
            BudgetReason::Unhealthy => R::Unhealthy,
        }
    }
}

/// What Karpenter's CRD rules require of a static NodePool (`spec.replicas` set): at least
/// zero replicas, no `weight` (it never competes for pods), and no limit but `nodes`.
fn validate_static(spec: &NodePoolSpec, replicas: i64) -> Result<(), FieldError> {
    if replicas < 0 {
        return Err(FieldError::new(
            "spec.replicas",
            format!("{replicas} is out of range: must be 0 or more"),
        ));
    }
    if spec.weight.is_some() {
        return Err(FieldError::new(
            "spec.weight",
            "'weight' is not supported on static NodePools",
        ));
    }
    if let Some(other) = spec.limits.keys().find(|k| k.as_str() != "nodes") {
        return Err(FieldError::new(
            format!("spec.limits.{other}"),
            "only 'limits.nodes' is supported on static NodePools",
        ));
    }
    Ok(())
}

impl NodePool {
    /// Checks what Karpenter's CRD validation rejects and scheduling depends on.
    pub fn validate(&self) -> Result<(), FieldError> {
        let name = self.metadata.name.as_deref().unwrap_or_default();
        if !crate::names::is_label_value(name) {
            return Err(FieldError::new(
                "metadata.name",
                format!(
                    "{name:?} cannot be used: every node of the pool carries it as the value of \
                     the label {}, which must be at most 63 letters, digits, '-', '_' or '.', \
                     starting and ending with a letter or digit",
                    labels::NODEPOOL
                ),
            ));
        }
        let spec = &self.spec;
        if let Some(replicas) = spec.replicas {
            validate_static(spec, replicas)?;
        }
        if let Some(w) = spec.weight
            && !(1..=100).contains(&w)
        {
            return Err(FieldError::new(
                "spec.weight",
                format!("{w} is out of range: must be between 1 and 100"),
            ));
        }
        for (name, q) in &spec.limits {
            if q.is_negative() {
                return Err(FieldError::new(
                    format!("spec.limits.{name}"),
                    "must not be negative",
                ));
            }
        }
        for (key, value) in &spec.template.metadata.labels {
            validate_label(key, value, &format!("spec.template.metadata.labels.{key}"))?;
        }
        let t = &spec.template.spec;
        for (i, r) in t.requirements.iter().enumerate() {
            validate_requirement(r, &format!("spec.template.spec.requirements[{i}]"))?;
        }
        validate_taints(&t.taints, "spec.template.spec.taints")?;
        validate_taints(&t.startup_taints, "spec.template.spec.startupTaints")?;
        check_duration("spec.template.spec.expireAfter", &t.expire_after, true)?;
        if let Some(tgp) = &t.termination_grace_period {
            check_duration("spec.template.spec.terminationGracePeriod", tgp, false)?;
        }
        let d = &spec.disruption;
        check_duration(
            "spec.disruption.consolidateAfter",
            &d.consolidate_after,
            true,
        )?;
        for (i, b) in d.budgets.iter().enumerate() {
            validate_budget(b, &format!("spec.disruption.budgets[{i}]"))?;
        }
        Ok(())
    }
}

/// Karpenter's rules for one requirement, on top of the operator being a known one.
pub fn validate_requirement(
    r: &NodeSelectorRequirementWithMinValues,
    path: &str,
) -> Result<(), FieldError> {
    if r.key.is_empty() {
        return Err(FieldError::new(format!("{path}.key"), "must not be empty"));
    }
    if r.key == labels::HOSTNAME {
        return Err(FieldError::new(
            format!("{path}.key"),
            format!(
                "label {:?} is restricted: every node gets its own",
                labels::HOSTNAME
            ),
        ));
    }
    let values = format!("{path}.values");
    match r.operator {
        Operator::In if r.values.is_empty() => {
            return Err(FieldError::new(
                values,
                "operator In needs at least one value",
            ));
        }
        Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
            let single_integer =
                matches!(r.values.as_slice(), [v] if v.parse::<i64>().is_ok_and(|n| n >= 0));
            if !single_integer {
                return Err(FieldError::new(
                    values,
                    format!(
                        "operator {:?} needs exactly one non-negative integer value",
                        r.operator
                    ),
                ));
            }
        }
        Operator::Exists | Operator::DoesNotExist if !r.values.is_empty() => {
            return Err(FieldError::new(
                values,
                format!("operator {:?} takes no values", r.operator),
            ));
        }
        _ => {}
    }
    if let Some(min) = r.min_values {
        let field = format!("{path}.minValues");
        if !(1..=50).contains(&min) {
            return Err(FieldError::new(
                field,
                format!("{min} is out of range: must be between 1 and 50"),
            ));
        }
        let count = r.values.len();
        if r.operator == Operator::In && usize::try_from(min).is_ok_and(|m| m > count) {
            return Err(FieldError::new(
                field,
                format!("{min} is more than the {count} values listed"),
            ));
        }
    }
    Ok(())
}

/// Labels Karpenter sets itself, so a NodePool may not: the node's hostname and its pool.
fn validate_label(key: &str, value: &str, path: &str) -> Result<(), FieldError> {
    if key == labels::HOSTNAME || key == "karpenter.sh/nodepool" {
        return Err(FieldError::new(
            path,
            format!("label {key:?} is restricted: Karpenter sets it"),
        ));
    }
    if !crate::names::is_label_value(value) {
        return Err(FieldError::new(
            path,
            format!(
                "{value:?} is not a label value (at most 63 letters, digits, '-', '_' or '.', \
                 starting and ending with a letter or digit)"
            ),
        ));
    }
    Ok(())
}

/// Taints need a key and one of the three effects the scheduler knows.
pub fn validate_taints(taints: &[Taint], path: &str) -> Result<(), FieldError> {
    for (i, t) in taints.iter().enumerate() {
        if t.key.is_empty() {
            return Err(FieldError::new(
                format!("{path}[{i}].key"),
                "must not be empty",
            ));
        }
        if !matches!(
            t.effect.as_str(),
            "NoSchedule" | "PreferNoSchedule" | "NoExecute"
        ) {
            return Err(FieldError::new(
                format!("{path}[{i}].effect"),
                format!(
                    "{:?} is not one of NoSchedule, PreferNoSchedule, NoExecute",
                    t.effect
                ),
            ));
        }
    }
    Ok(())
}

fn validate_budget(b: &DisruptionBudget, path: &str) -> Result<(), FieldError> {
    let nodes_ok = match b.nodes.strip_suffix('%') {
        Some(p) => p.parse::<u32>().is_ok_and(|p| p <= 100),
        None => b.nodes.parse::<u32>().is_ok(),
    };
    if !nodes_ok {
        return Err(FieldError::new(
            format!("{path}.nodes"),
            format!(
                "{:?} is neither a count nor a percentage up to 100%",
                b.nodes
            ),
        ));
    }
    if b.schedule.is_some() != b.duration.is_some() {
        return Err(FieldError::new(
            path,
            "schedule and duration must be set together",
        ));
    }
    if let Some(d) = &b.duration {
        check_duration(&format!("{path}.duration"), d, false)?;
    }
    Ok(())
}

/// The `karpenter.sh/v1beta1` NodePool, read only to be converted with [`NodePoolV1Beta1::into_v1`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolV1Beta1 {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: NodePoolSpecV1Beta1,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolSpecV1Beta1 {
    pub template: NodeClaimTemplateV1Beta1,
    #[serde(default)]
    pub disruption: DisruptionV1Beta1,
    #[serde(default)]
    pub limits: ResourceList,
    #[serde(default)]
    pub weight: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct NodeClaimTemplateV1Beta1 {
    #[serde(default)]
    pub metadata: TemplateMetadata,
    pub spec: NodeClaimTemplateSpecV1Beta1,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpecV1Beta1 {
    #[serde(default)]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    #[serde(default)]
    pub taints: Vec<Taint>,
    #[serde(default)]
    pub startup_taints: Vec<Taint>,
    pub node_class_ref: NodeClassReferenceV1Beta1,
    #[serde(default)]
    pub kubelet: Option<KubeletConfiguration>,
    #[serde(default)]
    pub termination_grace_period: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassReferenceV1Beta1 {
    /// `group/version` of the node class, e.g. `karpenter.k8s.aws/v1beta1`.
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionV1Beta1 {
    #[serde(default)]
    pub consolidation_policy: ConsolidationPolicyV1Beta1,
    #[serde(default)]
    pub consolidate_after: Option<String>,
    #[serde(default)]
    pub expire_after: Option<String>,
    #[serde(default)]
    pub budgets: Option<Vec<DisruptionBudget>>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum ConsolidationPolicyV1Beta1 {
    WhenEmpty,
    #[default]
    WhenUnderutilized,
}

impl NodePoolV1Beta1 {
    /// Converts as Karpenter's webhook does: `WhenUnderutilized` becomes
    /// `WhenEmptyOrUnderutilized`, `disruption.expireAfter` moves to the template,
    /// `nodeClassRef.apiVersion` becomes its group, and the kubelet block is kept on the template
    /// (v1 has it on the EC2NodeClass; the engine prefers the node class's when both are set).
    pub fn into_v1(self) -> NodePool {
        let s = self.spec;
        let t = s.template.spec;
        let group = t
            .node_class_ref
            .api_version
            .as_deref()
            .and_then(|av| av.split('/').next())
            .filter(|g| !g.is_empty())
            .unwrap_or("karpenter.k8s.aws")
            .to_string();
        let consolidation_policy = match s.disruption.consolidation_policy {
            ConsolidationPolicyV1Beta1::WhenEmpty => ConsolidationPolicy::WhenEmpty,
            ConsolidationPolicyV1Beta1::WhenUnderutilized => {
                ConsolidationPolicy::WhenEmptyOrUnderutilized
            }
        };
        NodePool {
            status: None,
            api_version: API_VERSION_V1.to_string(),
            kind: "NodePool".to_string(),
            metadata: self.metadata,
            spec: NodePoolSpec {
                template: NodeClaimTemplate {
                    metadata: s.template.metadata,
                    spec: NodeClaimTemplateSpec {
                        requirements: t.requirements,
                        taints: t.taints,
                        startup_taints: t.startup_taints,
                        node_class_ref: NodeClassReference {
                            group,
                            kind: t
                                .node_class_ref
                                .kind
                                .unwrap_or_else(|| "EC2NodeClass".to_string()),
                            name: t.node_class_ref.name,
                        },
                        expire_after: s
                            .disruption
                            .expire_after
                            .unwrap_or_else(default_expire_after),
                        termination_grace_period: t.termination_grace_period,
                        kubelet: t.kubelet,
                    },
                },
                disruption: Disruption {
                    consolidation_policy,
                    consolidate_after: s
                        .disruption
                        .consolidate_after
                        .unwrap_or_else(default_consolidate_after),
                    budgets: s.disruption.budgets.unwrap_or_else(default_budgets),
                },
                limits: s.limits,
                weight: s.weight,
                replicas: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Quantity;

    fn from_yaml<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
        let v: serde_json::Value = serde_saphyr::from_str(yaml).unwrap();
        serde_json::from_value(v).unwrap()
    }

    const V1BETA1: &str = r#"
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: g4-nodepool}
spec:
  template:
    metadata:
      labels: {nvidia.com/gpu: "true"}
    spec:
      taints: [{effect: NoSchedule, key: nvidia.com/gpu, value: "true"}]
      requirements:
      - {key: kubernetes.io/arch, operator: In, values: ["amd64"]}
      - {key: node.kubernetes.io/instance-type, operator: In, values: ["g4dn.xlarge"]}
      nodeClassRef: {apiVersion: karpenter.k8s.aws/v1beta1, kind: EC2NodeClass, name: g4-nodeclass}
      kubelet: {maxPods: 20}
  limits: {cpu: 1000}
  disruption: {expireAfter: 120m, consolidationPolicy: WhenUnderutilized}
"#;

    #[test]
    fn a_static_nodepool_follows_karpenters_rules() {
        let mut pool = from_yaml::<NodePoolV1Beta1>(V1BETA1).into_v1();
        pool.spec.replicas = Some(3);
        // The v1beta1 pool has a cpu limit, which a static pool may not have.
        assert_eq!(pool.validate().unwrap_err().field, "spec.limits.cpu");
        pool.spec.limits.clear();
        pool.spec
            .limits
            .insert("nodes".into(), crate::Quantity::parse("5").unwrap());
        assert_eq!(pool.validate(), Ok(()));
        pool.spec.weight = Some(10);
        assert_eq!(pool.validate().unwrap_err().field, "spec.weight");
        pool.spec.weight = None;
        pool.spec.replicas = Some(-1);
        assert_eq!(pool.validate().unwrap_err().field, "spec.replicas");
    }

    #[test]
    fn converts_v1beta1_like_karpenter() {
        let np = from_yaml::<NodePoolV1Beta1>(V1BETA1).into_v1();
        assert_eq!(np.api_version, "karpenter.sh/v1");
        let t = &np.spec.template.spec;
        assert_eq!(t.expire_after, "120m");
        assert_eq!(
            t.node_class_ref,
            NodeClassReference {
                group: "karpenter.k8s.aws".into(),
                kind: "EC2NodeClass".into(),
                name: "g4-nodeclass".into()
            }
        );
        assert_eq!(t.kubelet.as_ref().and_then(|k| k.max_pods), Some(20));
        assert_eq!(
            np.spec.disruption.consolidation_policy,
            ConsolidationPolicy::WhenEmptyOrUnderutilized
        );
        assert_eq!(np.spec.disruption.consolidate_after, "0s");
        assert_eq!(np.spec.limits["cpu"], Quantity::from_units(1000));
        assert_eq!(np.spec.template.metadata.labels["nvidia.com/gpu"], "true");
        np.validate().unwrap();
    }

    #[test]
    fn v1_defaults_match_the_api_server() {
        let np: NodePool = from_yaml(
            r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}
      requirements: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [g6, p5], minValues: 2}]
"#,
        );
        np.validate().unwrap();
        assert_eq!(np.spec.template.spec.expire_after, "720h");
        assert_eq!(
            np.spec.disruption.consolidation_policy,
            ConsolidationPolicy::WhenEmptyOrUnderutilized
        );
        assert_eq!(np.spec.disruption.budgets[0].nodes, "10%");
        assert_eq!(np.spec.template.spec.requirements[0].min_values, Some(2));
    }

    fn pool_with(requirement: &str) -> NodePool {
        from_yaml(&format!(
            r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: p}}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}}
      requirements:
      - {{key: kubernetes.io/os, operator: In, values: [linux]}}
      - {{key: kubernetes.io/arch, operator: Exists}}
      - {requirement}
"#
        ))
    }

    #[test]
    fn rejects_bad_requirements_naming_the_field() {
        let cases = [
            ("{key: a, operator: In}", "requirements[2].values"),
            (
                "{key: a, operator: Gt, values: ['1', '2']}",
                "requirements[2].values",
            ),
            (
                "{key: a, operator: Lt, values: [big]}",
                "requirements[2].values",
            ),
            (
                "{key: a, operator: Exists, values: [x]}",
                "requirements[2].values",
            ),
            (
                "{key: a, operator: In, values: [x], minValues: 2}",
                "requirements[2].minValues",
            ),
            (
                "{key: a, operator: Exists, minValues: 51}",
                "requirements[2].minValues",
            ),
        ];
        for (req, field) in cases {
            let e = pool_with(req).validate().unwrap_err();
            assert_eq!(e.field, format!("spec.template.spec.{field}"), "{req}");
        }
        pool_with("{key: a, operator: Gt, values: ['3']}")
            .validate()
            .unwrap();
    }

    #[test]
    fn rejects_restricted_keys_and_bad_label_values() {
        let e = pool_with("{key: kubernetes.io/hostname, operator: In, values: [a]}")
            .validate()
            .unwrap_err();
        assert_eq!(e.field, "spec.template.spec.requirements[2].key");
        let mut np = pool_with("{key: a, operator: Exists}");
        np.spec
            .template
            .metadata
            .labels
            .insert("karpenter.sh/nodepool".into(), "x".into());
        assert_eq!(
            np.validate().unwrap_err().field,
            "spec.template.metadata.labels.karpenter.sh/nodepool"
        );
        let mut np = pool_with("{key: a, operator: Exists}");
        np.spec
            .template
            .metadata
            .labels
            .insert("team".into(), "a b".into());
        assert!(np.validate().is_err());
    }

    #[test]
    fn rejects_unknown_operator() {
        let v: serde_json::Value =
            serde_saphyr::from_str("{key: a, operator: Within, values: [x]}").unwrap();
        let e = serde_json::from_value::<NodeSelectorRequirementWithMinValues>(v).unwrap_err();
        assert!(e.to_string().contains("Within"), "{e}");
    }

    #[test]
    fn rejects_bad_weight_and_taint_effect() {
        let mut np = pool_with("{key: a, operator: Exists}");
        np.spec.weight = Some(101);
        assert_eq!(np.validate().unwrap_err().field, "spec.weight");
        np.spec.weight = Some(100);
        np.spec.template.spec.taints = vec![Taint {
            key: "k".into(),
            effect: "NoScheduled".into(),
            ..Taint::default()
        }];
        assert_eq!(
            np.validate().unwrap_err().field,
            "spec.template.spec.taints[0].effect"
        );
    }

    #[test]
    fn rejects_bad_durations_and_budgets() {
        let mut np = pool_with("{key: a, operator: Exists}");
        np.spec.template.spec.expire_after = "30d".into();
        assert_eq!(
            np.validate().unwrap_err().field,
            "spec.template.spec.expireAfter"
        );
        np.spec.template.spec.expire_after = "Never".into();
        np.spec.disruption.budgets[0].nodes = "150%".into();
        assert_eq!(
            np.validate().unwrap_err().field,
            "spec.disruption.budgets[0].nodes"
        );
    }
}
