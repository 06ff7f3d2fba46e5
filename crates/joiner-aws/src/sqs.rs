//! The interruption queue on SQS: EventBridge's spot interruption warnings, rebalance
//! recommendations, scheduled changes and state changes, as raw message bodies for the core.

use std::time::Duration;

use aws_types::SdkConfig;
use joiner_controller::cloud::CloudError;
use joiner_controller::interruption::{InterruptionQueue, QueueMessage};
use tokio::runtime::Handle;

use crate::error::AwsError;

/// SQS returns at most this many messages per call.
const SQS_MAX_MESSAGES: usize = 10;
/// The longest long poll SQS allows.
const SQS_MAX_WAIT: Duration = Duration::from_secs(20);

/// An SQS queue of interruption messages.
///
/// Like [`AwsCloud`](crate::AwsCloud), its methods block on the runtime it holds: call them from
/// a blocking thread.
#[derive(Debug)]
pub struct SqsInterruptionQueue {
    client: aws_sdk_sqs::Client,
    url: String,
    handle: Handle,
    /// How long a receive waits for a message to arrive (SQS `WaitTimeSeconds`).
    wait: Duration,
}

impl SqsInterruptionQueue {
    /// The queue named `queue_name` (`settings.interruptionQueue`), its URL looked up now so a
    /// wrong name fails at start-up rather than on every step. Its calls run under the EC2
    /// cloud's timeouts and retries (`clients`).
    pub async fn new(
        sdk: &SdkConfig,
        queue_name: &str,
        handle: Handle,
    ) -> Result<SqsInterruptionQueue, AwsError> {
        let config = aws_sdk_sqs::config::Builder::from(sdk)
            .timeout_config(crate::clients::timeouts())
            .retry_config(crate::clients::retries())
            .build();
        let client = aws_sdk_sqs::Client::from_conf(config);
        let out = client
            .get_queue_url()
            .queue_name(queue_name)
            .send()
            .await
            .map_err(|e| AwsError::api("sqs:GetQueueUrl", queue_name, e))?;
        let url = out
            .queue_url()
            .ok_or_else(|| AwsError::Settings(format!("SQS queue {queue_name} has no URL")))?
            .to_string();
        Ok(SqsInterruptionQueue {
            client,
            url,
            handle,
            wait: Duration::ZERO,
        })
    }

    /// Each receive waits up to `wait` (at most SQS's 20 s) for a message to arrive, and
    /// answers as soon as one does: a loop of its own polls with this, so a warning is handled
    /// at once without asking SQS every instant. Without it a receive answers at once, as a
    /// step that must not stall needs.
    pub fn with_long_poll(mut self, wait: Duration) -> Self {
        self.wait = wait.min(SQS_MAX_WAIT);
        self
    }

    /// The queue's URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl InterruptionQueue for SqsInterruptionQueue {
    /// Messages waiting now, or within the long poll (see
    /// [`SqsInterruptionQueue::with_long_poll`]), at most `max` and at most SQS's 10 per call.
    fn receive(&self, max: usize) -> Result<Vec<QueueMessage>, CloudError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let count = i32::try_from(max.min(SQS_MAX_MESSAGES)).unwrap_or(1);
        let out = self
            .handle
            .block_on(
                self.client
                    .receive_message()
                    .queue_url(&self.url)
                    .max_number_of_messages(count)
                    .wait_time_seconds(i32::try_from(self.wait.as_secs()).unwrap_or(0))
                    .send(),
            )
            .map_err(|e| AwsError::api("sqs:ReceiveMessage", self.url.clone(), e))?;
        Ok(out
            .messages()
            .iter()
            .filter_map(|m| {
                Some(QueueMessage {
                    receipt: m.receipt_handle()?.to_string(),
                    body: m.body().unwrap_or_default().to_string(),
                })
            })
            .collect())
    }

    /// Within the deadline of a write in progress, like every EC2 call (see `clients`).
    fn delete(&self, receipt: &str) -> Result<(), CloudError> {
        let sent = async {
            self.client
                .delete_message()
                .queue_url(&self.url)
                .receipt_handle(receipt)
                .send()
                .await
                .map_err(|e| AwsError::api("sqs:DeleteMessage", self.url.clone(), e))
        };
        crate::clients::within_deadline(&self.handle, sent)?;
        Ok(())
    }
}
