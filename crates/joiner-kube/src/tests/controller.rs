//! The controller core over the store and the fake server: a watch slower than the controller
//! does not make it plan the same pods twice.

use joiner_model::wellknown::annotations;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use joiner_controller::clock::{Clock, ManualClock, k8s_time};
use joiner_controller::store::{ClusterStore, InMemoryCluster, Resource};
use joiner_controller::{Config, Controller};
use joiner_engine::catalog::Catalog;
use joiner_model::api::{EC2NodeClass, NodePool};
use joiner_model::settings::Settings;
use joiner_simulate::SimulatedCloud;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::Resource as _;

use super::{NODECLAIMS, PODS, start};
use crate::test_support::{FakeApi, blocking, list_of};
use crate::typed::{Typed, to_json};

/// The learning-lab example (four time-sliced GPU pods, one NodePool), as the planner reads it.
fn learning_lab(clock: &ManualClock) -> InMemoryCluster {
    let m = joiner_test_support::load_example("time-slicing-learning-lab");
    let cluster = InMemoryCluster::new(clock.clone());
    cluster.load(&m).expect("load");
    cluster
}

/// Serves every object of kind `K` in `from` as the fake server's list at `path`.
fn serve<K: Resource>(fake: &FakeApi, from: &InMemoryCluster, path: &str) {
    let items = from
        .list::<K>()
        .expect("list")
        .iter()
        .map(|o| to_json(o).expect("JSON"))
        .collect();
    fake.set_list(path, 200, list_of(items, "1"));
}

/// Which NodeClaims (by name) each pod was planned onto, from the NodeClaims created.
fn planned(fake: &FakeApi) -> BTreeMap<String, Vec<String>> {
    let mut by_pod: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for post in fake.calls("POST", NODECLAIMS) {
        let body = post.body.unwrap_or_default();
        let claim = body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let pods = body["metadata"]["annotations"][annotations::PLANNED_PODS]
            .as_str()
            .unwrap_or_default()
            .to_string();
        for pod in pods.split(',').filter(|p| !p.is_empty()) {
            by_pod
                .entry(pod.trim().to_string())
                .or_default()
                .push(claim.clone());
        }
    }
    by_pod
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_watch_does_not_make_the_controller_plan_twice() {
    let clock = ManualClock::new();
    let lab = learning_lab(&clock);
    let (fake, client) = FakeApi::start();
    serve::<Pod>(&fake, &lab, PODS);
    serve::<Node>(&fake, &lab, &Typed::<Node>::url_path(&(), None));
    serve::<DaemonSet>(&fake, &lab, &Typed::<DaemonSet>::url_path(&(), None));
    serve::<NodePool>(&fake, &lab, &Typed::<NodePool>::url_path(&(), None));
    serve::<EC2NodeClass>(&fake, &lab, &Typed::<EC2NodeClass>::url_path(&(), None));
    serve::<ConfigMap>(
        &fake,
        &lab,
        &Typed::<ConfigMap>::url_path(&(), Some("kube-system")),
    );
    let now = clock.clone();
    fake.accept_writes(move || {
        serde_json::to_value(k8s_time(now.now()))
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    });
    let store = start(&fake, client).await;

    // One more lab pod, arriving through the watch after the first plan: it makes the
    // controller plan again, with the first NodeClaims still undelivered by the watch.
    let mut extra = to_json(
        &lab.get::<Pod>(Some("default"), "learning-lab-0")
            .expect("get")
            .expect("a lab pod"),
    )
    .expect("JSON");
    extra["metadata"]["name"] = "learning-lab-extra".into();
    extra["metadata"]["uid"] = "uid-extra".into();
    extra["metadata"]["resourceVersion"] = "50".into();

    let settings = Settings {
        cluster_name: Some("lab".into()),
        ..Settings::default()
    };
    let config = Config::new(settings).expect("config");
    let catalog = Catalog::builtin(&config.settings.region, &config.settings.zones);
    let cloud = SimulatedCloud::new(&catalog, clock.clone());
    let (s, f, c) = (store.clone(), fake.clone(), clock.clone());
    blocking(move || {
        let mut controller = Controller::new(s.clone(), cloud, c.clone(), config);
        for _ in 0..3 {
            controller.step();
            c.advance(Duration::from_secs(2));
        }
        assert!(!planned(&f).is_empty(), "the lab's pods were planned");
        f.push(PODS, "ADDED", extra);
        let deadline = Instant::now() + Duration::from_secs(10);
        while s
            .get::<Pod>(Some("default"), "learning-lab-extra")
            .ok()
            .flatten()
            .is_none()
        {
            assert!(Instant::now() < deadline, "the new pod never arrived");
            std::thread::sleep(Duration::from_millis(20));
        }
        for _ in 0..5 {
            controller.step();
            c.advance(Duration::from_secs(2));
        }
    })
    .await;

    let planned = planned(&fake);
    for i in 0..4 {
        let pod = format!("default/learning-lab-{i}");
        assert!(planned.contains_key(&pod), "{pod} planned: {planned:?}");
    }
    for (pod, claims) in &planned {
        assert_eq!(claims.len(), 1, "{pod} planned onto {claims:?}");
    }
}
