//! EC2NodeClass status: each class's selectors resolved in the cloud and written to its status
//! (subnets, security groups, AMIs, instance profile, and the conditions `SubnetsReady`,
//! `SecurityGroupsReady`, `AMIsReady`, `InstanceProfileReady`, `PlacementGroupReady` and
//! `Ready`), as Karpenter's nodeclass controller writes them. The placement group a class
//! selects is kept in memory ([`crate::placement`]), as Karpenter keeps it.
//!
//! It runs at the start of every step, before anything plans, for the classes that are due: one
//! never resolved by this controller, one whose spec changed, one whose last resolution is older
//! than [`Config::node_class_period`](crate::Config::node_class_period) (or, after a read that
//! failed, [`Config::node_class_retry`](crate::Config::node_class_retry)).
//!
//! Only a read that succeeded changes a condition: a part whose read failed (throttled, timed
//! out) keeps its last status, so a class that was Ready stays Ready through an EC2 hiccup. A
//! status write that conflicts (the class changed since it was read) is retried on the next
//! step. The view every reconciler plans over treats a class with no `Ready` condition as
//! `Ready=Unknown` (`context::mark_unresolved`): the controller never launches from a class it has
//! not resolved, while `joiner plan` and `simulate`, which read classes from files, plan on them.

use std::collections::BTreeMap;

use joiner_model::api::EC2NodeClass;
use joiner_model::api::ec2nodeclass::EC2NodeClassStatus;
use joiner_model::api::nodeclass_status::{conditions, reasons};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::clock::{add, k8s_time};
use crate::cloud::{CloudProvider, NodeClassResolution, Resolved};
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::report::Reconciler;
use crate::store::{ClusterStore, StoreError};

/// When each class (by name) was last resolved by this controller, and from which spec.
#[derive(Debug, Default)]
pub struct NodeClassState {
    resolved: BTreeMap<String, Resolution>,
}

#[derive(Debug)]
struct Resolution {
    uid: Option<String>,
    spec: String,
    next: Timestamp,
}

impl NodeClassState {
    fn due(&self, class: &EC2NodeClass, spec: &str, now: Timestamp) -> bool {
        let name = class.metadata.name.as_deref().unwrap_or_default();
        self.resolved
            .get(name)
            .is_none_or(|r| r.uid != class.metadata.uid || r.spec != spec || now >= r.next)
    }
}

/// The status `previous` becomes with what `resolution` found: parts found replace their
/// field and set their condition True, parts that matched nothing clear it and set it False
/// with the message, parts whose read failed stay as they were. `ValidationSucceeded` is
/// False with `invalid`'s message when there is one (a tag that would defeat the ownership
/// check), True otherwise. `Ready` follows.
pub fn apply(
    previous: Option<&EC2NodeClassStatus>,
    resolution: &NodeClassResolution,
    invalid: Option<&str>,
    now: Time,
    generation: Option<i64>,
) -> EC2NodeClassStatus {
    let mut status = previous.cloned().unwrap_or_default();
    let at = (&now, generation);
    match invalid {
        None => status.set_condition(
            conditions::VALIDATION_SUCCEEDED,
            true,
            conditions::VALIDATION_SUCCEEDED,
            "",
            now.clone(),
            generation,
        ),
        Some(why) => status.set_condition(
            conditions::VALIDATION_SUCCEEDED,
            false,
            reasons::RESTRICTED_TAG,
            why,
            now.clone(),
            generation,
        ),
    }
    let parts = [
        (
            conditions::SUBNETS_READY,
            reasons::SUBNETS_NOT_FOUND,
            apply_part(&resolution.subnets, &mut status.subnets),
        ),
        (
            conditions::SECURITY_GROUPS_READY,
            reasons::SECURITY_GROUPS_NOT_FOUND,
            apply_part(&resolution.security_groups, &mut status.security_groups),
        ),
        (
            conditions::AMIS_READY,
            reasons::AMIS_NOT_FOUND,
            apply_part(&resolution.amis, &mut status.amis),
        ),
        (
            conditions::INSTANCE_PROFILE_READY,
            reasons::INSTANCE_PROFILE_NOT_READY,
            // A profile that cannot be used keeps its name: a later resolution adopts it again.
            match &resolution.instance_profile {
                Resolved::Found(name) => {
                    status.instance_profile = Some(name.clone());
                    Some(Ok(()))
                }
                Resolved::NotFound(m) => Some(Err(m.clone())),
                Resolved::Failed(_) => None,
            },
        ),
        (
            conditions::PLACEMENT_GROUP_READY,
            reasons::PLACEMENT_GROUP_NOT_FOUND,
            // The group itself is kept in memory ([`crate::placement`]), as Karpenter keeps it.
            match &resolution.placement_group {
                Resolved::Found(_) => Some(Ok(())),
                Resolved::NotFound(m) => Some(Err(m.clone())),
                Resolved::Failed(_) => None,
            },
        ),
    ];
    // Reservations have no condition: none found is a class that launches without them.
    match &resolution.capacity_reservations {
        Resolved::Found(found) => status.capacity_reservations.clone_from(found),
        Resolved::NotFound(_) => status.capacity_reservations.clear(),
        Resolved::Failed(_) => {}
    }
    for (type_, reason, outcome) in parts {
        match outcome {
            Some(Ok(())) => status.set_condition(type_, true, type_, "", at.0.clone(), at.1),
            Some(Err(m)) => status.set_condition(type_, false, reason, &m, at.0.clone(), at.1),
            None => {}
        }
    }
    // With every read failed and nothing known before, `Ready` is Unknown, not absent.
    status.recompute_ready(now, generation);
    status
}

