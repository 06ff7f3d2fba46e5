//! From manifests to one immutable cluster snapshot the planner decides over.
//!
//! This is where the inputs meet: NodePools are joined with their EC2NodeClasses and the
//! instance catalog (kubelet settings and root volume change allocatable), the NVIDIA
//! device-plugin config turns GPUs into time-sliced replicas and GPU feature discovery labels,
//! workloads become pods, Nodes and in-flight NodeClaims become one machine each
//! ([`machines`]), and every object is validated with errors that name it.
//!
//! A [`SnapshotBuilder`] takes everything that shapes the snapshot: the objects, the settings,
//! offerings known to be unavailable and the nodes consolidation may consider. It builds once;
//! the result is immutable and read through accessors, and its warnings are produced here and
//! nowhere else.

mod dra;
pub mod machines;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use joiner_model::api::EC2NodeClass;
use joiner_model::api::nodepool::NodePool;
use joiner_model::settings::Settings;
use joiner_model::workloads::{daemon_set_pod, expand_workloads};
use joiner_model::{InputError, Manifests, ObjectRef, Quantity, Sourced};

use crate::catalog::devices::{DeviceTemplates, TemplateOptions, builtin_templates};
use crate::catalog::{
    CapacityType, Catalog, InstanceType, NodeShape, Offering, OfferingKey, user_instance_type,
};
use crate::deviceplugin::{DevicePluginConfigs, NodeGpus, node_resources};
use crate::plan::{Plan, Unschedulable};
use crate::requirements::{Requirement, Requirements};

use crate::scheduling::{
    Consolidation, DaemonInput, DeviceSource, ExistingNode, LaunchOffering, LaunchOption, PodInfo,
    PoolInput, SchedulingInput, schedule,
};
use joiner_model::api::nodepool::ConsolidationPolicy;

/// How to build a snapshot beyond what the settings say.
#[derive(Debug, Clone)]
pub struct Options {
    /// Start from the built-in AWS catalog (`--no-builtin-catalog` turns it off).
    pub builtin_catalog: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            builtin_catalog: true,
        }
    }
}

/// One cluster, ready to plan.
#[derive(Debug, Clone)]
pub struct ClusterSnapshot {
    input: SchedulingInput,
    /// Pods decided before scheduling (DRA pods while DRA is off).
    decided: Vec<Unschedulable>,
    /// Things the user should know (skipped NodePools, defaults taken).
    warnings: Vec<String>,
}

/// Gathers what shapes a [`ClusterSnapshot`]; see [`ClusterSnapshot::builder`].
#[derive(Debug, Clone)]
pub struct SnapshotBuilder<'a> {
    manifests: &'a Manifests,
    settings: &'a Settings,
    options: &'a Options,
    unavailable: Option<&'a BTreeSet<OfferingKey>>,
    candidates: Option<&'a BTreeSet<String>>,
}

impl<'a> SnapshotBuilder<'a> {
    /// Offerings known to be unavailable now (insufficient capacity, a spot offering just
    /// reclaimed): not planned on.
    pub fn unavailable(mut self, offerings: &'a BTreeSet<OfferingKey>) -> Self {
        self.unavailable = Some(offerings);
        self
    }

    /// Only these nodes (by name) may be consolidated; without a set, every node not marked
    /// do-not-disrupt may be.
    pub fn consolidation_candidates(mut self, nodes: &'a BTreeSet<String>) -> Self {
        self.candidates = Some(nodes);
        self
    }

