//! The disruption step on the learning-lab example: an in-memory cluster, the simulated cloud
//! and kubelet, a scheduler binding pods, and Deployments recreating evicted pods.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use joiner_engine::catalog::Catalog;
use joiner_model::Manifests;
use joiner_model::api::NodePool;
use joiner_model::settings::Settings;
use k8s_openapi::api::core::v1::Pod;

use super::simulated::{collect_orphans, schedule_pending};
use super::*;
use crate::clock::{Clock, ManualClock};
use crate::cloud::SimulatedCloud;
use crate::kubelet::SimulatedKubelet;
use crate::store::InMemoryCluster;
use crate::{Config, Controller, StepReport};

fn learning_lab(replicas: i32) -> Manifests {
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/time-slicing-learning-lab");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("example directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut m = Manifests::default();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("file");
        for (origin, doc) in
            joiner_model::parse_documents(&f.display().to_string(), &text).expect("YAML")
        {
            m.add_document(origin, doc).expect("object");
        }
    }
    m.finish();
    for d in &mut m.deployments {
        d.object.spec.as_mut().expect("spec").replicas = Some(replicas);
    }
    m
}

struct World {
    clock: ManualClock,
    store: InMemoryCluster,
    cloud: SimulatedCloud,
    kubelet: SimulatedKubelet,
    config: Config,
    /// Pods their Deployment recreates when they go.
    workload: std::cell::RefCell<BTreeMap<String, Pod>>,
}

impl World {
    fn new(replicas: i32, change: impl Fn(&mut NodePool)) -> World {
        let clock = ManualClock::new();
        let config = Config::new(Settings {
            cluster_name: Some("lab".into()),
            ..Settings::default()
        })
        .expect("config");
        let catalog = Catalog::builtin(&config.settings.region, &config.settings.zones);
        let world = World {
            store: InMemoryCluster::new(clock.clone()),
            cloud: SimulatedCloud::new(&catalog, clock.clone()),
            kubelet: SimulatedKubelet::default(),
            config,
            clock,
            workload: Default::default(),
        };
        world.store.load(&learning_lab(replicas)).expect("load");
        let mut pool: NodePool = world
            .store
            .get(None, "g4-nodepool")
            .expect("get")
            .expect("pool");
        change(&mut pool);
        world.store.update(&pool).expect("update");
        *world.workload.borrow_mut() = world
            .store
            .list::<Pod>()
            .expect("pods")
            .into_iter()
            .map(|p| (pod_key(&p), p))
            .collect();
        world
    }

    /// Runs `seconds` one-second ticks; returns every step's report.
    fn run(
        &self,
        controller: &mut Controller<&InMemoryCluster, &SimulatedCloud, ManualClock>,
        seconds: u64,
    ) -> Vec<StepReport> {
        let mut reports = Vec::new();
        for _ in 0..seconds {
            for (key, pod) in self.workload.borrow().iter() {
                let (ns, name) = key.split_once('/').expect("key");
                if self
                    .store
                    .get::<Pod>(Some(ns), name)
                    .expect("get")
                    .is_none()
                {
                    let mut fresh = pod.clone();
                    fresh.metadata.resource_version = None;
                    self.store.create(&fresh).expect("recreate");
                }
            }
            collect_orphans(&self.store).expect("orphans");
            schedule_pending(&self.store, &self.config).expect("schedule");
            reports.push(controller.step());
            self.kubelet
                .step(&self.store, &self.cloud, self.clock.now())
                .expect("kubelet");
            self.clock.advance(Duration::from_secs(1));
        }
        reports
    }

    fn controller(&self) -> Controller<&InMemoryCluster, &SimulatedCloud, ManualClock> {
        Controller::new(
            &self.store,
            &self.cloud,
            self.clock.clone(),
            self.config.clone(),
        )
    }

    fn live(&self) -> Vec<NodeClaim> {
        self.store
            .list::<NodeClaim>()
            .expect("list")
            .into_iter()
            .filter(|c| !c.is_deleting())
            .collect()
    }

    /// Deletes pods and stops recreating them (the Deployment scaled down).
    fn scale_away(&self, keep: impl Fn(&str) -> bool) {
        self.workload.borrow_mut().retain(|k, _| keep(k));
        for p in self.store.list::<Pod>().expect("pods") {
            if !keep(&pod_key(&p)) {
                self.store
                    .delete::<Pod>(
                        p.metadata.namespace.as_deref(),
                        p.metadata.name.as_deref().unwrap_or_default(),
                    )
                    .expect("delete");
            }
        }
    }
}

fn events<'a>(
    reports: &'a [StepReport],
    action: &'a str,
) -> impl Iterator<Item = &'a DisruptionEvent> {
    reports
        .iter()
        .flat_map(|r| &r.disruption)
        .filter(move |e| e.action == action)
}

