//! AL2023: `nodeadm`'s `NodeConfig`, in a MIME multipart document with the user's own parts.
//!
//! `nodeadm` validates `spec.cluster` (name, API endpoint, CA, service CIDR) and does not look
//! the cluster up, so all four are always written. It reads every `application/node.eks.aws`
//! part in order and later NodeConfigs override earlier ones; Joiner's goes first, as
//! Karpenter's does, so a Karpenter user's NodeConfig (a `maxPods`, a kubelet flag) keeps the
//! last word on their nodes exactly as it had.

use serde_json::{Map, Value, json};

use crate::bootstrap::NodeBootstrap;
use crate::kubelet::kubelet_config;
use crate::mime::{NODECONFIG_CONTENT_TYPE, Part, UserDataError, multipart, user_parts};

/// The user data of an AL2023 node: Joiner's NodeConfig, then the user's parts.
pub fn user_data(bootstrap: &NodeBootstrap, user: Option<&str>) -> Result<String, UserDataError> {
    let mut parts = vec![Part::new(NODECONFIG_CONTENT_TYPE, node_config(bootstrap))];
    parts.extend(user_parts(user)?);
    Ok(multipart(&parts))
}

/// Joiner's `nodeadm` NodeConfig (YAML).
pub fn node_config(b: &NodeBootstrap) -> String {
    let mut cluster = Map::new();
    cluster.insert("name".into(), Value::from(b.cluster.name.clone()));
    let mut put = |key: &str, v: &Option<String>| {
        if let Some(v) = v {
            cluster.insert(key.into(), Value::from(v.clone()));
        }
    };
    put("apiServerEndpoint", &b.cluster.endpoint);
    put("certificateAuthority", &b.cluster.ca_bundle);
    put("cidr", &b.cluster.service_cidr);

    let mut config = b.kubelet.as_ref().map(kubelet_config).unwrap_or_default();
    if let Some(max) = b.effective_max_pods() {
        config.insert("maxPods".into(), Value::from(max));
    }
    if let Some(dns) = b.cluster_dns()
        && !config.contains_key("clusterDNS")
    {
        config.insert("clusterDNS".into(), json!([dns]));
    }
    if !b.taints.is_empty() {
        let taints: Vec<Value> = b
            .taints
            .iter()
            .map(|t| {
                let mut m = Map::new();
                m.insert("key".into(), Value::from(t.key.clone()));
                if let Some(v) = t.value.as_ref().filter(|v| !v.is_empty()) {
                    m.insert("value".into(), Value::from(v.clone()));
                }
                m.insert("effect".into(), Value::from(t.effect.clone()));
                Value::Object(m)
            })
            .collect();
        config.insert("registerWithTaints".into(), Value::Array(taints));
    }
    let mut kubelet = Map::new();
    if !config.is_empty() {
        kubelet.insert("config".into(), Value::Object(config));
    }
    if !b.labels.is_empty() {
        let labels: Vec<String> = b.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        kubelet.insert(
            "flags".into(),
            json!([format!("--node-labels={}", labels.join(","))]),
        );
    }
    let mut spec = Map::new();
    spec.insert("cluster".into(), Value::Object(cluster));
    if !kubelet.is_empty() {
        spec.insert("kubelet".into(), Value::Object(kubelet));
    }
    if b.raid0_instance_store {
        spec.insert(
            "instance".into(),
            json!({"localStorage": {"strategy": "RAID0"}}),
        );
    }
    let doc = json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": spec,
    });
    // JSON is YAML: a serializer failure cannot lose the config.
    serde_saphyr::to_string(&doc).unwrap_or_else(|_| doc.to_string())
}
