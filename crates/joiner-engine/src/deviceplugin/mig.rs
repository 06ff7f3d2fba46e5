//! What the NVIDIA device plugin and gpu-feature-discovery advertise on a node whose GPUs the
//! GPU operator's MIG manager has split (the node's `nvidia.com/mig.config`), by the plugin's
//! `flags.migStrategy`:
//!
//! - `mixed`: one resource per profile, `nvidia.com/mig-<profile>` (`+me` written `.me`), as many
//!   as the layout makes on all the node's GPUs; GFD adds `nvidia.com/mig-<profile>.count`. GPUs
//!   the config leaves whole are still `nvidia.com/gpu`.
//! - `single`: every GPU split the same way, its instances advertised as `nvidia.com/gpu`; GFD's
//!   `nvidia.com/gpu.product` gets `-MIG-<profile>`, and `gpu.count` and `gpu.memory` are the
//!   instances'.
//! - `none`: the plugin ignores MIG, so the split GPUs advertise nothing usable: refused, with
//!   what to set.
//!
//! A sharing config that replicates an advertised MIG resource (time-slicing or MPS of
//! `nvidia.com/mig-1g.5gb`, or of `nvidia.com/gpu` under `single`) multiplies it by its
//! replicas, renamed where it says, as the plugin does.

use std::collections::BTreeMap;

use joiner_model::Quantity;
use joiner_model::wellknown::resources;

use super::node::{NodeGpuResources, NodeGpus, node_resources};
use super::{DevicePluginConfig, MigStrategy};
use crate::catalog::mig::{MigGpu, NodeMigLayout};

/// The resources and labels of a node whose GPUs the MIG manager split as `layout` says, or why
/// the plugin would advertise none.
pub fn mig_node_resources(
    gpus: &NodeGpus,
    mig: &MigGpu,
    layout: &NodeMigLayout,
    config: Option<&DevicePluginConfig>,
) -> Result<NodeGpuResources, String> {
    let mut out = split(
        gpus,
        mig,
        layout,
        config.map_or(MigStrategy::None, |c| c.mig_strategy),
    )?;
    if let Some(config) = config {
        share(&mut out, config);
    }
    Ok(out)
}

/// What the plugin advertises of the split GPUs before any sharing.
fn split(
    gpus: &NodeGpus,
    mig: &MigGpu,
    layout: &NodeMigLayout,
    strategy: MigStrategy,
) -> Result<NodeGpuResources, String> {
    // What GFD says of the whole GPUs (product, memory, compute capability) still holds under
    // `mixed`; `single` rewrites some of it.
    let mut out = node_resources(gpus, None);
    out.resources.clear();
    match strategy {
        MigStrategy::None => Err(format!(
            "the device plugin's migStrategy is none, so the MIG devices of the {} are not advertised: set flags.migStrategy to mixed or single",
            mig.model
        )),
        MigStrategy::Mixed => {
            out.labels
                .insert("nvidia.com/mig.strategy".into(), "mixed".into());
            let whole = layout.gpus.iter().filter(|g| g.is_none()).count();
            if whole > 0 {
                let whole = i64::try_from(whole).unwrap_or(i64::MAX);
                out.resources
                    .insert(resources::NVIDIA_GPU.into(), Quantity::from_units(whole));
            }
            let mut totals: BTreeMap<String, i64> = BTreeMap::new();
            for (name, n) in layout.gpus.iter().flatten().flatten() {
                if let Some(profile) = mig.profile(name) {
                    *totals.entry(profile.resource_name()).or_default() += i64::from(*n);
                }
            }
            for (resource, total) in totals.into_iter().filter(|(_, t)| *t > 0) {
                out.labels
                    .insert(format!("{resource}.count"), total.to_string());
                out.resources.insert(resource, Quantity::from_units(total));
            }
            Ok(out)
        }
        MigStrategy::Single => {
            let Some(Some(first)) = layout.gpus.first() else {
                return Err(single_needs_one_layout());
            };
            if layout.gpus.iter().any(|g| g.as_ref() != Some(first)) {
                return Err(single_needs_one_layout());
            }
            let count = i64::try_from(layout.gpus.len()).unwrap_or(i64::MAX);
            let used: Vec<(&String, &u32)> = first.iter().filter(|(_, n)| **n > 0).collect();
            let [(name, per_gpu)] = used.as_slice() else {
                return Err(format!(
                    "the device plugin's migStrategy is single, which needs every GPU split into one profile; the layout has {}",
                    used.iter()
                        .map(|(n, c)| format!("{c}x {n}"))
                        .collect::<Vec<_>>()
                        .join(" + ")
                ));
            };
            let Some(profile) = mig.profile(name) else {
                return Err(format!("the {} has no MIG profile {name}", mig.model));
            };
            let total = i64::from(**per_gpu) * count;
            out.resources
                .insert(resources::NVIDIA_GPU.into(), Quantity::from_units(total));
            let product = out
                .labels
                .get("nvidia.com/gpu.product")
                .cloned()
                .unwrap_or_else(|| mig.model.clone());
            let labels = [
                ("nvidia.com/mig.strategy", "single".to_string()),
                (
                    "nvidia.com/gpu.product",
                    format!("{product}-MIG-{}", profile.name),
                ),
                ("nvidia.com/gpu.count", total.to_string()),
                (
                    "nvidia.com/gpu.memory",
                    (u64::from(profile.memory_gib) * 1024).to_string(),
                ),
            ];
            for (k, v) in labels {
                out.labels.insert(k.to_string(), v);
            }
            Ok(out)
        }
    }
}

