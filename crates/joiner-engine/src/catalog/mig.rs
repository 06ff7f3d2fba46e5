//! MIG (Multi-Instance GPU) facts: the GPU-instance profiles each MIG-capable GPU of the
//! built-in catalog offers, and whether a layout (how many of each profile) can be made on one
//! GPU, as NVIDIA's MIG User Guide documents them (`data/mig-profiles.json`, with its sources).
//!
//! A GPU has 8 memory slices and 7 compute slices. A profile (`3g.20gb`: 3 compute slices,
//! 20 GB) may start only at the placements the driver allows and then takes `memory_slices`
//! memory slices from there; a layout is valid when its instances can be placed without
//! overlapping, within the 7 compute slices, each profile at most `max_instances` times. This
//! is what the GPU operator's MIG manager can apply, so a NodePool asking for another layout
//! would get nodes whose GPUs it cannot partition.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Deserialize;

/// Memory slices of a MIG-capable GPU.
const MEMORY_SLICES: u8 = 8;
/// Compute slices of a MIG-capable GPU.
const COMPUTE_SLICES: u8 = 7;

/// One GPU-instance profile of a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigProfile {
    /// As `nvidia-smi` names it (`1g.5gb`, `1g.5gb+me`).
    pub name: String,
    pub compute_slices: u8,
    /// Memory in GiB, as the name says.
    #[serde(rename = "memoryGiB")]
    pub memory_gib: u32,
    /// How many fit one GPU.
    pub max_instances: u8,
    /// The memory slices an instance may start at.
    pub placements: Vec<u8>,
    /// The memory slices an instance takes.
    pub memory_slices: u8,
    /// Whether it carries the GPU's media engines (`+me`: at most one per GPU).
    pub media_extensions: bool,
    /// NVML's GPU-instance profile ID (`nvidia-smi mig -lgip`), which the NVIDIA DRA driver
    /// puts in a MIG device's name.
    pub gi_profile_id: u8,
}

impl MigProfile {
    /// The device plugin's resource name under the `mixed` strategy (`nvidia.com/mig-1g.5gb`;
    /// `+me` is written `.me`).
    pub fn resource_name(&self) -> String {
        format!("nvidia.com/mig-{}", self.name.replace('+', "."))
    }
}

/// A MIG-capable GPU and its profiles.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigGpu {
    /// NVIDIA's name for the model in the MIG User Guide (`A100-SXM4-40GB`).
    pub model: String,
    /// The driver's product name, as the catalog has it (`NVIDIA A100-SXM4-40GB`).
    pub product_name: String,
    /// PCI device and vendor IDs as mig-parted's `device-filter` writes them (`0x20B010DE`).
    pub pci_device_ids: Vec<String>,
    pub profiles: Vec<MigProfile>,
}

#[derive(Deserialize)]
struct Data {
    gpus: Vec<MigGpu>,
}

const DATA: &str = include_str!("../../data/mig-profiles.json");

/// Every MIG-capable GPU the built-in data knows. The data is compiled in and checked by the
/// tests; a failure here is a build defect, logged, and yields no MIG facts rather than a panic.
pub fn mig_gpus() -> &'static [MigGpu] {
    static GPUS: OnceLock<Vec<MigGpu>> = OnceLock::new();
    GPUS.get_or_init(|| match serde_json::from_str::<Data>(DATA) {
        Ok(data) => data.gpus,
        Err(error) => {
            tracing::error!(%error, "built-in MIG profile data does not parse");
            Vec::new()
        }
    })
}

/// The MIG facts of a GPU by the driver's product name (`None`: not MIG-capable, or not known).
pub fn mig_gpu(product_name: &str) -> Option<&'static MigGpu> {
    mig_gpus().iter().find(|g| g.product_name == product_name)
}

/// MIG instances on one GPU: profile name (as `nvidia-smi` writes it) to count.
pub type MigLayout = BTreeMap<String, u32>;

/// What the MIG manager makes of each GPU of one node, by GPU index: `None` for a GPU whose MIG
/// mode stays off (whole). A config may split some GPUs and not others (NVIDIA's
/// `half-balanced`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeMigLayout {
    pub gpus: Vec<Option<MigLayout>>,
}

