//! The CRDs in `charts/joiner/crds/`: structural, with the printer columns Karpenter users see,
//! accepting the bundled examples and the NodeClaims the controller writes, and rejecting broken
//! objects with the failing field named (as `kubectl apply` would report it).

use joiner_model::wellknown::{annotations, finalizers, labels};
use std::collections::BTreeMap;
use std::path::Path;

use joiner_chart::schema::{self, SchemaError, structural_problems, validate};
use joiner_model::api::nodeclaim::{NodeClaim, NodeClaimSpec, ResourceRequirements, conditions};
use joiner_model::api::nodepool::{
    NodeClassReference, NodePoolV1Beta1, NodeSelectorRequirementWithMinValues, Operator,
};
use joiner_model::api::{EC2NodeClass, NodePool};
use joiner_model::{Quantity, ResourceList};
use joiner_test_support::repo_root;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde_json::{Value, json};

fn crd(file: &str) -> Value {
    let path = repo_root().join("charts/joiner/crds").join(file);
    let text = std::fs::read_to_string(&path).expect("CRD file");
    serde_saphyr::from_str(&text).expect("CRD is YAML")
}

fn nodepools() -> Value {
    crd("karpenter.sh_nodepools.yaml")
}
fn nodeclaims() -> Value {
    crd("karpenter.sh_nodeclaims.yaml")
}
fn ec2nodeclasses() -> Value {
    crd("karpenter.k8s.aws_ec2nodeclasses.yaml")
}
fn nodeoverlays() -> Value {
    crd("karpenter.sh_nodeoverlays.yaml")
}

fn schema_of(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

/// `kubectl get` column names (upper-cased as kubectl prints them), without the `-o wide` ones.
fn columns(crd: &Value) -> Vec<String> {
    crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .expect("columns")
        .iter()
        .filter(|c| c["priority"].as_i64().unwrap_or(0) == 0)
        .filter_map(|c| c["name"].as_str().map(str::to_uppercase))
        .collect()
}

#[test]
fn each_crd_is_a_structural_v1_crd_with_karpenters_columns() {
    let expected: [(Value, &str, &str, &[&str]); 3] = [
        (
            nodepools(),
            "nodepools.karpenter.sh",
            "NodePool",
            &["NODECLASS", "NODES", "READY", "AGE"],
        ),
        (
            nodeclaims(),
            "nodeclaims.karpenter.sh",
            "NodeClaim",
            &["TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"],
        ),
        (
            ec2nodeclasses(),
            "ec2nodeclasses.karpenter.k8s.aws",
            "EC2NodeClass",
            &["READY", "AGE"],
        ),
    ];
    for (crd, name, kind, cols) in expected {
        assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(crd["metadata"]["name"], name);
        assert_eq!(crd["spec"]["names"]["kind"], kind);
        assert_eq!(crd["spec"]["scope"], "Cluster");
        let versions = crd["spec"]["versions"].as_array().expect("versions");
        assert_eq!(versions.len(), 1, "{name}: only v1 is served");
        assert_eq!(versions[0]["name"], "v1");
        assert_eq!(versions[0]["served"], true);
        assert_eq!(versions[0]["storage"], true);
        assert_eq!(versions[0]["subresources"]["status"], json!({}));
        assert_eq!(columns(&crd), cols, "{name}");
        assert!(crd["spec"]["names"]["shortNames"].is_array(), "{name}");
        let problems = structural_problems(schema_of(&crd));
        assert!(problems.is_empty(), "{name}: {problems:?}");
        for (path, rules) in schema::rules(schema_of(&crd)) {
            for rule in rules {
                assert!(
                    schema::compile(&rule).is_ok(),
                    "{name} {path}: {rule}: {:?}",
                    schema::compile(&rule)
                );
            }
        }
    }
}

/// Every NodePool, EC2NodeClass and NodeClaim in `examples/`: v1 ones as written (the
/// NodeClaims are Karpenter's, as a fleet it launched left them), v1beta1 ones after the
/// conversion Karpenter (and Joiner) apply.
#[test]
fn every_example_nodepool_and_ec2nodeclass_validates() {
    let mut checked = BTreeMap::new();
    for dir in std::fs::read_dir(repo_root().join("examples")).expect("examples") {
        let dir = dir.expect("entry").path();
        for file in std::fs::read_dir(&dir).expect("example dir") {
            let file = file.expect("entry").path();
            if file.extension().and_then(|e| e.to_str()) != Some("yaml") {
                continue;
            }
            for doc in documents(&file) {
                let (crd, object) = match (doc["kind"].as_str(), doc["apiVersion"].as_str()) {
                    (Some("NodePool"), Some("karpenter.sh/v1")) => (nodepools(), doc),
                    (Some("NodePool"), Some("karpenter.sh/v1beta1")) => {
                        let old: NodePoolV1Beta1 =
                            serde_json::from_value(doc).expect("a v1beta1 NodePool");
                        (nodepools(), to_json(&old.into_v1()))
                    }
                    (Some("EC2NodeClass"), Some("karpenter.k8s.aws/v1")) => (ec2nodeclasses(), doc),
                    (Some("NodeClaim"), Some("karpenter.sh/v1")) => (nodeclaims(), doc),
                    (Some("EC2NodeClass"), Some("karpenter.k8s.aws/v1beta1")) => {
                        let old: EC2NodeClass =
                            serde_json::from_value(doc).expect("a v1beta1 EC2NodeClass");
                        (ec2nodeclasses(), to_json(&old.into_v1()))
                    }
                    _ => continue,
                };
                let errors = validate(schema_of(&crd), &object);
                assert!(errors.is_empty(), "{}: {errors:?}", file.display());
                *checked
                    .entry(object["kind"].as_str().unwrap_or_default().to_string())
                    .or_insert(0) += 1;
            }
        }
    }
    assert!(
        checked.get("NodePool").is_some_and(|n| *n >= 5),
        "{checked:?}"
    );
    assert!(
        checked.get("EC2NodeClass").is_some_and(|n| *n >= 5),
        "{checked:?}"
    );
    assert!(
        checked.get("NodeClaim").is_some_and(|n| *n >= 20),
        "{checked:?}"
    );
}

fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("readable");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("YAML");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("serializes")
}

