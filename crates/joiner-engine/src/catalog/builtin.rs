//! The built-in AWS instance types: every type EC2 describes ([`super::ec2`]) that Karpenter
//! would list, with capacity, labels and offerings derived as Karpenter's AWS provider derives
//! them, and Karpenter's published figures for the 93 types Joiner carried first
//! ([`super::published`]) where EC2's facts say nothing (EBS and some network bandwidths,
//! pod-ENI branch interfaces, spot prices, what the NVIDIA driver reports).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use joiner_model::{Format, Price, Quantity, ResourceList};

use joiner_model::wellknown::labels as l;

use super::ec2::{AcceleratorKind, Ec2Catalog, Ec2Type, Placement, catalog};
use super::names::{lower_kebab, parse_name};
use super::overhead::vm_adjusted_memory_mib;
use super::published::{Published, published};
use super::{CapacityType, GpuInfo, InstanceType, Offering, PriceBasis, resources};

/// The region whose prices the built-in data holds.
pub const BUILTIN_PRICE_REGION: &str = "us-east-1";

/// Karpenter's default `vmMemoryOverheadPercent` (0.075) in parts per million.
pub const DEFAULT_VM_MEMORY_OVERHEAD_PPM: u32 = 75_000;

/// The default root volume of AL2023 nodes, which holds ephemeral storage.
const DEFAULT_ROOT_VOLUME_GIB: i64 = 20;

/// Every built-in type Karpenter would list (not the Mac types), labelled for `region` and
/// offered in those of `zones` where EC2 offers it.
pub(super) fn instance_types(region: &str, zones: &[String], vm_ppm: u32) -> Vec<InstanceType> {
    let ec2 = catalog();
    let published = published();
    ec2.types
        .iter()
        .filter_map(|t| {
            let arch = t.kube_arch()?;
            let extra = published.get(&t.name);
            Some(instance_type(t, arch, extra, ec2, region, zones, vm_ppm))
        })
        .collect()
}

/// A type the built-in data does not have, from EC2's live facts: sized and labelled as the
/// built-in ones are (Karpenter's published figures, where it has some for the name), with no
/// offerings. `None` for the Mac types, which Karpenter does not list.
pub(super) fn described(t: &Ec2Type, region: &str, vm_ppm: u32) -> Option<InstanceType> {
    let arch = t.kube_arch()?;
    let extra = published().get(&t.name);
    let mut it = instance_type(t, arch, extra, catalog(), region, &[], vm_ppm);
    it.offerings.clear();
    Some(it)
}

/// Built catalogs kept for reuse: a process uses one or two settings, a fuzzer many, so a few
/// are kept and the oldest goes first.
const CACHED_CATALOGS: usize = 4;

type CacheEntry = ((String, Vec<String>, u32), Arc<Vec<InstanceType>>);

/// The built-in types for these settings, built by `build` the first time they are asked for.
pub(super) fn cached(
    region: &str,
    zones: &[String],
    vm_ppm: u32,
    build: impl FnOnce() -> Arc<Vec<InstanceType>>,
) -> Arc<Vec<InstanceType>> {
    static CACHE: Mutex<Vec<CacheEntry>> = Mutex::new(Vec::new());
    let key = (region.to_string(), zones.to_vec(), vm_ppm);
    // A poisoned lock only means another thread panicked while holding it: the entries are
    // whole values, still good.
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, types)) = cache.iter().find(|(k, _)| *k == key) {
        return types.clone();
    }
    let types = build();
    if cache.len() >= CACHED_CATALOGS {
        cache.remove(0);
    }
    cache.push((key, types.clone()));
    types
}

/// How many types the EC2 data describes, listed or not (for tests and `joiner catalog`).
pub(super) fn described_types() -> usize {
    catalog().types.len()
}

/// The regions whose offerings the built-in data knows.
pub fn builtin_regions() -> Vec<&'static str> {
    catalog().regions().collect()
}

fn instance_type(
    t: &Ec2Type,
    arch: &str,
    extra: Option<&Published>,
    ec2: &Ec2Catalog,
    region: &str,
    zones: &[String],
    vm_ppm: u32,
) -> InstanceType {
    let labels = labels(t, arch, extra, region);
    InstanceType {
        name: t.name.clone(),
        capacity: capacity(t, arch, extra, vm_ppm),
        offerings: offerings(t, extra, ec2, region, zones),
        gpu: gpu_info(t, extra),
        overhead_override: None,
        devices: super::devices::builtin_templates(&t.name),
        instance_store_gb: t.storage.as_ref().map(|s| s.total_gb),
        network: Some(super::NetworkInfo {
            cards: if t.cards.is_empty() {
                vec![t.enis]
            } else {
                t.cards.clone()
            },
            ipv4_per_interface: t.ipv4_per_eni,
            max_efa: t.efa,
        }),
        launch: Some(super::LaunchSupport {
            placement_strategies: t.placement_strategies.clone(),
            nested_virtualization: t.nested_virtualization,
        }),
        labels,
    }
}

