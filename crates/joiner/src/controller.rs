//! `joiner controller`: the live controller process's command line.
//!
//! The flags are parsed in every build so the Helm chart's command line is always understood;
//! the live controller itself is the `joiner-runtime` crate, behind the `controller` cargo
//! feature (it pulls in kube-rs, the AWS SDK and an async runtime, minutes of build time a
//! newcomer running `joiner plan` does not need). A build without it says so and how to get it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// How to build a binary that has the live controller.
#[cfg(not(feature = "controller"))]
pub const BUILD_HINT: &str = "cargo build --release -p joiner --features controller";

/// The command line of `joiner controller`, as the Helm chart gives it.
// Without the live controller the flags are parsed (so the chart's command line is understood)
// but never read.
#[cfg_attr(not(feature = "controller"), allow(dead_code))]
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Helm values files, as given to the chart (repeatable; later ones win). The same settings
    /// `joiner plan --values` reads, so a decision in the cluster equals the plan.
    #[arg(long = "values")]
    pub values: Vec<PathBuf>,
    /// Set a value, Helm style: `settings.clusterName=prod` (repeatable).
    #[arg(long = "set")]
    pub set: Vec<String>,
    /// Where instances come from: EC2, or an in-process simulated cloud whose instances register
    /// as fake Nodes (for trying Joiner on a kind or kwok cluster).
    #[arg(long, value_enum, default_value = "aws")]
    pub cloud: CloudKind,
    /// With `--cloud simulated`: annotate the fake Nodes `kwok.x-k8s.io/node: fake` so kwok
    /// marks them Ready and runs their pods.
    #[arg(long)]
    pub kwok: bool,
    /// Address of the Prometheus `/metrics` endpoint.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Address of `/healthz` and `/readyz`.
    #[arg(long, default_value = "0.0.0.0:8081")]
    pub health_addr: SocketAddr,
    /// Elect a leader through a `coordination.k8s.io/v1` Lease so that of several replicas only
    /// one acts. `--leader-elect=false` for a single replica.
    #[arg(
        long,
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub leader_elect: bool,
    /// Namespace of the Lease: default the `POD_NAMESPACE` environment variable, else the
    /// kubeconfig's namespace.
    #[arg(long)]
    pub leader_election_namespace: Option<String>,
    /// Name of the Lease.
    #[arg(long, default_value = "joiner-leader-election")]
    pub leader_election_name: String,
    /// Log format: one JSON object per line, or text for a terminal.
    #[arg(long, value_enum, default_value = "json")]
    pub log_format: LogFormat,
    /// How long to wait for the cluster caches to fill at start-up, in seconds, before giving up.
    #[arg(long, default_value_t = 120, value_name = "SECONDS")]
    pub cache_sync_timeout: u64,
    /// Another controller's leader Lease (Karpenter's): while it is held, Joiner does nothing.
    /// Repeat for each namespace Karpenter may run in; `none` watches none.
    #[arg(
        long = "karpenter-lease",
        value_name = "NAMESPACE/NAME",
        default_values_t = [
            "kube-system/karpenter-leader-election".to_string(),
            "karpenter/karpenter-leader-election".to_string(),
        ]
    )]
    pub karpenter_leases: Vec<String>,
}

#[cfg_attr(not(feature = "controller"), allow(dead_code))]
impl Args {
    pub fn cache_sync_timeout(&self) -> Duration {
        Duration::from_secs(self.cache_sync_timeout)
    }

