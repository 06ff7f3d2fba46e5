//! The cloud calls the controller makes per step with many NodeClaims, for `joiner bench`.
//!
//! EC2's request budget is per account and region and shared with every other tool: what
//! matters is how the calls per step grow with the fleet. The benchmark launches `nodes`
//! one-GPU nodes (one pod each), lets them register, runs five quiet minutes (two garbage
//! collection passes), then deletes every NodeClaim, and counts each cloud call by step.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use joiner_controller::clock::{Clock, ManualClock};
use joiner_controller::cloud::{
    CloudError, CloudInstanceType, CloudProvider, Instance, LaunchRequest, Launched,
    NodeClassResolution,
};
use joiner_controller::store::{ClusterStore, InMemoryCluster};
use joiner_controller::{Config, Controller};
use joiner_engine::catalog::Catalog;
use joiner_model::api::EC2NodeClass;
use joiner_model::api::nodeclaim::NodeClaim;
use joiner_model::settings::Settings;
use joiner_model::{Manifests, parse_documents};
use k8s_openapi::api::core::v1::Pod;

use crate::{SimulatedCloud, SimulatedKubelet, collect_orphans, schedule_pending};

mod provisioning;
pub use provisioning::{StepFigures, provisioning_step};

/// A call of the cloud interface, named by the AWS API it makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CloudCall {
    /// `CreateFleet` (a launch).
    Launch,
    /// `TerminateInstances`.
    Terminate,
    /// `RebootInstances`.
    Reboot,
    /// `DescribeInstances` by instance id.
    DescribeInstance,
    /// `DescribeInstances` filtered by the cluster's tags.
    ListInstances,
    /// `DescribeInstanceTypes`, offerings and prices.
    InstanceTypes,
    /// Subnets, security groups, images and the instance profile of an EC2NodeClass.
    ResolveNodeClass,
    /// `DescribeLaunchTemplates` and deletes.
    LaunchTemplates,
    /// `iam:ListInstanceProfiles`.
    ListInstanceProfiles,
    /// `iam:DeleteInstanceProfile`.
    DeleteInstanceProfile,
}

impl CloudCall {
    pub const ALL: [CloudCall; 10] = [
        CloudCall::Launch,
        CloudCall::Terminate,
        CloudCall::Reboot,
        CloudCall::DescribeInstance,
        CloudCall::ListInstances,
        CloudCall::InstanceTypes,
        CloudCall::ResolveNodeClass,
        CloudCall::LaunchTemplates,
        CloudCall::ListInstanceProfiles,
        CloudCall::DeleteInstanceProfile,
    ];

    /// The AWS API, for the report.
    pub fn api(self) -> &'static str {
        match self {
            CloudCall::Launch => "CreateFleet",
            CloudCall::Terminate => "TerminateInstances",
            CloudCall::Reboot => "RebootInstances",
            CloudCall::DescribeInstance => "DescribeInstances (by id)",
            CloudCall::ListInstances => "DescribeInstances (by tag)",
            CloudCall::InstanceTypes => "DescribeInstanceTypes/Offerings",
            CloudCall::ResolveNodeClass => "EC2NodeClass resolution",
            CloudCall::LaunchTemplates => "DescribeLaunchTemplates",
            CloudCall::ListInstanceProfiles => "iam:ListInstanceProfiles",
            CloudCall::DeleteInstanceProfile => "iam:DeleteInstanceProfile",
        }
    }
}

/// A cloud that counts the calls made of it.
pub struct CountingCloud<C> {
    inner: C,
    calls: Mutex<BTreeMap<CloudCall, u64>>,
}

impl<C> CountingCloud<C> {
    pub fn new(inner: C) -> Self {
        CountingCloud {
            inner,
            calls: Mutex::new(BTreeMap::new()),
        }
    }

