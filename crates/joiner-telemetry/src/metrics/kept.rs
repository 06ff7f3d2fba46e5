//! What `/metrics` serves, checked against the list of Karpenter's metrics kept in
//! `data/karpenter-metrics.json` and the queries of Karpenter's Grafana dashboards kept in
//! `data/karpenter-dashboards.json`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use joiner_controller::cloud::CloudError;
use joiner_controller::{ControllerError, DisruptionEvent, Reconciler, StepReport};
use joiner_model::wellknown::{DisruptionAction, DisruptionReason, InterruptionKind};
use serde::Deserialize;

use super::conditions::ConditionKind;
use super::lifetimes::PodTimes;
use super::state_tests::{cluster, cluster_later};
use super::termination::Terminating;
use super::*;

#[derive(Deserialize)]
struct Kept {
    metrics: Vec<KeptMetric>,
}

#[derive(Deserialize)]
struct KeptMetric {
    name: String,
    #[serde(rename = "type")]
    type_: String,
    labels: Vec<String>,
    joiner: String,
    /// The labels Joiner serves where they differ from Karpenter's, and why.
    joiner_labels: Option<Vec<String>>,
    joiner_labels_why: Option<String>,
    /// The type Joiner serves it as where it differs from Karpenter's, and why.
    joiner_type: Option<String>,
    joiner_type_why: Option<String>,
}

fn kept() -> BTreeMap<String, KeptMetric> {
    let kept: Kept =
        serde_json::from_str(include_str!("../../data/karpenter-metrics.json")).unwrap();
    kept.metrics
        .into_iter()
        .map(|m| (m.name.clone(), m))
        .collect()
}

