//! Fuzz harnesses for Joiner: one function per target, each taking arbitrary bytes.
//!
//! The libFuzzer targets in `fuzz_targets/` call these, and the workspace's corpus replay test
//! (`crates/joiner-simulate/tests/scenarios/fuzz_corpus.rs`) includes this file with `#[path]` and runs
//! every file of `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/` through the same
//! functions, so CI replays what the fuzzers found without fuzzing. Each harness returns normally for every
//! input the code under test handles (errors included) and panics only on a bug: a panic in
//! Joiner, or a broken invariant checked here.

use std::collections::{BTreeMap, BTreeSet};

use joiner_dra::builders::{self, AttributeArg};
use joiner_dra::cel::{CelDevice, CelEnvironment};
use joiner_dra::{AllocationState, Allocator, Features, Inventory, NodeInfo};
use joiner_engine::requirements::Requirement;
use joiner_engine::snapshot::{ClusterSnapshot, Options};
use joiner_model::settings::Settings;
use joiner_model::{Manifests, Quantity, parse_documents};
use joiner_simulate::scenario::Scenario;
use k8s_openapi::api::resource::v1::{
    CapacityRequirements, DeviceConstraint, DeviceRequest, ResourceClaim,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use serde_json::Value;

/// A fuzz harness: returns for every input, panics on a bug.
pub type Harness = fn(&[u8]);

/// The harnesses by name, as the corpus directories are named.
pub const TARGETS: &[(&str, Harness)] = &[
    ("manifests", manifests),
    ("quantity", quantity),
    ("requirement", requirement),
    ("cel", cel),
    ("allocator", allocator),
    ("planner", planner),
    ("simulate", simulate),
];

/// Inputs larger than this are ignored by the planner target: the planner's cost grows with
/// the number of objects, and the fuzzer should spend its time on shapes, not sizes (the
/// hostile-input tests cover sizes).
const PLANNER_MAX_INPUT: usize = 16 * 1024;

/// Workload replica counts above this make the planner target skip the input: expansion
/// creates one pod per replica, and a large count is a size test, not a shape test.
const PLANNER_MAX_REPLICAS: i64 = 64;

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// Parses `text` into manifests as `joiner plan -f` does. `None` when the input is rejected
/// (which is an acceptable outcome for any input).
fn load(text: &str) -> Option<Manifests> {
    let docs = parse_documents("fuzz.yaml", text).ok()?;
    let mut m = Manifests::default();
    for (origin, doc) in docs {
        if m.add_document(origin, doc).is_err() {
            return None;
        }
    }
    m.finish();
    Some(m)
}

/// Manifest loading: any bytes, any YAML, through `parse_documents` and `add_document`.
pub fn manifests(data: &[u8]) {
    let text = text(data);
    if let Ok(docs) = parse_documents("fuzz.yaml", &text) {
        let mut m = Manifests::default();
        for (origin, doc) in docs {
            // An error must name the file; carrying on after one exercises later documents.
            if let Err(e) = m.add_document(origin, doc) {
                let message = e.to_string();
                assert!(
                    message.contains("fuzz.yaml"),
                    "error names no file: {message}"
                );
            }
        }
        m.finish();
    }
    // The same text as settings values: what `--values` reads.
    if let Ok(docs) = parse_documents("values.yaml", &text) {
        for (_, doc) in docs {
            let _ = Settings::from_values(&doc);
        }
    }
}

/// Quantity parsing, and exactness: a parsed quantity prints to text that parses back to the
/// same value.
pub fn quantity(data: &[u8]) {
    let text = text(data);
    let Ok(q) = Quantity::parse(&text) else {
        return;
    };
    let printed = q.to_string();
    let again = Quantity::parse(&printed)
        .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which does not parse: {e}"));
    assert_eq!(
        q.nanos(),
        again.nanos(),
        "{text:?} printed as {printed:?} changes value"
    );
    let _ = (q.milli_ceil(), q.units_ceil(), q.is_zero(), q.is_negative());
}

/// Requirement parsing (`operator`, then one value per line), and the algebra: an
/// intersection matches exactly what both sides match, and a requirement some value matches
/// is satisfiable.
pub fn requirement(data: &[u8]) {
    let text = text(data);
    let (first, second) = text.split_once("\n--\n").unwrap_or((&text, ""));
    let parse = |part: &str| {
        let mut lines = part.lines();
        let op = lines.next().unwrap_or("").to_string();
        let values: Vec<String> = lines.map(str::to_string).collect();
        (Requirement::new(&op, &values), values)
    };
    let (a, values_a) = parse(first);
    let (b, values_b) = parse(second);
    let mut samples: Vec<Option<String>> = vec![None];
    for v in values_a.iter().chain(&values_b) {
        samples.push(Some(v.clone()));
        if let Ok(n) = v.parse::<i64>() {
            for m in [n.saturating_sub(1), n.saturating_add(1)] {
                samples.push(Some(m.to_string()));
            }
        }
    }
    samples.push(Some("0".into()));
    let reqs: Vec<Requirement> = [a, b].into_iter().filter_map(Result::ok).collect();
    for r in &reqs {
        let _ = r.to_string();
        let matched = samples.iter().any(|s| r.matches(s.as_deref()));
        assert!(
            !matched || r.is_satisfiable(),
            "{r} matches a value but says it is unsatisfiable"
        );
        if let Some(v) = r.any_value() {
            assert!(r.matches(Some(v)), "{r}: any_value {v:?} does not match");
        }
        if let Some(values) = r.allowed_values() {
            for v in values {
                assert!(
                    r.matches(Some(v)),
                    "{r}: allowed value {v:?} does not match"
                );
            }
        }
    }
    if let [a, b] = reqs.as_slice() {
        let both = a.intersect(b);
        for s in &samples {
            let s = s.as_deref();
            assert_eq!(
                both.matches(s),
                a.matches(s) && b.matches(s),
                "({a}) ∩ ({b}) = ({both}) disagrees on {s:?}"
            );
        }
    }
}

fn sample_device() -> CelDevice {
    let d = builders::device("gpu-0");
    let d = builders::with_attribute(d, "productName", AttributeArg::Str("NVIDIA H100".into()));
    let d = builders::with_attribute(d, "index", AttributeArg::Int(3));
    let d = builders::with_attribute(d, "mig", AttributeArg::Bool(false));
    let d = builders::with_attribute(
        d,
        "driverVersion",
        AttributeArg::Version("550.54.15".into()),
    );
    let d = builders::with_attribute(d, "numa.example.com/node", AttributeArg::Int(1));
    let d = builders::with_capacity(d, "memory", "80Gi");
    CelDevice::new("gpu.nvidia.com", &d)
}

/// CEL: compile any text in the DRA environment, and evaluate what compiles on a device.
pub fn cel(data: &[u8]) {
    let text = text(data);
    let env = CelEnvironment::new();
    if let Ok(compiled) = env.compile(&text) {
        let _ = env.evaluate(&compiled, &sample_device());
        // The cache answers the same on a second compile.
        assert!(env.compile(&text).is_ok());
    }
}

/// Reads bytes as small choices; past the end every choice is 0.
struct Choices<'a>(&'a [u8]);

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn below(&mut self, n: usize) -> usize {
        self.byte() as usize % n
    }
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

