//! The launches the tests ask for: the lab's GPU EC2NodeClass, offers, a request tagged the
//! way the controller tags it, and the launch templates moto holds.

use std::collections::BTreeMap;

use joiner_controller::cloud::{LaunchRequest, Offer, OfferingKey};
use joiner_engine::catalog::CapacityType;
use joiner_model::api::EC2NodeClass;
use joiner_model::wellknown::tags;
use k8s_openapi::api::core::v1::Taint;

use super::{CLUSTER, DISCOVERY, DISCOVERY_KEY, Env};

pub const LAB_USER_DATA: &str = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\nset -ex\nsudo ctr -n=k8s.io image pull docker.io/tensorflow/tensorflow:2.12.0-gpu\n--//--\n";

pub fn node_class() -> EC2NodeClass {
    let yaml = format!(
        r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: gpu
spec:
  amiSelectorTerms:
    - alias: al2023@latest
  role: KarpenterNodeRole
  subnetSelectorTerms:
    - tags:
        {DISCOVERY_KEY}: "{DISCOVERY}"
  securityGroupSelectorTerms:
    - tags:
        {DISCOVERY_KEY}: "*"
  blockDeviceMappings:
    - deviceName: /dev/xvda
      ebs:
        volumeSize: 100Gi
        volumeType: gp3
        encrypted: true
  tags:
    Name: lab-gpu-node
    team: ml
  userData: |
{}"#,
        LAB_USER_DATA
            .lines()
            .map(|l| format!("    {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    serde_saphyr::from_str(&yaml).expect("EC2NodeClass")
}

pub fn offer(t: &str, zone: &str, capacity_type: CapacityType, usd: f64) -> Offer {
    Offer {
        offering: OfferingKey {
            instance_type: t.into(),
            zone: zone.into(),
            capacity_type,
        },
        price: joiner_model::Price::from_usd(usd).expect("price"),
        reservation: None,
    }
}

pub fn request(claim: &str, offers: Vec<Offer>) -> LaunchRequest {
    // What the controller tags every launch with: the ownership tags and the NodeClaim.
    let mut tags = tags::ownership(CLUSTER, "gpu", "gpu");
    tags.insert(tags::NODECLAIM.to_string(), claim.to_string());
    LaunchRequest {
        node_claim: claim.into(),
        node_class: "gpu".into(),
        offers,
        tags,
        client_token: format!("token-{claim}"),
        node_class_spec: Some(node_class()),
        labels: BTreeMap::from([("karpenter.sh/nodepool".to_string(), "gpu".to_string())]),
        taints: vec![Taint {
            key: "nvidia.com/gpu".into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        }],
        startup_taints: Vec::new(),
        efa_interfaces: BTreeMap::new(),
        max_pods: BTreeMap::new(),
    }
}

/// The latest version's data of the launch template the instance was launched from.
pub fn template_of(env: &Env, name: &str) -> aws_sdk_ec2::types::ResponseLaunchTemplateData {
    let ec2 = env.ec2();
    env.rt
        .block_on(
            ec2.describe_launch_template_versions()
                .launch_template_name(name)
                .versions("$Latest")
                .send(),
        )
        .expect("DescribeLaunchTemplateVersions")
        .launch_template_versions()
        .first()
        .and_then(|v| v.launch_template_data())
        .cloned()
        .expect("template data")
}

/// Names of the launch templates that exist.
pub fn template_names(env: &Env) -> Vec<String> {
    let ec2 = env.ec2();
    let out = env
        .rt
        .block_on(ec2.describe_launch_templates().send())
        .expect("DescribeLaunchTemplates");
    let mut names: Vec<String> = out
        .launch_templates()
        .iter()
        .filter_map(|t| t.launch_template_name().map(str::to_string))
        .collect();
    names.sort();
    names
}
