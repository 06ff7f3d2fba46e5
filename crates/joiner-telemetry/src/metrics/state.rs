//! The cluster as it stands after a step, as Karpenter's state gauges describe it: what each
//! node offers and what its pods ask (`karpenter_nodes_*`), what each NodePool uses against its
//! limits, where each pod is (`karpenter_pods_state`), and whether the view is complete.
//!
//! A [`ClusterState`] is read on the step's thread ([`ClusterState::read`]) and then set on
//! the gauges wholesale ([`super::Metrics::set_state`]): a node, pool or pod that is gone loses
//! its series, so the series stay as many as the objects that exist.

use std::collections::{BTreeMap, BTreeSet};

use joiner_controller::store::ClusterStore;
use joiner_model::Quantity;
use joiner_model::api::{EC2NodeClass, NodeClaim, NodePool};
use joiner_model::resources::{ResourceList, add_into, parse_resource_list, pod_requests};
use joiner_model::wellknown::labels;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;

use super::conditions::{ConditionKind, ConditionState};
use super::lifetimes::{ClaimLife, PodTimes};
pub use super::objects::Objects;
use super::objects::{conditions_of, epoch, present_of, terminating_of};
use super::termination::Terminating;

/// The node labels Karpenter turns into metric labels, and the label each becomes
/// ([`label_name`]), in the order Joiner writes them (Karpenter's order varies between
/// restarts; PromQL does not care).
pub(crate) const NODE_LABELS: [(&str, &str); 31] = [
    (labels::NODEPOOL, "nodepool"),
    (labels::ZONE, "zone"),
    (labels::REGION, "region"),
    (labels::INSTANCE_TYPE, "instance_type"),
    (labels::ARCH, "arch"),
    (labels::OS, "os"),
    (labels::CAPACITY_TYPE, "capacity_type"),
    (labels::WINDOWS_BUILD, "windows_build"),
    (labels::CAPACITY_RESERVATION_ID, "capacity_reservation_id"),
    (
        labels::CAPACITY_RESERVATION_TYPE,
        "capacity_reservation_type",
    ),
    (
        labels::CAPACITY_RESERVATION_INTERRUPTIBLE,
        "capacity_reservation_interruptible",
    ),
    (labels::INSTANCE_HYPERVISOR, "instance_hypervisor"),
    (
        labels::INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
        "instance_encryption_in_transit_supported",
    ),
    (labels::INSTANCE_CATEGORY, "instance_category"),
    (labels::INSTANCE_CAPABILITY_FLEX, "instance_capability_flex"),
    (labels::INSTANCE_FAMILY, "instance_family"),
    (labels::INSTANCE_GENERATION, "instance_generation"),
    (labels::INSTANCE_SIZE, "instance_size"),
    (labels::INSTANCE_LOCAL_NVME, "instance_local_nvme"),
    (labels::INSTANCE_CPU, "instance_cpu"),
    (
        labels::INSTANCE_CPU_MANUFACTURER,
        "instance_cpu_manufacturer",
    ),
    (labels::INSTANCE_MEMORY, "instance_memory"),
    (labels::INSTANCE_EBS_BANDWIDTH, "instance_ebs_bandwidth"),
    (
        labels::INSTANCE_NETWORK_BANDWIDTH,
        "instance_network_bandwidth",
    ),
    (labels::INSTANCE_GPU_NAME, "instance_gpu_name"),
    (
        labels::INSTANCE_GPU_MANUFACTURER,
        "instance_gpu_manufacturer",
    ),
    (labels::INSTANCE_GPU_COUNT, "instance_gpu_count"),
    (labels::INSTANCE_GPU_MEMORY, "instance_gpu_memory"),
    (
        labels::INSTANCE_ACCELERATOR_NAME,
        "instance_accelerator_name",
    ),
    (
        labels::INSTANCE_ACCELERATOR_MANUFACTURER,
        "instance_accelerator_manufacturer",
    ),
    (labels::ZONE_ID, "zone_id"),
];

