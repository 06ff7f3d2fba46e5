//! A NodePool's instance types as the planner packs them: room left after DaemonSets,
//! capacity for limits, labels, and the offerings the NodePool allows.

use std::collections::BTreeSet;

use joiner_model::Price;
use joiner_model::wellknown::{CapacityType, labels};

use super::super::resources::{self, Amounts, ResourceIndex};
use super::super::taints;
use super::super::{LaunchOffering, PoolInput, SchedulingInput};

use super::super::allowed;
use super::reservations::Reservations;
use crate::requirements::{Labels, Requirements, holds_for_type};

/// An instance type of one NodePool, resolved for packing.
#[derive(Clone)]
pub(super) struct Opt {
    pub(super) name: String,
    /// Allocatable less DaemonSet overhead.
    pub(super) room: Amounts,
    pub(super) daemon: Amounts,
    pub(super) capacity: Amounts,
    /// Template labels, instance type labels, NodePool label.
    pub(super) labels: Labels,
    pub(super) at_most_one: Vec<usize>,
    /// Index of this option in the NodePool input (options the NodePool rules out are dropped).
    pub(super) source: usize,
}

/// What can change while planning (usage, NodeClaims made) is copied with the planner; the
/// instance types are shared.
#[derive(Clone)]
pub(super) struct Pool<'a> {
    pub(super) input: &'a PoolInput,
    pub(super) requirements: Requirements,
    pub(super) options: std::rc::Rc<Vec<Opt>>,
    /// Per option, offerings allowed by the NodePool.
    pub(super) offerings: std::rc::Rc<Vec<Vec<&'a LaunchOffering>>>,
    /// Keys the NodePool defines beyond instance-type labels (custom requirement keys).
    pub(super) defined_keys: BTreeSet<String>,
    pub(super) limits: Option<Amounts>,
    pub(super) usage: Amounts,
    pub(super) claims_made: usize,
}

/// How many copies of a pod with requests `one` fit in `room`, at most `limit`.
pub(super) fn copies_that_fit(one: &[i128], room: &[i128], limit: u32) -> u32 {
    one.iter()
        .zip(room)
        .filter(|(r, _)| **r > 0)
        .map(|(r, c)| (c / r).clamp(0, limit as i128) as u32)
        .min()
        .unwrap_or(limit)
}

/// The offering of option `o` that Karpenter would launch, among those `reqs` allow (zone,
/// capacity type, reservation) that are not a full reservation: reserved capacity first, then
/// spot, then on-demand (Karpenter launches spot whenever the requirements allow it and a spot
/// offering exists, whatever the prices), and within a capacity type the cheapest; ties broken
/// by zone and reservation so the result is deterministic.
pub(super) fn cheapest_offering<'p>(
    pool: &'p Pool,
    o: usize,
    reqs: &Requirements,
    reservations: &Reservations,
) -> Option<&'p LaunchOffering> {
    pool.offerings[o]
        .iter()
        .copied()
        .filter(|off| offering_allowed(off, reqs) && reservations.has_room(off))
        .min_by(|a, b| {
            preference(&a.capacity_type)
                .cmp(&preference(&b.capacity_type))
                .then_with(|| a.price.cmp(&b.price))
                .then_with(|| a.zone.cmp(&b.zone))
                .then_with(|| a.capacity_type.cmp(&b.capacity_type))
                .then_with(|| {
                    a.label(labels::CAPACITY_RESERVATION_ID)
                        .cmp(&b.label(labels::CAPACITY_RESERVATION_ID))
                })
        })
}

/// Karpenter's order of capacity types: reserved, spot, on-demand (anything else last).
fn preference(capacity_type: &str) -> u8 {
    match CapacityType::parse(capacity_type) {
        Some(CapacityType::Reserved) => 0,
        Some(CapacityType::Spot) => 1,
        Some(CapacityType::OnDemand) => 2,
        None => 3,
    }
}

pub(super) fn offering_allowed(off: &LaunchOffering, reqs: &Requirements) -> bool {
    off.labels().allowed(reqs)
}

/// The price of option `o` under `reqs`, or `None` when its labels or offerings do not allow it.
pub(super) fn option_price(
    pool: &Pool,
    o: usize,
    reqs: &Requirements,
    reservations: &Reservations,
) -> Option<Price> {
    let opt = &pool.options[o];
    let labels_ok = reqs.iter().all(|(k, r)| {
        if labels::defined_by_offering(k) {
            return true;
        }
        // Keys the NodePool defines take their value from the requirements themselves, unless
        // instance types define them.
        holds_for_type(
            k,
            r,
            opt.labels.get(k).map(String::as_str),
            pool.defined_keys.contains(k),
        )
    });
    if !labels_ok {
        return None;
    }
    cheapest_offering(pool, o, reqs, reservations).map(|off| off.price)
}

pub(super) fn build_pool<'a>(
    input: &'a PoolInput,
    all: &'a SchedulingInput,
    index: &ResourceIndex,
    zones: &mut BTreeSet<String>,
) -> Pool<'a> {
    let requirements = allowed::effective_requirements(input);
    let defined_keys: BTreeSet<String> = requirements
        .iter()
        .map(|(k, _)| k.clone())
        .chain(input.labels.keys().cloned())
        .collect();
    let mut options = Vec::new();
    let mut offerings = Vec::new();
    for (source, o) in input.options.iter().enumerate() {
        let mut labels = o.labels.clone();
        labels.extend(input.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        labels.insert(labels::NODEPOOL.into(), input.name.clone());
        labels.insert(labels::INSTANCE_TYPE.into(), o.instance_type.clone());
        let fits_pool = allowed::type_allowed(&requirements, &labels);
        let allowed: Vec<&LaunchOffering> = o
            .offerings
            .iter()
            .filter(|off| offering_allowed(off, &requirements))
            .collect();
        if !fits_pool || allowed.is_empty() {
            continue;
        }
        for off in &allowed {
            zones.insert(off.zone.clone());
        }
        let mut daemon = vec![0; index.len()];
        for d in &all.daemon_sets {
            if taints::first_untolerated(&input.taints, &d.pod.tolerations).is_none()
                && d.pod.node_requirements.iter().any(|r| r.matches(&labels))
            {
                resources::add(&mut daemon, &index.amounts(&d.pod.requests));
            }
        }
        let mut room = index.allocatable(&o.allocatable);
        resources::sub(&mut room, &daemon);
        options.push(Opt {
            name: o.instance_type.clone(),
            room,
            daemon,
            capacity: index.node_usage(&o.capacity),
            labels,
            at_most_one: o
                .at_most_one_per_pod
                .iter()
                .filter_map(|r| index.position(r))
                .collect(),
            source,
        });
        offerings.push(allowed);
    }
    let limits = (!input.limits.is_empty()).then(|| {
        let mut l = vec![i128::MAX; index.len()];
        for (name, q) in &input.limits {
            if let Some(i) = index.position(name) {
                l[i] = q.nanos();
            }
        }
        l
    });
    Pool {
        input,
        requirements,
        options: std::rc::Rc::new(options),
        offerings: std::rc::Rc::new(offerings),
        defined_keys,
        limits,
        usage: vec![0; index.len()],
        claims_made: 0,
    }
}
