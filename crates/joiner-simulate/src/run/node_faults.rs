//! Node faults in a run: the `failNode` step, recoveries when its time is up, and what a
//! reboot does to a fault (mends it, or finds it again on the new boot).

use joiner_controller::clock::Clock;
use joiner_controller::store::{ClusterStore, InMemoryCluster, StoreError};
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::Sim;
use crate::error::{Error, invalid};
use crate::scenario;

/// A fault of a node, and the boot it was last seen on.
pub(super) struct Fault {
    node_claim: String,
    condition: String,
    survives_reboot: bool,
    boot: String,
}

impl Sim {
    /// A `failNode` step: each named NodeClaim's Node reports the condition `False` from now,
    /// and `True` again after `for`, if given.
    pub(super) fn fail_nodes(&mut self, f: &scenario::FailNode) -> Result<(), Error> {
        let condition = f.condition().to_string();
        let back_in = f
            .for_
            .as_deref()
            .map(joiner_model::duration::parse_duration)
            .transpose()
            .map_err(|e| invalid!("failNode.for: {e}"))?;
        let mut failed = Vec::new();
        for c in self.node_claims_for(&f.target())? {
            let Some(node) = c.status.node_name.clone() else {
                continue;
            };
            set_node_condition(
                &self.store,
                &node,
                &condition,
                ("False", f.reason()),
                self.clock.now(),
            )?;
            let boot = self
                .store
                .get::<Node>(None, &node)?
                .and_then(|n| n.status?.node_info)
                .map(|i| i.boot_id)
                .unwrap_or_default();
            self.faults.insert(
                node.clone(),
                Fault {
                    node_claim: c.name().to_string(),
                    condition: condition.clone(),
                    survives_reboot: f.survives_reboot,
                    boot,
                },
            );
            let t = self.t();
            self.failed_count += 1;
            self.failed_since.entry(c.name().to_string()).or_insert(t);
            if let Some(d) = back_in {
                self.recoveries.push((
                    t + d.as_secs(),
                    node.clone(),
                    condition.clone(),
                    c.name().to_string(),
                ));
            }
            failed.push(json!({"node": node, "nodeClaim": c.name()}));
        }
        let mut fields = json!({"nodes": failed, "condition": condition, "reason": f.reason()});
        if f.survives_reboot {
            fields["survivesReboot"] = json!(true);
        }
        if let Some(d) = back_in {
            fields["for"] = json!(format!("{}s", d.as_secs()));
        }
        self.event("failNode", fields);
        Ok(())
    }

    /// Nodes whose `failNode` time is up report their condition `True` again.
    pub(super) fn recover_nodes(&mut self) -> Result<(), Error> {
        let t = self.t();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.recoveries)
            .into_iter()
            .partition(|(at, _, _, _)| *at <= t);
        self.recoveries = later;
        for (_, node, condition, claim) in due {
            self.failed_since.remove(&claim);
            self.faults.remove(&node);
            if set_node_condition(
                &self.store,
                &node,
                &condition,
                ("True", "SimulatedRecovery"),
                self.clock.now(),
            )? {
                self.event(
                    "nodeRecovered",
                    json!({"node": node, "condition": condition}),
                );
            }
        }
        Ok(())
    }

    /// Faulty nodes that came back from a reboot: a fault a reboot clears is gone (its node
    /// repaired), one that survives it is seen on the new boot too.
    pub(super) fn after_reboots(&mut self) -> Result<(), Error> {
        let t = self.t();
        let nodes: Vec<String> = self.faults.keys().cloned().collect();
        for name in nodes {
            let Some(node) = self.store.get::<Node>(None, &name)? else {
                self.faults.remove(&name);
                continue;
            };
            let status = node.status.as_ref();
            let boot = status
                .and_then(|s| s.node_info.as_ref())
                .map(|i| i.boot_id.clone())
                .unwrap_or_default();
            let ready = status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let Some(fault) = self.faults.get_mut(&name) else {
                continue;
            };
            if boot == fault.boot || !ready {
                continue;
            }
            fault.boot = boot;
            let claim = fault.node_claim.clone();
            if fault.survives_reboot {
                self.event(
                    "faultSurvivedReboot",
                    json!({"node": name, "nodeClaim": claim}),
                );
                continue;
            }
            let condition = fault.condition.clone();
            self.faults.remove(&name);
            self.recoveries.retain(|r| r.1 != name);
            set_node_condition(
                &self.store,
                &name,
                &condition,
                ("True", "SimulatedRecovery"),
                self.clock.now(),
            )?;
            if let Some(since) = self.failed_since.remove(&claim) {
                self.repair_times.push(t.saturating_sub(since));
                self.recovered_by_reboot += 1;
            }
            self.event(
                "nodeRecovered",
                json!({"node": name, "nodeClaim": claim, "condition": condition, "byReboot": true}),
            );
        }
        Ok(())
    }
}

fn set_node_condition(
    store: &InMemoryCluster,
    node: &str,
    type_: &str,
    (status, reason): (&str, &str),
    now: Timestamp,
) -> Result<bool, Error> {
    let Some(mut n) = store.get::<Node>(None, node)? else {
        return Ok(false);
    };
    let conditions = n
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new);
    let changed = |c: &mut NodeCondition| {
        if c.status != status {
            c.status = status.to_string();
            c.last_transition_time = Some(Time(now));
        }
        c.reason = Some(reason.to_string());
        c.last_heartbeat_time = Some(Time(now));
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => changed(c),
        None => conditions.push(NodeCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: Some(reason.to_string()),
            last_transition_time: Some(Time(now)),
            last_heartbeat_time: Some(Time(now)),
            ..NodeCondition::default()
        }),
    }
    match store.update(&n) {
        Ok(_) => Ok(true),
        Err(StoreError::NotFound(_)) => Ok(false),
        Err(e) => Err(e.into()),
    }
}
