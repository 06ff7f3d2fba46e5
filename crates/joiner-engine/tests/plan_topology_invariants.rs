//! Topology invariants of every plan, checked on random small clusters (existing nodes in two
//! zones with pods bound to them, a NodePool offering two or three zones) through the public
//! scheduling API. Every pod the plan places, on an existing node or a new one, must keep its
//! required topology spread (`DoNotSchedule`, zones and hostnames), its required pod
//! anti-affinity (and every other pod's, which repels it) and its required pod affinity.
//!
//! The checker sees only the final placement, so it checks what the final placement implies:
//! all pods of one app share their constraints, so for a spread constraint every domain that
//! received a planned pod holds at most `maxSkew` more matching pods than the emptiest domain
//! the planner had to count (the zones of eligible existing nodes and of planned NodeClaims;
//! for hostnames the existing nodes, as new nodes could always be added); no two pods share a
//! domain where either's anti-affinity selects the other; and a pod with affinity shares its
//! domain with a pod its selector matches, unless it was the first of a group that selects
//! itself.

use std::collections::{BTreeMap, BTreeSet};

use joiner_engine::plan::Plan;
use joiner_engine::requirements::{Labels, Requirements};
use joiner_engine::scheduling::{
    ExistingNode, LaunchOffering, LaunchOption, PodInfo, PoolInput, SchedulingInput, schedule,
};
use joiner_model::{Price, ResourceList, Source};
use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;

mod common;
use common::{Rng, q};

const ZONE: &str = "topology.kubernetes.io/zone";
const HOSTNAME: &str = "kubernetes.io/hostname";
const APPS: &[&str] = &["web", "db", "batch", "plain"];

/// A required constraint every pod of an app carries.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rule {
    /// Spread of the app's own pods over a key.
    Spread { key: &'static str, max_skew: u32 },
    /// Not in a domain with a pod of `app`.
    Anti {
        key: &'static str,
        app: &'static str,
    },
    /// In a domain with a pod of `app`.
    With {
        key: &'static str,
        app: &'static str,
    },
}

fn rules(r: &mut Rng, app: &'static str) -> Vec<Rule> {
    if app == "plain" {
        return vec![];
    }
    (0..r.below(3))
        .map(|_| {
            let key = r.pick(&[ZONE, HOSTNAME]);
            match r.below(3) {
                0 => Rule::Spread {
                    key,
                    max_skew: 1 + r.below(2) as u32,
                },
                1 => Rule::Anti {
                    key,
                    app: r.pick(APPS),
                },
                _ => Rule::With {
                    key,
                    app: if r.chance(2) { app } else { r.pick(APPS) },
                },
            }
        })
        .collect()
}

fn pod_yaml(name: &str, app: &str, cpu: &str, rules: &[Rule]) -> String {
    let mut spread = Vec::new();
    let mut anti = Vec::new();
    let mut with = Vec::new();
    for rule in rules {
        match *rule {
            Rule::Spread { key, max_skew } => spread.push(format!(
                "{{maxSkew: {max_skew}, topologyKey: {key}, whenUnsatisfiable: DoNotSchedule, \
                 labelSelector: {{matchLabels: {{app: {app}}}}}}}"
            )),
            Rule::Anti { key, app } => anti.push(format!(
                "{{topologyKey: {key}, labelSelector: {{matchLabels: {{app: {app}}}}}}}"
            )),
            Rule::With { key, app } => with.push(format!(
                "{{topologyKey: {key}, labelSelector: {{matchLabels: {{app: {app}}}}}}}"
            )),
        }
    }
    let mut yaml = format!(
        "metadata: {{name: {name}, namespace: default, labels: {{app: {app}}}}}\nspec:\n  \
         containers: [{{name: c, resources: {{requests: {{cpu: {cpu}}}}}}}]\n"
    );
    if !spread.is_empty() {
        yaml.push_str(&format!(
            "  topologySpreadConstraints: [{}]\n",
            spread.join(", ")
        ));
    }
    if !anti.is_empty() || !with.is_empty() {
        yaml.push_str("  affinity:\n");
        if !anti.is_empty() {
            yaml.push_str(&format!(
                "    podAntiAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: [{}]}}\n",
                anti.join(", ")
            ));
        }
        if !with.is_empty() {
            yaml.push_str(&format!(
                "    podAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: [{}]}}\n",
                with.join(", ")
            ));
        }
    }
    yaml
}

fn resources(cpu: &str) -> ResourceList {
    ResourceList::from([
        ("cpu".to_string(), q(cpu)),
        ("memory".to_string(), q("16Gi")),
        ("pods".to_string(), q("110")),
    ])
}

