//! `joiner version`: what this binary is, for bug reports and for checking an install against
//! the API level of the Karpenter it replaces.

use serde::Serialize;

/// The Karpenter release whose API (`karpenter.sh/v1`, `karpenter.k8s.aws/v1`: CRDs, labels,
/// annotations, settings, metrics) this build follows.
pub const KARPENTER_API_LEVEL: &str = "v1.14.1";

/// What `joiner version` says.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Version {
    pub version: &'static str,
    /// The git commit it was built from (`unknown` outside a git checkout).
    pub commit: &'static str,
    /// Cargo features compiled in (`cluster`: `--kubeconfig` reads a cluster; `controller`:
    /// `joiner controller` is available).
    pub features: Vec<&'static str>,
    pub karpenter_api: KarpenterApi,
    /// The Kubernetes API version the object types follow.
    pub kubernetes_api: &'static str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KarpenterApi {
    pub release: &'static str,
    pub groups: [&'static str; 2],
}

impl Version {
    pub fn of_this_build() -> Version {
        let mut features = Vec::new();
        if cfg!(feature = "cluster") {
            features.push("cluster");
        }
        if cfg!(feature = "controller") {
            features.push("controller");
        }
        Version {
            version: env!("CARGO_PKG_VERSION"),
            commit: option_env!("JOINER_COMMIT").unwrap_or("unknown"),
            features,
            karpenter_api: KarpenterApi {
                release: KARPENTER_API_LEVEL,
                groups: ["karpenter.sh/v1", "karpenter.k8s.aws/v1"],
            },
            kubernetes_api: "v1.34",
        }
    }

    /// The text form: one fact per line.
    pub fn text(&self) -> String {
        let features = if self.features.is_empty() {
            "none (build with --features cluster for `--kubeconfig`, controller for `joiner controller`)".to_string()
        } else {
            self.features.join(", ")
        };
        format!(
            "joiner {}\ncommit: {}\nfeatures: {features}\nkarpenter API: {} (Karpenter {})\nkubernetes API: {}\n",
            self.version,
            self.commit,
            self.karpenter_api.groups.join(", "),
            self.karpenter_api.release,
            self.kubernetes_api,
        )
    }
}
