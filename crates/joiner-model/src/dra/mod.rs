//! The four DRA kinds (`resource.k8s.io`) as the API server reads them: older versions
//! converted to `v1` ([`convert`]), and the validation the API server applies before it stores
//! an object ([`validate`]).
//!
//! Joiner plans on `resource.k8s.io/v1` types only. Files copied from other projects are often
//! older: NVIDIA's DRA quickstart ships `v1beta1`, the Kubernetes documentation `v1beta2`. The
//! API server still serves both and converts them, so a plan must too, and must reject exactly
//! what the API server would reject, so that a manifest Joiner plans is one a cluster accepts.

pub mod convert;
pub mod list_attributes;
pub mod specs;
pub mod validate;

pub use convert::{Conversion, DRA_GROUP, to_v1, written_field};
pub use specs::{claim_devices, class_spec, template_claim_spec, template_devices};
