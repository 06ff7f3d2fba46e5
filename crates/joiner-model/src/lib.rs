//! Joiner's object model.
//!
//! What every other part of Joiner agrees on: exact quantities and prices, the names of objects
//! and where they came from, the Karpenter and Joiner custom resources (with the conversions
//! Karpenter applies to old API versions), workload expansion, and the Helm-style settings.
//! Nothing here does I/O: callers hand in text or parsed values and get typed objects back.

pub mod object;
pub mod price;
pub mod quantity;

pub use object::{InputError, ObjectRef, Source};
pub use price::Price;
pub use quantity::{Format, Quantity, QuantityError};
pub mod api;
pub mod resources;
pub use resources::{ResourceList, pod_requests};
pub mod buffers;
pub mod do_not_disrupt;
pub mod dra;
pub mod duration;
pub mod feature_gates;
pub mod kinds;
pub mod manifests;
pub mod names;
pub mod object_size;
pub mod placement;
pub mod settings;
pub mod wellknown;
pub mod workloads;
pub mod yaml;
pub use manifests::{Manifests, Sourced, Warning};
pub use yaml::{Document, for_each_document, parse_documents, parse_yaml};
