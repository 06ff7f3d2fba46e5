//! Volume topology: where a pod's persistent volumes live pins the zones its node can be in,
//! judged as kube-scheduler's VolumeBinding plugin and Karpenter's volume topology judge it.
//!
//! A bound claim's PersistentVolume carries the node affinity its driver wrote (an EBS volume:
//! its zone); an unbound claim whose StorageClass waits for the first consumer is provisioned
//! where the pod lands, within the class's `allowedTopologies`. Each term of either is an
//! alternative; a pod with several volumes needs an alternative of each at once. What
//! kube-scheduler would not schedule (a claim missing or being deleted, a volume missing, an
//! unbound claim of an immediate class) keeps the pod waiting with the scheduler's reason,
//! rather than launching a node it cannot use.

use std::borrow::Cow;
use std::collections::HashMap;

use joiner_model::Manifests;
use k8s_openapi::api::core::v1::{
    NodeSelectorTerm, PersistentVolume, PersistentVolumeClaim, Pod, Volume,
};
use k8s_openapi::api::storage::v1::StorageClass;

use crate::requirements::{Requirement, Requirements};
use crate::scheduling::compile_term;

/// The annotation that marks the cluster's default StorageClass, which the API server gives a
/// claim written without one.
const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

/// Topology keys that name a zone under another name (Karpenter on AWS normalizes the EBS CSI
/// driver's key, and Kubernetes' beta key, to the well-known one).
const ZONE_ALIASES: &[&str] = &[
    "topology.ebs.csi.aws.com/zone",
    "failure-domain.beta.kubernetes.io/zone",
];
const ZONE: &str = "topology.kubernetes.io/zone";
const HOSTNAME: &str = "kubernetes.io/hostname";

/// The claims, volumes and classes of one input.
pub(crate) struct Volumes<'a> {
    claims: HashMap<(&'a str, &'a str), &'a PersistentVolumeClaim>,
    volumes: HashMap<&'a str, &'a PersistentVolume>,
    classes: HashMap<&'a str, &'a StorageClass>,
    default_class: Option<&'a str>,
}

/// What a pod volume stands on: a claim, or the template of an ephemeral claim not created yet.
enum Claimed<'a> {
    Claim(Cow<'a, str>, &'a PersistentVolumeClaim),
    Template(&'a str, Option<&'a str>),
}

