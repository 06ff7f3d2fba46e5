//! The instance's userData: the user's own parts from the EC2NodeClass, then Joiner's bootstrap,
//! in one MIME multipart document, the way Karpenter merges it.
//!
//! On AL2023 `nodeadm` reads every `application/node.eks.aws` part in order and later
//! NodeConfigs override earlier ones, so Joiner's NodeConfig goes last: the cluster it joins and
//! the taints it registers with cannot be overridden by accident, while the user's kubelet
//! settings and scripts still apply. On AL2 Joiner's part is a shell script calling
//! `/etc/eks/bootstrap.sh`, also last, after the user's scripts.
//!
//! The user's parts are kept byte for byte (headers and body): a document that is already MIME
//! multipart keeps each of its parts; plain text is wrapped as one part, a NodeConfig or a
//! shell script by its content.

use std::collections::BTreeMap;

use joiner_model::api::KubeletConfiguration;
use k8s_openapi::api::core::v1::Taint;
use serde_json::{Map, Value, json};

/// The MIME type `nodeadm` reads its NodeConfig from.
pub const NODECONFIG_CONTENT_TYPE: &str = "application/node.eks.aws";
const SHELL_CONTENT_TYPE: &str = "text/x-shellscript; charset=\"us-ascii\"";

/// What a node needs to join the cluster, as Joiner tells the bootstrap.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeBootstrap {
    pub cluster_name: String,
    /// The API server URL (`settings.clusterEndpoint`).
    pub endpoint: Option<String>,
    /// The cluster CA bundle, base64 PEM as EKS reports it.
    pub ca_bundle: Option<String>,
    /// The service CIDR (`nodeadm` derives the cluster DNS address from it).
    pub service_cidr: Option<String>,
    /// The cluster DNS Service's address (`kube-dns`), used unless the EC2NodeClass's kubelet
    /// block sets `clusterDNS`.
    pub cluster_dns: Option<String>,
    /// Labels the kubelet registers the Node with (already filtered to what a kubelet may set).
    pub labels: BTreeMap<String, String>,
    /// Taints the kubelet registers the Node with (taints and startup taints).
    pub taints: Vec<Taint>,
    pub kubelet: Option<KubeletConfiguration>,
}

/// A user's userData that cannot be merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserDataError {
    #[error("userData says it is MIME multipart but names no boundary")]
    NoBoundary,
    #[error("userData is MIME multipart but has no closing boundary `--{0}--`")]
    Unterminated(String),
}

/// One MIME part, headers and body as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Part {
    fn new(content_type: &str, body: String) -> Part {
        Part {
            headers: vec![("Content-Type".to_string(), content_type.to_string())],
            body,
        }
    }

    /// The part's `Content-Type`, without parameters, lower case.
    pub fn content_type(&self) -> Option<String> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            .map(|(_, v)| {
                v.split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_ascii_lowercase()
            })
    }
}

/// AL2023: the user's parts, then Joiner's NodeConfig.
pub fn al2023(bootstrap: &NodeBootstrap, user: Option<&str>) -> Result<String, UserDataError> {
    let mut parts = user_parts(user)?;
    parts.push(Part::new(NODECONFIG_CONTENT_TYPE, node_config(bootstrap)));
    Ok(multipart(&parts))
}

/// AL2: the user's parts, then a script running `/etc/eks/bootstrap.sh`.
pub fn al2(bootstrap: &NodeBootstrap, user: Option<&str>) -> Result<String, UserDataError> {
    let mut parts = user_parts(user)?;
    parts.push(Part::new(SHELL_CONTENT_TYPE, bootstrap_script(bootstrap)));
    Ok(multipart(&parts))
}

/// The user's userData as parts: a multipart document's own parts, or the text as one part.
pub fn user_parts(user: Option<&str>) -> Result<Vec<Part>, UserDataError> {
    let Some(text) = user.filter(|t| !t.trim().is_empty()) else {
        return Ok(Vec::new());
    };
    let text = text.replace("\r\n", "\n");
    let (headers, body) = split_headers(&text);
    let is_mime = headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("mime-version"));
    if !is_mime {
        let content_type = if text.contains("node.eks.aws/") && text.contains("NodeConfig") {
            NODECONFIG_CONTENT_TYPE
        } else {
            SHELL_CONTENT_TYPE
        };
        return Ok(vec![Part::new(content_type, text)]);
    }
    let boundary = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .and_then(|(_, v)| boundary_of(v))
        .ok_or(UserDataError::NoBoundary)?;
    parse_parts(body, &boundary)
}

