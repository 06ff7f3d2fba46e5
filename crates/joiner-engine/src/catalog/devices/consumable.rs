//! GPU sharing through DRA consumable capacity, as chosen per EC2NodeClass.
//!
//! The NVIDIA driver can publish each GPU as allocatable to several claims at once, with its
//! memory (and optionally a number of shares) as capacity that claims consume. Karpenter's AWS
//! provider reads the choice from an EC2NodeClass annotation and gives the template's GPUs the
//! same request policies the driver would; Joiner follows it value for value.

use std::collections::BTreeMap;

use joiner_model::wellknown::annotations;
use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, CapacityRequestPolicyRange, Device, DeviceCapacity,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

const MEMORY: &str = "memory";
const SHARES: &str = "shares";
/// Memory is requested in whole MiB, as the driver accounts it.
const MEMORY_STEP: &str = "1Mi";

/// How each GPU of a node may be shared between ResourceClaims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConsumableCapacity {
    /// Each GPU serves one claim (the annotation is absent, empty or `disabled`).
    #[default]
    Disabled,
    /// Each GPU serves any number of claims as long as their `shares` (1 by default, at most N
    /// in total) and memory (0 by default) fit.
    Shares(u32),
    /// Each GPU serves claims as long as their memory fits; a claim that does not say takes the
    /// whole GPU's memory, so unaware claims keep exclusive GPUs.
    Memory,
    /// Each GPU serves claims as long as their memory fits; memory defaults to 0, so claims that
    /// do not say share without limit.
    Unlimited,
}

/// The annotation holds something the driver does not accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{value:?} is not one of \"disabled\", \"memory\", \"unlimited\" or a positive whole number of shares"
)]
pub struct ConsumableCapacityError {
    pub value: String,
}

impl ConsumableCapacity {
    /// Reads the annotation's value (the empty string standing for an absent annotation).
    pub fn parse(value: &str) -> Result<ConsumableCapacity, ConsumableCapacityError> {
        match value {
            "" | "disabled" => Ok(ConsumableCapacity::Disabled),
            "memory" => Ok(ConsumableCapacity::Memory),
            "unlimited" => Ok(ConsumableCapacity::Unlimited),
            _ => match value.parse::<u32>() {
                Ok(shares) if shares > 0 => Ok(ConsumableCapacity::Shares(shares)),
                _ => Err(ConsumableCapacityError {
                    value: value.to_string(),
                }),
            },
        }
    }

    /// The mode an EC2NodeClass's annotations choose.
    pub fn from_annotations(
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Result<ConsumableCapacity, ConsumableCapacityError> {
        match annotations.and_then(|a| a.get(annotations::NVIDIA_CONSUMABLE_CAPACITY)) {
            Some(value) => ConsumableCapacity::parse(value),
            None => Ok(ConsumableCapacity::Disabled),
        }
    }

    /// Whether GPUs may serve several claims.
    pub fn is_shared(self) -> bool {
        self != ConsumableCapacity::Disabled
    }

    /// Makes a GPU multi-allocatable with the mode's request policies. A device without a
    /// `memory` capacity is left single-allocation: every mode is denominated in memory, and
    /// advertising sharing the driver will not back would over-pack the node.
    pub(super) fn apply(self, device: &mut Device) {
        if !self.is_shared() {
            return;
        }
        let Some(capacity) = device.capacity.as_mut() else {
            return;
        };
        let Some(memory) = capacity.get_mut(MEMORY) else {
            return;
        };
        let total = memory.value.clone();
        let (default, min) = match self {
            ConsumableCapacity::Memory => (total.clone(), q(MEMORY_STEP)),
            _ => (q("0"), q("0")),
        };
        memory.request_policy = Some(policy(default, min, total, q(MEMORY_STEP)));
        if let ConsumableCapacity::Shares(n) = self {
            let n = q(&n.to_string());
            capacity.insert(
                SHARES.to_string(),
                DeviceCapacity {
                    value: n.clone(),
                    request_policy: Some(policy(q("1"), q("1"), n, q("1"))),
                },
            );
        }
        device.allow_multiple_allocations = Some(true);
    }
}

fn policy(
    default: Quantity,
    min: Quantity,
    max: Quantity,
    step: Quantity,
) -> CapacityRequestPolicy {
    CapacityRequestPolicy {
        default: Some(default),
        valid_range: Some(CapacityRequestPolicyRange {
            min,
            max: Some(max),
            step: Some(step),
        }),
        valid_values: None,
    }
}

fn q(s: &str) -> Quantity {
    Quantity(s.to_string())
}
