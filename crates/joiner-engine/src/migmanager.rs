//! The GPU operator's MIG manager: what a node's `nvidia.com/mig.config` label makes of its
//! GPUs, so the MIG devices a node will advertise are known before it exists.
//!
//! The manager applies one named config of its mig-parted ConfigMap (key `config.yaml`):
//!
//! ```yaml
//! version: v1
//! mig-configs:
//!   half-balanced:
//!   - devices: [0, 1, 2, 3]
//!     mig-enabled: true
//!     mig-devices: {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
//!   - devices: [4, 5, 6, 7]
//!     mig-enabled: false
//! ```
//!
//! mig-parted walks the entries in order and configures every GPU an entry matches (its index is
//! in `devices`, or `devices: all`; its PCI ID is in `device-filter`, or there is none), so the
//! last entry matching a GPU decides; a GPU no entry matches is left as it booted, which on EC2 is
//! MIG off. Without the ConfigMap in the cluster, the operator's built-in default configs
//! ([`MigGpu::default_config`]) stand in.

use std::collections::BTreeMap;

use joiner_model::{InputError, ObjectRef, Source};
use k8s_openapi::api::core::v1::ConfigMap;
use serde::Deserialize;

use crate::catalog::mig::{MigConfig, MigGpu, MigLayout, NodeMigLayout};

/// The ConfigMap key the MIG manager reads.
pub const CONFIG_KEY: &str = "config.yaml";

/// Where node layouts come from.
#[derive(Debug, Clone, Default)]
pub enum MigConfigs {
    /// No mig-parted ConfigMap: the GPU operator's built-in defaults.
    #[default]
    Defaults,
    /// The configs of the settings' ConfigMap.
    Parted(MigPartedConfigs),
    /// The settings' ConfigMap is there but cannot be read: NodePools that name a MIG config wait.
    Unreadable(InputError),
}

/// Why a node's MIG layout cannot be predicted.
#[derive(Debug, Clone, PartialEq)]
pub enum LayoutProblem {
    /// The ConfigMap cannot be read; reported once with it.
    Unreadable(InputError),
    /// The config cannot be applied to this node's GPUs: the NodePool's label is at fault.
    Invalid(String),
}

/// The configs of one mig-parted ConfigMap, by name.
#[derive(Debug, Clone)]
pub struct MigPartedConfigs {
    object: ObjectRef,
    configs: BTreeMap<String, Vec<Entry>>,
}

/// One entry of a config, as mig-parted's `MigConfigSpec` has it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    devices: Devices,
    #[serde(rename = "device-filter", default)]
    device_filter: Option<OneOrMany>,
    #[serde(rename = "mig-enabled")]
    mig_enabled: bool,
    #[serde(rename = "mig-devices", default)]
    mig_devices: BTreeMap<String, u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
enum Devices {
    All(AllDevices),
    Indexes(Vec<u32>),
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
enum AllDevices {
    #[serde(rename = "all")]
    All,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    version: String,
    #[serde(rename = "mig-configs")]
    mig_configs: BTreeMap<String, Vec<Entry>>,
}

impl Entry {
    fn matches(&self, index: u32, gpu: &MigGpu) -> bool {
        let index_ok = match &self.devices {
            Devices::All(_) => true,
            Devices::Indexes(list) => list.contains(&index),
        };
        let filter_ok = match &self.device_filter {
            None => true,
            Some(OneOrMany::One(f)) => gpu.matches_device_filter(f),
            Some(OneOrMany::Many(fs)) => {
                fs.is_empty() || fs.iter().any(|f| gpu.matches_device_filter(f))
            }
        };
        index_ok && filter_ok
    }
}

impl MigConfigs {
    /// The configs the settings name: the ConfigMap `namespace/name` among `config_maps`, or
    /// the defaults when it is not there.
    pub fn find<'a>(
        mut config_maps: impl Iterator<Item = (&'a ConfigMap, &'a Source)>,
        namespace: &str,
        name: &str,
    ) -> MigConfigs {
        let found = config_maps.find(|(cm, _)| {
            cm.metadata.name.as_deref() == Some(name)
                && cm.metadata.namespace.as_deref().unwrap_or("default") == namespace
        });
        match found {
            None => MigConfigs::Defaults,
            Some((cm, origin)) => match MigPartedConfigs::from_config_map(cm, origin) {
                Ok(configs) => MigConfigs::Parted(configs),
                Err(e) => MigConfigs::Unreadable(e),
            },
        }
    }

