//! Node repair through the controller: the learning lab's two GPU nodes, one of which reports
//! its GPUs failed (`AcceleratedHardwareReady: False`, as the EKS node monitoring agent does).
//! With Karpenter's `nodeRepair` gate on, the node is replaced once the condition has held for
//! 10 minutes, and its pods run again elsewhere; not before, not with the gate off, and not when
//! too many of the NodePool's nodes are broken at once.

use crate::common;

use std::collections::BTreeMap;

use joiner_controller::clock::{Clock, ManualClock};
use joiner_controller::store::{ClusterStore, InMemoryCluster};
use joiner_controller::{Controller, RebootPhase, StepReport};
use joiner_model::api::NodeClaim;
use joiner_model::feature_gates::FeatureGates;
use joiner_model::wellknown::{DisruptionAction, DisruptionReason};
use joiner_simulate::SimulatedCloud;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

type Ctl<'a> = Controller<&'a InMemoryCluster, &'a SimulatedCloud, ManualClock>;

struct Lab {
    world: common::World,
    /// Pods their Deployment recreates when they go.
    workload: BTreeMap<String, Pod>,
}

impl Lab {
    /// The learning lab with four pods on two nodes, never consolidated, repair on or off.
    fn new(repair: bool) -> Lab {
        Lab::with(repair, false)
    }

    /// As [`Lab::new`], with `rebootForRepair` on or off.
    fn with(repair: bool, reboot: bool) -> Lab {
        let mut m = joiner_test_support::load_example("time-slicing-learning-lab");
        for d in &mut m.deployments {
            d.object.spec.replicas = Some(4);
        }
        let mut world = common::World::new(&m);
        let mut warnings = Vec::new();
        world.config.settings.feature_gates = FeatureGates::from_values(
            "settings.featureGates",
            &[("nodeRepair".to_string(), repair)].into(),
            &mut warnings,
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        world.config.settings.reboot_for_repair = reboot;
        let mut pool = world.node_pool();
        pool.spec.disruption.consolidate_after = "Never".into();
        world.store.update(&pool).expect("update");
        Lab {
            workload: world.pods_by_key(),
            world,
        }
    }

    fn controller(&self) -> Ctl<'_> {
        Controller::new(
            &self.world.store,
            &self.world.cloud,
            self.world.clock.clone(),
            self.world.config.clone(),
        )
    }

    /// Runs the cluster and the controller for `seconds`, a step a second.
    fn run(&self, c: &mut Ctl<'_>, seconds: u64) -> Vec<StepReport> {
        (0..seconds)
            .map(|_| {
                self.world.before_step(&self.workload);
                let r = c.step();
                self.world.tick();
                r
            })
            .collect()
    }

    /// The names of the lab's Nodes.
    fn nodes(&self) -> Vec<String> {
        self.world
            .store
            .list::<Node>()
            .expect("nodes")
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect()
    }

    /// The node's GPUs fail now, as the node monitoring agent reports it.
    fn fail_gpus(&self, node: &str) {
        self.fail_gpus_with(node, "NvidiaXID79Error");
    }

    /// The node's GPUs fail now with this reason (`NvidiaXID119Error`), or fail again: a
    /// condition already `False` keeps its transition time, as the agent leaves it.
    fn fail_gpus_with(&self, node: &str, reason: &str) {
        let mut n = self
            .world
            .store
            .get::<Node>(None, node)
            .expect("get")
            .expect("the node");
        let conditions = n
            .status
            .get_or_insert_with(Default::default)
            .conditions
            .get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != "AcceleratedHardwareReady" || c.status == "False");
        if conditions
            .iter()
            .all(|c| c.type_ != "AcceleratedHardwareReady")
        {
            conditions.push(NodeCondition {
                type_: "AcceleratedHardwareReady".into(),
                status: "False".into(),
                reason: Some(reason.into()),
                last_transition_time: Some(Time(self.world.clock.now())),
                ..NodeCondition::default()
            });
        }
        self.world.store.update(&n).expect("update the node");
    }

    /// The node's GPUs report healthy again.
    fn mend_gpus(&self, node: &str) {
        let mut n = self
            .world
            .store
            .get::<Node>(None, node)
            .expect("get")
            .expect("the node");
        if let Some(cs) = n.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            cs.retain(|c| c.type_ != "AcceleratedHardwareReady");
        }
        self.world.store.update(&n).expect("update the node");
    }

    /// The NodeClaim of a node.
    fn claim_of(&self, node: &str) -> NodeClaim {
        self.world
            .live_claims()
            .into_iter()
            .find(|c| c.status.node_name.as_deref() == Some(node))
            .expect("the node's NodeClaim")
    }

    /// The instance id of a node.
    fn instance_of(&self, node: &str) -> String {
        let claim = self.claim_of(node);
        let provider = claim.status.provider_id.as_deref().expect("a provider id");
        provider.rsplit('/').next().expect("an id").to_string()
    }
}

