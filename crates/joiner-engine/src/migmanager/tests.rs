use super::*;
use crate::catalog::mig::mig_gpu;

/// NVIDIA's DRA quickstart config (`demo/specs/quickstart/mig-parted-config.yaml`), and an
/// entry in the shape of the operator's `all-1g.10gb`, whose count depends on the GPU model.
const CONFIG: &str = r#"
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  half-balanced:
    - devices: [0, 1, 2, 3]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
    - devices: [4, 5, 6, 7]
      mig-enabled: false
  all-1g.10gb:
    - device-filter: ["0x20B010DE", "0x20B110DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 4}
    - device-filter: "0x20B210DE"
      devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  overridden:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.5gb": 7}
    - devices: [7]
      mig-enabled: false
  too-much:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.20gb": 2, "2g.10gb": 1}
"#;

fn config_map(text: &str) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("default-mig-parted-config".into());
    cm.metadata.namespace = Some("gpu-operator".into());
    cm.data = Some([(CONFIG_KEY.to_string(), text.to_string())].into());
    cm
}

fn parted(text: &str) -> Result<MigConfigs, InputError> {
    MigPartedConfigs::from_config_map(&config_map(text), &Source::default()).map(MigConfigs::Parted)
}

fn counts(node: &NodeMigLayout) -> Vec<Option<u32>> {
    node.gpus
        .iter()
        .map(|g| g.as_ref().map(|l| l.values().sum()))
        .collect()
}

#[test]
fn a_config_may_split_some_gpus_and_leave_the_others_whole() {
    let a100 = mig_gpu("NVIDIA A100-SXM4-40GB").expect("A100");
    let configs = parted(CONFIG).expect("reads");
    let node = configs
        .layout("half-balanced", a100, 8)
        .expect("fits")
        .expect("splits");
    assert_eq!(
        counts(&node),
        [Some(4), Some(4), Some(4), Some(4), None, None, None, None]
    );
    assert_eq!(configs.layout("all-disabled", a100, 8), Ok(None));
    // The last entry that matches a GPU decides.
    let node = configs
        .layout("overridden", a100, 8)
        .expect("fits")
        .expect("splits");
    assert_eq!(counts(&node)[6..], [Some(7), None]);
}

#[test]
fn device_filters_pick_the_entry_for_each_gpu_model() {
    let configs = parted(CONFIG).expect("reads");
    let of = |product: &str| {
        let gpu = mig_gpu(product).expect(product);
        configs
            .layout("all-1g.10gb", gpu, 8)
            .expect("fits")
            .map(|n| counts(&n))
    };
    assert_eq!(of("NVIDIA A100-SXM4-40GB"), Some(vec![Some(4); 8]));
    assert_eq!(of("NVIDIA A100-SXM4-80GB"), Some(vec![Some(7); 8]));
    // No entry matches an H200: mig-parted leaves its GPUs as they booted, whole.
    assert_eq!(of("NVIDIA H200"), None);
}

#[test]
fn without_a_config_map_the_operators_defaults_stand_in() {
    let a100 = mig_gpu("NVIDIA A100-SXM4-40GB").expect("A100");
    let configs = MigConfigs::find(
        std::iter::empty(),
        "gpu-operator",
        "default-mig-parted-config",
    );
    let node = configs
        .layout("all-1g.5gb", a100, 8)
        .expect("fits")
        .expect("splits");
    assert_eq!(counts(&node), vec![Some(7); 8]);
    let LayoutProblem::Invalid(why) = configs.layout("half-balanced", a100, 8).unwrap_err() else {
        panic!("invalid");
    };
    assert!(why.contains("no mig-parted ConfigMap"), "{why}");
    // Present, it replaces the defaults.
    let cm = config_map(CONFIG);
    let source = Source::default();
    let found = MigConfigs::find(
        [(&cm, &source)].into_iter(),
        "gpu-operator",
        "default-mig-parted-config",
    );
    assert!(found.layout("half-balanced", a100, 8).is_ok());
    assert!(found.layout("all-1g.5gb", a100, 8).is_err());
}

#[test]
fn a_layout_the_gpu_cannot_take_names_the_config_and_the_gpu() {
    let a100 = mig_gpu("NVIDIA A100-SXM4-40GB").expect("A100");
    let configs = parted(CONFIG).expect("reads");
    let LayoutProblem::Invalid(why) = configs.layout("too-much", a100, 8).unwrap_err() else {
        panic!("invalid");
    };
    assert!(
        why.contains("\"too-much\"") && why.contains("A100-SXM4-40GB"),
        "{why}"
    );
    let LayoutProblem::Invalid(why) = configs.layout("custom", a100, 8).unwrap_err() else {
        panic!("invalid");
    };
    assert!(
        why.contains("ConfigMap/gpu-operator/default-mig-parted-config"),
        "{why}"
    );
    assert!(why.contains("half-balanced"), "{why}");
}

#[test]
fn a_config_map_mig_parted_would_refuse_is_refused_naming_the_key() {
    for (text, says) in [
        (
            "version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}",
            "version \"v2\"",
        ),
        ("version: v1\nmig-configs: {a: []}", "mig-configs.a"),
        (
            "version: v1\nmig-configs: {a: [{devices: some, mig-enabled: false}]}",
            "not a mig-parted config",
        ),
        (
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, extra: 1}]}",
            "not a mig-parted config",
        ),
        (
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, mig-devices: {1g.5gb: 7}}]}",
            "mig-configs.a[0].mig-devices",
        ),
    ] {
        let e = parted(text).unwrap_err();
        assert_eq!(e.field, "data[config.yaml]", "{text}");
        assert!(e.message.contains(says), "{text}: {}", e.message);
        assert_eq!(
            e.object.to_string(),
            "ConfigMap/gpu-operator/default-mig-parted-config"
        );
    }
    let mut cm = config_map(CONFIG);
    cm.data = Some([("other".to_string(), CONFIG.to_string())].into());
    let e = MigPartedConfigs::from_config_map(&cm, &Source::default()).unwrap_err();
    assert!(e.message.contains("missing"), "{}", e.message);
}
