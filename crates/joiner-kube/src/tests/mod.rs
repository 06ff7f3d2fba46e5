//! The store against a fake API server: the requests it sends and how it reads the answers.

mod controller;
mod past_cache;
mod reads;
mod watches;
mod writes;

use std::time::Duration;

use joiner_controller::store::Resource;
use serde_json::Value;

use crate::KubeStore;
use crate::test_support::{FakeApi, Recorded};

pub(super) const PODS: &str = "/api/v1/pods";
pub(super) const NODES: &str = "/api/v1/nodes";
pub(super) const NODECLAIMS: &str = "/apis/karpenter.sh/v1/nodeclaims";
pub(super) const NODEPOOLS: &str = "/apis/karpenter.sh/v1/nodepools";
pub(super) const EC2NODECLASSES: &str = "/apis/karpenter.k8s.aws/v1/ec2nodeclasses";
pub(super) const DEVICECLASSES: &str = "/apis/resource.k8s.io/v1/deviceclasses";

/// Starts a store on the fake server and waits until the watches tests push into are open.
pub(super) async fn start(fake: &FakeApi, client: kube::Client) -> KubeStore {
    let store = KubeStore::start(
        client,
        tokio::runtime::Handle::current(),
        Duration::from_secs(10),
    )
    .await
    .expect("the store starts");
    for path in [PODS, NODECLAIMS, NODEPOOLS] {
        fake.watching(path).await;
    }
    store
}

/// `namespace/name` (or `name`) of each object, in the order given.
pub(super) fn names<K: Resource>(objects: &[K]) -> Vec<String> {
    objects
        .iter()
        .map(|o| {
            let m = o.meta();
            match &m.namespace {
                Some(ns) => format!("{ns}/{}", m.name.as_deref().unwrap_or_default()),
                None => m.name.clone().unwrap_or_default(),
            }
        })
        .collect()
}

pub(super) fn rv<K: Resource>(o: &K) -> String {
    o.meta().resource_version.clone().unwrap_or_default()
}

/// The stored object the server answers a write with: the body, with a new version.
pub(super) fn stored(r: &Recorded, version: &str) -> Value {
    let mut body = r.body.clone().unwrap_or(Value::Null);
    body["metadata"]["resourceVersion"] = version.into();
    body["metadata"]["uid"] = "uid-new".into();
    body
}