fn repairs(reports: &[StepReport]) -> Vec<&String> {
    reports
        .iter()
        .flat_map(|r| &r.disruption)
        .filter(|e| {
            e.action == DisruptionAction::Decided
                && e.reason.reason() == Some(DisruptionReason::Unhealthy)
        })
        .flat_map(|e| &e.node_claims)
        .collect()
}

fn settled(repair: bool) -> (Lab, String) {
    let lab = Lab::new(repair);
    let mut c = lab.controller();
    lab.run(&mut c, 120);
    lab.world.assert_nothing_pending();
    let nodes = lab.nodes();
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    let node = nodes[0].clone();
    (lab, node)
}

#[test]
fn a_node_whose_gpus_failed_is_replaced_after_ten_minutes_and_its_pods_run_again() {
    let (lab, node) = settled(true);
    let mut c = lab.controller();
    let claim = lab
        .world
        .live_claims()
        .into_iter()
        .find(|c| c.status.node_name.as_deref() == Some(node.as_str()))
        .expect("the node's NodeClaim");
    lab.fail_gpus(&node);
    // Karpenter's AWS policy tolerates a GPU fault for 10 minutes.
    let early = lab.run(&mut c, 9 * 60 + 50);
    assert!(repairs(&early).is_empty(), "repaired before its toleration");
    assert!(
        lab.world
            .live_claims()
            .iter()
            .any(|c| c.name() == claim.name() && !c.is_deleting())
    );
    let later = lab.run(&mut c, 20);
    assert_eq!(repairs(&later), [&claim.name().to_string()]);
    let repaired: Vec<_> = later.iter().flat_map(|r| &r.repaired).collect();
    assert_eq!(repaired.len(), 1);
    assert_eq!(repaired[0].condition, "AcceleratedHardwareReady");
    // The node drains and goes; a new one serves its pods.
    lab.run(&mut c, 300);
    assert!(
        !lab.nodes().contains(&node),
        "the broken node is still there"
    );
    lab.world.assert_nothing_pending();
    assert_eq!(lab.world.live_claims().len(), 2);
    lab.world.assert_one_instance_per_claim();
}

#[test]
fn with_the_gate_off_a_broken_node_is_left_for_a_person() {
    let (lab, node) = settled(false);
    let mut c = lab.controller();
    lab.fail_gpus(&node);
    let reports = lab.run(&mut c, 15 * 60);
    assert!(repairs(&reports).is_empty());
    assert!(lab.nodes().contains(&node));
}

#[test]
fn when_more_than_a_fifth_of_the_pool_is_broken_nothing_is_repaired_and_each_says_why() {
    let (lab, _) = settled(true);
    let mut c = lab.controller();
    for node in lab.nodes() {
        lab.fail_gpus(&node);
    }
    let reports = lab.run(&mut c, 15 * 60);
    assert!(repairs(&reports).is_empty(), "a broken pool was recycled");
    assert_eq!(lab.nodes().len(), 2);
    let blocked: Vec<&(String, String)> = reports
        .last()
        .map(|r| r.repair_blocked.iter().collect())
        .unwrap_or_default();
    assert_eq!(blocked.len(), 2, "{blocked:?}");
    assert!(
        blocked[0]
            .1
            .contains("2 of NodePool g4-nodepool's 2 nodes are unhealthy"),
        "{blocked:?}"
    );
}

fn reboots(reports: &[StepReport], phase: RebootPhase) -> usize {
    reports
        .iter()
        .flat_map(|r| &r.reboots)
        .filter(|r| r.phase == phase)
        .count()
}

