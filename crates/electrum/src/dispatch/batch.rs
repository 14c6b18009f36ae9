//! Batches: replies in request order, the reply limit kept while they are
//! answered, and the reading requests of a batch spread over threads when
//! the caller hands some over.
//!
//! Why the dispatcher does not decide when to spread a batch: whether more
//! threads help depends on what else the server runs at that moment (with
//! every core busy, spreading a batch only added context switches:
//! many-wallets p99 142-254 ms before it was stopped, 75-88 ms after) and
//! on where the work waits (the node or the disk), and only the server's
//! scheduler (`osprey-server`'s `fair`) sees every session's lines. It
//! owns the threads and tells each line whether it may use them. What the
//! dispatcher decides is what protocol rules allow: which batches must run
//! one request at a time, and which requests of the others can run at once.

use super::reply_limit::ReplySize;
use super::{Dispatcher, Outcome};
use crate::error::RpcError;
use crate::jsonrpc::{Answer, Call, Message, Response};
use crate::request::{Request, ScriptMethod, HEADERS_SUBSCRIBE, OUTPOINT_SUBSCRIBE};
use crate::script::ScriptKey;
use crate::scripthash;
use crate::session::SessionState;
use crate::silent_payments::{SP_SUBSCRIBE, SP_UNSUBSCRIBE};
use crate::version::ProtocolVersion;
use osprey_core::StatusHash;
use serde_json::Value;
use std::time::Instant;

/// Threads a batch's reading requests can be spread over. The dispatcher
/// uses them only for a line its caller hands them to (see the module
/// docs): how many there are and when a line may use them is the caller's
/// decision.
pub struct BatchThreads(rayon::ThreadPool);

impl BatchThreads {
    /// Starts `threads` threads, named `batch-N`.
    ///
    /// # Errors
    /// If the threads cannot be started.
    pub fn new(threads: usize) -> std::io::Result<BatchThreads> {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("batch-{i}"))
            .build()
            .map(BatchThreads)
            .map_err(std::io::Error::other)
    }
}

/// Whether a batch holding a call of `method` must run in order: the
/// session state it changes (the protocol version, subscriptions) can
/// change the answers of the requests after it. Told by name, so that each
/// request is parsed once; a malformed call of these methods runs in order
/// too, which is only slower.
fn runs_in_order(method: &str) -> bool {
    matches!(
        method,
        "server.version"
            | HEADERS_SUBSCRIBE
            | "blockchain.scripthash.unsubscribe"
            | "blockchain.scriptpubkey.unsubscribe"
            | OUTPOINT_SUBSCRIBE
            | "blockchain.outpoint.unsubscribe"
            | SP_SUBSCRIBE
            | SP_UNSUBSCRIBE
    )
}

/// A request's method and when its handling started, for its metrics.
struct CallTimer {
    method: String,
    started: Instant,
}

/// A request of a batch, between the in-order phase and the parallel one.
enum Pending {
    /// Answered already (or owed no answer).
    Done(Option<Response>),
    /// Reads only: runs in parallel.
    Query {
        id: Value,
        request: Request,
        call: CallTimer,
    },
    /// Registered in the session (`new`: by this request, not before); its
    /// status is computed in parallel.
    Subscribe {
        id: Value,
        key: ScriptKey,
        new: bool,
        call: CallTimer,
    },
}

/// A subscription's status, once known.
type Status = Result<Option<StatusHash>, RpcError>;

impl Dispatcher {
    /// Answers a batch, replies in request order. Spread over `threads`
    /// when given: what changes the session runs in order first (a
    /// subscription is registered); the work that only reads (statuses,
    /// histories, transactions, headers) then runs in parallel. Without
    /// threads, or when the batch also negotiates the version, subscribes
    /// to headers or outpoints or unsubscribes, it runs one request at a
    /// time, so that its effects keep their order.
    ///
    /// Answers are measured as they come: once they pass `reply_bytes_max`
    /// the requests not run yet are not run, and the whole batch is
    /// refused. A hostile batch of big requests (200 times 2,016 headers)
    /// so costs the server at most the limit plus one answer per thread,
    /// not the 15 MB reply it asked for.
    pub(super) fn handle_batch(
        &self,
        state: &mut SessionState,
        messages: Vec<Message>,
        out: &mut Outcome,
        threads: Option<&BatchThreads>,
    ) -> Vec<Response> {
        let ordered_only = messages
            .iter()
            .any(|m| matches!(m, Message::Call(call) if runs_in_order(&call.method)));
        let size = ReplySize::new(self.config.reply_bytes_max);
        match threads.filter(|_| !ordered_only) {
            Some(BatchThreads(pool)) => self.spread_batch(state, messages, out, pool, &size),
            None => self.batch_in_order(state, messages, out, &size),
        }
    }

