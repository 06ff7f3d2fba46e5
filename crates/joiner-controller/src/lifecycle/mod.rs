//! The NodeClaim lifecycle: Launched, Registered, Initialized, and the termination finalizer.
//!
//! Each NodeClaim moves forward one stage per step, reading the cloud and the cluster afresh,
//! so a controller restarted at any point picks up where the last one stopped. Launching first
//! looks for an instance already tagged with the NodeClaim (launched before a crash, its
//! provider ID never recorded) and passes the NodeClaim's uid as the cloud's idempotency token:
//! a NodeClaim never gets a second instance.

use std::collections::BTreeSet;

use joiner_model::api::{EC2NodeClass, NodePool};
use joiner_model::wellknown::{annotations, finalizers, labels};
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::api::resource::v1::ResourceSlice;

use crate::clock::{add, k8s_time};
use crate::cloud::{
    CloudError, CloudProvider, Instance, LaunchRequest, Offer, OfferingKey, instance_id_of,
};
use crate::consistency;
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::nodeclaim::launch::{offers_for, request_for, requested_dra_drivers, reserved_offers};
use crate::nodeclaim::tagged_instances;
use crate::report::Reconciler;
use crate::store::{ClusterStore, StoreError};
use crate::termination;
use joiner_model::api::nodeclaim::{NodeClaim, conditions};

mod predictions;

/// One lifecycle pass over every NodeClaim.
pub fn reconcile<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
) -> Result<(), ControllerError> {
    let claims = ctx.store.list::<NodeClaim>()?;
    let nodes = ctx.store.list::<Node>()?;
    // Nodes deleted by hand end their NodeClaims first, so this pass finalizes them.
    let mut deleted_nodes = false;
    for node in nodes.iter().filter(|n| {
        n.metadata.deletion_timestamp.is_some() && termination::has_finalizer(&n.metadata)
    }) {
        deleted_nodes = true;
        if let Err(e) = termination::node_deleted(ctx, node, &claims) {
            let name = node.metadata.name.clone().unwrap_or_default();
            ctx.error(Reconciler::Lifecycle, &format!("Node {name}"), e);
        }
    }
    let claims = if deleted_nodes {
        ctx.store.list::<NodeClaim>()?
    } else {
        claims
    };
    // A NodePool that does not decode still exists: its NodeClaims are not orphans.
    let pools: BTreeSet<String> = ctx
        .store
        .list::<NodePool>()?
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .chain(
            ctx.store
                .undecodable::<NodePool>()?
                .into_iter()
                .map(|k| k.name),
        )
        .collect();
    // Pods are read only when a drain needs them.
    let pods = if claims.iter().any(NodeClaim::is_deleting) {
        ctx.store.list::<Pod>()?
    } else {
        Vec::new()
    };
    for claim in claims {
        let name = claim.name().to_string();
        // One NodeClaim that cannot be handled (a read that fails, a write refused) waits on
        // its own; the others go on.
        if let Err(e) = step_claim(ctx, claim, &nodes, &pods, &pools) {
            let throttled = matches!(e, ControllerError::Cloud(CloudError::Throttled));
            ctx.error(Reconciler::Lifecycle, &format!("NodeClaim {name}"), e);
            // The account's request budget is spent: the rest wait for the pause that
            // follows ([`crate::throttle`]) rather than spend what refills.
            if throttled {
                break;
            }
        }
    }
    Ok(())
}

/// One step of one NodeClaim's life: finalize, collect, launch, register or initialize it.
fn step_claim<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: NodeClaim,
    nodes: &[Node],
    pods: &[Pod],
    pools: &BTreeSet<String>,
) -> Result<(), ControllerError> {
    let name = claim.name().to_string();
    if claim.is_deleting() {
        termination::finalize(ctx, claim, nodes, pods)
    } else if let Some(why) = pool_gone(ctx, &claim, pools)? {
        tracing::warn!(nodeclaim = %name, "{why}; deleting");
        delete(ctx, &claim)
    } else if let Some(why) = ghost(ctx, &claim, nodes)? {
        tracing::warn!(nodeclaim = %name, "{why}; deleting");
        delete(ctx, &claim)
    } else if timed_out(ctx, &claim) {
        tracing::warn!(nodeclaim = %name, "not registered in time; deleting");
        delete(ctx, &claim)
    } else if claim.status.provider_id.is_none() {
        if backing_off(ctx, &claim) {
            Ok(())
        } else {
            launch(ctx, claim)
        }
    } else if !claim.is_true(conditions::REGISTERED) {
        register(ctx, claim, nodes)
    } else if !claim.is_true(conditions::INITIALIZED) {
        initialize(ctx, claim, nodes)
    } else {
        keep_finalizer(ctx, &claim, nodes)?;
        predictions::gfd_labels(ctx, claim, nodes)
    }
}

