//! CapacityBuffers in a snapshot (behind Karpenter's `CapacityBuffer` gate): each buffer's
//! virtual pods join the pending pods, placed after every real pod, so a plan launches what
//! the buffer keeps; the plan then reports them per buffer instead of as pods
//! ([`Buffers::report`]).

use std::collections::{BTreeMap, BTreeSet};

use joiner_model::buffers::{self, Unresolved};
use joiner_model::{Manifests, Sourced};
use k8s_openapi::api::core::v1::Pod;

use crate::plan::{Plan, PlannedBuffer};

/// What the snapshot made of each buffer, by `namespace/name`.
#[derive(Debug, Clone, Default)]
pub struct Buffers {
    outcomes: BTreeMap<String, Outcome>,
}

#[derive(Debug, Clone)]
enum Outcome {
    /// Its virtual pods, by `namespace/name`.
    Kept(Vec<String>),
    NotReady(Unresolved),
}

impl Buffers {
    /// The virtual pods of every active buffer of `m`, and what became of each buffer. A
    /// virtual pod whose name a real pod holds is left out (the real pod is not displaced).
    pub fn of(m: &Manifests, warnings: &mut Vec<String>) -> (Buffers, Vec<Sourced<Pod>>) {
        let taken: BTreeSet<(String, String)> = m
            .pods
            .iter()
            .map(|p| {
                let meta = &p.object.metadata;
                (
                    meta.namespace.clone().unwrap_or_else(|| "default".into()),
                    meta.name.clone().unwrap_or_default(),
                )
            })
            .collect();
        let mut out = Buffers::default();
        let mut pods = Vec::new();
        for b in m
            .capacity_buffers
            .iter()
            .filter(|b| buffers::is_active(&b.object))
        {
            let buffer = &b.object;
            let key = format!("{}/{}", buffer.namespace(), buffer.name());
            match buffers::resolve(buffer, m) {
                Ok(resolved) => {
                    let mut names = Vec::new();
                    for pod in buffers::virtual_pods(buffer, &resolved) {
                        let ns = pod.metadata.namespace.clone().unwrap_or_default();
                        let name = pod.metadata.name.clone().unwrap_or_default();
                        if taken.contains(&(ns.clone(), name.clone())) {
                            continue;
                        }
                        names.push(format!("{ns}/{name}"));
                        pods.push(Sourced {
                            origin: b.origin.clone(),
                            object: pod,
                        });
                    }
                    out.outcomes.insert(key, Outcome::Kept(names));
                }
                Err(why) => {
                    warnings.push(format!(
                        "{}: CapacityBuffer/{key}: {}: {}; it keeps no capacity",
                        b.origin, why.reason, why.message
                    ));
                    out.outcomes.insert(key, Outcome::NotReady(why));
                }
            }
        }
        (out, pods)
    }

    /// Takes the virtual pods out of the plan's bindings and unschedulable pods and reports
    /// them per buffer: how many chunks, on existing nodes, on new NodeClaims (named), and
    /// not placed (with the first reason).
    pub fn report(&self, plan: &mut Plan) {
        if self.outcomes.is_empty() {
            return;
        }
        let new: BTreeSet<&str> = plan.node_claims.iter().map(|c| c.name.as_str()).collect();
        let mut placed: BTreeMap<&str, &str> = BTreeMap::new();
        for b in &plan.bindings {
            placed.insert(b.pod.as_str(), b.node.as_str());
        }
        let unplaced: BTreeMap<&str, &str> = plan
            .unschedulable
            .iter()
            .map(|u| (u.pod.as_str(), u.reason.as_str()))
            .collect();
        let mut report = Vec::new();
        let mut virtual_pods: BTreeSet<String> = BTreeSet::new();
        for (key, outcome) in &self.outcomes {
            let mut b = PlannedBuffer {
                buffer: key.clone(),
                ..PlannedBuffer::default()
            };
            match outcome {
                Outcome::NotReady(why) => {
                    b.not_ready = Some(format!("{}: {}", why.reason, why.message))
                }
                Outcome::Kept(pods) => {
                    b.replicas = u32::try_from(pods.len()).unwrap_or(u32::MAX);
                    for pod in pods {
                        virtual_pods.insert(pod.clone());
                        match placed.get(pod.as_str()) {
                            Some(node) if new.contains(node) => {
                                b.on_new_node_claims += 1;
                                if !b.node_claims.iter().any(|c| c == node) {
                                    b.node_claims.push((*node).to_string());
                                }
                            }
                            Some(_) => b.on_existing_nodes += 1,
                            None => {
                                b.unplaced += 1;
                                if b.unplaced_reason.is_none() {
                                    b.unplaced_reason =
                                        unplaced.get(pod.as_str()).map(|r| (*r).to_string());
                                }
                            }
                        }
                    }
                }
            }
            report.push(b);
        }
        plan.bindings.retain(|b| !virtual_pods.contains(&b.pod));
        plan.unschedulable
            .retain(|u| !virtual_pods.contains(&u.pod));
        plan.capacity_buffers = report;
    }
}
