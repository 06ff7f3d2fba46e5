//! The DRA half of the snapshot: device classes, published slices, the claims pods use (those
//! generated from templates included), and which nodes are judged by templates instead of
//! slices.

use std::collections::{BTreeMap, BTreeSet};

use joiner_dra::{Features, KubeVersion};
use joiner_model::settings::Settings;
use joiner_model::wellknown::{annotations, labels};
use joiner_model::{InputError, Manifests, Sourced};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};

use crate::catalog::Catalog;
use crate::catalog::devices::{TemplateOptions, default_device_classes};
use crate::scheduling::{DraInput, ExistingNode};

mod claims;
pub(crate) mod extended;
use claims::{extended_claim, pending, pod_claim_keys};
pub(crate) use extended::ExtendedNames;

/// The cluster's DRA feature gates: the Kubernetes version's defaults, then the explicit ones.
pub(super) fn features(settings: &Settings, warnings: &mut Vec<String>) -> Features {
    let version = KubeVersion::parse(&settings.cluster.kubernetes_version).unwrap_or_else(|| {
        warnings.push(format!(
            "settings.cluster.kubernetesVersion: {:?} is not major.minor; using 1.36",
            settings.cluster.kubernetes_version
        ));
        KubeVersion {
            major: 1,
            minor: 36,
        }
    });
    let mut features = Features::for_version(version);
    for (gate, on) in &settings.cluster.feature_gates {
        if !features.set(gate, *on) {
            warnings.push(format!(
                "settings.cluster.featureGates.{gate}: not a DRA gate Joiner models; ignored"
            ));
        }
    }
    features
}

/// The DRA inputs, and the pending pods (by index into `pods`) whose claims lead nowhere, with
/// their reasons: those are left to the caller to take out of scheduling.
pub(super) struct Built {
    pub input: DraInput,
    pub refused: Vec<(usize, String)>,
    /// Pods whose claim references cannot be read (neither a claim nor a template named).
    pub invalid: Vec<InputError>,
}

/// Where the devices of nodes not yet initialized come from: each NodePool's own prediction
/// for a type (corrected by what running nodes proved wrong), else the catalog's templates
/// with the pool's `options` (how its nodes publish devices).
pub(super) struct Predicted<'a> {
    pub catalog: &'a Catalog,
    pub pools: &'a [crate::scheduling::PoolInput],
    pub options: &'a BTreeMap<String, TemplateOptions>,
}

/// The cluster's DeviceClasses: the input's, and for each driver's chart class the input
/// lacks, the one the chart creates.
pub(super) fn device_classes(m: &Manifests, warnings: &mut Vec<String>) -> Vec<DeviceClass> {
    let mut classes: Vec<_> = m.device_classes.iter().map(|c| c.object.clone()).collect();
    for default in default_device_classes() {
        let name = default.metadata.name.clone().unwrap_or_default();
        if !classes
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some(name.as_str()))
        {
            warnings.push(format!(
                "DeviceClass {name} is not in the input; using the one its driver's chart creates"
            ));
            classes.push(default);
        }
    }
    classes
}

/// The cluster's DRA view before pods are read: its classes, its gates, and the extended
/// resources its classes serve (none while `DRAExtendedResource` is off).
pub(super) struct Cluster {
    pub classes: Vec<DeviceClass>,
    pub features: Features,
    pub extended: ExtendedNames,
}

impl Cluster {
    pub fn new(m: &Manifests, settings: &Settings, warnings: &mut Vec<String>) -> Cluster {
        let classes = device_classes(m, warnings);
        let features = features(settings, warnings);
        let extended = if features.extended_resource {
            ExtendedNames::new(&classes)
        } else {
            ExtendedNames::default()
        };
        Cluster {
            classes,
            features,
            extended,
        }
    }
}

