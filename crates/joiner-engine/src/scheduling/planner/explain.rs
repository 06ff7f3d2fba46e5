//! Why a pod cannot be placed, in one line a person can act on.
//!
//! Runs only for pods that failed, so it may re-check every candidate: existing nodes are
//! counted by their first failing check, and each NodePool's instance types are grouped by
//! the first constraint each one fails.

use std::collections::BTreeMap;

use super::super::resources;
use super::super::taints;
use super::super::topology::Domains;
use super::{Planner, option_price};
use joiner_model::wellknown::labels;

/// How many instance type names to show per group before "+N more".
const NAMES_SHOWN: usize = 3;

pub(super) fn explain(pl: &Planner, p: usize) -> String {
    // One line: CEL expressions and the like may span several.
    reasons(pl, p)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn reasons(pl: &Planner, p: usize) -> String {
    let pod = &pl.input.pods[p];
    // A claim no node can serve is the one reason worth giving: every node would give it.
    if let Some(broken) = pl
        .dra
        .as_ref()
        .filter(|d| d.uses_claims(p))
        .and_then(|d| d.broken(p))
    {
        return format!("{broken}; no node can serve it, and nothing is launched for the pod");
    }
    let alts = pl.alternatives(p, false);
    if alts.is_empty() {
        return "no required node-affinity term is compatible with the pod's nodeSelector".into();
    }
    let req = &pl.requests[p];
    let zero = vec![0; req.len()];
    let zones = pl.pod_zones(&alts);
    let mut parts = Vec::new();

    if !pl.existing.is_empty() {
        // Most nodes fail for lack of room, so that reason is counted by resource and worded
        // once per resource rather than once per node (thousands of nodes, per class of pod).
        let mut short: BTreeMap<usize, usize> = BTreeMap::new();
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        let mut dra_detail = Some(());
        for (n, node) in pl
            .existing
            .iter()
            .enumerate()
            .filter(|(_, node)| !node.removed)
        {
            let reason = if let Some(t) =
                taints::first_untolerated(&pl.input.nodes[n].taints, &pod.tolerations)
            {
                format!("taint {} not tolerated", taints::describe(t))
            } else if let Some((key, r)) = alts
                .iter()
                .all(|a| !a.matches(&node.labels))
                .then(|| alts[0].first_mismatch(&node.labels))
                .flatten()
            {
                format!("label {key} does not satisfy {r}")
            } else if let Some(i) = resources::first_shortfall(&zero, req, &node.free) {
                *short.entry(i).or_default() += 1;
                continue;
            } else if let Err(v) = pl.topology.check(
                p,
                Domains {
                    hostname: pl.node_domain(n),
                    zone: node.zone,
                },
                false,
                &zones,
            ) {
                v.to_string()
            } else if let Some(dra) = pl.dra.as_ref().filter(|d| d.uses_claims(p)) {
                // The allocator's full reason for the first such node; the others are counted.
                match dra_detail.take() {
                    Some(()) => format!(
                        "cannot serve the pod's claims (first: {})",
                        dra.why_not_existing(p, n)
                    ),
                    None => "cannot serve the pod's claims".into(),
                }
            } else {
                "no room left after other pending pods".into()
            };
            *counts.entry(reason).or_default() += 1;
        }
        for (i, n) in short {
            *counts
                .entry(format!("insufficient {}", pl.index.name(i)))
                .or_default() += n;
        }
        let summary: Vec<String> = counts.iter().map(|(r, c)| format!("{c} {r}")).collect();
        parts.push(format!("existing nodes: {}", summary.join(", ")));
    }

    if pl.pools.is_empty() {
        parts.push("no NodePool to launch nodes from".into());
    }
    for &pi in &pl.pool_order {
        let pool = &pl.pools[pi];
        let prefix = format!("NodePool {}", pool.input.name);
        if let Some(t) = taints::first_untolerated(&pool.input.taints, &pod.tolerations) {
            parts.push(format!(
                "{prefix}: taint {} not tolerated",
                taints::describe(t)
            ));
            continue;
        }
        let merged: Vec<_> = alts
            .iter()
            .map(|a| pool.requirements.intersect(a))
            .collect();
        let Some(reqs) = merged.iter().find_map(|m| m.as_ref().ok()) else {
            if let Some(Err(conflict)) = merged.first() {
                parts.push(format!("{prefix}: pod requirement {conflict}"));
            }
            continue;
        };
        if let Some(key) = alts.iter().find_map(|a| {
            a.iter()
                .find(|(k, r)| r.requires_presence() && !pl.defined(pool, &single(k, r)))
                .map(|(k, _)| k.clone())
        }) {
            parts.push(format!(
                "{prefix}: no node of this NodePool carries label {key}"
            ));
            continue;
        }
        if pool.options.is_empty() {
            parts.push(format!(
                "{prefix}: no instance type satisfies the NodePool's requirements"
            ));
            continue;
        }
        let priced = priced_options(pl, pi, reqs);
        let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
        for (o, opt) in pool.options.iter().enumerate() {
            let reason = option_reason(pl, p, pi, o, reqs, priced[o])
                .unwrap_or_else(|| "fits, but the pod's topology constraints cannot be met".into());
            match groups.iter_mut().find(|(r, _)| *r == reason) {
                Some((_, names)) => names.push(&opt.name),
                None => groups.push((reason, vec![&opt.name])),
            }
        }
        let described: Vec<String> = groups
            .iter()
            .map(|(reason, names)| {
                let shown = names
                    .iter()
                    .take(NAMES_SHOWN)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ");
                let more = names.len().saturating_sub(NAMES_SHOWN);
                if more > 0 {
                    format!("{shown} (+{more} more): {reason}")
                } else {
                    format!("{shown}: {reason}")
                }
            })
            .collect();
        parts.push(format!("{prefix}: {}", described.join("; ")));
    }
    parts.join("; ")
}

/// Per option of pool `pi`: whether `reqs` leave it an offering to launch (it has a price).
/// The planner's cache of what each requirement set allows answers this for every pod that
/// shares the set, where asking option by option would price every offering again.
fn priced_options(pl: &Planner, pi: usize, reqs: &crate::requirements::Requirements) -> Vec<bool> {
    let mut priced = vec![false; pl.pools[pi].options.len()];
    for &(_, o) in pl.allowed_for(pi, reqs).iter() {
        priced[o] = true;
    }
    priced
}

/// The first reason option `o` of pool `pi` cannot take pod `p` as a new node, under the
/// pool's requirements merged with the pod's (`reqs`), which leave it an offering when
/// `priced`; `None` when it could.
fn option_reason(
    pl: &Planner,
    p: usize,
    pi: usize,
    o: usize,
    reqs: &crate::requirements::Requirements,
    priced: bool,
) -> Option<String> {
    let pool = &pl.pools[pi];
    let opt = &pool.options[o];
    let req = &pl.requests[p];
    let zero = vec![0; req.len()];
    let labels_at = |zone: Option<u32>| move || pl.new_node_labels(pi, o, zone);
    let probe_at = |zone: Option<u32>| super::dra::ProbeAt {
        pool: pi,
        option: opt.source,
        zone,
    };
    let reason: String = if !priced {
        let mismatch = reqs.iter().find(|(k, r)| {
            !labels::defined_by_offering(k)
                && !crate::requirements::holds_for_type(
                    k,
                    r,
                    opt.labels.get(*k).map(String::as_str),
                    pool.defined_keys.contains(*k),
                )
        });
        match mismatch {
            Some((k, r)) => format!(
                "{k} {} does not satisfy {r}",
                opt.labels.get(k).map(String::as_str).unwrap_or("(absent)")
            ),
            None => {
                "no offering in the allowed zones and capacity types (or its reservations are full)"
                    .into()
            }
        }
    } else if let Some(&r) = opt.at_most_one.iter().find(|&&r| req[r] > 1_000_000_000) {
        format!(
            "requests more than one {} where the device plugin sets failRequestsGreaterThanOne",
            pl.index.name(r)
        )
    } else if let Some(i) = resources::first_shortfall(&zero, req, &opt.room) {
        let like = pool
            .input
            .options
            .iter()
            .find(|x| x.instance_type == opt.name)
            .map(|x| x.allocatable.clone())
            .unwrap_or_default();
        let need = pl.index.list(
            &req.iter()
                .enumerate()
                .map(|(j, v)| if j == i { *v } else { 0 })
                .collect::<Vec<_>>(),
            &like,
        );
        let need = need
            .values()
            .next()
            .map(|q| q.to_string())
            .unwrap_or_default();
        let resource = pl.index.name(i);
        let hint = crate::deviceplugin::mig_hint(
            resource,
            opt.labels.get("nvidia.com/gpu.product").map(String::as_str),
        );
        match hint {
            Some(hint) => format!("insufficient {resource} (pod requests {need}): {hint}"),
            None => format!("insufficient {resource} (pod requests {need})"),
        }
    } else if !pl.within_limits(pi, None, o) {
        "NodePool limits would be exceeded".into()
    } else if let Some(dra) = pl.dra.as_ref().filter(|d| d.uses_claims(p))
        && dra.probe_copies(p, pl.class_of[p], probe_at(None), labels_at(None), 1) == 0
        && !(dra.zone_scoped()
            && pl
                .pod_zones(std::slice::from_ref(reqs))
                .into_iter()
                .any(|z| {
                    dra.probe_copies(p, pl.class_of[p], probe_at(Some(z)), labels_at(Some(z)), 1)
                        > 0
                }))
    {
        let source = &pool.input.options[opt.source];
        if source.devices.is_none()
            && source
                .capacity
                .contains_key(joiner_model::wellknown::resources::NVIDIA_GPU)
        {
            // A GPU type Joiner has no DRA metadata for (g7e): its GPUs are there, but only
            // the device plugin's resource is known to serve them.
            "no DRA device data for its GPUs: they are served by the device plugin as nvidia.com/gpu only".to_string()
        } else {
            dra.why_not_probe(p, probe_at(None), labels_at(None))
        }
    } else {
        return None;
    };
    Some(reason)
}

/// Every NodePool's every instance type, and what each makes of pod `p`: the full account
/// `joiner explain pod` prints.
pub(super) fn account(pl: &Planner, p: usize) -> Vec<String> {
    let alts = pl.alternatives(p, false);
    let mut lines = Vec::new();
    for &pi in &pl.pool_order {
        let pool = &pl.pools[pi];
        let Some(reqs) = alts
            .iter()
            .find_map(|a| pool.requirements.intersect(a).ok())
        else {
            lines.push(format!(
                "NodePool {}: the pod's node requirements conflict with the NodePool's",
                pool.input.name
            ));
            continue;
        };
        if let Some(t) =
            taints::first_untolerated(&pool.input.taints, &pl.input.pods[p].tolerations)
        {
            lines.push(format!(
                "NodePool {}: taint {} not tolerated",
                pool.input.name,
                taints::describe(t)
            ));
            continue;
        }
        // Cheapest first: the nearest alternatives lead.
        let mut order: Vec<usize> = (0..pool.options.len()).collect();
        order.sort_by_key(|&o| {
            (
                option_price(pool, o, &reqs, &pl.reservations).is_none(),
                option_price(pool, o, &reqs, &pl.reservations),
                o,
            )
        });
        for o in order {
            let opt = &pool.options[o];
            let price = option_price(pool, o, &reqs, &pl.reservations);
            let verdict = option_reason(pl, p, pi, o, &reqs, price.is_some())
                .unwrap_or_else(|| "fits".into());
            let price = price
                .map(|p| format!("{p} USD/h"))
                .unwrap_or_else(|| "-".into());
            lines.push(format!(
                "NodePool {} / {} ({price}): {}",
                pool.input.name,
                opt.name,
                verdict.split_whitespace().collect::<Vec<_>>().join(" ")
            ));
        }
    }
    lines
}

fn single(key: &str, r: &crate::requirements::Requirement) -> crate::requirements::Requirements {
    let mut one = crate::requirements::Requirements::new();
    one.add(key, r.clone());
    one
}