const DRIVER: &str = "gpu.example.com";
const NODE: &str = "node-a";
const SELECTORS: &[&str] = &[
    r#"device.attributes["gpu.example.com"].product == "A""#,
    r#"device.attributes["gpu.example.com"].numa < 2"#,
    r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0"#,
    r#"device.attributes["gpu.example.com"].version.isGreaterThan(semver("1.5.0"))"#,
    r#"device.attributes["gpu.example.com"].missing == 1"#,
    "1 + 1",
    "device.allowMultipleAllocations",
    "not valid cel (",
];
const COUNTS: &[i64] = &[1, 2, 0, 3, -1, 2_147_483_647, i64::MAX, 1];
const MODES: &[&str] = &["ExactCount", "All", "ExactCount", "Bogus"];
const CLASSES: &[&str] = &["gpu", "any", "prod", "missing"];
const MEMORY: &[&str] = &["80Gi", "40Gi", "0", "1", "-1", "99999999999999999999Ei"];
const MATCH: &[&str] = &[
    "gpu.example.com/numa",
    "gpu.example.com/product",
    "gpu.example.com/nope",
    "bad key",
];

fn request(c: &mut Choices, name: &str) -> DeviceRequest {
    let class = c.pick(CLASSES);
    let count = c.pick(COUNTS);
    let selectors: Vec<&str> = (0..c.below(3)).map(|_| c.pick(SELECTORS)).collect();
    if c.below(4) == 0 {
        let subs = (0..c.below(3) + 1)
            .map(|i| {
                builders::sub(
                    &format!("s{i}"),
                    c.pick(CLASSES),
                    c.pick(COUNTS),
                    &[c.pick(SELECTORS)],
                )
            })
            .collect();
        return builders::first_available(name, subs);
    }
    let mut r = builders::exact(name, class, count, &selectors);
    if let Some(e) = r.exactly.as_mut() {
        e.allocation_mode = Some(c.pick(MODES).to_string());
        if c.below(4) == 0 {
            e.capacity = Some(CapacityRequirements {
                requests: Some(BTreeMap::from([(
                    "memory".to_string(),
                    K8sQuantity(c.pick(MEMORY).to_string()),
                )])),
            });
        }
        if c.below(8) == 0 {
            e.admin_access = Some(true);
        }
    }
    r
}

