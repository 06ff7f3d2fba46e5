//! Joiner's settings, given the way Karpenter's Helm chart takes them: values files merged in
//! order, then `--set` expressions, then [`Settings::from_values`] reads `settings.*`.
//!
//! Accepting the chart's own values means a user can point Joiner at the `values.yaml` they
//! install Karpenter with and get the same behaviour (notably which DRA requests are honoured).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::duration::parse_duration;
use crate::feature_gates::{FeatureGate, FeatureGates};

/// A setting with the wrong type or an unusable value, or a `--set` expression that cannot be
/// parsed. Always names the key path or the expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    #[error("--set {expr:?}: {message}")]
    Set { expr: String, message: String },
}

/// A `namespace/name` setting, split.
fn namespaced_name(path: &str, value: &str) -> Result<(String, String), SettingsError> {
    value
        .split_once('/')
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
        .map(|(ns, name)| (ns.to_string(), name.to_string()))
        .ok_or_else(|| invalid(path, format!("{value:?} is not namespace/name")))
}

fn invalid(path: &str, message: impl Into<String>) -> SettingsError {
    SettingsError::Invalid {
        path: path.to_string(),
        message: message.into(),
    }
}

/// Deep-merges `overlay` into `base` as Helm merges values files: maps merge key by key, anything
/// else in `overlay` replaces what `base` had, and a `null` deletes the key (Helm's way to unset a
/// default).
pub fn merge_values(base: &mut Value, overlay: Value) {
    match (base, overlay) {
        (Value::Object(b), Value::Object(o)) => {
            for (key, value) in o {
                if value.is_null() {
                    b.remove(&key);
                    continue;
                }
                match b.get_mut(&key) {
                    Some(existing) if existing.is_object() && value.is_object() => {
                        merge_values(existing, value);
                    }
                    _ => {
                        b.insert(key, value);
                    }
                }
            }
        }
        (b, o) => *b = o,
    }
}

/// List indices in `--set a[3]=x` above this are refused rather than allocated.
const MAX_SET_INDEX: usize = 65_536;

#[derive(Debug, Clone, PartialEq)]
enum Segment {
    Key(String),
    Index(usize),
}

/// Applies a Helm `--set` expression: `a.b.c=v`, several separated by commas, `\.` for a dot
/// inside a key, `\,` for a comma inside a value, `a={x,y}` for a list and `a[0]=x` for a list
/// element. Values are typed as Helm types them: `true`/`false`, `null`, integers (not written
/// with a leading zero), everything else a string.
pub fn apply_set(values: &mut Value, expr: &str) -> Result<(), SettingsError> {
    let err = |message: &str| SettingsError::Set {
        expr: expr.to_string(),
        message: message.to_string(),
    };
    let mut chars = expr.chars().peekable();
    while chars.peek().is_some() {
        // Key: up to the first unescaped `=`.
        let mut key = String::new();
        let mut segments = Vec::new();
        loop {
            match chars.next() {
                Some('\\') => key.push(chars.next().ok_or_else(|| err("ends with a backslash"))?),
                Some('.') => push_key_segment(&mut segments, std::mem::take(&mut key))
                    .map_err(|m| err(&m))?,
                Some('=') => break,
                Some(',') | None => return Err(err("an assignment has no `=value`")),
                Some(c) => key.push(c),
            }
        }
        push_key_segment(&mut segments, key).map_err(|m| err(&m))?;
        // Value: a `{list}` or a scalar up to the next unescaped comma.
        let value = if chars.peek() == Some(&'{') {
            chars.next();
            let mut items = Vec::new();
            let mut item = String::new();
            loop {
                match chars.next() {
                    Some('\\') => {
                        item.push(chars.next().ok_or_else(|| err("ends with a backslash"))?)
                    }
                    Some(',') => items.push(typed(&std::mem::take(&mut item))),
                    Some('}') => break,
                    Some(c) => item.push(c),
                    None => return Err(err("a list `{...}` is not closed")),
                }
            }
            if !item.is_empty() || !items.is_empty() {
                items.push(typed(&item));
            }
            match chars.next() {
                Some(',') | None => {}
                Some(_) => return Err(err("expected `,` after the list")),
            }
            Value::Array(items)
        } else {
            let mut raw = String::new();
            loop {
                match chars.next() {
                    Some('\\') => {
                        raw.push(chars.next().ok_or_else(|| err("ends with a backslash"))?)
                    }
                    Some(',') | None => break,
                    Some(c) => raw.push(c),
                }
            }
            typed(&raw)
        };
        set_path(values, &segments, value).map_err(|m| err(&m))?;
    }
    Ok(())
}

