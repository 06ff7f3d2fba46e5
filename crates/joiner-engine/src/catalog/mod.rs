//! The instance catalog: every instance type Joiner may launch, with what a node of that type
//! holds (capacity and, after the kubelet's reservations, allocatable), the labels it will carry
//! (so NodePool requirements and pod selectors can be checked before the node exists) and where
//! and at what price it can be bought (offerings).
//!
//! Built-in types come from data compiled into the binary ([`Catalog::builtin`]): every type
//! EC2 describes, offered where EC2 offers it in the configured region; users add or replace
//! types by name ([`Catalog::upsert`], [`user_instance_type`]). Allocatable follows Karpenter's
//! AWS provider for AL2023 exactly, so that Joiner packs nodes the way Karpenter would: see
//! [`InstanceType::allocatable`]. Labels follow Karpenter too: a type has a well-known label
//! only where its facts give one, and a requirement on a label it lacks fails as
//! `DoesNotExist` would ([`joiner_model::wellknown::labels::INSTANCE_TYPE_DEFINED`]).
//!
//! For Dynamic Resource Allocation, a type also carries the devices its DRA drivers will publish
//! ([`InstanceType::devices`], [`devices`]): built in for the AWS GPU types, from `spec.devices`
//! for user-defined ones ([`devices::DeviceTemplates::from_spec`]).

mod builtin;
pub mod devices;
mod ec2;
pub mod mig;
pub mod names;
mod overhead;
mod price;
mod published;
mod user;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use joiner_model::api::KubeletConfiguration;
use joiner_model::api::ec2nodeclass::NetworkInterface;
use joiner_model::placement::PlacementStrategy;
use joiner_model::{Format, Price, Quantity, QuantityError, ResourceList};

use devices::DeviceTemplates;

pub use builtin::{BUILTIN_PRICE_REGION, DEFAULT_VM_MEMORY_OVERHEAD_PPM, builtin_regions};
pub use ec2::{AcceleratorKind, Ec2Accelerator, Ec2Gpu, Ec2Storage, Ec2Type as Ec2Facts};
pub use overhead::Overhead;
pub use price::PriceBasis;
pub use user::user_instance_type;

pub use joiner_model::wellknown::{CapacityType, resources};

/// One way to buy an instance type: where and how. Offerings known to be unavailable for a
/// while (insufficient capacity, a spot offering just reclaimed) are named by it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OfferingKey {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
}

impl OfferingKey {
    /// The key of `instance_type`'s `offering`.
    pub fn of(instance_type: &str, offering: &Offering) -> OfferingKey {
        OfferingKey {
            instance_type: instance_type.to_string(),
            zone: offering.zone.clone(),
            capacity_type: offering.capacity_type,
        }
    }
}

impl fmt::Display for OfferingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            self.instance_type, self.zone, self.capacity_type
        )
    }
}

/// One way to buy an instance type: a zone and a capacity type at a price. A node launched from
/// an offering carries its zone (`topology.kubernetes.io/zone`) and capacity type
/// (`karpenter.sh/capacity-type`) as labels, which is why those are not in
/// [`InstanceType::labels`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offering {
    pub zone: String,
    pub capacity_type: CapacityType,
    /// Hourly price.
    pub price: Price,
    /// False when the offering is known but cannot be launched now (for example after an
    /// insufficient-capacity error, or when no price is known); kept so that plans can say why
    /// it was not used.
    pub available: bool,
    /// How Joiner knows `price`: listed, or a stand-in where the real price is not known
    /// offline (another region, spot), which plans say.
    pub price_basis: PriceBasis,
}

/// The GPUs of an instance type, as EC2 and the NVIDIA driver describe them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    /// Lower-case manufacturer (`nvidia`).
    pub manufacturer: String,
    /// Karpenter's `instance-gpu-name` value (`t4`, `a10g`, `h100`).
    pub name: String,
    /// Whole GPUs EC2 reports: the `instance-gpu-count` label. 0 on fractional (vGPU) types.
    pub count: u32,
    /// GPU memory per GPU in MiB as EC2 reports it (the `instance-gpu-memory` label), if known.
    pub memory_mib: Option<u64>,
    /// The name the NVIDIA driver reports (`Tesla T4`, `NVIDIA H100 80GB HBM3`), if known: what
    /// gpu-feature-discovery puts in `nvidia.com/gpu.product`.
    pub product_name: Option<String>,
    /// Memory per GPU in MiB as the driver reports it (less than EC2's figure on most types):
    /// what gpu-feature-discovery puts in `nvidia.com/gpu.memory`.
    pub driver_memory_mib: Option<u64>,
    /// CUDA compute capability (major, minor), if known.
    pub compute_capability: Option<(u32, u32)>,
    /// GPU devices the driver sees: equals `count` except on fractional types, where one
    /// virtual GPU is visible although EC2 reports no whole GPU.
    pub devices: u32,
}

