//! The NVIDIA device plugin's GPU sharing (time-slicing and MPS), so that the GPU replicas a
//! node will advertise are counted before the node exists.
//!
//! The plugin reads a ConfigMap whose keys are named configs in its own YAML format:
//!
//! ```yaml
//! version: v1
//! flags: {migStrategy: none}
//! sharing:
//!   timeSlicing:
//!     renameByDefault: false
//!     failRequestsGreaterThanOne: false
//!     resources:
//!     - name: nvidia.com/gpu
//!       replicas: 3
//! ```
//!
//! Each node uses one key, chosen by its `nvidia.com/device-plugin.config` label, else the
//! configured default, else the plugin's fallbacks ([`DevicePluginConfigs::select`]). With
//! `replicas: 3` each physical GPU is advertised three times, so a one-GPU node offers
//! `nvidia.com/gpu: 3` ([`node_resources`]), and gpu-feature-discovery labels the node so
//! that pods can tell shared GPUs from whole ones.

use std::collections::BTreeMap;
use std::fmt;

use joiner_model::wellknown::labels;
use joiner_model::{InputError, ObjectRef, Source};
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::Value;

mod mig;
mod node;

pub use mig::{mig_hint, mig_node_resources};
pub use node::{NodeGpuResources, NodeGpus, node_resources};

/// The key the plugin's config manager falls back to when no default is set (Helm chart's
/// `named` fallback strategy).
pub const NAMED_FALLBACK: &str = "default";

/// The label GPU feature discovery gives a node's sharing strategy: a [`SharingStrategy`], or
/// `none`.
pub const SHARING_STRATEGY_LABEL: &str = "nvidia.com/gpu.sharing-strategy";

/// How replicas of a GPU share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SharingStrategy {
    TimeSlicing,
    Mps,
}

impl SharingStrategy {
    /// The `nvidia.com/gpu.sharing-strategy` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SharingStrategy::TimeSlicing => "time-slicing",
            SharingStrategy::Mps => "mps",
        }
    }
}

/// `flags.migStrategy`: how MIG devices are exposed. EC2 GPUs start with MIG disabled, so
/// whole GPUs are what nodes advertise unless the GPU operator's MIG manager splits them (the
/// node's `nvidia.com/mig.config`, [`mig_node_resources`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MigStrategy {
    #[default]
    None,
    Single,
    Mixed,
}

/// One resource to replicate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicatedResource {
    /// The resource as the plugin would advertise it unshared (`nvidia.com/gpu`).
    pub name: String,
    /// The name replicas are advertised under instead, if renamed (`nvidia.com/gpu.shared`).
    pub rename: Option<String>,
    /// Replicas per device (at least 1).
    pub replicas: u32,
}

/// The `sharing` section of a config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sharing {
    pub strategy: SharingStrategy,
    /// Whether a container asking for more than one replica is refused: replicas of one GPU
    /// add no compute, so such a request is usually a mistake. Always true for MPS.
    pub fail_requests_greater_than_one: bool,
    pub resources: Vec<ReplicatedResource>,
}

/// One named config of the ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DevicePluginConfig {
    pub mig_strategy: MigStrategy,
    pub sharing: Option<Sharing>,
}

impl DevicePluginConfig {
    /// How `resource` is replicated under this config, if it is.
    pub fn replication(&self, resource: &str) -> Option<(&Sharing, &ReplicatedResource)> {
        let sharing = self.sharing.as_ref()?;
        let r = sharing.resources.iter().find(|r| r.name == resource)?;
        Some((sharing, r))
    }
}

/// All the configs of the plugin's ConfigMap, and the default key.
///
/// A key that cannot be read is kept as its error, not as a failure of the whole map: only
/// the nodes that would use it (those whose NodePools select it) are unknown, and only their
/// NodePools wait ([`Selection::Unreadable`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevicePluginConfigs {
    /// The ConfigMap, for messages.
    pub object: ObjectRef,
    configs: BTreeMap<String, Result<DevicePluginConfig, InputError>>,
    default: Option<String>,
    /// The default key the settings name, when the map lacks it.
    missing_default: Option<InputError>,
}