/// The `boundary` parameter of a `multipart/...` content type.
fn boundary_of(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|param| {
        let (k, v) = param.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"').to_string())
            .filter(|b| !b.is_empty())
    })
}

/// Headers (up to the first empty line) and the rest. Text with no header block is all body.
fn split_headers(text: &str) -> (Vec<(String, String)>, &str) {
    let (head, body) = match text.split_once("\n\n") {
        Some((h, b)) => (h, b),
        None => (text, ""),
    };
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in head.lines() {
        if line.starts_with([' ', '\t']) {
            // A folded header continues the previous one.
            match headers.last_mut() {
                Some(last) => {
                    last.1.push(' ');
                    last.1.push_str(line.trim());
                }
                None => return (Vec::new(), text),
            }
            continue;
        }
        match line.split_once(':') {
            Some((k, v)) if !k.is_empty() && !k.contains(char::is_whitespace) => {
                headers.push((k.to_string(), v.trim().to_string()));
            }
            _ => return (Vec::new(), text),
        }
    }
    (headers, body)
}

fn parse_parts(body: &str, boundary: &str) -> Result<Vec<Part>, UserDataError> {
    let delimiter = format!("--{boundary}");
    let closing = format!("--{boundary}--");
    let mut parts = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in body.lines() {
        let trimmed = line.trim_end();
        if trimmed == closing {
            if let Some(lines) = current.take() {
                parts.push(part_of(&lines));
            }
            return Ok(parts);
        }
        if trimmed == delimiter {
            if let Some(lines) = current.take() {
                parts.push(part_of(&lines));
            }
            current = Some(Vec::new());
        } else if let Some(lines) = current.as_mut() {
            lines.push(line);
        }
    }
    Err(UserDataError::Unterminated(boundary.to_string()))
}

fn part_of(lines: &[&str]) -> Part {
    let text = lines.join("\n");
    let (headers, body) = split_headers(&text);
    Part {
        headers,
        body: body.trim_end_matches('\n').to_string(),
    }
}

/// A `multipart/mixed` document of `parts`, with a boundary that appears in none of them.
pub fn multipart(parts: &[Part]) -> String {
    let mut boundary = "//".to_string();
    let mut n = 0u32;
    while parts
        .iter()
        .any(|p| p.body.contains(&format!("--{boundary}")))
    {
        n += 1;
        boundary = format!("joiner-boundary-{n}");
    }
    let mut out =
        format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{boundary}\"\n\n");
    for part in parts {
        out.push_str(&format!("--{boundary}\n"));
        for (k, v) in &part.headers {
            out.push_str(&format!("{k}: {v}\n"));
        }
        out.push('\n');
        out.push_str(part.body.trim_end_matches('\n'));
        out.push('\n');
    }
    out.push_str(&format!("--{boundary}--\n"));
    out
}

/// `key=value:Effect` (or `key:Effect`), as `--register-with-taints` takes it.
pub fn taint_flag(t: &Taint) -> String {
    match t.value.as_deref().filter(|v| !v.is_empty()) {
        Some(v) => format!("{}={}:{}", t.key, v, t.effect),
        None => format!("{}:{}", t.key, t.effect),
    }
}

fn kubelet_flags(b: &NodeBootstrap) -> Vec<String> {
    let mut flags = Vec::new();
    if !b.labels.is_empty() {
        let labels: Vec<String> = b.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        flags.push(format!("--node-labels={}", labels.join(",")));
    }
    if !b.taints.is_empty() {
        let taints: Vec<String> = b.taints.iter().map(taint_flag).collect();
        flags.push(format!("--register-with-taints={}", taints.join(",")));
    }
    flags
}

