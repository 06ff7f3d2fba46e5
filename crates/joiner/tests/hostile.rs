//! Hostile input through the built `joiner` binary: each case, the error or outcome it must
//! give, and a generous bound on time (debug builds, a shared 2-core machine). A run past its
//! bound is killed and fails the test, so a hang cannot stall CI.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use joiner_test_support::{example_dir, manifest_files};

/// Bound for every case; each finishes far faster (see the README's "Hardening" section).
const LIMIT: Duration = Duration::from_secs(10);

/// Bound for the two size cases (a 5 MB slice file; 10,000 pods with claims): each takes a
/// few seconds of CPU in a debug build, up to 17 s of wall time on a busy 2-core machine.
const BIG_LIMIT: Duration = Duration::from_secs(60);

/// Bound on resident memory for every case (the largest, the 100,000-device slice, peaks
/// near 400 MB in a debug build).
const MEMORY_LIMIT_KB: u64 = 2 * 1024 * 1024;

/// A fresh directory holding `files` (name, text).
fn dir(case: &str, files: &[(&str, String)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("joiner-hostile-{}-{case}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    dir
}

/// The DRA example's NodePool, EC2NodeClass and DeviceClasses, plus `workload`.
fn dra_dir(case: &str, workload: String) -> PathBuf {
    let read = |f: &str| std::fs::read_to_string(example_dir("dra-specific-gpu").join(f)).unwrap();
    dir(
        case,
        &[
            ("nodepool.yaml", read("nodepool.yaml")),
            ("deviceclasses.yaml", read("deviceclasses.yaml")),
            ("workload.yaml", workload),
        ],
    )
}

struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Run {
    fn json(&self) -> serde_json::Value {
        assert!(self.ok, "{}", self.stderr);
        serde_json::from_str(&self.stdout).unwrap()
    }
}

/// Runs `joiner plan -o json -f <path> <extra>`, killing it past `limit`.
fn plan(path: &Path, extra: &[&str], limit: Duration) -> Run {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["plan", "-o", "json", "-f"])
        .arg(path)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_kb = 0u64;
    let status = loop {
        // The high-water mark of resident memory, as last seen before the process exits
        // (Linux; elsewhere memory goes unchecked).
        if let Some(kb) = std::fs::read_to_string(&status_file).ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        }) {
            peak_kb = peak_kb.max(kb);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "joiner plan -f {} {extra:?} ran past {limit:?}",
                path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = started.elapsed();
    eprintln!(
        "joiner plan -f {} {extra:?}: {took:?}, peak RSS >= {peak_kb} kB",
        path.display()
    );
    assert!(
        peak_kb < MEMORY_LIMIT_KB,
        "joiner plan -f {} {extra:?} used {peak_kb} kB",
        path.display()
    );
    Run {
        ok: status.success(),
        stdout: reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
        took,
    }
}

const DRA: &[&str] = &["--set", "settings.enableDRA=true"];

fn unschedulable(plan: &serde_json::Value) -> Vec<(String, String)> {
    plan["unschedulable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["pod"].as_str().unwrap().to_string(),
                u["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A pod in `default` using a claim from template `t`, tolerating the GPU taint.
fn claim_pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  \
         tolerations: [{{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}]\n  \
         resourceClaims: [{{name: c, resourceClaimTemplateName: t}}]\n  containers:\n  \
         - name: c\n    resources: {{claims: [{{name: c}}]}}\n"
    )
}

fn template(request: &str) -> String {
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{name: t, \
         namespace: default}}\nspec:\n  spec:\n    devices:\n      requests:\n      - name: \
         gpu\n        exactly:\n{request}"
    )
}

#[test]
fn yaml_alias_bomb_is_rejected_quickly() {
    // "Billion laughs": ten levels of ten aliases each, 10^10 strings once expanded.
    let mut yaml = String::from(
        "a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    for i in 1..=10 {
        let p = i - 1;
        yaml.push_str(&format!(
            "a{i}: &a{i} [*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p}]\n"
        ));
    }
    let d = dir("alias-bomb", &[("bomb.yaml", yaml)]);
    let run = plan(&d.join("bomb.yaml"), &[], LIMIT);
    assert!(!run.ok, "{}", run.stdout);
    assert!(
        run.stderr.contains("bomb.yaml")
            && run.stderr.contains("cannot parse YAML")
            && run.stderr.contains("budget breached"),
        "{}",
        run.stderr
    );
    assert!(run.took < LIMIT);
}

#[test]
fn deep_nesting_is_rejected_quickly() {
    for (name, text) in [
        ("lists.yaml", format!("a: {}", "[".repeat(100_000))),
        ("maps.yaml", format!("a: {}1", "{b: ".repeat(100_000))),
        (
            "block.yaml",
            (0..1_000)
                .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
                .collect::<String>(),
        ),
        (
            "json.json",
            format!("{}{}", "[".repeat(50_000), "]".repeat(50_000)),
        ),
    ] {
        let d = dir(&format!("deep-{name}"), &[(name, text)]);
        let run = plan(&d.join(name), &[], LIMIT);
        assert!(!run.ok, "{name}: {}", run.stdout);
        assert!(
            run.stderr.contains(name)
                && run.stderr.contains("cannot parse YAML")
                && (run.stderr.contains("budget breached")
                    || run.stderr.contains("recursion limit exceeded")),
            "{name}: {}",
            run.stderr
        );
    }
}

#[test]
fn cel_over_the_cost_limit_fails_its_claim() {
    let list = format!(
        "[{}]",
        (0..100)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let expr = format!("{list}.all(a, {list}.all(b, {list}.all(c, a + b + c >= 0)))");
    let request = format!(
        "          deviceClassName: gpu.nvidia.com\n          selectors:\n          - cel: \
         {{expression: '{expr}'}}\n"
    );
    let d = dra_dir(
        "cel-cost",
        format!("{}---\n{}", template(&request), claim_pod("expensive")),
    );
    let run = plan(&d, DRA, LIMIT);
    let plan = run.json();
    let u = unschedulable(&plan);
    assert_eq!(u.len(), 1, "{u:?}");
    assert_eq!(u[0].0, "default/expensive");
    assert!(
        u[0].1.contains("is too expensive") && u[0].1.contains("exceeds the limit of 1000000"),
        "{}",
        u[0].1
    );
    assert!(plan["nodeClaims"].as_array().unwrap().is_empty());
}

#[test]
fn a_costly_regex_against_the_whole_catalog_and_1000_devices_stays_fast() {
    // `\w{200}` once cost a regex compile per device and call (about 100 ms each); two such
    // pods against 1,000 devices and every GPU type of the catalog passed 30 s. The pattern
    // compiles once now, with RE2's ASCII `\w`, so the plan takes well under a second.
    let nodepool = std::fs::read_to_string(example_dir("dra-specific-gpu").join("nodepool.yaml"))
        .unwrap()
        .replace(
            "      - key: karpenter.k8s.aws/instance-family\n        operator: In\n        \
             values: [\"g6\", \"g6e\", \"p5\", \"p5en\", \"p6-b200\"]\n",
            "      - key: karpenter.sh/capacity-type\n        operator: In\n        \
             values: [\"on-demand\"]\n",
        );
    assert!(
        nodepool.contains("capacity-type"),
        "the example's requirements changed"
    );
    let devices: Vec<String> = (0..1000)
        .map(|i| {
            format!(
                "{{name: gpu-{i}, attributes: {{type: {{string: gpu}}, productName: {{string: \
                 NVIDIA H100 80GB HBM3}}, index: {{int: {i}}}}}}}"
            )
        })
        .collect();
    let slices = pool_slices("big-node", &devices).replace("dev.example.com", "gpu.nvidia.com");
    let node = "apiVersion: v1\nkind: Node\nmetadata: {name: big-node, labels: \
                {kubernetes.io/hostname: big-node}}\nstatus:\n  allocatable: {cpu: '1000', \
                memory: 4000Gi, pods: '20000'}\n  capacity: {cpu: '1000', memory: 4000Gi, \
                pods: '20000'}\n";
    let hostile = template(
        "          deviceClassName: gpu.nvidia.com\n          selectors:\n          - cel: \
         {expression: 'device.attributes[\"gpu.nvidia.com\"].productName.matches(\"\\\\w{200}\")'}\n",
    );
    let plain =
        template("          deviceClassName: gpu.nvidia.com\n").replace("name: t,", "name: plain,");
    let plain_pod = claim_pod("plain").replace(
        "resourceClaimTemplateName: t",
        "resourceClaimTemplateName: plain",
    );
    let d = dir(
        "costly-regex",
        &[
            ("nodepool.yaml", nodepool),
            (
                "deviceclasses.yaml",
                std::fs::read_to_string(example_dir("dra-specific-gpu").join("deviceclasses.yaml"))
                    .unwrap(),
            ),
            ("slices.yaml", slices),
            ("node.yaml", node.to_string()),
            (
                "workload.yaml",
                format!(
                    "{hostile}---\n{plain}---\n{}---\n{}---\n{plain_pod}",
                    claim_pod("hostile-a"),
                    claim_pod("hostile-b")
                ),
            ),
        ],
    );
    let run = plan(&d, DRA, LIMIT);
    let plan = run.json();
    let u = unschedulable(&plan);
    let names: Vec<&str> = u.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["default/hostile-a", "default/hostile-b"], "{u:?}");
    let bindings = plan["bindings"].as_array().unwrap();
    assert_eq!(bindings.len(), 1, "{bindings:?}");
    assert_eq!(bindings[0]["node"], "big-node");
    eprintln!("costly regex against the catalog: {:?}", run.took);
}

#[test]
fn count_of_2147483647_is_unschedulable_quickly() {
    let request = "          deviceClassName: gpu.nvidia.com\n          count: 2147483647\n";
    let d = dra_dir(
        "count-max",
        format!("{}---\n{}", template(request), claim_pod("greedy")),
    );
    let run = plan(&d, DRA, LIMIT);
    let plan = run.json();
    let u = unschedulable(&plan);
    assert_eq!(u.len(), 1, "{u:?}");
    assert_eq!(u[0].0, "default/greedy");
    assert!(
        u[0].1
            .contains("needs 2147483647 devices, more than the limit of 32 per claim"),
        "{}",
        u[0].1
    );
    assert!(plan["nodeClaims"].as_array().unwrap().is_empty());
}

/// An existing node with a node-local slice of `devices` devices of `dev.example.com`.
/// Most devices one ResourceSlice may list (the API server refuses more).
const MAX_DEVICES_PER_SLICE: usize = 128;

/// A pool of `node` published as as many ResourceSlices as its devices need, each at the
/// API server's limit, as a driver with a large pool publishes it.
fn pool_slices(node: &str, devices: &[String]) -> String {
    let chunks: Vec<&[String]> = devices.chunks(MAX_DEVICES_PER_SLICE).collect();
    chunks
        .iter()
        .enumerate()
        .map(|(i, chunk)| slice(node, i, chunks.len(), chunk))
        .collect()
}

/// Slice `index` of the `count` slices of `node`'s pool, listing `devices`.
fn slice(node: &str, index: usize, count: usize, devices: &[String]) -> String {
    let mut out = format!(
        "---\napiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: \
         {node}-{index}}}\nspec:\n  driver: dev.example.com\n  nodeName: {node}\n  pool: {{name: \
         {node}, generation: 1, resourceSliceCount: {count}}}\n  devices:\n"
    );
    for device in devices {
        out.push_str(&format!("  - {device}\n"));
    }
    out
}

fn big_slice_dir(case: &str, devices: usize, pods: usize, count: i64) -> PathBuf {
    let devices: Vec<String> = (0..devices)
        .map(|i| format!("{{name: d{i}, attributes: {{index: {{int: {i}}}}}}}"))
        .collect();
    let slice = pool_slices("big-node", &devices);
    let node = "apiVersion: v1\nkind: Node\nmetadata: {name: big-node, labels: \
                {kubernetes.io/hostname: big-node}}\nstatus:\n  allocatable: {cpu: '1000', \
                memory: 4000Gi, pods: '20000'}\n  capacity: {cpu: '1000', memory: 4000Gi, \
                pods: '20000'}\n"
        .to_string();
    let class =
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: dev}\nspec:\n  \
                 selectors: [{cel: {expression: 'device.driver == \"dev.example.com\"'}}]\n"
            .to_string();
    let tmpl = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: t, \
                namespace: default}\nspec:\n  spec:\n    devices:\n      requests:\n      - name: \
                d\n        exactly: {deviceClassName: dev, count: COUNT}\n"
        .replace("COUNT", &count.to_string());
    let workload = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: w, namespace: default}}\nspec:\n  \
         replicas: {pods}\n  selector: {{matchLabels: {{app: w}}}}\n  template:\n    metadata: \
         {{labels: {{app: w}}}}\n    spec:\n      resourceClaims: [{{name: c, \
         resourceClaimTemplateName: t}}]\n      containers:\n      - name: c\n        \
         resources: {{claims: [{{name: c}}]}}\n"
    );
    dir(
        case,
        &[
            ("slice.yaml", slice),
            ("node.yaml", node),
            ("class.yaml", class),
            ("template.yaml", tmpl),
            ("workload.yaml", workload),
        ],
    )
}