/// A metric's labels, names fixed, values from the objects.
pub type Labels = Vec<(&'static str, String)>;

/// The metric label of a node label key: its last path segment, `-` as `_`
/// (`node.kubernetes.io/instance-type` is `instance_type`).
pub fn label_name(key: &str) -> String {
    key.rsplit('/')
        .next()
        .unwrap_or(key)
        .to_ascii_lowercase()
        .replace('-', "_")
}

/// The `resource_type` label of a resource name, as Karpenter writes it: lower case, `-` as
/// `_` (`ephemeral-storage` is `ephemeral_storage`, `nvidia.com/gpu` stays).
pub fn resource_type(name: &str) -> String {
    name.to_ascii_lowercase().replace('-', "_")
}

/// A quantity in its base unit (cores, bytes, devices).
fn value(q: Quantity) -> f64 {
    q.nanos() as f64 / 1e9
}

/// What one node offers and what is asked of it, by resource.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeState {
    /// Karpenter's node labels, `node_name`, `phase` and `managed`.
    pub labels: Labels,
    pub allocatable: ResourceList,
    /// Capacity less allocatable: what the kubelet and system keep.
    pub overhead: ResourceList,
    pub pod_requests: ResourceList,
    pub pod_limits: ResourceList,
    pub daemon_requests: ResourceList,
    pub daemon_limits: ResourceList,
    pub lifetime_seconds: f64,
}

/// The gauges' values after a step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterState {
    /// Whether every watch the controller reads through was in sync.
    pub synced: bool,
    pub nodes: Vec<NodeState>,
    /// NodePool name to its `status.resources` and its `spec.limits`.
    pub pool_usage: BTreeMap<String, ResourceList>,
    pub pool_limits: BTreeMap<String, ResourceList>,
    /// `karpenter_pods_state`'s labels of each pod.
    pub pods: Vec<Labels>,
    /// Every condition of the NodeClaims, NodePools, EC2NodeClasses and Joiner's Nodes.
    pub conditions: Vec<ConditionState>,
    /// When the state was read, in seconds since the Unix epoch.
    pub at: f64,
    /// Every NodeClaim by name: its pool, creation and deletion request.
    pub claims: BTreeMap<String, ClaimLife>,
    /// Every Ready pod by uid, with how long it took from creation to Ready.
    pub started: Vec<(String, f64)>,
    /// Every pod's creation, binding and whether it runs.
    pub pod_times: Vec<PodTimes>,
    /// NodeClaims, NodePools, EC2NodeClasses and Joiner's Nodes being deleted.
    pub terminating: Vec<Terminating>,
    /// Every NodeClaim, NodePool, EC2NodeClass and Joiner's Node, by kind and name.
    pub present: BTreeSet<(ConditionKind, String)>,
}

impl ClusterState {
    /// Reads the cluster from `store` (its caches) at `now`. A list that cannot be read leaves
    /// its part empty and the state unsynced: gauges then say "not known", never a made-up zero
    /// with `synced` 1.
    pub fn read<S: ClusterStore>(store: &S, now: Timestamp) -> ClusterState {
        let synced = store.synced().is_ok();
        let (nodes, claims, pools, classes, pods) = (
            store.list::<Node>(),
            store.list::<NodeClaim>(),
            store.list::<NodePool>(),
            store.list::<EC2NodeClass>(),
            store.list::<Pod>(),
        );
        let complete =
            nodes.is_ok() && claims.is_ok() && pools.is_ok() && classes.is_ok() && pods.is_ok();
        let objects = Objects {
            nodes: &nodes.unwrap_or_default(),
            claims: &claims.unwrap_or_default(),
            pools: &pools.unwrap_or_default(),
            classes: &classes.unwrap_or_default(),
            pods: &pods.unwrap_or_default(),
        };
        ClusterState::of(&objects, synced && complete, now)
    }

