//! The fast path of a reconnecting wallet: a line whose every request is a
//! script hash subscription with a cached status is answered without I/O,
//! on the caller's own thread.

use super::{Dispatcher, Effect, Outcome};
use crate::jsonrpc::{self, Call, Incoming, Message};
use crate::request::{Request, ScriptKey, ScriptMethod};
use crate::scripthash;
use crate::session::SessionState;
use osprey_core::StatusHash;
use serde_json::Value;
use std::time::Instant;

impl Dispatcher {
    /// Answers `incoming` on the spot when every request in it is a script
    /// hash subscription whose status is cached (a wallet reconnecting):
    /// that takes no I/O and next to no CPU, so the caller may run it where
    /// blocking is not allowed. Each request is parsed and looked up once.
    /// Gives `incoming` back, untouched, when any request needs more; the
    /// answers and effects are those [`Self::handle_incoming`] would give.
    pub fn answer_from_cache(
        &self,
        state: &mut SessionState,
        incoming: Incoming,
    ) -> Result<Outcome, Incoming> {
        let Some(statuses) = self.cached_subscriptions(state, &incoming) else {
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
        for (message, (key, status)) in messages.into_iter().zip(statuses) {
            // Every message is such a call: `cached_subscriptions` checked.
            let Message::Call(Call {
                id: Some(id),
                method,
                ..
            }) = message
            else {
                continue;
            };
            let started = Instant::now();
            state.note_other_message();
            let result = state.subscribe(&key, max).map(|_| {
                out.effects.push(Effect::Subscribed { key, status });
                scripthash::status_json(status)
            });
            self.record(&method, started, &result);
            answers.push((id, result));
        }
        // Written straight to text: a cached answer costs little else.
        let mut line = Vec::with_capacity(answers.len() * 100 + 2);
        if !single {
            line.push(b'[');
        }
        for (i, (id, result)) in answers.iter().enumerate() {
            if i > 0 {
                line.push(b',');
            }
            jsonrpc::write_response(&mut line, id, result.as_ref());
        }
        if !single {
            line.push(b']');
        }
        out.response = Some(match String::from_utf8(line) {
            Ok(line) if line.len() <= self.config.reply_bytes_max => line,
            // Over the reply limit (only with the batch limit raised far
            // above its default): refused as any other answer is. (Never
            // invalid UTF-8: serde_json writes UTF-8.)
            _ => {
                let mut answers: Vec<Value> = answers
                    .into_iter()
                    .map(|(id, result)| jsonrpc::response(id, result))
                    .collect();
                let response = match (single, answers.pop()) {
                    (true, Some(answer)) => answer,
                    (_, last) => {
                        answers.extend(last);
                        Value::Array(answers)
                    }
                };
                self.within_reply_limit(response)
            }
        });
        Ok(out)
    }

    /// The key and cached status of each request of `incoming`, if every
    /// one is a script hash subscription (with an id) whose status is
    /// cached; `None` otherwise.
    fn cached_subscriptions(
        &self,
        state: &SessionState,
        incoming: &Incoming,
    ) -> Option<Vec<(ScriptKey, Option<StatusHash>)>> {
        let cached = |message: &Message| match message {
            Message::Call(call) if call.id.is_some() => {
                match Request::parse(&call.method, &call.params, state.protocol()) {
                    Ok(Request::Script {
                        method: ScriptMethod::Subscribe,
                        key,
                    }) => {
                        let status = self.backend.cached_status(&key.scripthash)?;
                        Some((key, status))
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        match incoming {
            Incoming::Single(message) => cached(message).map(|hit| vec![hit]),
            Incoming::Batch(messages) => messages.iter().map(cached).collect(),
            Incoming::Empty | Incoming::Error(_) => None,
        }
    }
}
