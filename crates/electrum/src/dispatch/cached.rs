//! The fast path of a reconnecting wallet: a line whose every request is a
//! script hash subscription with a cached status is answered without I/O,
//! on the caller's own thread.

use super::{Dispatcher, Effect, Outcome};
use crate::jsonrpc::{Answer, Call, Incoming, Message, Response};
use crate::request::{Request, ScriptKey, ScriptMethod};
use crate::scripthash;
use crate::session::SessionState;
use osprey_core::StatusHash;
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
            answers.push(Response::new(id, result.map(Answer::from)));
        }
        // Written straight to text: a cached answer costs little else.
        out.response = Some(self.reply_line(answers, !single));
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
