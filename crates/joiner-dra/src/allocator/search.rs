//! The depth-first search. Its only mutable state is the list of devices chosen so far
//! (`chosen`), pushed when a device is tried and popped when the search backs out, so every
//! check is "the committed state plus what is on the stack".

use super::failure::{AllocationFailure, FailureReason, Rejections};
use super::prepare::{
    Alternative, Claim, ClaimState, Constraint, ConstraintKind, Mode, PreparedClaims,
};
use super::{Allocator, ClaimAllocation, MAX_RESULTS_PER_CLAIM, MatchCache};
use crate::cel::CelError;
use crate::cel::device::qualify;
use crate::inventory::{
    AttributeValue, Capacity, DeviceId, Inventory, InventoryDevice, NodeView, PoolId, compatible,
};
use crate::node::selector_matches;
use crate::state::AllocationState;
use joiner_model::Quantity;
use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationConfiguration, DeviceAllocationResult,
    DeviceRequestAllocationResult, DeviceToleration,
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One position in a request's candidate order.
#[derive(Debug, Clone)]
pub(super) enum Entry {
    /// A selectable device, with the capacity it would consume (shareable devices only,
    /// by qualified capacity name).
    Device(DeviceId, Option<Arc<Vec<(String, Quantity)>>>),
    /// A device an `All` request must take but cannot: an untolerated taint, or capacity it
    /// cannot serve. (`ExactCount` requests simply skip such devices.)
    Blocked(DeviceId),
    /// The selectors failed on this device at runtime; reaching it fails the claim.
    CelError(DeviceId),
}

#[derive(Debug, Default)]
pub(super) struct Candidates {
    entries: Vec<Entry>,
    /// Devices passing everything that does not depend on the state.
    matching: usize,
    tainted: usize,
    capacity_unfit: usize,
    /// First pool of the view that is incomplete (fails `All`).
    incomplete_pool: Option<PoolId>,
    /// First pool of the view that is invalid (fails `All`; skipped otherwise).
    invalid_pool: Option<PoolId>,
}

#[derive(Debug, Clone)]
pub(super) struct Chosen {
    slot: usize,
    alt: usize,
    device: DeviceId,
    consumed: Option<Arc<Vec<(String, Quantity)>>>,
    admin: bool,
    shared: bool,
}

/// A failure noted during the search; turned into words only if the search fails.
#[derive(Debug, Clone)]
enum Noted {
    NoMatch {
        tainted: usize,
        capacity_unfit: usize,
    },
    NotEnough {
        needed: usize,
        matching: usize,
        rejected: Rejections,
        constraint: Option<usize>,
    },
    PoolIncomplete(PoolId),
    PoolInvalid(PoolId),
    TooMany(usize),
}

enum Reject {
    Blocked,
    InUse,
    Capacity,
    Counters,
    Constraint(usize),
    /// The device's value of the constraint's attribute cannot be compared: an error.
    Unsupported(usize),
}

/// Buffers kept between `allocate` calls so that a call allocates nothing on its way to a
/// "no" (the common answer when a planner scans nodes).
#[derive(Debug, Default)]
pub(super) struct Scratch {
    slots: Vec<(usize, usize)>,
    chosen: Vec<Chosen>,
}

pub(super) struct Search<'a> {
    alloc: &'a Allocator,
    inv: &'a Inventory,
    view: &'a NodeView,
    state: &'a AllocationState,
    cache: &'a mut MatchCache,
    prepared: &'a PreparedClaims,
    /// (claim index, request index) in search order.
    slots: Vec<(usize, usize)>,
    chosen: Vec<Chosen>,
    steps: u64,
    noted: Option<((usize, usize), usize, usize, Noted)>,
}

fn fatal(claim: &Claim, alt: Option<&Alternative>, reason: FailureReason) -> AllocationFailure {
    AllocationFailure {
        claim: claim.key.clone(),
        request: alt.map(|a| a.result_name.clone()),
        reason,
    }
}

