//! Reads: what the caches list, in what order, and when they change.

use std::time::Duration;

use joiner_controller::store::ClusterStore;
use joiner_model::api::NodePool;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use serde_json::json;

use super::{DEVICECLASSES, EC2NODECLASSES, NODECLAIMS, NODEPOOLS, NODES, PODS, names, rv, start};
use crate::test_support::{FakeApi, blocking, list_of, node_pool, object, pod};
use crate::{KubeError, KubeStore, StoreOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_come_from_the_caches_in_name_order() {
    let (fake, client) = FakeApi::start();
    fake.set_list(
        PODS,
        200,
        list_of(
            vec![
                pod("b", "p2", "3"),
                pod("a", "p9", "4"),
                pod("a", "p1", "5"),
            ],
            "5",
        ),
    );
    let store = start(&fake, client).await;
    assert!(store.is_ready(), "{:?}", store.health());

    let s = store.clone();
    let pods = blocking(move || s.list::<Pod>()).await.expect("list");
    assert_eq!(names(&pods), ["a/p1", "a/p9", "b/p2"]);
    let s = store.clone();
    let one = blocking(move || s.get::<Pod>(Some("a"), "p9"))
        .await
        .expect("get");
    assert_eq!(one.map(|p| rv(&p)), Some("4".to_string()));

    // Every kind was listed; the only ConfigMap watched is the device plugin's.
    let listed: Vec<String> = fake
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.param("watch").is_none())
        .map(|r| r.path.clone())
        .collect();
    for path in [
        PODS,
        NODES,
        "/apis/apps/v1/daemonsets",
        "/api/v1/namespaces/kube-system/configmaps",
        NODEPOOLS,
        NODECLAIMS,
        EC2NODECLASSES,
        "/apis/policy/v1/poddisruptionbudgets",
        "/apis/storage.k8s.io/v1/volumeattachments",
        DEVICECLASSES,
        "/apis/resource.k8s.io/v1/resourceclaims",
        "/apis/resource.k8s.io/v1/resourceclaimtemplates",
        "/apis/resource.k8s.io/v1/resourceslices",
    ] {
        assert!(
            listed.iter().any(|p| p == path),
            "{path} not listed: {listed:?}"
        );
    }
    let config_maps = fake.calls("GET", "/api/v1/namespaces/kube-system/configmaps");
    assert_eq!(
        config_maps[0].param("fieldSelector").as_deref(),
        Some("metadata.name=nvidia-device-plugin")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_settings_name_the_device_plugin_config_map() {
    let values =
        json!({"settings": {"nvidiaDevicePlugin": {"configMap": "gpu-operator/time-slicing"}}});
    let (settings, _) = joiner_model::settings::Settings::from_values(&values).expect("settings");
    let (fake, client) = FakeApi::start();
    let path = "/api/v1/namespaces/gpu-operator/configmaps";
    let mut config = object("v1", "ConfigMap", Some("gpu-operator"), "time-slicing", "4");
    config["data"] = json!({"any": "version: v1\n"});
    // The MIG manager's ConfigMap, in the same namespace, and one nothing reads.
    let mut mig = object(
        "v1",
        "ConfigMap",
        Some("gpu-operator"),
        "default-mig-parted-config",
        "4",
    );
    mig["data"] = json!({"config.yaml": "version: v1\n"});
    let other = object("v1", "ConfigMap", Some("gpu-operator"), "unrelated", "4");
    fake.set_list(path, 200, list_of(vec![config, mig, other], "4"));
    let store = KubeStore::start_with(
        client,
        tokio::runtime::Handle::current(),
        Duration::from_secs(10),
        StoreOptions::from_settings(&settings),
    )
    .await
    .expect("starts");
    let selectors: Vec<Option<String>> = fake
        .calls("GET", path)
        .iter()
        .map(|c| c.param("fieldSelector"))
        .collect();
    for name in ["time-slicing", "default-mig-parted-config"] {
        let selector = format!("metadata.name={name}");
        assert!(selectors.contains(&Some(selector)), "{selectors:?}");
    }
    let s = store.clone();
    let maps = blocking(move || s.list::<ConfigMap>()).await.expect("list");
    assert_eq!(
        names(&maps),
        [
            "gpu-operator/default-mig-parted-config",
            "gpu-operator/time-slicing"
        ]
    );
    let s = store.clone();
    let mig =
        blocking(move || s.get::<ConfigMap>(Some("gpu-operator"), "default-mig-parted-config"))
            .await
            .expect("get");
    assert!(mig.is_some());

    let (_, client) = FakeApi::start();
    let nameless = StoreOptions {
        device_plugin_config_map: ("kube-system".into(), String::new()),
        ..StoreOptions::default()
    };
    let refused = KubeStore::start_with(
        client,
        tokio::runtime::Handle::current(),
        Duration::from_secs(1),
        nameless,
    )
    .await;
    assert!(matches!(refused, Err(KubeError::Options(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_that_does_not_decode_is_skipped() {
    let (fake, client) = FakeApi::start();
    let mut broken = node_pool("broken", "2");
    broken["spec"]["template"] = json!(3);
    fake.set_list(
        NODEPOOLS,
        200,
        list_of(vec![broken, node_pool("default", "3")], "3"),
    );
    let store = start(&fake, client).await;
    assert!(store.is_ready());
    let s = store.clone();
    let pools = blocking(move || s.list::<NodePool>()).await.expect("list");
    assert_eq!(names(&pools), ["default"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_resolves_on_a_watch_event() {
    let (fake, client) = FakeApi::start();
    let store = start(&fake, client).await;
    let quiet = store.changed();
    assert!(
        tokio::time::timeout(Duration::from_millis(200), quiet)
            .await
            .is_err(),
        "nothing changed"
    );
    let next = store.changed();
    fake.push(PODS, "ADDED", pod("a", "p1", "7"));
    tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("resolves after the event");
}