fn settled(world: &World, nodes: usize) {
    let live = world.live();
    assert_eq!(
        live.len(),
        nodes,
        "{:?}",
        live.iter().map(NodeClaim::name).collect::<Vec<_>>()
    );
    assert!(live.iter().all(|c| c.is_true(conditions::INITIALIZED)));
    assert!(
        !world
            .store
            .list::<Pod>()
            .expect("pods")
            .iter()
            .any(is_pending)
    );
}

#[test]
fn empty_nodes_go_after_consolidate_after() {
    let world = World::new(4, |p| p.spec.disruption.consolidate_after = "5m".into());
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 2);
    world.scale_away(|_| false);
    // Not before consolidateAfter.
    let early = world.run(&mut c, 240);
    assert_eq!(events(&early, "deleted").count(), 0);
    assert_eq!(world.live().len(), 2);
    let later = world.run(&mut c, 300);
    let deleted: Vec<_> = events(&later, "deleted").collect();
    assert_eq!(deleted.len(), 2, "{deleted:?}");
    assert!(deleted.iter().all(|e| e.reason == "Empty"));
    assert!(world.live().is_empty());
    let running = world
        .cloud
        .all_instances()
        .into_iter()
        .filter(|i| i.state == crate::cloud::InstanceState::Running)
        .count();
    assert_eq!(running, 0, "the finalizer terminated the instances");
}

#[test]
fn do_not_disrupt_pods_keep_their_node() {
    let world = World::new(4, |_| {});
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 2);
    // The lone pod's node (the one with one pod) keeps it; the other node empties.
    let pods = world.store.list::<Pod>().expect("pods");
    let mut per_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in &pods {
        let n = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .expect("bound");
        per_node.entry(n).or_default().push(pod_key(p));
    }
    let (lone_node, lone) = per_node
        .iter()
        .find(|(_, ps)| ps.len() == 1)
        .map(|(n, ps)| (n.clone(), ps[0].clone()))
        .expect("a node with one pod");
    let mut pod: Pod = world
        .store
        .get(Some("default"), lone.split_once('/').expect("key").1)
        .expect("get")
        .expect("pod");
    pod.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(DO_NOT_DISRUPT.into(), "true".into());
    world.store.update(&pod).expect("annotate");
    // Keep only the do-not-disrupt pod and one pod of the full node: moving the do-not-disrupt
    // pod would save a node, but it may not move; the other node is drained instead.
    let other = per_node
        .iter()
        .find(|(n, _)| **n != lone_node)
        .map(|(_, ps)| ps[0].clone())
        .expect("other");
    let keep = [lone.clone(), other.clone()];
    world.scale_away(|k| keep.iter().any(|x| x == k));
    let reports = world.run(&mut c, 600);
    settled(&world, 1);
    let node_of = |key: &str| -> String {
        let pod: Pod = world
            .store
            .get(Some("default"), key.split_once('/').expect("key").1)
            .expect("get")
            .expect("pod");
        pod.spec.and_then(|s| s.node_name).expect("bound")
    };
    assert_eq!(
        node_of(&lone),
        lone_node,
        "the do-not-disrupt pod never moved"
    );
    assert_eq!(node_of(&other), lone_node);
    let evicted: Vec<String> = events(&reports, "evicted")
        .flat_map(|e| e.detail.clone())
        .collect();
    assert!(!evicted.contains(&lone), "{evicted:?}");
}

#[test]
fn expiry_launches_the_replacement_before_draining() {
    let world = World::new(4, |p| {
        p.spec.template.spec.expire_after = "30m".into();
        p.spec.disruption.consolidate_after = "Never".into();
    });
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 2);
    let before: Vec<String> = world.live().iter().map(|n| n.name().to_string()).collect();
    let mut replaced_at = None;
    let mut evicted_at = None;
    let mut replacement = String::new();
    let mut seconds = 120u64;
    while seconds < 1860 + 600 && evicted_at.is_none() {
        let r = world.run(&mut c, 1);
        seconds += 1;
        if let Some(e) = events(&r, "replacing").next() {
            assert_eq!(e.reason, "Expired");
            replacement = e.detail[0].clone();
            replaced_at.get_or_insert(seconds);
            // The old node still has its pods while the replacement starts.
            let old = world
                .store
                .get::<NodeClaim>(None, &e.node_claims[0])
                .expect("get")
                .expect("old claim");
            let node = old.status.node_name.clone().expect("node");
            let pods = world.store.list::<Pod>().expect("pods");
            assert!(bound_to(&pods, &node).count() > 0);
        }
        if events(&r, "evicted").next().is_some() {
            evicted_at = Some(seconds);
            let fresh = world
                .store
                .get::<NodeClaim>(None, &replacement)
                .expect("get")
                .expect("replacement");
            assert!(
                fresh.is_true(conditions::INITIALIZED),
                "drained only once the replacement is up"
            );
        }
    }
    let (replaced_at, evicted_at) = (replaced_at.expect("replaced"), evicted_at.expect("evicted"));
    assert!(
        replaced_at >= 1800 && evicted_at > replaced_at + 30,
        "{replaced_at} {evicted_at}"
    );
    world.run(&mut c, 120);
    settled(&world, 2);
    let after: Vec<String> = world.live().iter().map(|n| n.name().to_string()).collect();
    assert_ne!(before, after);
}

