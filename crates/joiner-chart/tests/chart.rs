//! The chart rendered as `helm upgrade --install joiner ... --namespace kube-system` renders it
//! for Karpenter's getting-started invocation, and checked the way the API server and the
//! controller will read it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use joiner_chart::{Chart, Release, RenderError};
use joiner_model::settings::Settings;
use serde_json::{Value, json};

/// Karpenter's getting-started `--set`s, with `joiner` for `karpenter`.
const SEED: &[&str] = &[
    "settings.clusterName=demo-cluster",
    "settings.interruptionQueue=demo-cluster",
    "controller.resources.requests.cpu=1",
    "controller.resources.requests.memory=1Gi",
    "controller.resources.limits.cpu=1",
    "controller.resources.limits.memory=1Gi",
];

const NAMESPACE: &str = "kube-system";

fn chart_dir() -> PathBuf {
    joiner_test_support::repo_root().join("charts/joiner")
}

fn chart() -> Chart {
    Chart::load(&chart_dir()).expect("the chart loads")
}

fn render_with(files: &[Value], sets: &[&str], release: &str) -> Result<Vec<Value>, RenderError> {
    let chart = chart();
    let values = chart.values(files, sets)?;
    let mut docs = Vec::new();
    for file in chart.render(&values, &Release::install(release, NAMESPACE))? {
        docs.extend(file.documents()?);
    }
    Ok(docs)
}

fn render(sets: &[&str]) -> Vec<Value> {
    render_with(&[], sets, "joiner").expect("the chart renders")
}

fn seed_plus(extra: &[&str]) -> Vec<String> {
    SEED.iter().chain(extra).map(|s| s.to_string()).collect()
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "exactly one {kind}");
    found[0]
}

fn named<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// The Role (and binding) reading the NVIDIA device plugin's ConfigMap.
const DEVICE_CONFIG_ROLE: &str = "joiner-device-plugin-config";
/// The Role (and binding) reading the GPU operator MIG manager's ConfigMap, in its namespace.
const MIG_CONFIG_ROLE: &str = "joiner-mig-manager-config";
const CLUSTER_DNS_ROLE: &str = "joiner-cluster-dns";

fn container(docs: &[Value]) -> &Value {
    &one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
}

#[test]
fn the_seed_install_renders_each_object_once_in_the_release_namespace() {
    let docs = render(SEED);
    let kinds: BTreeSet<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        BTreeSet::from([
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
        ])
    );
    // One of each, but for the Roles and RoleBindings of the device-plugin and MIG manager
    // ConfigMaps and the cluster DNS Service.
    assert_eq!(docs.len(), kinds.len() + 6);
    for d in &docs {
        let name = d["metadata"]["name"].as_str().unwrap_or_default();
        assert!(
            [
                "joiner",
                DEVICE_CONFIG_ROLE,
                MIG_CONFIG_ROLE,
                CLUSTER_DNS_ROLE
            ]
            .contains(&name),
            "{} {name}",
            d["kind"]
        );
        let cluster_scoped = matches!(
            d["kind"].as_str(),
            Some("ClusterRole" | "ClusterRoleBinding")
        );
        let expected_ns = if cluster_scoped {
            Value::Null
        } else if name == MIG_CONFIG_ROLE {
            // The GPU operator's namespace, where its MIG manager's ConfigMap lives.
            json!("gpu-operator")
        } else {
            json!(NAMESPACE)
        };
        assert_eq!(d["metadata"]["namespace"], expected_ns, "{}", d["kind"]);
        assert_eq!(
            d["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "Helm"
        );
    }
}

#[test]
fn the_deployment_runs_the_controller_command_with_the_seed_resources() {
    let docs = render(SEED);
    let c = container(&docs);
    assert_eq!(c["command"], json!(["joiner"]));
    assert_eq!(
        c["args"],
        json!([
            "controller",
            "--values",
            "/etc/joiner/values.yaml",
            "--cloud",
            "aws",
            "--metrics-addr",
            "0.0.0.0:8080",
            "--health-addr",
            "0.0.0.0:8081",
            "--leader-elect=true",
            "--log-format",
            "json",
            "--karpenter-lease",
            "kube-system/karpenter-leader-election",
            "--karpenter-lease",
            "karpenter/karpenter-leader-election"
        ])
    );
    let env: BTreeMap<&str, &Value> = c["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| Some((e["name"].as_str()?, e)))
        .collect();
    assert_eq!(
        env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    assert_eq!(
        env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    assert_eq!(
        c["resources"],
        json!({"requests": {"cpu": 1, "memory": "1Gi"}, "limits": {"cpu": 1, "memory": "1Gi"}})
    );
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "http"})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "http"})
    );
    assert_eq!(
        c["ports"],
        json!([
            {"name": "http-metrics", "containerPort": 8080, "protocol": "TCP"},
            {"name": "http", "containerPort": 8081, "protocol": "TCP"}
        ])
    );
    assert_eq!(
        c["image"],
        format!(
            "ghcr.io/joiner-dev/joiner:{}",
            chart().metadata["appVersion"].as_str().expect("appVersion")
        )
    );
    // The settings file is the ConfigMap's, mounted where the command reads it.
    assert_eq!(c["volumeMounts"][0]["mountPath"], "/etc/joiner");
    let pod = &one(&docs, "Deployment")["spec"]["template"]["spec"];
    let settings_volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == c["volumeMounts"][0]["name"])
        .expect("the mounted volume");
    assert_eq!(
        settings_volume["configMap"]["name"],
        one(&docs, "ConfigMap")["metadata"]["name"]
    );
    assert_eq!(
        pod["serviceAccountName"],
        one(&docs, "ServiceAccount")["metadata"]["name"]
    );
}

