//! An object with a missing or bad reference affects only itself: the pod that names a claim,
//! template or device class that does not exist waits with kube-scheduler's reason, a NodePool
//! without its EC2NodeClass launches nothing and says so in the reasons of the pods it might
//! have taken, an object that cannot be read is left out on its own; everything else is
//! planned as if they were not there.

use joiner_model::settings::Settings;
use joiner_model::{Manifests, parse_documents};

use super::tests::{POOL as GPU, from_template as one_gpu, pod as pod_with_claims};
use super::{ClusterSnapshot, Options};
use crate::plan::Plan;

fn manifests(docs: &[&str]) -> Manifests {
    let mut m = Manifests::default();
    for (i, text) in docs.iter().enumerate() {
        for (origin, doc) in parse_documents(&format!("doc{i}.yaml"), text).unwrap() {
            m.add_document(origin, doc).unwrap();
        }
    }
    m.finish();
    m
}

fn build(m: &Manifests, dra: bool) -> ClusterSnapshot {
    let values = serde_json::json!({"settings": {"enableDRA": dra}});
    let (settings, _) = Settings::from_values(&values).unwrap();
    ClusterSnapshot::build(m, &settings, &Options::default()).expect("builds")
}

fn snapshot(docs: &[&str], dra: bool) -> ClusterSnapshot {
    build(&manifests(docs), dra)
}

fn reason(plan: &Plan, pod: &str) -> String {
    plan.unschedulable
        .iter()
        .find(|u| u.pod == pod)
        .map(|u| u.reason.clone())
        .unwrap_or_else(|| panic!("{pod} is not unschedulable: {plan:?}"))
}

/// Each NodeClaim's pool, instance type and pods: what two plans must agree on.
fn nodes(plan: &Plan) -> Vec<(String, String, Vec<String>)> {
    plan.node_claims
        .iter()
        .map(|c| (c.node_pool.clone(), c.instance_type.clone(), c.pods.clone()))
        .collect()
}

#[test]
fn a_pod_whose_resource_claim_does_not_exist_waits_alone() {
    let (a, b) = (one_gpu("a"), one_gpu("b"));
    let waits = pod_with_claims("waits", "  - {name: gpu, resourceClaimName: later}\n");
    let without = snapshot(&[GPU, &a, &b], true).plan();
    let plan = snapshot(&[GPU, &a, &waits, &b], true).plan();
    assert_eq!(nodes(&plan), nodes(&without));
    assert_eq!(plan.bindings, without.bindings);
    assert_eq!(plan.unschedulable.len(), 1);
    let r = reason(&plan, "default/waits");
    assert!(
        r.contains(r#"could not find ResourceClaim "default/later""#),
        "{r}"
    );
    assert!(
        r.contains("spec.resourceClaims[0].resourceClaimName"),
        "{r}"
    );
}

#[test]
fn a_pod_whose_claim_template_does_not_exist_waits_alone() {
    let a = one_gpu("a");
    let waits = pod_with_claims(
        "waits",
        "  - {name: gpu, resourceClaimTemplateName: nope}\n",
    );
    let plan = snapshot(&[GPU, &a, &waits], true).plan();
    assert_eq!(plan.node_claims.len(), 1);
    assert_eq!(plan.node_claims[0].pods, ["default/a"]);
    let r = reason(&plan, "default/waits");
    assert!(
        r.contains(
            r#"resource claim template "nope": resourceclaimtemplate.resource.k8s.io "nope" not found"#
        ),
        "{r}"
    );
    assert!(
        r.contains("spec.resourceClaims[0].resourceClaimTemplateName"),
        "{r}"
    );
}

/// Once the resource claim controller has created the claim and recorded it in the pod's
/// status, the template no longer matters: the pod uses that claim.
#[test]
fn a_claim_already_generated_is_used_even_when_its_template_is_gone() {
    let claim = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: a-gpu-x7k2p, namespace: default}\nspec:\n  devices:\n    requests:\n    - name: gpu\n      exactly: {deviceClassName: gpu.nvidia.com}\n";
    let a = pod_with_claims("a", "  - {name: gpu, resourceClaimTemplateName: deleted}\n")
        + "status:\n  resourceClaimStatuses: [{name: gpu, resourceClaimName: a-gpu-x7k2p}]\n";
    let plan = snapshot(&[GPU, claim, &a], true).plan();
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(plan.claims.len(), 1);
    assert_eq!(plan.claims[0].claim, "default/a-gpu-x7k2p");
}