/// The EC2NodeClass `kubelet` block in the kubelet's own configuration field names.
fn kubelet_config(k: &KubeletConfiguration) -> Map<String, Value> {
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

/// Joiner's `nodeadm` NodeConfig (YAML).
pub fn node_config(b: &NodeBootstrap) -> String {
    let mut cluster = Map::new();
    cluster.insert("name".into(), Value::from(b.cluster_name.clone()));
    if let Some(e) = &b.endpoint {
        cluster.insert("apiServerEndpoint".into(), Value::from(e.clone()));
    }
    if let Some(ca) = &b.ca_bundle {
        cluster.insert("certificateAuthority".into(), Value::from(ca.clone()));
    }
    if let Some(cidr) = &b.service_cidr {
        cluster.insert("cidr".into(), Value::from(cidr.clone()));
    }
    let mut kubelet = Map::new();
    let mut config = b.kubelet.as_ref().map(kubelet_config).unwrap_or_default();
    if let Some(dns) = &b.cluster_dns
        && !config.contains_key("clusterDNS")
    {
        config.insert("clusterDNS".into(), json!([dns]));
    }
    if !config.is_empty() {
        kubelet.insert("config".into(), Value::Object(config));
    }
    let flags = kubelet_flags(b);
    if !flags.is_empty() {
        kubelet.insert("flags".into(), json!(flags));
    }
    let mut spec = Map::new();
    spec.insert("cluster".into(), Value::Object(cluster));
    if !kubelet.is_empty() {
        spec.insert("kubelet".into(), Value::Object(kubelet));
    }
    let doc = json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": spec,
    });
    // JSON is YAML: a serializer failure cannot lose the config.
    serde_saphyr::to_string(&doc).unwrap_or_else(|_| doc.to_string())
}

