//! Turning workload controllers into the pods they would create, so the planner schedules what
//! the cluster would actually run.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::wellknown::annotations;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::manifests::{Manifests, Sourced};

/// All pods the input implies: bare pods as given, then the pods of Deployments, ReplicaSets,
/// StatefulSets and Jobs (in that order, each kind in input order) that their controllers have
/// yet to create, named `<workload>-<ordinal>`.
///
/// Replica counts follow the controllers: `replicas` (default 1) for Deployments, ReplicaSets
/// and StatefulSets; for Jobs, `parallelism` (default 1) capped by the completions still to
/// come, and none while suspended. A dump of a live cluster holds the workloads and their pods
/// both, so the input's active pods that a workload owns (by `ownerReferences`) count towards
/// its replicas, and a Deployment counts the pods of its ReplicaSets in the input; those
/// ReplicaSets are not expanded again. Only spec and ownership are read: a dumped `status`
/// never changes what is expanded. DaemonSets are left out; see [`daemon_set_pod`].
pub fn expand_workloads(m: &Manifests) -> Vec<Sourced<Pod>> {
    let mut out = m.pods.clone();
    out.extend(workload_pods(m));
    out
}

/// The pods of [`expand_workloads`] that the input's workloads add, without the bare pods: a
/// caller that only reads them chains them after `m.pods` rather than copying every pod.
pub fn workload_pods(m: &Manifests) -> Vec<Sourced<Pod>> {
    let owned = OwnedPods::index(m);
    let mut out = Vec::new();
    for d in &m.deployments {
        let spec = Some(&d.object.spec);
        let replicas = spec.and_then(|s| s.replicas).unwrap_or(1);
        let running: usize = m
            .replica_sets
            .iter()
            .filter(|rs| owned_by(&rs.object.metadata, "Deployment", &d.object.metadata))
            .map(|rs| owned.active("ReplicaSet", &rs.object.metadata))
            .sum();
        let template = spec.map(|s| &s.template);
        let missing = remaining(replicas, running);
        expand(
            &mut out,
            &owned,
            d,
            "Deployment",
            &d.object.metadata,
            template,
            missing,
        );
    }
    for rs in &m.replica_sets {
        if owned_by_input_deployment(&rs.object.metadata, m) {
            continue;
        }
        let spec = Some(&rs.object.spec);
        let replicas = spec.and_then(|s| s.replicas).unwrap_or(1);
        let template = spec.and_then(|s| s.template.as_ref());
        let missing = remaining(replicas, owned.active("ReplicaSet", &rs.object.metadata));
        expand(
            &mut out,
            &owned,
            rs,
            "ReplicaSet",
            &rs.object.metadata,
            template,
            missing,
        );
    }
    for ss in &m.stateful_sets {
        let spec = Some(&ss.object.spec);
        let replicas = spec.and_then(|s| s.replicas).unwrap_or(1);
        let template = spec.map(|s| &s.template);
        let missing = remaining(replicas, owned.active("StatefulSet", &ss.object.metadata));
        expand(
            &mut out,
            &owned,
            ss,
            "StatefulSet",
            &ss.object.metadata,
            template,
            missing,
        );
    }
    for job in &m.jobs {
        let spec = job.object.spec.as_ref();
        let suspended = spec.and_then(|s| s.suspend).unwrap_or(false);
        let parallelism = spec.and_then(|s| s.parallelism).unwrap_or(1);
        let meta = &job.object.metadata;
        let to_complete = spec
            .and_then(|s| s.completions)
            .map(|c| remaining(c, owned.succeeded("Job", meta)));
        let count = match to_complete {
            _ if suspended => 0,
            Some(c) => parallelism.min(c),
            None => parallelism,
        };
        let missing = remaining(count, owned.active("Job", meta));
        let template = spec.map(|s| &s.template);
        expand(&mut out, &owned, job, "Job", meta, template, missing);
    }
    out
}

/// `want` less `have`, never below zero.
fn remaining(want: i32, have: usize) -> i32 {
    want.saturating_sub(i32::try_from(have).unwrap_or(i32::MAX))
        .max(0)
}