fn settled_with_reboots() -> (Lab, String) {
    let lab = Lab::with(true, true);
    let mut c = lab.controller();
    lab.run(&mut c, 120);
    lab.world.assert_nothing_pending();
    let node = lab.nodes()[0].clone();
    (lab, node)
}

#[test]
fn a_gpu_fault_a_reboot_clears_is_rebooted_in_place_not_replaced() {
    let (lab, node) = settled_with_reboots();
    let mut c = lab.controller();
    let instance = lab.instance_of(&node);
    lab.fail_gpus_with(&node, "NvidiaXID119Error");
    let early = lab.run(&mut c, 9 * 60 + 50);
    assert_eq!(
        reboots(&early, RebootPhase::Requested),
        0,
        "before its toleration"
    );
    // At 10 minutes: tainted, drained (nothing holds the lab's pods), rebooted.
    let reports = lab.run(&mut c, 60);
    assert_eq!(reboots(&reports, RebootPhase::Requested), 1);
    assert_eq!(reboots(&reports, RebootPhase::Issued), 1);
    assert_eq!(lab.world.cloud.reboots_of(&instance).len(), 1);
    assert!(repairs(&reports).is_empty(), "replaced instead of rebooted");
    let tainted = |lab: &Lab| {
        lab.world
            .store
            .get::<Node>(None, &node)
            .expect("get")
            .and_then(|n| n.spec?.taints)
            .is_some_and(|ts| ts.iter().any(|t| t.key == "karpenter.sh/rebooting"))
    };
    assert!(tainted(&lab), "no new pods while it reboots");
    // The reboot mends the GPU; the node comes back Ready on a new boot.
    lab.mend_gpus(&node);
    let reports = lab.run(&mut c, 5 * 60);
    assert_eq!(reboots(&reports, RebootPhase::Succeeded), 1);
    assert!(!tainted(&lab));
    let claim = lab.claim_of(&node);
    let cond = claim.condition("Rebooting").expect("Rebooting");
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", "RebootSucceeded")
    );
    // Healthy from then on: no further repair.
    let reports = lab.run(&mut c, 20 * 60);
    assert!(repairs(&reports).is_empty());
    assert!(lab.nodes().contains(&node));
    lab.world.assert_nothing_pending();
    lab.world.assert_one_instance_per_claim();
}

#[test]
fn a_gpu_a_reboot_does_not_mend_is_rebooted_twice_then_replaced() {
    let (lab, node) = settled_with_reboots();
    let mut c = lab.controller();
    let instance = lab.instance_of(&node);
    let claim = lab.claim_of(&node).name().to_string();
    lab.fail_gpus_with(&node, "NvidiaXID119Error");
    // Reboot at 10m, back 3m later; judged again 10m after the reboot's end: a second reboot;
    // after that one, the node is replaced.
    let mut all = Vec::new();
    for _ in 0..60 {
        all.extend(lab.run(&mut c, 60));
        if !repairs(&all).is_empty() {
            break;
        }
    }
    assert_eq!(lab.world.cloud.reboots_of(&instance).len(), 2);
    assert_eq!(reboots(&all, RebootPhase::Succeeded), 2);
    assert_eq!(repairs(&all), [&claim]);
    let reboots_at = lab.world.cloud.reboots_of(&instance);
    let gap = reboots_at[1].duration_since(reboots_at[0]).as_secs();
    // The second waits the reboot (3m) and a full toleration (10m) after the first.
    assert!((13 * 60..14 * 60).contains(&gap), "{gap} s between reboots");
    lab.run(&mut c, 300);
    assert!(!lab.nodes().contains(&node));
    lab.world.assert_nothing_pending();
    lab.world.assert_one_instance_per_claim();
}

#[test]
fn a_fatal_gpu_fault_is_replaced_without_a_reboot() {
    let (lab, node) = settled_with_reboots();
    let mut c = lab.controller();
    let instance = lab.instance_of(&node);
    lab.fail_gpus(&node);
    let reports = lab.run(&mut c, 10 * 60 + 20);
    assert_eq!(repairs(&reports).len(), 1);
    assert!(lab.world.cloud.reboots_of(&instance).is_empty());
}

