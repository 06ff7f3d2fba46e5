//! NodeOverlay status as Karpenter writes it: `ValidationSucceeded` (`False`, reason
//! `Conflict`, when an overlay of equal weight already prices the same offering or sets the
//! same resource, so this one is applied nowhere) and `Ready` following it.
//!
//! Written only while the `NodeOverlay` gate is on (Karpenter runs its overlay controller only
//! then), through the status subresource (the overlay is the user's), and only on change.

use std::collections::BTreeMap;

use joiner_model::api::NodeOverlay;
use joiner_model::api::nodeclaim::set_bool;
use joiner_model::api::nodeoverlay::{NodeOverlayStatus, conditions};
use joiner_model::feature_gates::FeatureGate;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::cloud::CloudProvider;
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::report::Reconciler;
use crate::store::{ClusterStore, StoreError};

/// Writes the status of every NodeOverlay whose status changed.
pub fn reconcile<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
) -> Result<(), ControllerError> {
    if !ctx
        .config
        .settings
        .feature_gates
        .enabled(FeatureGate::NodeOverlay)
    {
        return Ok(());
    }
    let overlays = ctx.store.list::<NodeOverlay>()?;
    if overlays.is_empty() {
        return Ok(());
    }
    let conflicts: BTreeMap<String, String> = ctx.pools_view()?.overlay_conflicts().clone();
    let now = crate::clock::k8s_time(ctx.now);
    for overlay in overlays {
        let want = status_of(&overlay, conflicts.get(overlay.name()), now.clone());
        if overlay.status == want {
            continue;
        }
        let name = overlay.name().to_string();
        let mut updated = overlay;
        updated.status = want;
        match ctx.store.update(&updated) {
            Ok(_) => {}
            // Changed since it was read: written from the new one on the next step.
            Err(StoreError::Conflict(_) | StoreError::NotFound(_)) => {}
            Err(e) => ctx.error(
                Reconciler::NodeOverlay,
                &format!("writing the status of NodeOverlay {name}"),
                e,
            ),
        }
    }
    Ok(())
}

/// The status `overlay` should have: applied, or in conflict as `conflict` says.
pub fn status_of(overlay: &NodeOverlay, conflict: Option<&String>, now: Time) -> NodeOverlayStatus {
    let generation = overlay.metadata.generation;
    let mut status = overlay.status.clone();
    let (reason, message) = match conflict {
        None => ("ValidationSucceeded", String::new()),
        Some(c) => ("Conflict", c.clone()),
    };
    set_bool(
        &mut status.conditions,
        conditions::VALIDATION_SUCCEEDED,
        conflict.is_none(),
        reason,
        &message,
        now.clone(),
        generation,
    );
    let (reason, message) = match conflict {
        None => ("Ready", String::new()),
        Some(_) => (
            "UnhealthyDependents",
            "ValidationSucceeded not True".to_string(),
        ),
    };
    set_bool(
        &mut status.conditions,
        conditions::READY,
        conflict.is_none(),
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

    fn overlay() -> NodeOverlay {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
            "metadata": {"name": "discount", "generation": 2},
            "spec": {"requirements": [], "price": "0.1", "weight": 10}
        }))
        .unwrap()
    }

    fn time(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    #[test]
    fn a_conflict_is_reported_and_a_resolved_one_clears_keeping_times_while_unchanged() {
        let t0 = time("2026-12-05T08:00:00Z");
        let mut o = overlay();
        o.status = status_of(&o, None, t0.clone());
        let ready = |s: &NodeOverlayStatus, t: &str| {
            s.conditions.iter().find(|c| c.type_ == t).map(|c| {
                (
                    c.status.clone(),
                    c.reason.clone(),
                    c.last_transition_time.clone(),
                )
            })
        };
        assert_eq!(
            ready(&o.status, conditions::READY),
            Some(("True".into(), "Ready".into(), t0.clone()))
        );
        // Unchanged: the same status, so nothing is written.
        assert_eq!(status_of(&o, None, time("2026-12-05T09:00:00Z")), o.status);
        let conflict = "conflicts with NodeOverlay/other (both weight 10, ...)".to_string();
        let t1 = time("2026-12-05T10:00:00Z");
        let s = status_of(&o, Some(&conflict), t1.clone());
        assert_eq!(
            ready(&s, conditions::VALIDATION_SUCCEEDED),
            Some(("False".into(), "Conflict".into(), t1.clone()))
        );
        assert_eq!(
            ready(&s, conditions::READY).map(|r| r.0),
            Some("False".into())
        );
        let message = s
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::VALIDATION_SUCCEEDED)
            .map(|c| c.message.clone());
        assert_eq!(message, Some(conflict));
    }
}
