//! NodePool status as Karpenter writes it, so `kubectl get nodepools` shows its NODES and
//! READY columns and dashboards read its capacity: how many NodeClaims the pool has and their
//! summed capacity, and whether it can launch (`NodeClassReady`, `ValidationSucceeded`, and
//! `Ready` for both).
//!
//! Only the status is written (through the status subresource: the pool is the user's), and
//! only when it changes; a condition keeps its transition time while its status stays.

use std::collections::BTreeMap;

use joiner_model::api::nodeclass_status::conditions as class_conditions;
use joiner_model::api::nodepool::{NodePoolStatus, conditions};
use joiner_model::api::{EC2NodeClass, NodeClaim, NodePool};
use joiner_model::wellknown::labels;
use joiner_model::{Quantity, ResourceList};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::cloud::CloudProvider;
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::report::Reconciler;
use crate::store::{ClusterStore, StoreError};

/// Writes the status of every NodePool whose status changed. A pool whose write fails is
/// left for the next step; the others are written.
pub fn reconcile<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
) -> Result<(), ControllerError> {
    let pools = ctx.store.list::<NodePool>()?;
    let claims = ctx.store.list::<NodeClaim>()?;
    let classes: BTreeMap<String, EC2NodeClass> = ctx
        .store
        .list::<EC2NodeClass>()?
        .into_iter()
        .filter_map(|c| Some((c.metadata.name.clone()?, c)))
        .collect();
    let now = crate::clock::k8s_time(ctx.now);
    for pool in pools {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let class = classes.get(&pool.spec.template.spec.node_class_ref.name);
        let want = status_of(&pool, &claims, class, now.clone());
        if pool.status.as_ref() == Some(&want) {
            continue;
        }
        let mut updated = pool;
        updated.status = Some(want);
        match ctx.store.update(&updated) {
            Ok(_) => {}
            // Changed since it was read: written from the new one on the next step.
            Err(StoreError::Conflict(_) | StoreError::NotFound(_)) => {}
            Err(e) => ctx.error(
                Reconciler::NodePool,
                &format!("writing the status of NodePool {name}"),
                e,
            ),
        }
    }
    Ok(())
}