fn requirement(key: &str, values: &[&str]) -> NodeSelectorRequirementWithMinValues {
    NodeSelectorRequirementWithMinValues {
        key: key.to_string(),
        operator: Operator::In,
        values: values.iter().map(|v| v.to_string()).collect(),
        min_values: None,
    }
}

fn time(s: &str) -> Time {
    serde_json::from_value(json!(s)).expect("a time")
}

/// A NodeClaim as the controller writes it: created with its finalizer, labels and
/// requirements, then launched, registered and initialized.
fn controller_nodeclaim() -> NodeClaim {
    let mut requests = ResourceList::new();
    requests.insert("cpu".to_string(), Quantity::from_milli(3500));
    requests.insert("nvidia.com/gpu".to_string(), Quantity::from_units(3));
    let mut claim = NodeClaim::new(
        ObjectMeta {
            name: Some("g4-nodepool-0123456789ab".to_string()),
            labels: Some(BTreeMap::from([
                (labels::NODEPOOL.to_string(), "g4-nodepool".to_string()),
                (labels::NODECLASS.to_string(), "g4-nodeclass".to_string()),
                (labels::NEED.to_string(), "0123456789ab".to_string()),
                (labels::INSTANCE_TYPE.to_string(), "g4dn.xlarge".to_string()),
                (labels::ZONE.to_string(), "us-east-1a".to_string()),
                (labels::CAPACITY_TYPE.to_string(), "on-demand".to_string()),
            ])),
            annotations: Some(BTreeMap::from([(
                annotations::PLANNED_PODS.to_string(),
                "default/lab-0,default/lab-1".to_string(),
            )])),
            finalizers: Some(vec![finalizers::TERMINATION.to_string()]),
            generation: Some(1),
            ..ObjectMeta::default()
        },
        NodeClaimSpec {
            node_class_ref: NodeClassReference {
                group: "karpenter.k8s.aws".to_string(),
                kind: "EC2NodeClass".to_string(),
                name: "g4-nodeclass".to_string(),
            },
            requirements: vec![
                requirement(labels::NODEPOOL, &["g4-nodepool"]),
                requirement(labels::INSTANCE_TYPE, &["g4dn.xlarge", "g4dn.2xlarge"]),
                requirement(labels::ZONE, &["us-east-1a", "us-east-1b"]),
                requirement(labels::CAPACITY_TYPE, &["on-demand"]),
            ],
            resources: ResourceRequirements { requests },
            taints: Vec::new(),
            startup_taints: Vec::new(),
            expire_after: Some("720h".to_string()),
            termination_grace_period: None,
        },
    );
    let now = time("2026-11-29T20:00:00Z");
    claim.status.provider_id = Some("aws:///us-east-1a/i-0123456789abcdef0".to_string());
    claim.status.node_name = Some("ip-10-0-1-23.ec2.internal".to_string());
    claim.status.image_id = Some("ami-0123456789abcdef0".to_string());
    let mut capacity = ResourceList::new();
    capacity.insert("cpu".to_string(), Quantity::from_units(4));
    capacity.insert("memory".to_string(), Quantity::from_units(16_106_127_360));
    capacity.insert("nvidia.com/gpu".to_string(), Quantity::from_units(1));
    claim.status.capacity = capacity.clone();
    capacity.insert("nvidia.com/gpu".to_string(), Quantity::from_units(3));
    claim.status.allocatable = capacity;
    for (condition, reason) in [
        (conditions::LAUNCHED, "Launched"),
        (conditions::REGISTERED, "Registered"),
        (conditions::INITIALIZED, "Initialized"),
    ] {
        claim.set_condition(condition, true, reason, "", now.clone());
    }
    // Disruption marks a drifted node with the drift's reason and a sentence.
    claim.set_condition(
        conditions::DRIFTED,
        true,
        "NodePoolDrifted",
        "the NodePool's template changed",
        now,
    );
    claim
}