/// Capacity as Karpenter computes it for AL2023 with the default node shape. Device resources
/// a type lacks are left out, not zero.
fn capacity(t: &Ec2Type, arch: &str, extra: Option<&Published>, vm_ppm: u32) -> ResourceList {
    let memory_mib = vm_adjusted_memory_mib(t.memory_mib, arch, vm_ppm);
    let mut capacity = ResourceList::new();
    let mut put = |name: &str, q: Quantity| {
        capacity.insert(name.to_string(), q);
    };
    put(resources::CPU, Quantity::from_units(t.vcpu.into()));
    put(
        resources::MEMORY,
        Quantity::from_nanos(
            i128::from(memory_mib) * (1 << 20) * 1_000_000_000,
            Format::BinarySI,
        ),
    );
    put(
        resources::EPHEMERAL_STORAGE,
        Quantity::from_bytes_binary(DEFAULT_ROOT_VOLUME_GIB << 30),
    );
    put(
        resources::PODS,
        Quantity::from_units(t.eni_limited_pods().into()),
    );
    let gpus_of = |maker: &str| -> u32 {
        t.gpus
            .iter()
            .filter(|g| g.manufacturer == maker)
            .map(|g| g.count)
            .sum()
    };
    let neuron: Vec<_> = t
        .accelerators
        .iter()
        .filter(|a| a.kind == AcceleratorKind::Neuron)
        .collect();
    // Karpenter counts the cores of the first Neuron device kind only; there is never more.
    let neuron_cores = neuron
        .first()
        .map_or(0, |a| a.count.saturating_mul(a.cores));
    for (name, count) in [
        (resources::NVIDIA_GPU, gpus_of("NVIDIA")),
        (resources::AMD_GPU, gpus_of("AMD")),
        (resources::HABANA_GAUDI, gpus_of("Habana")),
        (resources::AWS_NEURON, neuron.iter().map(|a| a.count).sum()),
        (resources::AWS_NEURON_CORE, neuron_cores),
        (resources::EFA, t.efa),
        (resources::POD_ENI, extra.map_or(0, |p| p.pod_eni)),
    ] {
        if count > 0 {
            put(name, Quantity::from_units(count.into()));
        }
    }
    capacity
}

/// The well-known labels Karpenter derives from EC2's facts, each only where the facts give
/// it: a type without GPUs has no GPU labels, one without NVMe no `instance-local-nvme`.
fn labels(
    t: &Ec2Type,
    arch: &str,
    extra: Option<&Published>,
    region: &str,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut put = |key: &str, value: String| {
        labels.insert(key.to_string(), value);
    };
    put(l::INSTANCE_TYPE, t.name.clone());
    put(l::ARCH, arch.to_string());
    put(l::OS, "linux".to_string());
    put(l::REGION, region.to_string());
    let parts = parse_name(&t.name);
    for (key, value) in [
        (l::INSTANCE_FAMILY, parts.family),
        (l::INSTANCE_SIZE, parts.size),
        (l::INSTANCE_CATEGORY, parts.category),
        (l::INSTANCE_GENERATION, parts.generation),
        (l::INSTANCE_HYPERVISOR, t.hypervisor.as_deref()),
    ] {
        if let Some(value) = value {
            put(key, value.to_string());
        }
    }
    if let Some(family) = parts.family {
        put(
            l::INSTANCE_CAPABILITY_FLEX,
            family.contains("-flex").to_string(),
        );
    }
    put(l::INSTANCE_CPU, t.vcpu.to_string());
    put(
        l::INSTANCE_CPU_MANUFACTURER,
        lower_kebab(&t.cpu_manufacturer),
    );
    put(l::INSTANCE_MEMORY, t.memory_mib.to_string());
    put(
        l::INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
        t.encryption_in_transit.to_string(),
    );
    // Karpenter's published bandwidth where Joiner has it; else the only network card's.
    let network = extra
        .and_then(|p| p.network_bandwidth_mbps)
        .or(t.bandwidth_mbps);
    for (key, value) in [
        (l::INSTANCE_NETWORK_BANDWIDTH, network),
        (
            l::INSTANCE_EBS_BANDWIDTH,
            extra.and_then(|p| p.ebs_bandwidth_mbps),
        ),
        (l::INSTANCE_LOCAL_NVME, t.local_nvme_gb()),
    ] {
        if let Some(value) = value {
            put(key, value.to_string());
        }
    }
    // GPU labels only when EC2 lists one kind of GPU, as Karpenter does.
    if let [gpu] = t.gpus.as_slice() {
        put(l::INSTANCE_GPU_NAME, lower_kebab(&gpu.name));
        put(l::INSTANCE_GPU_MANUFACTURER, lower_kebab(&gpu.manufacturer));
        put(l::INSTANCE_GPU_COUNT, gpu.count.to_string());
        put(l::INSTANCE_GPU_MEMORY, gpu.memory_mib.to_string());
    }
    // Accelerators: a single inference kind unless there are Neuron devices, which win.
    let of_kind = |kind| {
        t.accelerators
            .iter()
            .filter(move |a| a.kind == kind)
            .collect::<Vec<_>>()
    };
    let neuron = of_kind(AcceleratorKind::Neuron);
    let inference = of_kind(AcceleratorKind::Inference);
    let accelerator = match (neuron.as_slice(), inference.as_slice()) {
        ([one], _) => Some((*one, "aws".to_string())),
        ([], [one]) => Some((*one, lower_kebab(&one.manufacturer))),
        _ => None,
    };
    if let Some((a, manufacturer)) = accelerator {
        put(l::INSTANCE_ACCELERATOR_NAME, lower_kebab(&a.name));
        put(l::INSTANCE_ACCELERATOR_MANUFACTURER, manufacturer);
        put(l::INSTANCE_ACCELERATOR_COUNT, a.count.to_string());
    }
    labels
}

