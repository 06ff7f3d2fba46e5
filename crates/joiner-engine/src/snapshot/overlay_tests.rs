//! NodeOverlays through the snapshot and the planner: prices and capacity as Karpenter adjusts
//! them, by weight, with conflicts refused whole, behind the NodeOverlay gate.

use joiner_model::settings::Settings;
use joiner_model::{Manifests, parse_documents};

use super::{ClusterSnapshot, Options};
use crate::plan::Plan;

const POOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: web}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: web}
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, m6i.large, m7i.large]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: web}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
"#;

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\nspec:\n  containers: [{name: c, resources: {requests: {cpu: 500m}}}]\n";

fn overlay(name: &str, weight: u32, requirements: &str, change: &str) -> String {
    format!(
        "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {{name: {name}}}\nspec:\n  weight: {weight}\n  requirements: {requirements}\n{change}"
    )
}

fn on(it: &str) -> String {
    format!("[{{key: node.kubernetes.io/instance-type, operator: In, values: [{it}]}}]")
}

/// The snapshot of `docs` (YAML documents) under chart values that set one feature gate.
pub(super) fn with_gate(docs: &[&str], gate: &str, on: bool) -> ClusterSnapshot {
    with_values(
        docs,
        serde_json::json!({"settings": {"featureGates": {gate: on}}}),
    )
}

/// The manifests of `docs` (YAML documents, each its own file).
pub(super) fn manifests(docs: &[&str]) -> Manifests {
    let mut m = Manifests::default();
    for (i, text) in docs.iter().enumerate() {
        for (origin, doc) in parse_documents(&format!("doc{i}.yaml"), text).unwrap() {
            m.add_document(origin, doc).unwrap();
        }
    }
    m.finish();
    m
}

/// The snapshot of `docs` (YAML documents) under these chart values.
pub(super) fn with_values(docs: &[&str], values: serde_json::Value) -> ClusterSnapshot {
    let m = manifests(docs);
    let (settings, _) = Settings::from_values(&values).unwrap();
    ClusterSnapshot::build(&m, &settings, &Options::default()).unwrap()
}

fn snapshot(docs: &[&str], gate: bool) -> ClusterSnapshot {
    with_gate(docs, "nodeOverlay", gate)
}

fn chosen(plan: &Plan) -> (&str, f64) {
    let c = &plan.node_claims[0];
    (c.instance_type.as_str(), c.price_per_hour.as_usd())
}

#[test]
fn a_price_overlay_flips_the_cheapest_type() {
    let before = snapshot(&[POOL, POD], true).plan();
    let (cheapest, _) = chosen(&before);
    let raise = overlay("dearer", 1, &on(cheapest), "  priceAdjustment: \"+100%\"\n");
    let after = snapshot(&[POOL, POD, &raise], true).plan();
    assert_ne!(chosen(&after).0, cheapest, "{after:?}");
    // A savings plan priced in makes a dearer type the cheapest.
    let discount = overlay("savings-plan", 1, &on("m7i.large"), "  price: \"0.01\"\n");
    let plan = snapshot(&[POOL, POD, &discount], true).plan();
    assert_eq!(chosen(&plan), ("m7i.large", 0.01));
    // With the gate off (Karpenter's default) nothing changes, and a warning says why.
    let off = snapshot(&[POOL, POD, &discount], false);
    assert_eq!(chosen(&off.plan()).0, cheapest);
    assert!(
        off.warnings()
            .iter()
            .any(|w| w.contains("NodeOverlay feature gate is off")),
        "{:?}",
        off.warnings()
    );
}

#[test]
fn the_heavier_overlay_prices_an_offering_and_equal_weights_conflict() {
    let heavy = overlay("heavy", 20, &on("m7i.large"), "  price: \"0.01\"\n");
    let light = overlay("light", 10, &on("m7i.large"), "  price: \"0.02\"\n");
    let plan = snapshot(&[POOL, POD, &light, &heavy], true).plan();
    assert_eq!(chosen(&plan), ("m7i.large", 0.01));
    // Same weight: taken in reverse name order, so `b` applies and `a` conflicts, whole.
    let a = overlay("a", 10, &on("m7i.large"), "  price: \"0.02\"\n");
    let b = overlay(
        "b",
        10,
        "[{key: karpenter.k8s.aws/instance-family, operator: In, values: [m7i, m6i]}]",
        "  price: \"0.01\"\n",
    );
    let s = snapshot(&[POOL, POD, &a, &b], true);
    let price = |it: &str| {
        s.launch_option("web", it).expect("an option").offerings[0]
            .price
            .as_usd()
    };
    assert_eq!((price("m7i.large"), price("m6i.large")), (0.01, 0.01));
    assert!(
        s.warnings()
            .iter()
            .any(|w| w.starts_with("NodeOverlay/a: conflicts with NodeOverlay/b (both weight 10")),
        "{:?}",
        s.warnings()
    );
}

