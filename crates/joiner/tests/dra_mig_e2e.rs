//! End-to-end: MIG devices for DRA claims. NVIDIA's DRA quickstart `gpu-test4` asks, per pod,
//! for two `1g.5gb`, a `2g.10gb` and a `3g.20gb` on one GPU (`matchAttribute` on `parentUUID`).
//! The `dra-mig-quickstart` example serves it from a NodePool whose GPUs the MIG manager splits
//! (static MIG); the same pods plan onto dynamic MIG when the EC2NodeClass enables it, and a
//! claim for more instances than one GPU holds waits.

use std::collections::BTreeSet;
use std::process::{Command, Output};

use joiner_test_support::{Scratch, example_dir};
use serde_json::Value;

fn joiner(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(args)
        .output()
        .expect("the joiner binary runs")
}

fn plan_of(dir: &str) -> Value {
    let values = format!("{dir}/values.yaml");
    let out = joiner(&["plan", "-o", "json", "-f", dir, "--values", &values]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("plan output is JSON")
}

/// The example, with `edit` applied to each file and `mig-parted-config.yaml` kept or dropped.
fn example_with(keep_config_map: bool, edit: impl Fn(&str, String) -> String) -> Scratch {
    let scratch = Scratch::new("dra-mig");
    let dir = example_dir("dra-mig-quickstart");
    for file in [
        "values.yaml",
        "nodepool.yaml",
        "gpu-test4.yaml",
        "mig-parted-config.yaml",
    ] {
        if file == "mig-parted-config.yaml" && !keep_config_map {
            continue;
        }
        let text = std::fs::read_to_string(dir.join(file)).expect("example file");
        scratch.write(file, &edit(file, text));
    }
    scratch
}

/// Per claim: its node, and the GPUs (`gpu-<i>` of the device names) its devices are on.
fn claim_gpus(plan: &Value) -> Vec<(String, BTreeSet<String>)> {
    plan["claims"]
        .as_array()
        .expect("claims")
        .iter()
        .map(|c| {
            let gpus = c["allocation"]["devices"]["results"]
                .as_array()
                .expect("results")
                .iter()
                .map(|r| {
                    let device = r["device"].as_str().expect("device");
                    assert!(device.contains("-mig-"), "{device} is not a MIG device");
                    device.split("-mig-").next().unwrap_or_default().to_string()
                })
                .collect();
            (c["node"].as_str().unwrap_or_default().to_string(), gpus)
        })
        .collect()
}

#[test]
fn gpu_test4_plans_onto_gpus_the_mig_manager_splits() {
    let plan = plan_of(&example_dir("dra-mig-quickstart").display().to_string());
    let claims = plan["nodeClaims"].as_array().expect("node claims");
    assert_eq!(claims.len(), 1, "{claims:#?}");
    assert_eq!(claims[0]["instanceType"], "p4d.24xlarge");
    assert_eq!(plan["unschedulable"].as_array().map(Vec::len), Some(0));
    // half-balanced splits GPUs 0 to 3: one pod on each, its four devices on that one GPU.
    let gpus = claim_gpus(&plan);
    assert_eq!(gpus.len(), 4);
    let mut used = BTreeSet::new();
    for (_, on) in &gpus {
        assert_eq!(on.len(), 1, "a pod's MIG devices span GPUs: {on:?}");
        used.extend(on.iter().cloned());
    }
    assert_eq!(
        used,
        BTreeSet::from(["gpu-0", "gpu-1", "gpu-2", "gpu-3"].map(String::from))
    );
}

#[test]
fn a_fifth_pod_needs_a_second_node_when_only_four_gpus_are_split() {
    let dir = example_with(true, |file, text| {
        if file == "gpu-test4.yaml" {
            text.replace("replicas: 4", "replicas: 5")
        } else {
            text
        }
    });
    let plan = plan_of(&dir.path().display().to_string());
    assert_eq!(plan["nodeClaims"].as_array().map(Vec::len), Some(2));
}

/// The example's NodePool with dynamic MIG on its class and no MIG manager config.
fn dynamic(edit_claims: impl Fn(String) -> String) -> Scratch {
    example_with(false, move |file, text| {
        match file {
        "nodepool.yaml" => text
            .replace(
                "  name: mig\nspec:\n  role",
                "  name: mig\n  annotations:\n    joiner.dev/nvidia-dynamic-mig: \"true\"\nspec:\n  role",
            )
            .replace("        nvidia.com/mig.config: half-balanced\n", "        joiner.dev/example: dynamic\n"),
        "gpu-test4.yaml" => edit_claims(text),
        _ => text,
    }
    })
}

#[test]
fn dynamic_mig_fits_the_layout_each_pod_asks_for_on_every_gpu() {
    let dir = dynamic(|text| text.replace("replicas: 4", "replicas: 9"));
    let plan = plan_of(&dir.path().display().to_string());
    // Every GPU of a p4d can take one pod's 1g+1g+2g+3g: eight a node, the ninth on another.
    assert_eq!(plan["nodeClaims"].as_array().map(Vec::len), Some(2));
    let gpus = claim_gpus(&plan);
    let first_node: BTreeSet<&String> = gpus
        .iter()
        .filter(|(node, _)| node == "mig-0")
        .flat_map(|(_, on)| on)
        .collect();
    assert_eq!(first_node.len(), 8, "{gpus:?}");
}

/// One pod whose claim asks for `count` 1g.5gb instances of one GPU.
fn slices_of_one_gpu(count: u32) -> String {
    format!(
        r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{namespace: default, name: slices}}
spec:
  devices:
    requests:
    - name: slices
      exactly:
        deviceClassName: mig.nvidia.com
        allocationMode: ExactCount
        count: {count}
        selectors:
        - cel: {{expression: "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'"}}
    constraints:
    - matchAttribute: gpu.nvidia.com/parentUUID
---
apiVersion: v1
kind: Pod
metadata: {{namespace: default, name: notebook}}
spec:
  resourceClaims: [{{name: slices, resourceClaimName: slices}}]
  containers:
  - name: main
    image: ubuntu:22.04
    resources: {{claims: [{{name: slices}}]}}
  tolerations: [{{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}]
"#
    )
}

#[test]
fn dynamic_mig_never_promises_more_instances_than_one_gpu_holds() {
    // An A100-40GB has seven 1g.5gb placements: seven on one GPU fit, eight do not.
    let fits = plan_of(
        &dynamic(|_| slices_of_one_gpu(7))
            .path()
            .display()
            .to_string(),
    );
    assert_eq!(fits["unschedulable"].as_array().map(Vec::len), Some(0));
    assert_eq!(claim_gpus(&fits)[0].1.len(), 1);
    let too_many = plan_of(
        &dynamic(|_| slices_of_one_gpu(8))
            .path()
            .display()
            .to_string(),
    );
    let waiting = too_many["unschedulable"].as_array().expect("unschedulable");
    assert_eq!(waiting.len(), 1, "{too_many:#}");
    assert_eq!(too_many["nodeClaims"].as_array().map(Vec::len), Some(0));
}

#[test]
fn simulated_mig_nodes_publish_the_devices_predicted_for_them() {
    // If the simulated node published whole GPUs, no pod's mig.nvidia.com claim could be
    // allocated there and the pods would still be pending at the end; if the scheduler did not
    // record the allocations, the fifth pod would reuse a held GPU's instances.
    let dir = example_dir("dra-mig-quickstart").display().to_string();
    let out = joiner(&[
        "simulate",
        "-f",
        &dir,
        "--values",
        &format!("{dir}/values.yaml"),
        "--scenario",
        &format!("{dir}/scenario.yaml"),
        "-o",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: Value =
        serde_json::from_str(stdout.lines().last().expect("a summary")).expect("JSON summary");
    let summary = &summary["summary"];
    assert_eq!(summary["podsScheduled"], 5, "{summary:#}");
    assert_eq!(summary["podsStillPending"], 0, "{summary:#}");
    // The fifth pod finds the four split GPUs' instances held by the first four's claims.
    assert_eq!(summary["peakNodes"], 2, "{summary:#}");
    assert_eq!(summary["finalNodes"], 1, "{summary:#}");
}
