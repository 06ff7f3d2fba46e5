//! The attach/detach controller and a CSI driver, as far as termination needs them: a pod bound
//! to a Node with a `persistentVolumeClaim` volume has that volume attached there (a
//! VolumeAttachment), and once no pod on the Node uses it any more it detaches after
//! [`SimulatedAttacher::detach_delay`] (an EBS volume takes seconds to minutes). The persistent
//! volume of claim `c` in namespace `ns` is named `pvc-<ns>-<c>`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use joiner_controller::clock::add;
use joiner_controller::store::{ClusterStore, StoreError};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::{
    VolumeAttachment, VolumeAttachmentSource, VolumeAttachmentSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

/// The CSI driver the simulated volumes belong to.
pub const DRIVER: &str = "ebs.csi.aws.com";

#[derive(Debug, Clone)]
pub struct SimulatedAttacher {
    /// How long a volume no pod on its node uses takes to detach.
    pub detach_delay: Duration,
    /// Attachments no pod uses, by name, and since when.
    unused_since: BTreeMap<String, Timestamp>,
}

impl Default for SimulatedAttacher {
    fn default() -> Self {
        SimulatedAttacher::new(Duration::from_secs(10))
    }
}

/// The persistent volumes a pod uses, by the simulated PV names.
fn volumes_of(pod: &Pod) -> impl Iterator<Item = String> + '_ {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(move |v| {
            let claim = &v.persistent_volume_claim.as_ref()?.claim_name;
            Some(format!("pvc-{ns}-{claim}"))
        })
}

fn attachment_name(node: &str, volume: &str) -> String {
    format!("csi-{volume}-{node}")
}

impl SimulatedAttacher {
    pub fn new(detach_delay: Duration) -> SimulatedAttacher {
        SimulatedAttacher {
            detach_delay,
            unused_since: BTreeMap::new(),
        }
    }

    /// Attaches what bound pods use and detaches what has gone unused for the delay.
    pub fn step<S: ClusterStore>(&mut self, store: &S, now: Timestamp) -> Result<(), StoreError> {
        // What pods bound to a Node use, Terminating ones included: a volume stays mounted
        // until its pod has stopped.
        let mut used: BTreeSet<(String, String)> = BTreeSet::new();
        for pod in store.list::<Pod>()? {
            let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                continue;
            };
            for volume in volumes_of(&pod) {
                used.insert((node.clone(), volume));
            }
        }
        let existing = store.list::<VolumeAttachment>()?;
        for (node, volume) in &used {
            let name = attachment_name(node, volume);
            self.unused_since.remove(&name);
            if existing
                .iter()
                .any(|v| v.metadata.name.as_deref() == Some(&name))
            {
                continue;
            }
            let attachment = VolumeAttachment {
                metadata: ObjectMeta {
                    name: Some(name),
                    ..ObjectMeta::default()
                },
                spec: VolumeAttachmentSpec {
                    attacher: DRIVER.into(),
                    node_name: node.clone(),
                    source: VolumeAttachmentSource {
                        persistent_volume_name: Some(volume.clone()),
                        ..VolumeAttachmentSource::default()
                    },
                },
                status: None,
            };
            match store.create(&attachment) {
                Ok(_) | Err(StoreError::AlreadyExists(_)) => {}
                Err(e) => return Err(e),
            }
        }
        for v in existing {
            let Some(name) = v.metadata.name.clone() else {
                continue;
            };
            let volume = v
                .spec
                .source
                .persistent_volume_name
                .clone()
                .unwrap_or_default();
            if used.contains(&(v.spec.node_name.clone(), volume)) {
                continue;
            }
            let since = *self.unused_since.entry(name.clone()).or_insert(now);
            if now >= add(since, self.detach_delay) {
                match store.delete::<VolumeAttachment>(None, &name) {
                    Ok(_) | Err(StoreError::NotFound(_)) => {}
                    Err(e) => return Err(e),
                }
                self.unused_since.remove(&name);
            }
        }
        Ok(())
    }
}
