//! NodePools joined with their EC2NodeClass and the catalog: every instance type as the pool
//! would launch it. A NodePool that cannot be joined (its EC2NodeClass is missing, a
//! requirement or kubelet setting cannot be read) launches nothing and is kept as an
//! [`UnreadyPool`], so that pods only it could take say why.

use std::collections::{BTreeMap, BTreeSet};

use joiner_model::api::EC2NodeClass;
use joiner_model::api::NodeClaim;
use joiner_model::api::ec2nodeclass::{AmiFamily, InstanceStorePolicy};
use joiner_model::api::nodepool::{ConsolidationPolicy, NodePool};
use joiner_model::placement::PlacementGroup;
use joiner_model::wellknown::labels;
use joiner_model::{InputError, ObjectRef, Quantity, Sourced};
use k8s_openapi::api::core::v1::Taint;

use crate::catalog::devices::{TemplateOptions, with_mig};
use crate::catalog::mig::{MigGpu, NodeMigLayout, mig_gpu};
use crate::catalog::{Catalog, InstanceType, NodeShape, OfferingKey};
use crate::deviceplugin::{
    DevicePluginConfigs, NodeGpuResources, NodeGpus, Selection, mig_node_resources, node_resources,
};
use crate::migmanager::{LayoutProblem, MigConfigs};
use crate::requirements::{Requirement, Requirements};
use crate::scheduling::allowed::type_allowed;
use crate::scheduling::taints::first_untolerated;
use crate::scheduling::{
    Consolidation, DeviceSource, LaunchOffering, LaunchOption, PodInfo, PoolInput,
};

/// A NodePool that launches nothing, and why (Karpenter marks such a pool not ready).
#[derive(Debug, Clone)]
pub(super) struct UnreadyPool {
    pub name: String,
    /// Why, e.g. `EC2NodeClass "gpu" not found (spec.template.spec.nodeClassRef)`.
    pub why: String,
    taints: Vec<Taint>,
    /// The template's requirements and labels; `None` when they cannot be read, in which case
    /// every pod that tolerates the pool's taints is taken to be one it could have served.
    requirements: Option<Requirements>,
}

impl UnreadyPool {
    pub(super) fn new(np: &Sourced<NodePool>, why: String) -> UnreadyPool {
        let tmpl = &np.object.spec.template;
        let requirements = requirements(np).ok().map(|mut r| {
            for (k, v) in &tmpl.metadata.labels {
                r.add(k, Requirement::equals(v));
            }
            r
        });
        UnreadyPool {
            name: np.object.metadata.name.clone().unwrap_or_default(),
            why,
            taints: tmpl.spec.taints.clone(),
            requirements,
        }
    }

    /// Whether the pool, were it ready, might have launched a node for `pod`: the pod tolerates
    /// its taints and some term of the pod's node requirements is compatible with its own.
    pub(super) fn might_take(&self, pod: &PodInfo) -> bool {
        if first_untolerated(&self.taints, &pod.tolerations).is_some() {
            return false;
        }
        match &self.requirements {
            None => true,
            Some(pool) => pod
                .node_requirements
                .iter()
                .any(|alt| pool.intersect(alt).is_ok()),
        }
    }
}

/// The reason of an unschedulable pod, with every unready NodePool that might have taken it
/// named: in place of "no NodePool to launch nodes from" when it was the only kind there was.
pub(super) fn with_unready(reason: &str, pod: &PodInfo, unready: &[UnreadyPool]) -> String {
    let named: Vec<String> = unready
        .iter()
        .filter(|u| u.might_take(pod))
        .map(|u| format!("NodePool {} launches nothing: {}", u.name, u.why))
        .collect();
    if named.is_empty() {
        return reason.to_string();
    }
    let named = named.join("; ");
    const NONE: &str = "no NodePool to launch nodes from";
    if reason.contains(NONE) {
        reason.replace(NONE, &named)
    } else {
        format!("{reason}; {named}")
    }
}