#[test]
fn the_controller_is_highly_available_and_stays_off_the_nodes_it_manages() {
    let docs = render(SEED);
    let deployment = one(&docs, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"];
    let pod_labels = &pod["metadata"]["labels"];
    assert_eq!(
        &deployment["spec"]["selector"]["matchLabels"], pod_labels,
        "the selector selects the pods"
    );
    let spec = &pod["spec"];
    assert_eq!(spec["priorityClassName"], "system-cluster-critical");
    assert_eq!(
        spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"][0],
        json!({"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"})
    );
    let anti =
        &spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(anti["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(&anti["labelSelector"]["matchLabels"], pod_labels);
    let spread = &spec["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(&spread["labelSelector"]["matchLabels"], pod_labels);

    let pdb = one(&docs, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], pod_labels);
    let service = one(&docs, "Service");
    assert_eq!(&service["spec"]["selector"], pod_labels);
    assert_eq!(service["spec"]["ports"][0]["port"], 8080);
}

/// Installed with no resources given, the controller is never a BestEffort pod (the first
/// evicted under node pressure): it requests CPU and memory, and has a memory limit but no CPU
/// limit, so it is never throttled.
#[test]
fn the_controller_requests_resources_when_none_are_given() {
    let docs = render(&["settings.clusterName=demo-cluster"]);
    assert_eq!(
        container(&docs)["resources"],
        json!({"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}})
    );
    let text = std::fs::read_to_string(chart_dir().join("Chart.yaml")).expect("Chart.yaml");
    let chart: Value = serde_saphyr::from_str(&text).expect("Chart.yaml parses");
    assert_eq!(
        chart["kubeVersion"], ">=1.30.0-0",
        "Karpenter's oldest supported Kubernetes"
    );
}

#[test]
fn the_configmap_holds_settings_the_controller_reads_without_warnings() {
    let docs = render(SEED);
    let text = one(&docs, "ConfigMap")["data"]["values.yaml"]
        .as_str()
        .expect("values.yaml is a string");
    let values: Value = serde_saphyr::from_str(text).expect("values.yaml is YAML");
    let (settings, warnings) = Settings::from_values(&values).expect("the controller accepts them");
    assert_eq!(settings.cluster_name.as_deref(), Some("demo-cluster"));
    assert_eq!(settings.interruption_queue.as_deref(), Some("demo-cluster"));
    assert!(
        warnings.is_empty(),
        "every setting the chart exposes is one the controller knows: {warnings:?}"
    );
    assert_eq!(settings.cluster.kubernetes_version, "1.36");
    assert!(
        settings.ignore_dra_requests,
        "DRA stays off by default, as in Karpenter"
    );

    // DRA on through the chart reaches the controller.
    let docs = render(
        &seed_plus(&["settings.enableDRA=true"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let text = one(&docs, "ConfigMap")["data"]["values.yaml"]
        .as_str()
        .expect("values.yaml");
    let values: Value = serde_saphyr::from_str(text).expect("YAML");
    let (settings, _) = Settings::from_values(&values).expect("accepted");
    assert!(settings.dra_nvidia_gpu && settings.dra_efa && !settings.ignore_dra_requests);
}

#[test]
fn a_settings_change_rolls_the_controller_pods() {
    let checksum = |docs: &[Value]| {
        one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/settings"]
            .clone()
    };
    let before = checksum(&render(SEED));
    let sets = seed_plus(&["settings.batchMaxDuration=20s"]);
    let after = checksum(&render(
        &sets.iter().map(String::as_str).collect::<Vec<_>>(),
    ));
    assert!(before.as_str().is_some_and(|s| s.len() == 64), "{before}");
    assert_ne!(before, after);
    let same = seed_plus(&["controller.resources.limits.cpu=2"]);
    assert_eq!(
        before,
        checksum(&render(
            &same.iter().map(String::as_str).collect::<Vec<_>>()
        )),
        "only settings changes touch the checksum"
    );
}

/// Where a grant applies: the ClusterRole, or the Role for the Lease in the release namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Cluster,
    Lease,
}

/// One verb the controller uses, and the call in the code that needs it.
struct Grant {
    scope: Scope,
    group: &'static str,
    resource: &'static str,
    verb: &'static str,
    call: &'static str,
}

const fn grant(
    scope: Scope,
    group: &'static str,
    resource: &'static str,
    verb: &'static str,
    call: &'static str,
) -> Grant {
    Grant {
        scope,
        group,
        resource,
        verb,
        call,
    }
}

const WATCH: &str = "joiner-kube registry.rs: one kube-rs watcher per kind (list, then watch)";

/// Every verb the chart grants, with the call that needs it. The chart must grant exactly
/// these: a verb not here is a permission nothing uses; one missing fails a call with 403.
const RBAC: &[Grant] = &[
    grant(Scope::Cluster, "", "pods", "list", WATCH),
    grant(Scope::Cluster, "", "pods", "watch", WATCH),
    grant(Scope::Cluster, "", "nodes", "list", WATCH),
    grant(Scope::Cluster, "", "nodes", "watch", WATCH),
    grant(Scope::Cluster, "apps", "daemonsets", "list", WATCH),
    grant(Scope::Cluster, "apps", "daemonsets", "watch", WATCH),
    grant(
        Scope::Cluster,
        "policy",
        "poddisruptionbudgets",
        "list",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "policy",
        "poddisruptionbudgets",
        "watch",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "storage.k8s.io",
        "volumeattachments",
        "list",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "storage.k8s.io",
        "volumeattachments",
        "watch",
        WATCH,
    ),
    grant(Scope::Cluster, "", "persistentvolumeclaims", "list", WATCH),
    grant(Scope::Cluster, "", "persistentvolumeclaims", "watch", WATCH),
    grant(Scope::Cluster, "", "persistentvolumes", "list", WATCH),
    grant(Scope::Cluster, "", "persistentvolumes", "watch", WATCH),
    grant(
        Scope::Cluster,
        "storage.k8s.io",
        "storageclasses",
        "list",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "storage.k8s.io",
        "storageclasses",
        "watch",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "karpenter.sh",
        "nodeoverlays",
        "list",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "karpenter.sh",
        "nodeoverlays",
        "watch",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "karpenter.sh",
        "nodeoverlays/status",
        "update",
        "joiner-controller nodeoverlay_status.rs: ValidationSucceeded and Ready, on change",
    ),
    grant(Scope::Cluster, "", "podtemplates", "list", WATCH),
    grant(Scope::Cluster, "", "podtemplates", "watch", WATCH),
    grant(
        Scope::Cluster,
        "autoscaling.x-k8s.io",
        "capacitybuffers",
        "list",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "autoscaling.x-k8s.io",
        "capacitybuffers",
        "watch",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "autoscaling.x-k8s.io",
        "capacitybuffers/status",
        "update",
        "joiner-controller buffer_status.rs: replicas, ReadyForProvisioning and Provisioning, on change",
    ),
    grant(
        Scope::Cluster,
        "apps",
        "deployments",
        "get",
        "joiner-controller buffer_status.rs scale_targets: a CapacityBuffer's scalableRef",
    ),
    grant(
        Scope::Cluster,
        "apps",
        "statefulsets",
        "get",
        "joiner-controller buffer_status.rs scale_targets: a CapacityBuffer's scalableRef",
    ),
    grant(
        Scope::Cluster,
        "apps",
        "replicasets",
        "get",
        "joiner-controller buffer_status.rs scale_targets: a CapacityBuffer's scalableRef",
    ),
    grant(Scope::Cluster, "karpenter.sh", "nodepools", "list", WATCH),
    grant(Scope::Cluster, "karpenter.sh", "nodepools", "watch", WATCH),
    grant(Scope::Cluster, "karpenter.sh", "nodeclaims", "list", WATCH),
    grant(Scope::Cluster, "karpenter.sh", "nodeclaims", "watch", WATCH),
    grant(
        Scope::Cluster,
        "karpenter.k8s.aws",
        "ec2nodeclasses",
        "list",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "karpenter.k8s.aws",
        "ec2nodeclasses",
        "watch",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "resource.k8s.io",
        "deviceclasses",
        "list",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "resource.k8s.io",
        "deviceclasses",
        "watch",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "resource.k8s.io",
        "devicetaintrules",
        "list",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "resource.k8s.io",
        "devicetaintrules",
        "watch",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "resource.k8s.io",
        "resourceclaims",
        "list",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "resource.k8s.io",
        "resourceclaims",
        "watch",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "resource.k8s.io",
        "resourceclaimtemplates",
        "list",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "resource.k8s.io",
        "resourceclaimtemplates",
        "watch",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "resource.k8s.io",
        "resourceslices",
        "list",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "resource.k8s.io",
        "resourceslices",
        "watch",
        WATCH,
    ),
    grant(
        Scope::Cluster,
        "karpenter.sh",
        "nodeclaims",
        "get",
        "KubeStore::get_uncached (GET past the cache): what a create that timed out or answered AlreadyExists left",
    ),
    grant(
        Scope::Cluster,
        "karpenter.sh",
        "nodeclaims",
        "create",
        "KubeStore::create (POST): provisioning and disruption replacements",
    ),
    grant(
        Scope::Cluster,
        "karpenter.sh",
        "nodeclaims",
        "update",
        "KubeStore::update (PUT): lifecycle, drift, interruption, disruption annotations and finalizers",
    ),
    grant(
        Scope::Cluster,
        "karpenter.sh",
        "nodeclaims",
        "delete",
        "KubeStore::delete (DELETE): lifecycle, garbage collection, drained NodeClaims",
    ),
    grant(
        Scope::Cluster,
        "karpenter.sh",
        "nodeclaims/status",
        "update",
        "KubeStore write_status (PUT .../status): NodeClaim conditions, providerID, allocatable",
    ),
    grant(
        Scope::Cluster,
        "karpenter.sh",
        "nodepools/status",
        "update",
        "KubeStore::update of a status-only kind (PUT .../status): NodePool nodes, resources, conditions",
    ),
    grant(
        Scope::Cluster,
        "karpenter.k8s.aws",
        "ec2nodeclasses/status",
        "update",
        "KubeStore::update of a status-only kind (PUT .../status): EC2NodeClass subnets, security groups, AMIs, instance profile, conditions",
    ),
    grant(
        Scope::Cluster,
        "",
        "nodes",
        "update",
        "KubeStore::update (PUT): registration labels and taints, the disruption taint",
    ),
    grant(
        Scope::Cluster,
        "",
        "nodes",
        "delete",
        "KubeStore::delete (DELETE): a drained NodeClaim's Node",
    ),
    grant(
        Scope::Cluster,
        "",
        "pods/eviction",
        "create",
        "KubeStore::evict (POST pods/<name>/eviction): drains",
    ),
    grant(
        Scope::Cluster,
        "",
        "pods",
        "delete",
        "KubeStore::delete::<Pod> (DELETE): pods left past terminationGracePeriod",
    ),
    grant(
        Scope::Cluster,
        "events.k8s.io",
        "events",
        "create",
        "joiner-runtime events.rs: kube Recorder::publish, a new event",
    ),
    grant(
        Scope::Cluster,
        "events.k8s.io",
        "events",
        "patch",
        "joiner-runtime events.rs: kube Recorder::publish, a repeated event's series",
    ),
    grant(
        Scope::Lease,
        "coordination.k8s.io",
        "leases",
        "get",
        "joiner-runtime lease/api.rs: LeaseApi::get, every try",
    ),
    grant(
        Scope::Cluster,
        "coordination.k8s.io",
        "leases",
        "get",
        "joiner-runtime rivals.rs: Karpenter's Lease, every 5 s (only that name)",
    ),
    grant(
        Scope::Cluster,
        "coordination.k8s.io",
        "leases",
        "list",
        "joiner-runtime rivals.rs: Leases named like Joiner's own in other namespaces, every 5 s",
    ),
    grant(
        Scope::Lease,
        "coordination.k8s.io",
        "leases",
        "create",
        "joiner-runtime lease/api.rs: LeaseApi::write, when the Lease is missing",
    ),
    grant(
        Scope::Lease,
        "coordination.k8s.io",
        "leases",
        "update",
        "joiner-runtime lease/api.rs: LeaseApi::write, acquire, renew and release (PUT)",
    ),
];

#[test]
fn rbac_grants_exactly_what_the_controller_calls_and_no_wildcards() {
    let docs = render(SEED);
    let rules_of = |kind: &str, name: &str| -> Vec<Value> {
        named(&docs, kind, name)["rules"]
            .as_array()
            .expect("rules")
            .clone()
    };
    let cluster = rules_of("ClusterRole", "joiner");
    let namespaced = rules_of("Role", "joiner");
    let device_config = rules_of("Role", DEVICE_CONFIG_ROLE);
    let cluster_dns = rules_of("Role", CLUSTER_DNS_ROLE);
    for rule in cluster
        .iter()
        .chain(&namespaced)
        .chain(&device_config)
        .chain(&cluster_dns)
    {
        for field in ["apiGroups", "resources", "verbs"] {
            for entry in rule[field].as_array().expect("a list") {
                assert_ne!(entry, "*", "wildcard in {rule}");
            }
        }
    }
    // Exactly the verbs of the table, cluster-wide and in the release namespace.
    let granted = |rules: &[Value]| -> BTreeSet<(String, String, String)> {
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .expect("a list")
                .iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        };
        let mut out = BTreeSet::new();
        for rule in rules {
            for g in strings(&rule["apiGroups"]) {
                for r in strings(&rule["resources"]) {
                    for v in strings(&rule["verbs"]) {
                        out.insert((g.clone(), r.clone(), v));
                    }
                }
            }
        }
        out
    };
    let wanted = |scope: Scope| -> BTreeSet<(String, String, String)> {
        RBAC.iter()
            .filter(|g| g.scope == scope)
            .map(|g| {
                (
                    g.group.to_string(),
                    g.resource.to_string(),
                    g.verb.to_string(),
                )
            })
            .collect()
    };
    for (scope, rules) in [(Scope::Cluster, &cluster), (Scope::Lease, &namespaced)] {
        let (have, want) = (granted(rules), wanted(scope));
        let extra: Vec<_> = have.difference(&want).collect();
        let missing: Vec<String> = want
            .difference(&have)
            .map(|(g, r, v)| {
                let call = RBAC
                    .iter()
                    .find(|x| x.group == g && x.resource == r && x.verb == v)
                    .map_or("", |x| x.call);
                format!("{v} {g}/{r} (for {call})")
            })
            .collect();
        assert!(
            extra.is_empty(),
            "{scope:?} grants verbs no call needs: {extra:?}"
        );
        assert!(
            missing.is_empty(),
            "{scope:?} lacks verbs the code calls: {missing:?}"
        );
    }
    let grants = granted(&cluster);
    for r in ["secrets", "configmaps"] {
        assert!(
            !grants.iter().any(|(g, res, _)| g.is_empty() && res == r),
            "no {r} cluster-wide"
        );
    }
    // Cluster-wide, only Karpenter's Lease may be read and Leases named like Joiner's own
    // listed (to stand aside while another controller runs); the controller's own is read and
    // written only in the release namespace.
    let leases: Vec<&Value> = cluster
        .iter()
        .filter(|r| r["resources"] == json!(["leases"]))
        .collect();
    assert_eq!(
        leases,
        [
            &json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
            "resourceNames": ["karpenter-leader-election"], "verbs": ["get"]}),
            &json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
            "resourceNames": ["joiner-leader-election"], "verbs": ["list"]})
        ]
    );
    assert_eq!(
        named(&docs, "Role", "joiner")["metadata"]["namespace"],
        NAMESPACE
    );
    // The one ConfigMap the controller reads, by name, in its own namespace.
    assert_eq!(
        device_config,
        [json!({"apiGroups": [""], "resources": ["configmaps"],
            "resourceNames": ["nvidia-device-plugin"], "verbs": ["list", "watch"]})]
    );
    assert_eq!(
        named(&docs, "Role", DEVICE_CONFIG_ROLE)["metadata"]["namespace"],
        "kube-system"
    );
    // The cluster DNS Service, read once by name at start-up (`live::cluster_dns`).
    assert_eq!(
        rules_of("Role", CLUSTER_DNS_ROLE),
        [json!({"apiGroups": [""], "resources": ["services"],
            "resourceNames": ["kube-dns"], "verbs": ["get"]})]
    );
    assert_eq!(
        named(&docs, "Role", CLUSTER_DNS_ROLE)["metadata"]["namespace"],
        "kube-system"
    );
    for rule in &namespaced {
        assert_eq!(rule["resources"], json!(["leases"]));
        assert_eq!(rule["apiGroups"], json!(["coordination.k8s.io"]));
        // Reads and writes only of the controller's own Lease; a create cannot name it.
        if rule["verbs"] != json!(["create"]) {
            assert_eq!(rule["resourceNames"], json!(["joiner-leader-election"]));
        }
    }
    for (binding, name) in [
        ("ClusterRoleBinding", "joiner"),
        ("RoleBinding", "joiner"),
        ("RoleBinding", DEVICE_CONFIG_ROLE),
        ("RoleBinding", CLUSTER_DNS_ROLE),
    ] {
        let binding = named(&docs, binding, name);
        assert_eq!(binding["roleRef"]["name"], name);
        let subject = &binding["subjects"][0];
        assert_eq!(subject["kind"], "ServiceAccount");
        assert_eq!(
            subject["name"],
            one(&docs, "ServiceAccount")["metadata"]["name"]
        );
        assert_eq!(subject["namespace"], NAMESPACE);
    }
}

#[test]
fn a_missing_cluster_name_fails_the_install() {
    let e = render_with(&[], &["controller.resources.requests.cpu=1"], "joiner")
        .expect_err("no clusterName")
        .to_string();
    assert!(e.contains("settings.clusterName is required"), "{e}");
}

/// Each case is rendered by the chart and read by the controller's settings reader: the chart
/// must refuse exactly what the controller refuses, naming the same setting.
#[test]
fn render_time_validation_mirrors_the_controller() {
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (json!({}), vec!["settings.enableDRA=true"]),
        (
            json!({}),
            vec!["settings.enableDRA=true", "settings.ignoreDRARequests=true"],
        ),
        (
            json!({}),
            vec![
                "settings.enableDRA=true",
                "settings.ignoreDRARequests=false",
            ],
        ),
        (
            json!({}),
            vec![
                "settings.enableDRA=true",
                "settings.awsFeatureGates.draEFA=false",
            ],
        ),
        (
            json!({}),
            vec![
                "settings.enableDRA=true",
                "settings.awsFeatureGates.draNVIDIAGPU=true",
            ],
        ),
        (
            json!({}),
            vec!["settings.awsFeatureGates.draNVIDIAGPU=true"],
        ),
        (
            json!({}),
            vec![
                "settings.ignoreDRARequests=true",
                "settings.awsFeatureGates.draNVIDIAGPU=true",
            ],
        ),
        (
            json!({}),
            vec![
                "settings.ignoreDRARequests=true",
                "settings.awsFeatureGates.draEFA=true",
            ],
        ),
        (json!({}), vec!["settings.enableDRA=maybe"]),
        (json!({}), vec!["settings.batchIdleDuration=500ms"]),
        (json!({}), vec!["settings.batchIdleDuration=1h30m"]),
        (json!({}), vec!["settings.batchIdleDuration=10"]),
        (json!({}), vec!["settings.batchMaxDuration=1d"]),
        (
            json!({"settings": {"cluster": {"kubernetesVersion": 1.3}}}),
            vec![],
        ),
        (
            json!({}),
            vec!["settings.cluster.kubernetesVersion=v1.34.2"],
        ),
        (json!({}), vec!["settings.cluster.kubernetesVersion=latest"]),
        (
            json!({}),
            vec!["settings.nvidiaDevicePlugin.configMap=gpu-operator/time-slicing"],
        ),
        (
            json!({}),
            vec!["settings.nvidiaDevicePlugin.configMap=just-a-name"],
        ),
        (
            json!({}),
            vec!["settings.nvidiaMigManager.configMap=gpu-operator/custom-mig-config"],
        ),
        (
            json!({}),
            vec!["settings.nvidiaMigManager.configMap=just-a-name"],
        ),
        (
            json!({"settings": {"vmMemoryOverheadPercent": 0.1}}),
            vec![],
        ),
        (json!({}), vec!["settings.vmMemoryOverheadPercent=2"]),
        (
            json!({}),
            vec!["settings.featureGates.spotToSpotConsolidation=true"],
        ),
        (
            json!({}),
            vec!["settings.featureGates.spotToSpotConsolidation=maybe"],
        ),
        (
            json!({}),
            vec!["settings.cluster.featureGates.DRAConsumableCapacity=yes"],
        ),
        (json!({}), vec!["settings.zones={us-west-2a,us-west-2b}"]),
        (json!({}), vec!["settings.zones=us-west-2a"]),
    ];
    let chart = chart();
    let mut failures = 0;
    for (file, sets) in cases {
        let all: Vec<String> = seed_plus(&sets);
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let values = chart
            .values(std::slice::from_ref(&file), &all)
            .expect("values merge");
        let controller = Settings::from_values(&values);
        let rendered = render_with(std::slice::from_ref(&file), &all, "joiner");
        match (&controller, &rendered) {
            (Ok(_), Ok(_)) => {}
            (Err(c), Err(r)) => {
                failures += 1;
                // The setting the controller names (`settings.x.y: ...`) is named by the chart.
                let c = c.to_string();
                let key = c.split(':').next().unwrap_or_default();
                let r = r.to_string();
                assert!(
                    r.contains(key),
                    "{file} {sets:?}: the chart's message {r:?} does not name {key:?}"
                );
            }
            _ => panic!(
                "{file} {sets:?}: controller says {:?}, chart says {:?}",
                controller.map(|_| ()),
                rendered.map(|_| ())
            ),
        }
    }
    assert_eq!(failures, 17, "the table covers refusals and acceptances");
}

#[test]
fn enable_dra_with_ignore_dra_requests_fails_with_a_clear_message() {
    let sets = seed_plus(&["settings.enableDRA=true", "settings.ignoreDRARequests=true"]);
    let e = render_with(
        &[],
        &sets.iter().map(String::as_str).collect::<Vec<_>>(),
        "joiner",
    )
    .expect_err("refused")
    .to_string();
    assert!(
        e.contains("settings.enableDRA cannot be combined with settings.ignoreDRARequests"),
        "{e}"
    );
    assert!(
        e.contains("set either enableDRA or the individual settings"),
        "{e}"
    );
}

#[test]
fn irsa_service_monitor_and_names_follow_the_values() {
    let sets = seed_plus(&[
        "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::111122223333:role/joiner",
        "serviceMonitor.enabled=true",
        "serviceMonitor.additionalLabels.release=prometheus",
        "podDisruptionBudget.name=joiner-pdb",
        "controller.image.digest=sha256:abc",
        "controller.metrics.port=9090",
        "settings.nvidiaDevicePlugin.configMap=gpu-operator/time-slicing-config",
    ]);
    let docs = render_with(
        &[],
        &sets.iter().map(String::as_str).collect::<Vec<_>>(),
        "prod",
    )
    .expect("renders");
    let sa = one(&docs, "ServiceAccount");
    assert_eq!(sa["metadata"]["name"], "prod-joiner");
    assert_eq!(
        sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::111122223333:role/joiner"
    );
    let monitor = one(&docs, "ServiceMonitor");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "http-metrics");
    assert_eq!(
        &monitor["spec"]["selector"]["matchLabels"],
        &one(&docs, "Service")["spec"]["selector"]
    );
    assert_eq!(
        one(&docs, "PodDisruptionBudget")["metadata"]["name"],
        "joiner-pdb"
    );
    let c = container(&docs);
    assert!(
        c["image"]
            .as_str()
            .is_some_and(|i| i.ends_with("@sha256:abc"))
    );
    assert_eq!(c["args"][6], "0.0.0.0:9090");
    assert_eq!(one(&docs, "Service")["spec"]["ports"][0]["port"], 9090);
    let device_config = named(&docs, "Role", "prod-joiner-device-plugin-config");
    assert_eq!(device_config["metadata"]["namespace"], "gpu-operator");
    assert_eq!(
        device_config["rules"][0]["resourceNames"],
        json!(["time-slicing-config"])
    );
    let mig_config = named(&docs, "Role", "prod-joiner-mig-manager-config");
    assert_eq!(mig_config["metadata"]["namespace"], "gpu-operator");
    assert_eq!(
        mig_config["rules"][0]["resourceNames"],
        json!(["default-mig-parted-config"])
    );

    // Without serviceMonitor.enabled there is no ServiceMonitor (the CRD may not exist).
    assert!(!render(SEED).iter().any(|d| d["kind"] == "ServiceMonitor"));
}