/// The status `pool` should have at `now`: its live NodeClaims and their capacity, and its
/// conditions, starting from the status it has (so unchanged conditions keep their times).
pub fn status_of(
    pool: &NodePool,
    claims: &[NodeClaim],
    class: Option<&EC2NodeClass>,
    now: Time,
) -> NodePoolStatus {
    let name = pool.metadata.name.as_deref().unwrap_or_default();
    let generation = pool.metadata.generation;
    let mut status = pool.status.clone().unwrap_or_default();
    let members: Vec<&NodeClaim> = claims
        .iter()
        .filter(|c| c.label(labels::NODEPOOL) == Some(name) && !c.is_deleting())
        .collect();
    status.nodes = i64::try_from(members.len()).unwrap_or(i64::MAX);
    let mut resources = ResourceList::new();
    for claim in &members {
        for (resource, q) in &claim.status.capacity {
            let sum = resources.entry(resource.clone()).or_insert(Quantity::ZERO);
            *sum = sum.saturating_add(*q);
        }
    }
    status.resources = resources;
    status.node_class_observed_generation = class.and_then(|c| c.metadata.generation);

    let class_ref = &pool.spec.template.spec.node_class_ref.name;
    let (class_ok, class_reason, class_message) = match class {
        None => (
            false,
            "NodeClassNotFound",
            format!("EC2NodeClass {class_ref} not found"),
        ),
        Some(c) => match c
            .status
            .as_ref()
            .and_then(|s| s.condition(class_conditions::READY))
        {
            Some(ready) if ready.status == "True" => (true, "NodeClassReady", String::new()),
            Some(ready) => (
                false,
                "NodeClassNotReady",
                format!("EC2NodeClass {class_ref} is not ready: {}", ready.message),
            ),
            None => (
                false,
                "NodeClassNotReady",
                format!("EC2NodeClass {class_ref} has no Ready condition yet"),
            ),
        },
    };
    status.set_condition(
        conditions::NODE_CLASS_READY,
        class_ok,
        class_reason,
        &class_message,
        now.clone(),
        generation,
    );
    let validation = pool.validate();
    let valid = validation.is_ok();
    let (reason, message) = match &validation {
        Ok(()) => ("ValidationSucceeded", String::new()),
        Err(e) => ("NodePoolValidationFailed", e.to_string()),
    };
    status.set_condition(
        conditions::VALIDATION_SUCCEEDED,
        valid,
        reason,
        &message,
        now.clone(),
        generation,
    );
    let failing: Vec<&str> = [
        (conditions::NODE_CLASS_READY, class_ok),
        (conditions::VALIDATION_SUCCEEDED, valid),
    ]
    .iter()
    .filter(|(_, ok)| !ok)
    .map(|(t, _)| *t)
    .collect();
    let (reason, message) = if failing.is_empty() {
        ("Ready", String::new())
    } else {
        (
            "UnhealthyDependents",
            format!("{} not True", failing.join(" and ")),
        )
    };
    status.set_condition(
        conditions::READY,
        failing.is_empty(),
        reason,
        &message,
        now,
        generation,
    );
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool() -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "gpu", "generation": 3},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []}}}
        }))
        .unwrap()
    }

    fn claim(name: &str, pool: &str, gpus: &str, deleting: bool) -> NodeClaim {
        let mut c: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []},
            "status": {"capacity": {"cpu": "4", "nvidia.com/gpu": gpus}}
        }))
        .unwrap();
        if deleting {
            c.metadata.deletion_timestamp = Some(time("2026-12-05T09:00:00Z"));
        }
        c
    }

    fn class(ready: bool) -> EC2NodeClass {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default", "generation": 7},
            "spec": {"role": "R", "amiSelectorTerms": [{"alias": "al2023@latest"}]},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"},
                "reason": "x", "message": "no subnets", "lastTransitionTime": "2026-12-05T08:00:00Z"}]}
        }))
        .unwrap()
    }

    fn time(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn condition<'a>(s: &'a NodePoolStatus, t: &str) -> (&'a str, &'a str) {
        let c = s.conditions.iter().find(|c| c.type_ == t).expect(t);
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn a_pool_counts_its_live_nodeclaims_and_their_capacity() {
        let claims = [
            claim("gpu-a", "gpu", "1", false),
            claim("gpu-b", "gpu", "4", false),
            claim("gpu-c", "gpu", "8", true),
            claim("cpu-a", "cpu", "0", false),
        ];
        let s = status_of(
            &pool(),
            &claims,
            Some(&class(true)),
            time("2026-12-05T10:00:00Z"),
        );
        assert_eq!(s.nodes, 2);
        assert_eq!(s.resources["cpu"], Quantity::from_units(8));
        assert_eq!(s.resources["nvidia.com/gpu"], Quantity::from_units(5));
        assert_eq!(s.node_class_observed_generation, Some(7));
        assert_eq!(condition(&s, conditions::READY), ("True", "Ready"));
        assert_eq!(condition(&s, conditions::NODE_CLASS_READY).0, "True");
        assert_eq!(condition(&s, conditions::VALIDATION_SUCCEEDED).0, "True");
    }

    #[test]
    fn a_pool_is_not_ready_while_its_class_is_missing_or_not_ready() {
        let at = time("2026-12-05T10:00:00Z");
        let s = status_of(&pool(), &[], None, at.clone());
        assert_eq!(
            condition(&s, conditions::NODE_CLASS_READY),
            ("False", "NodeClassNotFound")
        );
        assert_eq!(
            condition(&s, conditions::READY),
            ("False", "UnhealthyDependents")
        );
        let s = status_of(&pool(), &[], Some(&class(false)), at);
        let c = s
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::NODE_CLASS_READY)
            .unwrap();
        assert!(c.message.contains("no subnets"), "{}", c.message);
    }

    #[test]
    fn an_unchanged_status_keeps_its_transition_times() {
        let mut p = pool();
        p.status = Some(status_of(
            &p,
            &[],
            Some(&class(true)),
            time("2026-12-05T10:00:00Z"),
        ));
        let again = status_of(&p, &[], Some(&class(true)), time("2026-12-05T11:00:00Z"));
        assert_eq!(p.status.as_ref(), Some(&again), "nothing to write");
    }
}
