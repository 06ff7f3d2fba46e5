//! The scenario file of `joiner simulate`: timed steps over simulated time.
//!
//! ```yaml
//! name: learning-lab day
//! start: 2026-01-01T00:00:00Z   # optional; the clock starts here
//! tick: 10s                     # optional; the controller steps once per tick
//! duration: 24h                 # how long to simulate
//! steps:
//!   - at: 8h                    # from the start; or `after: 10m` from the previous step
//!     scale: {deployment: learning-lab, replicas: 4}
//!   - after: 30m
//!     addPods: {from: learning-lab, count: 2, prefix: extra}
//!   - advance: 1h               # a step that only moves time (same as `after`)
//!   - at: 12h
//!     deletePods: {names: [default/extra-0]}
//!     interruptSpot: {count: 1}  # a spot interruption warning, the instance reclaimed 2m later
//!     changeNodePool: {name: g4-nodepool, patch: {spec: {disruption: {consolidateAfter: 1m}}}}
//!     faults:
//!       insufficientCapacity: [{instanceType: g4dn.xlarge, zone: us-east-1a, capacityType: on-demand}]
//!       launchErrors: {count: 1, message: "RequestLimitExceeded"}
//!       registrationDelay: {delay: 5m, instances: 1}
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use joiner_model::duration::parse_duration;
use serde::Deserialize;

use crate::error::{Context, Error, invalid};

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub start: Option<String>,
    #[serde(default)]
    pub tick: Option<String>,
    pub duration: String,
    #[serde(default)]
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Step {
    #[serde(default)]
    pub at: Option<String>,
    #[serde(default)]
    pub after: Option<String>,
    #[serde(default)]
    pub advance: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
    #[serde(default)]
    pub scale: Option<Scale>,
    #[serde(default)]
    pub add_pods: Option<AddPods>,
    #[serde(default)]
    pub delete_pods: Option<DeletePods>,
    #[serde(default)]
    pub interrupt_spot: Option<Interrupt>,
    #[serde(default)]
    pub change_node_pool: Option<ChangeNodePool>,
    #[serde(default)]
    pub faults: Option<Faults>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scale {
    /// `name` or `namespace/name`.
    pub deployment: String,
    pub replicas: i32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddPods {
    /// A Deployment (`name` or `namespace/name`) whose pod template the pods copy.
    pub from: String,
    #[serde(default = "one")]
    pub count: usize,
    /// Names are `<prefix>-<n>`; default `<deployment>-extra`.
    #[serde(default)]
    pub prefix: Option<String>,
    /// Annotations added to each pod (e.g. `karpenter.sh/do-not-disrupt: "true"`).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

fn one() -> usize {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeletePods {
    /// `namespace/name` or `name` (in `default`).
    #[serde(default)]
    pub names: Vec<String>,
    /// Every pod whose name starts with this.
    #[serde(default)]
    pub prefix: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Interrupt {
    /// The NodeClaim whose instance is reclaimed (any capacity type; `*`: any NodeClaim, oldest
    /// first); else the oldest spot instances.
    #[serde(default)]
    pub node_claim: Option<String>,
    #[serde(default)]
    pub count: Option<usize>,
    /// How long between the warning and the reclaim (EC2 gives spot instances 2 minutes).
    #[serde(default)]
    pub notice: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeNodePool {
    pub name: String,
    /// A JSON merge patch (RFC 7386) over the NodePool in its `karpenter.sh/v1` form.
    pub patch: serde_json::Value,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Faults {
    /// Offerings that fail with insufficient capacity from now on.
    #[serde(default)]
    pub insufficient_capacity: Vec<Offering>,
    /// Offerings that have capacity again.
    #[serde(default)]
    pub restore_capacity: Vec<Offering>,
    #[serde(default)]
    pub launch_errors: Option<LaunchErrors>,
    #[serde(default)]
    pub registration_delay: Option<RegistrationDelay>,
    /// The next N cloud API calls are throttled.
    #[serde(default)]
    pub throttle: Option<u32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Offering {
    pub instance_type: String,
    pub zone: String,
    #[serde(default = "on_demand")]
    pub capacity_type: String,
}

fn on_demand() -> String {
    "on-demand".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchErrors {
    #[serde(default = "one")]
    pub count: usize,
    #[serde(default = "launch_error")]
    pub message: String,
}

fn launch_error() -> String {
    "simulated launch error".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistrationDelay {
    /// A duration, or `never`.
    pub delay: String,
    /// How many of the next instances launched (default 1).
    #[serde(default = "one")]
    pub instances: usize,
}

fn duration(what: &str, text: &str) -> Result<Duration, Error> {
    parse_duration(text).context(|| format!("{what}: {text:?}"))
}

/// A scenario with its times resolved: steps with their offset from the start, in order.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub name: String,
    pub start: Option<String>,
    pub tick: Duration,
    pub duration: Duration,
    pub steps: Vec<(Duration, Step)>,
}

impl Scenario {
    /// Reads and resolves the scenario file at `path`.
    pub fn load(path: &Path) -> Result<Resolved, Error> {
        let text =
            std::fs::read_to_string(path).context(|| format!("reading {}", path.display()))?;
        let s: Scenario = serde_saphyr::from_str(&text)
            .context(|| format!("{}: not a valid scenario", path.display()))?;
        s.resolve()
            .context(|| format!("{}: invalid scenario", path.display()))
    }

    /// Resolves the steps' times (`at`, `after`, `advance`) to offsets from the start.
    pub fn resolve(self) -> Result<Resolved, Error> {
        let tick = duration("tick", self.tick.as_deref().unwrap_or("10s"))?;
        if tick < Duration::from_secs(1) {
            return Err(invalid!("tick must be at least 1s"));
        }
        let total = duration("duration", &self.duration)?;
        let mut cursor = Duration::ZERO;
        let mut steps = Vec::new();
        for (i, step) in self.steps.into_iter().enumerate() {
            let when = match (&step.at, &step.after, &step.advance) {
                (Some(at), None, None) => {
                    let at = duration(&format!("steps[{i}].at"), at)?;
                    if at < cursor {
                        return Err(invalid!(
                            "steps[{i}].at: {at:?} is before the previous step ({cursor:?})"
                        ));
                    }
                    at
                }
                (None, Some(d), None) | (None, None, Some(d)) => {
                    cursor + duration(&format!("steps[{i}].after"), d)?
                }
                (None, None, None) => cursor,
                _ => return Err(invalid!("steps[{i}]: give one of at, after, advance")),
            };
            cursor = when;
            steps.push((when, step));
        }
        Ok(Resolved {
            name: self.name.unwrap_or_else(|| "scenario".into()),
            start: self.start,
            tick,
            duration: total,
            steps,
        })
    }
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut serde_json::Value, patch: &serde_json::Value) {
    use serde_json::Value;
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Default::default());
            }
            let Value::Object(t) = target else { return };
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}
