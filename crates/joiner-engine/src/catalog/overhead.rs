//! What the kubelet holds back from pods, computed the way Karpenter's AWS provider does for
//! AL2023 so that Joiner's idea of a node's allocatable matches Karpenter's (and the published
//! figures) to the byte. All arithmetic is in integers; where Karpenter rounds a float, the
//! rounding is reproduced exactly.

use std::collections::BTreeMap;

use joiner_model::api::KubeletConfiguration;
use joiner_model::{Format, Quantity, ResourceList};

use super::{CatalogError, resources};

const NANO: i128 = 1_000_000_000;
const MIB: i128 = 1 << 20;
const GIB: i128 = 1 << 30;

/// Default hard eviction threshold for `memory.available`.
const EVICTION_MEMORY_MIB: i128 = 100;
/// Default hard eviction threshold for `nodefs.available`, in percent of the volume.
const EVICTION_NODEFS_PERCENT: i128 = 10;
/// Default kube-reserved ephemeral storage.
const KUBE_RESERVED_STORAGE_GIB: i128 = 1;
/// Kube-reserved memory: this much per pod the node may run, plus a base.
const KUBE_RESERVED_MIB_PER_POD: i128 = 11;
const KUBE_RESERVED_MIB_BASE: i128 = 255;

/// What a node holds back from pods, per resource, in parts so that a plan can say where it
/// went. Allocatable is capacity minus [`Overhead::total`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overhead {
    pub kube_reserved: ResourceList,
    pub system_reserved: ResourceList,
    pub eviction_threshold: ResourceList,
    /// The overhead a user-defined type states for itself.
    pub instance_type: ResourceList,
}

impl Overhead {
    /// The three parts summed per resource.
    pub fn total(&self) -> ResourceList {
        let mut total = self.kube_reserved.clone();
        for part in [
            &self.system_reserved,
            &self.eviction_threshold,
            &self.instance_type,
        ] {
            for (name, q) in part {
                let slot = total.entry(name.clone()).or_insert(Quantity::ZERO);
                *slot = slot.saturating_add(*q);
            }
        }
        total
    }
}

/// Memory capacity Karpenter assumes for an instance with `memory_mib` of RAM: Graviton
/// (arm64) loses 64 MiB to the CMA reservation, then the hypervisor and firmware take
/// `vm_overhead_ppm` parts per million, rounded up to a whole MiB.
pub(crate) fn vm_adjusted_memory_mib(memory_mib: u64, arch: &str, vm_overhead_ppm: u32) -> u64 {
    let mib = if arch == "arm64" {
        memory_mib.saturating_sub(64)
    } else {
        memory_mib
    };
    let overhead = (u128::from(mib) * u128::from(vm_overhead_ppm)).div_ceil(1_000_000);
    mib.saturating_sub(u64::try_from(overhead).unwrap_or(u64::MAX))
}

/// Kube-reserved CPU in millicores for a node with `cpu_millis` of CPU: 6% of the first core,
/// 1% of the second, 0.5% of the third and fourth, 0.25% of the rest, each tier truncated to a
/// whole millicore (the scale EKS AMIs and Bottlerocket use).
pub(crate) fn kube_reserved_cpu_millis(cpu_millis: i128) -> i128 {
    // (start, end, numerator, denominator) of each tier's share.
    const TIERS: [(i128, i128, i128, i128); 4] = [
        (0, 1000, 6, 100),
        (1000, 2000, 1, 100),
        (2000, 4000, 5, 1000),
        (4000, i128::MAX, 25, 10_000),
    ];
    TIERS
        .iter()
        .map(|&(start, end, num, den)| {
            let span = cpu_millis.min(end).saturating_sub(start).max(0);
            span.saturating_mul(num) / den
        })
        .sum()
}

