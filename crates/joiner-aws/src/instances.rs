//! Instances: EC2's view turned into the controller's, and get, list, terminate.
//!
//! Listing is what garbage collection acts on, so it returns only instances Joiner may touch:
//! EC2 filters on every ownership tag (the cluster tag `owned`, `eks:eks-cluster-name`, a
//! NodePool and an EC2NodeClass), and each answer is checked again with
//! [`tags::is_owned`](joiner_model::wellknown::tags::is_owned), so a filter EC2 (or moto) ignored
//! cannot widen it. The cluster tag alone is not enough: EKS managed node groups and
//! self-managed nodes carry it too.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{Filter, InstanceLifecycleType, InstanceStateName};
use joiner_controller::cloud::{Instance, InstanceState};
use joiner_engine::catalog::CapacityType;
use joiner_model::wellknown::tags;
use k8s_openapi::jiff::Timestamp;

use crate::clients::Clients;
use crate::error::AwsError;

const NOT_FOUND: &str = "InvalidInstanceID.NotFound";

/// The states `list` reports: everything but terminated.
const LIVE_STATES: &[&str] = &["pending", "running", "shutting-down", "stopping", "stopped"];

/// EC2's instance as the controller sees it. Instances without an id are skipped.
pub(crate) fn from_ec2(i: &aws_sdk_ec2::types::Instance) -> Option<Instance> {
    let id = i.instance_id()?.to_string();
    let state = match i.state().and_then(|s| s.name()) {
        Some(InstanceStateName::Pending) => InstanceState::Pending,
        Some(InstanceStateName::Running) => InstanceState::Running,
        Some(InstanceStateName::Terminated) => InstanceState::Terminated,
        // Stopping or stopped instances serve no pods: the controller treats them as going.
        _ => InstanceState::ShuttingDown,
    };
    // An instance in a capacity reservation (or a Capacity Block) reports the `capacity-block`
    // lifecycle or names its reservation; EC2 bills it as reserved, not on-demand.
    let capacity_type = match i.instance_lifecycle() {
        Some(InstanceLifecycleType::Spot) => CapacityType::Spot,
        _ if i.capacity_reservation_id().is_some() => CapacityType::Reserved,
        Some(InstanceLifecycleType::CapacityBlock) => CapacityType::Reserved,
        _ => CapacityType::OnDemand,
    };
    let tags: BTreeMap<String, String> = i
        .tags()
        .iter()
        .filter_map(|t| {
            Some((
                t.key()?.to_string(),
                t.value().unwrap_or_default().to_string(),
            ))
        })
        .collect();
    let launch_time = i
        .launch_time()
        .and_then(|t| Timestamp::new(t.secs(), i32::try_from(t.subsec_nanos()).unwrap_or(0)).ok())
        .unwrap_or(Timestamp::UNIX_EPOCH);
    Some(Instance {
        id,
        instance_type: i
            .instance_type()
            .map(|t| t.as_str().to_string())
            .unwrap_or_default(),
        zone: i
            .placement()
            .and_then(|p| p.availability_zone())
            .unwrap_or_default()
            .to_string(),
        capacity_type,
        image_id: i.image_id().unwrap_or_default().to_string(),
        private_dns_name: i.private_dns_name().unwrap_or_default().to_string(),
        state,
        tags,
        launch_time,
        instance_profile: i
            .iam_instance_profile()
            .and_then(|p| p.arn())
            .and_then(profile_name_of),
    })
}

/// The profile's name in its ARN (`arn:aws:iam::1:instance-profile/path/name` gives `name`).
pub(crate) fn profile_name_of(arn: &str) -> Option<String> {
    arn.rsplit_once('/')
        .map(|(_, name)| name)
        .filter(|name| !name.is_empty())
        .map(str::to_string)
}

impl Clients {
    pub(crate) async fn get_instance(&self, id: &str) -> Result<Option<Instance>, AwsError> {
        let out = self.ec2.describe_instances().instance_ids(id).send().await;
        let out = match out {
            Ok(out) => out,
            Err(e) => {
                let e = AwsError::api("DescribeInstances", id, e);
                return if e.code() == Some(NOT_FOUND) {
                    Ok(None)
                } else {
                    Err(e)
                };
            }
        };
        Ok(out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter_map(from_ec2)
            .find(|i| i.id == id))
    }