#[test]
fn a_nodeclaim_as_the_controller_writes_it_validates() {
    let claim = controller_nodeclaim();
    assert!(claim.is_true(conditions::READY));
    let object = to_json(&claim);
    let errors = validate(schema_of(&nodeclaims()), &object);
    assert!(errors.is_empty(), "{errors:?}\n{object:#}");

    // And one just created (no status yet, not ready).
    let mut fresh = controller_nodeclaim();
    fresh.status = Default::default();
    fresh.set_condition(
        conditions::LAUNCHED,
        false,
        "Launching",
        "",
        time("2026-11-29T20:00:00Z"),
    );
    let errors = validate(schema_of(&nodeclaims()), &to_json(&fresh));
    assert!(errors.is_empty(), "{errors:?}");
}

/// Karpenter's NodeClaim spec is immutable: the API server refuses any change to it, while the
/// status and metadata may change (the rule is a transition rule, checked only on update).
#[test]
fn a_change_to_a_stored_nodeclaims_spec_is_refused() {
    let crd = nodeclaims();
    let stored = to_json(&controller_nodeclaim());
    let update = |edit: &dyn Fn(&mut Value)| {
        let mut object = stored.clone();
        edit(&mut object);
        schema::validate_update(schema_of(&crd), &object, &stored)
    };
    let errors = update(&|c| c["spec"]["requirements"][0]["values"] = json!(["p5.48xlarge"]));
    assert_rejected_at(&errors, "spec", "a changed requirement");
    assert!(
        errors.iter().any(|e| e.message == "spec is immutable"),
        "{errors:?}"
    );
    let errors = update(&|c| c["spec"]["expireAfter"] = json!("24h"));
    assert_rejected_at(&errors, "spec", "a changed expireAfter");
    // A new object is not an update: the same spec is accepted on create.
    let mut changed = stored.clone();
    changed["spec"]["expireAfter"] = json!("24h");
    assert!(validate(schema_of(&crd), &changed).is_empty());
    // Status and labels change freely.
    let errors = update(&|c| {
        c["status"]["nodeName"] = json!("ip-10-0-0-9.ec2.internal");
        c["metadata"]["labels"]["team"] = json!("ml");
    });
    assert!(errors.is_empty(), "{errors:?}");
}

/// A NodePool cannot switch between static and dynamic, nor move to another kind of node class,
/// as with Karpenter's CRD; its other fields change freely.
#[test]
fn nodepool_transitions_karpenter_refuses_are_refused() {
    let crd = nodepools();
    let stored = v1_example("dra-gpu-efa-aligned/nodepool.yaml", "NodePool");
    let update = |edit: &dyn Fn(&mut Value)| {
        let mut object = stored.clone();
        edit(&mut object);
        schema::validate_update(schema_of(&crd), &object, &stored)
    };
    let errors = update(&|p| p["spec"]["replicas"] = json!(2));
    assert!(
        errors
            .iter()
            .any(|e| e.field == "spec" && e.message.contains("static")),
        "{errors:?}"
    );
    let errors =
        update(&|p| p["spec"]["template"]["spec"]["nodeClassRef"]["group"] = json!("example.com"));
    assert_rejected_at(&errors, "spec.template.spec.nodeClassRef", "another group");
    let errors =
        update(&|p| p["spec"]["template"]["spec"]["nodeClassRef"]["name"] = json!("other"));
    assert!(errors.is_empty(), "{errors:?}");
}

