//! Joiner on AWS: the EC2 [`CloudProvider`](joiner_controller::cloud::CloudProvider) and the SQS
//! [`InterruptionQueue`](joiner_controller::interruption::InterruptionQueue), on the official AWS
//! SDK for Rust.
//!
//! The controller core is synchronous and pure; this crate is the edge that turns its requests
//! into EC2 calls: subnets, security groups and AMIs resolved from the EC2NodeClass, one launch
//! template per (EC2NodeClass, AMI, EFA layout) with the userData merged the way Karpenter merges
//! it, `CreateFleet` (type `instant`) over the NodeClaim's offerings, and pricing from
//! `DescribeSpotPriceHistory` with on-demand prices from the Price List API (the built-in
//! catalog's where it has none).
//!
//! The SDK is async and the traits are not: both types hold a [`tokio::runtime::Handle`] and
//! block on it, so their methods must be called from a thread that is not driving that runtime
//! (the controller runs `Controller::step` in `tokio::task::spawn_blocking`). Calling them from
//! inside an async task panics.
//!
//! Every call runs under timeouts and retries with backoff (`clients`), what launches read is
//! cached for a while (`cache`, [`Ttls`]), and EC2's error codes are read as the controller
//! acts on them (`error`: capacity, throttled, rejected, unknown). Only instances and launch
//! templates carrying every ownership tag of the cluster are listed, terminated or deleted.
//!
//! Everything is tested against moto's EC2-compatible server on loopback (`tests/`), the Price
//! List API (which moto lacks) against a stub.

mod ami;
mod cache;
mod clients;
mod cloud;
pub mod cluster;
mod described;
mod error;
pub mod fleet;
mod instances;
mod network;
mod nodeclass;
mod on_demand;
mod placement;
mod pricing;
mod profile;
mod reservations;
mod sqs;
mod tags;
mod template;

pub use ami::DEFAULT_AMI_PARAMETER_ROOT;
pub use cache::Ttls;
pub use cloud::AwsCloud;
pub use cluster::ClusterAccess;
pub use error::AwsError;
pub use error::{ErrorKind, classify};
pub use sqs::SqsInterruptionQueue;