/// The NodePool template's requirements, with errors naming the requirement.
fn requirements(np: &Sourced<NodePool>) -> Result<Requirements, InputError> {
    let object = ObjectRef::new(
        "NodePool",
        None,
        np.object.metadata.name.clone().unwrap_or_default(),
    );
    let mut requirements = Requirements::new();
    for (i, r) in np.object.spec.template.spec.requirements.iter().enumerate() {
        let mut req = Requirement::new(r.operator.as_str(), &r.values).map_err(|e| {
            InputError::new(
                &np.origin,
                &object,
                format!("spec.template.spec.requirements[{i}]"),
                e,
            )
        })?;
        req.min_values = r.min_values.and_then(|v| usize::try_from(v).ok());
        requirements.add(&r.key, req);
    }
    Ok(requirements)
}

/// The size of the EC2NodeClass's volume that holds ephemeral storage: the mapping marked
/// `rootVolume`, else the device the AMI family keeps the kubelet's data on: `/dev/xvda` (the
/// root device), or `/dev/xvdb` on Bottlerocket, whose root volume holds only the OS.
fn root_volume(class: &EC2NodeClass) -> Option<Quantity> {
    let data_device = match class.ami_family() {
        Some(AmiFamily::Bottlerocket) => "/dev/xvdb",
        _ => "/dev/xvda",
    };
    let maps = &class.spec.block_device_mappings;
    maps.iter()
        .find(|b| b.root_volume == Some(true))
        .or_else(|| {
            maps.iter()
                .find(|b| b.device_name.as_deref() == Some(data_device))
        })
        .and_then(|b| b.ebs.as_ref())
        .and_then(|e| e.volume_size)
}

/// The catalog a NodePool's instance types come from, and the types its NodeClaims have.
pub(super) struct PoolCatalog<'a> {
    pub catalog: &'a Catalog,
    pub claimed: &'a BTreeSet<&'a str>,
    /// `settings.minValuesPolicy`, which every pool plans under.
    pub min_values_policy: joiner_model::settings::MinValuesPolicy,
    /// The placement group the pool's class selects, as the controller found it in EC2;
    /// `None` when the class selects none or it is not known (a plan from files).
    pub placement_group: Option<&'a PlacementGroup>,
}

/// The instance types of the NodePool's NodeClaims (`pool` by name).
pub(super) fn claimed_types<'a>(claims: &'a [Sourced<NodeClaim>], pool: &str) -> BTreeSet<&'a str> {
    claims
        .iter()
        .filter(|c| c.object.label(labels::NODEPOOL) == Some(pool))
        .filter_map(|c| c.object.label(labels::INSTANCE_TYPE))
        .collect()
}

/// The placement group `class` selects, when the controller found it (`groups`, by class
/// name). A class whose group is not known (a plan from files) is planned without it, with one
/// warning saying what that leaves out.
pub(super) fn placement_group<'a>(
    class: &Sourced<EC2NodeClass>,
    groups: Option<&'a BTreeMap<String, PlacementGroup>>,
    warnings: &mut Vec<String>,
) -> Option<&'a PlacementGroup> {
    class.object.spec.placement_group_selector.as_ref()?;
    let name = class.object.metadata.name.as_deref().unwrap_or_default();
    let found = groups.and_then(|g| g.get(name));
    if found.is_none() {
        let warning = format!(
            "{}: EC2NodeClass/{name}: spec.placementGroupSelector: the group is found in EC2 by              the controller, so this plan does not know its strategy: it may plan types the group              does not take, and its nodes show no placement-group labels",
            class.origin
        );
        if !warnings.contains(&warning) {
            warnings.push(warning);
        }
    }
    found
}

/// Why a NodePool cannot launch.
#[derive(Debug)]
pub(super) enum PoolError {
    /// The NodePool or its class cannot be used as written.
    Invalid(InputError),
    /// The device-plugin config or MIG manager config its GPU nodes would use cannot be read:
    /// an error of the ConfigMap's, reported once with it, that holds back every NodePool that
    /// would use it.
    GpuConfig(InputError),
}

/// What the NVIDIA software on a GPU node is configured with: the device plugin's configs (if the
/// cluster has its ConfigMap) and the MIG manager's.
#[derive(Clone, Copy)]
pub(super) struct GpuSoftware<'a> {
    pub plugin: Option<&'a DevicePluginConfigs>,
    pub mig: &'a MigConfigs,
}

