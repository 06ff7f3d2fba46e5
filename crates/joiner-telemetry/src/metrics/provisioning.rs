//! Karpenter's provisioning latencies, the pods the last plan left out because they cannot be
//! read (`karpenter_scheduler_ignored_pods_count`), and the pending pods by effective zone
//! (`karpenter_scheduler_pending_pods_by_effective_zone_count`): how long Joiner took to decide about a pending pod
//! (`karpenter_pods_scheduling_decision_duration_seconds`), and the pod metrics measured from
//! when a plan first found the pod a place rather than from its creation
//! (`karpenter_pods_provisioning_*`), so a dashboard can tell the autoscaler's share of a pod's
//! wait from the rest.
//!
//! As in Karpenter, the clocks live in memory and a restart starts them again:
//! - a pod is *acknowledged* the first time a look at the cluster sees it waiting for a node;
//! - it is *decided* the first time a plan places it or finds no place (the decision duration is
//!   observed then, once);
//! - it is *schedulable* from the first plan that places it (on a running node, one in flight
//!   or a new NodeClaim) until a later plan finds it no place, which stops that clock;
//! - it is forgotten once Ready, finished or gone.
//!
//! Karpenter observes the bound histogram only once the pod leaves `Pending`; Joiner observes it
//! when the pod is first seen bound (the value is the same: the binding's time).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use joiner_controller::StepReport;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::conditions::Buckets;
use super::lifetimes::{DURATION_BUCKETS, PodTimes};
use super::state::Labels;
use super::{Gauges, Histograms};

/// The clocks of the pods being provisioned, by `namespace/name`.
#[derive(Debug, Default)]
struct Clocks {
    acknowledged: BTreeMap<String, f64>,
    decided: BTreeSet<String>,
    schedulable: BTreeMap<String, f64>,
    /// Pods whose binding was observed.
    bound: BTreeSet<String>,
    /// The last planned step's decisions, applied at the next look: placed, and not placed.
    placed: Vec<String>,
    not_placed: Vec<String>,
}

pub(super) struct ProvisioningMetrics {
    ignored: Gauge,
    by_zone: Gauges,
    decision: Histograms,
    bound: Histograms,
    startup: Histograms,
    unbound: Gauges,
    unstarted: Gauges,
    undecided: Gauges,
    clocks: Mutex<Clocks>,
}

/// An unlabelled histogram in Karpenter's duration buckets, served once observed.
fn duration_histogram() -> Histograms {
    Histograms::new_with_constructor(Buckets(DURATION_BUCKETS.to_vec()))
}

fn observe(h: &Histograms, value: f64) {
    h.get_or_create(&Vec::new()).observe(value.max(0.0));
}

impl ProvisioningMetrics {
    pub(super) fn register(registry: &mut Registry) -> ProvisioningMetrics {
        let m = ProvisioningMetrics {
            ignored: Gauge::default(),
            by_zone: Gauges::default(),
            decision: duration_histogram(),
            bound: duration_histogram(),
            startup: duration_histogram(),
            unbound: Gauges::default(),
            unstarted: Gauges::default(),
            undecided: Gauges::default(),
            clocks: Mutex::new(Clocks::default()),
        };
        registry.register(
            "karpenter_scheduler_ignored_pods_count",
            "Pending pods the last plan left out because they cannot be read",
            m.ignored.clone(),
        );
        registry.register(
            "karpenter_scheduler_pending_pods_by_effective_zone_count",
            "Pending pods by the one zone their own restrictions leave them (flexible: several, none: no zone)",
            m.by_zone.clone(),
        );
        registry.register(
            "karpenter_pods_scheduling_decision_duration_seconds",
            "Time from when Joiner first saw a pod waiting until its first plan decided about it",
            m.decision.clone(),
        );
        registry.register(
            "karpenter_pods_provisioning_bound_duration_seconds",
            "Time from when a plan first found a pod a place until it was bound",
            m.bound.clone(),
        );
        registry.register(
            "karpenter_pods_provisioning_startup_duration_seconds",
            "Time from when a plan first found a pod a place until it was Ready",
            m.startup.clone(),
        );
        registry.register(
            "karpenter_pods_provisioning_unbound_time_seconds",
            "How long each pod a plan found a place for has waited since, unbound",
            m.unbound.clone(),
        );
        registry.register(
            "karpenter_pods_provisioning_unstarted_time_seconds",
            "How long each pod a plan found a place for has waited since, not yet Ready",
            m.unstarted.clone(),
        );
        registry.register(
            "karpenter_pods_provisioning_scheduling_undecided_time_seconds",
            "How long each pod waiting for a node has waited for Joiner's first decision about it",
            m.undecided.clone(),
        );
        m
    }

