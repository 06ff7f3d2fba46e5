//! The upstream allocator's own test table, case by case, through Joiner's allocator.
//!
//! Kubernetes keeps one table of allocator cases (`k8s.io/dynamic-resource-allocation`,
//! `structured/internal/allocatortesting`) that every allocator variant must pass. Its cases
//! are restated here as data, in `upstream/*.yaml`, one list of cases per file, and this
//! runner feeds each to [`Allocator`] as kube-scheduler would: the node, the device classes,
//! the ResourceSlices, the devices other claims already hold, and the claims to allocate.
//!
//! # Case format
//!
//! Objects are written in the `resource.k8s.io/v1` API's own field names, with a name
//! beside their spec rather than in `metadata`:
//!
//! ```yaml
//! - name: simple                   # upstream's case name
//!   features: [PrioritizedList]    # upstream's gate names; every other gate is off
//!   node: {name: node-1, labels: {region: region-1}}  # default: node-1, region-1, earth
//!   classes:
//!     - {name: class-a, driver: driver-a}   # `driver` adds `device.driver == "driver-a"`
//!   slices:
//!     - name: slice-1
//!       driver: driver-a
//!       pool: pool-1               # or {name, generation, resourceSliceCount}; default 1, 1
//!       nodeName: node-1           # the rest is a ResourceSliceSpec
//!       devices: [{name: device-1}]
//!   allocated:                     # devices in use (DeviceRequestAllocationResult fields)
//!     - {driver: driver-a, pool: pool-1, device: device-2}
//!   claims:                        # name, then the claim's `spec.devices`
//!     - name: claim-0
//!       requests: [{name: req-0, exactly: {deviceClassName: class-a}}]
//!   expect:
//!     results:                     # one AllocationResult per claim, in any claim order
//!       - node: node-1             # the usual selector on metadata.name; or `nodeSelector:`
//!         devices: [{request: req-0, driver: driver-a, pool: pool-1, device: device-1}]
//!     # or `results: []`: no allocation on this node, and no error
//!     # or `error: "words of upstream's error"`: the claim cannot be allocated anywhere
//! ```
//!
//! A `shareID` in a result is compared as "present", since it is random upstream too.
//!
//! # Errors and "does not fit"
//!
//! Upstream's `Allocate` answers either results, nothing (this node does not fit), or an
//! error (the claim is broken, or its pool is). Joiner always answers a failure with a
//! reason; [`upstream_reports_an_error`] sorts its reasons into those two answers.

use crate::allocator::{AllocationFailure, Allocator, ClaimAllocation, FailureReason};
use crate::features::Features;
use crate::inventory::Inventory;
use crate::node::NodeInfo;
use crate::state::AllocationState;
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceClaim, DeviceClass, DeviceClassSpec, DeviceRequestAllocationResult,
    ResourceClaim, ResourceClaimSpec, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};

/// Where the case files are.
fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/tests/upstream")
}

/// One case, read.
struct Case {
    file: String,
    name: String,
    body: Map<String, Value>,
}

fn read_cases() -> Vec<Case> {
    let only = std::env::var("UPSTREAM_CASES").ok();
    let mut files: Vec<PathBuf> = std::fs::read_dir(cases_dir())
        .expect("the upstream case directory")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut cases = Vec::new();
    for path in files {
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if only.as_deref().is_some_and(|o| !file.contains(o)) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a readable case file");
        let list: Vec<Value> = serde_saphyr::from_str(&text)
            .unwrap_or_else(|e| panic!("{file}: not a YAML list of cases: {e}"));
        for (i, case) in list.into_iter().enumerate() {
            let Value::Object(body) = case else {
                panic!("{file}: case {i} is not a mapping");
            };
            let name = body
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_else(|| panic!("{file}: case {i} has no name"))
                .to_string();
            cases.push(Case {
                file: file.clone(),
                name,
                body,
            });
        }
    }
    cases
}

fn typed<T: DeserializeOwned>(what: &str, value: Value) -> Result<T, String> {
    serde_json::from_value(value.clone()).map_err(|e| format!("{what}: {e} in {value}"))
}

