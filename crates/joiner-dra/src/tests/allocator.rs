//! Allocation semantics, one test per behaviour of kube-scheduler's structured allocator.

use crate::allocator::{AllocationFailure, Allocator, ClaimAllocation, FailureReason};
use crate::builders::{self, AttributeArg, claim, class, exact, first_available, sub};
use crate::features::Features;
use crate::inventory::Inventory;
use crate::node::NodeInfo;
use crate::state::AllocationState;
use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, CapacityRequestPolicyRange, CapacityRequirements, Counter, CounterSet,
    Device, DeviceClaimConfiguration, DeviceClassConfiguration, DeviceConstraint,
    DeviceCounterConsumption, DeviceRequest, DeviceTaint, DeviceToleration,
    OpaqueDeviceConfiguration, ResourceClaim, ResourceClaimStatus, ResourceSlice,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as Q;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;

const DRIVER: &str = "gpu.example.com";
const NODE: &str = "node-a";

fn gpu(name: &str, product: &str, numa: i64) -> Device {
    let d = builders::device(name);
    let d = builders::with_attribute(d, "product", AttributeArg::Str(product.into()));
    let d = builders::with_attribute(d, "numa", AttributeArg::Int(numa));
    builders::with_capacity(d, "memory", "80Gi")
}

fn gpus(n: usize) -> Vec<Device> {
    (0..n)
        .map(|i| gpu(&format!("gpu-{i}"), "A", i as i64))
        .collect()
}

fn node_slice(devices: Vec<Device>) -> ResourceSlice {
    builders::slice("slice-a", DRIVER, NODE, Some(NODE), devices)
}

fn allocator() -> Allocator {
    allocator_with(Features::all())
}

fn allocator_with(features: Features) -> Allocator {
    Allocator::new(
        features,
        [
            class("gpu", &["device.driver == \"gpu.example.com\""]),
            class("any", &[]),
        ],
    )
}

struct Setup {
    inventory: Inventory,
    state: AllocationState,
    node: NodeInfo,
}

fn setup(slices: &[ResourceSlice]) -> Setup {
    Setup {
        inventory: Inventory::from_slices(slices),
        state: AllocationState::new(),
        node: NodeInfo::new(NODE),
    }
}

impl Setup {
    fn run(
        &self,
        alloc: &Allocator,
        claims: &[ResourceClaim],
    ) -> Result<Vec<ClaimAllocation>, AllocationFailure> {
        let prepared = alloc.prepare(claims);
        let view = self.inventory.node_view(&self.node);
        alloc.allocate(&self.inventory, &view, &self.state, &prepared)
    }

    fn commit(&mut self, allocations: &[ClaimAllocation]) {
        for a in allocations {
            self.state.commit(&self.inventory, &a.allocation);
        }
    }
}

/// (request, device) pairs of one allocation.
fn picked(a: &ClaimAllocation) -> Vec<(String, String)> {
    a.allocation
        .devices
        .as_ref()
        .and_then(|d| d.results.as_ref())
        .into_iter()
        .flatten()
        .map(|r| (r.request.clone(), r.device.clone()))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn one(claims: &[ResourceClaim], s: &Setup) -> Vec<(String, String)> {
    let out = s.run(&allocator(), claims).expect("allocates");
    picked(&out[0])
}

fn with_constraint(mut c: ResourceClaim, constraint: DeviceConstraint) -> ResourceClaim {
    if let Some(d) = c.spec.get_or_insert_default().devices.as_mut() {
        d.constraints.get_or_insert_with(Vec::new).push(constraint);
    }
    c
}

fn all_request(name: &str) -> DeviceRequest {
    let mut r = exact(name, "gpu", 1, &[]);
    if let Some(e) = r.exactly.as_mut() {
        e.allocation_mode = Some("All".into());
        e.count = None;
    }
    r
}

#[test]
fn exact_count_takes_devices_in_order_and_pins_the_node() {
    let s = setup(&[node_slice(gpus(4))]);
    let out = s
        .run(
            &allocator(),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 2, &[])])],
        )
        .unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].claim, "ns/c");
    assert_eq!(
        picked(&out[0]),
        pairs(&[("gpu", "gpu-0"), ("gpu", "gpu-1")])
    );
    let result = &out[0]
        .allocation
        .devices
        .as_ref()
        .unwrap()
        .results
        .as_ref()
        .unwrap()[0];
    assert_eq!(result.driver, DRIVER);
    assert_eq!(result.pool, NODE);
    assert_eq!(result.admin_access, None);
    assert_eq!(result.share_id, None);
    let sel = out[0].allocation.node_selector.as_ref().unwrap();
    let field = &sel.node_selector_terms[0].match_fields.as_ref().unwrap()[0];
    assert_eq!(
        (field.key.as_str(), field.operator.as_str()),
        ("metadata.name", "In")
    );
    assert_eq!(field.values.as_deref(), Some(&[NODE.to_string()][..]));
}

#[test]
fn default_count_is_one() {
    let s = setup(&[node_slice(gpus(2))]);
    let mut r = exact("gpu", "gpu", 1, &[]);
    if let Some(e) = r.exactly.as_mut() {
        e.count = None;
        e.allocation_mode = None;
    }
    assert_eq!(
        one(&[claim("ns", "c", vec![r])], &s),
        pairs(&[("gpu", "gpu-0")])
    );
}

#[test]
fn not_enough_devices_says_how_many() {
    let s = setup(&[node_slice(gpus(2))]);
    let err = s
        .run(
            &allocator(),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 3, &[])])],
        )
        .unwrap_err();
    assert_eq!(&*err.claim, "ns/c");
    assert_eq!(err.request.as_deref(), Some("gpu"));
    assert!(
        matches!(
            err.reason,
            FailureReason::NotEnoughDevices {
                needed: 3,
                matching: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("2 devices match, 3 needed"),
        "{err}"
    );
}

#[test]
fn no_device_matches_names_the_selector() {
    let s = setup(&[node_slice(gpus(2))]);
    let sel = r#"device.attributes["gpu.example.com"].product == "B""#;
    let err = s
        .run(
            &allocator(),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 1, &[sel])])],
        )
        .unwrap_err();
    match &err.reason {
        FailureReason::NoMatchingDevice {
            class, selectors, ..
        } => {
            assert_eq!(class, "gpu");
            assert_eq!(selectors, &vec![sel.to_string()]);
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("no device matches"), "{err}");
}

#[test]
fn devices_in_use_by_other_claims_are_skipped() {
    let mut s = setup(&[node_slice(gpus(3))]);
    let first = s
        .run(
            &allocator(),
            &[claim("ns", "a", vec![exact("gpu", "gpu", 2, &[])])],
        )
        .unwrap();
    // Existing claims with status.allocation become the state.
    let mut existing = claim("ns", "a", vec![exact("gpu", "gpu", 2, &[])]);
    existing.status = Some(ResourceClaimStatus {
        allocation: Some(first[0].allocation.clone()),
        ..Default::default()
    });
    s.state = AllocationState::from_claims(&s.inventory, [&existing]);
    assert_eq!(
        one(&[claim("ns", "b", vec![exact("gpu", "gpu", 1, &[])])], &s),
        pairs(&[("gpu", "gpu-2")])
    );
    let err = s
        .run(
            &allocator(),
            &[claim("ns", "b", vec![exact("gpu", "gpu", 2, &[])])],
        )
        .unwrap_err();
    match err.reason {
        FailureReason::NotEnoughDevices { rejected, .. } => assert_eq!(rejected.in_use, 2),
        other => panic!("{other:?}"),
    }
}