/// Which config a node uses and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection<'a> {
    Config {
        key: &'a str,
        config: &'a DevicePluginConfig,
        by: SelectedBy,
    },
    /// The plugin runs without a config from the map: GPUs are not shared.
    NoConfig(NoConfig<'a>),
    /// The config the node would use cannot be read (or the default the settings name is not
    /// in the map): what its GPUs will advertise is unknown.
    Unreadable(&'a InputError),
}

impl<'a> Selection<'a> {
    pub fn config(&self) -> Option<&'a DevicePluginConfig> {
        match self {
            Selection::Config { config, .. } => Some(config),
            Selection::NoConfig(_) | Selection::Unreadable(_) => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectedBy {
    /// The node's `nvidia.com/device-plugin.config` label.
    NodeLabel,
    /// The configured default key.
    Default,
    /// The key named `default`.
    NamedFallback,
    /// The map's only key.
    OnlyKey,
}

/// Why a node gets no config. Except for [`NoConfig::Empty`] the real plugin's config manager
/// would fail to start on such a node; Joiner reports it and plans without sharing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoConfig<'a> {
    /// The map has no keys.
    Empty,
    /// Several keys, no label, no default and none named `default`.
    Ambiguous,
    /// The node's label names a key the map lacks.
    UnknownKey(&'a str),
}

impl fmt::Display for NoConfig<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoConfig::Empty => f.write_str("the device plugin ConfigMap has no configs"),
            NoConfig::Ambiguous => write!(
                f,
                "the device plugin ConfigMap has several configs, the node has no {label} \
                 label and no default config is set: GPUs are assumed unshared (the plugin's \
                 config manager would fail to start)",
                label = labels::NVIDIA_DEVICE_PLUGIN_CONFIG,
            ),
            NoConfig::UnknownKey(key) => write!(
                f,
                "the node's {label} label names config {key:?}, which the ConfigMap lacks: \
                 GPUs are assumed unshared (the plugin's config manager would fail to start)",
                label = labels::NVIDIA_DEVICE_PLUGIN_CONFIG,
            ),
        }
    }
}

impl DevicePluginConfigs {
    /// Reads every key of the plugin's ConfigMap. `default_config` is the plugin's default key
    /// (the Helm chart's `config.default`), which should be one of the keys. A key that does not
    /// parse, or a default the map lacks, is kept as an error ([`DevicePluginConfigs::errors`])
    /// for the nodes that would use it; the other keys are read as usual.
    pub fn from_config_map(
        cm: &ConfigMap,
        default_config: Option<&str>,
        origin: &Source,
    ) -> DevicePluginConfigs {
        let object = ObjectRef::new(
            "ConfigMap",
            cm.metadata.namespace.as_deref(),
            cm.metadata.name.clone().unwrap_or_default(),
        );
        let err = |field: String, message: String| InputError::new(origin, &object, field, message);
        let mut configs = BTreeMap::new();
        for (key, text) in cm.data.iter().flatten() {
            let field = format!("data.{key}");
            let config = serde_saphyr::from_str::<Value>(text)
                .map_err(|e| err(field.clone(), format!("not YAML: {e}")))
                .and_then(|value| {
                    parse_config(&value)
                        .map_err(|(path, message)| err(format!("{field}{path}"), message))
                });
            configs.insert(key.clone(), config);
        }
        let missing_default = default_config
            .filter(|default| !configs.contains_key(*default))
            .map(|default| {
                err(
                    "data".to_string(),
                    format!(
                        "the default config {default:?} (settings.nvidiaDevicePlugin.defaultConfig) is not a key of the ConfigMap"
                    ),
                )
            });
        DevicePluginConfigs {
            object,
            configs,
            default: default_config.map(str::to_string),
            missing_default,
        }
    }

    /// What cannot be read: each key that does not parse, and a default the map lacks.
    pub fn errors(&self) -> impl Iterator<Item = &InputError> {
        self.configs
            .values()
            .filter_map(|c| c.as_ref().err())
            .chain(self.missing_default.as_ref())
    }

    /// The config of a key, if it is there and can be read.
    pub fn get(&self, key: &str) -> Option<&DevicePluginConfig> {
        self.configs.get(key)?.as_ref().ok()
    }

    /// The keys, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.configs.keys().map(String::as_str)
    }

    /// The config a node with `node_labels` uses, chosen as the plugin's config manager does:
    /// the key its `nvidia.com/device-plugin.config` label names, else the default key, else a
    /// key named `default`, else the only key.
    pub fn select<'a>(&'a self, node_labels: &'a BTreeMap<String, String>) -> Selection<'a> {
        let found = |key: &'a str, by| match self.configs.get_key_value(key) {
            Some((key, Ok(config))) => Selection::Config { key, config, by },
            Some((_, Err(e))) => Selection::Unreadable(e),
            None => Selection::NoConfig(NoConfig::UnknownKey(key)),
        };
        if let Some(key) = node_labels
            .get(labels::NVIDIA_DEVICE_PLUGIN_CONFIG)
            .filter(|k| !k.is_empty())
        {
            return found(key, SelectedBy::NodeLabel);
        }
        if let Some(e) = &self.missing_default {
            return Selection::Unreadable(e);
        }
        if let Some(key) = &self.default {
            return found(key, SelectedBy::Default);
        }
        if self.configs.contains_key(NAMED_FALLBACK) {
            return found(NAMED_FALLBACK, SelectedBy::NamedFallback);
        }
        let mut keys = self.configs.keys();
        match (keys.next(), keys.next()) {
            (Some(key), None) => found(key, SelectedBy::OnlyKey),
            (None, _) => Selection::NoConfig(NoConfig::Empty),
            (Some(_), Some(_)) => Selection::NoConfig(NoConfig::Ambiguous),
        }
    }
}

/// A field path (relative to the key) and what is wrong there.
type FieldError = (String, String);

