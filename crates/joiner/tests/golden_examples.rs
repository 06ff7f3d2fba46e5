//! The plans and simulations of every bundled example, byte for byte against the outputs
//! recorded in `tests/golden/`. Refactors must leave them unchanged; a change that is meant to
//! alter a decision re-records them with `JOINER_BLESS=1 cargo test -p joiner --test
//! golden_examples` and shows the difference in review.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn examples() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root().join("examples"))
        .expect("examples/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

fn run(args: &[String]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("runs joiner");
    assert!(
        out.status.success(),
        "joiner {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn relative(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

/// Compares `actual` with the recorded file, or records it under `JOINER_BLESS=1`.
fn check(name: &str, actual: &str, failures: &mut Vec<String>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("JOINER_BLESS").is_some() {
        std::fs::write(&path, actual).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        failures.push(format!(
            "{name}: differs from tests/golden/{name} at line {}:\n  recorded: {}\n  now:      {}",
            line + 1,
            expected.lines().nth(line).unwrap_or("<end>"),
            actual.lines().nth(line).unwrap_or("<end>")
        ));
    }
}

#[test]
fn every_example_plans_and_simulates_as_recorded() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for dir in examples() {
        let name = dir.file_name().expect("name").to_string_lossy().to_string();
        let mut base = vec!["-f".to_string(), relative(&dir)];
        let values = dir.join("values.yaml");
        if values.exists() {
            base.extend(["--values".to_string(), relative(&values)]);
        }
        for (format, ext) in [("json", "plan.json"), ("wide", "plan.txt")] {
            let mut args = vec!["plan".to_string()];
            args.extend(base.iter().cloned());
            args.extend(["-o".to_string(), format.to_string()]);
            check(&format!("{name}.{ext}"), &run(&args), &mut failures);
            checked += 1;
        }
        let scenario = dir.join("scenario.yaml");
        if scenario.exists() {
            let mut args = vec!["simulate".to_string()];
            args.extend(base.iter().cloned());
            args.extend([
                "--scenario".to_string(),
                relative(&scenario),
                "-o".to_string(),
                "json".to_string(),
            ]);
            check(
                &format!("{name}.simulate.jsonl"),
                &run(&args),
                &mut failures,
            );
            checked += 1;
        }
    }
    assert!(checked >= 14, "only {checked} outputs checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