/// Metrics after a step that did a bit of everything, over a small cluster.
fn busy() -> Metrics {
    let m = Metrics::new("aws");
    let event = |action, reason: &str, claims: &[&str], detail: &[&str]| DisruptionEvent {
        action,
        reason: joiner_controller::DisruptionCause::parse(reason).expect("a cause"),
        node_claims: claims.iter().map(|s| s.to_string()).collect(),
        detail: detail.iter().map(|s| s.to_string()).collect(),
    };
    let mut report = StepReport {
        planned: true,
        created: vec!["r".into()],
        registered: vec!["a".into()],
        deleted: vec!["b".into()],
        drained: vec!["b".into()],
        unschedulable: vec![("ml/p".into(), "too big".into())],
        placed: vec!["ml/p-waiting".into(), "ml/p-placed".into()],
        ignored_pods: Some(0),
        pending_by_zone: Some(vec![("us-east-1a".into(), 1)]),
        decision_evaluations: vec![(None, Duration::from_millis(1))],
        consolidation_moves: vec![joiner_controller::MoveVerdict {
            nodepool: "gpu".into(),
            policy: "Balanced",
            approved: true,
            score: Some((0.7, true)),
        }],
        reboots: vec![joiner_controller::RebootStep {
            node_claim: "b".into(),
            node: "n-b".into(),
            phase: joiner_controller::RebootPhase::Succeeded,
            message: "back".into(),
        }],
        repaired: vec![joiner_controller::Repaired {
            node_claim: "b".into(),
            node_pool: "gpu".into(),
            condition: "AcceleratedHardwareReady",
            capacity_type: "spot".into(),
            image_id: "ami-1".into(),
        }],
        launch_failures: vec![joiner_controller::cloud::OfferingKey {
            instance_type: "g6.xlarge".into(),
            zone: "us-east-1a".into(),
            capacity_type: joiner_model::wellknown::CapacityType::OnDemand,
        }],
        scheduling_duration: Some(Duration::from_millis(5)),
        eviction_refused: vec!["ml/q".into()],
        disruption: vec![
            event(DisruptionAction::Decided, "Underutilized", &["b"], &[]),
            event(DisruptionAction::Replacing, "Underutilized", &["b"], &["r"]),
            event(
                DisruptionAction::Evicted,
                "Underutilized",
                &["b"],
                &["ml/x"],
            ),
            event(DisruptionAction::Forced, "Expired", &["c"], &["ml/y"]),
            event(
                DisruptionAction::Interrupted,
                InterruptionKind::SpotInterruption.reason(),
                &["d"],
                &["i-1"],
            ),
        ],
        catalog: Some(vec![joiner_controller::OfferedType {
            instance_type: "g6.xlarge".into(),
            cpu_cores: 4.0,
            memory_bytes: 16.0 * 1024.0 * 1024.0 * 1024.0,
            offerings: vec![joiner_controller::OfferedAt {
                zone: "us-east-1a".into(),
                capacity_type: "on-demand".into(),
                price_usd: 0.8048,
            }],
        }]),
        budgets: Some(vec![joiner_controller::PoolBudget {
            nodepool: "gpu".into(),
            reason: DisruptionReason::Underutilized,
            allowed: 1,
            disrupting: 1,
            nodes: 3,
        }]),
        eligible: Some(vec![
            (DisruptionReason::Empty, 1),
            (DisruptionReason::Underutilized, 2),
            (DisruptionReason::Drifted, 0),
        ]),
        termination_failures: vec!["us-east-1a".into()],
        failed_validations: vec![joiner_model::wellknown::ConsolidationType::Single],
        interruption_deleted: 1,
        interruption_latency: vec![Duration::from_secs(4)],
        cloud_calls: vec![joiner_controller::CloudCall {
            during: Reconciler::Launching,
            method: joiner_controller::cloud::CloudMethod::Create,
            took: Duration::from_secs(1),
            error: Some(CloudError::Throttled),
        }],
        ..StepReport::default()
    };
    report.error(
        Reconciler::Launching,
        "launch",
        ControllerError::Cloud(CloudError::Throttled),
    );
    let labels = ClaimLabels {
        nodepool: "gpu".into(),
        capacity_type: "spot".into(),
        zone: "us-east-1a".into(),
        registered: true,
    };
    let claims: Claims = ["a", "b", "c", "d", "r"]
        .into_iter()
        .map(|n| (n.to_string(), labels.clone()))
        .collect();
    record(&report, &claims, Duration::from_millis(9), &m);
    // A NodeClaim being deleted, then gone; a pod started, then another.
    let mut first = cluster();
    for life in first.claims.values_mut() {
        life.deleting_since = Some(first.at - 30.0);
    }
    first.started = vec![("p-old".into(), 3.0)];
    // One object of each kind terminating, gone at the next look.
    let extra = |n: usize| -> Labels {
        [
            ("karpenter_k8s_aws_ec2nodeclass", "default".to_string()),
            ("karpenter_sh_nodepool", "gpu".to_string()),
            ("karpenter_sh_initialized", "true".to_string()),
        ][..n]
            .to_vec()
    };
    first.terminating = [
        (ConditionKind::NodeClaim, extra(2)),
        (ConditionKind::NodePool, extra(0)),
        (ConditionKind::EC2NodeClass, extra(0)),
        (ConditionKind::Node, extra(3)),
    ]
    .into_iter()
    .map(|(kind, extra)| Terminating {
        kind,
        name: "going".into(),
        since: first.at - 30.0,
        extra,
    })
    .collect();
    let pod = |uid: &str, bound: Option<f64>, started: bool| PodTimes {
        name: uid.into(),
        namespace: "ml".into(),
        uid: uid.into(),
        created: first.at - 60.0,
        bound,
        started,
    };
    first.pod_times = vec![pod("p-waiting", None, false), pod("p-placed", None, false)];
    m.set_state(&first);
    let mut then = cluster_later();
    then.pod_times = vec![
        pod("p-waiting", Some(then.at - 10.0), false),
        pod("p-pending", None, false),
        pod("p-placed", None, false),
    ];
    then.claims.clear();
    // Others still terminate at the second look.
    then.terminating = first
        .terminating
        .iter()
        .map(|t| Terminating {
            name: "still-going".into(),
            ..t.clone()
        })
        .collect();
    then.present = then
        .terminating
        .iter()
        .map(|t| (t.kind, t.name.clone()))
        .collect();
    then.started = vec![
        ("p-old".into(), 3.0),
        ("p-new".into(), 7.0),
        ("p-waiting".into(), 55.0),
    ];
    m.set_state(&then);
    // A launch template created after the last look (the class of `cluster` is gone from it).
    let created = StepReport {
        user_data_bytes: vec![("default".into(), 1024)],
        ..StepReport::default()
    };
    record_outcomes(&created, &BTreeMap::new(), &m);
    m
}

