use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use joiner_controller::clock::ManualClock;
use joiner_controller::interruption::is_interrupted;
use joiner_controller::interruption::messages::spot_interruption_warning;
use joiner_controller::store::InMemoryCluster;
use joiner_model::api::NodeClaim;
use joiner_model::api::nodeclaim::NodeClaimSpec;
use joiner_model::api::nodepool::NodeClassReference;
use joiner_model::wellknown::labels;
use joiner_simulate::SimulatedInterruptionQueue;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::run_loop::{self, Timing};
use crate::stepper::{Step, Stepped};

/// A launched spot NodeClaim on instance `id`.
fn claim(name: &str, id: &str) -> NodeClaim {
    let mut c = NodeClaim::new(
        ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                [
                    (labels::INSTANCE_TYPE.to_string(), "g6.xlarge".to_string()),
                    (labels::ZONE.to_string(), "us-east-1a".to_string()),
                    (labels::CAPACITY_TYPE.to_string(), "spot".to_string()),
                ]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        NodeClaimSpec::new(NodeClassReference::ec2("default")),
    );
    c.status.provider_id = Some(format!("aws:///us-east-1a/{id}"));
    c
}

/// A step that takes as long as the test wants: it blocks until released.
struct LongPlan {
    release: mpsc::Receiver<()>,
    finished: Arc<AtomicUsize>,
}

impl Step for LongPlan {
    fn step(&mut self) -> Stepped {
        let _ = self.release.recv();
        self.finished.fetch_add(1, Ordering::SeqCst);
        Stepped::default()
    }
}

fn marked(store: &InMemoryCluster, name: &str) -> bool {
    store
        .get::<NodeClaim>(None, name)
        .ok()
        .flatten()
        .is_some_and(|c| is_interrupted(&c))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_warning_is_handled_while_a_step_is_still_planning() {
    let clock = ManualClock::new();
    let store = Arc::new(InMemoryCluster::new(clock.clone()));
    store.create(&claim("gpu-a", "i-0aaa")).unwrap();
    let queue = SimulatedInterruptionQueue::new();
    let (leader_tx, leadership) = watch::channel(Leadership::Leading);
    let (stop, shutdown) = watch::channel(false);

    // The step loop is stuck in one long step from the start.
    let (release, blocked) = mpsc::channel();
    let finished = Arc::new(AtomicUsize::new(0));
    let steps = tokio::spawn(run_loop::drive(
        LongPlan {
            release: blocked,
            finished: finished.clone(),
        },
        Timing::default(),
        std::future::pending::<()>,
        leadership.clone(),
        shutdown.clone(),
        |_| {},
    ));
    let poller = Poller::new(store.clone(), Box::new(queue.clone()), clock.clone());
    let polls = tokio::spawn(drive(poller, leadership, shutdown, |_| {}));

    queue.send(spot_interruption_warning(
        "evt-1",
        "i-0aaa",
        &clock.now().to_string(),
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !marked(&store, "gpu-a") {
        assert!(Instant::now() < deadline, "the warning was not handled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(queue.waiting(), 0, "handled and deleted");
    assert_eq!(
        finished.load(Ordering::SeqCst),
        0,
        "handled while the step was still running"
    );

    let _ = stop.send(true);
    release.send(()).unwrap();
    assert_eq!(polls.await.unwrap(), LoopEnd::Shutdown);
    assert_eq!(steps.await.unwrap(), LoopEnd::Shutdown);
    drop(leader_tx);
}

#[tokio::test]
async fn a_follower_leaves_the_queue_alone_and_a_lost_lease_stops_the_loop() {
    let clock = ManualClock::new();
    let store = Arc::new(InMemoryCluster::new(clock.clone()));
    store.create(&claim("gpu-a", "i-0aaa")).unwrap();
    let queue = SimulatedInterruptionQueue::new();
    queue.send(spot_interruption_warning(
        "evt-1",
        "i-0aaa",
        &clock.now().to_string(),
    ));
    let (leader_tx, leadership) = watch::channel(Leadership::Waiting);
    let (_stop, shutdown) = watch::channel(false);
    let poller = Poller::new(store.clone(), Box::new(queue.clone()), clock);
    let polls = Arc::new(AtomicUsize::new(0));
    let counted = polls.clone();
    let run = tokio::spawn(drive(poller, leadership, shutdown, move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
    }));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(polls.load(Ordering::SeqCst), 0);
    assert_eq!(queue.waiting(), 1, "a follower neither reads nor deletes");
    assert!(!marked(&store, "gpu-a"));

    leader_tx.send(Leadership::Leading).unwrap();
    while polls.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(marked(&store, "gpu-a"));
    leader_tx.send(Leadership::Lost).unwrap();
    assert_eq!(run.await.unwrap(), LoopEnd::LostLeadership);
}

#[test]
fn a_failing_queue_is_asked_less_and_less_often_and_a_full_batch_at_once_again() {
    assert_eq!(pause(0, 0), POLL_EVERY);
    assert_eq!(pause(BATCH, 0), Duration::ZERO);
    assert_eq!(pause(0, 1), Duration::from_secs(2));
    assert_eq!(pause(0, 2), Duration::from_secs(4));
    assert_eq!(pause(0, 40), MAX_BACKOFF);
}