/// One list of the status from its part: found replaces it, not found clears it (the message
/// returned for the condition), a failed read leaves it (`None`: the condition stays too).
fn apply_part<T: Clone>(part: &Resolved<Vec<T>>, field: &mut Vec<T>) -> Option<Result<(), String>> {
    match part {
        Resolved::Found(v) => {
            field.clone_from(v);
            Some(Ok(()))
        }
        Resolved::NotFound(m) => {
            field.clear();
            Some(Err(m.clone()))
        }
        Resolved::Failed(_) => None,
    }
}

/// The errors of the parts whose read failed.
fn failures(r: &NodeClassResolution) -> Vec<&crate::cloud::CloudError> {
    let mut out = Vec::new();
    if let Resolved::Failed(e) = &r.subnets {
        out.push(e);
    }
    if let Resolved::Failed(e) = &r.security_groups {
        out.push(e);
    }
    if let Resolved::Failed(e) = &r.amis {
        out.push(e);
    }
    if let Resolved::Failed(e) = &r.instance_profile {
        out.push(e);
    }
    if let Resolved::Failed(e) = &r.capacity_reservations {
        out.push(e);
    }
    if let Resolved::Failed(e) = &r.placement_group {
        out.push(e);
    }
    out
}

/// Resolves the classes that are due and writes the status of each whose status changed;
/// returns whether any was written or a class's placement group changed (what the NodePools
/// can launch may have changed). One class's failure is reported and leaves the others alone.
pub fn reconcile<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    state: &mut NodeClassState,
) -> Result<bool, ControllerError> {
    let mut written = false;
    let classes = ctx.store.list::<EC2NodeClass>()?;
    for class in classes {
        if class.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = class.metadata.name.clone().unwrap_or_default();
        let spec = serde_json::to_string(&class.spec).unwrap_or_default();
        if !state.due(&class, &spec, ctx.now) {
            continue;
        }
        let resolution = ctx.cloud.resolve_node_class(&class.clone().into_v1());
        // The view plans with the group (or without it) from now on.
        if ctx
            .placement_groups
            .record(&class, &resolution.placement_group)
        {
            ctx.invalidate_view();
            written = true;
        }
        let failed = failures(&resolution);
        // One error per class and step: the parts usually fail together (throttling).
        if let Some(e) = failed.first() {
            ctx.error(
                Reconciler::NodeClass,
                &format!("resolving EC2NodeClass {name}"),
                (*e).clone(),
            );
        }
        let wait = if failed.is_empty() {
            ctx.config.node_class_period
        } else {
            ctx.config.node_class_retry
        };
        // Resolvable or not, a class whose tags defeat the ownership check launches nothing:
        // its `ValidationSucceeded` condition says which tag to remove, and `Ready` follows.
        let restricted = class.restricted_tag();
        let status = apply(
            class.status.as_ref(),
            &resolution,
            restricted.as_deref(),
            k8s_time(ctx.now),
            class.metadata.generation,
        );
        let mut resolved = Resolution {
            uid: class.metadata.uid.clone(),
            spec,
            next: add(ctx.now, wait),
        };
        if class.status.as_ref() != Some(&status) {
            if let Some(c) = status.condition(conditions::READY)
                && c.status != "True"
            {
                tracing::warn!(node_class = %name, why = %c.message, "EC2NodeClass is not ready");
            }
            let mut updated = class;
            updated.status = Some(status);
            match ctx.store.update(&updated) {
                Ok(_) => {
                    ctx.invalidate_view();
                    written = true;
                }
                // Changed since it was read: resolved again on the next step from the new one.
                Err(e @ StoreError::Conflict(_)) => {
                    tracing::info!(node_class = %name, "{e}; writing its status on the next step");
                    resolved.next = ctx.now;
                }
                Err(e) => {
                    ctx.error(
                        Reconciler::NodeClass,
                        &format!("writing the status of EC2NodeClass {name}"),
                        e,
                    );
                    resolved.next = ctx.now;
                }
            }
        }
        state.resolved.insert(name, resolved);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::CloudError;
    use joiner_model::Sourced;
    use joiner_model::api::ec2nodeclass::{Ami, Readiness, SecurityGroup, Subnet};
    use joiner_model::api::nodeclass_status::CapacityReservation;

    fn at(s: i64) -> Time {
        Time(Timestamp::from_second(s).expect("time"))
    }

    fn found() -> NodeClassResolution {
        NodeClassResolution {
            subnets: Resolved::Found(vec![Subnet {
                id: "subnet-1".into(),
                zone: "us-east-1a".into(),
                zone_id: Some("use1-az1".into()),
            }]),
            security_groups: Resolved::Found(vec![SecurityGroup {
                id: "sg-1".into(),
                name: Some("nodes".into()),
            }]),
            amis: Resolved::Found(vec![Ami {
                id: "ami-1".into(),
                ..Ami::default()
            }]),
            instance_profile: Resolved::Found("lab_123".into()),
            capacity_reservations: Resolved::Found(vec![CapacityReservation {
                id: "cr-1".into(),
                instance_type: "p5.48xlarge".into(),
                availability_zone: "us-east-1a".into(),
                available_instance_count: Some(2),
                ..CapacityReservation::default()
            }]),
            placement_group: Resolved::Found(None),
        }
    }

    /// Karpenter's ValidationSucceeded: False naming what is wrong (a restricted tag), which
    /// keeps the class from Ready however well it resolved; True again once it is fixed.
    #[test]
    fn a_failed_validation_keeps_the_class_from_ready() {
        let bad = apply(
            None,
            &found(),
            Some("tag eks:nodegroup-name"),
            at(1),
            Some(1),
        );
        let c = bad
            .condition(conditions::VALIDATION_SUCCEEDED)
            .expect("condition");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", reasons::RESTRICTED_TAG)
        );
        let ready = bad.condition(conditions::READY).expect("Ready");
        assert_eq!(ready.status, "False");
        assert!(
            ready.message.contains("eks:nodegroup-name"),
            "{}",
            ready.message
        );
        let fixed = apply(Some(&bad), &found(), None, at(2), Some(2));
        assert_eq!(
            fixed
                .condition(conditions::READY)
                .map(|c| c.status.as_str()),
            Some("True")
        );
    }

    #[test]
    fn reservations_follow_the_cloud_and_a_failed_read_keeps_them() {
        let ready = apply(None, &found(), None, at(1), Some(1));
        assert_eq!(
            ready.capacity_reservations[0].available_instance_count,
            Some(2)
        );
        let mut r = found();
        r.capacity_reservations = Resolved::Failed(CloudError::Throttled);
        let kept = apply(Some(&ready), &r, None, at(2), Some(1));
        assert_eq!(kept.capacity_reservations, ready.capacity_reservations);
        assert_eq!(kept.readiness(), Readiness::Ready);
        r.capacity_reservations = Resolved::Found(Vec::new());
        let gone = apply(Some(&ready), &r, None, at(3), Some(1));
        assert!(gone.capacity_reservations.is_empty());
        // No reservation is no fault of the class.
        assert_eq!(gone.readiness(), Readiness::Ready);
    }

    #[test]
    fn a_class_whose_parts_are_all_found_is_ready_with_them_in_its_status() {
        let s = apply(None, &found(), None, at(1), Some(1));
        assert_eq!(s.readiness(), Readiness::Ready);
        assert_eq!(s.subnets[0].zone_id.as_deref(), Some("use1-az1"));
        assert_eq!(s.security_groups[0].name.as_deref(), Some("nodes"));
        assert_eq!(s.amis[0].id, "ami-1");
        assert_eq!(s.instance_profile.as_deref(), Some("lab_123"));
        for t in conditions::DEPENDENTS {
            assert_eq!(
                s.condition(t).map(|c| c.status.as_str()),
                Some("True"),
                "{t}"
            );
        }
    }

    #[test]
    fn subnets_that_match_nothing_make_the_class_not_ready_with_the_message() {
        let ready = apply(None, &found(), None, at(1), Some(1));
        let mut r = found();
        r.subnets = Resolved::NotFound("no subnet matches spec.subnetSelectorTerms".into());
        let s = apply(Some(&ready), &r, None, at(2), Some(2));
        assert!(s.subnets.is_empty());
        let sub = s.condition(conditions::SUBNETS_READY).expect("condition");
        assert_eq!(
            (sub.status.as_str(), sub.reason.as_str()),
            ("False", reasons::SUBNETS_NOT_FOUND)
        );
        assert_eq!(
            s.readiness(),
            Readiness::NotReady(
                "SubnetsReady=False: no subnet matches spec.subnetSelectorTerms".into()
            )
        );
        // The other parts are unchanged, their transition times kept.
        let sg = s.condition(conditions::SECURITY_GROUPS_READY).expect("sg");
        assert_eq!(
            (sg.status.as_str(), &sg.last_transition_time),
            ("True", &at(1))
        );
    }

    #[test]
    fn a_failed_read_keeps_the_last_status() {
        let ready = apply(None, &found(), None, at(1), Some(1));
        let throttled = NodeClassResolution::failed(CloudError::Throttled);
        let s = apply(Some(&ready), &throttled, None, at(2), Some(1));
        assert_eq!(s, ready);
        // Nothing known before and nothing read now: Unknown, so nothing launches from it.
        let s = apply(None, &throttled, None, at(2), Some(1));
        let Readiness::NotReady(why) = s.readiness() else {
            panic!("ready without a resolution");
        };
        assert!(why.contains("not resolved yet"), "{why}");
        assert!(s.subnets.is_empty() && s.instance_profile.is_none());
    }

    #[test]
    fn classes_without_a_ready_condition_are_marked_unknown_in_the_view() {
        let class: EC2NodeClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "gpu"}, "spec": {"role": "R"}
        }))
        .expect("class");
        let mut resolved = class.clone();
        resolved.status = Some(apply(None, &found(), None, at(1), None));
        let mut classes = vec![
            Sourced {
                origin: joiner_model::Source::new("cluster", 0),
                object: class,
            },
            Sourced {
                origin: joiner_model::Source::new("cluster", 0),
                object: resolved.clone(),
            },
        ];
        crate::context::mark_unresolved(&mut classes, at(2));
        assert!(matches!(
            classes[0].object.readiness(),
            Readiness::NotReady(_)
        ));
        assert_eq!(classes[1].object, resolved);
    }
}
