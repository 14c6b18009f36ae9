//! Runs one line of a session: parse (`jsonrpc`, `request`), apply the
//! version rules (`session`), call the method family, and build the
//! response line. Synchronous and possibly blocking (the backend may read
//! the database or ask the node): the server calls it on a blocking thread.
//! Effects on other sessions' world (subscriptions) are returned as
//! `Effect`s for the server's notifier, never applied here.
//!
//! Here: the entry points, a single request and the `Outcome`. Beside it:
//! `execute` (the method table), `batch` (batches, in order or spread over
//! the threads the caller hands over), `inline` (lines answered from
//! memory, without I/O: a reconnecting wallet's cached statuses, the
//! version, pings), `shared` (long histories written once for every
//! session that asks) and `reply_limit`
//! (`reply_bytes_max`).

mod batch;
mod execute;
mod inline;
mod reply_limit;
mod shared;

pub use batch::BatchThreads;
pub use inline::ReplyEstimate;

use crate::error::RpcError;
use crate::jsonrpc::{self, Answer, Incoming, Message, Params, Response};
use crate::request::{Request, METHODS};
use crate::script::ScriptKey;
use crate::server::{Peers, ServerInfo};
use crate::session::{SessionState, SubscriptionBudget};
use crate::silent_payments::{self, SilentPaymentsConfig, SpSubscription};
use bitcoin::OutPoint;
use osprey_answers::{Backend, OutpointAnswer};
use osprey_core::StatusHash;
use osprey_metrics::Metrics;
use serde_json::Value;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

/// Limits and identity the protocol layer needs.
#[derive(Debug, Clone)]
pub struct DispatchConfig {
    pub info: ServerInfo,
    /// The `max` of `blockchain.block.headers` (at least 2016).
    pub headers_per_call_max: usize,
    pub batch_requests_max: usize,
    pub subscriptions_per_session_max: usize,
    /// The largest 1.7 `server.ping` padding we send back, in characters.
    pub pong_len_max: usize,
    /// The longest response line, in bytes (ElectrumX's MAX_SEND): a
    /// larger answer is replaced by a -101 error for each request it
    /// answers, so that no session holds more than this for a client that
    /// does not read.
    pub reply_bytes_max: usize,
    /// The server-wide budget subscriptions are charged to (see
    /// [`crate::session::SUBSCRIPTION_BYTES`]); `None`: not counted.
    pub subscription_budget: Option<SubscriptionBudget>,
    /// The `blockchain.silentpayments.*` methods' network and limits
    /// (served only when the backend keeps the index).
    pub silent_payments: SilentPaymentsConfig,
}

/// A change to the session's subscriptions, for the server's notifier.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Subscribed (or subscribed again); `status` is what the client got.
    Subscribed {
        key: ScriptKey,
        status: Option<StatusHash>,
    },
    Unsubscribed {
        key: ScriptKey,
    },
    HeadersSubscribed,
    /// Subscribed to an outpoint (or again); `answer.status` is what the
    /// client got.
    OutpointSubscribed {
        outpoint: OutPoint,
        answer: OutpointAnswer,
    },
    OutpointUnsubscribed {
        outpoint: OutPoint,
    },
    /// A silent-payments subscription, new or made again (which restarts
    /// its historical scan): the server's scans take it from here.
    SilentPaymentsSubscribed(SpSubscription),
    SilentPaymentsUnsubscribed {
        address: String,
    },
}

/// What handling a line produced.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The response line (without newline); `None` when nothing is owed
    /// (notifications, responses, blank lines).
    pub response: Option<String>,
    pub effects: Vec<Effect>,
    /// Close the connection after sending the response (no common version).
    pub close: bool,
}

/// Answers lines for any number of sessions.
pub struct Dispatcher {
    backend: Arc<dyn Backend>,
    config: DispatchConfig,
    /// The peer list; `None` for a server that takes no part in peer
    /// discovery (no peers, `server.add_peer` answers false).
    peers: Option<Arc<dyn Peers>>,
    /// Requests by method, their latency, and errors by code.
    metrics: Arc<Metrics>,
    /// Long histories, written once for every session that asks.
    histories: shared::SharedHistories,
}

/// Bytes of history text kept for sharing (`shared`): the longest
/// histories that fit a reply, several at once.
const SHARED_HISTORIES_BYTES: usize = 32 << 20;

impl Dispatcher {
    pub fn new(backend: Arc<dyn Backend>, config: DispatchConfig) -> Self {
        Dispatcher {
            backend,
            config,
            peers: None,
            metrics: Arc::new(Metrics::new(&METHODS)),
            histories: shared::SharedHistories::new(SHARED_HISTORIES_BYTES),
        }
    }

    /// Answers `server.peers.subscribe` and `server.add_peer` from `peers`.
    pub fn with_peers(mut self, peers: Arc<dyn Peers>) -> Self {
        self.peers = Some(peers);
        self
    }