    /// Instances matching `filters` that are not terminated, every page.
    pub(crate) async fn live_instances(
        &self,
        what: &str,
        mut filters: Vec<Filter>,
    ) -> Result<Vec<Instance>, AwsError> {
        filters.push(
            Filter::builder()
                .name("instance-state-name")
                .set_values(Some(LIVE_STATES.iter().map(|s| s.to_string()).collect()))
                .build(),
        );
        let mut pages = self
            .ec2
            .describe_instances()
            .set_filters(Some(filters))
            .into_paginator()
            .send();
        let mut found = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| AwsError::api("DescribeInstances", what, e))?;
            found.extend(
                page.reservations()
                    .iter()
                    .flat_map(|r| r.instances())
                    .filter_map(from_ec2)
                    .filter(|i| i.state != InstanceState::Terminated),
            );
        }
        Ok(found)
    }

    /// The live instances of `cluster` that carry every ownership tag, and that `extra` (more
    /// filters, e.g. a launch token) selects.
    pub(crate) async fn owned_instances(
        &self,
        cluster: &str,
        what: &str,
        extra: Vec<Filter>,
    ) -> Result<Vec<Instance>, AwsError> {
        let mut filters = ownership_filters(cluster);
        filters.extend(extra);
        let found = self.live_instances(what, filters).await?;
        Ok(found
            .into_iter()
            .filter(|i| {
                let owned = tags::is_owned(&i.tags, cluster);
                if !owned {
                    tracing::warn!(instance = %i.id, cluster, "EC2 listed an instance without every ownership tag; left alone");
                }
                owned
            })
            .collect())
    }

    pub(crate) async fn list_instances(&self, cluster: &str) -> Result<Vec<Instance>, AwsError> {
        self.owned_instances(cluster, &format!("cluster {cluster}"), Vec::new())
            .await
    }

    /// Terminates `id` unless EC2 shows it without every ownership tag of `cluster` (the
    /// caller's check, made again where the instance is). An instance EC2 does not show yet
    /// (just launched, eventually consistent) is terminated: the IAM policy still refuses it
    /// unless it is tagged as the cluster's.
    pub(crate) async fn terminate_owned(&self, cluster: &str, id: &str) -> Result<(), AwsError> {
        if let Some(found) = self.get_instance(id).await?
            && !tags::is_owned(&found.tags, cluster)
        {
            return Err(AwsError::NotOwned {
                instance: id.to_string(),
                cluster: cluster.to_string(),
                call: "TerminateInstances",
            });
        }
        self.terminate_instance(id).await
    }

    /// Reboots `id` once EC2 shows it with every ownership tag of `cluster`. Unlike a
    /// termination, a reboot is not sent to an instance EC2 does not show: node repair reboots
    /// only nodes that have long been running, and retries (then replaces) on an error.
    pub(crate) async fn reboot_owned(&self, cluster: &str, id: &str) -> Result<(), AwsError> {
        match self.get_instance(id).await? {
            Some(found) if tags::is_owned(&found.tags, cluster) => {}
            Some(_) => {
                return Err(AwsError::NotOwned {
                    instance: id.to_string(),
                    cluster: cluster.to_string(),
                    call: "RebootInstances",
                });
            }
            None => {
                return Err(AwsError::Api {
                    call: "RebootInstances",
                    object: id.to_string(),
                    code: Some(NOT_FOUND.to_string()),
                    message: "DescribeInstances does not show the instance".to_string(),
                });
            }
        }
        self.ec2
            .reboot_instances()
            .instance_ids(id)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| AwsError::api("RebootInstances", id, e))
    }

    async fn terminate_instance(&self, id: &str) -> Result<(), AwsError> {
        match self.ec2.terminate_instances().instance_ids(id).send().await {
            Ok(_) => Ok(()),
            Err(e) => {
                let e = AwsError::api("TerminateInstances", id, e);
                if e.code() == Some(NOT_FOUND) {
                    Ok(())
                } else {
                    Err(e)
                }
            }
        }
    }
}

/// DescribeInstances filters on every ownership tag of `cluster`: the values it must have, and
/// the keys that must be present. (No filter can say "no `eks:nodegroup-name`": that is checked
/// on the answer.)
pub(crate) fn ownership_filters(cluster: &str) -> Vec<Filter> {
    let value = |key: &str, v: &str| {
        Filter::builder()
            .name(format!("tag:{key}"))
            .values(v)
            .build()
    };
    let key = |k: &str| Filter::builder().name("tag-key").values(k).build();
    vec![
        value(&tags::cluster(cluster), tags::OWNED),
        value(tags::CLUSTER_NAME, cluster),
        key(tags::NODEPOOL),
        key(tags::NODECLASS),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_ask_for_every_ownership_tag() {
        let filters: Vec<(String, Vec<String>)> = ownership_filters("lab")
            .iter()
            .map(|f| {
                (
                    f.name().unwrap_or_default().to_string(),
                    f.values().to_vec(),
                )
            })
            .collect();
        let pair = |n: &str, v: &str| (n.to_string(), vec![v.to_string()]);
        assert_eq!(
            filters,
            [
                pair("tag:kubernetes.io/cluster/lab", "owned"),
                pair("tag:eks:eks-cluster-name", "lab"),
                pair("tag-key", "karpenter.sh/nodepool"),
                pair("tag-key", "karpenter.k8s.aws/ec2nodeclass"),
            ]
        );
    }
}
