//! What keeps `AwsCloud` safe in a real account, against moto: it lists only instances with
//! every ownership tag, tags everything a launch creates with them, passes the NodeClaim's
//! client token to CreateFleet, reads each EC2NodeClass's subnets, security groups and images
//! once per TTL, and deletes only its own unused launch templates.
//!
//! What Joiner sent is read from moto's request recorder (`common::Moto::recorded`): moto
//! ignores CreateFleet's `ClientToken` and does not apply a fleet's volume tags, so asserting on
//! moto's state alone could not fail when Joiner stopped sending them.

mod common;

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{RequestLaunchTemplateData, ResourceType, Tag, TagSpecification};
use common::requests::{node_class, offer, request, template_names};
use common::{CLUSTER, Env, Recorded};
use joiner_controller::cloud::{CloudError, CloudProvider, InstanceState};
use joiner_engine::catalog::CapacityType;
use joiner_model::api::EC2NodeClass;
use joiner_model::wellknown::tags;

fn tag_spec(resource: ResourceType, pairs: &[(&str, &str)]) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(resource)
        .set_tags(Some(
            pairs
                .iter()
                .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
                .collect(),
        ))
        .build()
}

/// An instance started behind Joiner's back (a node group's, another cluster's, Karpenter's).
fn run_tagged(env: &Env, pairs: &[(&str, &str)]) -> String {
    let ec2 = env.ec2();
    let out = env
        .rt
        .block_on(
            ec2.run_instances()
                .image_id(&env.seeded.standard_ami)
                .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
                .min_count(1)
                .max_count(1)
                .tag_specifications(tag_spec(ResourceType::Instance, pairs))
                .send(),
        )
        .expect("RunInstances");
    out.instances()[0]
        .instance_id()
        .expect("instance id")
        .to_string()
}

fn owned(cluster: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut t = tags::ownership(cluster, "default", "default");
    for (k, v) in extra {
        t.insert(k.to_string(), v.to_string());
    }
    t.into_iter().collect()
}

