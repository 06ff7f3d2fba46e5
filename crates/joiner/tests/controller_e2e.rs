//! End-to-end: the built `joiner controller` as the Helm chart runs it, where no cluster can be
//! reached: it must fail fast, with a message that says what is wrong.

use std::process::{Command, Output};

use joiner_test_support::Scratch;

/// A kubeconfig for an API server that is not there (port 1 refuses connections).
const UNREACHABLE_KUBECONFIG: &str = "apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster:
    server: https://127.0.0.1:1
    insecure-skip-tls-verify: true
users:
- name: nobody
  user:
    token: not-a-token
contexts:
- name: nowhere
  context: {cluster: nowhere, user: nobody, namespace: joiner}
current-context: nowhere
";

fn controller(scratch: &Scratch, values: &str, extra: &[&str]) -> Output {
    let kubeconfig = scratch.write("kubeconfig", UNREACHABLE_KUBECONFIG);
    let values = scratch.write("values.yaml", values).display().to_string();
    Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args([
            "controller",
            "--values",
            &values,
            "--metrics-addr",
            "127.0.0.1:0",
            "--health-addr",
            "127.0.0.1:0",
            "--log-format",
            "text",
        ])
        .args(extra)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env_remove("JOINER_LOG")
        .env_remove("RUST_LOG")
        .output()
        .expect("the joiner binary runs")
}

#[cfg(feature = "controller")]
#[test]
fn an_unreachable_cluster_is_a_clear_start_up_failure() {
    let scratch = Scratch::new("controller-e2e-unreachable");
    let started = std::time::Instant::now();
    let out = controller(&scratch, "settings: {clusterName: lab}\n", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot reach the Kubernetes API server at https://127.0.0.1:1"),
        "{stderr}"
    );
    // It fails at once instead of waiting for caches that cannot fill.
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
}

#[cfg(feature = "controller")]
#[test]
fn values_without_a_cluster_name_fail_naming_the_setting() {
    let scratch = Scratch::new("controller-e2e-no-cluster-name");
    let out = controller(&scratch, "settings: {region: us-east-1}\n", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("settings.clusterName"), "{stderr}");
    // The settings are checked before the cluster is looked for.
    assert!(!stderr.contains("127.0.0.1:1"), "{stderr}");
}

#[cfg(feature = "controller")]
#[test]
fn logs_are_json_lines_by_default() {
    let scratch = Scratch::new("controller-e2e-json");
    let kubeconfig = scratch.write("kubeconfig", UNREACHABLE_KUBECONFIG);
    let values = scratch
        .write("values.yaml", "settings: {}\n")
        .display()
        .to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["controller", "--values", &values])
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("the joiner binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    let line = stderr
        .lines()
        .find(|l| l.contains("settings.clusterName"))
        .unwrap_or_else(|| panic!("no error line in {stderr}"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["level"], "ERROR");
    assert!(v["timestamp"].is_string(), "{v}");
    assert!(v["target"].is_string(), "{v}");
    assert!(v["fields"]["message"].is_string(), "{v}");
}

#[cfg(not(feature = "controller"))]
#[test]
fn a_build_without_the_feature_says_how_to_get_the_controller() {
    let scratch = Scratch::new("controller-e2e-no-feature");
    let out = controller(&scratch, "settings: {clusterName: lab}\n", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("cargo build --release -p joiner --features controller"),
        "{stderr}"
    );
}