/// A running NodeClaim's Node keeps the termination finalizer, so deleting it by hand drains it:
/// added to Nodes registered before Joiner put it there at registration (or by whoever removed
/// it), once, as Karpenter adds its own to the Nodes it manages.
fn keep_finalizer<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
    nodes: &[Node],
) -> Result<(), ControllerError> {
    let Some(node) = termination::node_of(claim, nodes) else {
        return Ok(());
    };
    if termination::has_finalizer(&node.metadata) || node.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let mut node = node.clone();
    node.metadata
        .finalizers
        .get_or_insert_with(Vec::new)
        .push(finalizers::TERMINATION.into());
    match ctx.store.update(&node) {
        // Seen again on the next step.
        Ok(_) | Err(StoreError::Conflict(_) | StoreError::NotFound(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A NodeClaim whose NodePool was deleted goes with it, as Kubernetes' garbage collector
/// takes a NodeClaim whose owner is gone in Karpenter. Only a fresh read that finds the NodePool
/// absent (or being deleted) counts: a cache that has not seen it yet says nothing.
fn pool_gone<S: ClusterStore, C>(
    ctx: &Ctx<'_, S, C>,
    claim: &NodeClaim,
    pools: &BTreeSet<String>,
) -> Result<Option<String>, ControllerError> {
    let Some(pool) = claim.label(labels::NODEPOOL) else {
        return Ok(None);
    };
    if pools.contains(pool) {
        return Ok(None);
    }
    let fresh = ctx.store.get_uncached::<NodePool>(None, pool)?;
    Ok(fresh
        .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
        .then(|| format!("its NodePool {pool} was deleted")))
}

/// A registered NodeClaim whose Node is gone (deleted past its finalizer, or registered before
/// Joiner added one): its capacity is a ghost, so it is deleted and its instance terminated.
/// Only a fresh read of the API server that finds no Node with the NodeClaim's provider ID
/// under its recorded name counts as gone; a cache that trails says nothing.
fn ghost<S: ClusterStore, C>(
    ctx: &Ctx<'_, S, C>,
    claim: &NodeClaim,
    nodes: &[Node],
) -> Result<Option<String>, ControllerError> {
    if !claim.is_true(conditions::REGISTERED) || termination::node_of(claim, nodes).is_some() {
        return Ok(None);
    }
    let Some(name) = claim.status.node_name.as_deref() else {
        return Ok(None);
    };
    let fresh = ctx.store.get_uncached::<Node>(None, name)?;
    let same = fresh
        .as_ref()
        .is_some_and(|n| termination::provider_id(n) == claim.status.provider_id.as_deref());
    Ok((!same).then(|| format!("its Node {name} is gone")))
}

/// Not registered within the registration timeout of its creation.
fn timed_out<S, C>(ctx: &Ctx<'_, S, C>, claim: &NodeClaim) -> bool {
    if claim.is_true(conditions::REGISTERED) {
        return false;
    }
    claim
        .metadata
        .creation_timestamp
        .as_ref()
        .is_some_and(|t| add(t.0, ctx.config.registration_timeout) <= ctx.now)
}

fn delete<S: ClusterStore, C>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
) -> Result<(), ControllerError> {
    match ctx.store.delete::<NodeClaim>(None, claim.name()) {
        Ok(_) | Err(StoreError::NotFound(_)) => {
            ctx.report.deleted.push(claim.name().to_string());
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// The offerings the NodeClaim allows, cheapest first, without those out of capacity.
fn offers<S, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
) -> Result<Vec<Offer>, ControllerError>
where
    S: ClusterStore,
{
    let cloud_types = ctx.instance_types()?;
    let reserved = reserved_offers(claim, ctx.pools_view()?);
    Ok(offers_for(claim, &cloud_types, reserved, |k| {
        ctx.is_unavailable(k)
    }))
}

/// Launches the NodeClaim's instance (or adopts the one launched for it before a restart) and
/// records it: provider ID, image, instance type, zone and capacity type, expected resources.
pub fn launch<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: NodeClaim,
) -> Result<(), ControllerError> {
    let instance = match tagged_instances(ctx, &claim)?.into_iter().next() {
        Some(adopted) => {
            tracing::info!(nodeclaim = claim.name(), instance = %adopted.id, "adopting instance launched before a restart");
            adopted
        }
        None => {
            if let Some(why) = class_not_ready(ctx, &claim)? {
                return wait_for_class(ctx, claim, why);
            }
            let offers = offers(ctx, &claim)?;
            if offers.is_empty() {
                // Every allowed offering is out of capacity: the NodeClaim goes so its pods are
                // planned again, on offerings that have capacity.
                tracing::warn!(
                    nodeclaim = claim.name(),
                    "no offering with capacity; deleting"
                );
                ctx.report.insufficient_capacity.push((
                    claim.name().to_string(),
                    "every offering it allows is out of capacity".into(),
                ));
                return delete(ctx, &claim);
            }
            let request = launch_request(ctx, &claim, offers)?;
            match ctx.launch(&request) {
                Ok(launched) => {
                    mark_unavailable(ctx, &launched.insufficient);
                    ctx.learn_instance(&launched.instance);
                    launched.instance
                }
                Err(CloudError::InsufficientCapacity(keys)) => {
                    let tried = keys.iter().map(ToString::to_string).collect::<Vec<_>>();
                    ctx.report.insufficient_capacity.push((
                        claim.name().to_string(),
                        format!("insufficient capacity for {}", tried.join(", ")),
                    ));
                    mark_unavailable(ctx, &keys);
                    return delete(ctx, &claim);
                }
                Err(CloudError::Rejected(why)) => return rejected(ctx, claim, why),
                Err(e) => {
                    // A launch that answered a timeout may have started an instance this
                    // step's listing lacks.
                    ctx.forget_instances();
                    return Err(e.into());
                }
            }
        }
    };
    ctx.report
        .launched
        .push((claim.name().to_string(), instance.id.clone()));
    record_launch(ctx, claim, &instance)
}

/// Whether the NodeClaim's last launch was rejected and its backoff has not run out.
fn backing_off<S, C>(ctx: &Ctx<'_, S, C>, claim: &NodeClaim) -> bool {
    claim
        .annotation(annotations::LAUNCH_RETRY_AFTER)
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .is_some_and(|t| ctx.now < t)
}

/// The cloud rejected the launch as given (unauthorized, an invalid parameter): retrying at
/// once fails the same way, so the NodeClaim says why in its `Launched` condition and waits
/// [`Config::launch_backoff`](crate::Config::launch_backoff), doubling with each rejection.
/// The registration timeout still deletes it, and its pods are planned again.
fn rejected<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: NodeClaim,
    why: String,
) -> Result<(), ControllerError> {
    let rejections: u32 = claim
        .annotation(annotations::LAUNCH_REJECTIONS)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0u32)
        .saturating_add(1);
    let backoff = ctx
        .config
        .launch_backoff
        .saturating_mul(2u32.saturating_pow(rejections - 1).min(10));
    let retry_after = add(ctx.now, backoff);
    tracing::warn!(nodeclaim = claim.name(), error = %why, retry_in = ?backoff, "the cloud rejected the launch");
    ctx.report
        .errors
        .push(CloudError::Rejected(why.clone()).into());
    ctx.report.errors_during.push(Reconciler::Launching);
    let now = k8s_time(ctx.now);
    update_claim(ctx, claim, |c| {
        let a = c.metadata.annotations.get_or_insert_with(Default::default);
        a.insert(
            annotations::LAUNCH_REJECTIONS.into(),
            rejections.to_string(),
        );
        a.insert(
            annotations::LAUNCH_RETRY_AFTER.into(),
            retry_after.to_string(),
        );
        c.set_condition(
            conditions::LAUNCHED,
            false,
            "LaunchFailed",
            &why,
            now.clone(),
        );
    })
}

/// Why the NodeClaim's EC2NodeClass cannot launch now, when it says so (`Ready=False` or
/// `Unknown`): its subnets, AMIs or instance profile went away after the NodeClaim was
/// planned. A class nobody has resolved, or one that is missing (the launch says so), is not
/// held back here.
fn class_not_ready<S: ClusterStore, C>(
    ctx: &Ctx<'_, S, C>,
    claim: &NodeClaim,
) -> Result<Option<String>, ControllerError> {
    let class = ctx
        .store
        .get::<EC2NodeClass>(None, &claim.spec.node_class_ref.name)?;
    Ok(match class.map(|c| c.readiness()) {
        Some(joiner_model::api::ec2nodeclass::Readiness::NotReady(why)) => Some(why),
        _ => None,
    })
}

/// The NodeClaim waits, without launching, for its class to be Ready again, as Karpenter's
/// `NodeClassNotReady` does; its `Launched` condition says why (written once, not every step).
/// The registration timeout deletes it if the class stays unready, and its pods are planned
/// again.
fn wait_for_class<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: NodeClaim,
    why: String,
) -> Result<(), ControllerError> {
    const REASON: &str = "NodeClassNotReady";
    let message = format!(
        "EC2NodeClass {} is not ready: {why}",
        claim.spec.node_class_ref.name
    );
    let said = claim
        .condition(conditions::LAUNCHED)
        .is_some_and(|c| c.reason == REASON && c.message == message);
    if said {
        return Ok(());
    }
    tracing::warn!(nodeclaim = claim.name(), "{message}; not launching yet");
    let now = k8s_time(ctx.now);
    update_claim(ctx, claim, |c| {
        c.set_condition(conditions::LAUNCHED, false, REASON, &message, now.clone());
    })
}

fn mark_unavailable<S, C>(ctx: &mut Ctx<'_, S, C>, keys: &[OfferingKey]) {
    for key in keys {
        tracing::warn!(offering = %key, "insufficient capacity");
        ctx.mark_unavailable(key.clone());
    }
}

fn launch_request<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: &NodeClaim,
    offers: Vec<Offer>,
) -> Result<LaunchRequest, ControllerError> {
    let node_class = ctx
        .store
        .get::<EC2NodeClass>(None, &claim.spec.node_class_ref.name)?;
    let cluster_name = ctx.config.cluster_name.clone();
    request_for(claim, node_class, &cluster_name, offers, ctx.pools_view()?)
}

