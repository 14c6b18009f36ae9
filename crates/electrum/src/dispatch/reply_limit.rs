//! `reply_bytes_max`: a response line longer than the limit is replaced by a
//! -101 refusal of each request it answers, so that no session holds more
//! than the limit for a client that does not read; a batch is measured as
//! it is answered, and stops being run once past the limit.

use super::Dispatcher;
use crate::error::RpcError;
use crate::jsonrpc;
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The serialized size of a batch's answers so far, against the reply
/// limit; shared by the threads answering the batch.
pub(super) struct ReplySize {
    pub(super) max: usize,
    bytes: AtomicUsize,
}

impl ReplySize {
    pub(super) fn new(max: usize) -> Self {
        ReplySize {
            max,
            bytes: AtomicUsize::new(0),
        }
    }

    /// Counts `answer`'s JSON length (and its separator) without building
    /// the string.
    pub(super) fn add(&self, answer: &Value) {
        struct Counter(usize);
        impl std::io::Write for Counter {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0 += bytes.len();
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut counter = Counter(1);
        // Writing a `Value` to a counter cannot fail.
        let _ = serde_json::to_writer(&mut counter, answer);
        self.bytes.fetch_add(counter.0, Ordering::Relaxed);
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    pub(super) fn over(&self) -> bool {
        self.bytes() > self.max
    }
}

/// The -101 error of a response over `max` bytes (`bytes` says how long).
fn reply_too_large(bytes: &str, max: usize) -> RpcError {
    RpcError::LimitExceeded(format!(
        "response of {bytes} bytes exceeds the limit of {max} (ask for less at a time)"
    ))
}

impl Dispatcher {
    /// Serializes a response line, or, when it is longer than
    /// `reply_bytes_max`, a refusal of each request it answers under that
    /// request's id (an array for a batch).
    pub(super) fn within_reply_limit(&self, response: Value) -> String {
        let line = response.to_string();
        let max = self.config.reply_bytes_max;
        if line.len() <= max {
            return line;
        }
        let error = reply_too_large(&line.len().to_string(), max);
        tracing::debug!(bytes = line.len(), max, "response over the limit refused");
        let refused = match &response {
            Value::Array(answers) => answers.len(),
            _ => 1,
        };
        for _ in 0..refused {
            self.metrics.requests.error(error.code());
        }
        jsonrpc::refusal(&response, &error).to_string()
    }

    /// Refuses a batch whose answers grew past `reply_bytes_max` while it
    /// was answered (`size`): every request (`ids`, in order) gets the -101
    /// error, as [`Self::within_reply_limit`] would, without the whole
    /// reply ever being built.
    pub(super) fn refuse_batch(&self, ids: Vec<Value>, size: &ReplySize) -> Vec<Value> {
        let error = reply_too_large(&format!("more than {}", size.bytes()), size.max);
        tracing::debug!(
            bytes = size.bytes(),
            max = size.max,
            "batch over the reply limit refused"
        );
        ids.into_iter()
            .map(|id| {
                self.metrics.requests.error(error.code());
                jsonrpc::response(id, Err(error.clone()))
            })
            .collect()
    }
}
