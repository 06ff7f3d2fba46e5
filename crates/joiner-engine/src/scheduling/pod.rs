//! A pod as the scheduler sees it: requests, node constraints and pod topology constraints,
//! compiled once from the Kubernetes object so the planner's inner loops never re-parse.

use std::collections::BTreeSet;

use joiner_model::wellknown::{annotations, labels};
use joiner_model::{InputError, ObjectRef, ResourceList, Source, pod_requests};
use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, NodeSelectorTerm, Pod, PodAffinityTerm, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::requirements::{Labels, Requirement, Requirements};

/// Which domain a topology constraint counts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TopologyKey {
    Zone,
    Hostname,
}

impl TopologyKey {
    pub fn parse(key: &str) -> Option<TopologyKey> {
        match key {
            labels::ZONE | "failure-domain.beta.kubernetes.io/zone" => Some(TopologyKey::Zone),
            labels::HOSTNAME => Some(TopologyKey::Hostname),
            _ => None,
        }
    }
}

/// Which pods a topology term counts: a label selector over pods in some namespaces.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodSelector {
    /// `None` means every namespace.
    pub namespaces: Option<BTreeSet<String>>,
    /// Label requirements, in the requirement algebra (label selectors use the same operators).
    pub selector: SelectorKey,
}

/// A label selector kept in a hashable canonical form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SelectorKey(pub Vec<(String, String, Vec<String>)>);

impl SelectorKey {
    pub fn requirements(&self) -> Requirements {
        let mut r = Requirements::new();
        for (key, op, values) in &self.0 {
            if let Ok(req) = Requirement::new(op, values) {
                r.add(key, req);
            }
        }
        r
    }
}

/// One topology spread constraint.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SpreadConstraint {
    pub key: TopologyKey,
    pub max_skew: u32,
    /// `DoNotSchedule`; otherwise `ScheduleAnyway`, honoured only when possible.
    pub hard: bool,
    pub selector: PodSelector,
}

/// One pod affinity or anti-affinity term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AffinityTerm {
    pub key: TopologyKey,
    pub anti: bool,
    /// Required; otherwise preferred (honoured when possible).
    pub required: bool,
    pub selector: PodSelector,
}

/// Karpenter's cost of evicting a pod: 1, plus its `controller.kubernetes.io/pod-deletion-cost`
/// over 2^27, plus its priority over 2^25, within -10 and 10. Pods that matter more cost more
/// to move; Balanced consolidation weighs moves by it.
pub fn eviction_cost(pod: &Pod) -> f64 {
    let deletion_cost = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::POD_DELETION_COST))
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|c| c.is_finite())
        .unwrap_or(0.0);
    let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
    (1.0 + deletion_cost / 2f64.powi(27) + f64::from(priority) / 2f64.powi(25)).clamp(-10.0, 10.0)
}

/// A pod compiled for scheduling.
#[derive(Debug, Clone)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
    /// Set for pods already bound to a node.
    pub node_name: Option<String>,
    pub requests: ResourceList,
    /// `nodeSelector` and required node affinity: alternatives (ORed terms), each already
    /// intersected with the node selector. No affinity is one alternative (the node selector);
    /// an empty list means every term contradicts the node selector, so no node can match.
    pub node_requirements: Vec<Requirements>,
    /// Preferred node-affinity terms, highest weight first.
    pub preferred_node_requirements: Vec<Requirements>,
    pub tolerations: Vec<Toleration>,
    pub spread: Vec<SpreadConstraint>,
    pub affinity: Vec<AffinityTerm>,
    /// Whether the pod uses ResourceClaims (a DRA pod).
    pub has_resource_claims: bool,
    /// `namespace/name` of the DaemonSet that owns this pod, if any.
    pub daemon_set: Option<String>,
    /// Held by `karpenter.sh/do-not-disrupt` (`"true"`, or a duration not yet run out): its
    /// node is not consolidated while it runs.
    pub do_not_disrupt: bool,
    /// What evicting it costs, as Karpenter weighs disruption ([`eviction_cost`]).
    pub eviction_cost: f64,
    /// For a CapacityBuffer's virtual pod, its buffer (`namespace/name`): room kept for pods to
    /// come, placed after every real pod ([`joiner_model::buffers`]).
    pub capacity_buffer: Option<String>,
}

