//! NodeOverlays applied to the NodePools' launch options, as Karpenter applies them
//! (`pkg/controllers/nodeoverlay`), in one place so that planning, consolidation, `catalog` and
//! `explain` all see the adjusted types.
//!
//! - An overlay selects an offering of an instance type in a NodePool when its requirements hold
//!   for the node's labels there: the type's, the NodePool's template labels and
//!   `karpenter.sh/nodepool`, and the offering's zone, capacity type and reservation. A key the
//!   node does not have matches only `NotIn` and `DoesNotExist`.
//! - Overlays are taken by weight, highest first (equal weights: the name later in the alphabet
//!   first). The first to set an offering's price sets it; the first to set a resource sets it,
//!   and later ones add only resources not set yet.
//! - Two overlays of equal weight that both price one offering, or both set one resource of a
//!   type, conflict: the second is applied nowhere (never half-applied), with a warning.
//! - Capacity sets the resource, replacing what the type has (Karpenter replaces the cloud's
//!   figure). Where Joiner's own prediction (the device plugin's sharing) differs, the overlay
//!   wins, as in Karpenter, and a warning says so.
//!
//! Karpenter reads an overlay change as a change of prices and capacity, not as drift: nodes
//! already running are not replaced for it; consolidation sees the new figures.

use std::collections::{BTreeMap, BTreeSet};

use joiner_model::api::NodeOverlay;
use joiner_model::api::nodeoverlay::PriceChange;
use joiner_model::wellknown::labels;
use joiner_model::{Price, Quantity, Sourced};

use crate::requirements::{Labels, Requirement, Requirements};
use crate::scheduling::{LaunchOption, PoolInput};

/// Which overlays changed a type of a NodePool: `(NodePool, instance type)` to overlay names.
pub type Applied = BTreeMap<(String, String), Vec<String>>;

/// What applying the overlays did.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub applied: Applied,
    /// The overlays applied nowhere for a conflict, by name, with the conflict in words (their
    /// `ValidationSucceeded` condition says it).
    pub conflicts: BTreeMap<String, String>,
}

/// One overlay, read.
struct Compiled {
    name: String,
    weight: i32,
    requirements: Requirements,
    price: Option<PriceChange>,
    capacity: BTreeMap<String, Quantity>,
}

/// What has been set so far, for conflicts: by (pool, option, offering) the weights of the
/// overlays that priced it and their names; by (pool, option, resource) likewise.
#[derive(Default)]
struct Taken {
    prices: BTreeMap<(usize, usize, usize), Vec<(i32, String)>>,
    resources: BTreeMap<(usize, usize, String), Vec<(i32, String)>>,
}

/// Applies the overlays to `pools`; says which overlays changed which types, and which
/// conflicted.
pub(super) fn apply(
    pools: &mut [PoolInput],
    overlays: &[Sourced<NodeOverlay>],
    warnings: &mut Vec<String>,
) -> Outcome {
    let mut ordered: Vec<Compiled> = overlays
        .iter()
        .filter_map(|o| compile(o, warnings))
        .collect();
    ordered.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| b.name.cmp(&a.name)));
    let mut taken = Taken::default();
    let mut applied = Applied::new();
    let mut conflicts = BTreeMap::new();
    let mut overridden: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for overlay in &ordered {
        let selected = selections(pools, overlay);
        if let Some(conflict) = conflict(overlay, &selected, &taken) {
            let message = format!(
                "conflicts with NodeOverlay/{conflict} (both weight {}, {})",
                overlay.weight,
                what(overlay)
            );
            warnings.push(format!(
                "NodeOverlay/{}: {message}; it is applied nowhere until the weights differ, as \
                 Karpenter does",
                overlay.name
            ));
            conflicts.insert(overlay.name.clone(), message);
            continue;
        }
        for (p, o, offerings) in selected {
            let pool = &mut pools[p];
            let option = &mut pool.options[o];
            let mut changed = false;
            if let Some(change) = overlay.price {
                for &i in &offerings {
                    let set = taken.prices.entry((p, o, i)).or_default();
                    if set.is_empty() {
                        let offering = &mut option.offerings[i];
                        let price = change.apply(offering.price.as_usd());
                        offering.price = Price::from_usd(price).unwrap_or(offering.price);
                        changed = true;
                    }
                    set.push((overlay.weight, overlay.name.clone()));
                }
            }
            for (resource, quantity) in &overlay.capacity {
                let set = taken.resources.entry((p, o, resource.clone())).or_default();
                if set.is_empty() {
                    if let Some(predicted) = option.allocatable.get(resource)
                        && predicted != quantity
                        && shares_gpus(option)
                    {
                        overridden
                            .entry((overlay.name.clone(), resource.clone()))
                            .or_default()
                            .insert(format!("{} ({predicted})", option.instance_type));
                    }
                    option.allocatable.insert(resource.clone(), *quantity);
                    option.capacity.insert(resource.clone(), *quantity);
                    changed = true;
                }
                set.push((overlay.weight, overlay.name.clone()));
            }
            if changed {
                applied
                    .entry((pool.name.clone(), option.instance_type.clone()))
                    .or_default()
                    .push(overlay.name.clone());
            }
        }
    }
    for ((overlay, resource), types) in overridden {
        let listed: Vec<&str> = types.iter().take(3).map(String::as_str).collect();
        let more = match types.len().saturating_sub(3) {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        warnings.push(format!(
            "NodeOverlay/{overlay}: sets {resource} where the device plugin's sharing config \
             gives another figure: {}{more}; the overlay's figure is used, as in Karpenter",
            listed.join(", ")
        ));
    }
    Outcome { applied, conflicts }
}

