//! `AwsCloud` and `SqsInterruptionQueue` against moto's EC2, SSM and SQS on loopback.
//!
//! Each test starts its own moto server (see `common`); without `moto_server` on PATH the tests
//! say so and pass, unless `JOINER_REQUIRE_MOTO=1`.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use common::requests::{offer, request, template_names, template_of};
use common::{CLUSTER, Env, NODE_ROLE};
use joiner_aws::SqsInterruptionQueue;
use joiner_controller::clock::ManualClock;
use joiner_controller::cloud::{CloudProvider, InstanceState, Resolved};
use joiner_controller::interruption::InterruptionQueue;
use joiner_controller::store::{ClusterStore, InMemoryCluster};
use joiner_controller::{Config, Controller};
use joiner_engine::catalog::CapacityType;
use joiner_launch::mime::{NODECONFIG_CONTENT_TYPE, user_parts};
use joiner_model::Manifests;
use joiner_model::api::nodeclaim::NodeClaim;
use joiner_model::wellknown::tags;

/// The instance profile as moto's IAM has it.
fn iam_profile(env: &Env, name: &str) -> Option<aws_sdk_iam::types::InstanceProfile> {
    let out = env
        .rt
        .block_on(
            env.iam()
                .get_instance_profile()
                .instance_profile_name(name)
                .send(),
        )
        .ok()?;
    out.instance_profile().cloned()
}

/// The role the instance profile holds.
fn profile_role(env: &Env, name: &str) -> Option<String> {
    iam_profile(env, name)?
        .roles()
        .first()
        .map(|r| r.role_name().to_string())
}

fn decoded_user_data(data: &aws_sdk_ec2::types::ResponseLaunchTemplateData) -> String {
    let raw = data.user_data().expect("userData");
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(raw)
            .expect("base64 userData"),
    )
    .expect("UTF-8 userData")
}

