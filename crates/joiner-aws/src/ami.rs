//! The AMI each instance type boots, from the EC2NodeClass `amiSelectorTerms`.
//!
//! An alias (`al2023@latest`, `al2023@v20250101`, `al2@latest`) names EKS's optimized AMI
//! through its public SSM parameters, per architecture and, for GPU types, the NVIDIA variant.
//! Other terms (`id`, `name`, `tags`, `owner`) select images with DescribeImages; for each
//! instance type the newest image of its architecture wins.
//!
//! What these reads find is cached ([`AmiCaches`], `Ttls::images`) per EC2NodeClass spec, and
//! the architecture and GPUs of instance types the catalog does not know per type
//! (`Ttls::instance_types`).

use std::collections::{BTreeMap, BTreeSet};

use std::time::Duration;

use aws_sdk_ec2::types::{Filter, InstanceType as Ec2InstanceType};
use joiner_engine::catalog::Catalog;
use joiner_model::api::ec2nodeclass::{AmiFamily, AmiSelectorTerm};

use joiner_launch::image::{Arch, ParameterRoots, TypeFacts, alias_parameter, alias_version};

use crate::cache::{ClassKey, TtlCache};
use crate::clients::Clients;
use crate::error::AwsError;
use crate::tags::tag_filters;

/// Where EKS publishes its optimized AMI ids in SSM.
pub const DEFAULT_AMI_PARAMETER_ROOT: &str = joiner_launch::image::EKS_PARAMETER_ROOT;

/// Where an alias's AMIs are published: the roots of the public SSM parameters, and the
/// cluster's Kubernetes version, whose AMIs its nodes boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EksParameters {
    pub roots: ParameterRoots,
    pub kubernetes_version: String,
}

/// An image a non-alias term selected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Image {
    pub id: String,
    pub name: Option<String>,
    pub arch: Option<Arch>,
    /// ISO 8601, so newer sorts later.
    pub created: String,
}

/// The newest image of the type's architecture (an image of unknown architecture fits any).
pub(crate) fn newest_for(images: &[Image], arch: Arch) -> Option<&Image> {
    images
        .iter()
        .filter(|i| i.arch.is_none_or(|a| a == arch))
        .max_by(|a, b| (&a.created, &a.id).cmp(&(&b.created, &b.id)))
}

/// What AMI reads found, per EC2NodeClass spec: the image an alias names for each kind of
/// instance type, and the images selector terms match.
#[derive(Debug)]
pub(crate) struct AmiCaches {
    pub(crate) alias: TtlCache<(ClassKey, TypeFacts), String>,
    pub(crate) images: TtlCache<ClassKey, Vec<Image>>,
}

impl AmiCaches {
    pub(crate) fn new(ttl: Duration) -> AmiCaches {
        AmiCaches {
            alias: TtlCache::new(ttl),
            images: TtlCache::new(ttl),
        }
    }
}

/// What the catalog knows of a type: its architecture and whether it has NVIDIA GPUs.
fn catalog_facts(catalog: &Catalog, name: &str) -> Option<TypeFacts> {
    let it = catalog.get(name)?;
    let arch = it
        .labels
        .get(joiner_model::wellknown::labels::ARCH)
        .and_then(|a| Arch::parse(a))
        .unwrap_or(Arch::X86_64);
    let nvidia = it
        .gpu
        .as_ref()
        .is_some_and(|g| g.manufacturer.eq_ignore_ascii_case("nvidia"));
    Some(TypeFacts { arch, nvidia })
}

/// EC2's description of a type, as far as picking an AMI needs it.
fn described_facts(info: &aws_sdk_ec2::types::InstanceTypeInfo) -> TypeFacts {
    let archs = info
        .processor_info()
        .map(|p| p.supported_architectures())
        .unwrap_or_default();
    let arch = archs
        .iter()
        .find_map(|a| Arch::parse(a.as_str()))
        .unwrap_or(Arch::X86_64);
    let nvidia = info.gpu_info().is_some_and(|g| {
        g.gpus().iter().any(|d| {
            d.manufacturer()
                .is_some_and(|m| m.eq_ignore_ascii_case("nvidia"))
        })
    });
    TypeFacts { arch, nvidia }
}

impl Clients {
    /// Architecture and GPU make of each type: the catalog's when it knows the type, else
    /// DescribeInstanceTypes (cached in `cache`).
    pub(crate) async fn type_facts(
        &self,
        catalog: &Catalog,
        cache: &TtlCache<String, TypeFacts>,
        names: &BTreeSet<String>,
    ) -> Result<BTreeMap<String, TypeFacts>, AwsError> {
        let mut out = BTreeMap::new();
        let mut unknown = Vec::new();
        for name in names {
            match catalog_facts(catalog, name).or_else(|| cache.get(name)) {
                Some(f) => {
                    out.insert(name.clone(), f);
                }
                None => unknown.push(name.clone()),
            }
        }
        if unknown.is_empty() {
            return Ok(out);
        }
        let described = self
            .ec2
            .describe_instance_types()
            .set_instance_types(Some(
                unknown
                    .iter()
                    .map(|n| Ec2InstanceType::from(n.as_str()))
                    .collect(),
            ))
            .send()
            .await
            .map_err(|e| AwsError::api("DescribeInstanceTypes", unknown.join(","), e))?;
        for info in described.instance_types() {
            let Some(name) = info.instance_type().map(|t| t.as_str().to_string()) else {
                continue;
            };
            let facts = described_facts(info);
            cache.insert(name.clone(), facts);
            out.insert(name, facts);
        }
        Ok(out)
    }

