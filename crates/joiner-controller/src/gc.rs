//! Garbage collection between the cloud and the cluster, on its own period
//! ([`Config::gc_period`](crate::Config::gc_period)), never on uncertainty.
//!
//! Two directions, each acting only on proof:
//!
//! - **An instance without its NodeClaim** is terminated when all of these hold: the cloud
//!   listed it with every ownership tag ([`tags::is_owned`]: a managed node group's, a
//!   self-managed node's or another cluster's instance is never listed, and is checked again
//!   here); it names its NodeClaim (`karpenter.sh/nodeclaim`); no NodeClaim records its provider
//!   ID or has that name in the cache; no NodeClaim of that name fails to decode (an object
//!   another tool wrote with a newer API keeps its instance, with a warning); the API server
//!   itself, read past the cache, has no NodeClaim of that name; and it is older than
//!   [`Config::gc_grace`](crate::Config::gc_grace). An owned instance that names no NodeClaim
//!   (Karpenter tags the name only after registration) is collected the same way once no
//!   NodeClaim records its provider ID and none fails to decode. A failed listing of either side
//!   (caches not synced, the NodeClaim CRD missing, a throttled DescribeInstances) stops the
//!   whole pass.
//! - **A duplicate instance**, past the same grace, is terminated when the NodeClaim it names
//!   exists and, read past the cache, records another instance: two controllers (a Karpenter
//!   not yet stopped) launched for the same NodeClaim and the other's launch was recorded.
//! - **A NodeClaim without its instance** (launched, not deleting) is deleted when the cloud
//!   says the instance is terminated, or when it has not found the instance for longer than
//!   [`Config::instance_not_found_grace`](crate::Config::instance_not_found_grace) since the
//!   launch: EC2 answers NotFound for a while after a launch and its listings trail it, so one
//!   missing answer proves nothing.
//! - **Instance profiles** made for the cluster's EC2NodeClasses that nothing has used for a
//!   while are deleted ([`profiles`]).
//! - **Launch templates** Joiner made for EC2NodeClasses that changed or are gone are deleted
//!   (the cloud decides which are its own and unused from the full list of classes).

use std::collections::BTreeSet;

pub mod profiles;

use crate::clock::elapsed;
use crate::cloud::{CloudProvider, Instance, InstanceState, instance_id_of};
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::report::Reconciler;
use crate::store::{ClusterStore, StoreError};
use joiner_model::api::EC2NodeClass;
use joiner_model::api::nodeclaim::{NodeClaim, conditions};
use joiner_model::wellknown::tags;

pub fn collect<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    profile_use: &mut profiles::ProfileUse,
) -> Result<(), ControllerError> {
    // Both sides are read before anything is decided; either failing means "not now".
    let claims = ctx.store.list::<NodeClaim>()?;
    let undecodable: BTreeSet<String> = ctx
        .store
        .undecodable::<NodeClaim>()?
        .into_iter()
        .map(|k| k.name)
        .collect();
    let instances = ctx.list_instances()?;
    terminate_orphans(ctx, &claims, &undecodable, &instances);
    delete_claims_without_instances(ctx, &claims, &instances);
    // Launch templates and instance profiles of EC2NodeClasses that changed or went; only from
    // a full listing, and never while a class (or, for profiles, a NodeClaim) fails to decode:
    // what it uses cannot be known.
    if !ctx.store.undecodable::<EC2NodeClass>()?.is_empty() {
        tracing::warn!(
            "an EC2NodeClass does not decode: no launch template or instance profile is collected"
        );
        return Ok(());
    }
    let classes = ctx.store.list::<EC2NodeClass>()?;
    match ctx.cloud.delete_unused_launch_templates(&classes) {
        Ok(deleted) => ctx.report.launch_templates_deleted.extend(deleted),
        Err(e) => ctx.error(
            Reconciler::GarbageCollection,
            "deleting unused launch templates",
            e,
        ),
    }
    if !undecodable.is_empty() {
        tracing::warn!("a NodeClaim does not decode: no instance profile is collected");
        return Ok(());
    }
    if let Err(e) = profiles::collect(ctx, profile_use, &classes, &claims, &instances) {
        ctx.error(
            Reconciler::GarbageCollection,
            "collecting instance profiles",
            e,
        );
    }
    Ok(())
}