#[test]
fn a_gpu_launch_uses_the_nvidia_ami_a_merged_user_data_and_overrides_in_price_order() {
    let Some(env) = Env::start() else { return };
    let subnet_of = |zone: &str| {
        env.seeded
            .subnets
            .iter()
            .find(|(_, z)| z == zone)
            .map(|(id, _)| id.clone())
            .expect("seeded subnet")
    };
    let offers = vec![
        offer("g4dn.xlarge", "us-east-1b", CapacityType::OnDemand, 0.526),
        offer("g4dn.xlarge", "us-east-1a", CapacityType::OnDemand, 0.526),
        offer("g5.xlarge", "us-east-1a", CapacityType::OnDemand, 1.006),
    ];
    let launched = env.cloud.launch(&request("gpu-1", offers)).expect("launch");
    let i = &launched.instance;
    assert!(launched.insufficient.is_empty());
    // It created its launch template, and says how large the user data is.
    assert!(
        launched.user_data_bytes.is_some_and(|n| n > 0),
        "{:?}",
        launched.user_data_bytes
    );
    assert_eq!(i.instance_type, "g4dn.xlarge");
    assert_eq!(i.zone, "us-east-1b", "the first override wins");
    assert_eq!(i.capacity_type, CapacityType::OnDemand);
    assert_eq!(i.image_id, env.seeded.nvidia_ami);
    assert_eq!(
        i.tags.get(&tags::cluster(CLUSTER)).map(String::as_str),
        Some("owned")
    );
    assert_eq!(
        i.tags.get(tags::NODECLAIM).map(String::as_str),
        Some("gpu-1")
    );
    assert_eq!(i.tags.get("Name").map(String::as_str), Some("lab-gpu-node"));
    assert_eq!(i.tags.get("team").map(String::as_str), Some("ml"));

    // The fleet request: one template, the three offers as overrides with the price order as
    // priority, each in the selected subnet of its zone.
    let ec2 = env.ec2();
    let fleets = env
        .rt
        .block_on(ec2.describe_fleets().send())
        .expect("DescribeFleets");
    let fleet = fleets.fleets().first().expect("one fleet");
    assert_eq!(fleet.r#type().map(|t| t.as_str()), Some("instant"));
    let configs = fleet.launch_template_configs();
    assert_eq!(configs.len(), 1, "{configs:?}");
    let overrides: Vec<(String, String, f64)> = configs[0]
        .overrides()
        .iter()
        .map(|o| {
            (
                o.instance_type()
                    .map(|t| t.as_str().to_string())
                    .unwrap_or_default(),
                o.subnet_id().unwrap_or_default().to_string(),
                o.priority().unwrap_or(-1.0),
            )
        })
        .collect();
    assert_eq!(
        overrides,
        [
            ("g4dn.xlarge".to_string(), subnet_of("us-east-1b"), 0.0),
            ("g4dn.xlarge".to_string(), subnet_of("us-east-1a"), 1.0),
            ("g5.xlarge".to_string(), subnet_of("us-east-1a"), 2.0),
        ]
    );

    // The launch template: NVIDIA AMI, the 100 GiB root volume, the security group, IMDSv2,
    // userData still MIME multipart with the user's script first and Joiner's NodeConfig last.
    let names = template_names(&env);
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with("joiner/lab/"), "{names:?}");
    let data = template_of(&env, &names[0]);
    assert_eq!(data.image_id(), Some(env.seeded.nvidia_ami.as_str()));
    let root = data
        .block_device_mappings()
        .iter()
        .find(|b| b.device_name() == Some("/dev/xvda"))
        .and_then(|b| b.ebs())
        .expect("root volume");
    assert_eq!(root.volume_size(), Some(100));
    assert_eq!(root.volume_type().map(|v| v.as_str()), Some("gp3"));
    assert_eq!(
        data.security_group_ids(),
        std::slice::from_ref(&env.seeded.security_group)
    );
    // A class launched before it was resolved gets its profile made at launch.
    let profile = data
        .iam_instance_profile()
        .and_then(|p| p.name())
        .expect("an instance profile");
    assert_eq!(profile_role(&env, profile).as_deref(), Some(NODE_ROLE));
    let user_data = decoded_user_data(&data);
    let parts = user_parts(Some(&user_data)).expect("MIME multipart");
    assert_eq!(parts.len(), 2, "{user_data}");
    // Joiner's NodeConfig first and the user's script after, as Karpenter orders them.
    assert_eq!(
        parts[0].content_type().as_deref(),
        Some(NODECONFIG_CONTENT_TYPE)
    );
    assert!(parts[0].body.contains("name: lab"), "{user_data}");
    assert!(
        parts[0].body.contains("registerWithTaints") && parts[0].body.contains("nvidia.com/gpu"),
        "{user_data}"
    );
    assert!(
        parts[1].body.contains("tensorflow:2.12.0-gpu"),
        "{user_data}"
    );

    // A CPU type boots the standard AMI, from a second template.
    let cpu = env
        .cloud
        .launch(&request(
            "cpu-1",
            vec![offer(
                "m5.large",
                "us-east-1c",
                CapacityType::OnDemand,
                0.096,
            )],
        ))
        .expect("launch");
    assert_eq!(cpu.instance.image_id, env.seeded.standard_ami);
    let names = template_names(&env);
    assert_eq!(names.len(), 2, "{names:?}");
    let cpu_template = names
        .iter()
        .map(|n| template_of(&env, n))
        .find(|d| d.image_id() == Some(env.seeded.standard_ami.as_str()));
    assert!(cpu_template.is_some(), "no template with the standard AMI");

    // The same GPU shape again re-uses its template (and so creates none to measure).
    let again = env
        .cloud
        .launch(&request(
            "gpu-2",
            vec![offer(
                "g4dn.xlarge",
                "us-east-1a",
                CapacityType::OnDemand,
                0.526,
            )],
        ))
        .expect("launch");
    assert_eq!(again.user_data_bytes, None);
    assert_eq!(template_names(&env).len(), 2);
}