    /// The AMI id for each instance type in `types`. Types no AMI fits are left out. What the
    /// reads find is cached in `cache` under `key`.
    pub(crate) async fn resolve_amis(
        &self,
        eks: &EksParameters,
        (key, cache): (&ClassKey, &AmiCaches),
        family: AmiFamily,
        terms: &[AmiSelectorTerm],
        types: &BTreeMap<String, TypeFacts>,
    ) -> Result<BTreeMap<String, String>, AwsError> {
        let node_class = key.name.as_str();
        if terms.is_empty() {
            return Err(AwsError::node_class(
                node_class,
                "spec.amiSelectorTerms is empty",
            ));
        }
        if let Some(alias) = terms.iter().find_map(|t| t.alias.as_deref()) {
            let mut by_facts: BTreeMap<TypeFacts, String> = BTreeMap::new();
            let wanted: BTreeSet<TypeFacts> = types.values().copied().collect();
            for facts in wanted {
                let id = cache
                    .alias
                    .get_or_read(
                        &(key.clone(), facts),
                        self.resolve_alias(eks, node_class, family, alias, facts),
                    )
                    .await?;
                by_facts.insert(facts, id);
            }
            return Ok(types
                .iter()
                .filter_map(|(n, f)| by_facts.get(f).map(|id| (n.clone(), id.clone())))
                .collect());
        }
        let images = cache
            .images
            .get_or_read(key, self.select_images(node_class, terms))
            .await?;
        Ok(types
            .iter()
            .filter_map(|(name, facts)| {
                newest_for(&images, facts.arch).map(|i| (name.clone(), i.id.clone()))
            })
            .collect())
    }

    /// The AMI id an alias names for one kind of instance type, from EKS's SSM parameter.
    pub(crate) async fn resolve_alias(
        &self,
        eks: &EksParameters,
        node_class: &str,
        family: AmiFamily,
        alias: &str,
        facts: TypeFacts,
    ) -> Result<String, AwsError> {
        let version = alias_version(alias);
        let kubernetes = eks.kubernetes_version.as_str();
        let Some(name) = alias_parameter(&eks.roots, family, kubernetes, version, facts) else {
            return Err(AwsError::node_class(
                node_class,
                format!(
                    "AMI alias {alias:?}: Joiner resolves al2023, al2 and bottlerocket aliases only"
                ),
            ));
        };
        let out = self
            .ssm
            .get_parameter()
            .name(&name)
            .send()
            .await
            .map_err(|e| AwsError::api("ssm:GetParameter", format!("{name} (alias {alias})"), e))?;
        match out.parameter().and_then(|p| p.value()) {
            Some(id) => Ok(id.to_string()),
            None => Err(AwsError::node_class(
                node_class,
                format!("SSM parameter {name} has no value"),
            )),
        }
    }

    pub(crate) async fn select_images(
        &self,
        node_class: &str,
        terms: &[AmiSelectorTerm],
    ) -> Result<Vec<Image>, AwsError> {
        let mut images: BTreeMap<String, Image> = BTreeMap::new();
        for term in terms {
            if let Some(param) = &term.ssm_parameter {
                let out = self
                    .ssm
                    .get_parameter()
                    .name(param)
                    .send()
                    .await
                    .map_err(|e| AwsError::api("ssm:GetParameter", param.clone(), e))?;
                if let Some(id) = out.parameter().and_then(|p| p.value()) {
                    images.extend(
                        self.describe_images(node_class, Some(id), None, Vec::new())
                            .await?,
                    );
                }
                continue;
            }
            let mut filters = tag_filters(&term.tags);
            if let Some(name) = &term.name {
                filters.push(Filter::builder().name("name").values(name).build());
            }
            images.extend(
                self.describe_images(
                    node_class,
                    term.id.as_deref(),
                    term.owner.as_deref(),
                    filters,
                )
                .await?,
            );
        }
        if images.is_empty() {
            return Err(AwsError::node_class(
                node_class,
                "no image matches spec.amiSelectorTerms",
            ));
        }
        Ok(images.into_values().collect())
    }

    async fn describe_images(
        &self,
        node_class: &str,
        id: Option<&str>,
        owner: Option<&str>,
        filters: Vec<Filter>,
    ) -> Result<Vec<(String, Image)>, AwsError> {
        let mut call = self.ec2.describe_images().set_filters(Some(filters));
        if let Some(id) = id {
            call = call.image_ids(id);
        }
        if let Some(owner) = owner {
            call = call.owners(owner);
        }
        let mut out = Vec::new();
        let mut pages = call.into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| {
                AwsError::api("DescribeImages", format!("EC2NodeClass {node_class}"), e)
            })?;
            for i in page.images() {
                let Some(image_id) = i.image_id() else {
                    continue;
                };
                out.push((
                    image_id.to_string(),
                    Image {
                        id: image_id.to_string(),
                        name: i.name().map(str::to_string),
                        arch: i.architecture().and_then(|a| Arch::parse(a.as_str())),
                        created: i.creation_date().unwrap_or_default().to_string(),
                    },
                ));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_image_of_the_right_architecture_wins() {
        let img = |id: &str, arch, created: &str| Image {
            id: id.into(),
            name: None,
            arch: Some(arch),
            created: created.into(),
        };
        let images = [
            img("ami-old", Arch::X86_64, "2024-01-01T00:00:00.000Z"),
            img("ami-new", Arch::X86_64, "2025-06-01T00:00:00.000Z"),
            img("ami-arm", Arch::Arm64, "2026-01-01T00:00:00.000Z"),
        ];
        assert_eq!(
            newest_for(&images, Arch::X86_64).map(|i| i.id.as_str()),
            Some("ami-new")
        );
        assert_eq!(
            newest_for(&images, Arch::Arm64).map(|i| i.id.as_str()),
            Some("ami-arm")
        );
    }
}