#[test]
fn commit_and_release_round_trip() {
    let mut s = setup(&[node_slice(gpus(2))]);
    let out = s
        .run(
            &allocator(),
            &[claim("ns", "a", vec![exact("gpu", "gpu", 2, &[])])],
        )
        .unwrap();
    let before = s.state.clone();
    s.commit(&out);
    assert_ne!(before, s.state);
    assert!(
        s.run(
            &allocator(),
            &[claim("ns", "b", vec![exact("gpu", "gpu", 1, &[])])]
        )
        .is_err()
    );
    s.state.release(&s.inventory, &out[0].allocation);
    assert_eq!(before, s.state);
}

#[test]
fn all_mode_takes_every_matching_device() {
    let s = setup(&[node_slice(gpus(3))]);
    let out = one(&[claim("ns", "c", vec![all_request("gpu")])], &s);
    assert_eq!(out.len(), 3);
}

#[test]
fn all_mode_fails_when_one_is_in_use_or_none_match() {
    let mut s = setup(&[node_slice(gpus(3))]);
    let out = s
        .run(
            &allocator(),
            &[claim("ns", "a", vec![exact("gpu", "gpu", 1, &[])])],
        )
        .unwrap();
    s.commit(&out);
    assert!(
        s.run(&allocator(), &[claim("ns", "c", vec![all_request("gpu")])])
            .is_err()
    );
    let empty = setup(&[node_slice(vec![])]);
    assert!(
        empty
            .run(&allocator(), &[claim("ns", "c", vec![all_request("gpu")])])
            .is_err()
    );
}

#[test]
fn first_available_tries_alternatives_in_order() {
    let devices = vec![
        gpu("big", "A", 0),
        gpu("small-0", "B", 0),
        gpu("small-1", "B", 1),
    ];
    let s = setup(&[node_slice(devices)]);
    let a = r#"device.attributes["gpu.example.com"].product == "A""#;
    let b = r#"device.attributes["gpu.example.com"].product == "B""#;
    // Two A's are not there: the second alternative serves.
    let r = first_available(
        "gpu",
        vec![sub("a", "gpu", 2, &[a]), sub("b", "gpu", 2, &[b])],
    );
    assert_eq!(
        one(&[claim("ns", "c", vec![r])], &s),
        pairs(&[("gpu/b", "small-0"), ("gpu/b", "small-1")])
    );
    // One A is: the first serves.
    let r = first_available(
        "gpu",
        vec![sub("a", "gpu", 1, &[a]), sub("b", "gpu", 2, &[b])],
    );
    assert_eq!(
        one(&[claim("ns", "c", vec![r])], &s),
        pairs(&[("gpu/a", "big")])
    );
}

#[test]
fn backtracks_across_first_available_alternatives() {
    let devices = vec![gpu("a-0", "A", 0), gpu("b-0", "B", 0)];
    let s = setup(&[node_slice(devices)]);
    let a = r#"device.attributes["gpu.example.com"].product == "A""#;
    let b = r#"device.attributes["gpu.example.com"].product == "B""#;
    // r1 prefers A, but r2 can only use A: the search goes back and gives r1 its B.
    let r1 = first_available(
        "r1",
        vec![sub("a", "gpu", 1, &[a]), sub("b", "gpu", 1, &[b])],
    );
    let r2 = exact("r2", "gpu", 1, &[a]);
    assert_eq!(
        one(&[claim("ns", "c", vec![r1, r2])], &s),
        pairs(&[("r1/b", "b-0"), ("r2", "a-0")])
    );
}