/// The DRA allocator on a small node-local slice and a few claims built from the bytes:
/// no panic, `try_allocate` agrees with `allocate`, every allocation names devices that
/// exist, and no device goes to two requests unless it allows multiple allocations (or the
/// request has admin access).
pub fn allocator(data: &[u8]) {
    let mut c = Choices(data);
    let devices = (0..c.below(9))
        .map(|i| {
            let d = builders::device(&format!("gpu-{i}"));
            let d = builders::with_attribute(
                d,
                "product",
                AttributeArg::Str(c.pick(&["A", "B"]).to_string()),
            );
            let d = builders::with_attribute(d, "numa", AttributeArg::Int(c.below(3) as i64));
            let d = builders::with_attribute(
                d,
                "version",
                AttributeArg::Version(c.pick(&["1.0.0", "2.1.3", "x"]).to_string()),
            );
            let mut d = builders::with_capacity(d, "memory", c.pick(MEMORY));
            if c.below(4) == 0 {
                d.allow_multiple_allocations = Some(true);
            }
            d
        })
        .collect();
    let mut slices = vec![builders::slice(
        "slice-a",
        DRIVER,
        NODE,
        Some(NODE),
        devices,
    )];
    if c.below(3) == 0 {
        let shared = (0..c.below(4))
            .map(|i| builders::device(&format!("net-{i}")))
            .collect();
        slices.push(builders::slice("slice-b", DRIVER, "shared", None, shared));
    }
    let claims: Vec<ResourceClaim> = (0..c.below(3) + 1)
        .map(|i| {
            let requests: Vec<DeviceRequest> = (0..c.below(3) + 1)
                .map(|j| request(&mut c, &format!("r{j}")))
                .collect();
            let names: Vec<String> = requests.iter().map(|r| r.name.clone()).collect();
            let mut claim = builders::claim("default", &format!("claim-{i}"), requests);
            if c.below(3) == 0
                && let Some(d) = claim.spec.get_or_insert_default().devices.as_mut()
            {
                d.constraints = Some(vec![DeviceConstraint {
                    match_attribute: Some(c.pick(MATCH).to_string()),
                    requests: (c.below(2) == 0).then(|| names.clone()),
                    ..Default::default()
                }]);
            }
            claim
        })
        .collect();
    let alloc = Allocator::new(
        Features::all(),
        [
            builders::class("gpu", &[r#"device.driver == "gpu.example.com""#]),
            builders::class("any", &[]),
            builders::class("prod", &[c.pick(SELECTORS)]),
        ],
    )
    .with_search_budget(10_000);
    let inventory = Inventory::from_slices(&slices);
    let state = AllocationState::new();
    let node = NodeInfo::new(NODE);
    let view = inventory.node_view(&node);
    let prepared = alloc.prepare(&claims);
    let full = alloc.allocate(&inventory, &view, &state, &prepared);
    let quick = alloc
        .session(&inventory)
        .try_allocate(&view, &state, &prepared);
    assert_eq!(
        full.is_ok(),
        quick.is_some(),
        "allocate and try_allocate disagree: {full:?}"
    );
    let Ok(allocations) = full else {
        return;
    };
    if std::env::var_os("JOINER_FUZZ_DEBUG").is_some() {
        eprintln!(
            "slices: {}",
            serde_json::to_string(&slices).unwrap_or_default()
        );
        eprintln!(
            "claims: {}",
            serde_json::to_string(&claims).unwrap_or_default()
        );
        for a in &allocations {
            eprintln!(
                "allocation: {}",
                serde_json::to_string(&a.allocation).unwrap_or_default()
            );
        }
    }
    let mut taken = BTreeSet::new();
    for a in &allocations {
        let results = a
            .allocation
            .devices
            .as_ref()
            .and_then(|d| d.results.as_ref())
            .cloned()
            .unwrap_or_default();
        for r in results {
            let id = inventory
                .find(&r.driver, &r.pool, &r.device)
                .unwrap_or_else(|| panic!("allocated device {r:?} is not in the inventory"));
            let shared = inventory
                .device(id)
                .map(|d| d.allow_multiple_allocations)
                .unwrap_or(false);
            // Admin access neither needs a free device nor takes one (as in Kubernetes).
            if r.admin_access == Some(true) {
                continue;
            }
            assert!(
                taken.insert((r.driver.clone(), r.pool.clone(), r.device.clone())) || shared,
                "device {}/{}/{} given twice",
                r.driver,
                r.pool,
                r.device
            );
        }
    }
}

/// Whether the documents contain a workload whose expansion is large.
fn has_large_workload(text: &str) -> bool {
    let Ok(docs) = parse_documents("fuzz.yaml", text) else {
        return false;
    };
    fn large(v: &Value) -> bool {
        match v {
            Value::Object(map) => map.iter().any(|(k, v)| {
                ((k == "replicas" || k == "parallelism" || k == "completions")
                    && v.as_i64().is_none_or(|n| n > PLANNER_MAX_REPLICAS))
                    || large(v)
            }),
            Value::Array(items) => items.iter().any(large),
            _ => false,
        }
    }
    docs.iter().any(|(_, d)| large(d))
}

/// The planner end to end: YAML documents (seeded from `examples/`) through
/// `ClusterSnapshot::build` and `plan`, with DRA on when the input has DRA objects. Checks
/// that every pending pod is bound or unschedulable exactly once, that no planned node is
/// over-committed, and that planning twice gives the same plan.
pub fn planner(data: &[u8]) {
    if data.len() > PLANNER_MAX_INPUT {
        return;
    }
    let text = text(data);
    if has_large_workload(&text) {
        return;
    }
    let Some(m) = load(&text) else {
        return;
    };
    let mut values = serde_json::json!({});
    if text.contains("resource.k8s.io") {
        values = serde_json::json!({"settings": {"enableDRA": true}});
    }
    let Ok((settings, _)) = Settings::from_values(&values) else {
        return;
    };
    let Ok(snapshot) = ClusterSnapshot::build(&m, &settings, &Options::default()) else {
        return;
    };
    let plan = snapshot.plan();
    check_plan(&snapshot, &plan);
    let again = snapshot.plan();
    assert_eq!(
        serde_json::to_string(&plan).ok(),
        serde_json::to_string(&again).ok(),
        "planning the same snapshot twice gives different plans"
    );
}

fn check_plan(snapshot: &ClusterSnapshot, plan: &joiner_engine::plan::Plan) {
    let mut expected: BTreeMap<String, usize> = BTreeMap::new();
    for p in snapshot
        .input()
        .pods
        .iter()
        .filter(|p| p.node_name.is_none())
    {
        *expected.entry(p.key()).or_default() += 1;
    }
    for d in snapshot.decided() {
        *expected.entry(d.pod.clone()).or_default() += 1;
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for b in &plan.bindings {
        *seen.entry(b.pod.clone()).or_default() += 1;
    }
    for u in &plan.unschedulable {
        *seen.entry(u.pod.clone()).or_default() += 1;
    }
    assert_eq!(
        expected, seen,
        "pending pods and the plan's bindings plus unschedulable pods differ"
    );
    for claim in &plan.node_claims {
        for (name, used) in &claim.resources.requested {
            let have = claim.resources.allocatable.get(name);
            assert!(
                have.is_some_and(|h| used <= h),
                "NodeClaim {} over-committed in {name}: {used} requested, {have:?} allocatable",
                claim.name
            );
        }
    }
}

/// The learning-lab day's manifests: every simulate input runs against them.
const LAB_DAY: &[(&str, &str)] = &[
    (
        "deployment.yaml",
        include_str!("../../examples/learning-lab-day/deployment.yaml"),
    ),
    (
        "device-plugin-config.yaml",
        include_str!("../../examples/learning-lab-day/device-plugin-config.yaml"),
    ),
    (
        "ec2nodeclass.yaml",
        include_str!("../../examples/learning-lab-day/ec2nodeclass.yaml"),
    ),
    (
        "nodepool.yaml",
        include_str!("../../examples/learning-lab-day/nodepool.yaml"),
    ),
];

/// The simulate target runs at most this many controller steps: a longer scenario keeps its
/// steps and duration and gets a coarser tick (a day at 10 s is 8,640 steps, too slow to fuzz).
const SIMULATE_MAX_TICKS: u64 = 100;

/// Pods a step may add or scale to, and steps a scenario may have, in the simulate target:
/// larger scenarios are size tests, not shape tests.
const SIMULATE_MAX_PODS: usize = 40;
const SIMULATE_MAX_STEPS: usize = 40;

/// Inputs are a scenario, optionally followed by a line `%%` and more manifests (added to the
/// learning-lab day's).
const SIMULATE_SPLIT: &str = "\n%%\n";

/// Whether a scenario is small enough to fuzz (see the limits above).
fn small_scenario(s: &Scenario) -> bool {
    s.steps.len() <= SIMULATE_MAX_STEPS
        && s.steps.iter().all(|step| {
            step.add_pods
                .as_ref()
                .is_none_or(|a| a.count <= SIMULATE_MAX_PODS)
                && step.scale.as_ref().is_none_or(|sc| {
                    usize::try_from(sc.replicas).is_ok_and(|r| r <= SIMULATE_MAX_PODS)
                })
        })
}

/// `joiner simulate`: bytes as a scenario file (and extra manifests) over the learning-lab
/// day, through the same functions the command calls (the `joiner-simulate` crate), in bounded
/// time. Checks that the
/// timeline never goes back in time, that the summary is consistent (finite, non-negative
/// cost; peaks at least the final figures; at least as many instances launched as ever ran at
/// once), and that the run is deterministic: the same input gives the same timeline and
/// summary.
pub fn simulate(data: &[u8]) {
    if data.len() > PLANNER_MAX_INPUT {
        return;
    }
    let text = text(data);
    let (scenario_text, extra) = text.split_once(SIMULATE_SPLIT).unwrap_or((&text, ""));
    let Ok(scenario) = serde_saphyr::from_str::<Scenario>(scenario_text) else {
        return;
    };
    if !small_scenario(&scenario) || has_large_workload(extra) {
        return;
    }
    let Ok(mut resolved) = scenario.resolve() else {
        return;
    };
    let (duration, tick) = (resolved.duration.as_secs(), resolved.tick.as_secs().max(1));
    if duration / tick > SIMULATE_MAX_TICKS {
        resolved.tick = std::time::Duration::from_secs(duration.div_ceil(SIMULATE_MAX_TICKS));
    }
    let mut m = Manifests::default();
    for (file, body) in LAB_DAY.iter().copied().chain([("extra.yaml", extra)]) {
        let Ok(docs) = parse_documents(file, body) else {
            return;
        };
        for (origin, doc) in docs {
            if m.add_document(origin, doc).is_err() {
                return;
            }
        }
    }
    m.finish();
    let mut values = serde_json::json!({});
    if extra.contains("resource.k8s.io") {
        values = serde_json::json!({"settings": {"enableDRA": true}});
    }
    let Ok((settings, _)) = Settings::from_values(&values) else {
        return;
    };
    let Ok(outcome) = joiner_simulate::simulate(&m, settings.clone(), &resolved, &mut |_, _| {})
    else {
        return;
    };
    let s = &outcome.summary;
    let ts: Vec<u64> = outcome
        .events
        .iter()
        .filter_map(|e| e["t"].as_u64())
        .collect();
    assert!(
        ts.windows(2).all(|w| w[0] <= w[1]),
        "the timeline goes back in time: {ts:?}"
    );
    assert!(
        s.total_cost.is_finite() && s.total_cost >= 0.0,
        "total cost {}",
        s.total_cost
    );
    assert!(s.total_node_hours.is_finite() && s.total_node_hours >= 0.0);
    assert!(
        s.peak_nodes >= s.final_nodes,
        "peak {} < final {} nodes",
        s.peak_nodes,
        s.final_nodes
    );
    assert!(
        s.instances_launched >= s.peak_instances,
        "{} launched < {} at once",
        s.instances_launched,
        s.peak_instances
    );
    assert!(
        (0.0..=1.0 + 1e-9).contains(&s.gpu_allocation_mean),
        "GPU allocation {}",
        s.gpu_allocation_mean
    );
    let again = joiner_simulate::simulate(&m, settings, &resolved, &mut |_, _| {});
    let same = again.as_ref().is_ok_and(|a| {
        serde_json::to_string(&a.events).ok() == serde_json::to_string(&outcome.events).ok()
            && serde_json::to_string(&a.summary).ok() == serde_json::to_string(s).ok()
    });
    assert!(
        same,
        "the same scenario simulated twice gives different results"
    );
}
