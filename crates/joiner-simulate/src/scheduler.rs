//! What the rest of a cluster does, for tests and `joiner simulate`: kube-scheduler binding
//! pending pods to nodes that can take them, and the pod garbage collector deleting the pods of
//! Nodes that are gone.

use joiner_model::wellknown::labels;
use std::collections::BTreeSet;

use joiner_engine::snapshot::ClusterSnapshot;
use k8s_openapi::api::core::v1::{Node, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use joiner_controller::pods::{is_pending, pod_key};
use joiner_controller::store::{ClusterStore, StoreError, manifests_of};
use joiner_controller::{Config, ControllerError};

/// Binds pending pods to existing, initialized (or unmanaged) Nodes where the planner places
/// them, as kube-scheduler would, and starts them at `now` as the kubelet does (phase Running,
/// `status.startTime`, which a `do-not-disrupt` duration counts from). Returns the
/// `(pod, node)` bindings made.
pub fn schedule_pending<S: ClusterStore>(
    store: &S,
    config: &Config,
    now: Timestamp,
) -> Result<Vec<(String, String)>, ControllerError> {
    let pods = store.list::<Pod>()?;
    if !pods.iter().any(is_pending) {
        return Ok(Vec::new());
    }
    let mut m = manifests_of(store)?;
    // Only nodes that are up: a managed node before initialization has no GPUs to offer yet.
    m.nodes.retain(|n| node_ready(&n.object));
    let ready: BTreeSet<String> = m
        .nodes
        .iter()
        .filter_map(|n| n.object.metadata.name.clone())
        .collect();
    if ready.is_empty() {
        return Ok(Vec::new());
    }
    let snapshot = ClusterSnapshot::build(&m, &config.settings, &config.options)?;
    let plan = snapshot.plan();
    let mut out = Vec::new();
    for b in plan.bindings.iter().filter(|b| ready.contains(&b.node)) {
        let Some(pod) = pods.iter().find(|p| pod_key(p) == b.pod && is_pending(p)) else {
            continue;
        };
        // The claims it uses get their devices on that node first, as kube-scheduler
        // allocates them before it binds.
        let mut pod = crate::claims::allocate(store, pod.clone(), &b.node, &plan.claims)?;
        pod.spec.get_or_insert_with(Default::default).node_name = Some(b.node.clone());
        let status = pod.status.get_or_insert_with(PodStatus::default);
        status.phase = Some("Running".into());
        status.start_time = Some(Time(now));
        match store.update(&pod) {
            Ok(_) => out.push((b.pod.clone(), b.node.clone())),
            Err(StoreError::Conflict(_) | StoreError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

fn node_ready(node: &Node) -> bool {
    let l = node.metadata.labels.as_ref();
    let managed = l.is_some_and(|l| l.contains_key(labels::NODEPOOL));
    let initialized = l
        .and_then(|l| l.get(labels::INITIALIZED))
        .is_some_and(|v| v == "true");
    node.metadata.deletion_timestamp.is_none() && (!managed || initialized)
}

/// Pods bound to a Node that no longer exists are deleted, as the pod garbage collector does,
/// and the claims of pods that are gone are released ([`crate::claims::collect`]). Returns the
/// pods' keys.
pub fn collect_orphans<S: ClusterStore>(store: &S) -> Result<Vec<String>, ControllerError> {
    let nodes: BTreeSet<String> = store
        .list::<Node>()?
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    let mut out = Vec::new();
    for p in store.list::<Pod>()? {
        let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        if !nodes.contains(n) {
            match store.delete::<Pod>(
                p.metadata.namespace.as_deref(),
                p.metadata.name.as_deref().unwrap_or_default(),
            ) {
                Ok(_) | Err(StoreError::NotFound(_)) => out.push(pod_key(&p)),
                Err(e) => return Err(e.into()),
            }
        }
    }
    crate::claims::collect(store)?;
    Ok(out)
}
