//! One simulated run: the controller's loops (provisioning, lifecycle, disruption) against the
//! in-memory cluster, the simulated cloud and kubelet, and a scheduler, over simulated time,
//! driven by a resolved scenario. Deterministic: the same input gives the same output, byte for
//! byte.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use joiner_controller::DisruptionEvent;
use joiner_controller::clock::{Clock, ManualClock};
use joiner_controller::cloud::{CloudProvider, InstanceState, OfferingKey};
use joiner_controller::interruption::messages;
use joiner_controller::pods::{is_pending, pod_key};
use joiner_controller::store::{CachedClient, ClusterStore, InMemoryCluster, StoreError};
use joiner_controller::{Config, Controller, ControllerError, StepReport};
use joiner_engine::catalog::{CapacityType, Catalog};
use joiner_model::api::NodeClaim;
use joiner_model::api::NodePool;
use joiner_model::settings::Settings;
use joiner_model::wellknown::{DisruptionAction, InterruptionKind};
use joiner_model::wellknown::{annotations, labels, tags};
use joiner_model::workloads::expand_workloads;
use joiner_model::{Manifests, Quantity, Sourced};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};

use crate::cloud::{Registration, SimulatedCloud};
use crate::error::{Context, Error, invalid};
use crate::interruption_queue::SimulatedInterruptionQueue;
use crate::kubelet::SimulatedKubelet;
use crate::scenario::{self, NodeClaimTarget, Resolved, Step, merge_patch};
use crate::scheduler::{collect_orphans, schedule_pending};
use crate::telemetry::Observer;
use crate::volumes::SimulatedAttacher;

mod node_faults;

use node_faults::Fault;

/// How often a point is recorded for the charts.
const SAMPLE_EVERY: Duration = Duration::from_secs(60);

/// One point of the charts.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    pub t: u64,
    /// NodeClaims not being disrupted (replacements in flight count, the nodes they replace not).
    pub nodes: usize,
    /// Running instances (what is paid for).
    pub instances: usize,
    pub cost_per_hour: f64,
    pub gpus_allocatable: f64,
    pub gpus_requested: f64,
    pub pods_running: usize,
    pub pods_pending: usize,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TypeUsage {
    pub node_hours: f64,
    pub price_per_hour: f64,
    pub cost: f64,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub scenario: String,
    pub simulated_seconds: u64,
    pub tick_seconds: u64,
    pub peak_nodes: usize,
    pub peak_instances: usize,
    pub final_nodes: usize,
    /// Instances Joiner launched (not those the scenario added).
    pub instances_launched: usize,
    /// NodeClaims the run created: every create the API server committed, those whose answer
    /// was a timeout included (what happened, not what the controller was told).
    pub node_claims_created: usize,
    /// TerminateInstances calls on instances without Joiner's ownership tags: always 0 unless
    /// something is badly wrong.
    pub foreign_instances_terminated: usize,
    pub by_instance_type: BTreeMap<String, TypeUsage>,
    pub total_node_hours: f64,
    pub total_cost: f64,
    pub pods_scheduled: usize,
    pub pending_mean_seconds: f64,
    pub pending_max_seconds: f64,
    pub pods_still_pending: usize,
    /// Time-weighted share of allocatable GPUs requested by bound pods, over time with GPUs.
    pub gpu_allocation_mean: f64,
    pub disruptions: BTreeMap<String, usize>,
    /// Nodes a `failNode` step failed that node repair replaced, and how long each took from
    /// the fault to the repair's decision; absent when the scenario fails no node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repairs: Option<Repairs>,
    pub errors: usize,
}

/// Node repair in a run: how many failed nodes were replaced, how soon.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Repairs {
    /// Nodes failed (each `failNode` target).
    pub failed: usize,
    /// Of those, replaced by node repair.
    pub repaired: usize,
    /// Reboots node repair made (`rebootForRepair`).
    #[serde(skip_serializing_if = "is_zero")]
    pub rebooted: usize,
    /// Failed nodes a reboot mended.
    #[serde(skip_serializing_if = "is_zero")]
    pub recovered_by_reboot: usize,
    pub mean_seconds: f64,
    pub max_seconds: f64,
}

/// What a run produced.
pub struct Outcome {
    pub events: Vec<Value>,
    pub samples: Vec<Sample>,
    pub summary: Summary,
    /// The NodeClaims the cluster holds at the end, as the API server has them.
    pub node_claims: Vec<NodeClaim>,
    /// The metrics and events the controller would have served, when asked for
    /// ([`simulate_observed`]).
    pub telemetry: Option<Observer>,
}

fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