    /// What config `name` makes of a node's `count` GPUs of model `gpu`; `None` when it splits
    /// none of them.
    pub fn layout(
        &self,
        name: &str,
        gpu: &MigGpu,
        count: u32,
    ) -> Result<Option<NodeMigLayout>, LayoutProblem> {
        let node = match self {
            MigConfigs::Unreadable(e) => return Err(LayoutProblem::Unreadable(e.clone())),
            MigConfigs::Defaults => match gpu.default_config(name) {
                Some(MigConfig::Disabled) => return Ok(None),
                Some(MigConfig::Enabled(layout)) => NodeMigLayout::uniform(count, layout),
                None => return Err(LayoutProblem::Invalid(not_a_default(name, gpu))),
            },
            MigConfigs::Parted(parted) => parted.layout(name, gpu, count)?,
        };
        for layout in node.gpus.iter().flatten() {
            gpu.check_layout(layout)
                .map_err(|e| LayoutProblem::Invalid(format!("config {name:?}: {e}")))?;
        }
        Ok((!node.is_whole()).then_some(node))
    }
}

fn not_a_default(name: &str, gpu: &MigGpu) -> String {
    format!(
        "{name:?} is not one of the GPU operator's default MIG configs for the {} (all-disabled, all-enabled, all-balanced, or all-<profile> of {}), and the cluster has no mig-parted ConfigMap (settings.nvidiaMigManager.configMap)",
        gpu.model,
        gpu.profile_names()
    )
}

impl MigPartedConfigs {
    /// Reads the ConfigMap's `config.yaml` as mig-parted does: `version: v1`, no unknown keys,
    /// every config with at least one entry, `mig-devices` only where MIG is enabled.
    pub fn from_config_map(
        cm: &ConfigMap,
        origin: &Source,
    ) -> Result<MigPartedConfigs, InputError> {
        let object = ObjectRef::new(
            "ConfigMap",
            cm.metadata.namespace.as_deref(),
            cm.metadata.name.clone().unwrap_or_default(),
        );
        let field = format!("data[{CONFIG_KEY}]");
        let err = |message: String| InputError::new(origin, &object, field.clone(), message);
        let text = cm
            .data
            .as_ref()
            .and_then(|d| d.get(CONFIG_KEY))
            .ok_or_else(
                || err("missing: the MIG manager reads its configs from this key".into()),
            )?;
        let file: File = serde_saphyr::from_str(text)
            .map_err(|e| err(format!("not a mig-parted config: {e}")))?;
        if file.version != "v1" {
            return Err(err(format!(
                "version {:?}: mig-parted reads only v1",
                file.version
            )));
        }
        for (name, entries) in &file.mig_configs {
            if entries.is_empty() {
                return Err(err(format!(
                    "mig-configs.{name}: a config needs at least one entry"
                )));
            }
            for (i, e) in entries.iter().enumerate() {
                if !e.mig_enabled && !e.mig_devices.is_empty() {
                    return Err(err(format!(
                        "mig-configs.{name}[{i}].mig-devices: set on an entry whose mig-enabled is false"
                    )));
                }
            }
        }
        Ok(MigPartedConfigs {
            object,
            configs: file.mig_configs,
        })
    }

    fn layout(&self, name: &str, gpu: &MigGpu, count: u32) -> Result<NodeMigLayout, LayoutProblem> {
        let Some(entries) = self.configs.get(name) else {
            return Err(LayoutProblem::Invalid(format!(
                "{name:?} is not a config of the MIG manager's {} (it has {})",
                self.object,
                self.configs.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        };
        let gpus = (0..count)
            .map(|i| {
                // The last entry that matches the GPU decides, as mig-parted applies them in order.
                let entry = entries.iter().rev().find(|e| e.matches(i, gpu))?;
                entry
                    .mig_enabled
                    .then(|| canonical(&entry.mig_devices, gpu))
            })
            .collect();
        Ok(NodeMigLayout { gpus })
    }
}

/// A config's `mig-devices` under the profiles' own names (`+me`), zero counts dropped; names the
/// GPU does not have are kept, for [`MigGpu::check_layout`] to refuse by name.
fn canonical(devices: &BTreeMap<String, u32>, gpu: &MigGpu) -> MigLayout {
    devices
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(name, n)| {
            let name = gpu
                .profile(name)
                .map_or_else(|| name.clone(), |p| p.name.clone());
            (name, *n)
        })
        .collect()
}

#[cfg(test)]
mod tests;
