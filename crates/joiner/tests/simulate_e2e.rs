//! `joiner simulate` on the learning-lab day (examples/learning-lab-day): nodes follow demand,
//! the cost adds up, the output is deterministic, and the HTML report is well formed.

use std::process::Command;

use joiner_test_support::example_dir;
use serde_json::Value;

fn simulate(extra: &[&str]) -> (String, String) {
    let dir = example_dir("learning-lab-day");
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .arg("simulate")
        .arg("-f")
        .arg(&dir)
        .arg("--scenario")
        .arg(dir.join("scenario.yaml"))
        .args(extra)
        .output()
        .expect("runs");
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    let stderr = String::from_utf8(out.stderr).expect("utf-8");
    assert!(out.status.success(), "{stderr}");
    (stdout, stderr)
}

fn events(json: &str) -> Vec<Value> {
    json.lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn the_learning_lab_day() {
    let dir = std::env::temp_dir().join(format!("joiner-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let report_a = dir.join("a.html");
    let report_b = dir.join("b.html");
    let (a, _) = simulate(&["-o", "json", "--report", report_a.to_str().expect("path")]);
    let (b, _) = simulate(&["-o", "json", "--report", report_b.to_str().expect("path")]);
    assert_eq!(a, b, "two runs give the same timeline");
    let html = std::fs::read_to_string(&report_a).expect("report");
    assert_eq!(html, std::fs::read_to_string(&report_b).expect("report"));

    let lines = events(&a);
    let summary = &lines.last().expect("a summary")["summary"];
    // Demand: 4 pods at 08:00, 8 at 09:00, 12 at 10:00 (three per g4dn.xlarge), 2 at night.
    assert_eq!(summary["peakNodes"], 4, "{summary}");
    assert!(
        summary["finalNodes"].as_u64().expect("final") <= 1,
        "{summary}"
    );
    assert_eq!(summary["podsStillPending"], 0);
    assert_eq!(summary["errors"], 0);
    // Cost = node-hours x price, per type and in total.
    let by_type = summary["byInstanceType"].as_object().expect("types");
    assert_eq!(by_type.keys().collect::<Vec<_>>(), ["g4dn.xlarge"]);
    let g4 = &by_type["g4dn.xlarge"];
    let (hours, price, cost) = (
        g4["nodeHours"].as_f64().expect("hours"),
        g4["pricePerHour"].as_f64().expect("price"),
        g4["cost"].as_f64().expect("cost"),
    );
    assert!((price - 0.526).abs() < 1e-9, "{price}");
    assert!(
        (hours * price - cost).abs() < 0.01,
        "{hours} x {price} != {cost}"
    );
    assert!((summary["totalCost"].as_f64().expect("total") - cost).abs() < 1e-9);
    // Lab hours: 4 nodes at most for about 8 h plus 1-2 overnight; far below 4 nodes all day.
    assert!(hours > 20.0 && hours < 60.0, "{hours}");

    // Expiry (120m) replaced nodes, replacements first; consolidation removed nodes at night.
    let disruptions = &summary["disruptions"];
    assert!(
        disruptions["Expired"].as_u64().unwrap_or(0) >= 4,
        "{disruptions}"
    );
    let kinds: Vec<&str> = lines[..lines.len() - 1]
        .iter()
        .map(|e| e["event"].as_str().expect("event"))
        .collect();
    for k in [
        "scale",
        "created",
        "launched",
        "initialized",
        "disruption.replacing",
        "disruption.evicted",
        "disruption.deleted",
        "terminated",
    ] {
        assert!(kinds.contains(&k), "no {k} event");
    }
    // Every replacement is initialized before the node it replaces is evicted.
    for (i, e) in lines.iter().enumerate() {
        if e["event"] == "disruption.replacing" {
            let old = &e["nodeClaims"][0];
            let new = &e["detail"][0];
            let init = lines
                .iter()
                .position(|x| x["event"] == "initialized" && &x["nodeClaim"] == new);
            let evict = lines
                .iter()
                .position(|x| x["event"] == "disruption.evicted" && &x["nodeClaims"][0] == old);
            if let (Some(init), Some(evict)) = (init, evict) {
                assert!(init > i && evict >= init, "{e}");
            }
        }
    }
    // Timeline times never go backwards.
    let ts: Vec<u64> = lines[..lines.len() - 1]
        .iter()
        .map(|e| e["t"].as_u64().expect("t"))
        .collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]));

    check_report(&html);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Tags open and close in order inside every `<svg>` (a tiny XML check), one chart per figure,
/// with the expected series, and no external assets.
fn check_report(html: &str) {
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.trim_end().ends_with("</html>"));
    for external in ["<script src", "<link ", "http://", "https://"] {
        let hits: Vec<_> = html.match_indices(external).collect();
        // The SVG namespace URI is the only URL allowed.
        let allowed = html.matches("xmlns=\"http://www.w3.org/2000/svg\"").count();
        if external == "http://" {
            assert_eq!(hits.len(), allowed, "external reference");
        } else {
            assert!(hits.is_empty(), "external reference {external}");
        }
    }
    let svgs: Vec<&str> = html
        .match_indices("<svg")
        .map(|(i, _)| {
            let end = html[i..].find("</svg>").expect("closed") + i + "</svg>".len();
            &html[i..end]
        })
        .collect();
    assert_eq!(svgs.len(), 4, "one svg per chart");
    for (id, series) in [
        ("nodes", &["nodes", "instances (incl. draining)"][..]),
        ("cost", &["cost per hour"][..]),
        ("gpu", &["GPU allocation"][..]),
        ("pods", &["running", "pending"][..]),
    ] {
        let svg = svgs
            .iter()
            .find(|s| s.starts_with(&format!("<svg id=\"{id}\"")))
            .unwrap_or_else(|| panic!("no chart {id}"));
        for s in series {
            assert!(
                svg.contains(&format!("data-series=\"{s}\"")),
                "{id}: no series {s}"
            );
        }
        well_formed(svg);
    }
}

