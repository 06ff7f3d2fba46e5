//! EC2NodeClass status written by the controller against the simulated cloud with a closed
//! VPC: a class whose subnets match nothing is `SubnetsReady=False` / `Ready=False` and launches
//! nothing, its pods pending with that reason, while the learning lab's class, resolved, still
//! launches; a resolution that fails keeps the last status.

use std::collections::BTreeMap;

use crate::common::{World, learning_lab};
use joiner_controller::store::ClusterStore;
use joiner_controller::{Controller, StepReport};
use joiner_model::api::EC2NodeClass;
use joiner_model::api::ec2nodeclass::Readiness;
use joiner_model::api::nodeclaim::NodeClaim;
use joiner_model::api::nodeclass_status::conditions;
use joiner_model::{Manifests, parse_documents};
use joiner_simulate::{SimulatedNetwork, SimulatedSecurityGroup, SimulatedSubnet};

const DISCOVERY: &str = "nextgen-learninglab";

/// The learning lab, and a CPU NodePool whose class selects subnets of another VPC, with a
/// pod only it can take.
fn manifests() -> Manifests {
    let mut m: Manifests = learning_lab();
    let extra = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: cpu}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: elsewhere}
      requirements: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [m7i]}]
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: elsewhere}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: another-vpc}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: nextgen-learninglab}}]
---
apiVersion: v1
kind: Pod
metadata: {name: cpu-job, namespace: default}
spec:
  nodeSelector: {karpenter.sh/nodepool: cpu}
  containers:
  - name: c
    resources: {requests: {cpu: "1"}}
"#;
    for (origin, doc) in parse_documents("extra.yaml", extra).expect("parses") {
        m.add_document(origin, doc).expect("adds");
    }
    m.finish();
    m
}

/// The lab's VPC: one subnet per zone and its node security group, tagged for discovery.
fn lab_network(zones: &[String]) -> SimulatedNetwork {
    let tags = BTreeMap::from([("karpenter.sh/discovery".to_string(), DISCOVERY.to_string())]);
    SimulatedNetwork {
        subnets: zones
            .iter()
            .enumerate()
            .map(|(i, z)| SimulatedSubnet {
                id: format!("subnet-{i}"),
                zone: z.clone(),
                zone_id: format!("use1-az{}", i + 1),
                tags: tags.clone(),
            })
            .collect(),
        security_groups: vec![SimulatedSecurityGroup {
            id: "sg-lab".into(),
            name: "lab-nodes".into(),
            tags,
        }],
    }
}

fn class(world: &World, name: &str) -> EC2NodeClass {
    world
        .store
        .get::<EC2NodeClass>(None, name)
        .expect("get")
        .expect("the class")
}

type WorldController<'a> = Controller<
    &'a joiner_controller::store::InMemoryCluster,
    &'a joiner_simulate::SimulatedCloud,
    &'a joiner_controller::clock::ManualClock,
>;

fn controller(world: &World) -> WorldController<'_> {
    Controller::new(
        &world.store,
        &world.cloud,
        &world.clock,
        world.config.clone(),
    )
}

/// Steps `controller` `steps` times, a second apart, the pods of `workload` recreated as
/// their owners would.
fn step(
    world: &World,
    controller: &mut WorldController<'_>,
    workload: &BTreeMap<String, k8s_openapi::api::core::v1::Pod>,
    steps: usize,
) -> Vec<StepReport> {
    (0..steps)
        .map(|_| {
            world.before_step(workload);
            let r = controller.step();
            world.tick();
            r
        })
        .collect()
}

fn run(world: &World, steps: usize) -> Vec<StepReport> {
    step(world, &mut controller(world), &world.pods_by_key(), steps)
}

