//! Inputs for the packing benchmark: provisioning steps of the size the exact pass is meant
//! for, on GPU types shaped like g4dn, g5, g6 and g6e (allocatable CPU and memory after
//! kubelet reservations, each GPU time-sliced four ways, us-east-1 on-demand prices) and on the
//! scheduling benchmark's 400 synthetic CPU types.

use joiner_model::{Price, Quantity, Source};
use k8s_openapi::api::core::v1::Pod;

use super::one_pool;
use crate::requirements::Labels;
use crate::scheduling::{LaunchOffering, LaunchOption, PodInfo, SchedulingInput};

/// A provisioning step to plan.
pub struct PackingCase {
    pub label: &'static str,
    pub input: SchedulingInput,
}

/// (type, vCPUs, GiB, GPUs, on-demand USD/h).
const GPU_TYPES: [(&str, i64, i64, i64, f64); 14] = [
    ("g4dn.xlarge", 4, 16, 1, 0.526),
    ("g4dn.2xlarge", 8, 32, 1, 0.752),
    ("g4dn.4xlarge", 16, 64, 1, 1.204),
    ("g4dn.12xlarge", 48, 192, 4, 3.912),
    ("g5.xlarge", 4, 16, 1, 1.006),
    ("g5.2xlarge", 8, 32, 1, 1.212),
    ("g5.4xlarge", 16, 64, 1, 1.624),
    ("g5.12xlarge", 48, 192, 4, 5.672),
    ("g6.xlarge", 4, 16, 1, 0.8048),
    ("g6.2xlarge", 8, 32, 1, 0.9776),
    ("g6.4xlarge", 16, 64, 1, 1.3232),
    ("g6.12xlarge", 48, 192, 4, 4.6016),
    ("g6e.xlarge", 4, 32, 1, 1.861),
    ("g6e.12xlarge", 48, 384, 4, 10.493),
];

/// Time-slicing replicas per GPU.
const REPLICAS: i64 = 4;

fn gpu_option(&(name, cpu, gib, gpus, price): &(&str, i64, i64, i64, f64)) -> LaunchOption {
    // Roughly what kubelet reserves: 80m of CPU and a tenth of memory.
    let allocatable: joiner_model::ResourceList = [
        ("cpu".to_string(), Quantity::from_milli(cpu * 1000 - 80)),
        (
            "memory".to_string(),
            Quantity::from_bytes_binary(gib * (1 << 30) * 9 / 10),
        ),
        ("pods".to_string(), Quantity::from_units(58)),
        (
            "nvidia.com/gpu".to_string(),
            Quantity::from_units(gpus * REPLICAS),
        ),
    ]
    .into_iter()
    .collect();
    LaunchOption {
        instance_type: name.to_string(),
        labels: Labels::from([
            ("kubernetes.io/arch".into(), "amd64".into()),
            ("kubernetes.io/os".into(), "linux".into()),
        ]),
        capacity: allocatable.clone(),
        allocatable,
        offerings: vec![LaunchOffering {
            zone: "us-east-1a".into(),
            capacity_type: "on-demand".into(),
            price: Price::from_usd(price).unwrap_or(Price::MAX),
            price_basis: Default::default(),
            reservation: None,
            zone_id: None,
            partition: None,
        }],
        at_most_one_per_pod: vec![],
        devices: None,
    }
}

/// `count` pods named `<name>-<i>` requesting `cpu`, `memory` and `gpu`.
fn workload(name: &str, count: usize, cpu: &str, memory: &str, gpu: &str) -> Vec<PodInfo> {
    (0..count)
        .filter_map(|i| {
            let mut requests = serde_json::json!({"cpu": cpu, "memory": memory});
            if gpu != "0" {
                requests["nvidia.com/gpu"] = gpu.into();
            }
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("{name}-{i}"), "namespace": "default", "labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "resources": {"requests": requests}}]}
            }))
            .ok()?;
            PodInfo::compile(&pod, &Source::new("bench", 0)).ok()
        })
        .collect()
}

/// The benchmark's steps, smallest first.
pub fn packing_cases() -> Vec<PackingCase> {
    let gpu = || GPU_TYPES.iter().map(gpu_option).collect::<Vec<_>>();
    let mut mixed = workload("notebook", 24, "1", "2Gi", "1");
    mixed.extend(workload("inference", 24, "3", "10Gi", "1"));
    mixed.extend(workload("batch", 16, "6", "20Gi", "1"));
    let mut pair = workload("notebook", 10, "1", "2Gi", "1");
    pair.extend(workload("inference", 6, "3", "10Gi", "1"));
    let plain: Vec<PodInfo> = super::scheduling_input(384)
        .pods
        .into_iter()
        .filter(|p| p.labels.get("kind").map(String::as_str) == Some("plain"))
        .collect();
    vec![
        PackingCase {
            label: "16 GPU pods of 2 sizes, 14 GPU types",
            input: one_pool(pair, gpu()),
        },
        PackingCase {
            label: "64 GPU pods of 3 sizes, 14 GPU types",
            input: one_pool(mixed, gpu()),
        },
        PackingCase {
            label: "64 CPU pods of many sizes, 400 types",
            input: one_pool(plain, super::instance_types()),
        },
    ]
}
