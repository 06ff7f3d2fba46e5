//! Drift: a node that no longer matches what its NodePool and EC2NodeClass now ask for.
//!
//! When a NodeClaim is created it is stamped with a hash of the NodePool template and one of the
//! EC2NodeClass, each with a hash version. A NodeClaim has drifted when
//!
//! - its NodePool's hash is not the stamped one (labels, annotations, taints, startup taints,
//!   node class reference, `expireAfter`, `terminationGracePeriod`: the fields Karpenter hashes;
//!   requirements are judged apart, below);
//! - its EC2NodeClass's hash is not the stamped one (everything in the spec but the subnet,
//!   security group, capacity reservation and AMI selector terms, which select cloud resources
//!   rather than define the node; the AMI family is hashed as resolved from an alias, so spelling
//!   out the family an alias implies is no change);
//! - its labels (instance type, zone, capacity type, and every other label it was launched with)
//!   no longer satisfy the NodePool's requirements;
//! - or its image is not the one the EC2NodeClass resolves to now. Image resolution is the AWS
//!   edge's business (SSM parameters, DescribeImages): [`drift_of`] takes the resolved image ids
//!   when the caller knows them and skips this check otherwise.
//!
//! A stamp of another hash version (written by Karpenter, or by an older Joiner) says nothing
//! either way: it is never read as drift. Joiner's hashes are its own (FNV-1a over a canonical
//! JSON form), so they carry their own version and a Karpenter sharing the cluster re-stamps
//! rather than drifts them, as it does on any version change.

use joiner_engine::requirements::Requirement;
use joiner_model::api::NodePool;
use joiner_model::api::ec2nodeclass::EC2NodeClass;
use joiner_model::api::nodeclaim::NodeClaim;
use joiner_model::wellknown::{DriftReason, annotations, labels};

use crate::nodeclaim::stamp::{node_class_hash, node_pool_hash, stamp_differs};

/// Why a NodeClaim has drifted: the reason of its `Drifted` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drift {
    NodePoolDrifted,
    NodeClassDrifted,
    RequirementsDrifted(String),
    AmiDrifted(String),
    /// The NodeClaim is not in the placement group its class finds now (the group was made
    /// again under the same name, or the class no longer selects one).
    PlacementGroupDrifted(String),
}

impl Drift {
    /// What kind of drift it is.
    pub fn kind(&self) -> DriftReason {
        match self {
            Drift::NodePoolDrifted => DriftReason::NodePool,
            Drift::NodeClassDrifted => DriftReason::NodeClass,
            Drift::RequirementsDrifted(_) => DriftReason::Requirements,
            Drift::AmiDrifted(_) => DriftReason::Ami,
            Drift::PlacementGroupDrifted(_) => DriftReason::PlacementGroup,
        }
    }

    /// The condition's reason.
    pub fn reason(&self) -> &'static str {
        self.kind().as_str()
    }

    /// The condition's message.
    pub fn message(&self) -> String {
        match self {
            Drift::NodePoolDrifted => "the NodePool's template changed".into(),
            Drift::NodeClassDrifted => "the EC2NodeClass changed".into(),
            Drift::RequirementsDrifted(m)
            | Drift::AmiDrifted(m)
            | Drift::PlacementGroupDrifted(m) => m.clone(),
        }
    }
}

/// The first requirement of the NodePool the NodeClaim's labels no longer satisfy. Keys the
/// NodeClaim has no label for are not judged (Karpenter allows undefined well-known labels, and a
/// NodeClaim carries a label for every key it was launched under).
fn requirements_drift(claim: &NodeClaim, pool: &NodePool) -> Option<Drift> {
    let labels = claim.labels();
    for r in &pool.spec.template.spec.requirements {
        let Ok(req) = Requirement::new(r.operator.as_str(), &r.values) else {
            continue;
        };
        let value = labels.get(&r.key).map(String::as_str);
        let judged = value.is_some() || r.operator.as_str() == "DoesNotExist";
        if judged && !req.matches(value) {
            return Some(Drift::RequirementsDrifted(format!(
                "label {}={} no longer satisfies the NodePool's requirement {} {} {:?}",
                r.key,
                value.unwrap_or_default(),
                r.key,
                r.operator.as_str(),
                r.values
            )));
        }
    }
    None
}