fn well_formed(xml: &str) {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find('<') {
        let end = rest[i..].find('>').expect("tag closed") + i;
        let tag = &rest[i + 1..end];
        assert!(!tag.contains('<'), "bad tag {tag}");
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(
                stack.pop().as_deref(),
                Some(name.trim()),
                "mismatched </{name}>"
            );
        } else if !tag.ends_with('/') {
            let name = tag.split_whitespace().next().expect("name").to_string();
            stack.push(name);
        }
        // Attribute values are quoted and ampersands escaped.
        assert_eq!(
            tag.matches('"').count() % 2,
            0,
            "unbalanced quotes in {tag}"
        );
        rest = &rest[end + 1..];
        let text_end = rest.find('<').unwrap_or(rest.len());
        let text = &rest[..text_end];
        for (j, _) in text.match_indices('&') {
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;"]
                    .iter()
                    .any(|e| text[j..].starts_with(e)),
                "unescaped & in {text}"
            );
        }
    }
    assert!(stack.is_empty(), "unclosed {stack:?}");
}

#[test]
fn bad_scenarios_are_reported() {
    let dir = std::env::temp_dir().join(format!("joiner-sim-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let manifests = example_dir("learning-lab-day");
    for (text, want) in [
        (
            "duration: 1h\nsteps:\n  - at: 10m\n    scale: {deployment: nope, replicas: 1}\n",
            "no Deployment nope",
        ),
        (
            "duration: 1h\nsteps:\n  - at: 2h\n    scale: {deployment: learning-lab, replicas: 1}\n",
            "after the end",
        ),
        (
            "duration: 1h\nsteps:\n  - at: 10m\n    frobnicate: 1\n",
            "frobnicate",
        ),
        (
            "duration: 1h\nsteps:\n  - at: 30m\n  - at: 10m\n",
            "before the previous step",
        ),
    ] {
        let path = dir.join("scenario.yaml");
        std::fs::write(&path, text).expect("write");
        let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
            .args(["simulate", "-f"])
            .arg(&manifests)
            .arg("--scenario")
            .arg(&path)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}");
        assert!(stderr.contains(want), "{text}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn faults_interruptions_and_pool_changes() {
    let dir = std::env::temp_dir().join(format!("joiner-sim-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let manifests = example_dir("learning-lab-day");
    let scenario = r#"
name: faults
tick: 10s
duration: 3h
steps:
  - at: 0s
    faults:
      insufficientCapacity:
        - {instanceType: g4dn.xlarge, zone: us-east-1a, capacityType: on-demand}
      launchErrors: {count: 1, message: "RequestLimitExceeded"}
      registrationDelay: {delay: 3m, instances: 1}
    scale: {deployment: learning-lab, replicas: 3}
  - at: 30m
    addPods: {from: learning-lab, count: 1, prefix: pinned, annotations: {karpenter.sh/do-not-disrupt: "true"}}
  - at: 1h
    interruptSpot: {nodeClaim: "*"}
  - after: 10m
    changeNodePool: {name: g4-nodepool, patch: {spec: {disruption: {consolidateAfter: 1m}}}}
    deletePods: {prefix: pinned}
    scale: {deployment: learning-lab, replicas: 1}
"#;
    let lines = simulate_scenario(&dir, &manifests, scenario);
    let kinds: Vec<&str> = lines.iter().filter_map(|e| e["event"].as_str()).collect();
    for k in [
        "faults",
        "unavailable",
        "error",
        "launched",
        "addPods",
        "interruptSpot",
        "changeNodePool",
        "deletePods",
    ] {
        assert!(kinds.contains(&k), "no {k} event: {kinds:?}");
    }
    // Insufficient capacity in us-east-1a: launches went elsewhere.
    for e in lines.iter().filter(|e| e["event"] == "launched") {
        assert_ne!(e["zone"], "us-east-1a", "{e}");
    }
    let summary = &lines.last().expect("summary")["summary"];
    assert_eq!(summary["podsStillPending"], 0, "{summary}");
    assert_eq!(summary["finalNodes"], 1, "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// examples/spot-interruption: a spot warning gets its replacement launched at once and the node
/// drained in the same step, before EC2 reclaims the instance; a NodePool change drifts every
/// node and drift replaces them one at a time, each replacement up before its old node drains.
#[test]
fn spot_interruption_and_drift() {
    let dir = example_dir("spot-interruption");
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["simulate", "-o", "json", "-f"])
        .arg(&dir)
        .arg("--scenario")
        .arg(dir.join("scenario.yaml"))
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // Piped: no progress bar, nothing drawn on standard error.
    assert!(
        !stderr.contains('\r') && !stderr.contains("simulating"),
        "{stderr}"
    );
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    let lines = events(&stdout);
    let of = |kind: &str| -> Vec<&Value> { lines.iter().filter(|e| e["event"] == kind).collect() };

    // The interruption: one warning, one replacement launched, the drain in the same step.
    let warned = of("interruptSpot");
    assert_eq!(warned.len(), 1);
    let instance = warned[0]["instances"][0].as_str().expect("instance");
    let interrupted = of("disruption.interrupted");
    assert_eq!(interrupted.len(), 1, "{interrupted:?}");
    let victim = interrupted[0]["nodeClaims"][0].as_str().expect("claim");
    let t = interrupted[0]["t"].as_u64().expect("t");
    let position = |pred: &dyn Fn(&Value) -> bool| lines.iter().position(pred);
    let replacing = position(&|e| {
        e["event"] == "disruption.replacing" && e["reason"] == "Interrupted" && e["t"] == t
    })
    .expect("a replacement at the warning");
    let replacement = lines[replacing]["detail"][0].as_str().expect("name");
    let launched =
        position(&|e| e["event"] == "launched" && e["nodeClaim"] == replacement).expect("launched");
    let evicted = position(&|e| e["event"] == "disruption.evicted" && e["nodeClaims"][0] == victim)
        .expect("evicted");
    assert!(launched < evicted, "launched before the drain");
    assert_eq!(lines[evicted]["t"], t, "drained at once");
    // The replacement took another offering: the reclaimed spot one is avoided for a while.
    assert!(!of("unavailable").is_empty());
    // EC2 reclaims the instance two minutes after the warning.
    let reclaimed = of("terminated")
        .into_iter()
        .filter(|e| e["instance"] == instance)
        .map(|e| e["t"].as_u64().expect("t"))
        .min();
    assert!(reclaimed.is_some_and(|r| r <= t + 130), "{reclaimed:?}");

    // The drift: every node of the pool, replaced one at a time.
    let drifted = of("disruption.drifted");
    assert_eq!(drifted.len(), 3, "{drifted:?}");
    assert!(drifted.iter().all(|e| e["reason"] == "NodePoolDrifted"));
    let drift_moves = of("disruption.replacing")
        .into_iter()
        .filter(|e| e["reason"] == "Drifted")
        .count();
    assert_eq!(drift_moves, 3);
    let summary = &lines.last().expect("summary")["summary"];
    assert_eq!(summary["podsStillPending"], 0, "{summary}");
    assert_eq!(summary["errors"], 0, "{summary}");
    assert_eq!(summary["finalNodes"], 3, "{summary}");
    // 3 nodes, 1 interruption replacement, 3 drift replacements: nothing launched twice.
    assert_eq!(summary["instancesLaunched"], 7, "{summary}");
}

/// A NodeClaim create that commits and then answers a timeout still created a NodeClaim: the
/// summary counts what the API server committed, not what the controller was told, so it
/// matches the NodeClaims the run made (nothing here is deleted).
#[test]
fn creates_that_time_out_are_counted_as_created() {
    let dir = std::env::temp_dir().join(format!("joiner-sim-timeouts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let manifests = example_dir("time-slicing-learning-lab");
    let scenario = "name: timeouts\ntick: 10s\nduration: 10m\nsteps:\n  - at: 0s\n    \
                    faults: {createTimeouts: 3}\n";
    let lines = simulate_scenario(&dir, &manifests, scenario);
    let summary = &lines.last().expect("summary")["summary"];
    assert_eq!(summary["nodeClaimsCreated"], 2, "{summary}");
    assert_eq!(summary["finalNodes"], 2, "{summary}");
    assert_eq!(summary["podsStillPending"], 0, "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `joiner simulate -o json` of `manifests` under `scenario` (written into `dir`): its events,
/// the summary last. Fails the test if the run fails.
fn simulate_scenario(
    dir: &std::path::Path,
    manifests: &std::path::Path,
    scenario: &str,
) -> Vec<Value> {
    let path = dir.join("scenario.yaml");
    std::fs::write(&path, scenario).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["simulate", "-o", "json", "-f"])
        .arg(manifests)
        .arg("--scenario")
        .arg(&path)
        .output()
        .expect("runs");
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    events(&stdout)
}

/// `--metrics` and `--events` write what the live controller would have served and published
/// over the run: counters that agree with the summary, Karpenter's events on the NodeClaims and
/// Nodes of the spot interruption and the drift, none repeated within its window.
#[test]
fn the_metrics_and_events_of_a_run_are_written_to_files() {
    let dir = joiner_test_support::Scratch::new("sim-telemetry");
    let (metrics, events_file) = (
        dir.path().join("metrics.txt"),
        dir.path().join("events.jsonl"),
    );
    let example = example_dir("spot-interruption");
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["simulate", "-o", "json", "-f"])
        .arg(&example)
        .arg("--scenario")
        .arg(example.join("scenario.yaml"))
        .arg("--metrics")
        .arg(&metrics)
        .arg("--events")
        .arg(&events_file)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    let summary = events(&stdout).last().expect("a summary")["summary"].clone();
    let exposition = std::fs::read_to_string(&metrics).expect("metrics written");
    let sum = |prefix: &str| -> f64 {
        exposition
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(
        sum("karpenter_nodeclaims_created_total{"),
        summary["nodeClaimsCreated"].as_f64().expect("a count"),
        "{exposition}"
    );
    assert_eq!(
        sum("karpenter_interruption_received_messages_total{message_type=\"spot_interrupted\"}"),
        1.0
    );
    assert_eq!(
        sum("karpenter_cluster_state_node_count"),
        summary["finalNodes"].as_f64().expect("nodes")
    );
    assert!(
        exposition.contains("karpenter_nodes_allocatable{"),
        "{exposition}"
    );
    let published: Vec<Value> = std::fs::read_to_string(&events_file)
        .expect("events written")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let has = |reason: &str, kind: &str| {
        published.iter().any(|e| {
            e["reason"] == reason && e["object"].as_str().is_some_and(|o| o.starts_with(kind))
        })
    };
    for (reason, kind) in [
        ("Nominated", "Pod/"),
        ("SpotInterrupted", "NodeClaim/"),
        ("SpotInterrupted", "Node/"),
        ("DisruptionTerminating", "Node/"),
        ("DisruptionLaunching", "NodeClaim/"),
        ("Evicted", "Pod/"),
        // Condition transitions, as Karpenter's operator library tells them.
        ("Ready", "NodeClaim/"),
    ] {
        assert!(has(reason, kind), "no {reason} on a {kind}: {published:#?}");
    }
    // Karpenter's recorder: the same reason on the same object at most once per 2 minutes (per
    // minute and per disruption reason for a NodePool's DisruptionBlocked).
    let seconds = |t: &str| -> u64 {
        t.split(':').fold(0, |acc, part| {
            acc * 60 + part.parse::<u64>().expect("HH:MM:SS")
        })
    };
    let mut last = std::collections::BTreeMap::new();
    for e in &published {
        let per_minute = ["DisruptionBlocked", "NoCompatibleInstanceTypes"]
            .contains(&e["reason"].as_str().unwrap_or_default());
        let about = if per_minute {
            e["message"].to_string()
        } else {
            String::new()
        };
        let key = (e["reason"].to_string(), e["object"].to_string(), about);
        let window = if per_minute { 60 } else { 120 };
        let at = seconds(e["time"].as_str().expect("a time"));
        if let Some(before) = last.insert(key.clone(), at) {
            assert!(
                at >= before + window,
                "{key:?} again after {} s",
                at - before
            );
        }
    }
}
