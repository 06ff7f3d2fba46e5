//! Status-condition metrics, as Karpenter's operator library exports them for NodeClaims,
//! NodePools, EC2NodeClasses and the Nodes Joiner manages: one series per object and condition
//! (`operator_<kind>_status_condition_count`, `..._current_status_seconds`), and the
//! transitions seen between steps (`..._transitions_total`, `..._transition_seconds`: how long
//! the condition held its previous status). The kind-less `operator_status_condition_*` that
//! Karpenter still exports (deprecated, labelled by `group` and `kind`) are served as well, so
//! alerts written against either keep working.
//!
//! Transitions are those this process saw: after a restart the first step only learns the
//! conditions, as Karpenter's controller does.

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::{Gauges, Histograms, Labels, labels};

/// The kinds whose conditions are exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConditionKind {
    NodeClaim,
    NodePool,
    EC2NodeClass,
    Node,
}

impl ConditionKind {
    pub(super) const ALL: [ConditionKind; 4] = [
        ConditionKind::NodeClaim,
        ConditionKind::NodePool,
        ConditionKind::EC2NodeClass,
        ConditionKind::Node,
    ];

    /// The metric name part (`operator_<this>_status_condition_count`).
    pub(super) fn metric(self) -> &'static str {
        match self {
            ConditionKind::NodeClaim => "nodeclaim",
            ConditionKind::NodePool => "nodepool",
            ConditionKind::EC2NodeClass => "ec2nodeclass",
            ConditionKind::Node => "node",
        }
    }

    /// `group` and `kind` of the deprecated kind-less metrics.
    pub(super) fn group_kind(self) -> (&'static str, &'static str) {
        match self {
            ConditionKind::NodeClaim => ("karpenter.sh", "NodeClaim"),
            ConditionKind::NodePool => ("karpenter.sh", "NodePool"),
            ConditionKind::EC2NodeClass => ("karpenter.k8s.aws", "EC2NodeClass"),
            ConditionKind::Node => ("", "Node"),
        }
    }

    /// Karpenter's operator library times a transition with exponential buckets from half a
    /// second to about two hours, except for EC2NodeClasses, timed with Prometheus's defaults.
    pub(super) fn buckets(self) -> Vec<f64> {
        match self {
            ConditionKind::EC2NodeClass => DEFAULT_BUCKETS.to_vec(),
            _ => exponential_buckets(0.5, 2.0, 15).collect(),
        }
    }
}

/// Prometheus's default histogram buckets.
pub(super) const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// One condition of one object, as the cluster holds it after a step.
#[derive(Debug, Clone, PartialEq)]
pub struct ConditionState {
    pub kind: ConditionKind,
    pub name: String,
    /// The object's uid, for events about it.
    pub uid: Option<String>,
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    pub message: String,
    /// When it last transitioned, in seconds since the Unix epoch.
    pub since: f64,
    /// Seconds since its last transition.
    pub for_seconds: f64,
    /// The kind's own labels (`karpenter_sh_nodepool`, ...), in Karpenter's order.
    pub extra: Labels,
}

/// Makes each series' histogram with these buckets.
#[derive(Debug, Clone)]
pub(super) struct Buckets(pub(super) Vec<f64>);

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

/// The families of one kind (or of the kind-less deprecated set).
struct Families {
    count: Gauges,
    current: Gauges,
    transitions: Family<Labels, Counter>,
    transition_seconds: Histograms,
}

impl Families {
    fn register(registry: &mut Registry, prefix: &str, buckets: Vec<f64>) -> Families {
        let f = Families {
            count: Gauges::default(),
            current: Gauges::default(),
            transitions: Family::default(),
            transition_seconds: Histograms::new_with_constructor(Buckets(buckets)),
        };
        registry.register(
            format!("{prefix}_status_condition_count"),
            "Objects with this condition, status and reason (1 per object)",
            f.count.clone(),
        );
        registry.register(
            format!("{prefix}_status_condition_current_status_seconds"),
            "Seconds the condition has held its current status",
            f.current.clone(),
        );
        registry.register(
            format!("{prefix}_status_condition_transitions"),
            "Condition transitions seen, by the status and reason transitioned to",
            f.transitions.clone(),
        );
        registry.register(
            format!("{prefix}_status_condition_transition_seconds"),
            "How long a condition held its previous status when it transitioned",
            f.transition_seconds.clone(),
        );
        f
    }
}

