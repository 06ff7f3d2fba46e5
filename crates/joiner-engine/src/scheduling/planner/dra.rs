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
//!
//! Network-attached devices (slices with `nodeSelector` or `allNodes`, or per-device node
//! selection) serve new nodes too. These semantics are Joiner's own (Karpenter leaves such
//! devices out), kept simple:
//! - a new node's labels, for the selectors, are the ones it is sure to have: the NodePool's
//!   template labels and single-valued requirements, the instance type's labels, and its zone
//!   once the NodeClaim's zone is pinned. A capacity type or zone left open is no label.
//! - a pod whose claims fit only in one zone's devices gets a NodeClaim pinned to that zone.
//! - such devices are one stock for the whole plan: a device allocated to a claim on any node,
//!   existing or planned, is not free for another claim (consumable capacity and
//!   `allowMultipleAllocations` aside), so probes start from the plan's allocations and are
//!   probed again once an allocation takes or gives back a network-attached device.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

use joiner_dra::inventory::Visibility;
use joiner_dra::{
    AllocationState, Allocator, ClaimAllocation, Inventory, NodeInfo, NodeView, PreparedClaims,
};
use joiner_model::wellknown::labels::ZONE;
use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::api::resource::v1::{AllocationResult, ResourceClaim, ResourceClaimStatus};

use super::super::extended::{ExtendedRequest, served_on};
use super::super::{DraInput, ExistingNode, PoolInput};
use super::rejections::{Rejected, clear_bit, set_bit};
use crate::catalog::devices::{DeviceTemplates, GPU_RUNTIME_ATTRIBUTES};

/// The name of the probe node that stands for a new node of one instance type of one pool.
fn probe_name(pool: &str, instance_type: &str) -> String {
    format!("joiner-probe.{pool}.{instance_type}")
}

type ProbeKey = (usize, ProbeAt, u32);

/// The extended resources a node's device plugin serves (allocatable above zero), among those
/// a DeviceClass serves: a claim made for them leaves those requests out there.
type Plugins = Rc<BTreeSet<String>>;

/// Where a probe node stands: option `option` (index into the pool input's options) of pool
/// `pool`, in `zone` (`None`: the NodeClaim's zone is not pinned).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct ProbeAt {
    pub pool: usize,
    pub option: usize,
    pub zone: Option<u32>,
}

