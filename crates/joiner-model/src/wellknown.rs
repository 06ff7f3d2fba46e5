//! Joiner's vocabulary: every well-known label, annotation, taint, finalizer, cloud tag and
//! resource name that more than one part of Joiner reads or writes, defined once (as Karpenter
//! keeps them in `pkg/apis/v1/labels.go`), with the typed values some of them take.
//!
//! Keys Karpenter defines keep Karpenter's spelling, so Karpenter's objects, dashboards and
//! tooling read Joiner's unchanged; Joiner's own live under `joiner.dev/`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Node labels (and the NodeClaim labels they are copied from).
pub mod labels {
    /// The NodePool that launched the node.
    pub const NODEPOOL: &str = "karpenter.sh/nodepool";
    /// The NodeClaim a node was launched for (set by the kubelet from the launch's flags).
    pub const NODECLAIM: &str = "karpenter.sh/nodeclaim";
    /// The node has registered with the API server.
    pub const REGISTERED: &str = "karpenter.sh/registered";
    /// The node is initialized: ready, startup taints gone, extended resources advertised.
    pub const INITIALIZED: &str = "karpenter.sh/initialized";
    /// How the instance was bought; its values are [`super::CapacityType`]'s.
    pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
    /// The EC2NodeClass the node was launched with.
    pub const NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";

    pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
    pub const ARCH: &str = "kubernetes.io/arch";
    pub const OS: &str = "kubernetes.io/os";
    /// The Windows build of a Windows node (`10.0.20348` for Windows Server 2022).
    pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";
    pub const HOSTNAME: &str = "kubernetes.io/hostname";
    pub const REGION: &str = "topology.kubernetes.io/region";
    pub const ZONE: &str = "topology.kubernetes.io/zone";

    pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
    pub const INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
    pub const INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
    pub const INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
    pub const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
    pub const INSTANCE_CPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
    /// Memory in MiB, before any overhead.
    pub const INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
    pub const INSTANCE_HYPERVISOR: &str = "karpenter.k8s.aws/instance-hypervisor";
    /// Baseline network bandwidth in Mbps.
    pub const INSTANCE_NETWORK_BANDWIDTH: &str = "karpenter.k8s.aws/instance-network-bandwidth";
    /// Maximum EBS bandwidth in Mbps.
    pub const INSTANCE_EBS_BANDWIDTH: &str = "karpenter.k8s.aws/instance-ebs-bandwidth";
    /// Total local NVMe storage in GB.
    pub const INSTANCE_LOCAL_NVME: &str = "karpenter.k8s.aws/instance-local-nvme";
    pub const INSTANCE_GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
    pub const INSTANCE_GPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
    pub const INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
    /// Memory of one GPU in MiB (not the total of the instance's GPUs).
    pub const INSTANCE_GPU_MEMORY: &str = "karpenter.k8s.aws/instance-gpu-memory";
    /// Non-GPU accelerators (Inferentia, Trainium, Qualcomm AI100): name, manufacturer, count.
    pub const INSTANCE_ACCELERATOR_NAME: &str = "karpenter.k8s.aws/instance-accelerator-name";
    pub const INSTANCE_ACCELERATOR_MANUFACTURER: &str =
        "karpenter.k8s.aws/instance-accelerator-manufacturer";
    pub const INSTANCE_ACCELERATOR_COUNT: &str = "karpenter.k8s.aws/instance-accelerator-count";
    /// `true` or `false`: whether EC2 encrypts traffic between such instances.
    pub const INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED: &str =
        "karpenter.k8s.aws/instance-encryption-in-transit-supported";
    /// `true` for the flex types (`c7i-flex`), `false` otherwise.
    pub const INSTANCE_CAPABILITY_FLEX: &str = "karpenter.k8s.aws/instance-capability-flex";
    /// The zone's account-independent ID (`use1-az1`), known only from the subnets.
    pub const ZONE_ID: &str = "topology.k8s.aws/zone-id";
    /// The capacity reservation a `reserved` node runs in (`cr-0123…`).
    pub const CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
    /// `default` (an on-demand capacity reservation) or `capacity-block` (Capacity Blocks for
    /// ML), as EC2's `reservationType` says.
    pub const CAPACITY_RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";
    /// `true` when EC2 may take the reserved capacity back (interruptible reservations).
    pub const CAPACITY_RESERVATION_INTERRUPTIBLE: &str =
        "karpenter.k8s.aws/capacity-reservation-interruptible";

