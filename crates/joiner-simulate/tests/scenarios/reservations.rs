//! Capacity reservations end to end, against the simulated cloud: the controller resolves the
//! class's reservations into its status, launches into them first and no further than they
//! hold, falls back to on-demand when EC2 refuses a full one, and drains a Capacity Block's
//! nodes before EC2 reclaims them.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::World;
use joiner_controller::clock::Clock;
use joiner_controller::cloud::InstanceState;
use joiner_controller::store::ClusterStore;
use joiner_controller::{Controller, StepReport};
use joiner_engine::catalog::CapacityType;
use joiner_model::api::EC2NodeClass;
use joiner_model::api::nodeclaim::{NodeClaim, conditions};
use joiner_model::api::nodeclass_status::CapacityReservation;
use joiner_model::wellknown::InterruptionKind;
use joiner_model::wellknown::{annotations, labels};
use joiner_model::{Manifests, parse_documents};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// A training NodePool on p5.48xlarge that may use reservations and on-demand capacity, its
/// class selecting the reservations tagged `team: ml`, and `pods` pods of eight GPUs each.
fn manifests(pods: usize) -> Manifests {
    let mut text = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: train}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: train}
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [p5.48xlarge]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [reserved, on-demand]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: train}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: lab}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: lab}}]
  capacityReservationSelectorTerms: [{tags: {team: ml}}]
"#
    .to_string();
    for i in 0..pods {
        text.push_str(&pod(&format!("train-{i}")));
    }
    let mut m = Manifests::default();
    for (origin, doc) in parse_documents("train.yaml", &text).expect("parses") {
        m.add_document(origin, doc).expect("adds");
    }
    m.finish();
    m
}

fn pod(name: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ml}}\nspec:\n  containers:\n  - name: c\n    resources: {{requests: {{nvidia.com/gpu: \"8\"}}, limits: {{nvidia.com/gpu: \"8\"}}}}\n"
    )
}

fn reservation(id: &str, zone: &str, block_end: Option<Time>) -> CapacityReservation {
    CapacityReservation {
        id: id.into(),
        availability_zone: zone.into(),
        instance_type: "p5.48xlarge".into(),
        instance_match_criteria: "targeted".into(),
        owner_id: "012345678901".into(),
        reservation_type: if block_end.is_some() {
            "capacity-block".into()
        } else {
            "default".into()
        },
        end_time: block_end,
        ..CapacityReservation::default()
    }
}

fn ml() -> BTreeMap<String, String> {
    BTreeMap::from([("team".to_string(), "ml".to_string())])
}

type Lab<'a> = Controller<
    &'a joiner_controller::store::InMemoryCluster,
    &'a joiner_simulate::SimulatedCloud,
    &'a joiner_controller::clock::ManualClock,
>;

fn run(world: &World, controller: &mut Lab<'_>, steps: usize) -> Vec<StepReport> {
    let workload = world.pods_by_key();
    (0..steps)
        .map(|_| {
            world.before_step(&workload);
            let r = controller.step();
            world.assert_one_instance_per_claim();
            world.tick();
            r
        })
        .collect()
}

fn reserved_in<'a>(claims: &'a [NodeClaim], id: &str) -> Vec<&'a NodeClaim> {
    claims
        .iter()
        .filter(|c| c.label(labels::CAPACITY_RESERVATION_ID) == Some(id))
        .collect()
}

