use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use joiner_model::api::InstanceType as SpecType;
use joiner_model::wellknown::annotations;
use k8s_openapi::api::resource::v1::{Device, DeviceAttribute, ResourceSlice};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;

fn builtin(name: &str) -> Arc<DeviceTemplates> {
    builtin_templates(name).unwrap_or_else(|| panic!("{name} has no templates"))
}

fn attr<'a>(d: &'a Device, name: &str) -> &'a DeviceAttribute {
    d.attributes
        .as_ref()
        .and_then(|a| a.get(name))
        .unwrap_or_else(|| panic!("{} has no {name}", d.name))
}

fn string_attr<'a>(d: &'a Device, name: &str) -> &'a str {
    attr(d, name).string.as_deref().unwrap()
}

fn capacity<'a>(d: &'a Device, name: &str) -> &'a k8s_openapi::api::resource::v1::DeviceCapacity {
    d.capacity.as_ref().and_then(|c| c.get(name)).unwrap()
}

fn names(devices: &[Device]) -> Vec<&str> {
    devices.iter().map(|d| d.name.as_str()).collect()
}

fn all() -> TemplateOptions {
    TemplateOptions {
        nvidia_gpu: true,
        efa: true,
        consumable: ConsumableCapacity::Disabled,
        dynamic_mig: false,
    }
}

fn devices_of(slice: &ResourceSlice) -> &[Device] {
    slice.spec.devices.as_deref().unwrap_or_default()
}

#[test]
fn p5_48xlarge_has_8_gpus_and_32_efas_paired_by_pcie_root() {
    let t = builtin("p5.48xlarge");
    let gpus = t.pools_of(NVIDIA_GPU_DRIVER).next().unwrap();
    let efas = t.pools_of(DRANET_DRIVER).next().unwrap();
    assert_eq!(t.pools.len(), 2);
    assert_eq!(
        (gpus.pool.as_str(), efas.pool.as_str()),
        (GPU_POOL, EFA_POOL)
    );
    let gpu_names: Vec<String> = (0..8).map(|i| format!("gpu-{i}")).collect();
    assert_eq!(names(&gpus.devices), gpu_names);
    assert_eq!(efas.devices.len(), 32);
    assert_eq!(efas.devices[31].name, "efa-31");
    for gpu in &gpus.devices {
        assert_eq!(string_attr(gpu, "productName"), "NVIDIA H100 80GB HBM3");
        assert_eq!(string_attr(gpu, "architecture"), "Hopper");
        assert_eq!(string_attr(gpu, "brand"), "Nvidia");
        assert_eq!(string_attr(gpu, "type"), "gpu");
        assert_eq!(
            attr(gpu, "cudaComputeCapability").version.as_deref(),
            Some("9.0.0")
        );
        assert_eq!(capacity(gpu, "memory").value.0, "81152Mi");
        assert!(capacity(gpu, "memory").request_policy.is_none());
        let root = string_attr(gpu, PCIE_ROOT);
        let same_root = efas
            .devices
            .iter()
            .filter(|e| string_attr(e, PCIE_ROOT) == root)
            .count();
        assert_eq!(same_root, 4, "{} on {root}", gpu.name);
    }
    let roots: BTreeSet<&str> = gpus
        .devices
        .iter()
        .map(|g| string_attr(g, PCIE_ROOT))
        .collect();
    assert_eq!(roots.len(), 8, "each GPU on its own root");
    let efa0 = &efas.devices[0];
    assert_eq!(
        string_attr(efa0, "dra.net/pciDevice"),
        "Elastic Fabric Adapter (EFA)"
    );
    assert_eq!(string_attr(efa0, "dra.net/pciVendor"), "Amazon.com, Inc.");
    assert_eq!(string_attr(efa0, "dra.net/pciSubsystem"), "efa1");
    assert_eq!(attr(efa0, "dra.net/rdma").bool, Some(true));
    assert_eq!(attr(efa0, "dra.net/numaNode").int, Some(0));
    assert!(efa0.capacity.is_none());
    let runtime: Vec<_> = t.runtime_attribute_names().collect();
    assert_eq!(
        runtime,
        [
            (NVIDIA_GPU_DRIVER, "driverVersion"),
            (NVIDIA_GPU_DRIVER, "cudaDriverVersion")
        ]
    );
    assert!(t.runtime_attributes.iter().all(|r| r.devices == gpu_names));
    assert!(t.is_runtime_attribute(NVIDIA_GPU_DRIVER, "gpu.nvidia.com/driverVersion"));
    assert!(!t.is_runtime_attribute(NVIDIA_GPU_DRIVER, "productName"));
}

