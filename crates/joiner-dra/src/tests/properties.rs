//! Property tests: every allocation returned satisfies everything it should, and small cases
//! that a brute-force search can solve are never reported unschedulable.

use crate::allocator::Allocator;
use crate::builders::{self, AttributeArg};
use crate::features::Features;
use crate::inventory::Inventory;
use crate::node::NodeInfo;
use crate::state::AllocationState;
use k8s_openapi::api::resource::v1::{
    AllocationResult, Counter, CounterSet, DeviceAllocationResult, DeviceConstraint,
    DeviceCounterConsumption, DeviceRequest, DeviceRequestAllocationResult, ResourceClaim,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as Q;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

const DRIVER: &str = "gpu.example.com";
const NODE: &str = "n";

#[derive(Debug, Clone)]
struct Dev {
    product: u8,
    numa: u8,
    consumes: u8,
    in_use: bool,
}

#[derive(Debug, Clone)]
struct Alt {
    product: Option<u8>,
    count: u8,
}

#[derive(Debug, Clone)]
struct Req {
    alts: Vec<Alt>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Cons {
    None,
    Match,
    Distinct,
}

#[derive(Debug, Clone)]
struct ClaimModel {
    requests: Vec<Req>,
    constraint: Cons,
}

#[derive(Debug, Clone)]
struct Case {
    devices: Vec<Dev>,
    counter_limit: Option<u8>,
    claims: Vec<ClaimModel>,
}

fn dev() -> impl Strategy<Value = Dev> {
    (0u8..2, 0u8..3, 0u8..3, prop::bool::weighted(0.2)).prop_map(
        |(product, numa, consumes, in_use)| Dev {
            product,
            numa,
            consumes,
            in_use,
        },
    )
}

fn alt() -> impl Strategy<Value = Alt> {
    (prop::option::of(0u8..2), 1u8..3).prop_map(|(product, count)| Alt { product, count })
}

fn claim_model() -> impl Strategy<Value = ClaimModel> {
    (
        prop::collection::vec(
            prop::collection::vec(alt(), 1..3).prop_map(|alts| Req { alts }),
            1..3,
        ),
        prop_oneof![Just(Cons::None), Just(Cons::Match), Just(Cons::Distinct)],
    )
        .prop_map(|(requests, constraint)| ClaimModel {
            requests,
            constraint,
        })
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(dev(), 1..7),
        prop::option::of(1u8..6),
        prop::collection::vec(claim_model(), 1..3),
    )
        .prop_map(|(devices, counter_limit, claims)| Case {
            devices,
            counter_limit,
            claims,
        })
}

fn product_name(p: u8) -> String {
    if p == 0 { "A".into() } else { "B".into() }
}

fn selector(p: u8) -> String {
    format!(
        "device.attributes[\"{DRIVER}\"].product == \"{}\"",
        product_name(p)
    )
}

struct Built {
    inventory: Inventory,
    state: AllocationState,
    claims: Vec<ResourceClaim>,
}

fn build(case: &Case) -> Built {
    let devices = case
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let mut x = builders::device(&format!("d{i}"));
            x = builders::with_attribute(x, "product", AttributeArg::Str(product_name(d.product)));
            x = builders::with_attribute(x, "numa", AttributeArg::Int(i64::from(d.numa)));
            if case.counter_limit.is_some() {
                x.consumes_counters = Some(vec![DeviceCounterConsumption {
                    compatibility_groups: None,
                    counter_set: "s".into(),
                    counters: [(
                        "c".to_string(),
                        Counter {
                            value: Q(d.consumes.to_string()),
                        },
                    )]
                    .into_iter()
                    .collect(),
                }]);
            }
            x
        })
        .collect();
    let mut slice = builders::slice("s", DRIVER, NODE, Some(NODE), devices);
    if let Some(limit) = case.counter_limit {
        slice.spec.shared_counters = Some(vec![CounterSet {
            name: "s".into(),
            counters: [(
                "c".to_string(),
                Counter {
                    value: Q(limit.to_string()),
                },
            )]
            .into_iter()
            .collect(),
        }]);
    }
    let inventory = Inventory::from_slices([&slice]);
    let mut state = AllocationState::new();
    let used: Vec<_> = case
        .devices
        .iter()
        .enumerate()
        .filter(|(_, d)| d.in_use)
        .map(|(i, _)| DeviceRequestAllocationResult {
            request: "x".into(),
            driver: DRIVER.into(),
            pool: NODE.into(),
            device: format!("d{i}"),
            ..Default::default()
        })
        .collect();
    state.commit(
        &inventory,
        &AllocationResult {
            devices: Some(DeviceAllocationResult {
                results: Some(used),
                config: None,
            }),
            ..Default::default()
        },
    );
    let claims = case
        .claims
        .iter()
        .enumerate()
        .map(|(ci, c)| {
            let requests: Vec<DeviceRequest> = c
                .requests
                .iter()
                .enumerate()
                .map(|(ri, r)| {
                    let sels: Vec<String> = r
                        .alts
                        .iter()
                        .map(|a| a.product.map(selector).unwrap_or_default())
                        .collect();
                    let sel = |i: usize| -> Vec<&str> {
                        sels.get(i)
                            .filter(|s| !s.is_empty())
                            .map(|s| vec![s.as_str()])
                            .unwrap_or_default()
                    };
                    if r.alts.len() == 1 {
                        builders::exact(
                            &format!("r{ri}"),
                            "gpu",
                            i64::from(r.alts[0].count),
                            &sel(0),
                        )
                    } else {
                        builders::first_available(
                            &format!("r{ri}"),
                            r.alts
                                .iter()
                                .enumerate()
                                .map(|(ai, a)| {
                                    builders::sub(
                                        &format!("s{ai}"),
                                        "gpu",
                                        i64::from(a.count),
                                        &sel(ai),
                                    )
                                })
                                .collect(),
                        )
                    }
                })
                .collect();
            let mut claim = builders::claim("ns", &format!("c{ci}"), requests);
            let constraint = match c.constraint {
                Cons::None => None,
                Cons::Match => Some(DeviceConstraint {
                    match_attribute: Some(format!("{DRIVER}/numa")),
                    ..Default::default()
                }),
                Cons::Distinct => Some(DeviceConstraint {
                    distinct_attribute: Some(format!("{DRIVER}/numa")),
                    ..Default::default()
                }),
            };
            if let (Some(d), Some(con)) = (
                claim.spec.get_or_insert_default().devices.as_mut(),
                constraint,
            ) {
                d.constraints = Some(vec![con]);
            }
            claim
        })
        .collect();
    Built {
        inventory,
        state,
        claims,
    }
}

