//! Devices and pools built from ResourceSlices, validated once, with dense ids.
//!
//! A pool is every slice of one driver with one pool name. Only the newest generation
//! counts: slices of an older generation are being replaced and are ignored. A pool is
//! *incomplete* when fewer (or more) slices of that generation exist than
//! `resourceSliceCount` says; devices of an incomplete pool may still be allocated one by
//! one, but an `All` request cannot know it sees every device, so it fails. A pool is
//! *invalid* when two of its devices share a name or a device consumes a counter the pool
//! does not define; an allocation that reaches an invalid pool fails, as in kube-scheduler.
//!
//! Devices get dense [`DeviceId`]s and counters dense [`CounterId`]s, so that allocation
//! state is a few flat vectors and cheap to clone. The planner adds the devices of nodes that
//! do not exist yet with [`Inventory::add_slices`], from synthesized node-local slices.

mod generations;

use crate::cel::CelDevice;
use crate::cel::device::qualify;
use crate::node::{NodeInfo, selector_matches};
use joiner_model::Quantity;
use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, DeviceTaint, DeviceTaintRuleSpec, ResourceSlice,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

/// A device's index in its [`Inventory`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId(pub u32);

/// A pool's index in its [`Inventory`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolId(pub u32);

/// One counter of one counter set of one pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CounterId(pub u32);

/// A typed attribute value; equality is type-aware (an int never equals a string).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AttributeValue {
    Int(i64),
    Bool(bool),
    String(String),
    Version(String),
    /// A list-typed attribute (`ints`, `bools`, `strings`, `versions`): its scalar values.
    List(Vec<AttributeValue>),
}

impl AttributeValue {
    /// The value as constraints compare it: a set of scalars, a scalar being a set of one.
    pub fn as_set(&self) -> &[AttributeValue] {
        match self {
            AttributeValue::List(items) => items,
            scalar => std::slice::from_ref(scalar),
        }
    }

    fn of(attr: &k8s_openapi::api::resource::v1::DeviceAttribute) -> Option<AttributeValue> {
        let list =
            |items: Vec<AttributeValue>| (!items.is_empty()).then_some(AttributeValue::List(items));
        if let Some(i) = attr.int {
            Some(AttributeValue::Int(i))
        } else if let Some(b) = attr.bool {
            Some(AttributeValue::Bool(b))
        } else if let Some(s) = &attr.string {
            Some(AttributeValue::String(s.clone()))
        } else if let Some(v) = &attr.version {
            Some(AttributeValue::Version(v.clone()))
        } else if let Some(items) = &attr.ints {
            list(items.iter().copied().map(AttributeValue::Int).collect())
        } else if let Some(items) = &attr.bools {
            list(items.iter().copied().map(AttributeValue::Bool).collect())
        } else if let Some(items) = &attr.strings {
            list(items.iter().cloned().map(AttributeValue::String).collect())
        } else if let Some(items) = &attr.versions {
            list(items.iter().cloned().map(AttributeValue::Version).collect())
        } else {
            None
        }
    }
}

/// The request policy of a consumable capacity, parsed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestPolicy {
    pub default: Option<Quantity>,
    pub valid_values: Option<Vec<Quantity>>,
    pub min: Option<Quantity>,
    pub max: Option<Quantity>,
    pub step: Option<Quantity>,
}

/// One counter set of one pool.
pub type CounterSetKey = (PoolId, Arc<str>);

/// Whether devices drawing on one counter set with these compatibility groups may be allocated
/// together: all without groups, or all sharing at least one group.
pub fn compatible<'a>(groups: impl IntoIterator<Item = &'a [String]>) -> bool {
    let mut iter = groups.into_iter();
    let Some(first) = iter.next() else {
        return true;
    };
    let mut common: Vec<&String> = first.iter().collect();
    let ungrouped = first.is_empty();
    for g in iter {
        if g.is_empty() != ungrouped {
            return false;
        }
        common.retain(|c| g.contains(c));
        if !ungrouped && common.is_empty() {
            return false;
        }
    }
    true
}

/// A capacity of a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capacity {
    /// The name as the slice publishes it (used as the key of `consumedCapacity`).
    pub published: String,
    pub value: Quantity,
    pub policy: Option<RequestPolicy>,
}