/// Why the NodeClaim has drifted from its NodePool and EC2NodeClass, if it has.
/// `resolved_images`: the image ids the EC2NodeClass resolves to now, when the caller knows
/// them (the AWS edge); `None` skips AMI drift.
pub fn drift_of(
    claim: &NodeClaim,
    pool: &NodePool,
    class: Option<&EC2NodeClass>,
    resolved_images: Option<&[String]>,
) -> Option<Drift> {
    if stamp_differs(
        claim,
        annotations::NODEPOOL_HASH,
        annotations::NODEPOOL_HASH_VERSION,
        &node_pool_hash(pool),
    ) {
        return Some(Drift::NodePoolDrifted);
    }
    if let Some(class) = class
        && stamp_differs(
            claim,
            annotations::NODECLASS_HASH,
            annotations::NODECLASS_HASH_VERSION,
            &node_class_hash(class),
        )
    {
        return Some(Drift::NodeClassDrifted);
    }
    if let Some(d) = requirements_drift(claim, pool) {
        return Some(d);
    }
    if let (Some(images), Some(image)) = (resolved_images, claim.status.image_id.as_deref())
        && !images.is_empty()
        && !images.iter().any(|i| i == image)
    {
        return Some(Drift::AmiDrifted(format!(
            "image {image} is not among the resolved images {images:?}"
        )));
    }
    None
}

