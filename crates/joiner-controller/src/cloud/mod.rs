//! The cloud as the controller drives it.
//!
//! [`CloudProvider`] is the seam to EC2 (the AWS SDK edge implements it with CreateFleet,
//! TerminateInstances, DescribeInstances and the pricing calls); `joiner-simulate`'s
//! `SimulatedCloud` implements it in process with injectable faults.

use std::collections::BTreeMap;

use joiner_engine::catalog::{CapacityType, PriceBasis};
use joiner_model::Price;
use joiner_model::api::EC2NodeClass;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::jiff::Timestamp;

mod calls;
mod nodeclass;
mod sold;
pub use calls::CloudMethod;
pub use nodeclass::{NodeClassResolution, Resolved};
pub use sold::SoldTypes;

/// One way to buy an instance type (the engine's key, which cloud errors and launches use too).
pub use joiner_engine::catalog::OfferingKey;

/// An offering with its price, as a launch request lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    pub offering: OfferingKey,
    pub price: Price,
    /// For a `reserved` offering: the capacity reservation to launch into (EC2's
    /// `CapacityReservationTarget`, and the `capacity-block` market type for a Capacity Block).
    pub reservation: Option<joiner_engine::scheduling::OfferedReservation>,
}

/// Launch one instance for one NodeClaim.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LaunchRequest {
    pub node_claim: String,
    pub node_class: String,
    /// Offerings the NodeClaim allows, cheapest first; the provider takes the first it can
    /// fill (EC2 CreateFleet `lowest-price` over these overrides).
    pub offers: Vec<Offer>,
    /// Tags for the instance: the cluster, the NodeClaim, the NodePool and the node class.
    pub tags: BTreeMap<String, String>,
    /// Idempotency token (EC2's `ClientToken`): a retried request with the same token returns
    /// the instance the first one launched instead of launching another.
    pub client_token: String,
    /// The EC2NodeClass named by `node_class`, as the cluster has it now; `None` when it does
    /// not exist. A real cloud needs it (subnets, security groups, AMI, userData, block devices);
    /// the simulated one does not.
    pub node_class_spec: Option<EC2NodeClass>,
    /// The NodeClaim's labels that hold whichever offer launches (its NodePool's, the ones
    /// the pods asked for), so the kubelet registers the Node with them. What an instance type
    /// defines is left out: the controller labels the Node with the launched type's at
    /// registration.
    pub labels: BTreeMap<String, String>,
    /// The NodeClaim's taints, so the kubelet registers the Node with them
    /// (`--register-with-taints`) and no pod lands before they apply.
    pub taints: Vec<Taint>,
    /// The NodeClaim's startup taints (registered with the Node, removed later by a daemon).
    pub startup_taints: Vec<Taint>,
    /// EFA network interfaces to attach, by instance type (every EFA interface the type has),
    /// when the node needs EFA: pods on it request `vpc.amazonaws.com/efa` or the plan expects
    /// the `dra.net` driver. Types absent or at 0 get none.
    pub efa_interfaces: BTreeMap<String, u32>,
    /// The pods each offered instance type holds as the plan counted them (its pod capacity),
    /// so the kubelet admits as many: the bootstrap passes it as `maxPods` unless the
    /// EC2NodeClass's kubelet block sets one. Types absent are left to the AMI's default.
    pub max_pods: BTreeMap<String, u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceState {
    Pending,
    Running,
    ShuttingDown,
    Terminated,
}

/// A cloud instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    pub image_id: String,
    /// The node name the kubelet will register with (EC2's private DNS name).
    pub private_dns_name: String,
    pub state: InstanceState,
    pub tags: BTreeMap<String, String>,
    pub launch_time: Timestamp,
    /// The instance profile it runs with, by name (EC2's `IamInstanceProfile`, whose ARN ends
    /// with the name); `None` when it has none or the cloud does not say.
    pub instance_profile: Option<String>,
}