impl PodInfo {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Compiles a pod, with errors naming the field.
    pub fn compile(pod: &Pod, origin: &Source) -> Result<PodInfo, InputError> {
        let namespace = pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = pod.metadata.name.clone().unwrap_or_default();
        let object = ObjectRef::new("Pod", Some(&namespace), &name);
        let err = |field: String, msg: String| InputError::new(origin, &object, field, msg);
        let Some(spec) = pod.spec.as_ref() else {
            return Err(err("spec".into(), "a pod needs a spec".into()));
        };
        let mut requests = pod_requests(spec)
            .map_err(|(field, e)| err(format!("spec.{field}.{}", e.name), e.error.to_string()))?;
        // Every pod takes one of its node's `pods` slots (the kubelet's max pods).
        requests.insert("pods".to_string(), joiner_model::Quantity::from_units(1));

        let mut base = Requirements::new();
        for (k, v) in spec.node_selector.iter().flatten() {
            base.add(k, Requirement::equals(v));
        }
        let node_affinity = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref());
        let mut node_requirements = Vec::new();
        if let Some(required) = node_affinity.and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        }) {
            for (i, term) in required.node_selector_terms.iter().enumerate() {
                let path = format!(
                    "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"
                );
                let term = compile_term(term, &path).map_err(|(f, m)| err(f, m))?;
                // A term that contradicts the nodeSelector can never match; keep the others.
                if let Ok(both) = base.intersect(&term) {
                    node_requirements.push(both);
                }
            }
        } else {
            node_requirements.push(base);
        }
        let mut preferred: Vec<(i32, Requirements)> = Vec::new();
        for (i, p) in node_affinity
            .and_then(|n| {
                n.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .into_iter()
            .flatten()
            .enumerate()
        {
            let path = format!(
                "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"
            );
            preferred.push((
                p.weight,
                compile_term(&p.preference, &path).map_err(|(f, m)| err(f, m))?,
            ));
        }
        preferred.sort_by_key(|p| std::cmp::Reverse(p.0));

        let mut spread = Vec::new();
        for (i, c) in spec
            .topology_spread_constraints
            .iter()
            .flatten()
            .enumerate()
        {
            let path = format!("spec.topologySpreadConstraints[{i}]");
            let Some(key) = TopologyKey::parse(&c.topology_key) else {
                // Only zone and hostname domains are modelled; other keys cannot be judged
                // before the node exists, so they are not enforced.
                continue;
            };
            if c.max_skew < 1 {
                return Err(err(
                    format!("{path}.maxSkew"),
                    format!("must be at least 1, got {}", c.max_skew),
                ));
            }
            let hard = match c.when_unsatisfiable.as_str() {
                "DoNotSchedule" => true,
                "ScheduleAnyway" => false,
                other => {
                    return Err(err(
                        format!("{path}.whenUnsatisfiable"),
                        format!("must be DoNotSchedule or ScheduleAnyway, got {other:?}"),
                    ));
                }
            };
            let selector =
                selector_key(c.label_selector.as_ref(), &format!("{path}.labelSelector"))
                    .map_err(|(f, m)| err(f, m))?;
            spread.push(SpreadConstraint {
                key,
                max_skew: c.max_skew as u32,
                hard,
                selector: PodSelector {
                    namespaces: Some(BTreeSet::from([namespace.clone()])),
                    selector,
                },
            });
        }

        let mut affinity = Vec::new();
        let aff = spec.affinity.as_ref();
        let pod_aff = aff.and_then(|a| a.pod_affinity.as_ref());
        let pod_anti = aff.and_then(|a| a.pod_anti_affinity.as_ref());
        let groups: [(bool, bool, &str, Vec<&PodAffinityTerm>); 4] = [
            (
                false,
                true,
                "podAffinity.requiredDuringSchedulingIgnoredDuringExecution",
                pod_aff
                    .and_then(|p| {
                        p.required_during_scheduling_ignored_during_execution
                            .as_ref()
                    })
                    .into_iter()
                    .flatten()
                    .collect(),
            ),
            (
                false,
                false,
                "podAffinity.preferredDuringSchedulingIgnoredDuringExecution",
                pod_aff
                    .and_then(|p| {
                        p.preferred_during_scheduling_ignored_during_execution
                            .as_ref()
                    })
                    .into_iter()
                    .flatten()
                    .map(|w| &w.pod_affinity_term)
                    .collect(),
            ),
            (
                true,
                true,
                "podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution",
                pod_anti
                    .and_then(|p| {
                        p.required_during_scheduling_ignored_during_execution
                            .as_ref()
                    })
                    .into_iter()
                    .flatten()
                    .collect(),
            ),
            (
                true,
                false,
                "podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution",
                pod_anti
                    .and_then(|p| {
                        p.preferred_during_scheduling_ignored_during_execution
                            .as_ref()
                    })
                    .into_iter()
                    .flatten()
                    .map(|w| &w.pod_affinity_term)
                    .collect(),
            ),
        ];
        for (anti, required, field, terms) in groups {
            for (i, t) in terms.into_iter().enumerate() {
                let path = format!("spec.affinity.{field}[{i}]");
                let Some(key) = TopologyKey::parse(&t.topology_key) else {
                    continue;
                };
                let selector =
                    selector_key(t.label_selector.as_ref(), &format!("{path}.labelSelector"))
                        .map_err(|(f, m)| err(f, m))?;
                let namespaces = if t.namespace_selector.as_ref().is_some_and(|s| {
                    s.match_labels.as_ref().is_none_or(|m| m.is_empty())
                        && s.match_expressions.as_ref().is_none_or(|m| m.is_empty())
                }) {
                    // An empty namespaceSelector selects every namespace.
                    None
                } else {
                    let listed: BTreeSet<String> = t.namespaces.iter().flatten().cloned().collect();
                    Some(if listed.is_empty() {
                        BTreeSet::from([namespace.clone()])
                    } else {
                        listed
                    })
                };
                affinity.push(AffinityTerm {
                    key,
                    anti,
                    required,
                    selector: PodSelector {
                        namespaces,
                        selector,
                    },
                });
            }
        }

        let has_resource_claims = spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty())
            || spec
                .containers
                .iter()
                .chain(spec.init_containers.iter().flatten())
                .any(|c| {
                    c.resources
                        .as_ref()
                        .and_then(|r| r.claims.as_ref())
                        .is_some_and(|c| !c.is_empty())
                });

        Ok(PodInfo {
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            namespace: namespace.clone(),
            name,
            node_name: spec.node_name.clone().filter(|n| !n.is_empty()),
            requests,
            node_requirements,
            preferred_node_requirements: preferred.into_iter().map(|(_, r)| r).collect(),
            tolerations: spec.tolerations.clone().unwrap_or_default(),
            spread,
            affinity,
            has_resource_claims,
            // At no particular moment a duration still protects; the snapshot, which knows the
            // time, re-reads it (`ClusterSnapshot` with `at`).
            do_not_disrupt: joiner_model::do_not_disrupt::pod_protected(pod, None),
            eviction_cost: eviction_cost(pod),
            daemon_set: pod
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.kind == "DaemonSet")
                .map(|o| format!("{namespace}/{}", o.name)),
            capacity_buffer: joiner_model::buffers::buffer_of(pod),
        })
    }

    /// Whether this pod is counted by a selector.
    pub fn selected_by(&self, selector: &PodSelector, compiled: &Requirements) -> bool {
        selector
            .namespaces
            .as_ref()
            .is_none_or(|ns| ns.contains(&self.namespace))
            && compiled.matches(&self.labels)
    }
}

