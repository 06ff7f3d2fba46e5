//! moto's EC2-compatible server on loopback, seeded like a small EKS account: a VPC, three
//! subnets and a security group tagged the way the examples select them, and the EKS AMI SSM
//! parameters pointing at images moto has.
//!
//! moto records every request it serves ([`Moto::recorded`], moto's request recorder), so
//! tests assert on what Joiner sent (a `ClientToken`, how many reads a launch made) and not
//! only on what moto kept.

#![allow(dead_code)]

pub mod requests;

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;

use aws_config::BehaviorVersion;
use aws_credential_types::Credentials;
use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification};
use aws_types::SdkConfig;
use aws_types::region::Region;
use joiner_aws::AwsCloud;
use joiner_model::settings::Settings;
use tokio::runtime::Runtime;

pub const CLUSTER: &str = "lab";
pub const REGION: &str = "us-east-1";
pub const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
/// The subnet and security group selector tag of the examples.
pub const DISCOVERY_KEY: &str = "karpenter.sh/discovery";
pub const DISCOVERY: &str = "nextgen-learninglab";
/// The IAM role the test classes name in `spec.role` (seeded).
pub const NODE_ROLE: &str = "KarpenterNodeRole";
/// SSM refuses writes under `/aws/` (and so does moto): the tests publish the EKS AMI
/// parameters under their own root, in the same layout.
pub const AMI_ROOT: &str = "/joiner-test/eks/optimized-ami";
pub const BOTTLEROCKET_ROOT: &str = "/joiner-test/bottlerocket";
pub const KUBERNETES: &str = "1.36";

/// A moto server, stopped when dropped.
pub struct Moto {
    child: Child,
    pub endpoint: String,
    /// Where moto's recorder writes the requests it serves, one JSON object a line.
    recording: PathBuf,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.recording);
    }
}

/// One request moto served: its action (`DescribeSubnets`; SSM's JSON target without the
/// service, `GetParameter`) and, for EC2's query protocol, its form parameters.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub action: String,
    pub params: BTreeMap<String, String>,
}

/// `application/x-www-form-urlencoded` text as key-value pairs.
fn form(body: &str) -> BTreeMap<String, String> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                    match u8::from_str_radix(hex, 16) {
                        Ok(b) => {
                            out.push(b);
                            i += 2;
                        }
                        Err(_) => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    body.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn on_path(binary: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(binary).is_file()))
}

