//! Fixtures shared by Joiner's tests, so each test file does not carry its own copy: where the
//! repository and its examples are, the examples loaded as manifests the way the planner reads
//! them, scratch directories that clean up after themselves, and running a built binary.
//!
//! A dev-dependency only (`publish = false`): it panics with a message on anything unexpected,
//! which is what a test wants and a library must not do.

pub mod api_server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use joiner_model::{Manifests, parse_documents, parse_yaml};
use serde_json::Value;

/// Files in an example directory that are not Kubernetes objects: the Helm values an example
/// is planned with, and the `joiner simulate` scenario.
const NOT_MANIFESTS: &[&str] = &["values.yaml", "scenario.yaml"];

/// The repository's root directory (this crate is `crates/joiner-test-support`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the crate lives two directories below the repository root")
        .to_path_buf()
}

/// `examples/<name>` in the repository.
pub fn example_dir(name: &str) -> PathBuf {
    repo_root().join("examples").join(name)
}

/// The manifest files of a directory: its `*.yaml` files, not recursively, in sorted order,
/// without the ones that are not objects (`values.yaml`, `scenario.yaml`).
pub fn manifest_files(dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading the directory {}: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| {
            p.file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| !NOT_MANIFESTS.contains(&f))
        })
        .collect();
    files.sort();
    files
}

/// The objects of a directory's manifest files (see [`manifest_files`]), as the planner reads
/// them: every document added in file order, then [`Manifests::finish`].
pub fn load_dir(dir: &Path) -> Manifests {
    let mut m = Manifests::default();
    for file in manifest_files(dir) {
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let docs = parse_yaml(&file.display().to_string(), &text)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for doc in docs {
            m.add_yaml(doc)
                .unwrap_or_else(|e| panic!("{}: not a valid object: {e}", file.display()));
        }
    }
    m.finish();
    m
}

/// The objects of `examples/<name>` (see [`load_dir`]).
pub fn load_example(name: &str) -> Manifests {
    load_dir(&example_dir(name))
}

/// The Helm values `examples/<name>/values.yaml` gives (its first document).
pub fn example_values(name: &str) -> Value {
    let file = example_dir(name).join("values.yaml");
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
    parse_documents("values.yaml", &text)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{}: no document", file.display()))
        .1
}

/// Runs a built binary (a test passes `env!("CARGO_BIN_EXE_joiner")`) with `args`, as a user
/// would from a shell.
pub fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {bin}: {e}"))
}

/// Runs it and reads its standard output as JSON; a failed run fails the test with its
/// standard error.
pub fn run_json(bin: &str, args: &[&str]) -> Value {
    let out = run(bin, args);
    assert!(
        out.status.success(),
        "{bin} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{bin} {args:?}: output is not JSON: {e}"))
}

/// A fresh directory under the system's temporary directory, removed with everything in it when
/// dropped. Names are unique per process and per call, so tests running in parallel never share
/// one.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    /// A new, empty directory whose name starts with `joiner-<name>-`.
    pub fn new(name: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("joiner-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        Scratch(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `text` to `rel` (parent directories created as needed); returns its path.
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.0.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("creating {}: {e}", parent.display()));
        }
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
