//! The overlay's rules, fed watch events directly.

use super::*;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use watcher::Event;

const TTL: Duration = Duration::from_secs(60);

fn cm(name: &str, rv: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            resource_version: Some(rv.into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

fn synced(objects: &[ConfigMap]) -> KindCache<ConfigMap> {
    let cache = KindCache::new(true, TTL);
    cache.apply(Event::Init);
    for o in objects {
        cache.apply(Event::InitApply(Typed::Valid(o.clone())));
    }
    cache.apply(Event::InitDone);
    cache
}

fn versions(cache: &KindCache<ConfigMap>) -> Vec<(String, String)> {
    cache
        .list()
        .expect("list")
        .into_iter()
        .map(|o| {
            (
                o.metadata.name.unwrap_or_default(),
                o.metadata.resource_version.unwrap_or_default(),
            )
        })
        .collect()
}

fn v(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn unsynced_caches_refuse_reads() {
    let cache = KindCache::<ConfigMap>::new(true, TTL);
    assert!(matches!(cache.list(), Err(StoreError::Unavailable(_))));
}

#[test]
fn a_write_shows_until_the_watch_delivers_its_version() {
    let cache = synced(&[cm("a", "1")]);
    cache.wrote(&cache.ticket(), &cm("a", "5"));
    cache.wrote(&cache.ticket(), &cm("b", "6"));
    assert_eq!(versions(&cache), v(&[("a", "5"), ("b", "6")]));
    // An event from before the write changes nothing visible.
    cache.apply(Event::Apply(Typed::Valid(cm("a", "3"))));
    assert_eq!(versions(&cache), v(&[("a", "5"), ("b", "6")]));
    // The written version arrives: the cache speaks again, and what follows shows.
    cache.apply(Event::Apply(Typed::Valid(cm("a", "5"))));
    cache.apply(Event::Apply(Typed::Valid(cm("a", "7"))));
    assert_eq!(versions(&cache), v(&[("a", "7"), ("b", "6")]));
    assert_eq!(cache.overlaid(), 1);
}

#[test]
fn a_write_the_watch_delivered_during_the_call_leaves_nothing_behind() {
    let cache = synced(&[cm("a", "1")]);
    let t = cache.ticket();
    // The watch is faster than the answer, and someone changes the object again.
    cache.apply(Event::Apply(Typed::Valid(cm("a", "5"))));
    cache.apply(Event::Apply(Typed::Valid(cm("a", "8"))));
    cache.wrote(&t, &cm("a", "5"));
    assert_eq!(cache.overlaid(), 0);
    drop(t);
    assert!(
        cache.lock().history.is_empty(),
        "nothing kept once no write is in flight"
    );
    assert_eq!(versions(&cache), v(&[("a", "8")]));
}

#[test]
fn a_list_started_after_the_write_supersedes_it() {
    let cache = synced(&[cm("a", "1")]);
    cache.wrote(&cache.ticket(), &cm("a", "5"));
    // The watch expired; the new list already holds a later version of `a`.
    cache.apply(Event::Init);
    cache.apply(Event::InitApply(Typed::Valid(cm("a", "9"))));
    assert_eq!(
        versions(&cache),
        v(&[("a", "5")]),
        "the old cache serves until the list is done"
    );
    cache.apply(Event::InitDone);
    assert_eq!(versions(&cache), v(&[("a", "9")]));
    assert_eq!(cache.overlaid(), 0);
}

#[test]
fn a_list_started_before_the_write_does_not() {
    let cache = synced(&[cm("a", "1")]);
    cache.apply(Event::Init);
    cache.wrote(&cache.ticket(), &cm("a", "5"));
    cache.apply(Event::InitApply(Typed::Valid(cm("a", "1"))));
    cache.apply(Event::InitDone);
    assert_eq!(versions(&cache), v(&[("a", "5")]));
}

#[test]
fn a_delete_hides_the_object_until_the_watch_drops_it_or_shows_it_deleting() {
    let cache = synced(&[cm("a", "1"), cm("b", "2")]);
    let key = |n: &str| ObjectKey::of::<ConfigMap>(Some("ns"), n);
    cache.deleted(&cache.ticket(), key("a"));
    cache.deleted(&cache.ticket(), key("b"));
    assert!(versions(&cache).is_empty());
    assert_eq!(cache.get(&key("a")).expect("get"), None);
    cache.apply(Event::Delete(Typed::Valid(cm("a", "3"))));
    let mut deleting = cm("b", "4");
    deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    cache.apply(Event::Apply(Typed::Valid(deleting)));
    assert_eq!(cache.overlaid(), 0);
    assert_eq!(versions(&cache), v(&[("b", "4")]));
}

#[test]
fn a_conflict_falls_back_to_the_cache() {
    let cache = synced(&[cm("a", "1")]);
    cache.wrote(&cache.ticket(), &cm("a", "5"));
    cache.forget(&ObjectKey::of::<ConfigMap>(Some("ns"), "a"));
    assert_eq!(versions(&cache), v(&[("a", "1")]));
}

#[test]
fn writes_the_watch_never_shows_expire() {
    let cache = KindCache::<ConfigMap>::new(true, Duration::ZERO);
    cache.apply(Event::Init);
    cache.apply(Event::InitDone);
    cache.wrote(&cache.ticket(), &cm("a", "5"));
    assert!(versions(&cache).is_empty());
}

#[test]
fn repeated_failures_make_the_kind_unready_until_an_event_succeeds() {
    let cache = synced(&[]);
    let error = || {
        watcher::Error::WatchFailed(kube::Error::Api(
            kube::core::Status::failure("down", "InternalError")
                .with_code(500)
                .boxed(),
        ))
    };
    for _ in 0..crate::health::FAILURES_BEFORE_NOT_READY {
        assert!(cache.health().ready());
        cache.failed(&error());
    }
    assert!(!cache.health().ready());
    cache.apply(Event::Apply(Typed::Valid(cm("a", "1"))));
    assert!(cache.health().ready());
}

#[test]
fn a_list_answered_404_marks_the_kind_missing() {
    let cache = KindCache::<ConfigMap>::new(false, TTL);
    cache.failed(&watcher::Error::InitialListFailed(kube::Error::Api(
        kube::core::Status::failure("not found", "NotFound")
            .with_code(404)
            .boxed(),
    )));
    let h = cache.health();
    assert!(h.missing && h.settled() && h.ready());
    assert_eq!(cache.list().map(|l| l.len()), Ok(0));
}

#[test]
fn a_required_kind_that_is_not_served_refuses_reads() {
    let cache = KindCache::<ConfigMap>::new(true, TTL);
    cache.failed(&watcher::Error::InitialListFailed(kube::Error::Api(
        kube::core::Status::failure("not found", "NotFound")
            .with_code(404)
            .boxed(),
    )));
    let Err(StoreError::Unavailable(why)) = cache.list() else {
        panic!("a missing required kind must not read as empty");
    };
    assert!(
        why.contains("ConfigMap") && why.contains("not served"),
        "{why}"
    );
    assert!(
        cache
            .get(&ObjectKey::of::<ConfigMap>(Some("ns"), "a"))
            .is_err()
    );
    assert!(cache.undecodable().is_err());
}

#[test]
fn objects_that_do_not_decode_are_named_not_listed() {
    let cache = KindCache::<ConfigMap>::new(true, TTL);
    cache.apply(Event::Init);
    cache.apply(Event::InitApply(Typed::Valid(cm("a", "1"))));
    cache.apply(Event::InitApply(Typed::Invalid {
        metadata: Box::new(cm("b", "2").metadata),
        error: "unknown variant `Gte`".into(),
    }));
    cache.apply(Event::InitDone);
    assert_eq!(versions(&cache), v(&[("a", "1")]));
    assert_eq!(
        cache.undecodable(),
        Ok(vec![ObjectKey::of::<ConfigMap>(Some("ns"), "b")])
    );
    // Once it decodes again, it is listed and no longer named.
    cache.apply(Event::Apply(Typed::Valid(cm("b", "3"))));
    assert_eq!(versions(&cache), v(&[("a", "1"), ("b", "3")]));
    assert_eq!(cache.undecodable(), Ok(Vec::new()));
}