/// Whether the NodeClaim's `karpenter.k8s.aws/placement-group-id` label differs from the group
/// its class finds now (`expected`: `Some(None)` when the class selects none, `None` when the
/// group is not known, which is never drift), as Karpenter judges it.
pub fn placement_drift(claim: &NodeClaim, expected: Option<Option<&str>>) -> Option<Drift> {
    let expected = expected?;
    let labelled = claim.label(labels::PLACEMENT_GROUP_ID);
    (labelled != expected).then(|| {
        Drift::PlacementGroupDrifted(format!(
            "placement group {} is not the class's placement group {}",
            labelled.unwrap_or("(none)"),
            expected.unwrap_or("(none)")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodeclaim::stamp::*;
    use joiner_model::api::ec2nodeclass::AmiFamily;
    use joiner_model::api::nodeclaim::NodeClaimSpec;
    use joiner_model::api::nodepool::{NodeSelectorRequirementWithMinValues, Operator};
    use k8s_openapi::api::core::v1::Taint;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    fn pool() -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "gpu"},
            "spec": {"template": {
                "metadata": {"labels": {"team": "ml"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g4dn.xlarge", "g5.xlarge"]}
                    ],
                    "taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]
                }
            }}
        }))
        .expect("pool")
    }

    fn class() -> EC2NodeClass {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "role": "NodeRole",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"k": "v"}}],
                "userData": "echo hi"
            }
        }))
        .expect("class")
    }

    fn claim(pool: &NodePool, class: &EC2NodeClass) -> NodeClaim {
        let mut c = NodeClaim::new(
            ObjectMeta {
                name: Some("gpu-1".into()),
                labels: Some(
                    [
                        ("karpenter.sh/capacity-type", "spot"),
                        ("node.kubernetes.io/instance-type", "g4dn.xlarge"),
                        ("topology.kubernetes.io/zone", "us-east-1a"),
                    ]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ),
                ..ObjectMeta::default()
            },
            NodeClaimSpec {
                node_class_ref: pool.spec.template.spec.node_class_ref.clone(),
                requirements: Vec::new(),
                resources: Default::default(),
                taints: Vec::new(),
                startup_taints: Vec::new(),
                expire_after: None,
                termination_grace_period: None,
            },
        );
        stamp(&mut c, pool, Some(class));
        c
    }

    #[test]
    fn a_fresh_node_claim_has_not_drifted() {
        let (p, k) = (pool(), class());
        assert_eq!(drift_of(&claim(&p, &k), &p, Some(&k), None), None);
    }

    #[test]
    fn hashes_ignore_order_and_what_selects_cloud_resources() {
        let (p, k) = (pool(), class());
        let c = claim(&p, &k);
        let mut reordered = p.clone();
        reordered.spec.template.spec.taints.reverse();
        // Requirements are judged by labels, not by the hash; limits and budgets are not the
        // node's definition.
        reordered
            .spec
            .template
            .spec
            .requirements
            .push(NodeSelectorRequirementWithMinValues {
                key: "kubernetes.io/arch".into(),
                operator: Operator::In,
                values: vec!["amd64".into()],
                min_values: None,
            });
        reordered.spec.disruption.consolidate_after = "10m".into();
        assert_eq!(drift_of(&c, &reordered, Some(&k), None), None);
        let mut other_subnets = k.clone();
        other_subnets.spec.subnet_selector_terms.clear();
        // The family an alias implies, spelled out, is no change either.
        other_subnets.spec.ami_family = Some(AmiFamily::AL2023);
        assert_eq!(drift_of(&c, &p, Some(&other_subnets), None), None);
    }

    #[test]
    fn template_and_node_class_changes_drift() {
        let (p, k) = (pool(), class());
        let c = claim(&p, &k);
        let mut tainted = p.clone();
        tainted.spec.template.spec.taints.push(Taint {
            key: "gpu".into(),
            effect: "NoSchedule".into(),
            value: None,
            time_added: None,
        });
        assert_eq!(
            drift_of(&c, &tainted, Some(&k), None),
            Some(Drift::NodePoolDrifted)
        );
        let mut expiry = p.clone();
        expiry.spec.template.spec.expire_after = "24h".into();
        assert_eq!(
            drift_of(&c, &expiry, Some(&k), None),
            Some(Drift::NodePoolDrifted)
        );
        let mut user_data = k.clone();
        user_data.spec.user_data = Some("echo bye".into());
        assert_eq!(
            drift_of(&c, &p, Some(&user_data), None),
            Some(Drift::NodeClassDrifted)
        );
    }

    #[test]
    fn another_hash_version_is_not_drift_and_is_restamped() {
        let (p, k) = (pool(), class());
        let mut c = claim(&p, &k);
        let a = c.metadata.annotations.as_mut().expect("annotations");
        a.insert(annotations::NODEPOOL_HASH_VERSION.into(), "v3".into());
        a.insert(annotations::NODEPOOL_HASH.into(), "12345".into());
        assert_eq!(drift_of(&c, &p, Some(&k), None), None);
        assert!(restamp(&mut c, &p, Some(&k)));
        assert_eq!(
            c.annotation(annotations::NODEPOOL_HASH),
            Some(node_pool_hash(&p).as_str())
        );
        // A current stamp is kept even when it no longer matches: that is the drift.
        let mut changed = p.clone();
        changed
            .spec
            .template
            .metadata
            .labels
            .insert("team".into(), "infra".into());
        assert!(!restamp(&mut c, &changed, Some(&k)));
        assert_eq!(
            drift_of(&c, &changed, Some(&k), None),
            Some(Drift::NodePoolDrifted)
        );
    }

    #[test]
    fn labels_outside_the_requirements_drift() {
        let (p, k) = (pool(), class());
        let c = claim(&p, &k);
        let mut on_demand_only = p.clone();
        on_demand_only.spec.template.spec.requirements[0].values = vec!["on-demand".into()];
        let d = drift_of(&c, &on_demand_only, Some(&k), None).expect("drifted");
        assert_eq!(d.reason(), "RequirementsDrifted");
        assert!(d.message().contains("karpenter.sh/capacity-type=spot"));
    }

    #[test]
    fn an_image_no_longer_resolved_drifts() {
        let (p, k) = (pool(), class());
        let mut c = claim(&p, &k);
        c.status.image_id = Some("ami-old".into());
        let current = vec!["ami-old".to_string(), "ami-arm".to_string()];
        assert_eq!(drift_of(&c, &p, Some(&k), Some(&current)), None);
        let newer = vec!["ami-new".to_string()];
        assert_eq!(
            drift_of(&c, &p, Some(&k), Some(&newer)).map(|d| d.reason()),
            Some("AMIDrifted")
        );
    }
}