/// Checks a solution given as, per claim, per request, (alternative, devices).
fn valid(case: &Case, solution: &[Vec<(usize, Vec<usize>)>]) -> Result<(), String> {
    let mut taken: BTreeSet<usize> = BTreeSet::new();
    let mut counter = 0u32;
    for (i, d) in case.devices.iter().enumerate() {
        if d.in_use {
            taken.insert(i);
            counter += u32::from(d.consumes);
        }
    }
    for (ci, claim) in case.claims.iter().enumerate() {
        let picks = solution.get(ci).ok_or("missing claim")?;
        if picks.len() != claim.requests.len() {
            return Err(format!(
                "claim {ci}: {} requests served of {}",
                picks.len(),
                claim.requests.len()
            ));
        }
        let mut numas = Vec::new();
        for (ri, (ai, devs)) in picks.iter().enumerate() {
            let alt = claim.requests[ri].alts.get(*ai).ok_or("bad alternative")?;
            if devs.len() != usize::from(alt.count) {
                return Err(format!(
                    "claim {ci} request {ri}: {} devices, {} wanted",
                    devs.len(),
                    alt.count
                ));
            }
            for &d in devs {
                let dev = case.devices.get(d).ok_or("bad device")?;
                if alt.product.is_some_and(|p| p != dev.product) {
                    return Err(format!("d{d} does not match the selector"));
                }
                if !taken.insert(d) {
                    return Err(format!("d{d} used twice or in use"));
                }
                counter += u32::from(dev.consumes);
                numas.push(dev.numa);
            }
        }
        match claim.constraint {
            Cons::None => {}
            Cons::Match => {
                if numas.windows(2).any(|w| w[0] != w[1]) {
                    return Err(format!("claim {ci}: matchAttribute broken: {numas:?}"));
                }
            }
            Cons::Distinct => {
                let set: BTreeSet<_> = numas.iter().collect();
                if set.len() != numas.len() {
                    return Err(format!("claim {ci}: distinctAttribute broken: {numas:?}"));
                }
            }
        }
    }
    if let Some(limit) = case.counter_limit
        && counter > u32::from(limit)
    {
        return Err(format!("counter {counter} over {limit}"));
    }
    Ok(())
}