/// The chart's CRDs are exactly what `joiner crds` generates from the API types, so a field
/// added to a type cannot be forgotten in the chart. `JOINER_BLESS=1` rewrites them.
#[test]
fn the_chart_crds_are_the_ones_generated_from_the_types() {
    let dir = repo_root().join("charts/joiner/crds");
    let bless = std::env::var_os("JOINER_BLESS").is_some();
    let mut generated_files = Vec::new();
    for generated in joiner_model::api::crds::crds() {
        let path = dir.join(&generated.file_name);
        let text = generated.to_yaml();
        if bless {
            std::fs::write(&path, &text).expect("write the CRD");
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == text,
            "{} differs from the generated CRD: run `cargo run -p joiner -- crds --dir charts/joiner/crds`",
            path.display()
        );
        generated_files.push(generated.file_name);
    }
    let mut in_chart: Vec<String> = std::fs::read_dir(&dir)
        .expect("the chart's CRD directory")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    in_chart.sort();
    generated_files.sort();
    assert_eq!(
        in_chart, generated_files,
        "every CRD in the chart is generated"
    );
}

fn v1_example(file: &str, kind: &str) -> Value {
    documents(&repo_root().join("examples").join(file))
        .into_iter()
        .find(|d| d["kind"] == kind)
        .expect("the example has the object")
}

/// A broken object: what is wrong, the field the CRD must name, and the edit that breaks it.
type Case = (&'static str, &'static str, Box<dyn FnOnce(&mut Value)>);

/// Applies `edit` to a copy of `base` and returns the fields the CRD names.
fn rejected(crd: &Value, base: &Value, edit: impl FnOnce(&mut Value)) -> Vec<SchemaError> {
    let mut object = base.clone();
    edit(&mut object);
    validate(schema_of(crd), &object)
}

fn assert_rejected_at(errors: &[SchemaError], field: &str, what: &str) {
    assert!(
        errors.iter().any(|e| e.field == field),
        "{what}: expected an error at {field}, got {errors:?}"
    );
}

