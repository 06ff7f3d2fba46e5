//! The structured allocator: kube-scheduler's decision of which devices serve a pod's claims.
//!
//! Use it in two steps. [`Allocator::prepare`] validates a pod's claims once (classes,
//! selectors compiled, counts, feature gates). [`Allocator::allocate`] then decides, for one
//! node's view of the inventory and the current [`AllocationState`], either an
//! `AllocationResult` per unallocated claim or the reason it cannot. Committing the results
//! into the state ([`AllocationState::commit`]) is the caller's choice, so a planner can ask
//! "would it fit" of many nodes and keep only the answer it picks.
//!
//! The search is a depth-first search over the claims' requests in order; each request takes
//! its devices from a deterministic candidate order (pools by driver then name, slices by
//! name, devices in slice order), and a `firstAvailable` request tries its alternatives in
//! order. Every device tried counts against a budget, after which the answer is
//! `SearchBudgetExhausted` rather than a stalled run.
//!
//! Selector results are cached per (selector set, device) for the life of the allocator
//! (keyed by the inventory they belong to), so many pods with the same claim template
//! evaluate CEL once per device, not once per pod and node.

pub mod failure;
pub(crate) mod prepare;
mod search;

use crate::cel::{CelEnvironment, CelError};
use crate::features::Features;
use crate::hash::FastMap;
use crate::inventory::{DeviceId, Inventory, NodeView};
use crate::state::AllocationState;
pub use failure::{AllocationFailure, FailureReason, Rejections};
use k8s_openapi::api::resource::v1::{AllocationResult, DeviceClass};
pub use prepare::{MAX_RESULTS_PER_CLAIM, PreparedClaims};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// How many device placements one `allocate` call may try before giving up.
pub const DEFAULT_SEARCH_BUDGET: u64 = 100_000;

/// The allocation of one claim that was not allocated before.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimAllocation {
    /// `namespace/name`.
    pub claim: String,
    /// Exactly what kube-scheduler would write into `status.allocation` (without a timestamp).
    pub allocation: AllocationResult,
}

/// Per-(selector set, device) results: 0 unknown, 1 match, 2 no match, 3 CEL error.
#[derive(Debug, Default)]
pub(crate) struct MatchCache {
    inventory: u64,
    sets: Vec<Vec<u8>>,
    errors: FastMap<(u32, DeviceId), CelError>,
    /// Candidate orders by (node view, alternative signature).
    candidates: FastMap<(u64, u32), Arc<search::Candidates>>,
    scratch: search::Scratch,
}

/// Cached candidate orders beyond which the cache starts over (bounds memory when a planner
/// makes many short-lived views).
const MAX_CACHED_CANDIDATES: usize = 1 << 20;

impl MatchCache {
    fn reset_for(&mut self, inventory: u64) {
        if self.inventory != inventory {
            self.inventory = inventory;
            self.sets.clear();
            self.errors.clear();
            self.candidates.clear();
        }
    }
}

/// Device classes, the CEL environment, feature gates and caches: build once per plan.
#[derive(Debug)]
pub struct Allocator {
    pub(crate) features: Features,
    pub(crate) cel: CelEnvironment,
    pub(crate) classes: HashMap<String, Arc<DeviceClass>>,
    selector_sets: Mutex<HashMap<Vec<u32>, u32>>,
    signatures: Mutex<HashMap<String, u32>>,
    cache: Mutex<MatchCache>,
    budget: u64,
}

impl Allocator {
    /// An allocator over `classes` with the given feature gates.
    pub fn new(features: Features, classes: impl IntoIterator<Item = DeviceClass>) -> Allocator {
        Allocator::with_environment(features, classes, CelEnvironment::for_features(&features))
    }

    /// As [`Allocator::new`], with a CEL environment of the caller's (another cost limit).
    pub fn with_environment(
        features: Features,
        classes: impl IntoIterator<Item = DeviceClass>,
        cel: CelEnvironment,
    ) -> Allocator {
        let classes = classes
            .into_iter()
            .map(|c| (c.metadata.name.clone().unwrap_or_default(), Arc::new(c)))
            .collect();
        Allocator {
            features,
            cel,
            classes,
            selector_sets: Mutex::new(HashMap::new()),
            signatures: Mutex::new(HashMap::new()),
            cache: Mutex::new(MatchCache::default()),
            budget: DEFAULT_SEARCH_BUDGET,
        }
    }

