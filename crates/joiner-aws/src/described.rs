//! EC2's `DescribeInstanceTypes` answer for a type the built-in catalog lacks (one newer than
//! its data), in the shape of the built-in data (`joiner_engine::catalog::Ec2Facts`), so the
//! engine sizes and labels it exactly as the built-in ones are sized from theirs.

use aws_sdk_ec2::types::{InstanceTypeInfo, SupportedAdditionalProcessorFeature};
use joiner_engine::catalog::{AcceleratorKind, Ec2Accelerator, Ec2Facts, Ec2Gpu, Ec2Storage};
use joiner_model::placement::PlacementStrategy;

fn count(n: Option<i32>) -> u32 {
    n.and_then(|n| u32::try_from(n).ok()).unwrap_or(0)
}

/// The facts of one described type; `None` when EC2 leaves out what sizing needs (name, vCPUs,
/// memory).
pub(crate) fn facts_of(info: &InstanceTypeInfo) -> Option<Ec2Facts> {
    let name = info.instance_type()?.as_str().to_string();
    let processor = info.processor_info();
    let network = info.network_info();
    let cards = network.map(|n| n.network_cards()).unwrap_or_default();
    // The VPC CNI uses the default card (index 0) only.
    let card0 = cards
        .iter()
        .find(|c| c.network_card_index().unwrap_or(0) == 0);
    let enis = card0
        .and_then(|c| c.maximum_network_interfaces())
        .or_else(|| network.and_then(|n| n.maximum_network_interfaces()));
    let bandwidth_mbps = match cards {
        [only] => only
            .baseline_bandwidth_in_gbps()
            .map(|g| (g * 1000.0).round() as u64),
        _ => None,
    };
    let gpus = info
        .gpu_info()
        .map(|g| g.gpus())
        .unwrap_or_default()
        .iter()
        .map(|g| Ec2Gpu {
            manufacturer: g.manufacturer().unwrap_or_default().to_string(),
            name: g.name().unwrap_or_default().to_string(),
            count: count(g.count()),
            memory_mib: g
                .memory_info()
                .and_then(|m| m.size_in_mib())
                .and_then(|m| u64::try_from(m).ok())
                .unwrap_or(0),
        })
        .collect();
    let inference: Vec<Ec2Accelerator> = info
        .inference_accelerator_info()
        .map(|a| a.accelerators())
        .unwrap_or_default()
        .iter()
        .map(|a| Ec2Accelerator {
            kind: AcceleratorKind::Inference,
            manufacturer: a.manufacturer().unwrap_or_default().to_string(),
            name: a.name().unwrap_or_default().to_string(),
            count: count(a.count()),
            cores: 0,
        })
        .collect();
    let accelerators = if inference.is_empty() {
        info.neuron_info()
            .map(|n| n.neuron_devices())
            .unwrap_or_default()
            .iter()
            .map(|d| Ec2Accelerator {
                kind: AcceleratorKind::Neuron,
                manufacturer: "AWS".to_string(),
                name: d.name().unwrap_or_default().to_string(),
                count: count(d.count()),
                cores: count(d.core_info().and_then(|c| c.count())),
            })
            .collect()
    } else {
        inference
    };
    let storage = info.instance_storage_info().and_then(|s| {
        Some(Ec2Storage {
            total_gb: u64::try_from(s.total_size_in_gb()?).ok()?,
            nvme: s
                .nvme_support()
                .map(|n| n.as_str().to_string())
                .unwrap_or_default(),
        })
    });
    Some(Ec2Facts {
        name,
        arch: processor
            .map(|p| p.supported_architectures())
            .unwrap_or_default()
            .iter()
            .map(|a| a.as_str().to_string())
            .collect(),
        cpu_manufacturer: processor
            .and_then(|p| p.manufacturer())
            .unwrap_or_default()
            .to_string(),
        vcpu: u32::try_from(info.v_cpu_info()?.default_v_cpus()?).ok()?,
        memory_mib: u64::try_from(info.memory_info()?.size_in_mib()?).ok()?,
        hypervisor: info.hypervisor().map(|h| h.as_str().to_string()),
        enis: count(enis),
        ipv4_per_eni: count(network.and_then(|n| n.ipv4_addresses_per_interface())),
        bandwidth_mbps,
        efa: count(
            network
                .and_then(|n| n.efa_info())
                .and_then(|e| e.maximum_efa_interfaces()),
        ),
        cards: interfaces_per_card(cards),
        encryption_in_transit: network
            .and_then(|n| n.encryption_in_transit_supported())
            .unwrap_or(false),
        usage: info
            .supported_usage_classes()
            .iter()
            .map(|u| u.as_str().to_string())
            .collect(),
        // EC2 always says; were it silent, the type would be taken as the data takes a type it
        // lists no strategies for: placed by every strategy.
        placement_strategies: info.placement_group_info().map_or_else(
            || PlacementStrategy::ALL.to_vec(),
            |p| {
                p.supported_strategies()
                    .iter()
                    .filter_map(|s| s.as_str().parse().ok())
                    .collect()
            },
        ),
        nested_virtualization: processor.is_some_and(|p| {
            p.supported_features()
                .contains(&SupportedAdditionalProcessorFeature::NestedVirtualization)
        }),
        gpus,
        accelerators,
        storage,
        // The Price List API prices it, if anything does.
        on_demand_usd: None,
    })
}

