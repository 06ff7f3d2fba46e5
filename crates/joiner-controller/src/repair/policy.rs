//! Which nodes are unhealthy enough to repair, and how, as Karpenter's node health controller
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

/// What node repair does to a node that breaks a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairAction {
    /// Reboot it in place (Karpenter v1.15's `RebootNode`, behind `RebootForRepair`).
    Reboot,
    /// Replace it: its NodeClaim is deleted and its pods planned again.
    Replace,
}

/// Which reasons of a condition a policy covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reasons {
    Any,
    /// An NVIDIA XID a reboot clears ([`REBOOT_CLEARABLE_XIDS`]), as the EKS node monitoring
    /// agent names it (`NvidiaXID119Error`).
    RebootClearableXid,
}

impl Reasons {
    fn cover(self, reason: Option<&str>) -> bool {
        match self {
            Reasons::Any => true,
            Reasons::RebootClearableXid => xid_of(reason.unwrap_or_default())
                .is_some_and(|x| REBOOT_CLEARABLE_XIDS.contains(&x)),
        }
    }
}

/// The NVIDIA XIDs node repair reboots for, where it may: faults of the GPU's firmware or
/// memory that a GPU reset clears (46 GPU stopped processing, 62 internal micro-controller
/// halt, 63 and 64 row remapping pending or failed to record, 109 context switch timeout, 119
/// and 120 GSP timeouts, 140 unrecovered ECC error). The rest the node monitoring agent calls
/// fatal (48 double-bit ECC, 74 NVLink, 79 fallen off the bus, 95 uncontained ECC, ...) are
/// replaced. Joiner's list: Karpenter v1.15's own was not at hand; 46 and 140 reboot and 79
/// replaces in both.
pub const REBOOT_CLEARABLE_XIDS: [u32; 8] = [46, 62, 63, 64, 109, 119, 120, 140];

/// The XID a condition reason names (`NvidiaXID119Error` → 119), if any.
fn xid_of(reason: &str) -> Option<u32> {
    let at = reason.find("XID")? + 3;
    let digits: String = reason[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// A condition that, held long enough, means the node should be repaired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairPolicy {
    /// The node condition's type.
    pub condition: &'static str,
    /// The status that is unhealthy.
    pub status: &'static str,
    /// The reasons covered.
    pub reasons: Reasons,
    /// How long the condition may hold before the node is repaired.
    pub toleration: Duration,
    pub action: RepairAction,
    /// How long the node's drain may take once repair acts (Karpenter v1.15's per-policy
    /// termination grace period): PodDisruptionBudgets pace the evictions until then, and what
    /// is left is deleted. Zero deletes the pods at once.
    pub drain: Duration,
}

/// The drain Karpenter v1.15's AWS policies allow a broken node: 10 minutes, none for a node
/// whose kubelet stopped reporting (`Ready: Unknown`: its pods are not running anyway).
const DRAIN: Duration = Duration::from_secs(600);

const fn policy(condition: &'static str, status: &'static str, minutes: u64) -> RepairPolicy {
    RepairPolicy {
        condition,
        status,
        reasons: Reasons::Any,
        toleration: Duration::from_secs(minutes * 60),
        action: RepairAction::Replace,
        drain: DRAIN,
    }
}

const fn at_once(policy: RepairPolicy) -> RepairPolicy {
    RepairPolicy {
        drain: Duration::ZERO,
        ..policy
    }
}

/// With `RebootForRepair`: a GPU fault a reboot clears is rebooted after 10 minutes, before
/// the policies that replace.
pub const AWS_REBOOT_POLICY: RepairPolicy = RepairPolicy {
    condition: "AcceleratedHardwareReady",
    status: "False",
    reasons: Reasons::RebootClearableXid,
    toleration: Duration::from_secs(600),
    action: RepairAction::Reboot,
    drain: DRAIN,
};

/// The AWS provider's policies, the reboot one first when `reboot` (a condition is judged by
/// the first policy that covers it).
pub fn aws_policies(reboot: bool) -> Vec<RepairPolicy> {
    reboot
        .then_some(AWS_REBOOT_POLICY)
        .into_iter()
        .chain(AWS_REPAIR_POLICIES)
        .collect()
}

/// Karpenter's AWS provider's repair policies: the kubelet's `Ready`, and the conditions the
/// EKS node monitoring agent reports (`AcceleratedHardwareReady` for GPU and Neuron faults).
pub const AWS_REPAIR_POLICIES: [RepairPolicy; 7] = [
    policy("Ready", "False", 30),
    at_once(policy("Ready", "Unknown", 30)),
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
    /// The condition's reason (`NvidiaXID119Error`), `""` when it gives none.
    pub reason: String,
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

/// The policy `node` breaks with the earliest deadline, if any. Time counts from the
/// condition's `lastTransitionTime`, or from `not_before` when later (the end of a reboot: a
/// condition that stayed as it was through the reboot has held only since).
pub fn broken(
    node: &Node,
    policies: &[RepairPolicy],
    not_before: Option<Timestamp>,
) -> Option<Broken> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    conditions
        .iter()
        .filter_map(|c| {
            let policy = policies.iter().find(|p| {
                p.condition == c.type_
                    && p.status == c.status
                    && p.reasons.cover(c.reason.as_deref())
            })?;
            let since = c.last_transition_time.as_ref()?.0;
            let since = not_before.map_or(since, |t| t.max(since));
            Some(Broken {
                policy: *policy,
                reason: c.reason.clone().unwrap_or_default(),
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
    not_before: &BTreeMap<String, Timestamp>,
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
        let name = node.metadata.name.clone().unwrap_or_default();
        if let Some(b) = broken(node, policies, not_before.get(&name).copied()) {
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