/// `HH:MM:SS` from the start, with a day prefix past the first day.
pub fn clock_text(t: u64) -> String {
    let (d, rest) = (t / 86_400, t % 86_400);
    let hms = format!(
        "{:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    );
    if d == 0 { hms } else { format!("{d}d{hms}") }
}

struct Workload {
    deployment: Sourced<Deployment>,
    /// The pods the Deployment wants now, by key.
    pods: BTreeMap<String, Pod>,
}

impl Workload {
    fn new(deployment: Sourced<Deployment>) -> Workload {
        let mut w = Workload {
            deployment,
            pods: BTreeMap::new(),
        };
        let replicas = w.deployment.object.spec.replicas.unwrap_or(1);
        w.scale(replicas);
        w
    }

    fn scale(&mut self, replicas: i32) {
        self.deployment.object.spec.replicas = Some(replicas.max(0));
        let mut m = Manifests::default();
        m.deployments.push(self.deployment.clone());
        self.pods = expand_workloads(&m)
            .into_iter()
            .map(|p| (pod_key(&p.object), p.object))
            .collect();
    }

    fn owner(&self) -> String {
        format!(
            "Deployment/{}",
            self.deployment
                .object
                .metadata
                .name
                .as_deref()
                .unwrap_or_default()
        )
    }

    fn namespace(&self) -> &str {
        self.deployment
            .object
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("default")
    }

    fn template(&self) -> Pod {
        let mut w = Workload {
            deployment: self.deployment.clone(),
            pods: BTreeMap::new(),
        };
        w.scale(1);
        w.pods.into_values().next().unwrap_or_default()
    }
}

struct Sim {
    clock: ManualClock,
    store: Arc<InMemoryCluster>,
    cloud: Arc<SimulatedCloud>,
    kubelet: SimulatedKubelet,
    attacher: SimulatedAttacher,
    /// Where the simulated cloud's interruption warnings go; the controller polls it.
    queue: SimulatedInterruptionQueue,
    config: Config,
    start: Timestamp,
    workloads: Vec<Workload>,
    prices: BTreeMap<(String, String, CapacityType), f64>,
    events: Vec<Value>,
    unschedulable_seen: BTreeSet<String>,
    /// uid to when the pod was first seen pending.
    pending_since: BTreeMap<String, u64>,
    pending_done: BTreeSet<String>,
    pending_waits: Vec<u64>,
    /// Instances the scenario put into the cloud (not Joiner's).
    added: BTreeSet<String>,
    /// NodeClaim creates committed by loading the input, which the run did not create.
    loaded_claims: u64,
    /// When the controller's watches, failed by `faults.watchDown`, recover (seconds from the
    /// start).
    watch_up_at: Option<u64>,
    /// Nodes a `failNode` step failed for a while: when (seconds from the start) each reports
    /// its condition `True` again, its NodeClaim.
    recoveries: Vec<(u64, String, String, String)>,
    /// NodeClaims whose node is failed now, and since when (seconds from the start).
    failed_since: BTreeMap<String, u64>,
    /// Nodes failed in all.
    failed_count: usize,
    /// For each failed node node repair replaced, the seconds from the fault to the decision;
    /// for each a reboot mended, to its recovery.
    repair_times: Vec<u64>,
    /// The faults `failNode` put on nodes that a reboot may clear, by Node name.
    faults: BTreeMap<String, Fault>,
    /// Reboots node repair had the cloud make.
    rebooted: usize,
    /// Failed nodes a reboot mended.
    recovered_by_reboot: usize,
}

impl Sim {
    fn t(&self) -> u64 {
        self.clock.now().duration_since(self.start).as_secs().max(0) as u64
    }

    fn event(&mut self, event: &str, fields: Value) {
        let t = self.t();
        let mut obj = serde_json::Map::new();
        obj.insert("at".into(), json!(clock_text(t)));
        obj.insert("t".into(), json!(t));
        obj.insert("event".into(), json!(event));
        if let Value::Object(f) = fields {
            obj.extend(f);
        }
        self.events.push(Value::Object(obj));
    }

    fn find_workload(&mut self, name: &str) -> Result<&mut Workload, Error> {
        let (ns, n) = name.split_once('/').unwrap_or(("", name));
        self.workloads
            .iter_mut()
            .find(|w| {
                w.deployment.object.metadata.name.as_deref() == Some(n)
                    && (ns.is_empty() || w.namespace() == ns)
            })
            .ok_or_else(|| invalid!("no Deployment {name} in the manifests"))
    }

    /// Deployments keep their pods: missing ones are created pending, extra ones deleted.
    fn reconcile_workloads(&mut self) -> Result<(), Error> {
        let pods = self.store.list::<Pod>()?;
        let present: BTreeSet<String> = pods.iter().map(pod_key).collect();
        for w in &self.workloads {
            let owner = w.owner();
            for p in &pods {
                let mine = p.metadata.namespace.as_deref() == Some(w.namespace())
                    && p.metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(annotations::OWNER))
                        == Some(&owner);
                if mine && !w.pods.contains_key(&pod_key(p)) {
                    let _ = self.store.delete::<Pod>(
                        p.metadata.namespace.as_deref(),
                        p.metadata.name.as_deref().unwrap_or_default(),
                    );
                }
            }
            for (key, pod) in &w.pods {
                if !present.contains(key) {
                    self.store.create(pod)?;
                }
            }
        }
        Ok(())
    }

    fn apply(&mut self, step: &Step) -> Result<(), Error> {
        if let Some(note) = &step.note {
            self.event("note", json!({"note": note}));
        }
        if let Some(s) = &step.scale {
            let w = self.find_workload(&s.deployment)?;
            w.scale(s.replicas);
            let deployment = w.deployment.object.clone();
            // The cluster's Deployment follows, as `kubectl scale` writes it (a CapacityBuffer's
            // `scalableRef` reads its replicas).
            store_deployment(&self.store, &deployment)?;
            self.event(
                "scale",
                json!({"deployment": s.deployment, "replicas": s.replicas}),
            );
        }
        if let Some(a) = &step.add_pods {
            let w = self.find_workload(&a.from)?;
            let mut template = w.template();
            let prefix = a.prefix.clone().unwrap_or_else(|| {
                format!(
                    "{}-extra",
                    w.deployment
                        .object
                        .metadata
                        .name
                        .as_deref()
                        .unwrap_or("pod")
                )
            });
            if let Some(ann) = template.metadata.annotations.as_mut() {
                ann.remove(annotations::OWNER);
            }
            template
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .extend(a.annotations.clone());
            let mut added = Vec::new();
            let mut i = 0;
            while added.len() < a.count {
                let name = format!("{prefix}-{i}");
                i += 1;
                let mut pod = template.clone();
                pod.metadata.name = Some(name);
                // A name taken by an earlier step moves on to the next ordinal; any other
                // failure ends the step rather than retrying the same name forever.
                match self.store.create(&pod) {
                    Ok(_) => added.push(pod_key(&pod)),
                    Err(StoreError::AlreadyExists(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            self.event("addPods", json!({"pods": added}));
        }
        if let Some(d) = &step.delete_pods {
            let mut deleted = Vec::new();
            for p in self.store.list::<Pod>()? {
                let key = pod_key(&p);
                let name = p.metadata.name.clone().unwrap_or_default();
                let hit = d.names.iter().any(|n| *n == key || *n == name)
                    || d.prefix
                        .as_ref()
                        .is_some_and(|x| name.starts_with(x.as_str()));
                if hit {
                    self.store
                        .delete::<Pod>(p.metadata.namespace.as_deref(), &name)?;
                    deleted.push(key);
                }
            }
            self.event("deletePods", json!({"pods": deleted}));
        }
        for i in [&step.interrupt_spot, &step.interrupt]
            .into_iter()
            .flatten()
        {
            self.interrupt(i)?;
        }
        if let Some(c) = &step.change_node_pool {
            let pool: NodePool = self
                .store
                .get(None, &c.name)?
                .ok_or_else(|| invalid!("no NodePool {}", c.name))?;
            let mut v = serde_json::to_value(&pool)?;
            merge_patch(&mut v, &c.patch);
            let mut new: NodePool = serde_json::from_value(v)
                .context(|| format!("changeNodePool {}: the patched NodePool", c.name))?;
            new.metadata.resource_version = pool.metadata.resource_version.clone();
            self.store.update(&new)?;
            self.event(
                "changeNodePool",
                json!({"nodePool": c.name, "patch": c.patch}),
            );
        }
        if let Some(t) = &step.delete_node_claim {
            let targets = self.node_claims_for(t)?;
            for c in &targets {
                self.store.delete::<NodeClaim>(None, c.name())?;
            }
            let names: Vec<&str> = targets.iter().map(NodeClaim::name).collect();
            self.event("deleteNodeClaim", json!({"nodeClaims": names}));
        }
        if let Some(t) = &step.delete_node {
            let mut deleted = Vec::new();
            for c in self.node_claims_for(t)? {
                let Some(node) = c.status.node_name.clone() else {
                    continue;
                };
                match self.store.delete::<Node>(None, &node) {
                    Ok(_) | Err(StoreError::NotFound(_)) => {}
                    Err(e) => return Err(e.into()),
                }
                deleted.push(json!({"node": node, "nodeClaim": c.name()}));
            }
            self.event("deleteNode", json!({"nodes": deleted}));
        }
        if let Some(f) = &step.fail_node {
            self.fail_nodes(f)?;
        }
        if let Some(d) = &step.delete_node_pool {
            self.store
                .delete::<NodePool>(None, &d.name)
                .map_err(|_| invalid!("deleteNodePool: no NodePool {}", d.name))?;
            self.event("deleteNodePool", json!({"nodePool": d.name}));
        }
        for a in &step.add_instances {
            let capacity_type = CapacityType::parse(&a.capacity_type).ok_or_else(|| {
                invalid!(
                    "addInstances: {}: unknown capacity type {}",
                    a.id,
                    a.capacity_type
                )
            })?;
            let offering = OfferingKey {
                instance_type: a.instance_type.clone(),
                zone: a.zone.clone(),
                capacity_type,
            };
            self.cloud
                .add_instance(&a.id, &offering, a.tags.clone())
                .map_err(|e| invalid!("addInstances: {e}"))?;
            self.added.insert(a.id.clone());
            self.event(
                "instanceAdded",
                json!({"instance": a.id, "instanceType": a.instance_type, "zone": a.zone, "tags": a.tags}),
            );
        }
        if let Some(f) = &step.faults {
            if let Some(n) = f.create_timeouts {
                self.store.time_out_next_creates(n);
            }
            if let Some(n) = f.launch_timeouts {
                self.cloud.time_out_next_launches(n);
            }
            if let Some(lag) = &f.cache_lag {
                self.store
                    .set_cache_lag(joiner_model::duration::parse_duration(lag)?);
            }
            if let Some(delay) = &f.volume_detach_delay {
                self.attacher.detach_delay = joiner_model::duration::parse_duration(delay)?;
            }
            if let Some(down) = &f.watch_down {
                let down = joiner_model::duration::parse_duration(down)?;
                self.store.fail_watch("*");
                let up = self.t() + down.as_secs();
                self.watch_up_at = Some(self.watch_up_at.map_or(up, |u| u.max(up)));
            }
            if let Some(lag) = &f.list_lag {
                self.cloud
                    .set_list_lag(joiner_model::duration::parse_duration(lag)?);
            }
            for (list, short) in [
                (&f.insufficient_capacity, true),
                (&f.restore_capacity, false),
            ] {
                for o in list {
                    let capacity_type = CapacityType::parse(&o.capacity_type)
                        .ok_or_else(|| invalid!("unknown capacity type {}", o.capacity_type))?;
                    self.cloud.set_insufficient_capacity(
                        OfferingKey {
                            instance_type: o.instance_type.clone(),
                            zone: o.zone.clone(),
                            capacity_type,
                        },
                        short,
                    );
                }
            }
            if let Some(l) = &f.launch_errors {
                self.cloud.fail_next_launches(l.count, &l.message);
            }
            if let Some(r) = &f.registration_delay {
                let registration = if r.delay.eq_ignore_ascii_case("never") {
                    Registration::Never
                } else {
                    Registration::After(joiner_model::duration::parse_duration(&r.delay)?)
                };
                let launched = self.cloud.all_instances().len() as u64;
                for n in 1..=r.instances as u64 {
                    self.cloud
                        .set_registration(&SimulatedCloud::instance_id(launched + n), registration);
                }
            }
            if let Some(n) = f.throttle {
                self.cloud.throttle_next_calls(n);
            }
            for d in &f.device_plugin {
                self.kubelet.published.insert(
                    (d.instance_type.clone(), d.resource.clone()),
                    Quantity::from_units(i64::from(d.publishes)),
                );
            }
            for d in &f.dra_driver {
                self.kubelet
                    .dra_devices
                    .insert((d.instance_type.clone(), d.driver.clone()), d.publishes);
            }
            for g in &f.gpu_feature_discovery {
                self.kubelet
                    .gfd_labels
                    .insert((g.instance_type.clone(), g.label.clone()), g.value.clone());
            }
            self.event("faults", serde_json::to_value(FaultsText(f))?);
        }
        Ok(())
    }

    /// Sends an interruption notice of `i.kind` for the instances it targets, as EC2 or AWS
    /// Health would, and ends the instances when the notice runs out (see
    /// [`scenario::Interrupt::notice`]).
    fn interrupt(&mut self, i: &scenario::Interrupt) -> Result<(), Error> {
        let kind = i.kind().map_err(|e| invalid!("interrupt.{e}"))?;
        let mut running: Vec<_> = self
            .cloud
            .all_instances()
            .into_iter()
            .filter(|x| x.state == InstanceState::Running)
            .filter(|x| match &i.node_claim {
                Some(c) => c == "*" || x.tags.get(tags::NODECLAIM) == Some(c),
                None => x.capacity_type == CapacityType::Spot,
            })
            .collect();
        running.sort_by(|a, b| (a.launch_time, &a.id).cmp(&(b.launch_time, &b.id)));
        running.truncate(i.count.unwrap_or(1));
        let notice = match &i.notice {
            Some(n) => joiner_model::duration::parse_duration(n)
                .context(|| format!("interrupt.notice: {n:?}"))?,
            None => scenario::Interrupt::default_notice(kind),
        };
        let now = self.clock.now();
        let ends = joiner_controller::clock::add(now, notice);
        let mut ids = Vec::new();
        let mut reservations = BTreeSet::new();
        for x in running {
            let event_id = format!("simulated-{}-{}", self.t(), x.id);
            let when = now.to_string();
            let body = match kind {
                InterruptionKind::SpotInterruption => {
                    self.cloud.reclaim_after(&x.id, notice);
                    messages::spot_interruption_warning(&event_id, &x.id, &when)
                }
                InterruptionKind::RebalanceRecommendation => {
                    messages::rebalance_recommendation(&event_id, &x.id, &when)
                }
                InterruptionKind::StateChange => {
                    self.cloud.reclaim_after(&x.id, notice);
                    messages::state_change(&event_id, &x.id, "stopping", &when)
                }
                InterruptionKind::ScheduledChange => {
                    // The instance is retired when the change starts.
                    self.cloud.reclaim_after(&x.id, notice);
                    messages::scheduled_change(&event_id, &[x.id.as_str()], &when, ends)
                }
                InterruptionKind::CapacityReservationEnding => {
                    // One warning per reservation; EC2 terminates its instances 30 minutes
                    // before the end.
                    let claim: Option<NodeClaim> = match x.tags.get(tags::NODECLAIM) {
                        Some(name) => self.store.get(None, name)?,
                        None => None,
                    };
                    let Some(reservation) = claim
                        .as_ref()
                        .and_then(|c| c.label(labels::CAPACITY_RESERVATION_ID))
                        .map(str::to_string)
                    else {
                        return Err(invalid!(
                            "interrupt: instance {} is not in a capacity reservation",
                            x.id
                        ));
                    };
                    let lead = Duration::from_secs(30 * 60);
                    self.cloud.reclaim_after(&x.id, notice.saturating_sub(lead));
                    if !reservations.insert(reservation.clone()) {
                        ids.push(x.id);
                        continue;
                    }
                    messages::capacity_block_ending(&event_id, &reservation, ends, &when)
                }
            };
            self.queue.send(body);
            ids.push(x.id);
        }
        let name = if kind == InterruptionKind::SpotInterruption && i.kind.is_none() {
            "interruptSpot".to_string()
        } else {
            format!("interrupt.{}", kind.as_str())
        };
        let mut fields = json!({"instances": ids});
        if kind == InterruptionKind::SpotInterruption {
            fields["reclaimIn"] = json!(format!("{}s", notice.as_secs()));
        } else if kind != InterruptionKind::RebalanceRecommendation {
            fields["endsIn"] = json!(format!("{}s", notice.as_secs()));
        }
        self.event(&name, fields);
        Ok(())
    }

    /// The NodeClaims a `deleteNodeClaim` or `deleteNode` step names: the one by name, or for
    /// `*` the oldest live ones first; `count` of them (default 1).
    fn node_claims_for(&self, t: &NodeClaimTarget) -> Result<Vec<NodeClaim>, Error> {
        let mut live: Vec<NodeClaim> = self
            .store
            .list::<NodeClaim>()?
            .into_iter()
            .filter(|c| !c.is_deleting())
            .filter(|c| t.node_claim == "*" || c.name() == t.node_claim)
            .collect();
        if live.is_empty() && t.node_claim != "*" {
            return Err(invalid!("no live NodeClaim {}", t.node_claim));
        }
        live.sort_by(|a, b| {
            let created = |c: &NodeClaim| c.metadata.creation_timestamp.as_ref().map(|t| t.0);
            (created(a), a.name()).cmp(&(created(b), b.name()))
        });
        live.truncate(t.count.unwrap_or(1));
        Ok(live)
    }

    fn record(&mut self, r: &StepReport) {
        for step in &r.reboots {
            if step.phase == joiner_controller::RebootPhase::Issued {
                self.rebooted += 1;
            }
            self.event(
                "reboot",
                json!({"nodeClaim": step.node_claim, "node": step.node,
                       "phase": step.phase.as_str(), "message": step.message}),
            );
        }
        for name in &r.created {
            let claim = self.store.get::<NodeClaim>(None, name).ok().flatten();
            let types = claim
                .map(|c| c.requirement_values(labels::INSTANCE_TYPE))
                .unwrap_or_default();
            self.event(
                "created",
                json!({"nodeClaim": name, "instanceType": types.first()}),
            );
        }
        for (claim, id) in &r.launched {
            let it = self.cloud.all_instances().into_iter().find(|i| &i.id == id);
            self.event(
                "launched",
                json!({
                    "nodeClaim": claim,
                    "instance": id,
                    "instanceType": it.as_ref().map(|i| i.instance_type.clone()),
                    "zone": it.as_ref().map(|i| i.zone.clone()),
                }),
            );
        }
        for c in &r.registered {
            self.event("registered", json!({"nodeClaim": c}));
        }
        for c in &r.initialized {
            self.event("initialized", json!({"nodeClaim": c}));
        }
        for d in &r.disruption {
            let DisruptionEvent {
                action,
                reason,
                node_claims,
                detail,
            } = d;
            self.event(
                &format!("disruption.{action}"),
                json!({"reason": reason, "nodeClaims": node_claims, "detail": detail}),
            );
        }
        for c in &r.deleted {
            self.event("deleted", json!({"nodeClaim": c}));
        }
        for i in &r.terminated {
            self.event("terminated", json!({"instance": i}));
        }
        for o in &r.unavailable {
            self.event("unavailable", json!({"offering": o}));
        }
        for (pod, reason) in &r.unschedulable {
            if self.unschedulable_seen.insert(format!("{pod}:{reason}")) {
                self.event("unschedulable", json!({"pod": pod, "reason": reason}));
            }
        }
        for e in &r.errors {
            self.event("error", json!({"error": e.to_string()}));
        }
    }

    /// Measures the cluster now.
    fn sample(&mut self) -> Result<Sample, Error> {
        let t = self.t();
        let claims = self.store.list::<NodeClaim>()?;
        let nodes = claims
            .iter()
            .filter(|c| {
                !c.is_deleting()
                    && c.metadata
                        .annotations
                        .as_ref()
                        .is_none_or(|a| !a.contains_key(annotations::DISRUPTION_REASON))
            })
            .count();
        let running: Vec<_> = self
            .cloud
            .all_instances()
            .into_iter()
            .filter(|i| i.state == InstanceState::Running)
            .collect();
        let cost_per_hour = running
            .iter()
            .map(|i| self.price(&i.instance_type, &i.zone, i.capacity_type))
            .sum();
        let pods = self.observe_pods()?;
        let mut running_pods = Vec::new();
        let mut pods_pending = 0;
        for p in &pods {
            if is_pending(p) {
                pods_pending += 1;
            } else if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                running_pods.push(p);
            }
        }
        let pods_running = running_pods.len();
        let gpus = crate::gpus::count(
            &self.store.list::<Node>()?,
            &self.store.list::<ResourceSlice>()?,
            &self.store.list::<ResourceClaim>()?,
            &running_pods,
        );
        let (gpus_allocatable, gpus_requested) = (gpus.allocatable, gpus.requested);
        Ok(Sample {
            t,
            nodes,
            instances: running.len(),
            cost_per_hour: round(cost_per_hour, 6),
            gpus_allocatable,
            gpus_requested,
            pods_running,
            pods_pending,
        })
    }

    /// Notes when each pod (by uid) was first seen pending and how long it waited once bound.
    fn observe_pods(&mut self) -> Result<Vec<Pod>, Error> {
        let t = self.t();
        let pods = self.store.list::<Pod>()?;
        for p in &pods {
            let uid = p.metadata.uid.clone().unwrap_or_default();
            if is_pending(p) {
                self.pending_since.entry(uid).or_insert(t);
            } else if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                && let Some(since) = self.pending_since.get(&uid)
                && self.pending_done.insert(uid.clone())
            {
                self.pending_waits.push(t - since);
            }
        }
        Ok(pods)
    }

    fn price(&self, instance_type: &str, zone: &str, capacity_type: CapacityType) -> f64 {
        self.prices
            .get(&(instance_type.to_string(), zone.to_string(), capacity_type))
            .copied()
            .unwrap_or(0.0)
    }
}

/// TerminateInstances calls on instances that do not carry Joiner's ownership tags.
fn foreign_terminations(cloud: &SimulatedCloud, cluster: &str) -> usize {
    let instances: BTreeMap<String, BTreeMap<String, String>> = cloud
        .all_instances()
        .into_iter()
        .map(|i| (i.id, i.tags))
        .collect();
    cloud
        .terminate_calls()
        .iter()
        .filter(|id| {
            instances
                .get(*id)
                .is_none_or(|t| !tags::is_owned(t, cluster))
        })
        .count()
}

/// The faults as the timeline shows them.
struct FaultsText<'a>(&'a scenario::Faults);

impl Serialize for FaultsText<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let f = self.0;
        let offers = |l: &Vec<scenario::Offering>| {
            l.iter()
                .map(|o| format!("{}/{}/{}", o.instance_type, o.zone, o.capacity_type))
                .collect::<Vec<_>>()
        };
        let mut text = json!({
            "insufficientCapacity": offers(&f.insufficient_capacity),
            "restoreCapacity": offers(&f.restore_capacity),
            "launchErrors": f.launch_errors.as_ref().map(|l| l.count),
            "registrationDelay": f.registration_delay.as_ref().map(|r| format!("{} x{}", r.delay, r.instances)),
            "throttle": f.throttle,
            "createTimeouts": f.create_timeouts,
            "launchTimeouts": f.launch_timeouts,
            "cacheLag": f.cache_lag,
            "listLag": f.list_lag,
            "volumeDetachDelay": f.volume_detach_delay,
            "watchDown": f.watch_down,
        });
        if !f.device_plugin.is_empty() {
            text["devicePlugin"] = f
                .device_plugin
                .iter()
                .map(|d| format!("{} {}={}", d.instance_type, d.resource, d.publishes))
                .collect();
        }
        if !f.dra_driver.is_empty() {
            text["draDriver"] = f
                .dra_driver
                .iter()
                .map(|d| format!("{} {}={}", d.instance_type, d.driver, d.publishes))
                .collect();
        }
        if !f.gpu_feature_discovery.is_empty() {
            text["gpuFeatureDiscovery"] = f
                .gpu_feature_discovery
                .iter()
                .map(|g| format!("{} {}={}", g.instance_type, g.label, g.value))
                .collect();
        }
        text.serialize(s)
    }
}

