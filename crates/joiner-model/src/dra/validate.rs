//! What the API server refuses in the DRA kinds, checked on their `v1` form: the rules of
//! Kubernetes' `resource.k8s.io` validation that decide whether a manifest can exist at all.
//! Messages use the API server's wording (`Required value`, `Duplicate value`, `Unsupported
//! value`), so a user who met the error here recognises it from `kubectl apply`.
//!
//! Left to the allocator: whether a CEL expression compiles and what it costs (the planner gives
//! the pods of such a claim their reason), which needs the CEL environment.

use super::{class_spec, template_devices};
use crate::api::FieldError;
use k8s_openapi::api::resource::v1::{
    DeviceAttribute, DeviceClaim, DeviceClass, DeviceConstraint, DeviceSelector, DeviceTaintRule,
    DeviceToleration, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use std::collections::BTreeSet;

/// Requests, constraints, configs and selectors of a claim or class: at most this many each
/// (`DeviceRequestsMaxSize`, `DeviceConstraintsMaxSize`, `DeviceSelectorsMaxSize`).
const MAX_ITEMS: usize = 32;
/// Subrequests of one `firstAvailable` (`FirstAvailableDeviceRequestMaxSize`).
const MAX_SUBREQUESTS: usize = 8;
/// Devices in one slice (`ResourceSliceMaxDevices`).
const MAX_SLICE_DEVICES: usize = 128;
/// Devices in one slice that uses newer device features such as list-typed attributes
/// (`ResourceSliceMaxDevicesWithAdvancedFeatures`).
const MAX_SLICE_DEVICES_WITH_ADVANCED_FEATURES: usize = 64;
/// Attribute values of one device, a list counting each element
/// (`ResourceSliceMaxAttributeValuesPerDevice`).
const MAX_DEVICE_ATTRIBUTE_VALUES: usize = 48;
/// Bytes of one string or version value.
const MAX_ATTRIBUTE_TEXT: usize = 64;
/// Attributes and capacities of one device together (`ResourceSliceMaxAttributesAndCapacitiesPerDevice`).
const MAX_DEVICE_FIELDS: usize = 32;
/// `CELSelectorExpressionMaxLength`.
const MAX_EXPRESSION_LENGTH: usize = 10 * 1024;

const ALLOCATION_MODES: &str = r#""All", "ExactCount""#;

/// A DeviceClass as the API server validates it.
pub fn device_class(class: &DeviceClass) -> Result<(), FieldError> {
    selectors("spec.selectors", class_spec(class).selectors.as_deref())
}

/// A ResourceClaim's spec as the API server validates it.
pub fn resource_claim(claim: &ResourceClaim) -> Result<(), FieldError> {
    claim_devices("spec.devices", super::claim_devices(claim))
}

/// A ResourceClaimTemplate's claim spec as the API server validates it.
pub fn resource_claim_template(template: &ResourceClaimTemplate) -> Result<(), FieldError> {
    claim_devices("spec.spec.devices", template_devices(template))
}

fn required(field: impl Into<String>) -> FieldError {
    FieldError::new(field, "Required value")
}

fn too_many(field: impl Into<String>, n: usize, max: usize) -> FieldError {
    FieldError::new(
        field,
        format!("Too many: {n}: must have at most {max} items"),
    )
}

fn selectors(field: &str, selectors: Option<&[DeviceSelector]>) -> Result<(), FieldError> {
    let selectors = selectors.unwrap_or_default();
    if selectors.len() > MAX_ITEMS {
        return Err(too_many(field, selectors.len(), MAX_ITEMS));
    }
    for (i, s) in selectors.iter().enumerate() {
        let Some(cel) = &s.cel else {
            // Also what a mis-indented `expression` beside `cel:` comes to.
            return Err(required(format!("{field}[{i}].cel")));
        };
        let at = format!("{field}[{i}].cel.expression");
        if cel.expression.trim().is_empty() {
            return Err(required(at));
        }
        if cel.expression.len() > MAX_EXPRESSION_LENGTH {
            return Err(FieldError::new(
                at,
                format!(
                    "Too long: may not be more than {MAX_EXPRESSION_LENGTH} bytes (it is {})",
                    cel.expression.len()
                ),
            ));
        }
    }
    Ok(())
}

fn claim_devices(field: &str, devices: Option<&DeviceClaim>) -> Result<(), FieldError> {
    let Some(devices) = devices else {
        return Ok(());
    };
    let requests = devices.requests.as_deref().unwrap_or_default();
    let requests_field = format!("{field}.requests");
    if requests.len() > MAX_ITEMS {
        return Err(too_many(requests_field, requests.len(), MAX_ITEMS));
    }
    // Names a constraint may reference: requests, and `request/subrequest`.
    let mut names = BTreeSet::new();
    for (i, r) in requests.iter().enumerate() {
        let at = format!("{requests_field}[{i}]");
        unique_dns_label(&format!("{at}.name"), &r.name, &mut names)?;
        match (&r.exactly, &r.first_available) {
            (Some(_), Some(_)) => {
                return Err(FieldError::new(
                    at,
                    "Forbidden: exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
                ));
            }
            (None, None) => {
                return Err(FieldError::new(
                    at,
                    "Required value: exactly one of `exactly` or `firstAvailable` is required",
                ));
            }
            (Some(e), None) => {
                let at = format!("{at}.exactly");
                one_request(
                    &at,
                    &e.device_class_name,
                    e.allocation_mode.as_deref(),
                    e.count,
                )?;
                selectors(&format!("{at}.selectors"), e.selectors.as_deref())?;
                tolerations(&format!("{at}.tolerations"), e.tolerations.as_deref())?;
            }
            (None, Some(subs)) => {
                let at = format!("{at}.firstAvailable");
                if subs.is_empty() {
                    return Err(required(at));
                }
                if subs.len() > MAX_SUBREQUESTS {
                    return Err(too_many(at, subs.len(), MAX_SUBREQUESTS));
                }
                let mut sub_names = BTreeSet::new();
                for (j, s) in subs.iter().enumerate() {
                    let at = format!("{at}[{j}]");
                    unique_dns_label(&format!("{at}.name"), &s.name, &mut sub_names)?;
                    one_request(
                        &at,
                        &s.device_class_name,
                        s.allocation_mode.as_deref(),
                        s.count,
                    )?;
                    selectors(&format!("{at}.selectors"), s.selectors.as_deref())?;
                    tolerations(&format!("{at}.tolerations"), s.tolerations.as_deref())?;
                    names.insert(format!("{}/{}", r.name, s.name));
                }
            }
        }
    }
    let constraints = devices.constraints.as_deref().unwrap_or_default();
    if constraints.len() > MAX_ITEMS {
        return Err(too_many(
            format!("{field}.constraints"),
            constraints.len(),
            MAX_ITEMS,
        ));
    }
    for (i, c) in constraints.iter().enumerate() {
        constraint(&format!("{field}.constraints[{i}]"), c, &names)?;
    }
    let config = devices.config.as_deref().unwrap_or_default();
    if config.len() > MAX_ITEMS {
        return Err(too_many(format!("{field}.config"), config.len(), MAX_ITEMS));
    }
    for (i, c) in config.iter().enumerate() {
        for (j, name) in c.requests.iter().flatten().enumerate() {
            if !names.contains(name) {
                return Err(FieldError::new(
                    format!("{field}.config[{i}].requests[{j}]"),
                    format!(
                        "Invalid value: {name:?}: must be the name of a request in the claim or \
                         the name of a request and a subrequest separated by '/'"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The class, mode and count of an exact request or a subrequest. The API server defaults an
/// unset mode to `ExactCount` and an unset count to 1 before it validates.
fn one_request(
    at: &str,
    class: &str,
    mode: Option<&str>,
    count: Option<i64>,
) -> Result<(), FieldError> {
    if class.is_empty() {
        return Err(required(format!("{at}.deviceClassName")));
    }
    dns_subdomain(&format!("{at}.deviceClassName"), class)?;
    match mode.unwrap_or("ExactCount") {
        "ExactCount" => match count {
            Some(n) if n <= 0 => Err(FieldError::new(
                format!("{at}.count"),
                format!("Invalid value: {n}: must be greater than zero"),
            )),
            _ => Ok(()),
        },
        "All" => match count {
            Some(n) if n != 0 => Err(FieldError::new(
                format!("{at}.count"),
                format!("Invalid value: {n}: must not be specified when allocationMode is 'All'"),
            )),
            _ => Ok(()),
        },
        other => Err(FieldError::new(
            format!("{at}.allocationMode"),
            format!("Unsupported value: {other:?}: supported values: {ALLOCATION_MODES}"),
        )),
    }
}

fn tolerations(at: &str, tolerations: Option<&[DeviceToleration]>) -> Result<(), FieldError> {
    for (i, t) in tolerations.unwrap_or_default().iter().enumerate() {
        match t.operator.as_deref().unwrap_or("Equal") {
            "Equal" | "Exists" => {}
            other => {
                return Err(FieldError::new(
                    format!("{at}[{i}].operator"),
                    format!(r#"Unsupported value: {other:?}: supported values: "Equal", "Exists""#),
                ));
            }
        }
        match t.effect.as_deref().unwrap_or_default() {
            "" | "NoSchedule" | "NoExecute" => {}
            other => {
                return Err(FieldError::new(
                    format!("{at}[{i}].effect"),
                    format!(
                        r#"Unsupported value: {other:?}: supported values: "NoExecute", "NoSchedule""#
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn constraint(at: &str, c: &DeviceConstraint, names: &BTreeSet<String>) -> Result<(), FieldError> {
    for (i, name) in c.requests.iter().flatten().enumerate() {
        if !names.contains(name) {
            return Err(FieldError::new(
                format!("{at}.requests[{i}]"),
                format!(
                    "Invalid value: {name:?}: must be the name of a request in the claim or the \
                     name of a request and a subrequest separated by '/'"
                ),
            ));
        }
    }
    let (attribute, field) = match (&c.match_attribute, &c.distinct_attribute) {
        (Some(_), Some(_)) => {
            return Err(FieldError::new(
                at,
                "Forbidden: exactly one of `matchAttribute` or `distinctAttribute` is required, but multiple fields are set",
            ));
        }
        (None, None) => return Err(required(format!("{at}.matchAttribute"))),
        (Some(a), None) => (a, "matchAttribute"),
        (None, Some(a)) => (a, "distinctAttribute"),
    };
    let at = format!("{at}.{field}");
    let Some((domain, name)) = attribute.split_once('/') else {
        return Err(FieldError::new(
            at,
            format!("Invalid value: {attribute:?}: must include a domain"),
        ));
    };
    dns_subdomain(&at, domain)?;
    c_identifier(&at, name)
}

/// A DeviceTaintRule as the API server validates it: a taint with a key and one of the three
/// effects devices know (`PreferNoSchedule` is a node effect only).
pub fn device_taint_rule(rule: &DeviceTaintRule) -> Result<(), FieldError> {
    let taint = &rule.spec.taint;
    if taint.key.is_empty() {
        return Err(required("spec.taint.key"));
    }
    match taint.effect.as_str() {
        "" => Err(required("spec.taint.effect")),
        "None" | "NoSchedule" | "NoExecute" => Ok(()),
        other => Err(FieldError::new(
            "spec.taint.effect",
            format!(
                "Unsupported value: {other:?}: supported values: \"NoExecute\", \"NoSchedule\", \"None\""
            ),
        )),
    }
}

/// How many values a list-typed attribute holds, if it is one.
fn list_values(a: &DeviceAttribute) -> Option<usize> {
    a.ints
        .as_ref()
        .map(Vec::len)
        .or(a.bools.as_ref().map(Vec::len))
        .or(a.strings.as_ref().map(Vec::len))
        .or(a.versions.as_ref().map(Vec::len))
}

/// One device attribute as the API server validates it: exactly one of the eight value fields,
/// a list not empty, strings and versions of at most 64 bytes. Returns how many values it
/// holds (a scalar one, a list each of its elements).
fn attribute(at: &str, a: &DeviceAttribute) -> Result<usize, FieldError> {
    let set = [
        a.int.is_some(),
        a.bool.is_some(),
        a.string.is_some(),
        a.version.is_some(),
        a.ints.is_some(),
        a.bools.is_some(),
        a.strings.is_some(),
        a.versions.is_some(),
    ];
    if set.iter().filter(|s| **s).count() != 1 {
        return Err(FieldError::new(
            at,
            "Invalid value: exactly one value must be specified",
        ));
    }
    let texts = a
        .string
        .iter()
        .chain(a.version.iter())
        .chain(a.strings.iter().flatten())
        .chain(a.versions.iter().flatten());
    for text in texts {
        if text.len() > MAX_ATTRIBUTE_TEXT {
            return Err(FieldError::new(
                at,
                format!("Too long: may not be more than {MAX_ATTRIBUTE_TEXT} bytes"),
            ));
        }
    }
    match list_values(a) {
        Some(0) => Err(FieldError::new(
            at,
            "Invalid value: must not be empty if specified",
        )),
        Some(n) => Ok(n),
        None => Ok(1),
    }
}

/// A ResourceSlice as the API server validates it.
pub fn resource_slice(slice: &ResourceSlice) -> Result<(), FieldError> {
    let spec = &slice.spec;
    if spec.driver.is_empty() {
        return Err(required("spec.driver"));
    }
    dns_subdomain("spec.driver", &spec.driver)?;
    if spec.pool.name.is_empty() {
        return Err(required("spec.pool.name"));
    }
    if spec.pool.resource_slice_count <= 0 {
        return Err(FieldError::new(
            "spec.pool.resourceSliceCount",
            format!(
                "Invalid value: {}: must be greater than zero",
                spec.pool.resource_slice_count
            ),
        ));
    }
    if spec.pool.generation < 0 {
        return Err(FieldError::new(
            "spec.pool.generation",
            format!(
                "Invalid value: {}: must be greater than or equal to 0",
                spec.pool.generation
            ),
        ));
    }
    let placements = [
        spec.node_name.as_ref().is_some_and(|n| !n.is_empty()),
        spec.node_selector.is_some(),
        spec.all_nodes == Some(true),
        spec.per_device_node_selection == Some(true),
    ];
    match placements.iter().filter(|p| **p).count() {
        1 => {}
        0 => {
            return Err(FieldError::new(
                "spec",
                "Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
            ));
        }
        _ => {
            return Err(FieldError::new(
                "spec",
                "Forbidden: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple fields are set",
            ));
        }
    }
    let devices = spec.devices.as_deref().unwrap_or_default();
    // Slices using newer device features (list-typed attributes among them) hold fewer devices.
    let has_lists = devices
        .iter()
        .flat_map(|d| d.attributes.iter().flatten())
        .any(|(_, a)| list_values(a).is_some());
    let max_devices = if has_lists {
        MAX_SLICE_DEVICES_WITH_ADVANCED_FEATURES
    } else {
        MAX_SLICE_DEVICES
    };
    if devices.len() > max_devices {
        return Err(too_many("spec.devices", devices.len(), max_devices));
    }
    let mut names = BTreeSet::new();
    for (i, d) in devices.iter().enumerate() {
        let at = format!("spec.devices[{i}]");
        unique_dns_label(&format!("{at}.name"), &d.name, &mut names)?;
        let attributes = d.attributes.as_ref();
        let fields = attributes.map_or(0, |a| a.len()) + d.capacity.as_ref().map_or(0, |c| c.len());
        if fields > MAX_DEVICE_FIELDS {
            return Err(FieldError::new(
                at,
                format!(
                    "Invalid value: {fields}: the total number of attributes and capacities must not exceed {MAX_DEVICE_FIELDS}"
                ),
            ));
        }
        let mut values = 0;
        for (name, a) in attributes.into_iter().flatten() {
            values += attribute(&format!("{at}.attributes[{name}]"), a)?;
        }
        if values > MAX_DEVICE_ATTRIBUTE_VALUES {
            return Err(FieldError::new(
                format!("{at}.attributes"),
                format!(
                    "Invalid value: {values}: the total number of attribute values must not exceed {MAX_DEVICE_ATTRIBUTE_VALUES}"
                ),
            ));
        }
        let per_device = [
            d.node_name.as_ref().is_some_and(|n| !n.is_empty()),
            d.node_selector.is_some(),
            d.all_nodes == Some(true),
        ]
        .iter()
        .filter(|p| **p)
        .count();
        match (spec.per_device_node_selection == Some(true), per_device) {
            (true, 1) | (false, 0) => {}
            (true, _) => {
                return Err(FieldError::new(
                    at,
                    "Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes` is required when `perDeviceNodeSelection` is set to true in the ResourceSlice spec",
                ));
            }
            (false, _) => {
                return Err(FieldError::new(
                    at,
                    "Forbidden: `nodeName`, `nodeSelector` and `allNodes` can only be set when `perDeviceNodeSelection` is set to true in the ResourceSlice spec",
                ));
            }
        }
    }
    Ok(())
}

fn unique_dns_label(at: &str, name: &str, seen: &mut BTreeSet<String>) -> Result<(), FieldError> {
    if name.is_empty() {
        return Err(required(at));
    }
    if !is_dns_label(name) {
        return Err(FieldError::new(
            at,
            format!(
                "Invalid value: {name:?}: a lowercase RFC 1123 label must consist of lower case \
                 alphanumeric characters or '-', and must start and end with an alphanumeric \
                 character (at most 63)"
            ),
        ));
    }
    if !seen.insert(name.to_string()) {
        return Err(FieldError::new(at, format!("Duplicate value: {name:?}")));
    }
    Ok(())
}

/// An RFC 1123 label: at most 63 characters of `a-z`, `0-9` and `-`, alphanumeric at both ends.
fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

fn dns_subdomain(at: &str, s: &str) -> Result<(), FieldError> {
    if s.len() <= 253 && s.split('.').all(is_dns_label) {
        return Ok(());
    }
    Err(FieldError::new(
        at,
        format!(
            "Invalid value: {s:?}: a lowercase RFC 1123 subdomain must consist of lower case \
             alphanumeric characters, '-' or '.', and must start and end with an alphanumeric \
             character"
        ),
    ))
}

/// An attribute name: a C identifier of at most 32 characters.
fn c_identifier(at: &str, s: &str) -> Result<(), FieldError> {
    let ok = !s.is_empty()
        && s.len() <= 32
        && s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(FieldError::new(
            at,
            format!(
                "Invalid value: {s:?}: a valid C identifier must start with alphabetic character \
                 or '_', followed by a string of alphanumeric characters or '_' (at most 32)"
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(requests: serde_json::Value) -> Result<(), FieldError> {
        resource_claim(&typed(
            json!({"metadata": {"name": "c"}, "spec": {"devices": {"requests": requests}}}),
        ))
    }

    fn typed<T: serde::de::DeserializeOwned>(doc: serde_json::Value) -> T {
        serde_json::from_value(doc).expect("decodes")
    }

    fn field_of(r: Result<(), FieldError>) -> String {
        let e = r.expect_err("refused");
        format!("{}: {}", e.field, e.message)
    }

    #[test]
    fn a_selector_without_cel_is_required() {
        // `expression` indented beside `cel:` instead of under it.
        let e = field_of(claim(json!([{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com",
            "selectors": [{"cel": null, "expression": "device.driver == \"x\""}]}}])));
        assert_eq!(
            e,
            "spec.devices.requests[0].exactly.selectors[0].cel: Required value"
        );
        let class = device_class(&typed(
            json!({"metadata": {"name": "c"}, "spec": {"selectors": [{"cel": {"expression": " "}}]}}),
        ));
        assert_eq!(
            field_of(class),
            "spec.selectors[0].cel.expression: Required value"
        );
    }

    #[test]
    fn request_names_are_dns_labels_and_unique() {
        let exactly = json!({"deviceClassName": "gpu.nvidia.com"});
        assert_eq!(
            field_of(claim(json!([{"name": "", "exactly": exactly}]))),
            "spec.devices.requests[0].name: Required value"
        );
        assert!(
            field_of(claim(json!([{"name": "GPU_0", "exactly": exactly}])))
                .starts_with("spec.devices.requests[0].name: Invalid value: \"GPU_0\"")
        );
        assert_eq!(
            field_of(claim(
                json!([{"name": "gpu", "exactly": exactly}, {"name": "gpu", "exactly": exactly}])
            )),
            "spec.devices.requests[1].name: Duplicate value: \"gpu\""
        );
        assert!(
            claim(
                json!([{"name": "gpu", "exactly": exactly}, {"name": "nic", "exactly": exactly}])
            )
            .is_ok()
        );
    }

    #[test]
    fn counts_and_modes_as_the_api_server_checks_them() {
        let r = |exactly: serde_json::Value| claim(json!([{"name": "gpu", "exactly": exactly}]));
        assert_eq!(
            field_of(r(json!({"deviceClassName": "g", "count": 0}))),
            "spec.devices.requests[0].exactly.count: Invalid value: 0: must be greater than zero"
        );
        assert_eq!(
            field_of(r(
                json!({"deviceClassName": "g", "allocationMode": "All", "count": 2})
            )),
            "spec.devices.requests[0].exactly.count: Invalid value: 2: must not be specified when allocationMode is 'All'"
        );
        assert_eq!(
            field_of(r(json!({"deviceClassName": "g", "allocationMode": "Some"}))),
            "spec.devices.requests[0].exactly.allocationMode: Unsupported value: \"Some\": supported values: \"All\", \"ExactCount\""
        );
        assert!(r(json!({"deviceClassName": "g", "allocationMode": "All"})).is_ok());
        assert!(r(json!({"deviceClassName": "g"})).is_ok());
        let subs: Vec<_> = (0..9)
            .map(|i| json!({"name": format!("s{i}"), "deviceClassName": "g"}))
            .collect();
        assert_eq!(
            field_of(claim(json!([{"name": "any", "firstAvailable": subs}]))),
            "spec.devices.requests[0].firstAvailable: Too many: 9: must have at most 8 items"
        );
    }

    #[test]
    fn a_request_needs_exactly_one_form() {
        assert!(
            field_of(claim(json!([{"name": "gpu"}])))
                .starts_with("spec.devices.requests[0]: Required value")
        );
        assert!(
            field_of(claim(
                json!([{"name": "gpu", "exactly": {"deviceClassName": "g"},
            "firstAvailable": [{"name": "a", "deviceClassName": "g"}]}])
            ))
            .starts_with("spec.devices.requests[0]: Forbidden")
        );
    }

    #[test]
    fn constraints_name_requests_and_qualified_attributes() {
        let doc = |constraint: serde_json::Value| {
            resource_claim_template(&typed(
                json!({"metadata": {"name": "t"}, "spec": {"spec": {"devices": {
                    "requests": [{"name": "gpu", "firstAvailable": [{"name": "big", "deviceClassName": "g"}]}],
                    "constraints": [constraint]}}}}),
            ))
        };
        assert!(doc(json!({"requests": ["gpu/big"], "matchAttribute": "resource.kubernetes.io/pcieRoot"})).is_ok());
        assert!(
            field_of(doc(json!({"requests": ["nic"], "matchAttribute": "a.b/c"}))).starts_with(
                "spec.spec.devices.constraints[0].requests[0]: Invalid value: \"nic\""
            )
        );
        assert_eq!(
            field_of(doc(json!({"matchAttribute": "pcieRoot"}))),
            "spec.spec.devices.constraints[0].matchAttribute: Invalid value: \"pcieRoot\": must include a domain"
        );
    }

    #[test]
    fn slices_place_their_devices_once() {
        let slice = |spec: serde_json::Value| {
            resource_slice(&typed(json!({"metadata": {"name": "s"}, "spec": spec})))
        };
        let pool = json!({"name": "p", "generation": 0, "resourceSliceCount": 1});
        assert!(slice(json!({"driver": "gpu.nvidia.com", "pool": pool, "nodeName": "n"})).is_ok());
        assert!(slice(json!({"driver": "dra.net", "pool": pool, "allNodes": true})).is_ok());
        assert!(
            field_of(slice(json!({"driver": "gpu.nvidia.com", "pool": pool})))
                .starts_with("spec: Required value")
        );
        assert!(
            field_of(slice(
                json!({"driver": "gpu.nvidia.com", "pool": pool, "nodeName": "n", "allNodes": true})
            ))
            .starts_with("spec: Forbidden")
        );
        assert_eq!(
            field_of(slice(json!({"driver": "d", "pool": pool, "nodeName": "n",
                "devices": [{"name": "gpu-0"}, {"name": "gpu-0"}]}))),
            "spec.devices[1].name: Duplicate value: \"gpu-0\""
        );
        assert_eq!(
            field_of(slice(json!({"driver": "d", "pool": pool, "nodeName": "n",
                "devices": [{"name": "gpu-0", "attributes": {"x": {"int": 1, "string": "a"}}}]}))),
            "spec.devices[0].attributes[x]: Invalid value: exactly one value must be specified"
        );
    }

    #[test]
    fn list_attributes_are_validated_as_the_api_server_does() {
        let slice = |devices: serde_json::Value| {
            resource_slice(&typed(json!({"metadata": {"name": "s"}, "spec": {
                "driver": "gpu.nvidia.com",
                "pool": {"name": "p", "generation": 0, "resourceSliceCount": 1},
                "nodeName": "n",
                "devices": devices}})))
        };
        let with =
            |attr: serde_json::Value| slice(json!([{"name": "gpu-0", "attributes": {"x": attr}}]));
        assert!(with(json!({"strings": ["pci0000:00", "pci0000:01"]})).is_ok());
        assert_eq!(
            field_of(with(json!({"ints": []}))),
            "spec.devices[0].attributes[x]: Invalid value: must not be empty if specified"
        );
        assert_eq!(
            field_of(with(json!({"ints": [1], "int": 1}))),
            "spec.devices[0].attributes[x]: Invalid value: exactly one value must be specified"
        );
        assert!(field_of(with(json!({"strings": ["a".repeat(65)]}))).contains("Too long"));
        let values: Vec<i64> = (0..49).collect();
        assert_eq!(
            field_of(with(json!({"ints": values}))),
            "spec.devices[0].attributes: Invalid value: 49: the total number of attribute values must not exceed 48"
        );
        // With a list in it, a slice holds at most 64 devices; without, 128.
        let devices = |n: usize, list: bool| -> serde_json::Value {
            (0..n)
                .map(|i| {
                    let attr = if list && i == 0 {
                        json!({"ints": [0, 1]})
                    } else {
                        json!({"int": 0})
                    };
                    json!({"name": format!("gpu-{i}"), "attributes": {"numa": attr}})
                })
                .collect()
        };
        assert!(slice(devices(65, false)).is_ok());
        assert!(field_of(slice(devices(65, true))).starts_with("spec.devices: Too many: 65"));
    }
}