fn compile_expressions(
    exprs: &[NodeSelectorRequirement],
    path: &str,
    into: &mut Requirements,
) -> Result<(), (String, String)> {
    for (i, e) in exprs.iter().enumerate() {
        let values = e.values.clone().unwrap_or_default();
        let req = Requirement::new(&e.operator, &values)
            .map_err(|m| (format!("{path}[{i}]"), m.to_string()))?;
        into.add(&e.key, req);
    }
    Ok(())
}

pub(crate) fn compile_term(
    term: &NodeSelectorTerm,
    path: &str,
) -> Result<Requirements, (String, String)> {
    let mut r = Requirements::new();
    compile_expressions(
        term.match_expressions.as_deref().unwrap_or_default(),
        &format!("{path}.matchExpressions"),
        &mut r,
    )?;
    // matchFields only supports metadata.name, which a new node cannot satisfy in advance.
    for (i, f) in term.match_fields.iter().flatten().enumerate() {
        let values = f.values.clone().unwrap_or_default();
        let req = Requirement::new(&f.operator, &values)
            .map_err(|m| (format!("{path}.matchFields[{i}]"), m.to_string()))?;
        r.add("metadata.name", req);
    }
    Ok(r)
}

/// A label selector in canonical form; `None` selects nothing, as Kubernetes treats a missing
/// selector in affinity terms and spread constraints.
fn selector_key(
    selector: Option<&LabelSelector>,
    path: &str,
) -> Result<SelectorKey, (String, String)> {
    let Some(sel) = selector else {
        return Ok(SelectorKey(vec![(
            "<no selector>".into(),
            "In".into(),
            vec!["<nothing>".into()],
        )]));
    };
    let mut out = Vec::new();
    for (k, v) in sel.match_labels.iter().flatten() {
        out.push((k.clone(), "In".to_string(), vec![v.clone()]));
    }
    for (i, e) in sel.match_expressions.iter().flatten().enumerate() {
        if !matches!(
            e.operator.as_str(),
            "In" | "NotIn" | "Exists" | "DoesNotExist"
        ) {
            return Err((
                format!("{path}.matchExpressions[{i}].operator"),
                format!(
                    "unknown operator {:?} (In, NotIn, Exists, DoesNotExist)",
                    e.operator
                ),
            ));
        }
        let mut values = e.values.clone().unwrap_or_default();
        values.sort();
        Requirement::new(&e.operator, &values)
            .map_err(|m| (format!("{path}.matchExpressions[{i}]"), m.to_string()))?;
        out.push((e.key.clone(), e.operator.clone(), values));
    }
    out.sort();
    Ok(SelectorKey(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Result<PodInfo, InputError> {
        let pod: Pod =
            serde_json::from_value(serde_saphyr::from_str::<serde_json::Value>(yaml).unwrap())
                .unwrap();
        PodInfo::compile(&pod, &Source::new("test.yaml", 1))
    }

    #[test]
    fn node_affinity_terms_are_alternatives_joined_with_the_node_selector() {
        let p = pod(r#"
metadata: {name: p}
spec:
  nodeSelector: {kubernetes.io/arch: amd64}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [arm64]}]
        - matchExpressions: [{key: node.kubernetes.io/instance-type, operator: In, values: [g4dn.xlarge]}]
  containers: [{name: c}]
"#).unwrap();
        // The first term contradicts the nodeSelector and is dropped.
        assert_eq!(p.node_requirements.len(), 1);
        let labels = Labels::from([
            ("kubernetes.io/arch".to_string(), "amd64".to_string()),
            (
                "node.kubernetes.io/instance-type".to_string(),
                "g4dn.xlarge".to_string(),
            ),
        ]);
        assert!(p.node_requirements[0].matches(&labels));
    }

    #[test]
    fn bad_fields_are_named() {
        let e = pod("metadata: {name: p, namespace: ns}\nspec:\n  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n        - matchExpressions: [{key: a, operator: Near}]\n  containers: [{name: c}]\n").unwrap_err();
        assert_eq!(e.object.to_string(), "Pod/ns/p");
        assert_eq!(
            e.field,
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]"
        );
        let e = pod("metadata: {name: p}\nspec:\n  containers: [{name: c, resources: {requests: {memory: 1Qi}}}]\n").unwrap_err();
        assert_eq!(e.field, "spec.containers[0].resources.requests.memory");
        let e = pod("metadata: {name: p}\nspec:\n  topologySpreadConstraints: [{maxSkew: 0, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}]\n  containers: [{name: c}]\n").unwrap_err();
        assert_eq!(e.field, "spec.topologySpreadConstraints[0].maxSkew");
    }

    #[test]
    fn topology_terms_compile() {
        let p = pod(r#"
metadata: {name: p, namespace: team, labels: {app: web}}
spec:
  topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: web}}}
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}
  containers: [{name: c}]
"#).unwrap();
        assert_eq!(p.spread.len(), 1);
        assert!(!p.spread[0].hard);
        assert_eq!(p.affinity.len(), 1);
        assert!(p.affinity[0].anti && p.affinity[0].required);
        let sel = &p.affinity[0].selector;
        assert!(p.selected_by(sel, &sel.selector.requirements()));
    }
}
