//! Capacity reservations: offered to the NodePools whose class selects them, preferred, shared
//! out by their free counts, and closed before a Capacity Block ends.

use joiner_model::settings::Settings;
use joiner_model::wellknown::labels;
use k8s_openapi::jiff::Timestamp;

use super::{ClusterSnapshot, Options};
use crate::plan::Plan;

/// A GPU NodePool that may use reservations and on-demand capacity, and a class whose status
/// records two reservations of p5.48xlarge: an on-demand capacity reservation with `{free}`
/// instances free and a Capacity Block ending at 2026-12-02T12:00Z with one.
fn pool(capacity_types: &str, free: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: train}}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: train}}
      requirements:
      - {{key: karpenter.k8s.aws/instance-family, operator: In, values: [p5]}}
      - {{key: karpenter.sh/capacity-type, operator: In, values: [{capacity_types}]}}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: train}}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{{alias: al2023@latest}}]
  capacityReservationSelectorTerms: [{{tags: {{team: ml}}}}]
status:
  capacityReservations:
  - {{id: cr-odcr, availabilityZone: us-east-1b, instanceType: p5.48xlarge, instanceMatchCriteria: targeted,
     ownerID: "012345678901", reservationType: default, state: active{free}}}
  - {{id: cr-block, availabilityZone: us-east-1a, instanceType: p5.48xlarge, instanceMatchCriteria: targeted,
     ownerID: "012345678901", reservationType: capacity-block, state: active, endTime: "2026-12-02T12:00:00Z"}}
"#
    )
}

fn pods(n: usize, selector: &str) -> String {
    (0..n)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: t{i}, namespace: ml}}\nspec:\n  {selector}containers:\n  - name: c\n    resources: {{requests: {{nvidia.com/gpu: \"8\"}}, limits: {{nvidia.com/gpu: \"8\"}}}}\n---\n"
            )
        })
        .collect()
}

fn plan_at(docs: &[&str], now: Option<&str>) -> Plan {
    let m = super::overlay_tests::manifests(docs);
    let settings = Settings::default();
    let options = Options::default();
    let mut builder = ClusterSnapshot::builder(&m, &settings, &options);
    if let Some(now) = now {
        builder = builder.at(now.parse::<Timestamp>().unwrap());
    }
    builder.build().unwrap().plan()
}

fn reservations_of(plan: &Plan) -> Vec<String> {
    let mut ids: Vec<String> = plan
        .node_claims
        .iter()
        .map(|c| {
            format!(
                "{}:{}",
                c.capacity_type,
                c.capacity_reservation_id.as_deref().unwrap_or("-")
            )
        })
        .collect();
    ids.sort();
    ids
}

#[test]
fn reservations_fill_first_and_no_further_than_their_free_counts() {
    let pool = pool("reserved, on-demand", ", availableInstanceCount: 2");
    let pods = pods(4, "");
    let plan = plan_at(&[&pool, &pods], None);
    assert_eq!(
        reservations_of(&plan),
        [
            "on-demand:-",
            "reserved:cr-block",
            "reserved:cr-odcr",
            "reserved:cr-odcr"
        ],
        "{:#?}",
        plan.unschedulable
    );
    let block = plan
        .node_claims
        .iter()
        .find(|c| c.capacity_reservation_id.as_deref() == Some("cr-block"))
        .unwrap();
    assert_eq!(block.zone, "us-east-1a");
    assert_eq!(
        block.labels[labels::CAPACITY_RESERVATION_TYPE],
        "capacity-block"
    );
    assert_eq!(block.labels[labels::CAPACITY_RESERVATION_ID], "cr-block");
    assert_eq!(block.labels[labels::CAPACITY_TYPE], "reserved");
    assert!(
        block
            .price_note
            .as_deref()
            .unwrap()
            .contains("reserved capacity")
    );
    let on_demand = plan
        .node_claims
        .iter()
        .find(|c| c.capacity_type == "on-demand")
        .unwrap();
    assert!(
        !on_demand
            .labels
            .contains_key(labels::CAPACITY_RESERVATION_ID)
    );
    // Reserved nodes cost next to nothing; the on-demand one its full price.
    assert!(plan.total_price_per_hour.nano_usd() < on_demand.price_per_hour.nano_usd() + 100_000);
    assert!(on_demand.price_per_hour.nano_usd() > 10_000_000_000);
}

#[test]
fn a_nodepool_that_does_not_allow_reserved_capacity_leaves_reservations_alone() {
    let pool = pool("on-demand", ", availableInstanceCount: 2");
    let plan = plan_at(&[&pool, &pods(2, "")], None);
    assert_eq!(reservations_of(&plan), ["on-demand:-", "on-demand:-"]);
}

#[test]
fn a_pod_can_ask_for_a_capacity_block_and_waits_when_it_is_taken() {
    let pool = pool("reserved, on-demand", "");
    let selector =
        "nodeSelector: {karpenter.k8s.aws/capacity-reservation-type: capacity-block}\n  ";
    let plan = plan_at(&[&pool, &pods(2, selector)], None);
    // One block instance: one pod gets it, the other cannot be served by anything else.
    assert_eq!(reservations_of(&plan), ["reserved:cr-block"]);
    assert_eq!(plan.unschedulable.len(), 1, "{:#?}", plan.unschedulable);
}

#[test]
fn a_status_without_counts_offers_one_instance_per_reservation() {
    let pool = pool("reserved", "");
    let plan = plan_at(&[&pool, &pods(3, "")], None);
    assert_eq!(
        reservations_of(&plan),
        ["reserved:cr-block", "reserved:cr-odcr"]
    );
    assert_eq!(plan.unschedulable.len(), 1);
}

#[test]
fn nodeclaims_still_launching_hold_their_reservation() {
    let pool = pool("reserved, on-demand", ", availableInstanceCount: 1");
    let launching = r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: train-abc
  labels: {karpenter.sh/nodepool: train, node.kubernetes.io/instance-type: p5.48xlarge, karpenter.sh/capacity-type: reserved,
           karpenter.k8s.aws/capacity-reservation-id: cr-odcr, topology.kubernetes.io/zone: us-east-1b}
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: train}
  requirements: []
"#;
    let plan = plan_at(&[&pool, launching, &pods(1, "")], None);
    // The NodeClaim has no instance yet, so it takes cr-odcr's one free place: the new pod
    // gets the Capacity Block (or waits for the launching node, which it fits).
    assert!(
        !reservations_of(&plan).contains(&"reserved:cr-odcr".to_string()),
        "{:?}",
        reservations_of(&plan)
    );
}

#[test]
fn a_capacity_block_takes_no_nodes_from_forty_minutes_before_its_end() {
    let pool = pool("reserved", ", availableInstanceCount: 0");
    let before = plan_at(&[&pool, &pods(1, "")], Some("2026-12-02T11:19:00Z"));
    assert_eq!(reservations_of(&before), ["reserved:cr-block"]);
    let draining = plan_at(&[&pool, &pods(1, "")], Some("2026-12-02T11:20:00Z"));
    assert!(
        draining.node_claims.is_empty(),
        "{:?}",
        reservations_of(&draining)
    );
    assert_eq!(draining.unschedulable.len(), 1);
}