/// Why a node lacks `resource` when it is a MIG resource (`nvidia.com/mig-2g.10gb`), for an
/// explanation: whether the node's GPU (by GFD's `nvidia.com/gpu.product`) has that profile, how
/// many fit one GPU, and what would make them. `None` for other resources or other GPUs.
pub fn mig_hint(resource: &str, gpu_product_label: Option<&str>) -> Option<String> {
    let profile = resource.strip_prefix("nvidia.com/mig-")?;
    let label = gpu_product_label?;
    let label = label.split_once("-MIG-").map_or(label, |(whole, _)| whole);
    let gpu = crate::catalog::mig::mig_gpus()
        .iter()
        .find(|g| g.product_name.replace(' ', "-") == label)?;
    Some(match gpu.profile(profile) {
        Some(p) => format!(
            "its {} GPUs take up to {} {} each: label the NodePool's nodes nvidia.com/mig.config with a config that makes them (all-{}), with the device plugin's migStrategy mixed",
            gpu.model,
            p.max_instances,
            p.name,
            p.name.replace('+', ".")
        ),
        None => format!(
            "its {} GPUs have no MIG profile {profile} (they have {})",
            gpu.model,
            gpu.profile_names()
        ),
    })
}

fn single_needs_one_layout() -> String {
    "the device plugin's migStrategy is single, which needs every GPU of the node split the same way; the config leaves some whole or splits them differently: use migStrategy mixed".to_string()
}