    /// Validates and joins the inputs. Nothing is planned here.
    pub fn build(self) -> Result<ClusterSnapshot, InputError> {
        let SnapshotBuilder {
            manifests: m,
            settings,
            options,
            unavailable,
            candidates,
        } = self;
        let mut warnings = Vec::new();
        let catalog = build_catalog(m, settings, options)?;
        let plugin = device_plugin_configs(m, settings)?;
        let classes: BTreeMap<&str, &Sourced<EC2NodeClass>> = m
            .node_classes
            .iter()
            .filter_map(|c| c.object.metadata.name.as_deref().map(|n| (n, c)))
            .collect();

        // DRA is modelled unless the settings say to ignore claims (Karpenter's default).
        let dra_on = !settings.ignore_dra_requests;
        let empty = BTreeSet::new();
        let unavailable = unavailable.unwrap_or(&empty);
        let mut template_options = BTreeMap::new();
        let mut pools = Vec::new();
        for np in &m.node_pools {
            let name = np.object.metadata.name.clone().unwrap_or_default();
            let class_name = &np.object.spec.template.spec.node_class_ref.name;
            let Some(class) = classes.get(class_name.as_str()) else {
                warnings.push(format!(
                    "{}: NodePool/{name}: spec.template.spec.nodeClassRef: EC2NodeClass {class_name:?} not found; the NodePool launches nothing until it exists",
                    np.origin
                ));
                continue;
            };
            let devices = dra_on.then(|| dra::template_options(settings, class, &mut warnings));
            if let Some(opts) = devices {
                template_options.insert(name.clone(), opts);
            }
            pools.push(build_pool(
                np,
                class,
                &catalog,
                plugin.as_ref(),
                devices,
                unavailable,
            )?);
        }

        let mut nodes =
            machines::machines(&m.nodes, &m.node_claims, &pools, &catalog, &mut warnings)?;
        if let Some(candidates) = candidates {
            for n in &mut nodes {
                n.consolidation_candidate &= candidates.contains(&n.name);
            }
        }

        let mut pods = Vec::new();
        let mut decided = Vec::new();
        let expanded = expand_workloads(m);
        let mut with_claims = Vec::new();
        for p in &expanded {
            // Finished pods hold nothing; gated pods are not for scheduling yet.
            let status = p.object.status.as_ref();
            if matches!(
                status.and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            ) {
                continue;
            }
            let spec = p.object.spec.as_ref();
            if spec
                .and_then(|s| s.scheduling_gates.as_ref())
                .is_some_and(|g| !g.is_empty())
                && spec.and_then(|s| s.node_name.as_ref()).is_none()
            {
                warnings.push(format!(
                    "{}: Pod/{}/{}: spec.schedulingGates: the pod waits for its scheduling gates; not planned",
                    p.origin,
                    p.object.metadata.namespace.as_deref().unwrap_or("default"),
                    p.object.metadata.name.as_deref().unwrap_or_default()
                ));
                continue;
            }
            let info = PodInfo::compile(&p.object, &p.origin)?;
            let pending_dra = info.has_resource_claims && info.node_name.is_none();
            if pending_dra && !dra_on {
                decided.push(Unschedulable {
                    pod: info.key(),
                    reason: "the pod uses ResourceClaims and DRA support is off (set settings.enableDRA=true); no node is launched for it".into(),
                });
                continue;
            }
            // Bound pods keep their claims too: consolidation moves them with their pods.
            with_claims.push(info.has_resource_claims.then_some(p));
            pods.push(info);
        }
        let dra = if dra_on {
            Some(dra::build(
                m,
                settings,
                &catalog,
                &nodes,
                &with_claims,
                &template_options,
                &mut warnings,
            )?)
        } else {
            None
        };
        let daemon_sets = m
            .daemon_sets
            .iter()
            .map(|ds| {
                let mut pod = daemon_set_pod(&ds.object, "");
                pod.metadata.name = ds.object.metadata.name.clone();
                PodInfo::compile(&pod, &ds.origin).map(|pod| DaemonInput { pod })
            })
            .collect::<Result<Vec<_>, _>>()?;

        Ok(ClusterSnapshot {
            input: SchedulingInput {
                nodes,
                pods,
                daemon_sets,
                pools,
                dra,
            },
            decided,
            warnings,
        })
    }
}