/// Single-quotes a value for the shell.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The AL2 bootstrap script.
pub fn bootstrap_script(b: &NodeBootstrap) -> String {
    let mut cmd = format!(
        "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n/etc/eks/bootstrap.sh {}",
        shell_quote(&b.cluster_name)
    );
    if let Some(e) = &b.endpoint {
        cmd.push_str(&format!(" --apiserver-endpoint {}", shell_quote(e)));
    }
    if let Some(ca) = &b.ca_bundle {
        cmd.push_str(&format!(" --b64-cluster-ca {}", shell_quote(ca)));
    }
    if let Some(dns) = b
        .kubelet
        .as_ref()
        .and_then(|k| k.cluster_dns.as_ref())
        .and_then(|d| d.first())
        .or(b.cluster_dns.as_ref())
    {
        cmd.push_str(&format!(" --dns-cluster-ip {}", shell_quote(dns)));
    }
    let mut flags = kubelet_flags(b);
    if let Some(max) = b.kubelet.as_ref().and_then(|k| k.max_pods) {
        cmd.push_str(" --use-max-pods false");
        flags.push(format!("--max-pods={max}"));
    }
    if !flags.is_empty() {
        cmd.push_str(&format!(
            " --kubelet-extra-args {}",
            shell_quote(&flags.join(" "))
        ));
    }
    cmd.push('\n');
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bootstrap() -> NodeBootstrap {
        NodeBootstrap {
            cluster_name: "lab".into(),
            endpoint: Some("https://api.lab.example".into()),
            ca_bundle: Some("Q0E=".into()),
            service_cidr: Some("10.100.0.0/16".into()),
            cluster_dns: Some("10.100.0.99".into()),
            labels: BTreeMap::from([("karpenter.sh/nodepool".into(), "gpu".into())]),
            taints: vec![
                Taint {
                    key: "nvidia.com/gpu".into(),
                    value: Some("true".into()),
                    effect: "NoSchedule".into(),
                    time_added: None,
                },
                Taint {
                    key: "node.example/startup".into(),
                    value: None,
                    effect: "NoExecute".into(),
                    time_added: None,
                },
            ],
            kubelet: Some(KubeletConfiguration {
                max_pods: Some(110),
                cluster_dns: Some(vec!["10.100.0.10".into()]),
                ..Default::default()
            }),
        }
    }

    /// What nodeadm's NodeConfig validation requires (`spec.cluster`: name, apiServerEndpoint,
    /// certificateAuthority, cidr), and the cluster DNS the controller found.
    #[test]
    fn the_node_config_carries_every_field_nodeadm_requires() {
        let mut b = bootstrap();
        b.kubelet = None;
        let config: Value = serde_saphyr::from_str(&node_config(&b)).expect("YAML");
        assert_eq!(config["apiVersion"], "node.eks.aws/v1alpha1");
        let cluster = &config["spec"]["cluster"];
        for field in ["name", "apiServerEndpoint", "certificateAuthority", "cidr"] {
            assert!(
                cluster[field].as_str().is_some_and(|v| !v.is_empty()),
                "spec.cluster.{field} missing: {config}"
            );
        }
        assert_eq!(cluster["cidr"], "10.100.0.0/16");
        assert_eq!(
            config["spec"]["kubelet"]["config"]["clusterDNS"],
            json!(["10.100.0.99"]),
            "the kube-dns address found at start-up"
        );
        // AL2's bootstrap gets the same address.
        assert!(bootstrap_script(&b).contains("--dns-cluster-ip '10.100.0.99'"));
    }

    const LAB_USER_DATA: &str = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\nset -ex\nsudo ctr -n=k8s.io image pull docker.io/tensorflow/tensorflow:2.12.0-gpu\n--//--\n";

    #[test]
    fn a_multipart_user_data_keeps_its_parts_and_joiner_node_config_comes_last() {
        let merged = al2023(&bootstrap(), Some(LAB_USER_DATA)).expect("merge");
        let parts = user_parts(Some(&merged)).expect("merged is multipart");
        assert_eq!(parts.len(), 2, "{merged}");
        assert_eq!(parts[0], user_parts(Some(LAB_USER_DATA)).expect("user")[0]);
        assert!(parts[0].body.contains("tensorflow:2.12.0-gpu"));
        assert_eq!(
            parts[1].content_type().as_deref(),
            Some(NODECONFIG_CONTENT_TYPE)
        );
        let config: Value = serde_saphyr::from_str(&parts[1].body).expect("NodeConfig YAML");
        assert_eq!(config["kind"], "NodeConfig");
        assert_eq!(config["spec"]["cluster"]["name"], "lab");
        assert_eq!(
            config["spec"]["cluster"]["apiServerEndpoint"],
            "https://api.lab.example"
        );
        assert_eq!(config["spec"]["cluster"]["certificateAuthority"], "Q0E=");
        assert_eq!(config["spec"]["kubelet"]["config"]["maxPods"], 110);
        assert_eq!(
            config["spec"]["kubelet"]["config"]["clusterDNS"][0],
            "10.100.0.10"
        );
        let flags = config["spec"]["kubelet"]["flags"].to_string();
        assert!(
            flags.contains(
                "--register-with-taints=nvidia.com/gpu=true:NoSchedule,node.example/startup:NoExecute"
            ),
            "{flags}"
        );
        assert!(
            flags.contains("--node-labels=karpenter.sh/nodepool=gpu"),
            "{flags}"
        );
    }

    #[test]
    fn plain_user_data_is_wrapped_by_what_it_is() {
        let script = "#!/bin/bash\necho hello\n";
        let parts = user_parts(Some(script)).expect("parts");
        assert_eq!(parts.len(), 1);
        assert_eq!(
            parts[0].content_type().as_deref(),
            Some("text/x-shellscript")
        );
        assert_eq!(parts[0].body, script);

        let node_config = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      maxPods: 42\n";
        let merged = al2023(&bootstrap(), Some(node_config)).expect("merge");
        let parts = user_parts(Some(&merged)).expect("parts");
        assert_eq!(parts.len(), 2);
        assert_eq!(
            parts[0].content_type().as_deref(),
            Some(NODECONFIG_CONTENT_TYPE)
        );
        assert!(parts[0].body.contains("maxPods: 42"));
    }

    #[test]
    fn no_user_data_gives_only_joiners_part() {
        let merged = al2023(&bootstrap(), None).expect("merge");
        assert_eq!(user_parts(Some(&merged)).expect("parts").len(), 1);
    }

    #[test]
    fn broken_multipart_user_data_is_an_error_not_a_silent_drop() {
        let broken = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"XX\"\n\n--XX\nContent-Type: text/x-shellscript\n\necho hi\n";
        assert_eq!(
            user_parts(Some(broken)),
            Err(UserDataError::Unterminated("XX".into()))
        );
        let no_boundary = "MIME-Version: 1.0\nContent-Type: multipart/mixed\n\n--XX\n";
        assert_eq!(
            user_parts(Some(no_boundary)),
            Err(UserDataError::NoBoundary)
        );
    }

    #[test]
    fn the_boundary_never_collides_with_a_part() {
        let tricky = "#!/bin/bash\necho '--//'\n";
        let merged = al2023(&bootstrap(), Some(tricky)).expect("merge");
        let parts = user_parts(Some(&merged)).expect("parts");
        assert_eq!(parts.len(), 2, "{merged}");
        assert_eq!(parts[0].body, tricky.trim_end());
    }

    #[test]
    fn al2_bootstrap_passes_cluster_labels_and_taints() {
        let merged = al2(&bootstrap(), Some(LAB_USER_DATA)).expect("merge");
        let parts = user_parts(Some(&merged)).expect("parts");
        assert_eq!(parts.len(), 2);
        let script = &parts[1].body;
        assert!(script.contains("/etc/eks/bootstrap.sh 'lab'"), "{script}");
        assert!(script.contains("--b64-cluster-ca 'Q0E='"), "{script}");
        assert!(
            script.contains("--register-with-taints=nvidia.com/gpu=true:NoSchedule"),
            "{script}"
        );
    }
}
