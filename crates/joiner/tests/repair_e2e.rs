//! End-to-end: node repair in `joiner simulate`. The `gpu-node-repair` example fails the GPUs
//! of the learning lab's oldest node (`failNode`), and node repair replaces it once the fault
//! has held for the AWS provider's 10 minutes; a fault gone in 5 minutes is left alone.

use std::process::{Command, Output};

use joiner_test_support::{Scratch, example_dir};
use serde_json::Value;

fn joiner(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(args)
        .output()
        .expect("the joiner binary runs")
}

fn simulate(scenario: &str) -> Output {
    simulate_example("gpu-node-repair", scenario)
}

fn simulate_example(example: &str, scenario: &str) -> Output {
    let dir = example_dir(example).display().to_string();
    let values = format!("{dir}/values.yaml");
    joiner(&[
        "simulate",
        "-f",
        &dir,
        "--values",
        &values,
        "--scenario",
        scenario,
        "-o",
        "json",
    ])
}

#[test]
fn a_node_whose_gpus_fail_is_replaced_after_ten_minutes_and_a_passing_fault_is_not() {
    let scenario = example_dir("gpu-node-repair").join("scenario.yaml");
    let out = simulate(&scenario.display().to_string());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out);
    let at = |event: &str, reason: Option<&str>| -> Vec<u64> {
        lines
            .iter()
            .filter(|l| l["event"] == event)
            .filter(|l| reason.is_none_or(|r| l["reason"] == r))
            .filter_map(|l| l["t"].as_u64())
            .collect()
    };
    let failed = at("failNode", None);
    assert_eq!(failed, [600, 2400]);
    // Repaired once, 10 minutes after the first fault; the 5-minute fault recovered first.
    assert_eq!(at("disruption.decided", Some("Unhealthy")), [1200]);
    assert_eq!(at("nodeRecovered", None), [2700]);
    let summary = &lines.last().expect("a summary")["summary"];
    assert_eq!(summary["disruptions"]["Unhealthy"], 1, "{summary:#}");
    assert_eq!(summary["podsStillPending"], 0, "{summary:#}");
    assert_eq!(summary["instancesLaunched"], 3, "{summary:#}");
    // Two nodes failed, one replaced 10 minutes after its fault.
    let repairs = &summary["repairs"];
    assert_eq!(repairs["failed"], 2, "{summary:#}");
    assert_eq!(repairs["repaired"], 1, "{summary:#}");
    assert_eq!(repairs["meanSeconds"], 600.0, "{summary:#}");
}

fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// `gpu-node-reboot`: with `rebootForRepair`, an Xid a reboot clears is rebooted in place (the
/// lab's PodDisruptionBudget holds its pods, so the drain waits its 10 minutes and they ride
/// the reboot out); the same node failing for good is rebooted once more (its second within a
/// day) and then replaced.
#[test]
fn a_gpu_fault_is_rebooted_before_the_node_is_replaced() {
    let scenario = example_dir("gpu-node-reboot").join("scenario.yaml");
    let out = simulate_example("gpu-node-reboot", &scenario.display().to_string());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out);
    let reboots = |phase: &str| -> Vec<u64> {
        lines
            .iter()
            .filter(|l| l["event"] == "reboot" && l["phase"] == phase)
            .filter_map(|l| l["t"].as_u64())
            .collect()
    };
    // Decided 10 minutes after each fault; issued when the drain's 10 minutes are up.
    assert_eq!(reboots("requested"), [1200, 3000]);
    assert_eq!(reboots("issued"), [1800, 3600]);
    assert_eq!(reboots("succeeded").len(), 2);
    let every =
        |event: &str| -> Vec<&Value> { lines.iter().filter(|l| l["event"] == event).collect() };
    let recovered = every("nodeRecovered");
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert_eq!(recovered[0]["byReboot"], true);
    assert_eq!(every("faultSurvivedReboot").len(), 1);
    // Every reboot names its NodeClaim.
    assert!(
        every("reboot")
            .iter()
            .all(|r| r["nodeClaim"].as_str().is_some_and(|c| !c.is_empty()))
    );
    // Replaced a toleration after the second reboot came back, not before.
    let replaced: Vec<u64> = every("disruption.decided")
        .iter()
        .filter(|l| l["reason"] == "Unhealthy")
        .filter_map(|l| l["t"].as_u64())
        .collect();
    let back = reboots("succeeded")[1];
    assert_eq!(replaced, [back + 600]);
    let summary = &lines.last().expect("a summary")["summary"];
    let repairs = &summary["repairs"];
    assert_eq!(repairs["failed"], 2, "{summary:#}");
    assert_eq!(repairs["rebooted"], 2, "{summary:#}");
    assert_eq!(repairs["recoveredByReboot"], 1, "{summary:#}");
    assert_eq!(repairs["repaired"], 1, "{summary:#}");
    assert_eq!(summary["podsStillPending"], 0, "{summary:#}");
}

#[test]
fn a_fail_node_step_joiner_cannot_run_is_refused_naming_the_field() {
    let scratch = Scratch::new("repair");
    let bad = scratch.write(
        "bad.yaml",
        "name: bad\nduration: 1h\nsteps:\n  - at: 1m\n    failNode: {nodeClaim: \"*\", for: soon}\n",
    );
    let out = simulate(&bad.display().to_string());
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("failNode.for"), "{stderr}");
}
