//! Dynamic Resource Allocation inside the planner.
//!
//! Existing nodes are judged by the devices their drivers published; planned nodes by the
//! devices their instance type will publish (the catalog's templates, synthesized as node-local
//! slices named after the NodeClaim). Every instance type a NodePool may launch also gets a
//! "probe" node of its own in the same inventory, so that "could a new node of this type serve
//! these claims?" is the same allocator call as for a real node, answered once per class of pod.
//!
//! A NodeClaim that holds allocations keeps its instance type: growing it would change the
//! devices the allocations refer to.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

use joiner_dra::{
    AllocationState, Allocator, ClaimAllocation, Inventory, NodeInfo, NodeView, PreparedClaims,
};
use k8s_openapi::api::resource::v1::{AllocationResult, ResourceClaim, ResourceClaimStatus};

use super::super::{DraInput, ExistingNode, PoolInput};
use crate::catalog::devices::{DeviceTemplates, GPU_RUNTIME_ATTRIBUTES};

/// The name of the probe node that stands for a new node of one instance type of one pool.
fn probe_name(pool: &str, instance_type: &str) -> String {
    format!("joiner-probe.{pool}.{instance_type}")
}

#[derive(Clone)]
pub(super) struct Dra {
    allocator: Rc<Allocator>,
    inventory: Inventory,
    state: AllocationState,
    claims: BTreeMap<String, ResourceClaim>,
    pod_claims: Vec<Vec<String>>,
    /// How many pods use each claim: claims used by several are shared.
    users: HashMap<String, usize>,
    node_views: Vec<NodeView>,
    /// Per planned NodeClaim: its devices, once it was created for a pod with claims.
    claim_views: Vec<Option<NodeView>>,
    /// Per pool and option: the probe node, when the type has devices.
    probes: Vec<Vec<Option<NodeView>>>,
    templates: Vec<Vec<Option<std::sync::Arc<DeviceTemplates>>>>,
    prepared: RefCell<Vec<Option<Rc<PreparedClaims>>>>,
    /// The drivers each DeviceClass's selectors name (`device.driver == "..."`).
    class_drivers: HashMap<String, BTreeSet<String>>,
    /// Drivers whose devices some instance type that may be launched publishes.
    launchable_drivers: BTreeSet<String>,
    /// Per (class, pool, option): how many pods of the class a new node of that type serves.
    probe_copies: RefCell<HashMap<(usize, usize, usize, u32), u32>>,
    /// Allocations made, in order: claim, node, result.
    pub results: Vec<(String, String, AllocationResult)>,
}

impl Dra {
    pub fn new(
        input: &DraInput,
        pools: &[PoolInput],
        nodes: &[ExistingNode],
        pod_count: usize,
    ) -> Dra {
        let mut probe_slices = Vec::new();
        for pool in pools {
            for o in &pool.options {
                if let Some(src) = &o.devices {
                    probe_slices.extend(
                        src.templates
                            .node_slices(&probe_name(&pool.name, &o.instance_type), &src.options),
                    );
                }
            }
        }
        let inventory = Inventory::from_slices(input.slices.iter().chain(probe_slices.iter()));
        let allocated = input
            .claims
            .values()
            .chain(input.in_use.iter())
            .filter(|c| c.status.as_ref().is_some_and(|s| s.allocation.is_some()));
        let state = AllocationState::from_claims(&inventory, allocated);
        let node_views = nodes
            .iter()
            .map(|n| inventory.node_view(&node_info(&n.name, &n.labels)))
            .collect();
        let probes = pools
            .iter()
            .map(|pool| {
                pool.options
                    .iter()
                    .map(|o| {
                        o.devices.as_ref().map(|_| {
                            let mut labels = o.labels.clone();
                            labels.extend(pool.labels.clone());
                            inventory.node_view(&node_info(
                                &probe_name(&pool.name, &o.instance_type),
                                &labels,
                            ))
                        })
                    })
                    .collect()
            })
            .collect();
        let templates = pools
            .iter()
            .map(|p| {
                p.options
                    .iter()
                    .map(|o| o.devices.as_ref().map(|d| d.templates.clone()))
                    .collect()
            })
            .collect();
        let mut users = HashMap::new();
        for key in input.pod_claims.iter().flatten() {
            *users.entry(key.clone()).or_insert(0) += 1;
        }
        let mut pod_claims = input.pod_claims.clone();
        pod_claims.resize(pod_count, Vec::new());
        let class_drivers = input
            .classes
            .iter()
            .map(|c| {
                let text = serde_json::to_string(&c.spec.selectors).unwrap_or_default();
                (
                    c.metadata.name.clone().unwrap_or_default(),
                    named_drivers(&text),
                )
            })
            .collect();
        let launchable_drivers = pools
            .iter()
            .flat_map(|p| &p.options)
            .filter_map(|o| o.devices.as_ref())
            .flat_map(|d| {
                d.templates
                    .pools
                    .iter()
                    .filter(|t| d.options.driver_enabled(&t.driver))
                    .map(|t| t.driver.clone())
            })
            .collect();
        Dra {
            class_drivers,
            launchable_drivers,
            allocator: Rc::new(Allocator::new(
                input.features,
                input.classes.iter().cloned(),
            )),
            inventory,
            state,
            claims: input.claims.clone(),
            pod_claims,
            users,
            node_views,
            claim_views: Vec::new(),
            probes,
            templates,
            prepared: RefCell::new(vec![None; pod_count]),
            probe_copies: RefCell::new(HashMap::new()),
            results: Vec::new(),
        }
    }

