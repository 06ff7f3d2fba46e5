//! DRA devices: how many devices each driver the plan counted on publishes in the node's
//! ResourceSlices, against what the NodeClaim recorded at planning
//! (`joiner.dev/predicted-dra-devices`).

use std::collections::BTreeMap;

use joiner_model::api::NodeClaim;
use joiner_model::wellknown::annotations;
use k8s_openapi::api::resource::v1::ResourceSlice;

use super::{Contradiction, Predicted};

/// The devices the plan expects each driver to publish on the NodeClaim's node; none when it
/// recorded none, or the record does not read (nothing is then checked).
pub fn predicted(claim: &NodeClaim) -> BTreeMap<String, u32> {
    claim
        .annotation(annotations::PREDICTED_DRA_DEVICES)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

/// The node-local slices `driver` publishes for `node`, by pool, each pool's newest generation
/// only (older ones are being replaced).
pub fn current_pools<'a>(
    driver: &str,
    node: &str,
    slices: &'a [ResourceSlice],
) -> BTreeMap<&'a str, Vec<&'a ResourceSlice>> {
    let mut pools: BTreeMap<&str, Vec<&ResourceSlice>> = BTreeMap::new();
    for s in slices
        .iter()
        .filter(|s| s.spec.driver == driver && s.spec.node_name.as_deref() == Some(node))
    {
        let current = pools.entry(s.spec.pool.name.as_str()).or_default();
        match current.first().map(|c| c.spec.pool.generation) {
            Some(g) if g > s.spec.pool.generation => {}
            Some(g) if g < s.spec.pool.generation => *current = vec![s],
            _ => current.push(s),
        }
    }
    pools
}

/// How many devices `driver` publishes in the current slices of `node`.
pub fn published(driver: &str, node: &str, slices: &[ResourceSlice]) -> u32 {
    let count: usize = current_pools(driver, node, slices)
        .values()
        .flatten()
        .map(|s| s.spec.devices.as_ref().map_or(0, Vec::len))
        .sum();
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// Drivers that published fewer devices on the node than predicted. Called once every driver
/// has published its complete pools, so a smaller count is final, not a slice still coming.
pub fn shortfalls(claim: &NodeClaim, node: &str, slices: &[ResourceSlice]) -> Vec<Contradiction> {
    predicted(claim)
        .into_iter()
        .filter_map(|(driver, want)| {
            let found = published(&driver, node, slices);
            (found < want).then(|| Contradiction {
                of: Predicted::DraDevices,
                subject: driver,
                predicted: want.to_string(),
                found: found.to_string(),
                share: Some(f64::from(found) / f64::from(want)),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_model::api::nodeclaim::NodeClaimSpec;
    use joiner_model::api::nodepool::NodeClassReference;
    use k8s_openapi::api::resource::v1::{Device, ResourcePool, ResourceSliceSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn claim(predicted: &str) -> NodeClaim {
        let mut c = NodeClaim::new(
            ObjectMeta::default(),
            NodeClaimSpec::new(NodeClassReference::ec2("default")),
        );
        c.metadata.annotations = Some(
            [(
                annotations::PREDICTED_DRA_DEVICES.to_string(),
                predicted.to_string(),
            )]
            .into(),
        );
        c
    }

    fn slice(
        driver: &str,
        node: &str,
        pool: &str,
        generation: i64,
        devices: usize,
    ) -> ResourceSlice {
        ResourceSlice {
            metadata: ObjectMeta::default(),
            spec: ResourceSliceSpec {
                driver: driver.into(),
                node_name: Some(node.into()),
                pool: ResourcePool {
                    name: pool.into(),
                    generation,
                    resource_slice_count: 1,
                },
                devices: Some(
                    (0..devices)
                        .map(|i| Device {
                            name: format!("gpu-{i}"),
                            ..Device::default()
                        })
                        .collect(),
                ),
                ..ResourceSliceSpec::default()
            },
        }
    }

    #[test]
    fn a_driver_publishing_fewer_devices_than_predicted_is_found_short() {
        let c = claim(r#"{"gpu.nvidia.com": 8, "dra.net": 2}"#);
        let slices = [
            // An older generation of the GPU pool, being replaced, counts for nothing.
            slice("gpu.nvidia.com", "n", "n", 1, 8),
            slice("gpu.nvidia.com", "n", "n", 2, 7),
            slice("dra.net", "n", "n", 1, 2),
            // Another node's devices are not this node's.
            slice("gpu.nvidia.com", "m", "m", 1, 8),
        ];
        let short = shortfalls(&c, "n", &slices);
        assert_eq!(short.len(), 1, "{short:?}");
        assert_eq!(
            short[0].message(),
            "expected 8 devices of DRA driver gpu.nvidia.com, but found 7 (87.5% of expected)"
        );
    }

    #[test]
    fn as_many_devices_as_predicted_or_no_record_is_no_shortfall() {
        let slices = [slice("gpu.nvidia.com", "n", "n", 0, 8)];
        assert!(shortfalls(&claim(r#"{"gpu.nvidia.com": 8}"#), "n", &slices).is_empty());
        assert!(shortfalls(&claim("not json"), "n", &slices).is_empty());
    }
}