/// Every leaf of `values.yaml` (a scalar, a list or an empty map) must be read by a template:
/// either its own path or a map above it rendered whole (`toYaml .Values.settings`).
#[test]
fn every_value_in_values_yaml_is_used_by_a_template() {
    let chart = chart();
    let reference = regex::Regex::new(r"\.Values((?:\.[A-Za-z0-9_]+)+)").expect("regex");
    let mut used = BTreeSet::new();
    for (_, text) in &chart.templates {
        for m in reference.captures_iter(text) {
            used.insert(m[1].trim_start_matches('.').to_string());
        }
    }
    let mut leaves = Vec::new();
    collect_leaves(&chart.default_values, "", &mut leaves);
    assert!(leaves.len() > 40, "{leaves:?}");
    let unused: Vec<&String> = leaves
        .iter()
        .map(|(leaf, _)| leaf)
        .filter(|leaf| {
            !used
                .iter()
                .any(|u| *leaf == u || leaf.starts_with(&format!("{u}.")))
        })
        .collect();
    assert!(unused.is_empty(), "values no template reads: {unused:?}");
}

/// `(dotted path, default)` of every scalar, list and empty map in the values.
fn collect_leaves(v: &Value, path: &str, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, sub) in m {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                collect_leaves(sub, &p, out);
            }
        }
        _ => out.push((path.to_string(), v.clone())),
    }
}

