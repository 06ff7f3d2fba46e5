//! Volume topology through the snapshot and the planner: a pod's persistent volumes decide the
//! zone of the node launched for it, and what kube-scheduler would not schedule waits.

use super::tests::{POOL, plan_with};
use crate::plan::Plan;

/// A pod mounting claim `data`, with an optional node selector.
fn pod_with_claim(selector: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: db, namespace: ml}}\nspec:\n{selector}  \
         volumes:\n  - name: data\n    persistentVolumeClaim: {{claimName: data}}\n  \
         containers:\n  - name: c\n    resources: {{requests: {{cpu: 100m}}}}\n"
    )
}

/// Claim `data` bound to a volume the EBS CSI driver made in `zone`, as it writes them.
fn bound_volume(zone: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: ml
  annotations: {{pv.kubernetes.io/bind-completed: "yes"}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: gp3
  volumeName: pvc-0a1b2c3d
  resources: {{requests: {{storage: 100Gi}}}}
status: {{phase: Bound}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: pvc-0a1b2c3d}}
spec:
  accessModes: [ReadWriteOnce]
  capacity: {{storage: 100Gi}}
  csi: {{driver: ebs.csi.aws.com, volumeHandle: vol-0123456789abcdef0}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {{key: topology.ebs.csi.aws.com/zone, operator: In, values: [{zone}]}}
  storageClassName: gp3
"#
    )
}

/// StorageClass `gp3` with a binding mode and allowed topologies.
fn class(mode: &str, zones: &str) -> String {
    let topologies = if zones.is_empty() {
        String::new()
    } else {
        format!(
            "allowedTopologies:\n- matchLabelExpressions:\n  - {{key: topology.kubernetes.io/zone, values: [{zones}]}}\n"
        )
    };
    format!(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: gp3}}\nprovisioner: ebs.csi.aws.com\nvolumeBindingMode: {mode}\n{topologies}"
    )
}

const UNBOUND: &str = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data, namespace: ml}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: gp3\n  resources: {requests: {storage: 10Gi}}\nstatus: {phase: Pending}\n";

fn zones(plan: &Plan) -> Vec<&str> {
    plan.node_claims.iter().map(|c| c.zone.as_str()).collect()
}

fn reason(plan: &Plan) -> &str {
    plan.unschedulable
        .first()
        .map_or("<scheduled>", |u| u.reason.as_str())
}

#[test]
fn a_bound_volume_puts_the_node_in_its_zone() {
    for zone in ["us-east-1b", "us-east-1c"] {
        let plan = plan_with(&[POOL, &pod_with_claim(""), &bound_volume(zone)], false);
        assert_eq!(zones(&plan), [zone], "{:?}", plan.unschedulable);
    }
}

#[test]
fn an_unbound_claim_waiting_for_its_consumer_follows_its_class_topologies() {
    let plan = plan_with(
        &[
            POOL,
            &pod_with_claim(""),
            UNBOUND,
            &class("WaitForFirstConsumer", "us-east-1c"),
        ],
        false,
    );
    assert_eq!(zones(&plan), ["us-east-1c"], "{:?}", plan.unschedulable);
    // No allowed topologies: anywhere, as for a pod without volumes.
    let plan = plan_with(
        &[
            POOL,
            &pod_with_claim(""),
            UNBOUND,
            &class("WaitForFirstConsumer", ""),
        ],
        false,
    );
    assert_eq!(plan.node_claims.len(), 1, "{:?}", plan.unschedulable);
}

#[test]
fn what_the_scheduler_would_not_schedule_waits_with_its_reason() {
    // No claim at all.
    let plan = plan_with(&[POOL, &pod_with_claim("")], false);
    assert!(plan.node_claims.is_empty());
    assert_eq!(reason(&plan), "persistentvolumeclaim \"data\" not found");
    // An unbound claim of a class that binds at once: its volume comes first.
    let plan = plan_with(
        &[POOL, &pod_with_claim(""), UNBOUND, &class("Immediate", "")],
        false,
    );
    assert!(plan.node_claims.is_empty());
    assert!(
        reason(&plan).contains("unbound immediate"),
        "{}",
        reason(&plan)
    );
    // A class that does not exist.
    let plan = plan_with(&[POOL, &pod_with_claim(""), UNBOUND], false);
    assert!(
        reason(&plan).contains("storageclass.storage.k8s.io \"gp3\" not found"),
        "{}",
        reason(&plan)
    );
    // A bound claim whose volume is gone.
    let claim_only = bound_volume("us-east-1b");
    let claim_only = claim_only.split("---").next().unwrap_or_default();
    let plan = plan_with(&[POOL, &pod_with_claim(""), claim_only], false);
    assert_eq!(reason(&plan), "persistentvolume \"pvc-0a1b2c3d\" not found");
}

#[test]
fn a_node_selector_for_another_zone_than_the_volume_is_unschedulable() {
    let selector = "  nodeSelector: {topology.kubernetes.io/zone: us-east-1a}\n";
    let plan = plan_with(
        &[POOL, &pod_with_claim(selector), &bound_volume("us-east-1b")],
        false,
    );
    assert!(plan.node_claims.is_empty());
    assert!(
        reason(&plan).contains("topology.kubernetes.io/zone In [us-east-1b]")
            && reason(&plan).contains("rule out"),
        "{}",
        reason(&plan)
    );
}

#[test]
fn a_local_volumes_hostname_does_not_pin_a_new_node() {
    let local = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: ml}
spec: {volumeName: local-nvme, storageClassName: local}
status: {phase: Bound}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: local-nvme}
spec:
  capacity: {storage: 900Gi}
  local: {path: /mnt/nvme}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: [ip-10-0-1-1.ec2.internal]}
"#;
    let plan = plan_with(&[POOL, &pod_with_claim(""), local], false);
    assert_eq!(plan.node_claims.len(), 1, "{:?}", plan.unschedulable);
}

#[test]
fn an_ephemeral_volume_not_created_yet_follows_its_templates_class() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: scratch, namespace: ml}\nspec:\n  volumes:\n  - name: cache\n    ephemeral:\n      volumeClaimTemplate:\n        spec: {accessModes: [ReadWriteOnce], storageClassName: gp3, resources: {requests: {storage: 50Gi}}}\n  containers:\n  - name: c\n    resources: {requests: {cpu: 100m}}\n";
    let plan = plan_with(
        &[POOL, pod, &class("WaitForFirstConsumer", "us-east-1c")],
        false,
    );
    assert_eq!(zones(&plan), ["us-east-1c"], "{:?}", plan.unschedulable);
}