#[test]
fn budgets_limit_how_many_nodes_go_at_once() {
    let world = World::new(12, |p| {
        p.spec.disruption.budgets[0].nodes = "2".into();
    });
    let mut c = world.controller();
    world.run(&mut c, 180);
    settled(&world, 4);
    world.scale_away(|_| false);
    let reports = world.run(&mut c, 120);
    assert!(world.live().is_empty());
    let per_step: Vec<usize> = reports
        .iter()
        .map(|r| {
            r.disruption
                .iter()
                .filter(|e| e.action == "deleted")
                .count()
        })
        .filter(|n| *n > 0)
        .collect();
    assert_eq!(per_step, vec![2, 2], "deletions per step");
    // A percentage: 10% of 4 nodes rounds up to one.
    let pool = NodePool::default_for_test();
    assert_eq!(allowed_disruptions(&pool, "Empty", 4), 1);
    assert_eq!(allowed_disruptions(&pool, "Empty", 25), 3);
}

trait TestPool {
    fn default_for_test() -> NodePool;
}

impl TestPool for NodePool {
    fn default_for_test() -> NodePool {
        let world = World::new(0, |_| {});
        world
            .store
            .get(None, "g4-nodepool")
            .expect("get")
            .expect("pool")
    }
}

#[test]
fn pod_disruption_budgets_pace_the_drain() {
    use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    let world = World::new(4, |p| {
        p.spec.template.spec.expire_after = "30m".into();
        p.spec.disruption.consolidate_after = "Never".into();
    });
    world
        .store
        .create(&PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some("lab".into()),
                namespace: Some("default".into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                max_unavailable: Some(IntOrString::Int(1)),
                selector: Some(LabelSelector {
                    match_labels: Some([("app".to_string(), "learning-lab".to_string())].into()),
                    ..LabelSelector::default()
                }),
                ..PodDisruptionBudgetSpec::default()
            }),
            status: None,
        })
        .expect("pdb");
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 2);
    let reports = world.run(&mut c, 1800);
    let evictions: Vec<&DisruptionEvent> = events(&reports, "evicted").collect();
    assert!(evictions.len() >= 3, "{evictions:?}");
    assert!(
        evictions.iter().all(|e| e.detail.len() == 1),
        "one pod at a time: {evictions:?}"
    );
    // Never more than one lab pod missing or pending at any step.
    assert!(events(&reports, "deleted").count() >= 1);
    world.run(&mut c, 120);
    settled(&world, 2);
}

fn allow_types(pool: &mut NodePool, types: &[&str]) {
    for r in &mut pool.spec.template.spec.requirements {
        if r.key == labels::INSTANCE_TYPE {
            r.values = types.iter().map(|t| t.to_string()).collect();
        }
    }
}

#[test]
fn a_cheaper_replacement_is_up_before_the_old_node_drains() {
    // One lab pod on a g4dn.2xlarge (the only type allowed at first).
    let world = World::new(1, |p| {
        allow_types(p, &["g4dn.2xlarge"]);
        p.spec.disruption.consolidate_after = "1m".into();
    });
    let mut c = world.controller();
    world.run(&mut c, 120);
    settled(&world, 1);
    let old = world.live()[0].clone();
    assert_eq!(old.label(labels::INSTANCE_TYPE), Some("g4dn.2xlarge"));
    // The pool now allows the cheaper g4dn.xlarge: consolidation replaces the node.
    let mut pool: NodePool = world
        .store
        .get(None, "g4-nodepool")
        .expect("get")
        .expect("pool");
    allow_types(&mut pool, &["g4dn.xlarge", "g4dn.2xlarge"]);
    world.store.update(&pool).expect("update");
    let reports = world.run(&mut c, 300);
    let replacing: Vec<_> = events(&reports, "replacing").collect();
    assert_eq!(replacing.len(), 1, "{replacing:?}");
    assert_eq!(replacing[0].reason, "Underutilized");
    assert_eq!(replacing[0].node_claims, vec![old.name().to_string()]);
    let new = replacing[0].detail[0].clone();
    let step_of = |pred: &dyn Fn(&StepReport) -> bool| reports.iter().position(pred);
    let replaced =
        step_of(&|r| r.disruption.iter().any(|e| e.action == "replacing")).expect("replacing");
    let initialized = step_of(&|r| r.initialized.contains(&new)).expect("initialized");
    let evicted =
        step_of(&|r| r.disruption.iter().any(|e| e.action == "evicted")).expect("evicted");
    assert!(
        replaced < initialized && initialized <= evicted,
        "{replaced} {initialized} {evicted}"
    );
    settled(&world, 1);
    let now = world.live()[0].clone();
    assert_eq!(now.name(), new);
    assert_eq!(now.label(labels::INSTANCE_TYPE), Some("g4dn.xlarge"));
}
