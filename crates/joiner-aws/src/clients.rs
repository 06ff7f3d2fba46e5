//! [`Clients`]: the AWS SDK clients the EC2 cloud calls, and the tokio runtime their futures
//! run on. Every EC2 and SSM call is a method of it, in the module of what it is about
//! (`network`, `ami`, `template`, `instances`, `pricing`); `AwsCloud` composes them into a
//! launch.

use std::future::Future;

use aws_types::SdkConfig;
use tokio::runtime::Handle;

/// The EC2 and SSM clients, and the runtime handle their calls block on.
#[derive(Debug)]
pub(crate) struct Clients {
    pub(crate) ec2: aws_sdk_ec2::Client,
    pub(crate) ssm: aws_sdk_ssm::Client,
    handle: Handle,
}

impl Clients {
    pub(crate) fn new(config: &SdkConfig, handle: Handle) -> Clients {
        Clients {
            ec2: aws_sdk_ec2::Client::new(config),
            ssm: aws_sdk_ssm::Client::new(config),
            handle,
        }
    }

    /// Runs an SDK future to completion on the runtime: from a thread that is not driving it
    /// (see `AwsCloud`).
    pub(crate) fn block<F: Future>(&self, f: F) -> F::Output {
        self.handle.block_on(f)
    }
}