fn pairs(t: &[(String, String)]) -> Vec<(&str, &str)> {
    t.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

#[test]
fn list_returns_only_instances_with_every_ownership_tag() {
    let Some(env) = Env::start() else { return };
    let cluster_tag = tags::cluster(CLUSTER);
    // A managed node group's instance: the cluster tag, and its node group.
    let node_group = run_tagged(
        &env,
        &[
            (cluster_tag.as_str(), "owned"),
            (tags::NODEGROUP, "system"),
            ("eks:cluster-name", CLUSTER),
        ],
    );
    // A self-managed node: the cluster tag alone.
    run_tagged(&env, &[(cluster_tag.as_str(), "owned")]);
    // Another cluster's Karpenter instance.
    run_tagged(&env, &pairs(&owned("prod", &[])));
    // Every ownership tag, but a node group's too: EC2's filters pass it, the check after does
    // not.
    run_tagged(
        &env,
        &pairs(&owned(CLUSTER, &[(tags::NODEGROUP, "system")])),
    );
    // Karpenter's instance of this cluster: Joiner adopts it.
    let karpenters = run_tagged(
        &env,
        &pairs(&owned(CLUSTER, &[(tags::NODECLAIM, "default-x7k2p")])),
    );

    let listed: Vec<String> = env
        .cloud
        .list(CLUSTER)
        .expect("list")
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(listed, std::slice::from_ref(&karpenters));

    // The filters went to EC2: the listing is not everything with the cluster tag.
    let describe = env
        .moto
        .recorded()
        .into_iter()
        .rev()
        .find(|r| r.action == "DescribeInstances")
        .expect("DescribeInstances sent");
    let filters: Vec<(&str, &str)> = (1..=6)
        .filter_map(|n| {
            Some((
                describe.params.get(&format!("Filter.{n}.Name"))?.as_str(),
                describe
                    .params
                    .get(&format!("Filter.{n}.Value.1"))
                    .map_or("", String::as_str),
            ))
        })
        .collect();
    for wanted in [
        ("tag:kubernetes.io/cluster/lab", "owned"),
        ("tag:eks:eks-cluster-name", "lab"),
        ("tag-key", "karpenter.sh/nodepool"),
        ("tag-key", "karpenter.k8s.aws/ec2nodeclass"),
    ] {
        assert!(filters.contains(&wanted), "{wanted:?} not in {filters:?}");
    }

    // Asked to terminate the node group's instance anyway, the cloud refuses and it runs on.
    let refused = env.cloud.terminate(&node_group);
    assert!(
        matches!(refused, Err(CloudError::Rejected(_))),
        "{refused:?}"
    );
    let still = env.cloud.get(&node_group).expect("get").expect("found");
    assert!(
        matches!(still.state, InstanceState::Pending | InstanceState::Running),
        "{still:?}"
    );
    assert_eq!(env.moto.count_since(0, "TerminateInstances"), 0);

    // Node repair's reboot likewise: refused for the node group's instance, sent for Joiner's.
    let refused = env.cloud.reboot(&node_group);
    assert!(
        matches!(refused, Err(CloudError::Rejected(_))),
        "{refused:?}"
    );
    assert_eq!(env.moto.count_since(0, "RebootInstances"), 0);
    env.cloud
        .reboot(&karpenters)
        .expect("reboot an owned instance");
    let sent = last(&env, "RebootInstances");
    assert_eq!(
        sent.params.get("InstanceId.1").map(String::as_str),
        Some(karpenters.as_str())
    );
}

/// The tags of each resource type in a request's `<prefix>TagSpecification.N` parameters.
fn requested_tags(r: &Recorded, prefix: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for n in 1.. {
        let Some(resource) = r
            .params
            .get(&format!("{prefix}TagSpecification.{n}.ResourceType"))
        else {
            break;
        };
        let mut tags = BTreeMap::new();
        for t in 1.. {
            let key = format!("{prefix}TagSpecification.{n}.Tag.{t}");
            let Some(k) = r.params.get(&format!("{key}.Key")) else {
                break;
            };
            let v = r.params.get(&format!("{key}.Value")).cloned();
            tags.insert(k.clone(), v.unwrap_or_default());
        }
        out.insert(resource.clone(), tags);
    }
    out
}

fn last(env: &Env, action: &str) -> Recorded {
    env.moto
        .recorded()
        .into_iter()
        .rev()
        .find(|r| r.action == action)
        .unwrap_or_else(|| panic!("no {action} sent"))
}

fn assert_ownership(what: &str, t: Option<&BTreeMap<String, String>>) {
    let t = t.unwrap_or_else(|| panic!("{what} not tagged"));
    assert!(tags::is_owned(t, CLUSTER), "{what}: {t:?}");
}

#[test]
fn a_launch_tags_what_it_creates_and_sends_its_client_token() {
    let Some(env) = Env::start() else { return };
    let r = request(
        "gpu-1",
        vec![offer(
            "g4dn.xlarge",
            "us-east-1a",
            CapacityType::OnDemand,
            0.526,
        )],
    );
    let launched = env.cloud.launch(&r).expect("launch").instance;
    assert!(
        tags::is_owned(&launched.tags, CLUSTER),
        "{:?}",
        launched.tags
    );
    // What EC2 has, read back: the instance carries every ownership tag.
    let got = env.cloud.get(&launched.id).expect("get").expect("found");
    assert!(tags::is_owned(&got.tags, CLUSTER), "{:?}", got.tags);

    // CreateFleet: the NodeClaim's token as ClientToken, so EC2 answers a retry with the first
    // instance; and every ownership tag on the instance, its volumes and the fleet.
    let fleet = last(&env, "CreateFleet");
    assert_eq!(
        fleet.params.get("ClientToken").map(String::as_str),
        Some("token-gpu-1")
    );
    let fleet_tags = requested_tags(&fleet, "");
    for resource in ["instance", "volume", "fleet"] {
        assert_ownership(resource, fleet_tags.get(resource));
    }
    assert_eq!(
        fleet_tags["instance"]
            .get(tags::NODECLAIM)
            .map(String::as_str),
        Some("gpu-1")
    );

    // The launch template: tagged as this cluster's and its EC2NodeClass's, and it tags the
    // network interfaces and spot requests launched from it.
    let created = last(&env, "CreateLaunchTemplate");
    assert_ownership(
        "launch-template",
        requested_tags(&created, "").get("launch-template"),
    );
    let data_tags = requested_tags(&created, "LaunchTemplateData.");
    for resource in ["network-interface", "spot-instances-request"] {
        assert_ownership(resource, data_tags.get(resource));
    }
    let names = template_names(&env);
    let ec2 = env.ec2();
    let described = env
        .rt
        .block_on(
            ec2.describe_launch_templates()
                .launch_template_names(&names[0])
                .send(),
        )
        .expect("DescribeLaunchTemplates");
    let template_tags: BTreeMap<String, String> = described.launch_templates()[0]
        .tags()
        .iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
        .collect();
    assert!(tags::is_owned(&template_tags, CLUSTER), "{template_tags:?}");
}

#[test]
fn a_launch_without_the_ownership_tags_is_refused_before_any_write() {
    let Some(env) = Env::start() else { return };
    let mut r = request(
        "untagged",
        vec![offer(
            "m5.large",
            "us-east-1a",
            CapacityType::OnDemand,
            0.096,
        )],
    );
    r.tags.remove(tags::CLUSTER_NAME);
    let since = env.moto.recorded().len();
    let err = env.cloud.launch(&r).expect_err("refused");
    assert!(matches!(err, CloudError::Rejected(_)), "{err:?}");
    let sent: Vec<String> = env
        .moto
        .recorded()
        .into_iter()
        .skip(since)
        .map(|r| r.action)
        .collect();
    assert!(sent.is_empty(), "{sent:?}");
}

/// `node_class()` with another subnet selector: a changed spec.
fn changed_node_class() -> EC2NodeClass {
    // A new instance tag: the selectors still match the same subnets and groups, but the
    // class's spec, and so its cache key, changed.
    let mut class = node_class();
    class
        .spec
        .tags
        .insert("cost-center".to_string(), "gpu-lab".to_string());
    class
}

#[test]
fn launches_of_one_node_class_read_its_selectors_once_until_it_changes() {
    let Some(env) = Env::start() else { return };
    let since = env.moto.recorded().len();
    let reads = |since: usize| {
        [
            "DescribeSubnets",
            "DescribeSecurityGroups",
            "GetParameter",
            "DescribeInstanceTypes",
        ]
        .map(|a| (a, env.moto.count_since(since, a)))
    };
    for claim in ["a", "b"] {
        env.cloud
            .launch(&request(
                claim,
                vec![offer(
                    "g4dn.xlarge",
                    "us-east-1a",
                    CapacityType::OnDemand,
                    0.526,
                )],
            ))
            .expect("launch");
    }
    assert_eq!(
        reads(since),
        [
            ("DescribeSubnets", 1),
            ("DescribeSecurityGroups", 1),
            // One NVIDIA x86 AMI for g4dn.xlarge, through the alias's SSM parameter.
            ("GetParameter", 1),
            // The catalog knows g4dn.xlarge: no DescribeInstanceTypes at all.
            ("DescribeInstanceTypes", 0),
        ]
    );

    // The same EC2NodeClass changed: its reads miss.
    let mut r = request(
        "c",
        vec![offer(
            "g4dn.xlarge",
            "us-east-1a",
            CapacityType::OnDemand,
            0.526,
        )],
    );
    r.node_class_spec = Some(changed_node_class());
    let since = env.moto.recorded().len();
    env.cloud.launch(&r).expect("launch");
    assert_eq!(
        reads(since),
        [
            ("DescribeSubnets", 1),
            ("DescribeSecurityGroups", 1),
            ("GetParameter", 1),
            ("DescribeInstanceTypes", 0),
        ]
    );

    // Instance types, offerings and spot prices: read once, then from the cache.
    let since = env.moto.recorded().len();
    let first = env.cloud.instance_types().expect("instance types");
    for action in [
        "DescribeInstanceTypes",
        "DescribeInstanceTypeOfferings",
        "DescribeSpotPriceHistory",
    ] {
        assert!(
            env.moto.count_since(since, action) >= 1,
            "{action} not read"
        );
    }
    let after_first = env.moto.recorded().len();
    let second = env.cloud.instance_types().expect("instance types");
    assert_eq!(first, second);
    assert_eq!(
        env.moto.recorded().len(),
        after_first,
        "the second call read EC2 again"
    );
}

/// A launch template made behind Joiner's back.
fn create_template(env: &Env, name: &str, pairs: &[(&str, &str)]) {
    let ec2 = env.ec2();
    let mut call = ec2
        .create_launch_template()
        .launch_template_name(name)
        .launch_template_data(
            RequestLaunchTemplateData::builder()
                .image_id(&env.seeded.standard_ami)
                .build(),
        );
    if !pairs.is_empty() {
        call = call.tag_specifications(tag_spec(ResourceType::LaunchTemplate, pairs));
    }
    env.rt.block_on(call.send()).expect("CreateLaunchTemplate");
}

#[test]
fn only_joiners_unused_launch_templates_of_this_cluster_are_deleted() {
    let Some(env) = Env::start() else { return };
    let launch = |claim: &str| {
        env.cloud
            .launch(&request(
                claim,
                vec![offer(
                    "m5.large",
                    "us-east-1a",
                    CapacityType::OnDemand,
                    0.096,
                )],
            ))
            .expect("launch")
    };
    launch("a");
    let in_use = template_names(&env);
    assert_eq!(in_use.len(), 1);
    // Joiner's, for an EC2NodeClass that is gone.
    let gone = owned(
        CLUSTER,
        &[
            (tags::NODECLASS, "old"),
            ("joiner.dev/ec2nodeclass-hash", "0"),
        ],
    );
    create_template(&env, "joiner/lab/0000000000000000", &pairs(&gone));
    // Another cluster's, untagged, and Karpenter's: never Joiner's to delete.
    let theirs = owned("prod", &[(tags::NODECLASS, "old")]);
    create_template(&env, "joiner/prod/0000000000000000", &pairs(&theirs));
    create_template(&env, "joiner/lab/untagged", &[]);
    create_template(&env, "karpenter.k8s.aws/123", &pairs(&gone));

    let deleted = env
        .cloud
        .delete_unused_launch_templates(&[node_class()])
        .expect("delete");
    assert_eq!(deleted, ["joiner/lab/0000000000000000"]);
    let mut kept = vec![
        "joiner/lab/untagged".to_string(),
        "joiner/prod/0000000000000000".to_string(),
        "karpenter.k8s.aws/123".to_string(),
    ];
    kept.extend(in_use.clone());
    kept.sort();
    assert_eq!(template_names(&env), kept);

    // The EC2NodeClass changed: its old template goes; a launch makes a new one.
    let deleted = env
        .cloud
        .delete_unused_launch_templates(&[changed_node_class()])
        .expect("delete");
    assert_eq!(deleted, in_use);
    assert!(!template_names(&env).contains(&in_use[0]));
    launch("b");
    assert!(template_names(&env).contains(&in_use[0]), "recreated");
}