#[test]
fn nodes_fill_the_reservation_first_and_spill_to_on_demand_when_ec2_refuses() {
    let world = World::new(&manifests(3));
    world
        .cloud
        .add_capacity_reservation(reservation("cr-odcr", "us-east-1a", None), ml(), 2);
    // Another team's reservation: not selected.
    world.cloud.add_capacity_reservation(
        reservation("cr-other", "us-east-1b", None),
        BTreeMap::from([("team".to_string(), "web".to_string())]),
        5,
    );
    let mut controller = Controller::new(
        &world.store,
        &world.cloud,
        &world.clock,
        world.config.clone(),
    );
    // Half a minute: the class was read once, at the start.
    let reports = run(&world, &mut controller, 30);
    assert!(
        reports.iter().all(|r| r.errors.is_empty()),
        "{:?}",
        reports.iter().flat_map(|r| &r.errors).collect::<Vec<_>>()
    );

    let class = world
        .store
        .get::<EC2NodeClass>(None, "train")
        .expect("get")
        .expect("class");
    let recorded = &class.status.as_ref().expect("status").capacity_reservations;
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].id, "cr-odcr");

    let claims = world.live_claims();
    assert_eq!(claims.len(), 3, "{:?}", common::names(&claims));
    let reserved = reserved_in(&claims, "cr-odcr");
    assert_eq!(reserved.len(), 2);
    for c in &reserved {
        assert_eq!(c.label(labels::CAPACITY_TYPE), Some("reserved"));
        assert_eq!(c.label(labels::ZONE), Some("us-east-1a"));
        assert_eq!(c.label(labels::CAPACITY_RESERVATION_TYPE), Some("default"));
    }
    let running = world.running();
    let in_reservation = running
        .iter()
        .filter(|i| i.capacity_type == CapacityType::Reserved)
        .count();
    assert_eq!((running.len(), in_reservation), (3, 2));

    // A fourth pod before the class is read again: the status still says two free, EC2 says
    // none. The launch is refused, and the pod gets an on-demand node.
    world
        .store
        .create(&parse_pod("train-3"))
        .expect("a new pod");
    let reports = run(&world, &mut controller, 90);
    let refused: Vec<&String> = reports.iter().flat_map(|r| &r.unavailable).collect();
    assert_eq!(
        refused,
        ["p5.48xlarge/us-east-1a/reserved"],
        "EC2 refused the full reservation once, and Joiner planned past it"
    );
    let claims = world.live_claims();
    assert!(claims.iter().all(|c| c.is_true(conditions::INITIALIZED)));
    assert_eq!(claims.len(), 4, "{:?}", common::names(&claims));
    assert_eq!(reserved_in(&claims, "cr-odcr").len(), 2);
    let running = world.running();
    assert_eq!(running.len(), 4);
    assert_eq!(
        running
            .iter()
            .filter(|i| i.capacity_type == CapacityType::Reserved)
            .count(),
        2,
        "never more instances in the reservation than it holds"
    );
    world.assert_nothing_pending();
}

fn parse_pod(name: &str) -> k8s_openapi::api::core::v1::Pod {
    let docs = parse_documents("pod.yaml", &pod(name)).expect("parses");
    serde_json::from_value(docs.into_iter().next().expect("one").1).expect("pod")
}

#[test]
fn a_capacity_block_drains_its_nodes_before_ec2_takes_them_back() {
    let world = World::new(&manifests(1));
    let end = world.clock.now() + k8s_openapi::jiff::SignedDuration::from_hours(2);
    world.cloud.add_capacity_reservation(
        reservation("cr-block", "us-east-1a", Some(Time(end))),
        ml(),
        1,
    );
    let mut controller = Controller::new(
        &world.store,
        &world.cloud,
        &world.clock,
        world.config.clone(),
    );
    run(&world, &mut controller, 60);
    let claims = world.live_claims();
    let block = reserved_in(&claims, "cr-block");
    assert_eq!(block.len(), 1, "{:?}", common::names(&claims));
    assert_eq!(
        block[0].label(labels::CAPACITY_RESERVATION_TYPE),
        Some("capacity-block")
    );
    let block_claim = block[0].name().to_string();

    // 41 minutes before the end nothing happens yet.
    advance_to(
        &world,
        end - k8s_openapi::jiff::SignedDuration::from_mins(41),
    );
    run(&world, &mut controller, 5);
    let still = world
        .store
        .get::<NodeClaim>(None, &block_claim)
        .expect("get");
    assert!(
        still
            .as_ref()
            .is_some_and(|c| c.annotation(annotations::INTERRUPTED).is_none()),
        "not yet"
    );

    // From 40 minutes before: replaced on-demand and drained, well before EC2 starts
    // terminating the block's instances 30 minutes before its end.
    advance_to(
        &world,
        end - k8s_openapi::jiff::SignedDuration::from_mins(40),
    );
    let reports = run(&world, &mut controller, 120);
    assert!(
        reports.iter().flat_map(|r| &r.disruption).any(|e| e.reason
            == InterruptionKind::CapacityReservationEnding.reason()
            && e.node_claims == [block_claim.clone()]),
        "the block's node is marked as interrupted"
    );
    assert!(world.clock.now() < end - k8s_openapi::jiff::SignedDuration::from_mins(30));
    let claims = world.live_claims();
    assert!(
        claims.iter().all(|c| c.name() != block_claim),
        "the block's NodeClaim is gone: {:?}",
        common::names(&claims)
    );
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].label(labels::CAPACITY_TYPE), Some("on-demand"));
    assert!(claims[0].is_true(conditions::INITIALIZED));
    world.assert_nothing_pending();
    let running = world.running();
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].state, InstanceState::Running);
}

fn advance_to(world: &World, at: k8s_openapi::jiff::Timestamp) {
    let ahead = at.duration_since(world.clock.now());
    world
        .clock
        .advance(Duration::try_from(ahead).expect("the future"));
}