/// Every way to serve every request, stopping at the first valid one.
fn brute_force(case: &Case) -> bool {
    let slots: Vec<(usize, usize)> = case
        .claims
        .iter()
        .enumerate()
        .flat_map(|(ci, c)| (0..c.requests.len()).map(move |ri| (ci, ri)))
        .collect();
    let mut solution: Vec<Vec<(usize, Vec<usize>)>> =
        case.claims.iter().map(|_| Vec::new()).collect();
    fn combos(n: usize, k: usize, start: usize, cur: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if cur.len() == k {
            out.push(cur.clone());
            return;
        }
        for i in start..n {
            cur.push(i);
            combos(n, k, i + 1, cur, out);
            cur.pop();
        }
    }
    fn go(
        case: &Case,
        slots: &[(usize, usize)],
        at: usize,
        solution: &mut Vec<Vec<(usize, Vec<usize>)>>,
    ) -> bool {
        let Some(&(ci, ri)) = slots.get(at) else {
            return valid(case, solution).is_ok();
        };
        for (ai, alt) in case.claims[ci].requests[ri].alts.iter().enumerate() {
            let mut all = Vec::new();
            combos(
                case.devices.len(),
                usize::from(alt.count),
                0,
                &mut Vec::new(),
                &mut all,
            );
            for devs in all {
                solution[ci].push((ai, devs));
                if go(case, slots, at + 1, solution) {
                    return true;
                }
                solution[ci].pop();
            }
        }
        false
    }
    go(case, &slots, 0, &mut solution)
}

/// The allocator's answer in the model's terms.
/// Per claim, per request: the alternative chosen and the devices.
type Solution = Vec<Vec<(usize, Vec<usize>)>>;

fn allocate(case: &Case) -> Option<Solution> {
    let built = build(case);
    let alloc = Allocator::new(
        Features::all(),
        [builders::class(
            "gpu",
            &["device.driver == \"gpu.example.com\""],
        )],
    );
    let prepared = alloc.prepare(&built.claims);
    let view = built.inventory.node_view(&NodeInfo::new(NODE));
    let full = alloc.allocate(&built.inventory, &view, &built.state, &prepared);
    let quick = alloc
        .session(&built.inventory)
        .try_allocate(&view, &built.state, &prepared);
    // The quick answer is the same decision, with the same devices.
    assert_eq!(full.as_ref().ok(), quick.as_ref());
    let out = full.ok()?;
    let mut solution = Vec::new();
    for (ci, claim) in case.claims.iter().enumerate() {
        let a = out.get(ci)?;
        let results = a.allocation.devices.as_ref()?.results.as_ref()?;
        let mut per_request: BTreeMap<usize, (usize, Vec<usize>)> = BTreeMap::new();
        for r in results {
            let (req, alt) = match r.request.split_once('/') {
                Some((req, sub)) => (req, sub.trim_start_matches('s').parse::<usize>().ok()?),
                None => (r.request.as_str(), 0),
            };
            let ri: usize = req.trim_start_matches('r').parse().ok()?;
            let d: usize = r.device.trim_start_matches('d').parse().ok()?;
            let entry = per_request.entry(ri).or_insert((alt, Vec::new()));
            if entry.0 != alt {
                return Some(vec![vec![(usize::MAX, vec![])]]);
            }
            entry.1.push(d);
        }
        if per_request.len() != claim.requests.len() {
            return Some(vec![]);
        }
        solution.push(per_request.into_values().collect());
    }
    Some(solution)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn allocations_are_valid_and_complete(case in case()) {
        let got = allocate(&case);
        let possible = brute_force(&case);
        match got {
            Some(solution) => {
                prop_assert!(valid(&case, &solution).is_ok(), "{:?}: {:?}", solution, valid(&case, &solution));
                prop_assert!(possible, "allocator found what brute force did not");
            }
            None => prop_assert!(!possible, "brute force found a solution the allocator missed"),
        }
    }
}

/// Shareable devices with consumable capacity: a small independent model of the policy
/// arithmetic, and a brute-force assignment of claims to devices.
mod consumable {
    use super::*;
    use k8s_openapi::api::resource::v1::{
        CapacityRequestPolicy, CapacityRequestPolicyRange, CapacityRequirements,
    };

    #[derive(Debug, Clone, Copy)]
    enum Policy {
        None,
        /// validRange with min 1 and this step.
        Step(u8),
        /// validValues 2, 4 and 8.
        Values,
    }

    #[derive(Debug, Clone)]
    struct Shared {
        capacity: u8,
        policy: Policy,
    }