    /// The EC2 placement group (`pg-…`) of the nodes of a class with a `placementGroupSelector`.
    pub const PLACEMENT_GROUP_ID: &str = "karpenter.k8s.aws/placement-group-id";
    /// The partition (`1` to `7`) of a node in a partition placement group.
    pub const PLACEMENT_GROUP_PARTITION: &str = "karpenter.k8s.aws/placement-group-partition";

    /// Labels that belong to how a node is bought, not to its type: a type's offerings differ
    /// in them. The reservation labels exist only on `reserved` offerings, so a requirement on
    /// them behaves as `DoesNotExist` for every other offering; the zone ID only where the
    /// EC2NodeClass's subnets say it (zone IDs map to zone names per account); the partition
    /// only on the offerings of a partition placement group's classes, one per partition.
    pub const OFFERING_DEFINED: [&str; 7] = [
        ZONE,
        ZONE_ID,
        CAPACITY_TYPE,
        CAPACITY_RESERVATION_ID,
        CAPACITY_RESERVATION_TYPE,
        CAPACITY_RESERVATION_INTERRUPTIBLE,
        PLACEMENT_GROUP_PARTITION,
    ];

    /// Whether `key` is one of [`OFFERING_DEFINED`].
    pub fn defined_by_offering(key: &str) -> bool {
        OFFERING_DEFINED.contains(&key)
    }

    /// Labels an instance type defines itself, as Karpenter's AWS provider does: a type without
    /// one of them (no GPU, no local NVMe) does not have the label at all, so a requirement on
    /// it behaves as `DoesNotExist` for that type. `Gt 0` on the GPU count never matches a CPU
    /// type, where a NodePool's own (custom) keys are defined by the NodePool's requirements.
    /// Zone, zone ID and capacity type belong to the offering, not the type, and are not
    /// listed; nor is the region, which user-defined types do not carry.
    pub const INSTANCE_TYPE_DEFINED: [&str; 25] = [
        INSTANCE_TYPE,
        ARCH,
        OS,
        WINDOWS_BUILD,
        INSTANCE_FAMILY,
        INSTANCE_CATEGORY,
        INSTANCE_GENERATION,
        INSTANCE_SIZE,
        INSTANCE_CPU,
        INSTANCE_CPU_MANUFACTURER,
        INSTANCE_MEMORY,
        INSTANCE_HYPERVISOR,
        INSTANCE_NETWORK_BANDWIDTH,
        INSTANCE_EBS_BANDWIDTH,
        INSTANCE_LOCAL_NVME,
        INSTANCE_GPU_NAME,
        INSTANCE_GPU_MANUFACTURER,
        INSTANCE_GPU_COUNT,
        INSTANCE_GPU_MEMORY,
        INSTANCE_ACCELERATOR_NAME,
        INSTANCE_ACCELERATOR_MANUFACTURER,
        INSTANCE_ACCELERATOR_COUNT,
        INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
        INSTANCE_CAPABILITY_FLEX,
        "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
    ];

    /// Whether `key` is one of [`INSTANCE_TYPE_DEFINED`].
    pub fn defined_by_instance_type(key: &str) -> bool {
        INSTANCE_TYPE_DEFINED.contains(&key)
    }

    /// The NVIDIA device plugin picks its config by this node label.
    pub const NVIDIA_DEVICE_PLUGIN_CONFIG: &str = "nvidia.com/device-plugin.config";
    /// The GPU operator deploys no device plugin on a node where this is `"false"`: how a
    /// cluster moving to the NVIDIA DRA driver stops the plugin node by node.
    pub const NVIDIA_DEPLOY_DEVICE_PLUGIN: &str = "nvidia.com/gpu.deploy.device-plugin";
    /// The GPU operator's MIG manager label: which of its MIG configs (`all-1g.5gb`,
    /// `all-balanced`, ...) to apply to the node's GPUs.
    pub const NVIDIA_MIG_CONFIG: &str = "nvidia.com/mig.config";