/// Interfaces per network card, by card index, when there is more than one card (as the
/// built-in catalog records them).
fn interfaces_per_card(cards: &[aws_sdk_ec2::types::NetworkCardInfo]) -> Vec<u32> {
    if cards.len() < 2 {
        return Vec::new();
    }
    let mut by_index: Vec<(i32, u32)> = cards
        .iter()
        .map(|c| {
            (
                c.network_card_index().unwrap_or(0),
                c.maximum_network_interfaces()
                    .and_then(|m| u32::try_from(m).ok())
                    .unwrap_or(0),
            )
        })
        .collect();
    by_index.sort_unstable();
    by_index.into_iter().map(|(_, max)| max).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::types::{
        ArchitectureType, EfaInfo, EphemeralNvmeSupport, GpuDeviceInfo, GpuDeviceMemoryInfo,
        GpuInfo, InstanceStorageInfo, InstanceType, InstanceTypeHypervisor, MemoryInfo,
        NetworkCardInfo, NetworkInfo, PlacementGroupInfo, PlacementGroupStrategy, ProcessorInfo,
        UsageClassType, VCpuInfo,
    };

    /// g4dn.xlarge as `DescribeInstanceTypes` answers for it.
    fn g4dn(name: &str) -> InstanceTypeInfo {
        InstanceTypeInfo::builder()
            .instance_type(InstanceType::from(name))
            .processor_info(
                ProcessorInfo::builder()
                    .supported_architectures(ArchitectureType::X8664)
                    .manufacturer("Intel")
                    .build(),
            )
            .v_cpu_info(VCpuInfo::builder().default_v_cpus(4).build())
            .memory_info(MemoryInfo::builder().size_in_mib(16384).build())
            .hypervisor(InstanceTypeHypervisor::Nitro)
            .network_info(
                NetworkInfo::builder()
                    .maximum_network_interfaces(3)
                    .ipv4_addresses_per_interface(10)
                    .encryption_in_transit_supported(true)
                    .efa_info(EfaInfo::builder().maximum_efa_interfaces(0).build())
                    .network_cards(
                        NetworkCardInfo::builder()
                            .network_card_index(0)
                            .maximum_network_interfaces(3)
                            .baseline_bandwidth_in_gbps(5.0)
                            .build(),
                    )
                    .build(),
            )
            .supported_usage_classes(UsageClassType::OnDemand)
            .supported_usage_classes(UsageClassType::Spot)
            .gpu_info(
                GpuInfo::builder()
                    .gpus(
                        GpuDeviceInfo::builder()
                            .manufacturer("NVIDIA")
                            .name("T4")
                            .count(1)
                            .memory_info(GpuDeviceMemoryInfo::builder().size_in_mib(16384).build())
                            .build(),
                    )
                    .build(),
            )
            .instance_storage_info(
                InstanceStorageInfo::builder()
                    .total_size_in_gb(125)
                    .nvme_support(EphemeralNvmeSupport::Required)
                    .build(),
            )
            .build()
    }

    #[test]
    fn a_described_type_reads_as_the_built_in_data_describes_it() {
        let f = facts_of(&g4dn("g4dn.xlarge")).expect("facts");
        // The built-in data's record for g4dn.xlarge, field for field (but the price).
        let built_in: Ec2Facts = serde_json::from_str(
            r#"{"name": "g4dn.xlarge", "arch": ["x86_64"], "cpuManufacturer": "Intel", "vcpu": 4, "memoryMiB": 16384,
                "hypervisor": "nitro", "enis": 3, "ipv4PerEni": 10, "bandwidthMbps": 5000, "efa": 0,
                "encryptionInTransit": true, "usage": ["on-demand", "spot"],
                "gpus": [{"manufacturer": "NVIDIA", "name": "T4", "count": 1, "memoryMiB": 16384}],
                "storage": {"totalGB": 125, "nvme": "required"}}"#,
        )
        .expect("data");
        assert_eq!(f, built_in);
        // What EC2 says of placement and nested virtualization is read as the data records it.
        let t3 = InstanceTypeInfo::builder()
            .instance_type(InstanceType::from("t3.large"))
            .placement_group_info(
                PlacementGroupInfo::builder()
                    .supported_strategies(PlacementGroupStrategy::Partition)
                    .supported_strategies(PlacementGroupStrategy::Spread)
                    .build(),
            )
            .processor_info(
                ProcessorInfo::builder()
                    .supported_features(SupportedAdditionalProcessorFeature::NestedVirtualization)
                    .build(),
            )
            .v_cpu_info(VCpuInfo::builder().default_v_cpus(2).build())
            .memory_info(MemoryInfo::builder().size_in_mib(8192).build())
            .build();
        let f = facts_of(&t3).expect("facts");
        assert_eq!(
            f.placement_strategies,
            [PlacementStrategy::Partition, PlacementStrategy::Spread]
        );
        assert!(f.nested_virtualization);
    }

    /// A type newer than the data is sized from EC2's facts as the built-in ones are: the same
    /// facts under a new name give the same allocatable (but pod ENIs) and GPU labels.
    #[test]
    fn a_type_newer_than_the_data_is_sized_like_its_twin() {
        let zones = vec!["us-east-1a".to_string()];
        let mut catalog = joiner_engine::catalog::Catalog::builtin("us-east-1", &zones);
        let twin = facts_of(&g4dn("g9dn.xlarge")).expect("facts");
        catalog.describe(&[twin], "us-east-1", 75_000);
        let new = catalog.get("g9dn.xlarge").expect("added");
        let old = catalog.get("g4dn.xlarge").expect("built in");
        let shape = joiner_engine::catalog::NodeShape::default();
        let mut expected = old.allocatable(&shape).expect("allocatable");
        // Pod ENIs (security groups for pods) come from the VPC resource controller's table by
        // type name, which EC2 does not describe: a type newer than the table has none.
        expected.remove("vpc.amazonaws.com/pod-eni");
        assert_eq!(new.allocatable(&shape).expect("allocatable"), expected);
        assert!(new.offerings.is_empty(), "sold only where EC2 offers it");
        let label = |t: &joiner_engine::catalog::InstanceType, k: &str| t.labels.get(k).cloned();
        for key in [
            "karpenter.k8s.aws/instance-gpu-name",
            "karpenter.k8s.aws/instance-gpu-count",
            "karpenter.k8s.aws/instance-local-nvme",
        ] {
            assert_eq!(label(new, key), label(old, key), "{key}");
        }
        assert_eq!(
            label(new, "karpenter.k8s.aws/instance-family").as_deref(),
            Some("g9dn")
        );
    }
}
