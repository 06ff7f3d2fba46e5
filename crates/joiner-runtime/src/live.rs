//! The live controller process: wires the settings, the kube-rs store, the cloud, leader
//! election, the step loop, Events and the HTTP endpoints together, and turns how it ended into
//! an exit status.

use std::error::Error as StdError;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use joiner_controller::Config;
use joiner_controller::clock::SystemClock;
use joiner_engine::catalog::Catalog;
use joiner_model::settings::Settings;
use joiner_simulate::SimulatedCloud;
use kube::runtime::events::{Recorder, Reporter};
use serde_json::{Value, json};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};
use tracing_subscriber::EnvFilter;

use crate::error::{StartError, chain};
use crate::events;
use crate::http::{self, Health};
use crate::interruptions::{self, Polled, Poller};
use crate::leader::{self, Election, Leadership};
use crate::lease::{Fence, FencedCloud, FencedQueue, FencedStore, SystemTicker};
use crate::rivals;
use crate::run_loop::{LoopEnd, Timing, drive};
use crate::stepper::{Step, Stepped, Stepper};
use crate::{CloudKind, LogFormat, Options};
use joiner_telemetry::events::{ObjectEvent, events_of, rival_event, transition_events};
use joiner_telemetry::metrics::{Claims, Metrics, record, record_outcomes};

/// The name Events are reported under.
const REPORTING_CONTROLLER: &str = "joiner";
/// How long to wait for the API server to answer at start-up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Timeouts of every API call, on the client itself: opening a connection, sending a request,
/// and waiting for each read of an answer. The read timeout must outlast a quiet watch (kube's
/// watcher asks the server to end each watch after 290 s and gives up on one silent for 295 s);
/// the store's writes and the Lease's calls have shorter timeouts of their own (30 s, 4 s).
const API_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const API_WRITE_TIMEOUT: Duration = Duration::from_secs(30);
const API_READ_TIMEOUT: Duration = Duration::from_secs(300);
/// How long each receive of the SQS interruption queue waits for a message (its own loop
/// polls again at once after).
const INTERRUPTION_LONG_POLL: Duration = Duration::from_secs(10);
/// How long a step still running at exit may delay the exit.
const EXIT_GRACE: Duration = Duration::from_secs(10);

/// Runs the live controller until SIGTERM (exit 0) or a fatal error (exit 1).
///
/// Sets up its own logging (call it before any other tracing subscriber is installed), then
/// reads the Helm values with `values`: the caller knows where they come from (files, `--set`),
/// and a failure to read them is logged like any other start-up failure, in the log format
/// asked for.
pub fn main(
    options: Options,
    values: impl FnOnce() -> Result<Value, Box<dyn StdError + Send + Sync>>,
) -> ExitCode {
    init_logging(options.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(run(options, values));
    // A step still blocked on the cloud or the API server must not hold the exit up for long:
    // everything durable is in the cluster and the cloud.
    runtime.shutdown_timeout(EXIT_GRACE);
    match outcome {
        Ok(LoopEnd::Shutdown) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Ok(LoopEnd::LostLeadership) => {
            tracing::error!(
                "lost the leader Lease: exiting so a fresh process starts as a follower"
            );
            ExitCode::FAILURE
        }
        Ok(LoopEnd::StepPanicked) => ExitCode::FAILURE,
        Err(e) => {
            tracing::error!(error = chain(&e), "cannot run the controller");
            ExitCode::FAILURE
        }
    }
}

/// JSON lines (or text) on stderr, filtered by `JOINER_LOG`, else `RUST_LOG`, else `info`.
fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_env("JOINER_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder
            .json()
            .with_current_span(false)
            .with_span_list(false)
            .init(),
        LogFormat::Text => builder.init(),
    }
}

/// The settings, exactly as `joiner plan --values/--set` reads them.
fn settings(values: &Value) -> Result<(Settings, Config), StartError> {
    let (settings, warnings) = Settings::from_values(values)?;
    for w in warnings {
        tracing::warn!("{w}");
    }
    let config = Config::new(settings.clone())?;
    Ok((settings, config))
}

/// Fills in what the values leave out the way Karpenter finds it, so its getting-started
/// `helm install` (which sets neither) works in any region and on any cluster version: the
/// region from the AWS SDK (`AWS_REGION`, which IRSA and Pod Identity set, else instance
/// metadata) and the Kubernetes version from the API server. Returns whether anything changed.
fn fill_in(values: &mut Value, server_version: &str, region: Option<&str>) -> bool {
    let version = set_if_absent(
        values,
        &["settings", "cluster", "kubernetesVersion"],
        server_version,
    );
    let region = region.is_some_and(|r| set_if_absent(values, &["settings", "region"], r));
    version || region
}

