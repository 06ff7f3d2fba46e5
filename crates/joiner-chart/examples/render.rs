//! `helm template` for Joiner's chart, where `helm` is not installed:
//!
//! ```sh
//! cargo run -p joiner-chart --example render -- [--release NAME] [--namespace NS] \
//!     [-f values.yaml]... [--set key=value]...
//! ```
//!
//! Prints every rendered object, each after a `# Source:` line, as `helm template` does.

use std::path::PathBuf;
use std::process::ExitCode;

use joiner_chart::{Chart, Release, karpenter};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let mut release = Release::install("joiner", "kube-system");
    let mut files = Vec::new();
    let mut sets = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--release" => release.name = value()?,
            "--namespace" | "-n" => release.namespace = value()?,
            "--set" => sets.push(value()?),
            "-f" | "--values" => {
                let path = value()?;
                let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
                let v: serde_json::Value =
                    serde_saphyr::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
                files.push((path, v));
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../charts/joiner");
    let chart = Chart::load(&dir).map_err(|e| e.to_string())?;
    // A values file written for Karpenter's chart: Joiner's image stays, and what the chart
    // does not use is said.
    let mut adopted = Vec::new();
    for (path, mut file) in files {
        for u in karpenter::adopt(&mut file, &chart.default_values) {
            eprintln!("warning: {path}: {}: not used: {}", u.path, u.why);
        }
        adopted.push(file);
    }
    let files = adopted;
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let values = chart.values(&files, &sets).map_err(|e| e.to_string())?;
    for file in chart.render(&values, &release).map_err(|e| e.to_string())? {
        println!(
            "---\n# Source: {}\n{}",
            file.template,
            file.text.trim_matches('\n')
        );
    }
    Ok(())
}