    /// The state of these objects.
    pub fn of(objects: &Objects<'_>, synced: bool, now: Timestamp) -> ClusterState {
        let Objects {
            nodes,
            claims,
            pools,
            pods,
            ..
        } = *objects;
        let managed: BTreeMap<&str, &NodeClaim> = claims
            .iter()
            .filter_map(|c| c.status.node_name.as_deref().map(|n| (n, c)))
            .collect();
        let mut by_node: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
        for pod in pods.iter().filter(|p| !is_terminal(p)) {
            if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                by_node.entry(node).or_default().push(pod);
            }
        }
        let node_states = nodes
            .iter()
            .map(|n| {
                let name = n.metadata.name.as_deref().unwrap_or_default();
                let pods = by_node.get(name).map_or(&[][..], Vec::as_slice);
                node_state(n, managed.contains_key(name), pods, now)
            })
            .collect();
        let nodes_by_name: BTreeMap<&str, &Node> = nodes
            .iter()
            .filter_map(|n| n.metadata.name.as_deref().map(|name| (name, n)))
            .collect();
        ClusterState {
            synced,
            nodes: node_states,
            pool_usage: pools
                .iter()
                .map(|p| {
                    let usage = p
                        .status
                        .as_ref()
                        .map(|s| s.resources.clone())
                        .unwrap_or_default();
                    (p.metadata.name.clone().unwrap_or_default(), usage)
                })
                .collect(),
            pool_limits: pools
                .iter()
                .map(|p| {
                    (
                        p.metadata.name.clone().unwrap_or_default(),
                        p.spec.limits.clone(),
                    )
                })
                .collect(),
            pods: pods
                .iter()
                .map(|p| pod_labels(p, &nodes_by_name, &managed))
                .collect(),
            conditions: conditions_of(objects, now),
            at: epoch(now),
            claims: claims
                .iter()
                .map(|c| {
                    let life = ClaimLife {
                        nodepool: c.label(labels::NODEPOOL).unwrap_or_default().to_string(),
                        created: c
                            .metadata
                            .creation_timestamp
                            .as_ref()
                            .map_or(epoch(now), |t| epoch(t.0)),
                        deleting_since: c.metadata.deletion_timestamp.as_ref().map(|t| epoch(t.0)),
                        offering: c.label(labels::INSTANCE_TYPE).and_then(|t| {
                            let capacity = c.label(labels::CAPACITY_TYPE)?;
                            let zone = c.label(labels::ZONE)?;
                            Some((t.to_string(), capacity.to_string(), zone.to_string()))
                        }),
                    };
                    (c.name().to_string(), life)
                })
                .collect(),
            started: pods.iter().filter_map(started).collect(),
            pod_times: pods.iter().filter_map(pod_times).collect(),
            terminating: terminating_of(objects),
            present: present_of(objects),
        }
    }

    /// Cluster-wide pod requests as a percentage of allocatable, by resource, over the nodes
    /// Joiner manages (`karpenter_cluster_utilization_percent`).
    pub fn utilization(&self) -> BTreeMap<String, f64> {
        let (mut asked, mut offered) = (ResourceList::new(), ResourceList::new());
        for n in self.nodes.iter().filter(|n| is_managed(n)) {
            add_into(&mut asked, &n.pod_requests);
            add_into(&mut asked, &n.daemon_requests);
            add_into(&mut offered, &n.allocatable);
        }
        offered
            .iter()
            .filter(|(_, q)| !q.is_zero())
            .map(|(name, q)| {
                let used = asked.get(name).copied().map_or(0.0, value);
                (name.clone(), 100.0 * used / value(*q))
            })
            .collect()
    }
}

/// A Ready pod's uid and how long it took from creation to Ready.
fn started(pod: &Pod) -> Option<(String, f64)> {
    let uid = pod.metadata.uid.clone()?;
    let created = epoch(pod.metadata.creation_timestamp.as_ref()?.0);
    let ready = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?;
    let at = epoch(ready.last_transition_time.as_ref()?.0);
    Some((uid, (at - created).max(0.0)))
}

/// A pod's times; `None` for one without a uid or creation time.
fn pod_times(pod: &Pod) -> Option<PodTimes> {
    let status = pod.status.as_ref();
    let bound = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "True")
        })
        .map(|c| c.last_transition_time.as_ref().map_or(0.0, |t| epoch(t.0)))
        .or_else(|| {
            // Bound without a condition (as a manifest may say): bound at creation.
            let on_node = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
            on_node.then(|| {
                pod.metadata
                    .creation_timestamp
                    .as_ref()
                    .map_or(0.0, |t| epoch(t.0))
            })
        });
    Some(PodTimes {
        name: pod.metadata.name.clone().unwrap_or_default(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone()?,
        created: epoch(pod.metadata.creation_timestamp.as_ref()?.0),
        bound,
        started: matches!(
            status.and_then(|s| s.phase.as_deref()),
            Some("Running" | "Succeeded" | "Failed")
        ),
    })
}

