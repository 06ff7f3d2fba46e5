//! The command-line habits a kubectl and Karpenter user brings: `joiner version`,
//! `joiner completion`, `-o name`, a warning for empty input, and exit codes (0 done, 1 bad
//! input).

use joiner_test_support::{Scratch, example_dir, run, run_json};

const JOINER: &str = env!("CARGO_BIN_EXE_joiner");

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn version_names_the_build_and_the_karpenter_api_it_follows() {
    let out = run(JOINER, &["version"]);
    assert!(out.status.success());
    let said = text(&out.stdout);
    assert!(
        said.starts_with(&format!("joiner {}\n", env!("CARGO_PKG_VERSION"))),
        "{said}"
    );
    assert!(
        said.contains("karpenter API: karpenter.sh/v1, karpenter.k8s.aws/v1 (Karpenter v1.14.1)"),
        "{said}"
    );
    let json = run_json(JOINER, &["version", "-o", "json"]);
    assert_eq!(json["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(json["karpenterApi"]["release"], "v1.14.1");
    // The commit of this checkout: twelve hex digits.
    let commit = json["commit"].as_str().expect("a commit");
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "{commit}"
    );
    let features: Vec<&str> = json["features"]
        .as_array()
        .expect("features")
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    assert_eq!(
        features.contains(&"controller"),
        cfg!(feature = "controller"),
        "{features:?}"
    );
}

#[test]
fn completion_scripts_know_the_subcommands() {
    for shell in ["bash", "zsh", "fish"] {
        let out = run(JOINER, &["completion", shell]);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        for word in ["plan", "simulate", "catalog", "explain"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
    }
    let out = run(JOINER, &["completion", "tcsh"]);
    // An unknown shell is a bad command line: exit 1, as bad input is.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(run(JOINER, &["--help"]).status.code(), Some(0));
}

#[test]
fn name_output_lists_the_node_claims_as_kubectl_does() {
    let lab = example_dir("time-slicing-learning-lab");
    let out = run(
        JOINER,
        &["plan", "-f", lab.to_str().expect("path"), "-o", "name"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "nodeclaim/g4-nodepool-0\nnodeclaim/g4-nodepool-1\n"
    );
}

#[test]
fn empty_input_is_warned_about_and_bad_input_exits_1() {
    let dir = Scratch::new("cli-empty");
    let out = run(JOINER, &["plan", "-f", dir.path().to_str().expect("path")]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("warning: no Kubernetes objects were read from"),
        "{}",
        text(&out.stderr)
    );
    let missing = dir.path().join("missing.yaml");
    let out = run(JOINER, &["plan", "-f", missing.to_str().expect("path")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("error: "),
        "{}",
        text(&out.stderr)
    );
    let bad = dir.write("bad.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: {requests: {cpu: lots}}}]}\n");
    let out = run(JOINER, &["plan", "-f", bad.to_str().expect("path")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
}