fn record_launch<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: NodeClaim,
    instance: &Instance,
) -> Result<(), ControllerError> {
    let pool = claim
        .label(labels::NODEPOOL)
        .unwrap_or_default()
        .to_string();
    let option = ctx
        .pools_view()?
        .launch_option(&pool, &instance.instance_type)
        .cloned();
    let now = k8s_time(ctx.now);
    // Another controller (a Karpenter not yet stopped) may have launched for the same
    // NodeClaim and recorded its instance first: that record is never overwritten. Instances
    // are compared by id: a provider ID written before EC2 said the zone differs in text only.
    let recorded_by_another = std::cell::Cell::new(None);
    update_claim(ctx, claim, |c| {
        if let Some(other) = c
            .status
            .provider_id
            .as_ref()
            .filter(|p| instance_id_of(p) != Some(instance.id.as_str()))
        {
            recorded_by_another.set(Some(other.clone()));
            return;
        }
        let mut l = c.labels();
        if let Some(o) = &option {
            l.extend(o.labels.clone());
            c.status.allocatable = o.allocatable.clone();
            c.status.capacity = o.capacity.clone();
        }
        l.insert(labels::INSTANCE_TYPE.into(), instance.instance_type.clone());
        l.insert(labels::ZONE.into(), instance.zone.clone());
        // The planned zone's ID goes with the zone the instance actually got.
        let zone_id = option.as_ref().and_then(|o| {
            o.offerings
                .iter()
                .find(|off| off.zone == instance.zone)
                .and_then(|off| off.zone_id.clone())
        });
        match zone_id {
            Some(id) => l.insert(labels::ZONE_ID.into(), id),
            None => l.remove(labels::ZONE_ID),
        };
        l.insert(
            labels::CAPACITY_TYPE.into(),
            instance.capacity_type.as_str().into(),
        );
        c.metadata.labels = Some(l);
        // The profile the instance runs with, so that garbage collection keeps it while the
        // NodeClaim lives (Karpenter records it the same way).
        if let Some(profile) = &instance.instance_profile {
            c.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(annotations::INSTANCE_PROFILE.into(), profile.clone());
        }
        c.status.provider_id = Some(instance.provider_id());
        c.status.image_id = Some(instance.image_id.clone());
        c.set_condition(conditions::LAUNCHED, true, "Launched", "", now.clone());
    })?;
    if let Some(other) = recorded_by_another.take() {
        // Ours is the duplicate: launched by this controller, for a need already served.
        tracing::warn!(instance = %instance.id, recorded = %other, "the NodeClaim records another instance; terminating the one launched for it here");
        ctx.terminate(&instance.id, &instance.zone)?;
        ctx.report.terminated.push(instance.id.clone());
    }
    Ok(())
}

