//! Claims turned into immutable, validated requests before any node is looked at: classes
//! resolved, selectors compiled, counts checked, feature gates applied. A pod's claims are
//! prepared once and then tried on as many nodes as needed.

use super::Allocator;
use super::failure::{AllocationFailure, FailureReason};
use crate::cel::CompiledExpression;
use joiner_model::Quantity;
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceClaimConfiguration, DeviceClass, DeviceRequest, DeviceSelector,
    DeviceToleration, ResourceClaim,
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Kubernetes' limit on the devices of one claim (`AllocationResultsMaxSize`).
pub const MAX_RESULTS_PER_CLAIM: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Exact(usize),
    All,
}

/// One way to satisfy a request: `exactly`, or one `firstAvailable` alternative.
#[derive(Debug, Clone)]
pub(crate) struct Alternative {
    /// `request` or `request/subrequest`.
    pub result_name: Arc<str>,
    pub class: Arc<DeviceClass>,
    pub class_name: String,
    /// Interned id of (class selectors, request selectors): the match-cache key.
    pub selector_set: u32,
    /// Interned id of everything that decides the candidate order on a node (selectors,
    /// mode, tolerations, capacity requests): the candidate-cache key.
    pub signature: u32,
    pub selectors: Arc<Vec<Arc<CompiledExpression>>>,
    /// The request's own selector sources, for messages.
    pub selector_sources: Vec<String>,
    pub mode: Mode,
    pub admin_access: bool,
    pub tolerations: Vec<DeviceToleration>,
    /// Requested capacity by name as written (qualified or not).
    pub capacity: BTreeMap<String, Quantity>,
}

#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub alternatives: Vec<Alternative>,
}