/// The NodePool joined with its class: every catalog type its requirements allow (by the
/// planner's rule, less zone and capacity type), and the types its NodeClaims already have, as
/// the pool launches them. Types the requirements rule out are not resolved at all: with every
/// EC2 type in the catalog, most NodePools allow a small part of it.
pub(super) fn build_pool(
    np: &Sourced<NodePool>,
    class: &Sourced<EC2NodeClass>,
    pool_catalog: &PoolCatalog,
    gpu_software: GpuSoftware<'_>,
    devices: Option<TemplateOptions>,
    unavailable: &BTreeSet<OfferingKey>,
    reserved_free: &BTreeMap<String, u32>,
) -> Result<PoolInput, PoolError> {
    let name = np.object.metadata.name.clone().unwrap_or_default();
    let spec = &np.object.spec;
    let tmpl = &spec.template;
    let requirements = requirements(np).map_err(PoolError::Invalid)?;
    let mut labels = tmpl.metadata.labels.clone();
    // Instance types run any OS; the class's AMI family decides which its nodes run.
    if let Some(family) = class.object.ami_family() {
        labels.insert(labels::OS.to_string(), family.os().to_string());
        if let Some(build) = family.windows_build() {
            labels.insert(labels::WINDOWS_BUILD.to_string(), build.to_string());
        }
    }
    let kubelet = class
        .object
        .spec
        .kubelet
        .as_ref()
        .or(tmpl.spec.kubelet.as_ref());
    let shape = NodeShape {
        kubelet,
        root_volume: root_volume(&class.object),
        instance_store_raid0: class.object.spec.instance_store_policy
            == Some(InstanceStorePolicy::RAID0),
        interfaces: &class.object.spec.network_interfaces,
    };
    let class_ref = ObjectRef::new(
        "EC2NodeClass",
        None,
        class.object.metadata.name.clone().unwrap_or_default(),
    );
    // Zone IDs map to zone names per account: only the class's subnets say which is which.
    let zone_ids: BTreeMap<&str, &str> = class
        .object
        .status
        .iter()
        .flat_map(|s| s.subnets.iter())
        .filter_map(|s| Some((s.zone.as_str(), s.zone_id.as_deref()?)))
        .collect();
    // Nodes launch into the class's subnets: once its status names them, only their zones are
    // offered (Karpenter's offerings are the subnets' zones). A class not resolved yet (written
    // in a file) offers every zone.
    let subnet_zones: BTreeSet<&str> = class
        .object
        .status
        .iter()
        .flat_map(|s| s.subnets.iter())
        .map(|s| s.zone.as_str())
        .collect();
    let nitro_only = class.object.spec.connection_tracking.is_some();
    let nested = class.object.nested_virtualization();
    let group = pool_catalog.placement_group;
    // Every node of a class with a placement group carries the group's ID.
    if let Some(g) = group {
        labels.insert(labels::PLACEMENT_GROUP_ID.to_string(), g.id.clone());
    }
    let mut options = Vec::new();
    let mut node_labels = BTreeMap::new();
    for it in pool_catalog.catalog.types() {
        node_labels.clone_from(&it.labels);
        node_labels.extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        if !type_allowed(&requirements, &node_labels)
            && !pool_catalog.claimed.contains(it.name.as_str())
        {
            continue;
        }
        // Connection tracking is set on Nitro interfaces only (Karpenter offers only those).
        if nitro_only
            && it
                .labels
                .get(labels::INSTANCE_HYPERVISOR)
                .map(String::as_str)
                != Some("nitro")
        {
            continue;
        }
        // The class's network interfaces must fit the type's cards, and EC2 must support the
        // CPU options it asks for (Karpenter offers only those types).
        if !it.takes_interfaces(shape.interfaces)
            || !it.supports_launch(group.map(|g| g.strategy), nested)
        {
            continue;
        }
        let mut reserved = super::reservations::offerings(&class.object, it, reserved_free);
        for o in &mut reserved {
            o.zone_id = zone_ids.get(o.zone.as_str()).map(|z| z.to_string());
        }
        let sold = Sold {
            unavailable,
            reserved,
            zone_ids: &zone_ids,
        };
        let mut option = launch_option(it, &shape, &labels, gpu_software, devices, sold).map_err(
            |e| match e {
                OptionError::Catalog(e) => PoolError::Invalid(InputError::new(
                    &class.origin,
                    &class_ref,
                    format!("spec.kubelet.{}", e.field()),
                    e,
                )),
                OptionError::GpuConfig(e) => PoolError::GpuConfig(e),
                OptionError::Mig(why) => PoolError::Invalid(InputError::new(
                    &np.origin,
                    &ObjectRef::new("NodePool", None, &name),
                    format!(
                        "spec.template.metadata.labels[{}]",
                        labels::NVIDIA_MIG_CONFIG
                    ),
                    format!("{why} (instance type {})", it.name),
                )),
            },
        )?;
        if !subnet_zones.is_empty() {
            option
                .offerings
                .retain(|o| subnet_zones.contains(o.zone.as_str()));
        }
        if let Some(g) = group {
            option.offerings = in_partitions(option.offerings, g);
        }
        options.push(option);
    }
    Ok(PoolInput {
        name,
        weight: spec.weight.unwrap_or(0),
        labels,
        taints: tmpl.spec.taints.clone(),
        requirements,
        limits: spec.limits.clone(),
        options,
        consolidation: match spec.disruption.consolidation_policy {
            ConsolidationPolicy::WhenEmpty => Consolidation::WhenEmpty,
            ConsolidationPolicy::WhenEmptyOrUnderutilized => {
                Consolidation::WhenEmptyOrUnderutilized
            }
            ConsolidationPolicy::Balanced => Consolidation::Balanced,
        },
        min_values_policy: pool_catalog.min_values_policy,
    })
}