/// What a condition was at the last step: its status, and when it took it (epoch seconds).
type Seen = BTreeMap<(ConditionKind, String, String), (String, f64)>;

/// The status-condition families of every kind, and what the last step saw.
pub struct ConditionMetrics {
    by_kind: BTreeMap<ConditionKind, Families>,
    global: Families,
    seen: Mutex<Option<Seen>>,
}

impl ConditionMetrics {
    pub fn register(registry: &mut Registry) -> ConditionMetrics {
        let by_kind = ConditionKind::ALL
            .iter()
            .map(|k| {
                let prefix = format!("operator_{}", k.metric());
                (*k, Families::register(registry, &prefix, k.buckets()))
            })
            .collect();
        let global = Families::register(registry, "operator", DEFAULT_BUCKETS.to_vec());
        ConditionMetrics {
            by_kind,
            global,
            seen: Mutex::new(None),
        }
    }

    /// Sets the gauges to `conditions` and counts the transitions since the last call.
    pub fn set(&self, conditions: &[ConditionState]) {
        for f in self.by_kind.values().chain([&self.global]) {
            f.count.clear();
            f.current.clear();
        }
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let before = seen.take();
        let mut now = Seen::new();
        for c in conditions {
            let (group, kind) = c.kind.group_kind();
            let object = [
                ("namespace", ""),
                ("name", c.name.as_str()),
                ("type", c.type_.as_str()),
                ("status", c.status.as_str()),
                ("reason", c.reason.as_str()),
            ];
            let mut own = labels(&object);
            own.extend(c.extra.iter().cloned());
            let mut global = labels(&object);
            global.extend(labels(&[("group", group), ("kind", kind)]));
            let families = &self.by_kind[&c.kind];
            for (f, l) in [(families, &own), (&self.global, &global)] {
                f.count.get_or_create(l).set(1.0);
                f.current.get_or_create(l).set(c.for_seconds);
            }
            let key = (c.kind, c.name.clone(), c.type_.clone());
            if let Some((status, since)) = before.as_ref().and_then(|b| b.get(&key))
                && *status != c.status
            {
                self.transition(c, (c.since - since).max(0.0));
            }
            now.insert(key, (c.status.clone(), c.since));
        }
        *seen = Some(now);
    }

    /// Counts `c`'s transition, from a status it had held for `held` seconds.
    fn transition(&self, c: &ConditionState, held: f64) {
        let (group, kind) = c.kind.group_kind();
        let families = &self.by_kind[&c.kind];
        let mut counted = labels(&[
            ("type", &c.type_),
            ("status", &c.status),
            ("reason", &c.reason),
        ]);
        counted.extend(c.extra.iter().cloned());
        families.transitions.get_or_create(&counted).inc();
        let mut timed = labels(&[("type", &c.type_), ("status", &c.status)]);
        timed.extend(c.extra.iter().cloned());
        families
            .transition_seconds
            .get_or_create(&timed)
            .observe(held);
        let kinds = [("group", group), ("kind", kind)];
        let mut g = labels(&[
            ("type", &c.type_),
            ("status", &c.status),
            ("reason", &c.reason),
        ]);
        g.extend(labels(&kinds));
        self.global.transitions.get_or_create(&g).inc();
        let mut g = labels(&[("type", &c.type_), ("status", &c.status)]);
        g.extend(labels(&kinds));
        self.global
            .transition_seconds
            .get_or_create(&g)
            .observe(held);
    }
}
