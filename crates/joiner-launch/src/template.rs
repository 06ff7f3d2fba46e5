//! Launch templates as data: one per distinct launch shape (EC2NodeClass settings, AMI, user
//! data, security groups, EFA layout), named by a hash of that shape.
//!
//! The name is deterministic (`joiner/<cluster>/<hash>`), so creating it is idempotent: a
//! template that exists is used as it is, and a changed EC2NodeClass gives new names instead of
//! editing templates in use.

use std::collections::BTreeMap;

use joiner_model::api::ec2nodeclass::{BlockDeviceMapping, ConnectionTracking, MetadataOptions};
use serde::Serialize;
use sha2::{Digest, Sha256};

/// Everything a launch template holds. Its hash names the template.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateSpec {
    pub image_id: String,
    /// The merged user data, before base64.
    pub user_data: String,
    pub block_devices: Vec<BlockDeviceMapping>,
    pub metadata: MetadataOptions,
    pub instance_profile: Option<String>,
    pub security_groups: Vec<String>,
    /// EFA interfaces to attach (0: a plain primary interface).
    pub efa_interfaces: u32,
    /// The EC2NodeClass's `networkInterfaces`: when given, exactly these, in place of the EFA
    /// layout. Left out of the name's hash when empty, so earlier templates keep their names.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<joiner_model::api::ec2nodeclass::NetworkInterface>,
    pub associate_public_ip: Option<bool>,
    /// IPv4 prefixes (prefix delegation) on each interface that carries addresses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip_prefix_count: Option<i32>,
    /// Connection-tracking timeouts on each interface that carries addresses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTracking>,
    /// `CpuOptions.NestedVirtualization` (`enabled` or `disabled`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nested_virtualization: Option<String>,
    pub detailed_monitoring: bool,
    /// Tags on the template, its network interfaces and spot requests: the EC2NodeClass's,
    /// its NodePool's ownership tags and the EC2NodeClass's spec hash.
    pub tags: BTreeMap<String, String>,
    /// How the instance uses capacity reservations. Left out of the name's hash when it is the
    /// default, so templates made before reservations existed keep their names.
    #[serde(skip_serializing_if = "ReservationUse::is_default")]
    pub reservations: ReservationUse,
    /// The placement group launched into, when the EC2NodeClass selects one. Left out of the
    /// name's hash when none, so earlier templates keep their names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
}

/// A launch template's `Placement`: the group by ID (as Karpenter launches), or by name when
/// only the EC2NodeClass's selector is known (`joiner plan --launch` from files), and the
/// partition of a partition group's NodeClaim.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition_number: Option<u32>,
}

/// A launch template's `CapacityReservationSpecification` and market type.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ReservationUse {
    /// EC2's default: an instance may land in any matching `open` reservation.
    #[default]
    Open,
    /// `capacityReservationPreference: none`: the class selects reservations, so an instance
    /// not launched into one of them must not drift into another (Karpenter does the same).
    None,
    /// Launched into this on-demand capacity reservation (`CapacityReservationTarget`).
    Target(String),
    /// Launched into this Capacity Block: targeted, with the `capacity-block` market type.
    CapacityBlock(String),
}

impl ReservationUse {
    pub fn is_default(&self) -> bool {
        *self == ReservationUse::Open
    }

    /// The reservation targeted, if any.
    pub fn target(&self) -> Option<&str> {
        match self {
            ReservationUse::Target(id) | ReservationUse::CapacityBlock(id) => Some(id),
            ReservationUse::Open | ReservationUse::None => None,
        }
    }
}