    fn consumed(policy: Policy, capacity: u8, requested: Option<u8>) -> Option<u8> {
        let r = requested.unwrap_or(capacity);
        let amount = match policy {
            Policy::None => r,
            Policy::Step(step) => {
                let r = r.max(1);
                1 + (r - 1).div_ceil(step) * step
            }
            Policy::Values => *[2u8, 4, 8].iter().find(|v| **v >= r)?,
        };
        (amount <= capacity).then_some(amount)
    }

    fn policy() -> impl Strategy<Value = Policy> {
        prop_oneof![
            Just(Policy::None),
            (1u8..4).prop_map(Policy::Step),
            Just(Policy::Values)
        ]
    }

    fn brute(devices: &[Shared], requests: &[Option<u8>], used: &mut Vec<u8>, at: usize) -> bool {
        let Some(req) = requests.get(at) else {
            return true;
        };
        for (i, d) in devices.iter().enumerate() {
            if let Some(c) = consumed(d.policy, d.capacity, *req)
                && used[i] + c <= d.capacity
            {
                used[i] += c;
                if brute(devices, requests, used, at + 1) {
                    return true;
                }
                used[i] -= c;
            }
        }
        false
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn shares_respect_capacity_and_are_found(
            devices in prop::collection::vec(
                (1u8..9, policy()).prop_map(|(capacity, policy)| Shared { capacity, policy }),
                1..4,
            ),
            requests in prop::collection::vec(prop::option::of(1u8..7), 1..4),
        ) {
            let list: Vec<_> = devices
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let mut x = builders::with_capacity(builders::device(&format!("d{i}")), "mem", &d.capacity.to_string());
                    x.allow_multiple_allocations = Some(true);
                    let policy = match d.policy {
                        Policy::None => None,
                        Policy::Step(step) => Some(CapacityRequestPolicy {
                            valid_range: Some(CapacityRequestPolicyRange {
                                min: Q("1".into()),
                                max: None,
                                step: Some(Q(step.to_string())),
                            }),
                            ..Default::default()
                        }),
                        Policy::Values => Some(CapacityRequestPolicy {
                            valid_values: Some(vec![Q("2".into()), Q("4".into()), Q("8".into())]),
                            ..Default::default()
                        }),
                    };
                    if let Some(cap) = x.capacity.as_mut().and_then(|c| c.get_mut("mem")) {
                        cap.request_policy = policy;
                    }
                    x
                })
                .collect();
            let slice = builders::slice("s", DRIVER, NODE, Some(NODE), list);
            let inventory = Inventory::from_slices([&slice]);
            let claims: Vec<ResourceClaim> = requests
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let mut req = builders::exact("r", "gpu", 1, &[]);
                    if let (Some(e), Some(r)) = (req.exactly.as_mut(), r) {
                        e.capacity = Some(CapacityRequirements {
                            requests: Some([("mem".to_string(), Q(r.to_string()))].into_iter().collect()),
                        });
                    }
                    builders::claim("ns", &format!("c{i}"), vec![req])
                })
                .collect();
            let alloc = Allocator::new(Features::all(), [builders::class("gpu", &[])]);
            let prepared = alloc.prepare(&claims);
            let view = inventory.node_view(&NodeInfo::new(NODE));
            let got = alloc.allocate(&inventory, &view, &AllocationState::new(), &prepared);
            let possible = brute(&devices, &requests, &mut vec![0; devices.len()], 0);
            match got {
                Ok(out) => {
                    prop_assert!(possible, "allocated what brute force could not");
                    let mut used = vec![0u8; devices.len()];
                    let mut shares = BTreeSet::new();
                    for (ci, a) in out.iter().enumerate() {
                        let results = a.allocation.devices.as_ref().and_then(|d| d.results.as_ref());
                        let r = results.and_then(|r| r.first());
                        prop_assert!(r.is_some());
                        let Some(r) = r else { continue };
                        let d: usize = r.device.trim_start_matches('d').parse().unwrap();
                        let c: u8 = r.consumed_capacity.as_ref().and_then(|c| c.get("mem")).unwrap().0.parse().unwrap();
                        prop_assert_eq!(Some(c), consumed(devices[d].policy, devices[d].capacity, requests[ci]));
                        prop_assert!(shares.insert(r.share_id.clone().unwrap()));
                        used[d] += c;
                    }
                    for (i, d) in devices.iter().enumerate() {
                        prop_assert!(used[i] <= d.capacity, "device {} over capacity", i);
                    }
                }
                Err(e) => prop_assert!(!possible, "brute force found an assignment; allocator said {}", e),
            }
        }
    }
}