/// Sets `path` to `value` unless the values already give it (a null counts as not given).
fn set_if_absent(values: &mut Value, path: &[&str], value: &str) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut at = values;
    for key in parents {
        if at.is_null() {
            *at = json!({});
        }
        let Some(map) = at.as_object_mut() else {
            return false;
        };
        at = map.entry(key.to_string()).or_insert(Value::Null);
    }
    if at.is_null() {
        *at = json!({});
    }
    match at.as_object_mut() {
        Some(map) if map.get(*last).is_none_or(Value::is_null) => {
            map.insert(last.to_string(), json!(value));
            true
        }
        _ => false,
    }
}

/// What the store watches and writes: the simulated cloud's kubelet writes Node status too.
fn store_options(settings: &Settings, cloud: CloudKind) -> joiner_kube::StoreOptions {
    let mut options = joiner_kube::StoreOptions::from_settings(settings);
    if cloud == CloudKind::Simulated {
        options.status_kinds.push("Node");
    }
    options
}

/// This replica's name in the Lease and in Events: the pod's name, else the hostname.
fn identity() -> String {
    std::env::var("POD_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| hostname::get().ok().and_then(|h| h.into_string().ok()))
        .unwrap_or_else(|| "joiner".to_string())
}

/// A client for the cluster in the environment (in-cluster service account, else kubeconfig),
/// checked by asking the server its version so an unreachable cluster fails at once and clearly.
async fn connect() -> Result<(kube::Client, String), StartError> {
    let mut config = kube::Config::infer().await.map_err(StartError::NoCluster)?;
    config.connect_timeout = Some(API_CONNECT_TIMEOUT);
    config.write_timeout = Some(API_WRITE_TIMEOUT);
    config.read_timeout = Some(API_READ_TIMEOUT);
    // The read timeout counts from each request, not from when a pooled connection went idle.
    config.reset_reader_on_write = true;
    let url = config.cluster_url.clone();
    let client = kube::Client::try_from(config).map_err(|source| StartError::Client {
        url: url.to_string(),
        source,
    })?;
    match tokio::time::timeout(CONNECT_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(v)) => {
            tracing::info!(server = %url, version = %v.git_version, "connected to the cluster");
            // EKS reports minors such as `34+`.
            let version = format!("{}.{}", v.major, v.minor.trim_end_matches('+'));
            Ok((client, version))
        }
        Ok(Err(error)) => Err(StartError::Unreachable {
            url: url.to_string(),
            error,
        }),
        Err(_) => Err(StartError::NoAnswer {
            url: url.to_string(),
            seconds: CONNECT_TIMEOUT.as_secs(),
        }),
    }
}

/// The cluster DNS address nodes use: the `kube-system/kube-dns` Service's cluster IP, as
/// Karpenter finds it. Without it (no such Service, no access, a headless one) `nodeadm`
/// derives the address from the service CIDR, so a failure is only logged.
async fn cluster_dns(client: &kube::Client) -> Option<String> {
    let services: kube::Api<k8s_openapi::api::core::v1::Service> =
        kube::Api::namespaced(client.clone(), "kube-system");
    match tokio::time::timeout(CONNECT_TIMEOUT, services.get_opt("kube-dns")).await {
        Ok(Ok(Some(service))) => service
            .spec
            .and_then(|s| s.cluster_ip)
            .filter(|ip| !ip.is_empty() && ip != "None"),
        Ok(Ok(None)) => {
            tracing::warn!("no kube-system/kube-dns Service: nodeadm derives the DNS address");
            None
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot read kube-system/kube-dns: nodeadm derives the DNS address");
            None
        }
        Err(_) => {
            tracing::warn!(
                "no answer reading kube-system/kube-dns: nodeadm derives the DNS address"
            );
            None
        }
    }
}

/// Turns `shutdown` true on SIGTERM (what the kubelet sends) or Ctrl-C.
async fn signals(shutdown: watch::Sender<bool>) {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = terminate => tracing::info!("SIGTERM: finishing the current step"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: finishing the current step"),
    }
    let _ = shutdown.send(true);
}

