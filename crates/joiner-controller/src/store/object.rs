//! The kinds a [`super::ClusterStore`] holds, and how to name one object.

use std::fmt;

use joiner_model::api::capacitybuffer::CapacityBuffer;
use joiner_model::api::{EC2NodeClass, NodeOverlay, NodePool};
use joiner_model::kinds::Kind;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttachment};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;

use joiner_model::api::nodeclaim::NodeClaim;

/// A kind the controller stores: its API coordinates and its metadata.
pub trait Resource: Clone + Serialize + DeserializeOwned + Send + Sync + 'static {
    /// Its row in Joiner's table of kinds ([`joiner_model::kinds::KINDS`]).
    const TABLE: Kind;
    const API_VERSION: &'static str;
    const KIND: &'static str;
    /// The resource name in URLs (`nodeclaims`).
    const PLURAL: &'static str;
    const NAMESPACED: bool;
    fn meta(&self) -> &ObjectMeta;
    fn meta_mut(&mut self) -> &mut ObjectMeta;
}

/// `kind/namespace/name` of one object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub kind: &'static str,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectKey {
    pub fn of<K: Resource>(namespace: Option<&str>, name: &str) -> ObjectKey {
        ObjectKey {
            kind: K::KIND,
            // Namespaced objects without a namespace live in `default`, as kubectl puts them.
            namespace: K::NAMESPACED.then(|| namespace.unwrap_or("default").to_string()),
            name: name.to_string(),
        }
    }

    pub fn for_object<K: Resource>(object: &K) -> ObjectKey {
        let m = object.meta();
        ObjectKey::of::<K>(
            m.namespace.as_deref(),
            m.name.as_deref().unwrap_or_default(),
        )
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{}/{}", self.kind, ns, self.name),
            None => write!(f, "{}/{}", self.kind, self.name),
        }
    }
}

/// Kubernetes' own kinds take their coordinates from k8s-openapi.
macro_rules! k8s_resource {
    ($($t:ty => $kind:expr),* $(,)?) => {$(
        impl Resource for $t {
            const TABLE: Kind = $kind;
            const API_VERSION: &'static str = <$t as k8s_openapi::Resource>::API_VERSION;
            const KIND: &'static str = <$t as k8s_openapi::Resource>::KIND;
            const PLURAL: &'static str = <$t as k8s_openapi::Resource>::URL_PATH_SEGMENT;
            const NAMESPACED: bool = $kind.info().namespaced;
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    )*};
}

k8s_resource!(
    Pod => Kind::Pod,
    Node => Kind::Node,
    ConfigMap => Kind::ConfigMap,
    DaemonSet => Kind::DaemonSet,
    DeviceClass => Kind::DeviceClass,
    DeviceTaintRule => Kind::DeviceTaintRule,
    ResourceClaim => Kind::ResourceClaim,
    ResourceClaimTemplate => Kind::ResourceClaimTemplate,
    ResourceSlice => Kind::ResourceSlice,
    PodDisruptionBudget => Kind::PodDisruptionBudget,
    VolumeAttachment => Kind::VolumeAttachment,
    PersistentVolumeClaim => Kind::PersistentVolumeClaim,
    PersistentVolume => Kind::PersistentVolume,
    StorageClass => Kind::StorageClass,
    PodTemplate => Kind::PodTemplate,
    Deployment => Kind::Deployment,
    StatefulSet => Kind::StatefulSet,
    ReplicaSet => Kind::ReplicaSet,
);

/// Custom resources Joiner defines the types of.
macro_rules! custom_resource {
    ($t:ty, $kind:expr, $plural:expr) => {
        impl Resource for $t {
            const TABLE: Kind = $kind;
            // The served version is the table's first.
            const API_VERSION: &'static str = $kind.info().versions[0];
            const KIND: &'static str = $kind.as_str();
            const PLURAL: &'static str = $plural;
            const NAMESPACED: bool = $kind.info().namespaced;
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

custom_resource!(NodeClaim, Kind::NodeClaim, "nodeclaims");
custom_resource!(NodePool, Kind::NodePool, "nodepools");
custom_resource!(EC2NodeClass, Kind::EC2NodeClass, "ec2nodeclasses");
custom_resource!(NodeOverlay, Kind::NodeOverlay, "nodeoverlays");
custom_resource!(CapacityBuffer, Kind::CapacityBuffer, "capacitybuffers");

#[cfg(test)]
mod tests {
    use super::*;

    fn agrees<K: Resource>() {
        let row = K::TABLE.info();
        assert_eq!(row.name, K::KIND);
        assert_eq!(row.namespaced, K::NAMESPACED, "{}", K::KIND);
        assert!(row.versions.contains(&K::API_VERSION), "{}", K::KIND);
    }

    /// Kubernetes' own coordinates (from k8s-openapi) agree with Joiner's table of kinds.
    #[test]
    fn stored_kinds_agree_with_the_table() {
        agrees::<Pod>();
        agrees::<Node>();
        agrees::<ConfigMap>();
        agrees::<DaemonSet>();
        agrees::<DeviceClass>();
        agrees::<DeviceTaintRule>();
        agrees::<ResourceClaim>();
        agrees::<ResourceClaimTemplate>();
        agrees::<ResourceSlice>();
        agrees::<PodDisruptionBudget>();
        agrees::<VolumeAttachment>();
        agrees::<NodeClaim>();
        agrees::<NodePool>();
        agrees::<EC2NodeClass>();
    }
}