#[test]
fn broken_nodepools_are_rejected_naming_the_field() {
    let crd = nodepools();
    let pool = v1_example("dra-gpu-efa-aligned/nodepool.yaml", "NodePool");
    assert!(validate(schema_of(&crd), &pool).is_empty());
    let cases: Vec<Case> = vec![
        (
            "unknown operator",
            "spec.template.spec.requirements[0].operator",
            Box::new(|p| {
                p["spec"]["template"]["spec"]["requirements"][0]["operator"] = json!("Equals")
            }),
        ),
        (
            "In without values",
            "spec.template.spec.requirements",
            Box::new(|p| p["spec"]["template"]["spec"]["requirements"][0]["values"] = json!([])),
        ),
        (
            "Gt with a word",
            "spec.template.spec.requirements",
            Box::new(
                |p| p["spec"]["template"]["spec"]["requirements"][0] = json!({"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gt", "values": ["many"]}),
            ),
        ),
        (
            "minValues above the values",
            "spec.template.spec.requirements",
            Box::new(|p| p["spec"]["template"]["spec"]["requirements"][0]["minValues"] = json!(9)),
        ),
        (
            "hostname requirement",
            "spec.template.spec.requirements[0].key",
            Box::new(|p| {
                p["spec"]["template"]["spec"]["requirements"][0] =
                    json!({"key": "kubernetes.io/hostname", "operator": "Exists"})
            }),
        ),
        (
            "bad consolidateAfter",
            "spec.disruption.consolidateAfter",
            Box::new(|p| p["spec"]["disruption"] = json!({"consolidateAfter": "1d"})),
        ),
        (
            "bad expireAfter",
            "spec.template.spec.expireAfter",
            Box::new(|p| p["spec"]["template"]["spec"]["expireAfter"] = json!("forever")),
        ),
        // Negative limits pass Karpenter's CRD (its quantity pattern allows a sign), so they
        // pass this one; joiner-model refuses the pool (see its tests).
        (
            "limit that is not a quantity",
            "spec.limits.memory",
            Box::new(|p| p["spec"]["limits"] = json!({"memory": "lots"})),
        ),
        (
            "budget over 100%",
            "spec.disruption.budgets[0].nodes",
            Box::new(|p| p["spec"]["disruption"] = json!({"budgets": [{"nodes": "150%"}]})),
        ),
        (
            "budget schedule without duration",
            "spec.disruption.budgets",
            Box::new(|p| {
                p["spec"]["disruption"] = json!({"budgets": [{"nodes": "1", "schedule": "@daily"}]})
            }),
        ),
        (
            "taint effect",
            "spec.template.spec.taints[0].effect",
            Box::new(|p| p["spec"]["template"]["spec"]["taints"][0]["effect"] = json!("NoWhere")),
        ),
        (
            "weight 0",
            "spec.weight",
            Box::new(|p| p["spec"]["weight"] = json!(0)),
        ),
        (
            "unknown field",
            "spec.template.spec.kubelet",
            Box::new(|p| p["spec"]["template"]["spec"]["kubelet"] = json!({"maxPods": 110})),
        ),
        (
            "missing nodeClassRef",
            "spec.template.spec.nodeClassRef",
            Box::new(|p| {
                p["spec"]["template"]["spec"]
                    .as_object_mut()
                    .map(|s| s.remove("nodeClassRef"));
            }),
        ),
        (
            "restricted label",
            "spec.template.metadata.labels",
            Box::new(|p| {
                p["spec"]["template"]["metadata"]["labels"]["karpenter.sh/nodepool"] = json!("x")
            }),
        ),
    ];
    for (what, field, edit) in cases {
        let mut object = pool.clone();
        edit(&mut object);
        let errors = validate(schema_of(&crd), &object);
        assert_rejected_at(&errors, field, what);
        // Joiner's own reader refuses the same object (when it is one it can read at all).
        let joiner = serde_json::from_value::<NodePool>(object).map(|p| p.validate());
        if what != "unknown field" {
            assert!(
                !matches!(joiner, Ok(Ok(()))),
                "{what}: the CRD refuses it but joiner-model accepts it"
            );
        }
    }
    // Durations Karpenter accepts are accepted.
    for ok in ["0s", "30s", "1h30m", "Never"] {
        let errors = rejected(&crd, &pool, |p| {
            p["spec"]["disruption"] = json!({"consolidateAfter": ok, "budgets": [{"nodes": "0"}, {"nodes": "20%", "schedule": "0 9 * * mon-fri", "duration": "8h"}]});
            p["spec"]["limits"] = json!({"cpu": 1000, "memory": "1000Gi", "nvidia.com/gpu": "8"});
        });
        assert!(errors.is_empty(), "{ok}: {errors:?}");
    }
}

