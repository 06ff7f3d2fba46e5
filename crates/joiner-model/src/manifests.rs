//! One input set's typed objects: YAML/JSON text in, Kubernetes and Karpenter objects out, each
//! remembering the file and document it came from.
//!
//! Reading is strict where a mistake would silently change the plan (an unsupported API version of
//! a kind Joiner reads, a malformed field, an object defined twice) and lenient where the input
//! merely carries more than Joiner needs (other kinds, a Helm values file beside the manifests,
//! fields the API server would prune), which become warnings.

// `InputError` is large (a file, an object and a field), but it is returned once per failed run,
// never in a loop; boxing it would only make every caller's `?` noisier.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::fmt;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttachment};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::api::capacitybuffer::CapacityBuffer;
use crate::api::nodepool::NodePoolV1Beta1;
use crate::api::{EC2NodeClass, FieldError, InstanceType, NodeClaim, NodeOverlay, NodePool};
use crate::dra;
use crate::kinds::Kind;
use crate::yaml::Document;
use crate::{InputError, ObjectRef, Source};

/// An object and the place it was read from.
#[derive(Debug, Clone, PartialEq)]
pub struct Sourced<T> {
    pub origin: Source,
    pub object: T,
}

/// Something in the input that Joiner skipped or ignored, for the user to see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub origin: Source,
    pub object: Option<ObjectRef>,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.object {
            Some(o) => write!(f, "{}: {}: {}", self.origin, o, self.message),
            None => write!(f, "{}: {}", self.origin, self.message),
        }
    }
}

/// The typed objects of one input set, in input order within each kind.
#[derive(Debug, Clone, Default)]
pub struct Manifests {
    pub pods: Vec<Sourced<Pod>>,
    pub nodes: Vec<Sourced<Node>>,
    pub deployments: Vec<Sourced<Deployment>>,
    pub replica_sets: Vec<Sourced<ReplicaSet>>,
    pub stateful_sets: Vec<Sourced<StatefulSet>>,
    pub jobs: Vec<Sourced<Job>>,
    pub daemon_sets: Vec<Sourced<DaemonSet>>,
    /// Converted to `karpenter.sh/v1` whatever version they were written in.
    pub node_pools: Vec<Sourced<NodePool>>,
    /// Converted to `karpenter.k8s.aws/v1` whatever version they were written in.
    pub node_classes: Vec<Sourced<EC2NodeClass>>,
    /// Karpenter's (or Joiner's) NodeClaims with their status: launched capacity that may not
    /// have a Node yet.
    pub node_claims: Vec<Sourced<NodeClaim>>,
    pub instance_types: Vec<Sourced<InstanceType>>,
    pub config_maps: Vec<Sourced<ConfigMap>>,
    pub device_classes: Vec<Sourced<DeviceClass>>,
    pub device_taint_rules: Vec<Sourced<DeviceTaintRule>>,
    pub resource_claims: Vec<Sourced<ResourceClaim>>,
    pub resource_claim_templates: Vec<Sourced<ResourceClaimTemplate>>,
    pub resource_slices: Vec<Sourced<ResourceSlice>>,
    pub pod_disruption_budgets: Vec<Sourced<PodDisruptionBudget>>,
    /// Read so a cluster dump replays whole in `joiner simulate`; plans do not use them.
    pub volume_attachments: Vec<Sourced<VolumeAttachment>>,
    /// A pod's claims, their volumes and the classes that provision them: where its volumes
    /// live pins the zones its node may be in.
    pub persistent_volume_claims: Vec<Sourced<PersistentVolumeClaim>>,
    pub persistent_volumes: Vec<Sourced<PersistentVolume>>,
    pub storage_classes: Vec<Sourced<StorageClass>>,
    /// Adjustments to the instance types the planner sees (behind the `NodeOverlay` gate).
    pub node_overlays: Vec<Sourced<NodeOverlay>>,
    /// Spare capacity to keep (behind the `CapacityBuffer` gate), and the pod templates its
    /// chunks take their shape from.
    pub capacity_buffers: Vec<Sourced<CapacityBuffer>>,
    pub pod_templates: Vec<Sourced<PodTemplate>>,
    /// Workloads the buffers' `scalableRef`s name, read by the controller for them alone
    /// (files give `deployments` and the like instead).
    pub scale_targets: Vec<crate::api::capacitybuffer::ScaleTarget>,
    pub warnings: Vec<Warning>,
    /// Where each object was first defined, to reject a second definition.
    seen: HashMap<ObjectRef, Source>,
    /// Kinds skipped so far, in first-seen order: kind, its first apiVersion and origin, count.
    skipped: Vec<(String, String, Source, usize)>,
    /// Objects read in a deprecated version, in first-seen order: kind, version, first origin,
    /// count.
    deprecated: Vec<(Kind, String, Source, usize)>,
    /// Pods the workloads added so far will expand into (bounded by [`MAX_WORKLOAD_PODS`]).
    workload_pods: i64,
}

