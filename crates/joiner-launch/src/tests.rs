//! The user data as `nodeadm`, cloud-init and `bootstrap.sh` read it.

use std::collections::BTreeMap;

use joiner_model::api::KubeletConfiguration;
use k8s_openapi::api::core::v1::Taint;
use serde_json::{Value, json};

use crate::al2::{self, bootstrap_script};
use crate::bootstrap::{Cluster, NodeBootstrap};
use crate::mime::{NODECONFIG_CONTENT_TYPE, UserDataError, user_parts};
use crate::nodeadm::{self, node_config};

/// A GPU node of the lab cluster: its taints, a startup taint and a kubelet block.
pub(crate) fn bootstrap() -> NodeBootstrap {
    NodeBootstrap {
        cluster: Cluster {
            name: "lab".into(),
            endpoint: Some("https://api.lab.example".into()),
            ca_bundle: Some("Q0E=".into()),
            service_cidr: Some("10.100.0.0/16".into()),
            dns_ip: Some("10.100.0.99".into()),
        },
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
        max_pods: Some(29),
        raid0_instance_store: false,
    }
}

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).expect("YAML")
}

/// What nodeadm's NodeConfig validation requires (`spec.cluster`: name, apiServerEndpoint,
/// certificateAuthority, cidr), the cluster DNS the controller found, and the pods the plan
/// counted for the instance type.
#[test]
fn the_node_config_carries_every_field_nodeadm_requires() {
    let mut b = bootstrap();
    b.kubelet = None;
    let config = yaml(&node_config(&b));
    assert_eq!(config["apiVersion"], "node.eks.aws/v1alpha1");
    let cluster = &config["spec"]["cluster"];
    for field in ["name", "apiServerEndpoint", "certificateAuthority", "cidr"] {
        assert!(
            cluster[field].as_str().is_some_and(|v| !v.is_empty()),
            "spec.cluster.{field} missing: {config}"
        );
    }
    assert_eq!(cluster["cidr"], "10.100.0.0/16");
    let kubelet = &config["spec"]["kubelet"]["config"];
    assert_eq!(
        kubelet["clusterDNS"],
        json!(["10.100.0.99"]),
        "the kube-dns address found at start-up"
    );
    assert_eq!(
        kubelet["maxPods"], 29,
        "the instance type's pods, as the plan counted them"
    );
    assert_eq!(
        kubelet["registerWithTaints"],
        json!([
            {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
            {"key": "node.example/startup", "effect": "NoExecute"},
        ])
    );
    assert!(config["spec"].get("instance").is_none());
    // AL2's bootstrap gets the same address and pods.
    let script = bootstrap_script(&b);
    assert!(
        script.contains("--dns-cluster-ip '10.100.0.99'"),
        "{script}"
    );
    assert!(
        script.contains("--use-max-pods false") && script.contains("--max-pods=29"),
        "{script}"
    );
}

#[test]
fn kubelet_max_pods_wins_and_raid0_formats_the_instance_store() {
    let mut b = bootstrap();
    b.raid0_instance_store = true;
    let config = yaml(&node_config(&b));
    assert_eq!(config["spec"]["kubelet"]["config"]["maxPods"], 110);
    assert_eq!(
        config["spec"]["kubelet"]["config"]["clusterDNS"],
        json!(["10.100.0.10"]),
        "the EC2NodeClass's clusterDNS wins over the one found"
    );
    assert_eq!(
        config["spec"]["instance"]["localStorage"]["strategy"],
        "RAID0"
    );
    assert!(bootstrap_script(&b).contains("--local-disks raid0"));
}

const LAB_USER_DATA: &str = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\nset -ex\nsudo ctr -n=k8s.io image pull docker.io/tensorflow/tensorflow:2.12.0-gpu\n--//--\n";

/// Karpenter's order: its NodeConfig first, the user's parts after, so what the user's own
/// NodeConfig sets has the last word, as it had under Karpenter.
#[test]
fn a_multipart_user_data_keeps_its_parts_after_joiners_node_config() {
    let merged = nodeadm::user_data(&bootstrap(), Some(LAB_USER_DATA)).expect("merge");
    let parts = user_parts(Some(&merged)).expect("merged is multipart");
    assert_eq!(parts.len(), 2, "{merged}");
    assert_eq!(parts[1], user_parts(Some(LAB_USER_DATA)).expect("user")[0]);
    assert!(parts[1].body.contains("tensorflow:2.12.0-gpu"));
    assert_eq!(
        parts[0].content_type().as_deref(),
        Some(NODECONFIG_CONTENT_TYPE)
    );
    let config = yaml(&parts[0].body);
    assert_eq!(config["kind"], "NodeConfig");
    assert_eq!(config["spec"]["cluster"]["name"], "lab");
    assert_eq!(
        config["spec"]["cluster"]["apiServerEndpoint"],
        "https://api.lab.example"
    );
    assert_eq!(config["spec"]["cluster"]["certificateAuthority"], "Q0E=");
    assert_eq!(
        config["spec"]["kubelet"]["flags"],
        json!(["--node-labels=karpenter.sh/nodepool=gpu"])
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
    let merged = nodeadm::user_data(&bootstrap(), Some(node_config)).expect("merge");
    let parts = user_parts(Some(&merged)).expect("parts");
    assert_eq!(parts.len(), 2);
    assert_eq!(
        parts[1].content_type().as_deref(),
        Some(NODECONFIG_CONTENT_TYPE)
    );
    assert!(parts[1].body.contains("maxPods: 42"));
}

#[test]
fn no_user_data_gives_only_joiners_part() {
    let merged = nodeadm::user_data(&bootstrap(), None).expect("merge");
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
    let merged = nodeadm::user_data(&bootstrap(), Some(tricky)).expect("merge");
    let parts = user_parts(Some(&merged)).expect("parts");
    assert_eq!(parts.len(), 2, "{merged}");
    assert_eq!(parts[1].body, tricky.trim_end());
}

#[test]
fn al2_bootstrap_runs_last_with_cluster_labels_and_taints() {
    let merged = al2::user_data(&bootstrap(), Some(LAB_USER_DATA)).expect("merge");
    let parts = user_parts(Some(&merged)).expect("parts");
    assert_eq!(parts.len(), 2);
    assert!(parts[0].body.contains("tensorflow:2.12.0-gpu"));
    let script = &parts[1].body;
    assert!(script.contains("/etc/eks/bootstrap.sh 'lab'"), "{script}");
    assert!(script.contains("--b64-cluster-ca 'Q0E='"), "{script}");
    assert!(
        script.contains("--register-with-taints=nvidia.com/gpu=true:NoSchedule"),
        "{script}"
    );
    assert!(script.contains("--max-pods=110"), "{script}");
}