#[test]
fn a_100000_device_pool_is_handled_in_bounded_time() {
    // A 5 MB file of 782 slices: about 5 s of CPU in a debug build, half of it reading the
    // YAML.
    let d = big_slice_dir("big-slice", 100_000, 2, 3);
    let run = plan(&d, DRA, BIG_LIMIT);
    let plan = run.json();
    assert!(
        unschedulable(&plan).is_empty(),
        "{:?}",
        unschedulable(&plan)
    );
    let bindings = plan["bindings"].as_array().unwrap();
    assert_eq!(bindings.len(), 2);
    assert!(bindings.iter().all(|b| b["node"] == "big-node"));
    assert_eq!(plan["claims"].as_array().unwrap().len(), 2);
}

#[test]
fn a_slice_listing_more_devices_than_the_api_server_allows_is_refused() {
    let d = big_slice_dir("oversized-slice", 3, 1, 1);
    let devices: Vec<String> = (0..=MAX_DEVICES_PER_SLICE)
        .map(|i| format!("{{name: d{i}}}"))
        .collect();
    std::fs::write(d.join("slice.yaml"), slice("big-node", 0, 1, &devices)).unwrap();
    let run = plan(&d, DRA, LIMIT);
    assert!(!run.ok, "{}", run.stdout);
    assert!(
        run.stderr.contains(
            "ResourceSlice/big-node-0: spec.devices: Too many: 129: must have at most 128 items"
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn ten_thousand_claims_from_one_template_are_handled_in_bounded_time() {
    let d = big_slice_dir("many-claims", 10_000, 10_000, 1);
    let run = plan(&d, DRA, BIG_LIMIT);
    let plan = run.json();
    assert!(
        unschedulable(&plan).is_empty(),
        "{:?}",
        &unschedulable(&plan)[..1]
    );
    assert_eq!(plan["bindings"].as_array().unwrap().len(), 10_000);
    assert_eq!(plan["claims"].as_array().unwrap().len(), 10_000);
    eprintln!("10,000 claims: {:?}", run.took);
}

fn pod_requesting(name: &str, requests: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  \
         containers:\n  - name: c\n    resources: {{requests: {{{requests}}}}}\n"
    )
}

fn learning_lab_with(case: &str, pod: String) -> PathBuf {
    let mut files: Vec<(&str, String)> = ["nodepool.yaml", "ec2nodeclass.yaml"]
        .iter()
        .map(|f| {
            (
                *f,
                std::fs::read_to_string(example_dir("time-slicing-learning-lab").join(f)).unwrap(),
            )
        })
        .collect();
    files.push(("pod.yaml", pod));
    dir(case, &files)
}

#[test]
fn huge_quantities_are_errors_naming_the_field_or_unschedulable() {
    // Beyond what Joiner's exact quantities hold: an input error naming object and field.
    for (i, q) in ["1e1000", "99999999999999999999999999999999Ei", "1E400"]
        .iter()
        .enumerate()
    {
        let d = learning_lab_with(
            &format!("huge-{i}"),
            pod_requesting("huge", &format!("cpu: '{q}'")),
        );
        let run = plan(&d, &[], LIMIT);
        assert!(!run.ok, "{q}: {}", run.stdout);
        assert!(
            run.stderr.contains("Pod/default/huge")
                && run
                    .stderr
                    .contains("spec.containers[0].resources.requests.cpu"),
            "{q}: {}",
            run.stderr
        );
    }
    // Representable but larger than any instance type: unschedulable, with a reason.
    for (i, req) in [
        "cpu: '9223372036854775807'",
        "memory: 8Ei",
        "nvidia.com/gpu: '2147483647'",
    ]
    .iter()
    .enumerate()
    {
        let d = learning_lab_with(&format!("big-{i}"), pod_requesting("big", req));
        let plan = plan(&d, &[], LIMIT).json();
        let u = unschedulable(&plan);
        assert_eq!(u.len(), 1, "{req}: {u:?}");
        assert!(!u[0].1.is_empty());
        assert!(plan["nodeClaims"].as_array().unwrap().is_empty(), "{req}");
    }
}

#[test]
fn replicas_of_2147483647_are_an_input_error() {
    // Found while writing these tests: expansion made one pod per replica and ran out of
    // memory. Workloads may now expand into at most 100,000 pods in all.
    for (kind, spec) in [
        (
            "Deployment",
            "replicas: 2147483647\n  selector: {matchLabels: {app: w}}",
        ),
        (
            "StatefulSet",
            "replicas: 2147483647\n  selector: {matchLabels: {app: w}}",
        ),
        ("Job", "parallelism: 2147483647"),
    ] {
        let api = if kind == "Job" { "batch/v1" } else { "apps/v1" };
        let field = if kind == "Job" {
            "spec.parallelism"
        } else {
            "spec.replicas"
        };
        let d = learning_lab_with(
            &format!("replicas-{kind}"),
            format!(
                "apiVersion: {api}\nkind: {kind}\nmetadata: {{name: w, namespace: default}}\nspec:\n  \
                 {spec}\n  template:\n    metadata: {{labels: {{app: w}}}}\n    spec:\n      \
                 containers: [{{name: c, resources: {{requests: {{cpu: 100m}}}}}}]\n"
            ),
        );
        let run = plan(&d, &[], LIMIT);
        assert!(!run.ok, "{kind}: {}", run.stdout);
        assert!(
            run.stderr.contains(&format!("{kind}/default/w"))
                && run.stderr.contains(field)
                && run.stderr.contains("at most 100000"),
            "{kind}: {}",
            run.stderr
        );
    }
}

/// An existing node whose devices fall into `groups` groups of `per_group` (attribute
/// `group`), and a pod whose one claim asks for `count` devices that all share a group.
fn search_budget_dir(case: &str, groups: usize, per_group: usize, count: usize) -> PathBuf {
    let devices: Vec<String> = (0..groups)
        .flat_map(|g| {
            (0..per_group)
                .map(move |i| format!("{{name: d{g}-{i}, attributes: {{group: {{int: {g}}}}}}}"))
        })
        .collect();
    let slice = pool_slices("grouped-node", &devices);
    let node = "apiVersion: v1\nkind: Node\nmetadata: {name: grouped-node, labels: \
                {kubernetes.io/hostname: grouped-node}}\nstatus:\n  allocatable: {cpu: '64', \
                memory: 256Gi, pods: '110'}\n  capacity: {cpu: '64', memory: 256Gi, pods: '110'}\n"
        .to_string();
    let class =
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: dev}\nspec:\n  \
         selectors: [{cel: {expression: 'device.driver == \"dev.example.com\"'}}]\n"
            .to_string();
    let tmpl = format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{name: t, \
         namespace: default}}\nspec:\n  spec:\n    devices:\n      requests:\n      - name: d\n        \
         exactly: {{deviceClassName: dev, count: {count}}}\n      constraints:\n      - \
         matchAttribute: dev.example.com/group\n"
    );
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: grouped, namespace: default}\nspec:\n  \
               resourceClaims: [{name: c, resourceClaimTemplateName: t}]\n  containers:\n  \
               - name: c\n    resources: {claims: [{name: c}]}\n"
        .to_string();
    dir(
        case,
        &[
            ("slice.yaml", slice),
            ("node.yaml", node),
            ("class.yaml", class),
            ("template.yaml", tmpl),
            ("pod.yaml", pod),
        ],
    )
}

