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
//!     # Any notice EC2 or AWS Health sends, in its shape: spotInterruption (reclaimed after
//!     # `notice`, 2m), rebalanceRecommendation (nothing ends), scheduledChange (retired at
//!     # `notice`, 72h), stateChange (stopping; gone after `notice`, 0s), capacityReservationEnding
//!     # (the Capacity Block of the NodeClaim's reservation ends after `notice`, 40m; its
//!     # instances go 30 minutes before the end).
//!     interrupt: {kind: scheduledChange, nodeClaim: "*", count: 1, notice: 72h}
//!     changeNodePool: {name: g4-nodepool, patch: {spec: {disruption: {consolidateAfter: 1m}}}}
//!   - at: 12h30m
//!     deleteNodeClaim: {nodeClaim: "*", count: 1}  # kubectl delete nodeclaim (oldest first)
//!     deleteNode: {nodeClaim: g4-nodepool-0123456789ab}  # kubectl delete node: that NodeClaim's
//!     deleteNodePool: {name: g4-nodepool}          # kubectl delete nodepool: its nodes go too
//!     # The node's GPUs fail (condition False, from the node monitoring agent), for 20m or for
//!     # good without `for`: node repair (featureGates.nodeRepair) replaces it after 10m.
//!     failNode: {nodeClaim: "*", count: 1, condition: AcceleratedHardwareReady, for: 20m}
//!     # With a reason a reboot clears, awsFeatureGates.rebootForRepair reboots it first (3m);
//!     # `survivesReboot: true` is a GPU a reboot does not mend: rebooted twice, then replaced.
//!     failNode: {nodeClaim: "*", reason: NvidiaXID119Error, survivesReboot: true}
//!     faults:
//!       insufficientCapacity: [{instanceType: g4dn.xlarge, zone: us-east-1a, capacityType: on-demand}]
//!       launchErrors: {count: 1, message: "RequestLimitExceeded"}
//!       registrationDelay: {delay: 5m, instances: 1}
//!   - at: 13h
//!     addInstances:              # in the cloud, not launched by Joiner: never to be touched
//!       - {id: i-0system00000001, instanceType: m5.large, zone: us-east-1a,
//!          tags: {"kubernetes.io/cluster/demo": owned, "eks:nodegroup-name": system}}
//!     faults:
//!       createTimeouts: 2        # the next 2 NodeClaim creates commit, then answer a timeout
//!       launchTimeouts: 1        # the next launch starts its instance, then answers a timeout
//!       cacheLag: 20s            # the controller's watch cache trails the API server
//!       listLag: 30s             # the cloud's listings trail launches and terminations
//!       volumeDetachDelay: 2m    # a persistent volume takes 2m to detach once unused
//!       watchDown: 10m           # every watch of the controller fails for 10m (stale caches)
//! ```
//!
//! Every node ends through Joiner's termination (the NodeClaim's finalizer): tainted, drained
//! pod by pod as PodDisruptionBudgets allow, then its instance terminated. Pods take their
//! `terminationGracePeriodSeconds` (from the Deployment's pod template; 30 s when unset) to stop
//! once evicted or deleted, as their kubelet takes it; every eviction is a `disruption.Evicted`
//! event of the `-o json` timeline naming its pods and NodeClaim.
//!
//! Limits, checked with an error naming the step and field ([`LIMITS`]): at most 10,000 steps;
//! `duration` up to 31 days and at most 200,000 ticks; `scale.replicas` 0 to 10,000;
//! `addPods.count` 1 to 10,000; `addInstances` up to 1,000 per step; `interrupt.count`, `interruptSpot.count`,
//! `deleteNodeClaim.count` and `deleteNode.count` up to 1,000; `launchErrors.count`, `registrationDelay.instances`, `createTimeouts` and
//! `launchTimeouts` up to 10,000; `throttle` up to 1,000,000 calls; `cacheLag`, `listLag`,
//! `volumeDetachDelay` and `watchDown` up to 1 hour; `interrupt.notice` up to 31 days.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use joiner_model::duration::parse_duration;
use joiner_model::wellknown::InterruptionKind;
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
    /// A spot interruption warning: `interrupt` with `kind: spotInterruption`.
    #[serde(default)]
    pub interrupt_spot: Option<Interrupt>,
    /// An interruption notice of any kind, as the cloud sends it.
    #[serde(default)]
    pub interrupt: Option<Interrupt>,
    #[serde(default)]
    pub change_node_pool: Option<ChangeNodePool>,
    /// NodeClaims deleted as `kubectl delete nodeclaim` deletes them.
    #[serde(default)]
    pub delete_node_claim: Option<NodeClaimTarget>,
    /// The Nodes of NodeClaims deleted as `kubectl delete node` deletes them.
    #[serde(default)]
    pub delete_node: Option<NodeClaimTarget>,
    /// A NodePool deleted as `kubectl delete nodepool` deletes it: its nodes go with it.
    #[serde(default)]
    pub delete_node_pool: Option<DeleteNodePool>,
    /// Nodes whose hardware fails: they report a condition `False`, as the EKS node monitoring
    /// agent reports a GPU fault.
    #[serde(default)]
    pub fail_node: Option<FailNode>,
    #[serde(default)]
    pub faults: Option<Faults>,
    /// Instances put into the cloud that Joiner did not launch.
    #[serde(default)]
    pub add_instances: Vec<AddInstance>,
}