/// Lists nested deeper than this are refused; real `List`s nest at most once or twice.
const MAX_LIST_NESTING: usize = 8;

/// The most pods the workloads of one input may expand into (replicas of Deployments,
/// ReplicaSets and StatefulSets, Job parallelism). Expansion makes one pod per replica, so a
/// hostile `replicas: 2147483647` would otherwise exhaust memory; a count past this is an
/// input error naming the field.
pub const MAX_WORKLOAD_PODS: i64 = 100_000;

/// The object a path inside a document belongs to, and the path within that object: an item
/// of a `List` for `items[i]. ...`, else the document itself.
fn object_at(doc: &Value, path: &str) -> (ObjectRef, String) {
    let reference = |object: &Value, kind: &str| {
        ObjectRef::new(
            str_at(object, "/kind").unwrap_or(kind),
            str_at(object, "/metadata/namespace"),
            str_at(object, "/metadata/name").unwrap_or_default(),
        )
    };
    let kind = str_at(doc, "/kind").unwrap_or_default();
    if let Some(element_kind) = kind.strip_suffix("List")
        && let Some((index, rest)) = path.strip_prefix("items[").and_then(|p| p.split_once("]."))
        && let Some(item) = index
            .parse::<usize>()
            .ok()
            .and_then(|i| doc.pointer(&format!("/items/{i}")))
    {
        return (reference(item, element_kind), rest.to_string());
    }
    (reference(doc, kind), path.to_string())
}

fn str_at<'a>(doc: &'a Value, pointer: &str) -> Option<&'a str> {
    doc.pointer(pointer).and_then(Value::as_str)
}

impl Manifests {
    /// How many objects were read (of any kind Joiner reads).
    pub fn object_count(&self) -> usize {
        self.seen.len()
    }

    /// Whether an object of this kind, namespace and name was read already (a namespaced
    /// object's namespace defaults to `default`, as it is read).
    pub fn defines(&self, object: &ObjectRef) -> bool {
        self.seen.contains_key(object)
    }

    /// Adds one document read by [`parse_yaml`](crate::parse_yaml), warning once for each key
    /// it sets twice: the last value is used, as the API server uses it.
    pub fn add_yaml(&mut self, doc: Document) -> Result<(), InputError> {
        for path in &doc.duplicate_keys {
            let (object, field) = object_at(&doc.value, path);
            self.warnings.push(Warning {
                origin: doc.origin.clone(),
                object: Some(object),
                message: format!(
                    "{field} is set twice; the last value is used, as the API server uses it \
                     (remove the first to silence this)"
                ),
            });
        }
        self.add_document(doc.origin, doc.value)
    }

    /// Adds one parsed document: a single object, or a `List` of them.
    pub fn add_document(&mut self, origin: Source, doc: Value) -> Result<(), InputError> {
        self.add_nested(origin, doc, 0)
    }

    /// Emits the warnings collected across documents (one line per skipped kind). Call once all
    /// documents are added; calling it again adds nothing new.
    pub fn finish(&mut self) {
        for (kind, api_version, origin, count) in self.deprecated.drain(..) {
            let objects = if count == 1 { "object" } else { "objects" };
            self.warnings.push(Warning {
                origin,
                message: format!(
                    "{api_version} {kind} is deprecated; read {count} {objects} as \
                     resource.k8s.io/v1, as the API server converts them (write v1: the API \
                     server stops serving the beta versions in a future release)"
                ),
                object: None,
            });
        }
        for (kind, api_version, origin, count) in self.skipped.drain(..) {
            let objects = if count == 1 { "object" } else { "objects" };
            self.warnings.push(Warning {
                origin,
                object: None,
                message: format!(
                    "skipped {count} {objects} of kind {kind} ({api_version}): Joiner does not read \
                     this kind"
                ),
            });
        }
    }