#[test]
fn a_hopeless_constraint_search_exhausts_its_budget_quickly() {
    // 16 devices that share a group, from 16 groups of 15: no group is large enough, and a
    // depth-first search tries every subset of each group before it learns that (about
    // 2^14 placements per first device). The allocator stops at its budget of 100,000
    // placements and says so.
    let d = search_budget_dir("search-budget", 16, 15, 16);
    let run = plan(&d, DRA, LIMIT);
    let first = run.json();
    let u = unschedulable(&first);
    assert_eq!(u.len(), 1, "{u:?}");
    assert_eq!(u[0].0, "default/grouped");
    assert!(
        u[0].1.contains("search budget exhausted")
            && u[0].1.contains("100000")
            && u[0].1.contains("default/grouped-c"),
        "{}",
        u[0].1
    );
    assert!(first["bindings"].as_array().unwrap().is_empty());
    eprintln!("search budget exhausted after {:?}", run.took);

    // The same shape with one group large enough is allocated: the budget is not what
    // makes the answer "no".
    let d = search_budget_dir("search-budget-fits", 16, 15, 15);
    let plan = plan(&d, DRA, LIMIT).json();
    assert!(
        unschedulable(&plan).is_empty(),
        "{:?}",
        unschedulable(&plan)
    );
    assert_eq!(plan["bindings"][0]["node"], "grouped-node");
}