/// An instance type that Joiner may launch.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceType {
    pub name: String,
    /// What a node of this type has with the default node shape: `cpu`, `memory` (after
    /// Karpenter's VM memory overhead), `ephemeral-storage` (the default 20Gi root volume),
    /// `pods` (the ENI-limited maximum), `nvidia.com/gpu` (physical GPUs),
    /// `vpc.amazonaws.com/efa`, `vpc.amazonaws.com/pod-eni`. Resources the type lacks are absent,
    /// not zero. See [`InstanceType::capacity_for`] for other shapes.
    pub capacity: ResourceList,
    /// Well-known labels every node of this type carries (see [`labels`]). Zone and capacity
    /// type are not here: they depend on the offering.
    pub labels: BTreeMap<String, String>,
    pub offerings: Vec<Offering>,
    pub gpu: Option<GpuInfo>,
    /// Overhead given by the user for a user-defined type. When set it stands in for Karpenter's
    /// computed defaults; the node class's explicit kubelet reservations still add to it.
    pub overhead_override: Option<ResourceList>,
    /// What the DRA drivers will publish on a node of this type (see [`devices`]), if known:
    /// set for the built-in GPU types and for user-defined types that list `spec.devices`.
    /// Shared, because catalogs are copied while planning and a template can hold dozens of
    /// devices.
    pub devices: Option<Arc<DeviceTemplates>>,
    /// Total instance-store size in GB (decimal), if the type has one: ephemeral storage under
    /// `instanceStorePolicy: RAID0`.
    pub instance_store_gb: Option<u64>,
    /// Its network cards, when known: what an EC2NodeClass's `networkInterfaces` may use.
    pub network: Option<NetworkInfo>,
    /// What EC2 launches it with, when known: the placement groups and CPU options an
    /// EC2NodeClass may ask for.
    pub launch: Option<LaunchSupport>,
}

/// The launch options EC2 supports for a type, as `DescribeInstanceTypes` says. Karpenter
/// offers a class only the types that support what it asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSupport {
    /// `PlacementGroupInfo.SupportedStrategies`.
    pub placement_strategies: Vec<PlacementStrategy>,
    /// `nested-virtualization` among `ProcessorInfo.SupportedFeatures`.
    pub nested_virtualization: bool,
}

/// An instance type's network cards, as EC2 describes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkInfo {
    /// Interfaces each network card takes, by card index (card 0 is the default card, the
    /// one the VPC CNI gives pods addresses on).
    pub cards: Vec<u32>,
    pub ipv4_per_interface: u32,
    /// EFA interfaces the type takes in all.
    pub max_efa: u32,
}

impl NetworkInfo {
    /// Karpenter's ENI-limited pod count with `efa_only` of card 0's interfaces taken by
    /// EFA-only interfaces, which carry no addresses: the rest times (addresses per interface
    /// - 1), plus 2.
    pub fn eni_limited_pods(&self, efa_only: u32) -> u32 {
        let usable = self
            .cards
            .first()
            .copied()
            .unwrap_or(0)
            .saturating_sub(efa_only);
        if usable == 0 {
            return 0;
        }
        usable
            .saturating_mul(self.ipv4_per_interface.saturating_sub(1))
            .saturating_add(2)
    }

    /// Whether the type can take these interfaces, as Karpenter checks it: every card index and
    /// device index within its cards, and no more EFA-only interfaces than it takes EFAs.
    pub fn takes(&self, interfaces: &[NetworkInterface]) -> bool {
        let fits = |i: &NetworkInterface| {
            usize::try_from(i.network_card_index)
                .ok()
                .and_then(|c| self.cards.get(c))
                .is_some_and(|&max| i64::from(max) > i64::from(i.device_index))
        };
        let efa_only = interfaces.iter().filter(|i| i.is_efa_only()).count();
        interfaces.iter().all(fits) && efa_only <= self.max_efa as usize
    }
}

