//! [`Clients`]: the AWS SDK clients the EC2 cloud calls, the tokio runtime their futures run
//! on, and the limits every call runs under. Every EC2 and SSM call is a method of it, in the
//! module of what it is about (`network`, `ami`, `template`, `instances`, `pricing`);
//! `AwsCloud` composes them into a launch.
//!
//! The controller's step waits on these calls, so none may hang and none may hammer an API
//! that asks to slow down:
//!
//! - **Timeouts** ([`timeouts`]): 3 s to connect, 20 s per attempt, 60 s per call with its
//!   retries. An `instant` CreateFleet answers once EC2 has decided, within seconds; an attempt
//!   that takes 20 s is not coming back.
//! - **Retries** ([`retries`]): the SDK's standard mode, 5 attempts in all, exponential backoff
//!   with full jitter from 0.5 s up to 10 s. It retries throttling codes (`RequestLimitExceeded`,
//!   `Throttling`, ...), 5xx answers, timeouts and dropped connections, and nothing else. A
//!   retried CreateFleet carries the same `ClientToken`, so EC2 answers it with the first
//!   attempt's instance instead of launching another.

use std::future::Future;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_types::SdkConfig;
use tokio::runtime::Handle;

/// Attempts per call, the first included.
pub const MAX_ATTEMPTS: u32 = 5;
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(500);
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(20);
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(60);

/// The timeouts of every call (see the module documentation).
pub(crate) fn timeouts() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_attempt_timeout(ATTEMPT_TIMEOUT)
        .operation_timeout(OPERATION_TIMEOUT)
        .build()
}

/// The retries of every call (see the module documentation).
pub(crate) fn retries() -> RetryConfig {
    RetryConfig::standard()
        .with_max_attempts(MAX_ATTEMPTS)
        .with_initial_backoff(INITIAL_BACKOFF)
        .with_max_backoff(MAX_BACKOFF)
}

/// The EC2, SSM and IAM clients, and the runtime handle their calls block on.
#[derive(Debug)]
pub(crate) struct Clients {
    pub(crate) ec2: aws_sdk_ec2::Client,
    pub(crate) ssm: aws_sdk_ssm::Client,
    /// Instance profiles for `spec.role` classes (`profile`).
    pub(crate) iam: aws_sdk_iam::Client,
    /// On-demand prices (`on_demand`), in the Price List API's own region.
    pub(crate) pricing: aws_sdk_pricing::Client,
    /// The region of `config`: instance profiles are tagged with it.
    pub(crate) region: String,
    handle: Handle,
}

impl Clients {
    /// Clients over `config` (credentials, region, endpoint), with Joiner's timeouts and retries
    /// whatever `config` says.
    pub(crate) fn new(config: &SdkConfig, handle: Handle) -> Clients {
        let ec2 = aws_sdk_ec2::config::Builder::from(config)
            .timeout_config(timeouts())
            .retry_config(retries())
            .build();
        let ssm = aws_sdk_ssm::config::Builder::from(config)
            .timeout_config(timeouts())
            .retry_config(retries())
            .build();
        let iam = aws_sdk_iam::config::Builder::from(config)
            .timeout_config(timeouts())
            .retry_config(retries())
            .build();
        let region = config.region().map(ToString::to_string).unwrap_or_default();
        let pricing = pricing_config(config, &region).build();
        Clients {
            ec2: aws_sdk_ec2::Client::from_conf(ec2),
            ssm: aws_sdk_ssm::Client::from_conf(ssm),
            iam: aws_sdk_iam::Client::from_conf(iam),
            pricing: aws_sdk_pricing::Client::from_conf(pricing),
            region,
            handle,
        }
    }

    /// The Price List API at `endpoint` (tests point it at a stub: moto has no Price List).
    pub(crate) fn with_pricing_endpoint(mut self, config: &SdkConfig, endpoint: &str) -> Clients {
        let pricing = pricing_config(config, &self.region)
            .endpoint_url(endpoint)
            .build();
        self.pricing = aws_sdk_pricing::Client::from_conf(pricing);
        self
    }

    /// Runs an SDK future to completion on the runtime: from a thread that is not driving it
    /// (see `AwsCloud`). Within the deadline of a write in progress (a leader's fence: see
    /// `joiner_controller::deadline`), the call is given up when the deadline comes, whatever
    /// the SDK's own timeouts would allow.
    pub(crate) fn block<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
        E: From<crate::error::AwsError>,
    {
        within_deadline(&self.handle, f)
    }

    /// Runs a future that cannot fail (a read that falls back to what it knows) to completion.
    pub(crate) fn block_read<F: Future>(&self, f: F) -> F::Output {
        self.handle.block_on(f)
    }
}

/// Where the Price List API answers for a cluster in `region`: it lives in a few regions only.
pub(crate) fn pricing_region(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "cn-northwest-1"
    } else {
        "us-east-1"
    }
}

/// The Price List API client's configuration: `config`'s credentials and endpoint, in the
/// API's region for `region`, with the same limits as every other client.
fn pricing_config(config: &SdkConfig, region: &str) -> aws_sdk_pricing::config::Builder {
    aws_sdk_pricing::config::Builder::from(config)
        .region(aws_types::region::Region::new(pricing_region(region)))
        .timeout_config(timeouts())
        .retry_config(retries())
}

/// Runs `f` on `handle`, given up at what is left of the deadline in force (see
/// [`Clients::block`]).
pub(crate) fn within_deadline<T, E, F>(handle: &Handle, f: F) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<crate::error::AwsError>,
{
    let Some(left) = joiner_controller::deadline::left() else {
        return handle.block_on(f);
    };
    // The timer is made inside `block_on`, where the runtime is entered.
    match handle.block_on(async move { tokio::time::timeout(left, f).await }) {
        Ok(answer) => answer,
        Err(_) => Err(crate::error::AwsError::Deadline(left).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_price_list_answers_from_its_own_regions() {
        assert_eq!(pricing_region("eu-west-1"), "us-east-1");
        assert_eq!(pricing_region("us-east-1"), "us-east-1");
        assert_eq!(pricing_region("cn-north-1"), "cn-northwest-1");
    }

    #[test]
    fn every_client_gets_the_documented_limits() {
        let config = SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let clients = Clients::new(&config, rt.handle().clone());
        for (timeout, retry) in [
            (
                clients.ec2.config().timeout_config(),
                clients.ec2.config().retry_config(),
            ),
            (
                clients.ssm.config().timeout_config(),
                clients.ssm.config().retry_config(),
            ),
            (
                clients.iam.config().timeout_config(),
                clients.iam.config().retry_config(),
            ),
            (
                clients.pricing.config().timeout_config(),
                clients.pricing.config().retry_config(),
            ),
        ] {
            let timeout = timeout.expect("timeouts");
            assert_eq!(timeout.connect_timeout(), Some(CONNECT_TIMEOUT));
            assert_eq!(timeout.operation_attempt_timeout(), Some(ATTEMPT_TIMEOUT));
            assert_eq!(timeout.operation_timeout(), Some(OPERATION_TIMEOUT));
            let retry = retry.expect("retries");
            assert_eq!(retry.mode(), aws_config::retry::RetryMode::Standard);
            assert_eq!(retry.max_attempts(), MAX_ATTEMPTS);
            assert_eq!(retry.initial_backoff(), INITIAL_BACKOFF);
            assert_eq!(retry.max_backoff(), MAX_BACKOFF);
        }
    }
}
