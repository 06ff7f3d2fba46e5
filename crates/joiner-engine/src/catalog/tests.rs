use std::collections::BTreeMap;

use joiner_model::api::KubeletConfiguration;
use joiner_model::wellknown::labels;
use joiner_model::{Price, Quantity, ResourceList};

use super::*;

fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap()
}

fn zones() -> Vec<String> {
    vec!["us-east-1a".to_string(), "us-east-1b".to_string()]
}

fn catalog() -> Catalog {
    Catalog::builtin("us-east-1", &zones())
}

fn list(pairs: &[(&str, &str)]) -> ResourceList {
    pairs.iter().map(|(k, v)| (k.to_string(), q(v))).collect()
}

fn strings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn builtin_lists_every_ec2_type_karpenter_lists() {
    let c = catalog();
    assert_eq!(Catalog::described_builtin_types(), 1263);
    // The 8 Mac types are left out, as Karpenter's DescribeInstanceTypes filter leaves them.
    assert_eq!(c.len(), 1255);
    assert!(c.get("mac2.metal").is_none());
    assert!(c.types().windows(2).all(|w| w[0].name < w[1].name));
    // NVIDIA GPU types: the 53 with DRA metadata and the 6 g7e without.
    assert_eq!(c.types().iter().filter(|t| t.gpu.is_some()).count(), 59);
    for name in published::published().keys() {
        assert!(c.get(name).is_some(), "{name}");
    }
    assert_eq!(published::published().len(), 93);
    assert_eq!(builtin_regions().len(), 30);
}

#[test]
fn published_figures_agree_with_ec2s_facts() {
    let c = catalog();
    for p in published::published().values() {
        let it = c.get(&p.name).unwrap();
        // Karpenter's ENI-limited formula on EC2's facts gives the published max pods.
        assert_eq!(
            it.capacity["pods"],
            Quantity::from_units(p.max_pods.into()),
            "{}",
            p.name
        );
        assert_eq!(
            it.capacity["cpu"],
            Quantity::from_units(p.vcpu.into()),
            "{}",
            p.name
        );
    }
}