impl<'a> Volumes<'a> {
    pub(crate) fn of(m: &'a Manifests) -> Volumes<'a> {
        let name = |meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            meta.name.as_deref().unwrap_or_default()
        };
        Volumes {
            claims: m
                .persistent_volume_claims
                .iter()
                .map(|c| {
                    let ns = c.object.metadata.namespace.as_deref().unwrap_or("default");
                    ((ns, name(&c.object.metadata)), &c.object)
                })
                .collect(),
            volumes: m
                .persistent_volumes
                .iter()
                .map(|v| (name(&v.object.metadata), &v.object))
                .collect(),
            classes: m
                .storage_classes
                .iter()
                .map(|c| (name(&c.object.metadata), &c.object))
                .collect(),
            default_class: m
                .storage_classes
                .iter()
                .find(|c| {
                    c.object
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(DEFAULT_CLASS))
                        .is_some_and(|v| v == "true")
                })
                .map(|c| name(&c.object.metadata)),
        }
    }

    /// The node-requirement alternatives the pod's volumes allow: `None` when no volume
    /// constrains the node, or why the pod cannot be scheduled yet.
    pub(crate) fn requirements(&self, pod: &Pod) -> Result<Option<Vec<Requirements>>, String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        let mut alternatives: Option<Vec<Requirements>> = None;
        for volume in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            let Some(claimed) = self.claimed(ns, pod_name, volume)? else {
                continue;
            };
            let of_volume = match claimed {
                Claimed::Claim(name, claim) => self.of_claim(&name, claim)?,
                Claimed::Template(name, class) => self.of_class(name, class)?,
            };
            if of_volume.is_empty() {
                continue;
            }
            alternatives = Some(match alternatives {
                None => of_volume,
                Some(so_far) => {
                    let both = cross(&so_far, &of_volume);
                    if both.is_empty() {
                        return Err(format!(
                            "its volumes have no topology in common ({} and {})",
                            describe(&so_far),
                            describe(&of_volume)
                        ));
                    }
                    both
                }
            });
        }
        Ok(alternatives)
    }

    fn claimed(
        &self,
        ns: &str,
        pod: &str,
        volume: &'a Volume,
    ) -> Result<Option<Claimed<'a>>, String> {
        if let Some(source) = &volume.persistent_volume_claim {
            let name = source.claim_name.as_str();
            return match self.claims.get(&(ns, name)) {
                Some(claim) => Ok(Some(Claimed::Claim(Cow::Borrowed(name), claim))),
                None => Err(format!("persistentvolumeclaim \"{name}\" not found")),
            };
        }
        let Some(ephemeral) = &volume.ephemeral else {
            return Ok(None);
        };
        // The ephemeral volume controller names the claim `<pod>-<volume>`; before it exists
        // (a pod from a file), the template says what it will be.
        let generated = format!("{pod}-{}", volume.name);
        if let Some(claim) = self.claims.get(&(ns, generated.as_str())) {
            return Ok(Some(Claimed::Claim(Cow::Owned(generated.clone()), claim)));
        }
        let class = ephemeral
            .volume_claim_template
            .as_ref()
            .and_then(|t| t.spec.storage_class_name.as_deref());
        Ok(Some(Claimed::Template(volume.name.as_str(), class)))
    }

    fn of_claim(
        &self,
        name: &str,
        claim: &'a PersistentVolumeClaim,
    ) -> Result<Vec<Requirements>, String> {
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(format!("persistentvolumeclaim \"{name}\" is being deleted"));
        }
        let bound_to = claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .filter(|v| !v.is_empty());
        if claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
            return Err(format!(
                "persistentvolumeclaim \"{name}\" bound to non-existent persistentvolume \"{}\"",
                bound_to.unwrap_or_default()
            ));
        }
        if let Some(volume) = bound_to {
            let Some(pv) = self.volumes.get(volume) else {
                return Err(format!("persistentvolume \"{volume}\" not found"));
            };
            if pv.metadata.deletion_timestamp.is_some() {
                return Err(format!("persistentvolume \"{volume}\" is being deleted"));
            }
            return of_volume(volume, pv);
        }
        let class = claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref());
        self.of_class(name, class)
    }

    /// An unbound claim of `class` (the default class when it names none).
    fn of_class(&self, claim: &str, class: Option<&str>) -> Result<Vec<Requirements>, String> {
        let Some(class) = class.or(self.default_class).filter(|c| !c.is_empty()) else {
            return Err(format!(
                "persistentvolumeclaim \"{claim}\" is unbound and names no StorageClass, and \
                 there is no default StorageClass"
            ));
        };
        let Some(sc) = self.classes.get(class) else {
            return Err(format!(
                "persistentvolumeclaim \"{claim}\": storageclass.storage.k8s.io \"{class}\" not found"
            ));
        };
        if sc.volume_binding_mode.as_deref() != Some("WaitForFirstConsumer") {
            return Err(format!(
                "pod has unbound immediate PersistentVolumeClaims (\"{claim}\", StorageClass \
                 \"{class}\" binds immediately): it waits for its volume to be provisioned"
            ));
        }
        let mut alternatives = Vec::new();
        for term in sc.allowed_topologies.iter().flatten() {
            let mut r = Requirements::new();
            for e in term.match_label_expressions.iter().flatten() {
                let req = Requirement::new("In", &e.values).map_err(|m| {
                    format!("StorageClass {class}: allowedTopologies {}: {m}", e.key)
                })?;
                r.add(normalized(&e.key), req);
            }
            if !r.is_empty() {
                alternatives.push(r);
            }
        }
        Ok(alternatives)
    }
}

/// The node-affinity terms of a volume, each an alternative; a local or hostPath volume's
/// hostname is left out (a new node has a new name: the pod moves, the data does not).
fn of_volume(name: &str, pv: &PersistentVolume) -> Result<Vec<Requirements>, String> {
    let Some(spec) = &pv.spec else {
        return Ok(Vec::new());
    };
    let local = spec.local.is_some() || spec.host_path.is_some();
    let terms = spec
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    let mut alternatives = Vec::new();
    for (i, term) in terms.iter().enumerate() {
        let expressions: Vec<_> = term
            .match_expressions
            .iter()
            .flatten()
            .filter(|e| !(local && e.key == HOSTNAME))
            .map(|e| {
                let mut e = e.clone();
                e.key = normalized(&e.key).to_string();
                e
            })
            .collect();
        let path = format!("spec.nodeAffinity.required.nodeSelectorTerms[{i}]");
        let term = NodeSelectorTerm {
            match_expressions: Some(expressions),
            match_fields: term.match_fields.clone(),
        };
        let r = compile_term(&term, &path)
            .map_err(|(field, m)| format!("PersistentVolume {name}: {field}: {m}"))?;
        alternatives.push(r);
    }
    // A term left empty (hostname only) allows any node: no constraint at all.
    if alternatives.iter().any(Requirements::is_empty) {
        return Ok(Vec::new());
    }
    Ok(alternatives)
}

fn normalized(key: &str) -> &str {
    if ZONE_ALIASES.contains(&key) {
        ZONE
    } else {
        key
    }
}

/// Every compatible pair of alternatives, intersected.
pub(crate) fn cross(a: &[Requirements], b: &[Requirements]) -> Vec<Requirements> {
    a.iter()
        .flat_map(|x| b.iter().filter_map(move |y| x.intersect(y).ok()))
        .collect()
}

/// Alternatives as a person reads them: `zone In [us-east-1a] or zone In [us-east-1b]`.
pub(crate) fn describe(alternatives: &[Requirements]) -> String {
    alternatives
        .iter()
        .map(|r| {
            r.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect::<Vec<_>>()
        .join(" or ")
}
