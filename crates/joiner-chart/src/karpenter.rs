//! Values files written for Karpenter's chart, installed as Joiner. The Joiner chart names its
//! values as Karpenter's does, so most keys mean the same; [`adopt`] keeps Joiner's own image
//! where a file names Karpenter's, and lists every key the chart does not use with why, so a
//! Karpenter user sees what of their file does nothing rather than guess.

use serde_json::{Map, Value};

/// A key of a values file the Joiner chart does not use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unused {
    /// Dotted path of the key (`settings.enableZonalShift`).
    pub path: String,
    pub why: &'static str,
}

/// Values whose maps are free-form (labels, annotations, Kubernetes objects): their keys are
/// the user's, not the chart's.
const FREE_FORM: [&str; 17] = [
    "additionalLabels",
    "additionalAnnotations",
    "podLabels",
    "podAnnotations",
    "nodeSelector",
    "affinity",
    "dnsConfig",
    "strategy",
    "podSecurityContext",
    "service.annotations",
    "serviceAccount.annotations",
    "serviceMonitor.additionalLabels",
    "serviceMonitor.endpointConfig",
    "controller.resources",
    "controller.securityContext",
    "settings.featureGates",
    "settings.cluster.featureGates",
];

/// Why each key of Karpenter's chart that the Joiner chart lacks does nothing.
const KARPENTER_ONLY: [(&str, &str); 14] = [
    (
        "additionalClusterRoleRules",
        "the ClusterRole grants what Joiner uses (the chart README lists it); bind extra rules with a ClusterRole of your own",
    ),
    (
        "serviceMonitor.relabelings",
        "set `relabelings` in serviceMonitor.endpointConfig, which is merged into the endpoint",
    ),
    (
        "serviceMonitor.metricRelabelings",
        "set `metricRelabelings` in serviceMonitor.endpointConfig, which is merged into the endpoint",
    ),
    (
        "serviceMonitor.sampleLimit",
        "set it on the ServiceMonitor through your Prometheus Operator defaults; the chart does not",
    ),
    (
        "schedulerName",
        "the controller pods are scheduled by the cluster's default scheduler",
    ),
    ("initContainers", "the controller needs no init containers"),
    (
        "controller.containerName",
        "the container is named `controller`",
    ),
    (
        "controller.sidecarContainer",
        "the controller runs without sidecars",
    ),
    (
        "controller.sidecarVolumeMounts",
        "the controller runs without sidecars",
    ),
    (
        "logOutputPaths",
        "Joiner logs one JSON object per line to standard error",
    ),
    (
        "logErrorOutputPaths",
        "Joiner logs one JSON object per line to standard error",
    ),
    (
        "settings.enableZonalShift",
        "Joiner does not read ARC zonal shifts yet",
    ),
    (
        "settings.disableClusterStateObservability",
        "Joiner's status-condition metrics are always served",
    ),
    (
        "settings.disableDryRun",
        "Joiner makes no dry-run launch to validate an EC2NodeClass",
    ),
];

/// Refresh intervals of Karpenter's caches, which Joiner's own resolution replaces.
const REFRESH: &str = "Joiner resolves EC2NodeClasses on its own schedule (every few minutes, and at once on a change)";

/// Makes a values file written for Karpenter's chart Joiner's: drops a controller image that is
/// Karpenter's (the chart's own stays) and every key the chart `defaults` do not have, and
/// returns those set to something, with why.
pub fn adopt(file: &mut Value, defaults: &Value) -> Vec<Unused> {
    let mut unused = Vec::new();
    if let Some(image) = file
        .pointer_mut("/controller/image")
        .and_then(Value::as_object_mut)
        && image
            .get("repository")
            .and_then(Value::as_str)
            .is_some_and(|r| r.contains("karpenter"))
    {
        for key in ["repository", "tag", "digest"] {
            if image.remove(key).is_some() {
                unused.push(Unused {
                    path: format!("controller.image.{key}"),
                    why: "Karpenter's controller image: the chart keeps Joiner's",
                });
            }
        }
    }
    if let (Value::Object(map), Value::Object(known)) = (file, defaults) {
        walk_map(map, known, "", &mut unused);
    }
    unused
}

fn is_set(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => true,
    }
}

/// Lists the keys under `map` (at `path`) that `known` lacks, and takes them out: they would do
/// nothing but draw the controller's warnings about settings it does not know.
fn walk_map(
    map: &mut Map<String, Value>,
    known: &Map<String, Value>,
    path: &str,
    out: &mut Vec<Unused>,
) {
    let mut drop = Vec::new();
    for (key, v) in map.iter_mut() {
        let child = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        match known.get(key) {
            None => {
                if is_set(v) {
                    out.push(Unused {
                        why: why(&child),
                        path: child,
                    });
                }
                drop.push(key.clone());
            }
            Some(_) if FREE_FORM.contains(&child.as_str()) => {}
            Some(Value::Object(inner)) => {
                if let Value::Object(m) = v {
                    walk_map(m, inner, &child, out);
                }
            }
            Some(_) => {}
        }
    }
    for key in drop {
        map.remove(&key);
    }
}

fn why(path: &str) -> &'static str {
    if path.ends_with("RefreshInterval") {
        return REFRESH;
    }
    KARPENTER_ONLY
        .iter()
        .find(|(p, _)| *p == path)
        .map_or("not a value of the Joiner chart", |(_, why)| why)
}
