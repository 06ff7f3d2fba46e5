use super::*;
use crate::catalog::devices::builtin_templates;
use crate::catalog::mig::{MigConfig, mig_gpu};

fn a100() -> &'static MigGpu {
    mig_gpu("NVIDIA A100-SXM4-40GB").expect("A100")
}

fn gpu_devices(t: &DeviceTemplates) -> Vec<&Device> {
    t.pools_of(NVIDIA_GPU_DRIVER)
        .flat_map(|p| p.devices.iter())
        .collect()
}

fn attribute<'a>(d: &'a Device, key: &str) -> Option<&'a str> {
    d.attributes.as_ref()?.get(key)?.string.as_deref()
}

/// NVIDIA's `half-balanced`: the first four GPUs split, the others whole.
fn half_balanced() -> NodeMigLayout {
    let Some(MigConfig::Enabled(balanced)) = a100().default_config("all-balanced") else {
        panic!("all-balanced");
    };
    let mut layout = NodeMigLayout::uniform(8, balanced);
    for gpu in &mut layout.gpus[4..] {
        *gpu = None;
    }
    layout
}

#[test]
fn a_split_gpu_publishes_its_mig_instances_and_no_whole_device() {
    let p4d = builtin_templates("p4d.24xlarge").expect("p4d templates");
    let split = p4d.with_static_mig(a100(), &half_balanced());
    let devices = gpu_devices(&split);
    let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
    // Four instances on each of four GPUs, and four whole GPUs.
    assert_eq!(devices.len(), 4 * 4 + 4, "{names:?}");
    assert!(!names.contains(&"gpu-0") && names.contains(&"gpu-4"));
    // The driver's names: profile without dots, GPU-instance profile ID, first memory slice.
    for name in [
        "gpu-0-mig-3g20gb-9-4",
        "gpu-0-mig-2g10gb-14-0",
        "gpu-0-mig-1g5gb-19-2",
        "gpu-0-mig-1g5gb-19-3",
    ] {
        assert!(names.contains(&name), "{name} not in {names:?}");
    }
    let three = devices
        .iter()
        .find(|d| d.name == "gpu-1-mig-3g20gb-9-4")
        .expect("3g on gpu-1");
    assert_eq!(attribute(three, "type"), Some("mig"));
    assert_eq!(attribute(three, "profile"), Some("3g.20gb"));
    assert_eq!(
        attribute(three, "productName"),
        Some("NVIDIA A100-SXM4-40GB")
    );
    assert_eq!(attribute(three, "parentUUID"), Some("<runtime>gpu-1"));
    let capacity = three.capacity.as_ref().expect("capacity");
    assert_eq!(capacity["memory"].value.0, "20G");
    let slices: Vec<&String> = capacity
        .keys()
        .filter(|k| k.starts_with("memorySlice"))
        .collect();
    assert_eq!(
        slices,
        [
            "memorySlice4",
            "memorySlice5",
            "memorySlice6",
            "memorySlice7"
        ]
    );
    // The driver version is known only once the node runs, on MIG devices as on GPUs.
    let runtime = &split.runtime_attributes[0];
    assert!(
        runtime
            .devices
            .contains(&"gpu-1-mig-3g20gb-9-4".to_string())
    );
    assert!(!runtime.devices.contains(&"gpu-1".to_string()));
    // Other drivers' devices are untouched.
    assert_eq!(
        split
            .pools_of(super::super::DRANET_DRIVER)
            .map(|p| p.devices.len())
            .sum::<usize>(),
        p4d.pools_of(super::super::DRANET_DRIVER)
            .map(|p| p.devices.len())
            .sum::<usize>()
    );
}

#[test]
fn dynamic_mig_publishes_every_placement_against_the_gpus_counters() {
    let p4d = builtin_templates("p4d.24xlarge").expect("p4d templates");
    let dynamic = p4d.with_dynamic_mig(a100());
    let devices = gpu_devices(&dynamic);
    // Per GPU: the whole GPU, 7 + 7 (+me) 1g.5gb, 4 1g.10gb, 3 2g, 2 3g, one 4g and one 7g.
    assert_eq!(devices.len(), 8 * 26);
    let pool = dynamic.pools_of(NVIDIA_GPU_DRIVER).next().expect("pool");
    assert_eq!(pool.shared_counters.len(), 8);
    assert_eq!(pool.shared_counters[0].name, "gpu-0-counter-set");
    assert_eq!(pool.shared_counters[0].counters.len(), 9);
    let takes = |name: &str| -> Vec<String> {
        let d = devices.iter().find(|d| d.name == name).expect(name);
        let c = &d.consumes_counters.as_ref().expect("consumes")[0];
        assert_eq!(c.counter_set, "gpu-2-counter-set");
        c.counters.keys().cloned().collect()
    };
    assert_eq!(takes("gpu-2-mig-1g5gb-19-3"), ["memory-slice-3"]);
    assert_eq!(
        takes("gpu-2-mig-1g5gb-me-20-3"),
        ["memory-slice-3", "ofa-engines"]
    );
    assert_eq!(
        takes("gpu-2-mig-3g20gb-9-4"),
        [
            "memory-slice-4",
            "memory-slice-5",
            "memory-slice-6",
            "memory-slice-7"
        ]
    );
    // The whole GPU takes every counter, so it and any MIG device exclude each other.
    assert_eq!(takes("gpu-2").len(), 9);
}