fn is_managed(n: &NodeState) -> bool {
    n.labels.iter().any(|(k, v)| *k == "managed" && v == "true")
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn is_daemon(pod: &Pod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet")
}

/// The sum of a pod's container limits (Karpenter's `total_pod_limits`).
fn pod_limits(pod: &Pod) -> ResourceList {
    let mut out = ResourceList::new();
    let containers = pod.spec.iter().flat_map(|s| &s.containers);
    for c in containers {
        let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref());
        if let Some(Ok(limits)) = limits.map(parse_resource_list) {
            add_into(&mut out, &limits);
        }
    }
    out
}

fn node_state(node: &Node, managed: bool, pods: &[&Pod], now: Timestamp) -> NodeState {
    let node_labels = node.metadata.labels.clone().unwrap_or_default();
    let mut labels: Labels = NODE_LABELS
        .iter()
        .map(|(key, name)| (*name, node_labels.get(*key).cloned().unwrap_or_default()))
        .collect();
    let status = node.status.clone().unwrap_or_default();
    labels.push(("node_name", node.metadata.name.clone().unwrap_or_default()));
    labels.push(("phase", status.phase.clone().unwrap_or_default()));
    labels.push(("managed", managed.to_string()));
    let list = |l: Option<&BTreeMap<_, _>>| {
        l.and_then(|l| parse_resource_list(l).ok())
            .unwrap_or_default()
    };
    let allocatable = list(status.allocatable.as_ref());
    let capacity = list(status.capacity.as_ref());
    let overhead = capacity
        .iter()
        .map(|(name, c)| {
            let a = allocatable.get(name).copied().unwrap_or(Quantity::ZERO);
            (name.clone(), c.saturating_sub(a))
        })
        .collect();
    let mut state = NodeState {
        labels,
        allocatable,
        overhead,
        lifetime_seconds: node
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0.0, |t| now.duration_since(t.0).as_secs_f64().max(0.0)),
        ..NodeState::default()
    };
    for pod in pods {
        let requests = pod
            .spec
            .as_ref()
            .and_then(|s| pod_requests(s).ok())
            .unwrap_or_default();
        let limits = pod_limits(pod);
        let (r, l) = if is_daemon(pod) {
            (&mut state.daemon_requests, &mut state.daemon_limits)
        } else {
            (&mut state.pod_requests, &mut state.pod_limits)
        };
        add_into(r, &requests);
        add_into(l, &limits);
    }
    state
}

/// `karpenter_pods_state`'s labels: the pod, its owner, where it runs and how it is doing.
fn pod_labels(
    pod: &Pod,
    nodes: &BTreeMap<&str, &Node>,
    managed: &BTreeMap<&str, &NodeClaim>,
) -> Labels {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .next()
        .map(|o| {
            format!(
                "/apis/{}/namespaces/{namespace}/{}s/{}",
                o.api_version,
                o.kind.to_ascii_lowercase(),
                o.name
            )
        })
        .unwrap_or_default();
    let node_name = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let node_labels = nodes
        .get(node_name.as_str())
        .and_then(|n| n.metadata.labels.clone())
        .unwrap_or_default();
    let on_node = |key: &str| node_labels.get(key).cloned().unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    vec![
        ("name", pod.metadata.name.clone().unwrap_or_default()),
        ("namespace", namespace),
        ("owner", owner),
        ("scheduled", (!node_name.is_empty()).to_string()),
        ("nodepool", on_node(labels::NODEPOOL)),
        ("zone", on_node(labels::ZONE)),
        ("arch", on_node(labels::ARCH)),
        ("capacity_type", on_node(labels::CAPACITY_TYPE)),
        ("instance_type", on_node(labels::INSTANCE_TYPE)),
        ("phase", status.phase.unwrap_or_default()),
        ("ready", ready.to_string()),
        (
            "managed",
            managed.contains_key(node_name.as_str()).to_string(),
        ),
        ("node", node_name),
    ]
}