impl Request {
    /// The fewest devices the request can take: its smallest alternative, `All` counting
    /// none (how many that is depends on the node).
    pub(crate) fn fewest(&self) -> usize {
        self.alternatives
            .iter()
            .map(|a| match a.mode {
                Mode::Exact(n) => n,
                Mode::All => 0,
            })
            .min()
            .unwrap_or(0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConstraintKind {
    Match,
    Distinct,
}

#[derive(Debug, Clone)]
pub(crate) struct Constraint {
    pub kind: ConstraintKind,
    /// Fully qualified attribute name.
    pub attribute: String,
    /// Request names (`req` or `req/sub`) it covers; `None` for all.
    pub requests: Option<Vec<String>>,
}

impl Constraint {
    /// Whether the constraint covers a result named `req` or `req/sub`.
    pub fn covers(&self, result_name: &str) -> bool {
        match &self.requests {
            None => true,
            Some(list) => {
                let parent = result_name.split('/').next().unwrap_or(result_name);
                list.iter().any(|r| r == result_name || r == parent)
            }
        }
    }

    pub fn describe(&self) -> String {
        let kind = match self.kind {
            ConstraintKind::Match => "matchAttribute",
            ConstraintKind::Distinct => "distinctAttribute",
        };
        match &self.requests {
            None => format!("{kind}: {}", self.attribute),
            Some(r) => format!("{kind}: {} (requests {})", self.attribute, r.join(", ")),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) enum ClaimState {
    /// To allocate.
    Pending {
        requests: Vec<Request>,
        constraints: Vec<Constraint>,
        config: Vec<DeviceClaimConfiguration>,
    },
    /// Already allocated; only the node must fit.
    Allocated(AllocationResult),
    /// Cannot be allocated anywhere.
    Broken(AllocationFailure),
}

#[derive(Debug, Clone)]
pub(crate) struct Claim {
    pub key: Arc<str>,
    pub state: ClaimState,
}

/// A pod's claims, prepared once for many nodes.
#[derive(Debug, Clone)]
pub struct PreparedClaims {
    pub(crate) claims: Vec<Claim>,
}

impl PreparedClaims {
    /// `namespace/name` of each claim, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.claims.iter().map(|c| &*c.key)
    }

    /// The first claim that cannot be allocated on any node, if any.
    pub fn broken(&self) -> Option<&AllocationFailure> {
        self.claims.iter().find_map(|c| match &c.state {
            ClaimState::Broken(f) => Some(f),
            _ => None,
        })
    }

    /// Whether some claim to allocate has a request that only a device no other claim holds
    /// can serve (no alternative of it asks for admin access): then a node whose every
    /// device is taken ([`crate::AllocationState::leaves_free`]) cannot serve these claims.
    pub fn needs_a_free_device(&self) -> bool {
        self.claims.iter().any(|c| match &c.state {
            ClaimState::Pending { requests, .. } => requests.iter().any(|r| {
                !r.alternatives.is_empty() && r.alternatives.iter().all(|a| !a.admin_access)
            }),
            _ => false,
        })
    }
}

pub(crate) fn claim_key(claim: &ResourceClaim) -> Arc<str> {
    Arc::from(format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or("default"),
        claim.metadata.name.as_deref().unwrap_or("")
    ))
}

fn fail(key: &str, request: Option<&str>, reason: FailureReason) -> AllocationFailure {
    AllocationFailure {
        claim: Arc::from(key),
        request: request.map(Arc::from),
        reason,
    }
}

/// The CEL sources of `selectors`; `Err` when one sets no CEL, which kube-scheduler refuses as
/// a selector type it does not know (a newer API's, say) rather than reading it as "any".
fn selector_sources(selectors: &Option<Vec<DeviceSelector>>) -> Result<Vec<String>, FailureReason> {
    selectors
        .iter()
        .flatten()
        .map(|s| {
            s.cel.as_ref().map(|c| c.expression.clone()).ok_or_else(|| {
                FailureReason::InvalidClaim {
                    message: "a selector sets no CEL expression (unsupported selector type?)"
                        .into(),
                }
            })
        })
        .collect()
}

/// The fields of `exactly` and of a `firstAvailable` entry that matter here.
struct RequestFields<'a> {
    class: &'a str,
    selectors: &'a Option<Vec<DeviceSelector>>,
    mode: Option<&'a str>,
    count: Option<i64>,
    admin_access: Option<bool>,
    tolerations: &'a Option<Vec<DeviceToleration>>,
    capacity: Option<&'a BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    /// A `firstAvailable` entry rather than `exactly`.
    subrequest: bool,
}

impl Allocator {
    /// Validates and compiles a pod's claims. Never fails as a whole: a claim that cannot be
    /// allocated anywhere is kept with its reason, reported by every `allocate`.
    pub fn prepare<'a>(
        &self,
        claims: impl IntoIterator<Item = &'a ResourceClaim>,
    ) -> PreparedClaims {
        let claims = claims
            .into_iter()
            .map(|claim| {
                let key = claim_key(claim);
                let state = match claim.status.as_ref().and_then(|s| s.allocation.as_ref()) {
                    Some(a) => ClaimState::Allocated(a.clone()),
                    None => match self.prepare_claim(&key, claim) {
                        Ok(s) => s,
                        Err(f) => ClaimState::Broken(f),
                    },
                };
                Claim { key, state }
            })
            .collect();
        PreparedClaims { claims }
    }

    fn prepare_claim(
        &self,
        key: &str,
        claim: &ResourceClaim,
    ) -> Result<ClaimState, AllocationFailure> {
        let devices = joiner_model::dra::claim_devices(claim);
        let mut requests = Vec::new();
        // Upstream (`minDevicesPerClaim`) adds up the fewest devices each request can take:
        // a `firstAvailable` request counts with its smallest subrequest, so one
        // subrequest over the limit does not fail the claim. "All" depends on the node and
        // is checked during the search.
        let mut fixed_total = 0usize;
        for request in devices.iter().flat_map(|d| d.requests.iter().flatten()) {
            let r = self.prepare_request(key, request)?;
            fixed_total = fixed_total.saturating_add(r.fewest());
            requests.push(r);
        }
        if fixed_total > MAX_RESULTS_PER_CLAIM {
            return Err(fail(
                key,
                None,
                FailureReason::TooManyResults {
                    count: fixed_total,
                    limit: MAX_RESULTS_PER_CLAIM,
                },
            ));
        }
        let mut constraints = Vec::new();
        for c in devices.iter().flat_map(|d| d.constraints.iter().flatten()) {
            let requests = c.requests.clone().filter(|r| !r.is_empty());
            // A constraint of a kind this API version does not know constrains nothing the
            // allocator could check: kube-scheduler refuses the claim rather than ignore it.
            if c.match_attribute.is_none() && c.distinct_attribute.is_none() {
                return Err(fail(
                    key,
                    None,
                    FailureReason::InvalidClaim {
                        message: "a constraint sets neither matchAttribute nor distinctAttribute \
                                  (unsupported constraint type?)"
                            .into(),
                    },
                ));
            }
            if let Some(attr) = &c.match_attribute {
                constraints.push(Constraint {
                    kind: ConstraintKind::Match,
                    attribute: attr.clone(),
                    requests: requests.clone(),
                });
            }
            if let Some(attr) = &c.distinct_attribute {
                constraints.push(Constraint {
                    kind: ConstraintKind::Distinct,
                    attribute: attr.clone(),
                    requests,
                });
            }
        }
        let config = devices
            .iter()
            .flat_map(|d| d.config.iter().flatten())
            .cloned()
            .collect();
        Ok(ClaimState::Pending {
            requests,
            constraints,
            config,
        })
    }

    fn prepare_request(
        &self,
        key: &str,
        request: &DeviceRequest,
    ) -> Result<Request, AllocationFailure> {
        let name = request.name.clone();
        let mut alternatives = Vec::new();
        match (&request.exactly, &request.first_available) {
            (Some(e), None) => {
                alternatives.push(self.prepare_alternative(
                    key,
                    name.clone(),
                    RequestFields {
                        class: &e.device_class_name,
                        selectors: &e.selectors,
                        mode: e.allocation_mode.as_deref(),
                        count: e.count,
                        admin_access: e.admin_access,
                        tolerations: &e.tolerations,
                        capacity: e.capacity.as_ref().and_then(|c| c.requests.as_ref()),
                        subrequest: false,
                    },
                )?);
            }
            (None, Some(subs)) => {
                if !self.features.prioritized_list {
                    return Err(fail(
                        key,
                        Some(&name),
                        FailureReason::FeatureDisabled {
                            gate: "DRAPrioritizedList",
                            field: "firstAvailable",
                        },
                    ));
                }
                if subs.is_empty() {
                    return Err(fail(
                        key,
                        Some(&name),
                        FailureReason::InvalidClaim {
                            message: "firstAvailable is empty".into(),
                        },
                    ));
                }
                for sub in subs {
                    alternatives.push(self.prepare_alternative(
                        key,
                        format!("{name}/{}", sub.name),
                        RequestFields {
                            class: &sub.device_class_name,
                            selectors: &sub.selectors,
                            mode: sub.allocation_mode.as_deref(),
                            count: sub.count,
                            admin_access: None,
                            tolerations: &sub.tolerations,
                            capacity: sub.capacity.as_ref().and_then(|c| c.requests.as_ref()),
                            subrequest: true,
                        },
                    )?);
                }
            }
            _ => {
                return Err(fail(
                    key,
                    Some(&name),
                    FailureReason::InvalidClaim {
                        message: "a request must set exactly one of exactly and firstAvailable"
                            .into(),
                    },
                ));
            }
        }
        Ok(Request { alternatives })
    }

    fn prepare_alternative(
        &self,
        key: &str,
        result_name: String,
        f: RequestFields<'_>,
    ) -> Result<Alternative, AllocationFailure> {
        let err = |reason| fail(key, Some(&result_name), reason);
        let class = self.classes.get(f.class).cloned().ok_or_else(|| {
            err(FailureReason::UnknownDeviceClass {
                class: f.class.to_string(),
            })
        })?;
        let mode = match f.mode.unwrap_or("ExactCount") {
            "ExactCount" => {
                let count = f.count.unwrap_or(1);
                if count < 1 {
                    return Err(err(FailureReason::InvalidClaim {
                        message: format!("count must be at least 1, is {count}"),
                    }));
                }
                let count = usize::try_from(count).unwrap_or(usize::MAX);
                // A subrequest over the limit is only skipped during the search (upstream's
                // `errAllocationResultMaxSizeExceeded` moves on to the next subrequest);
                // the claim-level check above catches a claim no subrequest can serve.
                if count > MAX_RESULTS_PER_CLAIM && !f.subrequest {
                    return Err(err(FailureReason::TooManyResults {
                        count,
                        limit: MAX_RESULTS_PER_CLAIM,
                    }));
                }
                Mode::Exact(count)
            }
            "All" => Mode::All,
            other => {
                return Err(err(FailureReason::InvalidClaim {
                    message: format!("unknown allocationMode {other:?}"),
                }));
            }
        };
        let admin_access = f.admin_access.unwrap_or(false);
        if admin_access && !self.features.admin_access {
            return Err(err(FailureReason::FeatureDisabled {
                gate: "DRAAdminAccess",
                field: "adminAccess",
            }));
        }
        let mut capacity = BTreeMap::new();
        // With the gate off the API server drops `capacity`, so a claim that still has it
        // (from files, or an API server with the gate on) is refused, as kube-scheduler does.
        let requests = f.capacity.filter(|r| !r.is_empty());
        if requests.is_some() && !self.features.consumable_capacity {
            return Err(err(FailureReason::FeatureDisabled {
                gate: "DRAConsumableCapacity",
                field: "capacity.requests",
            }));
        }
        if let Some(requests) = requests {
            for (name, q) in requests {
                let q = Quantity::try_from(q).map_err(|e| {
                    err(FailureReason::InvalidClaim {
                        message: format!("capacity {name}: {e}"),
                    })
                })?;
                capacity.insert(name.clone(), q);
            }
        }
        // Class selectors first, then the request's, all ANDed.
        let mut sources: Vec<String> =
            selector_sources(&joiner_model::dra::class_spec(&class).selectors).map_err(err)?;
        let request_sources = selector_sources(f.selectors).map_err(err)?;
        sources.extend(request_sources.iter().cloned());
        let mut compiled = Vec::with_capacity(sources.len());
        for s in &sources {
            compiled.push(
                self.cel
                    .compile(s)
                    .map_err(|e| err(FailureReason::Cel(e)))?,
            );
        }
        let ids: Vec<u32> = compiled.iter().map(|c| c.id()).collect();
        let selector_set = self.intern_selector_set(&ids);
        let tolerations = f.tolerations.clone().unwrap_or_default();
        let signature = self.intern_signature(format!(
            "{selector_set}|{mode:?}|{admin_access}|{tolerations:?}|{capacity:?}"
        ));
        Ok(Alternative {
            signature,
            result_name: Arc::from(result_name.as_str()),
            class_name: f.class.to_string(),
            class,
            selector_set,
            selectors: Arc::new(compiled),
            selector_sources: request_sources,
            mode,
            admin_access,
            tolerations,
            capacity,
        })
    }
}
