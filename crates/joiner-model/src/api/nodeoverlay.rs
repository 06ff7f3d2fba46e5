//! Karpenter's NodeOverlay (`karpenter.sh/v1alpha1`, behind the `NodeOverlay` feature gate):
//! adjustments to the instance types a scheduling simulation sees, for the types and offerings
//! its requirements select: a price (absolute or adjusted), and extended resources added to the
//! capacity. How overlays combine is `joiner_engine::overlay`'s.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::nodepool::Operator;
use super::{FieldError, schema};
use crate::ResourceList;

pub const API_VERSION: &str = "karpenter.sh/v1alpha1";
pub const KIND: &str = "NodeOverlay";

/// Condition types, as Karpenter names them.
pub mod conditions {
    /// `False` (reason `Conflict` or `RuntimeValidation`) when the overlay is not applied.
    pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
    pub const READY: &str = "Ready";
}

/// A `karpenter.sh/v1alpha1` NodeOverlay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlay {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: NodeOverlaySpec,
    #[serde(default)]
    pub status: NodeOverlayStatus,
}

impl NodeOverlay {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// The weight, 0 when unset.
    pub fn weight(&self) -> i32 {
        self.spec.weight.unwrap_or(0)
    }

    /// What the CRD's schema and rules refuse, as Karpenter's CRD refuses it.
    pub fn validate(&self) -> Result<(), FieldError> {
        let spec = &self.spec;
        for (i, r) in spec.requirements.iter().enumerate() {
            let field = |f: &str| format!("spec.requirements[{i}].{f}");
            let counted = matches!(
                r.operator,
                Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte
            );
            let listed = matches!(r.operator, Operator::In | Operator::NotIn);
            if listed && r.values.is_empty() {
                return Err(FieldError::new(
                    field("values"),
                    format!(
                        "requirements with operator '{}' must have a value defined",
                        r.operator.as_str()
                    ),
                ));
            }
            if counted && (r.values.len() != 1 || r.values[0].parse::<u64>().is_err()) {
                return Err(FieldError::new(
                    field("values"),
                    "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
                ));
            }
            if r.key == "kubernetes.io/hostname" {
                return Err(FieldError::new(
                    field("key"),
                    "label \"kubernetes.io/hostname\" is restricted",
                ));
            }
        }
        for name in spec.capacity.keys() {
            if matches!(
                name.as_str(),
                "cpu" | "memory" | "ephemeral-storage" | "pods"
            ) {
                return Err(FieldError::new(
                    format!("spec.capacity.{name}"),
                    "invalid resource restricted: an overlay adds extended resources only",
                ));
            }
        }
        if let Some(w) = spec.weight
            && !(1..=10000).contains(&w)
        {
            return Err(FieldError::new(
                "spec.weight",
                format!("{w}: must be 1 to 10000"),
            ));
        }
        PriceChange::of(spec).map_err(|(field, m)| FieldError::new(field, m))?;
        Ok(())
    }
}

/// What a NodeOverlay changes, and for which instance types. Its schema is the CRD's (see
/// [`crate::api::crds`]).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema, CustomResource)]
#[kube(
    group = "karpenter.sh",
    version = "v1alpha1",
    kind = "NodeOverlay",
    root = "NodeOverlayResource",
    status = "NodeOverlayStatus",
    category = "karpenter",
    shortname = "overlays",
    doc = "NodeOverlay adjusts the instance types Karpenter's scheduling simulation sees",
    crates(
        kube_core = "::kube_core",
        k8s_openapi = "::k8s_openapi",
        schemars = "::schemars",
        serde = "::serde",
        serde_json = "::serde_json"
    ),
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Weight", "type": "integer", "jsonPath": ".spec.weight", "priority": 1}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [schema::rule(
    "!has(self.price) || !has(self.priceAdjustment)",
    "cannot set both 'price' and 'priceAdjustment'"
)]))]
pub struct NodeOverlaySpec {
    /// Which instance types and offerings the overlay applies to: well-known labels
    /// (instance type, family, GPU count, zone, capacity type, `karpenter.sh/nodepool`) and the
    /// NodePool's own labels.
    #[serde(default)]
    #[schemars(
        length(max = 100),
        extend(
            "x-kubernetes-list-type" = "atomic",
            "x-kubernetes-validations" = overlay_requirements_rules()
        )
    )]
    pub requirements: Vec<OverlayRequirement>,
    /// A change of the price: `+0.5`, `-0.1` (per hour), `+10%`, `-15%` (at most -100%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(
        r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$"
    ))]
    pub price_adjustment: Option<String>,
    /// The price per hour, replacing the offering's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^\d+(\.\d+)?$"))]
    pub price: Option<String>,
    /// Extended resources the nodes have (set, not added to); never cpu, memory,
    /// ephemeral-storage or pods.
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = [schema::rule(
        "self.all(x, !(x in ['cpu', 'memory', 'ephemeral-storage', 'pods']))",
        "invalid resource restricted"
    )]))]
    pub capacity: ResourceList,
    /// Precedence among overlays that select the same offering or resource: the higher wins;
    /// equal weights conflict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub weight: Option<i32>,
}

