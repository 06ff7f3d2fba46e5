//! End-to-end: `joiner plan --launch`, what a node would boot with, as a user previews it
//! before installing anything.

use joiner_test_support::{example_dir, run, run_json};

const JOINER: &str = env!("CARGO_BIN_EXE_joiner");

fn lab() -> String {
    example_dir("time-slicing-learning-lab")
        .display()
        .to_string()
}

const CLUSTER_SETTINGS: [&str; 8] = [
    "--set",
    "settings.clusterName=learninglab",
    "--set",
    "settings.clusterEndpoint=https://ABC.gr7.us-east-1.eks.amazonaws.com",
    "--set",
    "settings.clusterCABundle=Q0EgQlVORExF",
    "--set",
    "settings.clusterCIDR=10.100.0.0/16",
];

fn launch_of(plan: &serde_json::Value, i: usize) -> &serde_json::Value {
    let launch = &plan["nodeClaims"][i]["launch"];
    assert!(
        launch.is_object(),
        "nodeClaims[{i}] has no launch: {plan:#}"
    );
    launch
}

/// The learning lab's AL2 EC2NodeClass: its volume, tags and MIME user data, the GPU AMI of
/// its Kubernetes version, and bootstrap.sh told the cluster, the taint and the pods.
#[test]
fn the_learning_lab_previews_its_al2_launch_with_the_settings_cluster() {
    let dir = lab();
    let mut args = vec!["plan", "-f", &dir, "-o", "json", "--launch"];
    args.extend(CLUSTER_SETTINGS);
    let plan = run_json(JOINER, &args);
    let claims = plan["nodeClaims"].as_array().expect("nodeClaims");
    assert_eq!(claims.len(), 2, "{plan:#}");
    let launch = launch_of(&plan, 0);
    assert_eq!(launch["amiFamily"], "AL2");
    assert_eq!(launch["capacityType"], "on-demand");
    assert!(
        launch["nodeClaim"]
            .as_str()
            .is_some_and(|n| n.starts_with("g4-nodepool-")),
        "the name the controller creates the NodeClaim under: {launch:#}"
    );
    let templates = launch["launchTemplates"].as_array().expect("templates");
    assert_eq!(templates.len(), 1, "{launch:#}");
    let t = &templates[0];
    assert_eq!(
        t["imageId"],
        "<AMI in SSM parameter /aws/service/eks/optimized-ami/1.36/amazon-linux-2-gpu/recommended/image_id>"
    );
    let volume = &t["blockDeviceMappings"][0];
    assert_eq!(volume["deviceName"], "/dev/xvda");
    assert_eq!(volume["ebs"]["volumeSize"], "100Gi");
    assert_eq!(volume["ebs"]["iops"], 10000);
    assert_eq!(t["metadataOptions"]["httpTokens"], "required");
    assert_eq!(t["tags"]["Name"], "Learninglab-Staging-Auto-GPU-Node");
    assert_eq!(t["tags"]["kubernetes.io/cluster/learninglab"], "owned");
    assert_eq!(t["tags"]["karpenter.sh/nodepool"], "g4-nodepool");
    assert_eq!(
        launch["instanceTags"]["Name"],
        "Learninglab-Staging-Auto-GPU-Node"
    );
    assert!(
        launch["instanceTags"]["karpenter.sh/nodeclaim"]
            .as_str()
            .is_some()
    );
    let overrides = t["overrides"].as_array().expect("overrides");
    assert!(!overrides.is_empty());
    assert!(overrides.iter().all(|o| o["instanceType"] == "g4dn.xlarge"));
    assert!(t.get("networkInterfaces").is_none(), "no EFA asked for");

    let user_data = t["userData"].as_str().expect("userData");
    let pull = user_data
        .find("tensorflow:2.12.0-gpu")
        .expect("the user's part");
    let bootstrap = user_data
        .find("/etc/eks/bootstrap.sh 'learninglab'")
        .expect("Joiner's bootstrap");
    assert!(pull < bootstrap, "the user's script runs first on AL2");
    for expected in [
        "--apiserver-endpoint 'https://ABC.gr7.us-east-1.eks.amazonaws.com'",
        "--b64-cluster-ca 'Q0EgQlVORExF'",
        "--register-with-taints=nvidia.com/gpu=true:NoSchedule",
        "nvidia.com/gpu=true",
        "--use-max-pods false",
        "--max-pods=29",
    ] {
        assert!(user_data.contains(expected), "{expected}: {user_data}");
    }
    // What the instance type defines is the controller's to write at registration: a launch
    // may fall back to another type, and the NodeRestriction plugin refuses some of it.
    for absent in [
        "instance-family=",
        "nvidia.com/gpu.product",
        "node.kubernetes.io/instance-type",
    ] {
        assert!(!user_data.contains(absent), "{absent}: {user_data}");
    }
}