impl ClusterSnapshot {
    /// A builder over these inputs; see [`SnapshotBuilder`].
    pub fn builder<'a>(
        m: &'a Manifests,
        settings: &'a Settings,
        options: &'a Options,
    ) -> SnapshotBuilder<'a> {
        SnapshotBuilder {
            manifests: m,
            settings,
            options,
            unavailable: None,
            candidates: None,
        }
    }

    /// The snapshot of these inputs with nothing else known: what `joiner plan` plans.
    pub fn build(
        m: &Manifests,
        settings: &Settings,
        options: &Options,
    ) -> Result<ClusterSnapshot, InputError> {
        ClusterSnapshot::builder(m, settings, options).build()
    }

    /// What the scheduler decides over.
    pub fn input(&self) -> &SchedulingInput {
        &self.input
    }

    /// Pods decided before scheduling (DRA pods while DRA is off), with their reasons.
    pub fn decided(&self) -> &[Unschedulable] {
        &self.decided
    }

    /// Things the user should know (skipped NodePools, unknown NodeClaims, defaults taken).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The NodePools, with their instance types resolved.
    pub fn pools(&self) -> &[PoolInput] {
        &self.input.pools
    }

    /// How `pool` would launch `instance_type`, if it may.
    pub fn launch_option(&self, pool: &str, instance_type: &str) -> Option<&LaunchOption> {
        self.input
            .pools
            .iter()
            .find(|p| p.name == pool)?
            .options
            .iter()
            .find(|o| o.instance_type == instance_type)
    }

    /// The machines: Nodes and in-flight NodeClaims, in name order.
    pub fn machines(&self) -> &[ExistingNode] {
        &self.input.nodes
    }

    /// The consolidation moves for this round ([`crate::disruption::consolidate`]).
    pub fn consolidate(&self) -> Vec<crate::disruption::Decision> {
        crate::disruption::consolidate(&self.input)
    }

    /// New nodes for the pods of `nodes` ([`crate::disruption::replacements`]).
    pub fn replacements(&self, nodes: &[String]) -> crate::disruption::Replacements {
        crate::disruption::replacements(&self.input, nodes)
    }

    /// The full account of one pod (`namespace/name`), or `None` if it is not in the input.
    pub fn explain_pod(&self, pod: &str) -> Option<crate::scheduling::PodAccount> {
        if let Some(u) = self.decided.iter().find(|u| u.pod == pod) {
            return Some(crate::scheduling::PodAccount {
                pod: pod.to_string(),
                outcome: format!("unschedulable: {}", u.reason),
                instance_types: Vec::new(),
            });
        }
        crate::scheduling::explain_pod(&self.input, pod)
    }

    /// Plans this snapshot.
    pub fn plan(&self) -> Plan {
        let mut plan = schedule(&self.input);
        plan.unschedulable.extend(self.decided.iter().cloned());
        plan.unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
        plan
    }
}

fn build_catalog(
    m: &Manifests,
    settings: &Settings,
    options: &Options,
) -> Result<Catalog, InputError> {
    let mut catalog = if options.builtin_catalog {
        let ppm = (settings.vm_memory_overhead_percent * 1_000_000.0)
            .round()
            .clamp(0.0, 1_000_000.0) as u32;
        Catalog::builtin_with(&settings.region, &settings.zones, ppm)
    } else {
        Catalog::empty()
    };
    for it in &m.instance_types {
        let name = it.object.metadata.name.clone().unwrap_or_default();
        let spec = &it.object.spec;
        let offerings = spec
            .offerings
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let capacity_type =
                    CapacityType::parse(o.capacity_type.as_str()).ok_or_else(|| {
                        InputError::new(
                            &it.origin,
                            &ObjectRef::new("InstanceType", None, &name),
                            format!("spec.offerings[{i}].capacityType"),
                            "unknown capacity type",
                        )
                    })?;
                Ok(Offering {
                    zone: o.zone.clone(),
                    capacity_type,
                    price: o.price,
                    available: o.available,
                })
            })
            .collect::<Result<Vec<_>, InputError>>()?;
        let overhead = (!spec.overhead.is_empty()).then(|| spec.overhead.clone());
        let mut user = user_instance_type(
            &name,
            spec.architecture.as_str(),
            spec.capacity.clone(),
            overhead,
            spec.labels.clone(),
            offerings,
        );
        // Devices as given; a type that redefines a built-in one without listing devices (to
        // correct a price, say) keeps the built-in devices.
        user.devices = if spec.devices.is_empty() && spec.runtime_attributes.is_empty() {
            builtin_templates(&name)
        } else {
            let templates = DeviceTemplates::from_spec(&spec.devices, &spec.runtime_attributes)
                .map_err(|e| {
                    e.into_input_error(&it.origin, &ObjectRef::new("InstanceType", None, &name))
                })?;
            Some(Arc::new(templates))
        };
        catalog.upsert(user);
    }
    Ok(catalog)
}