impl<'a> Search<'a> {
    pub(super) fn new(
        alloc: &'a Allocator,
        inv: &'a Inventory,
        view: &'a NodeView,
        state: &'a AllocationState,
        cache: &'a mut MatchCache,
        prepared: &'a PreparedClaims,
    ) -> Search<'a> {
        let mut scratch = std::mem::take(&mut cache.scratch);
        scratch.slots.clear();
        scratch.chosen.clear();
        Search {
            alloc,
            inv,
            view,
            state,
            cache,
            prepared,
            slots: scratch.slots,
            chosen: scratch.chosen,
            steps: 0,
            noted: None,
        }
    }

    /// Hands the buffers back for the next call.
    fn recycle(self) {
        let Search {
            cache,
            slots,
            chosen,
            ..
        } = self;
        cache.scratch = Scratch { slots, chosen };
    }

    /// Runs the search. A "no" comes with its reason only when `explain` is set: building
    /// the reason is most of the cost of a quick "no".
    pub(super) fn run(
        mut self,
        explain: bool,
    ) -> Result<Vec<ClaimAllocation>, Option<AllocationFailure>> {
        let outcome = self.search(explain);
        self.recycle();
        outcome
    }

    fn search(&mut self, explain: bool) -> Result<Vec<ClaimAllocation>, Option<AllocationFailure>> {
        for (ci, claim) in self.prepared.claims.iter().enumerate() {
            match &claim.state {
                ClaimState::Broken(f) => return Err(Some(f.clone())),
                ClaimState::Allocated(a) => {
                    let usable = a
                        .node_selector
                        .as_ref()
                        .is_none_or(|sel| selector_matches(sel, &self.view.node));
                    if !usable {
                        return Err(Some(fatal(claim, None, FailureReason::AllocatedElsewhere)));
                    }
                }
                ClaimState::Pending { requests, .. } => {
                    for ri in 0..requests.len() {
                        self.slots.push((ci, ri));
                    }
                }
            }
        }
        match self.slot(0) {
            Ok(true) => Ok(self.results()),
            Ok(false) if explain => Err(Some(self.explain())),
            Ok(false) => Err(None),
            Err(e) => Err(Some(e)),
        }
    }

    fn claim(&self, slot: usize) -> Option<&'a Claim> {
        let (ci, _) = *self.slots.get(slot)?;
        self.prepared.claims.get(ci)
    }

    fn alternative(&self, slot: usize, alt: usize) -> Option<&'a Alternative> {
        let (ci, ri) = *self.slots.get(slot)?;
        match &self.prepared.claims.get(ci)?.state {
            ClaimState::Pending { requests, .. } => requests.get(ri)?.alternatives.get(alt),
            _ => None,
        }
    }

    fn constraints(&self, slot: usize) -> &'a [Constraint] {
        match self.claim(slot).map(|c| &c.state) {
            Some(ClaimState::Pending { constraints, .. }) => constraints,
            _ => &[],
        }
    }

    fn note(&mut self, slot: usize, alt: usize, noted: Noted) {
        let depth = (slot, self.chosen.len());
        if self.noted.as_ref().is_none_or(|(d, ..)| depth > *d) {
            self.noted = Some((depth, slot, alt, noted));
        }
    }

    /// Allocates requests `slot..`; `Ok(false)` when impossible from here.
    fn slot(&mut self, slot: usize) -> Result<bool, AllocationFailure> {
        let claim_index = self.slots.get(slot).map(|s| s.0);
        let Some(&(ci, ri)) = self.slots.get(slot) else {
            return Ok(true);
        };
        let alts = match self.prepared.claims.get(ci).map(|c| &c.state) {
            Some(ClaimState::Pending { requests, .. }) => {
                requests.get(ri).map_or(0, |r| r.alternatives.len())
            }
            _ => 0,
        };
        for alt in 0..alts {
            let Some(a) = self.alternative(slot, alt) else {
                continue;
            };
            let cands = self.candidates_for(a);
            match self.try_alternative(slot, alt, a, &cands, claim_index)? {
                Some(true) => return Ok(true),
                _ => continue,
            }
        }
        Ok(false)
    }

    /// The fewest devices the requests of this slot's claim after it can take
    /// ([`super::prepare::Request::fewest`] each).
    fn fewest_after(&self, slot: usize) -> usize {
        let Some(&(ci, _)) = self.slots.get(slot) else {
            return 0;
        };
        let Some(ClaimState::Pending { requests, .. }) =
            self.prepared.claims.get(ci).map(|c| &c.state)
        else {
            return 0;
        };
        self.slots
            .iter()
            .skip(slot + 1)
            .filter(|(c, _)| *c == ci)
            .filter_map(|(_, ri)| requests.get(*ri))
            .map(|r| r.fewest())
            .sum()
    }

    /// One alternative of a request: `Some(true)` when everything from here is allocated.
    fn try_alternative(
        &mut self,
        slot: usize,
        alt: usize,
        a: &'a Alternative,
        cands: &Candidates,
        claim_index: Option<usize>,
    ) -> Result<Option<bool>, AllocationFailure> {
        // Upstream decides what "all" is before the search: with consumable capacity, a
        // shareable device whose remaining capacity (after the allocations already made,
        // not those of this search) cannot serve the request is not part of it.
        let with_room;
        let cands = if a.mode == Mode::All && self.alloc.features.consumable_capacity {
            match self.without_full_devices(cands) {
                Some(c) => {
                    with_room = c;
                    &with_room
                }
                None => cands,
            }
        } else {
            cands
        };
        let need = match a.mode {
            Mode::Exact(n) => n,
            Mode::All => {
                if let Some(pool) = cands.incomplete_pool {
                    self.note(slot, alt, Noted::PoolIncomplete(pool));
                    return Ok(None);
                }
                if let Some(pool) = cands.invalid_pool {
                    self.note(slot, alt, Noted::PoolInvalid(pool));
                    return Ok(None);
                }
                cands.entries.len()
            }
        };
        // The claim's results must stay within the limit, counting the fewest devices its
        // later requests can take; another alternative may need fewer devices. Checking only
        // what is chosen so far would search every way to pick too many before backing out.
        let so_far = self
            .chosen
            .iter()
            .filter(|c| self.slots.get(c.slot).map(|s| s.0) == claim_index)
            .count();
        if so_far + need + self.fewest_after(slot) > MAX_RESULTS_PER_CLAIM {
            self.note(slot, alt, Noted::TooMany(so_far + need));
            return Ok(None);
        }
        if cands.matching == 0
            && !cands
                .entries
                .iter()
                .any(|e| matches!(e, Entry::CelError(..)))
        {
            self.note(
                slot,
                alt,
                Noted::NoMatch {
                    tainted: cands.tainted,
                    capacity_unfit: cands.capacity_unfit,
                },
            );
            return Ok(None);
        }
        let mut rejected = Rejections::default();
        let mut constraint = None;
        if self.pick(slot, alt, a, cands, need, 0, &mut rejected, &mut constraint)? {
            return Ok(Some(true));
        }
        self.note(
            slot,
            alt,
            Noted::NotEnough {
                needed: need,
                matching: cands.matching,
                rejected,
                constraint,
            },
        );
        Ok(Some(false))
    }

    /// `cands` less the shareable devices that have no room left in the committed state for
    /// what the request would consume; `None` when every device has room (the usual case,
    /// which then copies nothing).
    fn without_full_devices(&self, cands: &Candidates) -> Option<Candidates> {
        let full = |entry: &Entry| match entry {
            Entry::Device(d, Some(consumed)) => self.inv.device(*d).is_some_and(|dev| {
                consumed.iter().any(|(cap, amount)| {
                    let total = dev.capacity.get(cap).map_or(Quantity::ZERO, |c| c.value);
                    self.state
                        .capacity_consumed(*d, cap)
                        .saturating_add(*amount)
                        > total
                })
            }),
            _ => false,
        };
        if !cands.entries.iter().any(full) {
            return None;
        }
        let mut out = Candidates {
            entries: Vec::with_capacity(cands.entries.len()),
            matching: cands.matching,
            tainted: cands.tainted,
            capacity_unfit: cands.capacity_unfit,
            incomplete_pool: cands.incomplete_pool,
            invalid_pool: cands.invalid_pool,
        };
        for entry in &cands.entries {
            if full(entry) {
                out.matching = out.matching.saturating_sub(1);
                out.capacity_unfit += 1;
            } else {
                out.entries.push(entry.clone());
            }
        }
        Some(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn pick(
        &mut self,
        slot: usize,
        alt: usize,
        a: &'a Alternative,
        cands: &Candidates,
        need: usize,
        start: usize,
        rejected: &mut Rejections,
        constraint: &mut Option<usize>,
    ) -> Result<bool, AllocationFailure> {
        if need == 0 {
            return self.slot(slot + 1);
        }
        let all = a.mode == Mode::All;
        let mut i = start;
        while let Some(entry) = cands.entries.get(i) {
            if cands.entries.len() - i < need {
                break;
            }
            i += 1;
            let (device, consumed, blocked) = match entry {
                Entry::Device(d, c) => (*d, c, false),
                Entry::Blocked(d) => (*d, &None, true),
                Entry::CelError(d) => {
                    let error = self.cache.errors.get(&(a.selector_set, *d)).cloned();
                    let claim = self.claim(slot);
                    return Err(AllocationFailure {
                        claim: claim.map(|c| c.key.clone()).unwrap_or_default(),
                        request: Some(a.result_name.clone()),
                        reason: match error {
                            Some(e) => FailureReason::Cel(e),
                            None => FailureReason::InvalidClaim {
                                message: "CEL error".into(),
                            },
                        },
                    });
                }
            };
            self.steps += 1;
            if self.steps > self.alloc.budget {
                let claim = self.claim(slot);
                return Err(AllocationFailure {
                    claim: claim.map(|c| c.key.clone()).unwrap_or_default(),
                    request: Some(a.result_name.clone()),
                    reason: FailureReason::SearchBudgetExhausted {
                        steps: self.alloc.budget,
                    },
                });
            }
            let Some(dev) = self.inv.device(device) else {
                continue;
            };
            let shared = dev.allow_multiple_allocations && self.alloc.features.consumable_capacity;
            let verdict = if blocked {
                Err(Reject::Blocked)
            } else {
                self.check(slot, alt, a, dev, shared, consumed.as_deref())
            };
            match verdict {
                Ok(()) => {}
                Err(Reject::Unsupported(c)) => {
                    return Err(self.device_error(
                        slot,
                        a,
                        dev,
                        |device, constraint| FailureReason::UnsupportedAttribute {
                            device,
                            attribute: constraint.attribute.clone(),
                        },
                        c,
                    ));
                }
                Err(Reject::Constraint(c)) if all => {
                    return Err(self.device_error(
                        slot,
                        a,
                        dev,
                        |device, constraint| FailureReason::AllDevicesBreakConstraint {
                            device,
                            constraint: constraint.describe(),
                        },
                        c,
                    ));
                }
                Err(reason) => {
                    match reason {
                        Reject::Unsupported(_) => {}
                        Reject::Blocked => {}
                        Reject::InUse => rejected.in_use += 1,
                        Reject::Capacity => rejected.capacity += 1,
                        Reject::Counters => rejected.counters += 1,
                        Reject::Constraint(c) => {
                            rejected.constraints += 1;
                            constraint.get_or_insert(c);
                        }
                    }
                    if all {
                        // `All` takes every matching device; one unusable device is enough
                        // to fail the request.
                        break;
                    }
                    continue;
                }
            }
            self.chosen.push(Chosen {
                slot,
                alt,
                device,
                consumed: consumed.clone(),
                admin: a.admin_access,
                shared,
            });
            if self.pick(slot, alt, a, cands, need - 1, i, rejected, constraint)? {
                return Ok(true);
            }
            self.chosen.pop();
        }
        Ok(false)
    }

    /// The error that stops the search at `dev` over constraint `ci` of its claim.
    fn device_error(
        &self,
        slot: usize,
        a: &Alternative,
        dev: &InventoryDevice,
        reason: impl FnOnce(String, &Constraint) -> FailureReason,
        ci: usize,
    ) -> AllocationFailure {
        let device = format!("{}/{}/{}", dev.driver, dev.pool_name, dev.name);
        let claim = self.claim(slot).map(|c| c.key.clone()).unwrap_or_default();
        let reason = match self.constraints(slot).get(ci) {
            Some(constraint) => reason(device, constraint),
            None => FailureReason::InvalidClaim {
                message: format!("constraint {ci} is missing"),
            },
        };
        AllocationFailure {
            claim,
            request: Some(a.result_name.clone()),
            reason,
        }
    }

    /// State-dependent checks of one device for one alternative.
    fn check(
        &self,
        slot: usize,
        alt: usize,
        a: &Alternative,
        dev: &InventoryDevice,
        shared: bool,
        consumed: Option<&Vec<(String, Quantity)>>,
    ) -> Result<(), Reject> {
        let id = dev.id;
        let mut takes_counters = !a.admin_access;
        let claim_index = self.slots.get(slot).map(|s| s.0);
        if a.admin_access
            && self
                .chosen
                .iter()
                .any(|c| c.device == id && self.slots.get(c.slot).map(|s| s.0) == claim_index)
        {
            return Err(Reject::InUse);
        }
        if !a.admin_access {
            if shared {
                if self.state.in_exclusive_use(id) {
                    return Err(Reject::InUse);
                }
                if self
                    .chosen
                    .iter()
                    .any(|c| c.device == id && (!c.shared || (c.slot == slot && c.alt == alt)))
                {
                    return Err(Reject::InUse);
                }
                for (cap, amount) in consumed.into_iter().flatten() {
                    let total = dev
                        .capacity
                        .get(cap)
                        .map(|c| c.value)
                        .unwrap_or(Quantity::ZERO);
                    let mut used = self
                        .state
                        .capacity_consumed(id, cap)
                        .saturating_add(*amount);
                    for c in self.chosen.iter().filter(|c| c.device == id && !c.admin) {
                        for (n, q) in c.consumed.iter().flat_map(|v| v.iter()) {
                            if n == cap {
                                used = used.saturating_add(*q);
                            }
                        }
                    }
                    if used > total {
                        return Err(Reject::Capacity);
                    }
                }
                takes_counters = !self.state.is_shared(id)
                    && !self.chosen.iter().any(|c| c.device == id && !c.admin);
            } else if self.state.in_exclusive_use(id)
                || self.state.is_shared(id)
                || self.chosen.iter().any(|c| c.device == id && !c.admin)
            {
                return Err(Reject::InUse);
            }
        }
        if takes_counters && !dev.consumes_counters.is_empty() {
            for (counter, amount) in &dev.consumes_counters {
                let limit = self
                    .inv
                    .counter(*counter)
                    .map(|c| c.value)
                    .unwrap_or(Quantity::ZERO);
                let mut used = self
                    .state
                    .counter_consumed(*counter)
                    .saturating_add(*amount);
                let mut counted: Vec<DeviceId> = Vec::new();
                for c in self.chosen.iter().filter(|c| !c.admin) {
                    if counted.contains(&c.device) {
                        continue;
                    }
                    counted.push(c.device);
                    if c.shared && self.state.is_shared(c.device) {
                        continue;
                    }
                    if let Some(other) = self.inv.device(c.device) {
                        for (n, q) in &other.consumes_counters {
                            if n == counter {
                                used = used.saturating_add(*q);
                            }
                        }
                    }
                }
                if used > limit {
                    return Err(Reject::Counters);
                }
            }
            if !self.compatible_on_counter_sets(dev) {
                return Err(Reject::Counters);
            }
        }
        // Constraints of the claim that cover this request.
        for (ci, constraint) in self.constraints(slot).iter().enumerate() {
            if !constraint.covers(&a.result_name) {
                continue;
            }
            let value = dev.attributes.get(&constraint.attribute);
            // With the gate off a list is no value the allocator compares.
            let gated_list = value.is_some_and(|v| {
                !self.alloc.features.list_type_attributes && matches!(v, AttributeValue::List(_))
            });
            if gated_list || dev.unsupported_attributes.contains(&constraint.attribute) {
                return Err(Reject::Unsupported(ci));
            }
            let Some(value) = value else {
                return Err(Reject::Constraint(ci));
            };
            // Values compare as sets (a scalar is a set of one): `matchAttribute` needs a value
            // every device it covers has, `distinctAttribute` devices that share none.
            let mut common: Vec<&AttributeValue> = value.as_set().iter().collect();
            for c in &self.chosen {
                if self.slots.get(c.slot).map(|s| s.0) != claim_index {
                    continue;
                }
                let Some(other_alt) = self.alternative(c.slot, c.alt) else {
                    continue;
                };
                if !constraint.covers(&other_alt.result_name) {
                    continue;
                }
                let other = self
                    .inv
                    .device(c.device)
                    .and_then(|d| d.attributes.get(&constraint.attribute));
                let ok = match constraint.kind {
                    ConstraintKind::Match => other.is_some_and(|o| {
                        common.retain(|v| o.as_set().contains(v));
                        !common.is_empty()
                    }),
                    ConstraintKind::Distinct => {
                        other.is_none_or(|o| !o.as_set().iter().any(|v| value.as_set().contains(v)))
                    }
                };
                if !ok {
                    return Err(Reject::Constraint(ci));
                }
            }
        }
        Ok(())
    }

    /// Whether `dev` may join the devices allocated (and chosen so far) on each counter set it
    /// draws on, by their compatibility groups ([`compatible`]).
    fn compatible_on_counter_sets(&self, dev: &InventoryDevice) -> bool {
        dev.compatibility.iter().all(|(set, groups)| {
            let mut counted: Vec<DeviceId> = Vec::new();
            let chosen = self.chosen.iter().filter(|c| !c.admin).filter_map(|c| {
                if counted.contains(&c.device) || (c.shared && self.state.is_shared(c.device)) {
                    return None;
                }
                counted.push(c.device);
                let other = self.inv.device(c.device)?;
                other
                    .compatibility
                    .iter()
                    .find(|(s, _)| s == set)
                    .map(|(_, g)| g.as_slice())
            });
            let chosen: Vec<&[String]> = chosen.collect();
            compatible(
                self.state
                    .set_groups(set)
                    .chain(chosen)
                    .chain(std::iter::once(groups.as_slice())),
            )
        })
    }

    /// The state-independent candidate order of one alternative on this node: from the
    /// allocator's cache for this view, else computed and cached.
    fn candidates_for(&mut self, a: &Alternative) -> Arc<Candidates> {
        let key = (self.view.uid, a.signature);
        if let Some(c) = self.cache.candidates.get(&key) {
            return c.clone();
        }
        let c = Arc::new(self.compute_candidates(a));
        self.cache.candidates.insert(key, c.clone());
        c
    }

    fn compute_candidates(&mut self, a: &Alternative) -> Candidates {
        let mut out = Candidates::default();
        let features = self.alloc.features;
        let set = a.selector_set as usize;
        if self.cache.sets.len() <= set {
            self.cache.sets.resize(set + 1, Vec::new());
        }
        for (pool_id, devices) in self.pool_order() {
            let Some(pool) = self.inv.pool(*pool_id) else {
                continue;
            };
            // Devices of incomplete or invalid pools are never allocated; an `All` request
            // fails on them, others look elsewhere.
            if !pool.complete {
                out.incomplete_pool.get_or_insert(*pool_id);
                continue;
            }
            if pool.invalid.is_some() {
                out.invalid_pool.get_or_insert(*pool_id);
                continue;
            }
            let all = a.mode == Mode::All;
            for &d in devices {
                let Some(dev) = self.inv.device(d) else {
                    continue;
                };
                // Devices that need a disabled feature are not allocatable at all. (With
                // consumable capacity off, a shareable device is simply an exclusive one.)
                // Per-device node selection is part of partitionable devices: with the gate
                // off, kube-scheduler passes over such slices.
                if (!features.partitionable_devices
                    && (!dev.consumes_counters.is_empty() || dev.per_device_node_selection))
                    || (!features.device_binding_conditions && !dev.binding_conditions.is_empty())
                {
                    continue;
                }
                match self.matches(a, set, dev) {
                    Some(true) => {}
                    Some(false) => continue,
                    None => {
                        out.entries.push(Entry::CelError(d));
                        continue;
                    }
                }
                if features.device_taints && !tolerated(dev, &a.tolerations) {
                    out.tainted += 1;
                    if all {
                        out.entries.push(Entry::Blocked(d));
                    }
                    continue;
                }
                let consumed = match capacity_fit(dev, a, features.consumable_capacity) {
                    Some(c) => c,
                    None => {
                        out.capacity_unfit += 1;
                        // With consumable capacity, upstream leaves a device whose capacity
                        // cannot serve the request out of "all" (`validateDeviceRequest`
                        // skips it when `CmpRequestOverCapacity` fails); without the gate
                        // capacity requests are dropped, so this is not reached for them.
                        if all && !features.consumable_capacity {
                            out.entries.push(Entry::Blocked(d));
                        }
                        continue;
                    }
                };
                out.matching += 1;
                out.entries.push(Entry::Device(d, consumed.map(Arc::new)));
            }
        }
        out
    }

    /// The view's pools in the order upstream searches them. The incubating and
    /// experimental allocators (`GatherPools`) put pools with a device that has binding
    /// conditions after all others, each group by driver then name, so that devices usable
    /// at once win over devices that must wait for their conditions; the stable allocator
    /// keeps the plain order. A pool counts when such a device is in one of the pool's
    /// slices that reach the node (upstream looks at the slices targeting the node, not
    /// only at the devices visible to it).
    fn pool_order(&self) -> Vec<&'a (PoolId, Vec<DeviceId>)> {
        let view: &'a NodeView = self.view;
        let pools = &view.pools;
        let reorder = self.alloc.features.uses_incubating_allocator()
            && pools
                .iter()
                .any(|(id, _)| self.inv.pool(*id).is_some_and(|p| p.has_binding_conditions));
        if !reorder {
            return pools.iter().collect();
        }
        let (mut first, last): (Vec<_>, Vec<_>) = pools
            .iter()
            .partition(|(id, visible)| !self.binds_on_node(*id, visible));
        first.extend(last);
        first
    }

    /// Whether a pool has a device with binding conditions in a slice that has a device
    /// visible to the node.
    fn binds_on_node(&self, pool: PoolId, visible: &[DeviceId]) -> bool {
        let Some(pool) = self.inv.pool(pool) else {
            return false;
        };
        if !pool.has_binding_conditions {
            return false;
        }
        let slices: Vec<&str> = visible
            .iter()
            .filter_map(|d| self.inv.device(*d).map(|d| d.slice.as_str()))
            .collect();
        pool.devices.iter().any(|d| {
            self.inv.device(*d).is_some_and(|d| {
                !d.binding_conditions.is_empty() && slices.contains(&d.slice.as_str())
            })
        })
    }

    /// Selector result through the cache: `None` for a CEL runtime error.
    fn matches(&mut self, a: &Alternative, set: usize, dev: &InventoryDevice) -> Option<bool> {
        let idx = dev.id.0 as usize;
        let Some(row) = self.cache.sets.get_mut(set) else {
            return Some(false);
        };
        if row.len() <= idx {
            row.resize(self.inv.device_count().max(idx + 1), 0);
        }
        match row.get(idx).copied().unwrap_or(0) {
            1 => return Some(true),
            2 => return Some(false),
            3 => return None,
            _ => {}
        }
        let mut verdict = 1u8;
        for expr in a.selectors.iter() {
            match self.alloc.cel.evaluate(expr, &dev.cel) {
                Ok(true) => {}
                Ok(false) => {
                    verdict = 2;
                    break;
                }
                Err(e) => {
                    // Name the device, as kube-scheduler does.
                    let e = match e {
                        CelError::Runtime {
                            expression,
                            message,
                        } => CelError::Runtime {
                            expression,
                            message: format!(
                                "on device {}/{}/{}: {message}",
                                dev.driver, dev.pool_name, dev.name
                            ),
                        },
                        other => other,
                    };
                    self.cache.errors.insert((a.selector_set, dev.id), e);
                    verdict = 3;
                    break;
                }
            }
        }
        if let Some(cell) = self.cache.sets.get_mut(set).and_then(|r| r.get_mut(idx)) {
            *cell = verdict;
        }
        match verdict {
            1 => Some(true),
            2 => Some(false),
            _ => None,
        }
    }

    fn explain(&self) -> AllocationFailure {
        // Like kube-scheduler: when nothing fits and an invalid pool was skipped, that pool
        // is the answer, since its devices might have fitted.
        let invalid = self
            .view
            .pools
            .iter()
            .find_map(|(id, _)| self.inv.pool(*id).filter(|p| p.invalid.is_some()));
        if let Some(pool) = invalid {
            let first = self.slots.first().and_then(|_| self.claim(0));
            return AllocationFailure {
                claim: first.map(|c| c.key.clone()).unwrap_or_default(),
                request: None,
                reason: FailureReason::PoolInvalid {
                    pool: format!("{}/{}", pool.driver, pool.name),
                    reason: pool.invalid.clone().unwrap_or_default(),
                },
            };
        }
        let Some((_, slot, alt, noted)) = &self.noted else {
            return AllocationFailure {
                claim: Arc::from(""),
                request: None,
                reason: FailureReason::InvalidClaim {
                    message: "allocation failed".into(),
                },
            };
        };
        let claim = self.claim(*slot).map(|c| c.key.clone()).unwrap_or_default();
        let a = self.alternative(*slot, *alt);
        let reason = match noted {
            Noted::NoMatch {
                tainted,
                capacity_unfit,
            } => FailureReason::NoMatchingDevice {
                class: a.map(|a| a.class_name.clone()).unwrap_or_default(),
                selectors: a.map(|a| a.selector_sources.clone()).unwrap_or_default(),
                tainted: *tainted,
                capacity_unfit: *capacity_unfit,
            },
            Noted::NotEnough {
                needed,
                matching,
                rejected,
                constraint,
            } => {
                let only_constraints = rejected.in_use == 0
                    && rejected.capacity == 0
                    && rejected.counters == 0
                    && *matching >= *needed;
                match constraint.and_then(|c| self.constraints(*slot).get(c)) {
                    Some(c) if only_constraints => FailureReason::Constraint {
                        constraint: c.describe(),
                    },
                    _ => FailureReason::NotEnoughDevices {
                        needed: *needed,
                        matching: *matching,
                        rejected: rejected.clone(),
                    },
                }
            }
            Noted::PoolIncomplete(pool) => FailureReason::PoolIncomplete {
                pool: self
                    .inv
                    .pool(*pool)
                    .map(|p| format!("{}/{}", p.driver, p.name))
                    .unwrap_or_default(),
            },
            Noted::PoolInvalid(pool) => FailureReason::PoolInvalid {
                pool: self
                    .inv
                    .pool(*pool)
                    .map(|p| format!("{}/{}", p.driver, p.name))
                    .unwrap_or_default(),
                reason: self
                    .inv
                    .pool(*pool)
                    .and_then(|p| p.invalid.clone())
                    .unwrap_or_default(),
            },
            Noted::TooMany(count) => FailureReason::TooManyResults {
                count: *count,
                limit: MAX_RESULTS_PER_CLAIM,
            },
        };
        AllocationFailure {
            claim,
            request: a.map(|a| a.result_name.clone()),
            reason,
        }
    }

    fn results(&self) -> Vec<ClaimAllocation> {
        let features = self.alloc.features;
        let mut out = Vec::new();
        for (ci, claim) in self.prepared.claims.iter().enumerate() {
            let ClaimState::Pending { config, .. } = &claim.state else {
                continue;
            };
            let mut results = Vec::new();
            let mut devices: Vec<&InventoryDevice> = Vec::new();
            let mut class_config: Vec<DeviceAllocationConfiguration> = Vec::new();
            // Class name -> the range of its configs in `class_config`.
            let mut class_ranges: Vec<(String, usize, usize)> = Vec::new();
            let mut seen_alts: Vec<(usize, usize)> = Vec::new();
            let mut chosen_names: Vec<String> = Vec::new();
            for c in &self.chosen {
                if self.slots.get(c.slot).map(|s| s.0) != Some(ci) {
                    continue;
                }
                let (Some(a), Some(dev)) =
                    (self.alternative(c.slot, c.alt), self.inv.device(c.device))
                else {
                    continue;
                };
                if !seen_alts.contains(&(c.slot, c.alt)) {
                    seen_alts.push((c.slot, c.alt));
                    chosen_names.push(a.result_name.to_string());
                    // Each class's configs once, listing every request that used the class.
                    if let Some((_, start, end)) =
                        class_ranges.iter().find(|(name, ..)| *name == a.class_name)
                    {
                        for cfg in class_config.iter_mut().take(*end).skip(*start) {
                            cfg.requests
                                .get_or_insert_with(Vec::new)
                                .push(a.result_name.to_string());
                        }
                    } else {
                        let start = class_config.len();
                        for cfg in joiner_model::dra::class_spec(&a.class)
                            .config
                            .iter()
                            .flatten()
                        {
                            class_config.push(DeviceAllocationConfiguration {
                                source: "FromClass".into(),
                                requests: Some(vec![a.result_name.to_string()]),
                                opaque: cfg.opaque.clone(),
                            });
                        }
                        class_ranges.push((a.class_name.clone(), start, class_config.len()));
                    }
                }
                let share = c.shared && !c.admin;
                // A device without capacities consumes none: the field stays unset, as
                // kube-scheduler writes it.
                let consumed = if share {
                    Some(consumed_capacity(dev, c.consumed.as_deref())).filter(|m| !m.is_empty())
                } else {
                    None
                };
                let share_id = share.then(|| share_id(&claim.key, results.len(), dev));
                results.push(DeviceRequestAllocationResult {
                    request: a.result_name.to_string(),
                    driver: dev.driver.to_string(),
                    pool: dev.pool_name.to_string(),
                    device: dev.name.clone(),
                    admin_access: a.admin_access.then_some(true),
                    tolerations: (features.device_taints && !a.tolerations.is_empty())
                        .then(|| a.tolerations.clone()),
                    binding_conditions: (features.device_binding_conditions
                        && !dev.binding_conditions.is_empty())
                    .then(|| dev.binding_conditions.clone()),
                    binding_failure_conditions: (features.device_binding_conditions
                        && !dev.binding_failure_conditions.is_empty())
                    .then(|| dev.binding_failure_conditions.clone()),
                    consumed_capacity: consumed,
                    share_id,
                    skip_node_operations: None,
                });
                devices.push(dev);
            }
            let mut configs = class_config;
            for cfg in config {
                // A claim config applies when it names no request, or names a request (or the
                // chosen sub-request) that was allocated.
                let applies = match cfg.requests.as_deref() {
                    None | Some([]) => true,
                    Some(names) => names.iter().any(|n| {
                        chosen_names
                            .iter()
                            .any(|c| c == n || c.split('/').next() == Some(n.as_str()))
                    }),
                };
                if applies {
                    configs.push(DeviceAllocationConfiguration {
                        source: "FromClaim".into(),
                        requests: cfg.requests.clone(),
                        opaque: cfg.opaque.clone(),
                    });
                }
            }
            out.push(ClaimAllocation {
                claim: claim.key.to_string(),
                allocation: AllocationResult {
                    allocation_timestamp: None,
                    devices: Some(DeviceAllocationResult {
                        config: (!configs.is_empty()).then_some(configs),
                        results: Some(results),
                    }),
                    node_selector: node_selector(&devices, &self.view.node.name),
                },
            });
        }
        out
    }
}

