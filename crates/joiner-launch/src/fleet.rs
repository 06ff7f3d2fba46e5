//! A NodeClaim's launch as EC2 CreateFleet takes it, before anything is sent: one capacity
//! type, the launch templates its offers need, and one override per offer in price order.
//!
//! The AWS edge resolves the EC2NodeClass (AMIs, subnets, security groups, instance profile)
//! and sends this; `joiner plan --launch` builds the same value with what the manifests and
//! settings say, so a user sees what a node boots with before installing anything.

use std::collections::BTreeMap;

use joiner_controller::cloud::{LaunchRequest, OfferingKey};
use joiner_model::api::EC2NodeClass;
use joiner_model::api::ec2nodeclass::InstanceStorePolicy;
use joiner_model::wellknown::CapacityType;
use joiner_model::wellknown::{labels, tags};

use crate::LaunchError;
use crate::bootstrap::{Cluster, NodeBootstrap, kubelet_labels};
use crate::family::{default_block_devices, family_of, user_data};
use crate::template::{
    Placement, ReservationUse, TemplateSpec, metadata_with_defaults, node_class_spec_hash,
    template_name,
};

/// What resolving the EC2NodeClass found for one launch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resolved {
    /// The AMI each instance type boots; types no AMI fits are absent.
    pub images: BTreeMap<String, String>,
    /// The subnet to launch into, by zone.
    pub subnets: BTreeMap<String, String>,
    pub security_groups: Vec<String>,
    pub instance_profile: Option<String>,
}

/// One offer of the fleet: an instance type in a subnet, by priority (0 first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetOverride {
    pub instance_type: String,
    pub zone: String,
    pub subnet_id: String,
    pub priority: usize,
}

/// A launch template and the offers launched from it.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetTemplate {
    pub name: String,
    pub spec: TemplateSpec,
    pub overrides: Vec<FleetOverride>,
}

/// Why an offer is left out of the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// No AMI the EC2NodeClass selects fits the instance type (architecture, GPU variant).
    NoImage,
    /// No subnet the EC2NodeClass selects is in the zone.
    NoSubnet,
}

/// What one CreateFleet call for the NodeClaim carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    /// One capacity type per fleet: the cheapest offer's.
    pub capacity_type: CapacityType,
    /// For `reserved`: the reservations are Capacity Blocks. EC2 takes one market per fleet, so
    /// a fleet holds blocks or on-demand capacity reservations, not both.
    pub capacity_block: bool,
    pub templates: Vec<FleetTemplate>,
    /// Tags on the instance, its volumes and the fleet: the EC2NodeClass's, then the request's
    /// ownership tags and the launch token.
    pub instance_tags: BTreeMap<String, String>,
    pub skipped: Vec<(OfferingKey, Skip)>,
    /// CreateFleet's `Context` (the EC2NodeClass's `context`: an ODCR or Outposts context).
    pub context: Option<String>,
}

/// The one capacity type a fleet for `request` launches: the cheapest offer's, and for reserved
/// capacity whether it is a Capacity Block. Offers that fail come back as insufficient and the
/// next attempt moves on to the next kind.
pub fn capacity_type_of(request: &LaunchRequest) -> Option<(CapacityType, bool)> {
    let first = request.offers.first()?;
    let block = first.reservation.as_ref().is_some_and(|r| r.capacity_block);
    Some((first.offering.capacity_type, block))
}

impl Fleet {
    /// EC2's `DefaultTargetCapacityType`: on-demand capacity reservations launch as on-demand
    /// capacity that targets them.
    pub fn target_capacity_type(&self) -> &'static str {
        match (self.capacity_type, self.capacity_block) {
            (CapacityType::Spot, _) => "spot",
            (CapacityType::Reserved, true) => "capacity-block",
            _ => "on-demand",
        }
    }
}

