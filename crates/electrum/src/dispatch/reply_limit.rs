//! `reply_bytes_max`: a response line longer than the limit is replaced by a
//! -101 refusal of each request it answers, so that no session holds more
//! than the limit for a client that does not read; a batch is measured as
//! it is answered, and stops being run once past the limit.

use super::Dispatcher;
use crate::error::RpcError;
use crate::jsonrpc::{self, Response};
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
    /// the line.
    pub(super) fn add(&self, answer: &Response) {
        self.bytes
            .fetch_add(answer.written_len() + 1, Ordering::Relaxed);
    }

    /// Counts bytes known without an answer to measure.
    pub(super) fn add_bytes(&self, bytes: usize) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    pub(super) fn over(&self) -> bool {
        self.bytes() > self.max
    }
}

/// The -101 error of a response over `max` bytes (`bytes` says how long).
pub(super) fn reply_too_large(bytes: &str, max: usize) -> RpcError {
    RpcError::LimitExceeded(format!(
        "response of {bytes} bytes exceeds the limit of {max} (ask for less at a time)"
    ))
}

impl Dispatcher {
    /// Writes a response line (`batch`: an array), or, when it is longer
    /// than `reply_bytes_max`, a refusal of each request it answers under
    /// that request's id.
    pub(super) fn reply_line(&self, responses: Vec<Response>, batch: bool) -> String {
        let line = jsonrpc::write_line(&responses, batch);
        let max = self.config.reply_bytes_max;
        if line.len() <= max {
            return line;
        }
        let error = reply_too_large(&line.len().to_string(), max);
        tracing::debug!(bytes = line.len(), max, "response over the limit refused");
        drop(line);
        let refused: Vec<Response> = responses
            .into_iter()
            .map(|response| {
                self.metrics.requests.error(error.code());
                Response::new(response.id, Err(error.clone()))
            })
            .collect();
        jsonrpc::write_line(&refused, batch)
    }

    /// Refuses a batch whose answers grew past `reply_bytes_max` while it
    /// was answered (`size`): every request (`ids`, in order) gets the -101
    /// error, as [`Self::reply_line`] would, without the whole reply ever
    /// being built.
    pub(super) fn refuse_batch(&self, ids: Vec<Value>, size: &ReplySize) -> Vec<Response> {
        let error = reply_too_large(&format!("more than {}", size.bytes()), size.max);
        tracing::debug!(
            bytes = size.bytes(),
            max = size.max,
            "batch over the reply limit refused"
        );
        ids.into_iter()
            .map(|id| {
                self.metrics.requests.error(error.code());
                Response::new(id, Err(error.clone()))
            })
            .collect()
    }
}