/// Replicates each advertised resource the config shares: its count times the replicas,
/// under its new name if renamed, with GFD's `<resource>.replicas` label.
fn share(out: &mut NodeGpuResources, config: &DevicePluginConfig) {
    let advertised = std::mem::take(&mut out.resources);
    for (resource, q) in advertised {
        match config.replication(&resource) {
            Some((sharing, r)) if r.replicas > 1 => {
                let name = r.rename.clone().unwrap_or_else(|| resource.clone());
                let units = q.units_ceil().saturating_mul(i128::from(r.replicas));
                let units = i64::try_from(units).unwrap_or(i64::MAX);
                out.resources.insert(name, Quantity::from_units(units));
                out.labels
                    .insert(format!("{resource}.replicas"), r.replicas.to_string());
                out.labels.insert(
                    super::SHARING_STRATEGY_LABEL.to_string(),
                    sharing.strategy.as_str().to_string(),
                );
                out.sharing = Some(sharing.strategy);
                out.fail_requests_greater_than_one |= sharing.fail_requests_greater_than_one;
            }
            _ => {
                out.resources.insert(resource, q);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::mig::{MigConfig, mig_gpu};

    fn a100s() -> (NodeGpus<'static>, &'static MigGpu) {
        let mig = mig_gpu("NVIDIA A100-SXM4-40GB").expect("A100");
        let gpus = NodeGpus {
            count: 8,
            product_name: Some("NVIDIA A100-SXM4-40GB"),
            memory_mib: Some(40960),
            compute_capability: Some((8, 0)),
            machine: Some("p4d.24xlarge"),
        };
        (gpus, mig)
    }

    fn with(mig_strategy: MigStrategy) -> DevicePluginConfig {
        DevicePluginConfig {
            mig_strategy,
            sharing: None,
        }
    }

    fn layout(mig: &MigGpu, config: &str) -> NodeMigLayout {
        match mig.default_config(config) {
            Some(MigConfig::Enabled(l)) => NodeMigLayout::uniform(8, l),
            other => panic!("{config}: {other:?}"),
        }
    }

    #[test]
    fn mixed_advertises_each_profile_and_single_advertises_gpus() {
        let (gpus, mig) = a100s();
        let balanced = layout(mig, "all-balanced");
        let mixed = mig_node_resources(&gpus, mig, &balanced, Some(&with(MigStrategy::Mixed)))
            .expect("mixed");
        let units = |r: &NodeGpuResources, k: &str| r.resources.get(k).map(|q| q.units_ceil());
        assert_eq!(units(&mixed, "nvidia.com/mig-1g.5gb"), Some(16));
        assert_eq!(units(&mixed, "nvidia.com/mig-2g.10gb"), Some(8));
        assert_eq!(units(&mixed, "nvidia.com/mig-3g.20gb"), Some(8));
        assert_eq!(units(&mixed, resources::NVIDIA_GPU), None);
        assert_eq!(mixed.labels["nvidia.com/mig-1g.5gb.count"], "16");

        let single = mig_node_resources(
            &gpus,
            mig,
            &layout(mig, "all-1g.5gb"),
            Some(&with(MigStrategy::Single)),
        )
        .expect("single");
        assert_eq!(units(&single, resources::NVIDIA_GPU), Some(56));
        assert_eq!(
            single.labels["nvidia.com/gpu.product"],
            "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
        );
        assert_eq!(single.labels["nvidia.com/mig.strategy"], "single");
        // Single needs one profile per GPU; none advertises nothing.
        let e = mig_node_resources(&gpus, mig, &balanced, Some(&with(MigStrategy::Single)))
            .unwrap_err();
        assert!(e.contains("one profile"), "{e}");
        let e = mig_node_resources(&gpus, mig, &balanced, None).unwrap_err();
        assert!(e.contains("set flags.migStrategy"), "{e}");
    }

    #[test]
    fn gpus_a_config_leaves_whole_stay_gpus_under_mixed_and_refuse_single() {
        let (gpus, mig) = a100s();
        let mut half = layout(mig, "all-balanced");
        for g in &mut half.gpus[4..] {
            *g = None;
        }
        let out =
            mig_node_resources(&gpus, mig, &half, Some(&with(MigStrategy::Mixed))).expect("mixed");
        let units = |k: &str| out.resources.get(k).map(|q| q.units_ceil());
        assert_eq!(units(resources::NVIDIA_GPU), Some(4));
        assert_eq!(units("nvidia.com/mig-1g.5gb"), Some(8));
        assert_eq!(units("nvidia.com/mig-3g.20gb"), Some(4));
        let e =
            mig_node_resources(&gpus, mig, &half, Some(&with(MigStrategy::Single))).unwrap_err();
        assert!(e.contains("split the same way"), "{e}");
    }

    #[test]
    fn a_missing_mig_resource_is_explained_by_the_gpus_profiles() {
        let hint = mig_hint("nvidia.com/mig-2g.10gb", Some("NVIDIA-A100-SXM4-40GB")).expect("A100");
        assert!(
            hint.contains("up to 3 2g.10gb") && hint.contains("all-2g.10gb"),
            "{hint}"
        );
        // Under the single strategy GFD renames the product; the GPU is the same.
        let hint = mig_hint(
            "nvidia.com/mig-2g.20gb",
            Some("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"),
        )
        .expect("A100");
        assert!(hint.contains("no MIG profile 2g.20gb"), "{hint}");
        assert_eq!(
            mig_hint("nvidia.com/gpu", Some("NVIDIA-A100-SXM4-40GB")),
            None
        );
        assert_eq!(mig_hint("nvidia.com/mig-1g.5gb", Some("Tesla-T4")), None);
    }

    #[test]
    fn time_slicing_a_mig_resource_multiplies_it_by_its_replicas() {
        let (gpus, mig) = a100s();
        let config = DevicePluginConfig {
            mig_strategy: MigStrategy::Mixed,
            sharing: Some(super::super::Sharing {
                strategy: super::super::SharingStrategy::TimeSlicing,
                fail_requests_greater_than_one: false,
                resources: vec![super::super::ReplicatedResource {
                    name: "nvidia.com/mig-1g.5gb".into(),
                    rename: None,
                    replicas: 2,
                }],
            }),
        };
        let out = mig_node_resources(&gpus, mig, &layout(mig, "all-balanced"), Some(&config))
            .expect("mixed");
        let units = |k: &str| out.resources.get(k).map(|q| q.units_ceil());
        // 16 1g.5gb instances, each time-sliced two ways; the others are not shared.
        assert_eq!(units("nvidia.com/mig-1g.5gb"), Some(32));
        assert_eq!(units("nvidia.com/mig-2g.10gb"), Some(8));
        assert_eq!(out.labels["nvidia.com/mig-1g.5gb.replicas"], "2");
        assert_eq!(
            out.labels["nvidia.com/gpu.sharing-strategy"],
            "time-slicing"
        );
    }
}
