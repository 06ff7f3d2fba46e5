//! Instance profiles left behind (by a role change, or an EC2NodeClass deleted) are deleted
//! once nothing can use them, as Karpenter's instance-profile garbage collection does.
//!
//! A profile the cloud lists for the cluster ([`CloudProvider::list_instance_profiles`]: made
//! by Joiner or Karpenter under the cluster's path) is in use while any of these names it:
//! an EC2NodeClass's `status.instanceProfile` (what new nodes get) or `spec.instanceProfile`;
//! a NodeClaim's `karpenter.k8s.aws/instance-profile-name` (what its instance was launched
//! with); an instance of the cluster's listing, whatever its NodeClaim says.
//!
//! Every read may trail: the instance listing a launch, the NodeClaim cache its annotation.
//! So a profile is deleted only after this process has seen it unused on every pass for
//! [`Config::instance_profile_grace`](crate::Config::instance_profile_grace); a profile first
//! seen unused starts that clock, so after a restart nothing goes before the grace has passed
//! again. A pass that cannot read everything (a NodeClaim or EC2NodeClass that does not
//! decode, a failed listing: the caller checks) decides nothing and keeps the clocks as they
//! were.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;

use crate::clock::elapsed;
use crate::cloud::{CloudProvider, Instance, InstanceState};
use crate::context::Ctx;
use crate::error::ControllerError;
use crate::report::Reconciler;
use crate::store::ClusterStore;
use joiner_model::api::EC2NodeClass;
use joiner_model::api::nodeclaim::NodeClaim;
use joiner_model::wellknown::annotations;

/// Since when each listed profile has been seen unused, by this process.
#[derive(Debug, Default)]
pub struct ProfileUse {
    unused_since: BTreeMap<String, Timestamp>,
}

impl ProfileUse {
    /// Records this pass's reading and says which profiles have been unused for `grace`.
    /// Profiles no longer listed are forgotten.
    pub fn unused_for(
        &mut self,
        listed: &[String],
        in_use: &BTreeSet<String>,
        now: Timestamp,
        grace: std::time::Duration,
    ) -> Vec<String> {
        let listed: BTreeSet<&String> = listed.iter().collect();
        self.unused_since.retain(|p, _| listed.contains(p));
        let mut out = Vec::new();
        for p in listed {
            if in_use.contains(p) {
                self.unused_since.remove(p);
                continue;
            }
            let since = *self.unused_since.entry(p.clone()).or_insert(now);
            if elapsed(now, since) >= grace {
                out.push(p.clone());
            }
        }
        out
    }
}

/// Every profile something names: the classes', the NodeClaims' and the instances'.
pub fn in_use(
    classes: &[EC2NodeClass],
    claims: &[NodeClaim],
    instances: &[Instance],
) -> BTreeSet<String> {
    let of_classes = classes.iter().flat_map(|c| {
        let status = c.status.as_ref().and_then(|s| s.instance_profile.clone());
        c.spec.instance_profile.clone().into_iter().chain(status)
    });
    let of_claims = claims
        .iter()
        .filter_map(|c| c.annotation(annotations::INSTANCE_PROFILE))
        .map(str::to_string);
    let of_instances = instances
        .iter()
        .filter(|i| i.state != InstanceState::Terminated)
        .filter_map(|i| i.instance_profile.clone());
    of_classes.chain(of_claims).chain(of_instances).collect()
}

/// One pass: lists the cluster's profiles and deletes those unused for the grace period.
/// `classes`, `claims` and `instances` are full listings read this pass, each of which decoded
/// whole.
pub fn collect<S: ClusterStore, C: CloudProvider>(
    ctx: &mut Ctx<'_, S, C>,
    state: &mut ProfileUse,
    classes: &[EC2NodeClass],
    claims: &[NodeClaim],
    instances: &[Instance],
) -> Result<(), ControllerError> {
    let listed = ctx.cloud.list_instance_profiles()?;
    let used = in_use(classes, claims, instances);
    let grace = ctx.config.instance_profile_grace;
    for name in state.unused_for(&listed, &used, ctx.now, grace) {
        tracing::info!(instance_profile = %name, "no EC2NodeClass, NodeClaim or instance uses the instance profile; deleting it");
        match ctx.cloud.delete_instance_profile(&name) {
            Ok(()) => ctx.report.instance_profiles_deleted.push(name),
            Err(e) => ctx.error(
                Reconciler::GarbageCollection,
                &format!("deleting instance profile {name}"),
                e,
            ),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).expect("time")
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_profile_goes_only_after_being_unused_for_the_whole_grace() {
        let grace = Duration::from_secs(600);
        let mut state = ProfileUse::default();
        let listed = names(&["old", "new"]);
        let used: BTreeSet<String> = ["new".to_string()].into();
        // First seen unused: the clock starts, nothing goes (a restart starts here too).
        assert!(state.unused_for(&listed, &used, at(0), grace).is_empty());
        assert!(state.unused_for(&listed, &used, at(599), grace).is_empty());
        // Seen in use again (a NodeClaim's annotation caught up): the clock starts over.
        let both: BTreeSet<String> = ["old".to_string(), "new".to_string()].into();
        assert!(state.unused_for(&listed, &both, at(300), grace).is_empty());
        assert!(state.unused_for(&listed, &used, at(400), grace).is_empty());
        assert!(state.unused_for(&listed, &used, at(999), grace).is_empty());
        assert_eq!(state.unused_for(&listed, &used, at(1000), grace), ["old"]);
        // One no longer listed is forgotten.
        assert!(
            state
                .unused_for(&names(&["new"]), &used, at(2000), grace)
                .is_empty()
        );
        assert!(state.unused_since.is_empty());
    }

    #[test]
    fn classes_claims_and_instances_each_keep_a_profile() {
        let class: EC2NodeClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "gpu"},
            "spec": {"role": "R", "instanceProfile": null},
            "status": {"instanceProfile": "current"}
        }))
        .expect("class");
        let given: EC2NodeClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "byo"},
            "spec": {"instanceProfile": "users-own"}
        }))
        .expect("class");
        let claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "a", "annotations": {annotations::INSTANCE_PROFILE: "launched-with"}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"}, "requirements": []}
        }))
        .expect("claim");
        let instance = |profile: &str, state| Instance {
            id: "i-1".into(),
            instance_type: "g6.xlarge".into(),
            zone: "us-east-1a".into(),
            capacity_type: joiner_engine::catalog::CapacityType::OnDemand,
            image_id: String::new(),
            private_dns_name: String::new(),
            state,
            tags: BTreeMap::new(),
            launch_time: at(0),
            instance_profile: Some(profile.into()),
        };
        let used = in_use(
            &[class, given],
            &[claim],
            &[
                instance("running-with", InstanceState::Running),
                instance("gone-with", InstanceState::Terminated),
            ],
        );
        let used: Vec<&str> = used.iter().map(String::as_str).collect();
        assert_eq!(
            used,
            ["current", "launched-with", "running-with", "users-own"]
        );
    }
}