/// Family name (as Prometheus exposes it: counters with `_total`) to type, from `# TYPE`.
fn families(exposition: &str) -> BTreeMap<String, String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, t)| {
            let name = if t == "counter" {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            (name, t.to_string())
        })
        .collect()
}

/// Label names of every sample of `family` (histogram buckets' `le` left out).
fn label_names(exposition: &str, family: &str) -> BTreeSet<String> {
    let base = family.strip_suffix("_total").unwrap_or(family);
    let mut names = BTreeSet::new();
    for line in exposition.lines().filter(|l| !l.starts_with('#')) {
        let Some((metric, rest)) = line.split_once('{') else {
            continue;
        };
        let own = [base, family].contains(&metric)
            || ["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| metric == format!("{base}{s}"));
        if !own {
            continue;
        }
        let labels = rest.rsplit_once('}').map_or("", |(l, _)| l);
        for pair in labels.split("\",") {
            if let Some((name, _)) = pair.split_once('=')
                && name != "le"
            {
                names.insert(name.trim_start_matches(',').to_string());
            }
        }
    }
    names
}

#[test]
fn every_karpenter_metric_served_is_kept_with_karpenters_type_and_labels() {
    let kept = kept();
    let text = busy().render();
    let served = families(&text);
    // A summary's `_sum` and `_count` are served as families of their own.
    let summary_part = |n: &str| {
        ["_sum", "_count"].iter().any(|s| {
            n.strip_suffix(s)
                .is_some_and(|base| kept.get(base).is_some_and(|k| k.type_ == "summary"))
        })
    };
    for (name, t) in served
        .iter()
        .filter(|(n, _)| !n.starts_with("joiner_") && !summary_part(n))
    {
        let k = kept
            .get(name)
            .unwrap_or_else(|| panic!("{name} is served but Karpenter has no such metric"));
        assert_eq!(
            k.joiner, "served",
            "{name} is served: the kept list must say so"
        );
        if k.joiner_type.is_some() {
            assert!(
                k.joiner_type_why.is_some(),
                "{name}: say why its type differs"
            );
        }
        assert_eq!(
            k.joiner_type.as_ref().unwrap_or(&k.type_),
            t,
            "{name}: Karpenter's type"
        );
        let have = label_names(&text, name);
        if k.joiner_labels.is_some() {
            assert!(
                k.joiner_labels_why.is_some(),
                "{name}: say why its labels differ"
            );
        }
        let want: BTreeSet<String> = k
            .joiner_labels
            .as_ref()
            .unwrap_or(&k.labels)
            .iter()
            .cloned()
            .collect();
        if name.starts_with("karpenter_nodes_") && want.contains("node_name") {
            // Karpenter labels node gauges with every well-known node label; Joiner with
            // those it knows, all among Karpenter's.
            assert!(
                have.is_subset(&want),
                "{name}: {have:?} not within {want:?}"
            );
            for must in [
                "node_name",
                "nodepool",
                "zone",
                "instance_type",
                "capacity_type",
                "arch",
            ] {
                assert!(have.contains(must), "{name} lacks {must}");
            }
        } else {
            assert_eq!(have, want, "{name}: Karpenter's labels");
        }
    }
    for (name, k) in &kept {
        if k.joiner == "served" {
            assert!(
                served.contains_key(name),
                "{name} is kept as served but /metrics lacks it"
            );
        } else {
            assert!(
                k.joiner.starts_with("not applicable") || k.joiner.starts_with("not yet"),
                "{name}: say why it is not served: {}",
                k.joiner
            );
        }
    }
    // Joiner's own metrics are under its own prefix; Karpenter's (and its operator
    // library's) are all kept.
    for name in served
        .keys()
        .filter(|n| !n.starts_with("joiner_") && !summary_part(n))
    {
        assert!(kept.contains_key(name), "{name} is not Karpenter's");
    }
}

#[derive(Deserialize)]
struct Dashboards {
    dashboards: Vec<Dashboard>,
}

#[derive(Deserialize)]
struct Dashboard {
    title: String,
    panels: Vec<Panel>,
}

#[derive(Deserialize)]
struct Panel {
    title: String,
    exprs: Vec<String>,
}

/// The metrics a PromQL expression selects and the label names its matchers use.
fn selectors(expr: &str) -> Vec<(String, BTreeSet<String>)> {
    let mut out = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        let word = &expr[start..i];
        let is_metric = ["karpenter_", "controller_runtime_", "workqueue_", "node_"]
            .iter()
            .any(|p| word.starts_with(p));
        if is_metric {
            let mut labels = BTreeSet::new();
            if expr[i..].starts_with('{')
                && let Some(end) = expr[i..].find('}')
            {
                for m in expr[i + 1..i + end].split(',') {
                    let name: String = m
                        .trim()
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        labels.insert(name);
                    }
                }
            }
            out.push((word.to_string(), labels));
        }
        if i == start {
            i += 1;
        }
    }
    out
}