/// Logs what a step did when it did something, and at debug level otherwise.
fn log_step(out: &Stepped) {
    let r = &out.report;
    let busy = !(r.created.is_empty()
        && r.deleted.is_empty()
        && r.launched.is_empty()
        && r.registered.is_empty()
        && r.initialized.is_empty()
        && r.disruption.is_empty()
        && r.errors.is_empty());
    let took_ms = u64::try_from(out.took.as_millis()).unwrap_or(u64::MAX);
    if busy {
        tracing::info!(
            took_ms,
            created = r.created.len(),
            launched = r.launched.len(),
            registered = r.registered.len(),
            initialized = r.initialized.len(),
            deleted = r.deleted.len(),
            disruptions = r.disruption.len(),
            unschedulable = r.unschedulable.len(),
            errors = r.errors.len(),
            "step"
        );
    } else {
        tracing::debug!(took_ms, planned = r.planned, "step");
    }
}

async fn run(
    options: Options,
    values: impl FnOnce() -> Result<Value, Box<dyn StdError + Send + Sync>>,
) -> Result<LoopEnd, StartError> {
    let mut values = values().map_err(StartError::Values)?;
    // Bad settings fail before any network call.
    let (mut settings, mut config) = settings(&values)?;
    let identity = identity();
    let provider = match options.cloud {
        CloudKind::Aws => "aws",
        CloudKind::Simulated => "simulated",
    };
    tracing::info!(cluster = %config.cluster_name, cloud = provider, identity = %identity, "starting");
    let metrics = Arc::new(Metrics::new(provider));
    let health = Health::default();
    let (stop, shutdown) = watch::channel(false);
    tokio::spawn(signals(stop));
    for (addr, _) in http::serve(
        options.metrics_addr,
        options.health_addr,
        metrics.clone(),
        health.clone(),
        shutdown.clone(),
    )
    .await?
    {
        tracing::info!(%addr, "serving HTTP");
    }

    let (client, server_version) = connect().await?;
    let sdk = match options.cloud {
        CloudKind::Aws => Some(
            // Credentials, region and endpoint from the SDK's usual chain (`AWS_ENDPOINT_URL`
            // too); an explicit `settings.region` wins.
            aws_config::defaults(aws_config::BehaviorVersion::latest())
                .load()
                .await,
        ),
        CloudKind::Simulated => None,
    };
    let sdk_region = sdk
        .as_ref()
        .and_then(|c| c.region())
        .map(|r| r.as_ref().to_string());
    if fill_in(&mut values, &server_version, sdk_region.as_deref()) {
        (settings, config) = self::settings(&values)?;
    }
    tracing::info!(region = %settings.region, kubernetes = %settings.cluster.kubernetes_version, "settings");
    let store = joiner_kube::KubeStore::start_with(
        client.clone(),
        Handle::current(),
        options.cache_sync_timeout,
        store_options(&settings, options.cloud),
    )
    .await
    .map_err(StartError::Caches)?;
    let probe = store.clone();
    health.set_store(move || probe.is_ready());

    // Every write to the cluster and the cloud asks the fence first: with an election, it holds
    // only until the renew deadline of this replica's last renewal of the Lease.
    let fence = if options.leader_election.is_some() {
        Fence::new(Arc::new(SystemTicker))
    } else {
        Fence::always()
    };
    let fenced_store = FencedStore::new(store.clone(), fence.clone());
    // The Lease is joined only once the caches are synced and the cloud is up, so a replica
    // that cannot work never holds it.
    let mut poller = None;
    let stepper: BoxedStep = match options.cloud {
        CloudKind::Aws => {
            let sdk = sdk
                .ok_or(StartError::NoSdkConfig)?
                .into_builder()
                .region(aws_config::Region::new(settings.region.clone()))
                .build();
            // Nodes cannot join without the endpoint, CA and service CIDR: refuse to start
            // rather than launch them.
            let mut access = joiner_aws::cluster::discover(&sdk, &settings, &config.cluster_name)
                .await
                .map_err(StartError::Aws)?;
            access.dns_ip = cluster_dns(&client).await;
            tracing::info!(endpoint = %access.endpoint, service_cidr = %access.service_cidr,
                dns = access.dns_ip.as_deref().unwrap_or("derived by nodeadm"), "cluster access");
            let cloud = joiner_aws::AwsCloud::from_sdk_config(
                &sdk,
                &settings,
                &config.cluster_name,
                Handle::current(),
            )
            .await
            .map_err(StartError::Aws)?
            .with_cluster_access(access);
            let cloud = FencedCloud::new(cloud, fence.clone());
            if let Some(queue) = settings.interruption_queue.as_deref() {
                let queue = joiner_aws::SqsInterruptionQueue::new(&sdk, queue, Handle::current())
                    .await
                    .map_err(|source| StartError::Queue {
                        queue: queue.to_string(),
                        source,
                    })?
                    .with_long_poll(INTERRUPTION_LONG_POLL);
                let queue = FencedQueue::new(queue, fence.clone());
                poller = Some(Poller::new(
                    fenced_store.clone(),
                    Box::new(queue),
                    SystemClock,
                ));
            }
            Box::new(Stepper::new(fenced_store, cloud, SystemClock, config))
        }
        CloudKind::Simulated => {
            let catalog = Catalog::builtin(&settings.region, &settings.zones);
            let cloud = Arc::new(SimulatedCloud::new(&catalog, SystemClock));
            let fenced = FencedCloud::new(cloud.clone(), fence.clone());
            let stepper = Stepper::new(fenced_store, fenced, SystemClock, config)
                .with_kubelet(cloud, options.kwok);
            Box::new(stepper)
        }
    };
    health.set_cloud_ready();

    let own_lease = options
        .leader_election
        .as_ref()
        .map(|lease| rivals::OwnLease {
            namespace: lease
                .namespace
                .clone()
                .or_else(|| {
                    std::env::var("POD_NAMESPACE")
                        .ok()
                        .filter(|n| !n.is_empty())
                })
                .unwrap_or_else(|| client.default_namespace().to_string()),
            name: lease.name.clone(),
        });
    let (election, leadership, _always) = if let Some(own) = &own_lease {
        let election = Election::start(
            client.clone(),
            &own.namespace,
            &own.name,
            &identity,
            fence.clone(),
        );
        tracing::info!(lease = %format!("{}/{}", own.namespace, own.name), "waiting for the leader Lease");
        let state = election.state.clone();
        (Some(election), state, None)
    } else {
        let (tx, rx) = leader::always_leading();
        (None, rx, Some(tx))
    };
    tokio::spawn(follow_leadership(leadership.clone(), metrics.clone()));
    // Never two controllers: while Karpenter or another Joiner holds its Lease, this replica
    // leads nothing.
    let (rival_tx, rival) = watch::channel(None);
    tokio::spawn(rivals::watch(
        client.clone(),
        options.rival_leases.clone(),
        own_lease,
        rival_tx,
    ));
    let (events_tx, events_rx) = mpsc::channel(64);
    tokio::spawn(follow_rival(
        rival.clone(),
        health.clone(),
        own_pod(),
        events_tx.clone(),
    ));
    let leadership = rivals::gate(leadership, rival);

    let reporter = Reporter {
        controller: REPORTING_CONTROLLER.into(),
        instance: Some(identity),
    };
    let publisher = tokio::spawn(events::publish(Recorder::new(client, reporter), events_rx));
    // Interruption messages are handled in a loop of their own, never behind a step.
    let interruptions = poller.map(|poller| {
        let metrics = metrics.clone();
        let events_tx = events_tx.clone();
        tokio::spawn(interruptions::drive(
            poller,
            leadership.clone(),
            shutdown.clone(),
            move |out: Polled| {
                record_outcomes(&out.report, &Claims::new(), &metrics);
                if out.received > 0 {
                    tracing::info!(
                        received = out.received,
                        interrupted = out.report.disruption.len(),
                        errors = out.report.errors.len(),
                        took_ms = u64::try_from(out.took.as_millis()).unwrap_or(u64::MAX),
                        "interruption messages"
                    );
                }
                let batch = events_of(&out.report, &out.subjects);
                if !batch.is_empty() && events_tx.try_send(batch).is_err() {
                    tracing::debug!("event publisher busy: dropped interruption events");
                }
            },
        ))
    });
    // The conditions as the last step left them, to tell which changed.
    let mut conditions = Vec::new();
    let observe = move |out: Stepped| {
        record(&out.report, &out.claims, out.took, &metrics);
        metrics.set_state(&out.state);
        log_step(&out);
        let mut batch = events_of(&out.report, &out.subjects);
        batch.extend(transition_events(&conditions, &out.state.conditions));
        conditions = out.state.conditions;
        // Events are best effort: when the publisher lags, a batch is dropped, not waited for.
        if !batch.is_empty() && events_tx.try_send(batch).is_err() {
            tracing::debug!("event publisher busy: dropped this step's events");
        }
    };
    let changes = store.clone();
    let end = drive(
        Watched {
            inner: stepper,
            health: health.clone(),
        },
        Timing::default(),
        move || changes.changed(),
        leadership,
        shutdown,
        observe,
    )
    .await;
    if let Some(task) = interruptions {
        // It ends with the step loop (shutdown or a lost Lease); a long poll in progress is
        // not waited for: an undeleted message is delivered again.
        task.abort();
    }
    if let Some(election) = election {
        election.release().await;
    }
    // The loop dropped the sender: the publisher sends what it has and ends.
    if tokio::time::timeout(Duration::from_secs(5), publisher)
        .await
        .is_err()
    {
        tracing::warn!("gave up publishing the last events");
    }
    Ok(end)
}

