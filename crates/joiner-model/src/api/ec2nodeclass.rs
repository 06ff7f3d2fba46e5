//! The AWS provider's EC2NodeClass (`karpenter.k8s.aws/v1` and `v1beta1`) in one shape: the two
//! versions differ in few fields, and [`EC2NodeClass::into_v1`] applies Karpenter's
//! conversion for the one that matters (an AMI family with no AMI selector becomes an alias).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

pub use super::nodeclass_status::{
    Ami, CapacityReservation, EC2NodeClassStatus, Readiness, SecurityGroup, Subnet,
};
use super::{FieldError, KubeletConfiguration};
use crate::Quantity;

pub const API_VERSION_V1: &str = "karpenter.k8s.aws/v1";
pub const API_VERSION_V1BETA1: &str = "karpenter.k8s.aws/v1beta1";

/// Annotation on an EC2NodeClass: how many shares of each GPU the NVIDIA DRA driver publishes
/// as consumable capacity on its nodes.
pub const NVIDIA_CONSUMABLE_CAPACITY_ANNOTATION: &str =
    "karpenter.k8s.aws/nvidia-consumable-capacity";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClass {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: EC2NodeClassSpec,
    /// What the class resolved to; absent in manifests (and classes nobody resolved yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<EC2NodeClassStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassSpec {
    /// Required in v1beta1; in v1 it may be left out when an AMI alias names the family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<AmiFamily>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnet_selector_terms: Vec<SelectorTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_group_selector_terms: Vec<SelectorTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_options: Option<MetadataOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    #[serde(
        default,
        rename = "associatePublicIPAddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub associate_public_ip_address: Option<bool>,
    /// `RAID0`: local NVMe instance store becomes the node's ephemeral storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<InstanceStorePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AmiFamily {
    AL2,
    AL2023,
    Bottlerocket,
    Windows2019,
    Windows2022,
    Custom,
}

impl AmiFamily {
    /// The family an AMI alias (`al2023@latest`) names.
    pub fn from_alias(alias: &str) -> Option<AmiFamily> {
        let family = alias.split('@').next().unwrap_or(alias);
        match family.to_ascii_lowercase().as_str() {
            "al2" => Some(AmiFamily::AL2),
            "al2023" => Some(AmiFamily::AL2023),
            "bottlerocket" => Some(AmiFamily::Bottlerocket),
            "windows2019" => Some(AmiFamily::Windows2019),
            "windows2022" => Some(AmiFamily::Windows2022),
            _ => None,
        }
    }

    fn alias_name(self) -> Option<&'static str> {
        match self {
            AmiFamily::AL2 => Some("al2"),
            AmiFamily::AL2023 => Some("al2023"),
            AmiFamily::Bottlerocket => Some("bottlerocket"),
            AmiFamily::Windows2019 => Some("windows2019"),
            AmiFamily::Windows2022 => Some("windows2022"),
            AmiFamily::Custom => None,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AmiSelectorTerm {
    /// `family@version`, e.g. `al2023@latest` (v1 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
}

/// A subnet or security group selector: by tags, id or (security groups) name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectorTerm {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacityReservationSelectorTerm {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, rename = "ownerID", skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceMapping {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// The volume that holds the node's root filesystem, and so its ephemeral storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockDevice {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_size: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    #[serde(default, rename = "kmsKeyID", skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    #[serde(
        default,
        rename = "snapshotID",
        skip_serializing_if = "Option::is_none"
    )]
    pub snapshot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_initialization_rate: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_endpoint: Option<String>,
    #[serde(
        default,
        rename = "httpProtocolIPv6",
        skip_serializing_if = "Option::is_none"
    )]
    pub http_protocol_ipv6: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_put_response_hop_limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_tokens: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum InstanceStorePolicy {
    RAID0,
}

impl EC2NodeClass {
    /// Applies Karpenter's v1beta1 -> v1 conversion: a v1beta1 class that names a standard AMI
    /// family and no AMI selector used that family's latest AMI, which v1 spells as an alias.
    pub fn into_v1(mut self) -> EC2NodeClass {
        if self.spec.ami_selector_terms.is_empty()
            && let Some(name) = self.spec.ami_family.and_then(AmiFamily::alias_name)
        {
            self.spec.ami_selector_terms = vec![AmiSelectorTerm {
                alias: Some(format!("{name}@latest")),
                ..AmiSelectorTerm::default()
            }];
        }
        self.api_version = API_VERSION_V1.to_string();
        self
    }

    /// The AMI family: the one named, else the one an alias implies.
    pub fn ami_family(&self) -> Option<AmiFamily> {
        self.spec.ami_family.or_else(|| {
            self.spec
                .ami_selector_terms
                .iter()
                .find_map(|t| t.alias.as_deref().and_then(AmiFamily::from_alias))
        })
    }

    /// Whether nodes may be launched from the class, as its `Ready` condition says. A class
    /// whose tags would defeat the ownership check ([`EC2NodeClass::restricted_tag`]) is not
    /// ready whatever its status says.
    pub fn readiness(&self) -> Readiness {
        if let Some(why) = self.restricted_tag() {
            return Readiness::NotReady(why);
        }
        self.status
            .as_ref()
            .map_or(Readiness::Unresolved, EC2NodeClassStatus::readiness)
    }

