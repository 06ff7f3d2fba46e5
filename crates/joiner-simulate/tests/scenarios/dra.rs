//! The controller end to end on the DRA examples: pending pods with ResourceClaims become
//! NodeClaims of the instance types each example's `EXPECTED.md` names, launched instances,
//! registered Nodes, and Initialized NodeClaims once every DRA driver the plan counted on
//! (`karpenter.sh/requested-dra-drivers`) has published its ResourceSlices. The simulated
//! kubelet publishes what the catalog's device templates predict; a driver that never
//! publishes keeps its NodeClaim from initializing (and launches nothing more). A controller
//! crash at any write of a DRA launch leaves no duplicate NodeClaim or instance.

use std::collections::{BTreeMap, BTreeSet};

use crate::common::{CLUSTER, Fuse, World, names, run_with_crashes};
use joiner_controller::Config;
use joiner_controller::StepReport;
use joiner_controller::clock::ManualClock;
use joiner_controller::store::{ClusterStore, InMemoryCluster};
use joiner_engine::catalog::Catalog;
use joiner_model::api::nodeclaim::{NodeClaim, conditions};
use joiner_model::settings::Settings;
use joiner_model::wellknown::{annotations, labels};
use joiner_simulate::{SimulatedCloud, SimulatedKubelet};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;

/// Launch (at once), registration (30 s), device plugin and drivers (10 s), initialization,
/// and time for a later batch to show that nothing more is launched.
const STEPS: usize = 90;

/// The example's `values.yaml` (DRA on), with the cluster's name.
fn config(name: &str) -> Config {
    let values = joiner_test_support::example_values(name);
    let (mut settings, _) = Settings::from_values(&values).expect("settings");
    assert!(
        !settings.ignore_dra_requests,
        "{name}: the example turns DRA on"
    );
    settings.cluster_name = Some(CLUSTER.to_string());
    Config::new(settings).expect("config")
}

fn world(name: &str, kubelet: SimulatedKubelet) -> World {
    let clock = ManualClock::new();
    let config = config(name);
    let catalog = Catalog::builtin(&config.settings.region, &config.settings.zones);
    let world = World {
        store: InMemoryCluster::new(clock.clone()),
        cloud: SimulatedCloud::new(&catalog, clock.clone()),
        kubelet,
        config,
        clock,
    };
    let manifests = joiner_test_support::load_example(name);
    world.store.load(&manifests).expect("load");
    world
}

/// What an example must end with.
struct Expected {
    example: &'static str,
    /// The instance type of every NodeClaim, sorted.
    instance_types: &'static [&'static str],
    /// The drivers every NodeClaim waits for.
    drivers: &'static [&'static str],
}

const EXAMPLES: &[Expected] = &[
    Expected {
        example: "dra-specific-gpu",
        instance_types: &["p5en.48xlarge"],
        drivers: &["gpu.nvidia.com"],
    },
    Expected {
        example: "dra-gpu-efa-aligned",
        instance_types: &["p5.4xlarge"],
        drivers: &["dra.net", "gpu.nvidia.com"],
    },
    Expected {
        example: "dra-shared-gpu",
        instance_types: &["g6.xlarge", "g6.xlarge"],
        drivers: &["gpu.nvidia.com"],
    },
];

fn requested_drivers(c: &NodeClaim) -> BTreeSet<String> {
    c.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::REQUESTED_DRA_DRIVERS))
        .map(|v| v.split(',').map(str::to_string).collect())
        .unwrap_or_default()
}

fn instance_types(claims: &[NodeClaim]) -> Vec<String> {
    let mut types: Vec<String> = claims
        .iter()
        .map(|c| {
            c.label(labels::INSTANCE_TYPE)
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    types.sort();
    types
}

fn errors(reports: &[StepReport]) -> Vec<String> {
    reports
        .iter()
        .flat_map(|r| r.errors.iter().map(ToString::to_string))
        .collect()
}

/// The settled state of an example: its NodeClaims (of the expected types, waiting for the
/// expected drivers) launched, registered and initialized, one instance each, their Nodes
/// initialized and carrying a complete pool of every requested driver.
fn assert_settled(world: &World, want: &Expected) {
    let e = want.example;
    let claims = world.live_claims();
    assert_eq!(
        instance_types(&claims),
        want.instance_types,
        "{e}: NodeClaims {:?}",
        names(&claims)
    );
    let slices = world.store.list::<ResourceSlice>().expect("slices");
    let nodes = world.store.list::<Node>().expect("nodes");
    for c in &claims {
        let drivers: Vec<String> = requested_drivers(c).into_iter().collect();
        assert_eq!(drivers, want.drivers, "{e}: {}", c.name());
        for t in [
            conditions::LAUNCHED,
            conditions::REGISTERED,
            conditions::INITIALIZED,
            conditions::READY,
        ] {
            assert!(c.is_true(t), "{e}: {} not {t}: {:?}", c.name(), c.status);
        }
        let node_name = c.status.node_name.clone().expect("a registered node");
        let node = nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(node_name.as_str()))
            .expect("the NodeClaim's node");
        let node_labels = node.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            node_labels.get(labels::INITIALIZED).map(String::as_str),
            Some("true"),
            "{e}: node {node_name}"
        );
        for driver in want.drivers {
            let published = slices.iter().any(|s| {
                s.spec.driver == *driver
                    && s.spec.node_name.as_deref() == Some(node_name.as_str())
                    && s.spec.devices.as_ref().is_some_and(|d| !d.is_empty())
            });
            assert!(published, "{e}: no {driver} slice on {node_name}");
        }
    }
    let running = world.running();
    assert_eq!(
        running.len(),
        want.instance_types.len(),
        "{e}: running instances {running:#?}"
    );
    assert_eq!(
        world.cloud.all_instances().len(),
        want.instance_types.len(),
        "{e}: instances ever launched"
    );
}