/// A Bottlerocket class boots Bottlerocket's NVIDIA AMI with TOML settings: the user's kept,
/// the cluster and the plan's pods written over them, one template per pod count.
#[test]
fn a_bottlerocket_launch_boots_its_ami_with_toml_settings_per_pod_count() {
    let Some(env) = Env::start() else { return };
    let mut r = request(
        "br-1",
        vec![
            offer("g4dn.xlarge", "us-east-1a", CapacityType::OnDemand, 0.526),
            offer("g5.xlarge", "us-east-1a", CapacityType::OnDemand, 1.006),
        ],
    );
    let class = r.node_class_spec.as_mut().expect("class");
    class.spec.ami_selector_terms[0].alias = Some("bottlerocket@latest".into());
    class.spec.block_device_mappings.clear();
    class.spec.user_data = Some("[settings.host-containers.admin]\nenabled = true\n".to_string());
    r.max_pods = BTreeMap::from([
        ("g4dn.xlarge".to_string(), 29),
        ("g5.xlarge".to_string(), 58),
    ]);
    let launched = env.cloud.launch(&r).expect("launch");
    assert_eq!(launched.instance.image_id, env.seeded.nvidia_ami);
    let names = template_names(&env);
    assert_eq!(names.len(), 2, "one template per max-pods value: {names:?}");
    let mut pods = Vec::new();
    for name in &names {
        let data = template_of(&env, name);
        let settings: toml::Table = decoded_user_data(&data).parse().expect("TOML user data");
        let k8s = &settings["settings"]["kubernetes"];
        assert_eq!(k8s["cluster-name"].as_str(), Some(CLUSTER));
        assert_eq!(
            k8s["api-server"].as_str(),
            Some("https://lab.example.eks.amazonaws.com")
        );
        assert_eq!(
            k8s["node-taints"]["nvidia.com/gpu"][0].as_str(),
            Some("true:NoSchedule")
        );
        assert_eq!(
            settings["settings"]["host-containers"]["admin"]["enabled"].as_bool(),
            Some(true)
        );
        pods.push(k8s["max-pods"].as_integer().expect("max-pods"));
        // Bottlerocket's own volumes: the OS on xvda, the data (and pods' storage) on xvdb.
        let devices: Vec<&str> = data
            .block_device_mappings()
            .iter()
            .filter_map(|b| b.device_name())
            .collect();
        assert_eq!(devices, ["/dev/xvda", "/dev/xvdb"]);
    }
    pods.sort_unstable();
    assert_eq!(pods, [29, 58]);
}

#[test]
fn spot_launches_are_spot_instances() {
    let Some(env) = Env::start() else { return };
    let launched = env
        .cloud
        .launch(&request(
            "spot-1",
            vec![
                offer("g4dn.xlarge", "us-east-1a", CapacityType::Spot, 0.21),
                offer("g4dn.xlarge", "us-east-1a", CapacityType::OnDemand, 0.526),
            ],
        ))
        .expect("launch");
    assert_eq!(launched.instance.capacity_type, CapacityType::Spot);
    let ec2 = env.ec2();
    let fleets = env
        .rt
        .block_on(ec2.describe_fleets().send())
        .expect("DescribeFleets");
    let overrides = fleets.fleets()[0].launch_template_configs()[0]
        .overrides()
        .len();
    assert_eq!(overrides, 1, "only the spot offer goes into a spot fleet");
}

#[test]
fn efa_interfaces_are_attached_one_per_network_card_when_asked() {
    let Some(env) = Env::start() else { return };
    let mut r = request(
        "efa-1",
        vec![offer(
            "p4d.24xlarge",
            "us-east-1a",
            CapacityType::OnDemand,
            21.96,
        )],
    );
    r.efa_interfaces = BTreeMap::from([("p4d.24xlarge".to_string(), 4)]);
    env.cloud.launch(&r).expect("launch");
    let names = template_names(&env);
    assert_eq!(names.len(), 1);
    let data = template_of(&env, &names[0]);
    let nics = data.network_interfaces();
    assert_eq!(nics.len(), 4, "{nics:?}");
    for (card, nic) in nics.iter().enumerate() {
        assert_eq!(nic.interface_type(), Some("efa"));
        assert_eq!(nic.network_card_index(), Some(card as i32));
        assert_eq!(nic.device_index(), Some(if card == 0 { 0 } else { 1 }));
    }
    // Without EFA the same shape has no interfaces of its own: a different template.
    env.cloud
        .launch(&request(
            "plain-1",
            vec![offer(
                "p4d.24xlarge",
                "us-east-1a",
                CapacityType::OnDemand,
                21.96,
            )],
        ))
        .expect("launch");
    let names = template_names(&env);
    assert_eq!(names.len(), 2);
    assert!(
        names
            .iter()
            .any(|n| template_of(&env, n).network_interfaces().is_empty())
    );
}

#[test]
fn the_same_client_token_twice_launches_one_instance() {
    let Some(env) = Env::start() else { return };
    let r = request(
        "once",
        vec![offer(
            "g4dn.xlarge",
            "us-east-1a",
            CapacityType::OnDemand,
            0.526,
        )],
    );
    let first = env.cloud.launch(&r).expect("launch");
    let again = env.cloud.launch(&r).expect("launch");
    assert_eq!(first.instance.id, again.instance.id);
    assert_eq!(env.cloud.list(CLUSTER).expect("list").len(), 1);
}

