//! Instance profiles for EC2NodeClasses that name a `spec.role`, made and adopted as Karpenter
//! makes them, so a cluster can move between Karpenter and Joiner without new profiles.
//!
//! - The profile the class's `status.instanceProfile` names (Karpenter's or Joiner's) is used
//!   while it exists and holds the class's role; ownership tags it lacks are added.
//! - Otherwise Joiner makes its own: named `<cluster>_<hash>` as Karpenter names its profiles
//!   (a decimal 64-bit FNV-1a hash, here of the region, the class's name, its uid and the role:
//!   the same class and role always get the same name, so a create whose answer was lost is
//!   found, not repeated), tagged as Karpenter tags them (the class's `spec.tags`, the cluster
//!   tag `owned`, `eks:eks-cluster-name`, `karpenter.k8s.aws/ec2nodeclass` and the region), with
//!   the role added. `EntityAlreadyExists` on create means it is there: it is read and adopted.
//! - A changed `spec.role` therefore gets a new profile, for new nodes only: the profile the
//!   running nodes were launched with keeps its role, so they keep their credentials until they
//!   are replaced (as Karpenter does since v1.7, rather than swapping the role under them).
//! - The profile named for this role holding another role (changed by hand) has its role
//!   replaced only when it carries this cluster's and this class's ownership tags; anyone
//!   else's is left alone and the class is not ready.
//!
//! - Profiles are made under Karpenter's path for the cluster, `/karpenter/<region>/<cluster>/
//!   <class uid>/`, so Karpenter's garbage collection and Joiner's treat each other's alike.
//!   Those no EC2NodeClass, NodeClaim or instance uses any more are deleted
//!   ([`Clients::cluster_profiles`], [`Clients::delete_profile`]; the controller decides which).
//!
//! `spec.instanceProfile` is used as given, with no IAM call, and is never deleted.

use std::collections::BTreeMap;

use aws_sdk_iam::types::Tag;
use joiner_model::api::EC2NodeClass;
use joiner_model::wellknown::{labels, tags};

use crate::clients::Clients;
use crate::error::AwsError;

/// The IAM path under which the cluster's profiles are made: Karpenter's.
pub(crate) fn cluster_path(region: &str, cluster: &str) -> String {
    format!("/karpenter/{region}/{cluster}/")
}

/// IAM's limit on an instance profile's name.
const MAX_NAME: usize = 128;

/// A profile as IAM describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Profile {
    roles: Vec<String>,
    tags: BTreeMap<String, String>,
}

