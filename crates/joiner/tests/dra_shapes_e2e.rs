//! End-to-end: DRA objects in the shapes other projects write them (NVIDIA's DRA quickstart in
//! `resource.k8s.io/v1beta1`, the Kubernetes documentation's `v1beta2` DeviceClass, generated
//! claim names, mistakes the API server refuses), through the built `joiner` binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use joiner_test_support::example_dir;

/// The `dra-specific-gpu` example's NodePool, EC2NodeClass and values with `workload` as the only
/// other file, in a fresh directory.
fn scenario(name: &str, workload: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("joiner-dra-shapes-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let example = example_dir("dra-specific-gpu");
    for file in ["nodepool.yaml", "values.yaml"] {
        std::fs::copy(example.join(file), dir.join(file)).unwrap();
    }
    std::fs::write(dir.join("workload.yaml"), workload).unwrap();
    dir
}

fn run(dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["plan", "-o", "json", "-f"])
        .arg(dir)
        .arg("--values")
        .arg(dir.join("values.yaml"))
        .output()
        .unwrap()
}

fn plan(dir: &Path) -> (serde_json::Value, String) {
    let out = run(dir);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    (serde_json::from_slice(&out.stdout).unwrap(), stderr)
}

fn refused(dir: &Path) -> String {
    let out = run(dir);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).to_string()
}

const V1BETA1_CLASS: &str = r#"apiVersion: resource.k8s.io/v1beta1
kind: DeviceClass
metadata:
  name: gpu.nvidia.com
spec:
  selectors:
  - cel:
      expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
"#;

const TOLERATIONS: &str =
    "  tolerations:\n  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}\n";

