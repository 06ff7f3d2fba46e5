//! The kinds the controller reads, and where each is watched.

use joiner_controller::nodeclaim::NodeClaim;
use joiner_model::api::{EC2NodeClass, NodePool};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::runtime::watcher;

use crate::registry::{Registry, Scope};

/// Every kind `joiner_controller` lists (each `Resource` in its `store::object`, and
/// PodDisruptionBudgets for drains). The DRA kinds are optional: clusters before Kubernetes
/// 1.34 (or with `resource.k8s.io/v1` off) do not serve them, and they then read as empty.
pub(crate) fn watch_all(b: &mut Registry) {
    b.watch::<Pod>(Scope::All, true);
    b.watch::<Node>(Scope::All, true);
    b.watch::<DaemonSet>(Scope::All, true);
    let (ns, name) = b.options().device_plugin_config_map.clone();
    let by_name = watcher::Config::default().fields(&format!("metadata.name={name}"));
    b.watch::<ConfigMap>(Scope::Namespace(&ns, by_name), true);
    b.watch::<NodePool>(Scope::All, true);
    b.watch::<NodeClaim>(Scope::All, true);
    b.watch::<EC2NodeClass>(Scope::All, true);
    b.watch::<PodDisruptionBudget>(Scope::All, true);
    b.watch::<DeviceClass>(Scope::All, false);
    b.watch::<ResourceClaim>(Scope::All, false);
    b.watch::<ResourceClaimTemplate>(Scope::All, false);
    b.watch::<ResourceSlice>(Scope::All, false);
}
