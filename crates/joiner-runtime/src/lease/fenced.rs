//! The controller's store, cloud and interruption queue behind the [`Fence`]: every write
//! asks it first and is refused, unsent, once this replica no longer holds the Lease, so a lost
//! Lease stops writes at once, in the middle of a step. A write that is let through runs within
//! the deadline the fence gives (`joiner_controller::deadline`): the kube-rs and AWS edges cut
//! its timeout to it, so it cannot land after another replica could have taken over. Reads
//! pass: they change nothing.

use joiner_controller::cloud::{
    CloudError, CloudInstanceType, CloudProvider, Instance, LaunchRequest, Launched,
    NodeClassResolution,
};
use joiner_controller::deadline;
use joiner_controller::interruption::{InterruptionQueue, QueueMessage};
use joiner_controller::store::{
    ClusterStore, Deleted, ObjectKey, Preconditions, Resource, StoreError,
};

use super::fence::Fence;

/// A [`ClusterStore`] whose writes (`create`, `update`, `delete`, `evict`) are sent only while
/// the fence holds, and within its deadline; otherwise `StoreError::Unavailable("not the
/// leader: …")`.
#[derive(Debug, Clone)]
pub struct FencedStore<S> {
    inner: S,
    fence: Fence,
}

impl<S> FencedStore<S> {
    pub fn new(inner: S, fence: Fence) -> Self {
        FencedStore { inner, fence }
    }

    /// Runs the write `call` within the fence's deadline, or refuses it unsent.
    fn write<R>(&self, call: impl FnOnce() -> Result<R, StoreError>) -> Result<R, StoreError> {
        let until = self.fence.check().map_err(StoreError::Unavailable)?;
        deadline::within(until, call)
    }
}

impl<S: ClusterStore> ClusterStore for FencedStore<S> {
    fn list<K: Resource>(&self) -> Result<Vec<K>, StoreError> {
        self.inner.list()
    }
    fn get<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, StoreError> {
        self.inner.get(namespace, name)
    }
    fn get_uncached<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, StoreError> {
        self.inner.get_uncached(namespace, name)
    }
    fn undecodable<K: Resource>(&self) -> Result<Vec<ObjectKey>, StoreError> {
        self.inner.undecodable::<K>()
    }
    fn synced(&self) -> Result<(), StoreError> {
        self.inner.synced()
    }
    fn pods_on_node_uncached(
        &self,
        node: &str,
    ) -> Result<Vec<k8s_openapi::api::core::v1::Pod>, StoreError> {
        self.inner.pods_on_node_uncached(node)
    }
    fn create<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
        self.write(|| self.inner.create(object))
    }
    fn update<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
        self.write(|| self.inner.update(object))
    }
    fn delete_if<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
        only: Preconditions<'_>,
    ) -> Result<Deleted, StoreError> {
        self.write(|| self.inner.delete_if::<K>(namespace, name, only))
    }
    fn evict(
        &self,
        namespace: &str,
        name: &str,
        only: Preconditions<'_>,
    ) -> Result<Deleted, StoreError> {
        self.write(|| self.inner.evict(namespace, name, only))
    }
}

/// A [`CloudProvider`] whose `launch`, `terminate`, `reboot` and launch-template deletion are sent only
/// while the fence holds, and within its deadline; otherwise `CloudError::Other("not the
/// leader: …")` (nothing was sent: the caller retries on a later step, when it leads).
#[derive(Debug, Clone)]
pub struct FencedCloud<C> {
    inner: C,
    fence: Fence,
}

impl<C> FencedCloud<C> {
    pub fn new(inner: C, fence: Fence) -> Self {
        FencedCloud { inner, fence }
    }
}

/// Runs the cloud write `call` within `fence`'s deadline, or refuses it unsent.
fn cloud_write<R>(
    fence: &Fence,
    call: impl FnOnce() -> Result<R, CloudError>,
) -> Result<R, CloudError> {
    let until = fence.check().map_err(CloudError::Other)?;
    deadline::within(until, call)
}