/// An existing node or a planned NodeClaim, by index.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Node(usize),
    Claim(usize),
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
    /// Per pool and option: the probe node's name.
    probe_names: Vec<Vec<String>>,
    /// Probe nodes, made when first asked for.
    probes: RefCell<HashMap<ProbeAt, Rc<NodeView>>>,
    /// Whether some network-attached device's node selector reads the zone label.
    zone_scoped: bool,
    templates: Vec<Vec<Option<std::sync::Arc<DeviceTemplates>>>>,
    prepared: RefCell<Vec<Option<Rc<PreparedClaims>>>>,
    /// The drivers each DeviceClass's selectors name (`device.driver == "..."`).
    class_drivers: HashMap<String, BTreeSet<String>>,
    /// Drivers whose devices some instance type that may be launched publishes.
    launchable_drivers: BTreeSet<String>,
    /// Per (class, probe, limit): how many pods of the class a new node there serves.
    probe_copies: RefCell<HashMap<ProbeKey, u32>>,
    /// Per claim serving extended resources: what each request serves.
    extended: BTreeMap<String, Vec<ExtendedRequest>>,
    /// What device plugins serve per existing node, per pool option and per planned NodeClaim.
    node_plugins: Vec<Plugins>,
    option_plugins: Vec<Vec<Plugins>>,
    claim_plugins: Vec<Plugins>,
    /// Pods' claims as nodes whose device plugins serve some of their requests see them.
    served: RefCell<HashMap<(usize, Plugins), Rc<PreparedClaims>>>,
    /// Allocations made, in order: claim, node, result.
    pub results: Vec<(String, String, AllocationResult)>,
    /// Existing nodes and NodeClaims none of whose devices is free: no pod whose claims need
    /// a device of their own fits there, whatever its claims ask. Sound, not complete: a bit
    /// is set only where that holds, and cleared when a device of the node is given back.
    taken: Rejected,
    /// Node names to their index among existing nodes, and planned NodeClaims.
    node_at: HashMap<String, usize>,
    claim_at: HashMap<String, usize>,
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
        let mut inventory = Inventory::with_taint_rules(input.taint_rules.iter().cloned());
        inventory.add_slices(input.slices.iter().chain(probe_slices.iter()));
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
        let probe_names = pools
            .iter()
            .map(|pool| {
                pool.options
                    .iter()
                    .map(|o| probe_name(&pool.name, &o.instance_type))
                    .collect()
            })
            .collect();
        let zone_scoped = inventory.devices().iter().any(|d| match &d.visibility {
            Visibility::Selector(sel) => selector_keys(sel).any(|k| k == ZONE),
            _ => false,
        });
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
                let text = serde_json::to_string(&joiner_model::dra::class_spec(c).selectors)
                    .unwrap_or_default();
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
        let names: BTreeSet<&str> = input
            .extended
            .values()
            .flatten()
            .map(|r| r.resource.as_str())
            .collect();
        let plugins = |allocatable: &joiner_model::ResourceList| -> Plugins {
            Rc::new(
                allocatable
                    .iter()
                    .filter(|(k, q)| names.contains(k.as_str()) && q.nanos() > 0)
                    .map(|(k, _)| k.clone())
                    .collect(),
            )
        };
        let node_plugins = nodes.iter().map(|n| plugins(&n.allocatable)).collect();
        let option_plugins = pools
            .iter()
            .map(|p| p.options.iter().map(|o| plugins(&o.allocatable)).collect())
            .collect();
        let mut dra = Dra {
            extended: input.extended.clone(),
            node_plugins,
            option_plugins,
            claim_plugins: Vec::new(),
            served: RefCell::new(HashMap::new()),
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
            probe_names,
            probes: RefCell::new(HashMap::new()),
            zone_scoped,
            templates,
            prepared: RefCell::new(vec![None; pod_count]),
            probe_copies: RefCell::new(HashMap::new()),
            results: Vec::new(),
            taken: Rejected::default(),
            node_at: HashMap::new(),
            claim_at: HashMap::new(),
        };
        for n in 0..dra.node_views.len() {
            let name = dra.node_views[n].node.name.clone();
            dra.node_at.insert(name, n);
            dra.mark_if_taken(Slot::Node(n));
        }
        dra
    }

    /// Records that every device of an existing node or NodeClaim is taken, when it is.
    fn mark_if_taken(&mut self, slot: Slot) {
        let (view, bits, i) = match slot {
            Slot::Node(n) => (self.node_views.get(n), &mut self.taken.nodes, n),
            Slot::Claim(c) => (
                self.claim_views.get(c).and_then(Option::as_ref),
                &mut self.taken.claims,
                c,
            ),
        };
        if view.is_some_and(|v| !self.state.leaves_free(&self.inventory, v)) {
            set_bit(bits, i);
        }
    }

    /// For a pod whose claims need a device of their own: the existing nodes and NodeClaims
    /// with none free, which it need not be asked of. `None` for any other pod (one asking
    /// for admin access, one whose claims a device plugin may serve instead).
    pub fn taken_for(&self, p: usize) -> Option<&Rejected> {
        let keys = self.pod_claims.get(p)?;
        if keys.is_empty() || keys.iter().any(|k| self.extended.contains_key(k)) {
            return None;
        }
        self.prepared(p)
            .needs_a_free_device()
            .then_some(&self.taken)
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

    /// The pod's claims as a node whose device plugins serve `plugins` sees them.
    fn prepared_on(&self, p: usize, plugins: &Plugins) -> Rc<PreparedClaims> {
        let keys = self
            .pod_claims
            .get(p)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let trimmed = !plugins.is_empty()
            && keys.iter().any(|k| {
                self.extended
                    .get(k)
                    .is_some_and(|reqs| reqs.iter().any(|r| plugins.contains(&r.resource)))
            });
        if !trimmed {
            return self.prepared(p);
        }
        let key = (p, plugins.clone());
        if let Some(hit) = self.served.borrow().get(&key) {
            return hit.clone();
        }
        let claims: Vec<ResourceClaim> = keys
            .iter()
            .filter_map(|k| {
                let claim = self.claims.get(k)?;
                match self.extended.get(k) {
                    Some(reqs) => served_on(claim, reqs, plugins),
                    None => Some(claim.clone()),
                }
            })
            .collect();
        let prepared = Rc::new(self.allocator.prepare(claims.iter()));
        self.served.borrow_mut().insert(key, prepared.clone());
        prepared
    }

    /// Why the pod's claims cannot be allocated on any node, when that is so whatever the node
    /// (a device class that does not exist, a selector that does not compile, a request the
    /// cluster's feature gates refuse).
    pub fn broken(&self, p: usize) -> Option<String> {
        self.prepared(p).broken().map(ToString::to_string)
    }

    fn try_on(&self, p: usize, view: &NodeView, plugins: &Plugins) -> Option<Vec<ClaimAllocation>> {
        let prepared = self.prepared_on(p, plugins);
        self.allocator
            .session(&self.inventory)
            .try_allocate(view, &self.state, &prepared)
    }

    pub fn fits_existing(&self, p: usize, n: usize) -> Option<Vec<ClaimAllocation>> {
        self.try_on(p, self.node_views.get(n)?, self.node_plugins.get(n)?)
    }

    pub fn fits_claim(&self, p: usize, c: usize) -> Option<Vec<ClaimAllocation>> {
        self.try_on(
            p,
            self.claim_views.get(c)?.as_ref()?,
            self.claim_plugins.get(c)?,
        )
    }

    /// Whether some network-attached device serves only nodes of some zones: then a NodeClaim
    /// whose zone is open may have to pin one for its pod's claims.
    pub fn zone_scoped(&self) -> bool {
        self.zone_scoped
    }

    /// The probe node for a new node at `at`, with `labels` (the planner's
    /// `new_node_labels`).
    fn probe(
        &self,
        at: ProbeAt,
        labels: impl FnOnce() -> BTreeMap<String, String>,
    ) -> Option<Rc<NodeView>> {
        if let Some(hit) = self.probes.borrow().get(&at) {
            return Some(hit.clone());
        }
        let name = self.probe_names.get(at.pool)?.get(at.option)?;
        let view = Rc::new(self.inventory.node_view(&node_info(name, &labels())));
        self.probes.borrow_mut().insert(at, view.clone());
        Some(view)
    }

    /// How many pods with the same claims as `p` (of scheduling class `class`) a new node at
    /// `at` with `labels` serves, up to `limit`, from the devices its type publishes and the
    /// network-attached devices the plan has left free; zero when it serves none.
    pub fn probe_copies(
        &self,
        p: usize,
        class: usize,
        at: ProbeAt,
        labels: impl FnOnce() -> BTreeMap<String, String>,
        limit: u32,
    ) -> u32 {
        let key = (class, at, limit);
        if let Some(&hit) = self.probe_copies.borrow().get(&key) {
            return hit;
        }
        let Some(view) = self.probe(at, labels) else {
            return 0;
        };
        let Some(plugins) = self.plugins_at(at) else {
            return 0;
        };
        let prepared = self.prepared_on(p, &plugins);
        if view.device_count() == 0 && prepared.keys().next().is_some() {
            return 0;
        }
        let mut scratch = self.state.clone();
        let mut session = self.allocator.session(&self.inventory);
        let mut copies = 0;
        while copies < limit {
            let Some(allocations) = session.try_allocate(&view, &scratch, &prepared) else {
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

    fn plugins_at(&self, at: ProbeAt) -> Option<Plugins> {
        self.option_plugins.get(at.pool)?.get(at.option).cloned()
    }

    /// Gives a new NodeClaim its instance type's devices (when it publishes any) and the
    /// network-attached devices its `labels` admit.
    pub fn add_claim_node(
        &mut self,
        c: usize,
        name: &str,
        labels: &BTreeMap<String, String>,
        pool: usize,
        o: usize,
        options: Option<&crate::catalog::devices::TemplateOptions>,
    ) {
        if self.claim_views.len() <= c {
            self.claim_views.resize(c + 1, None);
        }
        if self.claim_plugins.len() <= c {
            self.claim_plugins.resize(c + 1, Plugins::default());
        }
        self.claim_plugins[c] = self
            .plugins_at(ProbeAt {
                pool,
                option: o,
                zone: None,
            })
            .unwrap_or_default();
        if let (Some(Some(templates)), Some(options)) =
            (self.templates.get(pool).and_then(|v| v.get(o)), options)
        {
            let slices = templates.node_slices(name, options);
            self.inventory.add_slices(slices.iter());
        }
        self.claim_views[c] = Some(self.inventory.node_view(&node_info(name, labels)));
        // Node views of other nodes do not change when a node-local pool is added.
        self.claim_at.insert(name.to_string(), c);
        self.mark_if_taken(Slot::Claim(c));
    }

    /// Whether an allocation holds a network-attached device: one every new node may compete
    /// for, so what probes found no longer holds.
    fn takes_network_devices(&self, allocation: &AllocationResult) -> bool {
        allocation
            .devices
            .iter()
            .flat_map(|d| d.results.iter().flatten())
            .filter_map(|r| self.inventory.find(&r.driver, &r.pool, &r.device))
            .filter_map(|id| self.inventory.device(id))
            .any(|d| matches!(d.visibility, Visibility::AllNodes | Visibility::Selector(_)))
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
            if self.takes_network_devices(&allocation) {
                self.probe_copies.borrow_mut().clear();
            }
            self.state.release(&self.inventory, &allocation);
            self.untake(&allocation);
        }
        if let Some(slot) = self.prepared.borrow_mut().get_mut(p) {
            *slot = None;
        }
        self.served.borrow_mut().retain(|(q, _), _| *q != p);
    }

    /// Clears the "every device taken" bit of each node a device of `allocation` is visible
    /// to: of its own node, or of every node for a network-attached device.
    fn untake(&mut self, allocation: &AllocationResult) {
        let ids = allocation
            .devices
            .iter()
            .flat_map(|d| d.results.iter().flatten())
            .flat_map(|r| {
                self.inventory
                    .find_all(&r.driver, &r.pool, &r.device)
                    .to_vec()
            })
            .collect::<Vec<_>>();
        for id in ids {
            match self.inventory.device(id).map(|d| &d.visibility) {
                Some(Visibility::Node(name)) => {
                    if let Some(&n) = self.node_at.get(name) {
                        clear_bit(&mut self.taken.nodes, n);
                    }
                    if let Some(&c) = self.claim_at.get(name) {
                        clear_bit(&mut self.taken.claims, c);
                    }
                }
                _ => self.taken = Rejected::default(),
            }
        }
    }

    /// Records allocations made on `node` and takes their devices.
    pub fn commit(&mut self, node: &str, allocations: Vec<ClaimAllocation>) {
        for a in allocations {
            self.state.commit(&self.inventory, &a.allocation);
            if self.takes_network_devices(&a.allocation) {
                self.probe_copies.borrow_mut().clear();
            }
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
                self.served.borrow_mut().clear();
                self.probe_copies.borrow_mut().clear();
            }
            self.results.push((a.claim, node.to_string(), a.allocation));
        }
        if let Some(&n) = self.node_at.get(node) {
            self.mark_if_taken(Slot::Node(n));
        }
        if let Some(&c) = self.claim_at.get(node) {
            self.mark_if_taken(Slot::Claim(c));
        }
    }

    /// The spec of a claim the plan makes for extended resources (no object holds it yet), as
    /// `allocation` serves it: the requests a device plugin serves on that node are left out,
    /// and they are exactly those the allocation has no devices for.
    pub fn made_spec(
        &self,
        key: &str,
        allocation: &AllocationResult,
    ) -> Option<k8s_openapi::api::resource::v1::ResourceClaimSpec> {
        // Planned names hold a `*`, which no object's name may.
        if !key.contains('*') || !self.extended.contains_key(key) {
            return None;
        }
        let allocated: BTreeSet<&str> = allocation
            .devices
            .iter()
            .flat_map(|d| d.results.iter().flatten())
            .map(|r| r.request.as_str())
            .collect();
        let mut spec = self.claims.get(key)?.spec.clone()?;
        if let Some(requests) = spec.devices.as_mut().and_then(|d| d.requests.as_mut()) {
            requests.retain(|r| allocated.contains(r.name.as_str()));
        }
        Some(spec)
    }

    /// Why the pod's claims do not fit on an existing node.
    pub fn why_not_existing(&self, p: usize, n: usize) -> String {
        match (self.node_views.get(n), self.node_plugins.get(n)) {
            (Some(view), Some(plugins)) => self.why_not(p, view, plugins, false),
            _ => String::new(),
        }
    }

    /// Why a new node at `at` with `labels` cannot serve the pod's claims.
    pub fn why_not_probe(
        &self,
        p: usize,
        at: ProbeAt,
        labels: impl FnOnce() -> BTreeMap<String, String>,
    ) -> String {
        let Some(view) = self
            .probe(at, labels)
            .filter(|v| v.device_count() > 0 || self.has_network_devices())
        else {
            return "publishes no DRA devices Joiner knows of".into();
        };
        let plugins = self.plugins_at(at).unwrap_or_default();
        let mut text = self.why_not(p, &view, &plugins, true);
        if !text.contains("no device matches") {
            return text;
        }
        // Network-attached slices of the claims' drivers this node would not see, and why.
        let unseen = self.unseen_network_slices(p, &view);
        if !unseen.is_empty() {
            text.push_str(&format!(
                " (network-attached {}; a new node of this NodePool and type does not match)",
                unseen.join("; ")
            ));
            return text;
        }
        // A class of a driver no launchable type publishes can never be served by a new node.
        let unknown = self.unlaunchable_drivers(p);
        if !unknown.is_empty() {
            text.push_str(&format!(
                " (no instance type Joiner may launch publishes devices of driver {})",
                unknown.join(", ")
            ));
            return text;
        }
        // For a selector that matched nothing, what this type has instead.
        if let Some(Some(templates)) = self.templates.get(at.pool).and_then(|v| v.get(at.option)) {
            let values = self.referenced_values(p, templates);
            if !values.is_empty() {
                text.push_str(&format!(" (its devices have {values})"));
            }
        }
        text
    }

    fn has_network_devices(&self) -> bool {
        self.inventory
            .devices()
            .iter()
            .any(|d| matches!(d.visibility, Visibility::AllNodes | Visibility::Selector(_)))
    }

    /// The network-attached slices of the drivers the pod's classes name (any driver when they
    /// name none) that serve only nodes `view` is not, each with the selector it needs, e.g.
    /// `ResourceSlice net-a (driver nic.example.com) serves only nodes with
    /// topology.kubernetes.io/zone In [us-west-2a]`; at most three.
    fn unseen_network_slices(&self, p: usize, view: &NodeView) -> Vec<String> {
        let drivers: BTreeSet<String> = self
            .claim_classes(p)
            .iter()
            .flat_map(|c| self.class_drivers.get(c).into_iter().flatten().cloned())
            .collect();
        let mut out: Vec<String> = Vec::new();
        for d in self.inventory.devices() {
            let Visibility::Selector(sel) = &d.visibility else {
                continue;
            };
            if (!drivers.is_empty() && !drivers.contains(&*d.driver))
                || d.visibility.admits(&view.node)
            {
                continue;
            }
            let line = format!(
                "ResourceSlice {} (driver {}) serves only nodes with {}",
                d.slice,
                d.driver,
                describe_selector(sel)
            );
            if !out.contains(&line) {
                out.push(line);
            }
        }
        let more = out.len().saturating_sub(3);
        out.truncate(3);
        if more > 0 {
            out.push(format!("{more} more"));
        }
        out
    }

    /// The device classes the pod's claims' requests name.
    fn claim_classes(&self, p: usize) -> Vec<String> {
        let mut out = Vec::new();
        for claim in self
            .pod_claims
            .get(p)
            .into_iter()
            .flatten()
            .filter_map(|k| self.claims.get(k))
        {
            let requests =
                joiner_model::dra::claim_devices(claim).and_then(|d| d.requests.as_ref());
            for r in requests.into_iter().flatten() {
                out.extend(r.exactly.iter().map(|e| e.device_class_name.clone()));
                out.extend(
                    r.first_available
                        .iter()
                        .flatten()
                        .map(|s| s.device_class_name.clone()),
                );
            }
        }
        out
    }

    /// Drivers the pod's claims' classes name that no launchable instance type publishes.
    fn unlaunchable_drivers(&self, p: usize) -> Vec<String> {
        let mut out = BTreeSet::new();
        for class in self.claim_classes(p) {
            for driver in self.class_drivers.get(&class).into_iter().flatten() {
                if !self.launchable_drivers.contains(driver) {
                    out.insert(driver.clone());
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

    fn why_not(&self, p: usize, view: &NodeView, plugins: &Plugins, before_launch: bool) -> String {
        let prepared = self.prepared_on(p, plugins);
        match self
            .allocator
            .session(&self.inventory)
            .allocate(view, &self.state, &prepared)
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
                joiner_model::dra::claim_devices(c)
                    .and_then(|d| d.requests.as_ref())
                    .is_some_and(|reqs| {
                        let text = serde_json::to_string(reqs).unwrap_or_default();
                        GPU_RUNTIME_ATTRIBUTES.iter().any(|a| text.contains(a))
                    })
            })
    }

    /// The drivers of the devices allocated on each node, sorted: one pass over the
    /// allocations for every node, not one per node.
    pub fn drivers_by_node(&self) -> HashMap<&str, BTreeSet<String>> {
        let mut out: HashMap<&str, BTreeSet<String>> = HashMap::new();
        for (_, node, a) in &self.results {
            let drivers = out.entry(node.as_str()).or_default();
            for r in a.devices.iter().flat_map(|d| d.results.iter().flatten()) {
                drivers.insert(r.driver.clone());
            }
        }
        out
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

/// The label keys a node selector reads.
fn selector_keys(sel: &NodeSelector) -> impl Iterator<Item = &str> {
    sel.node_selector_terms
        .iter()
        .flat_map(|t| t.match_expressions.iter().flatten().map(|e| e.key.as_str()))
}

/// A node selector in a line: terms joined by "or", a term's expressions by "and", e.g.
/// `topology.kubernetes.io/zone In [us-east-1b]`.
fn describe_selector(sel: &NodeSelector) -> String {
    let terms: Vec<String> = sel
        .node_selector_terms
        .iter()
        .map(|t| {
            let exprs = t
                .match_expressions
                .iter()
                .flatten()
                .map(|e| (e.key.as_str(), e.operator.as_str(), e.values.as_deref()));
            let fields = t
                .match_fields
                .iter()
                .flatten()
                .map(|e| (e.key.as_str(), e.operator.as_str(), e.values.as_deref()));
            let parts: Vec<String> = exprs
                .chain(fields)
                .map(|(key, op, values)| match values {
                    Some(v) if !v.is_empty() => format!("{key} {op} [{}]", v.join(", ")),
                    _ => format!("{key} {op}"),
                })
                .collect();
            if parts.is_empty() {
                "no requirement".to_string()
            } else {
                parts.join(" and ")
            }
        })
        .collect();
    if terms.is_empty() {
        "no selector term (no node)".into()
    } else {
        terms.join(" or ")
    }
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