/// Whether Joiner's figure for the node's GPUs comes from the device plugin's sharing config
/// (time-slicing or MPS replicas), which an overlay's figure then overrides.
fn shares_gpus(option: &LaunchOption) -> bool {
    option
        .labels
        .get(crate::deviceplugin::SHARING_STRATEGY_LABEL)
        .is_some_and(|s| s != "none")
}

fn compile(o: &Sourced<NodeOverlay>, warnings: &mut Vec<String>) -> Option<Compiled> {
    let overlay = &o.object;
    let mut requirements = Requirements::new();
    for (i, r) in overlay.spec.requirements.iter().enumerate() {
        match Requirement::new(r.operator.as_str(), &r.values) {
            Ok(req) => requirements.add(&r.key, req),
            Err(e) => {
                warnings.push(format!(
                    "{}: NodeOverlay/{}: spec.requirements[{i}]: {e}; the overlay is not applied",
                    o.origin,
                    overlay.name()
                ));
                return None;
            }
        }
    }
    // Validated when read; an overlay built otherwise is skipped rather than half-read.
    let price = PriceChange::of(&overlay.spec).ok()?;
    Some(Compiled {
        name: overlay.name().to_string(),
        weight: overlay.weight(),
        requirements,
        price,
        capacity: overlay.spec.capacity.clone(),
    })
}

/// The (pool, option, offerings) an overlay selects.
fn selections(pools: &[PoolInput], overlay: &Compiled) -> Vec<(usize, usize, Vec<usize>)> {
    let mut out = Vec::new();
    for (p, pool) in pools.iter().enumerate() {
        for (o, option) in pool.options.iter().enumerate() {
            let offerings = selected_offerings(pool, option, &overlay.requirements);
            if !offerings.is_empty() {
                out.push((p, o, offerings));
            }
        }
    }
    out
}

fn selected_offerings(pool: &PoolInput, option: &LaunchOption, req: &Requirements) -> Vec<usize> {
    let mut node: Labels = option.labels.clone();
    node.extend(pool.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    node.insert(labels::NODEPOOL.to_string(), pool.name.clone());
    let mut selected = Vec::new();
    for (i, offering) in option.offerings.iter().enumerate() {
        // The offering's own labels, set in place: the node's stay as they are.
        for key in labels::OFFERING_DEFINED {
            match offering.label(key) {
                Some(v) => node.insert(key.to_string(), v.to_string()),
                None => node.remove(key),
            };
        }
        if req.matches(&node) {
            selected.push(i);
        }
    }
    selected
}

/// The overlay an earlier one of equal weight conflicts with, if any.
fn conflict(
    overlay: &Compiled,
    selected: &[(usize, usize, Vec<usize>)],
    taken: &Taken,
) -> Option<String> {
    let same_weight = |set: Option<&Vec<(i32, String)>>| {
        set.into_iter()
            .flatten()
            .find(|(w, _)| *w == overlay.weight)
            .map(|(_, n)| n.clone())
    };
    for (p, o, offerings) in selected {
        if overlay.price.is_some() {
            for i in offerings {
                if let Some(other) = same_weight(taken.prices.get(&(*p, *o, *i))) {
                    return Some(other);
                }
            }
        }
        for resource in overlay.capacity.keys() {
            if let Some(other) = same_weight(taken.resources.get(&(*p, *o, resource.clone()))) {
                return Some(other);
            }
        }
    }
    None
}

/// What an overlay sets, for messages.
fn what(overlay: &Compiled) -> String {
    let mut parts = Vec::new();
    if let Some(p) = overlay.price {
        parts.push(p.to_string());
    }
    parts.extend(overlay.capacity.keys().cloned());
    format!("setting {} of the same instance types", parts.join(", "))
}
