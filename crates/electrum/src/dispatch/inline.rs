//! The fast path: a line whose every request is answered from memory (a
//! reconnecting wallet's script subscriptions with cached statuses, the
//! version, a ping, the tip) is answered on the caller's own thread,
//! without waiting for a handler slot. Handing such a line to a blocking
//! thread would cost more than the work, and behind a storm of heavy
//! requests a newcomer's `server.version` and a wallet's ping waited
//! seconds for a slot (`scripts/hostile.py`).

use super::{Dispatcher, Effect, Outcome};
use crate::jsonrpc::{self, Answer, Call, Incoming, Message, Response};
use crate::request::{Request, ScriptMethod};
use crate::script::ScriptKey;
use crate::scripthash;
use crate::session::SessionState;
use osprey_core::StatusHash;
use std::time::Instant;

/// Bytes a block header takes in an answer: 80 bytes as hex.
const HEADER_HEX_BYTES: usize = 160;

/// What a line's answer will take, in bytes (see
/// [`Dispatcher::reply_estimate`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReplyEstimate {
    /// Certain: a line over the reply limit by this is refused unrun.
    pub at_least: usize,
    /// What it will likely take, `at_least` included.
    pub expected: usize,
}

/// A request answered from memory.
enum FromMemory {
    /// A script hash subscription whose status is cached.
    Subscribe {
        key: ScriptKey,
        status: Option<StatusHash>,
    },
    /// A request that reads nothing but memory: the version, a ping, the
    /// server's own description, the tip.
    Request(Request),
}

impl Dispatcher {
    /// Answers `incoming` on the spot when every request in it is answered
    /// from memory (see [`FromMemory`]): that takes no I/O and next to no
    /// CPU, so the caller may run it where blocking is not allowed. Each
    /// request is parsed and looked up once. Gives `incoming` back,
    /// untouched, when any request needs more; the answers and effects are
    /// those [`Self::handle_incoming`] would give. A line whose reply
    /// certainly cannot fit (by `estimate`, the line's
    /// [`Self::reply_estimate`], which the caller has charged already) is
    /// refused here, unrun.
    pub fn answer_inline(
        &self,
        state: &mut SessionState,
        incoming: Incoming,
        estimate: &ReplyEstimate,
    ) -> Result<Outcome, Incoming> {
        if estimate.at_least > self.config.reply_bytes_max {
            return Ok(self.refuse_unanswerable(state, incoming));
        }
        let Some(requests) = self.memory_answers(state, &incoming) else {
            return Err(incoming);
        };
        let (messages, single) = match incoming {
            Incoming::Single(message) => (vec![message], true),
            Incoming::Batch(messages) => (messages, false),
            other => return Err(other),
        };
        let max = self.config.subscriptions_per_session_max;
        let mut out = Outcome::default();
        let mut answers = Vec::with_capacity(messages.len());
        for (message, request) in messages.into_iter().zip(requests) {
            // Every message is such a call: `memory_answers` checked.
            let Message::Call(Call {
                id: Some(id),
                method,
                ..
            }) = message
            else {
                continue;
            };
            let started = Instant::now();
            let result = match request {
                FromMemory::Subscribe { key, status } => {
                    state.note_other_message();
                    state.subscribe(&key, max).map(|_| {
                        out.effects.push(Effect::Subscribed { key, status });
                        Answer::from(scripthash::status_json(status))
                    })
                }
                FromMemory::Request(request) => self.execute(state, request, &mut out),
            };
            self.record(&method, started, &result);
            answers.push(Response::new(id, result));
        }
        out.response = Some(self.reply_line(answers, !single));
        Ok(out)
    }