#[test]
fn instances_can_be_listed_read_and_terminated_idempotently() {
    let Some(env) = Env::start() else { return };
    let a = env
        .cloud
        .launch(&request(
            "a",
            vec![offer(
                "g4dn.xlarge",
                "us-east-1a",
                CapacityType::OnDemand,
                0.526,
            )],
        ))
        .expect("launch")
        .instance;
    let b = env
        .cloud
        .launch(&request(
            "b",
            vec![offer(
                "m5.large",
                "us-east-1b",
                CapacityType::OnDemand,
                0.096,
            )],
        ))
        .expect("launch")
        .instance;
    let mut listed: Vec<String> = env
        .cloud
        .list(CLUSTER)
        .expect("list")
        .into_iter()
        .map(|i| i.id)
        .collect();
    listed.sort();
    let mut expected = vec![a.id.clone(), b.id.clone()];
    expected.sort();
    assert_eq!(listed, expected);
    assert!(env.cloud.list("another-cluster").expect("list").is_empty());

    let got = env.cloud.get(&a.id).expect("get").expect("found");
    assert_eq!(got.provider_id(), format!("aws:///us-east-1a/{}", a.id));
    assert!(!got.private_dns_name.is_empty());

    env.cloud.terminate(&a.id).expect("terminate");
    env.cloud
        .terminate(&a.id)
        .expect("terminating again succeeds");
    let listed: Vec<String> = env
        .cloud
        .list(CLUSTER)
        .expect("list")
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(listed, std::slice::from_ref(&b.id));
    let gone = env.cloud.get(&a.id).expect("get");
    assert!(
        gone.as_ref()
            .is_none_or(|i| i.state == InstanceState::Terminated),
        "{gone:?}"
    );
    assert_eq!(env.cloud.get("i-0123456789abcdef0").expect("get"), None);
    env.cloud
        .terminate("i-0123456789abcdef0")
        .expect("terminating an unknown instance succeeds");
}

#[test]
fn instance_types_list_gpu_offerings_with_spot_prices() {
    let Some(env) = Env::start() else { return };
    let types = env.cloud.instance_types().expect("instance types");
    let g4 = types
        .iter()
        .find(|t| t.name == "g4dn.xlarge")
        .expect("g4dn.xlarge offered");
    let zones: std::collections::BTreeSet<&str> =
        g4.offerings.iter().map(|o| o.zone.as_str()).collect();
    assert!(!zones.is_empty());
    assert!(zones.iter().all(|z| common::ZONES.contains(z)), "{zones:?}");
    let spot = g4
        .offerings
        .iter()
        .find(|o| o.capacity_type == CapacityType::Spot)
        .expect("a spot offering");
    // moto reports every spot price as 0.00001 USD: proof it came from EC2, not the catalog.
    assert_eq!(
        spot.price,
        joiner_model::Price::from_usd(0.00001).expect("price")
    );
    let od = g4
        .offerings
        .iter()
        .find(|o| o.capacity_type == CapacityType::OnDemand)
        .expect("an on-demand offering");
    assert_eq!(
        od.price,
        joiner_model::Price::from_usd(0.526).expect("price")
    );
    let gpu_types = types
        .iter()
        .filter(|t| t.name.starts_with('g') || t.name.starts_with('p'))
        .count();
    assert!(gpu_types > 10, "only {gpu_types} GPU types");
}

#[test]
fn the_sqs_queue_receives_and_deletes() {
    let Some(env) = Env::start() else { return };
    let sqs = aws_sdk_sqs::Client::new(&env.sdk);
    let url = env
        .rt
        .block_on(sqs.create_queue().queue_name("lab-interruptions").send())
        .expect("CreateQueue")
        .queue_url()
        .expect("url")
        .to_string();
    for n in 0..3 {
        env.rt
            .block_on(
                sqs.send_message()
                    .queue_url(&url)
                    .message_body(format!(
                        "{{\"detail-type\":\"EC2 Spot Instance Interruption Warning\",\"n\":{n}}}"
                    ))
                    .send(),
            )
            .expect("SendMessage");
    }
    let queue = env
        .rt
        .block_on(SqsInterruptionQueue::new(
            &env.sdk,
            "lab-interruptions",
            env.rt.handle().clone(),
        ))
        .expect("queue");
    assert_eq!(queue.url(), url);
    let got = queue.receive(10).expect("receive");
    assert_eq!(got.len(), 3);
    assert!(
        got.iter()
            .all(|m| m.body.contains("Spot Instance Interruption"))
    );
    for m in &got {
        queue.delete(&m.receipt).expect("delete");
    }
    // Deleted messages do not come back, even after their visibility timeout.
    env.rt
        .block_on(
            sqs.set_queue_attributes()
                .queue_url(&url)
                .attributes(
                    aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
                    "0",
                )
                .send(),
        )
        .expect("SetQueueAttributes");
    assert!(queue.receive(10).expect("receive").is_empty());

    let missing = env.rt.block_on(SqsInterruptionQueue::new(
        &env.sdk,
        "no-such-queue",
        env.rt.handle().clone(),
    ));
    assert!(missing.is_err());
}