/// Applies `change` and writes; on a conflict re-reads once from the API server (the cache
/// that gave the stale copy may still hold it) and applies it again.
pub(crate) fn update_claim<S: ClusterStore, C>(
    ctx: &mut Ctx<'_, S, C>,
    claim: NodeClaim,
    change: impl Fn(&mut NodeClaim),
) -> Result<(), ControllerError> {
    let mut c = claim;
    change(&mut c);
    match ctx.store.update(&c) {
        Ok(_) => Ok(()),
        Err(StoreError::Conflict(_)) => {
            let Some(mut fresh) = ctx.store.get_uncached::<NodeClaim>(None, c.name())? else {
                return Ok(());
            };
            change(&mut fresh);
            ctx.store.update(&fresh)?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

fn same_taint(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect
}

/// Registered: the Node with the NodeClaim's provider ID exists. The Node gets the NodeClaim's
/// labels and, once, its taints and startup taints (a daemon removes the startup taints later;
/// they are not added back).
fn register<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: NodeClaim,
    nodes: &[Node],
) -> Result<(), ControllerError> {
    let Some(node) = nodes.iter().find(|n| {
        n.spec.as_ref().and_then(|s| s.provider_id.as_ref()) == claim.status.provider_id.as_ref()
    }) else {
        return Ok(());
    };
    let mut node = node.clone();
    let mut node_labels = node.metadata.labels.clone().unwrap_or_default();
    let first_time = !node_labels.contains_key(labels::REGISTERED);
    let mut wanted = claim.labels();
    wanted.remove(labels::NEED);
    node_labels.extend(wanted);
    node_labels.insert(labels::REGISTERED.into(), "true".into());
    node_labels.insert(labels::NODECLAIM.into(), claim.name().into());
    node.metadata.labels = Some(node_labels);
    // Deleting the Node by hand then drains it and ends its NodeClaim, as Karpenter does.
    let node_finalizers = node.metadata.finalizers.get_or_insert_with(Vec::new);
    if !node_finalizers.iter().any(|f| f == finalizers::TERMINATION) {
        node_finalizers.push(finalizers::TERMINATION.into());
    }
    if first_time {
        let spec = node.spec.get_or_insert_with(Default::default);
        let taints = spec.taints.get_or_insert_with(Vec::new);
        for t in claim.spec.taints.iter().chain(&claim.spec.startup_taints) {
            if !taints.iter().any(|x| same_taint(x, t)) {
                taints.push(t.clone());
            }
        }
    }
    ctx.store.update(&node)?;
    let node_name = node.metadata.name.clone();
    let now = k8s_time(ctx.now);
    ctx.report.registered.push(claim.name().to_string());
    update_claim(ctx, claim, |c| {
        c.status.node_name = node_name.clone();
        c.set_condition(conditions::REGISTERED, true, "Registered", "", now.clone());
    })
}

/// Initialized: the Node is Ready, its startup taints are gone, every extended resource the
/// NodeClaim expects (`nvidia.com/gpu` at its time-sliced count) is allocatable, and every DRA
/// driver the plan counted on has published a complete pool.
fn initialize<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: NodeClaim,
    nodes: &[Node],
) -> Result<(), ControllerError> {
    let Some(node) = termination::node_of(&claim, nodes) else {
        return Ok(());
    };
    let status = node.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let starting = claim
        .spec
        .startup_taints
        .iter()
        .any(|t| taints.iter().any(|x| same_taint(x, t)));
    let allocatable = status
        .and_then(|s| s.allocatable.clone())
        .unwrap_or_default();
    let resources_ready = claim
        .status
        .allocatable
        .iter()
        .filter(|(name, q)| name.contains('/') && !q.is_zero())
        .all(|(name, want)| {
            allocatable
                .get(name)
                .and_then(|q| joiner_model::Quantity::try_from(q).ok())
                .is_some_and(|have| have >= *want)
        });
    if ready && !starting && !resources_ready {
        return predictions::extended_resources(ctx, claim, &allocatable);
    }
    if !(ready && !starting && resources_ready) {
        return Ok(());
    }
    let node_name = node.metadata.name.clone().unwrap_or_default();
    if requested_dra_drivers(&claim).next().is_some() {
        let slices = ctx.store.list::<ResourceSlice>()?;
        if !dra_drivers_published(&claim, &node_name, &slices) {
            return Ok(());
        }
        // Every pool is complete: a driver with fewer devices than predicted has no more
        // coming. The node still initializes (the planner reads its real slices from now on).
        let short = consistency::devices::shortfalls(&claim, &node_name, &slices)
            .into_iter()
            .filter(|c| !consistency::already_found(&claim, &c.subject))
            .collect::<Vec<_>>();
        if !short.is_empty() {
            return predictions::contradicted(ctx, claim, &short);
        }
    }
    let mut node = node.clone();
    let mut node_labels = node.metadata.labels.clone().unwrap_or_default();
    if node_labels.get(labels::INITIALIZED).map(String::as_str) != Some("true") {
        node_labels.insert(labels::INITIALIZED.into(), "true".into());
        node.metadata.labels = Some(node_labels);
        ctx.store.update(&node)?;
    }
    let now = k8s_time(ctx.now);
    ctx.report.initialized.push(claim.name().to_string());
    update_claim(ctx, claim, |c| {
        c.set_condition(
            conditions::INITIALIZED,
            true,
            "Initialized",
            "",
            now.clone(),
        );
        // A node that offers what was predicted; one found short keeps saying so.
        if c.condition(conditions::CONSISTENT_STATE_FOUND).is_none() {
            c.set_condition(
                conditions::CONSISTENT_STATE_FOUND,
                true,
                "ConsistentStateFound",
                "",
                now.clone(),
            );
        }
    })
}

/// The DRA drivers the plan expects on the node (`karpenter.sh/requested-dra-drivers`).
/// Whether every requested driver has published a complete pool for the node: for each of its
/// pools, all `resourceSliceCount` slices of the newest generation. Until then pods that need
/// those devices cannot be allocated there.
pub fn dra_drivers_published(claim: &NodeClaim, node: &str, slices: &[ResourceSlice]) -> bool {
    requested_dra_drivers(claim).all(|driver| {
        let pools = consistency::devices::current_pools(driver, node, slices);
        !pools.is_empty()
            && pools.values().all(|current| {
                current.iter().all(|s| {
                    usize::try_from(s.spec.pool.resource_slice_count)
                        .is_ok_and(|n| n == current.len())
                })
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_model::api::nodeclaim::NodeClaimSpec;
    use joiner_model::api::nodepool::NodeClassReference;
    use k8s_openapi::api::resource::v1::{ResourcePool, ResourceSliceSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn slice(driver: &str, node: &str, pool: &str, generation: i64, count: i64) -> ResourceSlice {
        ResourceSlice {
            metadata: ObjectMeta::default(),
            spec: ResourceSliceSpec {
                driver: driver.into(),
                node_name: Some(node.into()),
                pool: ResourcePool {
                    name: pool.into(),
                    generation,
                    resource_slice_count: count,
                },
                ..ResourceSliceSpec::default()
            },
        }
    }

    #[test]
    fn initialization_waits_for_complete_dra_pools() {
        let mut claim = NodeClaim::new(
            ObjectMeta::default(),
            NodeClaimSpec::new(NodeClassReference::ec2("default")),
        );
        assert!(dra_drivers_published(&claim, "n", &[]), "nothing requested");
        claim.metadata.annotations = Some(
            [(
                annotations::REQUESTED_DRA_DRIVERS.to_string(),
                "gpu.nvidia.com,dra.net".to_string(),
            )]
            .into(),
        );
        let gpu = slice("gpu.nvidia.com", "n", "n", 1, 1);
        assert!(!dra_drivers_published(
            &claim,
            "n",
            std::slice::from_ref(&gpu)
        ));
        let half = slice("dra.net", "n", "n", 2, 2);
        assert!(!dra_drivers_published(
            &claim,
            "n",
            &[gpu.clone(), half.clone()]
        ));
        let other_node = slice("dra.net", "m", "n", 2, 2);
        assert!(!dra_drivers_published(
            &claim,
            "n",
            &[gpu.clone(), half.clone(), other_node]
        ));
        let rest = slice("dra.net", "n", "n", 2, 2);
        assert!(dra_drivers_published(&claim, "n", &[gpu, half, rest]));
    }
}
