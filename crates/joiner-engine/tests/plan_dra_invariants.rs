//! Invariants of the DRA allocations in every plan, checked on random small clusters through the
//! public scheduling API, by a checker that knows nothing of the allocator: every allocation
//! serves each request of its claim with the requested count (one `firstAvailable` alternative
//! per request) of devices that exist on the allocation's node, match the request's selectors
//! and capacity, and keep the claim's `matchAttribute` / `distinctAttribute` constraints; no
//! device goes to two claims unless it allows multiple allocations, and then the capacity its
//! shares consume stays within the device's; shared counters are not exceeded; every claim is
//! allocated at most once, and a pod with claims is bound exactly where all its claims are.
//! Where the case is small enough (one node, one pod with claims), a brute-force search over
//! the same rules must agree with the plan on whether the pod can be placed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use joiner_dra::Features;
use joiner_dra::builders::{self, AttributeArg};
use joiner_engine::catalog::devices::{
    ConsumableCapacity, DeviceTemplates, TemplateOptions, TemplatePool,
};
use joiner_engine::plan::Plan;
use joiner_engine::requirements::{Labels, Requirements};
use joiner_engine::scheduling::{
    DeviceSource, DraInput, ExistingNode, LaunchOffering, LaunchOption, PodInfo, PoolInput,
    SchedulingInput, schedule,
};
use joiner_model::{Price, Quantity, ResourceList, Source};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{
    CapacityRequirements, Counter, CounterSet, Device, DeviceConstraint, DeviceCounterConsumption,
    DeviceRequest, DeviceRequestAllocationResult, ResourceClaim, ResourceSlice,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use proptest::prelude::*;

mod common;
use common::{Rng, q};

const DRIVER: &str = "gpu.example.com";
const CLASS: &str = "gpu";
const COUNTER_SET: &str = "cs";

/// A CEL selector and the same rule in Rust.
type Selector = (&'static str, fn(&Device) -> bool);

/// The selectors requests draw from.
const SELECTORS: &[Selector] = &[
    (
        r#"device.attributes["gpu.example.com"].product == "A""#,
        |d| attr_str(d, "product") == Some("A"),
    ),
    (r#"device.attributes["gpu.example.com"].numa < 2"#, |d| {
        attr_int(d, "numa").is_some_and(|n| n < 2)
    }),
    (
        r#"device.capacity["gpu.example.com"].mem.compareTo(quantity("60Gi")) >= 0"#,
        |d| capacity(d, "mem").is_some_and(|m| m >= q("60Gi")),
    ),
];

fn attr_str<'a>(d: &'a Device, name: &str) -> Option<&'a str> {
    d.attributes.as_ref()?.get(name)?.string.as_deref()
}

fn attr_int(d: &Device, name: &str) -> Option<i64> {
    d.attributes.as_ref()?.get(name)?.int
}

fn capacity(d: &Device, name: &str) -> Option<Quantity> {
    let c = d.capacity.as_ref()?.get(name)?;
    Quantity::parse(&c.value.0).ok()
}

/// Devices of one node (existing, or an instance type's template) and their counter set.
fn devices(r: &mut Rng, prefix: &str) -> (Vec<Device>, Option<CounterSet>) {
    let counters = r.chance(3);
    let list = (0..1 + r.below(4))
        .map(|i| {
            let d = builders::device(&format!("{prefix}{i}"));
            let d = builders::with_attribute(
                d,
                "product",
                AttributeArg::Str(r.pick(&["A", "B"]).into()),
            );
            let d = builders::with_attribute(d, "numa", AttributeArg::Int(r.below(3) as i64));
            let mut d = builders::with_capacity(d, "mem", r.pick(&["40Gi", "80Gi"]));
            if r.chance(3) {
                d.allow_multiple_allocations = Some(true);
            }
            if counters {
                d.consumes_counters = Some(vec![DeviceCounterConsumption {
                    compatibility_groups: None,
                    counter_set: COUNTER_SET.into(),
                    counters: BTreeMap::from([(
                        "c".to_string(),
                        Counter {
                            value: K8sQuantity(r.below(3).to_string()),
                        },
                    )]),
                }]);
            }
            d
        })
        .collect();
    let set = counters.then(|| CounterSet {
        name: COUNTER_SET.into(),
        counters: BTreeMap::from([(
            "c".to_string(),
            Counter {
                value: K8sQuantity((1 + r.below(4)).to_string()),
            },
        )]),
    });
    (list, set)
}

