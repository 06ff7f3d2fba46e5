//! What is already taken: devices in exclusive use, capacity consumed from shareable devices,
//! and counters consumed from shared counter sets.
//!
//! Built from the claims that already have `status.allocation`, then grown by committing the
//! allocator's results. It is a few flat maps keyed by dense ids, so cloning it for a what-if
//! evaluation is cheap, and [`AllocationState::release`] undoes a commit exactly.

use crate::cel::device::qualify;
use crate::hash::FastMap;
use crate::inventory::{CounterId, CounterSetKey, DeviceId, Inventory, NodeView};
use joiner_model::Quantity;
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceRequestAllocationResult, ResourceClaim,
};
use std::collections::BTreeMap;

/// Devices, capacity and counters in use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllocationState {
    exclusive: Vec<u64>,
    /// Consumed capacity of shareable devices, by qualified capacity name, with the number of
    /// allocations sharing the device.
    shared: FastMap<DeviceId, SharedUse>,
    counters: FastMap<CounterId, Quantity>,
    /// Per counter set: the compatibility groups of the devices allocated on it, with how many
    /// devices have each list.
    set_groups: FastMap<CounterSetKey, BTreeMap<Vec<String>, u32>>,
    /// Allocated devices that the inventory does not know (their slice is gone).
    pub unknown_devices: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct SharedUse {
    allocations: u32,
    consumed: BTreeMap<String, Quantity>,
}

impl AllocationState {
    pub fn new() -> AllocationState {
        AllocationState::default()
    }

    /// The state of the cluster from every claim that is allocated. Claims without an
    /// allocation are ignored.
    pub fn from_claims<'a>(
        inventory: &Inventory,
        claims: impl IntoIterator<Item = &'a ResourceClaim>,
    ) -> AllocationState {
        let mut state = AllocationState::new();
        for claim in claims {
            if let Some(allocation) = claim.status.as_ref().and_then(|s| s.allocation.as_ref()) {
                state.commit(inventory, allocation);
            }
        }
        state
    }

    /// Whether some device of `view` is free for another claim: not held whole by a claim, or
    /// one that may be shared. `false` says no claim needing a device of its own fits there.
    pub fn leaves_free(&self, inventory: &Inventory, view: &NodeView) -> bool {
        view.pools().iter().flat_map(|(_, ids)| ids).any(|&id| {
            !self.in_exclusive_use(id)
                || inventory
                    .device(id)
                    .is_some_and(|d| d.allow_multiple_allocations)
        })
    }

    /// Whether a device is allocated exclusively to some claim.
    pub fn in_exclusive_use(&self, device: DeviceId) -> bool {
        let (word, bit) = (device.0 as usize / 64, device.0 % 64);
        self.exclusive
            .get(word)
            .is_some_and(|w| w & (1 << bit) != 0)
    }

    /// Whether a shareable device has at least one allocation.
    pub fn is_shared(&self, device: DeviceId) -> bool {
        !self.shared.is_empty() && self.shared.get(&device).is_some_and(|s| s.allocations > 0)
    }

    /// How much of a capacity (qualified name) of a shareable device is consumed.
    pub fn capacity_consumed(&self, device: DeviceId, capacity: &str) -> Quantity {
        self.shared
            .get(&device)
            .and_then(|s| s.consumed.get(capacity).copied())
            .unwrap_or(Quantity::ZERO)
    }

    /// The compatibility groups of the devices allocated on a counter set, one list per
    /// distinct list.
    pub fn set_groups(&self, set: &CounterSetKey) -> impl Iterator<Item = &[String]> {
        self.set_groups
            .get(set)
            .into_iter()
            .flat_map(|m| m.keys().map(Vec::as_slice))
    }

    /// How much of a shared counter is consumed.
    pub fn counter_consumed(&self, counter: CounterId) -> Quantity {
        self.counters
            .get(&counter)
            .copied()
            .unwrap_or(Quantity::ZERO)
    }

    fn set_exclusive(&mut self, device: DeviceId, on: bool) {
        let (word, bit) = (device.0 as usize / 64, device.0 % 64);
        if self.exclusive.len() <= word {
            self.exclusive.resize(word + 1, 0);
        }
        if let Some(w) = self.exclusive.get_mut(word) {
            if on {
                *w |= 1 << bit;
            } else {
                *w &= !(1 << bit);
            }
        }
        // No trailing zero words, so equal states compare equal.
        while self.exclusive.last() == Some(&0) {
            self.exclusive.pop();
        }
    }

    fn apply(&mut self, inventory: &Inventory, allocation: &AllocationResult, sign: i64) {
        let results = allocation.devices.as_ref().and_then(|d| d.results.as_ref());
        for result in results.into_iter().flatten() {
            if result.admin_access == Some(true) {
                continue;
            }
            let ids = inventory.find_all(&result.driver, &result.pool, &result.device);
            if ids.is_empty() && sign > 0 {
                self.unknown_devices.push(format!(
                    "{}/{}/{}",
                    result.driver, result.pool, result.device
                ));
            }
            for &id in ids {
                self.apply_device(inventory, id, result, sign);
            }
        }
    }

    /// One device of an allocation result taken (`sign` 1) or given back (-1).
    fn apply_device(
        &mut self,
        inventory: &Inventory,
        id: DeviceId,
        result: &DeviceRequestAllocationResult,
        sign: i64,
    ) {
        let Some(device) = inventory.device(id) else {
            return;
        };
        let consumes_counters;
        // A share (it has a `shareID`) takes part of a device; anything else takes all
        // of it.
        if result.share_id.is_some() {
            let entry = self.shared.entry(id).or_default();
            consumes_counters = if sign > 0 {
                entry.allocations += 1;
                entry.allocations == 1
            } else {
                entry.allocations = entry.allocations.saturating_sub(1);
                entry.allocations == 0
            };
            for (name, q) in result.consumed_capacity.iter().flatten() {
                let (domain, id) = qualify(&result.driver, name);
                let q = Quantity::try_from(q).unwrap_or(Quantity::ZERO);
                let slot = entry
                    .consumed
                    .entry(format!("{domain}/{id}"))
                    .or_insert(Quantity::ZERO);
                *slot = if sign > 0 {
                    slot.saturating_add(q)
                } else {
                    slot.saturating_sub(q)
                };
            }
            if entry.allocations == 0 {
                self.shared.remove(&id);
            }
        } else {
            consumes_counters = true;
            self.set_exclusive(id, sign > 0);
        }
        if consumes_counters {
            for (set, groups) in &device.compatibility {
                let lists = self.set_groups.entry(set.clone()).or_default();
                let n = lists.entry(groups.clone()).or_insert(0);
                *n = if sign > 0 {
                    *n + 1
                } else {
                    n.saturating_sub(1)
                };
                if *n == 0 {
                    lists.remove(groups);
                }
                if lists.is_empty() {
                    self.set_groups.remove(set);
                }
            }
            for (counter, q) in &device.consumes_counters {
                let slot = self.counters.entry(*counter).or_insert(Quantity::ZERO);
                *slot = if sign > 0 {
                    slot.saturating_add(*q)
                } else {
                    slot.saturating_sub(*q)
                };
            }
        }
    }

    /// Records an allocation (an existing claim's, or one the allocator returned).
    pub fn commit(&mut self, inventory: &Inventory, allocation: &AllocationResult) {
        self.apply(inventory, allocation, 1);
    }

    /// Undoes [`AllocationState::commit`] of the same allocation.
    pub fn release(&mut self, inventory: &Inventory, allocation: &AllocationResult) {
        self.apply(inventory, allocation, -1);
    }
}