/// A partition group's offerings: each one once per partition, with its partition, so that
/// pods may ask for one and a NodeClaim launches into the one it was planned for (Karpenter's
/// offerings). Other groups' offerings are as they are.
fn in_partitions(offerings: Vec<LaunchOffering>, group: &PlacementGroup) -> Vec<LaunchOffering> {
    if group.partition_numbers().next().is_none() {
        return offerings;
    }
    offerings
        .into_iter()
        .flat_map(|o| {
            group.partition_numbers().map(move |p| LaunchOffering {
                partition: Some(p.to_string()),
                ..o.clone()
            })
        })
        .collect()
}

/// How a type is sold to one NodePool: the offerings known unavailable, the reservations its
/// class selects, and the zone IDs its subnets give.
struct Sold<'a> {
    unavailable: &'a BTreeSet<OfferingKey>,
    reserved: Vec<LaunchOffering>,
    zone_ids: &'a BTreeMap<&'a str, &'a str>,
}

/// Why a type cannot be offered: its kubelet settings leave nothing, or the device-plugin
/// config its GPUs would use cannot be read.
enum OptionError {
    /// The node's MIG layout cannot be predicted (its `nvidia.com/mig.config`).
    Mig(String),
    Catalog(crate::catalog::CatalogError),
    GpuConfig(InputError),
}

/// The MIG layout the GPU operator's MIG manager gives each of a node's `count` GPUs of model
/// `mig` when the node is labelled `nvidia.com/mig.config`: `None` without the label, or for a
/// config that splits none of its GPUs.
fn mig_layout(
    mig: &MigGpu,
    count: u32,
    node_labels: &BTreeMap<String, String>,
    configs: &MigConfigs,
) -> Result<Option<NodeMigLayout>, OptionError> {
    let Some(name) = node_labels.get(labels::NVIDIA_MIG_CONFIG) else {
        return Ok(None);
    };
    match configs.layout(name, mig, count) {
        Ok(layout) => Ok(layout),
        Err(LayoutProblem::Unreadable(e)) => Err(OptionError::GpuConfig(e)),
        Err(LayoutProblem::Invalid(why)) => Err(OptionError::Mig(why)),
    }
}

