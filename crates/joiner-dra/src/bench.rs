//! The allocation benchmark behind `joiner bench`: 500 nodes with 8 GPUs each in node-local
//! slices, 5,000 pending pods with one single-GPU claim each (a CEL selector on productName
//! and memory); each pod goes to the first node where its claim allocates.
//!
//! kube-scheduler's DRA benchmark of that size runs at roughly 250–380 pods/s on 6 CPUs;
//! the target here is over 20,000 pods/s on one core.

use crate::builders::{self, AttributeArg};
use crate::{AllocationState, Allocator, Features, Inventory, NodeInfo};
use std::time::{Duration, Instant};

/// The selector every benchmark pod carries.
pub const BENCH_SELECTOR: &str = "device.attributes[\"gpu.nvidia.com\"].productName == \"NVIDIA H100 80GB HBM3\" && device.capacity[\"gpu.nvidia.com\"].memory.compareTo(quantity(\"40Gi\")) >= 0";

/// What one run measured.
#[derive(Debug, Clone)]
pub struct BenchReport {
    pub nodes: usize,
    pub gpus_per_node: usize,
    pub pods: usize,
    /// Pods that found a node.
    pub placed: usize,
    /// Pods that found none, each with its reason computed.
    pub unschedulable: usize,
    /// `allocate` calls made (one per node tried).
    pub attempts: usize,
    /// Time spent placing pods (preparing claims, allocating, committing); building the
    /// inventory is excluded.
    pub elapsed: Duration,
    pub pods_per_second: f64,
}

impl std::fmt::Display for BenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} pods on {} nodes x {} GPUs: {} placed, {} unschedulable, {} allocate calls, {:.1} ms, {:.0} pods/s",
            self.pods,
            self.nodes,
            self.gpus_per_node,
            self.placed,
            self.unschedulable,
            self.attempts,
            self.elapsed.as_secs_f64() * 1e3,
            self.pods_per_second
        )
    }
}

/// Runs the benchmark with the given sizes (500, 8, 5000 for the standard figure).
pub fn run(nodes: usize, gpus_per_node: usize, pods: usize) -> BenchReport {
    let driver = "gpu.nvidia.com";
    let slices: Vec<_> = (0..nodes)
        .map(|n| {
            let node = format!("node-{n:04}");
            let devices = (0..gpus_per_node)
                .map(|g| {
                    let d = builders::device(&format!("gpu-{g}"));
                    let d = builders::with_attribute(
                        d,
                        "productName",
                        AttributeArg::Str("NVIDIA H100 80GB HBM3".into()),
                    );
                    let d = builders::with_attribute(d, "index", AttributeArg::Int(g as i64));
                    let d = builders::with_attribute(
                        d,
                        "driverVersion",
                        AttributeArg::Version("550.54.15".into()),
                    );
                    builders::with_capacity(d, "memory", "80Gi")
                })
                .collect();
            builders::slice(&format!("{node}-gpus"), driver, &node, Some(&node), devices)
        })
        .collect();
    let inventory = Inventory::from_slices(&slices);
    let views: Vec<_> = (0..nodes)
        .map(|n| inventory.node_view(&NodeInfo::new(format!("node-{n:04}"))))
        .collect();
    let allocator = Allocator::new(
        Features::default(),
        [builders::class(
            driver,
            &["device.driver == \"gpu.nvidia.com\""],
        )],
    );
    let claims: Vec<_> = (0..pods)
        .map(|p| {
            builders::claim(
                "bench",
                &format!("pod-{p}-gpu"),
                vec![builders::exact("gpu", driver, 1, &[BENCH_SELECTOR])],
            )
        })
        .collect();
    let mut state = AllocationState::new();
    let mut placed = 0;
    let mut attempts = 0;
    let start = Instant::now();
    let mut session = allocator.session(&inventory);
    let mut unschedulable = 0;
    for claim in &claims {
        let prepared = allocator.prepare([claim]);
        let mut found = false;
        for view in &views {
            attempts += 1;
            if let Some(allocations) = session.try_allocate(view, &state, &prepared) {
                for a in &allocations {
                    state.commit(&inventory, &a.allocation);
                }
                placed += 1;
                found = true;
                break;
            }
        }
        // What the planner does for a pod no node serves: ask once for the reason.
        if !found
            && let Some(view) = views.last()
            && session.allocate(view, &state, &prepared).is_err()
        {
            unschedulable += 1;
        }
    }
    let elapsed = start.elapsed();
    BenchReport {
        nodes,
        gpus_per_node,
        pods,
        placed,
        unschedulable,
        attempts,
        elapsed,
        pods_per_second: pods as f64 / elapsed.as_secs_f64().max(1e-9),
    }
}

#[cfg(test)]
mod tests {
    /// `cargo test -p joiner-dra --release -- --ignored bench --nocapture`
    #[test]
    #[ignore]
    fn bench_500_nodes_5000_pods() {
        let report = super::run(500, 8, 5000);
        println!("{report}");
        assert_eq!(report.placed, 4000);
        assert_eq!(report.unschedulable, 1000);
    }

    #[test]
    fn bench_small_places_every_pod_that_fits() {
        let report = super::run(5, 2, 12);
        assert_eq!(report.placed, 10);
        assert_eq!(report.unschedulable, 2);
    }
}
