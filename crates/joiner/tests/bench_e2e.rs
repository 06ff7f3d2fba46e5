//! `joiner bench`'s whole-process benchmark, run as a user runs it: its files are real input
//! for `joiner plan`, and its table names every figure for each size.

use joiner_test_support::{Scratch, run, run_json};

const JOINER: &str = env!("CARGO_BIN_EXE_joiner");

#[test]
fn the_written_benchmark_input_is_planned_whole_by_joiner_plan() {
    let dir = Scratch::new("bench-input");
    let out = run(
        JOINER,
        &[
            "bench",
            "--write-input",
            &dir.path().display().to_string(),
            "--process-pods",
            "60",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let input = dir.path().join("60");
    let plan = run_json(
        JOINER,
        &["plan", "-f", &input.display().to_string(), "-o", "json"],
    );
    assert_eq!(plan["bindings"].as_array().map(Vec::len), Some(60));
    assert_eq!(plan["unschedulable"].as_array().map(Vec::len), Some(0));
    // Every sixth pod's kind is hostname anti-affinity among all such pods: one node each.
    let nodes = plan["nodeClaims"].as_array().map_or(0, Vec::len);
    assert!(
        nodes >= 10,
        "{nodes} nodes for 10 anti-affinity pods (one in six of 60)"
    );
}

#[test]
fn the_whole_process_benchmark_reports_parse_read_and_plan_for_each_size_and_format() {
    let out = run(
        JOINER,
        &["bench", "--only", "process", "--process-pods", "30,90"],
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{table}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let header = table
        .lines()
        .find(|l| l.contains("PODS"))
        .expect("a header");
    for column in [
        "INPUT MiB",
        "PARSE s / MiB",
        "READ s / MiB",
        "PLAN s / MiB",
        "PLAN/PARSE",
    ] {
        assert!(header.contains(column), "{header}");
    }
    for (pods, format) in [
        ("30", "yaml"),
        ("30", "json"),
        ("90", "yaml"),
        ("90", "json"),
    ] {
        let row = table
            .lines()
            .find(|l| l.split_whitespace().take(2).eq([pods, format]))
            .unwrap_or_else(|| panic!("no row for {pods} pods in {format}:\n{table}"));
        // pods, format, input size, then three "seconds / MiB" cells and the ratio.
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells.len(), 13, "{row}");
        let ratio: f64 = cells[12].parse().expect("a ratio");
        assert!(ratio.is_finite() && ratio > 0.0, "{row}");
    }
}

/// The packing benchmark's GPU steps come out cheaper with the exact pass, and never dearer.
#[test]
fn the_packing_benchmark_reports_each_step_greedy_and_exact() {
    let out = run(JOINER, &["bench", "--only", "packing"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{table}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<&str> = table.lines().filter(|l| l.contains(" pods of ")).collect();
    assert_eq!(rows.len(), 3, "{table}");
    for row in &rows {
        // The label, greedy and exact prices, two times, then the ratio and the solver.
        let cells: Vec<&str> = row.split_whitespace().collect();
        let ratio: f64 = cells[cells.len() - 2]
            .parse()
            .unwrap_or_else(|_| panic!("a ratio in {row}"));
        assert!(ratio >= 1.0, "{row}");
    }
    let mixed = rows
        .iter()
        .find(|r| r.starts_with("64 GPU pods"))
        .expect("the 64-pod GPU step");
    assert!(mixed.contains("Exact"), "{mixed}");
    assert!(
        mixed.contains("18.052") && mixed.contains("16.1"),
        "{mixed}"
    );
}
