//! What the live controller would have served at `/metrics` and published as Kubernetes
//! Events over a simulated run (`joiner simulate --metrics FILE --events FILE`): the same
//! derivation (`joiner-telemetry`) over each step's report and the simulated cluster, with
//! events de-duplicated on simulated time as the live recorder does on the wall clock.

use std::time::Duration;

use joiner_controller::StepReport;
use joiner_controller::store::ClusterStore;
use joiner_model::api::NodeClaim;
use joiner_telemetry::events::{Involved, Recorder, Subjects, events_of, transition_events};
use joiner_telemetry::metrics::conditions::ConditionState;
use joiner_telemetry::metrics::state::ClusterState;
use joiner_telemetry::metrics::{Claims, Metrics, claims_of, record};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

/// One Kubernetes Event the controller published.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PublishedEvent {
    /// Simulated time, `HH:MM:SS` from the start.
    pub time: String,
    #[serde(rename = "type")]
    pub type_: &'static str,
    pub reason: &'static str,
    /// `Pod/namespace/name`, `NodeClaim/name` or `Node/name`.
    pub object: String,
    pub message: String,
}

/// Follows a run step by step.
pub struct Observer {
    metrics: Metrics,
    recorder: Recorder,
    /// Labels of the NodeClaims as of the end of the last step.
    claims: Claims,
    /// Conditions as of the end of the last step, to tell which changed.
    conditions: Vec<ConditionState>,
    events: Vec<PublishedEvent>,
}

impl Default for Observer {
    fn default() -> Self {
        Observer {
            metrics: Metrics::new("simulated"),
            recorder: Recorder::default(),
            claims: Claims::new(),
            conditions: Vec::new(),
            events: Vec::new(),
        }
    }
}

impl Observer {
    /// Counts what a step did, `at` seconds into the run, and describes the cluster after it.
    pub fn step<S: ClusterStore>(
        &mut self,
        store: &S,
        report: &StepReport,
        took: Duration,
        at: u64,
        now: Timestamp,
    ) {
        let after = store
            .list::<NodeClaim>()
            .map(|c| claims_of(&c))
            .unwrap_or_else(|_| self.claims.clone());
        let mut claims = std::mem::replace(&mut self.claims, after.clone());
        claims.extend(after);
        record(report, &claims, took, &self.metrics);
        let state = ClusterState::read(store, now);
        self.metrics.set_state(&state);
        let subjects = Subjects::read(store, report);
        let mut events = events_of(report, &subjects);
        events.extend(transition_events(&self.conditions, &state.conditions));
        self.conditions = state.conditions;
        for e in events {
            if !self.recorder.should_publish(&e, Duration::from_secs(at)) {
                continue;
            }
            self.events.push(PublishedEvent {
                time: crate::clock_text(at),
                type_: if e.is_warning() { "Warning" } else { "Normal" },
                reason: e.reason(),
                object: match &e.about {
                    Involved::Pod(key) => format!("Pod/{key}"),
                    Involved::NodeClaim(name) => format!("NodeClaim/{name}"),
                    Involved::Node(name) => format!("Node/{name}"),
                    Involved::NodePool(name) => format!("NodePool/{name}"),
                    Involved::EC2NodeClass(name) => format!("EC2NodeClass/{name}"),
                },
                message: e.message,
            });
        }
    }

    /// The exposition `/metrics` would serve now.
    pub fn exposition(&self) -> String {
        self.metrics.render()
    }

    /// Every event published, in order.
    pub fn events(&self) -> &[PublishedEvent] {
        &self.events
    }
}