/// Splits `name[1][2]` into a key and indices.
fn push_key_segment(segments: &mut Vec<Segment>, raw: String) -> Result<(), String> {
    let (name, mut rest) = match raw.find('[') {
        Some(i) => raw.split_at(i),
        None => (raw.as_str(), ""),
    };
    if name.is_empty() {
        return Err("a key is empty".to_string());
    }
    segments.push(Segment::Key(name.to_string()));
    while let Some(after) = rest.strip_prefix('[') {
        let (index, next) = after
            .split_once(']')
            .ok_or_else(|| format!("unclosed `[` in key {raw:?}"))?;
        let index: usize = index
            .parse()
            .ok()
            .filter(|i| *i <= MAX_SET_INDEX)
            .ok_or_else(|| format!("bad list index {index:?} in key {raw:?}"))?;
        segments.push(Segment::Index(index));
        rest = next;
    }
    if !rest.is_empty() {
        return Err(format!("unexpected {rest:?} after an index in key {raw:?}"));
    }
    Ok(())
}

fn typed(raw: &str) -> Value {
    match raw {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        "null" => Value::Null,
        "0" => Value::from(0),
        _ if !raw.starts_with('0') => raw
            .parse::<i64>()
            .map_or_else(|_| Value::String(raw.to_string()), Value::from),
        _ => Value::String(raw.to_string()),
    }
}

fn set_path(target: &mut Value, path: &[Segment], value: Value) -> Result<(), String> {
    let Some((first, rest)) = path.split_first() else {
        *target = value;
        return Ok(());
    };
    match first {
        Segment::Key(key) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            let Value::Object(map) = target else {
                return Err("internal: not a map".to_string());
            };
            let slot = map.entry(key.clone()).or_insert(Value::Null);
            set_path(slot, rest, value)
        }
        Segment::Index(index) => {
            if !target.is_array() {
                *target = Value::Array(Vec::new());
            }
            let Value::Array(list) = target else {
                return Err("internal: not a list".to_string());
            };
            if list.len() <= *index {
                list.resize(index.saturating_add(1), Value::Null);
            }
            match list.get_mut(*index) {
                Some(slot) => set_path(slot, rest, value),
                None => Err(format!("list index {index} out of range")),
            }
        }
    }
}

/// Karpenter chart settings Joiner accepts without using: no warning for them.
const UNUSED_KARPENTER_SETTINGS: &[&str] = &[
    "eksControlPlane",
    "isolatedVPC",
    "preferencePolicy",
    "reservedENIs",
];

/// The Kubernetes DRA feature gates Joiner models the effect of.
pub const CLUSTER_FEATURE_GATES: &[&str] = &[
    "DRAPrioritizedList",
    "DRAAdminAccess",
    "DRADeviceTaints",
    "DRAPartitionableDevices",
    "DRAConsumableCapacity",
    "DRADeviceBindingConditions",
    "DRAResourceClaimDeviceStatus",
    "DRAExtendedResource",
    "DRAListTypeAttributes",
];

/// The resolved settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub region: String,
    /// Zones offerings may be in; `<region>a`, `b` and `c` unless given.
    pub zones: Vec<String>,
    pub cluster_name: Option<String>,
    pub cluster_endpoint: Option<String>,
    /// The cluster's CA bundle (base64 PEM), for the nodes' bootstrap; from EKS when unset.
    pub cluster_ca_bundle: Option<String>,
    /// The cluster's Service CIDR (Joiner's `settings.clusterCIDR`), for the nodes' bootstrap;
    /// from EKS when unset.
    pub cluster_cidr: Option<String>,
    pub interruption_queue: Option<String>,
    pub nvidia_device_plugin: NvidiaDevicePlugin,
    /// Where the GPU operator's MIG manager keeps its MIG configs.
    pub nvidia_mig_manager: NvidiaMigManager,
    /// How long the batcher waits for another pending pod before planning.
    pub batch_idle_duration: Duration,
    /// The longest the batcher waits in all.
    pub batch_max_duration: Duration,
    /// Karpenter's own feature gates (`settings.featureGates`), with Karpenter's defaults.
    pub feature_gates: FeatureGates,
    /// What the planner does when a NodeClaim cannot keep a requirement's `minValues`
    /// (`settings.minValuesPolicy`).
    pub min_values_policy: MinValuesPolicy,
    /// Fraction of memory the hypervisor takes (Karpenter's `vmMemoryOverheadPercent`).
    pub vm_memory_overhead_percent: f64,
    pub cluster: ClusterSettings,
    /// Karpenter's `draNVIDIAGPU` gate: model NVIDIA GPUs as DRA devices.
    pub dra_nvidia_gpu: bool,
    /// Karpenter's `draEFA` gate: model EFA interfaces as DRA devices.
    pub dra_efa: bool,
    /// Schedule pods as if their DRA resource claims were not there (Karpenter's default).
    pub ignore_dra_requests: bool,
    /// Karpenter's `RebootForRepair` AWS gate (off by default): node repair reboots a node whose
    /// fault a reboot clears before it replaces it. Acts only with `featureGates.nodeRepair`.
    pub reboot_for_repair: bool,
}

