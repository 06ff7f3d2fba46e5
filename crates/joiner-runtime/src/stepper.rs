//! One step of the live controller, with what the process needs to know about it afterwards.
//!
//! The controller core is synchronous and its store and cloud block on async calls inside, so a
//! step runs on a blocking thread (see [`crate::run_loop`]). Everything that needs the store
//! after a step (the NodePool of each NodeClaim for metric labels, uids for Events) is read
//! here, on that same thread, so the async side never touches the store.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use joiner_controller::clock::Clock;
use joiner_controller::cloud::CloudProvider;
use joiner_controller::store::{
    ClusterStore, Deleted, ObjectKey, Preconditions, Resource, StoreError,
};
use joiner_controller::{Config, Controller, StepReport};
use joiner_model::api::NodeClaim;
use joiner_simulate::{SimulatedCloud, SimulatedKubelet};
use joiner_telemetry::events::Subjects;
use joiner_telemetry::metrics::state::ClusterState;
use joiner_telemetry::metrics::{Claims, claims_of};

/// The annotation kwok looks for on the Nodes it should pretend to be the kubelet of.
pub const KWOK_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// What one step did and what the async side needs to act on it.
#[derive(Debug, Clone, Default)]
pub struct Stepped {
    pub report: StepReport,
    /// How long the controller's step took.
    pub took: Duration,
    /// Metric labels of every NodeClaim seen before or after the step (deleted ones included).
    pub claims: Claims,
    /// The cluster after the step, for the state gauges.
    pub state: ClusterState,
    /// Uids and Nodes of the objects the report's events are about.
    pub subjects: Subjects,
}

/// Something the loop can step on a blocking thread.
pub trait Step: Send + 'static {
    fn step(&mut self) -> Stepped;
}

/// A simulated kubelet that registers Nodes for the simulated cloud's instances.
struct Kubelet {
    kubelet: SimulatedKubelet,
    cloud: Arc<SimulatedCloud>,
    kwok: bool,
}

/// The controller over a store, a cloud and a clock, plus (with the simulated cloud) the
/// kubelet that makes its instances appear as Nodes.
pub struct Stepper<S, C, K> {
    controller: Controller<S, C, K>,
    store: S,
    clock: K,
    kubelet: Option<Kubelet>,
    /// Metric labels by NodeClaim, as of the end of the last step.
    known_claims: Claims,
}

impl<S, C, K> Stepper<S, C, K>
where
    S: ClusterStore + Clone,
    C: CloudProvider,
    K: Clock + Clone,
{
    pub fn new(store: S, cloud: C, clock: K, config: Config) -> Self {
        Stepper {
            controller: Controller::new(store.clone(), cloud, clock.clone(), config),
            store,
            clock,
            kubelet: None,
            known_claims: Claims::new(),
        }
    }

    /// Registers Nodes for the simulated cloud's instances before each step; with `kwok`, the
    /// Nodes carry [`KWOK_ANNOTATION`] so kwok runs their pods.
    pub fn with_kubelet(mut self, cloud: Arc<SimulatedCloud>, kwok: bool) -> Self {
        self.kubelet = Some(Kubelet {
            kubelet: SimulatedKubelet::default(),
            cloud,
            kwok,
        });
        self
    }

    fn claims(&self) -> Claims {
        match self.store.list::<NodeClaim>() {
            Ok(claims) => claims_of(&claims),
            Err(e) => {
                tracing::debug!(error = %e, "could not list NodeClaims for metric labels");
                self.known_claims.clone()
            }
        }
    }
}

impl<S, C, K> Step for Stepper<S, C, K>
where
    S: ClusterStore + Clone + Send + 'static,
    C: CloudProvider + Send + 'static,
    K: Clock + Clone + Send + 'static,
{
    fn step(&mut self) -> Stepped {
        if let Some(k) = &self.kubelet {
            let now = self.clock.now();
            let result = if k.kwok {
                k.kubelet.step(&KwokNodes(&self.store), &k.cloud, now)
            } else {
                k.kubelet.step(&self.store, &k.cloud, now)
            };
            if let Err(e) = result {
                tracing::warn!(error = %e, "simulated kubelet");
            }
        }
        let started = Instant::now();
        let report = self.controller.step();
        let took = started.elapsed();
        let after = self.claims();
        let mut claims = std::mem::replace(&mut self.known_claims, after.clone());
        claims.extend(after);
        let state = ClusterState::read(&self.store, self.clock.now());
        let subjects = Subjects::read(&self.store, &report);
        Stepped {
            report,
            took,
            claims,
            state,
            subjects,
        }
    }
}

/// A store that adds [`KWOK_ANNOTATION`] to every Node created through it.
pub struct KwokNodes<'a, S>(pub &'a S);

impl<S: ClusterStore> ClusterStore for KwokNodes<'_, S> {
    fn list<K: Resource>(&self) -> Result<Vec<K>, StoreError> {
        self.0.list()
    }
    fn get<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, StoreError> {
        self.0.get(namespace, name)
    }
    fn get_uncached<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, StoreError> {
        self.0.get_uncached(namespace, name)
    }
    fn undecodable<K: Resource>(&self) -> Result<Vec<ObjectKey>, StoreError> {
        self.0.undecodable::<K>()
    }
    fn synced(&self) -> Result<(), StoreError> {
        self.0.synced()
    }
    fn pods_on_node_uncached(
        &self,
        node: &str,
    ) -> Result<Vec<k8s_openapi::api::core::v1::Pod>, StoreError> {
        self.0.pods_on_node_uncached(node)
    }
    fn evict(
        &self,
        namespace: &str,
        name: &str,
        only: Preconditions<'_>,
    ) -> Result<Deleted, StoreError> {
        self.0.evict(namespace, name, only)
    }
    fn create<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
        if K::KIND != "Node" {
            return self.0.create(object);
        }
        let mut node = object.clone();
        node.meta_mut()
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(KWOK_ANNOTATION.0.into(), KWOK_ANNOTATION.1.into());
        self.0.create(&node)
    }
    fn update<K: Resource>(&self, object: &K) -> Result<K, StoreError> {
        self.0.update(object)
    }
    fn delete_if<K: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
        only: Preconditions<'_>,
    ) -> Result<Deleted, StoreError> {
        self.0.delete_if::<K>(namespace, name, only)
    }
}

#[cfg(test)]
mod tests {
    use joiner_controller::clock::ManualClock;
    use joiner_controller::store::InMemoryCluster;
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn node(name: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    #[test]
    fn kwok_nodes_are_annotated_and_nothing_else_is() {
        let store = InMemoryCluster::new(ManualClock::new());
        let kwok = KwokNodes(&store);
        kwok.create(&node("n1")).unwrap();
        let stored: Node = store.get(None, "n1").unwrap().unwrap();
        let annotations = stored.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations.get(KWOK_ANNOTATION.0).map(String::as_str),
            Some(KWOK_ANNOTATION.1)
        );
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("default".into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        };
        kwok.create(&pod).unwrap();
        let stored: Pod = store.get(Some("default"), "p").unwrap().unwrap();
        assert!(stored.metadata.annotations.unwrap_or_default().is_empty());
    }
}
