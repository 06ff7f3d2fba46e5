//! Bottlerocket: its settings as TOML, the user's own settings merged in.
//!
//! Bottlerocket's user data is one TOML document of API settings, not MIME. The user's TOML is
//! parsed and kept, setting by setting (a host container, a kernel sysctl, a registry mirror),
//! and Joiner writes what the node must have over it, as Karpenter does: the cluster it joins,
//! the node labels (merged over the user's), the taints (replacing the user's: the NodeClaim's
//! are the taints the plan counted), `max-pods`, and the kubelet block's settings where it
//! sets them.

use joiner_model::api::KubeletConfiguration;
use toml::{Table, Value};

use crate::bootstrap::NodeBootstrap;
use crate::mime::UserDataError;

/// The user data of a Bottlerocket node: the user's TOML with Joiner's settings written over it.
pub fn user_data(bootstrap: &NodeBootstrap, user: Option<&str>) -> Result<String, UserDataError> {
    let mut doc: Table = match user.filter(|u| !u.trim().is_empty()) {
        Some(text) => text
            .parse()
            .map_err(|e: toml::de::Error| UserDataError::Toml(e.message().to_string()))?,
        None => Table::new(),
    };
    let settings = table(&mut doc, "settings", "settings")?;
    // Joiner's nodes join no Auto Scaling group: waiting for one would keep the kubelet down.
    if let Some(Value::Table(autoscaling)) = settings.get_mut("autoscaling")
        && autoscaling.contains_key("should-wait")
    {
        autoscaling.insert("should-wait".into(), Value::Boolean(false));
    }
    if bootstrap.raid0_instance_store {
        let commands = table(
            settings,
            "bootstrap-commands",
            "settings.bootstrap-commands",
        )?;
        commands.insert("000-mount-instance-storage".into(), raid0_command());
    }
    let k8s = table(settings, "kubernetes", "settings.kubernetes")?;
    write_kubernetes(k8s, bootstrap)?;
    Ok(toml::to_string(&doc).unwrap_or_default())
}

/// The table under `key`, created when absent.
fn table<'a>(parent: &'a mut Table, key: &str, path: &str) -> Result<&'a mut Table, UserDataError> {
    match parent
        .entry(key)
        .or_insert_with(|| Value::Table(Table::new()))
    {
        Value::Table(t) => Ok(t),
        _ => Err(UserDataError::NotATable(path.to_string())),
    }
}

fn string(v: &str) -> Value {
    Value::String(v.to_string())
}

fn string_map(m: &std::collections::BTreeMap<String, String>) -> Value {
    Value::Table(m.iter().map(|(k, v)| (k.clone(), string(v))).collect())
}

fn write_kubernetes(k8s: &mut Table, b: &NodeBootstrap) -> Result<(), UserDataError> {
    k8s.insert("cluster-name".into(), string(&b.cluster.name));
    if let Some(e) = &b.cluster.endpoint {
        k8s.insert("api-server".into(), string(e));
    }
    if let Some(ca) = &b.cluster.ca_bundle {
        k8s.insert("cluster-certificate".into(), string(ca));
    }
    if let Some(dns) = b.cluster_dns() {
        k8s.insert("cluster-dns-ip".into(), string(dns));
    }
    if let Some(max) = b.effective_max_pods() {
        k8s.insert("max-pods".into(), Value::Integer(max));
    }
    let labels = table(k8s, "node-labels", "settings.kubernetes.node-labels")?;
    for (k, v) in &b.labels {
        labels.insert(k.clone(), string(v));
    }
    let mut taints = Table::new();
    for t in &b.taints {
        let entry = format!("{}:{}", t.value.as_deref().unwrap_or_default(), t.effect);
        match taints
            .entry(t.key.clone())
            .or_insert_with(|| Value::Array(Vec::new()))
        {
            Value::Array(values) => values.push(string(&entry)),
            other => *other = Value::Array(vec![string(&entry)]),
        }
    }
    k8s.insert("node-taints".into(), Value::Table(taints));
    if let Some(k) = &b.kubelet {
        write_kubelet(k8s, k);
    }
    Ok(())
}

/// The kubelet block in Bottlerocket's names (its thresholds are strings).
fn write_kubelet(k8s: &mut Table, k: &KubeletConfiguration) {
    let mut put = |key: &str, v: Option<Value>| {
        if let Some(v) = v {
            k8s.insert(key.to_string(), v);
        }
    };
    put("kube-reserved", k.kube_reserved.as_ref().map(string_map));
    put(
        "system-reserved",
        k.system_reserved.as_ref().map(string_map),
    );
    put("eviction-hard", k.eviction_hard.as_ref().map(string_map));
    put("eviction-soft", k.eviction_soft.as_ref().map(string_map));
    put(
        "eviction-soft-grace-period",
        k.eviction_soft_grace_period.as_ref().map(string_map),
    );
    put(
        "eviction-max-pod-grace-period",
        k.eviction_max_pod_grace_period
            .map(|v| Value::Integer(v.into())),
    );
    put(
        "image-gc-high-threshold-percent",
        k.image_gc_high_threshold_percent
            .map(|v| string(&v.to_string())),
    );
    put(
        "image-gc-low-threshold-percent",
        k.image_gc_low_threshold_percent
            .map(|v| string(&v.to_string())),
    );
    put(
        "cpu-cfs-quota-enforced",
        k.cpu_cfs_quota.map(Value::Boolean),
    );
}