impl NodeMigLayout {
    /// Every one of `count` GPUs split the same way.
    pub fn uniform(count: u32, layout: MigLayout) -> NodeMigLayout {
        NodeMigLayout {
            gpus: vec![Some(layout); count as usize],
        }
    }

    /// Whether no GPU is split.
    pub fn is_whole(&self) -> bool {
        self.gpus.iter().all(Option::is_none)
    }
}

/// Why a layout cannot be made on one GPU.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("the {gpu} has no MIG profile {profile} (it has {known})")]
    UnknownProfile {
        gpu: String,
        profile: String,
        known: String,
    },
    #[error("the {gpu} fits at most {max} {profile} instances, not {asked}")]
    TooMany {
        gpu: String,
        profile: String,
        max: u8,
        asked: u32,
    },
    #[error(
        "{layout} does not fit one {gpu}: its instances cannot be placed side by side in its 8 memory and 7 compute slices"
    )]
    DoesNotFit { gpu: String, layout: String },
}

/// What one of the GPU operator's default `nvidia.com/mig.config` names makes of a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigConfig {
    /// `all-disabled`: MIG off, the GPU whole.
    Disabled,
    /// MIG on, with these instances (profile name to count; none for `all-enabled`).
    Enabled(BTreeMap<String, u32>),
}

impl MigGpu {
    /// A profile by name, as `nvidia-smi` writes it or with `+me` written `.me` (as the GPU
    /// operator's config names do).
    pub fn profile(&self, name: &str) -> Option<&MigProfile> {
        self.profiles
            .iter()
            .find(|p| p.name == name || p.name.replace('+', ".") == name)
    }