/// Runs a scenario, telling `progress` the simulated seconds done and the total after each tick.
pub fn simulate(
    manifests: &Manifests,
    settings: Settings,
    scenario: &Resolved,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Outcome, Error> {
    simulate_observed(manifests, settings, scenario, progress, false)
}

/// [`simulate`], and with `telemetry` also what the controller would have served at
/// `/metrics` and published as Events (which costs a read of the whole cluster per step).
pub fn simulate_observed(
    manifests: &Manifests,
    mut settings: Settings,
    scenario: &Resolved,
    progress: &mut dyn FnMut(u64, u64),
    telemetry: bool,
) -> Result<Outcome, Error> {
    if settings.cluster_name.as_deref().is_none_or(str::is_empty) {
        settings.cluster_name = Some("simulation".into());
    }
    let config = Config::new(settings)?;
    let start = match &scenario.start {
        Some(s) => s.parse::<Timestamp>().map_err(|e| {
            invalid!("scenario start {s:?}: {e} (expected e.g. 2026-01-01T00:00:00Z)")
        })?,
        None => ManualClock::new().now(),
    };
    let clock = ManualClock::at(start);
    let catalog = Catalog::builtin(&config.settings.region, &config.settings.zones);
    let cloud = SimulatedCloud::new(&catalog, clock.clone());
    cloud.add_reservations_of(&manifests.node_classes);
    let mut prices = BTreeMap::new();
    for t in cloud.instance_types().map_err(ControllerError::Cloud)? {
        for o in &t.offerings {
            prices.insert(
                (t.name.clone(), o.zone.clone(), o.capacity_type),
                o.price.as_usd(),
            );
        }
    }
    let store = InMemoryCluster::new(clock.clone());
    // Workloads are ours to expand and keep; everything else goes in as it is.
    let mut rest = manifests.clone();
    let deployments = std::mem::take(&mut rest.deployments);
    store.load(&rest)?;
    let loaded_claims = store.creates_committed("NodeClaim");
    let mut sim = Sim {
        clock: clock.clone(),
        store: Arc::new(store),
        cloud: Arc::new(cloud),
        kubelet: SimulatedKubelet::default(),
        attacher: SimulatedAttacher::default(),
        queue: SimulatedInterruptionQueue::new(),
        config: config.clone(),
        start,
        workloads: deployments.into_iter().map(Workload::new).collect(),
        prices,
        events: Vec::new(),
        unschedulable_seen: BTreeSet::new(),
        pending_since: BTreeMap::new(),
        pending_done: BTreeSet::new(),
        pending_waits: Vec::new(),
        added: BTreeSet::new(),
        loaded_claims,
        watch_up_at: None,
        recoveries: Vec::new(),
        failed_since: BTreeMap::new(),
        failed_count: 0,
        repair_times: Vec::new(),
        faults: BTreeMap::new(),
        rebooted: 0,
        recovered_by_reboot: 0,
    };
    let tick = scenario.tick;
    let tick_s = tick.as_secs();
    let end = scenario.duration.as_secs();
    let mut next_step = 0;
    let mut samples = Vec::new();
    let mut last_sample: Option<u64> = None;
    let mut by_type: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    let mut peak = (0, 0);
    let mut gpu_weighted = (0.0, 0.0);
    let mut errors = 0;
    let mut disruptions: BTreeMap<String, usize> = BTreeMap::new();
    // The controller reads through a client with a watch cache, as the live one does.
    let server = sim.store.clone();
    let mut controller = Controller::new(
        CachedClient::new(&server),
        sim.cloud.clone(),
        clock.clone(),
        config.clone(),
    );
    controller.set_interruption_queue(Box::new(sim.queue.clone()));
    let mut observer = telemetry.then(Observer::default);
    let mut t = 0;
    loop {
        progress(t.min(end), end);
        if sim.watch_up_at.is_some_and(|up| up <= t) {
            sim.store.heal_watch("*");
            sim.watch_up_at = None;
            sim.event("watchUp", json!({}));
        }
        sim.recover_nodes()?;
        while next_step < scenario.steps.len() && scenario.steps[next_step].0.as_secs() <= t {
            let step = scenario.steps[next_step].1.clone();
            sim.apply(&step)
                .context(|| format!("scenario step {} at {}", next_step, clock_text(t)))?;
            next_step += 1;
        }
        sim.reconcile_workloads()?;
        collect_orphans(&sim.store)?;
        sim.reconcile_workloads()?;
        sim.observe_pods()?;
        schedule_pending(&sim.store, &sim.config, sim.clock.now())?;
        let started = std::time::Instant::now();
        let report = controller.step();
        if let Some(o) = &mut observer {
            o.step(&*sim.store, &report, started.elapsed(), t, clock.now());
        }
        errors += report.errors.len();
        for d in report
            .disruption
            .iter()
            .filter(|d| d.action == DisruptionAction::Decided)
        {
            *disruptions.entry(d.reason.to_string()).or_default() += 1;
            if d.reason.reason() == Some(joiner_model::wellknown::DisruptionReason::Unhealthy) {
                for claim in &d.node_claims {
                    if let Some(since) = sim.failed_since.remove(claim) {
                        sim.repair_times.push(t.saturating_sub(since));
                    }
                }
            }
        }
        sim.record(&report);
        sim.kubelet.step(&sim.store, &sim.cloud, clock.now())?;
        sim.after_reboots()?;
        sim.attacher.step(&sim.store, clock.now())?;
        let s = sim.sample()?;
        peak = (peak.0.max(s.nodes), peak.1.max(s.instances));
        if s.gpus_allocatable > 0.0 {
            gpu_weighted.0 += s.gpus_requested / s.gpus_allocatable * tick_s as f64;
            gpu_weighted.1 += tick_s as f64;
        }
        if t < end {
            for i in sim.cloud.all_instances() {
                if i.state == InstanceState::Running {
                    let e = by_type.entry(i.instance_type.clone()).or_default();
                    e.0 += tick_s as f64 / 3600.0;
                    e.1 += sim.price(&i.instance_type, &i.zone, i.capacity_type) * tick_s as f64
                        / 3600.0;
                }
            }
        }
        if last_sample.is_none_or(|l| t >= l + SAMPLE_EVERY.as_secs()) || t >= end {
            last_sample = Some(t);
            samples.push(s.clone());
        }
        if t >= end {
            break;
        }
        clock.advance(tick);
        t += tick_s;
    }
    if next_step < scenario.steps.len() {
        return Err(invalid!(
            "scenario step {next_step} is at {}, after the end ({})",
            clock_text(scenario.steps[next_step].0.as_secs()),
            clock_text(end)
        ));
    }
    drop(controller);
    let last = samples.last().cloned();
    let waits = &sim.pending_waits;
    let by_instance_type: BTreeMap<String, TypeUsage> = by_type
        .into_iter()
        .map(|(k, (hours, cost))| {
            (
                k,
                TypeUsage {
                    node_hours: round(hours, 4),
                    price_per_hour: if hours > 0.0 {
                        round(cost / hours, 6)
                    } else {
                        0.0
                    },
                    cost: round(cost, 4),
                },
            )
        })
        .collect();
    let summary = Summary {
        scenario: scenario.name.clone(),
        simulated_seconds: end,
        tick_seconds: tick_s,
        peak_nodes: peak.0,
        peak_instances: peak.1,
        final_nodes: last.as_ref().map_or(0, |s| s.nodes),
        instances_launched: sim
            .cloud
            .all_instances()
            .iter()
            .filter(|i| !sim.added.contains(&i.id))
            .count(),
        node_claims_created: usize::try_from(
            sim.store
                .creates_committed("NodeClaim")
                .saturating_sub(sim.loaded_claims),
        )
        .unwrap_or(usize::MAX),
        foreign_instances_terminated: foreign_terminations(&sim.cloud, &config.cluster_name),
        total_node_hours: round(by_instance_type.values().map(|u| u.node_hours).sum(), 4),
        total_cost: round(by_instance_type.values().map(|u| u.cost).sum(), 4),
        by_instance_type,
        pods_scheduled: waits.len(),
        pending_mean_seconds: if waits.is_empty() {
            0.0
        } else {
            round(waits.iter().sum::<u64>() as f64 / waits.len() as f64, 1)
        },
        pending_max_seconds: waits.iter().copied().max().unwrap_or(0) as f64,
        pods_still_pending: last.as_ref().map_or(0, |s| s.pods_pending),
        gpu_allocation_mean: if gpu_weighted.1 > 0.0 {
            round(gpu_weighted.0 / gpu_weighted.1, 4)
        } else {
            0.0
        },
        disruptions,
        repairs: (sim.failed_count > 0).then(|| {
            let times = &sim.repair_times;
            Repairs {
                failed: sim.failed_count,
                repaired: times.len() - sim.recovered_by_reboot,
                rebooted: sim.rebooted,
                recovered_by_reboot: sim.recovered_by_reboot,
                mean_seconds: if times.is_empty() {
                    0.0
                } else {
                    round(times.iter().sum::<u64>() as f64 / times.len() as f64, 1)
                },
                max_seconds: times.iter().copied().max().unwrap_or(0) as f64,
            }
        }),
        errors,
    };
    let node_claims = sim.store.list::<NodeClaim>()?;
    Ok(Outcome {
        events: sim.events,
        samples,
        summary,
        node_claims,
        telemetry: observer,
    })
}

/// Sets a condition of a Node (added if it has none of that type), with its transition time when
/// the status changes. Returns whether the Node is still there.
/// Writes `d` into the cluster, creating it or replacing its spec.
fn store_deployment(store: &InMemoryCluster, d: &Deployment) -> Result<(), Error> {
    let ns = d.metadata.namespace.as_deref();
    let name = d.metadata.name.as_deref().unwrap_or_default();
    match store.get::<Deployment>(ns, name)? {
        Some(mut stored) => {
            stored.spec = d.spec.clone();
            store.update(&stored)?;
        }
        None => {
            store.create(d)?;
        }
    }
    Ok(())
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}