    /// One request after the other. Effects of requests run before the
    /// batch went over the limit stay (a subscription made is kept); their
    /// answers are refused with the rest. Requests after that point are
    /// not run.
    fn batch_in_order(
        &self,
        state: &mut SessionState,
        messages: Vec<Message>,
        out: &mut Outcome,
        size: &ReplySize,
    ) -> Vec<Response> {
        let mut answers = Vec::new();
        let mut ids = Vec::new();
        for message in messages {
            match message {
                Message::Call(Call { id: Some(id), .. }) if size.over() => ids.push(id),
                message => {
                    if let Some(answer) = self.handle_message(state, message, out) {
                        size.add(&answer);
                        ids.push(answer.id.clone());
                        answers.push(answer);
                    }
                }
            }
        }
        if size.over() {
            self.refuse_batch(ids, size)
        } else {
            answers
        }
    }

    /// The session's part in order, the reading in parallel on `pool`,
    /// then the answers in request order (or the refusal of them all).
    fn spread_batch(
        &self,
        state: &mut SessionState,
        messages: Vec<Message>,
        out: &mut Outcome,
        pool: &rayon::ThreadPool,
        size: &ReplySize,
    ) -> Vec<Response> {
        // No request of this batch changes the version (`runs_in_order`).
        let protocol = state.protocol();
        let pending = messages
            .into_iter()
            .map(|message| self.register(state, protocol, message, out))
            .collect();
        let answered = self.read_in_parallel(protocol, pending, pool, size);
        if size.over() {
            return self.refuse_answered(state, answered, size);
        }
        answered
            .into_iter()
            .filter_map(|answer| self.finish(state, answer, out))
            .collect()
    }

    /// The in-order phase of one message: a parse error or a peer
    /// announcement is answered at once; a script subscription is
    /// registered in the session, its status left for later; any other
    /// request is left to run in parallel.
    fn register(
        &self,
        state: &mut SessionState,
        protocol: ProtocolVersion,
        message: Message,
        out: &mut Outcome,
    ) -> Pending {
        let call = match message {
            Message::Call(call) if call.id.is_some() => call,
            other => return Pending::Done(self.handle_message(state, other, out)),
        };
        let id = call.id.expect("checked above");
        let started = Instant::now();
        let failed = |id: Value, method: &str, e: RpcError| {
            let result: Result<Answer, RpcError> = Err(e);
            self.record(method, started, &result);
            Pending::Done(Some(Response::new(id, result)))
        };
        match self.parse_request(&call.method, &call.params, protocol) {
            Err(e) => failed(id, &call.method, e),
            Ok(Request::Script {
                method: ScriptMethod::Subscribe,
                key,
            }) => {
                state.note_other_message();
                let max = self.config.subscriptions_per_session_max;
                match state.subscribe(&key, max) {
                    Ok(new) => Pending::Subscribe {
                        id,
                        key,
                        new,
                        call: CallTimer {
                            method: call.method,
                            started,
                        },
                    },
                    Err(e) => failed(id, &call.method, e),
                }
            }
            Ok(Request::ServerAddPeer { features }) => {
                state.note_other_message();
                let added = self.add_peer(state.source(), &features);
                Pending::Done(Some(Response::new(id, Ok(Value::Bool(added).into()))))
            }
            Ok(request) => {
                state.note_other_message();
                Pending::Query {
                    id,
                    request,
                    call: CallTimer {
                        method: call.method,
                        started,
                    },
                }
            }
        }
    }

