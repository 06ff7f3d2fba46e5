//! `joiner plan --kubeconfig`: the cluster read through kube-rs from a loopback server that
//! answers as kube-apiserver does (recorded list responses, paged, one kind forbidden, the DRA
//! kinds served at `v1beta2` only), planned as the same objects in files are.

#![cfg(feature = "cluster")]

use std::path::PathBuf;

use joiner_test_support::api_server::RecordedApiServer;
use joiner_test_support::{Scratch, repo_root, run};
use serde_json::Value;

const JOINER: &str = env!("CARGO_BIN_EXE_joiner");

fn fixture() -> PathBuf {
    repo_root().join("crates/joiner/tests/fixtures/recorded-cluster")
}

/// The recorded server, a kubeconfig naming it, and the scratch directory holding it.
fn cluster() -> (RecordedApiServer, Scratch, String) {
    let server = RecordedApiServer::start(&fixture().join("responses"));
    let scratch = Scratch::new("kubeconfig");
    let kubeconfig = scratch.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig);
    (server, scratch, kubeconfig.display().to_string())
}

fn plan(args: &[&str]) -> (Value, String) {
    let mut all = vec!["plan", "--set", "settings.enableDRA=true", "-o", "json"];
    all.extend_from_slice(args);
    let out = run(JOINER, &all);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{all:?}: {stderr}");
    let plan = serde_json::from_slice(&out.stdout).expect("a JSON plan");
    (plan, stderr)
}

#[test]
fn a_cluster_plans_as_its_objects_in_files_do_and_names_what_it_could_not_read() {
    let (server, _scratch, kubeconfig) = cluster();
    let (mut from_cluster, stderr) = plan(&["--kubeconfig", &kubeconfig]);
    let files = fixture().join("files");
    let (from_files, _) = plan(&["-f", files.to_str().expect("a UTF-8 path")]);

    let not_read = from_cluster
        .as_object_mut()
        .and_then(|m| m.remove("notRead"))
        .expect("the plan names the kinds it could not read");
    assert_eq!(not_read[0]["kind"], "PodDisruptionBudget");
    assert_eq!(not_read[0]["reason"], "Forbidden");
    assert!(
        not_read[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cannot list resource \"poddisruptionbudgets\"")),
        "{not_read}"
    );
    assert_eq!(not_read.as_array().map(Vec::len), Some(1), "{not_read}");
    assert!(
        stderr.contains("PodDisruptionBudget not read (Forbidden"),
        "{stderr}"
    );
    assert_eq!(from_cluster, from_files);

    // What the plan is: the pending pods, not the running ones, on a free time-sliced GPU of
    // the running node and two new nodes; the claim served through v1beta2 is allocated.
    let placed: Vec<(&str, &str)> = from_cluster["bindings"]
        .as_array()
        .expect("bindings")
        .iter()
        .filter_map(|b| Some((b["pod"].as_str()?, b["node"].as_str()?)))
        .collect();
    assert_eq!(placed.len(), 3, "{placed:?}");
    assert!(
        placed.contains(&("ml/lab-6d8f7c9b5-c7hn2", "ip-10-0-17-42.ec2.internal")),
        "{placed:?}"
    );
    assert!(placed.iter().any(|(p, _)| *p == "ml/infer-0"), "{placed:?}");
    assert_eq!(from_cluster["nodeClaims"].as_array().map(Vec::len), Some(2));

    // Read-only: lists only, each paged, the ConfigMap by name, the pods' second page asked for.
    let requests = server.requests();
    assert!(requests.iter().all(|r| r.method == "GET"), "{requests:?}");
    assert!(
        requests.iter().all(|r| r.param("limit") == Some("500")),
        "{requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.path == "/api/v1/pods" && r.param("continue").is_some()),
        "{requests:?}"
    );
    let config_map = requests
        .iter()
        .find(|r| r.path.ends_with("/configmaps"))
        .expect("the device-plugin ConfigMap is read");
    assert_eq!(config_map.path, "/api/v1/namespaces/kube-system/configmaps");
    assert_eq!(
        config_map.param("fieldSelector"),
        Some("metadata.name=nvidia-device-plugin")
    );
    // DRA: v1 is not served (404), v1beta2 is.
    assert!(
        requests
            .iter()
            .any(|r| r.path == "/apis/resource.k8s.io/v1/resourceclaims"),
        "{requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.path == "/apis/resource.k8s.io/v1beta2/resourceclaims"),
        "{requests:?}"
    );
}