fn learning_lab() -> Manifests {
    joiner_test_support::load_example("time-slicing-learning-lab")
}

fn config() -> Config {
    Config::new(common::settings()).expect("config")
}

#[test]
fn garbage_collection_terminates_an_instance_without_a_node_claim() {
    let Some(env) = Env::start() else { return };
    let leaked = env
        .cloud
        .launch(&request(
            "lost-claim",
            vec![offer(
                "m5.large",
                "us-east-1a",
                CapacityType::OnDemand,
                0.096,
            )],
        ))
        .expect("launch")
        .instance;
    let clock = ManualClock::at(joiner_controller::clock::Clock::now(
        &joiner_controller::clock::SystemClock,
    ));
    let store = InMemoryCluster::new(clock.clone());
    let mut controller = Controller::new(&store, &env.cloud, clock.clone(), config());
    // Within the grace period the instance may still be a launch being recorded.
    let report = controller.step();
    assert!(report.terminated.is_empty(), "{report:?}");
    clock.advance(Duration::from_secs(120));
    let report = controller.step();
    assert_eq!(
        report.terminated,
        std::slice::from_ref(&leaked.id),
        "{report:?}"
    );
    assert!(env.cloud.list(CLUSTER).expect("list").is_empty());
}

#[test]
fn pending_learning_lab_pods_launch_a_moto_instance() {
    let Some(env) = Env::start() else { return };
    let clock = ManualClock::at(joiner_controller::clock::Clock::now(
        &joiner_controller::clock::SystemClock,
    ));
    let store = InMemoryCluster::new(clock.clone());
    store.load(&learning_lab()).expect("load");
    let mut controller = Controller::new(&store, &env.cloud, clock.clone(), config());
    let mut reports = Vec::new();
    for _ in 0..4 {
        reports.push(controller.step());
        clock.advance(Duration::from_secs(1));
    }
    let errors: Vec<String> = reports
        .iter()
        .flat_map(|r| r.errors.iter().map(ToString::to_string))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    let claims = store.list::<NodeClaim>().expect("claims");
    assert_eq!(claims.len(), 2, "the lab needs two g4dn.xlarge");
    let instances = env.cloud.list(CLUSTER).expect("list");
    assert_eq!(instances.len(), 2, "{instances:#?}");
    for c in &claims {
        let provider_id = c.status.provider_id.as_deref().expect("launched");
        let instance = instances
            .iter()
            .find(|i| i.provider_id() == provider_id)
            .expect("the NodeClaim's instance runs in moto");
        assert_eq!(instance.instance_type, "g4dn.xlarge");
        assert_eq!(
            instance.image_id, env.seeded.nvidia_ami,
            "AL2 GPU AMI via the alias"
        );
        assert_eq!(
            instance.tags.get(tags::NODECLAIM).map(String::as_str),
            Some(c.name())
        );
        assert_eq!(
            instance.tags.get("Name").map(String::as_str),
            Some("Learninglab-Staging-Auto-GPU-Node")
        );
    }
}

#[test]
fn what_the_settings_leave_out_of_the_cluster_access_comes_from_eks() {
    use joiner_aws::cluster::{IpFamily, discover};
    let Some(env) = Env::start() else { return };
    let eks = aws_sdk_eks::Client::new(&env.sdk);
    env.rt
        .block_on(
            eks.create_cluster()
                .name(CLUSTER)
                .role_arn("arn:aws:iam::123456789012:role/eks-cluster")
                .resources_vpc_config(
                    aws_sdk_eks::types::VpcConfigRequest::builder()
                        .subnet_ids(env.seeded.subnets[0].0.clone())
                        .build(),
                )
                .kubernetes_network_config(
                    aws_sdk_eks::types::KubernetesNetworkConfigRequest::builder()
                        .service_ipv4_cidr("10.100.0.0/16")
                        .build(),
                )
                .send(),
        )
        .expect("CreateCluster");
    let mut settings = common::settings();
    settings.cluster_endpoint = Some("https://given.example".into());
    let access = env
        .rt
        .block_on(discover(&env.sdk, &settings, CLUSTER))
        .expect("discovered");
    assert_eq!(access.endpoint, "https://given.example", "the settings win");
    assert!(!access.ca_bundle.is_empty(), "the CA from EKS");
    assert_eq!(access.service_cidr, "10.100.0.0/16");
    assert_eq!(access.ip_family, IpFamily::Ipv4);

    // A cluster EKS does not know: what is missing is named, with EKS's answer.
    let missing = env
        .rt
        .block_on(discover(&env.sdk, &settings, "no-such-cluster"))
        .expect_err("no CA, no CIDR")
        .to_string();
    assert!(missing.contains("settings.clusterCABundle"), "{missing}");
    assert!(missing.contains("settings.clusterCIDR"), "{missing}");
    assert!(missing.contains("DescribeCluster failed"), "{missing}");
}

