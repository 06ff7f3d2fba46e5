//! The prediction checks ([`crate::consistency`]) as the NodeClaim lifecycle runs them, and
//! what a contradiction does: the step reports it, the NodeClaim records it, plans learn it.

use joiner_model::api::nodeclaim::NodeClaim;
use joiner_model::wellknown::labels;
use k8s_openapi::api::core::v1::Node;

use super::update_claim;
use crate::clock::k8s_time;
use crate::cloud::CloudProvider;
use crate::consistency;
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::store::ClusterStore;
use crate::termination;

/// A Ready node without startup taints still lacks predicted devices: once it is clear that
/// they are not coming (fewer were published, or none within the grace), the prediction was
/// wrong ([`super`]): the NodeClaim says so and is corrected to what the node offers.
pub(crate) fn extended_resources<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: NodeClaim,
    allocatable: &std::collections::BTreeMap<
        String,
        k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    >,
) -> Result<(), ControllerError> {
    let Ok(offered) = joiner_model::resources::parse_resource_list(allocatable) else {
        return Ok(());
    };
    let registered_for = consistency::registered_for(&claim, ctx.now);
    let predicted = claim.status.allocatable.clone();
    let Some(short) = consistency::shortfalls(&predicted, &offered, registered_for) else {
        return Ok(());
    };
    let found: Vec<_> = short
        .iter()
        .map(consistency::Shortfall::contradiction)
        .collect();
    contradicted(ctx, claim, &found)
}

/// Records what the node contradicted of its NodeClaim's prediction ([`super`]): the
/// step reports each, the NodeClaim says so, and plans learn it. Nothing when nothing was.
pub(crate) fn contradicted<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: NodeClaim,
    found: &[consistency::Contradiction],
) -> Result<(), ControllerError> {
    if found.is_empty() {
        return Ok(());
    }
    let instance_type = claim
        .label(labels::INSTANCE_TYPE)
        .unwrap_or_default()
        .to_string();
    for c in found {
        let message = c.message();
        tracing::warn!(
            nodeclaim = claim.name(),
            instance_type,
            "{message}: planning on what the node offers from now on"
        );
        ctx.report.mispredicted.push(consistency::Misprediction {
            node_claim: claim.name().to_string(),
            uid: claim.metadata.uid.clone(),
            instance_type: instance_type.clone(),
            resource: c.subject.clone(),
            message,
        });
    }
    let now = k8s_time(ctx.now);
    let mut marked = claim.clone();
    consistency::mark(&mut marked, found, now);
    ctx.learn_mispredicted(&marked);
    let update = marked.clone();
    update_claim(ctx, claim, move |c| {
        c.metadata
            .annotations
            .clone_from(&update.metadata.annotations);
        c.status.allocatable.clone_from(&update.status.allocatable);
        c.status.capacity.clone_from(&update.status.capacity);
        c.status.conditions.clone_from(&update.status.conditions);
    })?;
    // In-flight capacity changed: plans in this step see the corrected node.
    ctx.invalidate_view();
    Ok(())
}

/// A running NodeClaim whose Node gpu-feature-discovery labelled otherwise than predicted
/// ([`consistency::labels`]).
pub(crate) fn gfd_labels<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    claim: NodeClaim,
    nodes: &[Node],
) -> Result<(), ControllerError> {
    let Some(node) = termination::node_of(&claim, nodes) else {
        return Ok(());
    };
    let found =
        consistency::labels::mismatches(&claim, node, |k| consistency::already_found(&claim, k));
    contradicted(ctx, claim, &found)
}