#[test]
fn g6_xlarge_has_one_gpu_and_no_efa() {
    let t = builtin("g6.xlarge");
    assert_eq!(t.pools.len(), 1);
    let gpus = &t.pools[0];
    assert_eq!(names(&gpus.devices), ["gpu-0"]);
    let gpu = &gpus.devices[0];
    assert_eq!(string_attr(gpu, "productName"), "NVIDIA L4");
    assert_eq!(string_attr(gpu, "architecture"), "Ada Lovelace");
    assert_eq!(
        attr(gpu, "cudaComputeCapability").version.as_deref(),
        Some("8.9.0")
    );
    assert_eq!(capacity(gpu, "memory").value.0, "23034Mi");
    assert_eq!(t.runtime_attributes[0].devices, ["gpu-0"]);
    assert!(builtin_templates("m5.large").is_none());
    assert!(builtin_templates("no-such.type").is_none());
}

#[test]
fn g6f_fractional_types_publish_one_vgpu() {
    let fractional: Vec<_> = builtin::raw_types()
        .iter()
        .filter(|r| r.name.starts_with("g6f.") || r.name.starts_with("gr6f."))
        .collect();
    assert!(fractional.len() >= 4, "{}", fractional.len());
    for raw in fractional {
        let t = builtin(&raw.name);
        let gpus = t.pools_of(NVIDIA_GPU_DRIVER).next().unwrap();
        assert_eq!(gpus.devices.len(), 1, "{}", raw.name);
        let gpu = &gpus.devices[0];
        assert_eq!(string_attr(gpu, "brand"), "NvidiaVWS", "{}", raw.name);
        assert!(string_attr(gpu, "productName").starts_with("NVIDIA L4-"));
        let memory = capacity(gpu, "memory").value.0.as_str();
        assert!(
            ["3Gi", "6Gi", "12Gi"].contains(&memory),
            "{}: {memory}",
            raw.name
        );
    }
    let t = builtin("g6f.xlarge");
    let gpu = &t.pools[0].devices[0];
    assert_eq!(string_attr(gpu, "productName"), "NVIDIA L4-3Q");
    assert_eq!(capacity(gpu, "memory").value.0, "3Gi");
}

#[test]
fn attributes_keep_their_types_through_json() {
    let slices = builtin("p5.48xlarge").node_slices("n", &all());
    let json = serde_json::to_value(&slices).unwrap();
    let gpu = &json[0]["spec"]["devices"][0];
    assert_eq!(
        gpu["attributes"]["cudaComputeCapability"],
        serde_json::json!({"version": "9.0.0"})
    );
    assert_eq!(
        gpu["attributes"]["productName"],
        serde_json::json!({"string": "NVIDIA H100 80GB HBM3"})
    );
    assert_eq!(
        gpu["attributes"]["resource.kubernetes.io/pcieRoot"],
        serde_json::json!({"string": "pci0000:44"})
    );
    assert_eq!(
        gpu["attributes"]["driverVersion"],
        serde_json::json!({"string": RUNTIME_PLACEHOLDER})
    );
    assert_eq!(
        gpu["capacity"]["memory"],
        serde_json::json!({"value": "81152Mi"})
    );
    let efa = &json[1]["spec"]["devices"][0];
    assert_eq!(
        efa["attributes"]["dra.net/rdma"],
        serde_json::json!({"bool": true})
    );
    assert_eq!(
        efa["attributes"]["dra.net/numaNode"],
        serde_json::json!({"int": 0})
    );
    assert_eq!(
        json[0]["spec"]["pool"],
        serde_json::json!({"name": "n", "generation": 0, "resourceSliceCount": 1})
    );
    let back: Vec<ResourceSlice> = serde_json::from_value(json).unwrap();
    assert_eq!(back, slices);
}