/// The input's pods by their controlling owner, and every pod name taken in each namespace (so
/// expanded pods never take the name of a pod that exists).
struct OwnedPods<'a> {
    /// (owner kind, namespace, owner name) → (active pods, succeeded pods).
    counts: HashMap<(&'a str, &'a str, &'a str), (usize, usize)>,
    names: HashSet<(&'a str, &'a str)>,
}

impl<'a> OwnedPods<'a> {
    fn index(m: &'a Manifests) -> Self {
        let mut counts: HashMap<_, (usize, usize)> = HashMap::new();
        let mut names = HashSet::new();
        for pod in &m.pods {
            let meta = &pod.object.metadata;
            let namespace = meta.namespace.as_deref().unwrap_or("default");
            names.insert((namespace, meta.name.as_deref().unwrap_or_default()));
            let phase = pod.object.status.as_ref().and_then(|s| s.phase.as_deref());
            for owner in meta.owner_references.iter().flatten() {
                let entry = counts
                    .entry((owner.kind.as_str(), namespace, owner.name.as_str()))
                    .or_default();
                match phase {
                    Some("Succeeded") => entry.1 += 1,
                    Some("Failed") => {}
                    _ if meta.deletion_timestamp.is_some() => {}
                    _ => entry.0 += 1,
                }
            }
        }
        OwnedPods { counts, names }
    }

    fn count(&self, kind: &str, owner: &ObjectMeta) -> (usize, usize) {
        let namespace = owner.namespace.as_deref().unwrap_or("default");
        let name = owner.name.as_deref().unwrap_or_default();
        self.counts
            .get(&(kind, namespace, name))
            .copied()
            .unwrap_or_default()
    }

    /// Pods of the owner that are running or about to: not finished, not being deleted.
    fn active(&self, kind: &str, owner: &ObjectMeta) -> usize {
        self.count(kind, owner).0
    }

    fn succeeded(&self, kind: &str, owner: &ObjectMeta) -> usize {
        self.count(kind, owner).1
    }

    fn taken(&self, namespace: &str, name: &str) -> bool {
        self.names.contains(&(namespace, name))
    }
}

fn owned_by(meta: &ObjectMeta, kind: &str, owner: &ObjectMeta) -> bool {
    meta.namespace == owner.namespace
        && meta
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == kind && Some(o.name.as_str()) == owner.name.as_deref())
}

fn owned_by_input_deployment(meta: &ObjectMeta, m: &Manifests) -> bool {
    m.deployments
        .iter()
        .any(|d| owned_by(meta, "Deployment", &d.object.metadata))
}

/// Adds `count` pods of the workload, numbering them from 0 and skipping names that pods of
/// the input already have.
fn expand<T>(
    out: &mut Vec<Sourced<Pod>>,
    owned: &OwnedPods<'_>,
    workload: &Sourced<T>,
    kind: &str,
    meta: &ObjectMeta,
    template: Option<&PodTemplateSpec>,
    count: i32,
) {
    let name = meta.name.as_deref().unwrap_or_default();
    let namespace = meta.namespace.as_deref().unwrap_or("default");
    let free = (0..)
        .map(|ordinal| format!("{name}-{ordinal}"))
        .filter(|pod| !owned.taken(namespace, pod));
    for pod_name in free.take(usize::try_from(count).unwrap_or(0)) {
        out.push(Sourced {
            origin: workload.origin.clone(),
            object: pod_from_template(kind, meta, template, &pod_name),
        });
    }
}

