//! `joiner migrate` on exported objects: a fleet Karpenter launched is previewed as taken over
//! in place (exit 0), and one whose takeover would end nodes is refused (exit 1) naming what
//! would happen to each.

use std::path::Path;
use std::process::{Command, Output};

use joiner_test_support::example_dir;

fn migrate(files: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["migrate", "--for", "30m", "-f"])
        .arg(files)
        .output()
        .expect("runs")
}

/// The example's objects, as `kubectl get ... -o yaml` exports them (no scenario file).
fn exported(into: &Path, files: &[&str]) {
    std::fs::create_dir_all(into).expect("temp dir");
    let dir = example_dir("karpenter-takeover");
    for f in files {
        std::fs::copy(dir.join(f), into.join(f)).expect("copy");
    }
}

#[test]
fn a_karpenter_fleet_previews_as_taken_over_in_place() {
    let dir = std::env::temp_dir().join(format!("joiner-migrate-ok-{}", std::process::id()));
    exported(
        &dir,
        &[
            "nodepool.yaml",
            "ec2nodeclass.yaml",
            "deployment.yaml",
            "fleet.yaml",
        ],
    );
    let out = migrate(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.lines().filter(|l| l.starts_with("gpu-")).count(), 20);
    assert!(
        stdout
            .lines()
            .filter(|l| l.starts_with("gpu-"))
            .all(|l| l.contains(" yes ")
                && l.contains("rewrote karpenter.sh/nodepool-hash (v3 -> joiner-v1)")),
        "{stdout}"
    );
    assert!(
        stdout.contains("20 of 20 NodeClaims kept, 0 instances launched"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Joiner takes this fleet over in place"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_takeover_that_would_end_nodes_is_refused_naming_them() {
    let dir = std::env::temp_dir().join(format!("joiner-migrate-gone-{}", std::process::id()));
    // The NodePool was not exported (or was deleted): its NodeClaims would go with it.
    exported(
        &dir,
        &["ec2nodeclass.yaml", "deployment.yaml", "fleet.yaml"],
    );
    let out = migrate(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stderr.contains("would launch, terminate or disrupt nodes"),
        "{stderr}"
    );
    assert!(stdout.contains("0 of 20 NodeClaims kept"), "{stdout}");
    assert!(
        stdout.contains("terminated i-07a3c000000000000"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