/// Whether every NoSchedule/NoExecute taint of the device is tolerated.
fn tolerated(dev: &InventoryDevice, tolerations: &[DeviceToleration]) -> bool {
    dev.taints.iter().all(|taint| {
        if taint.effect != "NoSchedule" && taint.effect != "NoExecute" {
            return true;
        }
        tolerations.iter().any(|t| {
            let effect_ok = t
                .effect
                .as_deref()
                .is_none_or(|e| e.is_empty() || e == taint.effect);
            let key_ok = t
                .key
                .as_deref()
                .is_none_or(|k| k.is_empty() || k == taint.key);
            let value_ok = match t.operator.as_deref().unwrap_or("Equal") {
                "Exists" => true,
                "Equal" => {
                    t.key.as_deref().is_some_and(|k| !k.is_empty())
                        && t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
                }
                _ => false,
            };
            effect_ok && key_ok && value_ok
        })
    })
}

/// The amount of a capacity a request consumes under the device's policy, or `None` when the
/// policy cannot serve it.
pub(crate) fn consumed_amount(requested: Option<Quantity>, cap: &Capacity) -> Option<Quantity> {
    let Some(policy) = &cap.policy else {
        let amount = requested.unwrap_or(cap.value);
        return (amount <= cap.value).then_some(amount);
    };
    let mut amount = requested.or(policy.default).unwrap_or(cap.value);
    if let Some(values) = &policy.valid_values {
        amount = *values.iter().find(|v| **v >= amount)?;
    } else if let Some(min) = policy.min {
        if amount < min {
            amount = min;
        }
        if let Some(step) = policy.step.filter(|s| s.nanos() > 0) {
            let over = amount.nanos() - min.nanos();
            let steps = over / step.nanos() + i128::from(over % step.nanos() != 0);
            amount = Quantity::from_nanos(min.nanos() + steps * step.nanos(), amount.format());
        }
        if policy.max.is_some_and(|max| amount > max) {
            return None;
        }
    }
    (amount <= cap.value).then_some(amount)
}