/// The chart README's values table lists every leaf of `values.yaml` with its default.
#[test]
fn the_chart_readme_documents_every_value_with_its_default() {
    let chart = chart();
    let readme = std::fs::read_to_string(chart_dir().join("README.md")).expect("README");
    let rows: BTreeMap<&str, &str> = readme
        .lines()
        .filter_map(|l| {
            let mut cells = l.strip_prefix("| `")?.splitn(2, "` | `");
            Some((cells.next()?, cells.next()?.split("` |").next()?))
        })
        .collect();
    let mut leaves = Vec::new();
    collect_leaves(&chart.default_values, "", &mut leaves);
    for (leaf, value) in &leaves {
        let documented = rows.get(leaf.as_str());
        assert!(documented.is_some(), "{leaf} is missing from the README");
        let documented: Value = documented
            .and_then(|d| serde_json::from_str(d).ok())
            .unwrap_or(Value::Null);
        assert_eq!(&documented, value, "{leaf}: README default differs");
    }
    assert_eq!(
        rows.len(),
        leaves.len(),
        "the README lists values that do not exist"
    );
}

#[test]
fn the_install_notes_name_the_release_and_the_crd_upgrade_step() {
    let chart = chart();
    let values = chart.values(&[], SEED).expect("values");
    let notes = chart
        .notes(&values, &Release::install("joiner", NAMESPACE))
        .expect("renders")
        .expect("the chart has notes");
    assert!(notes.contains("for cluster demo-cluster"), "{notes}");
    assert!(notes.contains("logs deploy/joiner"), "{notes}");
    assert!(
        notes.contains("kubectl apply --server-side -f charts/joiner/crds/"),
        "{notes}"
    );
}