    /// The calls counted since the last take, by kind; the count starts over.
    pub fn take(&self) -> BTreeMap<CloudCall, u64> {
        std::mem::take(&mut *self.calls.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn count(&self, call: CloudCall) {
        *self
            .calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(call)
            .or_default() += 1;
    }
}

impl<C: CloudProvider> CloudProvider for CountingCloud<C> {
    fn launch(&self, request: &LaunchRequest) -> Result<Launched, CloudError> {
        self.count(CloudCall::Launch);
        self.inner.launch(request)
    }
    fn terminate(&self, instance_id: &str) -> Result<(), CloudError> {
        self.count(CloudCall::Terminate);
        self.inner.terminate(instance_id)
    }
    fn reboot(&self, instance_id: &str) -> Result<(), CloudError> {
        self.count(CloudCall::Reboot);
        self.inner.reboot(instance_id)
    }
    fn get(&self, instance_id: &str) -> Result<Option<Instance>, CloudError> {
        self.count(CloudCall::DescribeInstance);
        self.inner.get(instance_id)
    }
    fn list(&self, cluster_name: &str) -> Result<Vec<Instance>, CloudError> {
        self.count(CloudCall::ListInstances);
        self.inner.list(cluster_name)
    }
    fn instance_types(&self) -> Result<Vec<CloudInstanceType>, CloudError> {
        self.count(CloudCall::InstanceTypes);
        self.inner.instance_types()
    }
    fn delete_unused_launch_templates(
        &self,
        node_classes: &[EC2NodeClass],
    ) -> Result<Vec<String>, CloudError> {
        self.count(CloudCall::LaunchTemplates);
        self.inner.delete_unused_launch_templates(node_classes)
    }
    fn list_instance_profiles(&self) -> Result<Vec<String>, CloudError> {
        self.count(CloudCall::ListInstanceProfiles);
        self.inner.list_instance_profiles()
    }
    fn delete_instance_profile(&self, name: &str) -> Result<(), CloudError> {
        self.count(CloudCall::DeleteInstanceProfile);
        self.inner.delete_instance_profile(name)
    }
    fn resolve_node_class(&self, class: &EC2NodeClass) -> NodeClassResolution {
        self.count(CloudCall::ResolveNodeClass);
        self.inner.resolve_node_class(class)
    }
}

/// One phase of the benchmark: how many steps it took and the calls of each kind, in all and
/// in its busiest step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Phase {
    pub name: &'static str,
    pub steps: usize,
    pub total: BTreeMap<CloudCall, u64>,
    pub most_in_a_step: BTreeMap<CloudCall, u64>,
}

impl Phase {
    fn new(name: &'static str) -> Phase {
        Phase {
            name,
            steps: 0,
            total: BTreeMap::new(),
            most_in_a_step: BTreeMap::new(),
        }
    }

    fn add(&mut self, step: BTreeMap<CloudCall, u64>) {
        self.steps += 1;
        for (call, n) in step {
            *self.total.entry(call).or_default() += n;
            let most = self.most_in_a_step.entry(call).or_default();
            *most = (*most).max(n);
        }
    }
}

/// The benchmark's cluster: a one-GPU NodePool and `nodes` pods of one GPU each.
fn manifests(nodes: usize) -> Result<Manifests, String> {
    let mut text = String::from(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: gpu}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}\n      requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [g6.xlarge]}, {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}]\n  disruption: {consolidateAfter: Never}\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: gpu}\nspec: {role: NodeRole, amiSelectorTerms: [{alias: al2023@latest}]}\n",
    );
    for i in 0..nodes {
        text.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: train-{i}, namespace: default}}\nspec:\n  containers:\n  - name: c\n    resources: {{limits: {{nvidia.com/gpu: \"1\"}}}}\n"
        ));
    }
    let mut m = Manifests::default();
    for (origin, doc) in parse_documents("bench.yaml", &text).map_err(|e| e.to_string())? {
        m.add_document(origin, doc).map_err(|e| e.to_string())?;
    }
    m.finish();
    Ok(m)
}