/// Capacity requests against one device: `None` if it cannot serve them; for a shareable
/// device, what it would consume of each capacity.
fn capacity_fit(
    dev: &InventoryDevice,
    a: &Alternative,
    consumable: bool,
) -> Option<Option<Vec<(String, Quantity)>>> {
    let mut requested: BTreeMap<String, Quantity> = BTreeMap::new();
    for (name, q) in &a.capacity {
        let (domain, id) = qualify(&dev.driver, name);
        let key = format!("{domain}/{id}");
        if !dev.capacity.contains_key(&key) {
            return None;
        }
        requested.insert(key, *q);
    }
    let shared = consumable && dev.allow_multiple_allocations;
    if !shared {
        for (key, q) in &requested {
            let cap = dev.capacity.get(key)?;
            consumed_amount(Some(*q), cap)?;
        }
        return Some(None);
    }
    let mut consumed = Vec::new();
    for (key, cap) in &dev.capacity {
        consumed.push((
            key.clone(),
            consumed_amount(requested.get(key).copied(), cap)?,
        ));
    }
    Some(Some(consumed))
}

fn consumed_capacity(
    dev: &InventoryDevice,
    consumed: Option<&Vec<(String, Quantity)>>,
) -> BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
    consumed
        .into_iter()
        .flatten()
        .map(|(key, q)| {
            let name = dev
                .capacity
                .get(key)
                .map(|c| c.published.clone())
                .unwrap_or_else(|| key.clone());
            (name, (*q).into())
        })
        .collect()
}

