//! The controller's provisioning step at scale, beside the plan it is built on.
//!
//! What a user waits for in a live cluster is the controller's step, not the planner: the step
//! reads the cluster from the store, builds its view, plans, and writes the NodeClaims it
//! decided. This benchmark loads the scheduling benchmark's pods (Karpenter's shape) and
//! `nodes` small ready nodes Joiner does not manage (1 CPU, 2 GiB: they take some pods and
//! leave most to new NodeClaims) into the in-memory cluster, with a NodePool
//! over the built-in catalog's c, m and r types, and times the step that plans, against
//! `joiner plan`'s own work (snapshot and plan) on the same objects.

use std::time::{Duration, Instant};

use joiner_controller::clock::ManualClock;
use joiner_controller::store::{ClusterStore, InMemoryCluster};
use joiner_controller::{Config, Controller};
use joiner_engine::catalog::Catalog;
use joiner_engine::snapshot::{ClusterSnapshot, Options};
use joiner_model::api::nodeclaim::NodeClaim;
use joiner_model::settings::Settings;
use joiner_model::{Manifests, Source};
use serde_json::json;

use crate::SimulatedCloud;

/// What one run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct StepFigures {
    pub pods: usize,
    pub nodes: usize,
    /// Building the snapshot and planning, as `joiner plan` does after reading its files.
    pub plan_seconds: f64,
    /// The controller step that planned and created the NodeClaims.
    pub step_seconds: f64,
    /// Steps run before it (the batch window waits for pods to stop arriving).
    pub steps_before: usize,
    pub node_claims: usize,
}

/// The benchmark's objects: a NodePool and EC2NodeClass, `nodes` unmanaged ready nodes and the
/// scheduling benchmark's `pods` pods.
fn manifests(pods: usize, nodes: usize) -> Result<Manifests, String> {
    let zones = ["us-east-1a", "us-east-1b", "us-east-1c"];
    let mut docs = vec![
        json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
            "spec": {"role": "NodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}]}}),
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                    {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}},
                "disruption": {"consolidateAfter": "Never"}}}),
    ];
    for i in 0..nodes {
        let name = format!("existing-{i}");
        let resources = json!({"cpu": "1", "memory": "2Gi", "pods": "20"});
        docs.push(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                "topology.kubernetes.io/zone": zones[i % zones.len()],
                "node.kubernetes.io/instance-type": "t3.small"}},
            "status": {"capacity": resources, "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True"}]}}));
    }
    docs.extend(
        joiner_engine::bench::scheduling_documents(pods)
            .into_iter()
            .filter(|d| d["kind"] == "Pod"),
    );
    let mut m = Manifests::default();
    for (i, doc) in docs.into_iter().enumerate() {
        m.add_document(Source::new("bench", i + 1), doc)
            .map_err(|e| e.to_string())?;
    }
    m.finish();
    Ok(m)
}

/// Runs the benchmark once.
pub fn provisioning_step(pods: usize, nodes: usize) -> Result<StepFigures, String> {
    let manifests = manifests(pods, nodes)?;
    let settings = Settings {
        cluster_name: Some("bench".into()),
        ..Settings::default()
    };
    let start = Instant::now();
    let snapshot = ClusterSnapshot::build(&manifests, &settings, &Options::default())
        .map_err(|e| e.to_string())?;
    let plan = snapshot.plan();
    let plan_seconds = start.elapsed().as_secs_f64();
    if plan.node_claims.is_empty() {
        return Err("the plan launches nothing: the benchmark is not measuring a launch".into());
    }

    let clock = ManualClock::new();
    let catalog = Catalog::builtin(&settings.region, &settings.zones);
    let config = Config::new(settings).map_err(|e| e.to_string())?;
    let store = InMemoryCluster::new(clock.clone());
    store.load(&manifests).map_err(|e| e.to_string())?;
    let cloud = SimulatedCloud::new(&catalog, clock.clone());
    let mut controller = Controller::new(&store, &cloud, &clock, config);
    for steps_before in 0..120 {
        let start = Instant::now();
        let report = controller.step();
        let step_seconds = start.elapsed().as_secs_f64();
        if report.planned {
            return Ok(StepFigures {
                pods,
                nodes,
                plan_seconds,
                step_seconds,
                steps_before,
                node_claims: store.list::<NodeClaim>().map_err(|e| e.to_string())?.len(),
            });
        }
        clock.advance(Duration::from_secs(1));
    }
    Err("the controller did not plan within two minutes of steps".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The step plans what `joiner plan` plans: as many NodeClaims, created in one step.
    #[test]
    fn the_provisioning_step_creates_the_planned_node_claims() {
        let figures = provisioning_step(300, 20).expect("runs");
        let manifests = manifests(300, 20).unwrap();
        let settings = Settings {
            cluster_name: Some("bench".into()),
            ..Settings::default()
        };
        let plan = ClusterSnapshot::build(&manifests, &settings, &Options::default())
            .unwrap()
            .plan();
        // Some pods go to the existing nodes, the rest to new NodeClaims (a few host-affinity
        // groups whose first pod took an existing node's last room stay pending, as in the
        // file-shaped scheduling benchmark).
        assert!(
            plan.bindings
                .iter()
                .any(|b| b.node.starts_with("existing-"))
        );
        assert_eq!(figures.node_claims, plan.node_claims.len());
        assert!(figures.step_seconds > 0.0 && figures.plan_seconds > 0.0);
    }
}