/// A pod as the controller would create it: the template's labels, annotations and spec, in the
/// workload's namespace, marked with its owner.
fn pod_from_template(
    kind: &str,
    owner: &ObjectMeta,
    template: Option<&PodTemplateSpec>,
    pod_name: &str,
) -> Pod {
    let tmeta = template.and_then(|t| t.metadata.as_ref());
    let mut annotations: BTreeMap<String, String> = tmeta
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default();
    annotations.insert(
        annotations::OWNER.to_string(),
        format!("{kind}/{}", owner.name.as_deref().unwrap_or_default()),
    );
    Pod {
        metadata: ObjectMeta {
            name: Some(pod_name.to_string()),
            namespace: Some(
                owner
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".to_string()),
            ),
            labels: tmeta.and_then(|m| m.labels.clone()),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(template.and_then(|t| t.spec.clone()).unwrap_or_default()),
        status: None,
    }
}

/// The pod a DaemonSet runs on `node_name`, named `<daemonset>-<node>`. It carries the
/// tolerations the DaemonSet controller adds to every daemon pod (so it runs on not-ready,
/// unreachable, pressured and cordoned nodes); it is not pinned to the node, as the caller
/// places it.
pub fn daemon_set_pod(ds: &DaemonSet, node_name: &str) -> Pod {
    let name = ds.metadata.name.as_deref().unwrap_or_default();
    let template = Some(&ds.spec.template);
    let mut pod = pod_from_template(
        "DaemonSet",
        &ds.metadata,
        template,
        &format!("{name}-{node_name}"),
    );
    if let Some(spec) = pod.spec.as_mut() {
        let host_network = spec.host_network.unwrap_or(false);
        let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
        for (key, effect) in daemon_tolerations(host_network) {
            let present = tolerations.iter().any(|t| {
                t.key.as_deref() == Some(key)
                    && t.operator.as_deref().unwrap_or("Equal") == "Exists"
                    && t.effect.as_deref() == Some(effect)
            });
            if !present {
                tolerations.push(Toleration {
                    key: Some(key.to_string()),
                    operator: Some("Exists".to_string()),
                    effect: Some(effect.to_string()),
                    ..Toleration::default()
                });
            }
        }
    }
    pod
}

fn daemon_tolerations(host_network: bool) -> Vec<(&'static str, &'static str)> {
    let mut t = vec![
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if host_network {
        t.push(("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::parse_documents;

    fn manifests(text: &str) -> Manifests {
        let mut m = Manifests::default();
        for (origin, doc) in parse_documents("w.yaml", text).unwrap() {
            m.add_document(origin, doc).unwrap();
        }
        m
    }

    fn names(pods: &[Sourced<Pod>]) -> Vec<String> {
        pods.iter()
            .map(|p| p.object.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    const WORKLOADS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: bare}
spec: {containers: [{name: c}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: learning-lab, namespace: lab}
spec:
  replicas: 2
  selector: {matchLabels: {app: learning-lab}}
  template:
    metadata:
      labels: {app: learning-lab}
      annotations: {note: kept}
    spec:
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
      containers:
      - name: lab
        resources: {requests: {nvidia.com/gpu: "1"}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  selector: {matchLabels: {app: db}}
  template: {metadata: {labels: {app: db}}, spec: {containers: [{name: c}]}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  parallelism: 4
  completions: 3
  template: {spec: {restartPolicy: Never, containers: [{name: c}]}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: paused}
spec:
  suspend: true
  template: {spec: {restartPolicy: Never, containers: [{name: c}]}}
"#;

    #[test]
    fn expands_replicas_with_ordinal_names() {
        let pods = expand_workloads(&manifests(WORKLOADS));
        assert_eq!(
            names(&pods),
            [
                "bare",
                "learning-lab-0",
                "learning-lab-1",
                "db-0",
                "train-0",
                "train-1",
                "train-2"
            ]
        );
    }

    #[test]
    fn generated_pods_carry_template_and_owner() {
        let pods = expand_workloads(&manifests(WORKLOADS));
        let p = &pods[1].object;
        assert_eq!(p.metadata.namespace.as_deref(), Some("lab"));
        let labels = p.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("app").map(String::as_str), Some("learning-lab"));
        let ann = p.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            ann.get(annotations::OWNER).map(String::as_str),
            Some("Deployment/learning-lab")
        );
        assert_eq!(ann.get("note").map(String::as_str), Some("kept"));
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.containers[0].name, "lab");
        assert_eq!(spec.tolerations.as_ref().map(Vec::len), Some(1));
        assert_eq!(pods[1].origin.document, 2);
        // The StatefulSet had no namespace: the default one.
        assert_eq!(
            pods[3].object.metadata.namespace.as_deref(),
            Some("default")
        );
    }

    #[test]
    fn replica_sets_of_input_deployments_are_not_counted_twice() {
        let m = manifests(
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec: {replicas: 1, selector: {}, template: {spec: {containers: []}}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-5d8f
  ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: web, uid: u}]
spec: {replicas: 1, selector: {}, template: {spec: {containers: []}}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: lone}
spec: {replicas: 2, selector: {}, template: {spec: {containers: []}}}
"#,
        );
        assert_eq!(names(&expand_workloads(&m)), ["web-0", "lone-0", "lone-1"]);
    }

    #[test]
    fn a_dump_of_workloads_and_their_pods_counts_each_pod_once() {
        // As `kubectl get deploy,rs,sts,job,pods -o yaml` writes a live cluster.
        let m = manifests(
            r#"
apiVersion: v1
kind: List
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: web, namespace: ml}
  spec: {replicas: 2, selector: {}, template: {spec: {containers: []}}}
  status: {replicas: 1, readyReplicas: 1}
- apiVersion: apps/v1
  kind: ReplicaSet
  metadata:
    name: web-5d8f
    namespace: ml
    ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: web, uid: u1, controller: true}]
  spec: {replicas: 1, selector: {}, template: {spec: {containers: []}}}
- apiVersion: v1
  kind: Pod
  metadata:
    name: web-5d8f-x2b9q
    namespace: ml
    ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-5d8f, uid: u2, controller: true}]
  spec: {nodeName: n1, containers: []}
  status: {phase: Running}
- apiVersion: apps/v1
  kind: StatefulSet
  metadata: {name: db, namespace: ml}
  spec: {replicas: 2, serviceName: db, selector: {}, template: {spec: {containers: []}}}
- apiVersion: v1
  kind: Pod
  metadata:
    name: db-0
    namespace: ml
    ownerReferences: [{apiVersion: apps/v1, kind: StatefulSet, name: db, uid: u3}]
  spec: {containers: []}
- apiVersion: batch/v1
  kind: Job
  metadata: {name: train, namespace: ml}
  spec: {parallelism: 2, completions: 3, template: {spec: {containers: []}}}
- apiVersion: v1
  kind: Pod
  metadata:
    name: train-a
    namespace: ml
    ownerReferences: [{apiVersion: batch/v1, kind: Job, name: train, uid: u4}]
  spec: {containers: []}
  status: {phase: Succeeded}
- apiVersion: v1
  kind: Pod
  metadata:
    name: train-b
    namespace: ml
    ownerReferences: [{apiVersion: batch/v1, kind: Job, name: train, uid: u4}]
  spec: {containers: []}
  status: {phase: Running}
"#,
        );
        // web: 2 wanted, 1 running through its ReplicaSet; db: db-0 exists, so db-1; train: 2 of
        // 3 completions to go, 1 running, so 1 more.
        assert_eq!(
            names(&expand_workloads(&m)),
            [
                "web-5d8f-x2b9q",
                "db-0",
                "train-a",
                "train-b",
                "web-0",
                "db-1",
                "train-0"
            ]
        );
    }

    #[test]
    fn daemon_set_pods_are_named_per_node_and_tolerate_node_conditions() {
        let m = manifests(
            r#"
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: dcgm, namespace: gpu}
spec:
  selector: {}
  template: {spec: {containers: [{name: c}], tolerations: [{key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute}]}}
"#,
        );
        let pod = daemon_set_pod(&m.daemon_sets[0].object, "ip-10-0-0-1");
        assert_eq!(pod.metadata.name.as_deref(), Some("dcgm-ip-10-0-0-1"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("gpu"));
        let tolerations = pod.spec.and_then(|s| s.tolerations).unwrap_or_default();
        assert_eq!(
            tolerations.len(),
            6,
            "the user's not-ready toleration is not repeated"
        );
        assert!(
            tolerations
                .iter()
                .any(|t| t.key.as_deref() == Some("node.kubernetes.io/unschedulable"))
        );
    }
}
