//! The parts of Karpenter's OpenAPI schemas that the Rust types alone cannot say: the patterns
//! of label keys, quantities and durations, the taint and condition shapes with Karpenter's
//! constraints, and the CEL rules shared by several kinds.
//!
//! The API types in this module's siblings derive their schemas with schemars (and kube's
//! `KubeSchema` for `x-kubernetes-validations`); they reach for these fragments where a field's
//! Rust type is shared with code that has no schema of its own (k8s-openapi's `Taint`) or where
//! Karpenter constrains the same shape differently in different kinds (conditions).

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::json;
use std::borrow::Cow;

use crate::Quantity;

/// A Kubernetes quantity as text (`resource.Quantity`'s pattern).
pub const QUANTITY: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";
/// A label key or a taint key: an optional DNS-subdomain prefix and a name.
pub const QUALIFIED_NAME: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";
/// A label value (possibly empty).
pub const LABEL_VALUE: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// A Go duration of whole seconds, minutes and hours, or `Never`.
pub const DURATION_OR_NEVER: &str = r"^(([0-9]+(s|m|h))+|Never)$";
/// A Go duration of whole seconds, minutes and hours.
pub const DURATION: &str = r"^([0-9]+(s|m|h))+$";
/// A condition type (`metav1.Condition`).
pub const CONDITION_TYPE: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$";

/// Label keys in `karpenter.k8s.aws` that a NodePool or NodeClaim may select on; the rest of
/// that domain is Karpenter's to set.
const AWS_WELL_KNOWN_LABELS: &[&str] = &[
    "karpenter.k8s.aws/instance-tenancy",
    "karpenter.k8s.aws/capacity-reservation-type",
    "karpenter.k8s.aws/capacity-reservation-id",
    "karpenter.k8s.aws/capacity-reservation-interruptible",
    "karpenter.k8s.aws/ec2nodeclass",
    "karpenter.k8s.aws/instance-encryption-in-transit-supported",
    "karpenter.k8s.aws/instance-category",
    "karpenter.k8s.aws/instance-hypervisor",
    "karpenter.k8s.aws/instance-family",
    "karpenter.k8s.aws/instance-generation",
    "karpenter.k8s.aws/instance-local-nvme",
    "karpenter.k8s.aws/instance-size",
    "karpenter.k8s.aws/instance-cpu",
    "karpenter.k8s.aws/instance-cpu-manufacturer",
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
    "karpenter.k8s.aws/instance-memory",
    "karpenter.k8s.aws/instance-ebs-bandwidth",
    "karpenter.k8s.aws/instance-network-bandwidth",
    "karpenter.k8s.aws/instance-gpu-name",
    "karpenter.k8s.aws/instance-gpu-manufacturer",
    "karpenter.k8s.aws/instance-gpu-count",
    "karpenter.k8s.aws/instance-gpu-memory",
    "karpenter.k8s.aws/instance-accelerator-name",
    "karpenter.k8s.aws/instance-accelerator-manufacturer",
    "karpenter.k8s.aws/instance-accelerator-count",
    "karpenter.k8s.aws/instance-capability-flex",
    "karpenter.k8s.aws/placement-group-id",
    "karpenter.k8s.aws/placement-group-partition",
];

/// A CEL list literal of `items`, as the rules below embed them.
fn cel_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// A CEL rule and its message, in `x-kubernetes-validations` form.
pub fn rule(rule: &str, message: &str) -> serde_json::Value {
    json!({"message": message, "rule": rule})
}

/// The rules on a requirement's key: labels Karpenter sets itself may not be selected on,
/// except its well-known ones.
pub fn requirement_key_rules() -> serde_json::Value {
    json!([
        rule(
            r#"self in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || !self.find("^([^/]+)").endsWith("karpenter.sh")"#,
            r#"label domain "karpenter.sh" is restricted"#,
        ),
        rule(
            r#"self != "kubernetes.io/hostname""#,
            r#"label "kubernetes.io/hostname" is restricted"#,
        ),
        rule(
            &format!(
                r#"self in {} || !self.find("^([^/]+)").endsWith("karpenter.k8s.aws")"#,
                cel_list(AWS_WELL_KNOWN_LABELS)
            ),
            r#"label domain "karpenter.k8s.aws" is restricted"#,
        ),
    ])
}

/// The rules on a NodeOverlay requirement's key: as [`requirement_key_rules`], with the AWS
/// labels Karpenter's NodeOverlay CRD (v1.14) lists, which predate tenancy, capacity
/// reservations and placement groups.
pub fn overlay_requirement_key_rules() -> serde_json::Value {
    let labels: Vec<&str> = AWS_WELL_KNOWN_LABELS
        .iter()
        .copied()
        .filter(|l| {
            !["tenancy", "capacity-reservation", "placement-group"]
                .iter()
                .any(|newer| l.contains(newer))
        })
        .collect();
    let mut rules = requirement_key_rules();
    if let Some(aws) = rules.get_mut(2) {
        *aws = rule(
            &format!(
                r#"self in {} || !self.find("^([^/]+)").endsWith("karpenter.k8s.aws")"#,
                cel_list(&labels)
            ),
            r#"label domain "karpenter.k8s.aws" is restricted"#,
        );
    }
    rules
}

/// The rules on a requirements list, as NodePool templates and NodeClaims share them.
pub fn requirements_rules() -> serde_json::Value {
    json!([
        rule(
            "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
            "requirements with operator 'In' must have a value defined",
        ),
        rule(
            "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
            "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
        ),
        rule(
            "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)",
            "requirements with 'minValues' must have at least that many values specified in the 'values' field",
        ),
    ])
}