/// The lab's GPU class as the API server has it: with a uid, which names its profile.
fn stored_class() -> joiner_model::api::EC2NodeClass {
    let mut class = common::requests::node_class();
    class.metadata.uid = Some("3f1c2a9e-0d7b-4c55-9a61-5f0c0b6e2d11".into());
    class
}

/// IAM writes moto served after the first `since` requests.
fn iam_writes_since(env: &Env, since: usize) -> Vec<String> {
    env.moto
        .recorded()
        .into_iter()
        .skip(since)
        .map(|r| r.action)
        .filter(|a| {
            [
                "CreateInstanceProfile",
                "AddRoleToInstanceProfile",
                "RemoveRoleFromInstanceProfile",
                "TagInstanceProfile",
                "DeleteInstanceProfile",
            ]
            .contains(&a.as_str())
        })
        .collect()
}

fn profile_tags(env: &Env, name: &str) -> BTreeMap<String, String> {
    iam_profile(env, name)
        .expect("the profile")
        .tags()
        .iter()
        .map(|t| (t.key().to_string(), t.value().to_string()))
        .collect()
}

fn found<T: std::fmt::Debug>(r: &Resolved<T>) -> &T {
    match r {
        Resolved::Found(v) => v,
        other => panic!("not found: {other:?}"),
    }
}

#[test]
fn a_class_resolves_its_subnets_security_groups_amis_and_a_new_tagged_profile() {
    let Some(env) = Env::start() else { return };
    let class = stored_class();
    let r = env.cloud.resolve_node_class(&class);

    let mut subnets: Vec<(String, String)> = found(&r.subnets)
        .iter()
        .map(|s| (s.id.clone(), s.zone.clone()))
        .collect();
    subnets.sort();
    let mut seeded = env.seeded.subnets.clone();
    seeded.sort();
    assert_eq!(subnets, seeded, "the tagged subnets only, with their zones");
    assert!(
        found(&r.subnets).iter().all(|s| s.zone_id.is_some()),
        "zone ids: {:?}",
        r.subnets
    );
    let groups = found(&r.security_groups);
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].id, env.seeded.security_group);
    assert_eq!(groups[0].name.as_deref(), Some("lab-nodes"));
    let amis = found(&r.amis);
    let ids: Vec<&str> = amis.iter().map(|a| a.id.as_str()).collect();
    for id in [
        &env.seeded.nvidia_ami,
        &env.seeded.standard_ami,
        &env.seeded.arm_ami,
    ] {
        assert!(ids.contains(&id.as_str()), "{id} in {ids:?}");
    }
    let arm = amis
        .iter()
        .find(|a| a.id == env.seeded.arm_ami)
        .expect("arm image");
    assert!(
        arm.requirements
            .iter()
            .any(|q| q.key == "kubernetes.io/arch" && q.values == Some(vec!["arm64".into()])),
        "{arm:?}"
    );

    // The profile: Karpenter's name shape, the role in it, the ownership tags on it.
    let profile = found(&r.instance_profile).clone();
    let (cluster, hash) = profile.split_once('_').expect("<cluster>_<hash>");
    assert_eq!(cluster, CLUSTER);
    assert!(hash.parse::<u64>().is_ok(), "{profile}");
    assert_eq!(profile_role(&env, &profile).as_deref(), Some(NODE_ROLE));
    let tags = profile_tags(&env, &profile);
    for (k, v) in [
        ("kubernetes.io/cluster/lab", "owned"),
        ("eks:eks-cluster-name", "lab"),
        ("karpenter.k8s.aws/ec2nodeclass", "gpu"),
        ("topology.kubernetes.io/region", common::REGION),
        ("team", "ml"),
    ] {
        assert_eq!(tags.get(k).map(String::as_str), Some(v), "{k}: {tags:?}");
    }

    // Resolved again, with the profile recorded in its status: nothing is written.
    let since = env.moto.recorded().len();
    let mut resolved = class.clone();
    resolved.status = Some(joiner_model::api::ec2nodeclass::EC2NodeClassStatus {
        instance_profile: Some(profile.clone()),
        ..Default::default()
    });
    let again = env.cloud.resolve_node_class(&resolved);
    assert_eq!(found(&again.instance_profile), &profile);
    assert_eq!(iam_writes_since(&env, since), Vec::<String>::new());
}

