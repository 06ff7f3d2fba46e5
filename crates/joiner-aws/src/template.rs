//! Launch templates: one per distinct launch shape (EC2NodeClass settings, AMI, userData,
//! security groups, EFA layout), named by a hash of that shape.
//!
//! The name is deterministic (`joiner/<cluster>/<hash>`), so creating it is idempotent: a
//! template that exists is used as it is, and a changed EC2NodeClass gives new names instead of
//! editing templates in use. Instance tags go on the fleet request, not here, so every
//! NodeClaim of a shape shares its template.
//!
//! A template carries the ownership tags of its NodePool and EC2NodeClass (the cluster tag
//! `owned`, `eks:eks-cluster-name`, `karpenter.sh/nodepool`, `karpenter.k8s.aws/ec2nodeclass`),
//! the EC2NodeClass's own tags and the hash of its spec ([`NODECLASS_HASH`]); its data tags the
//! network interfaces and spot requests launched from it the same way, which is what the IAM
//! policy's request-tag conditions ask of every resource a launch creates. Templates whose
//! EC2NodeClass is gone or has changed are deleted by [`Clients::delete_unused_templates`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};

use aws_sdk_ec2::types::{
    CapacityReservationPreference, CapacityReservationTarget,
    LaunchTemplateCapacityReservationSpecificationRequest,
    LaunchTemplateInstanceMarketOptionsRequest, MarketType,
};
use aws_sdk_ec2::types::{
    ConnectionTrackingSpecificationRequest, LaunchTemplateBlockDeviceMappingRequest,
    LaunchTemplateCpuOptionsRequest, LaunchTemplateEbsBlockDeviceRequest,
    LaunchTemplateHttpTokensState, LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMetadataEndpointState, LaunchTemplateInstanceMetadataOptionsRequest,
    LaunchTemplateInstanceMetadataProtocolIpv6,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest, LaunchTemplatePlacementRequest,
    LaunchTemplateTagSpecificationRequest, LaunchTemplatesMonitoringRequest,
    NestedVirtualizationSpecification, RequestLaunchTemplateData, ResourceType, TagSpecification,
    VolumeType,
};
use base64::Engine as _;
use joiner_launch::TemplateSpec;
use joiner_launch::template::{ReservationUse, network_interfaces};
use joiner_model::Quantity;
use joiner_model::api::ec2nodeclass::BlockDeviceMapping;

use crate::clients::Clients;
use crate::error::AwsError;
use crate::tags::{NODECLASS_HASH, ec2_tags};

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