/// Without the cluster's settings the preview still renders, naming each placeholder and the
/// setting that fills it; YAML carries the same document.
#[test]
fn missing_cluster_settings_are_named_placeholders() {
    let dir = lab();
    let plan: serde_json::Value = {
        let out = run(JOINER, &["plan", "-f", &dir, "-o", "yaml", "--launch"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_saphyr::from_str(&String::from_utf8(out.stdout).expect("UTF-8")).expect("YAML")
    };
    let launch = launch_of(&plan, 0);
    let notes: Vec<&str> = launch["placeholders"]
        .as_array()
        .expect("placeholders")
        .iter()
        .filter_map(|p| p.as_str())
        .collect();
    for setting in ["clusterEndpoint", "clusterCABundle", "clusterCIDR"] {
        assert!(
            notes.iter().any(|n| n.starts_with(&format!("<{setting}>"))),
            "{setting} not named: {notes:?}"
        );
    }
    let user_data = launch["launchTemplates"][0]["userData"]
        .as_str()
        .expect("userData");
    assert!(
        user_data.contains("--apiserver-endpoint '<clusterEndpoint>'"),
        "{user_data}"
    );
}

#[test]
fn launch_needs_a_machine_readable_output() {
    let dir = lab();
    let out = run(JOINER, &["plan", "-f", &dir, "--launch"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("-o yaml or -o json"), "{err}");
}

/// An AL2023 class for EFA training pods: nodeadm's NodeConfig first with the cluster and the
/// pods, and one EFA interface per network card of the type.
#[test]
fn an_efa_training_node_previews_one_efa_interface_per_card_and_a_node_config() {
    let s = joiner_test_support::Scratch::new("launch-e2e");
    let file = s.write(
        "train.yaml",
        r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: train}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: train}
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [p4d.24xlarge]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: train}
spec:
  role: KarpenterNodeRole-lab
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: lab}}]
  securityGroupSelectorTerms: [{id: sg-0123456789abcdef0}]
---
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: ml}
spec:
  containers:
  - name: t
    image: trainer
    resources:
      requests: {nvidia.com/gpu: "8", vpc.amazonaws.com/efa: "4", cpu: "8"}
      limits: {nvidia.com/gpu: "8", vpc.amazonaws.com/efa: "4"}
"#,
    );
    let file = file.display().to_string();
    let mut args = vec!["plan", "-f", &file, "-o", "json", "--launch"];
    args.extend(CLUSTER_SETTINGS);
    let plan = run_json(JOINER, &args);
    let launch = launch_of(&plan, 0);
    assert_eq!(launch["amiFamily"], "AL2023");
    let t = &launch["launchTemplates"][0];
    assert_eq!(
        t["imageId"],
        "<AMI in SSM parameter /aws/service/eks/optimized-ami/1.36/amazon-linux-2023/x86_64/nvidia/recommended/image_id>"
    );
    assert_eq!(
        t["securityGroupIds"],
        serde_json::json!(["sg-0123456789abcdef0"])
    );
    let nics = t["networkInterfaces"].as_array().expect("EFA interfaces");
    assert_eq!(nics.len(), 4, "p4d.24xlarge has four network cards: {t:#}");
    assert!(nics.iter().all(|n| n["interfaceType"] == "efa"));
    assert_eq!(nics[0]["deviceIndex"], 0);
    assert_eq!(nics[1]["deviceIndex"], 1);
    assert_eq!(t["blockDeviceMappings"][0]["ebs"]["volumeSize"], "20Gi");
    let user_data = t["userData"].as_str().expect("userData");
    let config_start = user_data.find("kind: NodeConfig").expect("a NodeConfig");
    let config: serde_json::Value = serde_saphyr::from_str(
        user_data[config_start..]
            .split("\n--")
            .next()
            .expect("the part"),
    )
    .expect("NodeConfig YAML");
    assert_eq!(config["spec"]["cluster"]["name"], "learninglab");
    assert_eq!(config["spec"]["cluster"]["cidr"], "10.100.0.0/16");
    assert!(
        config["spec"]["kubelet"]["config"]["maxPods"]
            .as_i64()
            .is_some_and(|p| p > 29)
    );
}