/// An instance another tool launched (a managed node group, a self-managed node, another
/// cluster, Karpenter).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddInstance {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    #[serde(default = "on_demand")]
    pub capacity_type: String,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
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
    /// `spotInterruption` (the default), `rebalanceRecommendation`, `scheduledChange`,
    /// `stateChange` or `capacityReservationEnding` ([`InterruptionKind`]).
    #[serde(default)]
    pub kind: Option<String>,
    /// The NodeClaim whose instance is reclaimed (any capacity type; `*`: any NodeClaim, oldest
    /// first); else the oldest spot instances.
    #[serde(default)]
    pub node_claim: Option<String>,
    #[serde(default)]
    pub count: Option<usize>,
    /// How long between the notice and the instance's end: for a spot interruption the reclaim
    /// (2m by default, as EC2 gives), a scheduled change its start (72h), a state change the
    /// instance stopping (0s), a capacity reservation's end the block's end (40m; EC2
    /// terminates its instances 30 minutes before it). A rebalance recommendation ends nothing.
    #[serde(default)]
    pub notice: Option<String>,
}

impl Interrupt {
    /// The kind of notice (`interruptSpot` is always a spot interruption).
    pub fn kind(&self) -> Result<InterruptionKind, String> {
        match self.kind.as_deref() {
            None => Ok(InterruptionKind::SpotInterruption),
            Some(k) => InterruptionKind::parse(k).ok_or_else(|| {
                let all: Vec<&str> = InterruptionKind::ALL.iter().map(|k| k.as_str()).collect();
                format!("kind: {k:?} is not one of {}", all.join(", "))
            }),
        }
    }

    /// How long the notice gives, by kind (see [`Interrupt::notice`]).
    pub fn default_notice(kind: InterruptionKind) -> Duration {
        match kind {
            InterruptionKind::SpotInterruption => Duration::from_secs(120),
            InterruptionKind::ScheduledChange => Duration::from_secs(72 * 3600),
            InterruptionKind::CapacityReservationEnding => Duration::from_secs(40 * 60),
            InterruptionKind::StateChange | InterruptionKind::RebalanceRecommendation => {
                Duration::ZERO
            }
        }
    }
}

