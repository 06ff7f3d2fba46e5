use super::*;
use crate::scheduling::extended::served_on;
use std::collections::BTreeSet;

fn class(name: &str, resource: Option<&str>, created: &str) -> DeviceClass {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"extendedResourceName": resource},
    }))
    .expect("class")
}

fn pod(yaml: &str) -> Pod {
    serde_json::from_value(serde_saphyr::from_str::<serde_json::Value>(yaml).expect("yaml"))
        .expect("pod")
}

fn requests_of(claim: &ResourceClaim) -> Vec<(String, String, i64)> {
    joiner_model::dra::claim_devices(claim)
        .and_then(|d| d.requests.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|r| {
            let e = r.exactly.expect("exactly");
            (r.name, e.device_class_name, e.count.unwrap_or_default())
        })
        .collect()
}

#[test]
fn a_class_serves_its_named_resource_and_always_its_implicit_name() {
    let names = ExtendedNames::new(&[class(
        "gpu.nvidia.com",
        Some("nvidia.com/gpu"),
        "2026-01-01T00:00:00Z",
    )]);
    assert_eq!(names.class_for("nvidia.com/gpu"), Some("gpu.nvidia.com"));
    assert_eq!(
        names.class_for("deviceclass.resource.kubernetes.io/gpu.nvidia.com"),
        Some("gpu.nvidia.com")
    );
    assert_eq!(names.class_for("nvidia.com/mig-1g.10gb"), None);
}

#[test]
fn the_class_created_last_serves_a_shared_name_and_equal_times_go_to_the_first_name() {
    let names = ExtendedNames::new(&[
        class("old", Some("example.com/gpu"), "2026-01-01T00:00:00Z"),
        class("newer", Some("example.com/gpu"), "2026-03-01T00:00:00Z"),
        class("b-same", Some("example.com/nic"), "2026-03-01T00:00:00Z"),
        class("a-same", Some("example.com/nic"), "2026-03-01T00:00:00Z"),
    ]);
    assert_eq!(names.class_for("example.com/gpu"), Some("newer"));
    assert_eq!(names.class_for("example.com/nic"), Some("a-same"));
}

#[test]
fn the_claim_has_a_request_per_container_and_resource_named_as_the_scheduler_names_it() {
    let names = ExtendedNames::new(&[class(
        "gpu.nvidia.com",
        Some("nvidia.com/gpu"),
        "2026-01-01T00:00:00Z",
    )]);
    let p = pod(r#"
metadata: {name: trainer, namespace: ml}
spec:
  containers:
  - name: main
    resources:
      requests: {cpu: "1", memory: 1Gi, nvidia.com/gpu: "2"}
      limits: {nvidia.com/gpu: "2"}
  - name: side
    resources:
      limits: {nvidia.com/gpu: "1"}
"#);
    assert!(names.requested_by(&p));
    let (claim, served) =
        claim_for(&p, &names, "trainer-extended-resources-*".into()).expect("claim");
    assert_eq!(
        requests_of(&claim),
        [
            (
                "container-0-request-2".to_string(),
                "gpu.nvidia.com".to_string(),
                2
            ),
            (
                "container-1-request-0".to_string(),
                "gpu.nvidia.com".to_string(),
                1
            ),
        ],
        "j counts cpu and memory too; a limit alone is the request"
    );
    assert_eq!(claim.metadata.namespace.as_deref(), Some("ml"));
    assert_eq!(
        claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(EXTENDED_CLAIM_ANNOTATION))
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(served.len(), 2);
    assert!(served.iter().all(|s| s.resource == "nvidia.com/gpu"));
}

#[test]
fn init_containers_reuse_the_devices_of_containers_after_them_and_ask_only_the_largest_shortfall() {
    let names = ExtendedNames::new(&[class(
        "gpu.nvidia.com",
        Some("nvidia.com/gpu"),
        "2026-01-01T00:00:00Z",
    )]);
    let p = pod(r#"
metadata: {name: p}
spec:
  initContainers:
  - name: fetch
    resources: {limits: {nvidia.com/gpu: "3"}}
  - name: warm
    resources: {limits: {nvidia.com/gpu: "4"}}
  - name: agent
    restartPolicy: Always
    resources: {limits: {nvidia.com/gpu: "1"}}
  containers:
  - name: main
    resources: {limits: {nvidia.com/gpu: "1"}}
"#);
    let (claim, _) = claim_for(&p, &names, "p-extended-resources-*".into()).expect("claim");
    assert_eq!(
        requests_of(&claim),
        [
            (
                "container-1-request-0".to_string(),
                "gpu.nvidia.com".to_string(),
                2
            ),
            (
                "container-2-request-0".to_string(),
                "gpu.nvidia.com".to_string(),
                1
            ),
            (
                "container-3-request-0".to_string(),
                "gpu.nvidia.com".to_string(),
                1
            ),
        ],
        "the sidecar and main container hold 2; `warm` needs 2 more, `fetch` only 1 more"
    );
}

#[test]
fn a_pod_asking_for_no_served_resource_gets_no_claim_and_fractions_are_skipped() {
    let names = ExtendedNames::new(&[class(
        "gpu.nvidia.com",
        Some("nvidia.com/gpu"),
        "2026-01-01T00:00:00Z",
    )]);
    let plain = pod(
        "metadata: {name: p}\nspec: {containers: [{name: c, resources: {limits: {aws.amazon.com/neuron: '1'}}}]}",
    );
    assert!(!names.requested_by(&plain));
    assert!(claim_for(&plain, &names, "x".into()).is_none());
    let fraction = pod(
        "metadata: {name: p}\nspec: {containers: [{name: c, resources: {requests: {nvidia.com/gpu: 500m}}}]}",
    );
    assert!(claim_for(&fraction, &names, "x".into()).is_none());
}

#[test]
fn a_node_whose_device_plugin_serves_a_resource_drops_its_requests() {
    let names = ExtendedNames::new(&[
        class(
            "gpu.nvidia.com",
            Some("nvidia.com/gpu"),
            "2026-01-01T00:00:00Z",
        ),
        class("nic", Some("example.com/nic"), "2026-01-01T00:00:00Z"),
    ]);
    let p = pod(
        "metadata: {name: p}\nspec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: '1', example.com/nic: '1'}}}]}",
    );
    let (claim, served) = claim_for(&p, &names, "x".into()).expect("claim");
    let gpu_plugin: BTreeSet<String> = ["nvidia.com/gpu".to_string()].into();
    let on_node = served_on(&claim, &served, &gpu_plugin).expect("the nic is still asked for");
    assert_eq!(
        requests_of(&on_node),
        [("container-0-request-0".to_string(), "nic".to_string(), 1)]
    );
    assert_eq!(
        served_on(&claim, &served, &BTreeSet::new()),
        Some(claim.clone())
    );
    let both: BTreeSet<String> =
        ["nvidia.com/gpu".to_string(), "example.com/nic".to_string()].into();
    assert_eq!(served_on(&claim, &served, &both), None);
}
