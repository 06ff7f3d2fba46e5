//! The objects one look at the cluster reads, and what the operator library's metrics say of
//! NodeClaims, NodePools, EC2NodeClasses and Joiner's Nodes: their conditions, which are being
//! deleted, which exist.

use std::collections::BTreeSet;

use joiner_model::api::{EC2NodeClass, NodeClaim, NodePool};
use joiner_model::wellknown::labels;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

use super::Labels;
use super::conditions::{ConditionKind, ConditionState};
use super::termination::Terminating;

/// The objects a [`super::state::ClusterState`] describes.
#[derive(Debug, Clone, Copy)]
pub struct Objects<'a> {
    pub nodes: &'a [Node],
    pub claims: &'a [NodeClaim],
    pub pools: &'a [NodePool],
    pub classes: &'a [EC2NodeClass],
    pub pods: &'a [Pod],
}

/// Seconds since the Unix epoch.
pub(super) fn epoch(t: Timestamp) -> f64 {
    t.as_millisecond() as f64 / 1000.0
}

/// Every condition of the objects (of Nodes, those Joiner manages), with the labels Karpenter
/// gives each kind's.
pub(super) fn conditions_of(objects: &Objects<'_>, now: Timestamp) -> Vec<ConditionState> {
    use joiner_model::api::nodeclaim::Condition;
    let at = epoch(now);
    let state = |kind, meta: &ObjectMeta, c: &Condition, extra: &Labels| {
        let since = epoch(c.last_transition_time.0);
        ConditionState {
            kind,
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone(),
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
            since,
            for_seconds: (at - since).max(0.0),
            extra: extra.clone(),
        }
    };
    let mut out = Vec::new();
    for claim in objects.claims {
        let extra = claim_extra(claim);
        for c in &claim.status.conditions {
            out.push(state(ConditionKind::NodeClaim, &claim.metadata, c, &extra));
        }
    }
    for pool in objects.pools {
        for c in pool.status.iter().flat_map(|s| &s.conditions) {
            out.push(state(
                ConditionKind::NodePool,
                &pool.metadata,
                c,
                &Vec::new(),
            ));
        }
    }
    for class in objects.classes {
        for c in class.status.iter().flat_map(|s| &s.conditions) {
            out.push(state(
                ConditionKind::EC2NodeClass,
                &class.metadata,
                c,
                &Vec::new(),
            ));
        }
    }
    for node in objects.nodes {
        let Some(extra) = node_extra(node) else {
            continue;
        };
        let name = node.metadata.name.as_deref().unwrap_or_default();
        for c in node
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
        {
            let since = c.last_transition_time.as_ref().map_or(at, |t| epoch(t.0));
            out.push(ConditionState {
                kind: ConditionKind::Node,
                name: name.to_string(),
                uid: node.metadata.uid.clone(),
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone().unwrap_or_default(),
                message: c.message.clone().unwrap_or_default(),
                since,
                for_seconds: (at - since).max(0.0),
                extra: extra.clone(),
            });
        }
    }
    out
}

/// Karpenter's extra labels of a NodeClaim's operator metrics.
fn claim_extra(claim: &NodeClaim) -> Labels {
    vec![
        (
            "karpenter_k8s_aws_ec2nodeclass",
            claim.spec.node_class_ref.name.clone(),
        ),
        (
            "karpenter_sh_nodepool",
            claim
                .label(labels::NODEPOOL)
                .unwrap_or_default()
                .to_string(),
        ),
    ]
}

/// Karpenter's extra labels of a Node's operator metrics; `None` for a Node Joiner does not
/// manage (no NodePool label).
fn node_extra(node: &Node) -> Option<Labels> {
    let node_labels = node.metadata.labels.as_ref()?;
    let pool = node_labels.get(labels::NODEPOOL)?;
    let label = |k: &str| node_labels.get(k).cloned().unwrap_or_default();
    Some(vec![
        ("karpenter_k8s_aws_ec2nodeclass", label(labels::NODECLASS)),
        ("karpenter_sh_nodepool", pool.clone()),
        ("karpenter_sh_initialized", label(labels::INITIALIZED)),
    ])
}

/// Every object of the operator metrics' kinds: (kind, metadata, extra labels).
fn operator_objects<'a>(objects: &'a Objects<'_>) -> Vec<(ConditionKind, &'a ObjectMeta, Labels)> {
    let mut out: Vec<(ConditionKind, &ObjectMeta, Labels)> = Vec::new();
    out.extend(
        objects
            .claims
            .iter()
            .map(|c| (ConditionKind::NodeClaim, &c.metadata, claim_extra(c))),
    );
    out.extend(
        objects
            .pools
            .iter()
            .map(|p| (ConditionKind::NodePool, &p.metadata, Vec::new())),
    );
    out.extend(
        objects
            .classes
            .iter()
            .map(|c| (ConditionKind::EC2NodeClass, &c.metadata, Vec::new())),
    );
    out.extend(
        objects
            .nodes
            .iter()
            .filter_map(|n| Some((ConditionKind::Node, &n.metadata, node_extra(n)?))),
    );
    out
}

pub(super) fn terminating_of(objects: &Objects<'_>) -> Vec<Terminating> {
    operator_objects(objects)
        .into_iter()
        .filter_map(|(kind, meta, extra)| {
            Some(Terminating {
                kind,
                name: meta.name.clone().unwrap_or_default(),
                since: epoch(meta.deletion_timestamp.as_ref()?.0),
                extra,
            })
        })
        .collect()
}

pub(super) fn present_of(objects: &Objects<'_>) -> BTreeSet<(ConditionKind, String)> {
    operator_objects(objects)
        .into_iter()
        .map(|(kind, meta, _)| (kind, meta.name.clone().unwrap_or_default()))
        .collect()
}