/// The fleet for `request` from `class` (in its v1 form), with the cluster the node joins and
/// what resolving the class found. Errors name the EC2NodeClass field that cannot launch.
pub fn fleet(
    request: &LaunchRequest,
    class: &EC2NodeClass,
    cluster: &Cluster,
    resolved: &Resolved,
) -> Result<Fleet, LaunchError> {
    let family = family_of(class)?;
    let (capacity_type, capacity_block) =
        capacity_type_of(request).ok_or(LaunchError::NoOfferings)?;
    let spec = &class.spec;
    let mut bootstrap = NodeBootstrap {
        cluster: cluster.clone(),
        labels: kubelet_labels(&request.labels),
        taints: request
            .taints
            .iter()
            .chain(&request.startup_taints)
            .cloned()
            .collect(),
        kubelet: spec.kubelet.clone(),
        max_pods: None,
        raid0_instance_store: spec.instance_store_policy == Some(InstanceStorePolicy::RAID0),
    };
    // The EC2NodeClass's tags, then the request's ownership tags and the spec hash, which
    // marks the template unused once the EC2NodeClass changes.
    let mut template_tags = spec.tags.clone();
    for k in [
        tags::cluster(&cluster.name),
        tags::CLUSTER_NAME.to_string(),
        tags::NODEPOOL.to_string(),
        tags::NODECLASS.to_string(),
    ] {
        if let Some(v) = request.tags.get(&k) {
            template_tags.insert(k, v.clone());
        }
    }
    template_tags.insert(
        tags::NODECLASS_SPEC_HASH.to_string(),
        node_class_spec_hash(class),
    );
    let block_devices = if spec.block_device_mappings.is_empty() {
        default_block_devices(family)
    } else {
        spec.block_device_mappings.clone()
    };

    // User data differs only by max pods: rendered once per value.
    let mut rendered: BTreeMap<Option<u32>, String> = BTreeMap::new();
    let mut templates: Vec<FleetTemplate> = Vec::new();
    let mut skipped = Vec::new();
    let selects_reservations = !spec.capacity_reservation_selector_terms.is_empty();
    let placement = placement_of(request, class)?;
    let offers = request.offers.iter().filter(|o| {
        o.offering.capacity_type == capacity_type
            && o.reservation.as_ref().is_some_and(|r| r.capacity_block) == capacity_block
    });
    for (priority, offer) in offers.enumerate() {
        let key = &offer.offering;
        let Some(image) = resolved.images.get(&key.instance_type) else {
            skipped.push((key.clone(), Skip::NoImage));
            continue;
        };
        let Some(subnet) = resolved.subnets.get(&key.zone) else {
            skipped.push((key.clone(), Skip::NoSubnet));
            continue;
        };
        let max_pods = request.max_pods.get(&key.instance_type).copied();
        let user_data = match rendered.get(&max_pods) {
            Some(u) => u.clone(),
            None => {
                bootstrap.max_pods = max_pods;
                let u = user_data(family, &bootstrap, spec.user_data.as_deref())?;
                rendered.insert(max_pods, u.clone());
                u
            }
        };
        let tspec = TemplateSpec {
            image_id: image.clone(),
            user_data,
            block_devices: block_devices.clone(),
            metadata: metadata_with_defaults(spec.metadata_options.as_ref()),
            instance_profile: resolved.instance_profile.clone(),
            security_groups: resolved.security_groups.clone(),
            efa_interfaces: request
                .efa_interfaces
                .get(&key.instance_type)
                .copied()
                .unwrap_or(0),
            interfaces: spec.network_interfaces.clone(),
            associate_public_ip: spec.associate_public_ip_address,
            ip_prefix_count: spec.ip_prefix_count,
            connection_tracking: spec.connection_tracking.clone(),
            nested_virtualization: spec
                .cpu_options
                .as_ref()
                .and_then(|c| c.nested_virtualization.clone()),
            detailed_monitoring: spec.detailed_monitoring.unwrap_or(false),
            tags: template_tags.clone(),
            reservations: match &offer.reservation {
                Some(r) if r.capacity_block => ReservationUse::CapacityBlock(r.id.clone()),
                Some(r) => ReservationUse::Target(r.id.clone()),
                None if selects_reservations => ReservationUse::None,
                None => ReservationUse::Open,
            },
            placement: placement.clone(),
        };
        let name = template_name(&cluster.name, &tspec);
        let over = FleetOverride {
            instance_type: key.instance_type.clone(),
            zone: key.zone.clone(),
            subnet_id: subnet.clone(),
            priority,
        };
        match templates.iter_mut().find(|t| t.name == name) {
            Some(t) => t.overrides.push(over),
            None => templates.push(FleetTemplate {
                name,
                spec: tspec,
                overrides: vec![over],
            }),
        }
    }
    let mut instance_tags = spec.tags.clone();
    instance_tags.extend(request.tags.clone());
    instance_tags.insert(tags::LAUNCH_TOKEN.to_string(), request.client_token.clone());
    Ok(Fleet {
        capacity_type,
        capacity_block,
        templates,
        instance_tags,
        skipped,
        context: spec.context.clone(),
    })
}