#[test]
fn numa_node_is_left_out_where_unknown() {
    let t = builtin("g4dn.8xlarge");
    let efa = &t.pools_of(DRANET_DRIVER).next().unwrap().devices[0];
    assert!(
        !efa.attributes
            .as_ref()
            .unwrap()
            .contains_key("dra.net/numaNode")
    );
    let metal = builtin("g4dn.metal");
    let efa = &metal.pools_of(DRANET_DRIVER).next().unwrap().devices[0];
    assert_eq!(attr(efa, "dra.net/rdma").bool, Some(false));
}

#[test]
fn consumable_capacity_parses_the_drivers_values() {
    use ConsumableCapacity::*;
    for (value, want) in [
        ("", Disabled),
        ("disabled", Disabled),
        ("memory", Memory),
        ("unlimited", Unlimited),
        ("1", Shares(1)),
        ("8", Shares(8)),
    ] {
        assert_eq!(ConsumableCapacity::parse(value), Ok(want), "{value:?}");
    }
    for bad in [
        "0",
        "-1",
        "1.5",
        " 4",
        "Memory",
        "DISABLED",
        "shares",
        "4294967296",
        "x",
    ] {
        let e = ConsumableCapacity::parse(bad).unwrap_err();
        assert_eq!(e.value, bad);
        assert!(e.to_string().contains("positive whole number"), "{e}");
    }
    let mut annotations = BTreeMap::new();
    assert_eq!(ConsumableCapacity::from_annotations(None), Ok(Disabled));
    assert_eq!(
        ConsumableCapacity::from_annotations(Some(&annotations)),
        Ok(Disabled)
    );
    annotations.insert(
        annotations::NVIDIA_CONSUMABLE_CAPACITY.to_string(),
        "4".to_string(),
    );
    assert_eq!(
        ConsumableCapacity::from_annotations(Some(&annotations)),
        Ok(Shares(4))
    );
}

/// (default, min, max, step) of a capacity's request policy.
fn policy(d: &Device, name: &str) -> (String, String, String, String) {
    let p = capacity(d, name).request_policy.as_ref().unwrap();
    let r = p.valid_range.as_ref().unwrap();
    let s = |q: &Option<Quantity>| q.as_ref().unwrap().0.clone();
    (s(&p.default), r.min.0.clone(), s(&r.max), s(&r.step))
}

fn gpu_with(mode: ConsumableCapacity) -> (Device, Device) {
    let opts = TemplateOptions {
        consumable: mode,
        ..all()
    };
    let slices = builtin("p5.48xlarge").node_slices("n", &opts);
    (
        devices_of(&slices[0])[0].clone(),
        devices_of(&slices[1])[0].clone(),
    )
}

fn strings4(a: &str, b: &str, c: &str, d: &str) -> (String, String, String, String) {
    (a.into(), b.into(), c.into(), d.into())
}

#[test]
fn disabled_gpus_serve_one_claim() {
    let (gpu, _) = gpu_with(ConsumableCapacity::Disabled);
    assert_eq!(gpu.allow_multiple_allocations, None);
    assert!(capacity(&gpu, "memory").request_policy.is_none());
    assert_eq!(gpu.capacity.as_ref().unwrap().len(), 1);
}