/// Where a device may be used.
#[derive(Debug, Clone, PartialEq)]
pub enum Visibility {
    Node(String),
    AllNodes,
    Selector(NodeSelector),
    /// None of the node fields is set: usable nowhere.
    Nowhere,
}

impl Visibility {
    pub fn admits(&self, node: &NodeInfo) -> bool {
        match self {
            Visibility::Node(name) => *name == node.name,
            Visibility::AllNodes => true,
            Visibility::Selector(sel) => selector_matches(sel, node),
            Visibility::Nowhere => false,
        }
    }
}

/// One device, converted once.
#[derive(Debug, Clone)]
pub struct InventoryDevice {
    pub id: DeviceId,
    pub pool: PoolId,
    pub driver: Arc<str>,
    pub pool_name: Arc<str>,
    pub name: String,
    pub slice: String,
    /// Attributes by fully qualified name (`domain/name`).
    pub attributes: HashMap<String, AttributeValue>,
    /// Attributes published with no value Joiner can read (none set, or an empty list), by
    /// fully qualified name: a constraint that reaches one is an error, as upstream.
    pub unsupported_attributes: Vec<String>,
    /// Capacities by fully qualified name.
    pub capacity: BTreeMap<String, Capacity>,
    pub allow_multiple_allocations: bool,
    pub taints: Vec<DeviceTaint>,
    pub consumes_counters: Vec<(CounterId, Quantity)>,
    /// Per counter set the device draws on (`consumesCounters[].counterSet`, in its pool): its
    /// compatibility groups, empty for none. Devices drawing on one set may be allocated
    /// together only if all of them share a group, or none has any (Kubernetes 1.37).
    pub compatibility: Vec<(CounterSetKey, Vec<String>)>,
    pub binding_conditions: Vec<String>,
    pub binding_failure_conditions: Vec<String>,
    pub binds_to_node: bool,
    pub visibility: Visibility,
    /// Its slice sets `perDeviceNodeSelection` (a `DRAPartitionableDevices` field).
    pub per_device_node_selection: bool,
    pub cel: CelDevice,
}

/// A pool of the newest generation.
#[derive(Debug, Clone)]
pub struct Pool {
    pub id: PoolId,
    pub driver: Arc<str>,
    pub name: Arc<str>,
    pub generation: i64,
    /// `false` when the slices of the newest generation do not add up to
    /// `resourceSliceCount`.
    pub complete: bool,
    /// Why the pool cannot be used, if it cannot.
    pub invalid: Option<String>,
    /// Devices in order: slices by name, devices in slice order.
    pub devices: Vec<DeviceId>,
    /// The node every device of the pool is local to, if there is one: lets a node's view
    /// skip other nodes' pools without looking at their devices.
    pub local_node: Option<String>,
    /// Whether some device of the pool has binding conditions: kube-scheduler searches such
    /// pools last, so the allocator needs to find them without scanning every device.
    pub has_binding_conditions: bool,
}

/// A counter of a shared counter set.
#[derive(Debug, Clone)]
pub struct Counter {
    pub pool: PoolId,
    pub counter_set: String,
    pub name: String,
    pub value: Quantity,
}

/// All devices and pools known to the allocator.
#[derive(Debug)]
pub struct Inventory {
    /// Identifies this inventory's device ids for caches; a clone gets a new one, since the
    /// two may grow apart.
    uid: u64,
    devices: Vec<InventoryDevice>,
    pools: Vec<Pool>,
    counters: Vec<Counter>,
    pool_index: HashMap<(Arc<str>, Arc<str>), PoolId>,
    /// Devices by driver, pool and name: more than one where a node sees an older generation
    /// of a pool than others do ([`generations`]), since upstream knows a device by its name.
    by_name: HashMap<(Arc<str>, Arc<str>, String), Vec<DeviceId>>,
    /// Pools sorted by driver then name: the allocation order.
    order: Vec<PoolId>,
    /// Pools local to one node, by node, and the others (in allocation order): a node's view
    /// needs only its own pools and the shared ones, not every node's.
    local: HashMap<String, Vec<PoolId>>,
    shared: Vec<PoolId>,
    /// DeviceTaintRules: each device added gets the taints of the rules that select it.
    taint_rules: Arc<[DeviceTaintRuleSpec]>,
}

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

