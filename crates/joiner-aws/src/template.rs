//! Launch templates: one per distinct launch shape (EC2NodeClass settings, AMI, userData,
//! security groups, EFA layout), named by a hash of that shape.
//!
//! The name is deterministic (`joiner/<cluster>/<hash>`), so creating it is idempotent: a
//! template that exists is used as it is, and a changed EC2NodeClass gives new names instead of
//! editing templates in use. Instance tags go on the fleet request, not here, so every
//! NodeClaim of a shape shares its template.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};

use aws_sdk_ec2::types::{
    LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateEbsBlockDeviceRequest,
    LaunchTemplateHttpTokensState, LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMetadataEndpointState, LaunchTemplateInstanceMetadataOptionsRequest,
    LaunchTemplateInstanceMetadataProtocolIpv6,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest, LaunchTemplatesMonitoringRequest,
    RequestLaunchTemplateData, ResourceType, TagSpecification, VolumeType,
};
use base64::Engine as _;
use joiner_model::Quantity;
use joiner_model::api::ec2nodeclass::{BlockDevice, BlockDeviceMapping, MetadataOptions};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::clients::Clients;
use crate::error::AwsError;
use crate::tags::ec2_tags;

/// Everything a launch template holds. Its hash names the template.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct TemplateSpec {
    pub image_id: String,
    /// The merged userData, before base64.
    pub user_data: String,
    pub block_devices: Vec<BlockDeviceMapping>,
    pub metadata: MetadataOptions,
    pub instance_profile: Option<String>,
    pub security_groups: Vec<String>,
    /// EFA interfaces to attach (0: a plain primary interface).
    pub efa_interfaces: u32,
    pub associate_public_ip: Option<bool>,
    pub detailed_monitoring: bool,
    /// Tags on the template itself (the cluster, the EC2NodeClass).
    pub tags: BTreeMap<String, String>,
}