fn launch_option(
    it: &InstanceType,
    shape: &NodeShape,
    template_labels: &BTreeMap<String, String>,
    gpu_software: GpuSoftware<'_>,
    devices: Option<TemplateOptions>,
    sold: Sold,
) -> Result<LaunchOption, OptionError> {
    let Sold {
        unavailable,
        reserved,
        zone_ids,
    } = sold;
    let mut allocatable = it.allocatable(shape).map_err(OptionError::Catalog)?;
    let capacity = it.capacity_for(shape).map_err(OptionError::Catalog)?;
    let mut labels = it.labels.clone();
    let mut at_most_one = Vec::new();
    let mut mig = None;
    if let Some(gpu) = &it.gpu {
        let dra_gpus = devices.is_some_and(|o| o.nvidia_gpu);
        let (gpus, split) = gpu_resources(it, gpu, template_labels, gpu_software, dra_gpus)?;
        gpus.apply(&mut allocatable);
        if gpus.fail_requests_greater_than_one {
            at_most_one.extend(gpus.resources.keys().cloned());
        }
        labels.extend(gpus.labels);
        mig = split;
    }
    Ok(LaunchOption {
        instance_type: it.name.clone(),
        labels,
        allocatable,
        capacity,
        offerings: it
            .offerings
            .iter()
            .filter(|o| o.available && !unavailable.contains(&OfferingKey::of(&it.name, o)))
            .map(|o| LaunchOffering {
                zone: o.zone.clone(),
                capacity_type: o.capacity_type.as_str().to_string(),
                price: o.price,
                price_basis: o.price_basis,
                reservation: None,
                zone_id: zone_ids.get(o.zone.as_str()).map(|z| z.to_string()),
                partition: None,
            })
            .chain(reserved.into_iter().filter(|o| {
                // A reservation EC2 just turned a launch away from is not tried again yet.
                !unavailable.contains(&OfferingKey {
                    instance_type: it.name.clone(),
                    zone: o.zone.clone(),
                    capacity_type: crate::catalog::CapacityType::Reserved,
                })
            }))
            .collect(),
        at_most_one_per_pod: at_most_one,
        devices: devices.and_then(|options| {
            let templates = it.devices.clone()?;
            let templates = match &mig {
                Some((gpu, layout)) => {
                    with_mig(templates, gpu, layout.as_ref(), options.dynamic_mig)
                }
                None => templates,
            };
            Some(DeviceSource { templates, options })
        }),
    })
}

/// A node's MIG-capable GPU model, and how the MIG manager splits its GPUs (`None`: whole).
type NodeMig = (&'static MigGpu, Option<NodeMigLayout>);

/// What the device plugin and GPU feature discovery advertise on a node of `it`, and the MIG
/// model and layout of its GPUs when they are MIG-capable.
fn gpu_resources(
    it: &InstanceType,
    gpu: &crate::catalog::GpuInfo,
    template_labels: &BTreeMap<String, String>,
    gpu_software: GpuSoftware<'_>,
    dra_gpus: bool,
) -> Result<(NodeGpuResources, Option<NodeMig>), OptionError> {
    // The device plugin picks its config by the node's labels, which come from the template.
    let mut node_labels = it.labels.clone();
    node_labels.extend(template_labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    let config = match gpu_software.plugin.map(|p| p.select(&node_labels)) {
        Some(Selection::Unreadable(e)) => return Err(OptionError::GpuConfig(e.clone())),
        selection => selection.and_then(|s| s.config()),
    };
    let node_gpus = NodeGpus::of(gpu, &it.name);
    let mig = gpu.product_name.as_deref().and_then(mig_gpu);
    let split = match mig {
        Some(m) => mig_layout(m, gpu.count, &node_labels, gpu_software.mig)?,
        None => None,
    };
    let gpus = match (mig, &split) {
        (Some(mig), Some(layout)) => match mig_node_resources(&node_gpus, mig, layout, config) {
            Ok(gpus) => gpus,
            // GPUs that DRA serves, with no device-plugin config: the plugin is not expected
            // to run, so it advertises nothing, and claims get the MIG devices.
            Err(_) if config.is_none() && dra_gpus => {
                let mut gpus = node_resources(&node_gpus, None);
                gpus.resources.clear();
                gpus
            }
            Err(why) => return Err(OptionError::Mig(why)),
        },
        _ => node_resources(&node_gpus, config),
    };
    // No device plugin on the node: it advertises no GPU resource, and a DeviceClass that
    // names `nvidia.com/gpu` serves pods asking for it through DRA instead.
    let mut gpus = gpus;
    if node_labels
        .get(labels::NVIDIA_DEPLOY_DEVICE_PLUGIN)
        .is_some_and(|v| v == "false")
    {
        gpus.resources.clear();
        gpus.fail_requests_greater_than_one = false;
    }
    Ok((gpus, mig.map(|m| (m, split))))
}
