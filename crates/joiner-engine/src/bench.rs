//! Synthetic inputs for `joiner bench`, shaped like Karpenter's scheduling benchmark so the
//! figures can be compared: 400 instance types (type i has i+1 vCPUs, 2(i+1) GiB, 10(i+1)
//! pods; spot in two zones, on-demand in three) and pods split evenly between plain pods, zone
//! and hostname topology spread, hostname and zone pod affinity, and hostname anti-affinity.

use joiner_model::wellknown::labels;
use joiner_model::{Price, Quantity, Source};
use k8s_openapi::api::core::v1::Pod;

use crate::requirements::Labels;
use crate::scheduling::{LaunchOffering, LaunchOption, PodInfo, PoolInput, SchedulingInput};

mod packing;
pub use packing::{PackingCase, packing_cases};

const CPU: [&str; 5] = ["100m", "250m", "500m", "1000m", "1500m"];
const MEMORY: [&str; 6] = ["100Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi"];
const ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];
/// Pods with pod affinity form groups of about this many pods, each of which must share a node
/// (or zone); one group of all such pods would not fit on any node.
const AFFINITY_GROUP_SIZE: usize = 16;

/// A small deterministic generator (xorshift), so every run plans the same pods.
struct Rng(u64);

impl Rng {
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        from[(self.0 % from.len() as u64) as usize]
    }
}

fn instance_types() -> Vec<LaunchOption> {
    (0..400)
        .map(|i| {
            let n = i as i64 + 1;
            let allocatable: joiner_model::ResourceList = [
                ("cpu".to_string(), Quantity::from_units(n)),
                (
                    "memory".to_string(),
                    Quantity::from_bytes_binary(2 * n * (1 << 30)),
                ),
                ("pods".to_string(), Quantity::from_units(10 * n)),
            ]
            .into_iter()
            .collect();
            // Prices grow with size, with a little per-family variation so ties are rare.
            let on_demand = 0.05 * n as f64 * (1.0 + (i % 7) as f64 * 0.01);
            let mut offerings: Vec<LaunchOffering> = ZONES
                .iter()
                .map(|z| LaunchOffering {
                    zone: z.to_string(),
                    capacity_type: "on-demand".into(),
                    price: Price::from_usd(on_demand).unwrap_or(Price::MAX),
                    price_basis: Default::default(),
                    reservation: None,
                    zone_id: None,
                    partition: None,
                })
                .collect();
            offerings.extend(ZONES[..2].iter().map(|z| LaunchOffering {
                zone: z.to_string(),
                capacity_type: "spot".into(),
                price: Price::from_usd(on_demand * 0.4).unwrap_or(Price::MAX),
                price_basis: Default::default(),
                reservation: None,
                zone_id: None,
                partition: None,
            }));
            LaunchOption {
                instance_type: format!("fake-it-{i}"),
                labels: Labels::from([
                    ("kubernetes.io/arch".into(), "amd64".into()),
                    ("kubernetes.io/os".into(), "linux".into()),
                ]),
                capacity: allocatable.clone(),
                allocatable,
                offerings,
                at_most_one_per_pod: vec![],
                devices: None,
            }
        })
        .collect()
}

fn pod_json(i: usize, pods: usize, rng: &mut Rng) -> serde_json::Value {
    let cpu = rng.pick(&CPU);
    let memory = rng.pick(&MEMORY);
    let kind = i % 6;
    let groups = (pods / 6 / AFFINITY_GROUP_SIZE).max(1);
    let group = format!("g{}", (i / 6) % groups);
    let (labels, extra) = match kind {
        0 => (serde_json::json!({"kind": "plain"}), serde_json::json!({})),
        1 => (
            serde_json::json!({"kind": "zone-spread"}),
            serde_json::json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"kind": "zone-spread"}}}]}),
        ),
        2 => (
            serde_json::json!({"kind": "host-spread"}),
            serde_json::json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"kind": "host-spread"}}}]}),
        ),
        3 => (
            serde_json::json!({"kind": "host-affinity", "group": group}),
            serde_json::json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"kind": "host-affinity", "group": group}}}]}}}),
        ),
        4 => (
            serde_json::json!({"kind": "zone-affinity", "group": group}),
            serde_json::json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"kind": "zone-affinity", "group": group}}}]}}}),
        ),
        _ => (
            serde_json::json!({"kind": "anti"}),
            serde_json::json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"kind": "anti"}}}]}}}),
        ),
    };
    let mut spec = serde_json::json!({"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::json!({"metadata": {"name": format!("pod-{i}"), "namespace": "default", "labels": labels}, "spec": spec})
}

/// The benchmark cluster with `pods` pending pods: no existing nodes, one NodePool allowing
/// spot and on-demand.
pub fn scheduling_input(pods: usize) -> SchedulingInput {
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let count = pods;
    let pods: Vec<PodInfo> = (0..count)
        .filter_map(|i| {
            let pod: Pod = serde_json::from_value(pod_json(i, count, &mut rng)).ok()?;
            PodInfo::compile(&pod, &Source::new("bench", 0)).ok()
        })
        .collect();
    one_pool(pods, instance_types())
}

/// Distinct shapes: `pods` pending pods on the benchmark's types, each with a label of its own
/// and a required anti-affinity to that label (every workload repels its own kind), so no two
/// pods share a topology group.
pub fn distinct_anti_affinity_input(pods: usize) -> SchedulingInput {
    let mut rng = Rng(0x5EED_1234_ABCD_0002);
    let pods: Vec<PodInfo> = (0..pods)
        .filter_map(|i| {
            let app = format!("app-{i}");
            let json = serde_json::json!({"metadata": {"name": format!("pod-{i}"), "namespace": "default", "labels": {"app": app}},
                "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": rng.pick(&CPU), "memory": rng.pick(&MEMORY)}}}],
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": app}}}]}}}});
            let pod: Pod = serde_json::from_value(json).ok()?;
            PodInfo::compile(&pod, &Source::new("bench", 0)).ok()
        })
        .collect();
    one_pool(pods, instance_types())
}