/// `joiner/<cluster>/<first 16 hex digits of the SHA-256 of the spec>`.
pub(crate) fn template_name(cluster: &str, spec: &TemplateSpec) -> String {
    // Serializing plain data to JSON cannot fail; the debug form is a stable fallback.
    let canonical = serde_json::to_string(spec).unwrap_or_else(|_| format!("{spec:?}"));
    let digest = Sha256::digest(canonical.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("joiner/{cluster}/{hex}")
}

/// Karpenter's default root volume for AL2 and AL2023: 20 GiB of encrypted gp3 on `/dev/xvda`.
pub(crate) fn default_block_devices() -> Vec<BlockDeviceMapping> {
    vec![BlockDeviceMapping {
        device_name: Some("/dev/xvda".into()),
        root_volume: Some(true),
        ebs: Some(BlockDevice {
            volume_size: Quantity::parse("20Gi").ok(),
            volume_type: Some("gp3".into()),
            encrypted: Some(true),
            delete_on_termination: Some(true),
            ..Default::default()
        }),
    }]
}

/// Karpenter's metadata defaults (IMDSv2 required, one hop) where the EC2NodeClass says nothing.
pub(crate) fn metadata_with_defaults(given: Option<&MetadataOptions>) -> MetadataOptions {
    let given = given.cloned().unwrap_or_default();
    MetadataOptions {
        http_endpoint: given.http_endpoint.or(Some("enabled".into())),
        http_protocol_ipv6: given.http_protocol_ipv6.or(Some("disabled".into())),
        http_put_response_hop_limit: given.http_put_response_hop_limit.or(Some(1)),
        http_tokens: given.http_tokens.or(Some("required".into())),
    }
}

/// GiB, rounded up, as EC2 takes volume sizes.
fn gib(q: &Quantity) -> Option<i32> {
    const GIB: i128 = 1 << 30;
    let bytes = q.units_ceil();
    i32::try_from((bytes + GIB - 1) / GIB).ok()
}

fn block_device(b: &BlockDeviceMapping) -> LaunchTemplateBlockDeviceMappingRequest {
    let ebs = b.ebs.as_ref().map(|e| {
        LaunchTemplateEbsBlockDeviceRequest::builder()
            .set_volume_size(e.volume_size.as_ref().and_then(gib))
            .set_volume_type(e.volume_type.as_deref().map(VolumeType::from))
            .set_iops(e.iops.and_then(|i| i32::try_from(i).ok()))
            .set_throughput(e.throughput.and_then(|i| i32::try_from(i).ok()))
            .set_encrypted(e.encrypted)
            .set_delete_on_termination(e.delete_on_termination)
            .set_kms_key_id(e.kms_key_id.clone())
            .set_snapshot_id(e.snapshot_id.clone())
            .set_volume_initialization_rate(
                e.volume_initialization_rate
                    .and_then(|i| i32::try_from(i).ok()),
            )
            .build()
    });
    LaunchTemplateBlockDeviceMappingRequest::builder()
        .set_device_name(b.device_name.clone())
        .set_ebs(ebs)
        .build()
}

/// The network interfaces: one EFA interface per network card (the first at device index 0,
/// the others at device index 1 of their card, as EC2 asks for multi-card instances), or a
/// single primary interface when a public address is asked for. `None`: EC2's default
/// interface, with the security groups given at the top level.
fn network_interfaces(
    spec: &TemplateSpec,
) -> Option<Vec<LaunchTemplateInstanceNetworkInterfaceSpecificationRequest>> {
    if spec.efa_interfaces == 0 && spec.associate_public_ip.is_none() {
        return None;
    }
    let count = spec.efa_interfaces.max(1);
    let efa = spec.efa_interfaces > 0;
    Some(
        (0..count)
            .map(|i| {
                let card = i32::try_from(i).unwrap_or(i32::MAX);
                let mut b = LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                    .device_index(if i == 0 { 0 } else { 1 })
                    .network_card_index(card)
                    .delete_on_termination(true)
                    .set_groups(Some(spec.security_groups.clone()));
                if efa {
                    b = b.interface_type("efa");
                }
                if i == 0 {
                    b = b.set_associate_public_ip_address(spec.associate_public_ip);
                }
                b.build()
            })
            .collect(),
    )
}

/// The template's data as EC2 takes it.
pub(crate) fn launch_template_data(spec: &TemplateSpec) -> RequestLaunchTemplateData {
    let m = &spec.metadata;
    let metadata = LaunchTemplateInstanceMetadataOptionsRequest::builder()
        .set_http_endpoint(
            m.http_endpoint
                .as_deref()
                .map(LaunchTemplateInstanceMetadataEndpointState::from),
        )
        .set_http_protocol_ipv6(
            m.http_protocol_ipv6
                .as_deref()
                .map(LaunchTemplateInstanceMetadataProtocolIpv6::from),
        )
        .set_http_put_response_hop_limit(
            m.http_put_response_hop_limit
                .and_then(|h| i32::try_from(h).ok()),
        )
        .set_http_tokens(
            m.http_tokens
                .as_deref()
                .map(LaunchTemplateHttpTokensState::from),
        )
        .build();
    let interfaces = network_interfaces(spec);
    let mut data = RequestLaunchTemplateData::builder()
        .image_id(&spec.image_id)
        .user_data(base64::engine::general_purpose::STANDARD.encode(&spec.user_data))
        .set_block_device_mappings(Some(spec.block_devices.iter().map(block_device).collect()))
        .metadata_options(metadata)
        .monitoring(
            LaunchTemplatesMonitoringRequest::builder()
                .enabled(spec.detailed_monitoring)
                .build(),
        );
    if let Some(profile) = &spec.instance_profile {
        data = data.iam_instance_profile(
            LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                .name(profile)
                .build(),
        );
    }
    match interfaces {
        Some(interfaces) => data = data.set_network_interfaces(Some(interfaces)),
        None => data = data.set_security_group_ids(Some(spec.security_groups.clone())),
    }
    data.build()
}

/// Launch templates known to exist: they are not looked up again.
#[derive(Debug, Default)]
pub(crate) struct KnownTemplates(Mutex<BTreeSet<String>>);

impl KnownTemplates {
    fn contains(&self, name: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(name)
    }

    fn remember(&self, name: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_string());
    }
}