/// Which NodeClaims a `deleteNodeClaim` or `deleteNode` step acts on, in the shape of
/// `interruptSpot`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClaimTarget {
    /// A NodeClaim's name, or `*` for any, oldest first.
    pub node_claim: String,
    /// How many (default 1).
    #[serde(default)]
    pub count: Option<usize>,
}

/// `failNode`: the Nodes of the NodeClaims named (`*`: the oldest first, `count` of them) report
/// `condition` (default `AcceleratedHardwareReady`) `False`, for `for` (then `True` again) or for
/// as long as they run.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FailNode {
    pub node_claim: String,
    #[serde(default)]
    pub count: Option<usize>,
    #[serde(default)]
    pub condition: Option<String>,
    #[serde(default, rename = "for")]
    pub for_: Option<String>,
    /// The condition's reason, as the node monitoring agent writes it (`NvidiaXID119Error`):
    /// node repair reboots for the faults a reboot clears (with `rebootForRepair`).
    #[serde(default)]
    pub reason: Option<String>,
    /// Whether the fault is still there after a reboot (a GPU that is really broken); by
    /// default a reboot clears it.
    #[serde(default)]
    pub survives_reboot: bool,
}

impl FailNode {
    /// The node condition that fails.
    pub fn condition(&self) -> &str {
        self.condition
            .as_deref()
            .unwrap_or("AcceleratedHardwareReady")
    }

    /// The condition's reason, `SimulatedFault` unless given.
    pub fn reason(&self) -> &str {
        self.reason.as_deref().unwrap_or("SimulatedFault")
    }

