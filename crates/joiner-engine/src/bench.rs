//! Synthetic inputs for `joiner bench`, shaped like Karpenter's scheduling benchmark so the
//! figures can be compared: 400 instance types (type i has i+1 vCPUs, 2(i+1) GiB, 10(i+1)
//! pods; spot in two zones, on-demand in three) and pods split evenly between plain pods, zone
//! and hostname topology spread, hostname and zone pod affinity, and hostname anti-affinity.

use joiner_model::{Price, Quantity, Source};
use k8s_openapi::api::core::v1::Pod;

use crate::requirements::Labels;
use crate::scheduling::{LaunchOffering, LaunchOption, PodInfo, PoolInput, SchedulingInput};

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
                })
                .collect();
            offerings.extend(ZONES[..2].iter().map(|z| LaunchOffering {
                zone: z.to_string(),
                capacity_type: "spot".into(),
                price: Price::from_usd(on_demand * 0.4).unwrap_or(Price::MAX),
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
    let mut requirements = crate::requirements::Requirements::new();
    if let Ok(r) = crate::requirements::Requirement::new("In", &["spot".into(), "on-demand".into()])
    {
        requirements.add(crate::scheduling::planner::CAPACITY_TYPE_KEY, r);
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
            options: instance_types(),
        }],
        dra: None,
    }
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
}