#[test]
fn backtracks_across_claims() {
    let s = setup(&[node_slice(gpus(2))]);
    let c1 = claim("ns", "any", vec![exact("gpu", "gpu", 1, &[])]);
    let c2 = claim(
        "ns",
        "first",
        vec![exact(
            "gpu",
            "gpu",
            1,
            &[r#"device.attributes["gpu.example.com"].numa == 0"#],
        )],
    );
    let out = s.run(&allocator(), &[c1, c2]).unwrap();
    assert_eq!(picked(&out[0]), pairs(&[("gpu", "gpu-1")]));
    assert_eq!(picked(&out[1]), pairs(&[("gpu", "gpu-0")]));
}

fn numa_devices() -> Vec<Device> {
    vec![
        gpu("gpu-0", "A", 0),
        gpu("gpu-1", "A", 1),
        gpu("gpu-2", "A", 1),
        gpu("gpu-3", "A", 2),
    ]
}

fn match_numa(requests: Option<Vec<&str>>) -> DeviceConstraint {
    DeviceConstraint {
        match_attribute: Some("gpu.example.com/numa".into()),
        requests: requests.map(|r| r.into_iter().map(str::to_string).collect()),
        ..Default::default()
    }
}

#[test]
fn match_attribute_unscoped() {
    let s = setup(&[node_slice(numa_devices())]);
    let c = with_constraint(
        claim("ns", "c", vec![exact("gpu", "gpu", 2, &[])]),
        match_numa(None),
    );
    assert_eq!(one(&[c], &s), pairs(&[("gpu", "gpu-1"), ("gpu", "gpu-2")]));
    let c = with_constraint(
        claim("ns", "c", vec![exact("gpu", "gpu", 3, &[])]),
        match_numa(None),
    );
    let err = s.run(&allocator(), &[c]).unwrap_err();
    assert!(
        matches!(err.reason, FailureReason::Constraint { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("matchAttribute"), "{err}");
}

#[test]
fn match_attribute_scoped_to_requests() {
    let s = setup(&[node_slice(numa_devices())]);
    let reqs = vec![
        exact("r1", "gpu", 1, &[]),
        exact("r2", "gpu", 1, &[]),
        exact("r3", "gpu", 1, &[]),
    ];
    let c = with_constraint(claim("ns", "c", reqs), match_numa(Some(vec!["r2", "r3"])));
    // r1 is free to take gpu-0; r2 and r3 share a NUMA node.
    assert_eq!(
        one(&[c], &s),
        pairs(&[("r1", "gpu-0"), ("r2", "gpu-1"), ("r3", "gpu-2")])
    );
}

#[test]
fn match_attribute_is_type_aware_and_needs_the_attribute() {
    let d0 = builders::with_attribute(builders::device("int-1"), "numa", AttributeArg::Int(1));
    let d1 = builders::with_attribute(
        builders::device("str-1"),
        "numa",
        AttributeArg::Str("1".into()),
    );
    let d2 = builders::device("none");
    let s = setup(&[node_slice(vec![d0, d1, d2])]);
    let c = with_constraint(
        claim("ns", "c", vec![exact("gpu", "gpu", 2, &[])]),
        match_numa(None),
    );
    assert!(s.run(&allocator(), &[c]).is_err());
}

#[test]
fn match_attribute_with_first_available_parent_name() {
    let s = setup(&[node_slice(numa_devices())]);
    let r1 = first_available("r1", vec![sub("one", "gpu", 1, &[])]);
    let r2 = exact("r2", "gpu", 1, &[]);
    let c = with_constraint(
        claim("ns", "c", vec![r1, r2]),
        match_numa(Some(vec!["r1", "r2"])),
    );
    assert_eq!(
        one(&[c], &s),
        pairs(&[("r1/one", "gpu-1"), ("r2", "gpu-2")])
    );
}

#[test]
fn distinct_attribute() {
    let s = setup(&[node_slice(numa_devices())]);
    let c = with_constraint(
        claim("ns", "c", vec![exact("gpu", "gpu", 3, &[])]),
        DeviceConstraint {
            distinct_attribute: Some("gpu.example.com/numa".into()),
            ..Default::default()
        },
    );
    assert_eq!(
        one(&[c], &s),
        pairs(&[("gpu", "gpu-0"), ("gpu", "gpu-1"), ("gpu", "gpu-3")])
    );
    let c = with_constraint(
        claim("ns", "c", vec![exact("gpu", "gpu", 4, &[])]),
        DeviceConstraint {
            distinct_attribute: Some("gpu.example.com/numa".into()),
            ..Default::default()
        },
    );
    assert!(s.run(&allocator(), &[c]).is_err());
}

fn admin(name: &str) -> DeviceRequest {
    let mut r = exact(name, "gpu", 1, &[]);
    if let Some(e) = r.exactly.as_mut() {
        e.admin_access = Some(true);
    }
    r
}

#[test]
fn admin_access_uses_devices_in_use_and_takes_nothing() {
    let mut s = setup(&[node_slice(gpus(1))]);
    let out = s
        .run(
            &allocator(),
            &[claim("ns", "a", vec![exact("gpu", "gpu", 1, &[])])],
        )
        .unwrap();
    s.commit(&out);
    let out = s
        .run(&allocator(), &[claim("ns", "admin", vec![admin("gpu")])])
        .unwrap();
    let r = &out[0]
        .allocation
        .devices
        .as_ref()
        .unwrap()
        .results
        .as_ref()
        .unwrap()[0];
    assert_eq!((r.device.as_str(), r.admin_access), ("gpu-0", Some(true)));
    let before = s.state.clone();
    s.commit(&out);
    assert_eq!(before, s.state);
    let mut off = Features::all();
    off.admin_access = false;
    let err = s
        .run(
            &allocator_with(off),
            &[claim("ns", "admin", vec![admin("gpu")])],
        )
        .unwrap_err();
    assert!(matches!(
        err.reason,
        FailureReason::FeatureDisabled {
            gate: "DRAAdminAccess",
            ..
        }
    ));
}

fn tainted(name: &str, effect: &str) -> Device {
    let mut d = gpu(name, "A", 0);
    d.taints = Some(vec![DeviceTaint {
        key: "health".into(),
        value: Some("bad".into()),
        effect: effect.into(),
        time_added: None,
    }]);
    d
}

#[test]
fn taints_and_tolerations() {
    let s = setup(&[node_slice(vec![
        tainted("t-0", "NoSchedule"),
        tainted("t-1", "NoExecute"),
    ])]);
    let err = s
        .run(
            &allocator(),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 1, &[])])],
        )
        .unwrap_err();
    assert!(
        matches!(
            err.reason,
            FailureReason::NoMatchingDevice { tainted: 2, .. }
        ),
        "{err}"
    );
    let mut r = exact("gpu", "gpu", 2, &[]);
    let toleration = DeviceToleration {
        key: Some("health".into()),
        operator: Some("Equal".into()),
        value: Some("bad".into()),
        effect: None,
        toleration_seconds: None,
    };
    if let Some(e) = r.exactly.as_mut() {
        e.tolerations = Some(vec![toleration.clone()]);
    }
    let out = s.run(&allocator(), &[claim("ns", "c", vec![r])]).unwrap();
    let results = out[0]
        .allocation
        .devices
        .as_ref()
        .unwrap()
        .results
        .as_ref()
        .unwrap();
    assert_eq!(results[0].tolerations.as_deref(), Some(&[toleration][..]));
    // A wrong value does not tolerate; Exists without a key tolerates everything.
    let wrong = DeviceToleration {
        key: Some("health".into()),
        value: Some("good".into()),
        ..Default::default()
    };
    let mut r = exact("gpu", "gpu", 1, &[]);
    if let Some(e) = r.exactly.as_mut() {
        e.tolerations = Some(vec![wrong]);
    }
    assert!(s.run(&allocator(), &[claim("ns", "c", vec![r])]).is_err());
    let mut r = exact("gpu", "gpu", 2, &[]);
    if let Some(e) = r.exactly.as_mut() {
        e.tolerations = Some(vec![DeviceToleration {
            operator: Some("Exists".into()),
            ..Default::default()
        }]);
    }
    assert!(s.run(&allocator(), &[claim("ns", "c", vec![r])]).is_ok());
    // With the gate off, taints are ignored.
    let mut off = Features::all();
    off.device_taints = false;
    assert!(
        s.run(
            &allocator_with(off),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 2, &[])])]
        )
        .is_ok()
    );
}

#[test]
fn taint_effect_none_does_not_block() {
    let s = setup(&[node_slice(vec![tainted("t-0", "None")])]);
    assert!(
        s.run(
            &allocator(),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 1, &[])])]
        )
        .is_ok()
    );
}

fn partitioned_slice(unknown_counter: bool) -> ResourceSlice {
    let consume = |name: &str, mem: &str| {
        let mut d = gpu(name, "A", 0);
        d.consumes_counters = Some(vec![DeviceCounterConsumption {
            compatibility_groups: None,
            counter_set: "gpu-0-counters".into(),
            counters: [(
                if unknown_counter {
                    "nope".to_string()
                } else {
                    "memory".to_string()
                },
                Counter {
                    value: Q(mem.into()),
                },
            )]
            .into_iter()
            .collect(),
        }]);
        d
    };
    let mut s = node_slice(vec![
        consume("whole", "80Gi"),
        consume("half-0", "40Gi"),
        consume("half-1", "40Gi"),
    ]);
    s.spec.shared_counters = Some(vec![CounterSet {
        name: "gpu-0-counters".into(),
        counters: [(
            "memory".to_string(),
            Counter {
                value: Q("80Gi".into()),
            },
        )]
        .into_iter()
        .collect(),
    }]);
    s
}

#[test]
fn partitionable_devices_share_counters() {
    let mut s = setup(&[partitioned_slice(false)]);
    let whole = s
        .run(
            &allocator(),
            &[claim("ns", "a", vec![exact("gpu", "gpu", 1, &[])])],
        )
        .unwrap();
    assert_eq!(picked(&whole[0]), pairs(&[("gpu", "whole")]));
    s.commit(&whole);
    let err = s
        .run(
            &allocator(),
            &[claim("ns", "b", vec![exact("gpu", "gpu", 1, &[])])],
        )
        .unwrap_err();
    match &err.reason {
        FailureReason::NotEnoughDevices { rejected, .. } => {
            assert_eq!(rejected.counters, 2, "{err}")
        }
        other => panic!("{other:?}"),
    }
    // Two halves fit together, but not with the whole.
    let s = setup(&[partitioned_slice(false)]);
    assert_eq!(
        one(&[claim("ns", "b", vec![exact("gpu", "gpu", 2, &[])])], &s),
        pairs(&[("gpu", "half-0"), ("gpu", "half-1")])
    );
    // Across claims within one pod too.
    let out = s
        .run(
            &allocator(),
            &[
                claim("ns", "x", vec![exact("gpu", "gpu", 1, &[])]),
                claim("ns", "y", vec![exact("gpu", "gpu", 1, &[])]),
            ],
        )
        .unwrap();
    assert_eq!(picked(&out[0]), pairs(&[("gpu", "half-0")]));
    assert_eq!(picked(&out[1]), pairs(&[("gpu", "half-1")]));
}