impl Moto {
    /// A fresh server on a free loopback port, or `None` (with the reason printed) when
    /// `moto_server` is not installed, unless `JOINER_REQUIRE_MOTO=1` makes that a failure.
    pub fn start() -> Option<Moto> {
        if !on_path("moto_server") {
            let required = std::env::var("JOINER_REQUIRE_MOTO").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "JOINER_REQUIRE_MOTO=1 but moto_server is not on PATH (pip install 'moto[server]')"
            );
            eprintln!("skipped: moto_server is not on PATH (pip install 'moto[server]')");
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let recording =
            std::env::temp_dir().join(format!("joiner-moto-{}-{port}.jsonl", std::process::id()));
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .env("MOTO_ENABLE_RECORDING", "true")
            .env("MOTO_RECORDER_FILEPATH", &recording)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server starts");
        let moto = Moto {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            recording,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto_server did not listen within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(moto)
    }

    /// Every request served so far, in order.
    pub fn recorded(&self) -> Vec<Recorded> {
        let Ok(text) = std::fs::read_to_string(&self.recording) else {
            return Vec::new();
        };
        text.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .map(|entry| {
                let raw = entry["body"].as_str().unwrap_or_default();
                let body = if entry["body_encoded"].as_bool() == Some(true) {
                    base64::engine::general_purpose::STANDARD
                        .decode(raw)
                        .map(|b| String::from_utf8_lossy(&b).into_owned())
                        .unwrap_or_default()
                } else {
                    raw.to_string()
                };
                let target = entry["headers"]
                    .as_object()
                    .and_then(|h| {
                        h.iter()
                            .find(|(k, _)| k.eq_ignore_ascii_case("x-amz-target"))
                            .and_then(|(_, v)| v.as_str())
                    })
                    .map(|t| t.rsplit('.').next().unwrap_or(t).to_string());
                let params = form(&body);
                let action = target
                    .or_else(|| params.get("Action").cloned())
                    .unwrap_or_default();
                Recorded { action, params }
            })
            .collect()
    }

    /// How many requests of `action` were served after the first `since`.
    pub fn count_since(&self, since: usize, action: &str) -> usize {
        self.recorded()
            .iter()
            .skip(since)
            .filter(|r| r.action == action)
            .count()
    }

    /// An SDK configuration for this server: dummy credentials, us-east-1.
    pub async fn sdk_config(&self) -> SdkConfig {
        aws_config::defaults(BehaviorVersion::latest())
            .endpoint_url(&self.endpoint)
            .region(Region::new(REGION))
            .credentials_provider(Credentials::new("testing", "testing", None, None, "moto"))
            .load()
            .await
    }
}

/// What the seed created.
#[derive(Debug, Clone)]
pub struct Seeded {
    pub subnets: Vec<(String, String)>,
    pub security_group: String,
    /// The AMIs the EKS parameters point at.
    pub nvidia_ami: String,
    pub standard_ami: String,
    pub arm_ami: String,
}

fn discovery_tags(resource: ResourceType) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(resource)
        .tags(Tag::builder().key(DISCOVERY_KEY).value(DISCOVERY).build())
        .build()
}

/// Seeds the account (see the module documentation).
pub async fn seed(sdk: &SdkConfig) -> Seeded {
    let ec2 = aws_sdk_ec2::Client::new(sdk);
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await
        .expect("CreateVpc");
    let vpc_id = vpc
        .vpc()
        .and_then(|v| v.vpc_id())
        .expect("vpc id")
        .to_string();
    let mut subnets = Vec::new();
    for (i, zone) in ZONES.iter().enumerate() {
        let out = ec2
            .create_subnet()
            .vpc_id(&vpc_id)
            .cidr_block(format!("10.0.{}.0/24", i + 1))
            .availability_zone(*zone)
            .tag_specifications(discovery_tags(ResourceType::Subnet))
            .send()
            .await
            .expect("CreateSubnet");
        let id = out.subnet().and_then(|s| s.subnet_id()).expect("subnet id");
        subnets.push((id.to_string(), zone.to_string()));
    }
    // A subnet that does not carry the tag: never selected.
    ec2.create_subnet()
        .vpc_id(&vpc_id)
        .cidr_block("10.0.9.0/24")
        .availability_zone(ZONES[0])
        .send()
        .await
        .expect("CreateSubnet");
    let sg = ec2
        .create_security_group()
        .group_name("lab-nodes")
        .description("lab nodes")
        .vpc_id(&vpc_id)
        .tag_specifications(discovery_tags(ResourceType::SecurityGroup))
        .send()
        .await
        .expect("CreateSecurityGroup");
    let security_group = sg.group_id().expect("group id").to_string();
    // The node role the classes name: instance profiles are made for it.
    aws_sdk_iam::Client::new(sdk)
        .create_role()
        .role_name(NODE_ROLE)
        .assume_role_policy_document(
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#,
        )
        .send()
        .await
        .expect("CreateRole");

    let images = |arch: &'static str| {
        ec2.describe_images()
            .filters(Filter::builder().name("architecture").values(arch).build())
            .send()
    };
    let x86 = images("x86_64").await.expect("DescribeImages");
    let mut x86: Vec<String> = x86
        .images()
        .iter()
        .filter_map(|i| i.image_id().map(str::to_string))
        .collect();
    x86.sort();
    let arm = images("arm64").await.expect("DescribeImages");
    let arm_ami = arm
        .images()
        .iter()
        .filter_map(|i| i.image_id().map(str::to_string))
        .min()
        .unwrap_or_else(|| x86[2].clone());
    let (nvidia_ami, standard_ami) = (x86[0].clone(), x86[1].clone());

    let ssm = aws_sdk_ssm::Client::new(sdk);
    let put = |name: String, value: String| {
        let ssm = ssm.clone();
        async move {
            ssm.put_parameter()
                .name(&name)
                .value(value)
                .r#type(aws_sdk_ssm::types::ParameterType::String)
                .send()
                .await
                .unwrap_or_else(|e| panic!("PutParameter {name}: {e:?}"));
        }
    };
    let al2023 = format!("{AMI_ROOT}/{KUBERNETES}/amazon-linux-2023");
    put(
        format!("{al2023}/x86_64/nvidia/recommended/image_id"),
        nvidia_ami.clone(),
    )
    .await;
    put(
        format!("{al2023}/x86_64/standard/recommended/image_id"),
        standard_ami.clone(),
    )
    .await;
    put(
        format!("{al2023}/arm64/standard/recommended/image_id"),
        arm_ami.clone(),
    )
    .await;
    let al2 = format!("{AMI_ROOT}/{KUBERNETES}");
    put(
        format!("{al2}/amazon-linux-2-gpu/recommended/image_id"),
        nvidia_ami.clone(),
    )
    .await;
    put(
        format!("{al2}/amazon-linux-2/recommended/image_id"),
        standard_ami.clone(),
    )
    .await;
    put(
        format!("{al2}/amazon-linux-2-arm64/recommended/image_id"),
        arm_ami.clone(),
    )
    .await;
    let bottlerocket = format!("{BOTTLEROCKET_ROOT}/aws-k8s-{KUBERNETES}");
    put(
        format!("{bottlerocket}-nvidia/x86_64/latest/image_id"),
        nvidia_ami.clone(),
    )
    .await;
    put(
        format!("{bottlerocket}/x86_64/latest/image_id"),
        standard_ami.clone(),
    )
    .await;
    Seeded {
        subnets,
        security_group,
        nvidia_ami,
        standard_ami,
        arm_ami,
    }
}