/// No existing nodes, and one NodePool named `default` allowing spot and on-demand `options`.
fn one_pool(pods: Vec<PodInfo>, options: Vec<LaunchOption>) -> SchedulingInput {
    let mut requirements = crate::requirements::Requirements::new();
    if let Ok(r) = crate::requirements::Requirement::new("In", &["spot".into(), "on-demand".into()])
    {
        requirements.add(labels::CAPACITY_TYPE, r);
    }
    SchedulingInput {
        nodes: vec![],
        pods,
        daemon_sets: vec![],
        pools: vec![PoolInput {
            name: "default".into(),
            weight: 0,
            labels: Labels::new(),
            taints: vec![],
            requirements,
            limits: Default::default(),
            options,
            consolidation: Default::default(),
            min_values_policy: Default::default(),
        }],
        dra: None,
    }
}

/// Zones of the benchmark's instance types when written as files: the default region's, so
/// the built-in settings take them as they are.
const FILE_ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

/// The scheduling benchmark as manifests, for measuring the whole `joiner plan` process on
/// files: the same pods as [`scheduling_input`] (with `apiVersion` and `kind`), its 400
/// instance types as `joiner.dev/v1alpha1` InstanceTypes (offered in the default region's
/// zones), and a NodePool allowing exactly those types, spot and on-demand.
pub fn scheduling_documents(pods: usize) -> Vec<serde_json::Value> {
    let types = instance_types();
    let names: Vec<&str> = types.iter().map(|t| t.instance_type.as_str()).collect();
    let mut docs = vec![
        serde_json::json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
            "spec": {"role": "KarpenterNodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}]}}),
        serde_json::json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": labels::INSTANCE_TYPE, "operator": "In", "values": names},
                    {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]}]}}}}),
    ];
    docs.extend(types.iter().map(instance_type_document));
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    docs.extend((0..pods).map(|i| {
        let mut pod = pod_json(i, pods, &mut rng);
        pod["apiVersion"] = "v1".into();
        pod["kind"] = "Pod".into();
        pod
    }));
    docs
}

/// One synthetic type as an InstanceType object: its allocatable as capacity (no overhead
/// declared) and its offerings moved to [`FILE_ZONES`].
fn instance_type_document(option: &LaunchOption) -> serde_json::Value {
    let capacity: serde_json::Map<String, serde_json::Value> = option
        .allocatable
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string().into()))
        .collect();
    let offerings: Vec<serde_json::Value> = option
        .offerings
        .iter()
        .map(|o| {
            let zone = ZONES
                .iter()
                .position(|z| *z == o.zone)
                .map_or(FILE_ZONES[0], |i| FILE_ZONES[i]);
            serde_json::json!({"zone": zone, "capacityType": o.capacity_type, "price": o.price})
        })
        .collect();
    serde_json::json!({"apiVersion": joiner_model::api::instancetype::API_VERSION, "kind": "InstanceType",
        "metadata": {"name": option.instance_type},
        "spec": {"capacity": capacity, "offerings": offerings}})
}

