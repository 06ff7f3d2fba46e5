//! The EC2NodeClass's `kubelet` block as the kubelet's own configuration file spells it
//! (`KubeletConfiguration`, camelCase), which `nodeadm` merges into the kubelet's config.

use joiner_model::api::KubeletConfiguration;
use serde_json::{Map, Value, json};

/// The EC2NodeClass `kubelet` block in the kubelet's own configuration field names.
pub(crate) fn kubelet_config(k: &KubeletConfiguration) -> Map<String, Value> {
    let mut c = Map::new();
    let mut put = |key: &str, v: Option<Value>| {
        if let Some(v) = v {
            c.insert(key.to_string(), v);
        }
    };
    put("maxPods", k.max_pods.map(Value::from));
    put("podsPerCore", k.pods_per_core.map(Value::from));
    put("kubeReserved", k.kube_reserved.as_ref().map(|m| json!(m)));
    put(
        "systemReserved",
        k.system_reserved.as_ref().map(|m| json!(m)),
    );
    put("evictionHard", k.eviction_hard.as_ref().map(|m| json!(m)));
    put("evictionSoft", k.eviction_soft.as_ref().map(|m| json!(m)));
    put(
        "evictionSoftGracePeriod",
        k.eviction_soft_grace_period.as_ref().map(|m| json!(m)),
    );
    put(
        "evictionMaxPodGracePeriod",
        k.eviction_max_pod_grace_period.map(Value::from),
    );
    put(
        "imageGCHighThresholdPercent",
        k.image_gc_high_threshold_percent.map(Value::from),
    );
    put(
        "imageGCLowThresholdPercent",
        k.image_gc_low_threshold_percent.map(Value::from),
    );
    put("cpuCFSQuota", k.cpu_cfs_quota.map(Value::from));
    put("clusterDNS", k.cluster_dns.as_ref().map(|d| json!(d)));
    c
}