/// The YAML documents of every manifest file of an example, in file order (its `values.yaml`
/// and `scenario.yaml` are not manifests).
fn documents(example_name: &str) -> Vec<String> {
    let mut docs = Vec::new();
    for f in manifest_files(&example_dir(example_name)) {
        let mut current = String::new();
        for line in std::fs::read_to_string(f).unwrap().lines() {
            if line.trim_end() == "---" {
                if !current.trim().is_empty() {
                    docs.push(std::mem::take(&mut current));
                }
                current.clear();
                continue;
            }
            current.push_str(line);
            current.push('\n');
        }
        if !current.trim().is_empty() {
            docs.push(current);
        }
    }
    docs
}

/// A document's kind and `metadata.name`, read from its text (the examples write both on lines
/// of their own).
fn identity(doc: &str) -> (String, String) {
    let field = |prefix: &str| {
        doc.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    (field("kind:"), field("  name:"))
}

#[test]
fn plans_do_not_depend_on_file_order_or_hash_seeds() {
    // Each run is a new process with its own HashMap seeds; the inputs differ only in how the
    // same documents are split into files and in which order they come.
    let cases: &[(&str, &[&str], &[&str])] = &[
        ("lab", &["time-slicing-learning-lab"], &[]),
        ("dra-specific", &["dra-specific-gpu"], DRA),
        ("dra-efa", &["dra-gpu-efa-aligned"], DRA),
        ("dra-shared", &["dra-shared-gpu"], DRA),
        // All three DRA examples at once: their pods compete for the same NodePools.
        (
            "dra-all",
            &["dra-specific-gpu", "dra-gpu-efa-aligned", "dra-shared-gpu"],
            DRA,
        ),
    ];
    for (case, examples, extra) in cases {
        let mut docs: Vec<String> = Vec::new();
        for e in *examples {
            for d in documents(e) {
                // Several examples define the same NodePool, EC2NodeClass and DeviceClasses
                // (by kind and name): keep the first.
                if !docs.iter().any(|x| identity(x) == identity(&d)) {
                    docs.push(d);
                }
            }
        }
        // One file, documents in order.
        let one = dir(
            &format!("order-{case}-one"),
            &[("all.yaml", docs.join("---\n"))],
        );
        // One file per document, named so that directory order is the reverse.
        let per_doc: Vec<(String, String)> = docs
            .iter()
            .enumerate()
            .map(|(i, d)| (format!("{:03}.yaml", docs.len() - i), d.clone()))
            .collect();
        let refs: Vec<(&str, String)> = per_doc
            .iter()
            .map(|(n, d)| (n.as_str(), d.clone()))
            .collect();
        let many = dir(&format!("order-{case}-many"), &refs);
        // The same files given one by one, in a shuffled order (a fixed rotation and swap).
        let mut names: Vec<PathBuf> = per_doc.iter().map(|(n, _)| many.join(n)).collect();
        let third = names.len() / 3;
        names.rotate_left(third);
        if names.len() > 3 {
            names.swap(0, 2);
        }
        let baseline = plan(&one, extra, LIMIT);
        let first = baseline.json();
        assert!(
            !first["bindings"].as_array().unwrap().is_empty(),
            "{case}: nothing planned"
        );
        let again = plan(&one, extra, LIMIT);
        let from_dir = plan(&many, extra, LIMIT);
        let mut args: Vec<&str> = Vec::new();
        let name_strings: Vec<String> = names.iter().map(|p| p.display().to_string()).collect();
        for n in name_strings.iter().skip(1) {
            args.extend(["-f", n.as_str()]);
        }
        args.extend(extra.iter().copied());
        let by_file = plan(&names[0], &args, LIMIT);
        for (how, other) in [
            ("run again", &again),
            ("one file per document", &from_dir),
            ("files in another order", &by_file),
        ] {
            assert!(other.ok, "{case} {how}: {}", other.stderr);
            assert!(
                other.stdout == baseline.stdout,
                "{case}: {how} gives another plan:\n{}\n---\n{}",
                baseline.stdout,
                other.stdout
            );
        }
    }
}

#[test]
fn an_object_larger_than_the_api_server_stores_is_refused_by_name() {
    // A 2 MiB ConfigMap among ordinary objects: no cluster could hold it.
    let blob = "x".repeat(2 << 20);
    let big = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: nvidia-device-plugin, namespace: kube-system}}\ndata:\n  any: {blob}\n"
    );
    let lab =
        std::fs::read_to_string(example_dir("time-slicing-learning-lab").join("deployment.yaml"))
            .unwrap();
    let d = dir(
        "oversized-object",
        &[("a.yaml", format!("{lab}---\n{big}"))],
    );
    let run = plan(&d, &[], LIMIT);
    assert!(!run.ok, "{}", run.stdout);
    assert!(
        run.stderr.contains(
            "a.yaml (document 2): ConfigMap/kube-system/nvidia-device-plugin: (the whole object):"
        ) && run.stderr.contains("at most 1572864 bytes (1.5 MiB)"),
        "{}",
        run.stderr
    );
    // The same objects as items of one List (what `kubectl get -o yaml` writes) are measured
    // one by one: a List of ordinary objects larger than the limit in all is read.
    let pods: Vec<String> = (0..4000)
        .map(|i| format!("  - {{apiVersion: v1, kind: Pod, metadata: {{name: p{i}, namespace: default, annotations: {{note: \"{}\"}}}}, spec: {{containers: [{{name: c, image: x}}]}}}}", "y".repeat(400)))
        .collect();
    let list = format!("apiVersion: v1\nkind: List\nitems:\n{}\n", pods.join("\n"));
    assert!(list.len() > 1 << 21);
    let d = dir("big-list", &[("dump.yaml", list)]);
    let run = plan(&d, &[], BIG_LIMIT);
    assert!(run.ok, "{}", run.stderr);
}