/// The family a sample name belongs to (`x_bucket` is `x`'s), among `known` families.
fn family_of<'a>(name: &'a str, known: &dyn Fn(&str) -> bool) -> &'a str {
    for s in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(s)
            && known(base)
        {
            return base;
        }
    }
    name
}

#[test]
fn karpenters_dashboards_find_what_they_query() {
    let kept = kept();
    let text = busy().render();
    let served = families(&text);
    let dashboards: Dashboards =
        serde_json::from_str(include_str!("../../data/karpenter-dashboards.json")).unwrap();
    let mut working = BTreeMap::new();
    for d in &dashboards.dashboards {
        for p in &d.panels {
            let mut works = true;
            for (metric, matchers) in p.exprs.iter().flat_map(|e| selectors(e)) {
                let family =
                    family_of(&metric, &|f| served.contains_key(f) || kept.contains_key(f));
                if served.contains_key(family) {
                    let have = label_names(&text, family);
                    for m in &matchers {
                        // `job` and `quantile` come from the scrape and summaries.
                        assert!(
                            have.contains(m) || ["job", "quantile"].contains(&m.as_str()),
                            "{}/{}: {family} has no label {m}",
                            d.title,
                            p.title
                        );
                    }
                    continue;
                }
                works = false;
                // Anything a dashboard needs that is not served is kept with why, or is
                // another exporter's (node-exporter's node_*).
                assert!(
                    metric.starts_with("node_")
                        || metric.starts_with("karpenter_allocation_controller_")
                        || kept.get(family).is_some_and(|k| k.joiner != "served"),
                    "{}/{}: {metric} is neither served nor kept with why",
                    d.title,
                    p.title
                );
            }
            working
                .entry(d.title.as_str())
                .or_insert_with(Vec::new)
                .push((p.title.as_str(), works));
        }
    }
    let performance: Vec<&str> = working["Karpenter Performance v1"]
        .iter()
        .filter(|(_, w)| *w)
        .map(|(t, _)| *t)
        .collect();
    // The other two chart controller-runtime's reconcile times: Joiner has no such loops.
    assert_eq!(
        performance,
        ["Node Termination Latency", "Pod Startup Latency"]
    );
    let capacity: Vec<&str> = working["Karpenter Capacity v1"]
        .iter()
        .filter(|(_, w)| *w)
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(
        capacity,
        [
            "Nodes Created by nodepool",
            "Nodes Terminated by nodepool",
            "Nodes Eligible for Disruptions by \"reason\"",
            "Node Disruptions by \"$distribution_filter\"",
            "Disruption Actions performed by \"type\" and \"decision\"",
            "Pod Distribution by \"$distribution_filter\"",
            "Pod Phase",
            "Nodepool Summary",
            "Spot Node Percentage",
        ]
    );
}