/// What the EC2NodeClass says about the nodes it makes, as far as it changes their resources.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeShape<'a> {
    /// `spec.kubelet` (max pods, pods per core, reservations, eviction thresholds).
    pub kubelet: Option<&'a KubeletConfiguration>,
    /// Size of the volume that holds ephemeral storage (the root volume in
    /// `blockDeviceMappings`); `None` for the AMI family's default (20Gi on AL2023).
    pub root_volume: Option<Quantity>,
    /// `instanceStorePolicy: RAID0`: the instance store, striped, holds ephemeral storage on
    /// types that have one (the root volume still does on the others).
    pub instance_store_raid0: bool,
    /// `networkInterfaces`: when set, the EFA-only interfaces listed are the node's EFAs, and
    /// those on the default card take interfaces from pods.
    pub interfaces: &'a [NetworkInterface],
}

/// Why allocatable resources cannot be computed: a kubelet setting that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    #[error("{field}: {error}")]
    Quantity { field: String, error: QuantityError },
    #[error("{field}: {value:?} is not a percentage between 0% and 100%")]
    Percentage { field: String, value: String },
    #[error("{field}: {value} must not be negative")]
    Negative { field: String, value: i64 },
}

impl CatalogError {
    /// The offending field relative to the EC2NodeClass spec, such as
    /// `kubelet.kubeReserved.memory`; prefix it with `spec.` for the object path.
    pub fn field(&self) -> &str {
        match self {
            CatalogError::Quantity { field, .. }
            | CatalogError::Percentage { field, .. }
            | CatalogError::Negative { field, .. } => field,
        }
    }
}

impl InstanceType {
    /// A capacity entry, zero when the type lacks the resource.
    pub fn capacity_of(&self, resource: &str) -> Quantity {
        self.capacity
            .get(resource)
            .copied()
            .unwrap_or(Quantity::ZERO)
    }

    /// Capacity for a node shape: the instance store under RAID0 (its total size, in decimal
    /// GB) or else the root volume replaces `ephemeral-storage`, and the kubelet's `maxPods`
    /// replaces the ENI-limited pod count, lowered to `podsPerCore` x vCPUs when that is set and
    /// smaller (Karpenter's rules).
    pub fn capacity_for(&self, shape: &NodeShape) -> Result<ResourceList, CatalogError> {
        let mut capacity = self.capacity.clone();
        let store = self
            .instance_store_gb
            .filter(|_| shape.instance_store_raid0)
            .map(|gb| {
                Quantity::from_nanos(
                    i128::from(gb).saturating_mul(1_000_000_000_000_000_000),
                    Format::DecimalSI,
                )
            });
        if let Some(volume) = store.or(shape.root_volume) {
            capacity.insert(resources::EPHEMERAL_STORAGE.to_string(), volume);
        }
        if !shape.interfaces.is_empty() {
            let efa = shape.interfaces.iter().filter(|i| i.is_efa_only()).count();
            match efa {
                0 => capacity.remove(resources::EFA),
                n => capacity.insert(resources::EFA.to_string(), pods_quantity(n as i128)),
            };
        }
        let eni_pods = self.eni_pods(shape);
        if eni_pods != self.capacity_of(resources::PODS) {
            capacity.insert(resources::PODS.to_string(), eni_pods);
        }
        if let Some(kubelet) = shape.kubelet {
            let mut pods = eni_pods.units_ceil();
            if let Some(max) = kubelet.max_pods {
                pods = non_negative("kubelet.maxPods", max)?;
            }
            if let Some(per_core) = kubelet.pods_per_core {
                let per_core = non_negative("kubelet.podsPerCore", per_core)?;
                let vcpus = self.capacity_of(resources::CPU).units_ceil();
                if per_core > 0 {
                    pods = pods.min(per_core.saturating_mul(vcpus));
                }
            }
            capacity.insert(resources::PODS.to_string(), pods_quantity(pods));
        }
        Ok(capacity)
    }