    /// Joiner's own: the need (NodePool and pods) a NodeClaim was created for, as a hash. The
    /// same need always gives the same NodeClaim name, so a retried create conflicts instead of
    /// duplicating.
    pub const NEED: &str = "joiner.dev/need";
}

/// Annotations on pods, nodes and NodeClaims.
pub mod annotations {
    /// On a pod or a node: never disrupt voluntarily.
    pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
    /// `"true"` on a Node or NodeClaim keeps node repair off it (Karpenter v1.15); unlike
    /// `do-not-disrupt`, which repair does not heed.
    pub const DO_NOT_REPAIR: &str = "karpenter.sh/do-not-repair";
    /// On a pod: what its ReplicaSet weighs in choosing pods to remove; Karpenter weighs
    /// evictions by it too.
    pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
    /// On a NodeClaim whose requirements have `minValues`: `"true"` when it launches with fewer
    /// values than they ask for (`settings.minValuesPolicy: BestEffort`), else `"false"`.
    pub const MIN_VALUES_RELAXED: &str = "karpenter.sh/nodeclaim-min-values-relaxed";
    /// The DRA drivers a NodeClaim's pods need published before it counts as initialized.
    pub const REQUESTED_DRA_DRIVERS: &str = "karpenter.sh/requested-dra-drivers";
    /// When the NodeClaim's pods are deleted and its instance terminated whatever blocks the
    /// drain: the drain's start plus `terminationGracePeriod` (RFC 3339), as Karpenter names it.
    pub const TERMINATION_TIMESTAMP: &str = "karpenter.sh/nodeclaim-termination-timestamp";
    /// Joiner's own, on a NodeClaim whose launch the cloud rejected (unauthorized, an invalid
    /// parameter): how many times in a row, and not before when to try again (RFC 3339).
    pub const LAUNCH_REJECTIONS: &str = "joiner.dev/launch-rejections";
    pub const LAUNCH_RETRY_AFTER: &str = "joiner.dev/launch-retry-after";
    /// Drift stamps: the hash of the NodePool template a NodeClaim was created from, and the
    /// version of the hashing.
    pub const NODEPOOL_HASH: &str = "karpenter.sh/nodepool-hash";
    pub const NODEPOOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";
    /// Drift stamps: the hash of the EC2NodeClass spec, and the version of the hashing.
    pub const NODECLASS_HASH: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
    pub const NODECLASS_HASH_VERSION: &str = "karpenter.k8s.aws/ec2nodeclass-hash-version";
    /// On a NodeClaim: the instance profile its instance was launched with, as Karpenter
    /// records it, so a profile a role change left behind is deleted only once no NodeClaim
    /// names it.
    pub const INSTANCE_PROFILE: &str = "karpenter.k8s.aws/instance-profile-name";
    /// On an EC2NodeClass: how the NVIDIA DRA driver shares a GPU's capacity.
    pub const NVIDIA_CONSUMABLE_CAPACITY: &str = "karpenter.k8s.aws/nvidia-consumable-capacity";
    /// Joiner's own, on an EC2NodeClass: `"true"` when its nodes run the NVIDIA DRA driver with
    /// its `DynamicMIG` gate, which publishes every MIG profile of a GPU as partitionable devices
    /// and creates the instance a claim is allocated.
    pub const NVIDIA_DYNAMIC_MIG: &str = "joiner.dev/nvidia-dynamic-mig";

