//! End-to-end: `joiner catalog` on files, as a user runs it.

use joiner_test_support::{Scratch, example_dir, run, run_json};

const JOINER: &str = env!("CARGO_BIN_EXE_joiner");

fn listing(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["catalog", "-o", "json"];
    all.extend_from_slice(args);
    run_json(JOINER, &all)
}

fn names(pool: &serde_json::Value) -> Vec<String> {
    pool["instanceTypes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn learning_lab_lists_what_its_node_pool_may_launch() {
    let dir = example_dir("time-slicing-learning-lab")
        .display()
        .to_string();
    let l = listing(&["-f", &dir]);
    assert_eq!(l["kind"], "InstanceTypeListing");
    assert_eq!(l["region"], "us-east-1");
    let pool = &l["nodePools"][0];
    assert_eq!(pool["nodePool"], "g4-nodepool");
    let g4dn = pool["instanceTypes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "g4dn.xlarge")
        .expect("g4dn.xlarge is listed");
    // The device plugin's time-slicing (3 replicas) is applied, as the plan sees it.
    assert_eq!(g4dn["allocatable"]["nvidia.com/gpu"], "3");
    assert_eq!(g4dn["allocatable"]["cpu"], "3920m");
    assert_eq!(g4dn["gpu"]["name"], "t4");
    assert_eq!(g4dn["draDevices"]["gpu.nvidia.com"], 1);
    assert_eq!(g4dn["pricePerHour"], 0.526);
    // Every listed type is one the plan may use: on-demand only (the NodePool's default).
    for t in pool["instanceTypes"].as_array().unwrap() {
        for o in t["offerings"].as_array().unwrap() {
            assert_eq!(o["capacityType"], "on-demand", "{}", t["name"]);
        }
    }

    let table = run(JOINER, &["catalog", "-f", &dir]);
    assert!(table.status.success());
    let text = String::from_utf8(table.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("g4dn.xlarge"))
        .expect("a g4dn.xlarge row");
    assert!(line.starts_with("g4-nodepool"), "{line}");
    assert!(line.contains("0.526"), "{line}");
}

#[test]
fn gpu_count_requirements_and_regions_change_the_listing() {
    let s = Scratch::new("catalog-e2e");
    let file = s.write(
        "pool.yaml",
        r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}
      requirements:
      - {key: karpenter.k8s.aws/instance-gpu-count, operator: Gt, values: ["0"]}
      - {key: karpenter.k8s.aws/instance-category, operator: In, values: [g, t]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: c}
spec:
  role: R
  amiSelectorTerms: [{alias: al2023@latest}]
"#,
    );
    let file = file.display().to_string();
    let east = listing(&["-f", &file]);
    let listed = names(&east["nodePools"][0]);
    assert!(listed.iter().any(|n| n == "g4dn.xlarge"));
    // No t-family type has a GPU: a label a type lacks is DoesNotExist for it.
    assert!(!listed.iter().any(|n| n.starts_with('t')), "{listed:?}");

    let west = listing(&["-f", &file, "--region", "eu-west-1"]);
    assert_eq!(west["region"], "eu-west-1");
    let types = west["nodePools"][0]["instanceTypes"].as_array().unwrap();
    let first = &types[0];
    assert!(
        first["offerings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["zone"].as_str().unwrap().starts_with("eu-west-1"))
    );
    // Prices outside us-east-1 are not known offline, and the listing says so.
    assert!(
        first["priceNote"].as_str().unwrap().contains("us-east-1"),
        "{first}"
    );
}

#[test]
fn without_files_the_whole_built_in_catalog_is_listed() {
    let l = listing(&[]);
    let pool = &l["nodePools"][0];
    assert_eq!(pool["nodePool"], "-");
    assert_eq!(pool["instanceTypes"].as_array().unwrap().len(), 1255);
}

/// The one instance type a single-type NodePool lists.
fn only_type(l: &serde_json::Value) -> &serde_json::Value {
    let types = l["nodePools"][0]["instanceTypes"]
        .as_array()
        .expect("types");
    assert_eq!(types.len(), 1, "{types:#?}");
    &types[0]
}

#[test]
fn mig_capacity_is_listed_as_the_node_pool_splits_its_gpus() {
    // Device plugin, mixed strategy: all-1g.5gb makes 56 instances of a p4d.24xlarge.
    let dir = example_dir("mig-p4d-lab").display().to_string();
    let l = listing(&["-f", &dir]);
    let p4d = only_type(&l);
    assert_eq!(p4d["allocatable"]["nvidia.com/mig-1g.5gb"], "56");
    let gpu = &p4d["gpu"];
    assert!(
        gpu["servedBy"]
            .as_array()
            .is_some_and(|s| s.contains(&"mig".into())),
        "{gpu}"
    );
    // What the GPU could be split into, whatever the NodePool chose.
    let profiles = gpu["migProfiles"].as_array().expect("MIG profiles");
    let two = profiles
        .iter()
        .find(|p| p["name"] == "2g.10gb")
        .expect("2g.10gb");
    assert_eq!(two["perGpu"], 3);
    assert_eq!(two["resource"], "nvidia.com/mig-2g.10gb");
    let text = run(JOINER, &["catalog", "-f", &dir]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("nvidia.com/mig-1g.5gb=56"), "{text}");

    // DRA, half-balanced: four GPUs become 16 MIG devices, four stay whole.
    let dir = example_dir("dra-mig-quickstart").display().to_string();
    let values = format!("{dir}/values.yaml");
    let l = listing(&["-f", &dir, "--values", &values]);
    assert_eq!(only_type(&l)["draDevices"]["gpu.nvidia.com"], 20);
    // A type without MIG lists no profiles.
    let catalog = listing(&[]);
    let g4dn = catalog["nodePools"][0]["instanceTypes"]
        .as_array()
        .expect("types")
        .iter()
        .find(|t| t["name"] == "g4dn.xlarge")
        .expect("g4dn.xlarge");
    assert!(g4dn["gpu"]["migProfiles"].is_null(), "{g4dn}");
}
