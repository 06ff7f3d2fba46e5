//! EC2NodeClass placement groups in the controller against the simulated cloud: nothing is
//! launched until the group is found (a restart included), nodes land in the group (and the
//! partition a pod asks for) with its labels, types the strategy refuses are never launched,
//! a group made again under its name drifts its nodes, and a spread group full in a zone
//! launches no more there.

use crate::common;

use std::collections::BTreeMap;

use crate::common::World;
use joiner_controller::clock::ManualClock;
use joiner_controller::store::{ClusterStore, InMemoryCluster};
use joiner_controller::{Controller, StepReport};
use joiner_model::api::EC2NodeClass;
use joiner_model::api::nodeclaim::NodeClaim;
use joiner_model::api::nodeclass_status::conditions;
use joiner_model::placement::{PlacementGroup, PlacementStrategy};
use joiner_model::wellknown::labels;
use joiner_model::{Manifests, parse_documents};
use joiner_simulate::SimulatedCloud;
use joiner_simulate::placement::Placed;
use k8s_openapi::api::core::v1::Pod;

type Ctl<'a> = Controller<&'a InMemoryCluster, &'a SimulatedCloud, ManualClock>;

/// A pool of t3 (which EC2 never puts in a cluster group) and m5 types whose class selects the
/// group `training`, and `pods` pods of one CPU, the last `pinned` of them asking for
/// partition 2.
fn manifests(pods: usize, pinned: usize) -> Manifests {
    let mut text = String::from(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: training}
spec:
  disruption: {consolidateAfter: Never}
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: training}
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [t3.xlarge, m5.xlarge]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: training}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  placementGroupSelector: {name: training}
"#,
    );
    for i in 0..pods {
        let selector = if i >= pods - pinned {
            "\n  nodeSelector: {karpenter.k8s.aws/placement-group-partition: \"2\"}"
        } else {
            ""
        };
        text.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: worker-{i}, namespace: default}}\nspec:{selector}\n  containers: [{{name: c, resources: {{requests: {{cpu: \"3\"}}}}}}]\n"
        ));
    }
    let mut m = Manifests::default();
    for (origin, doc) in parse_documents("training.yaml", &text).expect("parses") {
        m.add_document(origin, doc).expect("adds");
    }
    m.finish();
    m
}

fn group(id: &str, strategy: PlacementStrategy, partitions: u32) -> PlacementGroup {
    PlacementGroup {
        id: id.into(),
        name: "training".into(),
        strategy,
        partitions,
    }
}

fn controller(world: &World) -> Ctl<'_> {
    Controller::new(
        &world.store,
        &world.cloud,
        world.clock.clone(),
        world.config.clone(),
    )
}

fn run(
    world: &World,
    c: &mut Ctl<'_>,
    workload: &BTreeMap<String, Pod>,
    secs: u64,
) -> Vec<StepReport> {
    let mut reports = Vec::new();
    for _ in 0..secs {
        world.before_step(workload);
        let r = c.step();
        reports.push(r);
        world.assert_one_instance_per_claim();
        world.tick();
    }
    reports
}

fn class_condition(world: &World, type_: &str) -> Option<(String, String)> {
    let class: EC2NodeClass = world.store.get(None, "training").ok()??;
    let c = class.status?.condition(type_)?.clone();
    Some((c.status, c.reason))
}

#[test]
fn nothing_launches_until_the_group_is_found_then_nodes_land_in_it() {
    let world = World::new(&manifests(2, 0));
    let workload = world.pods_by_key();
    let mut c = controller(&world);
    run(&world, &mut c, &workload, 30);
    assert!(world.live_claims().is_empty(), "no group, no launch");
    assert_eq!(
        class_condition(&world, conditions::PLACEMENT_GROUP_READY),
        Some(("False".into(), "PlacementGroupNotFound".into()))
    );

    world
        .cloud
        .add_placement_group(group("pg-0c1", PlacementStrategy::Cluster, 0));
    // The class is resolved again on its period (or at once after a restart).
    let mut c = controller(&world);
    run(&world, &mut c, &workload, 120);
    assert_eq!(
        class_condition(&world, conditions::PLACEMENT_GROUP_READY),
        Some(("True".into(), conditions::PLACEMENT_GROUP_READY.into()))
    );
    let claims = world.live_claims();
    assert!(!claims.is_empty());
    for claim in &claims {
        assert_eq!(claim.label(labels::PLACEMENT_GROUP_ID), Some("pg-0c1"));
        // t3.xlarge is cheaper, but a cluster group does not take burstable types.
        assert_eq!(claim.label(labels::INSTANCE_TYPE), Some("m5.xlarge"));
        let id = common::instance_of(claim);
        assert_eq!(
            world.cloud.placement_of(&id),
            Some(Placed {
                group_id: "pg-0c1".into(),
                partition: None
            })
        );
    }
    world.assert_nothing_pending();
}

#[test]
fn a_restarted_controller_finds_the_group_before_it_launches() {
    let world = World::new(&manifests(1, 0));
    world
        .cloud
        .add_placement_group(group("pg-0c1", PlacementStrategy::Cluster, 0));
    let workload = world.pods_by_key();
    let mut c = controller(&world);
    run(&world, &mut c, &workload, 60);
    assert_eq!(world.live_claims().len(), 1);
    // The group is made again under its name while no controller runs; the one that starts
    // next has no group in memory: it launches nothing from the class until it has found the
    // new one, and then the node in the old group drifts.
    world.cloud.delete_placement_group("training");
    world
        .cloud
        .add_placement_group(group("pg-0c2", PlacementStrategy::Cluster, 0));
    let mut late: Pod = world
        .store
        .get(Some("default"), "worker-0")
        .expect("get")
        .expect("the pod");
    late.metadata.name = Some("worker-late".into());
    late.metadata.uid = None;
    late.metadata.resource_version = None;
    late.spec.as_mut().expect("spec").node_name = None;
    world.store.create(&late).expect("create");
    let workload = world.pods_by_key();
    // EC2 throttles the first resolutions: the class's status still says Ready, yet nothing
    // is launched from it while its group is unknown to this process.
    world.cloud.fail_next_resolutions(10);
    let mut c = controller(&world);
    let reports = run(&world, &mut c, &workload, 10);
    assert!(reports.iter().all(|r| r.created.is_empty()), "{reports:?}");
    assert_eq!(
        class_condition(&world, conditions::READY).map(|c| c.0),
        Some("True".into())
    );
    run(&world, &mut c, &workload, 300);
    let claims: Vec<NodeClaim> = world.live_claims();
    assert!(
        claims
            .iter()
            .all(|c| c.label(labels::PLACEMENT_GROUP_ID) == Some("pg-0c2")),
        "the old group's node was replaced: {:?}",
        claims.iter().map(|c| c.labels()).collect::<Vec<_>>()
    );
    world.assert_nothing_pending();
}

#[test]
fn a_partition_group_launches_into_the_partition_a_pod_asks_for() {
    let world = World::new(&manifests(2, 1));
    world
        .cloud
        .add_placement_group(group("pg-0p", PlacementStrategy::Partition, 3));
    let workload = world.pods_by_key();
    let mut c = controller(&world);
    run(&world, &mut c, &workload, 120);
    let mut partitions: Vec<Option<u32>> = world
        .live_claims()
        .iter()
        .map(|c| {
            let placed = world.cloud.placement_of(&common::instance_of(c));
            let label = c
                .label(labels::PLACEMENT_GROUP_PARTITION)
                .map(str::to_string);
            assert_eq!(
                placed
                    .as_ref()
                    .and_then(|p| p.partition)
                    .map(|p| p.to_string()),
                label
            );
            placed.and_then(|p| p.partition)
        })
        .collect();
    partitions.sort();
    assert_eq!(partitions, [Some(1), Some(2)]);
    world.assert_nothing_pending();
}

#[test]
fn a_full_spread_group_launches_no_more_in_that_zone() {
    // Nine pods of three CPUs each need nine nodes; a spread group takes seven per zone.
    let world = World::new(&manifests(9, 0));
    world
        .cloud
        .add_placement_group(group("pg-0s", PlacementStrategy::Spread, 0));
    let workload = world.pods_by_key();
    let mut c = controller(&world);
    run(&world, &mut c, &workload, 300);
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for claim in world.live_claims() {
        *per_zone
            .entry(claim.label(labels::ZONE).unwrap_or_default().to_string())
            .or_default() += 1;
    }
    assert!(per_zone.values().all(|&n| n <= 7), "{per_zone:?}");
    assert_eq!(per_zone.values().sum::<usize>(), 9, "{per_zone:?}");
    world.assert_nothing_pending();
}
