//! `resource.k8s.io/v1beta1` and `v1beta2` objects converted to `v1`, on their JSON form, as
//! the API server's conversion does it.
//!
//! `v1beta2` has `v1`'s shape: only the version changes. `v1beta1` differs in two places:
//!
//! - a claim's request (`spec.devices.requests[]`) holds the fields of one exact request
//!   (`deviceClassName`, `selectors`, `allocationMode`, `count`, `adminAccess`, `tolerations`,
//!   `capacity`) at its own top level, where `v1` nests them under `exactly`;
//! - a slice's device (`spec.devices[]`) holds everything but its name under `basic`, where
//!   `v1` has it on the device itself.
//!
//! Errors are found on the converted object, so [`written_field`] maps a `v1` field path back
//! to where the `v1beta1` file has that field.

use crate::kinds::Kind;
use serde_json::{Map, Value};

/// The API group of the DRA kinds.
pub const DRA_GROUP: &str = "resource.k8s.io";

/// The fields of an exact request, which `v1beta1` keeps at the request's top level.
const EXACT_FIELDS: &[&str] = &[
    "deviceClassName",
    "selectors",
    "allocationMode",
    "count",
    "adminAccess",
    "tolerations",
    "capacity",
];

/// What a conversion did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conversion {
    /// Already `v1`.
    None,
    /// An older version, converted; the version is deprecated.
    Deprecated,
}

/// Converts a DRA object of `api_version` to `resource.k8s.io/v1` in place. Versions other than
/// `v1beta1` and `v1beta2` are left alone (the caller has checked the version is known).
pub fn to_v1(kind: Kind, api_version: &str, doc: &mut Value) -> Conversion {
    let Some(version) = api_version
        .strip_prefix(DRA_GROUP)
        .and_then(|v| v.strip_prefix('/'))
    else {
        return Conversion::None;
    };
    if version == "v1" {
        return Conversion::None;
    }
    if version == "v1beta1" {
        match kind {
            Kind::ResourceClaim => nest_requests(doc.pointer_mut("/spec/devices/requests")),
            Kind::ResourceClaimTemplate => {
                nest_requests(doc.pointer_mut("/spec/spec/devices/requests"))
            }
            Kind::ResourceSlice => flatten_devices(doc.pointer_mut("/spec/devices")),
            _ => {}
        }
    }
    if let Some(obj) = doc.as_object_mut() {
        obj.insert(
            "apiVersion".to_string(),
            Value::String(format!("{DRA_GROUP}/v1")),
        );
    }
    Conversion::Deprecated
}

/// `v1beta1` requests: the exact request's fields move under `exactly`. A request that has
/// `firstAvailable` and exact fields too keeps both, so that validation refuses it as the API
/// server does.
fn nest_requests(requests: Option<&mut Value>) {
    let Some(Value::Array(requests)) = requests else {
        return;
    };
    for request in requests.iter_mut().filter_map(Value::as_object_mut) {
        let mut exactly = Map::new();
        for field in EXACT_FIELDS {
            if let Some(value) = request.remove(*field) {
                exactly.insert((*field).to_string(), value);
            }
        }
        if !exactly.is_empty() || !request.contains_key("firstAvailable") {
            request.insert("exactly".to_string(), Value::Object(exactly));
        }
    }
}

/// `v1beta1` devices: what `basic` holds moves onto the device.
fn flatten_devices(devices: Option<&mut Value>) {
    let Some(Value::Array(devices)) = devices else {
        return;
    };
    for device in devices.iter_mut().filter_map(Value::as_object_mut) {
        if let Some(Value::Object(basic)) = device.remove("basic") {
            for (field, value) in basic {
                device.entry(field).or_insert(value);
            }
        }
    }
}