/// Karpenter's overhead for a node with `capacity` (already shaped for the node class) whose
/// ENI-limited pod count is `eni_pods`.
///
/// - kube-reserved: CPU by [`kube_reserved_cpu_millis`]; memory 11 MiB per ENI-limited pod plus
///   255 MiB (AL2023 sizes this by the ENI limit even when `maxPods` is set); 1Gi of ephemeral
///   storage. Entries of `kubelet.kubeReserved` replace these.
/// - system-reserved: `kubelet.systemReserved`, nothing by default.
/// - eviction: `memory.available` 100Mi and `nodefs.available` 10%, replaced by
///   `kubelet.evictionHard` entries; percentages are of the memory capacity and of the volume,
///   rounded up to a byte. Soft thresholds do not reduce allocatable.
pub(crate) fn karpenter_overhead(
    capacity: &ResourceList,
    eni_pods: Quantity,
    kubelet: Option<&KubeletConfiguration>,
) -> Result<Overhead, CatalogError> {
    let get = |name: &str| capacity.get(name).copied().unwrap_or(Quantity::ZERO);
    let storage = get(resources::EPHEMERAL_STORAGE);

    let mut kube_reserved = ResourceList::new();
    kube_reserved.insert(
        resources::CPU.to_string(),
        Quantity::from_nanos(
            kube_reserved_cpu_millis(get(resources::CPU).milli_ceil()) * (NANO / 1000),
            Format::DecimalSI,
        ),
    );
    let pod_mib = eni_pods
        .units_ceil()
        .saturating_mul(KUBE_RESERVED_MIB_PER_POD)
        .saturating_add(KUBE_RESERVED_MIB_BASE);
    kube_reserved.insert(resources::MEMORY.to_string(), binary(pod_mib * MIB));
    kube_reserved.insert(
        resources::EPHEMERAL_STORAGE.to_string(),
        binary(KUBE_RESERVED_STORAGE_GIB * GIB),
    );

    let mut eviction = ResourceList::new();
    eviction.insert(
        resources::MEMORY.to_string(),
        binary(EVICTION_MEMORY_MIB * MIB),
    );
    eviction.insert(
        resources::EPHEMERAL_STORAGE.to_string(),
        percent_of(storage, EVICTION_NODEFS_PERCENT * NANO),
    );

    let mut overhead = Overhead {
        kube_reserved,
        eviction_threshold: eviction,
        ..Overhead::default()
    };
    if let Some(k) = kubelet {
        apply_kubelet(&mut overhead, capacity, k)?;
    }
    Ok(overhead)
}

/// The overhead of a user-defined type that states its own: that figure, plus whatever the
/// node class's kubelet settings reserve explicitly (none of Karpenter's defaults).
pub(crate) fn user_overhead(
    capacity: &ResourceList,
    fixed: &ResourceList,
    kubelet: Option<&KubeletConfiguration>,
) -> Result<Overhead, CatalogError> {
    let mut overhead = Overhead {
        instance_type: fixed.clone(),
        ..Overhead::default()
    };
    if let Some(k) = kubelet {
        apply_kubelet(&mut overhead, capacity, k)?;
    }
    Ok(overhead)
}

/// Applies the kubelet's explicit settings: `kubeReserved` entries replace the defaults one
/// resource at a time, `systemReserved` is taken as given, and `evictionHard` thresholds for
/// `memory.available` and `nodefs.available` replace the defaults (other signals do not
/// concern allocatable).
fn apply_kubelet(
    overhead: &mut Overhead,
    capacity: &ResourceList,
    k: &KubeletConfiguration,
) -> Result<(), CatalogError> {
    let get = |name: &str| capacity.get(name).copied().unwrap_or(Quantity::ZERO);
    if let Some(m) = &k.kube_reserved {
        overhead
            .kube_reserved
            .extend(parse_list("kubelet.kubeReserved", m)?);
    }
    if let Some(m) = &k.system_reserved {
        overhead.system_reserved = parse_list("kubelet.systemReserved", m)?;
    }
    if let Some(m) = &k.eviction_hard {
        for (signal, resource_name) in [
            ("memory.available", resources::MEMORY),
            ("nodefs.available", resources::EPHEMERAL_STORAGE),
        ] {
            if let Some(value) = m.get(signal) {
                let field = format!("kubelet.evictionHard.{signal}");
                let q = threshold(&field, value, get(resource_name))?;
                overhead
                    .eviction_threshold
                    .insert(resource_name.to_string(), q);
            }
        }
    }
    Ok(())
}