    fn add_nested(
        &mut self,
        origin: Source,
        mut doc: Value,
        depth: usize,
    ) -> Result<(), InputError> {
        let (Some(api_version), Some(kind)) = (str_at(&doc, "/apiVersion"), str_at(&doc, "/kind"))
        else {
            self.warnings.push(Warning {
                origin,
                object: None,
                message: "no apiVersion and kind: not a Kubernetes object, skipped".to_string(),
            });
            return Ok(());
        };
        let (api_version, kind) = (api_version.to_string(), kind.to_string());
        if let Some(element_kind) = kind.strip_suffix("List")
            && doc.get("items").is_some_and(Value::is_array)
        {
            return self.add_list(origin, doc, &api_version, element_kind, depth);
        }
        let Some(info) = Kind::parse(&kind).map(Kind::info) else {
            self.skip_kind(origin, &api_version, &kind);
            return Ok(());
        };
        let (versions, namespaced) = (info.versions, info.namespaced);
        let name = str_at(&doc, "/metadata/name")
            .unwrap_or_default()
            .to_string();
        let mut namespace = None;
        if namespaced {
            let ns = str_at(&doc, "/metadata/namespace")
                .filter(|ns| !ns.is_empty())
                .unwrap_or("default")
                .to_string();
            if let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.insert("namespace".to_string(), Value::String(ns.clone()));
            }
            namespace = Some(ns);
        }
        let object = ObjectRef::new(kind.as_str(), namespace.as_deref(), name.as_str());
        if !versions.contains(&api_version.as_str()) {
            return Err(InputError::new(
                &origin,
                &object,
                "apiVersion",
                format!(
                    "{api_version} is not a supported version of {kind} (supported: {})",
                    versions.join(", ")
                ),
            ));
        }
        if name.is_empty() {
            return Err(InputError::new(
                &origin,
                &object,
                "metadata.name",
                "required",
            ));
        }
        if let Some(first) = self.seen.get(&object) {
            return Err(InputError::new(
                &origin,
                &object,
                "metadata.name",
                format!("defined twice: also in {first}"),
            ));
        }
        self.seen.insert(object.clone(), origin.clone());
        self.add_object(origin, info.kind, &object, &api_version, doc)
    }

    /// Flattens `kind: List` and typed lists (`PodList`); items of a typed list may leave out
    /// their own `apiVersion` and `kind`, as API responses do.
    fn add_list(
        &mut self,
        origin: Source,
        mut doc: Value,
        api_version: &str,
        element_kind: &str,
        depth: usize,
    ) -> Result<(), InputError> {
        if depth >= MAX_LIST_NESTING {
            return Err(InputError::new(
                &origin,
                &ObjectRef::new(format!("{element_kind}List"), None, ""),
                "items",
                "lists nested too deeply",
            ));
        }
        let items = match doc.get_mut("items").map(Value::take) {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        };
        for mut item in items {
            if !element_kind.is_empty()
                && let Some(obj) = item.as_object_mut()
            {
                obj.entry("apiVersion")
                    .or_insert_with(|| Value::String(api_version.to_string()));
                obj.entry("kind")
                    .or_insert_with(|| Value::String(element_kind.to_string()));
            }
            self.add_nested(origin.clone(), item, depth + 1)?;
        }
        Ok(())
    }

    /// Adds the pods a workload expands into to the input's total, refusing a total past
    /// [`MAX_WORKLOAD_PODS`]. Counts the way `workloads::expand_workloads` expands.
    fn count_workload_pods(
        &mut self,
        origin: &Source,
        kind: Kind,
        object: &ObjectRef,
        doc: &Value,
    ) -> Result<(), InputError> {
        let int = |pointer: &str| doc.pointer(pointer).and_then(Value::as_i64);
        let (field, count) = match kind {
            Kind::Deployment | Kind::ReplicaSet | Kind::StatefulSet => {
                ("spec.replicas", int("/spec/replicas").unwrap_or(1))
            }
            Kind::Job if doc.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true) => {
                return Ok(());
            }
            Kind::Job => {
                let parallelism = int("/spec/parallelism").unwrap_or(1);
                let count = int("/spec/completions").map_or(parallelism, |c| parallelism.min(c));
                ("spec.parallelism", count)
            }
            _ => return Ok(()),
        };
        let total = self.workload_pods.saturating_add(count.max(0));
        if total > MAX_WORKLOAD_PODS {
            return Err(InputError::new(
                origin,
                object,
                field,
                format!(
                    "{count} replicas would make the input's workloads expand into {total} pods; \
                     Joiner plans at most {MAX_WORKLOAD_PODS}"
                ),
            ));
        }
        self.workload_pods = total;
        Ok(())
    }

    /// Counts a skipped object; one warning per kind is emitted by [`Manifests::finish`], naming
    /// the first place the kind appeared and its API version there.
    fn skip_kind(&mut self, origin: Source, api_version: &str, kind: &str) {
        match self.skipped.iter_mut().find(|(k, _, _, _)| k == kind) {
            Some((_, _, _, count)) => *count += 1,
            None => self
                .skipped
                .push((kind.to_string(), api_version.to_string(), origin, 1)),
        }
    }

    fn add_object(
        &mut self,
        origin: Source,
        kind: Kind,
        object: &ObjectRef,
        api_version: &str,
        mut doc: Value,
    ) -> Result<(), InputError> {
        let o = &origin;
        self.count_workload_pods(o, kind, object, &doc)?;
        match kind {
            Kind::Pod => self.pods.push(sourced(o, decode(o, object, doc)?)),
            Kind::Node => self.nodes.push(sourced(o, decode(o, object, doc)?)),
            Kind::Deployment => self.deployments.push(sourced(o, decode(o, object, doc)?)),
            Kind::ReplicaSet => self.replica_sets.push(sourced(o, decode(o, object, doc)?)),
            Kind::StatefulSet => self.stateful_sets.push(sourced(o, decode(o, object, doc)?)),
            Kind::DaemonSet => self.daemon_sets.push(sourced(o, decode(o, object, doc)?)),
            Kind::Job => self.jobs.push(sourced(o, decode(o, object, doc)?)),
            Kind::ConfigMap => self.config_maps.push(sourced(o, decode(o, object, doc)?)),
            Kind::DeviceClass => {
                let c = self.decode_dra(
                    o,
                    object,
                    kind,
                    api_version,
                    doc,
                    dra::validate::device_class,
                )?;
                self.device_classes.push(sourced(o, c));
            }
            Kind::DeviceTaintRule => {
                let r = self.decode_dra(
                    o,
                    object,
                    kind,
                    api_version,
                    doc,
                    dra::validate::device_taint_rule,
                )?;
                self.device_taint_rules.push(sourced(o, r));
            }
            Kind::ResourceClaim => {
                let c = self.decode_dra(
                    o,
                    object,
                    kind,
                    api_version,
                    doc,
                    dra::validate::resource_claim,
                )?;
                self.resource_claims.push(sourced(o, c));
            }
            Kind::ResourceClaimTemplate => {
                let t = self.decode_dra(
                    o,
                    object,
                    kind,
                    api_version,
                    doc,
                    dra::validate::resource_claim_template,
                )?;
                self.resource_claim_templates.push(sourced(o, t));
            }
            Kind::ResourceSlice => {
                let sl = self.decode_dra(
                    o,
                    object,
                    kind,
                    api_version,
                    doc,
                    dra::validate::resource_slice,
                )?;
                self.resource_slices.push(sourced(o, sl));
            }
            Kind::PodDisruptionBudget => {
                let p = decode(o, object, doc)?;
                self.pod_disruption_budgets.push(sourced(o, p));
            }
            Kind::VolumeAttachment => {
                let v = decode(o, object, doc)?;
                self.volume_attachments.push(sourced(o, v));
            }
            Kind::PersistentVolumeClaim => {
                let v = decode(o, object, doc)?;
                self.persistent_volume_claims.push(sourced(o, v));
            }
            Kind::PersistentVolume => {
                let v = decode(o, object, doc)?;
                self.persistent_volumes.push(sourced(o, v));
            }
            Kind::StorageClass => {
                let v = decode(o, object, doc)?;
                self.storage_classes.push(sourced(o, v));
            }
            Kind::NodePool => {
                strip_status(&mut doc);
                let v1beta1 = api_version == crate::api::nodepool::API_VERSION_V1BETA1;
                let np = if v1beta1 {
                    self.decode_crd::<NodePoolV1Beta1>(o, object, doc)?
                        .into_v1()
                } else {
                    self.decode_crd::<NodePool>(o, object, doc)?
                };
                np.validate()
                    .map_err(|e| if v1beta1 { v1beta1_field(e) } else { e })
                    .map_err(|e| e.into_input_error(o, object))?;
                self.node_pools.push(sourced(o, np));
            }
            Kind::EC2NodeClass => {
                // Status is kept: a class whose status says Ready=False launches nothing, in a
                // plan as in the cluster (a class with no status is planned on as written).
                let mut nc: EC2NodeClass = self.decode_crd(o, object, doc)?;
                if api_version == crate::api::ec2nodeclass::API_VERSION_V1BETA1 {
                    nc = nc.into_v1();
                }
                nc.validate().map_err(|e| e.into_input_error(o, object))?;
                self.node_classes.push(sourced(o, nc));
            }
            Kind::InstanceType => {
                strip_status(&mut doc);
                let it: InstanceType = self.decode_crd(o, object, doc)?;
                it.validate().map_err(|e| e.into_input_error(o, object))?;
                self.instance_types.push(sourced(o, it));
            }
            Kind::PodTemplate => {
                let t = decode(o, object, doc)?;
                self.pod_templates.push(sourced(o, t));
            }
            Kind::CapacityBuffer => {
                let b: CapacityBuffer = self.decode_crd(o, object, doc)?;
                b.validate().map_err(|e| e.into_input_error(o, object))?;
                self.capacity_buffers.push(sourced(o, b));
            }
            Kind::NodeOverlay => {
                let overlay: NodeOverlay = self.decode_crd(o, object, doc)?;
                overlay
                    .validate()
                    .map_err(|e| e.into_input_error(o, object))?;
                self.node_overlays.push(sourced(o, overlay));
            }
            Kind::NodeClaim => {
                // Status is the point: which NodeClaims are still in flight, their Nodes and
                // expected resources.
                let claim: NodeClaim = decode(o, object, doc)?;
                self.node_claims.push(sourced(o, claim));
            }
        }
        Ok(())
    }

    /// Reads a DRA object of any served version as `resource.k8s.io/v1`, validated as the API
    /// server validates it. Errors name the field where the file has it; fields the type does
    /// not know are warned about (kubectl's strict field validation would refuse them).
    fn decode_dra<T: DeserializeOwned>(
        &mut self,
        origin: &Source,
        object: &ObjectRef,
        kind: Kind,
        api_version: &str,
        mut doc: Value,
        validate: fn(&T) -> Result<(), FieldError>,
    ) -> Result<T, InputError> {
        let conversion = dra::to_v1(kind, api_version, &mut doc);
        let written = |field: &str| dra::written_field(kind, api_version, field);
        let mut unknown = Vec::new();
        let mut track = serde_path_to_error::Track::new();
        let value: T = serde_ignored::deserialize(
            serde_path_to_error::Deserializer::new(doc, &mut track),
            |path| unknown.push(ignored_path(&path)),
        )
        .map_err(|e| InputError::new(origin, object, written(&track.path().to_string()), e))?;
        validate(&value)
            .map_err(|e| InputError::new(origin, object, written(&e.field), e.message))?;
        for field in unknown {
            self.warnings.push(Warning {
                origin: origin.clone(),
                object: Some(object.clone()),
                message: format!(
                    "{}: unknown field, ignored (kubectl's strict field validation would refuse it)",
                    written(&field)
                ),
            });
        }
        if conversion == dra::Conversion::Deprecated {
            self.deprecated_version(origin, kind, api_version);
        }
        Ok(value)
    }

    /// Counts an object in a deprecated version; one warning per kind and version is emitted by
    /// [`Manifests::finish`].
    fn deprecated_version(&mut self, origin: &Source, kind: Kind, api_version: &str) {
        match self
            .deprecated
            .iter_mut()
            .find(|(k, v, _, _)| *k == kind && v == api_version)
        {
            Some((_, _, _, count)) => *count += 1,
            None => self
                .deprecated
                .push((kind, api_version.to_string(), origin.clone(), 1)),
        }
    }

    /// Reads one of our CRDs, warning about each field the type does not know: the API server
    /// would prune it, so a typo there silently does nothing in a real cluster either.
    fn decode_crd<T: DeserializeOwned>(
        &mut self,
        origin: &Source,
        object: &ObjectRef,
        doc: Value,
    ) -> Result<T, InputError> {
        let mut unknown = Vec::new();
        let mut track = serde_path_to_error::Track::new();
        let result = serde_ignored::deserialize(
            serde_path_to_error::Deserializer::new(doc, &mut track),
            |path| unknown.push(ignored_path(&path)),
        );
        match result {
            Ok(value) => {
                self.warnings
                    .extend(unknown.into_iter().map(|field| Warning {
                        origin: origin.clone(),
                        object: Some(object.clone()),
                        message: format!(
                            "{field}: unknown field, ignored (the API server would prune it)"
                        ),
                    }));
                Ok(value)
            }
            Err(e) => Err(InputError::new(origin, object, track.path().to_string(), e)),
        }
    }
}