/// The DRA benchmark cluster: `nodes` existing nodes with `gpus` H100s each in node-local
/// ResourceSlices, and `pods` pending pods with one claim template each (one GPU, a CEL
/// selector on product name and memory). With `launch`, a NodePool may also launch any GPU
/// instance type of the built-in catalog, whose devices come from the catalog's templates.
/// With `distinct`, every pod has a template of its own whose selector asks for a different
/// least memory (40Gi plus the pod's number in MiB): no two pods share a claim shape.
/// Returns the manifests and the settings (DRA on).
pub fn dra_manifests(
    nodes: usize,
    gpus: usize,
    pods: usize,
    launch: bool,
    distinct: bool,
) -> (joiner_model::Manifests, joiner_model::settings::Settings) {
    use joiner_model::Manifests;
    let origin = Source::new("bench", 0);
    let mut m = Manifests::default();
    let mut add = |v: serde_json::Value| -> Option<()> {
        let kind = v.get("kind")?.as_str()?.to_string();
        let _ = m
            .add_document(origin.clone(), v)
            .map_err(|e| panic_free_warning(&kind, &e.to_string()));
        Some(())
    };
    for n in 0..nodes {
        let name = format!("gpu-node-{n}");
        add(
            serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "192", "memory": "2000Gi", "pods": "110"}}}),
        );
        let devices: Vec<serde_json::Value> = (0..gpus)
            .map(|g| serde_json::json!({"name": format!("gpu-{g}"), "attributes": {"type": {"string": "gpu"}, "productName": {"string": "NVIDIA H100 80GB HBM3"}},
                "capacity": {"memory": {"value": "81559Mi"}}}))
            .collect();
        add(
            serde_json::json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": format!("{name}-gpu")},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}),
        );
    }
    let template = |name: &str, memory: &str| {
        serde_json::json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression":
            format!("device.attributes[\"gpu.nvidia.com\"].productName.startsWith(\"NVIDIA H100\") && device.capacity[\"gpu.nvidia.com\"].memory.compareTo(quantity(\"{memory}\")) >= 0")}}]}}]}}}})
    };
    if !distinct {
        add(template("h100", "40Gi"));
    }
    for p in 0..pods {
        let claim_template = if distinct {
            let name = format!("h100-{p}");
            add(template(&name, &format!("{}Mi", 40 * 1024 + p)));
            name
        } else {
            "h100".to_string()
        };
        add(
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("infer-{p}"), "namespace": "default"},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": claim_template}],
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}]}}),
        );
    }
    if launch {
        add(
            serde_json::json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                "requirements": [{"key": "karpenter.k8s.aws/instance-gpu-manufacturer", "operator": "In", "values": ["nvidia"]}]}}}}),
        );
        add(
            serde_json::json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "gpu"},
            "spec": {"role": "KarpenterNodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}]}}),
        );
    }
    m.finish();
    let values = serde_json::json!({"settings": {"enableDRA": true}});
    let settings = joiner_model::settings::Settings::from_values(&values)
        .map(|(s, _)| s)
        .unwrap_or_default();
    (m, settings)
}

/// Benchmark inputs are generated, so a rejected one is a bug in this file; it is reported
/// and skipped rather than aborting the run.
fn panic_free_warning(kind: &str, error: &str) {
    tracing::error!(kind, error, "benchmark object rejected");
}

