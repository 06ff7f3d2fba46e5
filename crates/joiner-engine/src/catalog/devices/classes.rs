//! The DeviceClasses the drivers' Helm charts install. Claims name a class, not a driver, so a
//! plan for a cluster where the drivers are not yet installed (or whose manifests leave the
//! classes out) still needs them to resolve `deviceClassName`.

use k8s_openapi::api::resource::v1::{
    CELDeviceSelector, DeviceClass, DeviceClassSpec, DeviceSelector,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The class of whole NVIDIA GPUs (NVIDIA `dra-driver-gpu` chart, `deviceclass-gpu.yaml`).
pub const GPU_DEVICE_CLASS: &str = "gpu.nvidia.com";
/// The class of MIG devices (NVIDIA `dra-driver-gpu` chart, `deviceclass-mig.yaml`).
pub const MIG_DEVICE_CLASS: &str = "mig.nvidia.com";
/// The class of EFA interfaces (the `aws-dranet` chart of `aws/eks-charts`, as the EKS and
/// Karpenter DRA guides show it). DRANET publishes every network interface; the class keeps
/// the EFAs.
pub const EFA_DEVICE_CLASS: &str = "efa.networking.k8s.aws";

/// `gpu.nvidia.com`, `mig.nvidia.com` and `efa.networking.k8s.aws`, with the charts' selectors. The GPU class
/// also names `nvidia.com/gpu` as its extended resource, as the chart does for
/// `resource.k8s.io/v1` clusters: with the DRAExtendedResource feature, pods asking for
/// `nvidia.com/gpu` are then served from DRA GPUs.
pub fn default_device_classes() -> Vec<DeviceClass> {
    vec![
        class(
            GPU_DEVICE_CLASS,
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
            Some("nvidia.com/gpu"),
        ),
        class(
            MIG_DEVICE_CLASS,
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
            None,
        ),
        class(
            EFA_DEVICE_CLASS,
            "device.driver == \"dra.net\" && device.attributes[\"dra.net\"].pciDevice == 'Elastic Fabric Adapter (EFA)'",
            None,
        ),
    ]
}

fn class(name: &str, expression: &str, extended_resource: Option<&str>) -> DeviceClass {
    DeviceClass {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        spec: Some(DeviceClassSpec {
            selectors: Some(vec![DeviceSelector {
                cel: Some(CELDeviceSelector {
                    expression: expression.to_string(),
                }),
            }]),
            extended_resource_name: extended_resource.map(str::to_string),
            config: None,
        }),
    }
}
