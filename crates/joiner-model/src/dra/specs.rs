//! Read access to the DRA kinds' specs, which `resource.k8s.io/v1` as of Kubernetes 1.37 marks
//! optional.
//!
//! The API server stores a DeviceClass without `spec` as one with an empty spec (no selectors,
//! no config), and a claim without `spec.devices` as a claim for nothing. These accessors give
//! every reader that same view, so no caller has to decide what a missing spec means.

use std::sync::LazyLock;

use k8s_openapi::api::resource::v1::{
    DeviceClaim, DeviceClass, DeviceClassSpec, ResourceClaim, ResourceClaimSpec,
    ResourceClaimTemplate,
};

static EMPTY_CLASS_SPEC: LazyLock<DeviceClassSpec> = LazyLock::new(DeviceClassSpec::default);

/// The class's spec, empty when the object has none.
pub fn class_spec(class: &DeviceClass) -> &DeviceClassSpec {
    class.spec.as_ref().unwrap_or(&EMPTY_CLASS_SPEC)
}

/// The devices a claim asks for, if any.
pub fn claim_devices(claim: &ResourceClaim) -> Option<&DeviceClaim> {
    claim.spec.as_ref().and_then(|s| s.devices.as_ref())
}

/// The claim spec a template stamps out, if any.
pub fn template_claim_spec(template: &ResourceClaimTemplate) -> Option<&ResourceClaimSpec> {
    template.spec.as_ref().and_then(|s| s.spec.as_ref())
}

/// The devices each claim stamped from the template asks for, if any.
pub fn template_devices(template: &ResourceClaimTemplate) -> Option<&DeviceClaim> {
    template_claim_spec(template).and_then(|s| s.devices.as_ref())
}