/// A p5 class with its own `networkInterfaces` (Karpenter's EFA-only layout: a primary
/// interface, then an EFA-only interface on each of the 32 cards): the template has exactly
/// those, the node offers 32 EFAs and fewer pods (an EFA-only interface on card 0 carries no
/// addresses), and a pool on a one-card type offers nothing for the layout.
#[test]
fn a_class_s_network_interfaces_are_the_template_s_and_shape_the_node() {
    let mut nics =
        String::from("  - {networkCardIndex: 0, deviceIndex: 0, interfaceType: interface}\n");
    for card in 0..32 {
        let device = if card == 0 { 1 } else { 0 };
        nics.push_str(&format!(
            "  - {{networkCardIndex: {card}, deviceIndex: {device}, interfaceType: efa-only}}\n"
        ));
    }
    let manifests = |types: &str| {
        format!(
            r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: train}}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: train}}
      requirements:
      - {{key: node.kubernetes.io/instance-type, operator: In, values: [{types}]}}
      - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: train}}
spec:
  role: KarpenterNodeRole-lab
  amiSelectorTerms: [{{alias: al2023@latest}}]
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: lab}}}}]
  securityGroupSelectorTerms: [{{id: sg-0123456789abcdef0}}]
  networkInterfaces:
{nics}---
apiVersion: v1
kind: Pod
metadata: {{name: trainer, namespace: ml}}
spec:
  containers:
  - name: t
    image: trainer
    resources:
      requests: {{nvidia.com/gpu: "8", vpc.amazonaws.com/efa: "32", cpu: "8"}}
      limits: {{nvidia.com/gpu: "8", vpc.amazonaws.com/efa: "32"}}
"#
        )
    };
    let s = joiner_test_support::Scratch::new("launch-e2e");
    let file = s
        .write("p5.yaml", &manifests("p5.48xlarge"))
        .display()
        .to_string();
    let mut args = vec!["plan", "-f", &file, "-o", "json", "--launch"];
    args.extend(CLUSTER_SETTINGS);
    let plan = run_json(JOINER, &args);
    let claim = &plan["nodeClaims"][0];
    assert_eq!(claim["instanceType"], "p5.48xlarge");
    assert_eq!(
        claim["resources"]["allocatable"]["vpc.amazonaws.com/efa"],
        "32"
    );
    // Card 0's two interfaces: one is EFA-only, so 1 x (50 - 1) + 2 pods.
    assert_eq!(claim["resources"]["allocatable"]["pods"], "51");
    let t = &launch_of(&plan, 0)["launchTemplates"][0];
    let got = t["networkInterfaces"].as_array().expect("interfaces");
    assert_eq!(got.len(), 33, "{t:#}");
    assert!(
        got[0].get("interfaceType").is_none(),
        "the primary is a plain interface"
    );
    assert!(got[1..].iter().all(|n| n["interfaceType"] == "efa-only"));
    assert_eq!(got[32]["networkCardIndex"], 31);
    // A g6.xlarge has one card: the layout rules it out, and the pod waits.
    let file = s
        .write("g6.yaml", &manifests("g6.xlarge"))
        .display()
        .to_string();
    let plan = run_json(JOINER, &["plan", "-f", &file, "-o", "json"]);
    assert_eq!(
        plan["nodeClaims"].as_array().map(Vec::len),
        Some(0),
        "{plan:#}"
    );
    assert_eq!(plan["unschedulable"][0]["pod"], "ml/trainer");
}

/// A training NodePool whose class's status (as the controller writes it) holds an on-demand
/// capacity reservation with one free instance and a Capacity Block: two pods take both, the
/// third goes on-demand, and each launch targets its reservation.
#[test]
fn reserved_nodes_preview_launches_into_their_reservations() {
    let s = joiner_test_support::Scratch::new("launch-e2e-reserved");
    let file = s.write(
        "train.yaml",
        r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: train}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: train}
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [p5.48xlarge]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [reserved, on-demand]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: train}
spec:
  role: KarpenterNodeRole-lab
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: lab}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: lab}}]
  capacityReservationSelectorTerms: [{tags: {team: ml}}]
status:
  capacityReservations:
  - {id: cr-0aaa, availabilityZone: us-east-1a, instanceType: p5.48xlarge, instanceMatchCriteria: targeted,
     ownerID: "012345678901", reservationType: default, state: active, availableInstanceCount: 1}
  - {id: cr-0bbb, availabilityZone: us-east-1b, instanceType: p5.48xlarge, instanceMatchCriteria: targeted,
     ownerID: "012345678901", reservationType: capacity-block, state: active, endTime: "2099-01-01T00:00:00Z",
     availableInstanceCount: 1}