    /// Why the class's tags cannot be used, naming the first tag that would make its instances
    /// unprovable as Joiner's (see [`crate::wellknown::tags::defeats_ownership`]).
    pub fn restricted_tag(&self) -> Option<String> {
        let key = self
            .spec
            .tags
            .keys()
            .find(|k| crate::wellknown::tags::defeats_ownership(k))?;
        Some(format!(
            "spec.tags: tag {key:?} is restricted: Joiner tags its instances with it to prove \
             they are its own (or it marks another's instances), so instances launched with it \
             could never be told apart and terminated safely; remove it from the EC2NodeClass"
        ))
    }

    /// An annotation's value, if set.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    }

    /// Checks what the CRD rejects and that changes a node's shape: alias syntax, the family
    /// being known, and volume sizes.
    pub fn validate(&self) -> Result<(), FieldError> {
        for (i, t) in self.spec.ami_selector_terms.iter().enumerate() {
            if let Some(alias) = &t.alias {
                let field = format!("spec.amiSelectorTerms[{i}].alias");
                if AmiFamily::from_alias(alias).is_none() || !alias.contains('@') {
                    return Err(FieldError::new(
                        field,
                        format!(
                            "{alias:?} is not <family>@<version> with family al2, al2023, bottlerocket, windows2019 or windows2022"
                        ),
                    ));
                }
                if self.spec.ami_selector_terms.len() > 1 {
                    return Err(FieldError::new(
                        field,
                        "an alias cannot be combined with other AMI selector terms",
                    ));
                }
            }
        }
        for (i, m) in self.spec.block_device_mappings.iter().enumerate() {
            if let Some(size) = m.ebs.as_ref().and_then(|e| e.volume_size)
                && (size.is_negative() || size.is_zero())
            {
                return Err(FieldError::new(
                    format!("spec.blockDeviceMappings[{i}].ebs.volumeSize"),
                    "must be positive",
                ));
            }
        }
        if self
            .spec
            .block_device_mappings
            .iter()
            .filter(|m| m.root_volume == Some(true))
            .count()
            > 1
        {
            return Err(FieldError::new(
                "spec.blockDeviceMappings",
                "at most one mapping may be the root volume",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_yaml(yaml: &str) -> EC2NodeClass {
        let v: serde_json::Value = serde_saphyr::from_str(yaml).unwrap();
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn reads_v1beta1_and_converts_family_to_alias() {
        let nc = from_yaml(
            r#"
apiVersion: karpenter.k8s.aws/v1beta1
kind: EC2NodeClass
metadata: {name: g4-nodeclass}
spec:
  amiFamily: AL2
  role: KarpenterNodeRole
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: lab}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: lab}}]
  blockDeviceMappings:
  - deviceName: /dev/xvda
    ebs: {volumeSize: 100Gi, volumeType: gp3, iops: 10000, encrypted: true, deleteOnTermination: true, throughput: 125}
  tags: {Name: Learninglab}
"#,
        )
        .into_v1();
        nc.validate().unwrap();
        assert_eq!(nc.api_version, API_VERSION_V1);
        assert_eq!(
            nc.spec.ami_selector_terms[0].alias.as_deref(),
            Some("al2@latest")
        );
        assert_eq!(nc.ami_family(), Some(AmiFamily::AL2));
        let ebs = nc.spec.block_device_mappings[0].ebs.as_ref().unwrap();
        assert_eq!(ebs.volume_size, Some(Quantity::parse("100Gi").unwrap()));
        assert_eq!(ebs.iops, Some(10000));
    }

    #[test]
    fn v1_alias_names_the_family_and_annotations_are_kept() {
        let nc = from_yaml(
            r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: gpu-dra
  annotations: {karpenter.k8s.aws/nvidia-consumable-capacity: "4"}
spec:
  role: KarpenterNodeRole-demo
  amiSelectorTerms: [{alias: al2023@latest}]
  kubelet: {maxPods: 110}
  associatePublicIPAddress: false
  metadataOptions: {httpProtocolIPv6: disabled, httpTokens: required}
"#,
        );
        nc.validate().unwrap();
        assert_eq!(nc.ami_family(), Some(AmiFamily::AL2023));
        assert_eq!(
            nc.annotation(NVIDIA_CONSUMABLE_CAPACITY_ANNOTATION),
            Some("4")
        );
        assert_eq!(nc.spec.kubelet.and_then(|k| k.max_pods), Some(110));
        assert_eq!(nc.spec.associate_public_ip_address, Some(false));
    }

    #[test]
    fn rejects_bad_alias() {
        let nc = from_yaml(
            "{apiVersion: karpenter.k8s.aws/v1, kind: EC2NodeClass, metadata: {name: x}, spec: {amiSelectorTerms: [{alias: ubuntu@latest}]}}",
        );
        assert_eq!(
            nc.validate().unwrap_err().field,
            "spec.amiSelectorTerms[0].alias"
        );
    }
}