    /// Counts requests and errors in `metrics` (the process's registry)
    /// instead of a registry of its own.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Counts one answered request: its method, how long it took since
    /// `started`, and its error code if it failed.
    fn record<T>(&self, method: &str, started: Instant, result: &Result<T, RpcError>) {
        self.metrics
            .requests
            .method(method)
            .observe(started.elapsed());
        if let Err(e) = result {
            self.metrics.requests.error(e.code());
        }
    }

    pub fn config(&self) -> &DispatchConfig {
        &self.config
    }

    /// Handles one line (without its newline), a batch spread over
    /// `threads` if given (see [`Self::handle_incoming`]); one whose reply
    /// certainly cannot fit in `reply_bytes_max` is refused unrun (see
    /// [`Self::reply_estimate`]). Never panics on client input.
    pub fn handle_line(
        &self,
        state: &mut SessionState,
        line: &[u8],
        threads: Option<&BatchThreads>,
    ) -> Outcome {
        let incoming = self.parse(line);
        if self.reply_estimate(state, &incoming).at_least > self.config.reply_bytes_max {
            return self.refuse_unanswerable(state, incoming);
        }
        self.handle_incoming(state, incoming, threads)
    }

    /// Parses one line (without its newline) into requests.
    pub fn parse(&self, line: &[u8]) -> Incoming {
        jsonrpc::parse_line(line, self.config.batch_requests_max)
    }

    /// Handles parsed requests. A batch's reading requests are spread
    /// over `threads` when given, else run one after the other on this
    /// thread: the caller, which knows what else the server is running,
    /// decides (see `batch`). The caller has refused a line whose reply
    /// cannot fit already ([`Self::answer_inline`] does, given the line's
    /// estimate); any other stops being answered at the limit. Never panics
    /// on client input.
    pub fn handle_incoming(
        &self,
        state: &mut SessionState,
        incoming: Incoming,
        threads: Option<&BatchThreads>,
    ) -> Outcome {
        let mut out = Outcome::default();
        let (responses, batch) = match incoming {
            Incoming::Empty => (Vec::new(), false),
            Incoming::Error(error) => {
                state.note_other_message();
                self.metrics.requests.error(error.code());
                (vec![Response::new(Value::Null, Err(error))], false)
            }
            Incoming::Single(message) => (
                self.handle_message(state, message, &mut out)
                    .into_iter()
                    .collect(),
                false,
            ),
            Incoming::Batch(messages) => {
                (self.handle_batch(state, messages, &mut out, threads), true)
            }
        };
        // Nothing is owed for notifications and responses, nor for a batch
        // of only those.
        out.response = (!responses.is_empty()).then(|| self.reply_line(responses, batch));
        out
    }

    /// The state of a new session from `source`, its subscriptions charged
    /// to the server's client memory budget.
    pub fn new_session(&self, source: IpAddr) -> SessionState {
        let state = SessionState::from_source(source);
        match &self.config.subscription_budget {
            Some(budget) => state.charged_to(budget),
            None => state,
        }
    }

    /// Parses a call into a request, as this server serves it: the silent
    /// payments methods are unknown (-32601, before their parameters are
    /// looked at) without the backend's index, and during the first sync
    /// only what is right at any height is answered (see
    /// [`Request::answered_while_indexing`]).
    fn parse_request(
        &self,
        method: &str,
        params: &Params,
        protocol: crate::version::ProtocolVersion,
    ) -> Result<Request, RpcError> {
        if silent_payments::is_method(method) && !self.backend.sp_enabled() {
            return Err(silent_payments::not_served(method));
        }
        let request = Request::parse(method, params, protocol)?;
        match self.backend.indexing() {
            Some(at) if !request.answered_while_indexing() => Err(RpcError::Indexing(at)),
            _ => Ok(request),
        }
    }

    fn handle_message(
        &self,
        state: &mut SessionState,
        message: Message,
        out: &mut Outcome,
    ) -> Option<Response> {
        match message {
            Message::Response => None,
            Message::Invalid { id, error } => {
                state.note_other_message();
                self.metrics.requests.error(error.code());
                Some(Response::new(id, Err(error)))
            }
            Message::Call(call) => {
                // Notifications (no id) are not answered, so they are not run
                // either: the only one a client sends is 1.7's `server.ping`
                // (padding, "nothing to do").
                let id = call.id?;
                let started = Instant::now();
                let result: Result<Answer, RpcError> = self
                    .parse_request(&call.method, &call.params, state.protocol())
                    .and_then(|request| self.execute(state, request, out));
                if let Err(e) = &result {
                    tracing::debug!(method = %call.method, error = %e, "request failed");
                }
                self.record(&call.method, started, &result);
                Some(Response::new(id, result))
            }
        }
    }
}