impl<C: CloudProvider> CloudProvider for FencedCloud<C> {
    fn launch(&self, request: &LaunchRequest) -> Result<Launched, CloudError> {
        cloud_write(&self.fence, || self.inner.launch(request))
    }
    fn terminate(&self, instance_id: &str) -> Result<(), CloudError> {
        cloud_write(&self.fence, || self.inner.terminate(instance_id))
    }
    fn reboot(&self, instance_id: &str) -> Result<(), CloudError> {
        cloud_write(&self.fence, || self.inner.reboot(instance_id))
    }
    fn get(&self, instance_id: &str) -> Result<Option<Instance>, CloudError> {
        self.inner.get(instance_id)
    }
    fn list(&self, cluster_name: &str) -> Result<Vec<Instance>, CloudError> {
        self.inner.list(cluster_name)
    }
    fn instance_types(&self) -> Result<Vec<CloudInstanceType>, CloudError> {
        self.inner.instance_types()
    }
    fn delete_unused_launch_templates(
        &self,
        node_classes: &[joiner_model::api::EC2NodeClass],
    ) -> Result<Vec<String>, CloudError> {
        cloud_write(&self.fence, || {
            self.inner.delete_unused_launch_templates(node_classes)
        })
    }
    fn list_instance_profiles(&self) -> Result<Vec<String>, CloudError> {
        self.inner.list_instance_profiles()
    }
    fn delete_instance_profile(&self, name: &str) -> Result<(), CloudError> {
        cloud_write(&self.fence, || self.inner.delete_instance_profile(name))
    }
    /// May create an instance profile: a write, so fenced like the others.
    fn resolve_node_class(&self, class: &joiner_model::api::EC2NodeClass) -> NodeClassResolution {
        cloud_write(&self.fence, || Ok(self.inner.resolve_node_class(class)))
            .unwrap_or_else(NodeClassResolution::failed)
    }
}

/// An [`InterruptionQueue`] whose deletes are sent only while the fence holds, and within its
/// deadline: a replica that lost the Lease must not delete a message the new leader has not
/// handled. Receiving passes (an undeleted message comes back after its visibility timeout).
pub struct FencedQueue<Q> {
    inner: Q,
    fence: Fence,
}

impl<Q> FencedQueue<Q> {
    pub fn new(inner: Q, fence: Fence) -> Self {
        FencedQueue { inner, fence }
    }
}

impl<Q: InterruptionQueue> InterruptionQueue for FencedQueue<Q> {
    fn receive(&self, max: usize) -> Result<Vec<QueueMessage>, CloudError> {
        self.inner.receive(max)
    }
    fn delete(&self, receipt: &str) -> Result<(), CloudError> {
        cloud_write(&self.fence, || self.inner.delete(receipt))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use joiner_controller::clock::ManualClock;
    use joiner_controller::store::InMemoryCluster;
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::lease::{Elector, LeaseRecord, ManualTicker, Ticker, Timings};

    fn node(name: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    /// `ticker`'s fence, held from now as a 15 s Lease just renewed holds it.
    fn held_by(ticker: Arc<dyn Ticker>) -> Fence {
        let now = ticker.now();
        let fence = Fence::new(ticker);
        let mut elector = Elector::new("a", Timings::default(), fence.clone());
        let record = LeaseRecord {
            holder: "a".into(),
            lease_duration: Duration::from_secs(15),
            renew_time: None,
            acquire_time: None,
            transitions: 0,
            resource_version: "1".into(),
        };
        elector.wrote(now, &record);
        fence
    }

    /// A fence held from now until the default renew deadline (10 s) by the manual clock.
    fn leading() -> (Fence, ManualTicker) {
        let ticker = ManualTicker::default();
        let fence = held_by(Arc::new(ticker.clone()));
        (fence, ticker)
    }

    #[test]
    fn the_fenced_store_refuses_writes_past_the_renew_deadline_and_sends_nothing() {
        let cluster = InMemoryCluster::new(ManualClock::new());
        let (fence, ticker) = leading();
        let store = FencedStore::new(&cluster, fence);
        store.create(&node("n1")).expect("leading: written");
        ticker.advance(Duration::from_secs(10));

        let refused = store.create(&node("n2"));
        let Err(StoreError::Unavailable(why)) = refused else {
            panic!("past the deadline a write is refused: {refused:?}");
        };
        assert!(why.starts_with("not the leader: "), "{why}");
        let mut n1: Node = store.get(None, "n1").expect("reads pass").expect("there");
        n1.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
        assert!(store.update(&n1).is_err());
        assert!(store.delete::<Node>(None, "n1").is_err());
        assert!(store.evict("default", "p", Preconditions::NONE).is_err());
        // The cluster is as it was: one node, unlabelled.
        let nodes: Vec<Node> = cluster.list().expect("list");
        assert_eq!(nodes.len(), 1);
        assert!(nodes[0].metadata.labels.is_none());
    }

    /// Counts the writes that reach it.
    #[derive(Default)]
    struct Counting {
        writes: AtomicUsize,
    }

    impl CloudProvider for Counting {
        fn launch(&self, _: &LaunchRequest) -> Result<Launched, CloudError> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            Err(CloudError::NoOfferings)
        }
        fn terminate(&self, _: &str) -> Result<(), CloudError> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn reboot(&self, _: &str) -> Result<(), CloudError> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn get(&self, _: &str) -> Result<Option<Instance>, CloudError> {
            Ok(None)
        }
        fn list(&self, _: &str) -> Result<Vec<Instance>, CloudError> {
            Ok(Vec::new())
        }
        fn instance_types(&self) -> Result<Vec<CloudInstanceType>, CloudError> {
            Ok(Vec::new())
        }
        fn delete_unused_launch_templates(
            &self,
            _: &[joiner_model::api::EC2NodeClass],
        ) -> Result<Vec<String>, CloudError> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            Ok(Vec::new())
        }
        fn list_instance_profiles(&self) -> Result<Vec<String>, CloudError> {
            Ok(Vec::new())
        }
        fn delete_instance_profile(&self, _: &str) -> Result<(), CloudError> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn resolve_node_class(&self, _: &joiner_model::api::EC2NodeClass) -> NodeClassResolution {
            self.writes.fetch_add(1, Ordering::SeqCst);
            NodeClassResolution::failed(CloudError::NoOfferings)
        }
    }

