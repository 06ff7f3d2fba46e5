//! Writes: the requests sent, how answers map to store errors, and read-your-writes.

use std::time::Duration;

use joiner_controller::store::{ClusterStore, Deleted, ObjectKey, Preconditions, StoreError};
use joiner_model::api::NodePool;
use joiner_model::api::ec2nodeclass::{EC2NodeClass, EC2NodeClassStatus};
use joiner_model::api::nodeclaim::NodeClaim;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;

use super::{EC2NODECLASSES, NODECLAIMS, NODEPOOLS, NODES, PODS, names, rv, start, stored};
use crate::test_support::{
    FakeApi, blocking, eventually, list_of, node_claim, node_pool, object, pod, status,
};
use crate::{KubeStore, StoreOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_nodeclaim_is_read_before_the_watch_delivers_it() {
    let (fake, client) = FakeApi::start();
    let store = start(&fake, client).await;
    fake.reply("POST", NODECLAIMS, |r| (201, stored(r, "5")));

    let claim: NodeClaim = serde_json::from_value(node_claim("nc-1", "")).expect("claim");
    let s = store.clone();
    let created = blocking(move || s.create(&claim)).await.expect("create");
    assert_eq!(rv(&created), "5");

    let post = &fake.calls("POST", NODECLAIMS)[0];
    let body = post.body.clone().expect("a JSON body");
    assert_eq!(body["apiVersion"], "karpenter.sh/v1");
    assert_eq!(body["kind"], "NodeClaim");
    assert_eq!(body["metadata"]["name"], "nc-1");
    assert_eq!(body["spec"]["nodeClassRef"]["name"], "default");

    // The watch has not delivered it, and the next read sees it all the same.
    let s = store.clone();
    let claims = blocking(move || s.list::<NodeClaim>()).await.expect("list");
    assert_eq!(names(&claims), ["nc-1"]);

    // Once the watch delivers that version, the cache speaks for it: a later change made by
    // someone else is what reads return.
    fake.push(NODECLAIMS, "ADDED", node_claim("nc-1", "5"));
    let cache = store.cache::<NodeClaim>().expect("cache");
    eventually("the watch to catch up", || cache.overlaid() == 0).await;
    fake.push(NODECLAIMS, "MODIFIED", node_claim("nc-1", "6"));
    let s = store.clone();
    eventually("the cache to move on", || {
        s.list::<NodeClaim>()
            .is_ok_and(|c| c.first().map(rv).as_deref() == Some("6"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_is_not_undone_by_an_older_event() {
    let (fake, client) = FakeApi::start();
    fake.set_list(NODECLAIMS, 200, list_of(vec![node_claim("nc-1", "3")], "3"));
    let store = start(&fake, client).await;
    fake.reply("PUT", &format!("{NODECLAIMS}/nc-1"), |r| {
        (200, stored(r, "7"))
    });

    let s = store.clone();
    let mut claim = blocking(move || s.get::<NodeClaim>(None, "nc-1"))
        .await
        .expect("get")
        .expect("listed");
    claim
        .metadata
        .labels
        .get_or_insert_default()
        .insert("team".into(), "ml".into());
    let s = store.clone();
    let updated = blocking(move || s.update(&claim)).await.expect("update");
    assert_eq!(rv(&updated), "7");
    let put = &fake.calls("PUT", &format!("{NODECLAIMS}/nc-1"))[0];
    let body = put.body.clone().expect("body");
    assert_eq!(
        body["metadata"]["resourceVersion"], "3",
        "the version read is sent"
    );

    // An event from before the write (someone's change at version 6) does not hide it.
    let mut older = node_claim("nc-1", "6");
    older["metadata"]["labels"] = json!({"team": "web"});
    fake.push(NODECLAIMS, "MODIFIED", older);
    let cache = store.cache::<NodeClaim>().expect("cache");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let s = store.clone();
    let read = blocking(move || s.get::<NodeClaim>(None, "nc-1"))
        .await
        .expect("get")
        .expect("there");
    assert_eq!(rv(&read), "7");
    assert_eq!(cache.overlaid(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_change_goes_through_the_status_subresource() {
    let (fake, client) = FakeApi::start();
    fake.set_list(NODECLAIMS, 200, list_of(vec![node_claim("nc-1", "3")], "3"));
    let store = start(&fake, client).await;
    // The server ignores status on the main resource, and stores it through /status.
    fake.reply("PUT", &format!("{NODECLAIMS}/nc-1"), |r| {
        let mut o = stored(r, "4");
        o.as_object_mut().map(|m| m.remove("status"));
        (200, o)
    });
    fake.reply("PUT", &format!("{NODECLAIMS}/nc-1/status"), |r| {
        (200, stored(r, "5"))
    });

    let s = store.clone();
    let mut claim = blocking(move || s.get::<NodeClaim>(None, "nc-1"))
        .await
        .expect("get")
        .expect("listed");
    claim.status.provider_id = Some("aws:///us-east-1a/i-0123".into());
    let s = store.clone();
    let updated = blocking(move || s.update(&claim)).await.expect("update");
    assert_eq!(rv(&updated), "5");
    assert_eq!(
        updated.status.provider_id.as_deref(),
        Some("aws:///us-east-1a/i-0123")
    );
    let status_put = &fake.calls("PUT", &format!("{NODECLAIMS}/nc-1/status"))[0];
    let body = status_put.body.clone().expect("body");
    assert_eq!(
        body["metadata"]["resourceVersion"], "4",
        "based on the main write"
    );
    assert_eq!(body["status"]["providerID"], "aws:///us-east-1a/i-0123");

    // An update that leaves the status alone sends no status write.
    fake.reply("PUT", &format!("{NODECLAIMS}/nc-1"), |r| {
        (200, stored(r, "6"))
    });
    let s = store.clone();
    blocking(move || s.update(&updated)).await.expect("update");
    assert_eq!(
        fake.calls("PUT", &format!("{NODECLAIMS}/nc-1/status"))
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_answers_map_to_store_errors() {
    let (fake, client) = FakeApi::start();
    fake.set_list(NODECLAIMS, 200, list_of(vec![node_claim("nc-1", "3")], "3"));
    let store = start(&fake, client).await;
    let claim: NodeClaim = serde_json::from_value(node_claim("nc-1", "3")).expect("claim");
    let put = format!("{NODECLAIMS}/nc-1");

    type Case = (&'static str, u16, &'static str, fn(&StoreError) -> bool);
    let cases: Vec<Case> = vec![
        ("POST", 409, "AlreadyExists", |e| {
            matches!(e, StoreError::AlreadyExists(_))
        }),
        ("PUT", 409, "Conflict", |e| {
            matches!(e, StoreError::Conflict(_))
        }),
        ("PUT", 404, "NotFound", |e| {
            matches!(e, StoreError::NotFound(_))
        }),
        (
            "POST",
            422,
            "Invalid",
            |e| matches!(e, StoreError::Invalid(_, m) if m.contains("spec.nodeClassRef: Required value")),
        ),
        ("POST", 500, "InternalError", |e| {
            matches!(e, StoreError::Unavailable(_))
        }),
        ("PUT", 503, "ServiceUnavailable", |e| {
            matches!(e, StoreError::Unavailable(_))
        }),
    ];
    for (method, code, reason, expected) in cases {
        let path = if method == "POST" {
            NODECLAIMS
        } else {
            put.as_str()
        };
        fake.reply(method, path, move |_| {
            (
                code,
                status(code, reason, "spec.nodeClassRef: Required value"),
            )
        });
        let (s, c) = (store.clone(), claim.clone());
        let answer = blocking(move || {
            if method == "POST" {
                s.create(&c)
            } else {
                s.update(&c)
            }
        })
        .await;
        let error = answer.expect_err("the write fails");
        assert!(expected(&error), "{method} {code} gave {error:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_say_whether_the_object_is_gone() {
    let (fake, client) = FakeApi::start();
    let mut finalized = node_claim("nc-1", "3");
    finalized["metadata"]["finalizers"] = json!(["karpenter.sh/termination"]);
    fake.set_list(NODECLAIMS, 200, list_of(vec![finalized.clone()], "3"));
    fake.set_list(
        NODEPOOLS,
        200,
        list_of(vec![node_pool("default", "2")], "3"),
    );
    let store = start(&fake, client).await;

    // Finalizers: the server answers with the object, now deleting.
    let mut deleting = finalized.clone();
    deleting["metadata"]["deletionTimestamp"] = "2026-11-29T20:00:00Z".into();
    deleting["metadata"]["resourceVersion"] = "8".into();
    let answer = deleting.clone();
    fake.reply("DELETE", &format!("{NODECLAIMS}/nc-1"), move |_| {
        (200, answer)
    });
    let s = store.clone();
    let deleted = blocking(move || s.delete::<NodeClaim>(None, "nc-1")).await;
    assert_eq!(deleted, Ok(Deleted::Pending));
    let s = store.clone();
    let seen = blocking(move || s.get::<NodeClaim>(None, "nc-1"))
        .await
        .expect("get");
    assert!(seen.is_some_and(|c| c.metadata.deletion_timestamp.is_some()));
    let request = &fake.calls("DELETE", &format!("{NODECLAIMS}/nc-1"))[0];
    assert_eq!(
        request
            .body
            .as_ref()
            .map(|b| b["propagationPolicy"].clone()),
        Some(json!("Background"))
    );

    // No finalizers: a Status, and the object is hidden although the watch still has it.
    fake.reply("DELETE", &format!("{NODEPOOLS}/default"), |_| {
        (200, status(200, "", ""))
    });
    let s = store.clone();
    let gone = blocking(move || s.delete::<NodePool>(None, "default")).await;
    assert_eq!(gone, Ok(Deleted::Gone));
    let s = store.clone();
    assert_eq!(
        blocking(move || s.list::<NodePool>())
            .await
            .map(|l| l.len()),
        Ok(0)
    );
    fake.push(NODEPOOLS, "DELETED", node_pool("default", "9"));
    let cache = store.cache::<NodePool>().expect("cache");
    eventually("the tombstone to go", || cache.overlaid() == 0).await;
    let s = store.clone();
    assert_eq!(
        blocking(move || s.list::<NodePool>())
            .await
            .map(|l| l.len()),
        Ok(0)
    );

    // Not there at all.
    fake.reply("DELETE", &format!("{NODEPOOLS}/other"), |_| {
        (
            404,
            status(404, "NotFound", "nodepools \"other\" not found"),
        )
    });
    let s = store.clone();
    let missing = blocking(move || s.delete::<NodePool>(None, "other")).await;
    assert!(matches!(missing, Err(StoreError::NotFound(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_last_finalizer_of_a_deleting_object_removes_it() {
    let (fake, client) = FakeApi::start();
    let mut deleting = node_claim("nc-1", "3");
    deleting["metadata"]["finalizers"] = json!(["karpenter.sh/termination"]);
    deleting["metadata"]["deletionTimestamp"] = "2026-11-29T20:00:00Z".into();
    fake.set_list(NODECLAIMS, 200, list_of(vec![deleting], "3"));
    let store = start(&fake, client).await;
    // The server deletes it and answers with the object as it was last stored.
    fake.reply("PUT", &format!("{NODECLAIMS}/nc-1"), |r| {
        (200, stored(r, "4"))
    });

    let s = store.clone();
    let mut claim = blocking(move || s.get::<NodeClaim>(None, "nc-1"))
        .await
        .expect("get")
        .expect("listed");
    claim.metadata.finalizers = Some(Vec::new());
    let s = store.clone();
    blocking(move || s.update(&claim)).await.expect("update");
    let s = store.clone();
    assert_eq!(
        blocking(move || s.list::<NodeClaim>())
            .await
            .map(|l| l.len()),
        Ok(0)
    );
    assert!(
        fake.calls("PUT", &format!("{NODECLAIMS}/nc-1/status"))
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_a_pod_posts_an_eviction() {
    let (fake, client) = FakeApi::start();
    fake.set_list(
        PODS,
        200,
        list_of(vec![pod("a", "p1", "3"), pod("a", "p2", "4")], "4"),
    );
    let store = start(&fake, client).await;
    let eviction = "/api/v1/namespaces/a/pods/p1/eviction";
    fake.reply("POST", eviction, |_| (201, status(201, "", "")));

    let s = store.clone();
    let evicted = blocking(move || {
        s.evict(
            "a",
            "p1",
            Preconditions {
                uid: Some("uid-p1"),
            },
        )
    })
    .await;
    assert_eq!(evicted, Ok(Deleted::Pending));
    let body = fake.calls("POST", eviction)[0].body.clone().expect("body");
    assert_eq!(body["apiVersion"], "policy/v1");
    assert_eq!(body["kind"], "Eviction");
    assert_eq!(body["metadata"]["name"], "p1");
    assert_eq!(body["metadata"]["namespace"], "a");
    // Only the pod that was read: a pod recreated under the name is not evicted.
    assert_eq!(body["deleteOptions"]["preconditions"]["uid"], "uid-p1");
    assert!(
        fake.calls("DELETE", "/api/v1/namespaces/a/pods/p1")
            .is_empty()
    );
    let s = store.clone();
    let left = blocking(move || s.list::<Pod>()).await.expect("list");
    assert_eq!(
        names(&left),
        ["a/p2"],
        "hidden until the watch shows it terminating"
    );

    // A drain does not trust the cache's silence: a fresh LIST of the node's pods, past the
    // cache, still has the pod the API server keeps while it terminates.
    let s = store.clone();
    let fresh = blocking(move || s.pods_on_node_uncached("n1"))
        .await
        .expect("fresh list");
    assert!(
        names(&fresh).contains(&"a/p1".to_string()),
        "{:?}",
        names(&fresh)
    );
    let listed: Vec<_> = fake
        .calls("GET", PODS)
        .into_iter()
        .filter(|c| c.query.contains("fieldSelector"))
        .collect();
    assert_eq!(listed.len(), 1);
    assert!(
        listed[0].query.contains("fieldSelector=spec.nodeName%3Dn1"),
        "{}",
        listed[0].query
    );

    let mut terminating = pod("a", "p1", "11");
    terminating["metadata"]["deletionTimestamp"] = "2026-11-29T20:00:00Z".into();
    fake.push(PODS, "MODIFIED", terminating);
    let s = store.clone();
    eventually("the pod shown terminating", || {
        s.get::<Pod>(Some("a"), "p1")
            .is_ok_and(|p| p.is_some_and(|p| p.metadata.deletion_timestamp.is_some()))
    })
    .await;

    // A PodDisruptionBudget refuses: nothing changed, and the server's reason is kept.
    let eviction2 = "/api/v1/namespaces/a/pods/p2/eviction";
    fake.reply("POST", eviction2, |_| {
        let mut s = status(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
        );
        s["details"] = json!({"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]});
        (429, s)
    });
    let s = store.clone();
    let refused = blocking(move || s.evict("a", "p2", Preconditions::NONE)).await;
    let Err(StoreError::Refused(key, message)) = refused else {
        panic!("a budget's 429 is a refusal: {refused:?}");
    };
    assert_eq!(key, ObjectKey::of::<Pod>(Some("a"), "p2"));
    assert!(message.contains("needs 2 healthy pods"), "{message}");
    // Throttling is not a budget: retry later.
    fake.reply("POST", eviction2, |_| {
        (
            429,
            status(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
            ),
        )
    });
    let s = store.clone();
    let throttled = blocking(move || s.evict("a", "p2", Preconditions::NONE)).await;
    assert!(
        matches!(throttled, Err(StoreError::Unavailable(_))),
        "{throttled:?}"
    );
    let s = store.clone();
    assert!(
        blocking(move || s.get::<Pod>(Some("a"), "p2"))
            .await
            .is_ok_and(|p| p.is_some()),
        "a refused pod stays listed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_pod_deletes_it_past_any_budget() {
    let (fake, client) = FakeApi::start();
    fake.set_list(PODS, 200, list_of(vec![pod("a", "p1", "3")], "3"));
    let store = start(&fake, client).await;
    let path = "/api/v1/namespaces/a/pods/p1";
    // A pod's DELETE answers the pod, terminating within its grace period.
    fake.reply("DELETE", path, |_| {
        let mut p = pod("a", "p1", "12");
        p["metadata"]["deletionTimestamp"] = "2026-11-29T20:00:30Z".into();
        p["metadata"]["deletionGracePeriodSeconds"] = 30.into();
        (200, p)
    });

    let s = store.clone();
    let only = Preconditions {
        uid: Some("uid-p1"),
    };
    let deleted = blocking(move || s.delete_if::<Pod>(Some("a"), "p1", only)).await;
    assert_eq!(deleted, Ok(Deleted::Pending));
    let calls = fake.calls("DELETE", path);
    assert_eq!(calls.len(), 1);
    let body = calls[0].body.clone().expect("DeleteOptions");
    assert_eq!(body["preconditions"]["uid"], "uid-p1", "{body}");
    assert_eq!(body["propagationPolicy"], "Background");
    assert!(
        fake.calls("POST", &format!("{path}/eviction")).is_empty(),
        "no eviction: a forced drain must not wait for budgets"
    );
    let s = store.clone();
    let read = blocking(move || s.get::<Pod>(Some("a"), "p1"))
        .await
        .expect("get")
        .expect("still there while it terminates");
    assert!(read.metadata.deletion_timestamp.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_or_no_answer_is_unavailable() {
    let (fake, client) = FakeApi::start();
    let options = StoreOptions {
        write_timeout: Duration::from_millis(300),
        ..StoreOptions::default()
    };
    let store = KubeStore::start_with(
        client,
        tokio::runtime::Handle::current(),
        Duration::from_secs(10),
        options,
    )
    .await
    .expect("starts");
    let claim: NodeClaim = serde_json::from_value(node_claim("nc-1", "")).expect("claim");

    fake.fail("POST", NODECLAIMS);
    let (s, c) = (store.clone(), claim.clone());
    let lost = blocking(move || s.create(&c)).await;
    assert!(matches!(lost, Err(StoreError::Unavailable(_))), "{lost:?}");

    fake.hang("POST", NODECLAIMS);
    let s = store.clone();
    let silent = blocking(move || s.create(&claim)).await;
    let Err(StoreError::Unavailable(message)) = silent else {
        panic!("no answer is unavailable: {silent:?}");
    };
    assert!(message.contains("no answer within"), "{message}");
    // Nothing was written as far as reads can tell.
    let s = store.clone();
    assert_eq!(
        blocking(move || s.list::<NodeClaim>())
            .await
            .map(|l| l.len()),
        Ok(0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_within_a_deadline_gives_up_at_the_deadline_not_the_timeout() {
    let (fake, client) = FakeApi::start();
    // The store's own timeout is long; the leader's deadline is what must hold.
    let store = start(&fake, client).await;
    let claim: NodeClaim = serde_json::from_value(node_claim("nc-1", "")).expect("claim");
    fake.hang("POST", NODECLAIMS);
    let s = store.clone();
    let started = std::time::Instant::now();
    let cut = blocking(move || {
        let until = std::time::Instant::now() + Duration::from_millis(300);
        joiner_controller::deadline::within(until, || s.create(&claim))
    })
    .await;
    assert!(matches!(cut, Err(StoreError::Unavailable(_))), "{cut:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "gave up at the deadline: {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_update_leaves_the_kubelets_status_alone() {
    let (fake, client) = FakeApi::start();
    let mut cached = object("v1", "Node", None, "n1", "3");
    cached["status"] = json!({"conditions": [{"type": "Ready", "status": "True",
        "lastHeartbeatTime": "2026-11-29T20:00:00Z"}]});
    fake.set_list(NODES, 200, list_of(vec![cached], "3"));
    let store = start(&fake, client).await;
    // The kubelet reported since: the server's status is newer than the cache's.
    fake.reply("PUT", &format!("{NODES}/n1"), |r| {
        let mut o = stored(r, "5");
        o["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-29T20:00:40Z".into();
        (200, o)
    });
    let s = store.clone();
    let mut node = blocking(move || s.get::<Node>(None, "n1"))
        .await
        .expect("get")
        .expect("listed");
    node.metadata.labels = Some([("team".to_string(), "ml".to_string())].into());
    let s = store.clone();
    blocking(move || s.update(&node)).await.expect("update");
    assert!(
        fake.calls("PUT", &format!("{NODES}/n1/status")).is_empty(),
        "the cached status is not written back over the kubelet's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ec2nodeclass_update_writes_its_status_alone() {
    let (fake, client) = FakeApi::start();
    let mut class = object("karpenter.k8s.aws/v1", "EC2NodeClass", None, "gpu", "3");
    class["spec"] =
        json!({"role": "KarpenterNodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}]});
    fake.set_list(EC2NODECLASSES, 200, list_of(vec![class], "3"));
    let store = start(&fake, client).await;
    fake.watching(EC2NODECLASSES).await;
    fake.reply("PUT", &format!("{EC2NODECLASSES}/gpu/status"), |r| {
        (200, stored(r, "4"))
    });
    let s = store.clone();
    let mut class = blocking(move || s.get::<EC2NodeClass>(None, "gpu"))
        .await
        .expect("get")
        .expect("listed");
    class.status = Some(EC2NodeClassStatus {
        instance_profile: Some("lab_123".into()),
        ..EC2NodeClassStatus::default()
    });
    let s = store.clone();
    let updated = blocking(move || s.update(&class)).await.expect("update");
    assert_eq!(rv(&updated), "4");
    assert!(
        fake.calls("PUT", &format!("{EC2NODECLASSES}/gpu"))
            .is_empty(),
        "the user's object is never written back"
    );
    let put = &fake.calls("PUT", &format!("{EC2NODECLASSES}/gpu/status"))[0];
    let body = put.body.clone().expect("body");
    assert_eq!(body["metadata"]["resourceVersion"], "3", "as read");
    assert_eq!(body["status"]["instanceProfile"], "lab_123");

    // A stale resourceVersion is a conflict, retried by the caller.
    fake.reply("PUT", &format!("{EC2NODECLASSES}/gpu/status"), |_| {
        (409, status(409, "Conflict", "the object has been modified"))
    });
    let s = store.clone();
    let stale = blocking(move || s.update(&updated)).await;
    assert!(matches!(stale, Err(StoreError::Conflict(_))), "{stale:?}");
}