    /// The ENI-limited pod count for a node shape: the type's, less what EFA-only interfaces
    /// on the default card take from it (Karpenter's rule), when the type's cards are known.
    fn eni_pods(&self, shape: &NodeShape) -> Quantity {
        let listed = self.capacity_of(resources::PODS);
        let efa_only_card0 = shape
            .interfaces
            .iter()
            .filter(|i| i.network_card_index == 0 && i.is_efa_only())
            .count();
        match &self.network {
            Some(net) if efa_only_card0 > 0 => pods_quantity(
                net.eni_limited_pods(u32::try_from(efa_only_card0).unwrap_or(u32::MAX))
                    .into(),
            ),
            _ => listed,
        }
    }

    /// Whether EC2 launches this type into a placement group of `strategy` (when the class has
    /// one) and with nested virtualization (when the class enables it). A type whose support is
    /// not known (a user-defined one) is taken to support both.
    pub fn supports_launch(&self, strategy: Option<PlacementStrategy>, nested: bool) -> bool {
        self.launch.as_ref().is_none_or(|l| {
            strategy.is_none_or(|s| l.placement_strategies.contains(&s))
                && (!nested || l.nested_virtualization)
        })
    }

    /// Whether a node of this type can take the class's `networkInterfaces`; a type whose
    /// cards are not known (a user-defined one) is taken to.
    pub fn takes_interfaces(&self, interfaces: &[NetworkInterface]) -> bool {
        interfaces.is_empty() || self.network.as_ref().is_none_or(|n| n.takes(interfaces))
    }

    /// What a node of this shape holds back: for a user-defined type that states its overhead,
    /// that overhead plus the kubelet's explicit reservations; otherwise Karpenter's AL2023
    /// model, where the kubelet settings replace the defaults they name.
    pub fn overhead(&self, shape: &NodeShape) -> Result<Overhead, CatalogError> {
        let capacity = self.capacity_for(shape)?;
        match &self.overhead_override {
            Some(fixed) => overhead::user_overhead(&capacity, fixed, shape.kubelet),
            None => overhead::karpenter_overhead(&capacity, self.eni_pods(shape), shape.kubelet),
        }
    }

    /// What pods can request on a node of this shape: capacity minus kube-reserved,
    /// system-reserved and the hard eviction thresholds, per resource, never below zero. With
    /// the default shape this reproduces Karpenter's published allocatable figures for AL2023.
    pub fn allocatable(&self, shape: &NodeShape) -> Result<ResourceList, CatalogError> {
        let capacity = self.capacity_for(shape)?;
        let total = self.overhead(shape)?.total();
        Ok(capacity
            .into_iter()
            .map(|(name, q)| {
                let reserved = total.get(&name).copied().unwrap_or(Quantity::ZERO);
                let left = q.saturating_sub(reserved).max(Quantity::ZERO);
                (name, Quantity::from_nanos(left.nanos(), q.format()))
            })
            .collect())
    }

    /// The offering for a zone and capacity type, if any.
    pub fn offering(&self, zone: &str, capacity_type: CapacityType) -> Option<&Offering> {
        self.offerings
            .iter()
            .find(|o| o.zone == zone && o.capacity_type == capacity_type)
    }

    /// The cheapest available offering, if any.
    pub fn cheapest_offering(&self) -> Option<&Offering> {
        self.offerings
            .iter()
            .filter(|o| o.available)
            .min_by_key(|o| o.price)
    }
}

fn non_negative(field: &str, value: i32) -> Result<i128, CatalogError> {
    if value < 0 {
        return Err(CatalogError::Negative {
            field: field.to_string(),
            value: value.into(),
        });
    }
    Ok(value.into())
}

fn pods_quantity(pods: i128) -> Quantity {
    Quantity::from_nanos(pods.saturating_mul(1_000_000_000), Format::DecimalSI)
}

/// The instance types Joiner may launch, sorted by name, each name once.
///
/// The types are shared: a catalog is copied with every snapshot and the built-in one holds
/// over a thousand types, so copies share them until one is changed ([`Catalog::upsert`],
/// [`Catalog::remove`] copy on write).
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    types: Arc<Vec<InstanceType>>,
}

impl From<Arc<Vec<InstanceType>>> for Catalog {
    fn from(types: Arc<Vec<InstanceType>>) -> Catalog {
        Catalog { types }
    }
}

impl Catalog {
    /// A catalog with nothing in it: for tests and for users who define every type themselves.
    pub fn empty() -> Catalog {
        Catalog::default()
    }