#[test]
fn the_safety_threshold_holds_back_reboots_too() {
    let (lab, _) = settled_with_reboots();
    let mut c = lab.controller();
    for node in lab.nodes() {
        lab.fail_gpus_with(&node, "NvidiaXID119Error");
    }
    let reports = lab.run(&mut c, 15 * 60);
    assert_eq!(reboots(&reports, RebootPhase::Requested), 0);
    assert!(!reports.last().expect("a step").repair_blocked.is_empty());
}

/// A PodDisruptionBudget letting no lab pod go.
fn hold_every_pod(lab: &Lab) {
    let pdb: k8s_openapi::api::policy::v1::PodDisruptionBudget =
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "lab", "namespace": "default"},
            "spec": {"minAvailable": 4, "selector": {"matchLabels": {"app": "learning-lab"}}},
        }))
        .expect("a PDB");
    lab.world.store.create(&pdb).expect("create the PDB");
}

fn forced(reports: &[StepReport]) -> Vec<&String> {
    reports
        .iter()
        .flat_map(|r| &r.disruption)
        .filter(|e| e.action == DisruptionAction::Forced)
        .flat_map(|e| &e.detail)
        .collect()
}

#[test]
fn a_replaced_node_drains_as_its_budgets_allow_for_ten_minutes_then_its_pods_go() {
    let (lab, node) = settled(true);
    hold_every_pod(&lab);
    let mut c = lab.controller();
    lab.fail_gpus(&node);
    let decided = lab.run(&mut c, 10 * 60 + 20);
    assert_eq!(repairs(&decided).len(), 1);
    // The budget refuses every eviction: the pods stay for the policy's 10 minutes.
    let held = lab.run(&mut c, 9 * 60);
    assert!(forced(&held).is_empty(), "deleted before the drain's bound");
    assert!(
        held.iter().any(|r| !r.eviction_refused.is_empty()),
        "the drain asked the Eviction API"
    );
    let bound = lab.run(&mut c, 90);
    assert_eq!(
        forced(&bound).len(),
        3,
        "the broken node's three pods go at the bound"
    );
    lab.run(&mut c, 300);
    assert!(!lab.nodes().contains(&node));
    lab.world.assert_nothing_pending();
}

#[test]
fn a_node_marked_do_not_repair_is_left_and_says_why() {
    let (lab, node) = settled(true);
    let mut n = lab
        .world
        .store
        .get::<Node>(None, &node)
        .expect("get")
        .expect("the node");
    n.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("karpenter.sh/do-not-repair".into(), "true".into());
    lab.world.store.update(&n).expect("annotate");
    let mut c = lab.controller();
    lab.fail_gpus(&node);
    let reports = lab.run(&mut c, 15 * 60);
    assert!(repairs(&reports).is_empty());
    let blocked = &reports.last().expect("a step").repair_blocked;
    assert!(
        blocked
            .iter()
            .any(|(_, why)| why.contains("karpenter.sh/do-not-repair")),
        "{blocked:?}"
    );
}

#[test]
fn a_budget_for_unhealthy_holds_repair_back_and_says_so() {
    let (lab, node) = settled(true);
    let mut pool = lab.world.node_pool();
    pool.spec.disruption.budgets = vec![
        serde_json::from_value(serde_json::json!({
            "nodes": "0", "reasons": ["Unhealthy"],
        }))
        .expect("a budget"),
    ];
    lab.world.store.update(&pool).expect("update the pool");
    let mut c = lab.controller();
    lab.fail_gpus(&node);
    let reports = lab.run(&mut c, 15 * 60);
    assert!(repairs(&reports).is_empty(), "repaired past a budget of 0");
    let blocked = &reports.last().expect("a step").repair_blocked;
    assert!(
        blocked
            .iter()
            .any(|(_, why)| why.contains("disruption budget for Unhealthy")),
        "{blocked:?}"
    );
    // A budget for other reasons does not hold repair.
    let mut pool = lab.world.node_pool();
    pool.spec.disruption.budgets = vec![
        serde_json::from_value(serde_json::json!({
            "nodes": "0", "reasons": ["Drifted", "Underutilized", "Empty"],
        }))
        .expect("a budget"),
    ];
    lab.world.store.update(&pool).expect("update the pool");
    let reports = lab.run(&mut c, 60);
    assert_eq!(repairs(&reports).len(), 1);
}