#[test]
fn an_expired_continue_token_lists_the_kind_again_from_its_first_page() {
    // The pods' second page answers 410 once, as a server does when the snapshot the pages
    // are read from was compacted meanwhile.
    let scratch = Scratch::new("expired-continue");
    let responses = scratch.path().join("responses");
    copy_dir(&fixture().join("responses"), &responses);
    let pods = responses.join("api/v1/pods.json");
    let first: Value =
        serde_json::from_slice(&std::fs::read(&pods).expect("the pods' page")).expect("JSON");
    let token = first["metadata"]["continue"]
        .as_str()
        .expect("a continue token");
    scratch.write(
        &format!("responses/api/v1/pods.{token}.first.json"),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.","reason":"Expired","code":410}"#,
    );
    let server = RecordedApiServer::start(&responses);
    let kubeconfig = scratch.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig);
    let (mut from_cluster, _) = plan(&["--kubeconfig", kubeconfig.to_str().expect("UTF-8")]);
    from_cluster.as_object_mut().map(|m| m.remove("notRead"));
    let files = fixture().join("files");
    let (from_files, _) = plan(&["-f", files.to_str().expect("a UTF-8 path")]);
    assert_eq!(from_cluster, from_files);
    let first_pages = server
        .requests()
        .iter()
        .filter(|r| r.path == "/api/v1/pods" && r.param("continue").is_none())
        .count();
    assert_eq!(first_pages, 2);
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("creating a directory");
    for entry in std::fs::read_dir(from)
        .expect("reading a directory")
        .flatten()
    {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copying a file");
        }
    }
}

#[test]
fn the_table_ends_naming_what_the_cluster_would_not_list() {
    let (_server, _scratch, kubeconfig) = cluster();
    let out = run(
        JOINER,
        &[
            "plan",
            "--kubeconfig",
            &kubeconfig,
            "--set",
            "settings.enableDRA=true",
        ],
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        table.contains("Not read from the cluster (the plan cannot account for them):\n  PodDisruptionBudget: Forbidden: "),
        "{table}"
    );
}

#[test]
fn a_file_given_beside_the_cluster_replaces_its_object_of_the_same_name() {
    let (_server, scratch, kubeconfig) = cluster();
    // What if the lab pool allowed no instance type at all?
    let what_if = scratch.write(
        "lab.yaml",
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: lab}\nspec:\n  weight: 10\n  \
         template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}\n      \
         requirements:\n      - {key: node.kubernetes.io/instance-type, operator: In, values: [p5.48xlarge]}\n",
    );
    let (plan, stderr) = plan(&[
        "--kubeconfig",
        &kubeconfig,
        "-f",
        what_if.to_str().expect("a UTF-8 path"),
    ]);
    assert!(
        stderr.contains("NodePool/lab: the file's object is planned in place of the cluster's"),
        "{stderr}"
    );
    let types: Vec<&str> = plan["nodeClaims"]
        .as_array()
        .expect("nodeClaims")
        .iter()
        .filter_map(|c| c["instanceType"].as_str())
        .collect();
    assert!(!types.contains(&"g4dn.xlarge"), "{types:?}");
}

#[test]
fn an_unreachable_cluster_is_exit_status_2_within_bounded_time() {
    let scratch = Scratch::new("unreachable");
    // A port nothing listens on: the connection is refused at once.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let kubeconfig = scratch.write(
        "kubeconfig",
        &format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'http://127.0.0.1:{port}'}}\n\
             contexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{token: t}}\n"
        ),
    );
    let out = run(
        JOINER,
        &[
            "plan",
            "--kubeconfig",
            kubeconfig.to_str().expect("a UTF-8 path"),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "could not read the cluster: http://127.0.0.1:{port}/"
        )),
        "{stderr}"
    );
    // A context the kubeconfig does not have is the same: the cluster cannot be read.
    let out = run(
        JOINER,
        &[
            "plan",
            "--kubeconfig",
            kubeconfig.to_str().expect("a UTF-8 path"),
            "--context",
            "prod",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("prod"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn simulate_and_migrate_refuse_a_cluster_and_say_how_to_dump_one() {
    let (_server, _scratch, kubeconfig) = cluster();
    let out = run(JOINER, &["migrate", "--kubeconfig", &kubeconfig]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("kubectl get nodepools"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