fn node_resources() -> ResourceList {
    ResourceList::from([
        ("cpu".to_string(), q("64")),
        ("memory".to_string(), q("256Gi")),
        ("pods".to_string(), q("110")),
    ])
}

fn option(r: &mut Rng, i: usize) -> LaunchOption {
    let (devices, counters) = devices(r, "t");
    let templates = DeviceTemplates {
        pools: vec![TemplatePool {
            driver: DRIVER.into(),
            pool: "gpus".into(),
            published: None,
            devices,
            shared_counters: counters.into_iter().collect(),
        }],
        runtime_attributes: vec![],
    };
    LaunchOption {
        instance_type: format!("t{i}.x"),
        labels: Labels::from([("kubernetes.io/arch".into(), "amd64".into())]),
        capacity: node_resources(),
        allocatable: node_resources(),
        offerings: vec![LaunchOffering {
            zone: "zone-a".into(),
            capacity_type: "on-demand".into(),
            price: Price::from_usd(0.1 + r.below(300) as f64 / 100.0).unwrap(),
            price_basis: Default::default(),
            reservation: None,
            zone_id: None,
            partition: None,
        }],
        at_most_one_per_pod: vec![],
        devices: Some(DeviceSource {
            templates: Arc::new(templates),
            options: TemplateOptions {
                nvidia_gpu: true,
                efa: true,
                consumable: ConsumableCapacity::Disabled,
                dynamic_mig: false,
            },
        }),
    }
}

fn pool(types: Vec<LaunchOption>) -> PoolInput {
    PoolInput {
        name: "p".into(),
        weight: 0,
        labels: Labels::new(),
        taints: vec![],
        requirements: Requirements::new(),
        limits: ResourceList::new(),
        options: types,
        consolidation: Default::default(),
        min_values_policy: Default::default(),
    }
}

fn existing(name: &str) -> ExistingNode {
    ExistingNode {
        name: name.into(),
        labels: Labels::from([("kubernetes.io/hostname".into(), name.into())]),
        taints: vec![],
        capacity: node_resources(),
        allocatable: node_resources(),
        node_pool: None,
        price: None,
        do_not_disrupt: false,
        consolidation_candidate: true,
        node_claim: None,
        in_flight: false,
    }
}

fn node_slice(r: &mut Rng, node: &str) -> ResourceSlice {
    let (devices, counters) = devices(r, "d");
    let mut slice = builders::slice(&format!("{node}-slice"), DRIVER, node, Some(node), devices);
    slice.spec.shared_counters = counters.map(|c| vec![c]);
    slice
}

fn request(r: &mut Rng, name: &str) -> DeviceRequest {
    let selectors = |r: &mut Rng| -> Vec<&'static str> {
        (0..r.below(3))
            .map(|_| SELECTORS[r.below(SELECTORS.len() as u64) as usize].0)
            .collect()
    };
    if r.chance(4) {
        let subs = (0..2)
            .map(|i| {
                let sels = selectors(r);
                builders::sub(&format!("s{i}"), CLASS, 1 + r.below(2) as i64, &sels)
            })
            .collect();
        return builders::first_available(name, subs);
    }
    let sels = selectors(r);
    let mut req = builders::exact(name, CLASS, 1 + r.below(2) as i64, &sels);
    if r.chance(4)
        && let Some(e) = req.exactly.as_mut()
    {
        e.capacity = Some(CapacityRequirements {
            requests: Some(BTreeMap::from([(
                "mem".to_string(),
                K8sQuantity(r.pick(&["10Gi", "40Gi"]).into()),
            )])),
        });
    }
    req
}