#[test]
fn allocatable_matches_karpenter_for_every_published_type() {
    let c = catalog();
    let shape = NodeShape::default();
    let mut checked = 0;
    for raw in published::published().values() {
        let it = c.get(&raw.name).unwrap();
        let alloc = it.allocatable(&shape).unwrap();
        for (name, want) in &raw.karpenter_allocatable {
            assert_eq!(
                alloc.get(name),
                Some(want),
                "{} {name}: got {:?}, Karpenter publishes {want}",
                raw.name,
                alloc.get(name).map(ToString::to_string)
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 93 * 4);
}

#[test]
fn g4dn_xlarge_capacity_labels_and_offerings() {
    let c = catalog();
    let it = c.get("g4dn.xlarge").unwrap();
    assert_eq!(it.capacity["cpu"], q("4"));
    // 16384 MiB less 7.5% (1229 MiB, rounded up).
    assert_eq!(it.capacity["memory"], q("15155Mi"));
    assert_eq!(it.capacity["ephemeral-storage"], q("20Gi"));
    assert_eq!(it.capacity["pods"], q("29"));
    assert_eq!(it.capacity["nvidia.com/gpu"], q("1"));
    assert_eq!(it.capacity["vpc.amazonaws.com/pod-eni"], q("39"));
    assert!(!it.capacity.contains_key("vpc.amazonaws.com/efa"));
    let want = strings(&[
        ("node.kubernetes.io/instance-type", "g4dn.xlarge"),
        ("kubernetes.io/arch", "amd64"),
        ("kubernetes.io/os", "linux"),
        ("topology.kubernetes.io/region", "us-east-1"),
        ("karpenter.k8s.aws/instance-family", "g4dn"),
        ("karpenter.k8s.aws/instance-category", "g"),
        ("karpenter.k8s.aws/instance-generation", "4"),
        ("karpenter.k8s.aws/instance-size", "xlarge"),
        ("karpenter.k8s.aws/instance-capability-flex", "false"),
        ("karpenter.k8s.aws/instance-cpu", "4"),
        ("karpenter.k8s.aws/instance-cpu-manufacturer", "intel"),
        ("karpenter.k8s.aws/instance-memory", "16384"),
        ("karpenter.k8s.aws/instance-hypervisor", "nitro"),
        (
            "karpenter.k8s.aws/instance-encryption-in-transit-supported",
            "true",
        ),
        ("karpenter.k8s.aws/instance-network-bandwidth", "5000"),
        ("karpenter.k8s.aws/instance-ebs-bandwidth", "3500"),
        ("karpenter.k8s.aws/instance-local-nvme", "125"),
        ("karpenter.k8s.aws/instance-gpu-name", "t4"),
        ("karpenter.k8s.aws/instance-gpu-manufacturer", "nvidia"),
        ("karpenter.k8s.aws/instance-gpu-count", "1"),
        ("karpenter.k8s.aws/instance-gpu-memory", "16384"),
    ]);
    assert_eq!(it.labels, want);
    let gpu = it.gpu.as_ref().unwrap();
    assert_eq!(gpu.product_name.as_deref(), Some("Tesla T4"));
    assert_eq!(gpu.driver_memory_mib, Some(15360));
    assert_eq!(gpu.compute_capability, Some((7, 5)));

    assert_eq!(it.offerings.len(), 4);
    let od = it.offering("us-east-1b", CapacityType::OnDemand).unwrap();
    assert_eq!(od.price, Price::from_usd(0.526).unwrap());
    assert_eq!(od.price_basis, PriceBasis::Listed);
    assert!(od.available);
    let spot = it.offering("us-east-1a", CapacityType::Spot).unwrap();
    assert_eq!(spot.price, Price::from_usd(0.1869).unwrap());
    assert_eq!(spot.price_basis, PriceBasis::SpotSnapshot);
    assert_eq!(
        it.cheapest_offering().unwrap().capacity_type,
        CapacityType::Spot
    );
}

#[test]
fn labels_a_type_lacks_are_absent_not_invented() {
    let c = catalog();
    let t3 = c.get("t3.medium").unwrap();
    for key in [
        labels::INSTANCE_GPU_COUNT,
        labels::INSTANCE_GPU_NAME,
        labels::INSTANCE_LOCAL_NVME,
        labels::INSTANCE_ACCELERATOR_NAME,
    ] {
        assert!(!t3.labels.contains_key(key), "t3.medium has {key}");
    }
    assert!(
        !c.get("c5.large")
            .unwrap()
            .labels
            .contains_key(labels::INSTANCE_LOCAL_NVME)
    );
    // A type beyond the 93: every label from EC2's facts, and none of the published ones (EC2's
    // data has no EBS bandwidth).
    let m5d = c.get("m5d.large").unwrap();
    assert_eq!(m5d.labels[labels::INSTANCE_LOCAL_NVME], "75");
    assert_eq!(m5d.labels[labels::INSTANCE_NETWORK_BANDWIDTH], "750");
    assert!(!m5d.labels.contains_key(labels::INSTANCE_EBS_BANDWIDTH));
    assert_eq!(m5d.capacity["pods"], q("29"));
    assert!(!m5d.capacity.contains_key("vpc.amazonaws.com/pod-eni"));
    // Several network cards: no single baseline, so no bandwidth label (not a sum).
    let c6in = c.get("c6in.32xlarge").unwrap();
    assert!(!c6in.labels.contains_key(labels::INSTANCE_NETWORK_BANDWIDTH));
    assert_eq!(
        c.get("c7i-flex.large").unwrap().labels[labels::INSTANCE_CAPABILITY_FLEX],
        "true"
    );
}

#[test]
fn accelerators_and_other_gpus_get_their_own_resources() {
    let c = catalog();
    let trn1 = c.get("trn1.2xlarge").unwrap();
    assert_eq!(trn1.labels[labels::INSTANCE_ACCELERATOR_NAME], "trainium");
    assert_eq!(
        trn1.labels[labels::INSTANCE_ACCELERATOR_MANUFACTURER],
        "aws"
    );
    assert_eq!(trn1.labels[labels::INSTANCE_ACCELERATOR_COUNT], "1");
    assert_eq!(trn1.capacity["aws.amazon.com/neuron"], q("1"));
    assert_eq!(trn1.capacity["aws.amazon.com/neuroncore"], q("2"));
    let inf2 = c.get("inf2.xlarge").unwrap();
    assert_eq!(
        inf2.labels[labels::INSTANCE_ACCELERATOR_NAME],
        "inferentia2"
    );
    // EC2's data describes Inferentia as an inference accelerator without Neuron info.
    assert!(!inf2.capacity.contains_key("aws.amazon.com/neuron"));
    let g4ad = c.get("g4ad.xlarge").unwrap();
    assert_eq!(g4ad.capacity["amd.com/gpu"], q("1"));
    assert!(!g4ad.capacity.contains_key("nvidia.com/gpu"));
    assert_eq!(g4ad.labels[labels::INSTANCE_GPU_NAME], "radeon-pro-v520");
    assert!(g4ad.gpu.is_none(), "no NVIDIA device plugin on AMD GPUs");
    assert_eq!(
        c.get("dl1.24xlarge").unwrap().capacity["habana.ai/gaudi"],
        q("8")
    );
    // g7e: NVIDIA GPUs without DRA metadata, served by the device plugin.
    let g7e = c.get("g7e.2xlarge").unwrap();
    assert_eq!(g7e.capacity["nvidia.com/gpu"], q("1"));
    assert_eq!(g7e.labels[labels::INSTANCE_GPU_NAME], "rtx-pro-server-6000");
    assert!(g7e.devices.is_none());
    assert_eq!(g7e.gpu.as_ref().unwrap().product_name, None);
}

#[test]
fn names_and_gpus_of_unusual_types() {
    let c = catalog();
    let b200 = c.get("p6-b200.48xlarge").unwrap();
    assert_eq!(b200.labels[labels::INSTANCE_FAMILY], "p6-b200");
    assert_eq!(b200.labels[labels::INSTANCE_CATEGORY], "p");
    assert_eq!(b200.labels[labels::INSTANCE_GENERATION], "6");
    assert_eq!(b200.capacity["nvidia.com/gpu"], q("8"));
    assert_eq!(b200.capacity["vpc.amazonaws.com/efa"], q("8"));
    let h100 = c.get("p5.48xlarge").unwrap().gpu.clone().unwrap();
    assert_eq!(h100.product_name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(h100.memory_mib, Some(81920));

    let gr6f = c.get("gr6f.4xlarge").unwrap();
    assert_eq!(gr6f.labels[labels::INSTANCE_CATEGORY], "gr");
    // Fractional vGPU: Karpenter counts no whole GPU, but labels the GPU it has.
    assert!(!gr6f.capacity.contains_key("nvidia.com/gpu"));
    assert_eq!(gr6f.labels[labels::INSTANCE_GPU_COUNT], "0");
    assert_eq!(gr6f.labels[labels::INSTANCE_GPU_NAME], "l4");
    assert_eq!(gr6f.gpu.as_ref().unwrap().devices, 1);
    // No spot price known: the on-demand price stands in as its bound, and says so.
    let spot = gr6f.offering("us-east-1a", CapacityType::Spot).unwrap();
    let od = gr6f.offering("us-east-1a", CapacityType::OnDemand).unwrap();
    assert_eq!(
        (spot.price, spot.price_basis),
        (od.price, PriceBasis::OnDemandBound)
    );

    let g5g = c.get("g5g.xlarge").unwrap();
    assert_eq!(g5g.labels[labels::ARCH], "arm64");
    assert_eq!(g5g.labels[labels::INSTANCE_CPU_MANUFACTURER], "aws");
    assert!(
        !c.get("g4dn.metal")
            .unwrap()
            .labels
            .contains_key(labels::INSTANCE_HYPERVISOR)
    );
    // i386 and x86_64: amd64.
    assert_eq!(c.get("t2.micro").unwrap().labels[labels::ARCH], "amd64");
}

#[test]
fn the_region_picks_zones_offerings_and_how_prices_are_known() {
    // EC2 offers p5e.48xlarge in neither us-east-1 zone; trn1.2xlarge only in 1c and 1f.
    let all = |region: &str, zones: &[&str]| {
        let zones: Vec<String> = zones.iter().map(|z| z.to_string()).collect();
        Catalog::builtin(region, &zones)
    };
    let c = catalog();
    assert!(c.get("p5e.48xlarge").unwrap().offerings.is_empty());
    let east = all("us-east-1", &["us-east-1a", "us-east-1c"]);
    let trn1 = east.get("trn1.2xlarge").unwrap();
    assert!(trn1.offerings.iter().all(|o| o.zone == "us-east-1c"));
    assert_eq!(trn1.offerings.len(), 2);

    let west = all("eu-west-1", &["eu-west-1a", "eu-west-1b"]);
    let m5 = west.get("m5.large").unwrap();
    assert_eq!(m5.labels[labels::REGION], "eu-west-1");
    let od = m5.offering("eu-west-1a", CapacityType::OnDemand).unwrap();
    assert_eq!(od.price, Price::from_usd(0.096).unwrap());
    assert_eq!(od.price_basis, PriceBasis::OtherRegion);
    assert!(od.available);
    // gr6f is not offered in eu-west-1.
    assert!(west.get("gr6f.4xlarge").unwrap().offerings.is_empty());
    // A type with no price anywhere is offered but not available, as Karpenter leaves it.
    let hpc = all("us-east-2", &["us-east-2a", "us-east-2b"]);
    let hpc7a = hpc.get("hpc7a.12xlarge").unwrap();
    // Only in us-east-2b, only on-demand.
    assert_eq!(hpc7a.offerings.len(), 1);
    assert!(
        hpc7a
            .offerings
            .iter()
            .all(|o| !o.available && o.price_basis == PriceBasis::Unknown)
    );
    // A region the data does not know: every type in every zone given, prices estimated.
    let mars = all("mars-north-1", &["mars-north-1a"]);
    assert_eq!(
        mars.get("p5e.48xlarge").unwrap().offerings.len(),
        2,
        "on-demand and spot, unpriced"
    );
    assert!(
        mars.get("m5.large")
            .unwrap()
            .offerings
            .iter()
            .all(|o| o.available)
    );
}

#[test]
fn raid0_puts_ephemeral_storage_on_the_instance_store() {
    let c = catalog();
    let shape = NodeShape {
        instance_store_raid0: true,
        ..NodeShape::default()
    };
    let m5d = c.get("m5d.large").unwrap();
    // Karpenter: the store's total size in decimal GB; eviction 10% of it, 1Gi kube-reserved.
    assert_eq!(
        m5d.capacity_for(&shape).unwrap()["ephemeral-storage"],
        q("75G")
    );
    let alloc = m5d.allocatable(&shape).unwrap();
    let want = 75_000_000_000i128 - (1 << 30) - 7_500_000_000;
    assert_eq!(alloc["ephemeral-storage"].nanos(), want * 1_000_000_000);
    // A type without an instance store keeps the root volume.
    let m5 = c.get("m5.large").unwrap();
    assert_eq!(
        m5.capacity_for(&shape).unwrap()["ephemeral-storage"],
        q("20Gi")
    );
}

#[test]
fn root_volume_and_kubelet_change_allocatable() {
    let c = catalog();
    let it = c.get("g4dn.xlarge").unwrap();
    let shape = NodeShape {
        kubelet: None,
        root_volume: Some(q("100Gi")),
        ..NodeShape::default()
    };
    // 100Gi - 1Gi kube-reserved - 10Gi eviction.
    assert_eq!(
        it.allocatable(&shape).unwrap()["ephemeral-storage"],
        q("89Gi")
    );

    let kubelet = KubeletConfiguration {
        max_pods: Some(110),
        ..Default::default()
    };
    let shape = NodeShape {
        kubelet: Some(&kubelet),
        root_volume: None,
        ..NodeShape::default()
    };
    let alloc = it.allocatable(&shape).unwrap();
    assert_eq!(alloc["pods"], q("110"));
    // AL2023 sizes kube-reserved memory by the ENI limit, not by maxPods.
    assert_eq!(alloc["memory"], q("14481Mi"));

    let kubelet = KubeletConfiguration {
        max_pods: Some(110),
        pods_per_core: Some(4),
        ..Default::default()
    };
    let shape = NodeShape {
        kubelet: Some(&kubelet),
        root_volume: None,
        ..NodeShape::default()
    };
    assert_eq!(it.allocatable(&shape).unwrap()["pods"], q("16"));
}

#[test]
fn kubelet_reservations_and_eviction_override_defaults() {
    let c = catalog();
    let it = c.get("m5.large").unwrap();
    let kubelet = KubeletConfiguration {
        kube_reserved: Some(strings(&[("cpu", "200m"), ("memory", "1Gi")])),
        system_reserved: Some(strings(&[("cpu", "100m")])),
        eviction_hard: Some(strings(&[
            ("memory.available", "5%"),
            ("nodefs.available", "1Gi"),
            ("imagefs.available", "15%"),
        ])),
        // Soft thresholds do not reduce allocatable.
        eviction_soft: Some(strings(&[("memory.available", "3Gi")])),
        ..Default::default()
    };
    let shape = NodeShape {
        kubelet: Some(&kubelet),
        root_volume: None,
        ..NodeShape::default()
    };
    let alloc = it.allocatable(&shape).unwrap();
    assert_eq!(alloc["cpu"], q("1700m"));
    // Capacity 8192 - 615 = 7577Mi; minus 1Gi; minus ceil(5% of 7577Mi) bytes.
    let capacity = 7577i128 << 20;
    let eviction = (capacity * 5 + 99) / 100;
    let want = capacity - (1 << 30) - eviction;
    assert_eq!(alloc["memory"].nanos(), want * 1_000_000_000);
    assert_eq!(alloc["ephemeral-storage"], q("18Gi"));
    // Ephemeral storage keeps the default kube-reserved 1Gi: only named entries are replaced.
    let overhead = it.overhead(&shape).unwrap();
    assert_eq!(overhead.kube_reserved["ephemeral-storage"], q("1Gi"));
    assert_eq!(overhead.system_reserved["cpu"], q("100m"));
}

#[test]
fn bad_kubelet_values_name_their_field() {
    let c = catalog();
    let it = c.get("m5.large").unwrap();
    let cases = [
        KubeletConfiguration {
            kube_reserved: Some(strings(&[("memory", "lots")])),
            ..Default::default()
        },
        KubeletConfiguration {
            eviction_hard: Some(strings(&[("nodefs.available", "110%")])),
            ..Default::default()
        },
        KubeletConfiguration {
            max_pods: Some(-1),
            ..Default::default()
        },
    ];
    let want = [
        "kubelet.kubeReserved.memory",
        "kubelet.evictionHard.nodefs.available",
        "kubelet.maxPods",
    ];
    for (kubelet, field) in cases.iter().zip(want) {
        let shape = NodeShape {
            kubelet: Some(kubelet),
            root_volume: None,
            ..NodeShape::default()
        };
        let err = it.allocatable(&shape).unwrap_err();
        assert_eq!(err.field(), field, "{err}");
        assert!(err.to_string().starts_with(field), "{err}");
    }
}

#[test]
fn user_types_add_to_and_replace_builtin_ones() {
    let mut c = catalog();
    let offering = Offering {
        zone: "us-east-1a".to_string(),
        capacity_type: CapacityType::Reserved,
        price: Price::ZERO,
        available: true,
        price_basis: PriceBasis::Listed,
    };
    let custom = user_instance_type(
        "x9gpu.2xlarge",
        "amd64",
        list(&[("cpu", "8"), ("memory", "64Gi"), ("nvidia.com/gpu", "2")]),
        Some(list(&[("cpu", "500m"), ("memory", "2Gi")])),
        strings(&[
            ("karpenter.k8s.aws/instance-gpu-name", "h100"),
            ("karpenter.k8s.aws/instance-gpu-memory", "81920"),
            ("example.com/team", "ml"),
        ]),
        vec![offering.clone()],
    );
    assert_eq!(custom.labels[labels::INSTANCE_CPU], "8");
    assert_eq!(custom.labels[labels::INSTANCE_MEMORY], "65536");
    assert_eq!(custom.labels[labels::INSTANCE_GPU_COUNT], "2");
    assert_eq!(custom.labels[labels::INSTANCE_CATEGORY], "x");
    assert_eq!(custom.labels[labels::INSTANCE_GENERATION], "9");
    assert_eq!(custom.labels["example.com/team"], "ml");
    let gpu = custom.gpu.clone().unwrap();
    assert_eq!(
        (gpu.count, gpu.name.as_str(), gpu.memory_mib),
        (2, "h100", Some(81920))
    );
    let alloc = custom.allocatable(&NodeShape::default()).unwrap();
    assert_eq!(alloc["cpu"], q("7500m"));
    assert_eq!(alloc["memory"], q("62Gi"));
    assert_eq!(alloc["pods"], q("110"));
    assert_eq!(alloc["ephemeral-storage"], q("20Gi"));
    // The node class's explicit kubelet reservations add to the stated overhead.
    let kubelet = KubeletConfiguration {
        system_reserved: Some(strings(&[("cpu", "100m")])),
        eviction_hard: Some(strings(&[("memory.available", "1Gi")])),
        ..Default::default()
    };
    let shape = NodeShape {
        kubelet: Some(&kubelet),
        root_volume: None,
        ..NodeShape::default()
    };
    let alloc = custom.allocatable(&shape).unwrap();
    assert_eq!(alloc["cpu"], q("7400m"));
    assert_eq!(alloc["memory"], q("61Gi"));
    assert_eq!(custom.overhead(&shape).unwrap().total()["cpu"], q("600m"));
    c.upsert(custom);
    assert_eq!(c.len(), 1256);
    assert!(c.types().windows(2).all(|w| w[0].name < w[1].name));

    // Replacing a built-in type by name; without an override Karpenter's model applies.
    let replaced = user_instance_type(
        "g4dn.xlarge",
        "amd64",
        list(&[("cpu", "4"), ("memory", "16Gi"), ("pods", "29")]),
        None,
        BTreeMap::new(),
        vec![offering],
    );
    c.upsert(replaced);
    assert_eq!(c.len(), 1256);
    let it = c.get("g4dn.xlarge").unwrap();
    assert_eq!(it.offerings[0].capacity_type, CapacityType::Reserved);
    assert!(it.gpu.is_none());
    assert!(it.devices.is_none(), "the caller attaches spec.devices");
    let alloc = it.allocatable(&NodeShape::default()).unwrap();
    // No VM overhead on user capacity: 16384 - 574 - 100.
    assert_eq!(alloc["memory"], q("15710Mi"));
    assert_eq!(alloc["cpu"], q("3920m"));
    assert!(c.remove("g4dn.xlarge").is_some());
    assert!(c.get("g4dn.xlarge").is_none());
}

#[test]
fn every_builtin_gpu_type_has_dra_templates_that_agree_with_its_gpu_info() {
    use devices::{DRANET_DRIVER, NVIDIA_GPU_DRIVER};
    let c = catalog();
    let mut with_templates = 0;
    for it in c.types() {
        let (Some(gpu), Some(t)) = (&it.gpu, &it.devices) else {
            assert!(it.devices.is_none(), "{}", it.name);
            // The NVIDIA types without DRA metadata are the g7e family.
            if it.gpu.is_some() {
                assert!(it.name.starts_with("g7e."), "{}", it.name);
            }
            continue;
        };
        with_templates += 1;
        let gpus: Vec<_> = t
            .pools_of(NVIDIA_GPU_DRIVER)
            .flat_map(|p| &p.devices)
            .collect();
        assert_eq!(gpus.len(), gpu.devices as usize, "{}", it.name);
        let efas = t.pools_of(DRANET_DRIVER).flat_map(|p| &p.devices).count();
        assert_eq!(
            efas as i128 * 1_000_000_000,
            it.capacity_of(resources::EFA).nanos(),
            "{}",
            it.name
        );
        for d in gpus {
            let a = d.attributes.as_ref().unwrap();
            let product = a["productName"].string.as_deref();
            assert_eq!(product, gpu.product_name.as_deref(), "{}", it.name);
            let (major, minor) = gpu.compute_capability.unwrap();
            let version = a["cudaComputeCapability"].version.as_deref();
            assert_eq!(
                version,
                Some(format!("{major}.{minor}.0").as_str()),
                "{}",
                it.name
            );
        }
    }
    assert_eq!(with_templates, 53);
    assert_eq!(
        devices::builtin_templates("p5.48xlarge"),
        c.get("p5.48xlarge").unwrap().devices
    );
}

#[test]
fn capacity_type_labels() {
    for c in CapacityType::ALL {
        assert_eq!(CapacityType::parse(c.as_str()), Some(c));
    }
    assert_eq!(CapacityType::OnDemand.to_string(), "on-demand");
    assert_eq!(CapacityType::parse("capacity-block"), None);
    assert!(Catalog::empty().is_empty());
}

/// What the cloud sells replaces the built-in offerings: its prices, its zones, the basis it
/// gives each price, and nothing for a type it does not list. A live price equal to the
/// built-in figure is still a live price.
#[test]
fn the_clouds_offerings_replace_the_built_in_ones() {
    let mut c = catalog();
    let g4 = c.get("g4dn.xlarge").unwrap();
    let spot = g4
        .offerings
        .iter()
        .find(|o| o.capacity_type == CapacityType::Spot)
        .unwrap()
        .clone();
    assert_eq!(spot.price_basis, PriceBasis::SpotSnapshot);
    let cheaper = Offering {
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::OnDemand,
        price: Price::from_usd(0.40).unwrap(),
        available: true,
        price_basis: PriceBasis::Listed,
    };
    // EC2's spot history gave the snapshot's very figure: a live price all the same.
    let live_equal = Offering {
        price_basis: PriceBasis::Listed,
        ..spot.clone()
    };
    // EC2 reported no spot price in this zone, so the cloud fell back on the stand-in.
    let fallback = Offering {
        zone: "us-east-1b".into(),
        ..spot.clone()
    };
    c.sell_as(&BTreeMap::from([(
        "g4dn.xlarge".to_string(),
        vec![cheaper.clone(), live_equal.clone(), fallback.clone()],
    )]));
    let g4 = c.get("g4dn.xlarge").unwrap();
    assert_eq!(g4.offerings, vec![cheaper, live_equal, fallback]);
    assert_eq!(g4.offerings[1].price_basis, PriceBasis::Listed);
    assert_eq!(g4.offerings[2].price_basis, PriceBasis::SpotSnapshot);
    assert!(c.get("g5.xlarge").unwrap().offerings.is_empty());
}

/// An EC2NodeClass's `networkInterfaces` as Karpenter applies them: the EFA-only interfaces are
/// the node's EFAs, one on the default card takes that card's addresses from pods, and a type
/// whose cards cannot take the layout is not offered.
#[test]
fn network_interfaces_set_efas_and_pods_and_rule_out_types() {
    use joiner_model::api::ec2nodeclass::NetworkInterface;
    let nic = |card: i32, device: i32, kind: &str| NetworkInterface {
        network_card_index: card,
        device_index: device,
        interface_type: kind.into(),
    };
    let c = catalog();
    let p5 = c.get("p5.48xlarge").expect("p5");
    assert_eq!(p5.capacity_of("vpc.amazonaws.com/efa"), q("32"));
    assert_eq!(p5.capacity_of("pods"), q("100"));
    // A primary interface, an EFA-only one beside it on card 0, and one on each other card.
    let mut layout = vec![nic(0, 0, "interface"), nic(0, 1, "efa-only")];
    layout.extend((1..32).map(|card| nic(card, 0, "efa-only")));
    let shape = NodeShape {
        interfaces: &layout,
        ..NodeShape::default()
    };
    assert!(p5.takes_interfaces(&layout));
    let capacity = p5.capacity_for(&shape).expect("capacity");
    assert_eq!(capacity["vpc.amazonaws.com/efa"], q("32"));
    // Card 0 has 2 interfaces of 50 addresses: one left for pods, 1 x 49 + 2.
    assert_eq!(capacity["pods"], q("51"));
    // Only a primary interface: no EFA at all.
    let plain = [nic(0, 0, "interface")];
    let capacity = p5
        .capacity_for(&NodeShape {
            interfaces: &plain,
            ..NodeShape::default()
        })
        .expect("capacity");
    assert!(!capacity.contains_key("vpc.amazonaws.com/efa"));
    assert_eq!(capacity["pods"], q("100"));
    // A one-card type cannot take an interface on card 1, nor an EFA it does not have.
    let g4 = c.get("g4dn.xlarge").expect("g4dn");
    assert!(!g4.takes_interfaces(&[nic(0, 0, "interface"), nic(1, 0, "efa-only")]));
    assert!(!g4.takes_interfaces(&[nic(0, 0, "interface"), nic(0, 1, "efa-only")]));
    assert!(g4.takes_interfaces(&plain));
}
