//! Joiner on Kubernetes: the controller's [`joiner_controller::store::ClusterStore`] over an
//! API server, with kube-rs.
//!
//! [`KubeStore::start`] watches every kind the controller reads (one kube-rs reflector each),
//! waits for their first lists, and then serves the controller's synchronous reads from those
//! caches and sends its writes to the API server.
//!
//! The store keeps three promises the controller's correctness rests on:
//!
//! - **Reads are consistent with this process's writes.** A NodeClaim the controller created is
//!   listed by the next read even when the watch has not delivered it yet, so the same pods are
//!   not planned twice; a deleted object is hidden until the watch drops it. See `cache` for how
//!   the overlay of writes is superseded without ordering `resourceVersion`s.
//! - **Writes have the API server's semantics.** Create is a POST (409 is
//!   [`StoreError::AlreadyExists`](joiner_controller::store::StoreError::AlreadyExists)), update
//!   a PUT with the object's `resourceVersion` (409 is `Conflict`), a NodeClaim's status goes
//!   through the `status` subresource, drains evict pods through the Eviction API (a
//!   PodDisruptionBudget's refusal is `Refused`), and a pod's delete is a real DELETE.
//! - **Watches recover and say when they cannot.** A `410 Gone` leads to a fresh list, never an
//!   emptied cache; a failing watch keeps the last cache and makes [`KubeStore::is_ready`] false;
//!   reads of a kind fail (`Unavailable`) until its first list, and for a required kind the
//!   server does not serve (a CRD not installed), so an empty answer always means "none";
//!   only the optional DRA kinds read as empty when not served. [`KubeStore::health`] names
//!   each.

mod cache;
mod error;
mod health;
mod kinds;
mod listing;
mod options;
mod registry;
mod store;
mod typed;
mod watch;

#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;

pub use error::KubeError;
pub use health::KindHealth;
pub use listing::{Listed, Listing, Unread, UnreadWhy, client_for, list_cluster, listed};
pub use options::StoreOptions;
pub use store::KubeStore;
