//! Reading input from disk and standard input: the only place the model's parsers meet files.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use joiner_model::settings::{apply_set, merge_values};
use joiner_model::{Manifests, parse_documents};
use serde_json::Value;

/// Directories nested deeper than this are not followed (guards against symlink loops).
const MAX_DIR_DEPTH: usize = 32;

/// Reads manifests from files, directories (recursively: `*.yaml`, `*.yml`, `*.json`, in sorted
/// order, hidden entries skipped) and `-` for standard input, in the order given.
pub fn load_manifests(paths: &[PathBuf]) -> anyhow::Result<Manifests> {
    let mut manifests = Manifests::default();
    for path in paths {
        for file in expand_path(path)? {
            let (name, text) = read_input(&file)?;
            for (origin, doc) in parse_documents(&name, &text)? {
                manifests.add_document(origin, doc)?;
            }
        }
    }
    manifests.finish();
    Ok(manifests)
}

/// Merges values files in order (later ones win, as with `helm -f a -f b`), then applies
/// `--set` expressions in order.
pub fn load_values(files: &[PathBuf], sets: &[String]) -> anyhow::Result<Value> {
    let mut values = Value::Object(serde_json::Map::new());
    for file in files {
        let (name, text) = read_input(file)?;
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
fn expand_path(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
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

/// The text of a file (or of standard input for `-`) and the name to report it by.
fn read_input(path: &Path) -> anyhow::Result<(String, String)> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading standard input")?;
        return Ok(("-".to_string(), text));
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok((path.display().to_string(), text))
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