/// Every optional value, set, lands where Kubernetes reads it (and the result is still YAML).
#[test]
fn optional_values_reach_the_pod_spec() {
    let file = json!({
        "additionalLabels": {"team": "platform"},
        "additionalAnnotations": {"owner": "sre"},
        "serviceAccount": {"create": false, "name": "existing-sa"},
        "service": {"annotations": {"prometheus.io/scrape": "true"}},
        "podLabels": {"tier": "control"},
        "podAnnotations": {"ad.datadoghq.com/tags": "{}"},
        "imagePullSecrets": [{"name": "regcred"}],
        "terminationGracePeriodSeconds": 60,
        "dnsPolicy": "Default",
        "dnsConfig": {"options": [{"name": "ndots", "value": "2"}]},
        "hostNetwork": true,
        "extraVolumes": [{"name": "tmp", "emptyDir": {}}],
        "logLevel": "debug",
        "strategy": {"type": "Recreate"},
        "controller": {
            "image": {"repository": "registry.example/joiner", "tag": "dev"},
            "env": [{"name": "AWS_REGION", "value": "eu-west-1"}],
            "envFrom": [{"configMapRef": {"name": "proxy"}}],
            "extraVolumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            "healthProbe": {"port": 9443}
        },
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone"}}]}},
        // Helm merges maps (`{}` would keep the default's keys): null removes one.
        "tolerations": [],
        "nodeSelector": null
    });
    let docs = render_with(&[file], SEED, "joiner").expect("renders");
    assert!(!docs.iter().any(|d| d["kind"] == "ServiceAccount"));
    let deployment = one(&docs, "Deployment");
    assert_eq!(deployment["metadata"]["labels"]["team"], "platform");
    assert_eq!(deployment["metadata"]["annotations"]["owner"], "sre");
    assert_eq!(deployment["spec"]["strategy"], json!({"type": "Recreate"}));
    let pod = &deployment["spec"]["template"];
    assert_eq!(pod["metadata"]["labels"]["tier"], "control");
    assert_eq!(
        pod["metadata"]["annotations"]["ad.datadoghq.com/tags"],
        "{}"
    );
    let spec = &pod["spec"];
    assert_eq!(spec["serviceAccountName"], "existing-sa");
    assert_eq!(spec["imagePullSecrets"], json!([{"name": "regcred"}]));
    assert_eq!(spec["terminationGracePeriodSeconds"], 60);
    assert_eq!(spec["dnsPolicy"], "Default");
    assert_eq!(spec["dnsConfig"]["options"][0]["name"], "ndots");
    assert_eq!(spec["hostNetwork"], true);
    assert_eq!(spec["volumes"][1]["name"], "tmp");
    assert!(spec["nodeSelector"].is_null() && spec["tolerations"].is_null());
    // Values maps merge: the default node affinity and required anti-affinity stay, the
    // preferred term is added and passed through.
    assert_eq!(
        spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"][0]["key"],
        "karpenter.sh/nodepool"
    );
    let anti = &spec["affinity"]["podAntiAffinity"];
    assert_eq!(
        anti["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"],
        "kubernetes.io/hostname"
    );
    assert_eq!(
        anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"],
        1
    );
    let c = &spec["containers"][0];
    assert_eq!(c["image"], "registry.example/joiner:dev");
    assert_eq!(c["args"][8], "0.0.0.0:9443");
    assert_eq!(c["ports"][1]["containerPort"], 9443);
    let env: Vec<&str> = c["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(
        env,
        ["POD_NAME", "POD_NAMESPACE", "JOINER_LOG", "AWS_REGION"]
    );
    assert_eq!(c["env"][2]["value"], "debug");
    assert_eq!(c["envFrom"][0]["configMapRef"]["name"], "proxy");
    assert_eq!(c["volumeMounts"][1]["mountPath"], "/tmp");
    assert_eq!(
        one(&docs, "Service")["metadata"]["annotations"]["prometheus.io/scrape"],
        "true"
    );
    for binding in docs.iter().filter(|d| {
        d["kind"]
            .as_str()
            .is_some_and(|k| k.ends_with("RoleBinding"))
    }) {
        assert_eq!(binding["subjects"][0]["name"], "existing-sa");
    }

    // serviceAccount.create=false needs a name.
    let e = render_with(
        &[json!({"serviceAccount": {"create": false}})],
        SEED,
        "joiner",
    )
    .expect_err("no name")
    .to_string();
    assert!(e.contains("serviceAccount.name is required"), "{e}");
}

