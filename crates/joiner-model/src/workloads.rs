//! Turning workload controllers into the pods they would create, so the planner schedules what
//! the cluster would actually run.

use std::collections::BTreeMap;

use crate::wellknown::annotations;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::manifests::{Manifests, Sourced};

/// All pods the input implies: bare pods as given, then the pods of Deployments, ReplicaSets,
/// StatefulSets and Jobs (in that order, each kind in input order), named `<workload>-<ordinal>`.
///
/// Replica counts follow the controllers: `replicas` (default 1) for Deployments, ReplicaSets
/// and StatefulSets; for Jobs, `parallelism` (default 1) capped by `completions`, and none while
/// suspended. A ReplicaSet owned by a Deployment of the input is skipped: the Deployment already
/// stands for its pods. DaemonSets are left out; see [`daemon_set_pod`].
pub fn expand_workloads(m: &Manifests) -> Vec<Sourced<Pod>> {
    let mut out = m.pods.clone();
    for d in &m.deployments {
        let spec = d.object.spec.as_ref();
        let replicas = spec.and_then(|s| s.replicas).unwrap_or(1);
        let template = spec.map(|s| &s.template);
        expand(
            &mut out,
            d,
            "Deployment",
            &d.object.metadata,
            template,
            replicas,
        );
    }
    for rs in &m.replica_sets {
        if owned_by_input_deployment(&rs.object.metadata, m) {
            continue;
        }
        let spec = rs.object.spec.as_ref();
        let replicas = spec.and_then(|s| s.replicas).unwrap_or(1);
        let template = spec.and_then(|s| s.template.as_ref());
        expand(
            &mut out,
            rs,
            "ReplicaSet",
            &rs.object.metadata,
            template,
            replicas,
        );
    }
    for ss in &m.stateful_sets {
        let spec = ss.object.spec.as_ref();
        let replicas = spec.and_then(|s| s.replicas).unwrap_or(1);
        let template = spec.map(|s| &s.template);
        expand(
            &mut out,
            ss,
            "StatefulSet",
            &ss.object.metadata,
            template,
            replicas,
        );
    }
    for job in &m.jobs {
        let spec = job.object.spec.as_ref();
        let suspended = spec.and_then(|s| s.suspend).unwrap_or(false);
        let parallelism = spec.and_then(|s| s.parallelism).unwrap_or(1);
        let count = match spec.and_then(|s| s.completions) {
            _ if suspended => 0,
            Some(c) => parallelism.min(c),
            None => parallelism,
        };
        let template = spec.map(|s| &s.template);
        expand(&mut out, job, "Job", &job.object.metadata, template, count);
    }
    out
}

fn owned_by_input_deployment(meta: &ObjectMeta, m: &Manifests) -> bool {
    meta.owner_references.iter().flatten().any(|o| {
        o.kind == "Deployment"
            && m.deployments.iter().any(|d| {
                d.object.metadata.name.as_deref() == Some(o.name.as_str())
                    && d.object.metadata.namespace == meta.namespace
            })
    })
}

fn expand<T>(
    out: &mut Vec<Sourced<Pod>>,
    workload: &Sourced<T>,
    kind: &str,
    meta: &ObjectMeta,
    template: Option<&PodTemplateSpec>,
    count: i32,
) {
    let name = meta.name.as_deref().unwrap_or_default();
    for ordinal in 0..count.max(0) {
        out.push(Sourced {
            origin: workload.origin.clone(),
            object: pod_from_template(kind, meta, template, &format!("{name}-{ordinal}")),
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
    let template = ds.spec.as_ref().map(|s| &s.template);
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
    use crate::manifests::parse_documents;

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
