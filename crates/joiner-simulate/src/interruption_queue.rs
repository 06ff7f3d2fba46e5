//! An interruption queue in memory, for tests and `joiner simulate`.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use joiner_controller::cloud::CloudError;
use joiner_controller::interruption::{InterruptionQueue, QueueMessage};

#[derive(Debug, Default)]
struct State {
    sent: u64,
    /// Messages not yet deleted, oldest first.
    waiting: Vec<QueueMessage>,
    deleted: u64,
}

/// A queue that clones share: the simulation sends, the controller receives and deletes.
///
/// Like SQS with a visibility timeout of zero, a message received and not deleted is delivered
/// again on the next receive.
#[derive(Debug, Clone, Default)]
pub struct SimulatedInterruptionQueue {
    state: Arc<Mutex<State>>,
}

impl SimulatedInterruptionQueue {
    pub fn new() -> SimulatedInterruptionQueue {
        SimulatedInterruptionQueue::default()
    }

    /// A poisoned lock means a simulated crash unwound through a caller; each operation
    /// changes the state in one go, so it is still consistent.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends a message body; returns its receipt handle.
    pub fn send(&self, body: impl Into<String>) -> String {
        let mut s = self.lock();
        s.sent += 1;
        let receipt = format!("receipt-{}", s.sent);
        s.waiting.push(QueueMessage {
            receipt: receipt.clone(),
            body: body.into(),
        });
        receipt
    }

    /// Messages sent and not yet deleted.
    pub fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Messages deleted so far.
    pub fn deleted(&self) -> u64 {
        self.lock().deleted
    }
}

impl InterruptionQueue for SimulatedInterruptionQueue {
    fn receive(&self, max: usize) -> Result<Vec<QueueMessage>, CloudError> {
        Ok(self.lock().waiting.iter().take(max).cloned().collect())
    }

    fn delete(&self, receipt: &str) -> Result<(), CloudError> {
        let mut s = self.lock();
        let before = s.waiting.len();
        s.waiting.retain(|m| m.receipt != receipt);
        if s.waiting.len() < before {
            s.deleted += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_stay_until_deleted_and_clones_share_them() {
        let q = SimulatedInterruptionQueue::new();
        let other = q.clone();
        let r1 = q.send("one");
        q.send("two");
        let got = other.receive(1).expect("receive");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].body, "one");
        // Not deleted: delivered again.
        assert_eq!(other.receive(10).expect("receive").len(), 2);
        other.delete(&r1).expect("delete");
        other.delete(&r1).expect("deleting twice is fine");
        assert_eq!(q.waiting(), 1);
        assert_eq!(q.deleted(), 1);
        assert_eq!(q.receive(10).expect("receive")[0].body, "two");
    }
}
