//! `joiner plan --launch`: what the controller would send EC2 for each planned NodeClaim,
//! worked out offline.
//!
//! Each planned node goes the controller's own way: the NodeClaim object the controller would
//! create ([`node_claim_for`]), its offers ([`offers_for`]) and launch request
//! ([`request_for`]), and the fleet ([`fleet`]) with the cluster's bootstrap. What only the
//! cloud knows is named as a placeholder instead of guessed: the AMI an alias resolves to is
//! shown by the SSM parameter it is read from, subnets and security groups by the selector
//! terms that pick them, cluster facts the settings lack by the setting that gives them.

use std::collections::BTreeMap;

use joiner_controller::cloud::{CloudInstanceType, CloudOffering, SoldTypes};
use joiner_controller::nodeclaim::launch::{offers_for, request_for, reserved_offers};
use joiner_controller::nodeclaim::node_claim_for;
use joiner_controller::pods::pod_key;
use joiner_engine::plan::{Plan, PlannedNodeClaim};
use joiner_engine::snapshot::ClusterSnapshot;
use joiner_model::Manifests;
use joiner_model::api::ec2nodeclass::{AmiFamily, BlockDeviceMapping, MetadataOptions};
use joiner_model::api::{EC2NodeClass, NodePool};
use joiner_model::settings::Settings;
use joiner_model::wellknown::{CapacityType, labels};
use serde::Serialize;

use crate::bootstrap::Cluster;
use crate::family::family_of;
use crate::fleet::{Resolved, Skip, fleet};
use crate::image::{Arch, ParameterRoots, TypeFacts, alias_parameter, alias_version};
use crate::template::{NetworkInterface, network_interfaces};
use crate::template::{Placement, ReservationUse};

/// What one planned NodeClaim's launch sends EC2.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LaunchPreview {
    /// The NodeClaim the controller would create for this need.
    pub node_claim: String,
    pub node_class: String,
    pub ami_family: String,
    pub capacity_type: String,
    /// CreateFleet's `DefaultTargetCapacityType`: `on-demand`, `spot` or `capacity-block`.
    pub target_capacity_type: String,
    pub launch_templates: Vec<TemplatePreview>,
    /// Tags on the instance, its volumes and the fleet.
    pub instance_tags: BTreeMap<String, String>,
    /// What is shown in place of something only the cloud or the cluster knows.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub placeholders: Vec<String>,
    /// Offers left out, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// CreateFleet's `Context`, from the EC2NodeClass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

/// One launch template and the offers (CreateFleet overrides) launched from it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplatePreview {
    pub image_id: String,
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    pub metadata_options: MetadataOptions,
    pub iam_instance_profile: Option<String>,
    pub security_group_ids: Vec<String>,
    /// EFA interfaces, one per network card, when the node needs EFA; empty: EC2's default
    /// interface.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub network_interfaces: Vec<NetworkInterface>,
    /// `CpuOptions.NestedVirtualization`, when the EC2NodeClass sets it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nested_virtualization: Option<String>,
    /// `Placement`: the placement group (and partition), when the EC2NodeClass selects one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    pub detailed_monitoring: bool,
    /// Tags on the template, and on the network interfaces and spot requests launched from it.
    pub tags: BTreeMap<String, String>,
    /// The template's `CapacityReservationSpecification`: the reservation targeted, or
    /// preference `none` for a class that selects reservations; absent for EC2's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation: Option<String>,
    /// `capacity-block` for a Capacity Block's template (`InstanceMarketOptions.MarketType`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub market_type: Option<&'static str>,
    pub overrides: Vec<OverridePreview>,
    /// The user data, before base64.
    pub user_data: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OverridePreview {
    pub instance_type: String,
    pub zone: String,
    pub subnet_id: String,
    pub priority: usize,
}