    pub fn uses_claims(&self, p: usize) -> bool {
        self.pod_claims.get(p).is_some_and(|c| !c.is_empty())
    }

    /// What distinguishes this pod's claims from another pod's, for scheduling classes: the
    /// specs of its own claims, and the names of claims it shares.
    pub fn class_key(&self, p: usize) -> String {
        let Some(keys) = self.pod_claims.get(p) else {
            return String::new();
        };
        keys.iter()
            .map(|k| match self.claims.get(k) {
                Some(c)
                    if self.users.get(k).copied().unwrap_or(0) <= 1
                        && c.status
                            .as_ref()
                            .and_then(|s| s.allocation.as_ref())
                            .is_none() =>
                {
                    serde_json::to_string(&c.spec).unwrap_or_default()
                }
                _ => k.clone(),
            })
            .collect::<Vec<_>>()
            .join("|")
    }

    fn prepared(&self, p: usize) -> Rc<PreparedClaims> {
        if let Some(Some(hit)) = self.prepared.borrow().get(p) {
            return hit.clone();
        }
        let claims = self
            .pod_claims
            .get(p)
            .into_iter()
            .flatten()
            .filter_map(|k| self.claims.get(k));
        let prepared = Rc::new(self.allocator.prepare(claims));
        if let Some(slot) = self.prepared.borrow_mut().get_mut(p) {
            *slot = Some(prepared.clone());
        }
        prepared
    }

    /// Why the pod's claims cannot be allocated on any node, when that is so whatever the node
    /// (a device class that does not exist, a selector that does not compile, a request the
    /// cluster's feature gates refuse).
    pub fn broken(&self, p: usize) -> Option<String> {
        self.prepared(p).broken().map(ToString::to_string)
    }

    fn try_on(&self, p: usize, view: &NodeView) -> Option<Vec<ClaimAllocation>> {
        let prepared = self.prepared(p);
        self.allocator
            .session(&self.inventory)
            .try_allocate(view, &self.state, &prepared)
    }

    pub fn fits_existing(&self, p: usize, n: usize) -> Option<Vec<ClaimAllocation>> {
        self.try_on(p, self.node_views.get(n)?)
    }

    pub fn fits_claim(&self, p: usize, c: usize) -> Option<Vec<ClaimAllocation>> {
        self.try_on(p, self.claim_views.get(c)?.as_ref()?)
    }

    /// How many pods with the same claims as `p` a new node of option `o` of `pool` serves,
    /// up to `limit`; zero when it serves none.
    pub fn probe_copies(&self, p: usize, class: usize, pool: usize, o: usize, limit: u32) -> u32 {
        let key = (class, pool, o, limit);
        if let Some(&hit) = self.probe_copies.borrow().get(&key) {
            return hit;
        }
        let Some(Some(view)) = self.probes.get(pool).and_then(|v| v.get(o)) else {
            return 0;
        };
        let prepared = self.prepared(p);
        let mut scratch = AllocationState::new();
        let mut session = self.allocator.session(&self.inventory);
        let mut copies = 0;
        while copies < limit {
            let Some(allocations) = session.try_allocate(view, &scratch, &prepared) else {
                break;
            };
            if allocations.is_empty() {
                // Nothing new to allocate (only shared claims already placed): no limit here.
                copies = limit;
                break;
            }
            for a in &allocations {
                scratch.commit(&self.inventory, &a.allocation);
            }
            copies += 1;
        }
        drop(session);
        self.probe_copies.borrow_mut().insert(key, copies);
        copies
    }

