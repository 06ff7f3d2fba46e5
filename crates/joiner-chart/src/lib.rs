//! Renders and checks Joiner's Helm chart (`charts/joiner`) and its CRDs without `helm` or an
//! API server, so `cargo test` catches a broken chart before a user's `helm install` does.
//!
//! - [`render`]: a Go-template renderer for the Helm subset the chart is written in (the
//!   `gtmpl` crate for Go's `text/template`, plus the Helm and Sprig functions the chart uses),
//!   with Helm's values merging and `--set` syntax (shared with the controller through
//!   `joiner_model::settings`).
//! - [`karpenter`]: values files written for Karpenter's chart, adopted (Joiner's image kept)
//!   with every key the chart does not use listed with why.
//! - [`schema`]: a structural OpenAPI v3 validator for CRD schemas as the API server applies
//!   them (types, enums, patterns, bounds, `x-kubernetes-int-or-string`,
//!   `x-kubernetes-preserve-unknown-fields`, and `x-kubernetes-validations` CEL rules evaluated
//!   with the `cel` crate), naming the failing field.
//!
//! Helm's own renderer is a Go program that cannot be installed here; the chart keeps to the
//! functions [`render::FUNCTIONS`] lists so this renderer and Helm agree.

pub mod karpenter;
pub mod render;
pub mod schema;

pub use render::{Chart, Release, RenderError, Rendered};
pub use schema::{SchemaError, validate};