#[test]
fn an_offering_requirement_prices_only_the_offerings_it_selects() {
    let zone_b = overlay(
        "zone-b",
        1,
        "[{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1b]}, {key: node.kubernetes.io/instance-type, operator: In, values: [m7i.large]}]",
        "  price: \"0.01\"\n",
    );
    let plan = snapshot(&[POOL, POD, &zone_b], true).plan();
    let c = &plan.node_claims[0];
    assert_eq!(
        (c.instance_type.as_str(), c.zone.as_str()),
        ("m7i.large", "us-east-1b")
    );
}

/// A pod asking for an extended resource no instance type has: the overlay's capacity makes
/// a type offer it; a heavier overlay's figure wins, a lighter one adds what is not set yet.
#[test]
fn capacity_is_set_by_weight_and_merged() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: huge, namespace: default}\nspec:\n  containers: [{name: c, resources: {requests: {cpu: 500m, example.com/fpga: \"2\", example.com/link: \"1\"}, limits: {example.com/fpga: \"2\", example.com/link: \"1\"}}}]\n";
    let none = snapshot(&[POOL, pod], true).plan();
    assert!(none.node_claims.is_empty());
    let heavy = overlay(
        "heavy",
        20,
        &on("m6i.large"),
        "  capacity: {example.com/fpga: \"1\"}\n",
    );
    let light = overlay(
        "light",
        10,
        &on("m6i.large"),
        "  capacity: {example.com/fpga: \"4\", example.com/link: \"1\"}\n",
    );
    // The heavier overlay's one FPGA is too few: nothing fits.
    let plan = snapshot(&[POOL, pod, &heavy, &light], true).plan();
    assert!(plan.node_claims.is_empty(), "{plan:?}");
    let heavy = overlay(
        "heavy",
        20,
        &on("m6i.large"),
        "  capacity: {example.com/fpga: \"2\"}\n",
    );
    let s = snapshot(&[POOL, pod, &heavy, &light], true);
    assert_eq!(chosen(&s.plan()).0, "m6i.large");
    let account = s.explain_pod("default/huge").expect("an account");
    assert!(
        account
            .instance_types
            .iter()
            .any(|l| l == "NodePool web / m6i.large: as NodeOverlay heavy, light changed it"),
        "{:?}",
        account.instance_types
    );
    // Equal weights setting one resource conflict: the second is not applied at all.
    let twin = overlay(
        "a-twin",
        20,
        &on("m6i.large"),
        "  capacity: {example.com/fpga: \"8\", example.com/link: \"1\"}\n",
    );
    let s = snapshot(&[POOL, pod, &heavy, &twin], true);
    assert!(
        s.plan().node_claims.is_empty(),
        "the twin's link must not be applied"
    );
    assert!(
        s.warnings()
            .iter()
            .any(|w| w.starts_with("NodeOverlay/a-twin: conflicts with NodeOverlay/heavy")),
        "{:?}",
        s.warnings()
    );
}

/// `settings.minValuesPolicy`: a pool asking for three instance types while it allows two
/// (`m5.large`, `m6i.large`) launches nothing under Strict (Karpenter's default) and, under BestEffort, a node that says
/// its minValues were relaxed; a pool whose minValues can be met says they were not.
#[test]
fn min_values_are_relaxed_only_under_best_effort() {
    let pool = |min: u32| {
        POOL.replace(
            "{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, m6i.large, m7i.large]}",
            &format!(
                "{{key: karpenter.k8s.aws/instance-family, operator: In, values: [m5, m6i]}}\n      \
                 - {{key: karpenter.k8s.aws/instance-size, operator: In, values: [large]}}\n      \
                 - {{key: node.kubernetes.io/instance-type, operator: Exists, minValues: {min}}}"
            ),
        )
    };
    let relaxed = |plan: &Plan| {
        plan.node_claims
            .first()
            .and_then(|c| {
                c.annotations
                    .get("karpenter.sh/nodeclaim-min-values-relaxed")
            })
            .cloned()
    };
    let strict = with_values(&[&pool(3), POD], serde_json::json!({}));
    let plan = strict.plan();
    assert!(plan.node_claims.is_empty(), "{:?}", plan.node_claims);
    assert_eq!(plan.unschedulable.len(), 1);
    let best = serde_json::json!({"settings": {"minValuesPolicy": "BestEffort"}});
    let plan = with_values(&[&pool(3), POD], best.clone()).plan();
    assert_eq!(relaxed(&plan).as_deref(), Some("true"), "{plan:?}");
    assert_eq!(plan.node_claims[0].instance_type_options.len(), 2);
    let plan = with_values(&[&pool(2), POD], best).plan();
    assert_eq!(relaxed(&plan).as_deref(), Some("false"), "{plan:?}");
}
