//! What Joiner tells the people who run it, in Karpenter's words: Prometheus metrics under
//! Karpenter's names and labels ([`metrics`]) and Kubernetes Events with Karpenter's reasons
//! ([`events`]), so a Karpenter user's dashboards, alerts and `kubectl describe` habits keep
//! working.
//!
//! Both are derived from what a controller step reports and what the cluster holds after it;
//! nothing here does I/O. The live runtime serves the metrics and publishes the events;
//! `joiner simulate --metrics` writes both to a file, so they can be checked without a cluster.

pub mod events;
pub mod metrics;