fn terminate_orphans<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claims: &[NodeClaim],
    undecodable: &BTreeSet<String>,
    instances: &[Instance],
) {
    // By instance id: a provider ID written before EC2 said the zone differs in text only.
    let recorded: BTreeSet<&str> = claims
        .iter()
        .filter_map(|c| c.status.provider_id.as_deref().and_then(instance_id_of))
        .collect();
    let by_name: std::collections::BTreeMap<&str, &NodeClaim> =
        claims.iter().map(|c| (c.name(), c)).collect();
    for i in instances {
        if !tags::is_owned(&i.tags, &ctx.config.cluster_name)
            || recorded.contains(i.id.as_str())
            || elapsed(ctx.now, i.launch_time) < ctx.config.gc_grace
        {
            continue;
        }
        let Some(claim) = i.tags.get(tags::NODECLAIM) else {
            // Karpenter tags the NodeClaim's name only once the node registers, so an instance
            // it launched and never recorded (a crash between the launch and the status write)
            // names none. Past the grace period no NodeClaim records it: Karpenter collects it
            // the same way. A NodeClaim that does not decode might be the one: then keep it.
            if !undecodable.is_empty() {
                tracing::warn!(instance = %i.id, "instance names no NodeClaim and a NodeClaim does not decode; keeping the instance");
                ctx.report.kept.push((i.id.clone(), String::new()));
                continue;
            }
            tracing::warn!(instance = %i.id, "instance carries the ownership tags, names no NodeClaim and no NodeClaim records it; terminating");
            match ctx.terminate(&i.id, &i.zone) {
                Ok(()) => ctx.report.terminated.push(i.id.clone()),
                Err(e) => ctx.error(
                    Reconciler::GarbageCollection,
                    &format!("terminating orphan {}", i.id),
                    e,
                ),
            }
            continue;
        };
        // Its NodeClaim exists: the instance is kept while the NodeClaim has recorded no
        // instance yet (the write may be in flight). One that recorded another instance is
        // served by that one: this is a duplicate (two controllers launched for it).
        if let Some(c) = by_name.get(claim.as_str()) {
            if c.status.provider_id.is_none() {
                continue;
            }
            // The cache may hold an older NodeClaim of the same name: only the API server's
            // copy, recording another instance, proves this one a duplicate.
            let fresh = match ctx.store.get_uncached::<NodeClaim>(None, claim) {
                Ok(fresh) => fresh,
                Err(e) => {
                    ctx.error(
                        Reconciler::GarbageCollection,
                        &format!("reading NodeClaim {claim} before collecting {}", i.id),
                        e,
                    );
                    continue;
                }
            };
            let recorded = fresh.and_then(|f| f.status.provider_id);
            let Some(recorded) = recorded.filter(|p| instance_id_of(p) != Some(i.id.as_str()))
            else {
                continue;
            };
            tracing::warn!(instance = %i.id, nodeclaim = %claim, %recorded, "the instance's NodeClaim records another instance; terminating the duplicate");
            match ctx.terminate(&i.id, &i.zone) {
                Ok(()) => ctx.report.terminated.push(i.id.clone()),
                Err(e) => ctx.error(
                    Reconciler::GarbageCollection,
                    &format!("terminating duplicate {}", i.id),
                    e,
                ),
            }
            continue;
        }
        if undecodable.contains(claim) {
            tracing::warn!(instance = %i.id, nodeclaim = %claim, "the instance's NodeClaim exists but does not decode; keeping the instance");
            ctx.report.kept.push((i.id.clone(), claim.clone()));
            continue;
        }
        // The cache may trail the API server (a NodeClaim just created by this step, another
        // leader, or before a crash): only the server itself can say the NodeClaim is gone.
        match ctx.store.get_uncached::<NodeClaim>(None, claim) {
            Ok(None) => {}
            Ok(Some(_)) => continue,
            Err(e) => {
                ctx.error(
                    Reconciler::GarbageCollection,
                    &format!("reading NodeClaim {claim} before collecting its instance"),
                    e,
                );
                continue;
            }
        }
        tracing::warn!(instance = %i.id, nodeclaim = %claim, "instance's NodeClaim is gone; terminating");
        match ctx.terminate(&i.id, &i.zone) {
            Ok(()) => ctx.report.terminated.push(i.id.clone()),
            Err(e) => ctx.error(
                Reconciler::GarbageCollection,
                &format!("terminating orphan {}", i.id),
                e,
            ),
        }
    }
}

fn delete_claims_without_instances<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claims: &[NodeClaim],
    instances: &[Instance],
) {
    let listed: BTreeSet<&str> = instances.iter().map(|i| i.id.as_str()).collect();
    for c in claims.iter().filter(|c| !c.is_deleting()) {
        let Some(id) = c.status.provider_id.as_deref().and_then(instance_id_of) else {
            continue;
        };
        if listed.contains(id) {
            continue;
        }
        // The listing may trail a launch; ask for the instance itself.
        let gone = match ctx.instance(id) {
            Ok(Some(i)) => i.state == InstanceState::Terminated,
            Ok(None) => launched_for(ctx, c) >= ctx.config.instance_not_found_grace,
            Err(e) => {
                ctx.error(
                    Reconciler::GarbageCollection,
                    &format!("looking up instance {id}"),
                    e,
                );
                false
            }
        };
        if !gone {
            continue;
        }
        tracing::warn!(
            nodeclaim = c.name(),
            instance = id,
            "instance is gone; deleting NodeClaim"
        );
        match ctx.store.delete::<NodeClaim>(None, c.name()) {
            Ok(_) | Err(StoreError::NotFound(_)) => {
                ctx.report.deleted.push(c.name().to_string());
                ctx.invalidate_view();
            }
            Err(e) => ctx.error(
                Reconciler::GarbageCollection,
                &format!("deleting NodeClaim {}", c.name()),
                e,
            ),
        }
    }
}

/// How long ago the NodeClaim's launch was recorded (its `Launched` condition); zero when that
/// is unknown, so an unknown launch time never counts as old.
fn launched_for<S, C>(ctx: &Ctx<'_, S, C>, claim: &NodeClaim) -> std::time::Duration {
    claim
        .condition(conditions::LAUNCHED)
        .map_or(std::time::Duration::ZERO, |c| {
            elapsed(ctx.now, c.last_transition_time.0)
        })
}