#[test]
fn shares_add_a_shares_capacity_and_zero_memory_default() {
    let (gpu, efa) = gpu_with(ConsumableCapacity::Shares(4));
    assert_eq!(gpu.allow_multiple_allocations, Some(true));
    assert_eq!(capacity(&gpu, "shares").value.0, "4");
    assert_eq!(policy(&gpu, "shares"), strings4("1", "1", "4", "1"));
    assert_eq!(policy(&gpu, "memory"), strings4("0", "0", "81152Mi", "1Mi"));
    assert_eq!(
        efa.allow_multiple_allocations, None,
        "EFAs are never shared"
    );
}

#[test]
fn memory_mode_defaults_to_the_whole_gpu() {
    let (gpu, _) = gpu_with(ConsumableCapacity::Memory);
    assert_eq!(gpu.allow_multiple_allocations, Some(true));
    assert_eq!(
        policy(&gpu, "memory"),
        strings4("81152Mi", "1Mi", "81152Mi", "1Mi")
    );
    assert!(!gpu.capacity.as_ref().unwrap().contains_key("shares"));
}

#[test]
fn unlimited_mode_defaults_to_no_memory() {
    let (gpu, _) = gpu_with(ConsumableCapacity::Unlimited);
    assert_eq!(gpu.allow_multiple_allocations, Some(true));
    assert_eq!(policy(&gpu, "memory"), strings4("0", "0", "81152Mi", "1Mi"));
    assert!(!gpu.capacity.as_ref().unwrap().contains_key("shares"));
}

#[test]
fn node_slices_honour_the_driver_switches() {
    let t = builtin("p5.48xlarge");
    let drivers = |nvidia_gpu, efa| -> Vec<String> {
        let opts = TemplateOptions {
            nvidia_gpu,
            efa,
            consumable: ConsumableCapacity::Disabled,
            dynamic_mig: false,
        };
        t.node_slices("node-a", &opts)
            .into_iter()
            .map(|s| s.spec.driver)
            .collect()
    };
    assert_eq!(drivers(true, true), [NVIDIA_GPU_DRIVER, DRANET_DRIVER]);
    assert_eq!(drivers(true, false), [NVIDIA_GPU_DRIVER]);
    assert_eq!(drivers(false, true), [DRANET_DRIVER]);
    assert!(drivers(false, false).is_empty());

    let slices = t.node_slices("node-a", &all());
    for s in &slices {
        assert_eq!(s.spec.node_name.as_deref(), Some("node-a"));
        assert_eq!(s.spec.pool.name, "node-a");
        assert_eq!(
            (s.spec.pool.generation, s.spec.pool.resource_slice_count),
            (0, 1)
        );
        assert!(s.spec.shared_counters.is_none());
        assert!(s.metadata.name.as_deref().unwrap().starts_with("node-a-"));
    }
    assert_eq!(devices_of(&slices[0]).len(), 8);
    assert_eq!(devices_of(&slices[1]).len(), 32);
    for gpu in devices_of(&slices[0]) {
        assert_eq!(string_attr(gpu, "driverVersion"), RUNTIME_PLACEHOLDER);
        assert_eq!(string_attr(gpu, "cudaDriverVersion"), RUNTIME_PLACEHOLDER);
    }
    let efa = &devices_of(&slices[1])[0];
    assert!(
        !efa.attributes
            .as_ref()
            .unwrap()
            .contains_key("driverVersion")
    );
    // The template itself is untouched.
    assert!(
        !t.pools[0].devices[0]
            .attributes
            .as_ref()
            .unwrap()
            .contains_key("driverVersion")
    );
}