    /// Joiner's own, on a NodeClaim: the pods (`namespace/name`, comma separated) the plan put
    /// there.
    pub const PLANNED_PODS: &str = "joiner.dev/planned-pods";
    /// Joiner's own, on a NodeClaim being disrupted: why (a [`super::DisruptionReason`]).
    pub const DISRUPTION_REASON: &str = "joiner.dev/disruption";
    /// Joiner's own, on a NodeClaim being disrupted: the NodeClaims launched to replace it.
    pub const REPLACED_BY: &str = "joiner.dev/replaced-by";
    /// Joiner's own, on a NodeClaim: the interruption notice the cloud sent for its instance.
    pub const INTERRUPTED: &str = "joiner.dev/interrupted";
    /// Joiner's own, on a NodeClaim whose Node offers less than the plan predicted: what was
    /// predicted and what was found, by extended resource, DRA driver or gpu-feature-discovery
    /// label (JSON: `{"nvidia.com/gpu": {"predicted": "4", "found": "1"}, "gpu.nvidia.com":
    /// {"of": "draDevices", "predicted": "8", "found": "7"}}`). Plans trust the finding over the
    /// prediction from then on.
    pub const MISPREDICTED: &str = "joiner.dev/mispredicted";
    /// Joiner's own, on a NodeClaim that waits for DRA drivers: how many devices the plan
    /// expects each driver to publish on its node (JSON: `{"gpu.nvidia.com": 8}`), which its
    /// ResourceSlices are checked against.
    pub const PREDICTED_DRA_DEVICES: &str = "joiner.dev/predicted-dra-devices";
    /// Joiner's own, on an interrupted NodeClaim: when the instance goes (RFC 3339), by which its
    /// pods are deleted whatever blocks them (a spot reclaim, a scheduled change's start, the
    /// start of a Capacity Block's terminations). Absent when the notice gave no time.
    pub const INTERRUPTION_DEADLINE: &str = "joiner.dev/interruption-deadline";
    /// Joiner's own, on a pod expanded from a workload: the workload it stands for.
    pub const OWNER: &str = "joiner.dev/owner";
    /// On a NodeClaim node repair reboots (Karpenter's name): the Node's `status.nodeInfo.bootID`
    /// before the reboot, so a new boot is told from the old one.
    pub const REBOOT_PRE_BOOT_ID: &str = "karpenter.sh/reboot-pre-boot-id";
    /// Joiner's own, on a NodeClaim node repair has rebooted: when each reboot was decided
    /// (RFC 3339, comma separated, oldest first), so the reboots of the last 24 hours are
    /// counted after a restart too (Karpenter keeps them in memory).
    pub const REPAIR_REBOOTS: &str = "joiner.dev/repair-reboots";
    /// Joiner's own, on a NodeClaim being rebooted: when the cloud was asked to reboot it
    /// (RFC 3339); the new boot is waited for from then.
    pub const REBOOT_ISSUED: &str = "joiner.dev/reboot-issued";
}

/// Node taints.
pub mod taints {
    /// Keeps new pods off a node being disrupted.
    pub const DISRUPTED: &str = "karpenter.sh/disrupted";
    /// The taint Kubernetes gives a cordoned node.
    pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
    /// Keeps new pods off a node node repair is rebooting (Karpenter's).
    pub const REBOOTING: &str = "karpenter.sh/rebooting";
}

/// Finalizers.
pub mod finalizers {
    /// Keeps a NodeClaim until its instance is terminated, so deleting the object never leaks an
    /// instance.
    pub const TERMINATION: &str = "karpenter.sh/termination";
}

/// Tags on the cloud's instances, launch templates and volumes.
pub mod tags {
    use std::collections::BTreeMap;

    pub const NODECLAIM: &str = "karpenter.sh/nodeclaim";
    pub const NODEPOOL: &str = "karpenter.sh/nodepool";
    pub const NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
    /// Joiner's own: the launch's idempotency token, so a retried launch finds its instance.
    pub const LAUNCH_TOKEN: &str = "joiner.dev/launch-token";
    /// The EKS cluster an instance belongs to (value: the cluster's name), as Karpenter tags.
    pub const CLUSTER_NAME: &str = "eks:eks-cluster-name";
    /// What EKS managed node groups tag their instances with: never Joiner's.
    pub const NODEGROUP: &str = "eks:nodegroup-name";
    /// The value of [`cluster`]'s tag on instances the cluster owns.
    pub const OWNED: &str = "owned";
    /// Joiner's own, on a launch template: the hash of the EC2NodeClass spec it was made
    /// from, so one whose class changed or went is known to be unused.
    pub const NODECLASS_SPEC_HASH: &str = "joiner.dev/ec2nodeclass-hash";