/// Formats the instance store as one array and binds the kubelet's, containerd's and the pod
/// logs' directories onto it (Bottlerocket's `apiclient ephemeral-storage`), before the
/// kubelet starts.
fn raid0_command() -> Value {
    let words = |w: &[&str]| Value::Array(w.iter().map(|s| string(s)).collect());
    let mut cmd = Table::new();
    cmd.insert(
        "commands".into(),
        Value::Array(vec![
            words(&["apiclient", "ephemeral-storage", "init"]),
            words(&[
                "apiclient",
                "ephemeral-storage",
                "bind",
                "--dirs",
                "/var/lib/containerd",
                "/var/lib/kubelet",
                "/var/log/pods",
            ]),
        ]),
    );
    cmd.insert("essential".into(), Value::Boolean(true));
    cmd.insert("mode".into(), string("always"));
    Value::Table(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The lab's GPU node with two taints on one key and a kubelet block of thresholds.
    fn bootstrap() -> NodeBootstrap {
        let mut b = crate::tests::bootstrap();
        b.taints[1].key = "nvidia.com/gpu".into();
        b.kubelet = Some(KubeletConfiguration {
            eviction_hard: Some(BTreeMap::from([("memory.available".into(), "5%".into())])),
            image_gc_high_threshold_percent: Some(85),
            ..Default::default()
        });
        b
    }

    fn parsed(text: &str) -> Table {
        text.parse().expect("valid TOML")
    }

    #[test]
    fn the_settings_join_the_cluster_with_the_plans_labels_taints_and_pods() {
        let doc = parsed(&user_data(&bootstrap(), None).expect("render"));
        let k8s = doc["settings"]["kubernetes"].as_table().expect("table");
        assert_eq!(k8s["cluster-name"].as_str(), Some("lab"));
        assert_eq!(k8s["api-server"].as_str(), Some("https://api.lab.example"));
        assert_eq!(k8s["cluster-certificate"].as_str(), Some("Q0E="));
        assert_eq!(k8s["cluster-dns-ip"].as_str(), Some("10.100.0.99"));
        assert_eq!(k8s["max-pods"].as_integer(), Some(29));
        assert_eq!(
            k8s["node-labels"]["karpenter.sh/nodepool"].as_str(),
            Some("gpu")
        );
        let taints: Vec<&str> = k8s["node-taints"]["nvidia.com/gpu"]
            .as_array()
            .expect("array")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(taints, ["true:NoSchedule", ":NoExecute"]);
        assert_eq!(
            k8s["eviction-hard"]["memory.available"].as_str(),
            Some("5%")
        );
        assert_eq!(
            k8s["image-gc-high-threshold-percent"].as_str(),
            Some("85"),
            "Bottlerocket takes the percentages as strings"
        );
    }

    #[test]
    fn the_users_settings_are_kept_and_joiners_written_over_them() {
        let user = r#"
[settings.kubernetes]
cluster-name = "someone-else"
max-pods = 250

[settings.kubernetes.node-labels]
team = "ml"
"karpenter.sh/nodepool" = "stale"

[settings.kubernetes.node-taints]
dedicated = ["ml:NoSchedule"]

[settings.host-containers.admin]
enabled = true

[settings.autoscaling]
should-wait = true
"#;
        let mut b = bootstrap();
        b.kubelet = Some(KubeletConfiguration {
            max_pods: Some(110),
            ..Default::default()
        });
        let doc = parsed(&user_data(&b, Some(user)).expect("render"));
        let settings = &doc["settings"];
        let k8s = &settings["kubernetes"];
        assert_eq!(k8s["cluster-name"].as_str(), Some("lab"));
        assert_eq!(
            k8s["max-pods"].as_integer(),
            Some(110),
            "kubelet.maxPods wins over the instance type's"
        );
        assert_eq!(k8s["node-labels"]["team"].as_str(), Some("ml"));
        assert_eq!(
            k8s["node-labels"]["karpenter.sh/nodepool"].as_str(),
            Some("gpu")
        );
        assert!(
            k8s["node-taints"].get("dedicated").is_none(),
            "the NodeClaim's taints replace the user's, as Karpenter's do"
        );
        assert_eq!(
            settings["host-containers"]["admin"]["enabled"].as_bool(),
            Some(true)
        );
        assert_eq!(
            settings["autoscaling"]["should-wait"].as_bool(),
            Some(false)
        );
    }

    #[test]
    fn raid0_mounts_the_instance_store_before_the_kubelet_starts() {
        let mut b = bootstrap();
        b.raid0_instance_store = true;
        let doc = parsed(&user_data(&b, None).expect("render"));
        let cmd = &doc["settings"]["bootstrap-commands"]["000-mount-instance-storage"];
        assert_eq!(cmd["mode"].as_str(), Some("always"));
        assert_eq!(cmd["essential"].as_bool(), Some(true));
        assert_eq!(
            cmd["commands"][0].as_array().map(Vec::len),
            Some(3),
            "{cmd}"
        );
    }

    #[test]
    fn unreadable_toml_is_an_error_naming_it() {
        let err = user_data(&bootstrap(), Some("[settings\nbroken")).unwrap_err();
        assert!(matches!(err, UserDataError::Toml(_)), "{err}");
        let err = user_data(&bootstrap(), Some("settings = 3")).unwrap_err();
        assert_eq!(err, UserDataError::NotATable("settings".into()));
    }
}