    /// The profile names as the GPU operator's configs write them (`+me` as `.me`), comma
    /// separated: what an error lists as the choices.
    pub fn profile_names(&self) -> String {
        self.profiles
            .iter()
            .map(|p| p.name.replace('+', "."))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Whether a mig-parted `device-filter` entry (`0x20B010DE`, optionally with `:<subsystem>`,
    /// which the catalog does not know and so never matches) names this GPU.
    pub fn matches_device_filter(&self, filter: &str) -> bool {
        self.pci_device_ids
            .iter()
            .any(|id| id.eq_ignore_ascii_case(filter.trim()))
    }

    /// Where each instance of `layout` sits on one GPU: `(profile, first memory slice)`,
    /// largest first; `None` if it does not fit (see [`MigGpu::check_layout`]).
    pub fn placements(&self, layout: &MigLayout) -> Option<Vec<(&MigProfile, u8)>> {
        let mut instances: Vec<&MigProfile> = Vec::new();
        for (name, &count) in layout {
            instances.extend(std::iter::repeat_n(self.profile(name)?, count as usize));
        }
        instances.sort_by_key(|p| (std::cmp::Reverse(p.memory_slices), p.name.clone()));
        let mut starts = Vec::with_capacity(instances.len());
        place_at(&instances, 0, &mut starts).then(|| instances.into_iter().zip(starts).collect())
    }

    /// What the GPU operator's default config `name` (its `default-mig-parted-config`) makes
    /// of this GPU; `None` when the config does not apply to it (another GPU's profile) or is
    /// not one of the defaults. `all-<profile>` fills the GPU with as many as fit (the config
    /// writes `+me` as `.me`); `all-balanced` is two of the smallest 1g, a 2g and a 3g.
    pub fn default_config(&self, name: &str) -> Option<MigConfig> {
        match name {
            "all-disabled" => return Some(MigConfig::Disabled),
            "all-enabled" => return Some(MigConfig::Enabled(BTreeMap::new())),
            "all-balanced" => {
                let smallest = |slices: u8| {
                    self.profiles
                        .iter()
                        .filter(|p| p.compute_slices == slices && !p.media_extensions)
                        .min_by_key(|p| p.memory_slices)
                        .map(|p| p.name.clone())
                };
                let layout = [(smallest(1)?, 2), (smallest(2)?, 1), (smallest(3)?, 1)];
                return Some(MigConfig::Enabled(layout.into_iter().collect()));
            }
            _ => {}
        }
        let profile = name.strip_prefix("all-")?;
        let p = self.profile(profile)?;
        Some(MigConfig::Enabled(
            [(p.name.clone(), u32::from(p.max_instances))].into(),
        ))
    }

    /// Checks that `layout` (profile name to instances on one GPU) can be made on this GPU.
    pub fn check_layout(&self, layout: &BTreeMap<String, u32>) -> Result<(), LayoutError> {
        let mut instances: Vec<&MigProfile> = Vec::new();
        for (name, &count) in layout {
            let Some(p) = self.profile(name) else {
                return Err(LayoutError::UnknownProfile {
                    gpu: self.model.clone(),
                    profile: name.clone(),
                    known: self
                        .profiles
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            };
            if count > u32::from(p.max_instances) {
                return Err(LayoutError::TooMany {
                    gpu: self.model.clone(),
                    profile: name.clone(),
                    max: p.max_instances,
                    asked: count,
                });
            }
            instances.extend(std::iter::repeat_n(p, count as usize));
        }
        let compute: u32 = instances.iter().map(|p| u32::from(p.compute_slices)).sum();
        let media = instances.iter().filter(|p| p.media_extensions).count();
        // Largest first: they have the fewest places to go.
        instances.sort_by_key(|p| std::cmp::Reverse(p.memory_slices));
        if compute > u32::from(COMPUTE_SLICES) || media > 1 || !place(&instances, 0) {
            let layout = layout
                .iter()
                .map(|(n, c)| format!("{c}x {n}"))
                .collect::<Vec<_>>()
                .join(" + ");
            return Err(LayoutError::DoesNotFit {
                gpu: self.model.clone(),
                layout,
            });
        }
        Ok(())
    }
}

/// Whether `instances` can each be given a placement without overlapping the memory slices in
/// `taken` (a bit per slice): a search over at most 7 instances and 8 placements each.
fn place(instances: &[&MigProfile], taken: u8) -> bool {
    place_at(instances, taken, &mut Vec::new())
}

/// [`place`], recording in `starts` where each instance went.
fn place_at(instances: &[&MigProfile], taken: u8, starts: &mut Vec<u8>) -> bool {
    let Some((first, rest)) = instances.split_first() else {
        return true;
    };
    first.placements.iter().any(|&start| {
        let end = start + first.memory_slices;
        if end > MEMORY_SLICES {
            return false;
        }
        let span = (((1u16 << first.memory_slices) - 1) << start) as u8;
        if taken & span != 0 {
            return false;
        }
        starts.push(start);
        if place_at(rest, taken | span, starts) {
            return true;
        }
        starts.pop();
        false
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
        pairs.iter().map(|(n, c)| (n.to_string(), *c)).collect()
    }

    #[test]
    fn the_data_reads() {
        let data: Data = serde_json::from_str(DATA).expect("mig-profiles.json reads");
        assert_eq!(data.gpus.len(), 5);
    }

    #[test]
    fn every_mig_capable_gpu_of_the_catalog_has_its_profiles() {
        let catalog = crate::catalog::Catalog::builtin("us-east-1", &[]);
        for (instance_type, product) in [
            ("p4d.24xlarge", "NVIDIA A100-SXM4-40GB"),
            ("p4de.24xlarge", "NVIDIA A100-SXM4-80GB"),
            ("p5.48xlarge", "NVIDIA H100 80GB HBM3"),
            ("p5en.48xlarge", "NVIDIA H200"),
            ("p6-b200.48xlarge", "NVIDIA B200"),
        ] {
            let it = catalog.get(instance_type).expect(instance_type);
            let gpu = it.gpu.as_ref().expect("a GPU");
            assert_eq!(gpu.product_name.as_deref(), Some(product));
            let mig = mig_gpu(product).expect(product);
            // Each GPU's largest profile is the whole GPU, its name its memory.
            let whole = mig
                .profiles
                .iter()
                .find(|p| p.compute_slices == 7)
                .expect("7g");
            assert_eq!(whole.max_instances, 1);
            assert!(mig.check_layout(&layout(&[(&whole.name, 1)])).is_ok());
        }
        assert!(mig_gpu("Tesla T4").is_none());
    }

    #[test]
    fn the_gpu_operators_default_configs_make_layouts_that_fit() {
        for gpu in mig_gpus() {
            let names = gpu
                .profiles
                .iter()
                .map(|p| format!("all-{}", p.name.replace('+', ".")))
                .chain(["all-balanced".to_string(), "all-enabled".to_string()]);
            for name in names {
                let Some(MigConfig::Enabled(layout)) = gpu.default_config(&name) else {
                    panic!("{}: {name} is not a layout", gpu.model);
                };
                assert_eq!(gpu.check_layout(&layout), Ok(()), "{}: {name}", gpu.model);
            }
            assert_eq!(
                gpu.default_config("all-disabled"),
                Some(MigConfig::Disabled)
            );
        }
        let a100 = mig_gpu("NVIDIA A100-SXM4-40GB").expect("A100");
        assert_eq!(
            a100.default_config("all-balanced"),
            Some(MigConfig::Enabled(layout(&[
                ("1g.5gb", 2),
                ("2g.10gb", 1),
                ("3g.20gb", 1)
            ])))
        );
        // Four 1g.10gb fit an A100-40GB (seven on the 80GB one), as the operator's config says.
        assert_eq!(
            a100.default_config("all-1g.10gb"),
            Some(MigConfig::Enabled(layout(&[("1g.10gb", 4)])))
        );
        assert_eq!(
            a100.default_config("all-1g.5gb.me"),
            Some(MigConfig::Enabled(layout(&[("1g.5gb+me", 1)])))
        );
        // Another GPU's profile, or a config that is not a default, is none of this GPU's.
        assert_eq!(a100.default_config("all-1g.10gb.me"), None);
        assert_eq!(a100.default_config("custom-inference"), None);
    }

    #[test]
    fn layouts_the_gpu_operator_ships_fit_and_others_are_refused_with_why() {
        let a100 = mig_gpu("NVIDIA A100-SXM4-40GB").expect("A100");
        // The GPU operator's default configs.
        for ok in [
            layout(&[("1g.5gb", 7)]),
            layout(&[("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1)]),
            layout(&[("2g.10gb", 3)]),
            layout(&[("3g.20gb", 2)]),
            layout(&[("4g.20gb", 1), ("3g.20gb", 1)]),
            layout(&[("1g.10gb", 4)]),
            layout(&[("1g.5gb+me", 1), ("1g.5gb", 6)]),
        ] {
            assert_eq!(a100.check_layout(&ok), Ok(()), "{ok:?}");
        }
        assert!(matches!(
            a100.check_layout(&layout(&[("1g.5gb", 8)])),
            Err(LayoutError::TooMany { max: 7, .. })
        ));
        // Two 3g and a 2g are 8 compute slices.
        let e = a100
            .check_layout(&layout(&[("3g.20gb", 2), ("2g.10gb", 1)]))
            .unwrap_err();
        assert!(
            e.to_string().contains("does not fit one A100-SXM4-40GB"),
            "{e}"
        );
        // A 4g, a 2g and a 1g.10gb take every slice; four 1g.10gb and a 2g are 6 compute
        // slices, but 10 memory slices.
        assert_eq!(
            a100.check_layout(&layout(&[("4g.20gb", 1), ("2g.10gb", 1), ("1g.10gb", 1)])),
            Ok(())
        );
        assert!(matches!(
            a100.check_layout(&layout(&[("1g.10gb", 4), ("2g.10gb", 1)])),
            Err(LayoutError::DoesNotFit { .. })
        ));
        let e = a100
            .check_layout(&layout(&[("1g.10gb", 1), ("2g.20gb", 1)]))
            .unwrap_err();
        assert!(e.to_string().contains("no MIG profile 2g.20gb"), "{e}");
        let h100 = mig_gpu("NVIDIA H100 80GB HBM3").expect("H100");
        assert_eq!(
            h100.check_layout(&layout(&[("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)])),
            Ok(())
        );
        assert_eq!(
            h100.profile("1g.10gb+me")
                .map(MigProfile::resource_name)
                .as_deref(),
            Some("nvidia.com/mig-1g.10gb.me")
        );
    }
}