    /// The `--karpenter-lease` values as (namespace, name); an error names a malformed one.
    pub fn rival_leases(&self) -> Result<Vec<(String, String)>, String> {
        self.karpenter_leases
            .iter()
            .filter(|l| l.as_str() != "none")
            .map(|l| match l.split_once('/') {
                Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                    Ok((ns.to_string(), name.to_string()))
                }
                _ => Err(format!(
                    "--karpenter-lease {l:?}: expected NAMESPACE/NAME (or none)"
                )),
            })
            .collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CloudKind {
    Aws,
    Simulated,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

/// Runs the live controller until SIGTERM (exit 0) or a fatal error (exit 1). It sets up its
/// own logging: call it before any other tracing subscriber is installed. The values files and
/// `--set` are read as `joiner plan` reads them, once the controller's logging is up.
#[cfg(feature = "controller")]
pub fn run(args: Args) -> ExitCode {
    let rival_leases = match args.rival_leases() {
        Ok(leases) => leases,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = joiner_runtime::Options {
        cloud: match args.cloud {
            CloudKind::Aws => joiner_runtime::CloudKind::Aws,
            CloudKind::Simulated => joiner_runtime::CloudKind::Simulated,
        },
        kwok: args.kwok,
        metrics_addr: args.metrics_addr,
        health_addr: args.health_addr,
        leader_election: args.leader_elect.then(|| joiner_runtime::LeaderElection {
            namespace: args.leader_election_namespace.clone(),
            name: args.leader_election_name.clone(),
        }),
        log_format: match args.log_format {
            LogFormat::Json => joiner_runtime::LogFormat::Json,
            LogFormat::Text => joiner_runtime::LogFormat::Text,
        },
        cache_sync_timeout: args.cache_sync_timeout(),
        rival_leases,
    };
    joiner_runtime::main(options, || {
        crate::load::load_values(&args.values, &args.set).map_err(Into::into)
    })
}

/// Without the `controller` feature: says this build cannot run the live controller.
#[cfg(not(feature = "controller"))]
pub fn run(_args: Args) -> ExitCode {
    eprintln!(
        "error: this joiner binary was built without the live controller (the `controller` \
         cargo feature); build one with `{BUILD_HINT}`"
    );
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(argv: &[&str]) -> Result<Args, clap::Error> {
        Cli::try_parse_from(std::iter::once("controller").chain(argv.iter().copied()))
            .map(|c| c.args)
    }

    #[test]
    fn defaults_are_the_charts() {
        let a = parse(&["--values", "/etc/joiner/values.yaml"]).unwrap();
        assert_eq!(a.values, [PathBuf::from("/etc/joiner/values.yaml")]);
        assert_eq!(a.cloud, CloudKind::Aws);
        assert!(a.leader_elect);
        assert_eq!(a.leader_election_name, "joiner-leader-election");
        assert_eq!(a.leader_election_namespace, None);
        assert_eq!(a.metrics_addr, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(a.health_addr, "0.0.0.0:8081".parse().unwrap());
        assert_eq!(a.log_format, LogFormat::Json);
        assert!(!a.kwok);
    }

    #[test]
    fn karpenters_lease_is_watched_in_both_usual_namespaces_unless_told() {
        let a = parse(&[]).unwrap();
        assert_eq!(
            a.rival_leases().unwrap(),
            [
                (
                    "kube-system".to_string(),
                    "karpenter-leader-election".to_string()
                ),
                (
                    "karpenter".to_string(),
                    "karpenter-leader-election".to_string()
                ),
            ]
        );
        let a = parse(&["--karpenter-lease", "platform/karpenter-leader-election"]).unwrap();
        assert_eq!(a.rival_leases().unwrap().len(), 1);
        assert!(
            parse(&["--karpenter-lease", "none"])
                .unwrap()
                .rival_leases()
                .unwrap()
                .is_empty()
        );
        let bad = parse(&["--karpenter-lease", "karpenter-leader-election"]).unwrap();
        assert!(bad.rival_leases().unwrap_err().contains("NAMESPACE/NAME"));
    }

    #[test]
    fn leader_election_can_be_turned_off_and_on() {
        assert!(!parse(&["--leader-elect=false"]).unwrap().leader_elect);
        assert!(!parse(&["--leader-elect", "false"]).unwrap().leader_elect);
        assert!(parse(&["--leader-elect=true"]).unwrap().leader_elect);
        assert!(parse(&["--leader-elect"]).unwrap().leader_elect);
        assert!(parse(&["--leader-elect=maybe"]).is_err());
    }

    #[test]
    fn every_flag_the_chart_passes_is_understood() {
        let a = parse(&[
            "--values",
            "a.yaml",
            "--values",
            "b.yaml",
            "--set",
            "settings.clusterName=prod",
            "--set",
            "settings.region=us-west-2",
            "--cloud",
            "simulated",
            "--kwok",
            "--metrics-addr",
            "127.0.0.1:9090",
            "--health-addr",
            "[::1]:9091",
            "--leader-elect=false",
            "--leader-election-namespace",
            "joiner",
            "--leader-election-name",
            "lease",
            "--log-format",
            "text",
            "--karpenter-lease",
            "kube-system/karpenter-leader-election",
            "--karpenter-lease",
            "karpenter/karpenter-leader-election",
        ])
        .unwrap();
        assert_eq!(a.values.len(), 2);
        assert_eq!(
            a.set,
            ["settings.clusterName=prod", "settings.region=us-west-2"]
        );
        assert_eq!(a.cloud, CloudKind::Simulated);
        assert!(a.kwok);
        assert_eq!(a.metrics_addr.port(), 9090);
        assert_eq!(a.health_addr, "[::1]:9091".parse().unwrap());
        assert_eq!(a.leader_election_namespace.as_deref(), Some("joiner"));
        assert_eq!(a.leader_election_name, "lease");
        assert_eq!(a.log_format, LogFormat::Text);
        assert_eq!(a.rival_leases().unwrap().len(), 2);
        assert!(parse(&["--cloud", "gcp"]).is_err());
        assert!(parse(&["--metrics-addr", "localhost"]).is_err());
    }
}
