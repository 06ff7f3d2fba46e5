//! Dense resource vectors for the planner's inner loops.
//!
//! Resource lists are maps keyed by name; comparing maps for every (pod, node) pair would
//! dominate planning time. Every resource name seen in the input gets an index once, and the
//! planner works on fixed-length vectors of exact nano-unit values.

use std::collections::HashMap;

use joiner_model::{Quantity, ResourceList};

/// The pseudo-resource `limits.nodes` names: a count of the pool's nodes.
const NODES_LIMIT: &str = "nodes";
/// One node, in the nanos every amount is kept in.
const ONE_NODE: i128 = 1_000_000_000;

/// Room a node has, for the planner, in a resource it does not count: far more than any
/// plan asks for, and far from overflowing when added up.
const UNCOUNTED: i128 = 1_000_000_000_000_000_000_000;

/// Resource name <-> index.
#[derive(Debug, Default, Clone)]
pub struct ResourceIndex {
    names: Vec<String>,
    index: HashMap<String, usize>,
    /// Resources DRA serves where a node does not advertise them ([`Self::allocatable`]).
    delegated: Vec<usize>,
}

/// Exact amounts, one per indexed resource.
pub type Amounts = Vec<i128>;

impl ResourceIndex {
    /// Indexes names in the order given (the planner gives them sorted).
    pub fn intern_names(&mut self, names: impl IntoIterator<Item = String>) {
        for name in names {
            if !self.index.contains_key(&name) {
                self.index.insert(name.clone(), self.names.len());
                self.names.push(name);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    pub fn position(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// A list as a vector; names not interned are ignored (intern every input first).
    pub fn amounts(&self, list: &ResourceList) -> Amounts {
        let mut v = vec![0; self.names.len()];
        for (name, q) in list {
            if let Some(&i) = self.index.get(name) {
                v[i] = q.nanos();
            }
        }
        v
    }

    /// Marks extended resources a DeviceClass serves (`DRAExtendedResource`).
    pub fn delegate_to_dra<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        self.delegated = names.into_iter().filter_map(|n| self.position(n)).collect();
        self.delegated.sort_unstable();
        self.delegated.dedup();
    }

    /// A node's allocatable as room for pods. A resource DRA serves that the node does not
    /// advertise (none, or zero) is not counted there, as kube-scheduler's resource fit leaves
    /// it to the node's DRA driver: the pod's claim for it is what must fit.
    pub fn allocatable(&self, list: &ResourceList) -> Amounts {
        let mut v = self.amounts(list);
        for &i in &self.delegated {
            if v[i] <= 0 {
                v[i] = UNCOUNTED;
            }
        }
        v
    }

    /// What a node counts against its NodePool's limits: its capacity, and one `nodes` (Karpenter
    /// v1.11's `limits.nodes`) when some limit names it.
    pub fn node_usage(&self, capacity: &ResourceList) -> Amounts {
        let mut v = self.amounts(capacity);
        if let Some(&i) = self.index.get(NODES_LIMIT) {
            v[i] = v[i].max(ONE_NODE);
        }
        v
    }

    /// A vector back as a list, leaving out zeros; `like` supplies each resource's notation.
    pub fn list(&self, amounts: &[i128], like: &ResourceList) -> ResourceList {
        amounts
            .iter()
            .enumerate()
            .filter(|(_, v)| **v != 0)
            .map(|(i, v)| {
                let name = &self.names[i];
                let format = like
                    .get(name)
                    .map(|q| q.format())
                    .unwrap_or_else(|| default_format(name));
                // Binary notation only where it reads well (whole mebibytes): 6G of requests
                // should not print as 5859375Ki.
                let format = if format == joiner_model::Format::BinarySI
                    && v % (1_000_000_000i128 << 20) != 0
                {
                    joiner_model::Format::DecimalSI
                } else {
                    format
                };
                (name.clone(), Quantity::from_nanos(*v, format))
            })
            .collect()
    }
}

fn default_format(name: &str) -> joiner_model::Format {
    if name == "memory" || name.ends_with("storage") || name.starts_with("hugepages-") {
        joiner_model::Format::BinarySI
    } else {
        joiner_model::Format::DecimalSI
    }
}

/// `extra <= capacity` in every resource `extra` uses.
#[inline]
pub fn fits_in(extra: &[i128], capacity: &[i128]) -> bool {
    extra.iter().zip(capacity).all(|(e, c)| *e == 0 || e <= c)
}

/// The first resource in which `used + extra` exceeds `capacity`.
pub fn first_shortfall(used: &[i128], extra: &[i128], capacity: &[i128]) -> Option<usize> {
    (0..used.len()).find(|&i| extra[i] != 0 && used[i] + extra[i] > capacity[i])
}

pub fn add(into: &mut [i128], other: &[i128]) {
    for (a, b) in into.iter_mut().zip(other) {
        *a += b;
    }
}

pub fn sub(into: &mut [i128], other: &[i128]) {
    for (a, b) in into.iter_mut().zip(other) {
        *a -= b;
    }
}
