//! A simulated kubelet (and device plugin, DRA drivers, and startup-taint daemon) for tests,
//! `joiner simulate` and the live controller's `--cloud simulated`: what a real instance does on
//! its own after launch.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use joiner_engine::catalog::devices::{ConsumableCapacity, TemplateOptions, builtin_templates};
use joiner_model::api::EC2NodeClass;
use joiner_model::wellknown::{annotations, labels, tags};
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;

use joiner_controller::clock::{add, k8s_time};
use joiner_controller::cloud::InstanceState;
use joiner_controller::consistency::labels::GFD_TIMESTAMP;
use joiner_controller::store::{ClusterStore, StoreError};
use joiner_model::api::NodeClaim;

use crate::cloud::{Registration, SimulatedCloud};

/// Registers a Node for each running instance once its registration delay has passed (Ready,
/// with the NodeClaim's taints and startup taints, without extended resources), then after
/// `device_plugin_delay` publishes the extended resources the plan predicted (the NodeClaim's
/// `status.allocatable`), removes the startup taints, and has the DRA drivers publish the
/// ResourceSlices the catalog's device templates predict for the instance type (so a NodeClaim
/// that waits on `karpenter.sh/requested-dra-drivers` can become Initialized, and the planner
/// then judges the node by what it published). Slices whose Node is gone are deleted, as the
/// Kubernetes garbage collector deletes them through their owner reference.
#[derive(Debug, Clone)]
pub struct SimulatedKubelet {
    pub device_plugin_delay: Duration,
    /// DRA drivers that never publish (a broken driver DaemonSet): what waits on them waits.
    pub silent_dra_drivers: BTreeSet<String>,
    /// What device plugins publish of a resource on nodes of a type, by (instance type,
    /// resource), in place of the prediction (zero: nothing).
    pub published: BTreeMap<(String, String), joiner_model::Quantity>,
    /// How many devices a DRA driver publishes on nodes of a type, by (instance type, driver),
    /// in place of its templates' count.
    pub dra_devices: BTreeMap<(String, String), u32>,
    /// What gpu-feature-discovery writes for a label on nodes of a type, by (instance type,
    /// label), in place of the prediction.
    pub gfd_labels: BTreeMap<(String, String), String>,
}

impl Default for SimulatedKubelet {
    fn default() -> Self {
        SimulatedKubelet {
            device_plugin_delay: Duration::from_secs(10),
            silent_dra_drivers: BTreeSet::new(),
            published: BTreeMap::new(),
            dra_devices: BTreeMap::new(),
            gfd_labels: BTreeMap::new(),
        }
    }
}

fn k8s_list<'a>(
    list: impl Iterator<Item = (&'a String, &'a joiner_model::Quantity)>,
) -> BTreeMap<String, K8sQuantity> {
    list.map(|(k, v)| (k.clone(), K8sQuantity::from(*v)))
        .collect()
}

/// The boot id of an instance's node after `reboots` reboots.
pub fn boot_id(instance: &str, reboots: usize) -> String {
    format!("{instance}-boot-{reboots}")
}

/// A rebooted instance's node: `Ready: Unknown` while it boots (its kubelet stops posting), then
/// `Ready: True` on a new boot id. True when it wrote the node (the kubelet does nothing else
/// with it this step).
fn rebooting<S: ClusterStore>(
    store: &S,
    node: &Node,
    cloud: &SimulatedCloud,
    instance: &str,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let reboots = cloud.reboots_of(instance);
    let Some(last) = reboots.last() else {
        return Ok(false);
    };
    let booting = now < add(*last, SimulatedCloud::REBOOT_TIME);
    let done = reboots
        .iter()
        .filter(|t| add(**t, SimulatedCloud::REBOOT_TIME) <= now)
        .count();
    let mut n = node.clone();
    let status = n.status.get_or_insert_with(Default::default);
    let mut changed = false;
    let info = status.node_info.get_or_insert_with(Default::default);
    if !booting && info.boot_id != boot_id(instance, done) {
        info.boot_id = boot_id(instance, done);
        changed = true;
    }
    let (ready, reason) = if booting {
        ("Unknown", "NodeStatusUnknown")
    } else {
        ("True", "KubeletReady")
    };
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    match conditions.iter_mut().find(|c| c.type_ == "Ready") {
        Some(c) if c.status == ready => {}
        Some(c) => {
            c.status = ready.into();
            c.reason = Some(reason.into());
            c.last_transition_time = Some(k8s_time(now));
            changed = true;
        }
        None => {}
    }
    if !changed {
        return Ok(booting);
    }
    match store.update(&n) {
        Ok(_) | Err(StoreError::Conflict(_)) => Ok(true),
        Err(e) => Err(e),
    }
}