/// The launch of every planned NodeClaim, in the plan's order; one that cannot be put together
/// says why in place of its preview.
pub fn for_plan(
    manifests: &Manifests,
    settings: &Settings,
    view: &ClusterSnapshot,
    plan: &Plan,
) -> Vec<Result<LaunchPreview, String>> {
    let pools: BTreeMap<&str, &NodePool> = manifests
        .node_pools
        .iter()
        .filter_map(|p| Some((p.object.metadata.name.as_deref()?, &p.object)))
        .collect();
    let classes: BTreeMap<&str, &EC2NodeClass> = manifests
        .node_classes
        .iter()
        .filter_map(|c| Some((c.object.metadata.name.as_deref()?, &c.object)))
        .collect();
    let pods = manifests
        .pods
        .iter()
        .map(|p| (pod_key(&p.object), p.object.clone()))
        .collect::<BTreeMap<_, _>>();
    let (cluster, placeholders) = cluster_of(settings);
    plan.node_claims
        .iter()
        .map(|planned| {
            let pool = pools
                .get(planned.node_pool.as_str())
                .ok_or_else(|| format!("NodePool {} not in the input", planned.node_pool))?;
            let class_name = pool.spec.template.spec.node_class_ref.name.as_str();
            let class = classes.get(class_name).map(|c| (*c).clone());
            let cloud_types = cloud_types(view, planned);
            let zones = cloud_types
                .iter()
                .flat_map(|t| t.offerings.iter().map(|o| o.zone.clone()))
                .collect::<std::collections::BTreeSet<_>>();
            let mut zones: Vec<String> = zones.into_iter().filter(|z| *z != planned.zone).collect();
            zones.insert(0, planned.zone.clone());
            let claim = node_claim_for(planned, pool, &pods, zones);
            let sold = SoldTypes::new(cloud_types);
            let offers = offers_for(&claim, &sold, reserved_offers(&claim, view), |_| false);
            let request = request_for(&claim, class, &cluster.name, offers, view)
                .map_err(|e| e.to_string())?;
            let class = request.node_class_spec.clone().ok_or_else(|| {
                format!(
                    "EC2NodeClass {class_name} (the NodePool's nodeClassRef) is not in the input"
                )
            })?;
            let class = class.into_v1();
            let mut preview = preview(&request, &class, &cluster, settings, view, planned)
                .map_err(|e| format!("EC2NodeClass/{class_name}: {e}"))?;
            preview.placeholders.splice(0..0, placeholders.clone());
            Ok(preview)
        })
        .collect()
}

/// The cluster as the settings describe it, and a note for each fact they leave out.
fn cluster_of(settings: &Settings) -> (Cluster, Vec<String>) {
    let mut notes = Vec::new();
    let mut given = |value: &Option<String>, setting: &str, what: &str| match value {
        Some(v) if !v.is_empty() => Some(v.clone()),
        _ => {
            notes.push(format!(
                "<{setting}>: {what}; the controller reads it from EKS DescribeCluster when settings.{setting} is not set"
            ));
            Some(format!("<{setting}>"))
        }
    };
    let cluster = Cluster {
        name: settings
            .cluster_name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "<clusterName>".to_string()),
        endpoint: given(
            &settings.cluster_endpoint,
            "clusterEndpoint",
            "the API server URL",
        ),
        ca_bundle: given(
            &settings.cluster_ca_bundle,
            "clusterCABundle",
            "the cluster's CA bundle",
        ),
        service_cidr: given(&settings.cluster_cidr, "clusterCIDR", "the service CIDR"),
        dns_ip: None,
    };
    if settings.cluster_name.as_deref().is_none_or(str::is_empty) {
        notes.insert(0, "<clusterName>: settings.clusterName".to_string());
    }
    notes.push(
        "clusterDNS: the controller passes the kube-dns Service's address; without it nodeadm derives one from the service CIDR".to_string(),
    );
    (cluster, notes)
}

/// The planned type and its fallbacks as the cloud would offer them: the NodePool's offerings
/// of each, from the catalog.
fn cloud_types(view: &ClusterSnapshot, planned: &PlannedNodeClaim) -> Vec<CloudInstanceType> {
    joiner_controller::nodeclaim::instance_types_of(planned)
        .iter()
        .filter_map(|t| view.launch_option(&planned.node_pool, t))
        .map(|o| CloudInstanceType {
            name: o.instance_type.clone(),
            facts: None,
            offerings: o
                .offerings
                .iter()
                // Reservations come with the class, through `reserved_offers`.
                .filter(|off| off.reservation.is_none())
                .filter_map(|off| {
                    Some(CloudOffering {
                        zone: off.zone.clone(),
                        capacity_type: CapacityType::parse(&off.capacity_type)?,
                        price: off.price,
                        available: true,
                        price_basis: off.price_basis,
                    })
                })
                .collect(),
        })
        .collect()
}

