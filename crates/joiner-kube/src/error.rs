//! Errors of the Kubernetes edge, and how API answers map to the store's errors.

use std::fmt;
use std::time::Duration;

use joiner_controller::store::{ObjectKey, StoreError};
use kube::core::Status;

use crate::health::KindHealth;

/// Why the store could not start.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// Some caches had neither listed nor learnt that their kind is not served before the
    /// deadline (RBAC refusing the list, an unreachable API server). Each names its last error.
    #[error("caches not synced after {timeout:?}: {}", Pending(.pending))]
    SyncTimeout {
        timeout: Duration,
        pending: Vec<KindHealth>,
    },
    /// The options cannot describe a watch (an empty ConfigMap name, say).
    #[error("invalid store options: {0}")]
    Options(String),
    /// No client could be made: the kubeconfig is missing, unreadable, or names no such
    /// context.
    #[error("kubeconfig: {0}")]
    Config(String),
    /// A kind could not be listed for a reason other than RBAC or the kind not being served:
    /// the server is unreachable, the credentials expired, the server failed.
    #[error("listing {kind}: {source}")]
    List {
        kind: &'static str,
        #[source]
        source: Box<kube::Error>,
    },
}

struct Pending<'a>(&'a [KindHealth]);

impl fmt::Display for Pending<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, h) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{h}")?;
        }
        Ok(())
    }
}

/// The write that failed, which decides what a 409 means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verb {
    /// A read past the cache (`get_uncached`).
    Get,
    /// A LIST past the cache (`pods_on_node_uncached`).
    List,
    Create,
    Update,
    Delete,
    Evict,
}

/// Maps an API answer to the store's error for `key`.
///
/// - 409: `AlreadyExists` on create, `Conflict` otherwise (a stale `resourceVersion`);
/// - 404: `NotFound`, unless the server says it does not serve the kind at all (a CRD not
///   installed: see [`not_served`]), which is `Unavailable`: the object's absence is unknown;
/// - 400 and 422: `Invalid` with the server's message (retrying the same object cannot help);
/// - 429 on an eviction that a PodDisruptionBudget refused: `Refused` with the server's
///   message, see [`is_budget_refusal`];
/// - everything else (other 429s, 401/403, 5xx, transport, timeouts, undecodable answers):
///   `Unavailable`, which the controller retries on its next step.
pub(crate) fn store_error(verb: Verb, key: &ObjectKey, e: kube::Error) -> StoreError {
    match e {
        kube::Error::Api(status) => status_error(verb, key, &status),
        other => StoreError::Unavailable(format!("{verb:?} {key}: {other}")),
    }
}

pub(crate) fn status_error(verb: Verb, key: &ObjectKey, status: &Status) -> StoreError {
    match status.code {
        409 if verb == Verb::Create => StoreError::AlreadyExists(key.clone()),
        409 => StoreError::Conflict(key.clone()),
        404 if not_served(key, status) => StoreError::Unavailable(format!(
            "{verb:?} {key}: the API server does not serve {} (is its CRD installed?): {}",
            key.kind,
            server_message(status)
        )),
        404 => StoreError::NotFound(key.clone()),
        400 | 422 => StoreError::Invalid(key.clone(), server_message(status)),
        429 if verb == Verb::Evict && is_budget_refusal(status) => {
            tracing::info!(%key, message = %status.message, "eviction refused by a PodDisruptionBudget");
            StoreError::Refused(key.clone(), server_message(status))
        }
        code => StoreError::Unavailable(format!(
            "{verb:?} {key}: HTTP {code}: {}",
            server_message(status)
        )),
    }
}

/// An eviction's 429 comes either from a PodDisruptionBudget (it allows no more disruptions
/// now: another eviction or an unready pod spent it) or from API priority and fairness
/// throttling. The first is [`StoreError::Refused`] — nothing changed, the pod stays until the
/// budget allows — the second is [`StoreError::Unavailable`], like any other overload. The API
/// server marks the first with a cause of type `DisruptionBudget`.
pub(crate) fn is_budget_refusal(status: &Status) -> bool {
    let by_cause = status.details.as_ref().is_some_and(|d| {
        d.causes
            .iter()
            .any(|c| c.reason == "DisruptionBudget" || c.field == "DisruptionBudget")
    });
    by_cause
        || status
            .message
            .to_ascii_lowercase()
            .contains("disruption budget")
}