/// A status entry naming a claim that is not listed yet: the pod waits for it, and no copy of
/// the template is planned (the real claim may hold devices already).
#[test]
fn a_generated_claim_not_yet_listed_holds_back_its_pod() {
    let a = one_gpu("a");
    let b = one_gpu("b")
        + "status:\n  resourceClaimStatuses: [{name: gpu, resourceClaimName: b-gpu-q8w2z}]\n";
    let plan = snapshot(&[GPU, &a, &b], true).plan();
    let r = reason(&plan, "default/b");
    assert!(
        r.contains(r#"resourceclaim.resource.k8s.io "b-gpu-q8w2z" not found"#),
        "{r}"
    );
    assert!(
        r.contains("status.resourceClaimStatuses[gpu].resourceClaimName"),
        "{r}"
    );
    assert_eq!(plan.node_claims.len(), 1);
    assert!(
        plan.claims
            .iter()
            .all(|c| !c.claim.starts_with("default/b-"))
    );
}

/// An entry without a claim name says no claim was needed: the pod is planned without one.
#[test]
fn a_status_entry_without_a_claim_name_needs_no_claim() {
    let a = one_gpu("a") + "status:\n  resourceClaimStatuses: [{name: gpu}]\n";
    let plan = snapshot(&[GPU, &a], true).plan();
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert!(plan.claims.is_empty(), "{:?}", plan.claims);
}

/// A claim planned from a template goes by a name no real object can have, so a claim that
/// happens to be called `<pod>-<claim>` keeps its own allocation and devices.
#[test]
fn a_planned_claim_never_takes_a_real_claims_name() {
    let real = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: a-gpu, namespace: default}\nspec:\n  devices:\n    requests:\n    - name: gpu\n      exactly: {deviceClassName: gpu.nvidia.com, count: 2}\n";
    let a = one_gpu("a");
    let plan = snapshot(&[GPU, real, &a], true).plan();
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let names: Vec<_> = plan.claims.iter().map(|c| c.claim.as_str()).collect();
    assert_eq!(names, ["default/a-gpu-*"]);
    let devices = plan.claims[0]
        .allocation
        .devices
        .as_ref()
        .and_then(|d| d.results.as_ref())
        .map_or(0, Vec::len);
    assert_eq!(
        devices, 1,
        "the template asks for one GPU, the unrelated claim for two"
    );
}

#[test]
fn a_running_pod_whose_claim_is_gone_keeps_its_node_with_a_warning() {
    let node = "apiVersion: v1\nkind: Node\nmetadata: {name: node-a, labels: {kubernetes.io/arch: amd64, kubernetes.io/os: linux}}\nstatus: {allocatable: {cpu: \"1\", memory: 4Gi, pods: \"10\"}}\n";
    let running = pod_with_claims("running", "  - {name: gpu, resourceClaimName: gone}\n")
        .replace("  containers:", "  nodeName: node-a\n  containers:");
    let a = one_gpu("a");
    let s = snapshot(&[GPU, node, &running, &a], true);
    assert!(
        s.warnings()
            .iter()
            .any(|w| w.contains("Pod/default/running: spec.resourceClaims[0].resourceClaimName")),
        "{:?}",
        s.warnings()
    );
    assert!(s.invalid().is_empty());
    let plan = s.plan();
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(plan.node_claims.len(), 1);
}

#[test]
fn a_claim_of_a_device_class_that_does_not_exist_holds_back_its_pods_only() {
    let template = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: odd, namespace: default}\nspec:\n  spec:\n    devices:\n      requests:\n      - name: gpu\n        exactly: {deviceClassName: no-such-class}\n";
    let a = one_gpu("a");
    let odd = pod_with_claims("odd", "  - {name: gpu, resourceClaimTemplateName: odd}\n");
    let plan = snapshot(&[GPU, template, &a, &odd], true).plan();
    assert_eq!(plan.node_claims.len(), 1);
    assert_eq!(plan.node_claims[0].pods, ["default/a"]);
    let r = reason(&plan, "default/odd");
    assert!(
        r.contains("request gpu: device class no-such-class does not exist"),
        "{r}"
    );
    // The same on every node: said once, not per instance type.
    assert!(!r.contains("g6.xlarge"), "{r}");
}

