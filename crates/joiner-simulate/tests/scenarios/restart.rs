//! The restart property: a controller crash anywhere (dropping the controller and building a
//! new one over the same store and cloud) never leaves two in-flight NodeClaims for one need,
//! never two instances for one NodeClaim, and, once garbage collection has run, never an
//! instance without a NodeClaim.
//!
//! A crash is injected at a write: every store create/update/delete and cloud launch/terminate
//! the controller makes is numbered, and the crash happens either just before the write or just
//! after it took effect (the controller never sees the answer: the case where an instance was
//! launched but its NodeClaim never learnt about it).

use crate::common;

use std::collections::BTreeMap;

use crate::common::{Fuse, World, XorShift, run_with_crashes};

/// Long enough for launch, registration (30 s), the device plugin (10 s), a restart's new batch
/// and the garbage-collection grace (30 s).
const STEPS: usize = 120;

/// Writes a crash-free run makes.
fn writes_in_a_clean_run() -> u64 {
    let world = World::learning_lab();
    let fuse = Fuse::new(BTreeMap::new());
    run_with_crashes(&world, &fuse, STEPS, |_, _| {});
    world.assert_settled(2);
    fuse.writes()
}

#[test]
fn a_crash_at_every_write_before_or_after_it_is_harmless() {
    let total = writes_in_a_clean_run();
    assert!(total >= 10, "the scripted run makes {total} writes");
    println!("the scripted run makes {total} writes");
    // A crash can shift later writes, so go a little past the clean run's count.
    for at in 1..=total + 4 {
        for after in [false, true] {
            let world = World::learning_lab();
            let fuse = Fuse::new(BTreeMap::from([(at, after)]));
            run_with_crashes(&world, &fuse, STEPS, |_, _| {});
            let when = if after { "after" } else { "before" };
            assert!(
                at > total || fuse.crashes.get() == 1,
                "no crash {when} write {at}"
            );
            // Exactly two instances ever: no launch was repeated, nothing leaked.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| world.assert_settled(2)))
                .unwrap_or_else(|_| panic!("crash {when} write {at} of {total} left a bad state"));
        }
    }
}

#[test]
fn crashes_at_random_writes_with_throttling_are_harmless() {
    let total = writes_in_a_clean_run();
    for seed in 1..=150u64 {
        let mut rng = XorShift::new(seed);
        let crashes = 1 + rng.below(3);
        let mut at = BTreeMap::new();
        for _ in 0..crashes {
            at.insert(1 + rng.below(total + 8), rng.below(2) == 1);
        }
        let throttle_step = rng.below(40) as usize;
        let throttle_calls = rng.below(4) as u32;
        // Half the runs get a fifth pod at a random time; it fits in the room the plan left.
        let extra_pod = (rng.below(2) == 1).then(|| rng.below(60) as usize);
        let world = World::learning_lab();
        let fuse = Fuse::new(at.clone());
        run_with_crashes(&world, &fuse, STEPS + 30, |step, w| {
            if step == throttle_step {
                w.cloud.throttle_next_calls(throttle_calls);
            }
            if extra_pod == Some(step) {
                w.another_lab_pod("learning-lab-4");
            }
        });
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| world.assert_settled(2)));
        assert!(
            ok.is_ok(),
            "seed {seed}: crashes at {at:?} (write: after?), throttling {throttle_calls} calls at step {throttle_step}, extra pod at {extra_pod:?}"
        );
    }
}

#[test]
fn an_instance_launched_but_never_recorded_is_adopted_not_relaunched() {
    // Find the first cloud launch of a clean run and crash right after it.
    let world = World::learning_lab();
    let fuse = Fuse::new(BTreeMap::new());
    let reports = run_with_crashes(&world, &fuse, 3, |_, _| {});
    assert_eq!(reports[1].created.len(), 2);
    // Writes in the planning step: create A (1), launch A (2), record A (3), ...
    let world = World::learning_lab();
    let fuse = Fuse::new(BTreeMap::from([(2, true)]));
    let reports = run_with_crashes(&world, &fuse, STEPS, |_, _| {});
    assert_eq!(fuse.crashes.get(), 1);
    assert_eq!(
        world.cloud.launch_calls(),
        2,
        "the launched instance was adopted"
    );
    assert!(reports.iter().any(|r| !r.launched.is_empty()));
    world.assert_settled(2);
}

