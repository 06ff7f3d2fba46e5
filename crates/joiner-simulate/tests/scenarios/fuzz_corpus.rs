//! Replays the fuzz corpora and crash regressions through the fuzz harnesses, so CI checks
//! what the fuzzers found without fuzzing: every file of `fuzz/corpus/<target>/` and
//! `fuzz/regressions/<target>/` must go through its harness without a panic. See the
//! README's "Hardening" section for running the fuzzers themselves.

#[allow(dead_code)]
#[path = "../../../../fuzz/src/lib.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::time::Instant;

fn fuzz_dir() -> PathBuf {
    joiner_test_support::repo_root().join("fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn replay(kind: &str) -> usize {
    let mut count = 0;
    for (target, run) in harness::TARGETS {
        for file in files(&fuzz_dir().join(kind).join(target)) {
            let data = std::fs::read(&file).unwrap();
            let started = Instant::now();
            let outcome = std::panic::catch_unwind(|| run(&data));
            assert!(
                outcome.is_ok(),
                "{target}: {} panicked (replay with the fuzz target or this test)",
                file.display()
            );
            let took = started.elapsed();
            if std::env::var_os("JOINER_REPLAY_TIMES").is_some() {
                eprintln!("{target}: {} {took:?}", file.display());
            }
            assert!(
                took.as_secs() < 20,
                "{target}: {} took {took:?}",
                file.display()
            );
            count += 1;
        }
    }
    count
}

#[test]
fn fuzz_corpus_replays_without_panics() {
    let n = replay("corpus");
    assert!(
        n > 0,
        "no corpus files found under {}",
        fuzz_dir().display()
    );
}

#[test]
fn fuzz_regressions_replay_without_panics() {
    replay("regressions");
}

#[test]
fn every_target_has_a_corpus() {
    for (target, _) in harness::TARGETS {
        assert!(
            !files(&fuzz_dir().join("corpus").join(target)).is_empty(),
            "fuzz/corpus/{target} is empty"
        );
    }
}