/// The NVIDIA GPUs the device plugin will advertise, with what the driver reports where Joiner
/// knows it (the 53 types with DRA metadata); `None` for types without NVIDIA GPUs, whose other
/// accelerators have their own resources and no device-plugin sharing.
fn gpu_info(t: &Ec2Type, extra: Option<&Published>) -> Option<GpuInfo> {
    let gpu = t.gpus.iter().find(|g| g.manufacturer == "NVIDIA")?;
    let driver = extra.and_then(|p| p.gpu.as_ref());
    Some(GpuInfo {
        manufacturer: lower_kebab(&gpu.manufacturer),
        name: lower_kebab(&gpu.name),
        count: gpu.count,
        memory_mib: Some(gpu.memory_mib),
        product_name: driver.map(|d| d.product_name.clone()),
        driver_memory_mib: driver.map(|d| d.driver_memory_mib),
        compute_capability: driver.and_then(|d| d.compute_capability()),
        devices: driver.map_or(gpu.count, |d| d.devices),
    })
}

/// The offerings in `region`: in each of `zones` where EC2 offers the type (every zone, when
/// the data does not know the region or the zone), on-demand and spot as EC2 sells the type.
fn offerings(
    t: &Ec2Type,
    extra: Option<&Published>,
    ec2: &Ec2Catalog,
    region: &str,
    zones: &[String],
) -> Vec<Offering> {
    let placement = ec2.placement(region, &t.name);
    let offered = |zone: &str| match placement {
        Placement::UnknownRegion => true,
        Placement::Zones(list) => list.iter().any(|z| z == zone) || !ec2.knows_zone(region, zone),
    };
    let priced = prices(t, extra, region == ec2.price_region);
    zones
        .iter()
        .filter(|z| offered(z))
        .flat_map(|zone| {
            priced.iter().map(move |&(capacity_type, price)| {
                let (price, basis) = price.unwrap_or((Price::ZERO, PriceBasis::Unknown));
                Offering {
                    zone: zone.clone(),
                    capacity_type,
                    price,
                    // As in Karpenter, an offering without a price is not launched.
                    available: basis != PriceBasis::Unknown,
                    price_basis: basis,
                }
            })
        })
        .collect()
}

type Priced = (CapacityType, Option<(Price, PriceBasis)>);

/// The price of each capacity type EC2 sells the type as, and how Joiner knows it. Offline,
/// Joiner has us-east-1's on-demand prices and, for 93 types, typical us-east-1 spot prices
/// from an old snapshot. Elsewhere us-east-1's figure stands in; a spot price not known stands
/// in as the on-demand price, which spot never exceeds.
fn prices(t: &Ec2Type, extra: Option<&Published>, in_price_region: bool) -> Vec<Priced> {
    let on_demand = t.on_demand_usd.map(|p| {
        let basis = if in_price_region {
            PriceBasis::Listed
        } else {
            PriceBasis::OtherRegion
        };
        (p, basis)
    });
    let spot = match extra.and_then(|p| p.spot_typical_usd) {
        Some(p) if in_price_region => Some((p, PriceBasis::SpotSnapshot)),
        Some(p) => Some((p, PriceBasis::OtherRegion)),
        None => on_demand.map(|(p, _)| (p, PriceBasis::OnDemandBound)),
    };
    let mut out = Vec::new();
    if t.sold_as("on-demand") {
        out.push((CapacityType::OnDemand, on_demand));
    }
    if t.sold_as("spot") {
        out.push((CapacityType::Spot, spot));
    }
    out
}
