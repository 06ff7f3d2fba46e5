//! `joiner`: the command line of Joiner, a Kubernetes node autoscaler for GPU clusters.
//!
//! The binary is argument parsing, loading, output and dispatch only. It parses the command
//! line, reads manifests and Helm values from files and standard input ([`load`]), and hands
//! them on: `plan` and `explain` to the pure planner in `joiner-engine` (printed by [`output`]),
//! `catalog` to its listing of what each NodePool may launch (printed by [`catalog`]),
//! `bench` to the engine's benchmark inputs ([`bench`]), `simulate` to `joiner-simulate`, and
//! `controller` to the live controller's runtime in `joiner-runtime`, which is compiled in only
//! with the `controller` cargo feature ([`controller`] parses its flags in every build and says
//! how to get it when it is missing). Everything it decides, it decides through those crates.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod catalog;
mod cluster;
mod controller;
mod load;
mod migrate;
mod output;
mod version;

#[derive(Parser)]
#[command(
    name = "joiner",
    version,
    about = "A Kubernetes node autoscaler for GPU clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show which nodes would be launched for the pending pods in some manifests, where every
    /// pod goes, what it costs, and why anything cannot fit.
    Plan {
        #[command(flatten)]
        input: InputArgs,
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: output::Format,
        /// Add to each NodeClaim what the controller would send EC2: launch templates (image,
        /// volumes, metadata options, instance profile, network interfaces with EFA, tags),
        /// fleet overrides and the rendered user data. Needs `-o yaml` or `-o json`.
        #[arg(long)]
        launch: bool,
    },
    /// List the instance types each NodePool allows, as it would launch them: allocatable
    /// (cpu, memory, pods, GPUs), GPUs and EFA, DRA devices, offerings and prices, after
    /// InstanceType objects are applied. Without `-f`, the whole built-in catalog.
    Catalog {
        /// Manifest files or directories (recursive: *.yaml, *.yml, *.json); `-` reads stdin.
        #[arg(short = 'f', long = "filename")]
        files: Vec<PathBuf>,
        #[command(flatten)]
        cluster: cluster::ClusterArgs,
        /// The region whose zones, offerings and prices to show (`settings.region`).
        #[arg(long)]
        region: Option<String>,
        #[command(flatten)]
        settings: SettingsArgs,
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: catalog::Format,
    },
    /// Explain one pod: where the plan puts it, and what every instance type of every NodePool
    /// makes of it.
    Explain {
        #[command(subcommand)]
        what: Explain,
    },
    /// Run the controller over simulated time against a simulated cloud, following a scenario
    /// file, and print the timeline of decisions and a summary (node-hours, cost, pending time,
    /// GPU allocation).
    Simulate {
        #[command(flatten)]
        input: InputArgs,
        /// The scenario: timed steps (scale, addPods, deletePods, advance, interruptSpot,
        /// changeNodePool, faults).
        #[arg(long)]
        scenario: PathBuf,
        /// Also write a self-contained HTML report with charts here.
        #[arg(long)]
        report: Option<PathBuf>,
        #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
        output: SimulateFormat,
        /// Also write the Prometheus exposition the controller would serve at `/metrics` at
        /// the end of the run here.
        #[arg(long)]
        metrics: Option<PathBuf>,
        /// Also write the Kubernetes Events the controller would have published here, one JSON
        /// object per line.
        #[arg(long)]
        events: Option<PathBuf>,
    },
    /// Print the version, the commit it was built from, the features compiled in and the
    /// Karpenter API level it follows.
    Version {
        #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
        output: VersionFormat,
    },
    /// Print a shell completion script: `source <(joiner completion bash)`.
    Completion { shell: clap_complete::Shell },
    /// Run the live controller in a cluster: watch pending pods, launch and retire nodes (the
    /// Helm chart runs this). Needs a build with the `controller` feature.
    Controller(Box<controller::Args>),
    /// Preview taking over a fleet Karpenter launched, from its exported objects (`kubectl get
    /// nodepools,ec2nodeclasses,nodeclaims,nodes,pods -A -o yaml`): what the controller will
    /// launch, terminate, disrupt and rewrite once started, found by running it over simulated
    /// time on a copy. Writes nothing; fails when the takeover would disturb a node.
    Migrate {
        #[command(flatten)]
        input: InputArgs,
        /// How long to run the takeover for, in simulated time.
        #[arg(long = "for", default_value = "1h")]
        run_for: String,
    },
    /// Write the CustomResourceDefinitions Joiner serves (Karpenter's kinds, generated from
    /// Joiner's API types): one file per CRD into `--dir`, or all of them to stdout.
    Crds {
        /// The directory to write them into (the chart keeps them in `charts/joiner/crds`).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Run the benchmarks and print their figures.
    Bench {
        /// Pod counts for the scheduling benchmark.
        #[arg(long, value_delimiter = ',', default_values_t = [1000, 5000, 20000])]
        pods: Vec<usize>,
        /// Run only this benchmark.
        #[arg(long, value_enum)]
        only: Option<BenchSuite>,
        /// NodeClaims for the cloud-calls benchmark.
        #[arg(long, default_value_t = 1000)]
        node_claims: usize,
        /// Existing nodes for the consolidation benchmark.
        #[arg(long, default_value_t = 1000)]
        consolidation_nodes: usize,
        /// Pending pods for the controller-step benchmark.
        #[arg(long, value_delimiter = ',', default_values_t = [5000, 20000])]
        step_pods: Vec<usize>,
        /// Existing (unmanaged) nodes for the controller-step benchmark.
        #[arg(long, default_value_t = 2000)]
        step_nodes: usize,
        /// Pod counts for the whole-process benchmark.
        #[arg(long, value_delimiter = ',', default_values_t = [5000, 20000, 100000])]
        process_pods: Vec<usize>,
        /// Only parse the YAML of the manifest files under this path (the whole-process
        /// benchmark's baseline, run as its child).
        #[arg(long, hide = true, conflicts_with = "read_only")]
        parse_only: Option<PathBuf>,
        /// Only read the manifest files under this path into typed objects (a child of the
        /// whole-process benchmark).
        #[arg(long, hide = true)]
        read_only: Option<PathBuf>,
        /// Write the whole-process benchmark's files into DIR/<pods> for each of
        /// `--process-pods` and run nothing (to profile or to run other tools on them).
        #[arg(long, value_name = "DIR")]
        write_input: Option<PathBuf>,
    },
}