/// The rules on an overlay's requirements, as Karpenter's CRD has them.
fn overlay_requirements_rules() -> serde_json::Value {
    serde_json::json!([
        schema::rule(
            "self.all(x, x.operator == 'NotIn' ? x.values.size() != 0 : true)",
            "requirements with operator 'NotIn' must have a value defined",
        ),
        schema::rule(
            "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
            "requirements with operator 'In' must have a value defined",
        ),
        schema::rule(
            "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
            "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
        ),
    ])
}

/// One requirement of an overlay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverlayRequirement {
    #[schemars(
        length(max = 316),
        pattern(schema::QUALIFIED_NAME),
        extend("x-kubernetes-validations" = schema::overlay_requirement_key_rules())
    )]
    pub key: String,
    #[schemars(schema_with = "schema::requirement_operator")]
    pub operator: Operator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub values: Vec<String>,
}

/// What Karpenter writes of an overlay: whether it is applied.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlayStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions_strict")]
    pub conditions: Vec<super::nodeclaim::Condition>,
}

/// A price change, as `price` or `priceAdjustment` writes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PriceChange {
    /// `price`: this price per hour.
    Set(f64),
    /// `priceAdjustment: +0.5` or `-0.5`: added to the price, never below zero.
    Add(f64),
    /// `priceAdjustment: +10%` or `-15%`: the price scaled by `1 + percent/100`.
    Percent(f64),
}

impl PriceChange {
    /// The overlay's change, if any; an error names the field.
    pub fn of(spec: &NodeOverlaySpec) -> Result<Option<PriceChange>, (&'static str, String)> {
        match (&spec.price, &spec.price_adjustment) {
            (Some(_), Some(_)) => Err((
                "spec",
                "cannot set both 'price' and 'priceAdjustment'".into(),
            )),
            (Some(p), None) => decimal(p).map(|v| Some(PriceChange::Set(v))).ok_or((
                "spec.price",
                format!("{p:?} is not a price (digits, e.g. 0.42)"),
            )),
            (None, Some(a)) => Self::adjustment(a).map(Some).ok_or((
                "spec.priceAdjustment",
                format!("{a:?} is not a price adjustment (+0.5, -0.1, +10%, -15%; at most -100%)"),
            )),
            (None, None) => Ok(None),
        }
    }

    fn adjustment(text: &str) -> Option<PriceChange> {
        let sign = match text.chars().next()? {
            '+' => 1.0,
            '-' => -1.0,
            _ => return None,
        };
        let body = &text[1..];
        let (number, percent) = match body.strip_suffix('%') {
            Some(n) => (n, true),
            None => (body, false),
        };
        let value = decimal(number)? * sign;
        if percent {
            // A decrease is at most 100%.
            (value >= -100.0).then_some(PriceChange::Percent(value))
        } else {
            Some(PriceChange::Add(value))
        }
    }

    /// The price after the change, never below zero.
    pub fn apply(self, price: f64) -> f64 {
        let changed = match self {
            PriceChange::Set(p) => p,
            PriceChange::Add(d) => price + d,
            PriceChange::Percent(p) => price * (1.0 + p / 100.0),
        };
        changed.max(0.0)
    }
}

/// An unsigned decimal as the CRD's patterns write it (digits, at most one point): no sign, no
/// exponent, nothing `f64` parsing would also take (`inf`, `1e3`).
fn decimal(text: &str) -> Option<f64> {
    let digits = !text.is_empty()
        && text.chars().all(|c| c.is_ascii_digit() || c == '.')
        && text.matches('.').count() <= 1;
    digits.then(|| text.parse::<f64>().ok()).flatten()
}

impl fmt::Display for PriceChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PriceChange::Set(p) => write!(f, "price {p}"),
            PriceChange::Add(d) => write!(f, "price {d:+}"),
            PriceChange::Percent(p) => write!(f, "price {p:+}%"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(
        price: Option<&str>,
        adjustment: Option<&str>,
    ) -> Result<Option<PriceChange>, String> {
        let spec = NodeOverlaySpec {
            price: price.map(str::to_string),
            price_adjustment: adjustment.map(str::to_string),
            ..NodeOverlaySpec::default()
        };
        PriceChange::of(&spec).map_err(|(field, m)| format!("{field}: {m}"))
    }

    #[test]
    fn prices_and_adjustments_read_as_karpenter_reads_them() {
        let at = |p: Option<&str>, a: Option<&str>, base: f64| {
            change(p, a).unwrap().unwrap().apply(base)
        };
        assert_eq!(at(Some("0.25"), None, 1.0), 0.25);
        assert_eq!(at(None, Some("+0.5"), 1.0), 1.5);
        assert_eq!(at(None, Some("-2"), 1.0), 0.0, "never below zero");
        assert!((at(None, Some("+10%"), 2.0) - 2.2).abs() < 1e-9);
        assert!((at(None, Some("-15%"), 2.0) - 1.7).abs() < 1e-9);
        assert_eq!(at(None, Some("-100%"), 2.0), 0.0);
        assert_eq!(change(None, None).unwrap(), None);
        for bad in ["10%", "+", "+x", "-150%", "+1e3"] {
            let e = change(None, Some(bad)).unwrap_err();
            assert!(e.starts_with("spec.priceAdjustment"), "{bad}: {e}");
        }
        assert!(
            change(Some("-1"), None)
                .unwrap_err()
                .starts_with("spec.price")
        );
        assert!(change(Some("1"), Some("+1")).unwrap_err().contains("both"));
    }
}
