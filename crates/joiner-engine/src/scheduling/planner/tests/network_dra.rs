//! Network-attached ResourceSlices (`nodeSelector`, `allNodes`) serving planned nodes.

use joiner_dra::Features;
use joiner_dra::builders;
use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationResult, DeviceRequestAllocationResult, ResourceClaim,
    ResourceClaimStatus, ResourceSlice,
};

use super::*;
use crate::plan::Plan;

const DRIVER: &str = "nic.example.com";
const CLASS: &str = "nic";

/// A slice of `devices` devices of [`DRIVER`] in pool `pool` for the nodes `selector` admits
/// (every node when `None`).
fn network_slice(pool: &str, devices: usize, selector: Option<(&str, &str)>) -> ResourceSlice {
    let list = (0..devices)
        .map(|i| builders::device(&format!("{pool}-{i}")))
        .collect();
    let mut slice = builders::slice(pool, DRIVER, pool, None, list);
    if let Some((key, value)) = selector {
        slice.spec.all_nodes = None;
        slice.spec.node_selector = Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: key.into(),
                    operator: "In".into(),
                    values: Some(vec![value.into()]),
                }]),
                match_fields: None,
            }],
        });
    }
    slice
}

/// `n` pods `<name>-<i>`, each with its own claim for one [`CLASS`] device, with the plan's
/// DRA input built from `slices` and `in_use` claims.
fn network_input(
    name: &str,
    n: usize,
    pools: Vec<PoolInput>,
    slices: Vec<ResourceSlice>,
    in_use: Vec<ResourceClaim>,
) -> SchedulingInput {
    let mut input = input(
        pods(name, n, "  containers: [{name: c, image: x}]\n"),
        pools,
    );
    let mut claims = std::collections::BTreeMap::new();
    let mut pod_claims = Vec::new();
    for i in 0..n {
        let claim_name = format!("{name}-{i}-nic");
        claims.insert(
            format!("default/{claim_name}"),
            builders::claim(
                "default",
                &claim_name,
                vec![builders::exact("nic", CLASS, 1, &[])],
            ),
        );
        pod_claims.push(vec![format!("default/{claim_name}")]);
    }
    input.dra = Some(DraInput {
        features: Features::all(),
        classes: vec![builders::class(
            CLASS,
            &[&format!(r#"device.driver == "{DRIVER}""#)],
        )],
        slices,
        claims,
        in_use,
        pod_claims,
        extended: Default::default(),
        taint_rules: Vec::new(),
    });
    input
}

fn cpu_pool() -> PoolInput {
    pool(
        "general",
        vec![option("m5.large", "1930m", "7Gi", "0", 0.096)],
    )
}

/// The pools of the devices each claim was allocated, by claim.
fn allocated_pools(plan: &Plan) -> Vec<(String, String)> {
    plan.claims
        .iter()
        .flat_map(|c| {
            c.allocation
                .devices
                .iter()
                .flat_map(|d| d.results.iter().flatten())
                .map(|r| (c.claim.clone(), r.pool.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn a_zone_scoped_slice_pins_the_new_node_to_its_zone() {
    let slice = network_slice("nics-b", 2, Some((labels::ZONE, "us-east-1b")));
    let plan = schedule(&network_input(
        "net",
        1,
        vec![cpu_pool()],
        vec![slice],
        vec![],
    ));
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(plan.node_claims.len(), 1);
    assert_eq!(plan.node_claims[0].zone, "us-east-1b");
    assert_eq!(
        allocated_pools(&plan),
        [("default/net-0-nic".to_string(), "nics-b".to_string())]
    );
    assert_eq!(plan.claims[0].node, plan.node_claims[0].name);
}

#[test]
fn network_devices_are_shared_by_every_new_node_of_the_plan() {
    let slice = network_slice("nics", 2, None);
    let plan = schedule(&network_input(
        "net",
        3,
        vec![cpu_pool()],
        vec![slice],
        vec![],
    ));
    assert_eq!(plan.bindings.len(), 2, "{:?}", plan.unschedulable);
    assert_eq!(plan.unschedulable.len(), 1);
    let reason = &plan.unschedulable[0].reason;
    assert!(reason.contains("2 devices match, 1 needed"), "{reason}");
    let mut devices: Vec<String> = plan
        .claims
        .iter()
        .flat_map(|c| {
            c.allocation
                .devices
                .iter()
                .flat_map(|d| d.results.iter().flatten())
        })
        .map(|r| r.device.clone())
        .collect();
    devices.sort();
    assert_eq!(devices, ["nics-0", "nics-1"]);
}

#[test]
fn devices_allocated_in_the_cluster_are_not_free_for_new_nodes() {
    let slice = network_slice("nics", 2, None);
    let mut held = builders::claim("other", "held", vec![builders::exact("nic", CLASS, 1, &[])]);
    held.status = Some(ResourceClaimStatus {
        allocation: Some(AllocationResult {
            devices: Some(DeviceAllocationResult {
                results: Some(vec![DeviceRequestAllocationResult {
                    request: "nic".into(),
                    driver: DRIVER.into(),
                    pool: "nics".into(),
                    device: "nics-0".into(),
                    ..Default::default()
                }]),
                config: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let plan = schedule(&network_input(
        "net",
        2,
        vec![cpu_pool()],
        vec![slice],
        vec![held],
    ));
    assert_eq!(plan.bindings.len(), 1, "{:?}", plan.unschedulable);
    assert_eq!(plan.unschedulable.len(), 1);
    let devices: Vec<String> = plan
        .claims
        .iter()
        .flat_map(|c| {
            c.allocation
                .devices
                .iter()
                .flat_map(|d| d.results.iter().flatten())
        })
        .map(|r| r.device.clone())
        .collect();
    assert_eq!(devices, ["nics-1"]);
}

#[test]
fn a_selector_on_a_template_label_chooses_the_nodepool_that_sets_it() {
    let slice = network_slice("team-nics", 1, Some(("team", "ml")));
    let mut ml = pool("ml", vec![option("m5.large", "1930m", "7Gi", "0", 0.5)]);
    ml.labels.insert("team".into(), "ml".into());
    // The cheaper pool has no such label: its nodes would not see the devices.
    let plan = schedule(&network_input(
        "net",
        1,
        vec![cpu_pool(), ml],
        vec![slice],
        vec![],
    ));
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(plan.node_claims.len(), 1);
    assert_eq!(plan.node_claims[0].node_pool, "ml");
}

#[test]
fn a_selector_no_new_node_matches_is_named_in_the_reason() {
    let slice = network_slice("nics-west", 2, Some((labels::ZONE, "us-west-2a")));
    let plan = schedule(&network_input(
        "net",
        1,
        vec![cpu_pool()],
        vec![slice],
        vec![],
    ));
    assert!(plan.node_claims.is_empty());
    assert_eq!(plan.unschedulable.len(), 1);
    let reason = &plan.unschedulable[0].reason;
    assert!(
        reason.contains(
            "ResourceSlice nics-west (driver nic.example.com) serves only nodes with \
             topology.kubernetes.io/zone In [us-west-2a]"
        ),
        "{reason}"
    );
    assert!(!reason.contains("publishes no DRA devices"), "{reason}");
}

#[test]
fn without_network_slices_a_type_without_devices_still_says_so() {
    let plan = schedule(&network_input("net", 1, vec![cpu_pool()], vec![], vec![]));
    assert_eq!(plan.unschedulable.len(), 1);
    let reason = &plan.unschedulable[0].reason;
    assert!(
        reason.contains("publishes no DRA devices Joiner knows of"),
        "{reason}"
    );
}

#[test]
fn a_device_an_existing_node_takes_is_not_free_for_a_new_node() {
    // Room for one pod only: the second needs a new node, and the slice's one other device.
    let node = ExistingNode {
        name: "node-a".into(),
        labels: Labels::from([("kubernetes.io/arch".into(), "amd64".into())]),
        taints: vec![],
        allocatable: resources(&[("cpu", "1"), ("memory", "4Gi"), ("pods", "1")]),
        capacity: ResourceList::new(),
        node_pool: None,
        price: None,
        do_not_disrupt: false,
        consolidation_candidate: true,
        node_claim: None,
        in_flight: false,
    };
    let mut inp = network_input(
        "net",
        3,
        vec![cpu_pool()],
        vec![network_slice("nics", 2, None)],
        vec![],
    );
    inp.nodes.push(node);
    let plan = schedule(&inp);
    assert_eq!(plan.bindings.len(), 2, "{:?}", plan.unschedulable);
    assert_eq!(
        plan.bindings.iter().filter(|b| b.node == "node-a").count(),
        1
    );
    assert_eq!(plan.node_claims.len(), 1);
    assert_eq!(plan.unschedulable.len(), 1);
    let mut devices: Vec<(String, String)> = plan
        .claims
        .iter()
        .flat_map(|c| {
            c.allocation
                .devices
                .iter()
                .flat_map(|d| d.results.iter().flatten())
                .map(|r| (c.node.clone(), r.device.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    devices.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(devices.len(), 2);
    assert_ne!(
        devices[0].0, devices[1].0,
        "one device per node: {devices:?}"
    );
}