"#,
    );
    let pods = s.write(
        "pods.yaml",
        &(0..3)
            .map(|i| format!("---\napiVersion: v1\nkind: Pod\nmetadata: {{name: t{i}, namespace: ml}}\nspec:\n  containers:\n  - name: t\n    resources: {{requests: {{nvidia.com/gpu: \"8\"}}, limits: {{nvidia.com/gpu: \"8\"}}}}\n"))
            .collect::<String>(),
    );
    let (file, pods) = (file.display().to_string(), pods.display().to_string());
    let mut args = vec!["plan", "-f", &file, "-f", &pods, "-o", "json", "--launch"];
    args.extend(CLUSTER_SETTINGS);
    let plan = run_json(JOINER, &args);
    let claims = plan["nodeClaims"].as_array().expect("claims");
    assert_eq!(claims.len(), 3, "{plan:#}");
    let by_reservation = |id: &str| {
        claims
            .iter()
            .find(|c| c["capacityReservationId"] == id)
            .unwrap_or_else(|| panic!("no NodeClaim in {id}: {plan:#}"))
    };
    let odcr = by_reservation("cr-0aaa");
    assert_eq!(odcr["capacityType"], "reserved");
    assert_eq!(odcr["zone"], "us-east-1a");
    assert_eq!(
        odcr["labels"]["karpenter.k8s.aws/capacity-reservation-type"],
        "default"
    );
    assert_eq!(odcr["launch"]["targetCapacityType"], "on-demand");
    assert_eq!(
        odcr["launch"]["launchTemplates"][0]["capacityReservation"],
        "target: cr-0aaa"
    );
    let block = by_reservation("cr-0bbb");
    assert_eq!(block["launch"]["targetCapacityType"], "capacity-block");
    let t = &block["launch"]["launchTemplates"][0];
    assert_eq!(t["capacityReservation"], "target: cr-0bbb");
    assert_eq!(t["marketType"], "capacity-block");
    assert_eq!(t["overrides"][0]["zone"], "us-east-1b");
    let on_demand = claims
        .iter()
        .find(|c| c["capacityType"] == "on-demand")
        .expect("the third pod goes on-demand");
    // The class selects reservations: its other launches keep out of open ones.
    assert_eq!(
        on_demand["launch"]["launchTemplates"][0]["capacityReservation"],
        "preference: none"
    );
    assert!(on_demand.get("capacityReservationId").is_none());

    // `joiner catalog` lists the reservations beside the type's other offerings.
    let listing = run_json(JOINER, &["catalog", "-f", &file, "-o", "json"]);
    let offerings = listing["nodePools"][0]["instanceTypes"][0]["offerings"]
        .as_array()
        .expect("offerings");
    let reserved: Vec<&serde_json::Value> = offerings
        .iter()
        .filter(|o| o["capacityType"] == "reserved")
        .collect();
    assert_eq!(reserved.len(), 2, "{listing:#}");
    assert_eq!(reserved[0]["capacityReservation"]["freeInstances"], 1);
}

/// The EC2NodeClass's launch fields reach the launch as Karpenter sends them: IPv4 prefixes and
/// connection tracking on the (then explicit) primary interface, nested virtualization in the
/// template's CPU options, the context on CreateFleet; and connection tracking keeps the pool
/// to Nitro instance types.
#[test]
fn launch_fields_of_the_class_reach_the_template_and_the_fleet() {
    let s = joiner_test_support::Scratch::new("launch-e2e-fields");
    let file = s.write(
        "web.yaml",
        r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: web}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: web}
      requirements:
      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [t2, m5]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: web}
spec:
  role: KarpenterNodeRole-lab
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: lab}}]
  securityGroupSelectorTerms: [{id: sg-0123456789abcdef0}]
  ipPrefixCount: 2
  connectionTracking: {tcpEstablishedTimeout: 3600, udpTimeout: 30}
  cpuOptions: {nestedVirtualization: disabled}
  context: arn:aws:outposts:us-east-1:012345678901:outpost/op-0abc
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers: [{name: c, image: web, resources: {requests: {cpu: 500m}}}]
"#,
    );
    let file = file.display().to_string();
    let mut args = vec!["plan", "-f", &file, "-o", "json", "--launch"];
    args.extend(CLUSTER_SETTINGS);
    let plan = run_json(JOINER, &args);
    let claim = &plan["nodeClaims"][0];
    assert!(
        claim["instanceType"]
            .as_str()
            .is_some_and(|t| t.starts_with("m5.")),
        "t2 is Xen, not Nitro: {claim:#}"
    );
    let launch = launch_of(&plan, 0);
    assert_eq!(
        launch["context"],
        "arn:aws:outposts:us-east-1:012345678901:outpost/op-0abc"
    );
    let t = &launch["launchTemplates"][0];
    assert_eq!(t["nestedVirtualization"], "disabled");
    let nics = t["networkInterfaces"]
        .as_array()
        .expect("a primary interface");
    assert_eq!(nics.len(), 1, "{t:#}");
    assert_eq!(nics[0]["deviceIndex"], 0);
    assert_eq!(nics[0]["ipv4PrefixCount"], 2);
    assert_eq!(
        nics[0]["connectionTracking"],
        serde_json::json!({"tcpEstablishedTimeout": 3600, "udpTimeout": 30})
    );
}