pub fn settings() -> Settings {
    let mut s = Settings {
        cluster_name: Some(CLUSTER.to_string()),
        cluster_endpoint: Some("https://lab.example.eks.amazonaws.com".to_string()),
        ..Settings::default()
    };
    s.cluster.kubernetes_version = KUBERNETES.to_string();
    s
}

/// A moto server, a runtime, the seeded account and an `AwsCloud` over it. The cloud's
/// methods are called from the test thread, which is not one of the runtime's.
pub struct Env {
    pub cloud: AwsCloud,
    pub seeded: Seeded,
    pub sdk: SdkConfig,
    pub rt: Runtime,
    pub moto: Moto,
}

impl Env {
    pub fn start() -> Option<Env> {
        let moto = Moto::start()?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (sdk, seeded, cloud) = rt.block_on(async {
            let sdk = moto.sdk_config().await;
            let seeded = seed(&sdk).await;
            let cloud = AwsCloud::from_sdk_config(&sdk, &settings(), CLUSTER, rt.handle().clone())
                .await
                .expect("AwsCloud")
                .with_ami_parameter_root(AMI_ROOT)
                .with_bottlerocket_parameter_root(BOTTLEROCKET_ROOT)
                .with_cluster_ca_bundle("Q0EgQlVORExF");
            (sdk, seeded, cloud)
        });
        Some(Env {
            cloud,
            seeded,
            sdk,
            rt,
            moto,
        })
    }

    pub fn ec2(&self) -> aws_sdk_ec2::Client {
        aws_sdk_ec2::Client::new(&self.sdk)
    }

    pub fn iam(&self) -> aws_sdk_iam::Client {
        aws_sdk_iam::Client::new(&self.sdk)
    }
}
