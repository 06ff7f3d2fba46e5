//! The kinds Joiner reads: one table for `joiner plan`'s file reader, the in-memory cluster of
//! `joiner simulate` and the tests, and the live controller's watches.
//!
//! Each place that handles kinds matches on [`Kind`] exhaustively, so a kind added here must be
//! handled (or consciously skipped) everywhere before the workspace compiles again.

use std::fmt;

/// A kind Joiner reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Pod,
    Node,
    Deployment,
    ReplicaSet,
    StatefulSet,
    DaemonSet,
    Job,
    NodePool,
    NodeClaim,
    EC2NodeClass,
    InstanceType,
    ConfigMap,
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    DeviceTaintRule,
    PodDisruptionBudget,
    VolumeAttachment,
    PersistentVolumeClaim,
    PersistentVolume,
    StorageClass,
    NodeOverlay,
    PodTemplate,
    CapacityBuffer,
}

/// How the live controller reads a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Live {
    /// Watched cluster-wide; the controller is not ready until it is listed.
    Required,
    /// Watched cluster-wide when the API server serves it; reads as empty otherwise (the DRA
    /// kinds on clusters before Kubernetes 1.34 or with `resource.k8s.io/v1` off).
    Optional,
    /// As [`Live::Optional`], and a server that does not serve the kind holds none of it, so
    /// nothing is missed and nothing is said (DeviceTaintRules before Kubernetes 1.37, whose
    /// earlier versions are off unless switched on).
    IfServed,
    /// Only the one object the settings name is watched (the device-plugin ConfigMap).
    Named,
    /// Not read by the live controller, for the reason given.
    NotRead(&'static str),
}

/// What Joiner knows of a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindInfo {
    pub kind: Kind,
    /// The kind as `kind:` spells it.
    pub name: &'static str,
    /// The API versions accepted in files, the served (storage) version first.
    pub versions: &'static [&'static str],
    pub namespaced: bool,
    pub live: Live,
}

const WORKLOAD: Live = Live::NotRead(
    "in a cluster its controller has already made the pods, which are read instead; files \
     expand it into pods",
);

/// The versions of the DRA kinds the API server still serves; files in the older two are
/// converted (`crate::dra::convert`).
const DRA_VERSIONS: &[&str] = &[
    "resource.k8s.io/v1",
    "resource.k8s.io/v1beta2",
    "resource.k8s.io/v1beta1",
];

