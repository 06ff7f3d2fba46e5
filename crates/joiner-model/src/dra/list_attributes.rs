//! List-typed device attributes (`ints`, `bools`, `strings`, `versions`), which a ResourceSlice
//! may carry where kube-apiserver runs with the alpha feature gate `DRAListTypeAttributes`.
//!
//! Joiner does not model them yet (k8s-openapi has no fields for them, and selectors and
//! constraints would have to treat them as sets). Rather than refusing the whole input, as the
//! "exactly one value" rule would when the list field is not read, such an attribute is set
//! aside before the slice is decoded and a warning names it. Leaving it out is the cautious
//! choice: a selector that reads it fails on that device, and a `matchAttribute` constraint
//! over it is not met, so no claim is allocated a device on the strength of an attribute Joiner
//! did not read.

use serde_json::Value;

/// The list-typed value fields of a device attribute.
pub const LIST_FIELDS: &[&str] = &["ints", "bools", "strings", "versions"];

/// Removes every list-typed attribute from the devices of a `v1` ResourceSlice `doc`, returning
/// the path of each (`spec.devices[0].attributes[pcieRoots]`). An attribute that also sets a
/// scalar value, or sets no list, is left for validation to judge.
pub fn set_aside(doc: &mut Value) -> Vec<String> {
    let mut removed = Vec::new();
    let Some(devices) = doc
        .pointer_mut("/spec/devices")
        .and_then(Value::as_array_mut)
    else {
        return removed;
    };
    for (i, device) in devices.iter_mut().enumerate() {
        let Some(attributes) = device.get_mut("attributes").and_then(Value::as_object_mut) else {
            continue;
        };
        let listed: Vec<String> = attributes
            .iter()
            .filter(|(_, value)| is_list_only(value))
            .map(|(name, _)| name.clone())
            .collect();
        for name in listed {
            attributes.remove(&name);
            removed.push(format!("spec.devices[{i}].attributes[{name}]"));
        }
    }
    removed
}

/// Whether an attribute's value sets exactly one list field and nothing else.
fn is_list_only(value: &Value) -> bool {
    let Some(fields) = value.as_object() else {
        return false;
    };
    fields.len() == 1
        && fields
            .iter()
            .all(|(k, v)| LIST_FIELDS.contains(&k.as_str()) && v.is_array())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn list_attributes_are_set_aside_and_named() {
        let mut doc = json!({"spec": {"devices": [
            {"name": "gpu-0", "attributes": {
                "type": {"string": "gpu"},
                "pcieRoots": {"strings": ["pci0000:00", "pci0000:01"]},
                "numaNodes": {"ints": [0, 1]}
            }},
            {"name": "gpu-1", "attributes": {"both": {"string": "x", "strings": ["y"]}}}
        ]}});
        let removed = set_aside(&mut doc);
        assert_eq!(
            removed,
            [
                "spec.devices[0].attributes[pcieRoots]",
                "spec.devices[0].attributes[numaNodes]"
            ],
            "in the order the file writes them"
        );
        assert_eq!(
            doc["spec"]["devices"][0]["attributes"],
            json!({"type": {"string": "gpu"}})
        );
        // Both a scalar and a list: left for validation, which refuses it.
        assert!(doc["spec"]["devices"][1]["attributes"]["both"].is_object());
    }
}
