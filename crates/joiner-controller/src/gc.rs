//! Garbage collection between the cloud and the cluster.
//!
//! An instance tagged for this cluster that no NodeClaim owns (its NodeClaim was lost, or a
//! launch whose result was never recorded was superseded) is terminated once it is older than
//! the grace period; a launched NodeClaim whose instance is gone is deleted.

use std::collections::BTreeSet;

use crate::clock::elapsed;
use crate::cloud::{CloudProvider, InstanceState, instance_id_of};
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::store::{ClusterStore, StoreError};
use joiner_model::api::nodeclaim::NodeClaim;
use joiner_model::wellknown::tags;

pub fn collect<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
) -> Result<(), ControllerError> {
    let instances = ctx.cloud.list(&ctx.config.cluster_name)?;
    let claims = ctx.store.list::<NodeClaim>()?;
    let recorded: BTreeSet<&str> = claims
        .iter()
        .filter_map(|c| c.status.provider_id.as_deref())
        .collect();
    // A NodeClaim not yet launched adopts the instance tagged with its name, so that instance is
    // not an orphan.
    let launching: BTreeSet<&str> = claims
        .iter()
        .filter(|c| c.status.provider_id.is_none())
        .map(NodeClaim::name)
        .collect();
    for i in &instances {
        let owned = recorded.contains(i.provider_id().as_str())
            || i.tags
                .get(tags::NODECLAIM)
                .is_some_and(|n| launching.contains(n.as_str()));
        if owned || elapsed(ctx.now, i.launch_time) < ctx.config.gc_grace {
            continue;
        }
        tracing::warn!(instance = %i.id, "instance has no NodeClaim; terminating");
        match ctx.cloud.terminate(&i.id) {
            Ok(()) => ctx.report.terminated.push(i.id.clone()),
            Err(e) => ctx.error(&format!("terminating orphan {}", i.id), e),
        }
    }
    let running: BTreeSet<&str> = instances.iter().map(|i| i.id.as_str()).collect();
    for c in claims.iter().filter(|c| !c.is_deleting()) {
        let Some(id) = c.status.provider_id.as_deref().and_then(instance_id_of) else {
            continue;
        };
        if running.contains(id) {
            continue;
        }
        // The list may lag behind a launch; ask for the instance itself before deciding.
        let gone = match ctx.cloud.get(id) {
            Ok(found) => found.is_none_or(|i| i.state == InstanceState::Terminated),
            Err(e) => {
                ctx.error(&format!("looking up instance {id}"), e);
                false
            }
        };
        if gone {
            tracing::warn!(
                nodeclaim = c.name(),
                instance = id,
                "instance is gone; deleting NodeClaim"
            );
            match ctx.store.delete::<NodeClaim>(None, c.name()) {
                Ok(_) | Err(StoreError::NotFound(_)) => {
                    ctx.report.deleted.push(c.name().to_string())
                }
                Err(e) => ctx.error(&format!("deleting NodeClaim {}", c.name()), e),
            }
        }
    }
    Ok(())
}