    /// Sets how many device placements one `allocate` call may try.
    pub fn with_search_budget(mut self, steps: u64) -> Allocator {
        self.budget = steps;
        self
    }

    pub fn features(&self) -> &Features {
        &self.features
    }

    pub fn cel(&self) -> &CelEnvironment {
        &self.cel
    }

    pub(crate) fn intern_selector_set(&self, ids: &[u32]) -> u32 {
        let mut sets = match self.selector_sets.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let next = u32::try_from(sets.len()).unwrap_or(u32::MAX);
        *sets.entry(ids.to_vec()).or_insert(next)
    }

    pub(crate) fn intern_signature(&self, key: String) -> u32 {
        let mut sigs = match self.signatures.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let next = u32::try_from(sigs.len()).unwrap_or(u32::MAX);
        *sigs.entry(key).or_insert(next)
    }

    /// Decides the devices of `claims` on `node` (a view of `inventory`) given what `state`
    /// says is taken. On success, one [`ClaimAllocation`] per claim that was not yet
    /// allocated, in the order of `claims`; already allocated claims are checked to be usable
    /// from the node and produce nothing.
    ///
    /// To try many nodes in a row, open a [`Session`] instead: it takes the allocator's
    /// cache lock once rather than per call.
    pub fn allocate(
        &self,
        inventory: &Inventory,
        node: &NodeView,
        state: &AllocationState,
        claims: &PreparedClaims,
    ) -> Result<Vec<ClaimAllocation>, AllocationFailure> {
        self.session(inventory).allocate(node, state, claims)
    }

    /// Holds the allocator's caches for a run of `allocate` calls over one inventory (other
    /// threads wait for it to be dropped).
    pub fn session<'a>(&'a self, inventory: &'a Inventory) -> Session<'a> {
        let mut cache = match self.cache.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        cache.reset_for(inventory.uid());
        if cache.candidates.len() > MAX_CACHED_CANDIDATES {
            cache.candidates.clear();
        }
        Session {
            allocator: self,
            inventory,
            cache,
        }
    }
}

/// A run of allocation questions against one inventory; see [`Allocator::session`].
pub struct Session<'a> {
    allocator: &'a Allocator,
    inventory: &'a Inventory,
    cache: MutexGuard<'a, MatchCache>,
}

impl Session<'_> {
    /// As [`Allocator::allocate`].
    pub fn allocate(
        &mut self,
        node: &NodeView,
        state: &AllocationState,
        claims: &PreparedClaims,
    ) -> Result<Vec<ClaimAllocation>, AllocationFailure> {
        search::Search::new(
            self.allocator,
            self.inventory,
            node,
            state,
            &mut self.cache,
            claims,
        )
        .run(true)
        .map_err(|e| {
            e.unwrap_or_else(|| AllocationFailure {
                claim: Arc::from(""),
                request: None,
                reason: FailureReason::InvalidClaim {
                    message: "allocation failed".into(),
                },
            })
        })
    }

    /// The same decision without the reason for a "no": what a planner scanning nodes
    /// wants (ask [`Session::allocate`] for the reason once no node fits).
    pub fn try_allocate(
        &mut self,
        node: &NodeView,
        state: &AllocationState,
        claims: &PreparedClaims,
    ) -> Option<Vec<ClaimAllocation>> {
        search::Search::new(
            self.allocator,
            self.inventory,
            node,
            state,
            &mut self.cache,
            claims,
        )
        .run(false)
        .ok()
    }
}

#[cfg(test)]
mod thread_safety {
    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn allocator_and_state_can_be_shared_across_threads() {
        assert_send_sync::<super::Allocator>();
        assert_send_sync::<crate::Inventory>();
        assert_send_sync::<crate::AllocationState>();
        assert_send_sync::<super::PreparedClaims>();
    }
}