fn next_uid() -> u64 {
    NEXT_UID.fetch_add(1, AtomicOrdering::Relaxed)
}

impl Default for Inventory {
    fn default() -> Self {
        Inventory {
            uid: next_uid(),
            devices: Vec::new(),
            pools: Vec::new(),
            counters: Vec::new(),
            pool_index: HashMap::new(),
            by_name: HashMap::new(),
            order: Vec::new(),
            local: HashMap::new(),
            shared: Vec::new(),
            taint_rules: Arc::new([]),
        }
    }
}

impl Clone for Inventory {
    fn clone(&self) -> Self {
        Inventory {
            uid: next_uid(),
            devices: self.devices.clone(),
            pools: self.pools.clone(),
            counters: self.counters.clone(),
            pool_index: self.pool_index.clone(),
            by_name: self.by_name.clone(),
            order: self.order.clone(),
            local: self.local.clone(),
            shared: self.shared.clone(),
            taint_rules: self.taint_rules.clone(),
        }
    }
}

impl Inventory {
    /// The taints of the rules that select device `name` of `pool` of `driver`. A rule without
    /// a selector selects nothing; each field a selector sets must match.
    fn rule_taints<'a>(
        &'a self,
        driver: &'a str,
        pool: &'a str,
        name: &'a str,
    ) -> impl Iterator<Item = &'a DeviceTaint> + 'a {
        self.taint_rules.iter().filter_map(move |rule| {
            let sel = rule.device_selector.as_ref()?;
            let is =
                |field: &Option<String>, value: &str| field.as_deref().is_none_or(|f| f == value);
            (is(&sel.driver, driver) && is(&sel.pool, pool) && is(&sel.device, name))
                .then_some(&rule.taint)
        })
    }
}

/// The devices of one node's view, pool by pool in allocation order.
///
/// Built once per node (and kept by the planner): the allocator caches each request's
/// candidate order per view, keyed by the view's identity.
#[derive(Debug, Clone, Default)]
pub struct NodeView {
    pub node: NodeInfo,
    /// Pools sorted by driver then name, each with its devices visible to the node.
    pub(crate) pools: Vec<(PoolId, Vec<DeviceId>)>,
    pub(crate) uid: u64,
}

impl NodeView {
    /// Pools sorted by driver then name, each with its devices visible to the node.
    pub fn pools(&self) -> &[(PoolId, Vec<DeviceId>)] {
        &self.pools
    }

    /// How many devices the node can see.
    pub fn device_count(&self) -> usize {
        self.pools.iter().map(|(_, d)| d.len()).sum()
    }
}

impl Inventory {
    /// Builds pools from slices (any order; duplicates by generation are resolved).
    /// An empty inventory whose devices, as slices are added, also carry the taint of every
    /// DeviceTaintRule that selects them: the same as if their driver had published it.
    pub fn with_taint_rules(rules: impl IntoIterator<Item = DeviceTaintRuleSpec>) -> Inventory {
        Inventory {
            taint_rules: rules.into_iter().collect(),
            ..Inventory::default()
        }
    }