fn parse_config(value: &Value) -> Result<DevicePluginConfig, FieldError> {
    let top = object(value, "")?;
    match top.get("version") {
        None | Some(Value::Null) => {}
        Some(Value::String(v)) if v == "v1" => {}
        Some(other) => {
            return Err((
                ".version".into(),
                format!("unknown version {other}: expected v1"),
            ));
        }
    }
    let mut config = DevicePluginConfig::default();
    if let Some(flags) = top.get("flags") {
        let flags = object(flags, ".flags")?;
        config.mig_strategy = match flags.get("migStrategy") {
            None | Some(Value::Null) => MigStrategy::None,
            Some(Value::String(s)) if s == "none" => MigStrategy::None,
            Some(Value::String(s)) if s == "single" => MigStrategy::Single,
            Some(Value::String(s)) if s == "mixed" => MigStrategy::Mixed,
            Some(other) => {
                return Err((
                    ".flags.migStrategy".into(),
                    format!("{other} is not none, single or mixed"),
                ));
            }
        };
    }
    if let Some(sharing) = top.get("sharing").filter(|v| !v.is_null()) {
        let sharing = object(sharing, ".sharing")?;
        let time_slicing = sharing.get("timeSlicing").filter(|v| !v.is_null());
        let mps = sharing.get("mps").filter(|v| !v.is_null());
        config.sharing = match (time_slicing, mps) {
            (Some(_), Some(_)) => {
                return Err((
                    ".sharing".into(),
                    "timeSlicing and mps cannot both be set".into(),
                ));
            }
            (Some(ts), None) => Some(parse_sharing(
                ts,
                ".sharing.timeSlicing",
                SharingStrategy::TimeSlicing,
            )?),
            (None, Some(mps)) => Some(parse_sharing(mps, ".sharing.mps", SharingStrategy::Mps)?),
            (None, None) => None,
        };
    }
    Ok(config)
}

fn parse_sharing(
    value: &Value,
    path: &str,
    strategy: SharingStrategy,
) -> Result<Sharing, FieldError> {
    let section = object(value, path)?;
    let rename_by_default = flag(section, path, "renameByDefault")?;
    let fail_requests_greater_than_one =
        strategy == SharingStrategy::Mps || flag(section, path, "failRequestsGreaterThanOne")?;
    let list_path = format!("{path}.resources");
    let list = match section.get("resources") {
        Some(Value::Array(list)) if !list.is_empty() => list,
        _ => {
            return Err((
                list_path,
                "a non-empty list of resources is required".into(),
            ));
        }
    };
    let resources = list
        .iter()
        .enumerate()
        .map(|(i, r)| parse_resource(r, &format!("{list_path}[{i}]"), rename_by_default))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Sharing {
        strategy,
        fail_requests_greater_than_one,
        resources,
    })
}

fn parse_resource(
    value: &Value,
    path: &str,
    rename_by_default: bool,
) -> Result<ReplicatedResource, FieldError> {
    let r = object(value, path)?;
    let name = match r.get("name") {
        Some(Value::String(n)) if !n.is_empty() => qualify(n),
        _ => return Err((format!("{path}.name"), "a resource name is required".into())),
    };
    let replicas_path = format!("{path}.replicas");
    let replicas = match r.get("replicas") {
        Some(v) => v
            .as_u64()
            .filter(|&n| n >= 1)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| (replicas_path, format!("{v} is not a whole number >= 1")))?,
        None => return Err((replicas_path, "replicas is required".into())),
    };
    match r.get("devices") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == "all" => {}
        Some(other) => {
            return Err((
                format!("{path}.devices"),
                format!("{other}: Joiner only models sharing all devices (`all`)"),
            ));
        }
    }
    let rename = match r.get("rename") {
        None | Some(Value::Null) => rename_by_default.then(|| format!("{name}.shared")),
        Some(Value::String(n)) if !n.is_empty() => Some(qualify(n)),
        Some(other) => {
            return Err((
                format!("{path}.rename"),
                format!("{other} is not a resource name"),
            ));
        }
    };
    Ok(ReplicatedResource {
        name,
        rename,
        replicas,
    })
}

/// The plugin accepts bare names (`gpu`) and puts them under `nvidia.com/`.
fn qualify(name: &str) -> String {
    if name.contains('/') {
        name.to_string()
    } else {
        format!("nvidia.com/{name}")
    }
}

fn object<'a>(
    value: &'a Value,
    path: &str,
) -> Result<&'a serde_json::Map<String, Value>, FieldError> {
    value.as_object().ok_or_else(|| {
        (
            path.to_string(),
            format!("expected a mapping, found {value}"),
        )
    })
}

fn flag(
    section: &serde_json::Map<String, Value>,
    path: &str,
    key: &str,
) -> Result<bool, FieldError> {
    match section.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err((
            format!("{path}.{key}"),
            format!("{other} is not true or false"),
        )),
    }
}

#[cfg(test)]
mod tests;