#[test]
fn a_selector_that_does_not_compile_holds_back_its_pods_only() {
    let template = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: typo, namespace: default}\nspec:\n  spec:\n    devices:\n      requests:\n      - name: gpu\n        exactly:\n          deviceClassName: gpu.nvidia.com\n          selectors: [{cel: {expression: 'device.attributes[\"gpu.nvidia.com\"].productName =='}}]\n";
    let a = one_gpu("a");
    let typo = pod_with_claims("typo", "  - {name: gpu, resourceClaimTemplateName: typo}\n");
    let plan = snapshot(&[GPU, template, &typo, &a], true).plan();
    assert_eq!(plan.node_claims.len(), 1);
    assert_eq!(plan.node_claims[0].pods, ["default/a"]);
    let r = reason(&plan, "default/typo");
    assert!(r.contains("does not compile"), "{r}");
}

/// A NodePool of class `class`, with `spec` (YAML lines indented six spaces) in its template.
fn node_pool(name: &str, class: &str, spec: &str) -> String {
    format!(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: {class}}}\n{spec}"
    )
}

/// A CPU NodePool and its EC2NodeClass.
fn cpu_pool() -> String {
    node_pool(
        "cpu",
        "cpu",
        "      requirements: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [m7i]}]\n",
    ) + "---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: cpu}\nspec: {role: KarpenterNodeRole, amiSelectorTerms: [{alias: al2023@latest}]}\n"
}

/// A GPU NodePool whose EC2NodeClass was never created, tainted for GPU pods.
fn orphan_pool() -> String {
    node_pool(
        "orphan",
        "missing",
        "      taints: [{key: nvidia.com/gpu, effect: NoSchedule}]\n",
    )
}

