//! The interruption queue on SQS: EventBridge's spot interruption warnings, rebalance
//! recommendations, scheduled changes and state changes, as raw message bodies for the core.

use aws_types::SdkConfig;
use joiner_controller::cloud::CloudError;
use joiner_controller::interruption::{InterruptionQueue, QueueMessage};
use tokio::runtime::Handle;

use crate::error::AwsError;

/// SQS returns at most this many messages per call.
const SQS_MAX_MESSAGES: usize = 10;

/// An SQS queue of interruption messages.
///
/// Like [`AwsCloud`](crate::AwsCloud), its methods block on the runtime it holds: call them from
/// a blocking thread.
#[derive(Debug)]
pub struct SqsInterruptionQueue {
    client: aws_sdk_sqs::Client,
    url: String,
    handle: Handle,
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
        })
    }

    /// The queue's URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl InterruptionQueue for SqsInterruptionQueue {
    /// Messages waiting now (no long poll: the controller's step must not stall), at most
    /// `max` and at most SQS's 10 per call.
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
                    .wait_time_seconds(0)
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

    fn delete(&self, receipt: &str) -> Result<(), CloudError> {
        self.handle
            .block_on(
                self.client
                    .delete_message()
                    .queue_url(&self.url)
                    .receipt_handle(receipt)
                    .send(),
            )
            .map_err(|e| AwsError::api("sqs:DeleteMessage", self.url.clone(), e))?;
        Ok(())
    }
}