    /// Gives a new NodeClaim its instance type's devices.
    pub fn add_claim_node(
        &mut self,
        c: usize,
        name: &str,
        labels: &BTreeMap<String, String>,
        pool: usize,
        o: usize,
        options: &crate::catalog::devices::TemplateOptions,
    ) {
        if self.claim_views.len() <= c {
            self.claim_views.resize(c + 1, None);
        }
        let Some(Some(templates)) = self.templates.get(pool).and_then(|v| v.get(o)) else {
            return;
        };
        let slices = templates.node_slices(name, options);
        self.inventory.add_slices(slices.iter());
        self.claim_views[c] = Some(self.inventory.node_view(&node_info(name, labels)));
        // Node views of other nodes do not change when a node-local pool is added.
    }

    /// Gives back the devices of pod `p`'s allocated claims (its node is going away), so they
    /// are allocated again wherever the pod goes.
    pub fn release_claims_of(&mut self, p: usize) {
        let keys = self.pod_claims.get(p).cloned().unwrap_or_default();
        for k in keys {
            let Some(claim) = self.claims.get_mut(&k) else {
                continue;
            };
            let Some(allocation) = claim.status.as_mut().and_then(|s| s.allocation.take()) else {
                continue;
            };
            self.state.release(&self.inventory, &allocation);
        }
        if let Some(slot) = self.prepared.borrow_mut().get_mut(p) {
            *slot = None;
        }
    }

    /// Records allocations made on `node` and takes their devices.
    pub fn commit(&mut self, node: &str, allocations: Vec<ClaimAllocation>) {
        for a in allocations {
            self.state.commit(&self.inventory, &a.allocation);
            if let Some(claim) = self.claims.get_mut(&a.claim) {
                claim
                    .status
                    .get_or_insert_with(ResourceClaimStatus::default)
                    .allocation = Some(a.allocation.clone());
            }
            if self.users.get(&a.claim).copied().unwrap_or(0) > 1 {
                // Other pods now use an allocated claim: prepare theirs again.
                self.prepared
                    .borrow_mut()
                    .iter_mut()
                    .for_each(|s| *s = None);
                self.probe_copies.borrow_mut().clear();
            }
            self.results.push((a.claim, node.to_string(), a.allocation));
        }
    }

    /// Why the pod's claims do not fit on an existing node.
    pub fn why_not_existing(&self, p: usize, n: usize) -> String {
        self.node_views
            .get(n)
            .map(|v| self.why_not(p, v, false))
            .unwrap_or_default()
    }

    /// Why a new node of option `o` of `pool` cannot serve the pod's claims.
    pub fn why_not_probe(&self, p: usize, pool: usize, o: usize) -> String {
        let Some(Some(view)) = self.probes.get(pool).and_then(|v| v.get(o)) else {
            return "publishes no DRA devices Joiner knows of".into();
        };
        let mut text = self.why_not(p, view, true);
        // A class of a driver no launchable type publishes can never be served by a new node.
        let unknown = self.unlaunchable_drivers(p);
        if text.contains("no device matches") && !unknown.is_empty() {
            text.push_str(&format!(
                " (no instance type Joiner may launch publishes devices of driver {})",
                unknown.join(", ")
            ));
            return text;
        }
        // For a selector that matched nothing, what this type has instead.
        if text.contains("no device matches")
            && let Some(Some(templates)) = self.templates.get(pool).and_then(|v| v.get(o))
        {
            let values = self.referenced_values(p, templates);
            if !values.is_empty() {
                text.push_str(&format!(" (its devices have {values})"));
            }
        }
        text
    }

    /// Drivers the pod's claims' classes name that no launchable instance type publishes.
    fn unlaunchable_drivers(&self, p: usize) -> Vec<String> {
        let mut out = BTreeSet::new();
        for claim in self
            .pod_claims
            .get(p)
            .into_iter()
            .flatten()
            .filter_map(|k| self.claims.get(k))
        {
            let requests = claim
                .spec
                .devices
                .as_ref()
                .and_then(|d| d.requests.as_ref());
            for r in requests.into_iter().flatten() {
                let classes = r.exactly.iter().map(|e| e.device_class_name.clone()).chain(
                    r.first_available
                        .iter()
                        .flatten()
                        .map(|s| s.device_class_name.clone()),
                );
                for class in classes {
                    for driver in self.class_drivers.get(&class).into_iter().flatten() {
                        if !self.launchable_drivers.contains(driver) {
                            out.insert(driver.clone());
                        }
                    }
                }
            }
        }
        out.into_iter().collect()
    }