fn take_name(what: &str, v: &mut Map<String, Value>) -> Result<String, String> {
    match v.remove("name") {
        Some(Value::String(s)) => Ok(s),
        _ => Err(format!("{what} without a name")),
    }
}

fn object(what: &str, v: &Value) -> Result<Map<String, Value>, String> {
    v.as_object()
        .cloned()
        .ok_or_else(|| format!("{what} is not a mapping: {v}"))
}

fn list<'a>(case: &'a Map<String, Value>, key: &str) -> &'a [Value] {
    case.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// Upstream's gate names, turned on over a set with every gate off.
fn features(case: &Map<String, Value>) -> Result<Features, String> {
    let mut f = Features {
        prioritized_list: false,
        admin_access: false,
        device_taints: false,
        partitionable_devices: false,
        consumable_capacity: false,
        device_binding_conditions: false,
        resource_claim_device_status: false,
        extended_resource: false,
        list_type_attributes: false,
    };
    for gate in list(case, "features") {
        match gate.as_str().unwrap_or_default() {
            "AdminAccess" => f.admin_access = true,
            "PrioritizedList" => f.prioritized_list = true,
            "DeviceTaints" => f.device_taints = true,
            "PartitionableDevices" => f.partitionable_devices = true,
            "ConsumableCapacity" => f.consumable_capacity = true,
            "DeviceBinding" | "DeviceBindingAndStatus" => {
                f.device_binding_conditions = true;
                f.resource_claim_device_status = true;
            }
            "DeviceStatus" => f.resource_claim_device_status = true,
            "ExtendedResource" => f.extended_resource = true,
            "ListTypeAttributes" => f.list_type_attributes = true,
            other => return Err(format!("unknown feature {other:?}")),
        }
    }
    Ok(f)
}

fn node(case: &Map<String, Value>) -> Result<NodeInfo, String> {
    let Some(v) = case.get("node") else {
        return Ok(NodeInfo::new("node-1")
            .with_label("region", "region-1")
            .with_label("planet", "earth"));
    };
    let mut v = object("node", v)?;
    let mut node = NodeInfo::new(take_name("node", &mut v)?);
    if let Some(Value::Object(labels)) = v.remove("labels") {
        for (k, val) in labels {
            node = node.with_label(k, val.as_str().unwrap_or_default());
        }
    }
    Ok(node)
}

fn class(v: &Value) -> Result<DeviceClass, String> {
    let mut v = object("class", v)?;
    let name = take_name("class", &mut v)?;
    if let Some(Value::String(driver)) = v.remove("driver") {
        let mut selectors = match v.remove("selectors") {
            Some(Value::Array(s)) => s,
            _ => Vec::new(),
        };
        let own = json!({"cel": {"expression": format!("device.driver == \"{driver}\"")}});
        selectors.insert(0, own);
        v.insert("selectors".into(), Value::Array(selectors));
    }
    Ok(DeviceClass {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(typed::<DeviceClassSpec>(
            &format!("class {name}"),
            Value::Object(v),
        )?),
    })
}

fn slice(v: &Value) -> Result<ResourceSlice, String> {
    let mut v = object("slice", v)?;
    let name = take_name("slice", &mut v)?;
    if let Some(Value::String(pool)) = v.get("pool").cloned() {
        v.insert(
            "pool".into(),
            json!({"name": pool, "generation": 1, "resourceSliceCount": 1}),
        );
    }
    Ok(ResourceSlice {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        spec: typed::<ResourceSliceSpec>(&format!("slice {name}"), Value::Object(v))?,
    })
}

/// The `i`th claim to allocate; upstream may give two claims one name, so the uid is by
/// place.
fn claim(i: usize, v: &Value) -> Result<ResourceClaim, String> {
    let mut v = object("claim", v)?;
    let name = take_name("claim", &mut v)?;
    let status = v.remove("status");
    let devices = typed::<DeviceClaim>(&format!("claim {name}"), Value::Object(v))?;
    Ok(ResourceClaim {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{i}")),
            ..ObjectMeta::default()
        },
        spec: Some(ResourceClaimSpec {
            devices: Some(devices),
        }),
        status: status
            .map(|s| typed(&format!("claim {name} status"), s))
            .transpose()?,
    })
}