fn claim(r: &mut Rng, name: &str) -> ResourceClaim {
    let requests: Vec<DeviceRequest> = (0..1 + r.below(2))
        .map(|i| request(r, &format!("r{i}")))
        .collect();
    let names: Vec<String> = requests.iter().map(|q| q.name.clone()).collect();
    let mut c = builders::claim("default", name, requests);
    let attribute = Some(format!("{DRIVER}/numa"));
    let constraint = match r.below(4) {
        0 => Some(DeviceConstraint {
            match_attribute: attribute,
            ..Default::default()
        }),
        1 => Some(DeviceConstraint {
            distinct_attribute: attribute,
            ..Default::default()
        }),
        _ => None,
    };
    if let (Some(d), Some(mut con)) = (c.spec.get_or_insert_default().devices.as_mut(), constraint)
    {
        if names.len() > 1 && r.chance(2) {
            con.requests = Some(vec![names[0].clone()]);
        }
        d.constraints = Some(vec![con]);
    }
    c
}

fn pod(name: &str, claims: &[String]) -> PodInfo {
    let refs: Vec<String> = claims
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let claim = k.trim_start_matches("default/");
            format!("{{name: c{i}, resourceClaimName: {claim}}}")
        })
        .collect();
    let mut yaml = format!(
        "metadata: {{name: {name}, namespace: default}}\nspec:\n  containers: [{{name: c, \
         resources: {{requests: {{cpu: 100m}}}}}}]\n"
    );
    if !refs.is_empty() {
        yaml.push_str(&format!("  resourceClaims: [{}]\n", refs.join(", ")));
    }
    let value: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
    let pod: Pod = serde_json::from_value(value).unwrap();
    PodInfo::compile(&pod, &Source::new("test", 1)).unwrap()
}

