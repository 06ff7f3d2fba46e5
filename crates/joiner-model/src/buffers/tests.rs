use super::*;
use crate::manifests::Manifests;
use crate::yaml::parse_documents;

fn manifests(text: &str) -> Manifests {
    let mut m = Manifests::default();
    for (origin, doc) in parse_documents("buffers.yaml", text).expect("YAML") {
        m.add_document(origin, doc).expect("the manifests read");
    }
    m
}

const TEMPLATE: &str = r#"
apiVersion: v1
kind: PodTemplate
metadata: {name: gpu-chunk, namespace: lab, generation: 3}
template:
  metadata: {labels: {app: lab}}
  spec:
    containers:
      - name: pause
        image: registry.k8s.io/pause:3.10
        resources: {requests: {cpu: "2", memory: 4Gi, nvidia.com/gpu: "1"}}
    volumes:
      - {name: data, persistentVolumeClaim: {claimName: data}}
      - {name: scratch, emptyDir: {}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: lab}
spec:
  replicas: 10
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - {name: web, image: web, resources: {requests: {cpu: "1"}}}
"#;

fn buffer(spec: &str) -> CapacityBuffer {
    let m = manifests(&format!(
        "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {{name: warm, namespace: lab}}\nspec: {spec}\n"
    ));
    m.capacity_buffers[0].object.clone()
}

fn replicas(spec: &str) -> Result<i32, Unresolved> {
    resolve(&buffer(spec), &manifests(TEMPLATE)).map(|r| r.replicas)
}

#[test]
fn chunks_are_the_larger_of_replicas_and_percentage_capped_by_limits() {
    assert_eq!(
        replicas("{podTemplateRef: {name: gpu-chunk}, replicas: 3}"),
        Ok(3)
    );
    // 8 GPUs hold 8 chunks of one GPU, 20 CPUs 10 chunks of two: the least.
    assert_eq!(
        replicas("{podTemplateRef: {name: gpu-chunk}, limits: {nvidia.com/gpu: 8, cpu: 20}}"),
        Ok(8)
    );
    assert_eq!(
        replicas("{podTemplateRef: {name: gpu-chunk}, replicas: 12, limits: {cpu: 20}}"),
        Ok(10)
    );
    // A resource the template does not request does not limit it.
    assert_eq!(
        replicas("{podTemplateRef: {name: gpu-chunk}, replicas: 4, limits: {example.com/foo: 1}}"),
        Ok(4)
    );
    // 25% of 10 replicas is 2.5: 3; the larger of that and 2.
    assert_eq!(
        replicas("{scalableRef: {kind: Deployment, name: web}, percentage: 25, replicas: 2}"),
        Ok(3)
    );
    assert_eq!(
        replicas("{scalableRef: {apiGroup: apps, kind: Deployment, name: web}, percentage: 1}"),
        Ok(1),
        "at least one when both are above zero"
    );
    assert_eq!(
        replicas("{scalableRef: {kind: Deployment, name: web}}"),
        Ok(0)
    );
}

#[test]
fn what_cannot_be_resolved_says_why_in_karpenters_words() {
    let r = replicas("{podTemplateRef: {name: nope}, replicas: 1}").unwrap_err();
    assert_eq!(r.reason, "PodTemplateNotFound");
    let r = replicas("{scalableRef: {kind: Deployment, name: nope}, replicas: 1}").unwrap_err();
    assert_eq!(r.reason, "ScalableRefNotFound");
    let r = replicas("{scalableRef: {kind: Job, name: web}, replicas: 1}").unwrap_err();
    assert_eq!(r.reason, "ResolutionFailed");
    let r = replicas("{scalableRef: {apiGroup: batch, kind: Job, name: web}, replicas: 1}")
        .unwrap_err();
    assert!(r.message.contains("batch"), "{r:?}");
    let r = replicas("{replicas: 1}").unwrap_err();
    assert_eq!(r.reason, "ResolutionFailed");
}

#[test]
fn virtual_pods_carry_the_template_but_no_volumes_of_their_own() {
    let b = buffer("{podTemplateRef: {name: gpu-chunk}, replicas: 2}");
    let resolved = resolve(&b, &manifests(TEMPLATE)).expect("resolved");
    assert_eq!(resolved.pod_template_generation, Some(3));
    let pods = virtual_pods(&b, &resolved);
    let names: Vec<_> = pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(names, ["capacity-buffer-warm-0", "capacity-buffer-warm-1"]);
    let p = &pods[0];
    assert_eq!(p.metadata.namespace.as_deref(), Some("lab"));
    assert_eq!(buffer_of(p).as_deref(), Some("lab/warm"));
    assert_eq!(
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app"))
            .map(String::as_str),
        Some("lab")
    );
    let volumes = p
        .spec
        .as_ref()
        .and_then(|s| s.volumes.clone())
        .unwrap_or_default();
    let kept: Vec<_> = volumes.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(kept, ["scratch"]);
    assert_eq!(buffer_of(&Pod::default()), None);
}

#[test]
fn the_controller_resolves_a_scalable_ref_from_the_workload_it_read_and_a_failed_read_says_so() {
    let mut m = Manifests::default();
    let b = buffer("{scalableRef: {kind: StatefulSet, name: db}, percentage: 50}");
    let target = |unreadable: Option<&str>| ScaleTarget {
        kind: "StatefulSet".into(),
        namespace: "lab".into(),
        name: "db".into(),
        replicas: 5,
        template: PodTemplateSpec::default(),
        unreadable: unreadable.map(str::to_string),
    };
    m.scale_targets.push(target(None));
    assert_eq!(resolve(&b, &m).map(|r| r.replicas), Ok(3));
    m.scale_targets = vec![target(Some("the API server is unavailable"))];
    let why = resolve(&b, &m).unwrap_err();
    assert_eq!(why.reason, "ResolutionFailed");
    assert!(why.message.contains("could not be read"), "{why:?}");
}