    /// The built-in AWS types (every type EC2 describes but the Mac ones, which Karpenter does
    /// not list), labelled for `region`, each offered in those of `zones` where EC2 offers it
    /// there (every zone when the data does not know the region or the zone), on-demand and as
    /// spot as EC2 sells it. Prices are [`BUILTIN_PRICE_REGION`]'s on-demand prices and, for
    /// 93 types, typical spot prices; where Joiner knows no better, a stand-in marked by
    /// [`Offering::price_basis`] (see [`PriceBasis`]), and an offering with no price at all is
    /// not available.
    pub fn builtin(region: &str, zones: &[String]) -> Catalog {
        Catalog::builtin_with(region, zones, DEFAULT_VM_MEMORY_OVERHEAD_PPM)
    }

    /// As [`Catalog::builtin`], with Karpenter's `vmMemoryOverheadPercent` setting given in
    /// parts per million (75_000 for the default 0.075).
    ///
    /// Built once per region, zones and overhead in a process (the controller builds a
    /// snapshot, and so a catalog, every step) and shared after.
    pub fn builtin_with(region: &str, zones: &[String], vm_memory_overhead_ppm: u32) -> Catalog {
        builtin::cached(region, zones, vm_memory_overhead_ppm, || {
            let mut types = builtin::instance_types(region, zones, vm_memory_overhead_ppm);
            types.sort_by(|a, b| a.name.cmp(&b.name));
            types.dedup_by(|a, b| a.name == b.name);
            Arc::new(types)
        })
        .into()
    }

    /// Adds a type, or replaces the one of the same name (user-defined types win over
    /// built-in ones).
    pub fn upsert(&mut self, it: InstanceType) {
        match self
            .types
            .binary_search_by(|t| t.name.as_str().cmp(it.name.as_str()))
        {
            Ok(i) => {
                if let Some(slot) = Arc::make_mut(&mut self.types).get_mut(i) {
                    *slot = it;
                }
            }
            Err(i) => Arc::make_mut(&mut self.types).insert(i, it),
        }
    }

    /// Puts what the cloud sells now in place of the built-in offerings: a type the cloud lists
    /// gets the cloud's offerings at the cloud's prices, each with the basis the cloud gave it
    /// (a spot price EC2 did not report is still the catalog's stand-in; a live price equal to
    /// a built-in estimate is live); a type it does not list is not sold in these zones and
    /// keeps no offering.
    pub fn sell_as(&mut self, sold: &BTreeMap<String, Vec<Offering>>) {
        for t in Arc::make_mut(&mut self.types).iter_mut() {
            let Some(offerings) = sold.get(&t.name) else {
                t.offerings.clear();
                continue;
            };
            t.offerings = offerings.clone();
        }
    }

    /// Adds the types EC2 describes that the catalog lacks (types newer than the built-in
    /// data), sized from `facts` exactly as the built-in types are from theirs, labelled for
    /// `region`, with no offerings (what the cloud sells gives them some, [`Catalog::sell_as`]).
    /// Types the catalog has, and Mac types, are left as they are.
    pub fn describe(&mut self, facts: &[Ec2Facts], region: &str, vm_memory_overhead_ppm: u32) {
        for f in facts {
            if self.get(&f.name).is_some() {
                continue;
            }
            if let Some(it) = builtin::described(f, region, vm_memory_overhead_ppm) {
                self.upsert(it);
            }
        }
    }

    /// Removes a type by name, returning it.
    pub fn remove(&mut self, name: &str) -> Option<InstanceType> {
        let i = self
            .types
            .binary_search_by(|t| t.name.as_str().cmp(name))
            .ok()?;
        Some(Arc::make_mut(&mut self.types).remove(i))
    }

    /// All types, sorted by name.
    pub fn types(&self) -> &[InstanceType] {
        &self.types
    }

    pub fn get(&self, name: &str) -> Option<&InstanceType> {
        self.types
            .binary_search_by(|t| t.name.as_str().cmp(name))
            .ok()
            .and_then(|i| self.types.get(i))
    }

    /// How many types the built-in EC2 data describes, including those it does not list.
    pub fn described_builtin_types() -> usize {
        builtin::described_types()
    }

    pub fn len(&self) -> usize {
        self.types.len()
    }

    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }
}

#[cfg(test)]
mod tests;