#[test]
fn unknown_counter_makes_the_pool_invalid() {
    let s = setup(&[partitioned_slice(true)]);
    assert!(s.inventory.pools()[0].invalid.is_some());
    let err = s
        .run(
            &allocator(),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 1, &[])])],
        )
        .unwrap_err();
    assert!(
        matches!(err.reason, FailureReason::PoolInvalid { .. }),
        "{err}"
    );
}

#[test]
fn duplicate_device_names_make_the_pool_invalid() {
    let s = setup(&[node_slice(vec![gpu("same", "A", 0), gpu("same", "A", 1)])]);
    let err = s
        .run(
            &allocator(),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 1, &[])])],
        )
        .unwrap_err();
    match &err.reason {
        FailureReason::PoolInvalid { reason, .. } => {
            assert!(reason.contains("duplicate"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_earlier_valid_pool_serves_before_an_invalid_one_is_reached() {
    let good = builders::slice("a", DRIVER, "a-pool", Some(NODE), gpus(1));
    let bad = builders::slice(
        "b",
        DRIVER,
        "b-pool",
        Some(NODE),
        vec![gpu("x", "A", 0), gpu("x", "A", 0)],
    );
    let s = setup(&[good, bad]);
    assert!(
        s.run(
            &allocator(),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 1, &[])])]
        )
        .is_ok()
    );
    assert!(
        s.run(
            &allocator(),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 2, &[])])]
        )
        .is_err()
    );
}

fn shareable(policy: Option<CapacityRequestPolicy>) -> Device {
    let mut d = gpu("shared", "A", 0);
    d.allow_multiple_allocations = Some(true);
    if let Some(cap) = d.capacity.as_mut().and_then(|c| c.get_mut("memory")) {
        cap.request_policy = policy;
    }
    d
}

fn cap_request(name: &str, memory: Option<&str>) -> DeviceRequest {
    let mut r = exact(name, "gpu", 1, &[]);
    if let (Some(e), Some(m)) = (r.exactly.as_mut(), memory) {
        e.capacity = Some(CapacityRequirements {
            requests: Some([("memory".to_string(), Q(m.into()))].into_iter().collect()),
        });
    }
    r
}

fn consumed(a: &ClaimAllocation) -> (Option<String>, bool) {
    let r = &a
        .allocation
        .devices
        .as_ref()
        .unwrap()
        .results
        .as_ref()
        .unwrap()[0];
    (
        r.consumed_capacity
            .as_ref()
            .and_then(|c| c.get("memory"))
            .map(|q| q.0.clone()),
        r.share_id.is_some(),
    )
}

#[test]
fn consumable_capacity_valid_range_rounds_up_and_tracks_shares() {
    let policy = CapacityRequestPolicy {
        default: Some(Q("10Gi".into())),
        valid_range: Some(CapacityRequestPolicyRange {
            min: Q("10Gi".into()),
            max: Some(Q("40Gi".into())),
            step: Some(Q("10Gi".into())),
        }),
        valid_values: None,
    };
    let mut s = setup(&[node_slice(vec![shareable(Some(policy))])]);
    let out = s
        .run(
            &allocator(),
            &[claim("ns", "a", vec![cap_request("gpu", Some("15Gi"))])],
        )
        .unwrap();
    assert_eq!(consumed(&out[0]), (Some("20Gi".into()), true));
    s.commit(&out);
    // Default when the request names no amount.
    let out = s
        .run(
            &allocator(),
            &[claim("ns", "b", vec![cap_request("gpu", None)])],
        )
        .unwrap();
    assert_eq!(consumed(&out[0]), (Some("10Gi".into()), true));
    s.commit(&out);
    // Above max: unfit.
    let err = s
        .run(
            &allocator(),
            &[claim("ns", "c", vec![cap_request("gpu", Some("50Gi"))])],
        )
        .unwrap_err();
    assert!(
        matches!(
            err.reason,
            FailureReason::NoMatchingDevice {
                capacity_unfit: 1,
                ..
            }
        ),
        "{err}"
    );
    // 30Gi used of 80Gi: 40Gi fits once, then 10Gi remain.
    let out = s
        .run(
            &allocator(),
            &[claim("ns", "d", vec![cap_request("gpu", Some("40Gi"))])],
        )
        .unwrap();
    s.commit(&out);
    let err = s
        .run(
            &allocator(),
            &[claim("ns", "e", vec![cap_request("gpu", Some("20Gi"))])],
        )
        .unwrap_err();
    match &err.reason {
        FailureReason::NotEnoughDevices { rejected, .. } => assert_eq!(rejected.capacity, 1),
        other => panic!("{other:?}"),
    }
    assert!(
        s.run(
            &allocator(),
            &[claim("ns", "f", vec![cap_request("gpu", Some("10Gi"))])]
        )
        .is_ok()
    );
}

#[test]
fn consumable_capacity_valid_values_and_no_policy() {
    let policy = CapacityRequestPolicy {
        default: None,
        valid_range: None,
        valid_values: Some(vec![Q("40Gi".into()), Q("20Gi".into())]),
    };
    let s = setup(&[node_slice(vec![shareable(Some(policy))])]);
    let out = s
        .run(
            &allocator(),
            &[claim("ns", "a", vec![cap_request("gpu", Some("15Gi"))])],
        )
        .unwrap();
    assert_eq!(consumed(&out[0]), (Some("20Gi".into()), true));
    let out = s
        .run(
            &allocator(),
            &[claim("ns", "a", vec![cap_request("gpu", Some("21Gi"))])],
        )
        .unwrap();
    assert_eq!(consumed(&out[0]), (Some("40Gi".into()), true));
    assert!(
        s.run(
            &allocator(),
            &[claim("ns", "a", vec![cap_request("gpu", Some("41Gi"))])]
        )
        .is_err()
    );
    // Without a policy: the request as is, or all of it.
    let s = setup(&[node_slice(vec![shareable(None)])]);
    let out = s
        .run(
            &allocator(),
            &[claim("ns", "a", vec![cap_request("gpu", Some("15Gi"))])],
        )
        .unwrap();
    assert_eq!(consumed(&out[0]), (Some("15Gi".into()), true));
    let out = s
        .run(
            &allocator(),
            &[claim("ns", "a", vec![cap_request("gpu", None)])],
        )
        .unwrap();
    assert_eq!(consumed(&out[0]), (Some("80Gi".into()), true));
}

#[test]
fn shareable_device_serves_two_requests_of_one_claim() {
    let s = setup(&[node_slice(vec![shareable(None)])]);
    let c = claim(
        "ns",
        "a",
        vec![
            cap_request("r1", Some("30Gi")),
            cap_request("r2", Some("30Gi")),
        ],
    );
    let out = s.run(&allocator(), &[c]).unwrap();
    assert_eq!(
        picked(&out[0]),
        pairs(&[("r1", "shared"), ("r2", "shared")])
    );
    let results = out[0]
        .allocation
        .devices
        .as_ref()
        .unwrap()
        .results
        .as_ref()
        .unwrap();
    assert_ne!(results[0].share_id, results[1].share_id);
    let c = claim(
        "ns",
        "a",
        vec![
            cap_request("r1", Some("50Gi")),
            cap_request("r2", Some("50Gi")),
        ],
    );
    assert!(s.run(&allocator(), &[c]).is_err());
}