impl Instance {
    /// `aws:///<zone>/<instance-id>`, the Node's `spec.providerID`.
    pub fn provider_id(&self) -> String {
        format!("aws:///{}/{}", self.zone, self.id)
    }
}

/// The instance id in a provider id (`aws:///us-east-1a/i-0123` gives `i-0123`).
pub fn instance_id_of(provider_id: &str) -> Option<&str> {
    provider_id
        .strip_prefix("aws:///")
        .and_then(|rest| rest.rsplit('/').next())
        .filter(|id| !id.is_empty())
}

/// The result of a launch: the instance, and the offerings tried before it that had no
/// capacity (to be marked unavailable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launched {
    pub instance: Instance,
    pub insufficient: Vec<OfferingKey>,
    /// The size in bytes of the user data of a launch template this launch created, `None`
    /// when it created none (every template existed, or the cloud has none).
    pub user_data_bytes: Option<usize>,
}

/// An instance type's offerings as the cloud sells them now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudInstanceType {
    pub name: String,
    pub offerings: Vec<CloudOffering>,
    /// EC2's facts about a type the built-in catalog lacks (newer than its data), so the view
    /// can size it; `None` for the types the catalog has.
    pub facts: Option<std::sync::Arc<joiner_engine::catalog::Ec2Facts>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudOffering {
    pub zone: String,
    pub capacity_type: CapacityType,
    pub price: Price,
    pub available: bool,
    /// How the price is known: `Listed` when the cloud gave it (the Price List API, the spot
    /// price history), the catalog's basis when it fell back to the catalog's figure. Carried,
    /// never guessed from a price: a live price may equal a built-in estimate.
    pub price_basis: PriceBasis,
}

/// Why a cloud call failed. The reconcilers act differently on each: insufficient capacity
/// marks offerings unavailable, throttling retries on the next step, anything else is logged and
/// retried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloudError {
    /// Every offering given had no capacity (EC2 `InsufficientInstanceCapacity`).
    #[error("insufficient capacity for {}", list(.0))]
    InsufficientCapacity(Vec<OfferingKey>),
    /// The API rate limit was hit (EC2 `RequestLimitExceeded`); retry later.
    #[error("the cloud API is throttling requests")]
    Throttled,
    /// The request named no offering the provider can launch.
    #[error("no offering to launch")]
    NoOfferings,
    /// The request cannot succeed as given: not authorized, an invalid parameter, a launch
    /// template or image that does not exist. Retrying it unchanged fails again, so the
    /// NodeClaim gets a condition saying why and its launch backs off.
    #[error("the cloud rejected the request: {0}")]
    Rejected(String),
    /// Anything else (a timeout, a 5xx, an unreadable answer): the outcome is unknown, so the
    /// caller retries idempotently (the same client token) on a later step.
    #[error("cloud API error: {0}")]
    Other(String),
}

