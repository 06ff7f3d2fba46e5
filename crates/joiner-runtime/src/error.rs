//! Why the controller could not start: each error says what was being set up, with the cause
//! as its source, and is logged once, whole, as the process exits.

use std::error::Error as StdError;

use joiner_controller::ControllerError;
use joiner_model::settings::SettingsError;

use crate::http::BindError;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The Helm values could not be read (the caller's loader says why).
    #[error(transparent)]
    Values(Box<dyn StdError + Send + Sync>),
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// The controller core refused the settings (printed whole, as the core words it).
    #[error("{0}")]
    Config(ControllerError),
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error("finding the cluster: no in-cluster service account and no usable kubeconfig")]
    NoCluster(#[source] kube::config::InferConfigError),
    #[error("creating a Kubernetes client for {url}")]
    Client {
        url: String,
        #[source]
        source: kube::Error,
    },
    /// The API server did not answer its version: no cluster to work on.
    #[error("cannot reach the Kubernetes API server at {url}: {error}")]
    Unreachable { url: String, error: kube::Error },
    #[error("cannot reach the Kubernetes API server at {url}: no answer in {seconds} s")]
    NoAnswer { url: String, seconds: u64 },
    /// `--cloud aws` without the AWS SDK's configuration (it is loaded for that cloud first).
    #[error("the AWS SDK configuration")]
    NoSdkConfig,
    #[error("starting the cluster caches")]
    Caches(#[source] joiner_kube::KubeError),
    #[error("setting up the AWS cloud provider")]
    Aws(#[source] joiner_aws::AwsError),
    #[error("opening the interruption queue {queue}")]
    Queue {
        queue: String,
        #[source]
        source: joiner_aws::AwsError,
    },
}

impl From<ControllerError> for StartError {
    fn from(e: ControllerError) -> Self {
        StartError::Config(e)
    }
}

/// The error and its causes on one line, `error: cause: cause`, for the one log line that
/// reports it.
pub fn chain(error: &dyn StdError) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_says_what_was_being_done_then_why() {
        let e = StartError::Caches(joiner_kube::KubeError::Options("no ConfigMap name".into()));
        assert_eq!(
            chain(&e),
            "starting the cluster caches: invalid store options: no ConfigMap name"
        );
    }
}