    #[test]
    fn the_fenced_cloud_refuses_launches_and_terminations_past_the_renew_deadline() {
        let (fence, ticker) = leading();
        let inner = Counting::default();
        let cloud = FencedCloud::new(&inner, fence);
        assert_eq!(cloud.terminate("i-1"), Ok(()));
        assert_eq!(inner.writes.load(Ordering::SeqCst), 1);
        ticker.advance(Duration::from_secs(10));
        let refused = cloud.terminate("i-1");
        assert!(
            matches!(&refused, Err(CloudError::Other(m)) if m.starts_with("not the leader")),
            "{refused:?}"
        );
        assert!(matches!(
            cloud.launch(&LaunchRequest::default()),
            Err(CloudError::Other(_))
        ));
        assert!(matches!(
            cloud.delete_instance_profile("p"),
            Err(CloudError::Other(_))
        ));
        assert_eq!(inner.writes.load(Ordering::SeqCst), 1, "nothing sent");
        assert_eq!(cloud.list("c"), Ok(Vec::new()), "reads pass");
    }

    /// Records the deadline each write was sent within.
    #[derive(Default)]
    struct Timed {
        left: std::sync::Mutex<Vec<Option<Duration>>>,
    }

    impl Timed {
        fn sent(&self) {
            self.left.lock().unwrap().push(deadline::left());
        }
    }

    impl InterruptionQueue for Timed {
        fn receive(&self, _: usize) -> Result<Vec<QueueMessage>, CloudError> {
            Ok(Vec::new())
        }
        fn delete(&self, _: &str) -> Result<(), CloudError> {
            self.sent();
            Ok(())
        }
    }

    #[test]
    fn a_write_let_through_must_end_before_another_replica_could_lead() {
        // The system clock, which the edges measure deadlines by.
        let fence = held_by(Arc::new(crate::lease::SystemTicker));
        let inner = Timed::default();
        let queue = FencedQueue::new(&inner, fence.clone());
        queue.delete("receipt-1").expect("leading: sent");
        // Unfenced, a call keeps its own timeout.
        inner.delete("receipt-2").unwrap();
        let left = inner.left.lock().unwrap().clone();
        let fenced = left[0].expect("sent within a deadline");
        assert!(
            fenced <= Duration::from_secs(14) && fenced > Duration::from_secs(13),
            "a Lease of 15 s, renewed just now, less the in-flight margin: {fenced:?}"
        );
        assert_eq!(left[1], None);
    }

    #[test]
    fn the_fenced_queue_deletes_nothing_past_the_renew_deadline() {
        let (fence, ticker) = leading();
        let inner = Timed::default();
        let queue = FencedQueue::new(&inner, fence);
        ticker.advance(Duration::from_secs(10));
        let refused = queue.delete("receipt-1");
        assert!(
            matches!(&refused, Err(CloudError::Other(m)) if m.starts_with("not the leader")),
            "{refused:?}"
        );
        assert!(inner.left.lock().unwrap().is_empty(), "nothing sent");
        assert_eq!(queue.receive(10), Ok(Vec::new()), "receiving passes");
    }
}