    /// Whether an EC2NodeClass may not set this tag: it is one Joiner writes to prove that an
    /// instance is its own (the ownership tags, the NodeClaim's name, the launch token), or one
    /// that makes an instance another's (`eks:nodegroup-name`). A class carrying one would
    /// launch instances Joiner could never prove it owns, whose termination could then never
    /// finish. Karpenter's CRD refuses the same keys but `eks:nodegroup-name` and Joiner's own.
    pub fn defeats_ownership(key: &str) -> bool {
        matches!(
            key,
            NODECLAIM | NODEPOOL | NODECLASS | LAUNCH_TOKEN | CLUSTER_NAME | NODEGROUP
        ) || key.starts_with("kubernetes.io/cluster")
    }

    /// `kubernetes.io/cluster/<cluster>`: every node of the cluster carries it, node groups'
    /// and self-managed ones too, so on its own it says nothing about who launched an instance.
    pub fn cluster(cluster_name: &str) -> String {
        format!("kubernetes.io/cluster/{cluster_name}")
    }

    /// The tags that make an instance Joiner's (or Karpenter's, whose instances Joiner adopts
    /// when it replaces Karpenter): the cluster tag `owned`, `eks:eks-cluster-name`, and a
    /// NodePool and an EC2NodeClass. Every launch writes all four; every list, termination and
    /// garbage collection requires all four.
    pub fn ownership(
        cluster_name: &str,
        node_pool: &str,
        node_class: &str,
    ) -> BTreeMap<String, String> {
        BTreeMap::from([
            (cluster(cluster_name), OWNED.to_string()),
            (CLUSTER_NAME.to_string(), cluster_name.to_string()),
            (NODEPOOL.to_string(), node_pool.to_string()),
            (NODECLASS.to_string(), node_class.to_string()),
        ])
    }

    /// Whether an instance with these tags is one Joiner may touch in `cluster_name`: it
    /// carries every ownership tag (see [`ownership`]), with this cluster's values. An
    /// instance of a managed node group, a self-managed node or another cluster never is.
    pub fn is_owned(instance_tags: &BTreeMap<String, String>, cluster_name: &str) -> bool {
        instance_tags
            .get(&cluster(cluster_name))
            .map(String::as_str)
            == Some(OWNED)
            && instance_tags.get(CLUSTER_NAME).map(String::as_str) == Some(cluster_name)
            && instance_tags.get(NODEPOOL).is_some_and(|v| !v.is_empty())
            && instance_tags.get(NODECLASS).is_some_and(|v| !v.is_empty())
            && !instance_tags.contains_key(NODEGROUP)
    }
}

/// Resource names.
pub mod resources {
    pub const CPU: &str = "cpu";
    pub const MEMORY: &str = "memory";
    pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
    pub const PODS: &str = "pods";
    /// NVIDIA GPUs as the device plugin advertises them (whole GPUs, or time-sliced replicas).
    pub const NVIDIA_GPU: &str = "nvidia.com/gpu";
    /// Elastic Fabric Adapter interfaces.
    pub const EFA: &str = "vpc.amazonaws.com/efa";
    /// Branch network interfaces for security groups per pod.
    pub const POD_ENI: &str = "vpc.amazonaws.com/pod-eni";
    /// AMD GPUs (the ROCm device plugin).
    pub const AMD_GPU: &str = "amd.com/gpu";
    /// Habana Gaudi accelerators.
    pub const HABANA_GAUDI: &str = "habana.ai/gaudi";
    /// AWS Neuron devices (Trainium, Inferentia) and their cores (the Neuron device plugin).
    pub const AWS_NEURON: &str = "aws.amazon.com/neuron";
    pub const AWS_NEURON_CORE: &str = "aws.amazon.com/neuroncore";
}

/// How an instance is bought; the value of the [`labels::CAPACITY_TYPE`] label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CapacityType {
    OnDemand,
    Spot,
    /// Capacity reservations (ODCRs, capacity blocks): already paid for.
    Reserved,
}

impl CapacityType {
    pub const ALL: [CapacityType; 3] = [
        CapacityType::OnDemand,
        CapacityType::Spot,
        CapacityType::Reserved,
    ];