/// The consolidation benchmark cluster: `nodes` existing nodes of two NodePools, four in five
/// m5.2xlarge CPU nodes running 0 to 6 one-CPU pods, one in five g6.xlarge GPU nodes running a
/// GPU pod or, on every third, only CPU pods (a GPU node whose GPU work is gone). Settings as
/// the defaults.
pub fn consolidation_manifests(
    nodes: usize,
) -> (joiner_model::Manifests, joiner_model::settings::Settings) {
    let origin = Source::new("bench", 0);
    let mut m = joiner_model::Manifests::default();
    let mut add = |v: serde_json::Value| {
        let kind = v
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or_default()
            .to_string();
        if let Err(e) = m.add_document(origin.clone(), v) {
            panic_free_warning(&kind, &e.to_string());
        }
    };
    for (pool, family) in [("cpu", "m5"), ("gpu", "g6")] {
        add(
            serde_json::json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": pool},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": [family]}]}},
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized"}}}),
        );
    }
    add(
        serde_json::json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
        "spec": {"role": "KarpenterNodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}]}}),
    );
    let mut pod = 0;
    for n in 0..nodes {
        let name = format!("node-{n}");
        let gpu = n % 5 == 4;
        let (pool, it, cpu, zone) = if gpu {
            ("gpu", "g6.xlarge", "3920m", "us-east-1b")
        } else {
            ("cpu", "m5.2xlarge", "7910m", "us-east-1a")
        };
        let mut allocatable = serde_json::json!({"cpu": cpu, "memory": "28Gi", "pods": "58"});
        if gpu {
            allocatable["nvidia.com/gpu"] = serde_json::json!("1");
        }
        add(
            serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            "karpenter.sh/nodepool": pool, "karpenter.sh/initialized": "true", "node.kubernetes.io/instance-type": it,
            "karpenter.sh/capacity-type": "on-demand", "topology.kubernetes.io/zone": zone, "kubernetes.io/hostname": name,
            "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}},
            "status": {"allocatable": allocatable}}),
        );
        let (count, gpu_pod) = if gpu {
            if n % 3 == 0 { (2, false) } else { (1, true) }
        } else {
            (n % 7, false)
        };
        for _ in 0..count {
            let mut requests = serde_json::json!({"cpu": "1", "memory": "1Gi"});
            if gpu_pod {
                requests["nvidia.com/gpu"] = serde_json::json!("1");
            }
            add(
                serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("pod-{pod}"), "namespace": "default"},
                "spec": {"nodeName": name, "containers": [{"name": "c", "resources": {"requests": requests}}]}}),
            );
            pod += 1;
        }
    }
    m.finish();
    (m, joiner_model::settings::Settings::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn benchmark_input_has_the_documented_shape_and_plans_every_pod() {
        let input = scheduling_input(600);
        assert_eq!(input.pods.len(), 600);
        assert_eq!(input.pools[0].options.len(), 400);
        let plan = crate::scheduling::schedule(&input);
        assert!(
            plan.unschedulable.is_empty(),
            "{:?}",
            plan.unschedulable.first()
        );
        // Every anti-affinity pod has a node of its own.
        let anti = input
            .pods
            .iter()
            .filter(|p| p.labels.get("kind").map(String::as_str) == Some("anti"))
            .count();
        assert!(plan.node_claims.len() >= anti);
    }

    #[test]
    fn the_file_shape_reads_back_as_the_benchmark_cluster_and_plans_every_pod() {
        let mut m = joiner_model::Manifests::default();
        for doc in scheduling_documents(120) {
            m.add_document(Source::new("bench.yaml", 0), doc).unwrap();
        }
        m.finish();
        assert_eq!((m.pods.len(), m.instance_types.len()), (120, 400));
        assert!(m.warnings.is_empty(), "{:?}", m.warnings);
        let snapshot =
            crate::snapshot::ClusterSnapshot::build(&m, &Default::default(), &Default::default())
                .unwrap();
        let plan = snapshot.plan();
        assert!(
            plan.unschedulable.is_empty(),
            "{:?}",
            plan.unschedulable.first()
        );
        assert!(
            plan.node_claims
                .iter()
                .all(|c| c.instance_type.starts_with("fake-it-")),
            "only the benchmark's types are launched"
        );
    }

    #[test]
    fn distinct_anti_affinity_pods_each_make_their_own_group_and_all_plan() {
        let input = distinct_anti_affinity_input(50);
        assert_eq!(input.pods.len(), 50);
        let plan = crate::scheduling::schedule(&input);
        assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
        // Nothing keeps different workloads apart: they share nodes.
        assert!(plan.node_claims.len() < 50, "{}", plan.node_claims.len());
    }

    #[test]
    fn dra_benchmark_input_plans_on_existing_nodes_then_new_ones() {
        // The same plan whether the pods share one claim template or each has its own.
        for distinct in [false, true] {
            let (m, settings) = dra_manifests(2, 2, 5, true, distinct);
            assert_eq!(
                m.resource_claim_templates.len(),
                if distinct { 5 } else { 1 }
            );
            let snapshot =
                crate::snapshot::ClusterSnapshot::build(&m, &settings, &Default::default())
                    .unwrap();
            let plan = snapshot.plan();
            assert!(
                plan.unschedulable.is_empty(),
                "{:?}",
                plan.unschedulable.first()
            );
            assert_eq!(
                plan.bindings
                    .iter()
                    .filter(|b| b.node.starts_with("gpu-node-"))
                    .count(),
                4
            );
            assert_eq!(plan.claims.len(), 5);
        }
    }

    #[test]
    fn consolidation_benchmark_input_has_moves_to_make() {
        let (m, settings) = consolidation_manifests(20);
        let snapshot =
            crate::snapshot::ClusterSnapshot::build(&m, &settings, &Default::default()).unwrap();
        assert_eq!(snapshot.input().nodes.len(), 20);
        assert!(snapshot.input().nodes.iter().all(|n| n.price.is_some()));
        let decisions = crate::disruption::consolidate(snapshot.input(), &Default::default());
        assert!(
            decisions
                .iter()
                .any(|d| d.reason == joiner_model::wellknown::DisruptionReason::Empty)
        );
        assert!(crate::disruption::evaluate_every_candidate(snapshot.input()) > 0);
    }
}