/// The devices other claims hold, as one allocation committed to the state.
fn allocated(case: &Map<String, Value>, inventory: &Inventory) -> Result<AllocationState, String> {
    let mut results = Vec::new();
    for v in list(case, "allocated") {
        let mut v = object("allocated device", v)?;
        v.entry("request").or_insert_with(|| json!("other"));
        results.push(typed::<DeviceRequestAllocationResult>(
            "allocated device",
            Value::Object(v),
        )?);
    }
    let held: AllocationResult = typed("allocated", json!({"devices": {"results": results}}))?;
    let mut state = AllocationState::new();
    state.commit(inventory, &held);
    Ok(state)
}

/// An expected result: `node` stands for upstream's selector on the node's name.
fn expected_result(v: &Value) -> Result<Value, String> {
    let mut v = object("expected result", v)?;
    let mut out = Map::new();
    if let Some(Value::String(node)) = v.remove("node") {
        out.insert(
            "nodeSelector".into(),
            json!({"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}
            ]}]}),
        );
    } else if let Some(sel) = v.remove("nodeSelector") {
        out.insert("nodeSelector".into(), sel);
    }
    let mut devices = Map::new();
    if let Some(results) = v.remove("devices") {
        devices.insert("results".into(), results);
    }
    if let Some(config) = v.remove("config") {
        devices.insert("config".into(), config);
    }
    if !v.is_empty() {
        return Err(format!("unknown fields in an expected result: {v:?}"));
    }
    out.insert("devices".into(), Value::Object(devices));
    let typed: AllocationResult = typed("expected result", Value::Object(out))?;
    Ok(normalized(typed))
}

/// An allocation as compared: JSON, with any `shareID` replaced by a marker and no
/// timestamp.
fn normalized(mut a: AllocationResult) -> Value {
    a.allocation_timestamp = None;
    if let Some(results) = a.devices.as_mut().and_then(|d| d.results.as_mut()) {
        for r in results {
            if r.share_id.is_some() {
                r.share_id = Some("share".into());
            }
        }
    }
    if a.devices.as_ref().is_some_and(|d| {
        d.results.as_ref().is_none_or(Vec::is_empty) && d.config.as_ref().is_none_or(Vec::is_empty)
    }) {
        a.devices = None;
    }
    let mut v = serde_json::to_value(&a).unwrap_or(Value::Null);
    // Upstream compares a claim's results, a selector's terms, requirements and values as
    // sets.
    sort_at(&mut v, &["devices", "results"]);
    if let Some(Value::Array(terms)) = v.pointer_mut("/nodeSelector/nodeSelectorTerms") {
        for term in terms.iter_mut() {
            for key in ["matchFields", "matchExpressions"] {
                if let Some(Value::Array(reqs)) = term.get_mut(key) {
                    for req in reqs.iter_mut() {
                        sort_at(req, &["values"]);
                    }
                    sort_values(reqs);
                }
            }
        }
        sort_values(terms);
    }
    v
}

fn sort_at(v: &mut Value, path: &[&str]) {
    let mut at = v;
    for key in path {
        match at.get_mut(*key) {
            Some(next) => at = next,
            None => return,
        }
    }
    if let Value::Array(items) = at {
        sort_values(items);
    }
}

fn sort_values(items: &mut [Value]) {
    items.sort_by_cached_key(Value::to_string);
}

/// Whether upstream answers this failure with an error rather than "does not fit here": a
/// broken claim, class or pool, a CEL error, a claim past the limits.
fn upstream_reports_an_error(reason: &FailureReason) -> bool {
    match reason {
        FailureReason::NoMatchingDevice { .. }
        | FailureReason::NotEnoughDevices { .. }
        | FailureReason::Constraint { .. }
        | FailureReason::AllocatedElsewhere => false,
        FailureReason::UnsupportedAttribute { .. }
        | FailureReason::AllDevicesBreakConstraint { .. } => true,
        FailureReason::PoolIncomplete { .. }
        | FailureReason::PoolInvalid { .. }
        | FailureReason::Cel(_)
        | FailureReason::TooManyResults { .. }
        | FailureReason::UnknownDeviceClass { .. }
        | FailureReason::FeatureDisabled { .. }
        | FailureReason::InvalidClaim { .. }
        | FailureReason::SearchBudgetExhausted { .. } => true,
    }
}