    /// The label value: `on-demand`, `spot` or `reserved`.
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityType::OnDemand => "on-demand",
            CapacityType::Spot => "spot",
            CapacityType::Reserved => "reserved",
        }
    }

    /// Reads a label value; `None` for anything Karpenter does not know.
    pub fn parse(value: &str) -> Option<CapacityType> {
        CapacityType::ALL.into_iter().find(|c| c.as_str() == value)
    }
}

impl fmt::Display for CapacityType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a node is removed or replaced (Karpenter's disruption reasons), as annotations, condition
/// reasons, metric labels and the simulation timeline write it.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
pub enum DisruptionReason {
    /// Only DaemonSet pods left for `consolidateAfter`.
    Empty,
    /// Its pods fit elsewhere, or on cheaper nodes.
    Underutilized,
    /// Older than its `expireAfter`.
    Expired,
    /// No longer matches its NodePool or EC2NodeClass.
    Drifted,
    /// The cloud is taking the instance away.
    Interrupted,
    /// A node condition has shown it broken for longer than its repair policy tolerates (node
    /// repair, Karpenter's `NodeRepair` gate).
    Unhealthy,
}

impl DisruptionReason {
    /// The text as written in objects, metrics and the timeline.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Reads the text back; `None` for anything else.
    pub fn parse(text: &str) -> Option<DisruptionReason> {
        text.parse().ok()
    }

    /// Whether NodePool disruption budgets limit this reason (as in Karpenter v1: expiry and
    /// interruption are forceful and not budgeted; node repair is, from v1.15).
    pub fn is_budgeted(self) -> bool {
        matches!(
            self,
            DisruptionReason::Empty
                | DisruptionReason::Underutilized
                | DisruptionReason::Drifted
                | DisruptionReason::Unhealthy
        )
    }
}

/// Karpenter's kinds of consolidation, as its metrics label them (`consolidation_type`): the
/// empty nodes deleted, one node replaced or deleted, several at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum ConsolidationType {
    Empty,
    Single,
    Multi,
}

impl ConsolidationType {
    /// The kind of a consolidation move of `reason` over `nodes` nodes; `None` for reasons that
    /// are not consolidation.
    pub fn of(reason: DisruptionReason, nodes: usize) -> Option<ConsolidationType> {
        match reason {
            DisruptionReason::Empty => Some(ConsolidationType::Empty),
            DisruptionReason::Underutilized if nodes > 1 => Some(ConsolidationType::Multi),
            DisruptionReason::Underutilized => Some(ConsolidationType::Single),
            _ => None,
        }
    }

    /// The label value.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Why a NodeClaim has drifted, as its `Drifted` condition's reason says (Karpenter's, and
/// its AWS provider's for placement groups).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DriftReason {
    NodePool,
    NodeClass,
    Requirements,
    Ami,
    PlacementGroup,
}

impl DriftReason {
    pub const ALL: [DriftReason; 5] = [
        DriftReason::NodePool,
        DriftReason::NodeClass,
        DriftReason::Requirements,
        DriftReason::Ami,
        DriftReason::PlacementGroup,
    ];

    /// The condition's reason.
    pub fn as_str(self) -> &'static str {
        match self {
            DriftReason::NodePool => "NodePoolDrifted",
            DriftReason::NodeClass => "NodeClassDrifted",
            DriftReason::Requirements => "RequirementsDrifted",
            DriftReason::Ami => "AMIDrifted",
            DriftReason::PlacementGroup => "PlacementGroupDrift",
        }
    }
}

/// What the cloud said is happening to an instance, by the kind of notice. Each kind is handled
/// its own way ([`InterruptionKind::replaces`], [`InterruptionKind::drains_at_once`],
/// [`InterruptionKind::honours_do_not_disrupt`]); the text ([`InterruptionKind::reason`]) is
/// what the NodeClaim's `joiner.dev/interrupted` annotation and `Interrupted` condition record.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "camelCase")]
#[strum(serialize_all = "camelCase")]
pub enum InterruptionKind {
    /// EC2 reclaims the spot instance two minutes after its warning.
    SpotInterruption,
    /// The spot instance is at elevated risk of interruption; nothing is reclaimed yet.
    RebalanceRecommendation,
    /// AWS Health: the instance is retired, stopped or rebooted for maintenance at a scheduled
    /// time, usually days ahead.
    ScheduledChange,
    /// The instance is stopping, stopped, shutting down or terminated: it is going now.
    StateChange,
    /// The capacity reservation (a Capacity Block) the instance runs in is ending: EC2
    /// terminates its instances 30 minutes before the end.
    CapacityReservationEnding,
}