fn device_plugin_configs(
    m: &Manifests,
    settings: &Settings,
) -> Result<Option<DevicePluginConfigs>, InputError> {
    let want = &settings.nvidia_device_plugin;
    m.config_maps
        .iter()
        .find(|cm| {
            cm.object.metadata.name.as_deref() == Some(want.config_map_name.as_str())
                && cm.object.metadata.namespace.as_deref().unwrap_or("default")
                    == want.config_map_namespace
        })
        .map(|cm| {
            DevicePluginConfigs::from_config_map(
                &cm.object,
                want.default_config.as_deref(),
                &cm.origin,
            )
        })
        .transpose()
}

/// The EC2NodeClass's root volume size: the mapping marked `rootVolume`, else the AMI's root
/// device `/dev/xvda`.
fn root_volume(class: &EC2NodeClass) -> Option<Quantity> {
    let maps = &class.spec.block_device_mappings;
    maps.iter()
        .find(|b| b.root_volume == Some(true))
        .or_else(|| {
            maps.iter()
                .find(|b| b.device_name.as_deref() == Some("/dev/xvda"))
        })
        .and_then(|b| b.ebs.as_ref())
        .and_then(|e| e.volume_size)
}

fn build_pool(
    np: &Sourced<NodePool>,
    class: &Sourced<EC2NodeClass>,
    catalog: &Catalog,
    plugin: Option<&DevicePluginConfigs>,
    devices: Option<TemplateOptions>,
    unavailable: &BTreeSet<OfferingKey>,
) -> Result<PoolInput, InputError> {
    let name = np.object.metadata.name.clone().unwrap_or_default();
    let object = ObjectRef::new("NodePool", None, &name);
    let spec = &np.object.spec;
    let tmpl = &spec.template;
    let mut requirements = Requirements::new();
    for (i, r) in tmpl.spec.requirements.iter().enumerate() {
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
    let labels = tmpl.metadata.labels.clone();
    let kubelet = class
        .object
        .spec
        .kubelet
        .as_ref()
        .or(tmpl.spec.kubelet.as_ref());
    let shape = NodeShape {
        kubelet,
        root_volume: root_volume(&class.object),
    };
    let class_ref = ObjectRef::new(
        "EC2NodeClass",
        None,
        class.object.metadata.name.clone().unwrap_or_default(),
    );
    let mut options = Vec::new();
    for it in catalog.types() {
        options.push(
            launch_option(it, &shape, &labels, plugin, devices, unavailable).map_err(|e| {
                InputError::new(
                    &class.origin,
                    &class_ref,
                    format!("spec.kubelet.{}", e.field()),
                    e,
                )
            })?,
        );
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
        },
    })
}

fn launch_option(
    it: &InstanceType,
    shape: &NodeShape,
    template_labels: &BTreeMap<String, String>,
    plugin: Option<&DevicePluginConfigs>,
    devices: Option<TemplateOptions>,
    unavailable: &BTreeSet<OfferingKey>,
) -> Result<LaunchOption, crate::catalog::CatalogError> {
    let mut allocatable = it.allocatable(shape)?;
    let capacity = it.capacity_for(shape)?;
    let mut labels = it.labels.clone();
    let mut at_most_one = Vec::new();
    if let Some(gpu) = &it.gpu {
        // The device plugin picks its config by the node's labels, which come from the template.
        let mut node_labels = labels.clone();
        node_labels.extend(template_labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        let config = plugin.and_then(|p| p.select(&node_labels).config());
        let gpus = node_resources(&NodeGpus::of(gpu, &it.name), config);
        gpus.apply(&mut allocatable);
        if gpus.fail_requests_greater_than_one {
            at_most_one.extend(gpus.resources.keys().cloned());
        }
        labels.extend(gpus.labels);
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
            })
            .collect(),
        at_most_one_per_pod: at_most_one,
        devices: devices.and_then(|options| {
            it.devices
                .clone()
                .map(|templates| DeviceSource { templates, options })
        }),
    })
}

#[cfg(test)]
mod tests;
