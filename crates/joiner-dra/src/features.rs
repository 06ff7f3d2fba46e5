//! Feature gates that change what the allocator may do, and their defaults per Kubernetes
//! version.
//!
//! The caller fills [`Features`] from `settings.cluster.kubernetesVersion` and
//! `settings.cluster.featureGates`: start from [`Features::for_version`], then override.

/// The DRA feature gates Joiner models. `true` means enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// `firstAvailable` sub-requests. Beta and on in 1.34 and 1.35; GA in 1.36.
    pub prioritized_list: bool,
    /// `adminAccess` requests. Beta and on in 1.34 and 1.35; GA in 1.36.
    pub admin_access: bool,
    /// Device taints and request tolerations. Alpha (off) in 1.34 and 1.35; beta and on in
    /// 1.36.
    pub device_taints: bool,
    /// `sharedCounters` / `consumesCounters`. Alpha (off) in 1.34 and 1.35; beta and on in
    /// 1.36.
    pub partitionable_devices: bool,
    /// `allowMultipleAllocations`, `capacity.requests`, `requestPolicy`, `shareID`. Alpha
    /// (off) in 1.34 and 1.35; beta and on in 1.36.
    pub consumable_capacity: bool,
    /// `bindingConditions` on devices. Alpha (off) in 1.34 and 1.35; beta and on in 1.36.
    pub device_binding_conditions: bool,
    /// `status.devices` on claims (no effect on allocation). Beta, on from 1.33.
    pub resource_claim_device_status: bool,
    /// Extended resources (`nvidia.com/gpu: 1` in a container's requests) served by the
    /// DeviceClass that names them. Alpha (off) in 1.34 and 1.35; beta and on in 1.36; GA in
    /// 1.37.
    pub extended_resource: bool,
    /// List-typed device attributes (`ints`, `bools`, `strings`, `versions`), compared as sets
    /// by constraints and seen as lists by CEL. Alpha (off) in 1.36 and 1.37; off, the API
    /// server drops them, and so does the snapshot.
    pub list_type_attributes: bool,
}

/// A Kubernetes minor version such as 1.36.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubeVersion {
    pub major: u32,
    pub minor: u32,
}

impl KubeVersion {
    pub const DEFAULT: KubeVersion = KubeVersion {
        major: 1,
        minor: 36,
    };

    /// Parses `"1.36"`, `"v1.36"` or `"1.36.2"`.
    pub fn parse(text: &str) -> Option<KubeVersion> {
        let t = text.trim().trim_start_matches('v');
        let mut parts = t.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(KubeVersion { major, minor })
    }
}

impl Default for Features {
    fn default() -> Self {
        Features::for_version(KubeVersion::DEFAULT)
    }
}

impl Features {
    /// The upstream defaults of a version; versions before 1.34 get 1.34's, later ones 1.36's.
    pub fn for_version(version: KubeVersion) -> Features {
        // Kubernetes' versioned feature-gate specs: these four went beta (on) in 1.36.
        let at_least_136 = version
            >= KubeVersion {
                major: 1,
                minor: 36,
            };
        Features {
            prioritized_list: true,
            admin_access: true,
            device_taints: at_least_136,
            partitionable_devices: at_least_136,
            consumable_capacity: at_least_136,
            device_binding_conditions: at_least_136,
            resource_claim_device_status: true,
            extended_resource: at_least_136,
            list_type_attributes: false,
        }
    }

    /// Whether kube-scheduler picks its "incubating" (or "experimental") structured allocator
    /// rather than the "stable" one: upstream uses the first variant that supports every
    /// enabled feature, and only the newer variants know consumable capacity, binding
    /// conditions (with device status) and list-typed attributes. The variants differ in
    /// behaviour (pool order), so the allocator must know which one it imitates.
    pub fn uses_incubating_allocator(&self) -> bool {
        self.consumable_capacity
            || (self.device_binding_conditions && self.resource_claim_device_status)
            || self.list_type_attributes
    }

    /// Everything on: what tests of individual semantics use.
    pub fn all() -> Features {
        Features {
            prioritized_list: true,
            admin_access: true,
            device_taints: true,
            partitionable_devices: true,
            consumable_capacity: true,
            device_binding_conditions: true,
            resource_claim_device_status: true,
            extended_resource: true,
            list_type_attributes: true,
        }
    }

    /// Applies one `featureGates` entry; returns `false` for a gate Joiner does not know.
    pub fn set(&mut self, gate: &str, enabled: bool) -> bool {
        let slot = match gate {
            "DRAPrioritizedList" => &mut self.prioritized_list,
            "DRAAdminAccess" => &mut self.admin_access,
            "DRADeviceTaints" => &mut self.device_taints,
            "DRAPartitionableDevices" => &mut self.partitionable_devices,
            "DRAConsumableCapacity" => &mut self.consumable_capacity,
            "DRADeviceBindingConditions" => &mut self.device_binding_conditions,
            "DRAResourceClaimDeviceStatus" => &mut self.resource_claim_device_status,
            "DRAExtendedResource" => &mut self.extended_resource,
            "DRAListTypeAttributes" => &mut self.list_type_attributes,
            _ => return false,
        };
        *slot = enabled;
        true
    }
}