    /// What answering `incoming` will send at least, and is expected to
    /// send: headers are 160 hex characters each, as many as the chain and
    /// `headers_per_call_max` allow; a history as long as the one kept for
    /// sharing, if any (it may have changed since: expected, not certain).
    /// Asked before any work is done: the session charges what is expected
    /// to its cost first, so that a greedy client is queued behind others
    /// before it takes a slot, and a line that cannot fit in a reply is
    /// refused without being run.
    pub fn reply_estimate(&self, state: &SessionState, incoming: &Incoming) -> ReplyEstimate {
        let (tip, _) = self.backend.tip();
        let estimate = |message: &Message| -> ReplyEstimate {
            let Message::Call(call) = message else {
                return ReplyEstimate::default();
            };
            // Only these are estimated: the others are not parsed twice (a
            // reconnecting wallet's thousands of subscriptions).
            if !matches!(
                call.method.as_str(),
                "blockchain.block.headers"
                    | "blockchain.scripthash.get_history"
                    | "blockchain.scriptpubkey.get_history"
            ) {
                return ReplyEstimate::default();
            }
            match Request::parse(&call.method, &call.params, state.protocol()) {
                Ok(Request::BlockHeaders {
                    start_height,
                    count,
                    ..
                }) => {
                    let available =
                        (u64::from(tip.0) + 1).saturating_sub(u64::from(start_height.0));
                    let headers = u64::from(count)
                        .min(self.config.headers_per_call_max as u64)
                        .min(available) as usize;
                    let bytes = headers * HEADER_HEX_BYTES;
                    ReplyEstimate {
                        at_least: bytes,
                        expected: bytes,
                    }
                }
                Ok(Request::Script {
                    method: ScriptMethod::GetHistory,
                    key,
                }) => ReplyEstimate {
                    at_least: 0,
                    expected: self.histories.kept_len(&key.scripthash).unwrap_or(0),
                },
                _ => ReplyEstimate::default(),
            }
        };
        match incoming {
            Incoming::Single(message) => estimate(message),
            Incoming::Batch(messages) => {
                messages
                    .iter()
                    .map(estimate)
                    .fold(ReplyEstimate::default(), |sum, one| ReplyEstimate {
                        at_least: sum.at_least.saturating_add(one.at_least),
                        expected: sum.expected.saturating_add(one.expected),
                    })
            }
            Incoming::Empty | Incoming::Error(_) => ReplyEstimate::default(),
        }
    }

    /// Refuses every request of `incoming` with the reply limit's -101
    /// error, running none (as a batch that passes the limit is refused).
    pub(super) fn refuse_unanswerable(
        &self,
        state: &mut SessionState,
        incoming: Incoming,
    ) -> Outcome {
        state.note_other_message();
        let (messages, batch) = match incoming {
            Incoming::Single(message) => (vec![message], false),
            Incoming::Batch(messages) => (messages, true),
            Incoming::Empty | Incoming::Error(_) => (Vec::new(), false),
        };
        let ids: Vec<_> = messages
            .into_iter()
            .filter_map(|message| match message {
                Message::Call(call) => call.id,
                Message::Invalid { id, .. } => Some(id),
                Message::Response => None,
            })
            .collect();
        let max = self.config.reply_bytes_max;
        let size = super::reply_limit::ReplySize::new(max);
        size.add_bytes(max + 1);
        let responses = self.refuse_batch(ids, &size);
        Outcome {
            response: (!responses.is_empty()).then(|| jsonrpc::write_line(&responses, batch)),
            ..Outcome::default()
        }
    }

    /// Each request of `incoming` as answered from memory, if every one is
    /// (and has an id); `None` otherwise.
    fn memory_answers(&self, state: &SessionState, incoming: &Incoming) -> Option<Vec<FromMemory>> {
        let from_memory = |message: &Message| match message {
            Message::Call(call) if call.id.is_some() => {
                match Request::parse(&call.method, &call.params, state.protocol()).ok()? {
                    // During the first sync the refusal is made where
                    // every request is parsed, not here.
                    Request::Script {
                        method: ScriptMethod::Subscribe,
                        key,
                    } if self.backend.indexing().is_none() => {
                        let status = self.backend.cached_status(&key.scripthash)?;
                        Some(FromMemory::Subscribe { key, status })
                    }
                    request @ (Request::ServerVersion { .. }
                    | Request::ServerPing { .. }
                    | Request::ServerBanner
                    | Request::ServerDonationAddress
                    | Request::ServerFeatures
                    | Request::HeadersSubscribe) => Some(FromMemory::Request(request)),
                    _ => None,
                }
            }
            _ => None,
        };
        match incoming {
            Incoming::Single(message) => from_memory(message).map(|hit| vec![hit]),
            Incoming::Batch(messages) => messages.iter().map(from_memory).collect(),
            Incoming::Empty | Incoming::Error(_) => None,
        }
    }
}