/// Where the NVIDIA device plugin's configuration (time-slicing, MPS) lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvidiaDevicePlugin {
    pub config_map_namespace: String,
    pub config_map_name: String,
    /// The key of the ConfigMap used for nodes without a `nvidia.com/device-plugin.config` label.
    pub default_config: Option<String>,
}

/// Where the GPU operator's MIG manager reads the layouts a node's `nvidia.com/mig.config`
/// names: its mig-parted ConfigMap (`settings.nvidiaMigManager.configMap`). When the cluster has
/// no such ConfigMap, the operator's built-in default configs stand in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvidiaMigManager {
    pub config_map_namespace: String,
    pub config_map_name: String,
}

/// What Joiner must know of the cluster it plans for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// `major.minor`, e.g. `1.36`.
    pub kubernetes_version: String,
    /// Kubernetes feature gates set explicitly; others take the version's default.
    pub feature_gates: BTreeMap<String, bool>,
}

/// Karpenter's `minValuesPolicy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MinValuesPolicy {
    /// A pod whose NodeClaim would offer fewer values of a key than its `minValues` waits
    /// (Karpenter's default).
    #[default]
    Strict,
    /// The NodeClaim launches with as many values as it can offer, and says so
    /// (`karpenter.sh/nodeclaim-min-values-relaxed: "true"`).
    BestEffort,
}

impl Default for Settings {
    fn default() -> Self {
        let region = "us-east-1".to_string();
        Settings {
            zones: default_zones(&region),
            region,
            cluster_name: None,
            cluster_endpoint: None,
            cluster_ca_bundle: None,
            cluster_cidr: None,
            interruption_queue: None,
            nvidia_device_plugin: NvidiaDevicePlugin {
                config_map_namespace: "kube-system".to_string(),
                config_map_name: "nvidia-device-plugin".to_string(),
                default_config: None,
            },
            nvidia_mig_manager: NvidiaMigManager {
                config_map_namespace: "gpu-operator".to_string(),
                config_map_name: "default-mig-parted-config".to_string(),
            },
            batch_idle_duration: Duration::from_secs(1),
            batch_max_duration: Duration::from_secs(10),
            feature_gates: FeatureGates::default(),
            min_values_policy: MinValuesPolicy::Strict,
            vm_memory_overhead_percent: 0.075,
            cluster: ClusterSettings {
                kubernetes_version: "1.36".to_string(),
                feature_gates: BTreeMap::new(),
            },
            dra_nvidia_gpu: false,
            dra_efa: false,
            ignore_dra_requests: true,
            reboot_for_repair: false,
        }
    }
}

fn default_zones(region: &str) -> Vec<String> {
    ["a", "b", "c"]
        .iter()
        .map(|z| format!("{region}{z}"))
        .collect()
}

/// A map of values being read, with its path for messages, recording which keys were read so the
/// rest can be reported as unknown.
struct Section<'a> {
    path: String,
    map: Option<&'a Map<String, Value>>,
    known: Vec<&'static str>,
}

impl<'a> Section<'a> {
    fn new(path: &str, value: Option<&'a Value>) -> Result<Self, SettingsError> {
        let map = match value {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(m),
            Some(_) => return Err(invalid(path, "expected a map")),
        };
        Ok(Section {
            path: path.to_string(),
            map,
            known: Vec::new(),
        })
    }

    fn key_path(&self, key: &str) -> String {
        format!("{}.{key}", self.path)
    }

    /// The value of `key`, `None` when absent or null.
    fn get(&mut self, key: &'static str) -> Option<&'a Value> {
        self.known.push(key);
        self.map.and_then(|m| m.get(key)).filter(|v| !v.is_null())
    }

    fn string(&mut self, key: &'static str) -> Result<Option<String>, SettingsError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(invalid(&self.key_path(key), "expected a string")),
        }
    }