/// 64-bit FNV-1a, the hash Karpenter's profile names carry (in decimal).
fn fnv1a64(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The name of the profile Joiner makes for `class` and its `role`: `<cluster>_<hash>`.
pub(crate) fn profile_name(
    cluster: &str,
    region: &str,
    class: &EC2NodeClass,
    role: &str,
) -> String {
    let name = class.metadata.name.as_deref().unwrap_or_default();
    let uid = class.metadata.uid.as_deref().unwrap_or_default();
    let hash = fnv1a64(&format!("{region}{name}{uid}{role}")).to_string();
    let room = MAX_NAME.saturating_sub(hash.len() + 1);
    let cluster: String = cluster.chars().take(room).collect();
    format!("{cluster}_{hash}")
}

/// The tags of a profile made for `class`: its `spec.tags`, then the ownership tags.
pub(crate) fn profile_tags(
    cluster: &str,
    region: &str,
    class: &EC2NodeClass,
) -> BTreeMap<String, String> {
    let mut out = class.spec.tags.clone();
    out.insert(tags::cluster(cluster), tags::OWNED.to_string());
    out.insert(tags::CLUSTER_NAME.to_string(), cluster.to_string());
    out.insert(
        tags::NODECLASS.to_string(),
        class.metadata.name.clone().unwrap_or_default(),
    );
    out.insert(labels::REGION.to_string(), region.to_string());
    out
}

/// Whether the profile carries this cluster's and this class's ownership tags.
fn owned(profile: &Profile, cluster: &str, class: &str) -> bool {
    profile
        .tags
        .get(&tags::cluster(cluster))
        .map(String::as_str)
        == Some(tags::OWNED)
        && profile.tags.get(tags::CLUSTER_NAME).map(String::as_str) == Some(cluster)
        && profile.tags.get(tags::NODECLASS).map(String::as_str) == Some(class)
}

fn iam_tags(tags: &BTreeMap<String, String>) -> Result<Vec<Tag>, AwsError> {
    tags.iter()
        .map(|(k, v)| {
            Tag::builder()
                .key(k)
                .value(v)
                .build()
                .map_err(|e| AwsError::Settings(format!("IAM tag {k}: {e}")))
        })
        .collect()
}

fn described(p: &aws_sdk_iam::types::InstanceProfile) -> Profile {
    Profile {
        roles: p
            .roles()
            .iter()
            .map(|r| r.role_name().to_string())
            .collect(),
        tags: p
            .tags()
            .iter()
            .map(|t| (t.key().to_string(), t.value().to_string()))
            .collect(),
    }
}

/// The role name AddRoleToInstanceProfile takes: a role given as a path or ARN loses it.
fn bare_role(role: &str) -> &str {
    role.rsplit('/').next().unwrap_or(role)
}

impl Clients {
    /// The instance profile the class's nodes get (see the module documentation). An error of
    /// kind `NodeClass` means the profile cannot be used as things are (the role does not
    /// exist, the profile is someone else's); any other is a failed call, to retry.
    pub(crate) async fn instance_profile(
        &self,
        cluster: &str,
        region: &str,
        class: &EC2NodeClass,
    ) -> Result<String, AwsError> {
        let class_name = class.metadata.name.as_deref().unwrap_or_default();
        if let Some(given) = &class.spec.instance_profile {
            return Ok(given.clone());
        }
        let Some(role) = class.spec.role.as_deref().map(bare_role) else {
            return Err(AwsError::node_class(
                class_name,
                "neither spec.role nor spec.instanceProfile is set",
            ));
        };
        let wanted_tags = profile_tags(cluster, region, class);
        let recorded = class
            .status
            .as_ref()
            .and_then(|s| s.instance_profile.as_deref());
        if let Some(recorded) = recorded
            && let Some(profile) = self.get_profile(recorded).await?
            && profile.roles.iter().any(|r| r == role)
        {
            self.add_missing_tags(recorded, &profile, &wanted_tags)
                .await?;
            return Ok(recorded.to_string());
        }
        let name = profile_name(cluster, region, class, role);
        let path = format!(
            "{}{}/",
            cluster_path(region, cluster),
            class.metadata.uid.as_deref().unwrap_or("none")
        );
        let profile = match self.get_profile(&name).await? {
            Some(p) => p,
            None => self.create_profile(&name, &path, &wanted_tags).await?,
        };
        match profile.roles.as_slice() {
            [] => self.add_role(class_name, &name, role).await?,
            [held] if held == role => {}
            [held, ..] => {
                if !owned(&profile, cluster, class_name) {
                    return Err(AwsError::node_class(
                        class_name,
                        format!(
                            "instance profile {name} holds role {held}, not {role}, and lacks the ownership tags of cluster {cluster}: not changed"
                        ),
                    ));
                }
                self.iam
                    .remove_role_from_instance_profile()
                    .instance_profile_name(&name)
                    .role_name(held)
                    .send()
                    .await
                    .map_err(|e| AwsError::api("iam:RemoveRoleFromInstanceProfile", &name, e))?;
                self.add_role(class_name, &name, role).await?;
            }
        }
        self.add_missing_tags(&name, &profile, &wanted_tags).await?;
        Ok(name)
    }

    /// The profile a launch from `class` gives its instance: `spec.instanceProfile`, else the
    /// one the class's status records (resolved and checked by the controller before it
    /// launches), else one made or adopted now (a class launched before it was ever resolved).
    pub(crate) async fn launch_profile(
        &self,
        cluster: &str,
        class: &EC2NodeClass,
    ) -> Result<Option<String>, AwsError> {
        if let Some(given) = &class.spec.instance_profile {
            return Ok(Some(given.clone()));
        }
        if class.spec.role.is_none() {
            return Ok(None);
        }
        if let Some(recorded) = class
            .status
            .as_ref()
            .and_then(|s| s.instance_profile.clone())
        {
            return Ok(Some(recorded));
        }
        self.instance_profile(cluster, &self.region, class)
            .await
            .map(Some)
    }

    /// The profile, or `None` when IAM answers `NoSuchEntity`.
    async fn get_profile(&self, name: &str) -> Result<Option<Profile>, AwsError> {
        match self
            .iam
            .get_instance_profile()
            .instance_profile_name(name)
            .send()
            .await
        {
            Ok(out) => Ok(out.instance_profile().map(described)),
            Err(e) => {
                let e = AwsError::api("iam:GetInstanceProfile", name, e);
                if e.code() == Some("NoSuchEntity") {
                    Ok(None)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Creates the profile with its tags; one that already exists (a create whose answer was
    /// lost, another replica) is read instead.
    async fn create_profile(
        &self,
        name: &str,
        path: &str,
        wanted: &BTreeMap<String, String>,
    ) -> Result<Profile, AwsError> {
        let answer = self
            .iam
            .create_instance_profile()
            .instance_profile_name(name)
            .path(path)
            .set_tags(Some(iam_tags(wanted)?))
            .send()
            .await;
        match answer {
            Ok(out) => {
                tracing::info!(instance_profile = name, "created the instance profile");
                Ok(out.instance_profile().map(described).unwrap_or(Profile {
                    roles: Vec::new(),
                    tags: wanted.clone(),
                }))
            }
            Err(e) => {
                let e = AwsError::api("iam:CreateInstanceProfile", name, e);
                if e.code() != Some("EntityAlreadyExists") {
                    return Err(e);
                }
                self.get_profile(name).await?.ok_or(e)
            }
        }
    }

    /// The profiles under the cluster's path (every page), by name.
    pub(crate) async fn cluster_profiles(&self, cluster: &str) -> Result<Vec<String>, AwsError> {
        let prefix = cluster_path(&self.region, cluster);
        let mut names = Vec::new();
        let mut pages = self
            .iam
            .list_instance_profiles()
            .path_prefix(&prefix)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| AwsError::api("iam:ListInstanceProfiles", &prefix, e))?;
            // Filtered here too: not every IAM implementation honours the prefix (moto).
            names.extend(
                page.instance_profiles()
                    .iter()
                    .filter(|p| p.path().starts_with(&prefix))
                    .map(|p| p.instance_profile_name().to_string()),
            );
        }
        Ok(names)
    }

    /// Removes the profile's role and deletes it, if it carries this cluster's ownership tags;
    /// one already gone is no error, one that is not the cluster's is left alone.
    pub(crate) async fn delete_profile(&self, cluster: &str, name: &str) -> Result<(), AwsError> {
        let Some(profile) = self.get_profile(name).await? else {
            return Ok(());
        };
        let ours = profile
            .tags
            .get(&tags::cluster(cluster))
            .map(String::as_str)
            == Some(tags::OWNED)
            && profile.tags.get(tags::CLUSTER_NAME).map(String::as_str) == Some(cluster);
        if !ours {
            return Err(AwsError::Settings(format!(
                "instance profile {name} lacks the ownership tags of cluster {cluster}: not deleted"
            )));
        }
        for role in &profile.roles {
            let answer = self
                .iam
                .remove_role_from_instance_profile()
                .instance_profile_name(name)
                .role_name(role)
                .send()
                .await;
            if let Err(e) = answer {
                let e = AwsError::api("iam:RemoveRoleFromInstanceProfile", name, e);
                if e.code() != Some("NoSuchEntity") {
                    return Err(e);
                }
            }
        }
        match self
            .iam
            .delete_instance_profile()
            .instance_profile_name(name)
            .send()
            .await
        {
            Ok(_) => {
                tracing::info!(instance_profile = name, "deleted the instance profile");
                Ok(())
            }
            Err(e) => {
                let e = AwsError::api("iam:DeleteInstanceProfile", name, e);
                if e.code() == Some("NoSuchEntity") {
                    Ok(())
                } else {
                    Err(e)
                }
            }
        }
    }

    async fn add_role(&self, class: &str, profile: &str, role: &str) -> Result<(), AwsError> {
        let answer = self
            .iam
            .add_role_to_instance_profile()
            .instance_profile_name(profile)
            .role_name(role)
            .send()
            .await;
        match answer {
            Ok(_) => Ok(()),
            Err(e) => {
                let e = AwsError::api("iam:AddRoleToInstanceProfile", profile, e);
                if e.code() == Some("NoSuchEntity") {
                    Err(AwsError::node_class(
                        class,
                        format!("spec.role: role {role} not found ({e})"),
                    ))
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Adds the tags of `wanted` the profile lacks; values it has are never changed. The tags
    /// it already has with the wanted values go along, as the IAM policy's request-tag
    /// conditions ask. Best effort: a profile that is used but cannot be tagged (the policy
    /// refuses a profile that is not the cluster's) is still used, with a warning, and tagged
    /// on a later resolution if it can be.
    async fn add_missing_tags(
        &self,
        name: &str,
        profile: &Profile,
        wanted: &BTreeMap<String, String>,
    ) -> Result<(), AwsError> {
        if wanted.keys().all(|k| profile.tags.contains_key(k)) {
            return Ok(());
        }
        let request: BTreeMap<String, String> = wanted
            .iter()
            .filter(|(k, v)| profile.tags.get(*k).is_none_or(|have| have == *v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let answer = self
            .iam
            .tag_instance_profile()
            .instance_profile_name(name)
            .set_tags(Some(iam_tags(&request)?))
            .send()
            .await;
        if let Err(e) = answer {
            let e = AwsError::api("iam:TagInstanceProfile", name, e);
            tracing::warn!(instance_profile = name, error = %e, "the instance profile lacks tags and could not be tagged");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, uid: &str) -> EC2NodeClass {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": name, "uid": uid},
            "spec": {"role": "KarpenterNodeRole", "tags": {"team": "ml"}}
        }))
        .expect("class")
    }

    #[test]
    fn names_are_karpenters_shape_and_stable_per_class_object_and_role() {
        let name = |region: &str, uid: &str, role: &str| {
            profile_name("lab", region, &class("gpu", uid), role)
        };
        let a = name("us-east-1", "u1", "NodeRole");
        let (cluster, hash) = a.split_once('_').expect("cluster_hash");
        assert_eq!(cluster, "lab");
        assert!(hash.parse::<u64>().is_ok(), "{a}");
        assert_eq!(a, name("us-east-1", "u1", "NodeRole"));
        assert_ne!(a, name("us-east-1", "u2", "NodeRole"));
        assert_ne!(a, name("us-west-2", "u1", "NodeRole"));
        assert_ne!(
            a,
            name("us-east-1", "u1", "OtherRole"),
            "a new role, a new profile"
        );
        let long = profile_name(
            &"c".repeat(200),
            "us-east-1",
            &class("gpu", "u1"),
            "NodeRole",
        );
        assert_eq!(long.len(), MAX_NAME);
        assert!(long.ends_with(hash), "the hash survives the cut");
        // FNV-1a's published test vector.
        assert_eq!(fnv1a64("a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn profiles_carry_karpenters_ownership_tags_and_the_class_tags() {
        let t = profile_tags("lab", "us-east-1", &class("gpu", "u1"));
        assert_eq!(t["kubernetes.io/cluster/lab"], "owned");
        assert_eq!(t["eks:eks-cluster-name"], "lab");
        assert_eq!(t["karpenter.k8s.aws/ec2nodeclass"], "gpu");
        assert_eq!(t["topology.kubernetes.io/region"], "us-east-1");
        assert_eq!(t["team"], "ml");
        let p = Profile {
            roles: Vec::new(),
            tags: t,
        };
        assert!(owned(&p, "lab", "gpu"));
        assert!(!owned(&p, "other", "gpu"));
        assert!(!owned(&p, "lab", "cpu"));
        assert_eq!(bare_role("arn:aws:iam::1:role/path/R"), "R");
    }
}