type BoxedStep = Box<dyn Step>;

/// A stepper whose steps `/healthz` and `/readyz` watch ([`Health::step_began`]).
struct Watched {
    inner: BoxedStep,
    health: Health,
}

impl Step for Watched {
    fn step(&mut self) -> Stepped {
        self.health.step_began();
        let out = self.inner.step();
        self.health.step_ended(&out.report);
        out
    }
}

impl Step for Box<dyn Step> {
    fn step(&mut self) -> Stepped {
        (**self).step()
    }
}

/// Keeps `/readyz` in step with what [`rivals::watch`] finds.
async fn follow_rival(
    mut rival: watch::Receiver<Option<String>>,
    health: Health,
    own_pod: Option<String>,
    events_tx: mpsc::Sender<Vec<ObjectEvent>>,
) {
    let mut told: Option<bool> = None;
    loop {
        let why = rival.borrow_and_update().clone();
        health.set_rival(why.clone());
        // An event on Joiner's own pod each time it stands down or resumes (not at a start
        // with no rival: nothing changed for anyone).
        let running = why.is_some();
        if told != Some(running)
            && (running || told.is_some())
            && let Some(pod) = &own_pod
            && events_tx
                .try_send(vec![rival_event(pod, why.as_deref())])
                .is_err()
        {
            tracing::warn!("the event queue is full: the stand-down event is dropped");
        }
        told = Some(running);
        if rival.changed().await.is_err() {
            return;
        }
    }
}