/// Runs the benchmark with `nodes` NodeClaims and returns its phases.
pub fn cloud_calls(nodes: usize) -> Result<Vec<Phase>, String> {
    let clock = ManualClock::new();
    let settings = Settings {
        cluster_name: Some("bench".into()),
        ..Settings::default()
    };
    let catalog = Catalog::builtin(&settings.region, &settings.zones);
    let config = Config::new(settings).map_err(|e| e.to_string())?;
    let store = InMemoryCluster::new(clock.clone());
    let sim = SimulatedCloud::new(&catalog, clock.clone());
    let kubelet = SimulatedKubelet::default();
    store.load(&manifests(nodes)?).map_err(|e| e.to_string())?;
    let cloud = CountingCloud::new(&sim);
    let mut controller = Controller::new(&store, &cloud, &clock, config.clone());
    let mut step = || -> Result<BTreeMap<CloudCall, u64>, String> {
        collect_orphans(&store).map_err(|e| e.to_string())?;
        schedule_pending(&store, &config, clock.now()).map_err(|e| e.to_string())?;
        controller.step();
        kubelet
            .step(&store, &sim, clock.now())
            .map_err(|e| e.to_string())?;
        clock.advance(Duration::from_secs(1));
        Ok(cloud.take())
    };
    let claims = |store: &InMemoryCluster| store.list::<NodeClaim>().map_err(|e| e.to_string());
    const LIMIT: usize = 3600;

    let mut launch = Phase::new("launch");
    while claims(&store)?.len() < nodes
        || claims(&store)?
            .iter()
            .any(|c| c.status.provider_id.is_none())
    {
        launch.add(step()?);
        if launch.steps > LIMIT {
            return Err("the NodeClaims did not launch within an hour".into());
        }
    }
    let mut register = Phase::new("registration");
    while claims(&store)?
        .iter()
        .any(|c| !c.is_true(joiner_model::api::nodeclaim::conditions::INITIALIZED))
    {
        register.add(step()?);
        if register.steps > LIMIT {
            return Err("the nodes did not initialize within an hour".into());
        }
    }
    let mut steady = Phase::new("steady (5 min)");
    for _ in 0..300 {
        steady.add(step()?);
    }
    for p in store.list::<Pod>().map_err(|e| e.to_string())? {
        let ns = p.metadata.namespace.as_deref().unwrap_or("default");
        let name = p.metadata.name.as_deref().unwrap_or_default();
        store
            .delete::<Pod>(Some(ns), name)
            .map_err(|e| e.to_string())?;
    }
    for c in claims(&store)? {
        store
            .delete::<NodeClaim>(None, c.name())
            .map_err(|e| e.to_string())?;
    }
    let mut terminate = Phase::new("termination");
    while !claims(&store)?.is_empty() {
        terminate.add(step()?);
        if terminate.steps > LIMIT {
            return Err("the NodeClaims were not finalized within an hour".into());
        }
    }
    Ok(vec![launch, register, steady, terminate])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Per step, the instance listing is read once however many NodeClaims there are, and no
    /// instance is described one by one.
    #[test]
    fn calls_per_step_do_not_grow_with_the_fleet() {
        let phases = cloud_calls(40).expect("runs");
        let most = |phase: &Phase, call| phase.most_in_a_step.get(&call).copied().unwrap_or(0);
        let total = |phase: &Phase, call| phase.total.get(&call).copied().unwrap_or(0);
        for phase in &phases {
            assert!(
                most(phase, CloudCall::ListInstances) <= 2,
                "{}: {phase:?}",
                phase.name
            );
            assert_eq!(total(phase, CloudCall::DescribeInstance), 0, "{phase:?}");
        }
        assert_eq!(total(&phases[0], CloudCall::Launch), 40);
        assert_eq!(total(&phases[3], CloudCall::Terminate), 40);
        // Quiet minutes cost a listing per garbage collection pass, nothing per NodeClaim.
        assert!(
            total(&phases[2], CloudCall::ListInstances) <= 3,
            "{:?}",
            phases[2]
        );
    }
}
