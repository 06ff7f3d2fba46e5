//! End-to-end: allocator behaviours that follow kube-scheduler's structured allocator,
//! through the built `joiner` binary on variants of the DRA examples.

use std::path::{Path, PathBuf};
use std::process::Command;

use joiner_test_support::example_dir;

/// A copy of an example in a fresh directory, with `edit` applied to one file's text.
fn variant(name: &str, file: &str, edit: impl Fn(&str) -> String) -> PathBuf {
    // Tests run in parallel: every variant gets a directory of its own.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "joiner-dra-alloc-e2e-{}-{n}-{name}",
        std::process::id()
    ));
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

fn plan(dir: &Path) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["plan", "-o", "json", "-f"])
        .arg(dir)
        .arg("--values")
        .arg(dir.join("values.yaml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The `exactly` request of `dra-specific-gpu` as a `firstAvailable` list whose first
/// subrequest asks for `first` such GPUs and whose second asks for one.
fn first_available_workload(text: &str, first: u32) -> String {
    let exactly =
        "        exactly:\n          deviceClassName: gpu.nvidia.com\n          count: 1\n";
    assert!(text.contains(exactly), "the example changed: {text}");
    let selectors = "          selectors:\n          - cel:\n              expression: |\n                device.attributes[\"gpu.nvidia.com\"].cudaComputeCapability.compareTo(semver(\"9.0.0\")) >= 0 &&\n                device.capacity[\"gpu.nvidia.com\"].memory.compareTo(quantity(\"100Gi\")) >= 0\n";
    assert!(text.contains(selectors), "the example changed: {text}");
    // List items' fields sit where `exactly`'s did, so the selectors keep their indent.
    let subs = format!(
        "        firstAvailable:\n        - name: many\n          deviceClassName: gpu.nvidia.com\n          count: {first}\n{}        - name: one\n          deviceClassName: gpu.nvidia.com\n          count: 1\n{}",
        selectors, selectors,
    );
    text.replace(&format!("{exactly}{selectors}"), &subs)
}

/// kube-scheduler skips a `firstAvailable` subrequest that needs more than the 32 devices
/// one claim may hold, and serves the next; the plan is the one the single-GPU example gets.
#[test]
fn first_available_subrequest_over_the_claim_limit_falls_through_to_the_next() {
    let dir = variant("dra-specific-gpu", "workload.yaml", |t| {
        first_available_workload(t, 64)
    });
    let p = plan(&dir);
    assert!(
        p["unschedulable"].as_array().unwrap().is_empty(),
        "{}",
        p["unschedulable"]
    );
    let claims = p["nodeClaims"].as_array().unwrap();
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0]["instanceType"], "p5en.48xlarge");
    let results = p["claims"][0]["allocation"]["devices"]["results"]
        .as_array()
        .unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["request"], "gpu/one");
    assert_eq!(results[0]["driver"], "gpu.nvidia.com");
}