fn sourced<T>(origin: &Source, object: T) -> Sourced<T> {
    Sourced {
        origin: origin.clone(),
        object,
    }
}

/// Deserializes a built-in Kubernetes object; an error names the field path.
fn decode<T: DeserializeOwned>(
    origin: &Source,
    object: &ObjectRef,
    doc: Value,
) -> Result<T, InputError> {
    serde_path_to_error::deserialize(doc)
        .map_err(|e| InputError::new(origin, object, e.path().to_string(), e.inner()))
}

/// Status is the controller's output, not input to planning (an EC2NodeClass's is the
/// exception: whether it is Ready); dropping it keeps objects copied from a live cluster free of
/// unknown-field warnings.
fn strip_status(doc: &mut Value) {
    if let Some(obj) = doc.as_object_mut() {
        obj.remove("status");
    }
}

/// Validation runs on the converted v1 NodePool; point the user at where a v1beta1 manifest
/// actually holds the field.
fn v1beta1_field(mut e: FieldError) -> FieldError {
    if e.field == "spec.template.spec.expireAfter" {
        e.field = "spec.disruption.expireAfter".to_string();
    }
    e
}

/// `spec.blockDeviceMappings[0].ebs.size`, from serde_ignored's path.
fn ignored_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", ignored_path(parent)),
        Path::Map { parent, key } => {
            let p = ignored_path(parent);
            if p.is_empty() {
                key.clone()
            } else {
                format!("{p}.{key}")
            }
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => ignored_path(parent),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::{parse_documents, parse_yaml};

    fn load(file: &str, text: &str) -> Result<Manifests, InputError> {
        let mut m = Manifests::default();
        for (origin, doc) in parse_documents(file, text)? {
            m.add_document(origin, doc)?;
        }
        m.finish();
        Ok(m)
    }

    const LAB_NODECLASS: &str = r#"
apiVersion: karpenter.k8s.aws/v1beta1
kind: EC2NodeClass
metadata:
  name: g4-nodeclass
spec:
  amiFamily: AL2
  launchTemplate:
    name: "ack_nodegroup_template_new"
    version: "7"
  role: "KarpenterNodeRole"
  subnetSelectorTerms:
    - tags:
        karpenter.sh/discovery: "nextgen-learninglab"
  blockDeviceMappings:
    - deviceName: /dev/xvda
      ebs: {volumeSize: 100Gi, volumeType: gp3, iops: 10000, encrypted: true}
"#;

    #[test]
    fn warns_about_pruned_fields_of_our_crds() {
        let m = load("ec2nodeclass.yaml", LAB_NODECLASS).unwrap();
        assert_eq!(m.node_classes.len(), 1);
        let msgs: Vec<String> = m.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(
            msgs,
            [
                "ec2nodeclass.yaml (document 1): EC2NodeClass/g4-nodeclass: spec.launchTemplate: \
              unknown field, ignored (the API server would prune it)"
            ]
        );
        let nc = &m.node_classes[0].object;
        assert_eq!(nc.api_version, "karpenter.k8s.aws/v1");
    }

    #[test]
    fn typos_and_v1beta1_only_fields_in_v1_are_reported_with_their_path() {
        let m = load(
            "np.yaml",
            r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}
      requirements: [{key: a, operator: In, values: [x], minValue: 1}]
      kubelet: {maxPods: 20}
status: {resources: {nodes: "3"}}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: gpu}
spec:
  amiSelectorTerms: [{alias: al2023@latest}]
  kubelet: {maxPod: 20}
"#,
        )
        .unwrap();
        let msgs: Vec<String> = m.warnings.iter().map(|w| w.message.clone()).collect();
        let unknown =
            |f: &str| format!("{f}: unknown field, ignored (the API server would prune it)");
        assert_eq!(
            msgs,
            [
                unknown("spec.template.spec.requirements[0].minValue"),
                unknown("spec.template.spec.kubelet"),
                unknown("spec.kubelet.maxPod"),
            ]
        );
        assert_eq!(m.node_pools[0].object.spec.template.spec.kubelet, None);
    }

    #[test]
    fn reads_dra_objects_and_defaults_namespaces() {
        let m = load(
            "workload.yaml",
            r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: gpu-share}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec:
  selectors:
  - cel: {expression: 'device.driver == "gpu.nvidia.com"'}
---
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: team-a}
spec: {containers: [{name: c, image: x}]}
"#,
        )
        .unwrap();
        assert!(m.warnings.is_empty(), "{:?}", m.warnings);
        let t = &m.resource_claim_templates[0];
        assert_eq!(t.object.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(t.origin, Source::new("workload.yaml", 1));
        assert_eq!(m.device_classes[0].origin.document, 2);
        assert_eq!(m.pods[0].origin.document, 3);
        assert_eq!(
            m.pods[0].object.metadata.namespace.as_deref(),
            Some("team-a")
        );
    }

    #[test]
    fn converts_v1beta1_node_pools() {
        let m = load(
            "nodepool.yaml",
            r#"
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: g4-nodepool}
spec:
  template:
    spec:
      requirements: [{key: kubernetes.io/arch, operator: In, values: ["amd64"]}]
      nodeClassRef: {apiVersion: karpenter.k8s.aws/v1beta1, kind: EC2NodeClass, name: g4-nodeclass}
  limits: {cpu: 1000}
  disruption: {expireAfter: 120m, consolidationPolicy: WhenUnderutilized}
"#,
        )
        .unwrap();
        let np = &m.node_pools[0].object;
        assert_eq!(np.api_version, "karpenter.sh/v1");
        assert_eq!(np.spec.template.spec.expire_after, "120m");
        assert_eq!(
            np.spec.template.spec.node_class_ref.group,
            "karpenter.k8s.aws"
        );
    }

    #[test]
    fn bad_fields_are_errors_naming_file_object_and_path() {
        let e = load(
            "np.yaml",
            r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}
      requirements:
      - {key: a, operator: In, values: [x]}
      - {key: b, operator: Exists}
      - {key: c, operator: Within, values: [x]}
"#,
        )
        .unwrap_err();
        assert_eq!(e.origin, Source::new("np.yaml", 1));
        assert_eq!(e.object.to_string(), "NodePool/gpu");
        assert_eq!(e.field, "spec.template.spec.requirements[2].operator");

        let e = load(
            "pod.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, ports: [{containerPort: many}]}]}\n",
        )
        .unwrap_err();
        assert_eq!(e.object.to_string(), "Pod/default/p");
        assert_eq!(e.field, "spec.containers[0].ports[0].containerPort");

        let e = load(
            "np.yaml",
            "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      nodeClassRef: {name: c}\n  disruption: {expireAfter: 30d}\n",
        )
        .unwrap_err();
        assert_eq!(e.field, "spec.disruption.expireAfter");
    }

    #[test]
    fn unsupported_version_of_a_known_kind_is_an_error() {
        let e = load(
            "np.yaml",
            "apiVersion: karpenter.sh/v1alpha5\nkind: NodePool\nmetadata: {name: x}\n",
        )
        .unwrap_err();
        assert_eq!(e.field, "apiVersion");
        assert!(e.message.contains("karpenter.sh/v1alpha5"), "{}", e.message);
    }

    #[test]
    fn other_kinds_and_non_objects_are_warnings() {
        let m = load(
            "mixed.yaml",
            r#"
settings: {enableDRA: true}
---
apiVersion: v1
kind: Service
metadata: {name: a}
---
apiVersion: v1
kind: Service
metadata: {name: b}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: c}
"#,
        )
        .unwrap();
        let msgs: Vec<String> = m.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(
            msgs,
            [
                "mixed.yaml (document 1): no apiVersion and kind: not a Kubernetes object, skipped",
                "mixed.yaml (document 2): skipped 2 objects of kind Service (v1): Joiner does not read this kind",
                "mixed.yaml (document 4): skipped 1 object of kind ClusterRole \
                 (rbac.authorization.k8s.io/v1): Joiner does not read this kind",
            ]
        );
    }

    #[test]
    fn flattens_lists_in_order() {
        let m = load(
            "list.json",
            r#"{"apiVersion": "v1", "kind": "List", "items": [
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}, "spec": {"containers": []}},
                {"apiVersion": "v1", "kind": "PodList", "items": [
                    {"metadata": {"name": "b"}, "spec": {"containers": []}}]}]}"#,
        )
        .unwrap();
        let names: Vec<_> = m
            .pods
            .iter()
            .map(|p| p.object.metadata.name.clone())
            .collect();
        assert_eq!(names, [Some("a".to_string()), Some("b".to_string())]);
    }

    #[test]
    fn an_object_defined_twice_names_both_places() {
        let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n";
        let mut m = Manifests::default();
        for (file, ns) in [("a.yaml", ""), ("b.yaml", "namespace: default\n")] {
            let text = format!("{pod}{ns}");
            let text = text.replace("metadata: {name: p}\n", "metadata:\n  name: p\n  ");
            let docs = parse_documents(file, &text).unwrap();
            for (origin, doc) in docs {
                let r = m.add_document(origin, doc);
                if file == "b.yaml" {
                    let e = r.unwrap_err();
                    assert_eq!(e.origin.file, "b.yaml");
                    assert!(e.message.contains("a.yaml"), "{}", e.message);
                } else {
                    r.unwrap();
                }
            }
        }
    }

    #[test]
    fn workloads_may_expand_into_at_most_max_workload_pods() {
        let deployment = |name: &str, replicas: i64| {
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}}}\nspec: \
                 {{replicas: {replicas}, selector: {{}}, template: {{spec: {{containers: []}}}}}}\n"
            )
        };
        // Up to the limit across workloads; a suspended Job adds no pods.
        let text = format!(
            "{}---\n{}---\napiVersion: batch/v1\nkind: Job\nmetadata: {{name: j}}\nspec: \
             {{suspend: true, parallelism: 2147483647, template: {{spec: {{containers: []}}}}}}\n",
            deployment("a", MAX_WORKLOAD_PODS - 1),
            deployment("b", 1)
        );
        load("ok.yaml", &text).unwrap();
        let text = format!(
            "{}---\n{}",
            deployment("a", MAX_WORKLOAD_PODS),
            deployment("b", 1)
        );
        let e = load("many.yaml", &text).unwrap_err();
        assert_eq!(e.field, "spec.replicas");
        assert!(e.to_string().contains("Deployment/default/b"), "{e}");
        let e = load("huge.yaml", &deployment("a", i64::from(i32::MAX))).unwrap_err();
        assert!(e.message.contains("at most 100000"), "{}", e.message);
    }

    #[test]
    fn a_key_set_twice_keeps_the_last_value_and_warns_naming_the_object_and_key() {
        let text = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: gpu}\nspec:\n  \
                    template:\n    metadata:\n      labels:\n        NodePool: a\n        \
                    NodePool: b\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, \
                    kind: EC2NodeClass, name: default}\n      requirements: []\n---\n\
                    apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  \
                    metadata: {name: p, namespace: ml, name: p}\n  spec: {containers: []}\n";
        let mut m = Manifests::default();
        for doc in parse_yaml("dup.yaml", text).unwrap() {
            m.add_yaml(doc).unwrap();
        }
        let labels = &m.node_pools[0].object.spec.template.metadata.labels;
        assert_eq!(labels.get("NodePool").map(String::as_str), Some("b"));
        let warnings: Vec<String> = m.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].starts_with(
                "dup.yaml (document 1): NodePool/gpu: spec.template.metadata.labels.NodePool is \
                 set twice"
            ),
            "{warnings:?}"
        );
        assert!(
            warnings[1].contains("Pod/ml/p: metadata.name is set twice"),
            "{warnings:?}"
        );
    }
}