#[test]
fn broken_ec2nodeclasses_are_rejected_naming_the_field() {
    let crd = ec2nodeclasses();
    let class = v1_example("dra-gpu-efa-aligned/nodepool.yaml", "EC2NodeClass");
    assert!(validate(schema_of(&crd), &class).is_empty());
    let cases: Vec<Case> = vec![
        (
            "role and instance profile",
            "spec",
            Box::new(|c| c["spec"]["instanceProfile"] = json!("profile")),
        ),
        (
            "alias with another term",
            "spec.amiSelectorTerms",
            Box::new(|c| {
                c["spec"]["amiSelectorTerms"] =
                    json!([{"alias": "al2023@latest"}, {"id": "ami-0123"}])
            }),
        ),
        (
            "unknown alias family",
            "spec.amiSelectorTerms[0].alias",
            Box::new(|c| c["spec"]["amiSelectorTerms"] = json!([{"alias": "ubuntu@latest"}])),
        ),
        (
            "empty subnet term",
            "spec.subnetSelectorTerms",
            Box::new(|c| c["spec"]["subnetSelectorTerms"] = json!([{}])),
        ),
        (
            "volume type",
            "spec.blockDeviceMappings[0].ebs.volumeType",
            Box::new(
                |c| c["spec"]["blockDeviceMappings"] = json!([{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi", "volumeType": "gp9"}}]),
            ),
        ),
        (
            "zero volume",
            "spec.blockDeviceMappings[0].ebs.volumeSize",
            Box::new(|c| {
                c["spec"]["blockDeviceMappings"] =
                    json!([{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "0Gi"}}])
            }),
        ),
        (
            "two root volumes",
            "spec.blockDeviceMappings",
            Box::new(|c| {
                c["spec"]["blockDeviceMappings"] =
                    json!([{"rootVolume": true}, {"rootVolume": true}])
            }),
        ),
        (
            "no AMI family and no alias",
            "spec",
            Box::new(|c| c["spec"]["amiSelectorTerms"] = json!([{"id": "ami-0123"}])),
        ),
        (
            "missing subnets",
            "spec.subnetSelectorTerms",
            Box::new(|c| {
                c["spec"]
                    .as_object_mut()
                    .map(|s| s.remove("subnetSelectorTerms"));
            }),
        ),
    ];
    for (what, field, edit) in cases {
        let errors = rejected(&crd, &class, edit);
        assert_rejected_at(&errors, field, what);
    }
}

#[test]
fn broken_nodeclaims_are_rejected_naming_the_field() {
    let crd = nodeclaims();
    let claim = to_json(&controller_nodeclaim());
    let errors = rejected(&crd, &claim, |c| {
        c["status"]["conditions"][0]["status"] = json!("Yes")
    });
    assert_rejected_at(&errors, "status.conditions[0].status", "condition status");
    let errors = rejected(&crd, &claim, |c| {
        c["spec"]["resources"]["requests"]["cpu"] = json!("3.5 cores")
    });
    assert_rejected_at(&errors, "spec.resources.requests.cpu", "request quantity");
    let errors = rejected(&crd, &claim, |c| c["spec"]["expireAfter"] = json!("30d"));
    assert_rejected_at(&errors, "spec.expireAfter", "expireAfter");
}

/// The property paths of Karpenter v1.14.1's CRDs (storage version), as facts read from
/// aws/karpenter-provider-aws `pkg/apis/crds` at that tag (the file's `source`): `.a.b` for
/// properties, `[]` for array items.
const UPSTREAM_PATHS: &str = include_str!("data/karpenter-v1.14.1-crd-paths.json");

/// Kinds of Karpenter v1.14 the chart has no CRD for yet.
const NO_CRD_YET: &[&str] = &[];

/// Every path a schema keeps: its properties (array items as `[]`), and the prefixes under
/// which it keeps whatever is stored (`x-kubernetes-preserve-unknown-fields`).
fn kept_paths(schema: &Value, prefix: &str, paths: &mut Vec<String>, open: &mut Vec<String>) {
    if schema["x-kubernetes-preserve-unknown-fields"] == true {
        open.push(prefix.to_string());
    }
    if let Some(items) = schema.get("items") {
        kept_paths(items, &format!("{prefix}[]"), paths, open);
    }
    for (name, property) in schema["properties"].as_object().into_iter().flatten() {
        let path = format!("{prefix}.{name}");
        paths.push(path.clone());
        kept_paths(property, &path, paths, open);
    }
}

#[test]
fn the_crds_prune_nothing_karpenter_v1_14_stores() {
    let upstream: Value = serde_json::from_str(UPSTREAM_PATHS).expect("the paths file");
    let ours = [
        ("NodePool", nodepools()),
        ("NodeClaim", nodeclaims()),
        ("EC2NodeClass", ec2nodeclasses()),
        ("NodeOverlay", nodeoverlays()),
    ];
    let mut missing = Vec::new();
    for (kind, wanted) in upstream["paths"].as_object().expect("paths by kind") {
        let Some((_, crd)) = ours.iter().find(|(k, _)| k == kind) else {
            assert!(NO_CRD_YET.contains(&kind.as_str()), "no CRD for {kind}");
            continue;
        };
        let (mut paths, mut open) = (Vec::new(), Vec::new());
        kept_paths(schema_of(crd), "", &mut paths, &mut open);
        for path in wanted
            .as_array()
            .expect("a list")
            .iter()
            .filter_map(Value::as_str)
        {
            let kept = paths.iter().any(|p| p == path)
                || open.iter().any(|o| {
                    path.strip_prefix(o.as_str())
                        .is_some_and(|rest| rest.starts_with(['.', '[']))
                });
            if !kept {
                missing.push((kind.clone(), path.to_string()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "applied over Karpenter v1.14 these CRDs would prune {missing:?}"
    );
}

/// The CEL rules of Karpenter v1.14.1's CRDs by property path, as facts read from
/// aws/karpenter-provider-aws `pkg/apis/crds` at that tag (the file's `source`).
const UPSTREAM_RULES: &str = include_str!("data/karpenter-v1.14.1-crd-rules.json");

/// Every rule of the schema at each path (`.a.b`, `[]` for items, `{}` for map values).
fn rules_by_path(schema: &Value, path: &str, out: &mut Vec<(String, String)>) {
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(text) = rule["rule"].as_str() {
            let at = if path.is_empty() { "." } else { path };
            out.push((at.to_string(), text.to_string()));
        }
    }
    for (name, property) in schema["properties"].as_object().into_iter().flatten() {
        rules_by_path(property, &format!("{path}.{name}"), out);
    }
    if let Some(items) = schema.get("items") {
        rules_by_path(items, &format!("{path}[]"), out);
    }
    if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        rules_by_path(values, &format!("{path}{{}}"), out);
    }
}

/// `rule` with each list literal's repeated items left out: Karpenter's NodePool rules name
/// one label twice in a list, which means what naming it once does.
fn without_repeated_list_items(rule: &str) -> String {
    let mut out = String::new();
    let mut rest = rule;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find(']').map(|c| open + c) else {
            break;
        };
        out.push_str(&rest[..=open]);
        let mut seen: Vec<&str> = Vec::new();
        for item in rest[open + 1..close].split(", ") {
            if !seen.contains(&item) {
                seen.push(item);
            }
        }
        out.push_str(&seen.join(", "));
        out.push(']');
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

/// Every validation rule of Karpenter v1.14.1's CRDs is in the generated ones, at the same
/// path, so an object Karpenter's API server refuses is refused here too.
#[test]
fn every_karpenter_v1_14_rule_has_its_counterpart() {
    let upstream: Value = serde_json::from_str(UPSTREAM_RULES).expect("the rules file");
    let ours = [
        ("NodePool", nodepools()),
        ("NodeClaim", nodeclaims()),
        ("EC2NodeClass", ec2nodeclasses()),
        ("NodeOverlay", nodeoverlays()),
    ];
    let mut missing = Vec::new();
    for (kind, wanted) in upstream["rules"].as_object().expect("rules by kind") {
        let Some((_, crd)) = ours.iter().find(|(k, _)| k == kind) else {
            assert!(NO_CRD_YET.contains(&kind.as_str()), "no CRD for {kind}");
            continue;
        };
        let mut have = Vec::new();
        rules_by_path(schema_of(crd), "", &mut have);
        let have: Vec<(String, String)> = have
            .into_iter()
            .map(|(path, rule)| (path, without_repeated_list_items(&rule)))
            .collect();
        for rule in wanted.as_array().expect("a list") {
            let wanted = (
                rule["path"].as_str().unwrap_or_default().to_string(),
                without_repeated_list_items(rule["rule"].as_str().unwrap_or_default()),
            );
            if !have.contains(&wanted) {
                missing.push((kind.clone(), wanted));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "rules without a counterpart: {missing:#?}"
    );
}

/// An EC2NodeClass using what Karpenter v1.14 added (placement groups, network interfaces,
/// prefix delegation, connection tracking) is stored as Karpenter's CRD stores it, and the
/// rules on those fields hold.
#[test]
fn an_ec2nodeclass_with_karpenter_v1_14_fields_validates_and_their_rules_hold() {
    let crd = ec2nodeclasses();
    let mut class = v1_example("dra-gpu-efa-aligned/nodepool.yaml", "EC2NodeClass");
    class["spec"]["placementGroupSelector"] = json!({"name": "training"});
    class["spec"]["networkInterfaces"] = json!([
        {"deviceIndex": 0, "networkCardIndex": 0, "interfaceType": "interface"},
        {"deviceIndex": 1, "networkCardIndex": 1, "interfaceType": "efa-only"}
    ]);
    class["spec"]["ipPrefixCount"] = json!(1);
    class["spec"]["connectionTracking"] = json!({"tcpEstablishedTimeout": 3600});
    class["spec"]["cpuOptions"] = json!({"nestedVirtualization": "disabled"});
    class["spec"]["capacityReservationSelectorTerms"] = json!([{"instanceMatchCriteria": "open"}]);
    class["spec"]["kubelet"] = json!({
        "clusterDNS": ["10.100.0.10"],
        "evictionSoft": {"memory.available": "5%"},
        "evictionSoftGracePeriod": {"memory.available": "1m"},
        "imageGCHighThresholdPercent": 85,
        "imageGCLowThresholdPercent": 80
    });
    let errors = validate(schema_of(&crd), &class);
    assert!(errors.is_empty(), "{errors:?}");
    let cases: Vec<Case> = vec![
        (
            "placement group by name and id",
            "spec.placementGroupSelector",
            Box::new(|c| c["spec"]["placementGroupSelector"] = json!({"name": "a", "id": "pg-0a"})),
        ),
        (
            "no primary interface",
            "spec.networkInterfaces",
            Box::new(|c| {
                c["spec"]["networkInterfaces"] =
                    json!([{"deviceIndex": 1, "networkCardIndex": 0, "interfaceType": "efa-only"}])
            }),
        ),
        (
            "soft eviction without a grace period",
            "spec.kubelet",
            Box::new(|c| {
                c["spec"]["kubelet"] = json!({"evictionSoft": {"memory.available": "5%"}})
            }),
        ),
        (
            "image GC thresholds the wrong way round",
            "spec.kubelet",
            Box::new(|c| {
                c["spec"]["kubelet"] =
                    json!({"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 80})
            }),
        ),
        (
            "a tag Karpenter owns",
            "spec.tags",
            Box::new(|c| c["spec"]["tags"] = json!({"karpenter.sh/nodeclaim": "x"})),
        ),
        (
            "a Windows alias pinned to a version",
            "spec.amiSelectorTerms[0].alias",
            Box::new(|c| c["spec"]["amiSelectorTerms"] = json!([{"alias": "windows2022@v2024"}])),
        ),
    ];
    for (what, field, edit) in cases {
        let errors = rejected(&crd, &class, edit);
        assert_rejected_at(&errors, field, what);
    }
}

/// `kubectl get nodepools` counts nodes from `.status.nodes`, where Karpenter writes the count.
#[test]
fn the_nodes_column_reads_karpenters_node_count() {
    let crd = nodepools();
    let column = crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .expect("columns")
        .iter()
        .find(|c| c["name"] == "Nodes")
        .cloned()
        .expect("a Nodes column");
    assert_eq!(column["jsonPath"], ".status.nodes");
}

/// The README's "Karpenter's API, field by field" table says for every field of Karpenter's
/// NodePool, NodeClaim and EC2NodeClass whether Joiner acts on it: each spec path of the
/// v1.14.1 CRDs falls under a row, and each row names a real path.
#[test]
fn the_readme_field_table_covers_every_karpenter_field() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README");
    let rows: Vec<(String, String, String)> = readme
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let [_, kind, field, verdict, ..] = cells.as_slice() else {
                return None;
            };
            let field = field.strip_prefix('`')?.strip_suffix('`')?;
            ["NodePool", "NodeClaim", "EC2NodeClass", "NodeOverlay"]
                .contains(kind)
                .then(|| (kind.to_string(), format!(".{field}"), verdict.to_string()))
        })
        .collect();
    assert!(rows.len() > 30, "the table is missing: {rows:?}");
    for (_, _, verdict) in &rows {
        assert!(
            ["acted on", "refused", "accepted, not acted on"].contains(&verdict.as_str()),
            "{verdict}"
        );
    }
    let upstream: Value = serde_json::from_str(UPSTREAM_PATHS).expect("paths JSON");
    for kind in ["NodePool", "NodeClaim", "EC2NodeClass", "NodeOverlay"] {
        let paths: Vec<&str> = upstream["paths"][kind]
            .as_array()
            .expect("paths")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        // A path is covered by a row for it or for an enclosing object, and an object whose
        // fields have rows of their own needs none.
        let under = |path: &str, row: &str| {
            path == row
                || path.starts_with(&format!("{row}."))
                || path.starts_with(&format!("{row}["))
                || row.starts_with(&format!("{path}."))
                || row.starts_with(&format!("{path}["))
        };
        for path in paths.iter().filter(|p| p.starts_with(".spec.")) {
            assert!(
                rows.iter().any(|(k, row, _)| k == kind && under(path, row)),
                "{kind} {path} has no row in the README's field table"
            );
        }
        for (_, row, _) in rows.iter().filter(|(k, _, _)| k == kind) {
            assert!(
                paths.contains(&row.as_str()),
                "{kind} {row} is not a Karpenter field"
            );
        }
    }
}