#[test]
fn consumable_capacity_gate_off() {
    // The device is then an ordinary exclusive one, and a claim with capacity requests (which
    // the API server would have dropped) is refused, as kube-scheduler refuses it.
    let mut off = Features::all();
    off.consumable_capacity = false;
    let mut s = setup(&[node_slice(vec![shareable(None)])]);
    let err = s
        .run(
            &allocator_with(off),
            &[claim("ns", "a", vec![cap_request("gpu", Some("1Gi"))])],
        )
        .unwrap_err();
    assert_eq!(
        err.reason,
        FailureReason::FeatureDisabled {
            gate: "DRAConsumableCapacity",
            field: "capacity.requests"
        }
    );
    assert!(err.is_fatal());
    let out = s
        .run(
            &allocator_with(off),
            &[claim("ns", "a", vec![cap_request("gpu", None)])],
        )
        .unwrap();
    assert_eq!(consumed(&out[0]), (None, false));
    s.commit(&out);
    assert!(
        s.run(
            &allocator_with(off),
            &[claim("ns", "b", vec![cap_request("gpu", None)])]
        )
        .is_err()
    );
}

#[test]
fn at_most_32_results_per_claim() {
    let s = setup(&[node_slice(gpus(40))]);
    let err = s
        .run(
            &allocator(),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 33, &[])])],
        )
        .unwrap_err();
    assert!(
        matches!(
            err.reason,
            FailureReason::TooManyResults {
                count: 33,
                limit: 32
            }
        ),
        "{err}"
    );
    let err = s
        .run(
            &allocator(),
            &[claim(
                "ns",
                "c",
                vec![exact("a", "gpu", 16, &[]), exact("b", "gpu", 17, &[])],
            )],
        )
        .unwrap_err();
    assert!(
        matches!(err.reason, FailureReason::TooManyResults { .. }),
        "{err}"
    );
    let err = s
        .run(&allocator(), &[claim("ns", "c", vec![all_request("gpu")])])
        .unwrap_err();
    assert!(
        matches!(err.reason, FailureReason::TooManyResults { count: 40, .. }),
        "{err}"
    );
    // A firstAvailable alternative that needs fewer devices still serves.
    let r = first_available(
        "gpu",
        vec![sub("many", "gpu", 20, &[]), sub("few", "gpu", 2, &[])],
    );
    let c = claim("ns", "c", vec![exact("fixed", "gpu", 16, &[]), r]);
    let out = one(&[c], &s);
    assert_eq!(out.len(), 18);
    assert_eq!(out[17].0, "gpu/few");
    assert_eq!(
        one(&[claim("ns", "c", vec![exact("gpu", "gpu", 32, &[])])], &s).len(),
        32
    );
}

#[test]
fn incomplete_pools_are_not_allocated_from() {
    let mut slice = node_slice(gpus(2));
    slice.spec.pool.resource_slice_count = 2;
    let complete = builders::slice("b", DRIVER, "b-pool", Some(NODE), vec![gpu("b-0", "A", 0)]);
    let s = setup(&[slice, complete]);
    assert!(!s.inventory.pools()[1].complete || !s.inventory.pools()[0].complete);
    // ExactCount skips the incomplete pool and finds the device of the complete one.
    assert_eq!(
        one(&[claim("ns", "c", vec![exact("gpu", "gpu", 1, &[])])], &s),
        pairs(&[("gpu", "b-0")])
    );
    assert!(
        s.run(
            &allocator(),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 2, &[])])]
        )
        .is_err()
    );
    // All fails outright.
    let err = s
        .run(&allocator(), &[claim("ns", "c", vec![all_request("gpu")])])
        .unwrap_err();
    assert!(
        matches!(err.reason, FailureReason::PoolIncomplete { .. }),
        "{err}"
    );
}

#[test]
fn all_mode_fails_on_an_untolerated_taint() {
    let s = setup(&[node_slice(vec![
        gpu("ok", "A", 0),
        tainted("bad", "NoSchedule"),
    ])]);
    assert!(
        s.run(&allocator(), &[claim("ns", "c", vec![all_request("gpu")])])
            .is_err()
    );
    assert!(
        s.run(
            &allocator(),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 1, &[])])]
        )
        .is_ok()
    );
}

#[test]
fn admin_access_never_takes_a_device_twice_in_one_claim() {
    let s = setup(&[node_slice(gpus(1))]);
    let c = claim("ns", "admin", vec![admin("a"), admin("b")]);
    assert!(s.run(&allocator(), &[c]).is_err());
    let s = setup(&[node_slice(gpus(2))]);
    let c = claim("ns", "admin", vec![admin("a"), admin("b")]);
    assert_eq!(one(&[c], &s), pairs(&[("a", "gpu-0"), ("b", "gpu-1")]));
}

#[test]
fn only_the_newest_generation_counts() {
    let mut old = builders::slice(
        "old",
        DRIVER,
        NODE,
        Some(NODE),
        vec![gpu("old-gpu", "A", 0)],
    );
    old.spec.pool.generation = 1;
    let mut new = builders::slice(
        "new",
        DRIVER,
        NODE,
        Some(NODE),
        vec![gpu("new-gpu", "A", 0)],
    );
    new.spec.pool.generation = 2;
    let s = setup(&[old, new]);
    assert!(s.inventory.pools()[0].complete);
    assert_eq!(
        one(&[claim("ns", "c", vec![all_request("gpu")])], &s),
        pairs(&[("gpu", "new-gpu")])
    );
}

#[test]
fn slices_are_ordered_by_name_and_pools_by_driver_then_name() {
    let mut s1 = builders::slice("z-slice", DRIVER, NODE, Some(NODE), vec![gpu("z", "A", 0)]);
    s1.spec.pool.resource_slice_count = 2;
    let mut s2 = builders::slice("a-slice", DRIVER, NODE, Some(NODE), vec![gpu("a", "A", 0)]);
    s2.spec.pool.resource_slice_count = 2;
    let other_pool = builders::slice(
        "x",
        DRIVER,
        "another",
        Some(NODE),
        vec![gpu("first", "A", 0)],
    );
    let s = setup(&[s1, s2, other_pool]);
    assert_eq!(
        one(&[claim("ns", "c", vec![exact("gpu", "gpu", 3, &[])])], &s),
        pairs(&[("gpu", "first"), ("gpu", "a"), ("gpu", "z")])
    );
}

fn zone_selector(zone: &str) -> NodeSelector {
    NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: "zone".into(),
                operator: "In".into(),
                values: Some(vec![zone.into()]),
            }]),
            match_fields: None,
        }],
    }
}

#[test]
fn slice_visibility_and_allocation_node_selector() {
    let other = builders::slice("other", DRIVER, "other-node", Some("other-node"), gpus(1));
    let s = setup(&[other]);
    assert!(
        s.run(
            &allocator(),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 1, &[])])]
        )
        .is_err()
    );

    let network = builders::slice("net", DRIVER, "net", None, gpus(1));
    let s = setup(&[network]);
    let out = s
        .run(
            &allocator(),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 1, &[])])],
        )
        .unwrap();
    assert_eq!(out[0].allocation.node_selector, None);

    let mut zonal = builders::slice("zonal", DRIVER, "zonal", None, gpus(1));
    zonal.spec.all_nodes = None;
    zonal.spec.node_selector = Some(zone_selector("z1"));
    let mut s = setup(&[zonal]);
    assert!(
        s.run(
            &allocator(),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 1, &[])])]
        )
        .is_err()
    );
    s.node = NodeInfo::new(NODE).with_label("zone", "z1");
    let out = s
        .run(
            &allocator(),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 1, &[])])],
        )
        .unwrap();
    assert_eq!(out[0].allocation.node_selector, Some(zone_selector("z1")));
}