const USER: &str = r#"
apiVersion: joiner.dev/v1alpha1
kind: InstanceType
metadata: {name: x100.8xlarge}
spec:
  capacity: {cpu: "8", memory: 32Gi, pods: "110"}
  offerings: [{zone: us-east-1a, capacityType: on-demand, price: 1.5}]
  devices:
  - driver: gpu.nvidia.com
    devices:
    - name: gpu-0
      attributes: {productName: {string: X100}, cudaComputeCapability: {version: 9.0.0}}
      capacity: {memory: {value: 80Gi}}
    - name: gpu-1
      attributes: {productName: {string: X100}}
      capacity: {memory: {value: 80Gi}}
  - driver: fpga.example.com
    pool: "{node}-fpgas"
    sharedCounters:
    - name: fabric
      counters: {lanes: {value: "8"}}
    devices:
    - name: fpga-0
      consumesCounters: [{counterSet: fabric, counters: {lanes: {value: "4"}}}]
  runtimeAttributes:
  - {driver: gpu.nvidia.com, attribute: driverVersion}
  - {driver: fpga.example.com, attribute: bitstream, devices: [fpga-0]}
"#;

fn spec(yaml: &str) -> SpecType {
    let v: serde_json::Value = serde_saphyr::from_str(yaml).unwrap();
    serde_json::from_value(v).unwrap()
}

fn from_yaml(yaml: &str) -> Result<DeviceTemplates, joiner_model::api::FieldError> {
    let s = spec(yaml);
    DeviceTemplates::from_spec(&s.spec.devices, &s.spec.runtime_attributes)
}

#[test]
fn user_defined_templates_are_built_from_the_spec() {
    let t = from_yaml(USER).unwrap();
    assert_eq!(t.pools.len(), 2);
    assert_eq!(
        t.pools[0].pool, "{node}",
        "pool defaults to the node's name, as node-local drivers publish it"
    );
    assert_eq!(t.pools[1].pool, "{node}-fpgas");
    assert_eq!(t.pools[1].shared_counters[0].name, "fabric");
    assert_eq!(
        t.runtime_attributes[0].devices,
        ["gpu-0", "gpu-1"],
        "empty means all"
    );
    assert_eq!(t.runtime_attributes[1].devices, ["fpga-0"]);

    let opts = TemplateOptions {
        consumable: ConsumableCapacity::Shares(2),
        ..TemplateOptions::default()
    };
    let slices = t.node_slices("claim-1", &opts);
    assert_eq!(
        slices.len(),
        1,
        "gpu.nvidia.com is switched off; other drivers always run"
    );
    assert_eq!(slices[0].spec.driver, "fpga.example.com");
    assert_eq!(
        slices[0].spec.pool.name, "claim-1-fpgas",
        "as the template declares it"
    );
    assert_eq!(
        slices[0].spec.shared_counters.as_ref().unwrap()[0].name,
        "fabric"
    );
    let fpga = &devices_of(&slices[0])[0];
    assert_eq!(string_attr(fpga, "bitstream"), RUNTIME_PLACEHOLDER);
    assert_eq!(
        fpga.allow_multiple_allocations, None,
        "sharing is for NVIDIA GPUs only"
    );

    let slices = t.node_slices(
        "claim-1",
        &TemplateOptions {
            nvidia_gpu: true,
            ..opts
        },
    );
    let gpu = &devices_of(&slices[0])[1];
    assert_eq!(gpu.allow_multiple_allocations, Some(true));
    assert_eq!(capacity(gpu, "shares").value.0, "2");
    assert_eq!(string_attr(gpu, "driverVersion"), RUNTIME_PLACEHOLDER);
}

#[test]
fn several_pools_of_one_driver_get_distinct_node_pools() {
    let yaml = USER
        .replace(
            "driver: fpga.example.com\n    pool: \"{node}-fpgas\"",
            "driver: gpu.nvidia.com\n    pool: \"{node}-fpgas\"",
        )
        .replace(
            "{driver: fpga.example.com, attribute: bitstream",
            "{driver: gpu.nvidia.com, attribute: bitstream",
        );
    let t = from_yaml(&yaml).unwrap();
    let slices = t.node_slices("n1", &all());
    let pools: Vec<&str> = slices.iter().map(|s| s.spec.pool.name.as_str()).collect();
    assert_eq!(
        pools,
        ["n1", "n1-fpgas"],
        "each as its template declares it"
    );
}