/// Every kind Joiner reads, one row per [`Kind`] in the variants' order.
pub const KINDS: &[KindInfo] = &[
    info(Kind::Pod, "Pod", &["v1"], true, Live::Required),
    info(Kind::Node, "Node", &["v1"], false, Live::Required),
    info(Kind::Deployment, "Deployment", &["apps/v1"], true, WORKLOAD),
    info(Kind::ReplicaSet, "ReplicaSet", &["apps/v1"], true, WORKLOAD),
    info(
        Kind::StatefulSet,
        "StatefulSet",
        &["apps/v1"],
        true,
        WORKLOAD,
    ),
    info(
        Kind::DaemonSet,
        "DaemonSet",
        &["apps/v1"],
        true,
        Live::Required,
    ),
    info(Kind::Job, "Job", &["batch/v1"], true, WORKLOAD),
    info(
        Kind::NodePool,
        "NodePool",
        &["karpenter.sh/v1", "karpenter.sh/v1beta1"],
        false,
        Live::Required,
    ),
    info(
        Kind::NodeClaim,
        "NodeClaim",
        &["karpenter.sh/v1"],
        false,
        Live::Required,
    ),
    info(
        Kind::EC2NodeClass,
        "EC2NodeClass",
        &["karpenter.k8s.aws/v1", "karpenter.k8s.aws/v1beta1"],
        false,
        Live::Required,
    ),
    info(
        Kind::InstanceType,
        "InstanceType",
        &["joiner.dev/v1alpha1"],
        false,
        Live::NotRead(
            "Joiner's offline catalog entries for plan and simulate; live, the cloud lists its \
             own instance types",
        ),
    ),
    info(Kind::ConfigMap, "ConfigMap", &["v1"], true, Live::Named),
    info(
        Kind::DeviceClass,
        "DeviceClass",
        DRA_VERSIONS,
        false,
        Live::Optional,
    ),
    info(
        Kind::ResourceClaim,
        "ResourceClaim",
        DRA_VERSIONS,
        true,
        Live::Optional,
    ),
    info(
        Kind::ResourceClaimTemplate,
        "ResourceClaimTemplate",
        DRA_VERSIONS,
        true,
        Live::Optional,
    ),
    info(
        Kind::ResourceSlice,
        "ResourceSlice",
        DRA_VERSIONS,
        false,
        Live::Optional,
    ),
    // GA in Kubernetes 1.37; beta (v1beta2) in 1.36, alpha (v1alpha3) before.
    info(
        Kind::DeviceTaintRule,
        "DeviceTaintRule",
        &[
            "resource.k8s.io/v1",
            "resource.k8s.io/v1beta2",
            "resource.k8s.io/v1alpha3",
        ],
        false,
        Live::IfServed,
    ),
    info(
        Kind::PodDisruptionBudget,
        "PodDisruptionBudget",
        &["policy/v1"],
        true,
        Live::Required,
    ),
    // Termination waits for a node's volumes to detach before its instance goes.
    info(
        Kind::VolumeAttachment,
        "VolumeAttachment",
        &["storage.k8s.io/v1"],
        false,
        Live::Required,
    ),
    // A pod's persistent volumes pin it to their zones (volume topology).
    info(
        Kind::PersistentVolumeClaim,
        "PersistentVolumeClaim",
        &["v1"],
        true,
        Live::Required,
    ),
    info(
        Kind::PersistentVolume,
        "PersistentVolume",
        &["v1"],
        false,
        Live::Required,
    ),
    info(
        Kind::StorageClass,
        "StorageClass",
        &["storage.k8s.io/v1"],
        false,
        Live::Required,
    ),
    // Read when the API server serves it (Karpenter's chart installs the CRD; Joiner's too).
    info(
        Kind::NodeOverlay,
        "NodeOverlay",
        &["karpenter.sh/v1alpha1"],
        false,
        Live::Optional,
    ),
    // The shape of a CapacityBuffer's chunks (`podTemplateRef`).
    info(
        Kind::PodTemplate,
        "PodTemplate",
        &["v1"],
        true,
        Live::Required,
    ),
    // Read when the API server serves it (Karpenter's chart installs the CRD from v1.14).
    info(
        Kind::CapacityBuffer,
        "CapacityBuffer",
        &["autoscaling.x-k8s.io/v1beta1"],
        true,
        Live::IfServed,
    ),
];

const fn info(
    kind: Kind,
    name: &'static str,
    versions: &'static [&'static str],
    namespaced: bool,
    live: Live,
) -> KindInfo {
    KindInfo {
        kind,
        name,
        versions,
        namespaced,
        live,
    }
}

impl Kind {
    /// The kind named `name` (as `kind:` spells it), if Joiner reads it.
    pub fn parse(name: &str) -> Option<Kind> {
        KINDS.iter().find(|k| k.name == name).map(|k| k.kind)
    }

    /// This kind's row of [`KINDS`].
    pub const fn info(self) -> &'static KindInfo {
        // The rows are in the variants' order: `every_kind_has_one_row` checks it.
        &KINDS[self as usize]
    }

    pub const fn as_str(self) -> &'static str {
        self.info().name
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_one_row() {
        for (i, row) in KINDS.iter().enumerate() {
            assert_eq!(row.kind.info(), row, "{} has a row of its own", row.name);
            assert_eq!(Kind::parse(row.name), Some(row.kind));
            assert!(
                KINDS[i + 1..].iter().all(|r| r.kind != row.kind),
                "{} twice",
                row.name
            );
        }
        assert_eq!(KINDS.len(), 25);
        assert_eq!(Kind::parse("Service"), None);
    }
}