/// A pod of one CPU; with `extra` (spec fields), also one GPU.
fn plain_pod(name: &str, extra: &str) -> String {
    let gpu = if extra.is_empty() {
        ""
    } else {
        ", limits: {nvidia.com/gpu: \"1\"}"
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n{extra}  containers:\n  - name: c\n    resources: {{requests: {{cpu: \"1\"}}{gpu}}}\n"
    )
}

#[test]
fn a_node_pool_without_its_node_class_launches_nothing_and_says_so() {
    let cpu = plain_pod("cpu", "");
    let gpu = plain_pod(
        "gpu",
        "  tolerations: [{key: nvidia.com/gpu, operator: Exists}]\n",
    );
    let s = snapshot(&[&cpu_pool(), &orphan_pool(), &cpu, &gpu], false);
    assert!(
        s.warnings().iter().any(|w| w.contains("NodePool/orphan")
            && w.contains("spec.template.spec.nodeClassRef")
            && w.contains(r#"EC2NodeClass "missing" not found"#)),
        "{:?}",
        s.warnings()
    );
    assert!(s.invalid().is_empty());
    let plan = s.plan();
    // The CPU pod is planned in the good pool as if the orphan were not there.
    assert_eq!(plan.node_claims.len(), 1);
    assert_eq!(plan.node_claims[0].node_pool, "cpu");
    assert_eq!(plan.node_claims[0].pods, ["default/cpu"]);
    let r = reason(&plan, "default/gpu");
    assert!(
        r.contains(r#"NodePool orphan launches nothing: EC2NodeClass "missing" not found"#),
        "{r}"
    );
    assert!(r.contains("NodePool cpu:"), "{r}");
    let account = s
        .explain_pod("default/gpu")
        .expect("the pod is in the input");
    assert!(account.outcome.contains("NodePool orphan"), "{account:?}");
    assert!(
        account
            .instance_types
            .iter()
            .any(|l| l.starts_with("NodePool orphan: launches nothing")),
        "{account:?}"
    );
    // A pod the orphan's taint turns away is not told about it.
    let fussy = plain_pod("fussy", "  nodeSelector: {no-such-label: x}\n");
    let plan = snapshot(&[&cpu_pool(), &orphan_pool(), &fussy], false).plan();
    assert!(!reason(&plan, "default/fussy").contains("orphan"));
}

/// A GPU NodePool whose EC2NodeClass `gpu` carries `conditions` (a status as a controller
/// wrote it), tainted for GPU pods.
fn pool_with_status(conditions: &str) -> String {
    node_pool(
        "gpu",
        "gpu",
        "      taints: [{key: nvidia.com/gpu, effect: NoSchedule}]\n",
    ) + &format!(
        "---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: gpu}}\nspec: {{role: KarpenterNodeRole, amiSelectorTerms: [{{alias: al2023@latest}}]}}\nstatus:\n  conditions:\n{conditions}"
    )
}

fn condition(type_: &str, status: &str, message: &str) -> String {
    format!(
        "  - {{type: {type_}, status: \"{status}\", reason: R, message: \"{message}\", lastTransitionTime: \"2026-01-01T00:00:00Z\"}}\n"
    )
}

#[test]
fn a_node_pool_whose_node_class_is_not_ready_launches_nothing_and_says_why() {
    let gpu = plain_pod(
        "gpu",
        "  tolerations: [{key: nvidia.com/gpu, operator: Exists}]\n",
    );
    let cpu = plain_pod("cpu", "");
    let why = "SubnetsReady=False: no subnet matches spec.subnetSelectorTerms";
    let bad = pool_with_status(
        &(condition(
            "SubnetsReady",
            "False",
            "no subnet matches spec.subnetSelectorTerms",
        ) + &condition("Ready", "False", why)),
    );
    let s = snapshot(&[&cpu_pool(), &bad, &cpu, &gpu], false);
    assert!(
        s.warnings()
            .iter()
            .any(|w| w.contains("NodePool/gpu") && w.contains(why)),
        "{:?}",
        s.warnings()
    );
    let plan = s.plan();
    // The good pool still launches for the pod it can take.
    assert_eq!(plan.node_claims.len(), 1);
    assert_eq!(plan.node_claims[0].node_pool, "cpu");
    let r = reason(&plan, "default/gpu");
    assert!(
        r.contains(&format!(
            r#"NodePool gpu launches nothing: EC2NodeClass "gpu" is not ready: {why}"#
        )),
        "{r}"
    );
}

#[test]
fn a_node_class_marked_ready_or_never_resolved_is_planned_on() {
    let gpu = plain_pod(
        "gpu",
        "  tolerations: [{key: nvidia.com/gpu, operator: Exists}]\n",
    );
    let ready = pool_with_status(&condition("Ready", "True", ""));
    let plan = snapshot(&[&ready, &gpu], false).plan();
    assert_eq!(plan.node_claims.len(), 1, "{plan:?}");
    // Without a Ready condition (nobody resolved the class) it is used as written.
    let unresolved = pool_with_status(&condition("SubnetsReady", "True", ""));
    let plan = snapshot(&[&unresolved, &gpu], false).plan();
    assert_eq!(plan.node_claims.len(), 1, "{plan:?}");
    // Ready=Unknown (the live controller has not resolved it yet) launches nothing.
    let unknown = pool_with_status(&condition(
        "Ready",
        "Unknown",
        "not resolved yet: SubnetsReady",
    ));
    let plan = snapshot(&[&unknown, &gpu], false).plan();
    assert!(plan.node_claims.is_empty(), "{plan:?}");
    assert!(reason(&plan, "default/gpu").contains("not resolved yet"));
}

#[test]
fn with_only_an_orphan_node_pool_the_reason_names_it_and_its_class() {
    let gpu = plain_pod(
        "gpu",
        "  tolerations: [{key: nvidia.com/gpu, operator: Exists}]\n",
    );
    let plan = snapshot(&[&orphan_pool(), &gpu], false).plan();
    let r = reason(&plan, "default/gpu");
    assert!(
        r.contains(r#"NodePool orphan launches nothing: EC2NodeClass "missing" not found"#),
        "{r}"
    );
    assert!(!r.contains("no NodePool to launch nodes from"), "{r}");
}

#[test]
fn objects_that_cannot_be_read_are_left_out_one_by_one() {
    let bad_pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: bad, namespace: team}\nspec:\n  containers:\n  - name: c\n    resources: {requests: {cpu: lots}}\n";
    let bad_ds = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent, namespace: kube-system}\nspec:\n  selector: {matchLabels: {app: agent}}\n  template:\n    metadata: {labels: {app: agent}}\n    spec:\n      containers:\n      - name: c\n        resources: {requests: {memory: much}}\n";
    let good = plain_pod("good", "");
    let mut m = manifests(&[&cpu_pool(), bad_pod, bad_ds, &good]);
    // As a cluster can hold it (files are refused on reading): `Gt` of something not a number.
    let typo: joiner_model::api::NodePool = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "typo"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "cpu"},
            "requirements": [{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["many"]}]
        }}}
    }))
    .expect("a NodePool");
    m.node_pools.push(joiner_model::Sourced {
        origin: joiner_model::Source::new("cluster", 0),
        object: typo,
    });
    let s = build(&m, false);
    let invalid: Vec<String> = s.invalid().iter().map(ToString::to_string).collect();
    assert_eq!(invalid.len(), 3, "{invalid:?}");
    for (object, field) in [
        ("Pod/team/bad", "spec.containers[0].resources.requests.cpu"),
        ("NodePool/typo", "spec.template.spec.requirements[0]"),
        (
            "DaemonSet/kube-system/agent",
            "spec.template.spec.containers[0].resources.requests.memory",
        ),
    ] {
        assert!(
            invalid
                .iter()
                .any(|e| e.contains(object) && e.contains(field)),
            "{object} {field}: {invalid:?}"
        );
        assert!(
            s.warnings()
                .iter()
                .any(|w| w.contains(object) && w.contains(field)),
            "{object}: {:?}",
            s.warnings()
        );
    }
    let plan = s.plan();
    assert_eq!(plan.node_claims.len(), 1);
    assert_eq!(plan.node_claims[0].node_pool, "cpu");
    assert_eq!(plan.node_claims[0].pods, ["default/good"]);
    assert!(reason(&plan, "team/bad").contains("spec.containers[0].resources.requests.cpu"));
}

