//! Watches: re-lists, readiness, and kinds the server does not serve.

use std::time::Duration;

use joiner_controller::store::{ClusterStore, StoreError};
use joiner_model::api::EC2NodeClass;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::ResourceSlice;

use super::{EC2NODECLASSES, NODES, PODS, names, start};
use crate::test_support::{FakeApi, blocking, eventually, list_of, object, pod, status};
use crate::{KubeError, KubeStore};

fn node(name: &str, rv: &str) -> serde_json::Value {
    object("v1", "Node", None, name, rv)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_expired_event_leads_to_a_fresh_list_not_an_empty_cache() {
    let (fake, client) = FakeApi::start();
    fake.set_list(PODS, 200, list_of(vec![pod("a", "p1", "3")], "3"));
    let store = start(&fake, client).await;
    fake.set_list(
        PODS,
        200,
        list_of(vec![pod("a", "p1", "3"), pod("a", "p2", "10")], "10"),
    );
    let expired = status(410, "Expired", "too old resource version: 3 (9)");
    assert_eq!(fake.push(PODS, "ERROR", expired), 1);

    let s = store.clone();
    let during = blocking(move || s.list::<Pod>()).await.expect("list");
    assert!(!during.is_empty(), "the cache is kept while listing again");
    eventually("a second list of pods", || {
        fake.calls("GET", PODS).len() >= 2
    })
    .await;
    let s = store.clone();
    eventually("the new list in the cache", || {
        s.list::<Pod>().is_ok_and(|p| names(&p) == ["a/p1", "a/p2"])
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_refused_with_gone_leads_to_a_fresh_list() {
    let (fake, client) = FakeApi::start();
    fake.set_list(NODES, 200, list_of(vec![node("n1", "3")], "3"));
    let store = start(&fake, client).await;
    fake.watching(NODES).await;
    // Meanwhile the server moved on and compacted version 3: resuming from it is refused.
    fake.set_list(NODES, 200, list_of(vec![node("n2", "20")], "20"));
    fake.refuse_watches(
        NODES,
        vec![(
            410,
            status(410, "Expired", "too old resource version: 3 (15)"),
        )],
    );
    fake.end_watches(NODES);
    eventually("nodes listed again", || fake.calls("GET", NODES).len() >= 2).await;
    let s = store.clone();
    eventually("the cache to hold the server's current nodes", || {
        s.list::<Node>().is_ok_and(|n| names(&n) == ["n2"])
    })
    .await;
    let resumed = fake
        .requests()
        .into_iter()
        .filter(|r| r.path == NODES && r.param("watch").is_some())
        .nth(1)
        .expect("a second watch");
    assert_eq!(resumed.param("resourceVersion").as_deref(), Some("3"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_watch_makes_the_store_unready_but_keeps_its_cache() {
    let (fake, client) = FakeApi::start();
    fake.set_list(PODS, 200, list_of(vec![pod("a", "p1", "3")], "3"));
    fake.refuse_watches(
        PODS,
        vec![(500, status(500, "InternalError", "etcd down")); 1000],
    );
    let store = KubeStore::start(
        client,
        tokio::runtime::Handle::current(),
        Duration::from_secs(10),
    )
    .await
    .expect("starts: the list worked");
    let s = store.clone();
    eventually("the store to be unready", || !s.is_ready()).await;
    let pods = store
        .health()
        .into_iter()
        .find(|h| h.kind == "Pod")
        .expect("pods watched");
    assert!(pods.to_string().contains("etcd down"), "{pods}");
    let s = store.clone();
    let cached = blocking(move || s.list::<Pod>()).await.expect("list");
    assert_eq!(names(&cached), ["a/p1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_crd_is_named_and_its_reads_fail() {
    let (fake, client) = FakeApi::start();
    let not_found = status(
        404,
        "NotFound",
        "the server could not find the requested resource",
    );
    fake.set_list(EC2NODECLASSES, 404, not_found.clone());
    let store = KubeStore::start(
        client,
        tokio::runtime::Handle::current(),
        Duration::from_secs(10),
    )
    .await
    .expect("starts: the other kinds synced");
    assert!(!store.is_ready());
    let missing: Vec<_> = store.health().into_iter().filter(|h| h.missing).collect();
    assert_eq!(missing.len(), 1);
    assert_eq!(missing[0].kind, "EC2NodeClass");
    assert!(
        missing[0]
            .to_string()
            .contains("karpenter.k8s.aws/v1/ec2nodeclasses")
    );
    // Empty would mean "there are none": garbage collection would act on it.
    let s = store.clone();
    let read = blocking(move || s.list::<EC2NodeClass>()).await;
    let Err(StoreError::Unavailable(why)) = read else {
        panic!("a required kind that is not served must not read as empty: {read:?}");
    };
    assert!(
        why.contains("EC2NodeClass") && why.contains("not served"),
        "{why}"
    );
    let s = store.clone();
    assert!(
        blocking(move || s.get::<EC2NodeClass>(None, "default"))
            .await
            .is_err()
    );
    let s = store.clone();
    assert!(blocking(move || s.list::<Pod>()).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dra_kinds_are_optional() {
    let (fake, client) = FakeApi::start();
    let not_found = status(
        404,
        "NotFound",
        "the server could not find the requested resource",
    );
    for kind in [
        "deviceclasses",
        "resourceclaims",
        "resourceclaimtemplates",
        "resourceslices",
    ] {
        fake.set_list(
            &format!("/apis/resource.k8s.io/v1/{kind}"),
            404,
            not_found.clone(),
        );
    }
    let store = start(&fake, client).await;
    assert!(store.is_ready(), "{:?}", store.health());
    let s = store.clone();
    let slices = blocking(move || s.list::<ResourceSlice>()).await;
    assert_eq!(
        slices.map(|l| l.len()),
        Ok(0),
        "optional kinds read as empty"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_names_the_kinds_that_did_not_sync() {
    let (fake, client) = FakeApi::start();
    fake.set_list(
        NODES,
        403,
        status(403, "Forbidden", "nodes is forbidden: User cannot list"),
    );
    let started = KubeStore::start(
        client,
        tokio::runtime::Handle::current(),
        Duration::from_secs(2),
    )
    .await;
    let Err(KubeError::SyncTimeout { pending, .. }) = started else {
        panic!("start must time out");
    };
    assert_eq!(pending.iter().map(|h| h.kind).collect::<Vec<_>>(), ["Node"]);
    let message = KubeError::SyncTimeout {
        timeout: Duration::from_secs(2),
        pending,
    }
    .to_string();
    assert!(message.contains("forbidden"), "{message}");
}