    /// The NodeClaims it acts on, in `deleteNode`'s shape.
    pub fn target(&self) -> NodeClaimTarget {
        NodeClaimTarget {
            node_claim: self.node_claim.clone(),
            count: self.count,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteNodePool {
    pub name: String,
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
    /// The next N NodeClaim creates (any create the controller sends) commit, then answer a
    /// timeout.
    #[serde(default)]
    pub create_timeouts: Option<u32>,
    /// The next N launches start their instance, then answer a timeout.
    #[serde(default)]
    pub launch_timeouts: Option<u32>,
    /// How far the controller's watch cache trails the API server from now on (`0s`: not).
    #[serde(default)]
    pub cache_lag: Option<String>,
    /// How far the cloud's listings trail launches and terminations from now on, and how long
    /// a fresh instance reads as NotFound.
    #[serde(default)]
    pub list_lag: Option<String>,
    /// How long a persistent volume takes to detach once no pod on its node uses it, from now
    /// on (default 10 s); termination waits for it before the instance goes.
    #[serde(default)]
    pub volume_detach_delay: Option<String>,
    /// Every watch of the controller fails for this long from now on, after it has synced:
    /// its caches keep what they last saw, and it must not act on them.
    #[serde(default)]
    pub watch_down: Option<String>,
    /// Device plugins that publish another amount than the plan predicted on nodes of a type
    /// registering from now on (a node-specific sharing config, a failed GPU): what Joiner
    /// must notice and stop predicting.
    #[serde(default)]
    pub device_plugin: Vec<DevicePluginFault>,
    /// DRA drivers that publish fewer devices than their templates on nodes of a type
    /// registering from now on (a GPU fallen off the bus).
    #[serde(default)]
    pub dra_driver: Vec<DraDriverFault>,
    /// gpu-feature-discovery writing another value for a label than the plan predicted on
    /// nodes of a type registering from now on.
    #[serde(default)]
    pub gpu_feature_discovery: Vec<GfdFault>,
}

/// `faults.draDriver[]`: on nodes of `instanceType`, `driver` publishes only `publishes` of
/// the devices its templates predict.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DraDriverFault {
    pub instance_type: String,
    /// A DRA driver, e.g. `gpu.nvidia.com`.
    pub driver: String,
    pub publishes: u32,
}

/// `faults.gpuFeatureDiscovery[]`: on nodes of `instanceType`, gpu-feature-discovery writes
/// `value` for `label` (a `nvidia.com/` label).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GfdFault {
    pub instance_type: String,
    pub label: String,
    pub value: String,
}

/// `faults.devicePlugin[]`: nodes of `instanceType` publish `publishes` of `resource` (0:
/// none at all), whatever the NodeClaim predicted.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DevicePluginFault {
    pub instance_type: String,
    /// An extended resource, e.g. `nvidia.com/gpu`.
    pub resource: String,
    pub publishes: u32,
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

/// The most a scenario may ask for, so that no file makes `joiner simulate` panic, grow
/// without bound or run for hours.
pub struct Limits {
    pub steps: usize,
    pub duration: Duration,
    pub ticks: u64,
    pub replicas: i32,
    pub add_pods: usize,
    pub add_instances: usize,
    pub interruptions: usize,
    /// `launchErrors.count`, `registrationDelay.instances`, `createTimeouts`, `launchTimeouts`.
    pub fault_count: u64,
    pub throttle: u32,
    /// `cacheLag`, `listLag`, `volumeDetachDelay`, `watchDown`.
    pub lag: Duration,
    /// An interruption's `notice`.
    pub notice: Duration,
}

pub const LIMITS: Limits = Limits {
    steps: 10_000,
    duration: Duration::from_secs(31 * 24 * 3600),
    ticks: 200_000,
    replicas: 10_000,
    add_pods: 10_000,
    add_instances: 1_000,
    interruptions: 1_000,
    fault_count: 10_000,
    throttle: 1_000_000,
    lag: Duration::from_secs(3600),
    notice: Duration::from_secs(31 * 24 * 3600),
};

fn at_most(field: &str, value: u64, max: u64) -> Result<(), String> {
    if value > max {
        Err(format!("{field}: {value} is more than the {max} allowed"))
    } else {
        Ok(())
    }
}

impl Step {
    /// Checks the step's counts and durations against [`LIMITS`]; the error names the field.
    fn check_limits(&self) -> Result<(), String> {
        let l = &LIMITS;
        if let Some(s) = &self.scale
            && !(0..=l.replicas).contains(&s.replicas)
        {
            return Err(format!(
                "scale.replicas: {} is outside 0 to {}",
                s.replicas, l.replicas
            ));
        }
        if let Some(a) = &self.add_pods {
            if a.count == 0 {
                return Err("addPods.count: must be at least 1".into());
            }
            at_most("addPods.count", a.count as u64, l.add_pods as u64)?;
        }
        at_most(
            "addInstances",
            self.add_instances.len() as u64,
            l.add_instances as u64,
        )?;
        for (field, interrupt) in [
            ("interruptSpot", &self.interrupt_spot),
            ("interrupt", &self.interrupt),
        ] {
            let Some(i) = interrupt else { continue };
            at_most(
                &format!("{field}.count"),
                i.count.unwrap_or(1) as u64,
                l.interruptions as u64,
            )?;
            let kind = i.kind().map_err(|e| format!("{field}.{e}"))?;
            if field == "interruptSpot" && kind != InterruptionKind::SpotInterruption {
                return Err(format!(
                    "{field}.kind: interruptSpot is always spotInterruption; use interrupt"
                ));
            }
            if let Some(n) = &i.notice {
                let d = parse_duration(n).map_err(|e| format!("{field}.notice: {n:?}: {e}"))?;
                if d > l.notice {
                    return Err(format!(
                        "{field}.notice: {d:?} is longer than the {:?} allowed",
                        l.notice
                    ));
                }
            }
        }
        for (field, target) in [
            ("deleteNodeClaim.count", &self.delete_node_claim),
            ("deleteNode.count", &self.delete_node),
        ] {
            if let Some(t) = target {
                at_most(field, t.count.unwrap_or(1) as u64, l.interruptions as u64)?;
            }
        }
        if let Some(f) = &self.fail_node {
            at_most(
                "failNode.count",
                f.count.unwrap_or(1) as u64,
                l.interruptions as u64,
            )?;
            if f.condition().is_empty() || f.condition().contains(char::is_whitespace) {
                return Err(format!(
                    "failNode.condition: {:?} is not a condition type",
                    f.condition()
                ));
            }
            if let Some(d) = &f.for_ {
                let d = parse_duration(d).map_err(|e| format!("failNode.for: {d:?}: {e}"))?;
                if d > l.notice {
                    return Err(format!(
                        "failNode.for: {d:?} is longer than the {:?} allowed",
                        l.notice
                    ));
                }
            }
        }
        let Some(f) = &self.faults else {
            return Ok(());
        };
        if let Some(e) = &f.launch_errors {
            at_most("faults.launchErrors.count", e.count as u64, l.fault_count)?;
        }
        if let Some(r) = &f.registration_delay {
            at_most(
                "faults.registrationDelay.instances",
                r.instances as u64,
                l.fault_count,
            )?;
        }
        for (field, n) in [
            ("faults.createTimeouts", f.create_timeouts),
            ("faults.launchTimeouts", f.launch_timeouts),
        ] {
            at_most(field, u64::from(n.unwrap_or(0)), l.fault_count)?;
        }
        at_most(
            "faults.devicePlugin",
            f.device_plugin.len() as u64,
            l.interruptions as u64,
        )?;
        for d in &f.device_plugin {
            at_most(
                "faults.devicePlugin[].publishes",
                u64::from(d.publishes),
                l.fault_count,
            )?;
        }
        at_most(
            "faults.draDriver",
            f.dra_driver.len() as u64,
            l.interruptions as u64,
        )?;
        at_most(
            "faults.gpuFeatureDiscovery",
            f.gpu_feature_discovery.len() as u64,
            l.interruptions as u64,
        )?;
        for (i, g) in f.gpu_feature_discovery.iter().enumerate() {
            if !g.label.starts_with("nvidia.com/") {
                return Err(format!(
                    "faults.gpuFeatureDiscovery[{i}].label: {:?} is not a label gpu-feature-discovery writes (they start with nvidia.com/)",
                    g.label
                ));
            }
            if !joiner_model::names::is_label_value(&g.value) {
                return Err(format!(
                    "faults.gpuFeatureDiscovery[{i}].value: {:?} is not a label value the API server accepts",
                    g.value
                ));
            }
        }
        at_most(
            "faults.throttle",
            u64::from(f.throttle.unwrap_or(0)),
            u64::from(l.throttle),
        )?;
        for (field, lag) in [
            ("faults.cacheLag", &f.cache_lag),
            ("faults.listLag", &f.list_lag),
            ("faults.volumeDetachDelay", &f.volume_detach_delay),
            ("faults.watchDown", &f.watch_down),
        ] {
            if let Some(text) = lag {
                let d = parse_duration(text).map_err(|e| format!("{field}: {text:?}: {e}"))?;
                if d > l.lag {
                    return Err(format!(
                        "{field}: {d:?} is longer than the {:?} allowed",
                        l.lag
                    ));
                }
            }
        }
        Ok(())
    }
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
        if total > LIMITS.duration {
            return Err(invalid!(
                "duration: {total:?} is longer than the {:?} a scenario may last",
                LIMITS.duration
            ));
        }
        let ticks = total.as_secs() / tick.as_secs().max(1);
        if ticks > LIMITS.ticks {
            return Err(invalid!(
                "tick: {tick:?} over {total:?} is {ticks} ticks, more than the {} allowed; use a longer tick",
                LIMITS.ticks
            ));
        }
        if self.steps.len() > LIMITS.steps {
            return Err(invalid!(
                "steps: {} steps, more than the {} allowed",
                self.steps.len(),
                LIMITS.steps
            ));
        }
        for (i, step) in self.steps.iter().enumerate() {
            step.check_limits()
                .map_err(|e| invalid!("steps[{i}].{e}"))?;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(yaml: &str) -> Result<Resolved, String> {
        let s: Scenario = serde_saphyr::from_str(yaml).map_err(|e| e.to_string())?;
        s.resolve().map_err(|e| e.to_string())
    }

    #[test]
    fn counts_past_the_limits_are_errors_naming_the_step_and_field() {
        let e = resolve(
            "duration: 1h\nsteps:\n  - at: 0s\n  - at: 1m\n    faults: {launchErrors: {count: 18446744073709551615}}\n",
        )
        .expect_err("too many");
        assert!(e.contains("steps[1].faults.launchErrors.count"), "{e}");
        for (yaml, field) in [
            (
                "scale: {deployment: x, replicas: -1}",
                "steps[0].scale.replicas",
            ),
            (
                "scale: {deployment: x, replicas: 2000000000}",
                "steps[0].scale.replicas",
            ),
            (
                "addPods: {from: x, count: 100000000}",
                "steps[0].addPods.count",
            ),
            ("addPods: {from: x, count: 0}", "steps[0].addPods.count"),
            ("faults: {cacheLag: 48h}", "steps[0].faults.cacheLag"),
            ("faults: {watchDown: 2h}", "steps[0].faults.watchDown"),
            ("interrupt: {kind: spotReclaim}", "steps[0].interrupt.kind"),
            (
                "interruptSpot: {kind: scheduledChange}",
                "steps[0].interruptSpot.kind",
            ),
            ("interrupt: {notice: 90d}", "steps[0].interrupt.notice"),
            (
                "faults: {createTimeouts: 4000000000}",
                "steps[0].faults.createTimeouts",
            ),
            (
                "faults: {gpuFeatureDiscovery: [{instanceType: g6.xlarge, label: example.com/x, value: a}]}",
                "steps[0].faults.gpuFeatureDiscovery[0].label",
            ),
            (
                "faults: {gpuFeatureDiscovery: [{instanceType: g6.xlarge, label: nvidia.com/gpu.product, value: 'NVIDIA L4'}]}",
                "steps[0].faults.gpuFeatureDiscovery[0].value",
            ),
        ] {
            let e = resolve(&format!("duration: 1h\nsteps:\n  - {yaml}\n")).expect_err(yaml);
            assert!(e.contains(field), "{yaml}: {e}");
        }
    }

    #[test]
    fn every_interruption_kind_is_named_with_its_default_notice() {
        let r = resolve(
            "duration: 1h\nsteps:\n  - interrupt: {kind: scheduledChange, nodeClaim: \"*\"}\n    interruptSpot: {count: 2}\n",
        )
        .expect("valid");
        let step = &r.steps[0].1;
        let i = step.interrupt.as_ref().expect("interrupt");
        assert_eq!(i.kind(), Ok(InterruptionKind::ScheduledChange));
        assert_eq!(
            Interrupt::default_notice(InterruptionKind::ScheduledChange),
            Duration::from_secs(72 * 3600)
        );
        let spot = step.interrupt_spot.as_ref().expect("interruptSpot");
        assert_eq!(spot.kind(), Ok(InterruptionKind::SpotInterruption));
        let e = resolve("duration: 1h\nsteps:\n  - interrupt: {kind: bogus}\n").expect_err("bogus");
        assert!(
            e.contains("capacityReservationEnding"),
            "lists the kinds: {e}"
        );
    }

    #[test]
    fn a_tiny_tick_over_a_long_duration_is_refused() {
        let e = resolve("tick: 1s\nduration: 720h\n").expect_err("too many ticks");
        assert!(e.contains("tick"), "{e}");
        let e = resolve("duration: 9000h\n").expect_err("too long");
        assert!(e.contains("duration"), "{e}");
        assert!(resolve("tick: 10s\nduration: 24h\n").is_ok());
    }
}