impl Clients {
    /// Makes sure the template named `name` exists, creating it from `spec` if not.
    pub(crate) async fn ensure_template(
        &self,
        known: &KnownTemplates,
        name: &str,
        spec: &TemplateSpec,
    ) -> Result<(), AwsError> {
        if known.contains(name) {
            return Ok(());
        }
        let existing = self
            .ec2
            .describe_launch_templates()
            .launch_template_names(name)
            .send()
            .await;
        match existing {
            Ok(out) if !out.launch_templates().is_empty() => {
                known.remember(name);
                return Ok(());
            }
            Ok(_) => {}
            Err(e) => {
                let e = AwsError::api("DescribeLaunchTemplates", name, e);
                if e.code() != Some("InvalidLaunchTemplateName.NotFoundException") {
                    return Err(e);
                }
            }
        }
        let created = self
            .ec2
            .create_launch_template()
            .launch_template_name(name)
            .launch_template_data(launch_template_data(spec))
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::LaunchTemplate)
                    .set_tags(Some(ec2_tags(&spec.tags)))
                    .build(),
            )
            .send()
            .await;
        match created {
            Ok(_) => {
                tracing::info!(template = name, image = %spec.image_id, "created launch template");
            }
            Err(e) => {
                let e = AwsError::api("CreateLaunchTemplate", name, e);
                // Another controller (or our own earlier attempt) created it first.
                if e.code() != Some("InvalidLaunchTemplateName.AlreadyExistsException") {
                    return Err(e);
                }
            }
        }
        known.remember(name);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> TemplateSpec {
        TemplateSpec {
            image_id: "ami-1".into(),
            user_data: "x".into(),
            block_devices: default_block_devices(),
            metadata: metadata_with_defaults(None),
            instance_profile: Some("lab_KarpenterNodeRole".into()),
            security_groups: vec!["sg-1".into()],
            efa_interfaces: 0,
            associate_public_ip: None,
            detailed_monitoring: false,
            tags: BTreeMap::new(),
        }
    }

    #[test]
    fn the_name_follows_the_content() {
        let a = template_name("lab", &spec());
        assert_eq!(a, template_name("lab", &spec()));
        assert!(a.starts_with("joiner/lab/"), "{a}");
        let mut other = spec();
        other.image_id = "ami-2".into();
        assert_ne!(a, template_name("lab", &other));
    }

    #[test]
    fn efa_interfaces_take_one_network_card_each() {
        let mut s = spec();
        s.efa_interfaces = 4;
        let data = launch_template_data(&s);
        let nics = data.network_interfaces();
        assert_eq!(nics.len(), 4);
        for (i, nic) in nics.iter().enumerate() {
            assert_eq!(nic.interface_type(), Some("efa"));
            assert_eq!(nic.network_card_index(), Some(i as i32));
            assert_eq!(nic.device_index(), Some(if i == 0 { 0 } else { 1 }));
            assert_eq!(nic.groups(), ["sg-1".to_string()]);
        }
        // Security groups move onto the interfaces: EC2 refuses both.
        assert!(data.security_group_ids().is_empty());
        assert!(
            launch_template_data(&spec())
                .network_interfaces()
                .is_empty()
        );
    }

    #[test]
    fn volume_sizes_round_up_to_gib() {
        assert_eq!(gib(&Quantity::parse("100Gi").expect("q")), Some(100));
        assert_eq!(gib(&Quantity::parse("1G").expect("q")), Some(1));
        assert_eq!(gib(&Quantity::parse("20G").expect("q")), Some(19));
    }
}