    fn boolean(&mut self, key: &'static str) -> Result<Option<bool>, SettingsError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => as_bool(v)
                .map(Some)
                .ok_or_else(|| invalid(&self.key_path(key), "expected true or false")),
        }
    }

    fn duration(
        &mut self,
        key: &'static str,
        default: Duration,
    ) -> Result<Duration, SettingsError> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::String(s)) => {
                parse_duration(s).map_err(|e| invalid(&self.key_path(key), e.to_string()))
            }
            Some(_) => Err(invalid(
                &self.key_path(key),
                "expected a duration string such as \"10s\"",
            )),
        }
    }

    fn string_list(&mut self, key: &'static str) -> Result<Option<Vec<String>>, SettingsError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let wrong = || invalid(&self.key_path(key), "expected a list of strings");
        let list = v.as_array().ok_or_else(wrong)?;
        list.iter()
            .map(|s| s.as_str().map(str::to_string).ok_or_else(wrong))
            .collect::<Result<_, _>>()
            .map(Some)
    }

    fn bool_map(&mut self, key: &'static str) -> Result<BTreeMap<String, bool>, SettingsError> {
        let path = self.key_path(key);
        let Some(v) = self.get(key) else {
            return Ok(BTreeMap::new());
        };
        let map = v
            .as_object()
            .ok_or_else(|| invalid(&path, "expected a map of names to true or false"))?;
        map.iter()
            .map(|(k, v)| {
                as_bool(v)
                    .map(|b| (k.clone(), b))
                    .ok_or_else(|| invalid(&format!("{path}.{k}"), "expected true or false"))
            })
            .collect()
    }

    fn section(&mut self, key: &'static str) -> Result<Section<'a>, SettingsError> {
        let path = self.key_path(key);
        let value = self.get(key);
        Section::new(&path, value)
    }

    /// Warns about each key not read (and not in `quiet`).
    fn unknown_keys(&self, quiet: &[&str], warnings: &mut Vec<String>) {
        for key in self.map.iter().flat_map(|m| m.keys()) {
            if !self.known.contains(&key.as_str()) && !quiet.contains(&key.as_str()) {
                warnings.push(format!("{}.{key}: unknown setting, ignored", self.path));
            }
        }
    }
}

/// Booleans as YAML writes them, and as strings (chart templates render both the same).
fn as_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) if s == "true" => Some(true),
        Value::String(s) if s == "false" => Some(false),
        _ => None,
    }
}

impl Settings {
    /// Reads `settings.*` from merged values; other top-level keys (the chart's `controller`,
    /// `serviceAccount`, ...) are accepted silently. Returns warnings for unknown settings.
    pub fn from_values(values: &Value) -> Result<(Settings, Vec<String>), SettingsError> {
        let mut warnings = Vec::new();
        let settings = match values {
            Value::Null => None,
            Value::Object(m) => m.get("settings"),
            _ => return Err(invalid("values", "expected a map")),
        };
        let mut s = Section::new("settings", settings)?;
        let mut out = Settings::default();

        if let Some(region) = s.string("region")? {
            out.zones = default_zones(&region);
            out.region = region;
        }
        if let Some(zones) = s.string_list("zones")? {
            out.zones = zones;
        }
        // The chart's defaults spell "unset" as an empty string.
        let non_empty = |v: Option<String>| v.filter(|s| !s.is_empty());
        out.cluster_name = non_empty(s.string("clusterName")?);
        out.cluster_endpoint = non_empty(s.string("clusterEndpoint")?);
        out.cluster_ca_bundle = non_empty(s.string("clusterCABundle")?);
        out.cluster_cidr = non_empty(s.string("clusterCIDR")?);
        out.interruption_queue = non_empty(s.string("interruptionQueue")?);
        out.batch_idle_duration = s.duration("batchIdleDuration", out.batch_idle_duration)?;
        out.batch_max_duration = s.duration("batchMaxDuration", out.batch_max_duration)?;
        out.feature_gates = FeatureGates::from_values(
            "settings.featureGates",
            &s.bool_map("featureGates")?,
            &mut warnings,
        );
        match s.string("minValuesPolicy")?.as_deref() {
            None | Some("Strict") => {}
            Some("BestEffort") => out.min_values_policy = MinValuesPolicy::BestEffort,
            Some(other) => {
                return Err(invalid(
                    "settings.minValuesPolicy",
                    format!("{other:?} is not a policy: expected Strict or BestEffort"),
                ));
            }
        }
        if let Some(v) = s.get("vmMemoryOverheadPercent") {
            out.vm_memory_overhead_percent = v
                .as_f64()
                .filter(|p| (0.0..1.0).contains(p))
                .ok_or_else(|| {
                    invalid(
                        "settings.vmMemoryOverheadPercent",
                        "expected a fraction between 0 and 1, such as 0.075",
                    )
                })?;
        }

        let mut ndp = s.section("nvidiaDevicePlugin")?;
        if let Some(cm) = ndp.string("configMap")? {
            let (ns, name) = namespaced_name("settings.nvidiaDevicePlugin.configMap", &cm)?;
            out.nvidia_device_plugin.config_map_namespace = ns;
            out.nvidia_device_plugin.config_map_name = name;
        }
        out.nvidia_device_plugin.default_config = ndp.string("defaultConfig")?;
        ndp.unknown_keys(&[], &mut warnings);

        let mut nmm = s.section("nvidiaMigManager")?;
        if let Some(cm) = nmm.string("configMap")? {
            let (ns, name) = namespaced_name("settings.nvidiaMigManager.configMap", &cm)?;
            out.nvidia_mig_manager.config_map_namespace = ns;
            out.nvidia_mig_manager.config_map_name = name;
        }
        nmm.unknown_keys(&[], &mut warnings);

        let mut cluster = s.section("cluster")?;
        if let Some(v) = cluster.get("kubernetesVersion") {
            out.cluster.kubernetes_version = kubernetes_version(v)?;
        }
        out.cluster.feature_gates = cluster.bool_map("featureGates")?;
        for gate in out.cluster.feature_gates.keys() {
            if !CLUSTER_FEATURE_GATES.contains(&gate.as_str()) {
                warnings.push(format!(
                    "settings.cluster.featureGates.{gate}: not a feature gate Joiner models, ignored"
                ));
            }
        }
        cluster.unknown_keys(&[], &mut warnings);

        resolve_dra(&mut s, &mut out, &mut warnings)?;
        dra_needs_v1(&mut out, &mut warnings);
        s.unknown_keys(UNUSED_KARPENTER_SETTINGS, &mut warnings);
        Ok((out, warnings))
    }
}

