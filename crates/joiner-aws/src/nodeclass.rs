//! An EC2NodeClass resolved against EC2, SSM and IAM for its status: the subnets and security
//! groups its selectors match, the AMIs its AMI selector names (with the instance types each is
//! for), and its instance profile (`profile`).
//!
//! The reads are those launches make (`network`, `ami`), through the same caches, so a class
//! resolved for its status costs its next launch nothing. Each part answers on its own: a
//! selector that matches nothing is `NotFound` (EC2 answered), anything else that failed is
//! `Failed` and leaves the class's last status in place.

use std::collections::BTreeMap;

use joiner_controller::cloud::{CloudError, NodeClassResolution, Resolved};
use joiner_model::api::EC2NodeClass;
use joiner_model::api::ec2nodeclass::{Ami, SecurityGroup, Subnet};
use joiner_model::wellknown::labels;
use k8s_openapi::api::core::v1::NodeSelectorRequirement;

use joiner_launch::family_of;
use joiner_launch::image::{Arch, TypeFacts};

use crate::ami::{AmiCaches, EksParameters};
use crate::cache::{ClassKey, TtlCache};
use crate::clients::Clients;
use crate::error::AwsError;
use crate::network::SubnetInfo;

/// The caches and parameters the resolution shares with launches.
pub(crate) struct ClassReads<'a> {
    pub cluster: &'a str,
    pub eks: &'a EksParameters,
    pub subnets: &'a TtlCache<ClassKey, Vec<SubnetInfo>>,
    pub amis: &'a AmiCaches,
}

/// A failed part: the class cannot be used as it is (`NotFound`, with the reason), or the call
/// failed (`Failed`).
fn outcome<T>(answer: Result<T, AwsError>) -> Resolved<T> {
    match answer {
        Ok(v) => Resolved::Found(v),
        Err(AwsError::NodeClass { message, .. }) => Resolved::NotFound(message),
        Err(e) => Resolved::Failed(CloudError::from(e)),
    }
}

/// The kinds of instance types an alias publishes an image for, in the order listed.
const ALIAS_KINDS: [TypeFacts; 4] = [
    TypeFacts {
        arch: Arch::X86_64,
        nvidia: false,
    },
    TypeFacts {
        arch: Arch::X86_64,
        nvidia: true,
    },
    TypeFacts {
        arch: Arch::Arm64,
        nvidia: false,
    },
    TypeFacts {
        arch: Arch::Arm64,
        nvidia: true,
    },
];

fn requirement(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    }
}

fn kube_arch(arch: Arch) -> &'static str {
    match arch {
        Arch::X86_64 => "amd64",
        Arch::Arm64 => "arm64",
    }
}

/// What an image of this kind is for, as Karpenter writes it: the architecture, and NVIDIA
/// GPUs or none.
fn kind_requirements(facts: TypeFacts) -> Vec<NodeSelectorRequirement> {
    let gpu = if facts.nvidia {
        requirement(labels::INSTANCE_GPU_MANUFACTURER, "In", &["nvidia"])
    } else {
        requirement(labels::INSTANCE_GPU_COUNT, "DoesNotExist", &[])
    };
    vec![
        requirement(labels::ARCH, "In", &[kube_arch(facts.arch)]),
        gpu,
    ]
}

impl Clients {
    /// Resolves every part of `class` (see the module documentation).
    pub(crate) async fn resolve_node_class(
        &self,
        reads: ClassReads<'_>,
        class: &EC2NodeClass,
    ) -> NodeClassResolution {
        let name = class.metadata.name.as_deref().unwrap_or_default();
        let key = ClassKey::of(name, class);
        let spec = &class.spec;
        let subnets = reads
            .subnets
            .get_or_read(&key, self.subnets(name, &spec.subnet_selector_terms))
            .await
            .map(|found| {
                found
                    .into_iter()
                    .map(|s| Subnet {
                        id: s.id,
                        zone: s.zone,
                        zone_id: s.zone_id,
                    })
                    .collect()
            });
        let security_groups = self
            .security_groups_named(name, &spec.security_group_selector_terms)
            .await
            .map(|found| {
                found
                    .into_iter()
                    .map(|(id, name)| SecurityGroup { id, name })
                    .collect()
            });
        let amis = self.class_amis(&reads, &key, class).await;
        let profile = self
            .instance_profile(reads.cluster, &self.region, class)
            .await;
        let reservations = self
            .capacity_reservations(name, &spec.capacity_reservation_selector_terms)
            .await;
        let placement_group = match &spec.placement_group_selector {
            None => Resolved::Found(None),
            Some(selector) => match self.placement_group(name, selector).await {
                Ok(Some(g)) => Resolved::Found(Some(g)),
                Ok(None) => Resolved::NotFound(format!(
                    "placement group {:?} not found (or not available)",
                    selector.named()
                )),
                Err(e) => Resolved::Failed(CloudError::from(e)),
            },
        };
        NodeClassResolution {
            subnets: outcome(subnets),
            security_groups: outcome(security_groups),
            amis: outcome(amis),
            instance_profile: outcome(profile),
            capacity_reservations: outcome(reservations),
            placement_group,
        }
    }

    /// The class's AMIs: for an alias, the image EKS publishes for each kind of instance type
    /// (kinds it publishes none for are left out); for other terms, every image they select.
    async fn class_amis(
        &self,
        reads: &ClassReads<'_>,
        key: &ClassKey,
        class: &EC2NodeClass,
    ) -> Result<Vec<Ami>, AwsError> {
        let name = key.name.as_str();
        let terms = &class.spec.ami_selector_terms;
        if terms.is_empty() {
            return Err(AwsError::node_class(name, "spec.amiSelectorTerms is empty"));
        }
        let Some(alias) = terms.iter().find_map(|t| t.alias.as_deref()) else {
            let images = reads
                .amis
                .images
                .get_or_read(key, self.select_images(name, terms))
                .await?;
            return Ok(images
                .into_iter()
                .map(|i| Ami {
                    id: i.id,
                    name: i.name,
                    requirements: i
                        .arch
                        .map(|a| vec![requirement(labels::ARCH, "In", &[kube_arch(a)])])
                        .unwrap_or_default(),
                    ..Ami::default()
                })
                .collect());
        };
        let family = family_of(class).map_err(|e| AwsError::node_class(name, e.to_string()))?;
        let mut by_id: BTreeMap<String, Ami> = BTreeMap::new();
        for facts in ALIAS_KINDS {
            let read = self.resolve_alias(reads.eks, name, family, alias, facts);
            match reads
                .amis
                .alias
                .get_or_read(&(key.clone(), facts), read)
                .await
            {
                Ok(id) => {
                    by_id.entry(id.clone()).or_insert(Ami {
                        id,
                        requirements: kind_requirements(facts),
                        ..Ami::default()
                    });
                }
                // EKS publishes no image for this kind (AL2 has no arm64 GPU image).
                Err(e) if e.code() == Some("ParameterNotFound") => {}
                Err(e) => return Err(e),
            }
        }
        if by_id.is_empty() {
            return Err(AwsError::node_class(
                name,
                format!("AMI alias {alias:?}: EKS publishes no image for it"),
            ));
        }
        Ok(by_id.into_values().collect())
    }
}
