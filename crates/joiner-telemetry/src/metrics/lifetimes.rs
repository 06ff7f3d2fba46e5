//! How long things took, found by comparing the cluster after one step with the cluster after
//! the next: NodeClaims that were being deleted and are gone (`karpenter_nodeclaims_termination
//! _duration_seconds`, `karpenter_nodes_termination_duration_seconds`,
//! `karpenter_nodes_lifetime_duration_seconds`), and pods that became Ready
//! (`karpenter_pods_startup_duration_seconds`). Like Karpenter's, they count what this process
//! saw: after a restart the first look only learns.
//!
//! Karpenter's two summaries (quantiles 0, 0.5, 0.9, 0.99 and 1 over the last 10 minutes, as
//! Prometheus's Go client keeps them) are served as a gauge per quantile with `_sum` and
//! `_count` beside it: prometheus-client has no summary type, and PromQL reads
//! `name{quantile="0.9"}` the same either way.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;

use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;

use super::conditions::Buckets;
use super::{Gauges, Histograms, Labels};

/// A NodeClaim as one look at the cluster saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimLife {
    pub nodepool: String,
    /// Creation, in seconds since the Unix epoch.
    pub created: f64,
    /// When its deletion was asked for, if it was.
    pub deleting_since: Option<f64>,
    /// The offering it was launched as (instance type, capacity type, zone), once its labels
    /// say all three: what it costs.
    pub offering: Option<(String, String, String)>,
}

/// A pod's times, as one look at the cluster saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodTimes {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// Creation, in seconds since the Unix epoch.
    pub created: f64,
    /// When it was bound to a node (its `PodScheduled` condition), if it is.
    pub bound: Option<f64>,
    /// Whether it runs (or ran to its end).
    pub started: bool,
}

/// The quantiles Karpenter's summaries report.
const QUANTILES: [(f64, &str); 5] = [
    (0.0, "0"),
    (0.5, "0.5"),
    (0.9, "0.9"),
    (0.99, "0.99"),
    (1.0, "1"),
];
/// How long an observation counts towards the quantiles (the Go client's default).
const MAX_AGE_SECONDS: f64 = 600.0;
/// The most observations kept per series for the quantiles.
const MAX_KEPT: usize = 1000;

/// A summary as a gauge per quantile, with `_sum` and `_count`.
struct Summary {
    quantiles: Gauges,
    sum: Gauges,
    count: Gauges,
    recent: Mutex<BTreeMap<Labels, VecDeque<(f64, f64)>>>,
}

impl Summary {
    fn register(registry: &mut Registry, name: &str, help: &str) -> Summary {
        let s = Summary {
            quantiles: Gauges::default(),
            sum: Gauges::default(),
            count: Gauges::default(),
            recent: Mutex::new(BTreeMap::new()),
        };
        registry.register(
            name,
            format!("{help} (quantiles over the last 10 minutes)"),
            s.quantiles.clone(),
        );
        registry.register(format!("{name}_sum"), format!("{help}: sum"), s.sum.clone());
        registry.register(
            format!("{name}_count"),
            format!("{help}: count"),
            s.count.clone(),
        );
        s
    }

    fn observe(&self, labels: &Labels, value: f64, now: f64) {
        self.sum.get_or_create(labels).inc_by(value);
        self.count.get_or_create(labels).inc_by(1.0);
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        let window = recent.entry(labels.clone()).or_default();
        window.push_back((now, value));
        while window.len() > MAX_KEPT
            || window
                .front()
                .is_some_and(|(at, _)| now - at > MAX_AGE_SECONDS)
        {
            window.pop_front();
        }
        let mut values: Vec<f64> = window.iter().map(|(_, v)| *v).collect();
        values.sort_by(f64::total_cmp);
        for (q, text) in QUANTILES {
            let i = ((values.len() - 1) as f64 * q).round() as usize;
            let mut l = labels.clone();
            l.push(("quantile", text.to_string()));
            self.quantiles.get_or_create(&l).set(values[i]);
        }
    }
}

/// What the last look saw: NodeClaims by name, and the pods already seen started and bound.
#[derive(Default)]
struct Seen {
    claims: BTreeMap<String, ClaimLife>,
    started: BTreeSet<String>,
    bound: BTreeSet<String>,
}

pub struct Lifetimes {
    claim_termination: Histograms,
    node_termination: Summary,
    node_lifetime: Histograms,
    pod_startup: Summary,
    pod_bound: Histograms,
    unbound: Gauges,
    unstarted: Gauges,
    seen: Mutex<Option<Seen>>,
}

/// Karpenter's `DurationBuckets`: 5 ms to 10 minutes.
pub(super) const DURATION_BUCKETS: [f64; 45] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0, 120.0, 150.0, 300.0, 450.0, 600.0,
];