/// Karpenter v1.14.1's own default values file (kept in `tests/data` with its source), installed
/// as Joiner: it renders, Joiner's image stays, what the chart does not use is listed with why,
/// and the controller reads the settings without a warning.
#[test]
fn a_values_file_written_for_karpenter_installs_joiner() {
    let text = std::fs::read_to_string(
        joiner_test_support::repo_root()
            .join("crates/joiner-chart/tests/data/karpenter-v1.14.1-values.yaml"),
    )
    .expect("Karpenter's values");
    let mut file: Value = serde_saphyr::from_str(&text).expect("YAML");
    let chart = chart();
    let unused = joiner_chart::karpenter::adopt(&mut file, &chart.default_values);
    let listed: BTreeMap<&str, &str> = unused.iter().map(|u| (u.path.as_str(), u.why)).collect();
    for key in [
        "controller.image.repository",
        "controller.image.digest",
        "schedulerName",
        "settings.enableZonalShift",
        "settings.amiRefreshInterval",
        "logOutputPaths",
    ] {
        assert!(listed.contains_key(key), "{key} not listed: {listed:#?}");
    }
    assert!(listed.values().all(|why| !why.is_empty()));
    // Keys the chart shares with Karpenter's are used, not listed.
    for key in [
        "replicas",
        "settings.batchMaxDuration",
        "nodeSelector",
        "podSecurityContext",
    ] {
        assert!(!listed.keys().any(|k| k.starts_with(key)), "{key} listed");
    }
    // Empty Karpenter defaults (`additionalClusterRoleRules: []`) change nothing: not listed.
    assert!(!listed.contains_key("additionalClusterRoleRules"));

    let docs =
        render_with(&[file], &["settings.clusterName=demo-cluster"], "joiner").expect("renders");
    let image = container(&docs)["image"].as_str().expect("an image");
    assert!(image.starts_with("ghcr.io/joiner-dev/joiner"), "{image}");
    let pod = &one(&docs, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["fsGroup"], 65532);
    let values = one(&docs, "ConfigMap")["data"]["values.yaml"]
        .as_str()
        .expect("values");
    let values: Value = serde_saphyr::from_str(values).expect("YAML");
    let (settings, warnings) = Settings::from_values(&values).expect("accepted");
    assert_eq!(settings.cluster_name.as_deref(), Some("demo-cluster"));
    assert!(warnings.is_empty(), "{warnings:?}");
}

