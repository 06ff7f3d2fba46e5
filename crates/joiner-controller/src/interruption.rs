//! Interruption messages: the cloud telling us an instance is about to go.
//!
//! On AWS these are EventBridge events (spot interruption warnings, rebalance recommendations,
//! scheduled maintenance, instance state changes) delivered to the SQS queue named by
//! `settings.interruptionQueue`. The AWS edge receives the raw message bodies through
//! [`InterruptionQueue`]; what they mean and what the controller does about them (replacement
//! launched before the node drains) is decided in the pure core.

use crate::cloud::CloudError;

/// One message as the queue delivered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueMessage {
    /// The handle that deletes the message once it has been acted on (SQS `ReceiptHandle`).
    pub receipt: String,
    /// The message body: an EventBridge event as JSON.
    pub body: String,
}

/// A queue of interruption messages.
///
/// Messages are deleted only after they have been acted on, so a controller that restarts
/// between receiving and acting sees the message again (SQS redelivers it after its
/// visibility timeout).
pub trait InterruptionQueue {
    /// Up to `max` messages waiting now; an empty queue gives an empty list.
    fn receive(&self, max: usize) -> Result<Vec<QueueMessage>, CloudError>;
    /// Deletes a message that has been handled.
    fn delete(&self, receipt: &str) -> Result<(), CloudError>;
}

/// A reference to a queue, or a shared one, is a queue.
macro_rules! forward_queue {
    ($($wrapper:ty),*) => {$(
        impl<Q: InterruptionQueue + ?Sized> InterruptionQueue for $wrapper {
            fn receive(&self, max: usize) -> Result<Vec<QueueMessage>, CloudError> {
                (**self).receive(max)
            }
            fn delete(&self, receipt: &str) -> Result<(), CloudError> {
                (**self).delete(receipt)
            }
        }
    )*};
}

forward_queue!(&Q, std::sync::Arc<Q>);