/// A random small cluster with DRA: existing nodes with slices, a pool whose types carry
/// device templates, pods with claims (some shared). `small` gives the brute-forceable shape:
/// one existing node, no pool, one pod with claims.
fn cluster(seed: u64, small: bool) -> SchedulingInput {
    let mut r = Rng(seed);
    let node_count = if small { 1 } else { r.below(3) as usize };
    let nodes: Vec<ExistingNode> = (0..node_count)
        .map(|i| existing(&format!("node-{i}")))
        .collect();
    let slices: Vec<ResourceSlice> = nodes.iter().map(|n| node_slice(&mut r, &n.name)).collect();
    let pools = if small || r.chance(4) {
        vec![]
    } else {
        let types = (0..1 + r.below(3) as usize)
            .map(|i| option(&mut r, i))
            .collect();
        vec![pool(types)]
    };
    let mut claims: BTreeMap<String, ResourceClaim> = BTreeMap::new();
    let shared = claim(&mut r, "shared");
    let pod_count = if small { 1 } else { 1 + r.below(5) as usize };
    let mut pods = Vec::new();
    let mut pod_claims = Vec::new();
    for i in 0..pod_count {
        let mut keys = Vec::new();
        for j in 0..r.below(3) {
            if !small && r.chance(4) {
                claims.insert("default/shared".into(), shared.clone());
                if !keys.contains(&"default/shared".to_string()) {
                    keys.push("default/shared".into());
                }
                continue;
            }
            let name = format!("pod-{i}-c{j}");
            claims.insert(format!("default/{name}"), claim(&mut r, &name));
            keys.push(format!("default/{name}"));
        }
        pods.push(pod(&format!("pod-{i}"), &keys));
        pod_claims.push(keys);
    }
    SchedulingInput {
        nodes,
        pods,
        daemon_sets: vec![],
        pools,
        dra: Some(DraInput {
            features: Features::all(),
            classes: vec![builders::class(
                CLASS,
                &[r#"device.driver == "gpu.example.com""#],
            )],
            slices,
            claims,
            in_use: vec![],
            pod_claims,
            extended: Default::default(),
            taint_rules: Vec::new(),
        }),
    }
}

/// The devices of every node the plan may allocate on: existing nodes by their slices, each
/// NodeClaim by its instance type's templates under its own name. Per node: pool name ->
/// (devices by name, counter limits).
type NodeDevices = BTreeMap<String, PoolDevices>;

/// A pool's devices by name, and its counter limits by `<counter set>/<counter>`.
type PoolDevices = (BTreeMap<String, Device>, BTreeMap<String, Quantity>);

fn pool_of(slice: &ResourceSlice) -> (String, PoolDevices) {
    let devices = slice
        .spec
        .devices
        .iter()
        .flatten()
        .map(|d| (d.name.clone(), d.clone()))
        .collect();
    let limits = slice
        .spec
        .shared_counters
        .iter()
        .flatten()
        .flat_map(|s| {
            s.counters
                .iter()
                .map(move |(c, v)| (format!("{}/{c}", s.name), q(&v.value.0)))
        })
        .collect();
    (slice.spec.pool.name.clone(), (devices, limits))
}

fn node_devices(input: &SchedulingInput, plan: &Plan) -> BTreeMap<String, NodeDevices> {
    let mut out: BTreeMap<String, NodeDevices> = BTreeMap::new();
    let dra = input.dra.as_ref().unwrap();
    for s in &dra.slices {
        if let Some(node) = &s.spec.node_name {
            let (pool, devs) = pool_of(s);
            out.entry(node.clone()).or_default().insert(pool, devs);
        }
    }
    for c in &plan.node_claims {
        let Some(option) = input
            .pools
            .iter()
            .find(|p| p.name == c.node_pool)
            .and_then(|p| {
                p.options
                    .iter()
                    .find(|o| o.instance_type == c.instance_type)
            })
        else {
            continue;
        };
        if let Some(src) = &option.devices {
            for s in src.templates.node_slices(&c.name, &src.options) {
                let (pool, devs) = pool_of(&s);
                out.entry(c.name.clone()).or_default().insert(pool, devs);
            }
        }
    }
    out
}

/// A request's rules: (count, selectors, capacity asked) per alternative.
struct Alternative {
    count: usize,
    selectors: Vec<String>,
    mem: Option<Quantity>,
}

fn alternatives(req: &DeviceRequest) -> Vec<(String, Alternative)> {
    if let Some(e) = &req.exactly {
        let mem = e
            .capacity
            .as_ref()
            .and_then(|c| c.requests.as_ref())
            .and_then(|r| r.get("mem"))
            .map(|v| q(&v.0));
        return vec![(
            req.name.clone(),
            Alternative {
                count: e.count.unwrap_or(1) as usize,
                selectors: e
                    .selectors
                    .iter()
                    .flatten()
                    .filter_map(|s| s.cel.as_ref().map(|c| c.expression.clone()))
                    .collect(),
                mem,
            },
        )];
    }
    req.first_available
        .iter()
        .flatten()
        .map(|s| {
            (
                format!("{}/{}", req.name, s.name),
                Alternative {
                    count: s.count.unwrap_or(1) as usize,
                    selectors: s
                        .selectors
                        .iter()
                        .flatten()
                        .filter_map(|s| s.cel.as_ref().map(|c| c.expression.clone()))
                        .collect(),
                    mem: None,
                },
            )
        })
        .collect()
}

fn selector_holds(expr: &str, d: &Device) -> bool {
    SELECTORS
        .iter()
        .find(|(e, _)| *e == expr)
        .is_some_and(|(_, rule)| rule(d))
}

/// Checks one claim's results on `node` against the claim alone (global checks are apart).
fn check_claim(
    claim: &ResourceClaim,
    node: &str,
    results: &[DeviceRequestAllocationResult],
    devices: &BTreeMap<String, NodeDevices>,
) -> Result<(), String> {
    let key = format!(
        "default/{}",
        claim.metadata.name.as_deref().unwrap_or_default()
    );
    let spec = joiner_model::dra::claim_devices(claim).ok_or("no devices")?;
    let requests = spec.requests.as_deref().unwrap_or_default();
    let on_node = devices
        .get(node)
        .ok_or_else(|| format!("{key}: allocated on {node}, which has no devices"))?;
    let mut numa_of: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for req in requests {
        let alts = alternatives(req);
        let mine: Vec<&DeviceRequestAllocationResult> = results
            .iter()
            .filter(|r| r.request == req.name || r.request.starts_with(&format!("{}/", req.name)))
            .collect();
        let used: BTreeSet<&str> = mine.iter().map(|r| r.request.as_str()).collect();
        if used.len() != 1 {
            return Err(format!(
                "{key}: request {} served by {used:?} (want exactly one alternative)",
                req.name
            ));
        }
        let chosen = used.iter().next().copied().unwrap_or_default();
        let (_, alt) = alts
            .iter()
            .find(|(n, _)| n == chosen)
            .ok_or_else(|| format!("{key}: unknown request {chosen}"))?;
        if mine.len() != alt.count {
            return Err(format!(
                "{key}: request {chosen} got {} devices, wants {}",
                mine.len(),
                alt.count
            ));
        }
        for r in &mine {
            if r.driver != DRIVER {
                return Err(format!("{key}: driver {}", r.driver));
            }
            let (devs, _) = on_node
                .get(&r.pool)
                .ok_or_else(|| format!("{key}: pool {} is not on node {node}", r.pool))?;
            let d = devs
                .get(&r.device)
                .ok_or_else(|| format!("{key}: no device {}/{} on {node}", r.pool, r.device))?;
            for s in &alt.selectors {
                if !selector_holds(s, d) {
                    return Err(format!("{key}: {} fails selector {s}", r.device));
                }
            }
            if let Some(want) = alt.mem
                && capacity(d, "mem").is_none_or(|have| have < want)
            {
                return Err(format!("{key}: {} has less mem than {want}", r.device));
            }
            numa_of
                .entry(req.name.clone())
                .or_default()
                .push(attr_int(d, "numa").unwrap_or(-1));
        }
    }
    for con in spec.constraints.iter().flatten() {
        let covered: Vec<i64> = numa_of
            .iter()
            .filter(|(req, _)| con.requests.as_ref().is_none_or(|rs| rs.contains(req)))
            .flat_map(|(_, v)| v.iter().copied())
            .collect();
        if con.match_attribute.is_some() && covered.windows(2).any(|w| w[0] != w[1]) {
            return Err(format!("{key}: matchAttribute numa broken: {covered:?}"));
        }
        if con.distinct_attribute.is_some() {
            let set: BTreeSet<i64> = covered.iter().copied().collect();
            if set.len() != covered.len() {
                return Err(format!("{key}: distinctAttribute numa broken: {covered:?}"));
            }
        }
    }
    Ok(())
}

/// Checks the devices every allocation together takes on each node: no device twice unless
/// shareable, shares within capacity, counters within their limits.
fn check_devices(
    allocations: &[(String, String, Vec<DeviceRequestAllocationResult>)],
    devices: &BTreeMap<String, NodeDevices>,
) -> Result<(), String> {
    // (node, pool, device) -> claims, consumed mem
    let mut taken: BTreeMap<(String, String, String), (Vec<String>, Quantity)> = BTreeMap::new();
    for (claim, node, results) in allocations {
        for r in results {
            let consumed = r
                .consumed_capacity
                .as_ref()
                .and_then(|c| c.get("mem").or_else(|| c.get(&format!("{DRIVER}/mem"))))
                .map(|v| q(&v.0))
                .unwrap_or(Quantity::ZERO);
            let e = taken
                .entry((node.clone(), r.pool.clone(), r.device.clone()))
                .or_insert((Vec::new(), Quantity::ZERO));
            e.0.push(claim.clone());
            e.1 = Quantity::from_nanos(e.1.nanos() + consumed.nanos(), consumed.format());
        }
    }
    let mut counters: BTreeMap<(String, String, String), Quantity> = BTreeMap::new();
    for ((node, pool, device), (claims, consumed)) in &taken {
        let Some((devs, _)) = devices.get(node).and_then(|n| n.get(pool)) else {
            continue;
        };
        let Some(d) = devs.get(device) else { continue };
        let shareable = d.allow_multiple_allocations == Some(true);
        if claims.len() > 1 && !shareable {
            return Err(format!("{node} {pool}/{device} given to {claims:?}"));
        }
        if shareable
            && let Some(total) = capacity(d, "mem")
            && consumed.nanos() > total.nanos()
        {
            return Err(format!(
                "{node} {pool}/{device}: shares consume {consumed} of {total}"
            ));
        }
        // A device draws its counters once, however many shares it serves.
        for c in d.consumes_counters.iter().flatten() {
            for (name, v) in &c.counters {
                let key = (
                    node.clone(),
                    pool.clone(),
                    format!("{}/{name}", c.counter_set),
                );
                let sum = counters.entry(key).or_insert(Quantity::ZERO);
                let add = q(&v.value.0);
                *sum = Quantity::from_nanos(sum.nanos() + add.nanos(), add.format());
            }
        }
    }
    for ((node, pool, counter), used) in &counters {
        let limit = devices
            .get(node)
            .and_then(|n| n.get(pool))
            .and_then(|(_, limits)| limits.get(counter))
            .map_or(0, Quantity::nanos);
        if used.nanos() > limit {
            return Err(format!(
                "{node} {pool}: counter {counter} at {used}, limit {limit}"
            ));
        }
    }
    Ok(())
}

fn results_of(a: &joiner_engine::plan::ClaimAllocation) -> Vec<DeviceRequestAllocationResult> {
    a.allocation
        .devices
        .as_ref()
        .and_then(|d| d.results.clone())
        .unwrap_or_default()
}

fn check(input: &SchedulingInput, plan: &Plan) -> Result<(), String> {
    let dra = input.dra.as_ref().unwrap();
    let devices = node_devices(input, plan);
    let mut allocated: BTreeMap<&str, &str> = BTreeMap::new();
    let mut all = Vec::new();
    for a in &plan.claims {
        if allocated.insert(&a.claim, &a.node).is_some() {
            return Err(format!("{} allocated twice", a.claim));
        }
        let claim = dra
            .claims
            .get(&a.claim)
            .ok_or_else(|| format!("allocation of unknown claim {}", a.claim))?;
        let results = results_of(a);
        check_claim(claim, &a.node, &results, &devices)?;
        all.push((a.claim.clone(), a.node.clone(), results));
    }
    check_devices(&all, &devices)?;
    let bound: BTreeMap<&str, &str> = plan
        .bindings
        .iter()
        .map(|b| (b.pod.as_str(), b.node.as_str()))
        .collect();
    let mut used_by_bound: BTreeSet<&str> = BTreeSet::new();
    for (p, keys) in input.pods.iter().zip(&dra.pod_claims) {
        let Some(node) = bound.get(p.key().as_str()) else {
            continue;
        };
        for k in keys {
            used_by_bound.insert(k);
            match allocated.get(k.as_str()) {
                Some(n) if n == node => {}
                Some(n) => {
                    return Err(format!("{} bound to {node}, its claim {k} on {n}", p.key()));
                }
                None => {
                    return Err(format!(
                        "{} bound to {node}, its claim {k} unallocated",
                        p.key()
                    ));
                }
            }
        }
    }
    for k in allocated.keys() {
        if !used_by_bound.contains(k) {
            return Err(format!("{k} allocated for no bound pod"));
        }
    }
    Ok(())
}

/// Whether some choice of devices on `node` serves every claim of the one pod, by the same
/// rules as `check_claim` and `check_devices`.
fn brute_force(input: &SchedulingInput, node: &str) -> bool {
    let dra = input.dra.as_ref().unwrap();
    let plan = Plan::default();
    let devices = node_devices(input, &plan);
    let Some(pools) = devices.get(node) else {
        return dra.pod_claims[0].is_empty();
    };
    let candidates: Vec<(String, String, Device)> = pools
        .iter()
        .flat_map(|(pool, (devs, _))| {
            devs.values()
                .map(move |d| (pool.clone(), d.name.clone(), d.clone()))
        })
        .collect();
    // One slot per (claim, request); each slot picks an alternative and devices.
    let claims: Vec<&ResourceClaim> = dra.pod_claims[0]
        .iter()
        .filter_map(|k| dra.claims.get(k))
        .collect();
    let slots: Vec<(usize, &DeviceRequest)> = claims
        .iter()
        .enumerate()
        .flat_map(|(ci, c)| {
            joiner_model::dra::claim_devices(c)
                .into_iter()
                .flat_map(|d| d.requests.iter().flatten())
                .map(move |r| (ci, r))
        })
        .collect();
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
    #[allow(clippy::too_many_arguments)]
    fn go(
        at: usize,
        slots: &[(usize, &DeviceRequest)],
        claims: &[&ResourceClaim],
        candidates: &[(String, String, Device)],
        node: &str,
        devices: &BTreeMap<String, NodeDevices>,
        chosen: &mut Vec<Vec<DeviceRequestAllocationResult>>,
    ) -> bool {
        let Some(&(ci, req)) = slots.get(at) else {
            let all: Vec<_> = claims
                .iter()
                .zip(chosen.iter())
                .map(|(c, r)| {
                    (
                        c.metadata.name.clone().unwrap_or_default(),
                        node.to_string(),
                        r.clone(),
                    )
                })
                .collect();
            return claims
                .iter()
                .zip(chosen.iter())
                .all(|(c, r)| check_claim(c, node, r, devices).is_ok())
                && check_devices(&all, devices).is_ok();
        };
        for (name, alt) in alternatives(req) {
            let mut sets = Vec::new();
            combos(candidates.len(), alt.count, 0, &mut Vec::new(), &mut sets);
            for set in sets {
                let before = chosen[ci].len();
                for &i in &set {
                    let (pool, device, d) = &candidates[i];
                    let shareable = d.allow_multiple_allocations == Some(true);
                    // A share consumes what it asks, or the whole capacity.
                    let consumed = shareable.then(|| {
                        let amount = alt
                            .mem
                            .or_else(|| capacity(d, "mem"))
                            .unwrap_or(Quantity::ZERO);
                        BTreeMap::from([("mem".to_string(), K8sQuantity::from(amount))])
                    });
                    chosen[ci].push(DeviceRequestAllocationResult {
                        request: name.clone(),
                        driver: DRIVER.into(),
                        pool: pool.clone(),
                        device: device.clone(),
                        consumed_capacity: consumed,
                        ..Default::default()
                    });
                }
                if go(at + 1, slots, claims, candidates, node, devices, chosen) {
                    return true;
                }
                chosen[ci].truncate(before);
            }
        }
        false
    }
    let mut chosen = vec![Vec::new(); claims.len()];
    go(0, &slots, &claims, &candidates, node, &devices, &mut chosen)
}

fn pretty(plan: &Plan) -> String {
    serde_json::to_string_pretty(plan).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn every_allocation_in_a_plan_is_valid(seed in any::<u64>()) {
        let input = cluster(seed, false);
        let plan = schedule(&input);
        if let Err(broken) = check(&input, &plan) {
            prop_assert!(false, "seed {seed}: {broken}\n{}", pretty(&plan));
        }
    }

    #[test]
    fn the_plan_places_a_pod_exactly_when_brute_force_can(seed in any::<u64>()) {
        let input = cluster(seed, true);
        let plan = schedule(&input);
        if let Err(broken) = check(&input, &plan) {
            prop_assert!(false, "seed {seed}: {broken}\n{}", pretty(&plan));
        }
        let possible = brute_force(&input, "node-0");
        let placed = plan.bindings.len() == 1;
        prop_assert_eq!(
            placed,
            possible,
            "seed {}: plan {} the pod, brute force says {}\n{}",
            seed,
            if placed { "places" } else { "does not place" },
            if possible { "possible" } else { "impossible" },
            pretty(&plan)
        );
    }
}

/// The generator reaches what the properties are about: allocations on existing nodes and on
/// new NodeClaims, shared claims, firstAvailable, constraints, shareable devices, pods left
/// unschedulable; and the checker rejects a plan that breaks the rules.
#[test]
fn the_random_clusters_exercise_the_allocator_and_the_checker_catches_breaks() {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let mut caught = 0;
    for seed in 0..300u64 {
        let input = cluster(seed, false);
        let plan = schedule(&input);
        let existing: BTreeSet<&str> = input.nodes.iter().map(|n| n.name.as_str()).collect();
        let dra = input.dra.as_ref().unwrap();
        for a in &plan.claims {
            let results = results_of(a);
            *seen
                .entry(if existing.contains(a.node.as_str()) {
                    "allocation on an existing node"
                } else {
                    "allocation on a new NodeClaim"
                })
                .or_default() += 1;
            if results.iter().any(|r| r.request.contains('/')) {
                *seen.entry("firstAvailable allocated").or_default() += 1;
            }
            if results.iter().any(|r| r.consumed_capacity.is_some()) {
                *seen.entry("share of a device allocated").or_default() += 1;
            }
            let constrained = joiner_model::dra::claim_devices(&dra.claims[&a.claim])
                .is_some_and(|d| d.constraints.is_some());
            if constrained && results.len() > 1 {
                *seen.entry("constrained claim allocated").or_default() += 1;
            }
        }
        let users = dra
            .pod_claims
            .iter()
            .filter(|k| k.iter().any(|k| k == "default/shared"))
            .count();
        if users > 1 && plan.claims.iter().any(|a| a.claim == "default/shared") {
            *seen.entry("claim shared by pods").or_default() += 1;
        }
        if !plan.unschedulable.is_empty() {
            *seen.entry("plan with an unschedulable pod").or_default() += 1;
        }
        // Break the plan: give the first allocated device to a second claim as well.
        if plan.claims.len() >= 2 {
            let mut broken = plan.clone();
            let first = results_of(&broken.claims[0]);
            let node = broken.claims[0].node.clone();
            let shareable = devices_on(&input, &plan, &node, &first[0]);
            let second = &mut broken.claims[1];
            second.node = node;
            if let Some(r) = second
                .allocation
                .devices
                .as_mut()
                .and_then(|d| d.results.as_mut())
                .and_then(|r| r.first_mut())
                && !shareable
            {
                r.pool = first[0].pool.clone();
                r.device = first[0].device.clone();
                assert!(
                    check(&input, &broken).is_err(),
                    "seed {seed}: break not caught"
                );
                caught += 1;
            }
        }
    }
    // The brute-force comparison sees both answers for pods with claims.
    for seed in 0..300u64 {
        let input = cluster(seed, true);
        if input
            .dra
            .as_ref()
            .is_some_and(|d| d.pod_claims[0].is_empty())
        {
            continue;
        }
        let plan = schedule(&input);
        *seen
            .entry(if plan.bindings.is_empty() {
                "one node: pod with claims not placed"
            } else {
                "one node: pod with claims placed"
            })
            .or_default() += 1;
    }
    eprintln!("{seen:#?}\n{caught} broken plans caught");
    for what in [
        "one node: pod with claims not placed",
        "one node: pod with claims placed",
        "allocation on an existing node",
        "allocation on a new NodeClaim",
        "firstAvailable allocated",
        "share of a device allocated",
        "constrained claim allocated",
        "claim shared by pods",
        "plan with an unschedulable pod",
    ] {
        assert!(
            seen.get(what).copied().unwrap_or(0) >= 5,
            "{what}: {seen:?}"
        );
    }
    assert!(caught >= 20, "{caught}");
}

/// Whether the device a result names allows multiple allocations.
fn devices_on(
    input: &SchedulingInput,
    plan: &Plan,
    node: &str,
    r: &DeviceRequestAllocationResult,
) -> bool {
    node_devices(input, plan)
        .get(node)
        .and_then(|n| n.get(&r.pool))
        .and_then(|(devs, _)| devs.get(&r.device))
        .is_some_and(|d| d.allow_multiple_allocations == Some(true))
}
