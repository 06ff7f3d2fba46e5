//! Reading input from disk and standard input: the only place the model's parsers meet files.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use joiner_model::settings::{apply_set, merge_values};
use joiner_model::{Manifests, for_each_document, parse_documents};
use serde_json::Value;

/// Directories nested deeper than this are not followed (guards against symlink loops).
const MAX_DIR_DEPTH: usize = 32;

/// Most bytes one command reads as manifests, all files together: 1 GiB, about a dump of a
/// cluster of 100,000 pods as `kubectl get -o yaml` writes them. Past it the command stops with
/// an error naming the file, rather than growing without bound (`-f /dev/zero`).
pub const MAX_INPUT_BYTES: u64 = 1 << 30;

/// Reads manifests from files, directories (recursively: `*.yaml`, `*.yml`, `*.json`, in sorted
/// order, hidden entries skipped) and `-` for standard input, in the order given.
pub fn load_manifests(paths: &[PathBuf]) -> anyhow::Result<Manifests> {
    load_manifests_within(paths, MAX_INPUT_BYTES)
}

/// [`load_manifests`] reading at most `limit` bytes in all.
fn load_manifests_within(paths: &[PathBuf], limit: u64) -> anyhow::Result<Manifests> {
    let mut manifests = Manifests::default();
    let mut budget = InputBudget::new(limit);
    for path in paths {
        for file in expand_path(path)? {
            let (name, text) = budget.read(&file)?;
            for_each_document(&name, &text, |doc| manifests.add_yaml(doc))?;
        }
    }
    manifests.finish();
    Ok(manifests)
}

/// Merges values files in order (later ones win, as with `helm -f a -f b`), then applies
/// `--set` expressions in order.
pub fn load_values(files: &[PathBuf], sets: &[String]) -> anyhow::Result<Value> {
    let mut values = Value::Object(serde_json::Map::new());
    let mut budget = InputBudget::new(MAX_INPUT_BYTES);
    for file in files {
        let (name, text) = budget.read(file)?;
        for (origin, doc) in parse_documents(&name, &text)? {
            if !doc.is_object() {
                bail!("{origin}: a values file must be a map of settings");
            }
            merge_values(&mut values, doc);
        }
    }
    for set in sets {
        apply_set(&mut values, set)?;
    }
    Ok(values)
}

/// The files a path stands for: itself, or the manifest files under a directory.
pub fn expand_path(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if path.as_os_str() == "-" {
        return Ok(vec![path.to_path_buf()]);
    }
    let meta = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    walk(path, 0, &mut files)?;
    files.sort();
    Ok(files)
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    if depth > MAX_DIR_DEPTH {
        bail!("{}: directories nested too deeply", dir.display());
    }
    let entries = std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("{}", dir.display()))?;
        let path = entry.path();
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let meta = std::fs::metadata(&path).with_context(|| format!("{}", path.display()))?;
        if meta.is_dir() {
            walk(&path, depth + 1, out)?;
        } else if is_manifest(&path) {
            out.push(path);
        }
    }
    Ok(())
}

fn is_manifest(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
}

/// What is left of the bytes one command may read.
struct InputBudget {
    left: u64,
    limit: u64,
}

impl InputBudget {
    fn new(limit: u64) -> InputBudget {
        InputBudget { left: limit, limit }
    }

    /// The text of a file (or of standard input for `-`) and the name to report it by, read
    /// only up to what is left of the budget: a read past it is an error naming the file, before
    /// more is held in memory.
    fn read(&mut self, path: &Path) -> anyhow::Result<(String, String)> {
        let name = if path.as_os_str() == "-" {
            "-".to_string()
        } else {
            path.display().to_string()
        };
        let source: Box<dyn Read> = if path.as_os_str() == "-" {
            Box::new(std::io::stdin())
        } else {
            Box::new(std::fs::File::open(path).with_context(|| format!("reading {name}"))?)
        };
        let mut text = String::new();
        source
            .take(self.left.saturating_add(1))
            .read_to_string(&mut text)
            .with_context(|| format!("reading {name}"))?;
        let read = text.len() as u64;
        if read > self.left {
            bail!(
                "{name}: the input is larger than Joiner reads in one command ({} bytes in all, \
                 all files together); split it or remove what the plan does not need",
                self.limit
            );
        }
        self.left -= read;
        Ok((name, text))
    }
}

#[cfg(test)]
mod tests {
    use joiner_test_support::Scratch;

    use super::*;

    fn pod(name: &str) -> String {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec: {{containers: []}}\n")
    }

    #[test]
    fn reads_directories_recursively_in_sorted_order() {
        let s = Scratch::new("load-dirs");
        s.write("b/z.yaml", &pod("from-b"));
        s.write("a.yml", &pod("from-a"));
        s.write("c.json", r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "from-c"}, "spec": {"containers": []}}"#);
        s.write("notes.txt", "not yaml: [");
        s.write(".hidden/x.yaml", &pod("hidden"));
        let m = load_manifests(&[s.path().to_path_buf()]).unwrap();
        let names: Vec<_> = m
            .pods
            .iter()
            .map(|p| p.object.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, ["from-a", "from-b", "from-c"]);
        assert!(m.pods[1].origin.file.ends_with("z.yaml"));
    }

    #[test]
    fn input_past_the_byte_limit_is_an_error_naming_the_file() {
        let s = Scratch::new("load-limit");
        let a = s.write("a.yaml", &pod("a"));
        let b = s.write("b.yaml", &pod("b"));
        let both = a.metadata().unwrap().len() + b.metadata().unwrap().len();
        assert!(load_manifests_within(&[a.clone(), b.clone()], both).is_ok());
        let e = load_manifests_within(&[a, b], both - 1).unwrap_err();
        let text = format!("{e:#}");
        assert!(
            text.contains("b.yaml") && text.contains("larger than Joiner reads"),
            "{text}"
        );
        // An endless file stops at the limit rather than filling memory.
        let e = load_manifests_within(&[PathBuf::from("/dev/zero")], 1 << 20).unwrap_err();
        assert!(
            format!("{e:#}").contains("/dev/zero: the input is larger"),
            "{e:#}"
        );
    }

    #[test]
    fn errors_carry_the_path() {
        let s = Scratch::new("load-errors");
        let bad = s.write("bad.yaml", "a: [\n");
        let e = load_manifests(std::slice::from_ref(&bad)).unwrap_err();
        assert!(format!("{e:#}").contains("bad.yaml"), "{e:#}");
        let missing = s.path().join("missing.yaml");
        let e = load_manifests(&[missing]).unwrap_err();
        assert!(format!("{e:#}").contains("missing.yaml"), "{e:#}");
    }

    #[test]
    fn values_merge_in_order_then_sets_apply() {
        let s = Scratch::new("load-values");
        let a = s.write("a.yaml", "settings: {region: us-west-2, enableDRA: true}\n");
        let b = s.write(
            "b.yaml",
            "settings: {clusterName: demo, region: eu-west-1}\n",
        );
        let v = load_values(&[a, b], &["settings.clusterName=prod".to_string()]).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"settings": {"region": "eu-west-1", "enableDRA": true, "clusterName": "prod"}})
        );
        let e = load_values(&[], &["novalue".to_string()]).unwrap_err();
        assert!(e.to_string().contains("novalue"), "{e}");
    }
}