    /// Runs the reading requests and computes the statuses on `pool`;
    /// once the answers pass the reply limit, what has not run yet is
    /// left as it was.
    fn read_in_parallel(
        &self,
        protocol: ProtocolVersion,
        pending: Vec<Pending>,
        pool: &rayon::ThreadPool,
        size: &ReplySize,
    ) -> Vec<(Pending, Option<Status>)> {
        // Cached statuses are answered here: handing a lookup to the pool
        // costs more than the lookup (a reconnecting wallet's batches are
        // all cache hits).
        let pending: Vec<(Pending, Option<Status>)> = pending
            .into_iter()
            .map(|p| match p {
                Pending::Subscribe { id, key, new, call } => {
                    let cached = self.backend.cached_status(&key.scripthash).map(Ok);
                    (Pending::Subscribe { id, key, new, call }, cached)
                }
                other => (other, None),
            })
            .collect();
        let work_left = pending.iter().any(|p| {
            matches!(
                p,
                (Pending::Query { .. }, _) | (Pending::Subscribe { .. }, None)
            )
        });
        if !work_left {
            return pending;
        }
        pool.install(|| {
            use rayon::prelude::*;
            pending
                .into_par_iter()
                .map(|p| match p {
                    (subscribe @ Pending::Subscribe { .. }, Some(status)) => {
                        (subscribe, Some(status))
                    }
                    // Refused with the whole batch: not worth running.
                    unrun @ (Pending::Query { .. } | Pending::Subscribe { .. }, _)
                        if size.over() =>
                    {
                        unrun
                    }
                    (Pending::Query { id, request, call }, _) => {
                        let result = self.execute_query(protocol, request);
                        if let Err(e) = &result {
                            tracing::debug!(error = %e, "request failed");
                        }
                        self.record(&call.method, call.started, &result);
                        let answer = Response::new(id, result);
                        size.add(&answer);
                        (Pending::Done(Some(answer)), None)
                    }
                    (Pending::Subscribe { id, key, new, call }, None) => {
                        let status = scripthash::status(&*self.backend, &key);
                        (Pending::Subscribe { id, key, new, call }, Some(status))
                    }
                    done => done,
                })
                .collect()
        })
    }

    /// Refuses a spread batch that passed the reply limit. The client is
    /// told none of it was done: subscriptions this batch made are undone
    /// (one it had before stays).
    fn refuse_answered(
        &self,
        state: &mut SessionState,
        answered: Vec<(Pending, Option<Status>)>,
        size: &ReplySize,
    ) -> Vec<Response> {
        let ids = answered
            .into_iter()
            .filter_map(|(pending, _)| match pending {
                Pending::Subscribe { id, key, new, .. } => {
                    if new {
                        state.unsubscribe(&key);
                    }
                    Some(id)
                }
                Pending::Query { id, .. } => Some(id),
                Pending::Done(response) => response.map(|r| r.id),
            })
            .collect();
        self.refuse_batch(ids, size)
    }

    /// The answer of one request of a spread batch, its subscription's
    /// effect or undoing included.
    fn finish(
        &self,
        state: &mut SessionState,
        answer: (Pending, Option<Status>),
        out: &mut Outcome,
    ) -> Option<Response> {
        match answer {
            (Pending::Subscribe { id, key, call, .. }, Some(Ok(status))) => {
                let result = Ok(scripthash::status_json(status).into());
                self.record(&call.method, call.started, &result);
                out.effects.push(super::Effect::Subscribed { key, status });
                Some(Response::new(id, result))
            }
            (
                Pending::Subscribe {
                    id, key, new, call, ..
                },
                Some(Err(e)),
            ) => {
                // Not subscribed if the client never got a status; a
                // subscription it had before stays, as the notifier
                // still has it.
                if new {
                    state.unsubscribe(&key);
                }
                let result: Result<Answer, RpcError> = Err(e);
                self.record(&call.method, call.started, &result);
                Some(Response::new(id, result))
            }
            (Pending::Done(response), _) => response,
            (Pending::Subscribe { id, .. } | Pending::Query { id, .. }, _) => Some(Response::new(
                id,
                Err(RpcError::Internal("request was not run".into())),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::METHODS;

    /// Every method named in `runs_in_order` is one the server knows: a
    /// misspelt name would let a batch that changes the session run in
    /// parallel.
    #[test]
    fn methods_that_run_in_order_are_served_methods() {
        let in_order: Vec<&str> = METHODS
            .iter()
            .copied()
            .filter(|m| runs_in_order(m))
            .collect();
        assert_eq!(in_order.len(), 8, "{in_order:?}");
    }
}