/// A random cluster and, per app, its rules.
fn cluster(seed: u64) -> (SchedulingInput, BTreeMap<&'static str, Vec<Rule>>) {
    let mut r = Rng(seed);
    let app_rules: BTreeMap<&'static str, Vec<Rule>> =
        APPS.iter().map(|&a| (a, rules(&mut r, a))).collect();
    let zones3: &[&str] = &["zone-a", "zone-b", "zone-c"];
    let types: Vec<LaunchOption> = (0..1 + r.below(3))
        .map(|i| {
            let cpu = r.pick(&["2", "4", "8"]);
            let zones = if r.chance(2) { &zones3[..2] } else { zones3 };
            LaunchOption {
                instance_type: format!("t{i}.x"),
                labels: Labels::from([("kubernetes.io/arch".into(), "amd64".into())]),
                capacity: resources(cpu),
                allocatable: resources(cpu),
                offerings: zones
                    .iter()
                    .map(|z| LaunchOffering {
                        zone: z.to_string(),
                        capacity_type: "on-demand".into(),
                        price: Price::from_usd(0.1 * cpu.parse::<f64>().unwrap_or(1.0)).unwrap(),
                        price_basis: Default::default(),
                        reservation: None,
                        zone_id: None,
                        partition: None,
                    })
                    .collect(),
                at_most_one_per_pod: vec![],
                devices: None,
            }
        })
        .collect();
    let mut limits = ResourceList::new();
    if r.chance(4) {
        limits.insert("cpu".into(), q(r.pick(&["4", "8"])));
    }
    let pools = if r.chance(6) {
        vec![]
    } else {
        vec![PoolInput {
            name: "p".into(),
            weight: 0,
            labels: Labels::new(),
            taints: vec![],
            requirements: Requirements::new(),
            limits,
            options: types,
            consolidation: Default::default(),
            min_values_policy: Default::default(),
        }]
    };
    let nodes: Vec<ExistingNode> = (0..r.below(4))
        .map(|i| {
            let name = format!("node-{i}");
            let cpu = r.pick(&["2", "4"]);
            ExistingNode {
                name: name.clone(),
                labels: Labels::from([
                    (HOSTNAME.into(), name.clone()),
                    (ZONE.into(), r.pick(&["zone-a", "zone-b"]).to_string()),
                ]),
                taints: vec![],
                capacity: resources(cpu),
                allocatable: resources(cpu),
                node_pool: None,
                price: None,
                do_not_disrupt: false,
                consolidation_candidate: true,
                node_claim: None,
                in_flight: false,
            }
        })
        .collect();
    let pods = (0..1 + r.below(9))
        .map(|i| {
            let app = r.pick(APPS);
            let yaml = pod_yaml(
                &format!("{app}-{i}"),
                app,
                r.pick(&["250m", "500m", "1"]),
                &app_rules[app],
            );
            let value: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
            let pod: Pod = serde_json::from_value(value).unwrap();
            let mut info = PodInfo::compile(&pod, &Source::new("test", i as usize + 1)).unwrap();
            if !nodes.is_empty() && r.chance(4) {
                info.node_name = Some(nodes[r.below(nodes.len() as u64) as usize].name.clone());
            }
            info
        })
        .collect();
    (
        SchedulingInput {
            nodes,
            pods,
            daemon_sets: vec![],
            pools,
            dra: None,
        },
        app_rules,
    )
}

/// Where a pod is at the end: (app, node, zone, placed by the plan).
struct Placed<'a> {
    pod: String,
    app: &'a str,
    node: String,
    zone: String,
    planned: bool,
}

impl Placed<'_> {
    fn domain(&self, key: &str) -> &str {
        if key == ZONE { &self.zone } else { &self.node }
    }
}

