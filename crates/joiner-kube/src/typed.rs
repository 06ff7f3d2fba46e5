//! Joiner's kinds as kube-rs sees them.
//!
//! kube's `Api`, `watcher` and reflector need `kube::Resource`; the controller's kinds implement
//! [`joiner_controller::store::Resource`] instead (our own CRD types cannot implement a foreign
//! trait here). [`Typed`] bridges the two for every kind at once, taking the URL coordinates from
//! the controller's constants.
//!
//! Decoding is lenient on purpose: an object the serde type rejects (a NodePool written for a
//! newer CRD, say) becomes [`Typed::Invalid`] with its metadata, so one bad object is skipped and
//! reported instead of failing the whole list and wedging that kind's cache.

use std::borrow::Cow;
use std::fmt;

use joiner_controller::store::Resource;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::DynamicResourceScope;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One object of kind `K` as read from or written to the API server.
#[derive(Clone)]
pub(crate) enum Typed<K> {
    Valid(K),
    /// The server's object did not decode as `K`: kept with its metadata so the cache stays
    /// keyed correctly, never handed to the controller.
    Invalid {
        metadata: Box<ObjectMeta>,
        error: String,
    },
}

impl<K: Resource> Typed<K> {
    pub(crate) fn into_valid(self) -> Result<K, String> {
        match self {
            Typed::Valid(k) => Ok(k),
            Typed::Invalid { error, .. } => Err(error),
        }
    }

    pub(crate) fn as_valid(&self) -> Option<&K> {
        match self {
            Typed::Valid(k) => Some(k),
            Typed::Invalid { .. } => None,
        }
    }
}

/// `group` and `version` of an `apiVersion` (`v1` is the core group, whose group is empty).
pub(crate) fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}

impl<K: Resource> kube::Resource for Typed<K> {
    type DynamicType = ();
    type Scope = DynamicResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(K::KIND)
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(split_api_version(K::API_VERSION).0)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(split_api_version(K::API_VERSION).1)
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(K::API_VERSION)
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(K::PLURAL)
    }
    fn meta(&self) -> &ObjectMeta {
        match self {
            Typed::Valid(k) => k.meta(),
            Typed::Invalid { metadata, .. } => metadata,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Typed::Valid(k) => k.meta_mut(),
            Typed::Invalid { metadata, .. } => metadata,
        }
    }
}

impl<K> fmt::Debug for Typed<K> {
    /// Only the name: objects can be large and the caches log them on errors.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Typed::Valid(_) => f.write_str("Typed::Valid"),
            Typed::Invalid { metadata, error } => f
                .debug_struct("Typed::Invalid")
                .field("name", &metadata.name)
                .field("error", error)
                .finish(),
        }
    }
}

/// The object as JSON with `apiVersion` and `kind` always set: the controller's own types leave
/// them empty when built in code, and the API server rejects a body without them.
pub(crate) fn to_json<K: Resource>(object: &K) -> Result<serde_json::Value, serde_json::Error> {
    let mut value = serde_json::to_value(object)?;
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), K::API_VERSION.into());
        map.insert("kind".into(), K::KIND.into());
    }
    Ok(value)
}

impl<K: Resource> Serialize for Typed<K> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Typed::Valid(k) => to_json(k)
                .map_err(serde::ser::Error::custom)?
                .serialize(serializer),
            Typed::Invalid { .. } => Err(serde::ser::Error::custom(format!(
                "{} {:?} did not decode and cannot be written back",
                K::KIND,
                kube::Resource::meta(self).name
            ))),
        }
    }
}

impl<'de, K: Resource> Deserialize<'de> for Typed<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        match K::deserialize(&value) {
            Ok(k) => Ok(Typed::Valid(k)),
            Err(error) => {
                // Without readable metadata the object cannot even be keyed: that is a
                // malformed response, not one bad object.
                let metadata = value
                    .get("metadata")
                    .map(ObjectMeta::deserialize)
                    .transpose()
                    .map_err(D::Error::custom)?
                    .unwrap_or_default();
                Ok(Typed::Invalid {
                    metadata: Box::new(metadata),
                    error: error.to_string(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_model::api::NodePool;
    use k8s_openapi::api::core::v1::Pod;
    use kube::Resource as _;

    #[test]
    fn urls_follow_the_kind_constants() {
        assert_eq!(
            Typed::<NodePool>::url_path(&(), None),
            "/apis/karpenter.sh/v1/nodepools"
        );
        assert_eq!(
            Typed::<Pod>::url_path(&(), Some("ns")),
            "/api/v1/namespaces/ns/pods"
        );
    }

    #[test]
    fn a_body_always_names_its_kind() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        };
        let body = serde_json::to_value(Typed::Valid(pod)).expect("serializes");
        assert_eq!(body["apiVersion"], "v1");
        assert_eq!(body["kind"], "Pod");
        assert_eq!(body["metadata"]["name"], "p");
    }

    #[test]
    fn an_object_that_does_not_decode_keeps_its_name() {
        // `spec.template` must be an object.
        let json = serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "broken", "resourceVersion": "7"},
            "spec": {"template": 3},
        });
        let typed: Typed<NodePool> = serde_json::from_value(json).expect("decodes leniently");
        assert!(typed.as_valid().is_none());
        assert_eq!(typed.meta().name.as_deref(), Some("broken"));
        assert!(typed.into_valid().is_err());
    }
}