/// A 404 about the URL, not the object: what the API server answers for a resource it does
/// not serve ("the server could not find the requested resource", or a bare "404 page not
/// found" that kube turns into a `Status`). An object that is not there is answered with
/// `details.name` set to its name, and no such message.
pub(crate) fn not_served(key: &ObjectKey, status: &Status) -> bool {
    let names_object = status
        .details
        .as_ref()
        .is_some_and(|d| !d.name.is_empty() && d.name == key.name);
    let message = status.message.to_ascii_lowercase();
    !names_object
        && (message.contains("could not find the requested resource")
            || message.contains("page not found"))
}

fn server_message(status: &Status) -> String {
    let mut message = if status.message.is_empty() {
        status.reason.clone()
    } else {
        status.message.clone()
    };
    for cause in status.details.iter().flat_map(|d| &d.causes) {
        if !cause.message.is_empty() && !message.contains(&cause.message) {
            message.push_str(&format!("; {}: {}", cause.field, cause.message));
        }
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::core::response::{StatusCause, StatusDetails};

    fn status(code: u16, message: &str) -> Status {
        Status {
            code,
            message: message.into(),
            ..Status::default()
        }
    }

    fn key() -> ObjectKey {
        ObjectKey::of::<Pod>(Some("ns"), "p")
    }

    #[test]
    fn a_kind_not_served_is_not_an_object_not_found() {
        let gone = status(404, "pods \"p\" not found");
        assert_eq!(
            status_error(Verb::Get, &key(), &gone),
            StoreError::NotFound(key())
        );
        for message in [
            "the server could not find the requested resource",
            "404 page not found",
        ] {
            let unserved = status(404, message);
            assert!(
                matches!(status_error(Verb::Delete, &key(), &unserved), StoreError::Unavailable(m) if m.contains("does not serve Pod")),
                "{message}"
            );
        }
    }

    #[test]
    fn conflicts_depend_on_the_verb() {
        let s = status(409, "exists");
        assert_eq!(
            status_error(Verb::Create, &key(), &s),
            StoreError::AlreadyExists(key())
        );
        assert_eq!(
            status_error(Verb::Update, &key(), &s),
            StoreError::Conflict(key())
        );
    }

    #[test]
    fn invalid_objects_carry_the_server_message() {
        let mut s = status(422, "NodeClaim.karpenter.sh \"x\" is invalid");
        s.details = Some(StatusDetails {
            name: "x".into(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes: vec![StatusCause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: "spec.nodeClassRef".into(),
            }],
            retry_after_seconds: 0,
        });
        let StoreError::Invalid(_, message) = status_error(Verb::Update, &key(), &s) else {
            panic!("422 is invalid");
        };
        assert!(message.contains("is invalid") && message.contains("spec.nodeClassRef"));
    }

    #[test]
    fn only_a_budget_refusal_is_refused() {
        let budget = status(
            429,
            "Cannot evict pod as it would violate the pod's disruption budget.",
        );
        let StoreError::Refused(k, message) = status_error(Verb::Evict, &key(), &budget) else {
            panic!("a budget's 429 is a refusal");
        };
        assert_eq!(k, key());
        assert!(message.contains("disruption budget"), "{message}");
        // The same answer to another verb is throttling, not a budget.
        assert!(matches!(
            status_error(Verb::Delete, &key(), &budget),
            StoreError::Unavailable(_)
        ));
        let throttled = status(429, "Too many requests, please try again later.");
        assert!(matches!(
            status_error(Verb::Evict, &key(), &throttled),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            status_error(Verb::Create, &key(), &status(500, "etcd")),
            StoreError::Unavailable(_)
        ));
    }
}
