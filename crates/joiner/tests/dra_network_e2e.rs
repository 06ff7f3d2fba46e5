//! End-to-end: network-attached ResourceSlices (`nodeSelector`, `allNodes`) serve nodes that do
//! not exist yet, through the built `joiner` binary, with the `dra-specific-gpu` example's
//! NodePool and values.

use std::path::{Path, PathBuf};
use std::process::Command;

use joiner_test_support::example_dir;

const DRIVER: &str = "nic.example.com";

/// The example's NodePool, EC2NodeClass and values with `workload` as the only other file, in
/// a fresh directory.
fn scenario(name: &str, workload: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("joiner-dra-network-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let example = example_dir("dra-specific-gpu");
    for file in ["nodepool.yaml", "values.yaml"] {
        std::fs::copy(example.join(file), dir.join(file)).unwrap();
    }
    std::fs::write(dir.join("workload.yaml"), workload).unwrap();
    dir
}

fn plan(dir: &Path) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["plan", "-o", "json", "-f"])
        .arg(dir)
        .arg("--values")
        .arg(dir.join("values.yaml"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A DeviceClass of [`DRIVER`], a slice named `slice` of `devices` devices whose placement is
/// `placement` (the spec's `allNodes` or `nodeSelector` lines), and `pods` pods each with its
/// own claim for one device.
fn workload(slice: &str, devices: usize, placement: &str, pods: usize) -> String {
    let mut out = format!(
        r#"apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: nic}}
spec:
  selectors:
  - cel: {{expression: 'device.driver == "{DRIVER}"'}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: {slice}}}
spec:
  driver: {DRIVER}
  pool: {{name: {slice}, generation: 1, resourceSliceCount: 1}}
{placement}  devices:
"#
    );
    for i in 0..devices {
        out.push_str(&format!("  - {{name: nic-{i}}}\n"));
    }
    out.push_str(
        r#"---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {namespace: default, name: one-nic}
spec:
  spec:
    devices:
      requests:
      - {name: nic, exactly: {deviceClassName: nic}}
"#,
    );
    for i in 0..pods {
        out.push_str(&format!(
            r#"---
apiVersion: v1
kind: Pod
metadata: {{namespace: default, name: net-{i}}}
spec:
  tolerations:
  - {{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}
  resourceClaims:
  - {{name: nic, resourceClaimTemplateName: one-nic}}
  containers:
  - name: app
    image: busybox
    resources: {{claims: [{{name: nic}}]}}
"#
        ));
    }
    out
}

fn zone_selector(zone: &str) -> String {
    format!(
        "  nodeSelector:\n    nodeSelectorTerms:\n    - matchExpressions:\n      - {{key: topology.kubernetes.io/zone, operator: In, values: [{zone}]}}\n"
    )
}

fn unschedulable(p: &serde_json::Value) -> Vec<(String, String)> {
    p["unschedulable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["pod"].as_str().unwrap_or_default().to_string(),
                u["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// A slice for zone us-east-1b only, of a driver no instance type publishes: the one NodeClaim
/// is pinned to us-east-1b and the claim is allocated from the slice's pool.
#[test]
fn a_zone_scoped_slice_pins_the_node_claim_to_its_zone() {
    let p = plan(&scenario(
        "zone",
        &workload("nics-1b", 2, &zone_selector("us-east-1b"), 1),
    ));
    assert!(unschedulable(&p).is_empty(), "{p}");
    let claims = p["nodeClaims"].as_array().unwrap();
    assert_eq!(claims.len(), 1, "{p}");
    assert_eq!(claims[0]["zone"], "us-east-1b", "{p}");
    assert_eq!(
        claims[0]["labels"]["topology.kubernetes.io/zone"],
        "us-east-1b"
    );
    let allocations = p["claims"].as_array().unwrap();
    assert_eq!(allocations.len(), 1, "{p}");
    assert_eq!(allocations[0]["claim"], "default/net-0-nic-*");
    assert_eq!(allocations[0]["node"], claims[0]["name"]);
    let results = allocations[0]["allocation"]["devices"]["results"]
        .as_array()
        .unwrap();
    assert_eq!(results.len(), 1, "{p}");
    assert_eq!(results[0]["driver"], DRIVER);
    assert_eq!(results[0]["pool"], "nics-1b");
}

/// An `allNodes` slice of 2 devices and 3 pods that each need one to themselves: 2 are
/// planned, the third is unschedulable and its reason says the devices are taken.
#[test]
fn devices_of_an_all_nodes_slice_are_shared_by_the_whole_plan() {
    let p = plan(&scenario(
        "all-nodes",
        &workload("nics", 2, "  allNodes: true\n", 3),
    ));
    let bindings = p["bindings"].as_array().unwrap();
    assert_eq!(bindings.len(), 2, "{p}");
    let stuck = unschedulable(&p);
    assert_eq!(stuck.len(), 1, "{p}");
    assert!(
        stuck[0].1.contains("2 devices match, 1 needed"),
        "{}",
        stuck[0].1
    );
    let mut devices: Vec<String> = p["claims"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| {
            c["allocation"]["devices"]["results"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|r| {
            format!(
                "{}/{}",
                r["pool"].as_str().unwrap_or(""),
                r["device"].as_str().unwrap_or("")
            )
        })
        .collect();
    devices.sort();
    assert_eq!(devices, ["nics/nic-0", "nics/nic-1"], "{p}");
}

/// A slice whose selector reads a label no NodePool gives its nodes: nothing is launched and
/// the reason names the slice and the selector it needs.
#[test]
fn a_slice_no_new_node_matches_is_named_in_the_reason() {
    let placement = "  nodeSelector:\n    nodeSelectorTerms:\n    - matchExpressions:\n      - {key: example.com/rack, operator: In, values: [r1]}\n";
    let p = plan(&scenario(
        "no-match",
        &workload("rack-nics", 2, placement, 1),
    ));
    assert!(p["nodeClaims"].as_array().unwrap().is_empty(), "{p}");
    let stuck = unschedulable(&p);
    assert_eq!(stuck.len(), 1, "{p}");
    let reason = &stuck[0].1;
    assert!(
        reason.contains(
            "ResourceSlice rack-nics (driver nic.example.com) serves only nodes with example.com/rack In [r1]"
        ),
        "{reason}"
    );
}
