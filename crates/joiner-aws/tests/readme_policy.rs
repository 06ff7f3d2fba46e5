//! The controller IAM policy in the repository README, as the install steps write it: valid
//! JSON once the shell has substituted its variables, granting every call the AWS edge makes,
//! and scoping every write to the cluster's ownership tags.

use serde_json::Value;

const CLUSTER: &str = "lab";

/// The policy document between `cat > joiner-controller-policy.json <<EOF` and `EOF`, with the
/// shell's variables filled in.
fn policy() -> Value {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let start = readme
        .find("cat > joiner-controller-policy.json <<EOF\n")
        .expect("the policy heredoc");
    let body = &readme[start..];
    let body = &body[body.find('\n').expect("newline") + 1..];
    let end = body.find("\nEOF\n").expect("the heredoc's end");
    let text = body[..end]
        .replace("${CLUSTER_NAME}", CLUSTER)
        .replace("${AWS_REGION}", "us-west-2")
        .replace("${AWS_ACCOUNT_ID}", "111122223333");
    assert!(!text.contains("${"), "an unknown variable: {text}");
    serde_json::from_str(&text).expect("the policy is JSON")
}

fn list(v: &Value) -> Vec<&str> {
    match v {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn statements_with(policy: &Value, action: &str) -> Vec<Value> {
    policy["Statement"]
        .as_array()
        .expect("statements")
        .iter()
        .filter(|s| s["Effect"] == "Allow" && list(&s["Action"]).contains(&action))
        .cloned()
        .collect()
}

/// Whether a statement's condition requires `key` to equal `value` (`StringEquals`, or
/// `StringLike` with `*` for "present").
fn requires(s: &Value, operator: &str, key: &str, value: &str) -> bool {
    list(&s["Condition"][operator][key]).contains(&value)
}

#[test]
fn the_policy_grants_every_call_the_aws_edge_makes() {
    let policy = policy();
    for action in [
        "ec2:CreateFleet",
        "ec2:RunInstances",
        "ec2:CreateLaunchTemplate",
        "ec2:CreateTags",
        "ec2:TerminateInstances",
        "ec2:RebootInstances",
        "ec2:DeleteLaunchTemplate",
        "ec2:DescribeInstances",
        "ec2:DescribeLaunchTemplates",
        "ec2:DescribeSubnets",
        "ec2:DescribeSecurityGroups",
        "ec2:DescribeImages",
        "ec2:DescribeInstanceTypes",
        "ec2:DescribeInstanceTypeOfferings",
        "ec2:DescribeSpotPriceHistory",
        "ec2:DescribeCapacityReservations",
        "ec2:DescribePlacementGroups",
        "pricing:GetProducts",
        "ssm:GetParameter",
        "eks:DescribeCluster",
        "iam:PassRole",
        "iam:GetInstanceProfile",
        "iam:CreateInstanceProfile",
        "iam:TagInstanceProfile",
        "iam:AddRoleToInstanceProfile",
        "iam:RemoveRoleFromInstanceProfile",
        "iam:DeleteInstanceProfile",
        "iam:ListInstanceProfiles",
        "sqs:GetQueueUrl",
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
    ] {
        assert!(
            !statements_with(&policy, action).is_empty(),
            "{action} is not granted"
        );
    }
}

/// The resources every launch path needs: reservations and Capacity Blocks (a launch into one
/// names it), and the image parameters of every AMI family Joiner resolves.
#[test]
fn launches_reach_reservations_and_every_image_parameter_root() {
    let policy = policy();
    for action in ["ec2:RunInstances", "ec2:CreateFleet"] {
        for resource in ["capacity-reservation/*", "placement-group/*"] {
            let arn = format!("arn:aws:ec2:us-west-2:*:{resource}");
            assert!(
                statements_with(&policy, action)
                    .iter()
                    .any(|s| list(&s["Resource"]).contains(&arn.as_str())),
                "{action} cannot use {resource}"
            );
        }
    }
    let parameters: Vec<String> = statements_with(&policy, "ssm:GetParameter")
        .iter()
        .flat_map(|s| {
            list(&s["Resource"])
                .into_iter()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    for root in [
        joiner_launch::image::EKS_PARAMETER_ROOT,
        joiner_launch::image::BOTTLEROCKET_PARAMETER_ROOT,
    ] {
        let wanted = format!("arn:aws:ssm:us-west-2::parameter{root}/*");
        assert!(
            parameters.contains(&wanted),
            "{wanted} not in {parameters:?}"
        );
    }
}

#[test]
fn every_write_is_scoped_to_the_clusters_ownership_tags() {
    let policy = policy();
    let cluster_tag = format!("kubernetes.io/cluster/{CLUSTER}");
    // Deletions and reboots: only what already carries the cluster tag and a NodePool.
    for action in [
        "ec2:TerminateInstances",
        "ec2:RebootInstances",
        "ec2:DeleteLaunchTemplate",
    ] {
        for s in statements_with(&policy, action) {
            assert!(
                owned_resource(&s)
                    && requires(
                        &s,
                        "StringLike",
                        "aws:ResourceTag/karpenter.sh/nodepool",
                        "*"
                    ),
                "{action} is not conditioned on the resource's tags: {s}"
            );
        }
    }
    // Tags only while creating, and only the cluster's.
    for s in statements_with(&policy, "ec2:CreateTags") {
        let actions = list(&s["Condition"]["StringEquals"]["ec2:CreateAction"]);
        assert!(
            !actions.is_empty()
                && actions
                    .iter()
                    .all(|a| ["RunInstances", "CreateFleet", "CreateLaunchTemplate"].contains(a)),
            "CreateTags outside creation: {s}"
        );
        assert!(
            requires(
                &s,
                "StringEquals",
                &format!("aws:RequestTag/{cluster_tag}"),
                "owned"
            ) && requires(
                &s,
                "StringEquals",
                "aws:RequestTag/eks:eks-cluster-name",
                CLUSTER
            ) && requires(
                &s,
                "StringLike",
                "aws:RequestTag/karpenter.sh/nodepool",
                "*"
            ),
            "CreateTags without the ownership request tags: {s}"
        );
    }
    // Creation: whatever a launch creates must be requested with the ownership tags; the
    // only unconditioned launch resources are the ones it uses and does not create.
    for action in [
        "ec2:RunInstances",
        "ec2:CreateFleet",
        "ec2:CreateLaunchTemplate",
    ] {
        for s in statements_with(&policy, action) {
            let resources = list(&s["Resource"]);
            let creates = resources.iter().any(|r| {
                [
                    ":instance/",
                    ":volume/",
                    ":network-interface/",
                    ":fleet/",
                    ":spot-instances-request/",
                ]
                .iter()
                .any(|kind| r.contains(kind))
                    || *r == "*"
            });
            let conditioned = requires(
                &s,
                "StringEquals",
                &format!("aws:RequestTag/{cluster_tag}"),
                "owned",
            ) && requires(
                &s,
                "StringEquals",
                "aws:RequestTag/eks:eks-cluster-name",
                CLUSTER,
            ) && requires(
                &s,
                "StringLike",
                "aws:RequestTag/karpenter.sh/nodepool",
                "*",
            );
            let own_templates = resources.iter().all(|r| r.contains(":launch-template/"))
                && requires(
                    &s,
                    "StringEquals",
                    &format!("aws:ResourceTag/{cluster_tag}"),
                    "owned",
                );
            assert!(
                (!creates
                    && (own_templates
                        || !resources.iter().any(|r| r.contains(":launch-template/"))))
                    || conditioned,
                "{action} may create or use untagged resources: {s}"
            );
        }
    }
}

/// Whether the statement requires the cluster tag `owned` on `side` (`ResourceTag`: what the
/// call acts on already carries it; `RequestTag`: the call sets it).
fn cluster_tag_on(s: &Value, side: &str) -> bool {
    let key = format!("aws:{side}/kubernetes.io/cluster/{CLUSTER}");
    requires(s, "StringEquals", &key, "owned")
}

/// Whether the statement requires the resource to carry the cluster tag `owned`.
fn owned_resource(s: &Value) -> bool {
    cluster_tag_on(s, "ResourceTag")
}

/// Whether the statement requires the request to carry the cluster tag `owned` and
/// `eks:eks-cluster-name` of the cluster.
fn requests_cluster_ownership(s: &Value) -> bool {
    cluster_tag_on(s, "RequestTag")
        && requires(
            s,
            "StringEquals",
            "aws:RequestTag/eks:eks-cluster-name",
            CLUSTER,
        )
}

#[test]
fn instance_profile_writes_are_scoped_to_the_clusters_ownership_tags() {
    let policy = policy();
    // Created only with the tags Joiner (and Karpenter) put on their profiles.
    let creates = statements_with(&policy, "iam:CreateInstanceProfile");
    assert!(!creates.is_empty());
    for s in creates {
        assert!(
            requests_cluster_ownership(&s)
                && requires(
                    &s,
                    "StringEquals",
                    "aws:RequestTag/topology.kubernetes.io/region",
                    "us-west-2"
                )
                && requires(
                    &s,
                    "StringLike",
                    "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass",
                    "*"
                ),
            "CreateInstanceProfile without the ownership request tags: {s}"
        );
    }
    // Changed only when already the cluster's, for an EC2NodeClass.
    for action in [
        "iam:TagInstanceProfile",
        "iam:AddRoleToInstanceProfile",
        "iam:RemoveRoleFromInstanceProfile",
        "iam:DeleteInstanceProfile",
    ] {
        for s in statements_with(&policy, action) {
            assert!(
                owned_resource(&s)
                    && requires(
                        &s,
                        "StringLike",
                        "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass",
                        "*"
                    ),
                "{action} is not conditioned on the profile's tags: {s}"
            );
        }
    }
}