impl InterruptionKind {
    /// Every kind, in declaration order.
    pub const ALL: [InterruptionKind; 5] = [
        InterruptionKind::SpotInterruption,
        InterruptionKind::RebalanceRecommendation,
        InterruptionKind::ScheduledChange,
        InterruptionKind::StateChange,
        InterruptionKind::CapacityReservationEnding,
    ];

    /// The name `joiner simulate` scenarios and the timeline use (`spotInterruption`, ...).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Reads a scenario's name back.
    pub fn parse(text: &str) -> Option<InterruptionKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == text)
    }

    /// The reason recorded on the NodeClaim (annotation `joiner.dev/interrupted`, condition
    /// `Interrupted`) and in events. These are the texts earlier versions wrote, so a NodeClaim
    /// marked before an upgrade reads the same.
    pub fn reason(self) -> &'static str {
        match self {
            InterruptionKind::SpotInterruption => "SpotInterrupted",
            InterruptionKind::RebalanceRecommendation => "RebalanceRecommendation",
            InterruptionKind::ScheduledChange => "ScheduledChange",
            InterruptionKind::StateChange => "InstanceStopping",
            InterruptionKind::CapacityReservationEnding => "CapacityBlockExpiring",
        }
    }

    /// The kind a recorded reason names.
    pub fn from_reason(reason: &str) -> Option<InterruptionKind> {
        Self::ALL.into_iter().find(|k| k.reason() == reason)
    }

    /// Whether the node is replaced and drained. A rebalance recommendation is only recorded,
    /// as Karpenter records it: most recommended instances are never reclaimed, and replacing
    /// each would churn a spot fleet for nothing.
    pub fn replaces(self) -> bool {
        self != InterruptionKind::RebalanceRecommendation
    }

    /// Whether the node drains in the step its replacement is launched, without waiting for
    /// the replacement to be ready: the instance goes within minutes (a spot reclaim, an
    /// instance already stopping, a Capacity Block ten minutes from its terminations). A
    /// scheduled change days ahead waits for its replacements as an expiry does.
    pub fn drains_at_once(self) -> bool {
        matches!(
            self,
            InterruptionKind::SpotInterruption
                | InterruptionKind::StateChange
                | InterruptionKind::CapacityReservationEnding
        )
    }

    /// Whether the drain waits for pods marked `karpenter.sh/do-not-disrupt` (until the
    /// interruption's deadline or the NodeClaim's `terminationGracePeriod`) and evicts in
    /// Karpenter's order. A spot reclaim or a stopping instance gives no time to honour them:
    /// every pod is evicted at once, so it gets its graceful shutdown before the instance goes.
    /// PodDisruptionBudgets are honoured by every kind until its deadline.
    pub fn honours_do_not_disrupt(self) -> bool {
        matches!(
            self,
            InterruptionKind::ScheduledChange | InterruptionKind::CapacityReservationEnding
        )
    }
}

/// What termination tells about a NodeClaim, as Kubernetes events name it (Karpenter's
/// reasons, so tools watching for them keep working).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
pub enum TerminationEvent {
    /// The drain waits for pods a PodDisruptionBudget or do-not-disrupt holds (Warning).
    FailedDraining,
    /// The drain is done; the node's volumes have yet to detach (Normal).
    AwaitingVolumeDetachment,
    /// The NodeClaim has a deadline: every pod is deleted by it (Warning).
    TerminationGracePeriodExpiring,
    /// The cloud refused to terminate the instance (Warning).
    FailedTermination,
}

impl TerminationEvent {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether Kubernetes shows it as a warning.
    pub fn is_warning(self) -> bool {
        !matches!(self, TerminationEvent::AwaitingVolumeDetachment)
    }
}