/// The quickstart's `gpu-test1` and `gpu-test2` shapes: a `v1beta1` template whose request
/// holds `deviceClassName` at its top level, pods with one claim each and a pod whose two
/// containers share one claim.
#[test]
fn nvidia_quickstart_v1beta1_shapes_plan_as_v1() {
    let workload = format!(
        r#"{V1BETA1_CLASS}---
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaimTemplate
metadata: {{namespace: gpu-test1, name: single-gpu}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        deviceClassName: gpu.nvidia.com
        selectors:
        - cel: {{expression: "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"}}
---
apiVersion: v1
kind: Pod
metadata: {{namespace: gpu-test1, name: pod1}}
spec:
{TOLERATIONS}  containers:
  - name: ctr
    image: ubuntu:22.04
    resources: {{claims: [{{name: gpu}}]}}
  resourceClaims:
  - {{name: gpu, resourceClaimTemplateName: single-gpu}}
---
apiVersion: v1
kind: Pod
metadata: {{namespace: gpu-test1, name: pod2}}
spec:
{TOLERATIONS}  containers:
  - {{name: ctr0, image: ubuntu:22.04, resources: {{claims: [{{name: shared-gpu}}]}}}}
  - {{name: ctr1, image: ubuntu:22.04, resources: {{claims: [{{name: shared-gpu}}]}}}}
  resourceClaims:
  - {{name: shared-gpu, resourceClaimTemplateName: single-gpu}}
"#
    );
    let (p, stderr) = plan(&scenario("quickstart", &workload));
    assert!(p["unschedulable"].as_array().unwrap().is_empty(), "{p}");
    let claims = p["claims"].as_array().unwrap();
    let names: Vec<&str> = claims
        .iter()
        .map(|c| c["claim"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["gpu-test1/pod1-gpu-*", "gpu-test1/pod2-shared-gpu-*"]
    );
    for c in claims {
        let results = c["allocation"]["devices"]["results"].as_array().unwrap();
        assert_eq!(results.len(), 1, "{c}");
        assert_eq!(results[0]["driver"], "gpu.nvidia.com");
        // The pool is the node's, as the NVIDIA driver names it.
        assert_eq!(results[0]["pool"], c["node"]);
    }
    assert!(
        stderr.contains("resource.k8s.io/v1beta1 ResourceClaimTemplate is deprecated"),
        "{stderr}"
    );
    assert!(
        stderr.contains("resource.k8s.io/v1beta1 DeviceClass is deprecated"),
        "{stderr}"
    );
}

/// The Kubernetes documentation's DeviceClass is `v1beta2`; its shape is v1's.
#[test]
fn a_v1beta2_device_class_is_read() {
    let workload = std::fs::read_to_string(example_dir("dra-specific-gpu").join("workload.yaml"))
        .unwrap()
        + "---\n"
        + &V1BETA1_CLASS.replace("v1beta1", "v1beta2");
    let (p, stderr) = plan(&scenario("v1beta2", &workload));
    assert_eq!(p["nodeClaims"].as_array().unwrap().len(), 1, "{p}");
    assert!(
        !stderr.contains("DeviceClass gpu.nvidia.com is not in the input"),
        "{stderr}"
    );
    assert!(
        stderr.contains("v1beta2 DeviceClass is deprecated"),
        "{stderr}"
    );
}

/// `expression` indented beside `cel:` rather than under it: the API server refuses the
/// object, so the plan does too, naming the file, the object and the field as written.
#[test]
fn a_selector_without_its_cel_expression_is_refused() {
    let workload = format!(
        r#"{V1BETA1_CLASS}---
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaimTemplate
metadata: {{namespace: default, name: big-gpu}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        deviceClassName: gpu.nvidia.com
        selectors:
        - cel:
          expression: "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0"
"#
    );
    let stderr = refused(&scenario("malformed-selector", &workload));
    assert!(stderr.contains("workload.yaml"), "{stderr}");
    assert!(
        stderr.contains("ResourceClaimTemplate/default/big-gpu"),
        "{stderr}"
    );
    assert!(
        stderr.contains("spec.spec.devices.requests[0].selectors[0].cel: Required value"),
        "{stderr}"
    );
}

#[test]
fn duplicate_request_names_and_unknown_modes_are_refused() {
    let template = |requests: &str| {
        format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{namespace: default, name: t}}\nspec:\n  spec:\n    devices:\n      requests:\n{requests}"
        )
    };
    let twice = template(
        "      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}\n      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}\n",
    );
    let stderr = refused(&scenario("duplicate-request", &twice));
    assert!(
        stderr.contains("spec.spec.devices.requests[1].name: Duplicate value: \"gpu\""),
        "{stderr}"
    );
    let mode = template(
        "      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com, allocationMode: Any}}\n",
    );
    let stderr = refused(&scenario("unknown-mode", &mode));
    assert!(
        stderr.contains(
            "spec.spec.devices.requests[0].exactly.allocationMode: Unsupported value: \"Any\""
        ),
        "{stderr}"
    );
}

/// Kubernetes names a generated claim `<pod>-<claim>-<suffix>` and records it in the pod's
/// status. A pod whose recorded claim is not listed yet waits for it (exit 0); no fresh copy of
/// the template is planned that could take a second set of devices.
#[test]
fn a_claim_recorded_with_its_random_suffix_is_waited_for_not_copied() {
    let workload = std::fs::read_to_string(example_dir("dra-specific-gpu").join("workload.yaml"))
        .unwrap()
        + "status:\n  resourceClaimStatuses:\n  - {name: gpu, resourceClaimName: inference-gpu-9kq4x}\n";
    let (p, _) = plan(&scenario("suffix-missing", &workload));
    assert!(p["nodeClaims"].as_array().unwrap().is_empty(), "{p}");
    let reason = p["unschedulable"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains(r#"resourceclaim.resource.k8s.io "inference-gpu-9kq4x" not found"#),
        "{reason}"
    );

    // Once listed, that claim is the one planned, under its real name.
    let claim = "---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: inference-gpu-9kq4x, namespace: default}\nspec:\n  devices:\n    requests:\n    - name: gpu\n      exactly: {deviceClassName: gpu.nvidia.com}\n";
    let (p, _) = plan(&scenario("suffix-listed", &(workload + claim)));
    assert_eq!(p["nodeClaims"].as_array().unwrap().len(), 1, "{p}");
    assert_eq!(p["claims"][0]["claim"], "default/inference-gpu-9kq4x");
}

/// A slice with a list-typed attribute (alpha gate `DRAListTypeAttributes`). With the gate off
/// (the default) the API server would drop it: the slice is read with that attribute left out
/// and a warning naming it, rather than refused, and its device still serves a claim that does
/// not read the list. With the gate on the list is read and selectors see it.
#[test]
fn a_list_typed_attribute_is_set_aside_with_a_warning() {
    let workload = std::fs::read_to_string(example_dir("dra-specific-gpu").join("workload.yaml"))
        .unwrap()
        + r#"---
apiVersion: v1
kind: Node
metadata: {name: gpu-node, labels: {kubernetes.io/hostname: gpu-node}}
status:
  allocatable: {cpu: '8', memory: 32Gi, pods: '110'}
  capacity: {cpu: '8', memory: 32Gi, pods: '110'}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: gpu-node-gpu.nvidia.com-x7k2p}
spec:
  driver: gpu.nvidia.com
  nodeName: gpu-node
  pool: {name: gpu-node, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-0
    attributes:
      type: {string: gpu}
      cudaComputeCapability: {version: "9.0.0"}
      pcieRoots: {strings: ["pci0000:00", "pci0000:01"]}
    capacity:
      memory: {value: 141Gi}
"#;
    let (p, stderr) = plan(&scenario("list-attribute", &workload));
    assert!(
        stderr.contains(
            "ResourceSlice/gpu-node-gpu.nvidia.com-x7k2p: spec.devices[0].attributes[pcieRoots]: \
             list-typed attribute"
        ),
        "{stderr}"
    );
    assert!(p["nodeClaims"].as_array().unwrap().is_empty(), "{p}");
    assert_eq!(p["bindings"][0]["node"], "gpu-node", "{p}");

    // With the gate on the list is read: a selector over it serves the claim on that node, and
    // one naming a root the device lacks needs a node no type offers.
    let on_root = |root: &str| {
        workload.replace(
            "device.capacity[\"gpu.nvidia.com\"].memory.compareTo(quantity(\"100Gi\")) >= 0",
            &format!(
                "device.capacity[\"gpu.nvidia.com\"].memory.compareTo(quantity(\"100Gi\")) >= 0 \
                 && \"{root}\" in device.attributes[\"gpu.nvidia.com\"].pcieRoots"
            ),
        )
    };
    let gate_on = |dir: &Path| {
        let values = dir.join("values.yaml");
        let text = std::fs::read_to_string(&values).unwrap();
        let text = text.replace(
            "settings:\n",
            "settings:\n  cluster:\n    featureGates: {DRAListTypeAttributes: true}\n",
        );
        std::fs::write(values, text).unwrap();
    };
    let dir = scenario("list-attribute-on", &on_root("pci0000:01"));
    gate_on(&dir);
    let (p, stderr) = plan(&dir);
    assert!(!stderr.contains("list-typed attribute"), "{stderr}");
    assert!(p["nodeClaims"].as_array().unwrap().is_empty(), "{p}");
    assert_eq!(p["bindings"][0]["node"], "gpu-node", "{p}");
    let dir = scenario("list-attribute-other-root", &on_root("pci0000:07"));
    gate_on(&dir);
    let (p, _) = plan(&dir);
    assert!(p["bindings"].as_array().unwrap().is_empty(), "{p}");
    assert_eq!(p["unschedulable"].as_array().unwrap().len(), 1, "{p}");
}

/// A claim template asking for part of a device's memory (`capacity.requests`, gate
/// `DRAConsumableCapacity`) in a cluster with the gate off: the API server would store the
/// template without it, so the plan warns, naming the field, and the pod takes a whole GPU
/// (kube-scheduler refuses a claim that still has the field; the allocator's own tests cover
/// that).
#[test]
fn a_capacity_request_is_dropped_with_a_warning_while_its_gate_is_off() {
    let workload = std::fs::read_to_string(example_dir("dra-specific-gpu").join("workload.yaml"))
        .unwrap()
        .replace(
            "          count: 1\n",
            "          count: 1\n          capacity:\n            requests: {memory: 40Gi}\n",
        );
    assert!(workload.contains("requests: {memory: 40Gi}"));
    let dir = scenario("capacity-gate-off", &workload);
    let values = dir.join("values.yaml");
    let text = std::fs::read_to_string(&values).unwrap().replace(
        "settings:\n",
        "settings:\n  cluster:\n    featureGates: {DRAConsumableCapacity: false}\n",
    );
    std::fs::write(values, text).unwrap();
    let (p, stderr) = plan(&dir);
    assert!(
        stderr.contains(
            "ResourceClaimTemplate/default/large-gpu: \
             spec.spec.devices.requests[0].exactly.capacity: capacity request, dropped"
        ),
        "{stderr}"
    );
    assert_eq!(p["nodeClaims"].as_array().unwrap().len(), 1, "{p}");
    assert!(p["unschedulable"].as_array().unwrap().is_empty(), "{p}");
}

/// kube-scheduler has allocated the pod's claim a device that waits for binding conditions
/// (a fabric-attached GPU being attached) and holds the pod in PreBind until they are met: the
/// claim is allocated and reserved for the pod, which is not bound yet. Such a pod is planned
/// onto the node its devices are on, never reported unschedulable, and nothing is launched.
#[test]
fn a_pod_waiting_on_binding_conditions_is_placed_where_its_devices_are() {
    let (p, _) = plan(&scenario("binding-conditions", WAITING_ON_BINDING));
    assert!(p["nodeClaims"].as_array().unwrap().is_empty(), "{p}");
    assert!(p["unschedulable"].as_array().unwrap().is_empty(), "{p}");
    assert_eq!(p["bindings"][0]["pod"], "default/trainer", "{p}");
    assert_eq!(p["bindings"][0]["node"], "fabric-node", "{p}");
    // No second allocation: the claim keeps the one it has.
    assert!(p["claims"].as_array().is_none_or(Vec::is_empty), "{p}");
}

const WAITING_ON_BINDING: &str = r#"apiVersion: v1
kind: Node
metadata: {name: fabric-node, labels: {kubernetes.io/hostname: fabric-node}}
status:
  allocatable: {cpu: '8', memory: 32Gi, pods: '110'}
  capacity: {cpu: '8', memory: 32Gi, pods: '110'}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: fabric.example.com}
spec:
  selectors:
  - cel: {expression: 'device.driver == "fabric.example.com"'}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: fabric-node-fabric}
spec:
  driver: fabric.example.com
  nodeName: fabric-node
  pool: {name: fabric-node, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-0
    bindingConditions: [Attached]
    bindingFailureConditions: [AttachFailed]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: trainer-gpu, namespace: default, uid: c-1}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: fabric.example.com}
status:
  allocation:
    devices:
      results:
      - {request: gpu, driver: fabric.example.com, pool: fabric-node, device: gpu-0, bindingConditions: [Attached], bindingFailureConditions: [AttachFailed]}
    nodeSelector:
      nodeSelectorTerms:
      - matchFields:
        - {key: metadata.name, operator: In, values: [fabric-node]}
  reservedFor:
  - {resource: pods, name: trainer, uid: p-1}
---
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: default, uid: p-1}
spec:
  resourceClaims:
  - {name: gpu, resourceClaimName: trainer-gpu}
  containers:
  - name: c
    image: x
    resources:
      requests: {cpu: '1'}
      claims: [{name: gpu}]
"#;