/// The fleet for one request, with placeholders for what only EC2 resolves.
fn preview(
    request: &joiner_controller::cloud::LaunchRequest,
    class: &EC2NodeClass,
    cluster: &Cluster,
    settings: &Settings,
    view: &ClusterSnapshot,
    planned: &PlannedNodeClaim,
) -> Result<LaunchPreview, crate::LaunchError> {
    let family = family_of(class)?;
    let spec = &class.spec;
    let mut placeholders = Vec::new();
    let mut images = BTreeMap::new();
    for offer in &request.offers {
        let t = &offer.offering.instance_type;
        let facts = view
            .launch_option(&planned.node_pool, t)
            .map(|o| TypeFacts {
                arch: o
                    .labels
                    .get(labels::ARCH)
                    .and_then(|a| Arch::parse(a))
                    .unwrap_or(Arch::X86_64),
                nvidia: o
                    .labels
                    .get(labels::INSTANCE_GPU_MANUFACTURER)
                    .is_some_and(|m| m == "nvidia"),
            })
            .unwrap_or(TypeFacts {
                arch: Arch::X86_64,
                nvidia: false,
            });
        images.insert(t.clone(), image_placeholder(class, family, settings, facts));
    }
    let subnets = request
        .offers
        .iter()
        .map(|o| {
            (
                o.offering.zone.clone(),
                format!(
                    "<subnet in {} selected by spec.subnetSelectorTerms>",
                    o.offering.zone
                ),
            )
        })
        .collect();
    let security_groups = match spec
        .security_group_selector_terms
        .iter()
        .map(|t| {
            t.id.clone()
                .filter(|_| t.tags.is_empty() && t.name.is_none())
        })
        .collect::<Option<Vec<String>>>()
    {
        Some(ids) if !ids.is_empty() => ids,
        _ => vec!["<security groups selected by spec.securityGroupSelectorTerms>".to_string()],
    };
    let recorded = class
        .status
        .as_ref()
        .and_then(|s| s.instance_profile.clone())
        .filter(|p| !p.is_empty());
    let instance_profile = spec.instance_profile.clone().or(recorded).or_else(|| {
        spec.role.as_ref().map(|role| {
            placeholders.push(format!(
                "<instance profile for role {role}>: the controller creates or adopts it and records it in the EC2NodeClass's status.instanceProfile"
            ));
            format!("<instance profile for role {role}>")
        })
    });
    let resolved = Resolved {
        images,
        subnets,
        security_groups,
        instance_profile,
    };
    let fleet = fleet(request, class, cluster, &resolved)?;
    placeholders.push(
        "<...selected by ...>: EC2 answers which subnets and security groups the selector terms match when the controller launches".to_string(),
    );
    Ok(LaunchPreview {
        node_claim: request.node_claim.clone(),
        node_class: request.node_class.clone(),
        ami_family: format!("{family:?}"),
        capacity_type: fleet.capacity_type.as_str().to_string(),
        target_capacity_type: fleet.target_capacity_type().to_string(),
        launch_templates: fleet
            .templates
            .iter()
            .map(|t| TemplatePreview {
                image_id: t.spec.image_id.clone(),
                block_device_mappings: t.spec.block_devices.clone(),
                metadata_options: t.spec.metadata.clone(),
                iam_instance_profile: t.spec.instance_profile.clone(),
                security_group_ids: t.spec.security_groups.clone(),
                network_interfaces: network_interfaces(&t.spec),
                nested_virtualization: t.spec.nested_virtualization.clone(),
                placement: t.spec.placement.clone(),
                detailed_monitoring: t.spec.detailed_monitoring,
                tags: t.spec.tags.clone(),
                capacity_reservation: match &t.spec.reservations {
                    ReservationUse::Open => None,
                    ReservationUse::None => Some("preference: none".to_string()),
                    other => other.target().map(|id| format!("target: {id}")),
                },
                market_type: matches!(t.spec.reservations, ReservationUse::CapacityBlock(_))
                    .then_some("capacity-block"),
                overrides: t
                    .overrides
                    .iter()
                    .map(|o| OverridePreview {
                        instance_type: o.instance_type.clone(),
                        zone: o.zone.clone(),
                        subnet_id: o.subnet_id.clone(),
                        priority: o.priority,
                    })
                    .collect(),
                user_data: t.spec.user_data.clone(),
            })
            .collect(),
        instance_tags: fleet.instance_tags.clone(),
        placeholders,
        skipped: fleet
            .skipped
            .iter()
            .map(|(o, why)| {
                format!(
                    "{o}: {}",
                    match why {
                        Skip::NoImage => "no AMI the EC2NodeClass selects fits it",
                        Skip::NoSubnet => "no subnet the EC2NodeClass selects is in its zone",
                    }
                )
            })
            .collect(),
        context: fleet.context,
    })
}

/// The image a type boots, as far as it is known offline: an AMI id named in the selector
/// terms, or where EC2 will be asked.
fn image_placeholder(
    class: &EC2NodeClass,
    family: AmiFamily,
    settings: &Settings,
    facts: TypeFacts,
) -> String {
    let terms = &class.spec.ami_selector_terms;
    if let Some(alias) = terms.iter().find_map(|t| t.alias.as_deref()) {
        let k8s = &settings.cluster.kubernetes_version;
        return match alias_parameter(
            &ParameterRoots::default(),
            family,
            k8s,
            alias_version(alias),
            facts,
        ) {
            Some(p) => format!("<AMI in SSM parameter {p}>"),
            None => format!("<AMI alias {alias}>"),
        };
    }
    if let [only] = terms.as_slice()
        && let Some(id) = &only.id
    {
        return id.clone();
    }
    format!(
        "<newest {} AMI matching spec.amiSelectorTerms>",
        facts.arch.as_str()
    )
}
