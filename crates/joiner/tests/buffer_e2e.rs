//! End-to-end: CapacityBuffers (Karpenter's `CapacityBuffer` gate) in `joiner plan` and
//! `joiner simulate`, on `examples/capacity-buffer-lab`: the learning lab with three lab seats
//! (one g4dn.xlarge's worth) kept warm.

use std::process::{Command, Output};

use joiner_test_support::{Scratch, example_dir};
use serde_json::Value;

fn joiner(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(args)
        .output()
        .expect("the joiner binary runs")
}

fn ok_json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn dir() -> String {
    example_dir("capacity-buffer-lab").display().to_string()
}

fn values() -> String {
    format!("{}/values.yaml", dir())
}

#[test]
fn a_plan_launches_what_the_buffer_keeps_after_the_real_pods_are_placed() {
    let plan = ok_json(&joiner(&[
        "plan",
        "-f",
        &dir(),
        "--values",
        &values(),
        "-o",
        "json",
    ]));
    // The lab's 4 pods take a node and a seat of a second; the buffer's 3 seats take the
    // second node's 2 spare seats and a third node.
    let claims = plan["nodeClaims"].as_array().expect("nodeClaims");
    assert_eq!(claims.len(), 3, "{plan:#}");
    let bindings = plan["bindings"].as_array().expect("bindings");
    assert_eq!(bindings.len(), 4, "virtual pods are not bindings: {plan:#}");
    assert!(bindings.iter().all(|b| {
        b["pod"]
            .as_str()
            .is_some_and(|p| p.contains("learning-lab"))
    }));
    let buffer = &plan["capacityBuffers"][0];
    assert_eq!(buffer["buffer"], "default/lab-seats");
    assert_eq!(buffer["replicas"], 3);
    assert_eq!(buffer["onNewNodeClaims"], 3);
    assert_eq!(buffer["unplaced"], 0);
    // The first node holds only real pods: real pods were placed first.
    let first: Vec<&str> = claims[0]["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        first.iter().all(|p| p.contains("learning-lab")),
        "{first:?}"
    );
    // The table says it too.
    let out = joiner(&["plan", "-f", &dir(), "--values", &values()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Capacity buffers:\n  default/lab-seats: 3 chunk(s), 3 on new"),
        "{text}"
    );
}

#[test]
fn without_the_gate_a_buffer_keeps_nothing() {
    let plan = ok_json(&joiner(&["plan", "-f", &dir(), "-o", "json"]));
    assert_eq!(plan["nodeClaims"].as_array().map(Vec::len), Some(2));
    assert!(plan.get("capacityBuffers").is_none(), "{plan:#}");
}

#[test]
fn a_buffer_that_cannot_be_resolved_says_why_and_keeps_nothing() {
    let scratch = Scratch::new("buffer");
    let bad = scratch.write(
        "bad-buffer.yaml",
        "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {name: ghost, namespace: default}\nspec: {podTemplateRef: {name: missing}, replicas: 2}\n",
    );
    let out = joiner(&[
        "plan",
        "-f",
        &dir(),
        "-f",
        &bad.display().to_string(),
        "--values",
        &values(),
        "-o",
        "json",
    ]);
    let plan = ok_json(&out);
    let ghost = plan["capacityBuffers"]
        .as_array()
        .expect("buffers")
        .iter()
        .find(|b| b["buffer"] == "default/ghost")
        .expect("the ghost buffer")
        .clone();
    assert!(
        ghost["notReady"]
            .as_str()
            .is_some_and(|w| w.starts_with("PodTemplateNotFound")),
        "{ghost:#}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("CapacityBuffer/default/ghost"), "{stderr}");
    // The good buffer is kept all the same.
    assert_eq!(plan["nodeClaims"].as_array().map(Vec::len), Some(3));
    // A buffer the CRD refuses is an input error naming it and the field.
    let refused = scratch.write(
        "refused.yaml",
        "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {name: both, namespace: default}\nspec: {podTemplateRef: {name: lab-seat}, scalableRef: {kind: Deployment, name: learning-lab}, replicas: 1}\n",
    );
    let out = joiner(&["plan", "-f", &refused.display().to_string()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("CapacityBuffer/default/both") && stderr.contains("not both"),
        "{stderr}"
    );
}

fn morning(with_buffer: bool) -> Value {
    let scenario = format!("{}/scenario.yaml", dir());
    let d = dir();
    let v = values();
    let mut args = vec!["simulate", "-f", &d, "--scenario", &scenario, "-o", "json"];
    if with_buffer {
        args.extend(["--values", &v]);
    }
    let out = joiner(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(str::to_string)
        .expect("a summary");
    serde_json::from_str::<Value>(&last).expect("JSON")["summary"].clone()
}

#[test]
fn a_warm_node_starts_every_student_at_once_for_its_price() {
    let with = morning(true);
    let without = morning(false);
    // Every GPU node takes 6 minutes to join: without the buffer each arrival waits for one.
    assert_eq!(without["pendingMaxSeconds"], 400.0, "{without:#}");
    assert_eq!(with["pendingMaxSeconds"], 0.0, "{with:#}");
    assert_eq!(with["podsStillPending"], 0);
    // A warm node launched at the start and again after each arrival took it: no churn.
    assert_eq!(with["instancesLaunched"], 5, "{with:#}");
    let cost = |s: &Value| s["totalCost"].as_f64().expect("a cost");
    assert!(cost(&with) > cost(&without), "{with:#} {without:#}");
}