/// `joiner/<cluster>/<first 16 hex digits of the SHA-256 of the spec>`.
pub fn template_name(cluster: &str, spec: &TemplateSpec) -> String {
    // Serializing plain data to JSON cannot fail; the debug form is a stable fallback.
    let canonical = serde_json::to_string(spec).unwrap_or_else(|_| format!("{spec:?}"));
    let digest = Sha256::digest(canonical.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("joiner/{cluster}/{hex}")
}

/// Karpenter's metadata defaults (IMDSv2 required, one hop) where the EC2NodeClass says nothing.
pub fn metadata_with_defaults(given: Option<&MetadataOptions>) -> MetadataOptions {
    let given = given.cloned().unwrap_or_default();
    MetadataOptions {
        http_endpoint: given.http_endpoint.or(Some("enabled".into())),
        http_protocol_ipv6: given.http_protocol_ipv6.or(Some("disabled".into())),
        http_put_response_hop_limit: given.http_put_response_hop_limit.or(Some(1)),
        http_tokens: given.http_tokens.or(Some("required".into())),
    }
}

/// One network interface of a launch template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    pub network_card_index: u32,
    pub device_index: u32,
    /// `efa` or `efa-only`, or none for a plain ENA interface.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub associate_public_ip_address: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv4_prefix_count: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTracking>,
    pub delete_on_termination: bool,
}

/// The network interfaces: one EFA interface per network card (the first at device index 0,
/// the others at device index 1 of their card, as EC2 asks for multi-card instances), or a
/// single primary interface when a public address, IPv4 prefixes or connection tracking are
/// asked for; each carries those, as Karpenter's interfaces do. Empty: EC2's default
/// interface, with the security groups given at the top level.
pub fn network_interfaces(spec: &TemplateSpec) -> Vec<NetworkInterface> {
    if !spec.interfaces.is_empty() {
        return class_interfaces(spec);
    }
    if spec.efa_interfaces == 0
        && spec.associate_public_ip.is_none()
        && spec.ip_prefix_count.is_none()
        && spec.connection_tracking.is_none()
    {
        return Vec::new();
    }
    let efa = spec.efa_interfaces > 0;
    (0..spec.efa_interfaces.max(1))
        .map(|card| NetworkInterface {
            network_card_index: card,
            device_index: u32::from(card != 0),
            interface_type: efa.then_some("efa"),
            associate_public_ip_address: if card == 0 {
                spec.associate_public_ip
            } else {
                None
            },
            ipv4_prefix_count: spec.ip_prefix_count,
            connection_tracking: spec.connection_tracking.clone(),
            delete_on_termination: true,
        })
        .collect()
}

/// The EC2NodeClass's own interfaces, as Karpenter lays them out: each at its card and device
/// index; addresses, prefixes, a public address and connection tracking only on those that carry
/// IP (EC2 refuses them on an EFA-only interface).
fn class_interfaces(spec: &TemplateSpec) -> Vec<NetworkInterface> {
    spec.interfaces
        .iter()
        .map(|i| {
            let ip = !i.is_efa_only();
            NetworkInterface {
                network_card_index: u32::try_from(i.network_card_index).unwrap_or(0),
                device_index: u32::try_from(i.device_index).unwrap_or(0),
                interface_type: (!ip).then_some("efa-only"),
                associate_public_ip_address: spec.associate_public_ip.filter(|_| ip),
                ipv4_prefix_count: spec.ip_prefix_count.filter(|_| ip),
                connection_tracking: spec.connection_tracking.clone().filter(|_| ip),
                delete_on_termination: true,
            }
        })
        .collect()
}

/// The first 16 hex digits of the SHA-256 of the EC2NodeClass spec's JSON (its maps are
/// ordered, so equal specs hash equally). Launch templates carry it as a tag
/// (`wellknown::tags::NODECLASS_SPEC_HASH`): a template whose class's hash changed is unused.
pub fn node_class_spec_hash(class: &joiner_model::api::EC2NodeClass) -> String {
    // Serializing plain data to JSON cannot fail; the debug form is a stable fallback.
    let canonical =
        serde_json::to_string(&class.spec).unwrap_or_else(|_| format!("{:?}", class.spec));
    Sha256::digest(canonical.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}