fn binary(bytes: i128) -> Quantity {
    Quantity::from_nanos(bytes.saturating_mul(NANO), Format::BinarySI)
}

/// `percent_nanos` (a percentage in nano-units) of `base`, rounded up to a whole unit.
fn percent_of(base: Quantity, percent_nanos: i128) -> Quantity {
    let units = base.units_ceil();
    let value = units
        .checked_mul(percent_nanos)
        .map(|v| div_ceil(v, 100 * NANO))
        // Beyond i128: far past any real node; the threshold then swallows the resource.
        .unwrap_or(units);
    Quantity::from_nanos(value.saturating_mul(NANO), base.format())
}

fn div_ceil(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b > 0 { q + 1 } else { q }
}

/// An eviction threshold: a quantity, or a percentage of `base` (100% disables the signal,
/// as the kubelet documents).
fn threshold(field: &str, value: &str, base: Quantity) -> Result<Quantity, CatalogError> {
    let Some(number) = value.trim().strip_suffix('%') else {
        return parse(field, value);
    };
    let bad = || CatalogError::Percentage {
        field: field.to_string(),
        value: value.to_string(),
    };
    let percent = Quantity::parse(number).map_err(|_| bad())?;
    if percent.is_negative() || percent > Quantity::from_units(100) || number.trim().is_empty() {
        return Err(bad());
    }
    if percent == Quantity::from_units(100) {
        return Ok(Quantity::ZERO);
    }
    Ok(percent_of(base, percent.nanos()))
}

fn parse(field: &str, value: &str) -> Result<Quantity, CatalogError> {
    Quantity::parse(value).map_err(|error| CatalogError::Quantity {
        field: field.to_string(),
        error,
    })
}

fn parse_list(field: &str, map: &BTreeMap<String, String>) -> Result<ResourceList, CatalogError> {
    map.iter()
        .map(|(name, value)| Ok((name.clone(), parse(&format!("{field}.{name}"), value)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_tiers() {
        assert_eq!(kube_reserved_cpu_millis(1000), 60);
        assert_eq!(kube_reserved_cpu_millis(2000), 70);
        assert_eq!(kube_reserved_cpu_millis(4000), 80);
        assert_eq!(kube_reserved_cpu_millis(8000), 90);
        assert_eq!(kube_reserved_cpu_millis(192_000), 550);
        // Truncated per tier, as Karpenter does: 500m -> 30m, 5001m -> 80m + 2.5025 -> 82m.
        assert_eq!(kube_reserved_cpu_millis(500), 30);
        assert_eq!(kube_reserved_cpu_millis(5001), 82);
    }

    #[test]
    fn vm_overhead_rounds_up_and_graviton_loses_cma() {
        // 16384 * 0.075 = 1228.8 -> 1229.
        assert_eq!(vm_adjusted_memory_mib(16384, "amd64", 75_000), 15155);
        // (16384 - 64) * 0.075 = 1224 exactly: no round-up.
        assert_eq!(vm_adjusted_memory_mib(16384, "arm64", 75_000), 15096);
        assert_eq!(vm_adjusted_memory_mib(16384, "amd64", 0), 16384);
    }

    #[test]
    fn percentages() {
        let gi20 = binary(20 * GIB);
        assert_eq!(threshold("f", "10%", gi20).unwrap(), binary(2 * GIB));
        assert_eq!(threshold("f", "100%", gi20).unwrap(), Quantity::ZERO);
        assert_eq!(
            threshold("f", "0.5%", Quantity::from_units(1001)).unwrap(),
            Quantity::from_units(6)
        );
        assert_eq!(threshold("f", "1Gi", gi20).unwrap(), binary(GIB));
        for bad in ["%", "x%", "101%", "-1%"] {
            assert!(matches!(
                threshold("f", bad, gi20),
                Err(CatalogError::Percentage { .. })
            ));
        }
    }
}