/// `cpuOptions.nestedVirtualization: enabled` keeps the pool to the types whose processors
/// support it (EC2's `nested-virtualization` feature: the c8i, m8i and r8i families in the
/// data) and reaches the template's CPU options; without it, the cheapest type is cheaper.
#[test]
fn nested_virtualization_keeps_the_pool_to_types_that_support_it() {
    let s = joiner_test_support::Scratch::new("launch-e2e-nested");
    let manifest = |nested: &str| {
        format!(
            r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: vms}}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: vms}}
      requirements:
      - {{key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: vms}}
spec:
  role: KarpenterNodeRole-lab
  amiSelectorTerms: [{{alias: al2023@latest}}]
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: lab}}}}]
  securityGroupSelectorTerms: [{{id: sg-0123456789abcdef0}}]
  cpuOptions: {{nestedVirtualization: {nested}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: kata, namespace: default}}
spec:
  containers: [{{name: c, image: vm, resources: {{requests: {{cpu: "3", memory: 4Gi}}}}}}]
"#
        )
    };
    let plan_of = |nested: &str| {
        let file = s.write(&format!("{nested}.yaml"), &manifest(nested));
        let file = file.display().to_string();
        let mut args = vec!["plan", "-f", &file, "-o", "json", "--launch"];
        args.extend(CLUSTER_SETTINGS);
        run_json(JOINER, &args)
    };
    let plan = plan_of("enabled");
    let claim = &plan["nodeClaims"][0];
    let family = claim["instanceType"].as_str().unwrap_or_default();
    assert!(
        [
            "c8i.",
            "c8i-flex.",
            "m8i.",
            "m8i-flex.",
            "r8i.",
            "r8i-flex."
        ]
        .iter()
        .any(|f| family.starts_with(f)),
        "{claim:#}"
    );
    for t in claim["instanceTypeOptions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        assert!(t.as_str().is_some_and(|t| t.contains("8i")), "{claim:#}");
    }
    let t = &launch_of(&plan, 0)["launchTemplates"][0];
    assert_eq!(t["nestedVirtualization"], "enabled");
    let other = plan_of("disabled");
    let other_type = other["nodeClaims"][0]["instanceType"].as_str();
    assert!(
        other_type.is_some_and(|t| !t.contains("8i")),
        "the cheapest type without the option is another family: {other:#}"
    );
}

/// `placementGroupSelector` in a plan from files: the group is found in EC2 only by the
/// controller, so the plan says it does not know the group's strategy (on standard error) and
/// the launch template's placement names the group as the selector does.
#[test]
fn a_placement_group_is_named_in_the_template_and_the_plan_says_what_it_cannot_know() {
    let s = joiner_test_support::Scratch::new("launch-e2e-placement");
    let file = s.write(
        "training.yaml",
        r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: training}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: training}
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: training}
spec:
  role: KarpenterNodeRole-lab
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: lab}}]
  securityGroupSelectorTerms: [{id: sg-0123456789abcdef0}]
  placementGroupSelector: {name: training}
---
apiVersion: v1
kind: Pod
metadata: {name: worker, namespace: default}
spec:
  containers: [{name: c, image: w, resources: {requests: {cpu: "1"}}}]
"#,
    );
    let file = file.display().to_string();
    let mut args = vec!["plan", "-f", &file, "-o", "json", "--launch"];
    args.extend(CLUSTER_SETTINGS);
    let out = run(JOINER, &args);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("EC2NodeClass/training: spec.placementGroupSelector"),
        "{stderr}"
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let t = &launch_of(&plan, 0)["launchTemplates"][0];
    assert_eq!(t["placement"], serde_json::json!({"groupName": "training"}));
}