    pub fn from_slices<'a>(slices: impl IntoIterator<Item = &'a ResourceSlice>) -> Inventory {
        let mut inventory = Inventory::default();
        inventory.add_slices(slices);
        inventory
    }

    /// Adds the pools of `slices`. A pool already known is left as it is and the new slices
    /// of it are ignored: pools are immutable once built, which keeps ids stable for state.
    pub fn add_slices<'a>(&mut self, slices: impl IntoIterator<Item = &'a ResourceSlice>) {
        let mut groups: BTreeMap<(String, String), Vec<&ResourceSlice>> = BTreeMap::new();
        for slice in slices {
            let key = (slice.spec.driver.clone(), slice.spec.pool.name.clone());
            groups.entry(key).or_default().push(slice);
        }
        let first_new = self.pools.len();
        for ((driver, pool_name), group) in groups {
            let driver: Arc<str> = driver.into();
            let pool_name: Arc<str> = pool_name.into();
            if self
                .pool_index
                .contains_key(&(driver.clone(), pool_name.clone()))
            {
                continue;
            }
            self.add_pool(driver, pool_name, group);
        }
        // Insert the new pools in order rather than sorting everything again: planners add
        // one node's pools at a time to inventories of thousands.
        for i in first_new..self.pools.len() {
            let id = self.pools[i].id;
            let at = self.position_in(&self.order, id);
            self.order.insert(at, id);
            match self.pools[i].local_node.clone() {
                Some(node) => {
                    let list = self.local.entry(node).or_default();
                    let at = {
                        let key = |p: &PoolId| {
                            self.pools
                                .get(p.0 as usize)
                                .map(|p| (p.driver.clone(), p.name.clone()))
                        };
                        list.partition_point(|x| key(x) < key(&id))
                    };
                    list.insert(at, id);
                }
                None => {
                    let at = self.position_in(&self.shared, id);
                    self.shared.insert(at, id);
                }
            }
        }
    }

    /// Where pool `id` goes in a list sorted by driver then name.
    fn position_in(&self, list: &[PoolId], id: PoolId) -> usize {
        let key = |p: &PoolId| self.pools.get(p.0 as usize).map(|p| (&*p.driver, &*p.name));
        list.partition_point(|x| key(x) < key(&id))
    }

    /// Adds a pool at its newest generation, and for each node that sees only an older one
    /// (a pool moved between nodes), that generation as a pool of the node's own.
    fn add_pool(&mut self, driver: Arc<str>, pool_name: Arc<str>, group: Vec<&ResourceSlice>) {
        let newest = group
            .iter()
            .map(|s| s.spec.pool.generation)
            .max()
            .unwrap_or(0);
        let of = |generation: i64| {
            group
                .iter()
                .copied()
                .filter(|s| s.spec.pool.generation == generation)
                .collect::<Vec<_>>()
        };
        let id = self.build_pool(driver.clone(), pool_name.clone(), newest, of(newest), None);
        self.pool_index
            .insert((driver.clone(), pool_name.clone()), id);
        for (node, generation) in generations::stale_nodes(&group, newest) {
            self.build_pool(
                driver.clone(),
                pool_name.clone(),
                generation,
                of(generation),
                Some(node),
            );
        }
    }

    /// One generation of a pool from its slices; `only_node`: the pool serves that node alone.
    fn build_pool(
        &mut self,
        driver: Arc<str>,
        pool_name: Arc<str>,
        generation: i64,
        mut slices: Vec<&ResourceSlice>,
        only_node: Option<String>,
    ) -> PoolId {
        slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let expected = slices.first().map(|s| s.spec.pool.resource_slice_count);
        let complete = expected.is_some_and(|n| {
            usize::try_from(n).is_ok_and(|n| n == slices.len())
                && slices.iter().all(|s| s.spec.pool.resource_slice_count == n)
        });
        let pool_id = PoolId(u32::try_from(self.pools.len()).unwrap_or(u32::MAX));
        let mut invalid: Option<String> = None;

        // Counter sets are pool-wide.
        let mut counters: HashMap<(String, String), CounterId> = HashMap::new();
        let mut sets_seen: HashMap<String, ()> = HashMap::new();
        for slice in &slices {
            for set in slice.spec.shared_counters.iter().flatten() {
                if sets_seen.insert(set.name.clone(), ()).is_some() && invalid.is_none() {
                    invalid = Some(format!(
                        "counter set {:?} is defined more than once",
                        set.name
                    ));
                }
                for (name, counter) in &set.counters {
                    let value = match Quantity::try_from(&counter.value) {
                        Ok(v) => v,
                        Err(e) => {
                            invalid.get_or_insert(format!("counter {}/{}: {e}", set.name, name));
                            continue;
                        }
                    };
                    let id = CounterId(u32::try_from(self.counters.len()).unwrap_or(u32::MAX));
                    self.counters.push(Counter {
                        pool: pool_id,
                        counter_set: set.name.clone(),
                        name: name.clone(),
                        value,
                    });
                    counters.insert((set.name.clone(), name.clone()), id);
                }
            }
        }

        let mut names: HashMap<String, ()> = HashMap::new();
        let mut devices = Vec::new();
        for slice in &slices {
            let slice_name = slice.metadata.name.clone().unwrap_or_default();
            let per_device = slice.spec.per_device_node_selection.unwrap_or(false);
            let slice_visibility = visibility(
                slice.spec.node_name.as_deref(),
                slice.spec.all_nodes,
                slice.spec.node_selector.as_ref(),
            );
            for device in slice.spec.devices.iter().flatten() {
                if names.insert(device.name.clone(), ()).is_some() && invalid.is_none() {
                    invalid = Some(format!("duplicate device name {:?}", device.name));
                }
                let mut consumes = Vec::new();
                let compatibility = device
                    .consumes_counters
                    .iter()
                    .flatten()
                    .map(|c| {
                        let set: Arc<str> = c.counter_set.as_str().into();
                        (
                            (pool_id, set),
                            c.compatibility_groups.clone().unwrap_or_default(),
                        )
                    })
                    .collect();
                for consumption in device.consumes_counters.iter().flatten() {
                    if !sets_seen.contains_key(&consumption.counter_set) {
                        invalid.get_or_insert(format!(
                            "device {:?} consumes from unknown counter set {:?}",
                            device.name, consumption.counter_set
                        ));
                    }
                    for (name, counter) in &consumption.counters {
                        match counters.get(&(consumption.counter_set.clone(), name.clone())) {
                            Some(id) => {
                                let q =
                                    Quantity::try_from(&counter.value).unwrap_or(Quantity::ZERO);
                                consumes.push((*id, q));
                            }
                            None => {
                                invalid.get_or_insert(format!(
                                    "device {:?} consumes unknown counter {}/{}",
                                    device.name, consumption.counter_set, name
                                ));
                            }
                        }
                    }
                }
                let mut attributes = HashMap::new();
                let mut unsupported_attributes = Vec::new();
                for (name, attr) in device.attributes.iter().flatten() {
                    let (domain, id) = qualify(&driver, name);
                    match AttributeValue::of(attr) {
                        Some(value) => attributes.insert(format!("{domain}/{id}"), value),
                        None => {
                            unsupported_attributes.push(format!("{domain}/{id}"));
                            continue;
                        }
                    };
                }
                let mut capacity = BTreeMap::new();
                for (name, cap) in device.capacity.iter().flatten() {
                    let (domain, id) = qualify(&driver, name);
                    let Ok(value) = Quantity::try_from(&cap.value) else {
                        invalid.get_or_insert(format!(
                            "device {:?}: capacity {name}: not a quantity",
                            device.name
                        ));
                        continue;
                    };
                    capacity.insert(
                        format!("{domain}/{id}"),
                        Capacity {
                            published: name.clone(),
                            value,
                            policy: cap.request_policy.as_ref().map(parse_policy),
                        },
                    );
                }
                let id = DeviceId(u32::try_from(self.devices.len()).unwrap_or(u32::MAX));
                let device_visibility = if per_device {
                    visibility(
                        device.node_name.as_deref(),
                        device.all_nodes,
                        device.node_selector.as_ref(),
                    )
                } else {
                    slice_visibility.clone()
                };
                self.by_name
                    .entry((driver.clone(), pool_name.clone(), device.name.clone()))
                    .or_default()
                    .push(id);
                self.devices.push(InventoryDevice {
                    id,
                    pool: pool_id,
                    driver: driver.clone(),
                    pool_name: pool_name.clone(),
                    name: device.name.clone(),
                    slice: slice_name.clone(),
                    attributes,
                    unsupported_attributes,
                    capacity,
                    allow_multiple_allocations: device.allow_multiple_allocations.unwrap_or(false),
                    taints: device
                        .taints
                        .iter()
                        .flatten()
                        .chain(self.rule_taints(&driver, &pool_name, &device.name))
                        .cloned()
                        .collect(),
                    consumes_counters: consumes,
                    compatibility,
                    binding_conditions: device.binding_conditions.clone().unwrap_or_default(),
                    binding_failure_conditions: device
                        .binding_failure_conditions
                        .clone()
                        .unwrap_or_default(),
                    binds_to_node: device.binds_to_node.unwrap_or(false),
                    visibility: device_visibility,
                    per_device_node_selection: per_device,
                    cel: CelDevice::new(&driver, device),
                });
                devices.push(id);
            }
        }
        let local_node = only_node.or_else(|| self.common_node(&devices));
        let has_binding_conditions = devices.iter().any(|d| {
            self.devices
                .get(d.0 as usize)
                .is_some_and(|d| !d.binding_conditions.is_empty())
        });
        self.pools.push(Pool {
            local_node,
            has_binding_conditions,
            id: pool_id,
            driver,
            name: pool_name,
            generation,
            complete,
            invalid,
            devices,
        });
        pool_id
    }

    /// The node every one of `devices` is local to, if there is one.
    fn common_node(&self, devices: &[DeviceId]) -> Option<String> {
        let mut node: Option<&String> = None;
        for d in devices {
            match self.devices.get(d.0 as usize).map(|d| &d.visibility) {
                Some(Visibility::Node(n)) if node.is_none_or(|l| l == n) => node = Some(n),
                _ => return None,
            }
        }
        node.cloned()
    }

    /// Identity of this inventory for caches keyed by device id.
    pub fn uid(&self) -> u64 {
        self.uid
    }

    pub fn device(&self, id: DeviceId) -> Option<&InventoryDevice> {
        self.devices.get(id.0 as usize)
    }
    pub fn pool(&self, id: PoolId) -> Option<&Pool> {
        self.pools.get(id.0 as usize)
    }
    pub fn counter(&self, id: CounterId) -> Option<&Counter> {
        self.counters.get(id.0 as usize)
    }
    pub fn pools(&self) -> &[Pool] {
        &self.pools
    }
    pub fn devices(&self) -> &[InventoryDevice] {
        &self.devices
    }
    pub fn device_count(&self) -> usize {
        self.devices.len()
    }
    /// Finds a device by driver, pool and name (as an allocation result names it): the one of
    /// the pool's newest generation.
    pub fn find(&self, driver: &str, pool: &str, device: &str) -> Option<DeviceId> {
        self.find_all(driver, pool, device).first().copied()
    }

    /// Every device of that name: one, or more where some node sees an older generation of
    /// the pool. Allocating one takes them all, as upstream tracks devices by name.
    pub fn find_all(&self, driver: &str, pool: &str, device: &str) -> &[DeviceId] {
        self.by_name
            .get(&(Arc::from(driver), Arc::from(pool), device.to_string()))
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// The devices `node` can see, pools sorted by driver then name.
    pub fn node_view(&self, node: &NodeInfo) -> NodeView {
        let mut out = Vec::new();
        let mut ids: Vec<PoolId> = self.shared.clone();
        for id in self.local.get(&node.name).into_iter().flatten() {
            let at = self.position_in(&ids, *id);
            ids.insert(at, *id);
        }
        for pool in ids.iter().filter_map(|id| self.pool(*id)) {
            if pool.local_node.as_ref().is_some_and(|n| *n != node.name) {
                continue;
            }
            let visible: Vec<DeviceId> = pool
                .devices
                .iter()
                .copied()
                .filter(|d| self.device(*d).is_some_and(|d| d.visibility.admits(node)))
                .collect();
            if !visible.is_empty() {
                out.push((pool.id, visible));
            }
        }
        NodeView {
            node: node.clone(),
            pools: out,
            uid: next_uid(),
        }
    }
}

fn visibility(
    node_name: Option<&str>,
    all_nodes: Option<bool>,
    selector: Option<&NodeSelector>,
) -> Visibility {
    if let Some(name) = node_name.filter(|n| !n.is_empty()) {
        Visibility::Node(name.to_string())
    } else if all_nodes == Some(true) {
        Visibility::AllNodes
    } else if let Some(sel) = selector {
        Visibility::Selector(sel.clone())
    } else {
        Visibility::Nowhere
    }
}

fn parse_policy(p: &CapacityRequestPolicy) -> RequestPolicy {
    let q =
        |x: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| Quantity::try_from(x).ok();
    let mut valid_values: Option<Vec<Quantity>> = p
        .valid_values
        .as_ref()
        .map(|v| v.iter().filter_map(q).collect());
    if let Some(v) = valid_values.as_mut() {
        v.sort();
    }
    RequestPolicy {
        default: p.default.as_ref().and_then(q),
        valid_values,
        min: p.valid_range.as_ref().and_then(|r| q(&r.min)),
        max: p
            .valid_range
            .as_ref()
            .and_then(|r| r.max.as_ref().and_then(q)),
        step: p
            .valid_range
            .as_ref()
            .and_then(|r| r.step.as_ref().and_then(q)),
    }
}
