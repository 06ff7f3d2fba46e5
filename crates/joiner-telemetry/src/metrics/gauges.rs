//! The state gauges (`karpenter_nodes_*`, `karpenter_nodepools_usage`/`limit`,
//! `karpenter_pods_state`, `karpenter_cluster_*`), set wholesale from a [`ClusterState`] after
//! each step: an object that is gone loses its series.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::state::{ClusterState, resource_type};
use super::{Gauges, Labels};

/// The state gauges, set wholesale after each step.
pub(super) struct StateGauges {
    nodes_allocatable: Gauges,
    nodes_pod_requests: Gauges,
    nodes_pod_limits: Gauges,
    nodes_daemon_requests: Gauges,
    nodes_daemon_limits: Gauges,
    nodes_overhead: Gauges,
    nodes_lifetime: Gauges,
    pools_usage: Gauges,
    pools_limit: Gauges,
    pods_state: Gauges,
    utilization: Gauges,
    node_count: Gauge,
    synced: Gauge,
    unsynced_time: Gauge<f64, AtomicU64>,
    /// Since when (epoch seconds) the view has been out of sync, while it is.
    unsynced_since: std::sync::Mutex<Option<f64>>,
}

impl StateGauges {
    pub(super) fn register(registry: &mut Registry) -> StateGauges {
        let mut gauges = |name: &str, help: &str| {
            let family = Gauges::default();
            registry.register(name, help, family.clone());
            family
        };
        let state = StateGauges {
            nodes_allocatable: gauges(
                "karpenter_nodes_allocatable",
                "Node allocatable, by node and resource type",
            ),
            nodes_pod_requests: gauges(
                "karpenter_nodes_total_pod_requests",
                "Requests of the node's pods other than DaemonSet pods, by node and resource type",
            ),
            nodes_pod_limits: gauges(
                "karpenter_nodes_total_pod_limits",
                "Limits of the node's pods other than DaemonSet pods, by node and resource type",
            ),
            nodes_daemon_requests: gauges(
                "karpenter_nodes_total_daemon_requests",
                "Requests of the node's DaemonSet pods, by node and resource type",
            ),
            nodes_daemon_limits: gauges(
                "karpenter_nodes_total_daemon_limits",
                "Limits of the node's DaemonSet pods, by node and resource type",
            ),
            nodes_overhead: gauges(
                "karpenter_nodes_system_overhead",
                "Node capacity less allocatable, by node and resource type",
            ),
            nodes_lifetime: gauges(
                "karpenter_nodes_current_lifetime_seconds",
                "Age of each node, in seconds",
            ),
            pools_usage: gauges(
                "karpenter_nodepools_usage",
                "Resources of the NodePool's nodes (its status.resources), by resource type",
            ),
            pools_limit: gauges(
                "karpenter_nodepools_limit",
                "The NodePool's limits, by resource type",
            ),
            pods_state: gauges(
                "karpenter_pods_state",
                "One series of value 1 per pod, saying where it runs and how it is doing",
            ),
            utilization: gauges(
                "karpenter_cluster_utilization_percent",
                "Pod requests on Joiner's nodes as a percentage of their allocatable, by resource type",
            ),
            node_count: Gauge::default(),
            synced: Gauge::default(),
            unsynced_time: Gauge::default(),
            unsynced_since: std::sync::Mutex::new(None),
        };
        registry.register(
            "karpenter_cluster_state_unsynced_time_seconds",
            "How long the controller's view of the cluster has been out of sync, in seconds (0 while in sync)",
            state.unsynced_time.clone(),
        );
        registry.register(
            "karpenter_cluster_state_node_count",
            "Nodes in the controller's view of the cluster",
            state.node_count.clone(),
        );
        registry.register(
            "karpenter_cluster_state_synced",
            "1 when every cache the controller reads is in sync with the API server, else 0",
            state.synced.clone(),
        );
        state
    }

    pub(super) fn set(&self, state: &ClusterState) {
        let per_resource =
            |family: &Gauges, base: &Labels, list: &joiner_model::resources::ResourceList| {
                for (name, q) in list {
                    let mut l = base.clone();
                    l.push(("resource_type", resource_type(name)));
                    family.get_or_create(&l).set(q.nanos() as f64 / 1e9);
                }
            };
        for family in [
            &self.nodes_allocatable,
            &self.nodes_pod_requests,
            &self.nodes_pod_limits,
            &self.nodes_daemon_requests,
            &self.nodes_daemon_limits,
            &self.nodes_overhead,
            &self.nodes_lifetime,
            &self.pools_usage,
            &self.pools_limit,
            &self.pods_state,
            &self.utilization,
        ] {
            family.clear();
        }
        for n in &state.nodes {
            per_resource(&self.nodes_allocatable, &n.labels, &n.allocatable);
            per_resource(&self.nodes_pod_requests, &n.labels, &n.pod_requests);
            per_resource(&self.nodes_pod_limits, &n.labels, &n.pod_limits);
            per_resource(&self.nodes_daemon_requests, &n.labels, &n.daemon_requests);
            per_resource(&self.nodes_daemon_limits, &n.labels, &n.daemon_limits);
            per_resource(&self.nodes_overhead, &n.labels, &n.overhead);
            self.nodes_lifetime
                .get_or_create(&n.labels)
                .set(n.lifetime_seconds);
        }
        for (pool, usage) in &state.pool_usage {
            per_resource(&self.pools_usage, &vec![("nodepool", pool.clone())], usage);
        }
        for (pool, limits) in &state.pool_limits {
            per_resource(&self.pools_limit, &vec![("nodepool", pool.clone())], limits);
        }
        for pod in &state.pods {
            self.pods_state.get_or_create(pod).set(1.0);
        }
        for (name, percent) in state.utilization() {
            self.utilization
                .get_or_create(&vec![("resource_type", resource_type(&name))])
                .set(percent);
        }
        self.node_count
            .set(i64::try_from(state.nodes.len()).unwrap_or(i64::MAX));
        self.synced.set(i64::from(state.synced));
        let mut since = self
            .unsynced_since
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if state.synced {
            *since = None;
            self.unsynced_time.set(0.0);
        } else {
            let from = *since.get_or_insert(state.at);
            self.unsynced_time.set((state.at - from).max(0.0));
        }
    }
}
