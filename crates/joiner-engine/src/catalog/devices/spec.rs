//! Templates from a user-defined `joiner.dev/v1alpha1` InstanceType (`spec.devices`,
//! `spec.runtimeAttributes`), checked so that a mistake is reported against the field that holds
//! it rather than surfacing later as a claim that mysteriously never fits.

use std::collections::BTreeSet;

use joiner_model::api::FieldError;
use joiner_model::api::instancetype::{
    DeviceTemplate, NODE_PLACEHOLDER, RuntimeAttribute as SpecRuntimeAttribute,
};

use super::{DeviceTemplates, RuntimeAttribute, TemplatePool, same_attribute};

impl DeviceTemplates {
    /// Builds and checks templates from an InstanceType's spec. Field paths in errors start at
    /// `spec.` (for example `spec.devices[0].devices[1].name`).
    ///
    /// Checked: drivers and device names are not empty; a (driver, pool) pair appears once;
    /// device names are unique per pool; a device's counter consumption names a counter set of
    /// its pool; a runtime attribute names a driver with devices, an attribute, and only devices
    /// of that driver, and no device also gives it a value. A runtime attribute without devices
    /// covers all of its driver's devices.
    pub fn from_spec(
        devices: &[DeviceTemplate],
        runtime_attributes: &[SpecRuntimeAttribute],
    ) -> Result<DeviceTemplates, FieldError> {
        let mut pools: Vec<TemplatePool> = Vec::new();
        for (i, t) in devices.iter().enumerate() {
            let at = format!("spec.devices[{i}]");
            check_pool(t, &at)?;
            if pools
                .iter()
                .any(|p| p.driver == t.driver && p.pool == t.pool_name())
            {
                return Err(FieldError::new(
                    format!("{at}.pool"),
                    format!(
                        "pool {:?} of driver {:?} is listed twice",
                        t.pool_name(),
                        t.driver
                    ),
                ));
            }
            pools.push(TemplatePool {
                driver: t.driver.clone(),
                pool: t.pool_name().to_string(),
                published: Some(t.pool_name().to_string()),
                devices: t.devices.clone(),
                shared_counters: t.shared_counters.clone(),
            });
        }
        let runtime = runtime_attributes
            .iter()
            .enumerate()
            .map(|(k, r)| runtime_attribute(&pools, r, &format!("spec.runtimeAttributes[{k}]")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(DeviceTemplates {
            pools,
            runtime_attributes: runtime,
        })
    }
}

fn check_pool(t: &DeviceTemplate, at: &str) -> Result<(), FieldError> {
    if t.driver.is_empty() {
        return Err(FieldError::new(format!("{at}.driver"), "must not be empty"));
    }
    if !t.pool_name().contains(NODE_PLACEHOLDER) {
        return Err(FieldError::new(
            format!("{at}.pool"),
            format!(
                "{:?} does not contain {NODE_PLACEHOLDER}: every node of the type publishes a pool \
                 of its own, so the name must contain the node's name as the driver writes it \
                 (for example \"{NODE_PLACEHOLDER}-fpgas\"); leave it out for a pool named after the node",
                t.pool_name()
            ),
        ));
    }
    let counter_sets: BTreeSet<&str> = t.shared_counters.iter().map(|c| c.name.as_str()).collect();
    let mut names = BTreeSet::new();
    for (j, dev) in t.devices.iter().enumerate() {
        let at = format!("{at}.devices[{j}]");
        if dev.name.is_empty() {
            return Err(FieldError::new(format!("{at}.name"), "must not be empty"));
        }
        if !names.insert(dev.name.as_str()) {
            return Err(FieldError::new(
                format!("{at}.name"),
                format!("device {:?} is listed twice in this pool", dev.name),
            ));
        }
        for (c, consumption) in dev.consumes_counters.iter().flatten().enumerate() {
            if !counter_sets.contains(consumption.counter_set.as_str()) {
                return Err(FieldError::new(
                    format!("{at}.consumesCounters[{c}].counterSet"),
                    format!(
                        "counter set {:?} is not among the pool's sharedCounters",
                        consumption.counter_set
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn runtime_attribute(
    pools: &[TemplatePool],
    r: &SpecRuntimeAttribute,
    at: &str,
) -> Result<RuntimeAttribute, FieldError> {
    if r.attribute.is_empty() {
        return Err(FieldError::new(
            format!("{at}.attribute"),
            "must not be empty",
        ));
    }
    let driver_devices: Vec<&k8s_openapi::api::resource::v1::Device> = pools
        .iter()
        .filter(|p| p.driver == r.driver)
        .flat_map(|p| &p.devices)
        .collect();
    if driver_devices.is_empty() {
        return Err(FieldError::new(
            format!("{at}.driver"),
            format!(
                "no device of driver {:?} is listed in spec.devices",
                r.driver
            ),
        ));
    }
    let mut covered: Vec<String> = Vec::new();
    if r.devices.is_empty() {
        covered.extend(driver_devices.iter().map(|d| d.name.clone()));
    }
    for (m, name) in r.devices.iter().enumerate() {
        if !driver_devices.iter().any(|d| &d.name == name) {
            return Err(FieldError::new(
                format!("{at}.devices[{m}]"),
                format!("driver {:?} has no device {name:?}", r.driver),
            ));
        }
        if !covered.contains(name) {
            covered.push(name.clone());
        }
    }
    for d in driver_devices.iter().filter(|d| covered.contains(&d.name)) {
        let valued = d
            .attributes
            .iter()
            .flatten()
            .any(|(k, _)| same_attribute(&r.driver, k, &r.attribute));
        if valued {
            return Err(FieldError::new(
                format!("{at}.attribute"),
                format!(
                    "device {:?} gives {:?} a value, yet it is declared known only at run time",
                    d.name, r.attribute
                ),
            ));
        }
    }
    Ok(RuntimeAttribute {
        driver: r.driver.clone(),
        attribute: r.attribute.clone(),
        devices: covered,
    })
}