/// The rules on template labels: the label domains Karpenter reserves.
pub fn template_label_rules() -> serde_json::Value {
    json!([
        rule(
            r#"self.all(x, x in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || !x.find("^([^/]+)").endsWith("karpenter.sh"))"#,
            r#"label domain "karpenter.sh" is restricted"#,
        ),
        rule(
            r#"self.all(x, x != "karpenter.sh/nodepool")"#,
            r#"label "karpenter.sh/nodepool" is restricted"#,
        ),
        rule(
            r#"self.all(x, x != "kubernetes.io/hostname")"#,
            r#"label "kubernetes.io/hostname" is restricted"#,
        ),
        rule(
            &format!(
                r#"self.all(x, x in {} || !x.find("^([^/]+)").endsWith("karpenter.k8s.aws"))"#,
                cel_list(AWS_WELL_KNOWN_LABELS)
            ),
            r#"label domain "karpenter.k8s.aws" is restricted"#,
        ),
    ])
}

/// The operators a requirement may use, in the order Karpenter's CRD lists them.
pub fn requirement_operator(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "enum": ["Gte", "Lte", "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"],
    })
}

/// The schema of one quantity: an integer or a string in quantity form.
fn quantity_schema() -> Schema {
    // Karpenter's CRDs also list `anyOf: [integer, string]`; kube's structural rewriter empties
    // those, and the flag alone means the same to the API server.
    json_schema!({
        "pattern": QUANTITY,
        "x-kubernetes-int-or-string": true,
    })
}

impl JsonSchema for Quantity {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "Quantity".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        quantity_schema()
    }
}

/// A list of taints with Karpenter's constraints on each (k8s-openapi's `Taint` schema has
/// neither the effect's values nor the key's pattern).
pub fn taints(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "effect": {"type": "string", "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
                "key": {"type": "string", "minLength": 1, "pattern": QUALIFIED_NAME},
                "timeAdded": {"type": "string", "format": "date-time"},
                "value": {"type": "string", "pattern": QUALIFIED_NAME},
            },
            "required": ["effect", "key"],
        },
        "x-kubernetes-list-type": "atomic",
    })
}

/// Status conditions as NodeClaims carry them: `reason` and `message` may be left out.
pub fn conditions_lenient(_: &mut SchemaGenerator) -> Schema {
    conditions(false)
}

/// Status conditions as NodePools and EC2NodeClasses carry them: every condition says why.
pub fn conditions_strict(_: &mut SchemaGenerator) -> Schema {
    conditions(true)
}

/// Status conditions as EC2NodeClasses carry them: strict, in a list Karpenter's CRD does not
/// key by type.
pub fn conditions_unkeyed(_: &mut SchemaGenerator) -> Schema {
    let mut schema = conditions(true);
    if let Some(object) = schema.as_object_mut() {
        object.remove("x-kubernetes-list-map-keys");
        object.remove("x-kubernetes-list-type");
    }
    schema
}

fn conditions(strict: bool) -> Schema {
    let (reason, required) = if strict {
        (
            json!({"type": "string", "maxLength": 1024, "minLength": 1, "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"}),
            json!(["lastTransitionTime", "message", "reason", "status", "type"]),
        )
    } else {
        (
            json!({"type": "string", "maxLength": 1024, "pattern": "^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?|)$"}),
            json!(["lastTransitionTime", "status", "type"]),
        )
    };
    json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "message": {"type": "string", "maxLength": 32768},
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
                "reason": reason,
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "type": {"type": "string", "maxLength": 316, "pattern": CONDITION_TYPE},
            },
            "required": required,
        },
        "x-kubernetes-list-map-keys": ["type"],
        "x-kubernetes-list-type": "map",
    })
}

/// Marks `fields` of an object schema required, dropping the defaults schemars derives from
/// serde's: Karpenter requires fields that Joiner's reader fills in when they are missing (so
/// that objects it wrote in older shapes still read), and the CRD must say what Karpenter's says.
pub fn require(schema: &mut Schema, fields: &[&str]) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if let Some(properties) = object.get_mut("properties").and_then(|p| p.as_object_mut()) {
        for field in fields {
            if let Some(property) = properties.get_mut(*field).and_then(|p| p.as_object_mut()) {
                property.remove("default");
            }
        }
    }
    let required = object.entry("required").or_insert_with(|| json!([]));
    if let Some(required) = required.as_array_mut() {
        for field in fields {
            if !required.iter().any(|r| r == field) {
                required.push(json!(field));
            }
        }
    }
}

/// Drops the default schemars derives from serde's for a field whose default Karpenter's CRD
/// does not state (an empty object the API server need not store).
pub fn drop_default(schema: &mut Schema) {
    if let Some(object) = schema.as_object_mut() {
        object.remove("default");
    }
}

/// Constrains the values of a label map to label values (schemars' `inner` does not reach a
/// map's values).
pub fn label_values(schema: &mut Schema) {
    if let Some(values) = schema
        .get_mut("additionalProperties")
        .and_then(|v| v.as_object_mut())
    {
        values.insert("maxLength".into(), json!(63));
        values.insert("pattern".into(), json!(LABEL_VALUE));
    }
}

/// A NodePool's requirements may not select on `karpenter.sh/nodepool` (the pool sets it); a
/// NodeClaim's carry it. Adds the rule to the key of a requirements list's items, after the
/// first of the shared rules, where Karpenter's CRD has it.
pub fn forbid_nodepool_key(schema: &mut Schema) {
    let Some(rules) = schema
        .pointer_mut("/items/properties/key/x-kubernetes-validations")
        .and_then(|r| r.as_array_mut())
    else {
        return;
    };
    let at = rules.len().min(1);
    rules.insert(
        at,
        rule(
            r#"self != "karpenter.sh/nodepool""#,
            r#"label "karpenter.sh/nodepool" is restricted"#,
        ),
    );
}