/// A deterministic UUID-shaped share id (upstream draws a random one; determinism keeps
/// plans reproducible).
fn share_id(claim: &str, index: usize, dev: &InventoryDevice) -> String {
    let mut h1: u64 = 0xcbf2_9ce4_8422_2325;
    let mut h2: u64 = 0x8422_2325_cbf2_9ce4;
    let text = format!(
        "{claim}\0{index}\0{}\0{}\0{}",
        dev.driver, dev.pool_name, dev.name
    );
    for b in text.bytes() {
        h1 = (h1 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        h2 = (h2 ^ u64::from(b))
            .wrapping_mul(0x0000_0100_0000_01b3)
            .rotate_left(7);
    }
    let x = (u128::from(h1) << 64) | u128::from(h2);
    let hex = format!("{x:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The allocation's node selector: pinned to the node when any device is node-local (or
/// binds to the node), the conjunction of the slices' single-term selectors otherwise, and
/// none when every device is usable from every node.
fn node_selector(devices: &[&InventoryDevice], node: &str) -> Option<NodeSelector> {
    use crate::inventory::Visibility;
    let mut fields: Vec<NodeSelectorRequirement> = Vec::new();
    let mut exprs: Vec<NodeSelectorRequirement> = Vec::new();
    for dev in devices {
        match &dev.visibility {
            Visibility::Node(_) => return Some(pinned(node)),
            _ if dev.binds_to_node => return Some(pinned(node)),
            Visibility::AllNodes | Visibility::Nowhere => {}
            Visibility::Selector(sel) => {
                if let [term] = sel.node_selector_terms.as_slice() {
                    for r in term.match_fields.iter().flatten() {
                        if !fields.contains(r) {
                            fields.push(r.clone());
                        }
                    }
                    for r in term.match_expressions.iter().flatten() {
                        if !exprs.contains(r) {
                            exprs.push(r.clone());
                        }
                    }
                } else if devices.len() == 1 {
                    return Some(sel.clone());
                }
            }
        }
    }
    if fields.is_empty() && exprs.is_empty() {
        return None;
    }
    Some(NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_expressions: (!exprs.is_empty()).then_some(exprs),
            match_fields: (!fields.is_empty()).then_some(fields),
        }],
    })
}

fn pinned(node: &str) -> NodeSelector {
    NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec![node.to_string()]),
            }]),
        }],
    }
}
