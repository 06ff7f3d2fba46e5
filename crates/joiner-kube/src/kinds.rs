//! Where each kind of Joiner's table ([`joiner_model::kinds::KINDS`]) is watched: its `live`
//! column says whether the controller needs it, may do without it, or reads one object by name.

use joiner_model::api::capacitybuffer::CapacityBuffer;
use joiner_model::api::{EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use joiner_model::kinds::{KINDS, Kind, Live};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttachment};
use kube::runtime::watcher;

use crate::registry::{Registry, Scope};

/// Starts a watch for every kind the table says the live controller reads. Optional kinds (the
/// DRA kinds: clusters before Kubernetes 1.34, or with `resource.k8s.io/v1` off, do not serve
/// them) read as empty while the API server does not serve them.
pub(crate) fn watch_all(b: &mut Registry) {
    for row in KINDS {
        let required = match row.live {
            Live::Required | Live::Named => true,
            Live::Optional | Live::IfServed => false,
            Live::NotRead(_) => continue,
        };
        match row.kind {
            Kind::Pod => b.watch::<Pod>(Scope::All, required),
            Kind::Node => b.watch::<Node>(Scope::All, required),
            Kind::DaemonSet => b.watch::<DaemonSet>(Scope::All, required),
            Kind::ConfigMap => {
                // Only the device-plugin and MIG manager configs the settings name, each by name.
                let named: Vec<(String, String)> =
                    b.options().config_maps().into_iter().cloned().collect();
                for (ns, name) in named {
                    let by_name =
                        watcher::Config::default().fields(&format!("metadata.name={name}"));
                    b.watch::<ConfigMap>(Scope::Namespace(&ns, by_name), required);
                }
            }
            Kind::NodePool => b.watch::<NodePool>(Scope::All, required),
            Kind::NodeClaim => b.watch::<NodeClaim>(Scope::All, required),
            Kind::EC2NodeClass => b.watch::<EC2NodeClass>(Scope::All, required),
            Kind::PodDisruptionBudget => b.watch::<PodDisruptionBudget>(Scope::All, required),
            Kind::VolumeAttachment => b.watch::<VolumeAttachment>(Scope::All, required),
            Kind::PersistentVolumeClaim => b.watch::<PersistentVolumeClaim>(Scope::All, required),
            Kind::PersistentVolume => b.watch::<PersistentVolume>(Scope::All, required),
            Kind::StorageClass => b.watch::<StorageClass>(Scope::All, required),
            Kind::NodeOverlay => b.watch::<NodeOverlay>(Scope::All, required),
            Kind::PodTemplate => b.watch::<PodTemplate>(Scope::All, required),
            Kind::CapacityBuffer => b.watch::<CapacityBuffer>(Scope::All, required),
            Kind::DeviceClass => b.watch::<DeviceClass>(Scope::All, required),
            Kind::DeviceTaintRule => b.watch::<DeviceTaintRule>(Scope::All, required),
            Kind::ResourceClaim => b.watch::<ResourceClaim>(Scope::All, required),
            Kind::ResourceClaimTemplate => b.watch::<ResourceClaimTemplate>(Scope::All, required),
            Kind::ResourceSlice => b.watch::<ResourceSlice>(Scope::All, required),
            // The table marks these not read live; reaching here means it changed.
            Kind::Deployment
            | Kind::ReplicaSet
            | Kind::StatefulSet
            | Kind::Job
            | Kind::InstanceType => {
                tracing::warn!(kind = row.name, "no watch for this kind; it reads as empty");
            }
        }
    }
}
