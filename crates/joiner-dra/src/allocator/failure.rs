//! Why a pod's claims cannot be allocated on a node, in words the plan can print.

use crate::cel::CelError;
use std::fmt;
use std::sync::Arc;

/// A claim that cannot be served, the request that could not, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("claim {claim}{}: {reason}", request.as_ref().map(|r| format!(", request {r}")).unwrap_or_default())]
pub struct AllocationFailure {
    /// `namespace/name`.
    pub claim: Arc<str>,
    /// The request (`<request>` or `<request>/<subrequest>`), when one is to blame.
    pub request: Option<Arc<str>>,
    pub reason: FailureReason,
}

impl AllocationFailure {
    /// Whether the failure is the same on every node (a broken claim or class, a CEL error),
    /// so the planner need not try other nodes of the same kind for it.
    pub fn is_fatal(&self) -> bool {
        self.reason.is_fatal()
    }
}

/// How many devices were turned away, and for what.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rejections {
    pub in_use: usize,
    pub capacity: usize,
    pub counters: usize,
    pub constraints: usize,
}

impl fmt::Display for Rejections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if self.in_use > 0 {
            parts.push(format!("{} already allocated", self.in_use));
        }
        if self.capacity > 0 {
            parts.push(format!("{} without enough free capacity", self.capacity));
        }
        if self.counters > 0 {
            parts.push(format!("{} with shared counters exhausted", self.counters));
        }
        if self.constraints > 0 {
            parts.push(format!("{} failing a constraint", self.constraints));
        }
        if parts.is_empty() {
            f.write_str("none rejected")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// Why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureReason {
    /// No device on the node passes the class and request selectors (and taints, capacity
    /// requests).
    NoMatchingDevice {
        class: String,
        selectors: Vec<String>,
        /// Devices that matched the selectors but carry a taint the request does not tolerate.
        tainted: usize,
        /// Devices that matched but cannot serve the capacity requested.
        capacity_unfit: usize,
    },
    /// Some match, but not enough are free.
    NotEnoughDevices {
        needed: usize,
        matching: usize,
        rejected: Rejections,
    },
    /// A constraint cannot be met by any combination.
    Constraint {
        constraint: String,
    },
    /// An `All` request over a pool that is being updated.
    PoolIncomplete {
        pool: String,
    },
    /// A pool the search reached is invalid.
    PoolInvalid {
        pool: String,
        reason: String,
    },
    /// A selector failed to compile, costs too much, or failed at runtime.
    Cel(CelError),
    /// More than 32 devices in one claim (fatal when the counts alone say so; per node when
    /// an `All` request finds that many).
    TooManyResults {
        count: usize,
        limit: usize,
    },
    UnknownDeviceClass {
        class: String,
    },
    /// The claim uses a feature the cluster has disabled.
    FeatureDisabled {
        gate: &'static str,
        field: &'static str,
    },
    /// The claim's spec cannot be allocated as written.
    InvalidClaim {
        message: String,
    },
    /// An already allocated claim whose devices are not usable from this node.
    AllocatedElsewhere,
    /// A constraint reached a device whose attribute has no value it can compare: empty, of a
    /// type this API version does not know, or a list while `DRAListTypeAttributes` is off.
    /// kube-scheduler stops with an error rather than skip the device.
    UnsupportedAttribute {
        device: String,
        attribute: String,
    },
    /// An `All` request must take every matching device, and one of them would break a
    /// constraint of the claim.
    AllDevicesBreakConstraint {
        device: String,
        constraint: String,
    },
    /// The depth-first search tried more devices than its budget allows.
    SearchBudgetExhausted {
        steps: u64,
    },
}

impl FailureReason {
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            FailureReason::Cel(
                CelError::Compile { .. } | CelError::CostLimit { .. } | CelError::TooLong { .. }
            ) | FailureReason::UnknownDeviceClass { .. }
                | FailureReason::FeatureDisabled { .. }
                | FailureReason::InvalidClaim { .. }
        )
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureReason::NoMatchingDevice {
                class,
                selectors,
                tainted,
                capacity_unfit,
            } => {
                write!(f, "no device matches device class {class:?}")?;
                if !selectors.is_empty() {
                    write!(f, " and selectors [{}]", selectors.join(", "))?;
                }
                if *tainted > 0 {
                    write!(f, " ({tainted} matching devices have untolerated taints)")?;
                }
                if *capacity_unfit > 0 {
                    write!(
                        f,
                        " ({capacity_unfit} matching devices cannot serve the requested capacity)"
                    )?;
                }
                Ok(())
            }
            FailureReason::NotEnoughDevices {
                needed,
                matching,
                rejected,
            } => write!(f, "{matching} devices match, {needed} needed ({rejected})"),
            FailureReason::Constraint { constraint } => {
                write!(
                    f,
                    "no combination of devices satisfies constraint {constraint}"
                )
            }
            FailureReason::PoolIncomplete { pool } => write!(
                f,
                "asks for all devices, but resource pool {pool} is incomplete (being updated)"
            ),
            FailureReason::PoolInvalid { pool, reason } => {
                write!(f, "resource pool {pool} is invalid: {reason}")
            }
            FailureReason::Cel(e) => write!(f, "{e}"),
            FailureReason::TooManyResults { count, limit } => write!(
                f,
                "needs {count} devices, more than the limit of {limit} per claim"
            ),
            FailureReason::UnknownDeviceClass { class } => {
                // kube-scheduler's words (PreFilter): the pod waits until the class exists.
                write!(f, "device class {class} does not exist")
            }
            FailureReason::FeatureDisabled { gate, field } => {
                write!(f, "{field} needs feature gate {gate}, which is disabled")
            }
            FailureReason::InvalidClaim { message } => f.write_str(message),
            FailureReason::AllocatedElsewhere => {
                f.write_str("already allocated to devices that are not available on this node")
            }
            FailureReason::UnsupportedAttribute { device, attribute } => write!(
                f,
                "device {device}: attribute {attribute} has no value a constraint can compare \
                 (empty, of an unknown type, or a list while DRAListTypeAttributes is off)"
            ),
            FailureReason::AllDevicesBreakConstraint { device, constraint } => write!(
                f,
                "asks for all devices, but device {device} would break constraint {constraint}"
            ),
            FailureReason::SearchBudgetExhausted { steps } => write!(
                f,
                "search budget exhausted: no allocation found within {steps} device placements (SearchBudgetExhausted)"
            ),
        }
    }
}
