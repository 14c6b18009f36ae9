//! The fast path: a line whose every request is answered from memory (a
//! reconnecting wallet's script subscriptions with cached statuses, the
//! version, a ping, the tip) is answered on the caller's own thread,
//! without waiting for a handler slot. Handing such a line to a blocking
//! thread would cost more than the work, and behind a storm of heavy
//! requests a newcomer's `server.version` and a wallet's ping waited
//! seconds for a slot (`scripts/hostile.py`).

use super::{Dispatcher, Effect, Outcome};
use crate::jsonrpc::{Answer, Call, Incoming, Message, Response};
use crate::request::{Request, ScriptKey, ScriptMethod};
use crate::scripthash;
use crate::session::SessionState;
use osprey_core::StatusHash;
use std::time::Instant;

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
    /// those [`Self::handle_incoming`] would give.
    pub fn answer_inline(
        &self,
        state: &mut SessionState,
        incoming: Incoming,
    ) -> Result<Outcome, Incoming> {
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

    /// Each request of `incoming` as answered from memory, if every one is
    /// (and has an id); `None` otherwise.
    fn memory_answers(&self, state: &SessionState, incoming: &Incoming) -> Option<Vec<FromMemory>> {
        let from_memory = |message: &Message| match message {
            Message::Call(call) if call.id.is_some() => {
                match Request::parse(&call.method, &call.params, state.protocol()).ok()? {
                    Request::Script {
                        method: ScriptMethod::Subscribe,
                        key,
                    } => {
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