#[test]
fn a_profile_recorded_in_the_status_is_adopted_and_tagged_not_replaced() {
    let Some(env) = Env::start() else { return };
    // What Karpenter made and recorded: its own name, the role, no tags of ours.
    let iam = env.iam();
    env.rt.block_on(async {
        iam.create_instance_profile()
            .instance_profile_name("lab_10290130918376426651")
            .send()
            .await
            .expect("CreateInstanceProfile");
        iam.add_role_to_instance_profile()
            .instance_profile_name("lab_10290130918376426651")
            .role_name(NODE_ROLE)
            .send()
            .await
            .expect("AddRoleToInstanceProfile");
    });
    let mut class = stored_class();
    class.status = Some(joiner_model::api::ec2nodeclass::EC2NodeClassStatus {
        instance_profile: Some("lab_10290130918376426651".into()),
        ..Default::default()
    });
    let since = env.moto.recorded().len();
    let r = env.cloud.resolve_node_class(&class);
    assert_eq!(found(&r.instance_profile), "lab_10290130918376426651");
    assert_eq!(iam_writes_since(&env, since), ["TagInstanceProfile"]);
    let tags = profile_tags(&env, "lab_10290130918376426651");
    assert_eq!(
        tags.get("kubernetes.io/cluster/lab").map(String::as_str),
        Some("owned")
    );
    let listed = env
        .rt
        .block_on(iam.list_instance_profiles().send())
        .expect("ListInstanceProfiles");
    assert_eq!(listed.instance_profiles().len(), 1, "no second profile");
}

#[test]
fn a_profile_that_already_exists_under_joiners_name_is_adopted_not_duplicated() {
    let Some(env) = Env::start() else { return };
    // A first resolution made the profile; its status write was lost, so the next one (a
    // restarted controller: no caches) sees a class with no profile recorded.
    let first = env.cloud.resolve_node_class(&stored_class());
    let name = found(&first.instance_profile).clone();
    let fresh = env.rt.block_on(async {
        joiner_aws::AwsCloud::from_sdk_config(
            &env.sdk,
            &common::settings(),
            CLUSTER,
            env.rt.handle().clone(),
        )
        .await
        .expect("AwsCloud")
        .with_ami_parameter_root(common::AMI_ROOT)
    });
    let since = env.moto.recorded().len();
    let again = fresh.resolve_node_class(&stored_class());
    assert_eq!(found(&again.instance_profile), &name);
    assert_eq!(iam_writes_since(&env, since), Vec::<String>::new());
    let listed = env
        .rt
        .block_on(env.iam().list_instance_profiles().send())
        .expect("ListInstanceProfiles");
    assert_eq!(listed.instance_profiles().len(), 1, "no second profile");

    // Someone else's profile under that name, holding another role, is left alone.
    let iam = env.iam();
    env.rt.block_on(async {
        iam.create_role()
            .role_name("OtherRole")
            .assume_role_policy_document("{}")
            .send()
            .await
            .expect("CreateRole");
        iam.remove_role_from_instance_profile()
            .instance_profile_name(&name)
            .role_name(NODE_ROLE)
            .send()
            .await
            .expect("RemoveRole");
        iam.untag_instance_profile()
            .instance_profile_name(&name)
            .tag_keys("kubernetes.io/cluster/lab")
            .send()
            .await
            .expect("UntagInstanceProfile");
        iam.add_role_to_instance_profile()
            .instance_profile_name(&name)
            .role_name("OtherRole")
            .send()
            .await
            .expect("AddRole");
    });
    let since = env.moto.recorded().len();
    let refused = fresh.resolve_node_class(&stored_class());
    assert!(
        matches!(&refused.instance_profile, Resolved::NotFound(m) if m.contains("OtherRole")),
        "{:?}",
        refused.instance_profile
    );
    assert_eq!(iam_writes_since(&env, since), Vec::<String>::new());
    assert_eq!(profile_role(&env, &name).as_deref(), Some("OtherRole"));
}

