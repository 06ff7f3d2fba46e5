//! `--kubeconfig`: the cluster itself as the input of `plan`, `explain` and `catalog`, read once
//! and read-only (list calls only), through kube-rs (cargo feature `cluster`, on in the
//! controller build).
//!
//! The objects are read through the same parser as files, so the plan is the one the files of
//! a faithful dump would give; files given with `-f` go on top (what-if: an object in a file
//! replaces the cluster's of the same kind and name).

use std::path::PathBuf;

use joiner_model::{Manifests, ObjectRef, Source};
use serde::Serialize;
use serde_json::Value;

/// Where the cluster is read from.
#[derive(clap::Args, Debug, Default)]
pub struct ClusterArgs {
    /// Read the cluster itself, read-only (list calls only), through this kubeconfig, or the
    /// default one ($KUBECONFIG, ~/.kube/config, in-cluster) when given without a path. Files
    /// given with -f are added on top: an object in a file replaces the cluster's of the same
    /// kind, namespace and name.
    #[arg(long, num_args = 0..=1, default_missing_value = "", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use instead of its current one.
    #[arg(long, requires = "kubeconfig", value_name = "NAME")]
    pub context: Option<String>,
}

/// The cluster could not be read (unreachable, credentials refused, no such context): the
/// command exits with status 2.
#[derive(Debug)]
pub struct Unreadable(pub String);

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "could not read the cluster: {}", self.0)
    }
}

impl std::error::Error for Unreadable {}

/// A kind the plan could not see, as the plan's output names it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NotRead {
    pub kind: &'static str,
    /// `Forbidden` (RBAC refused the list) or `NotServed` (no version Joiner reads is served).
    pub reason: &'static str,
    pub message: String,
}

/// What was read from the cluster.
pub struct ClusterRead {
    pub objects: Vec<Value>,
    pub not_read: Vec<NotRead>,
}

/// The name objects read from the cluster are reported under.
const ORIGIN: &str = "cluster";

/// Lists the cluster, within a bounded time.
#[cfg(feature = "cluster")]
pub fn read(
    args: &ClusterArgs,
    settings: &joiner_model::settings::Settings,
) -> anyhow::Result<ClusterRead> {
    use joiner_kube::UnreadWhy;

    /// The longest a whole read may take, all kinds and pages together.
    const DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let path = args
        .kubeconfig
        .as_deref()
        .filter(|p| !p.as_os_str().is_empty());
    let listing = runtime.block_on(async {
        let (client, server) = joiner_kube::client_for(path, args.context.as_deref())
            .await
            .map_err(|e| Unreadable(e.to_string()))?;
        let options = joiner_kube::StoreOptions::from_settings(settings);
        match tokio::time::timeout(DEADLINE, joiner_kube::list_cluster(&client, &options)).await {
            Ok(Ok(listing)) => Ok(listing),
            Ok(Err(e)) => Err(Unreadable(format!("{server}: {e}"))),
            Err(_) => Err(Unreadable(format!(
                "{server}: not read within {} s",
                DEADLINE.as_secs()
            ))),
        }
    })?;
    let not_read = listing
        .unread
        .into_iter()
        .map(|u| match u.why {
            UnreadWhy::Forbidden(message) => NotRead {
                kind: u.kind,
                reason: "Forbidden",
                message,
            },
            UnreadWhy::NotServed => NotRead {
                kind: u.kind,
                reason: "NotServed",
                message: "the API server serves no version of it that Joiner reads".into(),
            },
        })
        .collect();
    Ok(ClusterRead {
        objects: listing.objects,
        not_read,
    })
}

/// Without the cluster client compiled in, `--kubeconfig` is refused.
#[cfg(not(feature = "cluster"))]
pub fn read(_: &ClusterArgs, _: &joiner_model::settings::Settings) -> anyhow::Result<ClusterRead> {
    anyhow::bail!(
        "--kubeconfig: this joiner was built without the cluster client; build it with \
         `cargo build -p joiner --features cluster` (the controller build has it)"
    )
}

/// Adds the cluster's objects to what the files gave. An object a file defines is the file's
/// (what-if); an object that does not read is skipped with a warning, never failing the rest.
/// Returns the warnings to print.
pub fn add_to(manifests: &mut Manifests, objects: Vec<Value>) -> Vec<String> {
    let mut warnings = Vec::new();
    for object in objects {
        let reference = reference_of(&object);
        if manifests.defines(&reference) {
            warnings.push(format!(
                "{reference}: the file's object is planned in place of the cluster's"
            ));
            continue;
        }
        let unresolved = reference.kind == "EC2NodeClass" && object.get("status").is_none();
        if let Err(e) = manifests.add_document(Source::new(ORIGIN, 0), object) {
            warnings.push(format!("{e}; skipped, the rest of the cluster is read"));
        } else if unresolved {
            warnings.push(format!(
                "{ORIGIN}: {reference}: no status: no controller has resolved its subnets, \
                 security groups and image yet; the plan assumes they resolve"
            ));
        }
    }
    warnings
}

fn reference_of(object: &Value) -> ObjectRef {
    let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
    ObjectRef::new(
        text("/kind").unwrap_or_default(),
        text("/metadata/namespace"),
        text("/metadata/name").unwrap_or_default(),
    )
}

/// The lines the table output ends with when kinds could not be read.
pub fn not_read_lines(not_read: &[NotRead]) -> String {
    if not_read.is_empty() {
        return String::new();
    }
    let mut text =
        String::from("\nNot read from the cluster (the plan cannot account for them):\n");
    for n in not_read {
        text.push_str(&format!("  {}: {}: {}\n", n.kind, n.reason, n.message));
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_files_object_replaces_the_clusters_and_a_bad_one_is_skipped_alone() {
        let mut m = Manifests::default();
        m.add_document(
            Source::new("what-if.yaml", 1),
            json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                   "metadata": {"name": "gpu"}, "spec": {"template": {"spec": {
                     "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                     "requirements": []}}}}),
        )
        .unwrap();
        let cluster = vec![
            json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                   "metadata": {"name": "gpu"}, "spec": {"template": {"spec": {
                     "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "old"},
                     "requirements": []}}}}),
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "bad", "namespace": "ml"}, "spec": {"containers": "nope"}}),
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "good", "namespace": "ml"}, "spec": {"containers": []}}),
        ];
        let warnings = add_to(&mut m, cluster);
        assert_eq!(m.node_pools.len(), 1);
        assert_eq!(m.node_pools[0].origin.file, "what-if.yaml");
        assert_eq!(
            m.node_pools[0]
                .object
                .spec
                .template
                .spec
                .node_class_ref
                .name,
            "gpu"
        );
        let pods: Vec<_> = m
            .pods
            .iter()
            .map(|p| p.object.metadata.name.clone())
            .collect();
        assert_eq!(pods, [Some("good".to_string())]);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("NodePool/gpu"), "{warnings:?}");
        assert!(
            warnings[1].contains("Pod/ml/bad") && warnings[1].contains("skipped"),
            "{warnings:?}"
        );
    }
}