/// `1.36`, `v1.36` or `1.36.2`, as `1.36`. A YAML number is refused: `1.30` would read as 1.3.
fn kubernetes_version(v: &Value) -> Result<String, SettingsError> {
    const PATH: &str = "settings.cluster.kubernetesVersion";
    let Value::String(text) = v else {
        return Err(invalid(
            PATH,
            "expected a string such as \"1.36\" (quote it: YAML reads 1.30 as the number 1.3)",
        ));
    };
    let trimmed = text.strip_prefix('v').unwrap_or(text);
    let mut parts = trimmed.split('.');
    match (parts.next(), parts.next()) {
        (Some(major), Some(minor))
            if major.parse::<u32>().is_ok()
                && minor.parse::<u32>().is_ok()
                && parts.all(|p| p.parse::<u32>().is_ok()) =>
        {
            Ok(format!("{major}.{minor}"))
        }
        _ => Err(invalid(
            PATH,
            format!("{text:?} is not a version such as \"1.36\""),
        )),
    }
}

/// The first Kubernetes minor version that serves DRA as `resource.k8s.io/v1`, the only
/// version Joiner reads.
pub const DRA_SINCE_MINOR: u32 = 34;

/// DRA asked for on a cluster older than 1.34 is switched off with a warning: its API server
/// serves no `resource.k8s.io/v1`, so claims could never be read, and pods would wait on claims
/// Joiner cannot see rather than be planned as Karpenter plans them with DRA ignored.
fn dra_needs_v1(out: &mut Settings, warnings: &mut Vec<String>) {
    let mut parts = out.cluster.kubernetes_version.split('.');
    let version = (
        parts.next().and_then(|p| p.parse::<u32>().ok()),
        parts.next().and_then(|p| p.parse::<u32>().ok()),
    );
    let (Some(major), Some(minor)) = version else {
        return;
    };
    if (major, minor) >= (1, DRA_SINCE_MINOR) || out.ignore_dra_requests {
        return;
    }
    warnings.push(format!(
        "settings.cluster.kubernetesVersion: {major}.{minor} serves no resource.k8s.io/v1 (DRA needs Kubernetes 1.{DRA_SINCE_MINOR} or later): DRA is switched off, its requests ignored as with settings.ignoreDRARequests=true"
    ));
    out.dra_nvidia_gpu = false;
    out.dra_efa = false;
    out.ignore_dra_requests = true;
}