/// Runs one case; `Err` says how Joiner's answer differs from upstream's.
fn run(case: &Case) -> Result<(), String> {
    let c = &case.body;
    let features = features(c)?;
    let classes = list(c, "classes")
        .iter()
        .map(class)
        .collect::<Result<Vec<_>, _>>()?;
    let slices = list(c, "slices")
        .iter()
        .map(slice)
        .collect::<Result<Vec<_>, _>>()?;
    let claims = list(c, "claims")
        .iter()
        .enumerate()
        .map(|(i, v)| claim(i, v))
        .collect::<Result<Vec<_>, _>>()?;
    let node = node(c)?;
    let inventory = Inventory::from_slices(&slices);
    let state = allocated(c, &inventory)?;
    let allocator = Allocator::new(features, classes);
    let prepared = allocator.prepare(&claims);
    let view = inventory.node_view(&node);
    let outcome = allocator.allocate(&inventory, &view, &state, &prepared);
    let expect = object("expect", c.get("expect").unwrap_or(&json!({})))?;
    if let Some(words) = expect.get("error") {
        return match outcome {
            Err(e) if upstream_reports_an_error(&e.reason) => Ok(()),
            Err(e) => Err(format!(
                "upstream reports an error ({words}); Joiner says only that the node does not fit: {e}"
            )),
            Ok(got) => Err(format!(
                "upstream reports an error ({words}); Joiner allocates {}",
                shown(&got)
            )),
        };
    }
    let want = list(&expect, "results")
        .iter()
        .map(expected_result)
        .collect::<Result<Vec<_>, _>>()?;
    compare(want, outcome)
}

fn shown(got: &[ClaimAllocation]) -> String {
    let values: Vec<Value> = got
        .iter()
        .map(|a| normalized(a.allocation.clone()))
        .collect();
    serde_json::to_string(&values).unwrap_or_default()
}

fn compare(
    mut want: Vec<Value>,
    outcome: Result<Vec<ClaimAllocation>, AllocationFailure>,
) -> Result<(), String> {
    let got = match outcome {
        Ok(got) => got,
        Err(e) if want.is_empty() && !upstream_reports_an_error(&e.reason) => return Ok(()),
        Err(e) if want.is_empty() => {
            return Err(format!(
                "upstream finds no allocation and no error; Joiner reports an error: {e}"
            ));
        }
        Err(e) => return Err(format!("upstream allocates; Joiner does not: {e}")),
    };
    let mut unmatched = Vec::new();
    for a in &got {
        let value = normalized(a.allocation.clone());
        match want.iter().position(|w| *w == value) {
            Some(i) => {
                want.remove(i);
            }
            None => unmatched.push(value),
        }
    }
    if unmatched.is_empty() && want.is_empty() {
        return Ok(());
    }
    Err(format!(
        "results differ\n  upstream (unmatched): {}\n  Joiner (unmatched):   {}",
        serde_json::to_string(&want).unwrap_or_default(),
        serde_json::to_string(&unmatched).unwrap_or_default()
    ))
}

#[test]
fn every_upstream_allocator_case_agrees() {
    let cases = read_cases();
    let mut failures = Vec::new();
    for case in &cases {
        if let Err(why) = run(case) {
            failures.push(format!("{} / {}: {why}", case.file, case.name));
        }
    }
    let mut names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    let dupes: Vec<&str> = names
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    assert!(dupes.is_empty(), "cases named twice: {dupes:?}");
    eprintln!(
        "upstream allocator cases: {} of {} agree",
        cases.len() - failures.len(),
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} upstream cases disagree:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