/// Where a file of `api_version` holds the field that has path `field` (as
/// `spec.devices.requests[0].exactly.count`) once converted to `v1`.
pub fn written_field(kind: Kind, api_version: &str, field: &str) -> String {
    if api_version != format!("{DRA_GROUP}/v1beta1") {
        return field.to_string();
    }
    let requests = match kind {
        Kind::ResourceClaim => "spec.devices.requests[",
        Kind::ResourceClaimTemplate => "spec.spec.devices.requests[",
        Kind::ResourceSlice => {
            // spec.devices[N].X -> spec.devices[N].basic.X (all but the name).
            let Some(rest) = field.strip_prefix("spec.devices[") else {
                return field.to_string();
            };
            let Some(close) = rest.find("].") else {
                return field.to_string();
            };
            let (index, tail) = (&rest[..close], &rest[close + 2..]);
            if tail == "name" {
                return field.to_string();
            }
            return format!("spec.devices[{index}].basic.{tail}");
        }
        _ => return field.to_string(),
    };
    let Some(rest) = field.strip_prefix(requests) else {
        return field.to_string();
    };
    match rest.find("].exactly") {
        Some(close) => {
            let tail = &rest[close + "].exactly".len()..];
            let tail = tail.strip_prefix('.').unwrap_or(tail);
            let prefix = &field[..requests.len() + close + 1];
            if tail.is_empty() {
                prefix.to_string()
            } else {
                format!("{prefix}.{tail}")
            }
        }
        None => field.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn v1beta1_requests_nest_their_exact_fields() {
        let mut doc = json!({
            "apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaimTemplate",
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "deviceClassName": "gpu.nvidia.com", "count": 2},
                {"name": "any", "firstAvailable": [{"name": "a", "deviceClassName": "x"}]}
            ]}}}
        });
        let c = to_v1(
            Kind::ResourceClaimTemplate,
            "resource.k8s.io/v1beta1",
            &mut doc,
        );
        assert_eq!(c, Conversion::Deprecated);
        assert_eq!(doc["apiVersion"], "resource.k8s.io/v1");
        let requests = &doc["spec"]["spec"]["devices"]["requests"];
        assert_eq!(
            requests[0],
            json!({"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}})
        );
        assert_eq!(
            requests[1],
            json!({"name": "any", "firstAvailable": [{"name": "a", "deviceClassName": "x"}]})
        );
    }

    #[test]
    fn v1beta1_devices_lose_their_basic_wrapper() {
        let mut doc = json!({
            "spec": {"devices": [{"name": "gpu-0", "basic": {"attributes": {"index": {"int": 0}}}}]}
        });
        to_v1(Kind::ResourceSlice, "resource.k8s.io/v1beta1", &mut doc);
        assert_eq!(
            doc["spec"]["devices"][0],
            json!({"name": "gpu-0", "attributes": {"index": {"int": 0}}})
        );
    }

    #[test]
    fn v1beta2_and_v1_keep_their_shape() {
        let original = json!({"apiVersion": "resource.k8s.io/v1beta2",
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "x"}}]}}});
        let mut doc = original.clone();
        assert_eq!(
            to_v1(Kind::ResourceClaim, "resource.k8s.io/v1beta2", &mut doc),
            Conversion::Deprecated
        );
        assert_eq!(doc["spec"], original["spec"]);
        let mut v1 = original.clone();
        assert_eq!(
            to_v1(Kind::ResourceClaim, "resource.k8s.io/v1", &mut v1),
            Conversion::None
        );
    }

    #[test]
    fn fields_map_back_to_where_v1beta1_writes_them() {
        let v1beta1 = "resource.k8s.io/v1beta1";
        assert_eq!(
            written_field(
                Kind::ResourceClaim,
                v1beta1,
                "spec.devices.requests[3].exactly.count"
            ),
            "spec.devices.requests[3].count"
        );
        assert_eq!(
            written_field(
                Kind::ResourceClaimTemplate,
                v1beta1,
                "spec.spec.devices.requests[0].exactly.selectors[1].cel"
            ),
            "spec.spec.devices.requests[0].selectors[1].cel"
        );
        assert_eq!(
            written_field(
                Kind::ResourceClaim,
                v1beta1,
                "spec.devices.requests[0].name"
            ),
            "spec.devices.requests[0].name"
        );
        assert_eq!(
            written_field(Kind::ResourceSlice, v1beta1, "spec.devices[2].attributes.x"),
            "spec.devices[2].basic.attributes.x"
        );
        assert_eq!(
            written_field(Kind::ResourceSlice, v1beta1, "spec.devices[2].name"),
            "spec.devices[2].name"
        );
        assert_eq!(
            written_field(
                Kind::ResourceClaim,
                "resource.k8s.io/v1",
                "spec.devices.requests[0].exactly.count"
            ),
            "spec.devices.requests[0].exactly.count"
        );
    }
}