#[test]
fn per_device_node_selection() {
    let mut mine = gpu("mine", "A", 0);
    mine.node_name = Some(NODE.into());
    let mut theirs = gpu("theirs", "A", 0);
    theirs.node_name = Some("other".into());
    let mut everywhere = gpu("everywhere", "A", 0);
    everywhere.all_nodes = Some(true);
    let mut slice = builders::slice("pd", DRIVER, "pd", None, vec![theirs, everywhere, mine]);
    slice.spec.all_nodes = None;
    slice.spec.per_device_node_selection = Some(true);
    let s = setup(&[slice]);
    let out = s
        .run(&allocator(), &[claim("ns", "c", vec![all_request("gpu")])])
        .unwrap();
    assert_eq!(
        picked(&out[0]),
        pairs(&[("gpu", "everywhere"), ("gpu", "mine")])
    );
    assert!(out[0].allocation.node_selector.is_some());
}

#[test]
fn cel_runtime_error_fails_the_claim() {
    let s = setup(&[node_slice(gpus(1))]);
    let sel = r#"device.attributes["gpu.example.com"].missing == "x""#;
    let err = s
        .run(
            &allocator(),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 1, &[sel])])],
        )
        .unwrap_err();
    match &err.reason {
        FailureReason::Cel(e) => {
            assert!(e.to_string().contains("missing"), "{e}");
            assert!(
                e.to_string().contains("gpu.example.com/node-a/gpu-0"),
                "{e}"
            );
            assert!(!err.is_fatal());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(err.request.as_deref(), Some("gpu"));
}

#[test]
fn cel_compile_error_and_cost_limit_fail_the_claim_everywhere() {
    let s = setup(&[node_slice(gpus(1))]);
    let alloc = allocator();
    let prepared = alloc.prepare(&[claim(
        "ns",
        "c",
        vec![exact("gpu", "gpu", 1, &["device.driver =="])],
    )]);
    let broken = prepared.broken().unwrap();
    assert!(broken.is_fatal());
    assert!(broken.to_string().contains("does not compile"), "{broken}");
    let list = format!(
        "[{}]",
        (0..200)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let costly = format!("{list}.all(a, {list}.all(b, {list}.all(c, a != b || b != c)))");
    let err = s
        .run(
            &alloc,
            &[claim("ns", "c", vec![exact("gpu", "gpu", 1, &[&costly])])],
        )
        .unwrap_err();
    match &err.reason {
        FailureReason::Cel(crate::cel::CelError::CostLimit { .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_class_and_disabled_first_available() {
    let s = setup(&[node_slice(gpus(1))]);
    let err = s
        .run(
            &allocator(),
            &[claim("ns", "c", vec![exact("gpu", "nope", 1, &[])])],
        )
        .unwrap_err();
    assert!(matches!(
        err.reason,
        FailureReason::UnknownDeviceClass { .. }
    ));
    let mut off = Features::all();
    off.prioritized_list = false;
    let r = first_available("gpu", vec![sub("a", "gpu", 1, &[])]);
    let err = s
        .run(&allocator_with(off), &[claim("ns", "c", vec![r])])
        .unwrap_err();
    assert!(matches!(
        err.reason,
        FailureReason::FeatureDisabled {
            gate: "DRAPrioritizedList",
            ..
        }
    ));
}

#[test]
fn already_allocated_claims_must_be_usable_from_the_node() {
    let mut s = setup(&[node_slice(gpus(2))]);
    let out = s
        .run(
            &allocator(),
            &[claim("ns", "shared", vec![exact("gpu", "gpu", 1, &[])])],
        )
        .unwrap();
    s.commit(&out);
    let mut shared = claim("ns", "shared", vec![exact("gpu", "gpu", 1, &[])]);
    shared.status = Some(ResourceClaimStatus {
        allocation: Some(out[0].allocation.clone()),
        ..Default::default()
    });
    // Same node: nothing new to allocate for it; the other claim still is.
    let got = s
        .run(
            &allocator(),
            &[
                shared.clone(),
                claim("ns", "own", vec![exact("gpu", "gpu", 1, &[])]),
            ],
        )
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(picked(&got[0]), pairs(&[("gpu", "gpu-1")]));
    s.node = NodeInfo::new("elsewhere");
    let err = s.run(&allocator(), &[shared]).unwrap_err();
    assert_eq!(err.reason, FailureReason::AllocatedElsewhere);
}

#[test]
fn search_budget_bounds_hopeless_searches() {
    let devices: Vec<Device> = (0..30).map(|i| gpu(&format!("g{i}"), "A", 7)).collect();
    let s = setup(&[node_slice(devices)]);
    // Eight requests with a distinct constraint on a value every device shares: hopeless,
    // and the search space is large.
    let reqs: Vec<_> = (0..8)
        .map(|i| exact(&format!("r{i}"), "gpu", 1, &[]))
        .collect();
    let c = with_constraint(
        claim("ns", "c", reqs),
        DeviceConstraint {
            distinct_attribute: Some("gpu.example.com/numa".into()),
            ..Default::default()
        },
    );
    let alloc = allocator().with_search_budget(500);
    let err = s.run(&alloc, &[c]).unwrap_err();
    assert!(
        matches!(
            err.reason,
            FailureReason::SearchBudgetExhausted { steps: 500 }
        ),
        "{err}"
    );
}

#[test]
fn class_and_claim_config_are_copied() {
    let mut gpu_class = class("gpu", &[]);
    let opaque = |p: &str| OpaqueDeviceConfiguration {
        driver: DRIVER.into(),
        parameters: RawExtension(serde_json::json!({ "p": p })),
    };
    gpu_class.spec.get_or_insert_default().config = Some(vec![DeviceClassConfiguration {
        opaque: Some(opaque("class")),
    }]);
    let alloc = Allocator::new(Features::all(), [gpu_class]);
    let s = setup(&[node_slice(gpus(1))]);
    let mut c = claim("ns", "c", vec![exact("gpu", "gpu", 1, &[])]);
    if let Some(d) = c.spec.get_or_insert_default().devices.as_mut() {
        d.config = Some(vec![DeviceClaimConfiguration {
            opaque: Some(opaque("claim")),
            requests: Some(vec!["gpu".into()]),
        }]);
    }
    let out = s.run(&alloc, &[c]).unwrap();
    let config = out[0]
        .allocation
        .devices
        .as_ref()
        .unwrap()
        .config
        .as_ref()
        .unwrap();
    assert_eq!(config.len(), 2);
    assert_eq!(config[0].source, "FromClass");
    assert_eq!(config[1].source, "FromClaim");
}

#[test]
fn binding_conditions_are_copied_or_gated() {
    let mut d = gpu("bc", "A", 0);
    d.binding_conditions = Some(vec!["Attached".into()]);
    d.binding_failure_conditions = Some(vec!["AttachFailed".into()]);
    let s = setup(&[node_slice(vec![d])]);
    let out = s
        .run(
            &allocator(),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 1, &[])])],
        )
        .unwrap();
    let r = &out[0]
        .allocation
        .devices
        .as_ref()
        .unwrap()
        .results
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        r.binding_conditions.as_deref(),
        Some(&["Attached".to_string()][..])
    );
    let mut off = Features::all();
    off.device_binding_conditions = false;
    assert!(
        s.run(
            &allocator_with(off),
            &[claim("ns", "c", vec![exact("gpu", "gpu", 1, &[])])]
        )
        .is_err()
    );
}

#[test]
fn feature_defaults_by_version() {
    use crate::features::KubeVersion;
    let f134 = Features::for_version(KubeVersion::parse("1.34").unwrap());
    assert!(f134.prioritized_list && f134.admin_access && !f134.consumable_capacity);
    let f135 = Features::for_version(KubeVersion::parse("1.35").unwrap());
    assert!(!f135.device_taints && !f135.partitionable_devices && f135.prioritized_list);
    let f136 = Features::for_version(KubeVersion::parse("v1.36.1").unwrap());
    assert!(f136.partitionable_devices && f136.device_taints && f136.consumable_capacity);
    assert!(!f136.list_type_attributes);
    let mut f = Features::default();
    assert!(f.set("DRAConsumableCapacity", false));
    assert!(!f.consumable_capacity);
    assert!(!f.set("NotAGate", true));
}

#[test]
fn planner_what_if_on_a_synthesized_node() {
    // Existing node with one GPU in use; the planner adds the slices an instance type would
    // publish for a node that does not exist yet, and asks on a cloned state.
    let mut s = setup(&[node_slice(gpus(1))]);
    let out = s
        .run(
            &allocator(),
            &[claim("ns", "a", vec![exact("gpu", "gpu", 1, &[])])],
        )
        .unwrap();
    s.commit(&out);
    let alloc = allocator();
    let prepared = alloc.prepare(&[claim("ns", "b", vec![exact("gpu", "gpu", 2, &[])])]);
    let existing = s.inventory.node_view(&s.node);
    assert!(
        alloc
            .allocate(&s.inventory, &existing, &s.state, &prepared)
            .is_err()
    );

    let template = builders::slice(
        "nc-1-gpus",
        DRIVER,
        "nodeclaim-1",
        Some("nodeclaim-1"),
        gpus(4),
    );
    s.inventory.add_slices([&template]);
    let planned = s.inventory.node_view(&NodeInfo::new("nodeclaim-1"));
    assert_eq!(planned.device_count(), 4);
    let mut what_if = s.state.clone();
    let mut session = alloc.session(&s.inventory);
    let got = session.allocate(&planned, &what_if, &prepared).unwrap();
    assert_eq!(
        got[0]
            .allocation
            .devices
            .as_ref()
            .unwrap()
            .results
            .as_ref()
            .unwrap()[0]
            .pool,
        "nodeclaim-1"
    );
    for a in &got {
        what_if.commit(&s.inventory, &a.allocation);
    }
    // Two more fit on the planned node, in the what-if state only.
    let more = alloc.prepare(&[claim("ns", "c", vec![exact("gpu", "gpu", 3, &[])])]);
    assert!(session.allocate(&planned, &what_if, &more).is_err());
    assert!(session.allocate(&planned, &s.state, &more).is_ok());
    // The existing node's view does not see the new pool.
    assert_eq!(s.inventory.node_view(&s.node).device_count(), 1);
}

#[test]
fn capacity_requests_on_exclusive_devices_must_fit() {
    let s = setup(&[node_slice(gpus(1))]);
    let fits = claim("ns", "a", vec![cap_request("gpu", Some("40Gi"))]);
    let out = s.run(&allocator(), &[fits]).unwrap();
    // An exclusive device reports no consumed capacity and no share.
    assert_eq!(consumed(&out[0]), (None, false));
    let too_big = claim("ns", "a", vec![cap_request("gpu", Some("100Gi"))]);
    let err = s.run(&allocator(), &[too_big]).unwrap_err();
    assert!(
        matches!(
            err.reason,
            FailureReason::NoMatchingDevice {
                capacity_unfit: 1,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn state_records_devices_it_does_not_know() {
    let inventory = Inventory::from_slices(&[node_slice(gpus(1))]);
    assert!(inventory.find(DRIVER, NODE, "gpu-0").is_some());
    assert!(inventory.find(DRIVER, NODE, "gone").is_none());
    let mut c = claim("ns", "old", vec![]);
    c.status = Some(ResourceClaimStatus {
        allocation: Some(k8s_openapi::api::resource::v1::AllocationResult {
            devices: Some(k8s_openapi::api::resource::v1::DeviceAllocationResult {
                results: Some(vec![
                    k8s_openapi::api::resource::v1::DeviceRequestAllocationResult {
                        request: "r".into(),
                        driver: DRIVER.into(),
                        pool: NODE.into(),
                        device: "gone".into(),
                        ..Default::default()
                    },
                ]),
                config: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let state = AllocationState::from_claims(&inventory, [&c]);
    assert_eq!(state.unknown_devices, vec![format!("{DRIVER}/{NODE}/gone")]);
}

fn all_cap_request(name: &str, memory: &str) -> DeviceRequest {
    let mut r = all_request(name);
    if let Some(e) = r.exactly.as_mut() {
        e.capacity = Some(CapacityRequirements {
            requests: Some(
                [("memory".to_string(), Q(memory.into()))]
                    .into_iter()
                    .collect(),
            ),
        });
    }
    r
}

fn named_shareable(name: &str) -> Device {
    let mut d = shareable(None);
    d.name = name.to_string();
    d
}

/// Upstream (`validateDeviceRequest`, `allocationMode: All` with DRAConsumableCapacity)
/// counts a device in "all" only when `CmpRequestOverCapacity` passes against what is
/// already allocated; a device without room is left out rather than failing the request.
#[test]
fn all_mode_with_consumable_capacity_takes_only_devices_with_room() {
    let mut s = setup(&[node_slice(vec![
        named_shareable("shared-0"),
        named_shareable("shared-1"),
    ])]);
    // 60Gi of shared-0's 80Gi is taken.
    let first = s
        .run(
            &allocator(),
            &[claim("ns", "a", vec![cap_request("gpu", Some("60Gi"))])],
        )
        .unwrap();
    assert_eq!(picked(&first[0]), pairs(&[("gpu", "shared-0")]));
    s.commit(&first);
    // "All" with 40Gi each: shared-0 has no room left, so "all" is shared-1 alone.
    let out = s
        .run(
            &allocator(),
            &[claim("ns", "b", vec![all_cap_request("gpu", "40Gi")])],
        )
        .unwrap();
    assert_eq!(picked(&out[0]), pairs(&[("gpu", "shared-1")]));
    // With room on both, "all" is both.
    let fresh = setup(&[node_slice(vec![
        named_shareable("shared-0"),
        named_shareable("shared-1"),
    ])]);
    let out = fresh
        .run(
            &allocator(),
            &[claim("ns", "b", vec![all_cap_request("gpu", "40Gi")])],
        )
        .unwrap();
    assert_eq!(
        picked(&out[0]),
        pairs(&[("gpu", "shared-0"), ("gpu", "shared-1")])
    );
    // No device with room: nothing to allocate, the request fails.
    assert!(
        s.run(
            &allocator(),
            &[claim("ns", "b", vec![all_cap_request("gpu", "81Gi")])]
        )
        .is_err()
    );
}

/// With DRAConsumableCapacity, an exclusive device whose capacity cannot serve an `All`
/// request's capacity request is not part of "all" either (upstream skips it the same way).
#[test]
fn all_mode_with_consumable_capacity_skips_exclusive_devices_that_are_too_small() {
    let big = builders::with_capacity(builders::device("big"), "memory", "160Gi");
    let s = setup(&[node_slice(vec![gpu("small", "A", 0), big])]);
    let out = s
        .run(
            &allocator(),
            &[claim("ns", "c", vec![all_cap_request("gpu", "100Gi")])],
        )
        .unwrap();
    assert_eq!(picked(&out[0]), pairs(&[("gpu", "big")]));
}

fn with_binding_conditions(mut d: Device) -> Device {
    d.binding_conditions = Some(vec!["Attached".into()]);
    d
}

/// Upstream `GatherPools` (incubating and experimental allocators) puts pools that have a
/// device with binding conditions after every other pool, so that devices which are ready
/// at once are preferred.
#[test]
fn pools_with_binding_conditions_are_searched_last() {
    let a = builders::slice(
        "a",
        DRIVER,
        "a-pool",
        Some(NODE),
        vec![
            with_binding_conditions(gpu("bound", "A", 0)),
            gpu("plain-a", "A", 0),
        ],
    );
    let b = builders::slice(
        "b",
        DRIVER,
        "b-pool",
        Some(NODE),
        vec![gpu("plain-b", "A", 0)],
    );
    let s = setup(&[a, b]);
    let c = claim("ns", "c", vec![exact("gpu", "gpu", 1, &[])]);
    assert_eq!(
        one(std::slice::from_ref(&c), &s),
        pairs(&[("gpu", "plain-b")])
    );
    // Once b-pool is used up, a-pool serves, in its own order.
    let c3 = claim("ns", "c", vec![exact("gpu", "gpu", 3, &[])]);
    assert_eq!(
        one(&[c3], &s),
        pairs(&[("gpu", "plain-b"), ("gpu", "bound"), ("gpu", "plain-a")])
    );
    // The stable allocator (no consumable capacity, binding conditions or list attributes)
    // keeps pools by name; the device with binding conditions is not selectable there.
    let mut stable = Features::all();
    stable.consumable_capacity = false;
    stable.device_binding_conditions = false;
    stable.list_type_attributes = false;
    let out = s.run(&allocator_with(stable), &[c]).unwrap();
    assert_eq!(picked(&out[0]), pairs(&[("gpu", "plain-a")]));
}

/// Upstream tries the next `firstAvailable` subrequest when one needs more than
/// `AllocationResultsMaxSize` devices (`errAllocationResultMaxSizeExceeded`); only the
/// smallest subrequest counts towards the claim's limit (`minDevicesPerClaim`).
#[test]
fn first_available_subrequest_over_the_limit_is_skipped() {
    let s = setup(&[node_slice(gpus(4))]);
    let r = first_available(
        "gpu",
        vec![sub("huge", "gpu", 64, &[]), sub("one", "gpu", 1, &[])],
    );
    assert_eq!(
        one(&[claim("ns", "c", vec![r])], &s),
        pairs(&[("gpu/one", "gpu-0")])
    );
    // Every subrequest over the limit: the claim cannot be allocated.
    let r = first_available(
        "gpu",
        vec![sub("huge", "gpu", 64, &[]), sub("big", "gpu", 40, &[])],
    );
    let err = s
        .run(&allocator(), &[claim("ns", "c", vec![r])])
        .unwrap_err();
    assert!(
        matches!(
            err.reason,
            FailureReason::TooManyResults {
                count: 40,
                limit: 32
            }
        ),
        "{err}"
    );
    // The smallest subrequest plus the fixed requests must fit as well.
    let r = first_available(
        "gpu",
        vec![sub("huge", "gpu", 64, &[]), sub("two", "gpu", 2, &[])],
    );
    let err = s
        .run(
            &allocator(),
            &[claim("ns", "c", vec![exact("fixed", "gpu", 31, &[]), r])],
        )
        .unwrap_err();
    assert!(
        matches!(
            err.reason,
            FailureReason::TooManyResults {
                count: 33,
                limit: 32
            }
        ),
        "{err}"
    );
}

/// Partitions of one counter set with compatibility groups (Kubernetes 1.37): each takes a
/// tenth of the memory, so counters never decide; groups do.
fn grouped_slice() -> ResourceSlice {
    let part = |name: &str, groups: &[&str]| {
        let product = if groups.is_empty() {
            "ungrouped"
        } else {
            "grouped"
        };
        let mut d = gpu(name, product, 0);
        d.consumes_counters = Some(vec![DeviceCounterConsumption {
            compatibility_groups: (!groups.is_empty())
                .then(|| groups.iter().map(|g| g.to_string()).collect()),
            counter_set: "gpu-0-counters".into(),
            counters: [(
                "memory".to_string(),
                Counter {
                    value: Q("8Gi".into()),
                },
            )]
            .into(),
        }]);
        d
    };
    let mut s = node_slice(vec![
        part("a-x", &["x"]),
        part("b-xy", &["x", "y"]),
        part("c-y", &["y"]),
        part("d-none", &[]),
        part("e-none", &[]),
    ]);
    s.spec.shared_counters = Some(vec![CounterSet {
        name: "gpu-0-counters".into(),
        counters: [(
            "memory".to_string(),
            Counter {
                value: Q("80Gi".into()),
            },
        )]
        .into(),
    }]);
    s
}

#[test]
fn devices_of_one_counter_set_are_allocated_together_only_when_their_groups_agree() {
    let mut s = setup(&[grouped_slice()]);
    // a-x and b-xy share x; c-y shares nothing with a-x, the ungrouped ones nothing with any.
    let two = s
        .run(
            &allocator(),
            &[claim("ns", "a", vec![exact("gpu", "gpu", 2, &[])])],
        )
        .expect("two grouped partitions");
    assert_eq!(picked(&two[0]), pairs(&[("gpu", "a-x"), ("gpu", "b-xy")]));
    s.commit(&two);
    // With a-x and b-xy allocated, neither c-y (no group common to all three) nor an
    // ungrouped partition may join them, though the counters have room.
    let err = s
        .run(
            &allocator(),
            &[claim("ns", "b", vec![exact("gpu", "gpu", 1, &[])])],
        )
        .expect_err("no compatible partition left");
    match &err.reason {
        FailureReason::NotEnoughDevices { rejected, .. } => {
            assert_eq!(rejected.counters, 3, "{err}")
        }
        other => panic!("{other:?}"),
    }
    // Released, they hold the set no longer: an ungrouped partition may be allocated again.
    for a in &two {
        s.state.release(&s.inventory, &a.allocation);
    }
    let only_ungrouped = r#"device.attributes["gpu.example.com"].product == "ungrouped""#;
    let after = s
        .run(
            &allocator(),
            &[claim(
                "ns",
                "e",
                vec![exact("gpu", "gpu", 1, &[only_ungrouped])],
            )],
        )
        .expect("an ungrouped partition once the grouped ones are released");
    assert_eq!(picked(&after[0]), pairs(&[("gpu", "d-none")]));
    // On a fresh GPU, no three partitions go together: a-x, b-xy and c-y have no group common
    // to all three, and the ungrouped ones go only with each other (two of them).
    let fresh = setup(&[grouped_slice()]);
    let three = fresh.run(
        &allocator(),
        &[claim("ns", "c", vec![exact("gpu", "gpu", 3, &[])])],
    );
    assert!(three.is_err(), "{three:?}");
    let ungrouped = fresh.run(
        &allocator(),
        &[claim(
            "ns",
            "d",
            vec![exact("gpu", "gpu", 2, &[only_ungrouped])],
        )],
    );
    let ungrouped = ungrouped.expect("the two ungrouped partitions go together");
    assert_eq!(
        picked(&ungrouped[0]),
        pairs(&[("gpu", "d-none"), ("gpu", "e-none")])
    );
}