/// The plan-viewer ClusterRole grants `list` on exactly what `joiner plan --kubeconfig` lists
/// (the device plugin's ConfigMap by name), and nothing else; off by default.
#[test]
fn the_plan_viewer_role_grants_list_on_exactly_what_plan_kubeconfig_reads() {
    let off = render(SEED);
    assert!(
        !off.iter()
            .any(|d| d["metadata"]["name"] == "joiner-plan-viewer"),
        "created although planViewer.create is false"
    );
    let sets = seed_plus(&[
        "planViewer.create=true",
        "settings.nvidiaDevicePlugin.configMap=gpu-operator/time-slicing",
    ]);
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let subjects = json!({"planViewer": {"subjects": [
        {"kind": "Group", "name": "platform-team", "apiGroup": "rbac.authorization.k8s.io"}]}});
    let docs = render_with(&[subjects], &sets, "joiner").expect("the chart renders");
    let role = named(&docs, "ClusterRole", "joiner-plan-viewer");
    let mut granted = BTreeSet::new();
    for rule in role["rules"].as_array().expect("rules") {
        assert_eq!(rule["verbs"], json!(["list"]), "{rule}");
        let names: Vec<Option<String>> = match rule["resourceNames"].as_array() {
            Some(names) => names
                .iter()
                .map(|n| n.as_str().map(str::to_string))
                .collect(),
            None => vec![None],
        };
        for group in rule["apiGroups"].as_array().expect("apiGroups") {
            for resource in rule["resources"].as_array().expect("resources") {
                for name in &names {
                    granted.insert(joiner_kube::Listed {
                        group: group.as_str().expect("a group").to_string(),
                        plural: resource.as_str().expect("a resource").to_string(),
                        name: name.clone(),
                    });
                }
            }
        }
    }
    let (settings, _) = Settings::from_values(&json!({"settings": {
        "nvidiaDevicePlugin": {"configMap": "gpu-operator/time-slicing"}}}))
    .expect("settings");
    let listed: BTreeSet<_> =
        joiner_kube::listed(&joiner_kube::StoreOptions::from_settings(&settings))
            .into_iter()
            .collect();
    assert_eq!(granted, listed);
    let binding = named(&docs, "ClusterRoleBinding", "joiner-plan-viewer");
    assert_eq!(binding["roleRef"]["name"], "joiner-plan-viewer");
    assert_eq!(binding["subjects"][0]["name"], "platform-team");
}