    /// Keeps a planned step's decisions for the next look at the cluster.
    pub(super) fn record(&self, report: &StepReport) {
        if !report.planned {
            return;
        }
        if let Some(n) = report.ignored_pods {
            self.ignored.set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        if let Some(zones) = &report.pending_by_zone {
            // Each plan counts afresh: a zone no pending pod has any more loses its series.
            self.by_zone.clear();
            for (zone, n) in zones {
                let l: Labels = vec![
                    ("controller", "provisioner".to_string()),
                    ("zone", zone.clone()),
                ];
                self.by_zone.get_or_create(&l).set(*n as f64);
            }
        }
        let mut clocks = self.clocks.lock().unwrap_or_else(|e| e.into_inner());
        clocks.placed.extend(report.placed.iter().cloned());
        clocks
            .not_placed
            .extend(report.unschedulable.iter().map(|(pod, _)| pod.clone()));
    }

    /// Moves the clocks on to this look at the cluster, at `now` (epoch seconds): `pods` as they
    /// stand, and `ready` the Ready pods by uid with how long each took from creation.
    pub(super) fn set(&self, pods: &[PodTimes], ready: &[(String, f64)], now: f64) {
        let ready: BTreeMap<&str, f64> = ready.iter().map(|(u, t)| (u.as_str(), *t)).collect();
        let mut clocks = self.clocks.lock().unwrap_or_else(|e| e.into_inner());
        let c = &mut *clocks;
        let waiting = |p: &PodTimes| p.bound.is_none() && !p.started;
        for p in pods.iter().filter(|p| waiting(p)) {
            c.acknowledged.entry(key(p)).or_insert(now);
        }
        for pod in std::mem::take(&mut c.placed) {
            self.decide(c, &pod, now);
            c.schedulable.entry(pod).or_insert(now);
        }
        for pod in std::mem::take(&mut c.not_placed) {
            self.decide(c, &pod, now);
            c.schedulable.remove(&pod);
        }
        self.unbound.clear();
        self.unstarted.clear();
        self.undecided.clear();
        let mut live = BTreeSet::new();
        for p in pods {
            let k = key(p);
            let ready_at = ready.get(p.uid.as_str()).map(|took| p.created + took);
            self.observe_pod(c, p, &k, ready_at, now);
            if ready_at.is_none() {
                live.insert(k);
            }
        }
        // Pods that are gone, or Ready, stop every clock.
        c.acknowledged.retain(|k, _| live.contains(k));
        c.decided.retain(|k| live.contains(k));
        c.schedulable.retain(|k, _| live.contains(k));
        c.bound.retain(|k| live.contains(k));
    }

    /// A decision about `pod`: the first one is observed.
    fn decide(&self, c: &mut Clocks, pod: &str, now: f64) {
        if c.decided.insert(pod.to_string())
            && let Some(at) = c.acknowledged.get(pod)
        {
            observe(&self.decision, now - at);
        }
    }

    /// One pod's gauges, and its binding and readiness once.
    fn observe_pod(&self, c: &mut Clocks, p: &PodTimes, k: &str, ready_at: Option<f64>, now: f64) {
        let l: Labels = vec![("name", p.name.clone()), ("namespace", p.namespace.clone())];
        let unbound = p.bound.is_none() && !p.started;
        if unbound
            && !c.decided.contains(k)
            && let Some(at) = c.acknowledged.get(k)
        {
            self.undecided.get_or_create(&l).set((now - at).max(0.0));
        }
        let Some(&since) = c.schedulable.get(k) else {
            return;
        };
        if unbound {
            self.unbound.get_or_create(&l).set((now - since).max(0.0));
        }
        if let Some(at) = p.bound
            && c.bound.insert(k.to_string())
        {
            observe(&self.bound, at - since);
        }
        match ready_at {
            Some(at) => observe(&self.startup, at - since),
            None => {
                self.unstarted.get_or_create(&l).set((now - since).max(0.0));
            }
        }
    }
}

fn key(p: &PodTimes) -> String {
    format!("{}/{}", p.namespace, p.name)
}

#[cfg(test)]
mod tests {
    use super::super::state::ClusterState;
    use super::super::{Claims, Metrics, record_outcomes};
    use super::*;