fn check(
    input: &SchedulingInput,
    rules: &BTreeMap<&'static str, Vec<Rule>>,
    plan: &Plan,
) -> Result<(), String> {
    let mut zone_of: BTreeMap<&str, &str> = BTreeMap::new();
    for n in &input.nodes {
        zone_of.insert(&n.name, n.labels.get(ZONE).map_or("", String::as_str));
    }
    for c in &plan.node_claims {
        zone_of.insert(&c.name, &c.zone);
    }
    let app_of: BTreeMap<String, &str> = input
        .pods
        .iter()
        .map(|p| (p.key(), p.labels.get("app").map_or("", String::as_str)))
        .collect();
    let mut placed: Vec<Placed> = Vec::new();
    for p in &input.pods {
        if let Some(n) = &p.node_name {
            placed.push(Placed {
                pod: p.key(),
                app: app_of[&p.key()],
                node: n.clone(),
                zone: zone_of.get(n.as_str()).copied().unwrap_or("").to_string(),
                planned: false,
            });
        }
    }
    for b in &plan.bindings {
        let zone = zone_of
            .get(b.node.as_str())
            .ok_or_else(|| format!("{} bound to unknown node {}", b.pod, b.node))?;
        placed.push(Placed {
            pod: b.pod.clone(),
            app: app_of[&b.pod],
            node: b.node.clone(),
            zone: zone.to_string(),
            planned: true,
        });
    }
    let count = |key: &str, app: &str, domain: &str| {
        placed
            .iter()
            .filter(|x| x.app == app && x.domain(key) == domain)
            .count()
    };
    for p in placed.iter().filter(|p| p.planned) {
        for rule in &rules[p.app] {
            match *rule {
                Rule::Spread { key, max_skew } => {
                    let domains: Vec<&str> = if key == ZONE {
                        zone_of.values().copied().collect()
                    } else {
                        input.nodes.iter().map(|n| n.name.as_str()).collect()
                    };
                    let Some(min) = domains.iter().map(|d| count(key, p.app, d)).min() else {
                        continue;
                    };
                    let here = count(key, p.app, p.domain(key));
                    if here > min + max_skew as usize {
                        return Err(format!(
                            "{} in {key}={}: {here} pods of {}, the emptiest domain has {min}, \
                             maxSkew {max_skew}",
                            p.pod,
                            p.domain(key),
                            p.app
                        ));
                    }
                }
                Rule::With { key, app } => {
                    let with_it = placed
                        .iter()
                        .any(|x| x.pod != p.pod && x.app == app && x.domain(key) == p.domain(key));
                    let others = placed.iter().any(|x| x.pod != p.pod && x.app == app);
                    if !with_it && (p.app != app || others) {
                        return Err(format!(
                            "{} in {key}={} shares it with no pod of {app}",
                            p.pod,
                            p.domain(key)
                        ));
                    }
                }
                Rule::Anti { .. } => {}
            }
        }
    }
    // Anti-affinity, both ways, for every pair where one pod was placed by the plan.
    for a in &placed {
        for rule in &rules[a.app] {
            let Rule::Anti { key, app } = *rule else {
                continue;
            };
            for b in &placed {
                if b.pod != a.pod
                    && (a.planned || b.planned)
                    && b.app == app
                    && b.domain(key) == a.domain(key)
                {
                    return Err(format!(
                        "{} and {} share {key}={} although {} repels {app}",
                        a.pod,
                        b.pod,
                        a.domain(key),
                        a.app
                    ));
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn every_binding_keeps_spread_and_pod_affinity(seed in any::<u64>()) {
        let (input, rules) = cluster(seed);
        let plan = schedule(&input);
        if let Err(broken) = check(&input, &rules, &plan) {
            prop_assert!(
                false,
                "seed {seed}: {broken}\nrules {rules:?}\n{}",
                serde_json::to_string_pretty(&plan).unwrap()
            );
        }
    }
}

/// The generator reaches what the property is about (spread, affinity and anti-affinity pods
/// placed on existing and new nodes, next to bound pods), and the checker rejects a plan that
/// moves a pod where a rule forbids it.
#[test]
fn the_random_clusters_exercise_topology_and_the_checker_catches_breaks() {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut caught = 0;
    for seed in 0..400u64 {
        let (input, rules) = cluster(seed);
        let plan = schedule(&input);
        let existing: BTreeSet<&str> = input.nodes.iter().map(|n| n.name.as_str()).collect();
        let has_bound = input.pods.iter().any(|p| p.node_name.is_some());
        for b in &plan.bindings {
            let app = b
                .pod
                .trim_start_matches("default/")
                .split('-')
                .next()
                .unwrap_or("");
            for rule in &rules[app] {
                let kind = match rule {
                    Rule::Spread { key, .. } => format!("spread {key}"),
                    Rule::Anti { key, .. } => format!("anti-affinity {key}"),
                    Rule::With { key, .. } => format!("affinity {key}"),
                };
                let on = if existing.contains(b.node.as_str()) {
                    "existing"
                } else {
                    "new"
                };
                *seen.entry(format!("{kind} on {on} node")).or_default() += 1;
                if has_bound {
                    *seen.entry(format!("{kind} with bound pods")).or_default() += 1;
                }
            }
        }
        // Break the plan: put every planned pod on one node. Where that breaks a rule the
        // checker must say so; count the plans it flags.
        if plan.bindings.len() >= 2 {
            let mut broken = plan.clone();
            let target = broken.bindings[0].node.clone();
            for b in &mut broken.bindings {
                b.node = target.clone();
            }
            if check(&input, &rules, &broken).is_err() {
                caught += 1;
            }
        }
    }
    eprintln!("{seen:#?}\n{caught} broken plans caught");
    for kind in ["spread", "anti-affinity", "affinity"] {
        for key in [ZONE, HOSTNAME] {
            for on in ["existing", "new"] {
                let what = format!("{kind} {key} on {on} node");
                assert!(
                    seen.get(&what).copied().unwrap_or(0) >= 3,
                    "{what}: {seen:#?}"
                );
            }
        }
    }
    assert!(caught >= 20, "{caught}");
}