#[test]
fn a_crash_at_every_write_of_a_registration_timeout_is_harmless() {
    // Instance 1 never registers: its NodeClaim times out, the finalizer terminates the
    // instance, and the pods get a new NodeClaim. Crashing anywhere in that (the delete, the
    // termination, the finalizer's removal, the replacement's launch) must not leak or
    // duplicate.
    // A 2-minute timeout instead of 15 keeps the 40-odd runs fast; the logic is the same.
    const STEPS: usize = 120 + 90;
    let scripted = |fuse: &Fuse| {
        let mut world = World::learning_lab();
        world.config.registration_timeout = std::time::Duration::from_secs(120);
        world.cloud.set_registration(
            &joiner_simulate::SimulatedCloud::instance_id(1),
            joiner_simulate::Registration::Never,
        );
        run_with_crashes(&world, fuse, STEPS, |_, _| {});
        world
    };
    let clean = Fuse::new(BTreeMap::new());
    scripted(&clean).assert_settled(3);
    let total = clean.writes();
    println!("the registration-timeout run makes {total} writes");
    for at in 1..=total + 4 {
        for after in [false, true] {
            let fuse = Fuse::new(BTreeMap::from([(at, after)]));
            let world = scripted(&fuse);
            let when = if after { "after" } else { "before" };
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| world.assert_settled(3)))
                .unwrap_or_else(|_| panic!("crash {when} write {at} of {total} left a bad state"));
        }
    }
}

/// The random crashes again, now against the doubles at their least kind: a watch cache that
/// trails the API server, NodeClaim creates and launches that commit and then answer a
/// timeout, cloud listings that trail launches (fresh instances read as NotFound), and
/// instances of a managed node group and a self-managed node beside Joiner's. After every
/// step no need has two NodeClaims and no NodeClaim two instances; in the end nothing leaked,
/// nothing was launched twice, and no instance without Joiner's tags was ever terminated.
#[test]
fn crashes_behind_lagging_caches_and_timeouts_are_harmless() {
    use joiner_controller::cloud::OfferingKey;
    use joiner_engine::catalog::CapacityType;
    use joiner_model::wellknown::tags;
    use std::time::Duration;

    let total = writes_in_a_clean_run();
    for seed in 1..=40u64 {
        let mut rng = XorShift::new(seed);
        let mut at = BTreeMap::new();
        for _ in 0..1 + rng.below(2) {
            at.insert(1 + rng.below(total + 8), rng.below(2) == 1);
        }
        let cache_lag = Duration::from_secs(rng.below(21));
        let list_lag = Duration::from_secs(rng.below(31));
        let create_timeouts = rng.below(3) as u32;
        let launch_timeouts = rng.below(3) as u32;
        let world = World::learning_lab();
        let system = BTreeMap::from([
            (tags::cluster(common::CLUSTER), tags::OWNED.to_string()),
            (tags::CLUSTER_NAME.to_string(), common::CLUSTER.to_string()),
            (tags::NODEGROUP.to_string(), "system".to_string()),
        ]);
        let offering = OfferingKey {
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::OnDemand,
        };
        let foreign = [
            world
                .cloud
                .add_instance("i-0system00000001", &offering, system)
                .expect("add"),
            world
                .cloud
                .add_instance(
                    "i-0selfmanaged001",
                    &offering,
                    BTreeMap::from([(tags::cluster(common::CLUSTER), tags::OWNED.to_string())]),
                )
                .expect("add"),
        ];
        world.store.set_cache_lag(cache_lag);
        world.store.time_out_next_creates(create_timeouts);
        world.cloud.set_list_lag(list_lag);
        world.cloud.time_out_next_launches(launch_timeouts);
        let fuse = Fuse::new(at.clone());
        run_with_crashes(&world, &fuse, STEPS * 3, |_, _| {});
        let faults = format!(
            "seed {seed}: crashes at {at:?}, cache lag {cache_lag:?}, list lag {list_lag:?}, \
             {create_timeouts} create and {launch_timeouts} launch timeouts"
        );
        let touched = world.cloud.terminate_calls();
        assert!(
            foreign.iter().all(|f| !touched.contains(&f.id)),
            "{faults}: a foreign instance was terminated"
        );
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            world.assert_settled(2 + foreign.len())
        }));
        assert!(ok.is_ok(), "{faults}");
    }
}