/// Where the class's placement group puts the instance: the group and partition the NodeClaim
/// was planned in (its `placement-group-id` and `-partition` labels), or, for a NodeClaim
/// planned without the group known (a plan from files), the group the selector names. `None`
/// when the class selects no group.
fn placement_of(
    request: &LaunchRequest,
    class: &EC2NodeClass,
) -> Result<Option<Placement>, LaunchError> {
    let Some(selector) = &class.spec.placement_group_selector else {
        return Ok(None);
    };
    let partition_number = match request.labels.get(labels::PLACEMENT_GROUP_PARTITION) {
        None => None,
        Some(p) => Some(p.parse().map_err(|_| LaunchError::Label {
            key: labels::PLACEMENT_GROUP_PARTITION,
            value: p.clone(),
        })?),
    };
    Ok(Some(match request.labels.get(labels::PLACEMENT_GROUP_ID) {
        Some(id) => Placement {
            group_id: Some(id.clone()),
            group_name: None,
            partition_number,
        },
        None => Placement {
            group_id: selector.id.clone(),
            group_name: selector.name.clone(),
            partition_number,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_controller::cloud::Offer;
    use joiner_engine::scheduling::OfferedReservation;
    use joiner_model::Price;

    fn offer(t: &str, zone: &str, capacity_type: CapacityType) -> Offer {
        Offer {
            offering: OfferingKey {
                instance_type: t.into(),
                zone: zone.into(),
                capacity_type,
            },
            price: Price::ZERO,
            reservation: None,
        }
    }

    fn reserved(t: &str, zone: &str, id: &str, capacity_block: bool) -> Offer {
        Offer {
            reservation: Some(OfferedReservation {
                id: id.into(),
                capacity_block,
                interruptible: false,
                free: 1,
            }),
            ..offer(t, zone, CapacityType::Reserved)
        }
    }

    fn class() -> EC2NodeClass {
        serde_saphyr::from_str(
            "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: gpu}\nspec:\n  amiSelectorTerms: [{alias: al2023@latest}]\n  role: R\n  tags: {team: ml}\n",
        )
        .expect("EC2NodeClass")
    }

    fn request() -> LaunchRequest {
        let mut request_tags = tags::ownership("lab", "gpu", "gpu");
        request_tags.insert(tags::NODECLAIM.into(), "gpu-abc".into());
        LaunchRequest {
            node_claim: "gpu-abc".into(),
            node_class: "gpu".into(),
            offers: vec![
                offer("g5.xlarge", "us-east-1a", CapacityType::Spot),
                offer("g4dn.xlarge", "us-east-1a", CapacityType::Spot),
                offer("g4dn.xlarge", "us-east-1c", CapacityType::Spot),
                offer("g6.xlarge", "us-east-1b", CapacityType::Spot),
                offer("g5.xlarge", "us-east-1a", CapacityType::OnDemand),
            ],
            tags: request_tags,
            client_token: "uid-1".into(),
            max_pods: BTreeMap::from([("g5.xlarge".into(), 58), ("g4dn.xlarge".into(), 29)]),
            ..LaunchRequest::default()
        }
    }

    fn resolved() -> Resolved {
        Resolved {
            images: ["g5.xlarge", "g4dn.xlarge"]
                .map(|t| (t.to_string(), "ami-gpu".to_string()))
                .into(),
            subnets: [("us-east-1a", "subnet-a"), ("us-east-1b", "subnet-b")]
                .map(|(z, s)| (z.to_string(), s.to_string()))
                .into(),
            security_groups: vec!["sg-1".into()],
            instance_profile: Some("lab_profile".into()),
        }
    }

    /// One fleet of the cheapest offer's capacity type, a template per pod count, the
    /// overrides in price order, and the offers that cannot launch named with why.
    #[test]
    fn offers_group_into_templates_by_what_differs_and_keep_their_priority() {
        let cluster = Cluster {
            name: "lab".into(),
            ..Cluster::default()
        };
        let f = fleet(&request(), &class(), &cluster, &resolved()).expect("fleet");
        assert_eq!(f.capacity_type, CapacityType::Spot);
        assert_eq!(f.templates.len(), 2, "58 and 29 pods: {:#?}", f.templates);
        let by_type: Vec<(&str, &str, usize)> = f
            .templates
            .iter()
            .flat_map(|t| t.overrides.iter())
            .map(|o| (o.instance_type.as_str(), o.subnet_id.as_str(), o.priority))
            .collect();
        assert_eq!(
            by_type,
            [("g5.xlarge", "subnet-a", 0), ("g4dn.xlarge", "subnet-a", 1)]
        );
        assert_eq!(
            f.skipped,
            [
                (
                    offer("g4dn.xlarge", "us-east-1c", CapacityType::Spot).offering,
                    Skip::NoSubnet
                ),
                (
                    offer("g6.xlarge", "us-east-1b", CapacityType::Spot).offering,
                    Skip::NoImage
                ),
            ]
        );
        let t = &f.templates[0];
        assert!(t.name.starts_with("joiner/lab/"), "{}", t.name);
        assert!(
            t.spec.user_data.contains("maxPods: 58"),
            "{}",
            t.spec.user_data
        );
        assert_eq!(t.spec.tags.get("team").map(String::as_str), Some("ml"));
        assert_eq!(
            t.spec.tags.get(tags::NODEPOOL).map(String::as_str),
            Some("gpu")
        );
        assert!(t.spec.tags.contains_key(tags::NODECLASS_SPEC_HASH));
        assert!(
            !t.spec.tags.contains_key(tags::NODECLAIM),
            "templates are shared by NodeClaims of one shape"
        );
        assert_eq!(
            f.instance_tags.get(tags::LAUNCH_TOKEN).map(String::as_str),
            Some("uid-1")
        );
        assert_eq!(
            f.instance_tags.get(tags::NODECLAIM).map(String::as_str),
            Some("gpu-abc")
        );
    }

    /// Each reservation gets a template that targets it; blocks and on-demand reservations
    /// never share a fleet, and a class that selects reservations keeps its other launches out
    /// of open ones.
    #[test]
    fn reserved_offers_launch_into_their_reservations_one_market_per_fleet() {
        let cluster = Cluster {
            name: "lab".into(),
            ..Cluster::default()
        };
        let mut selecting = class();
        selecting.spec.capacity_reservation_selector_terms = vec![Default::default()];
        let mut r = request();
        r.offers = vec![
            reserved("g5.xlarge", "us-east-1a", "cr-block", true),
            reserved("g5.xlarge", "us-east-1b", "cr-odcr", false),
            offer("g5.xlarge", "us-east-1a", CapacityType::OnDemand),
        ];
        let f = fleet(&r, &selecting, &cluster, &resolved()).expect("fleet");
        assert_eq!(f.capacity_type, CapacityType::Reserved);
        assert_eq!(f.target_capacity_type(), "capacity-block");
        assert_eq!(f.templates.len(), 1);
        assert_eq!(
            f.templates[0].spec.reservations,
            ReservationUse::CapacityBlock("cr-block".into())
        );

        r.offers.remove(0);
        let f = fleet(&r, &selecting, &cluster, &resolved()).expect("fleet");
        assert_eq!(f.target_capacity_type(), "on-demand");
        let uses: Vec<_> = f
            .templates
            .iter()
            .map(|t| t.spec.reservations.clone())
            .collect();
        assert_eq!(uses, [ReservationUse::Target("cr-odcr".into())]);

        r.offers.remove(0);
        let f = fleet(&r, &selecting, &cluster, &resolved()).expect("fleet");
        assert_eq!(f.templates[0].spec.reservations, ReservationUse::None);
        let plain = fleet(&r, &class(), &cluster, &resolved()).expect("fleet");
        assert_eq!(plain.templates[0].spec.reservations, ReservationUse::Open);
        // The default is left out of the hash: a class without reservations keeps its names.
        let json = serde_json::to_string(&plain.templates[0].spec).expect("json");
        assert!(!json.contains("reservations"), "{json}");
    }

    #[test]
    fn no_offers_or_a_windows_class_cannot_make_a_fleet() {
        let cluster = Cluster::default();
        let mut r = request();
        r.offers.clear();
        assert_eq!(
            fleet(&r, &class(), &cluster, &resolved()),
            Err(LaunchError::NoOfferings)
        );
        let mut windows = class();
        windows.spec.ami_selector_terms[0].alias = Some("windows2022@latest".into());
        let err = fleet(&request(), &windows, &cluster, &resolved()).unwrap_err();
        assert!(err.to_string().starts_with("spec.amiFamily:"), "{err}");
    }
}
