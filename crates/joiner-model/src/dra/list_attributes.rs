//! List-typed device attributes (`ints`, `bools`, `strings`, `versions`; the alpha feature
//! gate `DRAListTypeAttributes`).
//!
//! With the gate on they are read and used as the upstream allocator uses them (as sets). With
//! it off the API server drops the list fields, so the cluster never holds them; a slice that
//! carries them anyway (a file written for another cluster) has them set aside with a warning
//! naming each, rather than the whole input refused. Leaving them out is the cautious choice:
//! a selector that reads one fails on that device, and a `matchAttribute` constraint over it is
//! not met, so no claim is allocated a device on the strength of an attribute the cluster would
//! not have.

use k8s_openapi::api::resource::v1::{DeviceAttribute, ResourceSlice};

/// Whether an attribute holds a list.
pub fn is_list(a: &DeviceAttribute) -> bool {
    a.ints.is_some() || a.bools.is_some() || a.strings.is_some() || a.versions.is_some()
}

/// Removes every list-typed attribute from the slice's devices, returning the path of each
/// (`spec.devices[0].attributes[pcieRoots]`) in the order the devices and names come.
pub fn set_aside(slice: &mut ResourceSlice) -> Vec<String> {
    let mut removed = Vec::new();
    for (i, device) in slice.spec.devices.iter_mut().flatten().enumerate() {
        let Some(attributes) = device.attributes.as_mut() else {
            continue;
        };
        let listed: Vec<String> = attributes
            .iter()
            .filter(|(_, a)| is_list(a))
            .map(|(name, _)| name.clone())
            .collect();
        for name in listed {
            attributes.remove(&name);
            removed.push(format!("spec.devices[{i}].attributes[{name}]"));
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn list_attributes_are_set_aside_and_named() {
        let mut slice: ResourceSlice = serde_json::from_value(json!({
            "metadata": {"name": "s"},
            "spec": {"driver": "d", "pool": {"name": "p", "resourceSliceCount": 1}, "nodeName": "n",
                "devices": [
                    {"name": "gpu-0", "attributes": {
                        "type": {"string": "gpu"},
                        "pcieRoots": {"strings": ["pci0000:00", "pci0000:01"]},
                        "numaNodes": {"ints": [0, 1]}
                    }},
                    {"name": "gpu-1", "attributes": {"model": {"string": "x"}}}
                ]}
        }))
        .expect("slice");
        let removed = set_aside(&mut slice);
        assert_eq!(
            removed,
            [
                "spec.devices[0].attributes[numaNodes]",
                "spec.devices[0].attributes[pcieRoots]"
            ],
            "in name order"
        );
        let devices = slice.spec.devices.expect("devices");
        assert_eq!(
            devices[0]
                .attributes
                .as_ref()
                .map(|a| a.keys().collect::<Vec<_>>()),
            Some(vec![&"type".to_string()])
        );
        assert_eq!(devices[1].attributes.as_ref().map(|a| a.len()), Some(1));
    }
}