/// One thing the disruption step did to a NodeClaim, as the timeline, events and metrics name it.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum DisruptionAction {
    /// A move was chosen.
    Decided,
    /// Replacements were launched for a move.
    Replacing,
    /// Pods were evicted from a draining node.
    Evicted,
    /// A drained NodeClaim was deleted.
    Deleted,
    /// A move was given up (its replacement went away).
    Aborted,
    /// The termination grace period ran out: remaining pods deleted whatever blocks them.
    Forced,
    /// A NodeClaim was found drifted.
    Drifted,
    /// The cloud warned that it takes an instance.
    Interrupted,
    /// A rebalance recommendation: recorded only.
    Recommended,
    /// Something that cannot progress (a pod that can never schedule, a NodeClaim stuck
    /// launching or draining) is left out of consolidation, which goes on without it.
    Excluded,
}

impl DisruptionAction {
    /// The text as written in the timeline, events and metrics.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_that_prove_or_disprove_ownership_are_restricted_in_a_class() {
        for key in [
            "karpenter.sh/nodeclaim",
            "karpenter.sh/nodepool",
            "karpenter.k8s.aws/ec2nodeclass",
            "eks:eks-cluster-name",
            "eks:nodegroup-name",
            "kubernetes.io/cluster/lab",
            "joiner.dev/launch-token",
        ] {
            assert!(tags::defeats_ownership(key), "{key}");
        }
        for key in ["Name", "team", "karpenter.sh/discovery", "eks:other"] {
            assert!(!tags::defeats_ownership(key), "{key}");
        }
    }

    #[test]
    fn text_values_round_trip() {
        use strum::VariantArray as _;
        for r in DisruptionReason::VARIANTS {
            assert_eq!(DisruptionReason::parse(r.as_str()), Some(*r));
            assert_eq!(serde_json::to_string(r).unwrap(), format!("\"{r}\""));
        }
        for a in DisruptionAction::VARIANTS {
            assert_eq!(a.as_str().parse::<DisruptionAction>(), Ok(*a));
            assert_eq!(serde_json::to_string(a).unwrap(), format!("\"{a}\""));
        }
        for c in CapacityType::ALL {
            assert_eq!(CapacityType::parse(c.as_str()), Some(c));
        }
        assert_eq!(
            InterruptionKind::ALL.len(),
            InterruptionKind::VARIANTS.len()
        );
        for k in InterruptionKind::VARIANTS {
            assert_eq!(InterruptionKind::parse(k.as_str()), Some(*k));
            assert_eq!(InterruptionKind::from_reason(k.reason()), Some(*k));
            assert_eq!(serde_json::to_string(k).unwrap(), format!("\"{k}\""));
        }
        assert_eq!(
            InterruptionKind::ScheduledChange.as_str(),
            "scheduledChange"
        );
        assert_eq!(
            serde_json::to_string(&DisruptionAction::Evicted).unwrap(),
            "\"evicted\""
        );
        assert!(serde_json::from_str::<DisruptionReason>("\"Bored\"").is_err());
        assert!(!DisruptionReason::Expired.is_budgeted());
        assert!(DisruptionReason::Drifted.is_budgeted());
        assert!(
            DisruptionReason::Unhealthy.is_budgeted(),
            "repair, from Karpenter v1.15"
        );
    }

    /// Each kind's handling, as the README's interruption table states it.
    #[test]
    fn interruption_kinds_are_handled_each_their_own_way() {
        use InterruptionKind::*;
        assert!(!RebalanceRecommendation.replaces());
        for k in [
            SpotInterruption,
            ScheduledChange,
            StateChange,
            CapacityReservationEnding,
        ] {
            assert!(k.replaces(), "{k}");
        }
        assert!(SpotInterruption.drains_at_once() && !SpotInterruption.honours_do_not_disrupt());
        assert!(StateChange.drains_at_once() && !StateChange.honours_do_not_disrupt());
        assert!(!ScheduledChange.drains_at_once() && ScheduledChange.honours_do_not_disrupt());
        assert!(
            CapacityReservationEnding.drains_at_once()
                && CapacityReservationEnding.honours_do_not_disrupt()
        );
    }
}
