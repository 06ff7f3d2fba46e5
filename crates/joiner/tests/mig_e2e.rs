//! End-to-end: MIG before launch. The `mig-p4d-lab` example's NodePool labels its nodes
//! `nvidia.com/mig.config: all-1g.5gb`, and the device plugin runs with `migStrategy: mixed`:
//! `joiner plan` must know before launch that a p4d.24xlarge advertises 56 `1g.5gb` instances,
//! and refuse, saying why, a layout or a strategy that cannot be served. With the MIG manager's
//! mig-parted ConfigMap in the input, the label names one of its configs instead.

use std::process::{Command, Output};

use joiner_test_support::{Scratch, example_dir};

fn joiner(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(args)
        .output()
        .expect("the joiner binary runs")
}

/// The example's files, each changed by `edit`, in a scratch directory.
fn example_with(edit: impl Fn(&str, String) -> String) -> Scratch {
    let scratch = Scratch::new("mig");
    let dir = example_dir("mig-p4d-lab");
    for file in [
        "nodepool.yaml",
        "device-plugin-config.yaml",
        "deployment.yaml",
    ] {
        let text = std::fs::read_to_string(dir.join(file)).expect("example file");
        scratch.write(file, &edit(file, text));
    }
    scratch
}

fn plan_of(dir: &str) -> (serde_json::Value, String) {
    let out = joiner(&["plan", "-o", "json", "-f", dir]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    (
        serde_json::from_slice(&out.stdout).expect("plan output is JSON"),
        stderr,
    )
}

#[test]
fn fifty_six_mig_slices_fit_one_p4d_node() {
    let dir = example_dir("mig-p4d-lab").display().to_string();
    let (plan, _) = plan_of(&dir);
    let claims = plan["nodeClaims"].as_array().expect("claims");
    assert_eq!(claims.len(), 1, "{claims:#?}");
    let c = &claims[0];
    assert_eq!(c["instanceType"], "p4d.24xlarge");
    assert_eq!(c["nodePool"], "mig-lab");
    assert_eq!(c["resources"]["allocatable"]["nvidia.com/mig-1g.5gb"], "56");
    assert!(c["resources"]["allocatable"]["nvidia.com/gpu"].is_null());
    assert_eq!(c["labels"]["nvidia.com/mig.strategy"], "mixed");
    assert_eq!(c["pods"].as_array().map(Vec::len), Some(56));
    assert_eq!(plan["unschedulable"].as_array().map(Vec::len), Some(0));
}

/// `joiner plan` refuses input it cannot predict, naming the file, the NodePool and the label.
fn refused(dir: &Scratch) -> String {
    let out = joiner(&["plan", "-f", &dir.path().display().to_string()]);
    assert!(!out.status.success(), "planned what it cannot predict");
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn a_layout_or_strategy_the_node_cannot_serve_is_refused_with_why() {
    // The device plugin ignores MIG: the split GPUs advertise nothing.
    let none = example_with(|file, text| {
        if file == "device-plugin-config.yaml" {
            text.replace("migStrategy: mixed", "migStrategy: none")
        } else {
            text
        }
    });
    let stderr = refused(&none);
    assert!(
        stderr.contains("nodepool.yaml")
            && stderr
                .contains("NodePool/mig-lab: spec.template.metadata.labels[nvidia.com/mig.config]")
            && stderr.contains("set flags.migStrategy to mixed or single"),
        "{stderr}"
    );
    // An A100-80GB profile on the 40GB A100s of a p4d.
    let other = example_with(|file, text| {
        if file == "nodepool.yaml" {
            text.replace("all-1g.5gb", "all-2g.20gb")
        } else {
            text
        }
    });
    let stderr = refused(&other);
    assert!(
        stderr.contains(r#""all-2g.20gb" is not one of the GPU operator's default MIG configs for the A100-SXM4-40GB"#)
            && stderr.contains("1g.5gb, 1g.5gb.me, 1g.10gb"),
        "{stderr}"
    );
}

/// NVIDIA's DRA quickstart config (`demo/specs/quickstart/mig-parted-config.yaml`) as the GPU
/// operator's ConfigMap, as `examples/dra-mig-quickstart` holds it: the first four GPUs split,
/// the last four whole.
fn mig_parted() -> String {
    std::fs::read_to_string(example_dir("dra-mig-quickstart").join("mig-parted-config.yaml"))
        .expect("the example's mig-parted ConfigMap")
}

#[test]
fn the_mig_managers_config_map_names_the_layouts() {
    let dir = example_with(|file, text| {
        if file == "nodepool.yaml" {
            text.replace("all-1g.5gb", "half-balanced")
        } else {
            text
        }
    });
    dir.write("mig-parted-config.yaml", &mig_parted());
    let (plan, _) = plan_of(&dir.path().display().to_string());
    let claims = plan["nodeClaims"].as_array().expect("claims");
    // Eight 1g.5gb instances a node: seven nodes for 56 pods.
    assert_eq!(claims.len(), 7, "{claims:#?}");
    let allocatable = &claims[0]["resources"]["allocatable"];
    assert_eq!(allocatable["nvidia.com/mig-1g.5gb"], "8");
    assert_eq!(allocatable["nvidia.com/mig-2g.10gb"], "4");
    assert_eq!(allocatable["nvidia.com/mig-3g.20gb"], "4");
    assert_eq!(allocatable["nvidia.com/gpu"], "4", "the whole GPUs");

    // With the ConfigMap there, the operator's defaults are not: the example's label is refused.
    let defaults = example_with(|_, text| text);
    defaults.write("mig-parted-config.yaml", &mig_parted());
    let stderr = refused(&defaults);
    assert!(
        stderr.contains(r#""all-1g.5gb" is not a config of the MIG manager's ConfigMap/gpu-operator/default-mig-parted-config (it has all-disabled, half-balanced)"#),
        "{stderr}"
    );
    // A ConfigMap mig-parted would not read is refused naming its key.
    dir.write(
        "mig-parted-config.yaml",
        &mig_parted().replace("version: v1", "version: v2"),
    );
    let stderr = refused(&dir);
    assert!(
        stderr.contains("mig-parted-config.yaml")
            && stderr.contains("ConfigMap/gpu-operator/default-mig-parted-config: data[config.yaml]: version \"v2\""),
        "{stderr}"
    );
}

#[test]
fn a_pod_asking_for_a_profile_the_layout_lacks_is_told_which_config_makes_it() {
    let dir = example_with(|file, text| {
        if file == "deployment.yaml" {
            text.replace("nvidia.com/mig-1g.5gb", "nvidia.com/mig-2g.10gb")
        } else {
            text
        }
    });
    let (plan, _) = plan_of(&dir.path().display().to_string());
    let waiting = plan["unschedulable"].as_array().expect("unschedulable");
    assert_eq!(waiting.len(), 56);
    let reason = waiting[0]["reason"].as_str().expect("a reason");
    assert!(
        reason.contains("p4d.24xlarge: insufficient nvidia.com/mig-2g.10gb")
            && reason.contains("A100-SXM4-40GB GPUs take up to 3 2g.10gb each")
            && reason.contains("(all-2g.10gb)"),
        "{reason}"
    );
}

#[test]
fn node_pool_limits_count_physical_gpus_not_mig_instances() {
    // 70 notebooks would need two p4d.24xlarge (56 instances each); a limit of 8 GPUs, one
    // node's physical GPUs, allows one.
    let dir = example_with(|file, text| match file {
        "nodepool.yaml" => text.replace(
            "spec:\n  template:\n",
            "spec:\n  limits:\n    nvidia.com/gpu: 8\n  template:\n",
        ),
        "deployment.yaml" => text.replace("replicas: 56", "replicas: 70"),
        _ => text,
    });
    let (plan, _) = plan_of(&dir.path().display().to_string());
    assert_eq!(plan["nodeClaims"].as_array().map(Vec::len), Some(1));
    assert_eq!(plan["unschedulable"].as_array().map(Vec::len), Some(14));
}
