use std::collections::BTreeMap;

use joiner_model::wellknown::labels;
use joiner_model::{Quantity, Source};
use k8s_openapi::api::core::v1::ConfigMap;

use super::*;
use crate::catalog::Catalog;

fn config_map(yaml: &str) -> ConfigMap {
    let value: serde_json::Value = serde_saphyr::from_str(yaml).unwrap();
    serde_json::from_value(value).unwrap()
}

fn origin() -> Source {
    Source::new("device-plugin-config.yaml", 1)
}

fn configs(yaml: &str, default: Option<&str>) -> DevicePluginConfigs {
    let configs = DevicePluginConfigs::from_config_map(&config_map(yaml), default, &origin());
    assert_eq!(configs.errors().count(), 0, "{configs:?}");
    configs
}

fn error(yaml: &str) -> joiner_model::InputError {
    let configs = DevicePluginConfigs::from_config_map(&config_map(yaml), None, &origin());
    let errors: Vec<_> = configs.errors().cloned().collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    errors[0].clone()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The learning lab's ConfigMap (examples/time-slicing-learning-lab/device-plugin-config.yaml).
const LEARNING_LAB: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: nvidia-device-plugin
  namespace: kube-system
data:
  any: |-
    version: v1
    flags:
      migStrategy: none
    sharing:
      timeSlicing:
        resources:
        - name: nvidia.com/gpu
          replicas: 3
"#;

#[test]
fn learning_lab_g4dn_xlarge_advertises_three_gpus() {
    let configs = configs(LEARNING_LAB, None);
    let node_labels = BTreeMap::new();
    let selection = configs.select(&node_labels);
    let Selection::Config { key, config, by } = selection else {
        panic!("{selection:?}");
    };
    assert_eq!((key, by), ("any", SelectedBy::OnlyKey));

    let catalog = Catalog::builtin("us-east-1", &["us-east-1a".to_string()]);
    let it = catalog.get("g4dn.xlarge").unwrap();
    let gpus = NodeGpus::of(it.gpu.as_ref().unwrap(), &it.name);
    let out = node_resources(&gpus, Some(config));
    assert_eq!(out.resources["nvidia.com/gpu"], Quantity::from_units(3));
    assert_eq!(out.replicas, 3);
    assert_eq!(out.sharing, Some(SharingStrategy::TimeSlicing));
    assert!(!out.fail_requests_greater_than_one);
    assert_eq!(
        out.labels,
        labels(&[
            ("nvidia.com/gpu.present", "true"),
            ("nvidia.com/gpu.count", "1"),
            ("nvidia.com/gpu.replicas", "3"),
            ("nvidia.com/gpu.sharing-strategy", "time-slicing"),
            ("nvidia.com/gpu.product", "Tesla-T4-SHARED"),
            ("nvidia.com/gpu.memory", "15360"),
            ("nvidia.com/gpu.compute.major", "7"),
            ("nvidia.com/gpu.compute.minor", "5"),
            ("nvidia.com/gpu.family", "turing"),
            ("nvidia.com/gpu.machine", "g4dn.xlarge"),
        ])
    );

    let mut allocatable = it
        .allocatable(&crate::catalog::NodeShape::default())
        .unwrap();
    out.apply(&mut allocatable);
    assert_eq!(allocatable["nvidia.com/gpu"], Quantity::from_units(3));
}

#[test]
fn without_a_config_gpus_are_whole() {
    let gpus = NodeGpus {
        count: 8,
        product_name: Some("NVIDIA H100 80GB HBM3"),
        memory_mib: Some(81152),
        compute_capability: Some((9, 0)),
        machine: None,
    };
    let out = node_resources(&gpus, None);
    assert_eq!(out.resources["nvidia.com/gpu"], Quantity::from_units(8));
    assert_eq!(
        out.labels["nvidia.com/gpu.product"],
        "NVIDIA-H100-80GB-HBM3"
    );
    assert_eq!(out.labels["nvidia.com/gpu.replicas"], "1");
    assert_eq!(out.labels["nvidia.com/gpu.sharing-strategy"], "none");
    assert_eq!(out.labels["nvidia.com/gpu.family"], "hopper");
    assert_eq!(out.sharing, None);
    // No GPUs: nothing advertised, no labels.
    assert_eq!(
        node_resources(&NodeGpus::default(), None),
        NodeGpuResources::default()
    );
}

#[test]
fn rename_by_default_advertises_a_separate_resource() {
    let configs = configs(
        r#"
metadata: {name: dp, namespace: gpu-operator}
data:
  shared: |
    version: v1
    sharing:
      timeSlicing:
        renameByDefault: true
        failRequestsGreaterThanOne: true
        resources:
        - name: nvidia.com/gpu
          replicas: 4
"#,
        Some("shared"),
    );
    let no_labels = BTreeMap::new();
    let selection = configs.select(&no_labels);
    assert!(matches!(
        selection,
        Selection::Config {
            by: SelectedBy::Default,
            ..
        }
    ));
    let gpus = NodeGpus {
        count: 4,
        product_name: Some("NVIDIA A10G"),
        memory_mib: Some(23028),
        compute_capability: Some((8, 6)),
        machine: None,
    };
    let out = node_resources(&gpus, selection.config());
    assert_eq!(out.resources.len(), 1);
    assert_eq!(
        out.resources["nvidia.com/gpu.shared"],
        Quantity::from_units(16)
    );
    assert!(out.fail_requests_greater_than_one);
    // Renamed: the product carries no -SHARED suffix, the strategy label still says so.
    assert_eq!(out.labels["nvidia.com/gpu.product"], "NVIDIA-A10G");
    assert_eq!(
        out.labels["nvidia.com/gpu.sharing-strategy"],
        "time-slicing"
    );
    assert_eq!(out.labels["nvidia.com/gpu.replicas"], "4");

    let mut capacity = BTreeMap::from([
        ("cpu".to_string(), Quantity::from_units(48)),
        ("nvidia.com/gpu".to_string(), Quantity::from_units(4)),
    ]);
    out.apply(&mut capacity);
    assert!(!capacity.contains_key("nvidia.com/gpu"));
    assert_eq!(capacity["nvidia.com/gpu.shared"], Quantity::from_units(16));
}

#[test]
fn mps_and_single_replica() {
    let configs = configs(
        r#"
metadata: {name: dp}
data:
  mps: |
    version: v1
    sharing:
      mps:
        resources:
        - name: gpu
          replicas: 2
  one: |
    sharing:
      timeSlicing:
        resources:
        - {name: nvidia.com/gpu, replicas: 1}
"#,
        None,
    );
    let gpus = NodeGpus {
        count: 1,
        product_name: Some("NVIDIA L4"),
        ..Default::default()
    };
    let mps = node_resources(&gpus, configs.get("mps"));
    assert_eq!(mps.resources["nvidia.com/gpu"], Quantity::from_units(2));
    assert_eq!(mps.labels["nvidia.com/gpu.sharing-strategy"], "mps");
    assert_eq!(mps.labels["nvidia.com/gpu.product"], "NVIDIA-L4-SHARED");
    assert!(mps.fail_requests_greater_than_one);
    // One replica is not sharing.
    let one = node_resources(&gpus, configs.get("one"));
    assert_eq!(one.resources["nvidia.com/gpu"], Quantity::from_units(1));
    assert_eq!(one.labels["nvidia.com/gpu.sharing-strategy"], "none");
    assert_eq!(one.labels["nvidia.com/gpu.product"], "NVIDIA-L4");
}

#[test]
fn selection_follows_the_config_manager() {
    let yaml = r#"
metadata: {name: dp}
data:
  a: "version: v1"
  b: "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}"
"#;
    let configs = configs(yaml, None);
    assert_eq!(configs.keys().collect::<Vec<_>>(), ["a", "b"]);
    let labelled = labels(&[(labels::NVIDIA_DEVICE_PLUGIN_CONFIG, "b")]);
    assert!(matches!(
        configs.select(&labelled),
        Selection::Config {
            key: "b",
            by: SelectedBy::NodeLabel,
            ..
        }
    ));
    let none = BTreeMap::new();
    let ambiguous = configs.select(&none);
    assert_eq!(ambiguous, Selection::NoConfig(NoConfig::Ambiguous));
    let Selection::NoConfig(reason) = ambiguous else {
        unreachable!()
    };
    assert!(reason.to_string().contains("no default config"));
    let unknown = labels(&[(labels::NVIDIA_DEVICE_PLUGIN_CONFIG, "c")]);
    assert_eq!(
        configs.select(&unknown),
        Selection::NoConfig(NoConfig::UnknownKey("c"))
    );

    let with_default_key = r#"
metadata: {name: dp}
data:
  default: "version: v1"
  other: "version: v1"
"#;
    assert!(matches!(
        self::configs(with_default_key, None).select(&none),
        Selection::Config {
            key: "default",
            by: SelectedBy::NamedFallback,
            ..
        }
    ));
    let empty = self::configs("metadata: {name: dp}", None);
    assert_eq!(empty.select(&none), Selection::NoConfig(NoConfig::Empty));
}

#[test]
fn errors_name_the_config_map_and_field() {
    let err = error(
        r#"
metadata: {name: nvidia-device-plugin, namespace: kube-system}
data:
  any: |
    version: v1
    sharing:
      timeSlicing:
        resources:
        - name: nvidia.com/gpu
          replicas: 0
"#,
    );
    assert_eq!(
        err.object.to_string(),
        "ConfigMap/kube-system/nvidia-device-plugin"
    );
    assert_eq!(
        err.field,
        "data.any.sharing.timeSlicing.resources[0].replicas"
    );
    assert!(
        err.to_string().contains("device-plugin-config.yaml"),
        "{err}"
    );

    for (yaml, field) in [
        ("version: v2", "data.k.version"),
        ("flags: {migStrategy: some}", "data.k.flags.migStrategy"),
        (
            "sharing: {timeSlicing: {}}",
            "data.k.sharing.timeSlicing.resources",
        ),
        (
            "sharing: {timeSlicing: {resources: [{replicas: 2}]}}",
            "data.k.sharing.timeSlicing.resources[0].name",
        ),
        (
            "sharing: {timeSlicing: {resources: [{name: gpu}]}}",
            "data.k.sharing.timeSlicing.resources[0].replicas",
        ),
        (
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: [0]}]}}",
            "data.k.sharing.timeSlicing.resources[0].devices",
        ),
        (
            "sharing: {timeSlicing: {renameByDefault: yes please, resources: []}}",
            "data.k.sharing.timeSlicing.renameByDefault",
        ),
        ("[1, 2]", "data.k"),
    ] {
        let cm = format!("metadata: {{name: dp}}\ndata:\n  k: {yaml:?}\n");
        assert_eq!(error(&cm).field, field, "{yaml}");
    }

    let cm = config_map("metadata: {name: dp}\ndata: {a: 'version: v1'}");
    let configs = DevicePluginConfigs::from_config_map(&cm, Some("b"), &origin());
    let err = configs.errors().next().expect("the default is missing");
    assert_eq!(err.field, "data");
    assert!(err.message.contains("\"b\""));
}