#[test]
fn dra_examples_become_initialized_nodes_of_the_expected_types() {
    for want in EXAMPLES {
        let world = world(want.example, SimulatedKubelet::default());
        let fuse = Fuse::new(BTreeMap::new());
        let reports = run_with_crashes(&world, &fuse, STEPS, |_, _| {});
        assert!(
            errors(&reports).is_empty(),
            "{}: {:?}",
            want.example,
            errors(&reports)
        );
        assert_settled(&world, want);
        // Once planned, every pod has its place: never unschedulable, and the batches after
        // the first (the nodes and their published devices now exist) create nothing.
        let first = reports
            .iter()
            .position(|r| !r.created.is_empty())
            .expect("a NodeClaim created");
        assert!(
            reports.iter().skip(first + 1).all(|r| r.created.is_empty()),
            "{}: more NodeClaims later",
            want.example
        );
        let unschedulable: Vec<_> = reports.iter().flat_map(|r| &r.unschedulable).collect();
        assert!(
            unschedulable.is_empty(),
            "{}: {unschedulable:?}",
            want.example
        );
        let initialized = reports.iter().flat_map(|r| &r.initialized).count();
        assert!(initialized >= want.instance_types.len(), "{}", want.example);
    }
}

#[test]
fn a_driver_that_never_publishes_keeps_the_node_uninitialized() {
    for (example, silent) in [
        ("dra-gpu-efa-aligned", "dra.net"),
        ("dra-specific-gpu", "gpu.nvidia.com"),
    ] {
        let kubelet = SimulatedKubelet {
            silent_dra_drivers: BTreeSet::from([silent.to_string()]),
            ..SimulatedKubelet::default()
        };
        let world = world(example, kubelet);
        let fuse = Fuse::new(BTreeMap::new());
        let reports = run_with_crashes(&world, &fuse, STEPS, |_, _| {});
        let claims = world.live_claims();
        assert_eq!(claims.len(), 1, "{example}: {:?}", names(&claims));
        let c = &claims[0];
        assert!(requested_drivers(c).contains(silent), "{example}");
        assert!(c.is_true(conditions::LAUNCHED), "{example}");
        assert!(c.is_true(conditions::REGISTERED), "{example}");
        assert!(
            !c.is_true(conditions::INITIALIZED),
            "{example}: initialized although {silent} never published"
        );
        // The node's other resources are all there: only the driver holds it back.
        let slices = world.store.list::<ResourceSlice>().expect("slices");
        assert!(slices.iter().all(|s| s.spec.driver != silent), "{example}");
        // Waiting is not a reason to launch again.
        assert_eq!(world.cloud.all_instances().len(), 1, "{example}");
        assert!(
            reports.iter().all(|r| r.initialized.is_empty()),
            "{example}"
        );
    }
}

/// Writes a crash-free run of `example` makes.
fn writes_in_a_clean_run(want: &Expected) -> u64 {
    let world = world(want.example, SimulatedKubelet::default());
    let fuse = Fuse::new(BTreeMap::new());
    run_with_crashes(&world, &fuse, STEPS, |_, _| {});
    assert_settled(&world, want);
    fuse.writes()
}

#[test]
fn a_crash_at_any_write_of_a_dra_launch_leaves_no_duplicate() {
    // The GPU+EFA example: one NodeClaim waiting on two drivers.
    let want = &EXAMPLES[1];
    let total = writes_in_a_clean_run(want);
    assert!(total >= 5, "the run makes {total} writes");
    for at in 1..=total + 2 {
        for after in [false, true] {
            let world = world(want.example, SimulatedKubelet::default());
            let fuse = Fuse::new(BTreeMap::from([(at, after)]));
            // `run_with_crashes` checks after every step: never two in-flight NodeClaims for
            // one need, never two instances for one NodeClaim.
            run_with_crashes(&world, &fuse, STEPS + 30, |_, _| {});
            let when = if after { "after" } else { "before" };
            assert!(
                at > total || fuse.crashes.get() == 1,
                "no crash {when} write {at}"
            );
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                assert_settled(&world, want)
            }))
            .unwrap_or_else(|_| panic!("crash {when} write {at} of {total} left a bad state"));
        }
    }
}