    /// The values this type's template devices have for the attributes and capacities the
    /// pod's claims' selectors read, e.g. `productName=NVIDIA L4, memory=23034Mi`.
    fn referenced_values(&self, p: usize, templates: &DeviceTemplates) -> String {
        let text: String = self
            .pod_claims
            .get(p)
            .into_iter()
            .flatten()
            .filter_map(|k| self.claims.get(k))
            .map(|c| serde_json::to_string(&c.spec).unwrap_or_default())
            .collect();
        let mut out: Vec<String> = Vec::new();
        for (kind, domain, name) in referenced_names(&text) {
            for pool in &templates.pools {
                let Some(device) = pool.devices.first() else {
                    continue;
                };
                // Names in the device's own driver domain are published unqualified.
                let key = if pool.driver == domain {
                    name.clone()
                } else {
                    format!("{domain}/{name}")
                };
                let value = if kind == "capacity" {
                    device
                        .capacity
                        .as_ref()
                        .and_then(|c| c.get(&key))
                        .map(|c| c.value.0.clone())
                } else {
                    device
                        .attributes
                        .as_ref()
                        .and_then(|a| a.get(&key))
                        .map(|a| {
                            a.string
                                .clone()
                                .or_else(|| a.version.clone())
                                .or_else(|| a.int.map(|i| i.to_string()))
                                .or_else(|| a.bool.map(|b| b.to_string()))
                                .unwrap_or_default()
                        })
                };
                if let Some(v) = value {
                    let entry = format!("{name}={v}");
                    if !out.contains(&entry) {
                        out.push(entry);
                    }
                }
            }
        }
        out.join(", ")
    }

    fn why_not(&self, p: usize, view: &NodeView, before_launch: bool) -> String {
        let prepared = self.prepared(p);
        let state = if before_launch {
            AllocationState::new()
        } else {
            self.state.clone()
        };
        match self
            .allocator
            .session(&self.inventory)
            .allocate(view, &state, &prepared)
        {
            Ok(_) => "its devices are taken by other pending pods".into(),
            Err(failure) => {
                let mut text = failure.to_string();
                if before_launch && self.reads_runtime_attributes(p) {
                    text.push_str(&format!(
                        " ({} are known only once the node runs: usable in matchAttribute, not in selectors)",
                        GPU_RUNTIME_ATTRIBUTES.join(" and ")
                    ));
                }
                text
            }
        }
    }

    fn reads_runtime_attributes(&self, p: usize) -> bool {
        self.pod_claims
            .get(p)
            .into_iter()
            .flatten()
            .filter_map(|k| self.claims.get(k))
            .any(|c| {
                c.spec
                    .devices
                    .as_ref()
                    .and_then(|d| d.requests.as_ref())
                    .is_some_and(|reqs| {
                        let text = serde_json::to_string(reqs).unwrap_or_default();
                        GPU_RUNTIME_ATTRIBUTES.iter().any(|a| text.contains(a))
                    })
            })
    }

    /// The drivers of the devices allocated on a node, sorted.
    pub fn drivers_on(&self, node: &str) -> BTreeSet<String> {
        self.results
            .iter()
            .filter(|(_, n, _)| n == node)
            .flat_map(|(_, _, a)| {
                a.devices
                    .iter()
                    .flat_map(|d| d.results.iter().flatten().map(|r| r.driver.clone()))
            })
            .collect()
    }
}

/// The drivers a (JSON-escaped) selector text compares `device.driver` with.
fn named_drivers(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("device.driver") {
        rest = &rest[at + "device.driver".len()..];
        let tail = rest
            .trim_start()
            .strip_prefix("==")
            .map(str::trim_start)
            .unwrap_or("");
        let tail = tail
            .strip_prefix("\\\"")
            .or_else(|| tail.strip_prefix('\''))
            .unwrap_or("");
        let name: String = tail
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/'))
            .collect();
        if !name.is_empty() {
            out.insert(name);
        }
    }
    out
}

/// `(kind, domain, name)` for every `device.attributes["domain"].name` and
/// `device.capacity["domain"].name` in some (JSON-escaped) selector text.
fn referenced_names(text: &str) -> Vec<(&'static str, String, String)> {
    let mut out = Vec::new();
    for kind in ["attributes", "capacity"] {
        let mut rest = text;
        let open = format!("{kind}[\\\"");
        while let Some(at) = rest.find(&open) {
            rest = &rest[at + open.len()..];
            let Some(end) = rest.find("\\\"]") else { break };
            let domain = rest[..end].to_string();
            rest = &rest[end + 3..];
            let name: String = rest
                .strip_prefix('.')
                .unwrap_or("")
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty()
                && !out
                    .iter()
                    .any(|(k, d, n)| *k == kind && *d == domain && *n == name)
            {
                out.push((kind, domain, name));
            }
        }
    }
    out
}

fn node_info(name: &str, labels: &BTreeMap<String, String>) -> NodeInfo {
    let mut info = NodeInfo::new(name);
    for (k, v) in labels {
        info = info.with_label(k.clone(), v.clone());
    }
    info.labels
        .insert("kubernetes.io/hostname".into(), name.into());
    info
}