/// Builds the DRA inputs. `pods` are aligned with the scheduler's pods: the pending ones with
/// claims (or extended resources a class serves) are given, others are `None`.
pub(super) fn build(
    m: &Manifests,
    cluster: Cluster,
    predicted: &Predicted<'_>,
    machines: &[ExistingNode],
    pods: &[Option<&Sourced<Pod>>],
    warnings: &mut Vec<String>,
) -> Built {
    let Predicted {
        catalog,
        pools,
        options: template_options,
    } = *predicted;
    let Cluster {
        classes,
        features,
        extended: extended_names,
    } = cluster;

    // Nodes Joiner manages that are not initialized yet are judged by their instance type's
    // templates, never by whatever slices they already published.
    let mut slices: Vec<ResourceSlice> = Vec::new();
    let mut by_template = BTreeSet::new();
    for n in machines {
        let (Some(pool), Some(it)) = (
            n.labels.get(labels::NODEPOOL),
            n.labels.get(labels::INSTANCE_TYPE),
        ) else {
            continue;
        };
        if n.labels.get(labels::INITIALIZED).map(String::as_str) == Some("true") {
            continue;
        }
        let name = n.name.clone();
        // The pool's own prediction for the type (what running nodes proved wrong corrected,
        // [`super::corrections`]), else the catalog's.
        let corrected = pools
            .iter()
            .find(|p| &p.name == pool)
            .and_then(|p| p.options.iter().find(|o| &o.instance_type == it))
            .and_then(|o| o.devices.as_ref());
        if let Some(source) = corrected {
            slices.extend(source.templates.node_slices(&name, &source.options));
        } else if let (Some(templates), Some(opts)) = (
            catalog.get(it).and_then(|t| t.devices.clone()),
            template_options.get(pool),
        ) {
            slices.extend(templates.node_slices(&name, opts));
        }
        by_template.insert(name);
    }
    slices.extend(
        m.resource_slices
            .iter()
            .filter(|s| {
                s.object
                    .spec
                    .node_name
                    .as_ref()
                    .is_none_or(|n| !by_template.contains(n))
            })
            .map(|s| published(s, &features, warnings)),
    );

    // Claims held only by pods that are being deleted free their devices.
    let deleting: BTreeSet<String> = m
        .pods
        .iter()
        .filter(|p| p.object.metadata.deletion_timestamp.is_some())
        .filter_map(|p| p.object.metadata.name.clone())
        .collect();
    let mut claims: BTreeMap<String, ResourceClaim> = BTreeMap::new();
    for c in &m.resource_claims {
        let mut claim = c.object.clone();
        if claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .is_none()
        {
            let what = format!(
                "ResourceClaim/{}",
                key(
                    claim.metadata.namespace.as_deref(),
                    claim.metadata.name.as_deref()
                )
            );
            stored_devices(
                claim.spec.as_mut().and_then(|s| s.devices.as_mut()),
                &features,
                (&c.origin, &what, "spec"),
                warnings,
            );
        }
        if let Some(status) = claim.status.as_mut() {
            let reserved = status.reserved_for.as_deref().unwrap_or_default();
            if !reserved.is_empty()
                && reserved
                    .iter()
                    .all(|r| r.resource == "pods" && deleting.contains(&r.name))
            {
                status.allocation = None;
                status.reserved_for = None;
            }
        }
        claims.insert(
            key(
                c.object.metadata.namespace.as_deref(),
                c.object.metadata.name.as_deref(),
            ),
            claim,
        );
    }
    let stored_templates: Vec<(String, ResourceClaimTemplate)> = m
        .resource_claim_templates
        .iter()
        .map(|t| {
            let name = key(
                t.object.metadata.namespace.as_deref(),
                t.object.metadata.name.as_deref(),
            );
            let mut template = t.object.clone();
            stored_devices(
                template
                    .spec
                    .as_mut()
                    .and_then(|t| t.spec.as_mut())
                    .and_then(|s| s.devices.as_mut()),
                &features,
                (
                    &t.origin,
                    &format!("ResourceClaimTemplate/{name}"),
                    "spec.spec",
                ),
                warnings,
            );
            (name, template)
        })
        .collect();
    let templates: BTreeMap<String, &ResourceClaimTemplate> = stored_templates
        .iter()
        .map(|(name, t)| (name.clone(), t))
        .collect();

    let mut pod_claims = Vec::with_capacity(pods.len());
    let mut extended = BTreeMap::new();
    let mut refused = Vec::new();
    let mut invalid = Vec::new();
    for (i, pod) in pods.iter().enumerate() {
        let keys = match pod {
            Some(pod) => match pod_claim_keys(pod, &mut claims, &templates) {
                Ok(mut keys) => {
                    match extended_claim(pod, &extended_names, &mut claims, &mut extended) {
                        Ok(key) => keys.extend(key),
                        Err(missing) if pending(pod) => refused.push((i, missing.reason())),
                        Err(missing) => warnings.push(format!(
                            "{}; its devices are not counted",
                            missing.to_input_error(pod)
                        )),
                    }
                    keys
                }
                Err(missing) => {
                    let e = missing.to_input_error(pod);
                    if pending(pod) {
                        refused.push((i, missing.reason()));
                    } else {
                        // A running pod keeps its node's resources; only its devices are
                        // unknown.
                        warnings.push(format!("{e}; its devices are not counted"));
                    }
                    if missing.is_invalid() {
                        invalid.push(e);
                    }
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        pod_claims.push(keys);
    }

    Built {
        input: DraInput {
            features,
            classes,
            slices,
            claims,
            in_use: Vec::new(),
            pod_claims,
            extended,
            taint_rules: if features.device_taints {
                m.device_taint_rules
                    .iter()
                    .map(|r| r.object.spec.clone())
                    .collect()
            } else {
                Vec::new()
            },
        },
        refused,
        invalid,
    }
}

/// A published slice as the cluster holds it: with `DRAListTypeAttributes` off the API server
/// drops list-typed attributes, so a slice written with them has them left out, each named in
/// a warning.
fn published(
    slice: &Sourced<ResourceSlice>,
    features: &Features,
    warnings: &mut Vec<String>,
) -> ResourceSlice {
    let mut out = slice.object.clone();
    if features.list_type_attributes {
        return out;
    }
    for field in joiner_model::dra::list_attributes::set_aside(&mut out) {
        warnings.push(format!(
            "{}: ResourceSlice/{}: {field}: list-typed attribute, dropped while the feature gate \
             DRAListTypeAttributes (alpha) is off: left out, so selectors and constraints that \
             read it do not match this device",
            slice.origin,
            slice.object.metadata.name.as_deref().unwrap_or_default(),
        ));
    }
    out
}

/// A claim's devices as the API server stores them: with `DRAConsumableCapacity` off it drops
/// capacity requests, so a file that has them has them left out, each named in a warning
/// (`at`: the file, the object and the path of its `spec`).
fn stored_devices(
    devices: Option<&mut k8s_openapi::api::resource::v1::DeviceClaim>,
    features: &Features,
    at: (&impl std::fmt::Display, &str, &str),
    warnings: &mut Vec<String>,
) {
    let Some(devices) = devices else {
        return;
    };
    if features.consumable_capacity {
        return;
    }
    let (origin, object, spec) = at;
    for (i, request) in devices.requests.iter_mut().flatten().enumerate() {
        let mut dropped = Vec::new();
        if let Some(e) = request.exactly.as_mut()
            && e.capacity.take().is_some()
        {
            dropped.push(format!("{spec}.devices.requests[{i}].exactly.capacity"));
        }
        for (j, sub) in request.first_available.iter_mut().flatten().enumerate() {
            if sub.capacity.take().is_some() {
                dropped.push(format!(
                    "{spec}.devices.requests[{i}].firstAvailable[{j}].capacity"
                ));
            }
        }
        for field in dropped {
            warnings.push(format!(
                "{origin}: {object}: {field}: capacity request, dropped while the feature gate \
                 DRAConsumableCapacity is off: left out, so the request takes whole devices"
            ));
        }
    }
}

fn key(namespace: Option<&str>, name: Option<&str>) -> String {
    format!(
        "{}/{}",
        namespace.unwrap_or("default"),
        name.unwrap_or_default()
    )
}

/// How a NodePool's nodes publish devices, from the settings' driver gates and the EC2NodeClass
/// consumable-capacity and dynamic-MIG annotations (a bad value is reported and treated as
/// disabled).
pub(super) fn template_options(
    settings: &Settings,
    class: &Sourced<joiner_model::api::EC2NodeClass>,
    warnings: &mut Vec<String>,
) -> TemplateOptions {
    use crate::catalog::devices::ConsumableCapacity;
    let consumable = ConsumableCapacity::from_annotations(class.object.metadata.annotations.as_ref()).unwrap_or_else(|e| {
        warnings.push(format!(
            "{}: EC2NodeClass/{}: metadata.annotations.{key}: {e}; GPU sharing is disabled for its nodes",
            class.origin,
            class.object.metadata.name.as_deref().unwrap_or_default(),
            key = annotations::NVIDIA_CONSUMABLE_CAPACITY,
        ));
        ConsumableCapacity::Disabled
    });
    let dynamic_mig = match class
        .object
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::NVIDIA_DYNAMIC_MIG))
        .map(String::as_str)
    {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            warnings.push(format!(
                "{}: EC2NodeClass/{}: metadata.annotations.{key}: {other:?} is not \"true\" or \"false\"; dynamic MIG is off for its nodes",
                class.origin,
                class.object.metadata.name.as_deref().unwrap_or_default(),
                key = annotations::NVIDIA_DYNAMIC_MIG,
            ));
            false
        }
    };
    TemplateOptions {
        nvidia_gpu: settings.dra_nvidia_gpu,
        efa: settings.dra_efa,
        consumable,
        dynamic_mig,
    }
}