impl SimulatedKubelet {
    pub fn step<S: ClusterStore>(
        &self,
        store: &S,
        cloud: &SimulatedCloud,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let nodes = store.list::<Node>()?;
        self.collect_slices(store, &nodes)?;
        for instance in cloud.all_instances() {
            if instance.state != InstanceState::Running {
                continue;
            }
            let Registration::After(delay) = cloud.registration_of(&instance.id) else {
                continue;
            };
            let registered_at = add(instance.launch_time, delay);
            if now < registered_at {
                continue;
            }
            // The kubelet knows its NodeClaim through the bootstrap Karpenter generated.
            let claim = match instance.tags.get(tags::NODECLAIM) {
                Some(n) => store.get::<NodeClaim>(None, n)?,
                None => None,
            };
            let provider_id = instance.provider_id();
            let existing = nodes.iter().find(|n| {
                n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id.as_str())
            });
            let expected = claim
                .as_ref()
                .map(|c| c.status.allocatable.clone())
                .unwrap_or_default();
            match existing {
                None => {
                    let mut node_labels = BTreeMap::new();
                    node_labels.insert(
                        "kubernetes.io/hostname".to_string(),
                        instance.private_dns_name.clone(),
                    );
                    node_labels.insert(
                        labels::INSTANCE_TYPE.to_string(),
                        instance.instance_type.clone(),
                    );
                    node_labels.insert(labels::ZONE.to_string(), instance.zone.clone());
                    let taints: Vec<_> = claim
                        .iter()
                        .flat_map(|c| c.spec.taints.iter().chain(&c.spec.startup_taints))
                        .cloned()
                        .collect();
                    let basic = || k8s_list(expected.iter().filter(|(k, _)| !k.contains('/')));
                    let node = Node {
                        metadata: ObjectMeta {
                            name: Some(instance.private_dns_name.clone()),
                            labels: Some(node_labels),
                            ..ObjectMeta::default()
                        },
                        spec: Some(NodeSpec {
                            provider_id: Some(provider_id.clone()),
                            taints: (!taints.is_empty()).then_some(taints),
                            ..NodeSpec::default()
                        }),
                        status: Some(NodeStatus {
                            allocatable: Some(basic()),
                            capacity: Some(basic()),
                            conditions: Some(vec![NodeCondition {
                                type_: "Ready".into(),
                                status: "True".into(),
                                last_transition_time: Some(k8s_time(now)),
                                reason: Some("KubeletReady".into()),
                                ..NodeCondition::default()
                            }]),
                            node_info: Some(NodeSystemInfo {
                                boot_id: boot_id(&instance.id, 0),
                                ..NodeSystemInfo::default()
                            }),
                            ..NodeStatus::default()
                        }),
                    };
                    match store.create(&node) {
                        Ok(_) | Err(StoreError::AlreadyExists(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
                Some(node) if rebooting(store, node, cloud, &instance.id, now)? => {}
                Some(node) if now >= add(registered_at, self.device_plugin_delay) => {
                    self.publish_slices(store, node, &instance.instance_type, claim.as_ref())?;
                    let gfd =
                        self.gfd_labels_for(node, &instance.instance_type, claim.as_ref(), now);
                    let mut node = node.clone();
                    let status = node.status.get_or_insert_with(Default::default);
                    let allocatable = status.allocatable.get_or_insert_with(BTreeMap::new);
                    let missing: Vec<(String, joiner_model::Quantity)> = expected
                        .iter()
                        .filter(|(k, _)| k.contains('/') && !allocatable.contains_key(*k))
                        .map(|(k, v)| {
                            let key = (instance.instance_type.clone(), k.clone());
                            (k.clone(), self.published.get(&key).copied().unwrap_or(*v))
                        })
                        .filter(|(_, v)| !v.is_zero())
                        .collect();
                    let startup: Vec<_> = claim
                        .iter()
                        .flat_map(|c| c.spec.startup_taints.clone())
                        .collect();
                    let spec = node.spec.get_or_insert_with(Default::default);
                    let tainted = spec.taints.as_ref().is_some_and(|ts| {
                        ts.iter().any(|t| {
                            startup
                                .iter()
                                .any(|s| s.key == t.key && s.effect == t.effect)
                        })
                    });
                    if missing.is_empty() && !tainted && gfd.is_empty() {
                        continue;
                    }
                    node.metadata
                        .labels
                        .get_or_insert_with(BTreeMap::new)
                        .extend(gfd);
                    if let Some(ts) = spec.taints.as_mut() {
                        ts.retain(|t| {
                            !startup
                                .iter()
                                .any(|s| s.key == t.key && s.effect == t.effect)
                        });
                    }
                    let extra = k8s_list(missing.iter().map(|(k, v)| (k, v)));
                    status
                        .allocatable
                        .get_or_insert_with(BTreeMap::new)
                        .extend(extra.clone());
                    status
                        .capacity
                        .get_or_insert_with(BTreeMap::new)
                        .extend(extra);
                    match store.update(&node) {
                        Ok(_) | Err(StoreError::Conflict(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// What gpu-feature-discovery writes on a GPU node it has not labelled yet: the NodeClaim's
    /// `nvidia.com/` labels (a correct prediction is what GFD finds), with the faults' values
    /// in their place, and its timestamp. Nothing on other nodes, or once labelled.
    fn gfd_labels_for(
        &self,
        node: &Node,
        instance_type: &str,
        claim: Option<&NodeClaim>,
        now: Timestamp,
    ) -> BTreeMap<String, String> {
        let labelled = node
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(GFD_TIMESTAMP));
        if labelled {
            return BTreeMap::new();
        }
        let mut out: BTreeMap<String, String> = claim
            .map(NodeClaim::labels)
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| k.starts_with("nvidia.com/"))
            .collect();
        if out.is_empty() {
            return out;
        }
        for ((of_type, label), value) in &self.gfd_labels {
            if of_type == instance_type {
                out.insert(label.clone(), value.clone());
            }
        }
        out.insert(GFD_TIMESTAMP.to_string(), now.as_second().to_string());
        out
    }

    /// The DRA drivers of a running node publish their devices once: the catalog's templates
    /// of its instance type, with GPU sharing as its EC2NodeClass says, every driver the
    /// templates know except the silent ones.
    fn publish_slices<S: ClusterStore>(
        &self,
        store: &S,
        node: &Node,
        instance_type: &str,
        claim: Option<&NodeClaim>,
    ) -> Result<(), StoreError> {
        let (Some(templates), Some(node_name)) = (
            builtin_templates(instance_type),
            node.metadata.name.as_deref(),
        ) else {
            return Ok(());
        };
        let class = match claim {
            Some(c) => store.get::<EC2NodeClass>(None, &c.spec.node_class_ref.name)?,
            None => None,
        };
        // A bad annotation: the controller reports it; the driver shares nothing.
        let consumable = ConsumableCapacity::from_annotations(
            class.as_ref().and_then(|c| c.metadata.annotations.as_ref()),
        )
        .unwrap_or_else(|e| {
            tracing::debug!("{}: {e}", annotations::NVIDIA_CONSUMABLE_CAPACITY);
            ConsumableCapacity::Disabled
        });
        let annotation = |key: &str| {
            class
                .as_ref()
                .and_then(|c| c.metadata.annotations.as_ref())
                .and_then(|a| a.get(key))
                .cloned()
        };
        let options = TemplateOptions {
            nvidia_gpu: true,
            efa: true,
            consumable,
            dynamic_mig: annotation(annotations::NVIDIA_DYNAMIC_MIG).as_deref() == Some("true"),
        };
        let templates = mig_templates(store, node, templates, options.dynamic_mig)?;
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: node_name.to_string(),
            uid: node.metadata.uid.clone().unwrap_or_default(),
            ..OwnerReference::default()
        };
        // A driver fault of the type publishes fewer devices (copied only then: this runs for
        // every node on every step).
        let mut faulted = None;
        for ((of_type, driver), keep) in &self.dra_devices {
            if of_type == instance_type {
                let base = faulted.as_ref().unwrap_or(&*templates);
                faulted = Some(base.with_at_most(driver, *keep));
            }
        }
        let templates = faulted.as_ref().unwrap_or(&*templates);
        for mut slice in templates.node_slices(node_name, &options) {
            if self.silent_dra_drivers.contains(&slice.spec.driver) {
                continue;
            }
            slice.metadata.owner_references = Some(vec![owner.clone()]);
            match store.create(&slice) {
                Ok(_) | Err(StoreError::AlreadyExists(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Deletes the slices this kubelet published for Nodes that no longer exist.
    fn collect_slices<S: ClusterStore>(&self, store: &S, nodes: &[Node]) -> Result<(), StoreError> {
        let live: BTreeSet<&str> = nodes
            .iter()
            .filter_map(|n| n.metadata.name.as_deref())
            .collect();
        for slice in store.list::<ResourceSlice>()? {
            let orphaned = slice.metadata.owner_references.iter().flatten().any(|o| {
                o.kind == "Node" && o.api_version == "v1" && !live.contains(o.name.as_str())
            });
            if !orphaned {
                continue;
            }
            if let Some(name) = slice.metadata.name.as_deref() {
                match store.delete::<ResourceSlice>(None, name) {
                    Ok(_) | Err(StoreError::NotFound(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }
}

/// The templates as the NVIDIA driver publishes them on `node`: its GPUs split by the MIG
/// manager's config its `nvidia.com/mig.config` label names (from the cluster's mig-parted
/// ConfigMap at its default place, else the operator's defaults), or every MIG profile under
/// dynamic MIG. A config that cannot be applied leaves the GPUs whole, as mig-parted would fail.
fn mig_templates<S: ClusterStore>(
    store: &S,
    node: &Node,
    templates: std::sync::Arc<joiner_engine::catalog::devices::DeviceTemplates>,
    dynamic: bool,
) -> Result<std::sync::Arc<joiner_engine::catalog::devices::DeviceTemplates>, StoreError> {
    use joiner_engine::catalog::mig::mig_gpu;
    use joiner_engine::migmanager::MigConfigs;
    let gpus: Vec<&k8s_openapi::api::resource::v1::Device> = templates
        .pools_of(joiner_engine::catalog::devices::NVIDIA_GPU_DRIVER)
        .flat_map(|p| p.devices.iter())
        .collect();
    let Some(mig) = gpus
        .first()
        .and_then(|d| d.attributes.as_ref()?.get("productName")?.string.as_deref())
        .and_then(mig_gpu)
    else {
        return Ok(templates);
    };
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let config = labels.get(labels::NVIDIA_MIG_CONFIG);
    if config.is_none() && !dynamic {
        return Ok(templates);
    }
    let count = gpus.len();
    let defaults = joiner_model::settings::Settings::default().nvidia_mig_manager;
    let config_maps = store.list::<ConfigMap>()?;
    let configs = MigConfigs::find(
        config_maps.iter().map(|cm| (cm, &NO_SOURCE)),
        &defaults.config_map_namespace,
        &defaults.config_map_name,
    );
    let layout = config.and_then(|name| {
        configs
            .layout(name, mig, u32::try_from(count).unwrap_or(u32::MAX))
            .ok()
            .flatten()
    });
    Ok(joiner_engine::catalog::devices::with_mig(
        templates,
        mig,
        layout.as_ref(),
        dynamic,
    ))
}

/// Objects read from the store have no file.
static NO_SOURCE: joiner_model::Source = joiner_model::Source {
    file: String::new(),
    document: 0,
};
