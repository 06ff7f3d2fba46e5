//! PodDisruptionBudgets, as the API server's Eviction subresource enforces them: an eviction is
//! refused (HTTP 429) while it would leave fewer pods healthy than the budget allows. The
//! in-memory API server applies this to every [`ClusterStore::evict`](super::ClusterStore::evict).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

fn matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expressions = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    by_labels && by_expressions
}

fn scaled(v: &IntOrString, total: usize) -> usize {
    match v {
        IntOrString::Int(n) => usize::try_from(*n).unwrap_or(0),
        IntOrString::String(s) => s
            .trim()
            .strip_suffix('%')
            .and_then(|p| p.trim().parse::<usize>().ok())
            .map(|p| (total * p).div_ceil(100))
            .unwrap_or(0),
    }
}

/// The PodDisruptionBudget that allows no eviction of `pod` now, if one does: its
/// `status.disruptionsAllowed` as the API server's disruption controller keeps it, or, for a
/// budget without a status (a budget just created, the in-memory double), the count
/// [`Budgets`] makes from `pods`. What Karpenter asks before it picks a node to drain
/// gracefully: a drain a budget blocks would only hold its node, and its replacement, up.
pub fn blocking(pdbs: &[PodDisruptionBudget], pods: &[Pod], pod: &Pod) -> Option<String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    pdbs.iter()
        .filter(|pdb| pdb.metadata.namespace.as_deref().unwrap_or("default") == ns)
        .filter(|pdb| {
            pdb.spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .is_some_and(|sel| matches(sel, &labels))
        })
        .find(|pdb| match &pdb.status {
            // The eviction API reads an unset count as Go's zero: no eviction allowed.
            Some(status) => status.disruptions_allowed.unwrap_or(0) <= 0,
            None => !Budgets::new(std::slice::from_ref(*pdb), pods).try_evict(pod),
        })
        .map(|pdb| format!("{ns}/{}", pdb.metadata.name.as_deref().unwrap_or_default()))
}

/// How many more evictions each budget allows now, by budget key, and which budgets cover a pod.
pub struct Budgets {
    left: BTreeMap<String, usize>,
    selectors: Vec<(String, String, LabelSelector)>,
}

impl Budgets {
    /// `pods`: every pod of the cluster (a pod counts as healthy when bound and not deleting).
    pub fn new(pdbs: &[PodDisruptionBudget], pods: &[Pod]) -> Budgets {
        let mut left = BTreeMap::new();
        let mut selectors = Vec::new();
        for pdb in pdbs {
            let ns = pdb
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let key = format!("{ns}/{}", pdb.metadata.name.as_deref().unwrap_or_default());
            let Some(spec) = &pdb.spec else { continue };
            let Some(selector) = spec.selector.clone() else {
                continue;
            };
            let covered: Vec<&Pod> = pods
                .iter()
                .filter(|p| p.metadata.namespace.as_deref().unwrap_or("default") == ns)
                .filter(|p| matches(&selector, &p.metadata.labels.clone().unwrap_or_default()))
                .collect();
            let expected = covered.len();
            let healthy = covered
                .iter()
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                })
                .count();
            let allowed = if let Some(min) = &spec.min_available {
                healthy.saturating_sub(scaled(min, expected))
            } else if let Some(max) = &spec.max_unavailable {
                scaled(max, expected).saturating_sub(expected - healthy)
            } else {
                usize::MAX
            };
            left.insert(key.clone(), allowed);
            selectors.push((key, ns, selector));
        }
        Budgets { left, selectors }
    }

    /// Takes one eviction of `pod` from every budget covering it; false (and nothing taken) if
    /// any of them is spent.
    pub fn try_evict(&mut self, pod: &Pod) -> bool {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let covering: Vec<String> = self
            .selectors
            .iter()
            .filter(|(_, n, s)| n == ns && matches(s, &labels))
            .map(|(k, _, _)| k.clone())
            .collect();
        if covering
            .iter()
            .any(|k| self.left.get(k).copied().unwrap_or(0) == 0)
        {
            return false;
        }
        for k in covering {
            if let Some(n) = self.left.get_mut(&k) {
                *n = n.saturating_sub(1);
            }
        }
        true
    }
}
