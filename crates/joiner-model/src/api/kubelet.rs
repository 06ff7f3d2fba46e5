//! The kubelet settings of an EC2NodeClass (`spec.kubelet`) that change what a node can hold.

use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use super::schema::{QUANTITY, rule};

/// The eviction signals the kubelet knows.
const EVICTION_SIGNALS: &str = "['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']";
/// An eviction threshold: a percentage or a quantity.
const EVICTION_THRESHOLD: &str = r"^((\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?)%||(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?)$";

/// `EC2NodeClass.spec.kubelet` (v1), and `NodePool.spec.template.spec.kubelet` in v1beta1.
/// Quantities stay strings here (as the API stores them) and are parsed where they are used,
/// so a bad value is reported with its field path.
///
/// Field names are Karpenter's (`clusterDNS`, `cpuCFSQuota`, `imageGCHighThresholdPercent`),
/// not what serde's camel-casing would make of the Rust names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    rule(
        "has(self.imageGCHighThresholdPercent) && has(self.imageGCLowThresholdPercent) ?  self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent  : true",
        "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent"
    ),
    rule(
        "has(self.evictionSoft) ? self.evictionSoft.all(e, (e in self.evictionSoftGracePeriod)):true",
        "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod"
    ),
    rule(
        "has(self.evictionSoftGracePeriod) ? self.evictionSoftGracePeriod.all(e, (e in self.evictionSoft)):true",
        "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft"
    ),
]))]
pub struct KubeletConfiguration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minimum" = 0))]
    pub max_pods: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minimum" = 0))]
    pub pods_per_core: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = quantity_values, extend("x-kubernetes-validations" = reserved_rules("kubeReserved")))]
    pub kube_reserved: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = quantity_values, extend("x-kubernetes-validations" = reserved_rules("systemReserved")))]
    pub system_reserved: Option<BTreeMap<String, String>>,
    /// Signal (`memory.available`, `nodefs.available`, ...) to threshold (`100Mi` or `10%`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = threshold_values, extend("x-kubernetes-validations" = [signals_rule("evictionHard")]))]
    pub eviction_hard: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = threshold_values, extend("x-kubernetes-validations" = [signals_rule("evictionSoft")]))]
    pub eviction_soft: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [signals_rule("evictionSoftGracePeriod")]))]
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    #[serde(
        default,
        rename = "imageGCHighThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("minimum" = 0, "maximum" = 100))]
    pub image_gc_high_threshold_percent: Option<i32>,
    #[serde(
        default,
        rename = "imageGCLowThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("minimum" = 0, "maximum" = 100))]
    pub image_gc_low_threshold_percent: Option<i32>,
    #[serde(
        default,
        rename = "cpuCFSQuota",
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_cfs_quota: Option<bool>,
    #[serde(
        default,
        rename = "clusterDNS",
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_dns: Option<Vec<String>>,
}

/// The rule that a map of eviction settings names only eviction signals.
fn signals_rule(field: &str) -> serde_json::Value {
    rule(
        &format!("self.all(x, x in {EVICTION_SIGNALS})"),
        &format!("valid keys for {field} are {EVICTION_SIGNALS}"),
    )
}

/// The rules on reserved resources: known resources, no negative amounts.
fn reserved_rules(field: &str) -> serde_json::Value {
    serde_json::json!([
        rule(
            "self.all(x, x=='cpu' || x=='memory' || x=='ephemeral-storage' || x=='pid')",
            &format!("valid keys for {field} are ['cpu','memory','ephemeral-storage','pid']"),
        ),
        rule(
            "self.all(x, !self[x].startsWith('-'))",
            &format!("{field} value cannot be a negative resource quantity"),
        ),
    ])
}

fn quantity_values(schema: &mut Schema) {
    values_pattern(schema, QUANTITY);
}

fn threshold_values(schema: &mut Schema) {
    values_pattern(schema, EVICTION_THRESHOLD);
}

fn values_pattern(schema: &mut Schema, pattern: &str) {
    if let Some(values) = schema
        .get_mut("additionalProperties")
        .and_then(|v| v.as_object_mut())
    {
        values.insert("pattern".into(), pattern.into());
    }
}
