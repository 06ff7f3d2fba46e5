//! Which nodes are unhealthy enough to repair, as Karpenter v1.14's node health controller
//! decides it, without I/O.
//!
//! A node breaks a repair policy when one of its conditions has the policy's type and status;
//! it may be repaired once that condition has held for the policy's toleration, counted from
//! the condition's `lastTransitionTime` (a condition without one is never repaired: how long it
//! has held is unknown). Where several policies are broken, the earliest deadline counts.
//!
//! A NodePool whose broken nodes are more than 20% of its nodes (rounded up: one of three may
//! be repaired, three of ten may not) repairs none of them: a bad driver rollout or a network
//! fault then leaves the fleet for a person to look at instead of recycling it.

use std::collections::BTreeMap;
use std::time::Duration;

use joiner_model::wellknown::labels;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;

use crate::clock::add;

/// A condition that, held long enough, means the node should be replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairPolicy {
    /// The node condition's type.
    pub condition: &'static str,
    /// The status that is unhealthy.
    pub status: &'static str,
    /// How long the condition may hold before the node is repaired.
    pub toleration: Duration,
}

const fn policy(condition: &'static str, status: &'static str, minutes: u64) -> RepairPolicy {
    RepairPolicy {
        condition,
        status,
        toleration: Duration::from_secs(minutes * 60),
    }
}

/// Karpenter's AWS provider's repair policies: the kubelet's `Ready`, and the conditions the
/// EKS node monitoring agent reports (`AcceleratedHardwareReady` for GPU and Neuron faults).
pub const AWS_REPAIR_POLICIES: [RepairPolicy; 7] = [
    policy("Ready", "False", 30),
    policy("Ready", "Unknown", 30),
    policy("AcceleratedHardwareReady", "False", 10),
    policy("StorageReady", "False", 30),
    policy("NetworkingReady", "False", 30),
    policy("KernelReady", "False", 30),
    policy("ContainerRuntimeReady", "False", 30),
];

/// The share of a NodePool's nodes that may be unhealthy for repair to go on, in percent.
pub const UNHEALTHY_LIMIT_PERCENT: usize = 20;

/// A node that breaks a policy, and from when it may be repaired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    pub policy: RepairPolicy,
    pub since: Timestamp,
    pub repair_at: Timestamp,
}

/// What node repair makes of one node of a NodePool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Replace it now.
    Repair(Broken),
    /// Broken, but not for long enough yet.
    Wait(Broken),
    /// Broken, but too many of its NodePool's nodes are: none of them is repaired.
    Blocked {
        broken: Broken,
        node_pool: String,
        unhealthy: usize,
        total: usize,
    },
}

/// The policy `node` breaks with the earliest deadline, if any.
pub fn broken(node: &Node, policies: &[RepairPolicy]) -> Option<Broken> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    conditions
        .iter()
        .filter_map(|c| {
            let policy = policies
                .iter()
                .find(|p| p.condition == c.type_ && p.status == c.status)?;
            let since = c.last_transition_time.as_ref()?.0;
            Some(Broken {
                policy: *policy,
                since,
                repair_at: add(since, policy.toleration),
            })
        })
        .min_by_key(|b| b.repair_at)
}

/// How many of `total` nodes may be unhealthy for repair to go on.
pub fn unhealthy_allowed(total: usize) -> usize {
    (total * UNHEALTHY_LIMIT_PERCENT).div_ceil(100)
}

/// The verdict on every broken node of a NodePool (by `karpenter.sh/nodepool`), by node name.
/// Nodes of no NodePool are not Joiner's to repair and get none.
pub fn verdicts(
    nodes: &[Node],
    policies: &[RepairPolicy],
    now: Timestamp,
) -> BTreeMap<String, Verdict> {
    let pool_of = |n: &Node| {
        n.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODEPOOL))
            .cloned()
    };
    let mut total: BTreeMap<String, usize> = BTreeMap::new();
    let mut broken_in: BTreeMap<String, Vec<(String, Broken)>> = BTreeMap::new();
    for node in nodes {
        let Some(pool) = pool_of(node) else {
            continue;
        };
        *total.entry(pool.clone()).or_default() += 1;
        if let Some(b) = broken(node, policies) {
            let name = node.metadata.name.clone().unwrap_or_default();
            broken_in.entry(pool).or_default().push((name, b));
        }
    }
    let mut out = BTreeMap::new();
    for (pool, broken) in broken_in {
        let total = total.get(&pool).copied().unwrap_or_default();
        let unhealthy = broken.len();
        let blocked = unhealthy > unhealthy_allowed(total);
        for (name, b) in broken {
            let verdict = if blocked {
                Verdict::Blocked {
                    broken: b,
                    node_pool: pool.clone(),
                    unhealthy,
                    total,
                }
            } else if b.repair_at <= now {
                Verdict::Repair(b)
            } else {
                Verdict::Wait(b)
            };
            out.insert(name, verdict);
        }
    }
    out
}

#[cfg(test)]
mod tests;