    fn pod(bound: Option<f64>, started: bool) -> PodTimes {
        PodTimes {
            name: "a".into(),
            namespace: "ml".into(),
            uid: "uid-a".into(),
            created: 90.0,
            bound,
            started,
        }
    }

    fn look(m: &Metrics, at: f64, pod: PodTimes, ready_after: Option<f64>) {
        m.set_state(&ClusterState {
            at,
            pod_times: vec![pod],
            started: ready_after
                .map(|took| ("uid-a".to_string(), took))
                .into_iter()
                .collect(),
            ..ClusterState::default()
        });
    }

    fn plan(m: &Metrics, placed: bool) {
        let mut report = StepReport {
            planned: true,
            ignored_pods: Some(2),
            ..StepReport::default()
        };
        if placed {
            report.placed = vec!["ml/a".into()];
        } else {
            report.unschedulable = vec![("ml/a".into(), "too big".into())];
        }
        record_outcomes(&report, &Claims::default(), m);
    }

    /// The value of the sample named exactly so (labels included), if served.
    fn sample(m: &Metrics, name: &str) -> Option<f64> {
        m.render()
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn a_pods_provisioning_clocks_run_from_acknowledgement_and_first_placement() {
        let m = Metrics::new("aws");
        let labels = r#"{name="a",namespace="ml"}"#;
        let undecided =
            format!("karpenter_pods_provisioning_scheduling_undecided_time_seconds{labels}");
        let unbound = format!("karpenter_pods_provisioning_unbound_time_seconds{labels}");
        let unstarted = format!("karpenter_pods_provisioning_unstarted_time_seconds{labels}");
        // Seen waiting at 100; still undecided at 105.
        look(&m, 100.0, pod(None, false), None);
        look(&m, 105.0, pod(None, false), None);
        assert_eq!(sample(&m, &undecided), Some(5.0));
        // The first plan finds no place (at 110): decided after 10 s, not schedulable.
        plan(&m, false);
        look(&m, 110.0, pod(None, false), None);
        assert_eq!(
            sample(
                &m,
                "karpenter_pods_scheduling_decision_duration_seconds_sum"
            ),
            Some(10.0)
        );
        assert_eq!(sample(&m, &undecided), None);
        assert_eq!(sample(&m, &unbound), None);
        assert_eq!(
            sample(&m, "karpenter_scheduler_ignored_pods_count"),
            Some(2.0)
        );
        // A later plan places it (at 130): its clocks start; the decision is not counted again.
        plan(&m, true);
        look(&m, 130.0, pod(None, false), None);
        look(&m, 140.0, pod(None, false), None);
        assert_eq!(
            sample(
                &m,
                "karpenter_pods_scheduling_decision_duration_seconds_count"
            ),
            Some(1.0)
        );
        assert_eq!(sample(&m, &unbound), Some(10.0));
        assert_eq!(sample(&m, &unstarted), Some(10.0));
        // Bound at 145, seen at 150; Ready at 160 (70 s after its creation), seen at 170.
        look(&m, 150.0, pod(Some(145.0), false), None);
        assert_eq!(
            sample(&m, "karpenter_pods_provisioning_bound_duration_seconds_sum"),
            Some(15.0)
        );
        assert_eq!(sample(&m, &unbound), None);
        assert_eq!(sample(&m, &unstarted), Some(20.0));
        look(&m, 170.0, pod(Some(145.0), true), Some(70.0));
        assert_eq!(
            sample(
                &m,
                "karpenter_pods_provisioning_startup_duration_seconds_sum"
            ),
            Some(30.0)
        );
        assert_eq!(sample(&m, &unstarted), None);
        // Once Ready it is forgotten: nothing is observed twice.
        look(&m, 180.0, pod(Some(145.0), true), Some(70.0));
        assert_eq!(
            sample(
                &m,
                "karpenter_pods_provisioning_startup_duration_seconds_count"
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &m,
                "karpenter_pods_provisioning_bound_duration_seconds_count"
            ),
            Some(1.0)
        );
    }
}
