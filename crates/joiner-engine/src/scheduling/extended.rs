//! The claims that serve pods' extended resources through DRA (`DRAExtendedResource`), as a
//! node sees them: a node whose device plugin serves a resource (its allocatable above zero)
//! serves those requests itself, so the claim is allocated there without them. The snapshot
//! makes the claims (`snapshot::dra::extended`).

use std::collections::BTreeSet;

use k8s_openapi::api::resource::v1::ResourceClaim;

/// One request of such a claim: its name and the extended resource it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtendedRequest {
    pub request: String,
    pub resource: String,
}

/// The claim as a node serves it: without the requests for resources its device plugin
/// serves (`plugin`), `None` when none is left.
pub fn served_on(
    claim: &ResourceClaim,
    requests: &[ExtendedRequest],
    plugin: &BTreeSet<String>,
) -> Option<ResourceClaim> {
    let dropped: Vec<&str> = requests
        .iter()
        .filter(|r| plugin.contains(&r.resource))
        .map(|r| r.request.as_str())
        .collect();
    if dropped.is_empty() {
        return Some(claim.clone());
    }
    let mut out = claim.clone();
    let devices = out
        .spec
        .as_mut()
        .and_then(|s| s.devices.as_mut())
        .and_then(|d| d.requests.as_mut())?;
    devices.retain(|r| !dropped.contains(&r.name.as_str()));
    (!devices.is_empty()).then_some(out)
}
