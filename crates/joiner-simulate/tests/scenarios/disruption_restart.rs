//! The restart property for disruption: a controller crash at any write of a drift replacement
//! or of an interruption (before the write, or after it took effect unseen) never launches a
//! second replacement, never leaks an instance, and the old nodes always go in the end.
//!
//! The learning lab settles on two nodes; then either its NodePool's template changes (both
//! nodes drift and are replaced one at a time) or a spot interruption warning arrives for one
//! node. A clean run fixes which writes belong to that phase; each of them is then crashed at,
//! before and after.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::common::{Crash, Fuse, World, fused_controller, instance_of};
use joiner_controller::clock::Clock;
use joiner_controller::cloud::InstanceState;
use joiner_controller::interruption::messages::spot_interruption_warning;
use joiner_controller::store::ClusterStore;
use joiner_model::api::nodeclaim::{NodeClaim, conditions};
use joiner_simulate::SimulatedInterruptionQueue;
use k8s_openapi::api::core::v1::Pod;

/// Settling (launch, registration, device plugin) takes about a minute.
const SETTLE: usize = 90;
/// Long enough for two drift replacements one after the other, or an interruption, and the
/// garbage-collection grace after a crash.
const STEPS: usize = SETTLE + 420;

enum Phase {
    Drift,
    Interruption,
}

struct Run {
    /// Writes made before the phase began.
    before_phase: u64,
    total: u64,
    original: Vec<NodeClaim>,
}

/// Runs the lab through the phase with the controller crashing where `fuse` says. The
/// Deployment recreates evicted pods and a scheduler binds pending ones.
fn run(world: &World, fuse: &Fuse, phase: &Phase) -> Run {
    let queue = SimulatedInterruptionQueue::new();
    let new_controller = || {
        let mut c = fused_controller(world, fuse);
        c.set_interruption_queue(Box::new(queue.clone()));
        c
    };
    let workload = world.pods_by_key();
    let mut controller = new_controller();
    let mut before_phase = 0;
    let mut original = Vec::new();
    for step in 0..STEPS {
        if step == SETTLE {
            before_phase = fuse.writes();
            original = world.live_claims();
            assert_eq!(original.len(), 2, "settled");
            match phase {
                Phase::Drift => world.label_node_template("team", "ml"),
                Phase::Interruption => {
                    let id = instance_of(&original[0]);
                    world.cloud.reclaim_after(&id, Duration::from_secs(120));
                    queue.send(spot_interruption_warning(
                        "evt",
                        &id,
                        &world.clock.now().to_string(),
                    ));
                }
            }
        }
        world.before_step(&workload);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| controller.step()));
        if let Err(payload) = result {
            assert!(payload.is::<Crash>(), "a real panic, not a simulated crash");
            controller = new_controller();
        }
        world.assert_one_instance_per_claim();
        world.tick();
    }
    Run {
        before_phase,
        total: fuse.writes(),
        original,
    }
}

/// The end state: two initialized NodeClaims, none of the originals (drift) or not the
/// interrupted one, an instance each and no other, every lab pod bound, `instances_ever`
/// launched in all.
fn assert_done(world: &World, run: &Run, phase: &Phase, instances_ever: usize) {
    let live = world.live_claims();
    let names: Vec<&str> = live.iter().map(NodeClaim::name).collect();
    assert_eq!(live.len(), 2, "{names:?}");
    assert!(live.iter().all(|c| c.is_true(conditions::INITIALIZED)));
    let gone: Vec<&NodeClaim> = match phase {
        Phase::Drift => run.original.iter().collect(),
        Phase::Interruption => run.original.iter().take(1).collect(),
    };
    for old in gone {
        assert!(!names.contains(&old.name()), "{} still there", old.name());
        assert_eq!(
            world.instance_state(old),
            Some(InstanceState::Terminated),
            "the old instance is terminated"
        );
    }
    let running = world.running();
    assert_eq!(running.len(), 2, "{running:#?}");
    let owned: BTreeSet<String> = live
        .iter()
        .filter_map(|c| c.status.provider_id.clone())
        .collect();
    assert!(running.iter().all(|i| owned.contains(&i.provider_id())));
    assert_eq!(world.cloud.all_instances().len(), instances_ever);
    let pods = world.store.list::<Pod>().expect("pods");
    assert!(
        pods.iter()
            .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()),
        "every pod bound"
    );
}

fn crash_at_every_write_of(phase: Phase) {
    let world = World::learning_lab();
    let fuse = Fuse::new(BTreeMap::new());
    let clean = run(&world, &fuse, &phase);
    let instances_ever = world.cloud.all_instances().len();
    assert_done(&world, &clean, &phase, instances_ever);
    assert!(clean.total > clean.before_phase + 5);
    println!(
        "writes {}..{}, {instances_ever} instances",
        clean.before_phase, clean.total
    );
    for at in clean.before_phase + 1..=clean.total {
        for after in [false, true] {
            let world = World::learning_lab();
            let fuse = Fuse::new(BTreeMap::from([(at, after)]));
            let r = run(&world, &fuse, &phase);
            let when = if after { "after" } else { "before" };
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                assert_done(&world, &r, &phase, instances_ever)
            }))
            .unwrap_or_else(|_| {
                panic!(
                    "crash {when} write {at} ({}..{}) left a bad state",
                    clean.before_phase, clean.total
                )
            });
        }
    }
}

#[test]
fn a_crash_at_every_write_of_a_drift_replacement_is_harmless() {
    crash_at_every_write_of(Phase::Drift);
}

#[test]
fn a_crash_at_every_write_of_an_interruption_is_harmless() {
    crash_at_every_write_of(Phase::Interruption);
}