/// A GPU NodePool of class `cpu` whose nodes use the device-plugin config `key`.
fn gpu_pool_using(name: &str, key: &str) -> String {
    format!(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  template:\n    metadata:\n      labels: {{nvidia.com/device-plugin.config: {key}}}\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: cpu}}\n      requirements: [{{key: karpenter.k8s.aws/instance-family, operator: In, values: [g6]}}]\n      taints: [{{key: nvidia.com/gpu, effect: NoSchedule}}]\n"
    )
}

/// The device plugin's ConfigMap with a good key and one that does not parse.
const PLUGIN_CONFIG: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: nvidia-device-plugin, namespace: kube-system}\ndata:\n  shared: 'sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}'\n  broken: 'sharing: {timeSlicing: [oops]}'\n";

#[test]
fn a_device_plugin_config_that_cannot_be_read_holds_back_only_the_pools_that_use_it() {
    let cpu = plain_pod("cpu", "");
    let gpu = plain_pod(
        "gpu",
        "  tolerations: [{key: nvidia.com/gpu, operator: Exists}]\n",
    );
    let docs = [
        cpu_pool(),
        gpu_pool_using("broken", "broken"),
        PLUGIN_CONFIG.to_string(),
        cpu.clone(),
        gpu.clone(),
    ];
    let s = snapshot(&docs.iter().map(String::as_str).collect::<Vec<_>>(), false);
    // Reported once, naming the ConfigMap and the key's field; `joiner plan` refuses it.
    assert_eq!(s.invalid().len(), 1, "{:?}", s.invalid());
    assert_eq!(
        s.invalid()[0].field,
        "data.broken.sharing.timeSlicing",
        "{:?}",
        s.invalid()
    );
    let plan = s.plan();
    // The CPU pod launches as if nothing were wrong.
    assert_eq!(
        nodes(&plan),
        [(
            "cpu".into(),
            plan.node_claims[0].instance_type.clone(),
            vec!["default/cpu".into()]
        )]
    );
    // The GPU pod waits, told which config holds its NodePool back.
    let r = reason(&plan, "default/gpu");
    assert!(r.contains("NodePool broken launches nothing"), "{r}");
    assert!(
        r.contains("ConfigMap/kube-system/nvidia-device-plugin: data.broken"),
        "{r}"
    );

    // A NodePool whose nodes use the good key launches GPU nodes, shared as the key says.
    let docs = [
        cpu_pool(),
        gpu_pool_using("broken", "broken"),
        gpu_pool_using("shared", "shared"),
        PLUGIN_CONFIG.to_string(),
        gpu,
    ];
    let s = snapshot(&docs.iter().map(String::as_str).collect::<Vec<_>>(), false);
    let plan = s.plan();
    assert_eq!(plan.node_claims.len(), 1, "{plan:?}");
    assert_eq!(plan.node_claims[0].node_pool, "shared");
    let option = s
        .launch_option("shared", &plan.node_claims[0].instance_type)
        .expect("launchable");
    assert_eq!(
        option
            .allocatable
            .get("nvidia.com/gpu")
            .map(|q| q.to_string()),
        Some("4".to_string()),
        "{option:?}"
    );
}