/// The network interfaces as EC2 takes them (see [`network_interfaces`]); `None`: EC2's
/// default interface, with the security groups given at the top level.
fn ec2_network_interfaces(
    spec: &TemplateSpec,
) -> Option<Vec<LaunchTemplateInstanceNetworkInterfaceSpecificationRequest>> {
    let interfaces = network_interfaces(spec);
    if interfaces.is_empty() {
        return None;
    }
    Some(
        interfaces
            .iter()
            .map(|i| {
                LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                    .device_index(i32::try_from(i.device_index).unwrap_or(i32::MAX))
                    .network_card_index(i32::try_from(i.network_card_index).unwrap_or(i32::MAX))
                    .delete_on_termination(i.delete_on_termination)
                    .set_groups(Some(spec.security_groups.clone()))
                    .set_interface_type(i.interface_type.map(str::to_string))
                    .set_associate_public_ip_address(i.associate_public_ip_address)
                    .set_ipv4_prefix_count(i.ipv4_prefix_count)
                    .set_connection_tracking_specification(i.connection_tracking.as_ref().map(
                        |c| {
                            ConnectionTrackingSpecificationRequest::builder()
                                .set_tcp_established_timeout(c.tcp_established_timeout)
                                .set_udp_stream_timeout(c.udp_stream_timeout)
                                .set_udp_timeout(c.udp_timeout)
                                .build()
                        },
                    ))
                    .build()
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
    let interfaces = ec2_network_interfaces(spec);
    let tag_specs = [
        ResourceType::NetworkInterface,
        ResourceType::SpotInstancesRequest,
    ]
    .into_iter()
    .map(|r| {
        LaunchTemplateTagSpecificationRequest::builder()
            .resource_type(r)
            .set_tags(Some(ec2_tags(&spec.tags)))
            .build()
    })
    .collect();
    let mut data = RequestLaunchTemplateData::builder()
        .set_tag_specifications(Some(tag_specs))
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
    if let Some(nested) = &spec.nested_virtualization {
        data = data.cpu_options(
            LaunchTemplateCpuOptionsRequest::builder()
                .nested_virtualization(NestedVirtualizationSpecification::from(nested.as_str()))
                .build(),
        );
    }
    if let Some(reservations) = capacity_reservation(&spec.reservations) {
        data = data.capacity_reservation_specification(reservations);
    }
    if let Some(p) = &spec.placement {
        data = data.placement(
            LaunchTemplatePlacementRequest::builder()
                .set_group_id(p.group_id.clone())
                .set_group_name(p.group_name.clone())
                .set_partition_number(p.partition_number.and_then(|n| i32::try_from(n).ok()))
                .build(),
        );
    }
    if matches!(spec.reservations, ReservationUse::CapacityBlock(_)) {
        data = data.instance_market_options(
            LaunchTemplateInstanceMarketOptionsRequest::builder()
                .market_type(MarketType::CapacityBlock)
                .build(),
        );
    }
    data.build()
}

/// The `CapacityReservationSpecification` for a template's use of reservations; `None` keeps
/// EC2's default (open reservations may be used).
fn capacity_reservation(
    reservations: &ReservationUse,
) -> Option<LaunchTemplateCapacityReservationSpecificationRequest> {
    let spec = LaunchTemplateCapacityReservationSpecificationRequest::builder();
    match reservations {
        ReservationUse::Open => None,
        ReservationUse::None => Some(
            spec.capacity_reservation_preference(CapacityReservationPreference::None)
                .build(),
        ),
        ReservationUse::Target(id) | ReservationUse::CapacityBlock(id) => Some(
            spec.capacity_reservation_target(
                CapacityReservationTarget::builder()
                    .capacity_reservation_id(id)
                    .build(),
            )
            .build(),
        ),
    }
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

    /// Forgets a template: deleted, or EC2 said it does not exist. The next launch that needs
    /// it looks it up and creates it again.
    pub(crate) fn forget(&self, name: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }
}

/// A launch template as Joiner's garbage collection reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExistingTemplate {
    pub id: String,
    pub name: String,
    pub tags: BTreeMap<String, String>,
}

/// The `joiner/<cluster>/` prefix of Joiner's template names in `cluster`.
pub(crate) fn name_prefix(cluster: &str) -> String {
    format!("joiner/{cluster}/")
}

/// Whether a template is one Joiner created for `cluster`: named so, and tagged with the
/// cluster, `eks:eks-cluster-name` and a NodePool (the tags the IAM policy's DeleteLaunchTemplate
/// asks for).
pub(crate) fn is_joiners(t: &ExistingTemplate, cluster: &str) -> bool {
    use joiner_model::wellknown::tags;
    t.name.starts_with(&name_prefix(cluster))
        && t.tags.get(&tags::cluster(cluster)).map(String::as_str) == Some(tags::OWNED)
        && t.tags.get(tags::CLUSTER_NAME).map(String::as_str) == Some(cluster)
        && t.tags.get(tags::NODEPOOL).is_some_and(|p| !p.is_empty())
}

/// Whether a template of `cluster` is still wanted: its EC2NodeClass is among `current`
/// (name → spec hash) with the spec it was made for.
pub(crate) fn in_use(t: &ExistingTemplate, current: &BTreeMap<String, String>) -> bool {
    let class = t.tags.get(joiner_model::wellknown::tags::NODECLASS);
    let hash = t.tags.get(NODECLASS_HASH);
    match (class, hash) {
        (Some(class), Some(hash)) => current.get(class) == Some(hash),
        _ => false,
    }
}

impl Clients {
    /// Makes sure the template named `name` exists, creating it from `spec` if not. Returns
    /// the size in bytes of the user data of a template it set out to create (Karpenter's
    /// `karpenter_ec2nodeclasses_userdata_bytes`), `None` when the template existed.
    pub(crate) async fn ensure_template(
        &self,
        known: &KnownTemplates,
        name: &str,
        spec: &TemplateSpec,
    ) -> Result<Option<usize>, AwsError> {
        if known.contains(name) {
            return Ok(None);
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
                return Ok(None);
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
        Ok(Some(spec.user_data.len()))
    }
}

impl Clients {
    /// The launch templates tagged as `cluster`'s (filtered by EC2 on the cluster tags and a
    /// NodePool), every page.
    async fn cluster_templates(&self, cluster: &str) -> Result<Vec<ExistingTemplate>, AwsError> {
        use aws_sdk_ec2::types::Filter;
        use joiner_model::wellknown::tags;
        let filters = vec![
            Filter::builder()
                .name(format!("tag:{}", tags::cluster(cluster)))
                .values(tags::OWNED)
                .build(),
            Filter::builder()
                .name(format!("tag:{}", tags::CLUSTER_NAME))
                .values(cluster)
                .build(),
            Filter::builder()
                .name("tag-key")
                .values(tags::NODEPOOL)
                .build(),
        ];
        let mut pages = self
            .ec2
            .describe_launch_templates()
            .set_filters(Some(filters))
            .into_paginator()
            .send();
        let mut found = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| {
                AwsError::api("DescribeLaunchTemplates", format!("cluster {cluster}"), e)
            })?;
            for t in page.launch_templates() {
                let (Some(id), Some(name)) = (t.launch_template_id(), t.launch_template_name())
                else {
                    continue;
                };
                let tags = t
                    .tags()
                    .iter()
                    .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
                    .collect();
                found.push(ExistingTemplate {
                    id: id.to_string(),
                    name: name.to_string(),
                    tags,
                });
            }
        }
        Ok(found)
    }

    /// Deletes `cluster`'s Joiner templates whose EC2NodeClass is not among `current` (name →
    /// spec hash) with that spec, and returns their names. Deleting one that is gone already
    /// succeeds. Instances launched from a template do not need it, and a launch that needs one
    /// again creates it again (`known` forgets it).
    pub(crate) async fn delete_unused_templates(
        &self,
        cluster: &str,
        current: &BTreeMap<String, String>,
        known: &KnownTemplates,
    ) -> Result<Vec<String>, AwsError> {
        let mut deleted = Vec::new();
        for t in self.cluster_templates(cluster).await? {
            if !is_joiners(&t, cluster) || in_use(&t, current) {
                continue;
            }
            known.forget(&t.name);
            let out = self
                .ec2
                .delete_launch_template()
                .launch_template_id(&t.id)
                .send()
                .await;
            if let Err(e) = out {
                let e = AwsError::api("DeleteLaunchTemplate", t.name.clone(), e);
                if !matches!(
                    e.code(),
                    Some("InvalidLaunchTemplateId.NotFound")
                        | Some("InvalidLaunchTemplateName.NotFoundException")
                ) {
                    return Err(e);
                }
            }
            tracing::info!(template = %t.name, "deleted a launch template no EC2NodeClass uses");
            deleted.push(t.name);
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_launch::default_block_devices;
    use joiner_launch::template::{metadata_with_defaults, template_name};
    use joiner_model::api::ec2nodeclass::AmiFamily;

    #[test]
    fn only_joiners_templates_of_changed_or_deleted_classes_are_unused() {
        let t = |name: &str, pairs: &[(&str, &str)]| ExistingTemplate {
            id: "lt-1".into(),
            name: name.into(),
            tags: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        let owned = [
            ("kubernetes.io/cluster/lab", "owned"),
            ("eks:eks-cluster-name", "lab"),
            ("karpenter.sh/nodepool", "gpu"),
            ("karpenter.k8s.aws/ec2nodeclass", "gpu"),
            (NODECLASS_HASH, "h1"),
        ];
        let current = BTreeMap::from([("gpu".to_string(), "h1".to_string())]);
        let ours = t("joiner/lab/abc", &owned);
        assert!(is_joiners(&ours, "lab"));
        assert!(in_use(&ours, &current));
        let changed = BTreeMap::from([("gpu".to_string(), "h2".to_string())]);
        assert!(!in_use(&ours, &changed));
        assert!(!in_use(&ours, &BTreeMap::new()));
        assert!(!is_joiners(&ours, "prod"), "another cluster's");
        assert!(!is_joiners(&t("karpenter.k8s.aws/abc", &owned), "lab"));
        assert!(!is_joiners(&t("joiner/lab/abc", &owned[1..]), "lab"));
    }

    fn spec() -> TemplateSpec {
        TemplateSpec {
            image_id: "ami-1".into(),
            user_data: "x".into(),
            block_devices: default_block_devices(AmiFamily::AL2023),
            metadata: metadata_with_defaults(None),
            instance_profile: Some("lab_KarpenterNodeRole".into()),
            security_groups: vec!["sg-1".into()],
            efa_interfaces: 0,
            interfaces: Vec::new(),
            ip_prefix_count: None,
            connection_tracking: None,
            nested_virtualization: None,
            associate_public_ip: None,
            detailed_monitoring: false,
            tags: BTreeMap::new(),
            reservations: ReservationUse::Open,
            placement: None,
        }
    }

    #[test]
    fn reservation_templates_target_their_reservation_and_blocks_their_market() {
        let open = launch_template_data(&spec());
        assert!(open.capacity_reservation_specification().is_none());
        assert!(open.instance_market_options().is_none());

        let mut s = spec();
        s.reservations = ReservationUse::None;
        let none = launch_template_data(&s);
        assert_eq!(
            none.capacity_reservation_specification()
                .and_then(|c| c.capacity_reservation_preference()),
            Some(&CapacityReservationPreference::None)
        );

        s.reservations = ReservationUse::CapacityBlock("cr-block".into());
        let block = launch_template_data(&s);
        let target = block
            .capacity_reservation_specification()
            .and_then(|c| c.capacity_reservation_target())
            .and_then(|t| t.capacity_reservation_id());
        assert_eq!(target, Some("cr-block"));
        assert_eq!(
            block
                .instance_market_options()
                .and_then(|m| m.market_type()),
            Some(&MarketType::CapacityBlock)
        );

        s.reservations = ReservationUse::Target("cr-odcr".into());
        let odcr = launch_template_data(&s);
        assert!(odcr.instance_market_options().is_none());
        assert_eq!(
            odcr.capacity_reservation_specification()
                .and_then(|c| c.capacity_reservation_target())
                .and_then(|t| t.capacity_reservation_id()),
            Some("cr-odcr")
        );
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
    fn prefixes_connection_tracking_and_cpu_options_reach_ec2() {
        let mut s = spec();
        s.ip_prefix_count = Some(2);
        s.connection_tracking = Some(joiner_model::api::ec2nodeclass::ConnectionTracking {
            tcp_established_timeout: Some(3600),
            udp_stream_timeout: None,
            udp_timeout: Some(30),
        });
        s.nested_virtualization = Some("disabled".into());
        let data = launch_template_data(&s);
        let nics = data.network_interfaces();
        assert_eq!(nics.len(), 1, "a primary interface carries them");
        assert_eq!(nics[0].ipv4_prefix_count(), Some(2));
        let ct = nics[0]
            .connection_tracking_specification()
            .expect("conntrack");
        assert_eq!(ct.tcp_established_timeout(), Some(3600));
        assert_eq!(ct.udp_timeout(), Some(30));
        assert_eq!(nics[0].groups(), s.security_groups.as_slice());
        assert_eq!(
            data.cpu_options().and_then(|c| c.nested_virtualization()),
            Some(&NestedVirtualizationSpecification::Disabled)
        );
        assert!(
            template_name("c", &s) != template_name("c", &spec()),
            "the template's name follows its shape"
        );
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

    /// A class's `networkInterfaces` (a p5's primary interface and EFA-only interfaces on the
    /// other cards) are laid out as given; prefixes go only where there is IP.
    #[test]
    fn a_class_s_interfaces_replace_the_efa_layout() {
        use joiner_model::api::ec2nodeclass::NetworkInterface as Nic;
        let mut s = spec();
        s.efa_interfaces = 32;
        s.ip_prefix_count = Some(1);
        s.interfaces = vec![
            Nic {
                network_card_index: 0,
                device_index: 0,
                interface_type: "interface".into(),
            },
            Nic {
                network_card_index: 1,
                device_index: 0,
                interface_type: "efa-only".into(),
            },
        ];
        let data = launch_template_data(&s);
        let nics = data.network_interfaces();
        assert_eq!(nics.len(), 2);
        assert_eq!(nics[0].interface_type(), None);
        assert_eq!(nics[0].ipv4_prefix_count(), Some(1));
        assert_eq!(nics[1].interface_type(), Some("efa-only"));
        assert_eq!(nics[1].network_card_index(), Some(1));
        assert_eq!(nics[1].ipv4_prefix_count(), None);
        assert!(template_name("c", &s) != template_name("c", &spec()));
    }

    #[test]
    fn volume_sizes_round_up_to_gib() {
        assert_eq!(gib(&Quantity::parse("100Gi").expect("q")), Some(100));
        assert_eq!(gib(&Quantity::parse("1G").expect("q")), Some(1));
        assert_eq!(gib(&Quantity::parse("20G").expect("q")), Some(19));
    }
}