#[test]
fn a_class_whose_subnets_match_nothing_blocks_its_pool_only_and_says_why() {
    let world = World::new(&manifests());
    world
        .cloud
        .set_network(lab_network(&world.config.settings.zones));
    let reports = run(&world, 20);

    let bad = class(&world, "elsewhere");
    let status = bad.status.as_ref().expect("a status");
    let subnets = status
        .condition(conditions::SUBNETS_READY)
        .expect("SubnetsReady");
    assert_eq!(subnets.status, "False");
    assert_eq!(
        subnets.message,
        "no subnet matches spec.subnetSelectorTerms"
    );
    let why = "SubnetsReady=False: no subnet matches spec.subnetSelectorTerms";
    assert_eq!(bad.readiness(), Readiness::NotReady(why.into()));
    assert_eq!(
        status
            .condition(conditions::SECURITY_GROUPS_READY)
            .map(|c| c.status.as_str()),
        Some("True")
    );

    let lab = class(&world, "g4-nodeclass");
    assert_eq!(lab.readiness(), Readiness::Ready);
    let resolved = lab.status.as_ref().expect("status");
    assert_eq!(resolved.subnets.len(), world.config.settings.zones.len());
    assert_eq!(resolved.subnets[0].zone_id.as_deref(), Some("use1-az1"));
    assert_eq!(
        resolved.security_groups[0].name.as_deref(),
        Some("lab-nodes")
    );
    assert!(!resolved.amis.is_empty());
    assert_eq!(
        resolved.instance_profile.as_deref(),
        Some("g4-nodeclass_KarpenterNodeRole")
    );

    // The lab launched; the CPU pool launched nothing, and its pod says why.
    let claims = world.store.list::<NodeClaim>().expect("claims");
    assert!(!claims.is_empty());
    assert!(
        claims
            .iter()
            .all(|c| c.label("karpenter.sh/nodepool") == Some("g4-nodepool")),
        "{:?}",
        claims.iter().map(NodeClaim::name).collect::<Vec<_>>()
    );
    let reason = reports
        .iter()
        .rev()
        .flat_map(|r| &r.unschedulable)
        .find(|(pod, _)| pod == "default/cpu-job")
        .map(|(_, r)| r.clone())
        .expect("the CPU pod is reported unschedulable");
    assert!(
        reason.contains(&format!(
            r#"NodePool cpu launches nothing: EC2NodeClass "elsewhere" is not ready: {why}"#
        )),
        "{reason}"
    );
}

#[test]
fn a_class_never_resolved_launches_nothing_until_it_is() {
    let world = World::learning_lab();
    world.cloud.fail_next_resolutions(3);
    let reports = run(&world, 3);
    assert!(
        reports.iter().all(|r| r.created.is_empty()),
        "launched before the class was resolved"
    );
    let lab = class(&world, "g4-nodeclass");
    let ready = lab
        .status
        .as_ref()
        .and_then(|s| s.condition(conditions::READY))
        .expect("Ready");
    assert_eq!(ready.status, "Unknown");
    assert!(
        reports.iter().any(|r| !r.errors.is_empty()),
        "the failures are reported"
    );
    // Resolved once the cloud answers (the retry comes 10 s later): the lab launches.
    let reports = run(&world, 30);
    assert!(reports.iter().any(|r| !r.created.is_empty()));
    assert_eq!(class(&world, "g4-nodeclass").readiness(), Readiness::Ready);
}

#[test]
fn a_throttled_resolution_keeps_a_ready_class_ready() {
    let world = World::learning_lab();
    run(&world, 2);
    let before = class(&world, "g4-nodeclass");
    assert_eq!(before.readiness(), Readiness::Ready);
    // Past the resolution period, every resolution is throttled for a while.
    world.clock.advance(std::time::Duration::from_secs(120));
    world.cloud.fail_next_resolutions(5);
    let reports = run(&world, 30);
    assert!(
        reports.iter().any(|r| !r.errors.is_empty()),
        "the throttling is reported"
    );
    let after = class(&world, "g4-nodeclass");
    assert_eq!(after.status, before.status, "the last status stands");
    assert_eq!(after.readiness(), Readiness::Ready);
}