/// DRA as Karpenter's chart has it: `enableDRA` is shorthand for both AWS DRA gates on and DRA
/// requests honoured; each gate can instead be turned on alone (which also stops ignoring DRA
/// requests). Mixing the shorthand with the individual settings is refused, since which one wins
/// would be a guess.
fn resolve_dra(
    s: &mut Section<'_>,
    out: &mut Settings,
    warnings: &mut Vec<String>,
) -> Result<(), SettingsError> {
    let enable = s.boolean("enableDRA")?;
    let ignore = s.boolean("ignoreDRARequests")?;
    let mut gates = s.section("awsFeatureGates")?;
    let nvidia = gates.boolean("draNVIDIAGPU")?;
    let efa = gates.boolean("draEFA")?;
    if gates.boolean("nodeClassCEL")? == Some(true) {
        warnings.push(
            "settings.awsFeatureGates.nodeClassCEL: accepted, not acted on by Joiner: Joiner \
             reads no CEL expressions in an EC2NodeClass's kubelet settings"
                .to_string(),
        );
    }
    out.reboot_for_repair = gates.boolean("rebootForRepair")? == Some(true);
    if out.reboot_for_repair && !out.feature_gates.enabled(FeatureGate::NodeRepair) {
        warnings.push(
            "settings.awsFeatureGates.rebootForRepair: on, but it acts only through node repair, \
             which is off (settings.featureGates.nodeRepair)"
                .to_string(),
        );
    }
    gates.unknown_keys(&[], warnings);

    if enable == Some(true) {
        let explicit: Vec<&str> = [
            (nvidia.is_some(), "settings.awsFeatureGates.draNVIDIAGPU"),
            (efa.is_some(), "settings.awsFeatureGates.draEFA"),
            (ignore.is_some(), "settings.ignoreDRARequests"),
        ]
        .iter()
        .filter(|(set, _)| *set)
        .map(|(_, name)| *name)
        .collect();
        if !explicit.is_empty() {
            return Err(invalid(
                "settings.enableDRA",
                format!(
                    "cannot be combined with {}: enableDRA already turns on both DRA gates and \
                     stops ignoring DRA requests; set either enableDRA or the individual settings",
                    explicit.join(" and ")
                ),
            ));
        }
        out.dra_nvidia_gpu = true;
        out.dra_efa = true;
        out.ignore_dra_requests = false;
        return Ok(());
    }
    out.dra_nvidia_gpu = nvidia.unwrap_or(false);
    out.dra_efa = efa.unwrap_or(false);
    let any_gate = out.dra_nvidia_gpu || out.dra_efa;
    if ignore == Some(true) && any_gate {
        return Err(invalid(
            "settings.ignoreDRARequests",
            "true contradicts an enabled DRA gate in settings.awsFeatureGates: a DRA gate \
             needs DRA requests to be honoured",
        ));
    }
    out.ignore_dra_requests = ignore.unwrap_or(!any_gate);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feature_gates::FeatureGate;
    use serde_json::json;

    fn yaml(text: &str) -> Value {
        serde_saphyr::from_str(text).unwrap()
    }

    fn settings(text: &str) -> Result<(Settings, Vec<String>), SettingsError> {
        Settings::from_values(&yaml(text))
    }

    #[test]
    fn min_values_policy_is_strict_or_best_effort() {
        let (s, warnings) = settings("settings: {minValuesPolicy: Strict}").unwrap();
        assert!(warnings.is_empty());
        assert_eq!(s.min_values_policy, MinValuesPolicy::Strict);
        let (s, warnings) = settings("settings: {minValuesPolicy: BestEffort}").unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(s.min_values_policy, MinValuesPolicy::BestEffort);
        let e = settings("settings: {minValuesPolicy: Loose}").unwrap_err();
        assert!(e.to_string().contains("settings.minValuesPolicy"), "{e}");
    }

    #[test]
    fn feature_gates_turned_on_that_joiner_does_not_act_on_say_so() {
        let (s, warnings) = settings(
            "settings:\n  featureGates: {spotToSpotConsolidation: true, capacityBuffer: true}\n  \
             awsFeatureGates: {nodeClassCEL: true}\n",
        )
        .unwrap();
        assert!(
            s.feature_gates
                .enabled(FeatureGate::SpotToSpotConsolidation)
        );
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings
                .iter()
                .any(|w| w.starts_with("settings.awsFeatureGates.nodeClassCEL: accepted"))
        );
    }

    #[test]
    fn reboot_for_repair_is_an_aws_gate_that_needs_node_repair() {
        let (s, warnings) =
            settings("settings: {awsFeatureGates: {rebootForRepair: true}}").unwrap();
        assert!(s.reboot_for_repair);
        assert!(
            warnings
                .iter()
                .any(|w| w.starts_with("settings.awsFeatureGates.rebootForRepair: on, but")),
            "{warnings:?}"
        );
        let (s, warnings) = settings(
            "settings: {featureGates: {nodeRepair: true}, awsFeatureGates: {rebootForRepair: true}}",
        )
        .unwrap();
        assert!(s.reboot_for_repair && warnings.is_empty(), "{warnings:?}");
        let (s, _) = settings("settings: {}").unwrap();
        assert!(!s.reboot_for_repair, "off by default, as in Karpenter");
    }

    #[test]
    fn merge_is_deep_and_the_overlay_wins() {
        let mut base = json!({"settings": {"region": "us-east-1", "featureGates": {"a": true}}, "replicas": 2});
        merge_values(
            &mut base,
            json!({"settings": {"featureGates": {"b": false}, "region": "eu-west-1"}, "replicas": null}),
        );
        assert_eq!(
            base,
            json!({"settings": {"region": "eu-west-1", "featureGates": {"a": true, "b": false}}})
        );
    }

    #[test]
    fn set_types_values_like_helm() {
        let mut v = json!({});
        apply_set(
            &mut v,
            "settings.enableDRA=true,settings.n=42,settings.zip=0123,settings.x=null",
        )
        .unwrap();
        apply_set(
            &mut v,
            "settings.clusterName=my\\,cluster,settings.ver=1.36,settings.e=",
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"settings": {"enableDRA": true, "n": 42, "zip": "0123", "x": null,
                "clusterName": "my,cluster", "ver": "1.36", "e": ""}})
        );
    }

    #[test]
    fn set_handles_escaped_dots_lists_and_indices() {
        let mut v = json!({});
        apply_set(&mut v, "nodeSelector.kubernetes\\.io/os=linux").unwrap();
        apply_set(
            &mut v,
            "settings.zones={us-west-2a,us-west-2b},b.c[1]=x,e={}",
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"nodeSelector": {"kubernetes.io/os": "linux"},
                "settings": {"zones": ["us-west-2a", "us-west-2b"]},
                "b": {"c": [null, "x"]}, "e": []})
        );
        for bad in [
            "novalue",
            "a.=1",
            "a={x,y",
            "a[x]=1",
            "a[99999999]=1",
            "a=1,b",
        ] {
            assert!(apply_set(&mut v, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn defaults() {
        let (s, warnings) = Settings::from_values(&json!({})).unwrap();
        assert!(warnings.is_empty());
        assert_eq!(s, Settings::default());
        assert_eq!(s.zones, ["us-east-1a", "us-east-1b", "us-east-1c"]);
        assert_eq!(s.batch_idle_duration, Duration::from_secs(1));
        assert_eq!(s.batch_max_duration, Duration::from_secs(10));
        assert_eq!(s.cluster.kubernetes_version, "1.36");
        assert_eq!(s.nvidia_device_plugin.config_map_namespace, "kube-system");
        assert_eq!(
            s.nvidia_device_plugin.config_map_name,
            "nvidia-device-plugin"
        );
        assert!(s.ignore_dra_requests && !s.dra_nvidia_gpu && !s.dra_efa);
        let (s, _) = settings("settings: {clusterName: '', interruptionQueue: ''}").unwrap();
        assert_eq!(
            s,
            Settings::default(),
            "empty strings mean unset, as in the chart"
        );
    }

    #[test]
    fn reads_every_setting() {
        let (s, warnings) = settings(
            r#"
controller: {resources: {}}
serviceAccount: {create: true}
settings:
  region: eu-west-1
  clusterName: demo
  clusterEndpoint: https://example
  interruptionQueue: demo-q
  nvidiaDevicePlugin: {configMap: gpu-operator/time-slicing, defaultConfig: any}
  nvidiaMigManager: {configMap: gpu-operator/custom-mig-parted-config}
  batchIdleDuration: 2s
  batchMaxDuration: 1m30s
  featureGates: {spotToSpotConsolidation: true}
  cluster:
    kubernetesVersion: "v1.34.1"
    featureGates: {DRAConsumableCapacity: true}
  reservedENIs: "0"
"#,
        )
        .unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(s.zones, ["eu-west-1a", "eu-west-1b", "eu-west-1c"]);
        assert_eq!(s.cluster_name.as_deref(), Some("demo"));
        assert_eq!(s.nvidia_device_plugin.config_map_namespace, "gpu-operator");
        assert_eq!(s.nvidia_device_plugin.config_map_name, "time-slicing");
        assert_eq!(
            s.nvidia_device_plugin.default_config.as_deref(),
            Some("any")
        );
        assert_eq!(
            s.nvidia_mig_manager.config_map_name,
            "custom-mig-parted-config"
        );
        assert_eq!(s.batch_max_duration, Duration::from_secs(90));
        assert!(
            s.feature_gates
                .enabled(FeatureGate::SpotToSpotConsolidation)
        );
        assert_eq!(s.cluster.kubernetes_version, "1.34");
        assert_eq!(
            s.cluster.feature_gates.get("DRAConsumableCapacity"),
            Some(&true)
        );
    }

    #[test]
    fn dra_is_switched_off_below_1_34_with_a_warning() {
        let values = serde_json::json!({"settings": {"enableDRA": true,
            "cluster": {"kubernetesVersion": "1.30"}}});
        let (s, warnings) = Settings::from_values(&values).unwrap();
        assert!(s.ignore_dra_requests && !s.dra_nvidia_gpu && !s.dra_efa);
        assert!(
            warnings
                .iter()
                .any(|w| w.starts_with("settings.cluster.kubernetesVersion: 1.30")),
            "{warnings:?}"
        );
        let values = serde_json::json!({"settings": {"enableDRA": true,
            "cluster": {"kubernetesVersion": "1.34"}}});
        let (s, warnings) = Settings::from_values(&values).unwrap();
        assert!(!s.ignore_dra_requests && s.dra_nvidia_gpu);
        assert!(warnings.is_empty(), "{warnings:?}");
        // DRA left off (Karpenter's default) says nothing on an old cluster.
        let values = serde_json::json!({"settings": {"cluster": {"kubernetesVersion": "1.31"}}});
        let (_, warnings) = Settings::from_values(&values).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn wrong_types_name_the_key() {
        let cases = [
            (
                "settings: {zones: us-east-1a}",
                "settings.zones: expected a list of strings",
            ),
            (
                "settings: {zones: [1]}",
                "settings.zones: expected a list of strings",
            ),
            (
                "settings: {batchIdleDuration: 10}",
                "settings.batchIdleDuration",
            ),
            (
                "settings: {batchIdleDuration: 1d}",
                "settings.batchIdleDuration",
            ),
            (
                "settings: {cluster: {kubernetesVersion: 1.30}}",
                "settings.cluster.kubernetesVersion",
            ),
            (
                "settings: {nvidiaDevicePlugin: {configMap: just-a-name}}",
                "settings.nvidiaDevicePlugin.configMap",
            ),
            (
                "settings: {nvidiaMigManager: {configMap: a/b/c}}",
                "settings.nvidiaMigManager.configMap",
            ),
            (
                "settings: {cluster: {featureGates: {DRAAdminAccess: maybe}}}",
                "settings.cluster.featureGates.DRAAdminAccess",
            ),
            ("settings: [a]", "settings: expected a map"),
        ];
        for (text, expected) in cases {
            let e = settings(text).unwrap_err().to_string();
            assert!(e.starts_with(expected), "{text}: {e}");
        }
    }

    #[test]
    fn unknown_settings_are_warnings() {
        let (_, warnings) = settings(
            "settings: {regoin: x, cluster: {featureGates: {Foo: true}}, awsFeatureGates: {draNvidiaGPU: true}}",
        )
        .unwrap();
        assert_eq!(
            warnings,
            [
                "settings.cluster.featureGates.Foo: not a feature gate Joiner models, ignored",
                "settings.awsFeatureGates.draNvidiaGPU: unknown setting, ignored",
                "settings.regoin: unknown setting, ignored",
            ]
        );
    }

    #[test]
    fn dra_follows_the_karpenter_chart() {
        let (s, _) = settings("settings: {enableDRA: true}").unwrap();
        assert!(s.dra_nvidia_gpu && s.dra_efa && !s.ignore_dra_requests);

        let (s, _) = settings("settings: {awsFeatureGates: {draNVIDIAGPU: true}}").unwrap();
        assert!(s.dra_nvidia_gpu && !s.dra_efa && !s.ignore_dra_requests);

        let (s, _) = settings("settings: {awsFeatureGates: {draEFA: true}}").unwrap();
        assert!(!s.dra_nvidia_gpu && s.dra_efa && !s.ignore_dra_requests);

        let (s, _) = settings("settings: {ignoreDRARequests: false}").unwrap();
        assert!(!s.dra_nvidia_gpu && !s.ignore_dra_requests);

        let (s, _) = settings("settings: {enableDRA: false}").unwrap();
        assert!(!s.dra_nvidia_gpu && s.ignore_dra_requests);
    }

    #[test]
    fn enable_dra_with_explicit_gates_is_an_error() {
        for text in [
            "settings: {enableDRA: true, awsFeatureGates: {draEFA: false}}",
            "settings: {enableDRA: true, ignoreDRARequests: false}",
        ] {
            let e = settings(text).unwrap_err().to_string();
            assert!(
                e.starts_with("settings.enableDRA: cannot be combined with"),
                "{e}"
            );
        }
        let e =
            settings("settings: {ignoreDRARequests: true, awsFeatureGates: {draNVIDIAGPU: true}}")
                .unwrap_err()
                .to_string();
        assert!(e.starts_with("settings.ignoreDRARequests"), "{e}");
    }
}