fn list(offerings: &[OfferingKey]) -> String {
    offerings
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The operations the controller needs from a cloud.
pub trait CloudProvider {
    /// Launches one instance, trying `request.offers` in order.
    fn launch(&self, request: &LaunchRequest) -> Result<Launched, CloudError>;
    /// Terminates an instance. Terminating one that is gone or already terminating succeeds.
    /// Callers terminate only instances whose tags they have just read and found owned
    /// ([`tags::is_owned`](joiner_model::wellknown::tags::is_owned)); the AWS edge's IAM policy refuses any other.
    fn terminate(&self, instance_id: &str) -> Result<(), CloudError>;
    /// Reboots an instance (node repair, behind `RebootForRepair`): the operating system
    /// restarts, the instance and its volumes stay. The edge reboots only an instance it reads
    /// as Joiner's (every ownership tag); one that is gone or not Joiner's is
    /// [`CloudError::Rejected`], which node repair answers by replacing the node.
    fn reboot(&self, instance_id: &str) -> Result<(), CloudError>;
    /// One instance, terminated ones included while the cloud still reports them. `None` is
    /// not proof that it is gone: EC2 answers `InvalidInstanceID.NotFound` for a while after a
    /// launch (its API is eventually consistent).
    fn get(&self, instance_id: &str) -> Result<Option<Instance>, CloudError>;
    /// Instances Joiner launched for `cluster_name` that are not terminated: those carrying
    /// every ownership tag ([`tags::is_owned`](joiner_model::wellknown::tags::is_owned)), filtered by the cloud, not after. The listing
    /// may trail launches and terminations; absence from one listing proves nothing.
    fn list(&self, cluster_name: &str) -> Result<Vec<Instance>, CloudError>;
    /// Instance types with their offerings and prices.
    fn instance_types(&self) -> Result<Vec<CloudInstanceType>, CloudError>;
    /// Deletes the launch templates Joiner made for this cluster that no EC2NodeClass of
    /// `node_classes` (every one the cluster has, from a listing that succeeded) uses any
    /// more; returns their names. A cloud without launch templates has nothing to delete.
    fn delete_unused_launch_templates(
        &self,
        node_classes: &[EC2NodeClass],
    ) -> Result<Vec<String>, CloudError>;
    /// The instance profiles made for this cluster's EC2NodeClasses (by Joiner or Karpenter:
    /// under their path for the cluster, with the ownership tags), by name. A profile named by
    /// `spec.instanceProfile` is the user's and is never listed.
    fn list_instance_profiles(&self) -> Result<Vec<String>, CloudError>;
    /// Removes the profile's role and deletes it; one already gone is no error.
    fn delete_instance_profile(&self, name: &str) -> Result<(), CloudError>;
    /// Resolves the class's selectors against the cloud (subnets, security groups, AMIs) and
    /// makes sure its instance profile exists: for `spec.role`, the profile its status names or
    /// one created for it (the one write this may make, idempotent). Each part answers on its
    /// own; a part whose read failed is [`Resolved::Failed`], never "nothing matches".
    fn resolve_node_class(&self, class: &EC2NodeClass) -> NodeClassResolution;
}

/// A reference to a cloud, or a shared one, is a cloud: the controller and the test harness
/// drive the same instances.
macro_rules! forward_cloud {
    ($($wrapper:ty),*) => {$(
        impl<C: CloudProvider + ?Sized> CloudProvider for $wrapper {
            fn launch(&self, request: &LaunchRequest) -> Result<Launched, CloudError> {
                (**self).launch(request)
            }
            fn terminate(&self, instance_id: &str) -> Result<(), CloudError> {
                (**self).terminate(instance_id)
            }
            fn reboot(&self, instance_id: &str) -> Result<(), CloudError> {
                (**self).reboot(instance_id)
            }
            fn get(&self, instance_id: &str) -> Result<Option<Instance>, CloudError> {
                (**self).get(instance_id)
            }
            fn list(&self, cluster_name: &str) -> Result<Vec<Instance>, CloudError> {
                (**self).list(cluster_name)
            }
            fn instance_types(&self) -> Result<Vec<CloudInstanceType>, CloudError> {
                (**self).instance_types()
            }
            fn delete_unused_launch_templates(
                &self,
                node_classes: &[EC2NodeClass],
            ) -> Result<Vec<String>, CloudError> {
                (**self).delete_unused_launch_templates(node_classes)
            }
            fn list_instance_profiles(&self) -> Result<Vec<String>, CloudError> {
                (**self).list_instance_profiles()
            }
            fn delete_instance_profile(&self, name: &str) -> Result<(), CloudError> {
                (**self).delete_instance_profile(name)
            }
            fn resolve_node_class(&self, class: &EC2NodeClass) -> NodeClassResolution {
                (**self).resolve_node_class(class)
            }
        }
    )*};
}

forward_cloud!(&C, std::sync::Arc<C>);