/// A NodeClaim planned while its class was Ready (by this controller before the class's
/// subnets went away, or by another leader) is not launched once the class is not: it waits
/// and says why, as Karpenter's `NodeClassNotReady` does.
#[test]
fn a_nodeclaim_of_a_class_that_is_not_ready_waits_without_launching() {
    let world = World::new(&manifests());
    world
        .cloud
        .set_network(lab_network(&world.config.settings.zones));
    let claim: NodeClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "cpu-planned", "labels": {
            "karpenter.sh/nodepool": "cpu", "node.kubernetes.io/instance-type": "m7i.large",
            "karpenter.sh/capacity-type": "on-demand"},
            "finalizers": ["karpenter.sh/termination"]},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "elsewhere"},
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m7i.large"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["cpu"]}
            ]
        }
    }))
    .expect("NodeClaim");
    world.store.create(&claim).expect("create");
    run(&world, 5);
    let waiting = world
        .store
        .get::<NodeClaim>(None, "cpu-planned")
        .expect("get")
        .expect("still there");
    assert!(waiting.status.provider_id.is_none(), "not launched");
    let launched = waiting
        .condition(joiner_model::api::nodeclaim::conditions::LAUNCHED)
        .expect("Launched");
    assert_eq!(
        (launched.status.as_str(), launched.reason.as_str()),
        ("False", "NodeClassNotReady")
    );
    assert!(
        launched.message.contains("no subnet matches"),
        "{}",
        launched.message
    );
    assert!(
        world.cloud.all_instances().iter().all(|i| i
            .tags
            .get("karpenter.sh/nodepool")
            .map(String::as_str)
            != Some("cpu")),
        "nothing launched for the cpu pool"
    );
}

/// A role change: new nodes get a new profile while the running ones keep theirs, named on
/// their NodeClaims; the old profile is deleted only once no NodeClaim or instance uses it any
/// more and the grace has passed, never while a node runs with it.
#[test]
fn a_role_change_retires_the_old_profile_only_after_its_nodes_are_gone() {
    use joiner_model::wellknown::annotations::INSTANCE_PROFILE;
    let world = World::learning_lab();
    let workload = world.pods_by_key();
    let mut c = controller(&world);
    step(&world, &mut c, &workload, 120);
    world.assert_settled(2);
    let name = world
        .node_pool()
        .spec
        .template
        .spec
        .node_class_ref
        .name
        .clone();
    let old = class(&world, &name)
        .status
        .and_then(|s| s.instance_profile)
        .expect("a profile");
    for c in world.live_claims() {
        assert_eq!(c.annotation(INSTANCE_PROFILE), Some(old.as_str()));
    }
    let mut changed = class(&world, &name);
    changed.spec.role = Some("NewNodeRole".into());
    world.store.update(&changed).expect("update");

    let mut deleted_at = None;
    for second in 0..3 * 3600 {
        let r = step(&world, &mut c, &workload, 1).remove(0);
        let old_in_use = world
            .live_claims()
            .iter()
            .any(|c| c.annotation(INSTANCE_PROFILE) == Some(old.as_str()))
            || world
                .running()
                .iter()
                .any(|i| i.instance_profile.as_deref() == Some(old.as_str()));
        if r.instance_profiles_deleted.contains(&old) {
            assert!(!old_in_use, "deleted while in use, at {second} s");
            deleted_at = Some(second);
            break;
        }
    }
    let new = class(&world, &name)
        .status
        .and_then(|s| s.instance_profile)
        .expect("a profile");
    assert_ne!(new, old);
    assert!(deleted_at.is_some(), "the old profile is collected");
    assert_eq!(world.cloud.deleted_instance_profiles(), [old]);
    for c in world.live_claims() {
        assert_eq!(c.annotation(INSTANCE_PROFILE), Some(new.as_str()));
    }
    world.assert_nothing_pending();
}