/// Node lifetimes: 15 minutes to 30 days, as Karpenter buckets them.
const LIFETIME_BUCKETS: [f64; 21] = [
    900.0, 1800.0, 2700.0, 3600.0, 7200.0, 14400.0, 21600.0, 28800.0, 36000.0, 43200.0, 57600.0,
    72000.0, 86400.0, 172800.0, 259200.0, 432000.0, 864000.0, 1296000.0, 1728000.0, 2160000.0,
    2592000.0,
];

impl Lifetimes {
    pub fn register(registry: &mut Registry) -> Lifetimes {
        let claim_termination =
            Histograms::new_with_constructor(Buckets(exponential_buckets(1.0, 2.0, 12).collect()));
        registry.register(
            "karpenter_nodeclaims_termination_duration_seconds",
            "Time from a NodeClaim's deletion request until it is gone, by NodePool",
            claim_termination.clone(),
        );
        let node_lifetime = Histograms::new_with_constructor(Buckets(LIFETIME_BUCKETS.to_vec()));
        registry.register(
            "karpenter_nodes_lifetime_duration_seconds",
            "Time from a node's creation until it is gone, by NodePool",
            node_lifetime.clone(),
        );
        let pod_bound = Histograms::new_with_constructor(Buckets(DURATION_BUCKETS.to_vec()));
        registry.register(
            "karpenter_pods_bound_duration_seconds",
            "Time from a pod's creation until it is bound to a node",
            pod_bound.clone(),
        );
        let unbound = Gauges::default();
        registry.register(
            "karpenter_pods_unbound_time_seconds",
            "How long each pod not bound to a node has existed",
            unbound.clone(),
        );
        let unstarted = Gauges::default();
        registry.register(
            "karpenter_pods_unstarted_time_seconds",
            "How long each pod not yet running has existed",
            unstarted.clone(),
        );
        Lifetimes {
            pod_bound,
            unbound,
            unstarted,
            claim_termination,
            node_termination: Summary::register(
                registry,
                "karpenter_nodes_termination_duration_seconds",
                "Time from a node's deletion request until it is gone, by NodePool",
            ),
            node_lifetime,
            pod_startup: Summary::register(
                registry,
                "karpenter_pods_startup_duration_seconds",
                "Time from a pod's creation until it is Ready",
            ),
            seen: Mutex::new(None),
        }
    }

    /// Compares this look (`claims`, the `started` pods by uid with how long each took to
    /// start, at `now` epoch seconds) with the last.
    pub fn set(
        &self,
        claims: &BTreeMap<String, ClaimLife>,
        started: &[(String, f64)],
        pods: &[PodTimes],
        now: f64,
    ) {
        self.set_waiting(pods, now);
        let bound: BTreeSet<String> = pods
            .iter()
            .filter(|p| p.bound.is_some())
            .map(|p| p.uid.clone())
            .collect();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let Some(last) = seen.as_mut() else {
            *seen = Some(Seen {
                claims: claims.clone(),
                started: started.iter().map(|(uid, _)| uid.clone()).collect(),
                bound,
            });
            return;
        };
        for p in pods {
            if let Some(at) = p.bound
                && !last.bound.contains(&p.uid)
            {
                self.pod_bound
                    .get_or_create(&Vec::new())
                    .observe((at - p.created).max(0.0));
            }
        }
        last.bound = bound;
        for (name, was) in &last.claims {
            let (Some(since), false) = (was.deleting_since, claims.contains_key(name)) else {
                continue;
            };
            let pool: Labels = vec![("nodepool", was.nodepool.clone())];
            let took = (now - since).max(0.0);
            self.claim_termination.get_or_create(&pool).observe(took);
            self.node_termination.observe(&pool, took, now);
            self.node_lifetime
                .get_or_create(&pool)
                .observe((now - was.created).max(0.0));
        }
        last.claims.clone_from(claims);
        let mut still = BTreeSet::new();
        for (uid, took) in started {
            if !last.started.contains(uid) {
                self.pod_startup.observe(&Vec::new(), *took, now);
            }
            still.insert(uid.clone());
        }
        last.started = still;
    }
}

impl Lifetimes {
    /// The gauges of pods still waiting: unbound, or bound and not yet running.
    fn set_waiting(&self, pods: &[PodTimes], now: f64) {
        self.unbound.clear();
        self.unstarted.clear();
        for p in pods.iter().filter(|p| !p.started) {
            let l: Labels = vec![("name", p.name.clone()), ("namespace", p.namespace.clone())];
            let waited = (now - p.created).max(0.0);
            self.unstarted.get_or_create(&l).set(waited);
            if p.bound.is_none() {
                self.unbound.get_or_create(&l).set(waited);
            }
        }
    }
}