/// A changed `spec.role` gets a new profile for new nodes; the profile the running nodes were
/// launched with keeps its role (no RemoveRoleFromInstanceProfile), so they keep working.
#[test]
fn a_role_change_makes_a_new_profile_and_leaves_the_running_nodes_one_alone() {
    let Some(env) = Env::start() else { return };
    let first = env.cloud.resolve_node_class(&stored_class());
    let old = found(&first.instance_profile).clone();
    let iam = env.iam();
    env.rt.block_on(async {
        iam.create_role()
            .role_name("NewNodeRole")
            .assume_role_policy_document("{}")
            .send()
            .await
            .expect("CreateRole");
    });
    let mut changed = stored_class();
    changed.spec.role = Some("NewNodeRole".into());
    changed.status = Some(joiner_model::api::ec2nodeclass::EC2NodeClassStatus {
        instance_profile: Some(old.clone()),
        ..Default::default()
    });
    let since = env.moto.recorded().len();
    let r = env.cloud.resolve_node_class(&changed);
    let new = found(&r.instance_profile).clone();
    assert_ne!(new, old);
    assert_eq!(profile_role(&env, &new).as_deref(), Some("NewNodeRole"));
    assert_eq!(
        profile_role(&env, &old).as_deref(),
        Some(NODE_ROLE),
        "the running nodes' profile keeps its role"
    );
    let writes = iam_writes_since(&env, since);
    assert!(
        !writes
            .iter()
            .any(|w| w == "RemoveRoleFromInstanceProfile" || w == "DeleteInstanceProfile"),
        "{writes:?}"
    );
    // Resolved again with the new profile recorded: nothing more is written.
    changed.status = Some(joiner_model::api::ec2nodeclass::EC2NodeClassStatus {
        instance_profile: Some(new.clone()),
        ..Default::default()
    });
    let since = env.moto.recorded().len();
    assert_eq!(
        found(&env.cloud.resolve_node_class(&changed).instance_profile),
        &new
    );
    assert_eq!(iam_writes_since(&env, since), Vec::<String>::new());
}

/// The cluster's profiles are listed under Karpenter's path for it; deleting one removes its
/// role first, and one already gone is no error.
#[test]
fn the_clusters_profiles_are_listed_by_path_and_deleted_with_their_role() {
    let Some(env) = Env::start() else { return };
    let first = env.cloud.resolve_node_class(&stored_class());
    let name = found(&first.instance_profile).clone();
    let path = iam_profile(&env, &name).expect("made").path().to_string();
    assert!(
        path.starts_with(&format!("/karpenter/{}/", common::REGION)) && path.ends_with('/'),
        "{path}"
    );
    // Someone else's profile elsewhere in the account is never listed.
    let iam = env.iam();
    env.rt.block_on(async {
        iam.create_instance_profile()
            .instance_profile_name("platform-node-profile")
            .send()
            .await
            .expect("CreateInstanceProfile");
    });
    assert_eq!(env.cloud.list_instance_profiles(), Ok(vec![name.clone()]));
    let since = env.moto.recorded().len();
    assert_eq!(env.cloud.delete_instance_profile(&name), Ok(()));
    assert_eq!(
        iam_writes_since(&env, since),
        ["RemoveRoleFromInstanceProfile", "DeleteInstanceProfile"]
    );
    assert!(iam_profile(&env, &name).is_none());
    assert_eq!(env.cloud.list_instance_profiles(), Ok(Vec::new()));
    assert_eq!(
        env.cloud.delete_instance_profile(&name),
        Ok(()),
        "gone is done"
    );
    assert!(iam_profile(&env, "platform-node-profile").is_some());
}

#[test]
fn spec_instance_profile_is_used_as_given_with_no_iam_call() {
    let Some(env) = Env::start() else { return };
    let mut class = stored_class();
    class.spec.role = None;
    class.spec.instance_profile = Some("platform-node-profile".into());
    let since = env.moto.recorded().len();
    let r = env.cloud.resolve_node_class(&class);
    assert_eq!(found(&r.instance_profile), "platform-node-profile");
    let iam_calls: Vec<String> = env
        .moto
        .recorded()
        .into_iter()
        .skip(since)
        .map(|r| r.action)
        .filter(|a| a.contains("InstanceProfile"))
        .collect();
    assert_eq!(iam_calls, Vec::<String>::new());
}

#[test]
fn subnets_that_match_nothing_are_not_found_not_failed() {
    let Some(env) = Env::start() else { return };
    let mut class = stored_class();
    class.spec.subnet_selector_terms[0]
        .tags
        .insert(common::DISCOVERY_KEY.into(), "no-such-cluster".into());
    let r = env.cloud.resolve_node_class(&class);
    assert!(
        matches!(&r.subnets, Resolved::NotFound(m) if m.contains("no subnet matches")),
        "{:?}",
        r.subnets
    );
    found(&r.security_groups);
}
