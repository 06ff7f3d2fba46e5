//! AL2: a shell script calling `/etc/eks/bootstrap.sh`, after the user's own parts (the
//! bootstrap starts the kubelet, so what the user prepares must run first, as with Karpenter).

use crate::bootstrap::{NodeBootstrap, taint_flag};
use crate::mime::{Part, SHELL_CONTENT_TYPE, UserDataError, multipart, user_parts};

/// The user data of an AL2 node: the user's parts, then Joiner's bootstrap script.
pub fn user_data(bootstrap: &NodeBootstrap, user: Option<&str>) -> Result<String, UserDataError> {
    let mut parts = user_parts(user)?;
    parts.push(Part::new(SHELL_CONTENT_TYPE, bootstrap_script(bootstrap)));
    Ok(multipart(&parts))
}

/// Single-quotes a value for the shell.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The AL2 bootstrap script.
pub fn bootstrap_script(b: &NodeBootstrap) -> String {
    let mut cmd = format!(
        "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n/etc/eks/bootstrap.sh {}",
        shell_quote(&b.cluster.name)
    );
    if let Some(e) = &b.cluster.endpoint {
        cmd.push_str(&format!(" --apiserver-endpoint {}", shell_quote(e)));
    }
    if let Some(ca) = &b.cluster.ca_bundle {
        cmd.push_str(&format!(" --b64-cluster-ca {}", shell_quote(ca)));
    }
    if let Some(dns) = b.cluster_dns() {
        cmd.push_str(&format!(" --dns-cluster-ip {}", shell_quote(dns)));
    }
    if b.raid0_instance_store {
        cmd.push_str(" --local-disks raid0");
    }
    let mut flags = Vec::new();
    if !b.labels.is_empty() {
        let labels: Vec<String> = b.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        flags.push(format!("--node-labels={}", labels.join(",")));
    }
    if !b.taints.is_empty() {
        let taints: Vec<String> = b.taints.iter().map(taint_flag).collect();
        flags.push(format!("--register-with-taints={}", taints.join(",")));
    }
    if let Some(max) = b.effective_max_pods() {
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
