//! End-to-end: the exact pass through the built `joiner` binary on the example
//! `exact-packing-gpu-lab`, and a variant whose pods have topology spread.

use std::path::Path;
use std::process::{Command, Output};

use joiner_test_support::example_dir;

fn joiner(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "joiner {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn plan_json(dir: &Path) -> serde_json::Value {
    let dir = dir.display().to_string();
    serde_json::from_slice(&joiner(&["plan", "-o", "json", "-f", &dir]).stdout).unwrap()
}

#[test]
fn the_gpu_lab_is_packed_onto_one_node_for_less_than_the_greedy_plan() {
    let dir = example_dir("exact-packing-gpu-lab");
    let plan = plan_json(&dir);
    let claims = plan["nodeClaims"].as_array().unwrap();
    assert_eq!(claims.len(), 1, "{claims:?}");
    assert_eq!(claims[0]["instanceType"], "g4dn.2xlarge");
    assert_eq!(claims[0]["pods"].as_array().unwrap().len(), 4);
    assert_eq!(plan["totalPricePerHour"], 0.752);
    let packing = plan["packing"].as_array().unwrap();
    assert_eq!(packing.len(), 1);
    assert_eq!(packing[0]["solver"], "exact");
    assert_eq!(packing[0]["greedyPricePerHour"], 1.052);
    assert_eq!(packing[0]["pricePerHour"], 0.752);
    assert_eq!(packing[0]["nodeClaims"], serde_json::json!(["gpu-lab-0"]));
    assert!(packing[0].get("reason").is_none());

    let d = dir.display().to_string();
    let text = String::from_utf8(joiner(&["plan", "-f", &d]).stdout).unwrap();
    assert!(
        text.contains("gpu-lab: 4 pod(s) on 1 node(s), solved exactly: 0.752 USD/h, 0.3 USD/h less than the greedy packing (1.052 USD/h)"),
        "{text}"
    );
    let explained =
        String::from_utf8(joiner(&["explain", "pod", "lab/notebook-0", "-f", &d]).stdout).unwrap();
    assert!(
        explained.contains("Packing: gpu-lab: 4 pod(s) on 1 node(s), solved exactly"),
        "{explained}"
    );
}

#[test]
fn pods_with_topology_spread_are_packed_greedily_and_the_plan_says_why() {
    let src = example_dir("exact-packing-gpu-lab");
    let dir = std::env::temp_dir().join(format!("joiner-packing-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in [
        "nodepool.yaml",
        "device-plugin-config.yaml",
        "workloads.yaml",
    ] {
        let mut text = std::fs::read_to_string(src.join(name)).unwrap();
        if name == "workloads.yaml" {
            // Notebooks spread one per node.
            text = text.replacen(
                "      tolerations:",
                "      topologySpreadConstraints:\n        - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: notebook}}}\n      tolerations:",
                1,
            );
        }
        std::fs::write(dir.join(name), text).unwrap();
    }
    let plan = plan_json(&dir);
    let packing = plan["packing"].as_array().unwrap();
    let constrained = packing
        .iter()
        .find(|b| b["reason"] == "pod-constraints")
        .unwrap_or_else(|| panic!("{packing:?}"));
    assert_eq!(constrained["solver"], "greedy");
    // The notebooks, and the inference pod that shares a node with one of them: a NodeClaim
    // holding any constrained pod keeps its greedy packing whole.
    assert_eq!(constrained["pods"], 4);
    // Three notebooks, three nodes.
    let hosts: std::collections::BTreeSet<&str> = plan["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["pod"].as_str().unwrap().starts_with("lab/notebook"))
        .map(|b| b["node"].as_str().unwrap())
        .collect();
    assert_eq!(hosts.len(), 3);
    let text =
        String::from_utf8(joiner(&["plan", "-f", &dir.display().to_string()]).stdout).unwrap();
    assert!(
        text.contains("packed greedily: pods with topology spread, pod affinity or DRA claims are placed one by one"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
