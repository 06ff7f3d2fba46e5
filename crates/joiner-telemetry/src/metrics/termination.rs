//! How long NodeClaims, NodePools, EC2NodeClasses and Joiner's Nodes take to go once their
//! deletion is asked for, as Karpenter's operator library exports it: a gauge per object while
//! it terminates (`operator_<kind>_termination_current_time_seconds`) and a histogram of the
//! whole time once it is gone (`operator_<kind>_termination_duration_seconds`), with the
//! deprecated kind-less `operator_termination_*` beside them.

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus_client::registry::Registry;

use super::conditions::{Buckets, ConditionKind, DEFAULT_BUCKETS};
use super::{Gauges, Histograms, Labels};

/// An object whose deletion was asked for, as one look at the cluster saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Terminating {
    pub kind: ConditionKind,
    pub name: String,
    /// Its deletionTimestamp, in seconds since the Unix epoch.
    pub since: f64,
    /// The kind's own labels, as on its status-condition metrics.
    pub extra: Labels,
}

struct Families {
    current: Gauges,
    duration: Histograms,
}

impl Families {
    fn register(registry: &mut Registry, prefix: &str, buckets: Vec<f64>) -> Families {
        let f = Families {
            current: Gauges::default(),
            duration: Histograms::new_with_constructor(Buckets(buckets)),
        };
        registry.register(
            format!("{prefix}_termination_current_time_seconds"),
            "Seconds the object has been terminating",
            f.current.clone(),
        );
        registry.register(
            format!("{prefix}_termination_duration_seconds"),
            "How long the object took to go once its deletion was asked for",
            f.duration.clone(),
        );
        f
    }
}

pub struct TerminationMetrics {
    by_kind: BTreeMap<ConditionKind, Families>,
    global: Families,
    /// What was terminating at the last look, by kind and name.
    seen: Mutex<Option<BTreeMap<(ConditionKind, String), Terminating>>>,
}

impl TerminationMetrics {
    pub fn register(registry: &mut Registry) -> TerminationMetrics {
        let by_kind = ConditionKind::ALL
            .iter()
            .map(|k| {
                let prefix = format!("operator_{}", k.metric());
                (*k, Families::register(registry, &prefix, k.buckets()))
            })
            .collect();
        TerminationMetrics {
            by_kind,
            global: Families::register(registry, "operator", DEFAULT_BUCKETS.to_vec()),
            seen: Mutex::new(None),
        }
    }

    /// Sets the gauges to what terminates at `now` (epoch seconds) and times what went since
    /// the last look. `present` says whether an object of a kind still exists, terminating or
    /// not: one that vanished while terminating has gone.
    pub fn set(
        &self,
        terminating: &[Terminating],
        present: &dyn Fn(ConditionKind, &str) -> bool,
        now: f64,
    ) {
        for f in self.by_kind.values().chain([&self.global]) {
            f.current.clear();
        }
        let group_kind = |t: &Terminating| {
            let (group, kind) = t.kind.group_kind();
            vec![("group", group.to_string()), ("kind", kind.to_string())]
        };
        for t in terminating {
            let object = vec![("namespace", String::new()), ("name", t.name.clone())];
            let mut own = object.clone();
            own.extend(t.extra.iter().cloned());
            let mut global = object;
            global.extend(group_kind(t));
            let took = (now - t.since).max(0.0);
            self.by_kind[&t.kind].current.get_or_create(&own).set(took);
            self.global.current.get_or_create(&global).set(took);
        }
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(last) = seen.as_ref() {
            for t in last.values().filter(|t| !present(t.kind, &t.name)) {
                let took = (now - t.since).max(0.0);
                self.by_kind[&t.kind]
                    .duration
                    .get_or_create(&t.extra)
                    .observe(took);
                self.global
                    .duration
                    .get_or_create(&group_kind(t))
                    .observe(took);
            }
        }
        *seen = Some(
            terminating
                .iter()
                .map(|t| ((t.kind, t.name.clone()), t.clone()))
                .collect(),
        );
    }
}