#[test]
fn a_key_that_cannot_be_read_affects_only_the_nodes_that_use_it() {
    let cm = config_map(
        "metadata: {name: dp, namespace: kube-system}\ndata:\n  good: 'sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}'\n  bad: 'sharing: {timeSlicing: 3}'\n",
    );
    let configs = DevicePluginConfigs::from_config_map(&cm, Some("good"), &origin());
    assert_eq!(configs.errors().count(), 1);
    // Nodes labelled for the good key, or using the default, are read as usual.
    let none = labels(&[]);
    assert!(configs.select(&none).config().is_some());
    let good = labels(&[(labels::NVIDIA_DEVICE_PLUGIN_CONFIG, "good")]);
    assert!(matches!(
        configs.select(&good),
        Selection::Config { key: "good", .. }
    ));
    // A node labelled for the bad key is unknown, with the error naming the key.
    let bad = labels(&[(labels::NVIDIA_DEVICE_PLUGIN_CONFIG, "bad")]);
    match configs.select(&bad) {
        Selection::Unreadable(e) => {
            assert_eq!(e.field, "data.bad.sharing.timeSlicing");
            assert_eq!(e.object.to_string(), "ConfigMap/kube-system/dp");
        }
        other => panic!("{other:?}"),
    }
    // A default the map lacks leaves unlabelled nodes unknown, labelled ones as they were.
    let configs = DevicePluginConfigs::from_config_map(&cm, Some("gone"), &origin());
    assert!(matches!(configs.select(&none), Selection::Unreadable(_)));
    assert!(configs.select(&good).config().is_some());
}
