//! What a node boots: the AMI family an EC2NodeClass names, and the NodeClaim labels its kubelet
//! registers the Node with.

use std::collections::BTreeMap;

use joiner_model::api::EC2NodeClass;
use joiner_model::api::ec2nodeclass::AmiFamily;
use joiner_model::wellknown::labels;

use crate::error::AwsError;

/// The AMI family: the alias's, else `amiFamily`. Bottlerocket and Windows are not launched.
pub(crate) fn family_of(node_class: &str, class: &EC2NodeClass) -> Result<AmiFamily, AwsError> {
    let from_alias = class
        .spec
        .ami_selector_terms
        .iter()
        .find_map(|t| t.alias.as_deref())
        .map(|a| {
            AmiFamily::from_alias(a)
                .ok_or_else(|| AwsError::node_class(node_class, format!("unknown AMI alias {a:?}")))
        })
        .transpose()?;
    match from_alias.or(class.spec.ami_family) {
        Some(f @ (AmiFamily::AL2023 | AmiFamily::AL2 | AmiFamily::Custom)) => Ok(f),
        Some(other) => Err(AwsError::node_class(
            node_class,
            format!("AMI family {other:?} is not supported by Joiner's AWS provider"),
        )),
        None => Err(AwsError::node_class(
            node_class,
            "spec.amiFamily is required when no amiSelectorTerms alias names the family",
        )),
    }
}

/// The NodeClaim labels a kubelet may set on its own Node: none in the `kubernetes.io` and
/// `k8s.io` domains except `node.kubernetes.io` and `kubelet.kubernetes.io` (the NodeRestriction
/// admission plugin refuses the others), and none that differ between the offerings one
/// launch template serves (instance type, zone, capacity type) or that the controller sets when
/// the Node registers.
pub(crate) fn kubelet_labels(all: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    const CONTROLLER_SET: &[&str] = &[
        labels::INSTANCE_TYPE,
        labels::ZONE,
        labels::CAPACITY_TYPE,
        labels::REGISTERED,
        labels::INITIALIZED,
        labels::NODECLAIM,
        labels::NEED,
    ];
    all.iter()
        .filter(|(k, _)| !CONTROLLER_SET.contains(&k.as_str()))
        .filter(|(k, _)| {
            let Some((domain, _)) = k.split_once('/') else {
                return true;
            };
            let restricted = ["kubernetes.io", "k8s.io"]
                .iter()
                .any(|d| domain == *d || domain.ends_with(&format!(".{d}")));
            let allowed = ["node.kubernetes.io", "kubelet.kubernetes.io"]
                .iter()
                .any(|d| domain == *d || domain.ends_with(&format!(".{d}")));
            !restricted || allowed
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelets_register_only_labels_they_may_set_and_that_hold_for_every_offer() {
        let all = BTreeMap::from(
            [
                ("karpenter.sh/nodepool", "gpu"),
                ("team", "ml"),
                ("node.kubernetes.io/role", "gpu"),
                ("node.kubernetes.io/instance-type", "g4dn.xlarge"),
                ("topology.kubernetes.io/zone", "us-east-1a"),
                ("karpenter.sh/capacity-type", "spot"),
                ("kubernetes.io/arch", "amd64"),
                ("example.k8s.io/x", "y"),
                ("joiner.dev/need", "abc"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        let kept = kubelet_labels(&all);
        let kept: Vec<&str> = kept.keys().map(String::as_str).collect();
        assert_eq!(
            kept,
            ["karpenter.sh/nodepool", "node.kubernetes.io/role", "team"]
        );
    }
}