/// The benchmarks of `joiner bench`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BenchSuite {
    Scheduling,
    Dra,
    Consolidation,
    CloudCalls,
    /// The whole `joiner plan` process on files, beside parsing them alone.
    Process,
    /// Provisioning steps planned greedily and with the exact pass.
    Packing,
    /// The controller's provisioning step on the in-memory cluster, beside the plan alone.
    ControllerStep,
}

#[derive(Subcommand)]
enum Explain {
    /// A pod, as `namespace/name`.
    Pod {
        pod: String,
        #[command(flatten)]
        input: InputArgs,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum SimulateFormat {
    Text,
    Json,
}

/// Where the cluster's objects and the settings come from.
#[derive(clap::Args)]
struct InputArgs {
    /// Manifest files or directories (recursive: *.yaml, *.yml, *.json); `-` reads stdin.
    #[arg(short = 'f', long = "filename", required_unless_present = "kubeconfig")]
    files: Vec<PathBuf>,
    #[command(flatten)]
    cluster: cluster::ClusterArgs,
    #[command(flatten)]
    settings: SettingsArgs,
}

/// The settings and the catalog, for every command that reads manifests.
#[derive(clap::Args)]
struct SettingsArgs {
    /// Helm values files, as given to the chart (repeatable; later ones win).
    #[arg(long = "values")]
    values: Vec<PathBuf>,
    /// Set a value, Helm style: `settings.region=us-west-2` (repeatable).
    #[arg(long = "set")]
    set: Vec<String>,
    /// Use only InstanceType objects from the input, not the built-in AWS catalog.
    #[arg(long)]
    no_builtin_catalog: bool,
}

fn main() -> ExitCode {
    // A command line that does not parse is bad input: exit 1, as for any other (2 is kept for
    // a cluster that cannot be read). Help and version requests print and exit 0.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    // The live controller sets up its own logs (JSON by default).
    let cli = match cli.command {
        Command::Controller(args) => return controller::run(*args),
        command => Cli { command },
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("JOINER_LOG")
                // kube-rs logs each failed request as an error; the command's own error says
                // what failed, once.
                .unwrap_or_else(|_| "warn,kube_client=off".into()),
        )
        .without_time()
        .init();
    let result = match cli.command {
        Command::Plan {
            input,
            output,
            launch,
        } => plan(&input, output, launch),
        Command::Catalog {
            files,
            cluster,
            region,
            mut settings,
            output,
        } => {
            // `--region` is `settings.region`; it goes first so `--set` can still name zones.
            if let Some(region) = region {
                settings.set.insert(0, format!("settings.region={region}"));
            }
            catalog_cmd(
                &InputArgs {
                    files,
                    cluster,
                    settings,
                },
                output,
            )
        }
        Command::Explain {
            what: Explain::Pod { pod, input },
        } => explain_pod(&input, &pod),
        Command::Simulate {
            input,
            scenario,
            report,
            output,
            metrics,
            events,
        } => simulate_cmd(
            &input,
            scenario,
            SimulateOutputs {
                report,
                metrics,
                events,
            },
            output,
        ),
        Command::Crds { dir } => crds_cmd(dir.as_deref()),
        Command::Version { output } => version_cmd(output),
        Command::Completion { shell } => {
            use clap::CommandFactory as _;
            clap_complete::generate(shell, &mut Cli::command(), "joiner", &mut std::io::stdout());
            Ok(())
        }
        Command::Migrate { input, run_for } => migrate::run(&input, &run_for),
        Command::Bench {
            parse_only: Some(path),
            ..
        } => bench::process::parse_only(&path),
        Command::Bench {
            read_only: Some(path),
            ..
        } => bench::process::read_only(&path),
        Command::Bench {
            write_input: Some(dir),
            process_pods,
            ..
        } => bench::process::write_inputs(&dir, &process_pods),
        Command::Bench {
            pods,
            only,
            node_claims,
            consolidation_nodes,
            process_pods,
            step_pods,
            step_nodes,
            ..
        } => {
            let run = |suite| only.is_none_or(|o| o == suite);
            let mut result = Ok(());
            // First, while this process is small: Linux carries the spawning process's peak
            // resident memory into a child's at exec, so after the in-process benchmarks every
            // child would report this process's peak instead of its own.
            if run(BenchSuite::Process) {
                result = result.and_then(|()| bench::process::run(&process_pods));
            }
            if run(BenchSuite::Scheduling) {
                result = result.and_then(|()| bench::scheduling(&pods));
            }
            if run(BenchSuite::Dra) {
                result = result.and_then(|()| bench::dra(500, 8, 5000));
            }
            if run(BenchSuite::Consolidation) {
                result = result.and_then(|()| bench::consolidation(consolidation_nodes));
            }
            if run(BenchSuite::CloudCalls) {
                result = result.and_then(|()| bench::cloud_calls(node_claims));
            }
            if run(BenchSuite::ControllerStep) {
                result = result.and_then(|()| bench::controller_step(&step_pods, step_nodes));
            }
            if run(BenchSuite::Packing) {
                result = result.and_then(|()| bench::packing());
            }
            result
        }
        Command::Controller(_) => unreachable!("handled before logging is set up"),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            // 2: the cluster could not be read; 1: anything else (bad input, mostly).
            if e.downcast_ref::<cluster::Unreadable>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Writes the generated CRDs into `dir`, or to stdout as one YAML stream.
fn crds_cmd(dir: Option<&std::path::Path>) -> anyhow::Result<()> {
    use anyhow::Context as _;
    for generated in joiner_model::api::crds::crds() {
        let text = generated.to_yaml();
        match dir {
            Some(dir) => {
                let path = dir.join(&generated.file_name);
                std::fs::write(&path, text)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            None => print!("{text}"),
        }
    }
    Ok(())
}

/// Reads the input and builds the snapshot, printing warnings on stderr.
fn snapshot(input: &InputArgs) -> anyhow::Result<joiner_engine::snapshot::ClusterSnapshot> {
    Ok(read_input(input)?.snapshot)
}

/// The manifests and the settings, their warnings printed on stderr (but those `skip` says).
/// Files only: the commands that replay or take over a fleet refuse `--kubeconfig`.
fn manifests_and_settings(
    input: &InputArgs,
    skip: &dyn Fn(&str) -> bool,
) -> anyhow::Result<(joiner_model::Manifests, joiner_model::settings::Settings)> {
    if input.cluster.kubeconfig.is_some() {
        anyhow::bail!(
            "--kubeconfig is read by plan, explain and catalog; for this command dump the \
             cluster (kubectl get nodepools,ec2nodeclasses,nodeclaims,nodes,pods -A -o yaml) \
             and give the file with -f"
        );
    }
    let (manifests, settings, _) = load_input(input, skip)?;
    Ok((manifests, settings))
}

/// The files' objects, with the cluster's under them when `--kubeconfig` is given, the
/// settings, and the kinds the cluster would not list; warnings printed on stderr (but those
/// `skip` says).
fn load_input(
    input: &InputArgs,
    skip: &dyn Fn(&str) -> bool,
) -> anyhow::Result<(
    joiner_model::Manifests,
    joiner_model::settings::Settings,
    Vec<cluster::NotRead>,
)> {
    let values = load::load_values(&input.settings.values, &input.settings.set)?;
    let (settings, setting_warnings) = joiner_model::settings::Settings::from_values(&values)?;
    let mut manifests = load::load_manifests(&input.files)?;
    let mut not_read = Vec::new();
    let mut cluster_warnings = Vec::new();
    if input.cluster.kubeconfig.is_some() {
        let read = cluster::read(&input.cluster, &settings)?;
        for n in &read.not_read {
            cluster_warnings.push(format!(
                "cluster: {} not read ({}: {}); the plan cannot account for them",
                n.kind, n.reason, n.message
            ));
        }
        not_read = read.not_read;
        cluster_warnings.extend(cluster::add_to(&mut manifests, read.objects));
        manifests.finish();
    }
    if !input.files.is_empty() && manifests.object_count() == 0 {
        let named: Vec<String> = input
            .files
            .iter()
            .map(|f| f.display().to_string())
            .collect();
        eprintln!(
            "warning: no Kubernetes objects were read from {}: there is nothing to plan for",
            named.join(", ")
        );
    }
    for w in manifests
        .warnings
        .iter()
        .map(ToString::to_string)
        .chain(setting_warnings)
        .chain(cluster_warnings)
        .filter(|w| !skip(w))
    {
        eprintln!("warning: {w}");
    }
    Ok((manifests, settings, not_read))
}

/// What `plan`, `explain` and `catalog` read.
struct Input {
    manifests: joiner_model::Manifests,
    settings: joiner_model::settings::Settings,
    snapshot: joiner_engine::snapshot::ClusterSnapshot,
    not_read: Vec<cluster::NotRead>,
}

/// The manifests, the settings and the cluster view built from them.
fn read_input(input: &InputArgs) -> anyhow::Result<Input> {
    let (manifests, settings, not_read) = load_input(input, &|_| false)?;
    let options = joiner_engine::snapshot::Options {
        builtin_catalog: !input.settings.no_builtin_catalog,
    };
    // Now, for what depends on the time: a Capacity Block closes 40 minutes before its end.
    let snapshot =
        joiner_engine::snapshot::ClusterSnapshot::builder(&manifests, &settings, &options)
            .at(now())
            .build()?;
    // An object that cannot be read is an error in the input file: every one is named and
    // nothing is planned. References that lead nowhere (a claim or an EC2NodeClass not created
    // yet) are not: they hold back only their own object, with a warning or a reason.
    if let Some((last, before)) = snapshot.invalid().split_last() {
        for e in before {
            eprintln!("error: {e}");
        }
        return Err(last.clone().into());
    }
    for w in snapshot.warnings() {
        eprintln!("warning: {w}");
    }
    Ok(Input {
        manifests,
        settings,
        snapshot,
        not_read,
    })
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum VersionFormat {
    Text,
    Json,
}

fn version_cmd(output: VersionFormat) -> anyhow::Result<()> {
    let v = version::Version::of_this_build();
    let text = match output {
        VersionFormat::Text => v.text(),
        VersionFormat::Json => format!("{}\n", serde_json::to_string_pretty(&v)?),
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(())
}

/// The files `joiner simulate` writes beside its timeline.
struct SimulateOutputs {
    report: Option<PathBuf>,
    metrics: Option<PathBuf>,
    events: Option<PathBuf>,
}

fn simulate_cmd(
    input: &InputArgs,
    scenario: PathBuf,
    outputs: SimulateOutputs,
    output: SimulateFormat,
) -> anyhow::Result<()> {
    if input.settings.no_builtin_catalog {
        anyhow::bail!(
            "simulate: the simulated cloud sells the built-in catalog; --no-builtin-catalog is not supported yet"
        );
    }
    // The scenario may sit beside the manifests; it is not one of them.
    let scenario_name = scenario.display().to_string();
    let (manifests, settings) =
        manifests_and_settings(input, &|w: &str| w.starts_with(&scenario_name))?;
    joiner_simulate::command::run(
        joiner_simulate::Request {
            manifests,
            settings,
            scenario,
            report: outputs.report,
            json: matches!(output, SimulateFormat::Json),
            metrics: outputs.metrics,
            events: outputs.events,
        },
        &mut std::io::stdout(),
    )?;
    Ok(())
}

fn plan(input: &InputArgs, format: output::Format, launch: bool) -> anyhow::Result<()> {
    if launch && !matches!(format, output::Format::Json | output::Format::Yaml) {
        anyhow::bail!(
            "--launch prints launch templates and user data: use it with -o yaml or -o json"
        );
    }
    let input = read_input(input)?;
    let plan = input.snapshot.plan();
    let launches = launch.then(|| {
        joiner_launch::preview::for_plan(&input.manifests, &input.settings, &input.snapshot, &plan)
    });
    let text = output::render(&plan, launches.as_deref(), &input.not_read, format)?;
    std::io::stdout().write_all(text.as_bytes())?;
    // The process ends here: freeing every object of a large cluster one by one would only
    // delay the exit (4% of the whole run for 100,000 pods, by profile), and the kernel takes
    // the memory back whole.
    std::mem::forget((input, plan, launches));
    Ok(())
}

fn catalog_cmd(input: &InputArgs, format: catalog::Format) -> anyhow::Result<()> {
    let listing = snapshot(input)?.listing();
    let text = catalog::render(&listing, format)?;
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(())
}

fn explain_pod(input: &InputArgs, pod: &str) -> anyhow::Result<()> {
    let Some(account) = snapshot(input)?.explain_pod(pod) else {
        anyhow::bail!("no pod {pod} in the input (give it as namespace/name)");
    };
    let mut text = format!("Pod {}: {}\n", account.pod, account.outcome);
    if let Some(batch) = &account.packing {
        text.push_str(&format!("Packing: {}\n", output::packing_line(batch)));
    }
    if !account.instance_types.is_empty() {
        text.push_str("\nAs the only pod on a new node:\n");
        for line in &account.instance_types {
            text.push_str(&format!("  {line}\n"));
        }
    }
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(())
}

/// The time now. `jiff`'s own clock needs its `std` feature, which the plan-only build (no
/// `controller` feature) does not turn on.
fn now() -> k8s_openapi::jiff::Timestamp {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
}