#[test]
fn user_defined_templates_are_checked() {
    let cases = [
        (
            "- name: gpu-1",
            "- name: gpu-0",
            "spec.devices[0].devices[1].name",
            "twice",
        ),
        (
            "- name: gpu-1",
            "- name: \"\"",
            "spec.devices[0].devices[1].name",
            "empty",
        ),
        (
            "- driver: fpga.example.com",
            "- driver: \"\"",
            "spec.devices[1].driver",
            "empty",
        ),
        (
            "counterSet: fabric",
            "counterSet: nope",
            "spec.devices[1].devices[0].consumesCounters[0].counterSet",
            "nope",
        ),
        (
            "devices: [fpga-0]",
            "devices: [fpga-9]",
            "spec.runtimeAttributes[1].devices[0]",
            "fpga-9",
        ),
        (
            "{driver: gpu.nvidia.com, attribute: driverVersion}",
            "{driver: tpu.example.com, attribute: driverVersion}",
            "spec.runtimeAttributes[0].driver",
            "tpu.example.com",
        ),
        (
            "attribute: driverVersion}",
            "attribute: productName}",
            "spec.runtimeAttributes[0].attribute",
            "value",
        ),
        (
            "attribute: driverVersion}",
            "attribute: gpu.nvidia.com/productName}",
            "spec.runtimeAttributes[0].attribute",
            "value",
        ),
        (
            "attribute: driverVersion}",
            "attribute: \"\"}",
            "spec.runtimeAttributes[0].attribute",
            "empty",
        ),
    ];
    for (from, to, field, words) in cases {
        let yaml = USER.replace(from, to);
        assert_ne!(yaml, USER, "{from}");
        let e = from_yaml(&yaml).unwrap_err();
        assert_eq!(e.field, field, "{to}: {e}");
        assert!(e.message.contains(words), "{to}: {e}");
    }
    let dup_pool = USER.replace(
        "driver: fpga.example.com\n    pool: \"{node}-fpgas\"",
        "driver: gpu.nvidia.com",
    );
    let e = from_yaml(&dup_pool).unwrap_err();
    assert_eq!(e.field, "spec.devices[1].pool");
    assert!(e.message.contains("twice"), "{e}");
    let fixed_pool = USER.replace("pool: \"{node}-fpgas\"", "pool: fpgas");
    let e = from_yaml(&fixed_pool).unwrap_err();
    assert_eq!(e.field, "spec.devices[1].pool");
    assert!(e.message.contains("{node}"), "{e}");
}

#[test]
fn no_devices_make_empty_templates() {
    let t = DeviceTemplates::from_spec(&[], &[]).unwrap();
    assert!(t.is_empty());
    assert!(t.node_slices("n", &all()).is_empty());
}

#[test]
fn default_device_classes_are_the_charts() {
    let classes = default_device_classes();
    let expr = |i: usize| -> &str {
        let spec = joiner_model::dra::class_spec(&classes[i]);
        &spec.selectors.as_ref().unwrap()[0]
            .cel
            .as_ref()
            .unwrap()
            .expression
    };
    assert_eq!(classes[0].metadata.name.as_deref(), Some(GPU_DEVICE_CLASS));
    assert_eq!(
        expr(0),
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
    );
    assert_eq!(
        joiner_model::dra::class_spec(&classes[0])
            .extended_resource_name
            .as_deref(),
        Some("nvidia.com/gpu")
    );
    assert_eq!(classes[1].metadata.name.as_deref(), Some(MIG_DEVICE_CLASS));
    assert_eq!(
        expr(1),
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
    );
    assert_eq!(classes[2].metadata.name.as_deref(), Some(EFA_DEVICE_CLASS));
    assert!(expr(2).contains("device.driver == \"dra.net\""));
    assert!(expr(2).contains("pciDevice == 'Elastic Fabric Adapter (EFA)'"));
}
