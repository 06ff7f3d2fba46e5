//! The step loop: one step at a time on a blocking thread, every second and soon after the
//! cluster changes, only while this replica leads, until shutdown.
//!
//! Generic over [`Step`], so the tests run the very loop the process runs over an in-memory
//! cluster and a simulated cloud.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

use crate::leader::Leadership;
use crate::stepper::{Step, Stepped};

/// When to step.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Step at least this often (timers in the core: batching, registration timeouts, expiry).
    pub every: Duration,
    /// After the cluster changed, wait this long for related changes (a Deployment's pods
    /// arrive one by one) before stepping.
    pub after_change: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            every: Duration::from_secs(1),
            after_change: Duration::from_millis(200),
        }
    }
}

/// Why the loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopEnd {
    /// Shutdown was asked; the step in progress finished first.
    Shutdown,
    /// The leader Lease was lost: no step was started after that.
    LostLeadership,
    /// A step panicked (a bug): the process should exit and be restarted clean.
    StepPanicked,
}

/// Waits for the next change of `rx`; never resolves once its sender is gone.
pub(crate) async fn next_change<T>(rx: &mut watch::Receiver<T>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Waits until this replica leads; `Some(end)` when the loop should end instead (shutdown
/// asked, or leadership lost). Every loop that writes (steps, interruption polls) passes
/// through it before each round.
pub(crate) async fn until_leading(
    shutdown: &mut watch::Receiver<bool>,
    leadership: &mut watch::Receiver<Leadership>,
) -> Option<LoopEnd> {
    loop {
        if *shutdown.borrow_and_update() {
            return Some(LoopEnd::Shutdown);
        }
        let state = *leadership.borrow_and_update();
        match state {
            Leadership::Lost => return Some(LoopEnd::LostLeadership),
            Leadership::Leading => return None,
            Leadership::Waiting => {
                tokio::select! {
                    _ = next_change(shutdown) => {}
                    _ = next_change(leadership) => {}
                }
            }
        }
    }
}

/// Steps `stepper` until `shutdown` turns true or leadership is lost, handing each step's
/// outcome to `observe`. `changed` gives a future that resolves when the cluster changes.
pub async fn drive<T, F, Fut>(
    mut stepper: T,
    timing: Timing,
    mut changed: F,
    mut leadership: watch::Receiver<Leadership>,
    mut shutdown: watch::Receiver<bool>,
    mut observe: impl FnMut(Stepped),
) -> LoopEnd
where
    T: Step,
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    loop {
        if let Some(end) = until_leading(&mut shutdown, &mut leadership).await {
            return end;
        }
        // Listen before stepping, so a change that lands during the step wakes the next one
        // instead of waiting for the timer.
        let change = changed();
        // The store and the cloud block on async calls inside: a step must not run on an async
        // worker thread. The stepper travels to the blocking thread and back.
        let task = tokio::task::spawn_blocking(move || {
            let out = stepper.step();
            (stepper, out)
        });
        let out = match task.await {
            Ok((s, out)) => {
                stepper = s;
                out
            }
            Err(e) => {
                tracing::error!(error = %e, "a controller step panicked");
                return LoopEnd::StepPanicked;
            }
        };
        observe(out);
        tokio::select! {
            _ = tokio::time::sleep(timing.every) => {}
            _ = change => {
                tokio::select! {
                    _ = tokio::time::sleep(timing.after_change) => {}
                    _ = next_change(&mut shutdown) => {}
                }
            }
            _ = next_change(&mut shutdown) => {}
            _ = next_change(&mut leadership) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use joiner_controller::Config;
    use joiner_controller::clock::ManualClock;
    use joiner_controller::store::{ClusterStore, InMemoryCluster};
    use joiner_engine::catalog::Catalog;
    use joiner_model::api::NodeClaim;
    use joiner_model::settings::Settings;
    use joiner_simulate::SimulatedCloud;
    use k8s_openapi::api::core::v1::Node;

    use super::*;
    use crate::stepper::Stepper;
    use joiner_telemetry::metrics::{Metrics, record};

    /// A stepper whose clock moves a second before each step, as the wall clock would.
    struct Ticking<T> {
        inner: T,
        clock: ManualClock,
        steps: Arc<AtomicUsize>,
    }

    impl<T: Step> Step for Ticking<T> {
        fn step(&mut self) -> Stepped {
            self.clock.advance(Duration::from_secs(1));
            self.steps.fetch_add(1, Ordering::SeqCst);
            self.inner.step()
        }
    }

    struct Lab {
        store: Arc<InMemoryCluster>,
        cloud: Arc<SimulatedCloud>,
        stepper: Ticking<Stepper<Arc<InMemoryCluster>, Arc<SimulatedCloud>, ManualClock>>,
        steps: Arc<AtomicUsize>,
    }

    fn lab() -> Lab {
        let clock = ManualClock::new();
        let settings = Settings {
            cluster_name: Some("lab".into()),
            ..Settings::default()
        };
        let config = Config::new(settings).unwrap();
        let manifests = joiner_test_support::load_example("time-slicing-learning-lab");
        let store = Arc::new(InMemoryCluster::new(clock.clone()));
        store.load(&manifests).unwrap();
        let catalog = Catalog::builtin(&config.settings.region, &config.settings.zones);
        let cloud = Arc::new(SimulatedCloud::new(&catalog, clock.clone()));
        let steps = Arc::new(AtomicUsize::new(0));
        let stepper = Stepper::new(store.clone(), cloud.clone(), clock.clone(), config)
            .with_kubelet(cloud.clone(), true);
        Lab {
            store,
            cloud,
            stepper: Ticking {
                inner: stepper,
                clock,
                steps: steps.clone(),
            },
            steps,
        }
    }

    fn fast() -> Timing {
        Timing {
            every: Duration::from_millis(1),
            after_change: Duration::from_millis(1),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_loop_launches_nodes_for_pending_pods_and_counts_them() {
        let lab = lab();
        let metrics = Metrics::new("simulated");
        let (_leader_tx, leadership) = watch::channel(Leadership::Leading);
        let (stop, shutdown) = watch::channel(false);
        let mut nominated = BTreeMap::new();
        let mut seen = 0;
        let end = drive(
            lab.stepper,
            fast(),
            std::future::pending::<()>,
            leadership,
            shutdown,
            |out| {
                record(&out.report, &out.claims, out.took, &metrics);
                metrics.set_state(&out.state);
                nominated.extend(out.report.nominated.iter().cloned());
                seen += 1;
                if seen == 120 {
                    let _ = stop.send(true);
                }
            },
        )
        .await;
        assert_eq!(end, LoopEnd::Shutdown);
        assert_eq!(lab.steps.load(Ordering::SeqCst), 120);

        // The learning lab's pending pods got NodeClaims, instances and (kwok) Nodes.
        let claims: Vec<NodeClaim> = lab.store.list().unwrap();
        assert!(!claims.is_empty());
        assert_eq!(lab.cloud.all_instances().len(), claims.len());
        let nodes: Vec<Node> = lab.store.list().unwrap();
        let kwok = nodes
            .iter()
            .filter(|n| {
                n.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key("kwok.x-k8s.io/node"))
            })
            .count();
        assert_eq!(kwok, claims.len());
        // Every pod waiting for a new node was told which.
        let names: Vec<&str> = claims.iter().map(NodeClaim::name).collect();
        assert!(nominated.values().all(|c| names.contains(&c.as_str())));
        assert!(!nominated.is_empty());

        let text = metrics.render();
        let created = format!(
            "karpenter_nodeclaims_created_total{{reason=\"provisioned\",nodepool=\"{}\",min_values_relaxed=\"false\"}} {}",
            claims[0]
                .label(joiner_model::wellknown::labels::NODEPOOL)
                .unwrap(),
            claims.len()
        );
        assert!(
            text.lines().any(|l| l == created),
            "no `{created}` in\n{text}"
        );
        assert!(
            text.lines()
                .any(|l| l == "joiner_controller_step_duration_seconds_count 120"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_follower_does_not_step_until_it_leads_and_stops_when_it_loses() {
        let lab = lab();
        let (leader_tx, leadership) = watch::channel(Leadership::Waiting);
        let (_stop, shutdown) = watch::channel(false);
        let steps = lab.steps.clone();
        let run = tokio::spawn(drive(
            lab.stepper,
            fast(),
            std::future::pending::<()>,
            leadership,
            shutdown,
            |_| {},
        ));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(steps.load(Ordering::SeqCst), 0);
        leader_tx.send(Leadership::Leading).unwrap();
        while steps.load(Ordering::SeqCst) < 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        leader_tx.send(Leadership::Lost).unwrap();
        assert_eq!(run.await.unwrap(), LoopEnd::LostLeadership);
        let after = steps.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(steps.load(Ordering::SeqCst), after);
    }

    #[tokio::test]
    async fn a_change_in_the_cluster_brings_the_next_step_forward() {
        let lab = lab();
        let (_leader_tx, leadership) = watch::channel(Leadership::Leading);
        let (stop, shutdown) = watch::channel(false);
        let slow = Timing {
            every: Duration::from_secs(3600),
            after_change: Duration::from_millis(1),
        };
        let mut seen = 0;
        let end = tokio::time::timeout(
            Duration::from_secs(30),
            drive(
                lab.stepper,
                slow,
                // The cluster "changes" right away every time it is asked.
                || async {},
                leadership,
                shutdown,
                |_| {
                    seen += 1;
                    if seen == 3 {
                        let _ = stop.send(true);
                    }
                },
            ),
        )
        .await;
        assert_eq!(end, Ok(LoopEnd::Shutdown));
        assert_eq!(lab.steps.load(Ordering::SeqCst), 3);
    }
}
