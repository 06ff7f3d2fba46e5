//! Reads that must not be answered with a guess: past the cache, objects that do not decode,
//! and kinds the API server does not serve.

use joiner_controller::store::{ClusterStore, ObjectKey, StoreError};
use joiner_model::api::NodeClaim;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::{NODECLAIMS, names, rv, start};
use crate::test_support::{FakeApi, blocking, list_of, node_claim, status};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_uncached_asks_the_api_server() {
    let (fake, client) = FakeApi::start();
    fake.set_list(NODECLAIMS, 200, list_of(vec![node_claim("nc-1", "3")], "3"));
    let store = start(&fake, client).await;
    fake.reply("GET", &format!("{NODECLAIMS}/nc-1"), |_| {
        (200, node_claim("nc-1", "9"))
    });
    let s = store.clone();
    let read = blocking(move || s.get_uncached::<NodeClaim>(None, "nc-1"))
        .await
        .expect("get")
        .expect("there");
    assert_eq!(rv(&read), "9", "the server's version, not the cache's 3");
    assert_eq!(fake.calls("GET", &format!("{NODECLAIMS}/nc-1")).len(), 1);

    // The object is not there: the server's 404 names it.
    fake.reply("GET", &format!("{NODECLAIMS}/nc-2"), |_| {
        let mut s = status(
            404,
            "NotFound",
            "nodeclaims.karpenter.sh \"nc-2\" not found",
        );
        s["details"] = json!({"name": "nc-2", "group": "karpenter.sh", "kind": "nodeclaims"});
        (404, s)
    });
    let s = store.clone();
    let absent = blocking(move || s.get_uncached::<NodeClaim>(None, "nc-2")).await;
    assert_eq!(absent.map(|o| o.is_none()), Ok(true));

    // The kind is not served (its CRD is gone): not an answer about the object.
    fake.reply("GET", &format!("{NODECLAIMS}/nc-3"), |_| {
        (
            404,
            status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        )
    });
    let s = store.clone();
    let unknown = blocking(move || s.get_uncached::<NodeClaim>(None, "nc-3")).await;
    assert!(
        matches!(unknown, Err(StoreError::Unavailable(_))),
        "{unknown:?}"
    );

    // The API server failing is not absence either.
    fake.reply("GET", "/api/v1/namespaces/a/pods/p1", |_| {
        (500, status(500, "InternalError", "etcd timeout"))
    });
    let s = store.clone();
    let failed = blocking(move || s.get_uncached::<Pod>(Some("a"), "p1")).await;
    assert!(
        matches!(failed, Err(StoreError::Unavailable(_))),
        "{failed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodeclaim_that_does_not_decode_is_named_not_listed() {
    let (fake, client) = FakeApi::start();
    let mut newer = node_claim("nc-newer", "4");
    newer["spec"]["requirements"] = json!([{"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Between", "values": ["1", "4"]}]);
    fake.set_list(
        NODECLAIMS,
        200,
        list_of(vec![node_claim("nc-1", "3"), newer], "4"),
    );
    let store = start(&fake, client).await;
    let s = store.clone();
    let listed = blocking(move || s.list::<NodeClaim>()).await.expect("list");
    assert_eq!(names(&listed), ["nc-1"]);
    let s = store.clone();
    let skipped = blocking(move || s.undecodable::<NodeClaim>()).await;
    assert_eq!(
        skipped,
        Ok(vec![ObjectKey::of::<NodeClaim>(None, "nc-newer")])
    );
    let s = store.clone();
    assert_eq!(
        blocking(move || s.undecodable::<Pod>()).await,
        Ok(Vec::new())
    );
}
