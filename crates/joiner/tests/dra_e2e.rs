//! End-to-end: the DRA scenarios from the examples, and the variants their EXPECTED.md names,
//! through the built `joiner` binary.

use std::path::{Path, PathBuf};
use std::process::Command;

use joiner_test_support::example_dir;

/// A copy of an example in a fresh directory, with `edit` applied to one file's text.
fn variant(name: &str, file: &str, edit: impl Fn(&str) -> String) -> PathBuf {
    // Tests run in parallel: every variant gets a directory of its own.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir =
        std::env::temp_dir().join(format!("joiner-dra-e2e-{}-{n}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(example_dir(name)).unwrap() {
        let path = entry.unwrap().path();
        let fname = path.file_name().unwrap().to_string_lossy().to_string();
        if fname.ends_with(".yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let text = if fname == file { edit(&text) } else { text };
            std::fs::write(dir.join(&fname), text).unwrap();
        }
    }
    dir
}

fn plan(dir: &Path, with_values: bool) -> serde_json::Value {
    let mut args = vec![
        "plan".to_string(),
        "-o".into(),
        "json".into(),
        "-f".into(),
        dir.display().to_string(),
    ];
    if with_values {
        args.extend([
            "--values".into(),
            dir.join("values.yaml").display().to_string(),
        ]);
    }
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn claims(plan: &serde_json::Value) -> &Vec<serde_json::Value> {
    plan["nodeClaims"].as_array().unwrap()
}

fn unschedulable_reason(plan: &serde_json::Value) -> String {
    let u = plan["unschedulable"].as_array().unwrap();
    assert_eq!(u.len(), 1, "{u:?}");
    u[0]["reason"].as_str().unwrap().to_string()
}

/// (node, driver, device) of every allocated device.
fn devices(plan: &serde_json::Value) -> Vec<(String, String, String)> {
    plan["claims"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .flat_map(|c| {
                    let node = c["node"].as_str().unwrap().to_string();
                    c["allocation"]["devices"]["results"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(move |r| {
                            (
                                node.clone(),
                                r["driver"].as_str().unwrap().to_string(),
                                r["device"].as_str().unwrap().to_string(),
                            )
                        })
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn specific_gpu_launches_the_cheapest_type_with_such_a_gpu() {
    let p = plan(&example_dir("dra-specific-gpu"), true);
    assert_eq!(claims(&p).len(), 1);
    assert_eq!(claims(&p)[0]["instanceType"], "p5en.48xlarge");
    assert_eq!(claims(&p)[0]["nodePool"], "gpu-dra");
    assert_eq!(claims(&p)[0]["pricePerHour"], 63.296);
    assert_eq!(
        claims(&p)[0]["annotations"]["karpenter.sh/requested-dra-drivers"],
        "gpu.nvidia.com"
    );
    assert_eq!(p["claims"][0]["claim"], "default/inference-gpu-*");
    let d = devices(&p);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].1, "gpu.nvidia.com");
    assert!(p["unschedulable"].as_array().unwrap().is_empty());
}

#[test]
fn specific_gpu_without_dra_is_unschedulable_and_says_why() {
    let p = plan(&example_dir("dra-specific-gpu"), false);
    assert!(claims(&p).is_empty());
    assert!(unschedulable_reason(&p).contains("DRA support is off"));
}

#[test]
fn sixteen_such_gpus_exist_on_no_instance_type() {
    let dir = variant("dra-specific-gpu", "workload.yaml", |t| {
        t.replace("count: 1\n", "count: 16\n")
    });
    let p = plan(&dir, true);
    assert!(claims(&p).is_empty());
    let reason = unschedulable_reason(&p);
    assert!(reason.contains("16 needed"), "{reason}");
    assert!(reason.contains("p5en.48xlarge"), "{reason}");
}

#[test]
fn gpu_and_efa_on_one_pcie_root() {
    let p = plan(&example_dir("dra-gpu-efa-aligned"), true);
    assert_eq!(claims(&p).len(), 1);
    assert_eq!(claims(&p)[0]["instanceType"], "p5.4xlarge");
    assert_eq!(claims(&p)[0]["pricePerHour"], 6.88);
    assert_eq!(p["claims"][0]["claim"], "default/trainer-devices-*");
    let drivers: std::collections::BTreeSet<String> =
        devices(&p).into_iter().map(|d| d.1).collect();
    assert_eq!(
        drivers.into_iter().collect::<Vec<_>>(),
        vec!["dra.net", "gpu.nvidia.com"]
    );
    assert_eq!(
        claims(&p)[0]["annotations"]["karpenter.sh/requested-dra-drivers"],
        "dra.net,gpu.nvidia.com"
    );
}

#[test]
fn gpu_and_efa_alignment_fails_on_g6_and_names_the_constraint() {
    let dir = variant("dra-gpu-efa-aligned", "nodepool.yaml", |t| {
        t.replace(
            r#"["g6", "g6e", "p5", "p5en", "p6-b200"]"#,
            r#"["g6", "g6e"]"#,
        )
    });
    let p = plan(&dir, true);
    assert!(claims(&p).is_empty());
    let reason = unschedulable_reason(&p);
    assert!(
        reason.contains("matchAttribute") && reason.contains("resource.kubernetes.io/pcieRoot"),
        "{reason}"
    );
}

#[test]
fn shared_gpus_four_claims_each_on_two_small_nodes() {
    let p = plan(&example_dir("dra-shared-gpu"), true);
    assert_eq!(claims(&p).len(), 2);
    for c in claims(&p) {
        assert_eq!(c["instanceType"], "g6.xlarge");
        assert_eq!(c["pods"].as_array().unwrap().len(), 4);
    }
    assert_eq!(p["totalPricePerHour"], 1.6096);
    let d = devices(&p);
    assert_eq!(d.len(), 8);
    let gpus: std::collections::BTreeSet<(String, String)> = d
        .iter()
        .map(|(n, _, dev)| (n.clone(), dev.clone()))
        .collect();
    assert_eq!(gpus.len(), 2, "two GPUs serve all eight claims: {d:?}");
    assert!(p["claims"].as_array().unwrap().iter().all(|c| {
        c["claim"]
            .as_str()
            .unwrap()
            .starts_with("default/shared-inference-")
    }));
}

#[test]
fn without_sharing_each_gpu_serves_one_claim() {
    let dir = variant("dra-shared-gpu", "nodeclass-sharing.yaml", |t| {
        t.replace(
            "karpenter.k8s.aws/nvidia-consumable-capacity: \"4\"",
            "joiner.dev/comment: none",
        )
    });
    let gpus: std::collections::BTreeSet<(String, String)> = devices(&plan(&dir, true))
        .into_iter()
        .map(|(n, _, d)| (n, d))
        .collect();
    assert_eq!(gpus.len(), 8);
}

#[test]
fn memory_sharing_with_claims_that_ask_no_memory_takes_whole_gpus() {
    let dir = variant("dra-shared-gpu", "nodeclass-sharing.yaml", |t| {
        t.replace(
            "nvidia-consumable-capacity: \"4\"",
            "nvidia-consumable-capacity: \"memory\"",
        )
    });
    let gpus: std::collections::BTreeSet<(String, String)> = devices(&plan(&dir, true))
        .into_iter()
        .map(|(n, _, d)| (n, d))
        .collect();
    assert_eq!(gpus.len(), 8);
}

#[test]
fn a_bad_sharing_annotation_is_reported_and_treated_as_disabled() {
    let dir = variant("dra-shared-gpu", "nodeclass-sharing.yaml", |t| {
        t.replace(
            "nvidia-consumable-capacity: \"4\"",
            "nvidia-consumable-capacity: \"lots\"",
        )
    });
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args([
            "plan",
            "-o",
            "json",
            "-f",
            &dir.display().to_string(),
            "--values",
            &dir.join("values.yaml").display().to_string(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("EC2NodeClass/gpu-dra: metadata.annotations.karpenter.k8s.aws/nvidia-consumable-capacity"), "{stderr}");
    let p: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let gpus: std::collections::BTreeSet<(String, String)> =
        devices(&p).into_iter().map(|(n, _, d)| (n, d)).collect();
    assert_eq!(gpus.len(), 8);
}

#[test]
fn explain_pod_gives_every_instance_type_its_verdict() {
    let dir = example_dir("dra-gpu-efa-aligned");
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args([
            "explain",
            "pod",
            "default/trainer",
            "-f",
            &dir.display().to_string(),
            "--values",
            &dir.join("values.yaml").display().to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("Pod default/trainer: placed on gpu-dra-0"),
        "{text}"
    );
    assert!(
        text.contains("NodePool gpu-dra / p5.4xlarge (6.88 USD/h): fits"),
        "{text}"
    );
    assert!(text.contains("NodePool gpu-dra / g6.xlarge (0.8048 USD/h): claim default/trainer-devices-*, request efa: no device matches"), "{text}");
    assert!(text.contains("g6.12xlarge (4.6016 USD/h): claim default/trainer-devices-*, request efa: no combination of devices satisfies constraint matchAttribute: resource.kubernetes.io/pcieRoot"), "{text}");
    let missing = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args([
            "explain",
            "pod",
            "default/nope",
            "-f",
            &dir.display().to_string(),
        ])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
}

#[test]
fn a_selector_that_matches_nothing_shows_what_the_types_have() {
    let dir = variant("dra-specific-gpu", "workload.yaml", |t| {
        t.replace("count: 1\n", "count: 16\n")
    });
    let reason = unschedulable_reason(&plan(&dir, true));
    assert!(
        reason.contains("(its devices have cudaComputeCapability=8.9.0, memory=23034Mi)"),
        "{reason}"
    );
    assert!(
        reason.contains("(its devices have cudaComputeCapability=9.0.0, memory=81152Mi)"),
        "{reason}"
    );
}

#[test]
fn unlimited_sharing_puts_every_claim_on_one_gpu() {
    let dir = variant("dra-shared-gpu", "nodeclass-sharing.yaml", |t| {
        t.replace(
            "nvidia-consumable-capacity: \"4\"",
            "nvidia-consumable-capacity: \"unlimited\"",
        )
    });
    let p = plan(&dir, true);
    assert_eq!(claims(&p).len(), 1);
    assert_eq!(claims(&p)[0]["instanceType"], "g6.xlarge");
    let gpus: std::collections::BTreeSet<(String, String)> =
        devices(&p).into_iter().map(|(n, _, d)| (n, d)).collect();
    assert_eq!(gpus.len(), 1);
}

#[test]
fn device_plugin_pods_get_dra_gpus_through_the_class_that_names_their_resource() {
    let p = plan(&example_dir("dra-extended-resource-gpu"), true);
    let types: Vec<&str> = claims(&p)
        .iter()
        .map(|c| c["instanceType"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["g6.12xlarge", "g6.12xlarge"]);
    assert_eq!(p["totalPricePerHour"], 9.2032);
    assert!(p["unschedulable"].as_array().unwrap().is_empty());
    let allocated = p["claims"].as_array().unwrap();
    let names: Vec<&str> = allocated
        .iter()
        .map(|c| c["claim"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "ml/trainer-0-extended-resources-*",
            "ml/trainer-1-extended-resources-*",
            "ml/trainer-2-extended-resources-*"
        ]
    );
    for c in allocated {
        let results = c["allocation"]["devices"]["results"].as_array().unwrap();
        assert_eq!(results.len(), 2, "two GPUs per pod: {c}");
        assert!(results.iter().all(|r| r["driver"] == "gpu.nvidia.com"
            && r["request"] == "container-0-request-2"
            && r["pool"] == c["node"]));
    }
    // Two pods share the first node's four GPUs: no device is given twice.
    let mut held = devices(&p);
    held.sort();
    held.dedup();
    assert_eq!(held.len(), 6);
}

#[test]
fn where_the_device_plugin_runs_it_serves_the_resource_and_no_claim_is_made() {
    let dir = variant("dra-extended-resource-gpu", "nodepool.yaml", |t| {
        t.replace(
            "nvidia.com/gpu.deploy.device-plugin: \"false\"",
            "nvidia.com/gpu.deploy.device-plugin: \"true\"",
        )
    });
    let p = plan(&dir, true);
    assert_eq!(claims(&p).len(), 2);
    assert_eq!(p["totalPricePerHour"], 9.2032);
    assert!(devices(&p).is_empty(), "{}", p["claims"]);
    assert_eq!(
        claims(&p)[0]["resources"]["allocatable"]["nvidia.com/gpu"],
        "4"
    );
}

#[test]
fn before_kubernetes_1_36_no_class_serves_the_resource_and_no_node_advertises_it() {
    let dir = variant("dra-extended-resource-gpu", "values.yaml", |t| {
        t.replace("kubernetesVersion: \"1.37\"", "kubernetesVersion: \"1.35\"")
    });
    let p = plan(&dir, true);
    assert!(claims(&p).is_empty());
    let u = p["unschedulable"].as_array().unwrap();
    assert_eq!(u.len(), 3);
    let reason = u[0]["reason"].as_str().unwrap();
    assert!(reason.contains("nvidia.com/gpu"), "{reason}");
}

/// A DeviceTaintRule that taints every GPU of the NVIDIA driver (a driver upgrade underway, say).
const GPU_MAINTENANCE: &str = r#"apiVersion: resource.k8s.io/v1
kind: DeviceTaintRule
metadata:
  name: gpu-maintenance
spec:
  deviceSelector:
    driver: gpu.nvidia.com
  taint:
    key: example.com/maintenance
    value: driver-upgrade
    effect: NoSchedule
"#;

#[test]
fn a_device_taint_rule_keeps_untolerating_claims_off_the_devices_it_selects() {
    let dir = variant("dra-specific-gpu", "deviceclasses.yaml", |t| {
        format!("{t}---\n{GPU_MAINTENANCE}")
    });
    let p = plan(&dir, true);
    assert!(
        claims(&p).is_empty(),
        "no new node helps: its GPUs are tainted too"
    );
    let reason = unschedulable_reason(&p);
    assert!(reason.contains("untolerated taints"), "{reason}");

    // A request that tolerates the taint is served as before.
    let tolerating = variant("dra-specific-gpu", "workload.yaml", |t| {
        t.replace(
            "          count: 1\n",
            "          count: 1\n          tolerations:\n          - key: example.com/maintenance\n            operator: Exists\n",
        )
    });
    std::fs::write(tolerating.join("rule.yaml"), GPU_MAINTENANCE).unwrap();
    let p = plan(&tolerating, true);
    assert_eq!(claims(&p).len(), 1);
    assert_eq!(claims(&p)[0]["instanceType"], "p5en.48xlarge");

    // A rule selecting another driver's devices, or one with no selector, changes nothing.
    for other in [
        GPU_MAINTENANCE.replace("driver: gpu.nvidia.com", "driver: dra.net"),
        GPU_MAINTENANCE.replace("  deviceSelector:\n    driver: gpu.nvidia.com\n", ""),
    ] {
        let dir = variant("dra-specific-gpu", "deviceclasses.yaml", |t| {
            format!("{t}---\n{other}")
        });
        let p = plan(&dir, true);
        assert_eq!(claims(&p).len(), 1, "{}", p["unschedulable"]);
    }
}

#[test]
fn a_device_taint_rule_with_a_node_effect_is_refused_naming_the_field() {
    let dir = variant("dra-specific-gpu", "deviceclasses.yaml", |t| {
        format!(
            "{t}---\n{}",
            GPU_MAINTENANCE.replace("effect: NoSchedule", "effect: PreferNoSchedule")
        )
    });
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["plan", "-f"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("DeviceTaintRule/gpu-maintenance") && err.contains("spec.taint.effect"),
        "{err}"
    );
}