/// This replica's pod (`namespace/name`), as the chart's downward API gives it; events about
/// Joiner itself go there.
fn own_pod() -> Option<String> {
    let name = std::env::var("POD_NAME").ok().filter(|n| !n.is_empty())?;
    let namespace = std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|n| !n.is_empty())?;
    Some(format!("{namespace}/{name}"))
}

/// Keeps the `joiner_leader` gauge in step with the election.
async fn follow_leadership(mut state: watch::Receiver<Leadership>, metrics: Arc<Metrics>) {
    loop {
        let leading = *state.borrow_and_update() == Leadership::Leading;
        metrics.set_leader(leading);
        if leading {
            tracing::info!("leading: stepping the controller");
        }
        if state.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_and_the_sdk_fill_in_only_what_the_values_leave_out() {
        let mut values = json!({"settings": {"clusterName": "c", "region": null}});
        assert!(fill_in(&mut values, "1.34", Some("eu-west-1")));
        let (filled, _) = settings(&values).unwrap();
        assert_eq!(filled.region, "eu-west-1");
        assert_eq!(filled.zones[0], "eu-west-1a");
        assert_eq!(filled.cluster.kubernetes_version, "1.34");

        let mut given = json!({"settings": {"clusterName": "c", "region": "us-west-2",
            "cluster": {"kubernetesVersion": "1.35"}}});
        assert!(!fill_in(&mut given, "1.34", Some("eu-west-1")));
        let (kept, _) = settings(&given).unwrap();
        assert_eq!(kept.region, "us-west-2");
        assert_eq!(kept.cluster.kubernetes_version, "1.35");
    }

    /// Standing down and resuming each put one event on Joiner's own pod; a start with no
    /// rival puts none, and an unchanged reading none again.
    #[tokio::test]
    async fn each_stand_down_and_resume_is_one_event_on_joiners_pod() {
        let (rival_tx, rival) = watch::channel(None);
        let (events_tx, mut events_rx) = mpsc::channel(8);
        let health = Health::default();
        tokio::spawn(follow_rival(
            rival,
            health.clone(),
            Some("kube-system/joiner-0".into()),
            events_tx,
        ));
        let settle = || tokio::time::sleep(std::time::Duration::from_millis(50));
        settle().await;
        assert!(
            events_rx.try_recv().is_err(),
            "no event at a start with no rival"
        );
        rival_tx.send_replace(Some("Karpenter is running: k-1 holds Lease x".into()));
        settle().await;
        let down = events_rx.try_recv().expect("a stand-down event");
        assert_eq!(down[0].reason(), "AnotherControllerRunning");
        rival_tx.send_replace(Some("Karpenter is running: k-1 holds Lease x".into()));
        settle().await;
        assert!(events_rx.try_recv().is_err(), "the same reading again");
        rival_tx.send_replace(None);
        settle().await;
        let up = events_rx.try_recv().expect("a resume event");
        assert_eq!(up[0].reason(), "NoOtherController");
    }
}
