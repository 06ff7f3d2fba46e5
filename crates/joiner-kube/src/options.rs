//! What the store watches beyond the defaults.

use std::time::Duration;

use joiner_model::settings::Settings;

/// Options of [`crate::KubeStore::start_with`]; [`crate::KubeStore::start`] takes the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// `namespace` and `name` of the NVIDIA device-plugin ConfigMap
    /// (`settings.nvidiaDevicePlugin.configMap`). It and the MIG manager's are the only
    /// ConfigMaps the planner reads, so they are the only ones watched (a field selector on the
    /// name, in its namespace): a cluster's ConfigMaps can be many and large. Other ConfigMaps
    /// read as absent.
    pub device_plugin_config_map: (String, String),
    /// `namespace` and `name` of the GPU operator MIG manager's mig-parted ConfigMap
    /// (`settings.nvidiaMigManager.configMap`), watched the same way.
    pub mig_parted_config_map: (String, String),
    /// How long one API call of a write may take before it fails with
    /// `StoreError::Unavailable` (the controller retries on its next step).
    pub write_timeout: Duration,
    /// How long a write of this process may shadow the cache when the watch never shows it.
    pub overlay_ttl: Duration,
    /// Kinds whose `status` this process writes, through the `status` subresource after the
    /// main write (which the API server stores without it). By default only NodeClaims, the
    /// controller's own: the controller changes a Node's labels and taints, never the status
    /// its kubelet reports. The simulated cloud's kubelet (`--cloud simulated`) adds `Node`.
    pub status_kinds: Vec<&'static str>,
    /// Kinds of which this process writes only the status: an update is a `PUT …/status`
    /// alone, never a PUT of the object. EC2NodeClasses, NodePools, NodeOverlays and CapacityBuffers are the user's:
    /// the controller writes what it found of them (resolved selectors, node counts, readiness),
    /// and a PUT of the whole object from Joiner's types would drop any field of a newer CRD
    /// they do not know.
    pub status_only_kinds: Vec<&'static str>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            device_plugin_config_map: ("kube-system".into(), "nvidia-device-plugin".into()),
            mig_parted_config_map: ("gpu-operator".into(), "default-mig-parted-config".into()),
            write_timeout: Duration::from_secs(30),
            overlay_ttl: Duration::from_secs(120),
            status_kinds: vec!["NodeClaim"],
            status_only_kinds: vec!["EC2NodeClass", "NodePool", "NodeOverlay", "CapacityBuffer"],
        }
    }
}

impl StoreOptions {
    /// The defaults, with the ConfigMap the settings name.
    pub fn from_settings(settings: &Settings) -> StoreOptions {
        let ndp = &settings.nvidia_device_plugin;
        let nmm = &settings.nvidia_mig_manager;
        StoreOptions {
            device_plugin_config_map: (
                ndp.config_map_namespace.clone(),
                ndp.config_map_name.clone(),
            ),
            mig_parted_config_map: (
                nmm.config_map_namespace.clone(),
                nmm.config_map_name.clone(),
            ),
            ..StoreOptions::default()
        }
    }

    /// The ConfigMaps the store reads, by `(namespace, name)`, each once.
    pub fn config_maps(&self) -> Vec<&(String, String)> {
        let mut out = vec![&self.device_plugin_config_map];
        if self.mig_parted_config_map != self.device_plugin_config_map {
            out.push(&self.mig_parted_config_map);
        }
        out
    }
}
