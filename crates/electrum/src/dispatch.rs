//! Runs one line of a session: parse (`jsonrpc`, `request`), apply the
//! version rules (`session`), call the method family, and build the
//! response line. Synchronous and possibly blocking (the backend may read
//! the database or ask the node): the server calls it on a blocking thread.
//! Effects on other sessions' world (subscriptions) are returned as
//! `Effect`s for the server's notifier, never applied here.

use crate::error::RpcError;
use crate::jsonrpc::{self, Call, Incoming, Message};
use crate::request::{
    Request, ScriptKey, ScriptMethod, HEADERS_SUBSCRIBE, METHODS, OUTPOINT_SUBSCRIBE,
};
use crate::server::{PeerFeatures, Peers, ServerInfo};
use crate::session::{SessionState, SubscriptionBudget};
use crate::version::ProtocolVersion;
use crate::{fee, headers, mempool, outpoint, scripthash, server, transaction};
use bitcoin::OutPoint;
use osprey_answers::Backend;
use osprey_answers::OutpointAnswer;
use osprey_core::StatusHash;
use osprey_metrics::Metrics;
use serde_json::Value;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    /// The largest 1.7-draft `server.ping` padding we send back, in characters.
    pub pong_len_max: usize,
    /// The longest response line, in bytes (ElectrumX's MAX_SEND): a
    /// larger answer is replaced by a -101 error for each request it
    /// answers, so that no session holds more than this for a client that
    /// does not read.
    pub reply_bytes_max: usize,
    /// The server-wide budget subscriptions are charged to (see
    /// [`crate::session::SUBSCRIPTION_BYTES`]); `None`: not counted.
    pub subscription_budget: Option<SubscriptionBudget>,
    /// Cores the server may keep busy (`worker_threads`): sizes the batch
    /// pool, and past this many requests in hand batches run in order.
    pub cores: usize,
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

/// Threads that answer the requests of one batch at once when transactions
/// come from the node over REST or RPC: more than the cores, because those
/// requests wait on the node rather than on a CPU.
const BATCH_WORKERS_REMOTE: usize = 8;

/// Threads that answer the requests of one batch at once, per core, when
/// transactions are read from local files: the work is then reads of the
/// page cache or the disk. Idle rayon workers spin before they sleep, and
/// eight of them on two cores took CPU from the ones working: with two per
/// core, a cold initial load took 7-10% less time and many wallets got
/// 3-12% more requests/s (lab m, two sets of 5 alternating rounds). One
/// per core was a little faster still, but leaves no thread to run while
/// one waits on a disk read.
const BATCH_WORKERS_PER_CORE_LOCAL: usize = 2;

/// Answers lines for any number of sessions.
pub struct Dispatcher {
    backend: Arc<dyn Backend>,
    config: DispatchConfig,
    /// Runs a batch's requests in parallel; `None` (requests run one after
    /// the other) if its threads could not be started.
    batch_pool: Option<rayon::ThreadPool>,
    /// Lines being handled now, across sessions. When they already keep
    /// every core busy, a batch runs on its own thread: spreading it over
    /// the pool too would only add context switches.
    handling: AtomicUsize,
    cores: usize,
    /// The peer list; `None` for a server that takes no part in peer
    /// discovery (no peers, `server.add_peer` answers false).
    peers: Option<Arc<dyn Peers>>,
    /// Requests by method, their latency, and errors by code.
    metrics: Arc<Metrics>,
}

/// A request of a batch, between the in-order phase and the parallel one.
enum Pending {
    /// Answered already (or owed no answer).
    Done(Option<Value>),
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

/// The serialized size of a batch's answers so far, against the reply
/// limit; shared by the threads answering the batch.
struct ReplySize {
    max: usize,
    bytes: AtomicUsize,
}

impl ReplySize {
    fn new(max: usize) -> Self {
        ReplySize {
            max,
            bytes: AtomicUsize::new(0),
        }
    }

    /// Counts `answer`'s JSON length (and its separator) without building
    /// the string.
    fn add(&self, answer: &Value) {
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

    fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    fn over(&self) -> bool {
        self.bytes() > self.max
    }
}

/// The -101 error of a response over `max` bytes (`bytes` says how long).
fn reply_too_large(bytes: &str, max: usize) -> RpcError {
    RpcError::LimitExceeded(format!(
        "response of {bytes} bytes exceeds the limit of {max} (ask for less at a time)"
    ))
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
    )
}

/// A line being handled (see `Dispatcher::handling`), until dropped.
struct Handling<'a>(&'a AtomicUsize);

impl Drop for Handling<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A request's method and when its handling started, for its metrics.
struct CallTimer {
    method: String,
    started: Instant,
}

impl Dispatcher {
    pub fn new(backend: Arc<dyn Backend>, config: DispatchConfig) -> Self {
        let cores = config.cores.max(1);
        let (workers, from) = if backend.transactions_are_local() {
            (BATCH_WORKERS_PER_CORE_LOCAL * cores, "local files")
        } else {
            (BATCH_WORKERS_REMOTE, "the node")
        };
        tracing::info!("batches: up to {workers} requests at once (transactions from {from})");
        let batch_pool = rayon::ThreadPoolBuilder::new()
            .num_threads(workers)
            .thread_name(|i| format!("batch-{i}"))
            .build()
            .map_err(|e| tracing::warn!("batches will run one request at a time: {e}"))
            .ok();
        Dispatcher {
            backend,
            config,
            batch_pool,
            handling: AtomicUsize::new(0),
            cores,
            peers: None,
            metrics: Arc::new(Metrics::new(&METHODS)),
        }
    }

    /// Answers `server.peers.subscribe` and `server.add_peer` from `peers`.
    pub fn with_peers(mut self, peers: Arc<dyn Peers>) -> Self {
        self.peers = Some(peers);
        self
    }

    /// `server.add_peer`: whether the announced server was tentatively
    /// accepted. Features this server cannot use (another chain, no
    /// reachable host) are a `false`, as the spec's result is a boolean.
    fn add_peer(&self, source: Option<IpAddr>, features: &Value) -> bool {
        let (Some(peers), Some(source)) = (&self.peers, source) else {
            return false;
        };
        match PeerFeatures::parse(features) {
            Ok(features) if features.genesis_hash == self.config.info.genesis_hash.to_string() => {
                peers.add(features, source)
            }
            Ok(_) => {
                tracing::debug!(%source, "add_peer refused: another chain's genesis hash");
                false
            }
            Err(e) => {
                tracing::debug!(%source, "add_peer refused: {e}");
                false
            }
        }
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

    /// Handles one line (without its newline). Never panics on client input.
    pub fn handle_line(&self, state: &mut SessionState, line: &[u8]) -> Outcome {
        self.handle_incoming(state, self.parse(line))
    }

    /// Parses one line (without its newline) into requests.
    pub fn parse(&self, line: &[u8]) -> Incoming {
        jsonrpc::parse_line(line, self.config.batch_requests_max)
    }

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
        let _handling = self.handling();
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

    /// Counts a line as being handled until the guard is dropped.
    fn handling(&self) -> Handling<'_> {
        self.handling.fetch_add(1, Ordering::Relaxed);
        Handling(&self.handling)
    }

    /// Handles parsed requests. Never panics on client input.
    pub fn handle_incoming(&self, state: &mut SessionState, incoming: Incoming) -> Outcome {
        let _handling = self.handling();
        let mut out = Outcome::default();
        let response = match incoming {
            Incoming::Empty => None,
            Incoming::Error(error) => {
                state.note_other_message();
                self.metrics.requests.error(error.code());
                Some(jsonrpc::response(Value::Null, Err(error)))
            }
            Incoming::Single(message) => self.handle_message(state, message, &mut out),
            Incoming::Batch(messages) => {
                let responses = self.handle_batch(state, messages, &mut out);
                // A batch of notifications gets no response at all.
                (!responses.is_empty()).then_some(Value::Array(responses))
            }
        };
        out.response = response.map(|r| self.within_reply_limit(r));
        out
    }

    /// Serializes a response line, or, when it is longer than
    /// `reply_bytes_max`, a refusal of each request it answers under that
    /// request's id (an array for a batch).
    fn within_reply_limit(&self, response: Value) -> String {
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
    fn refuse_batch(&self, ids: Vec<Value>, size: &ReplySize) -> Vec<Value> {
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

    /// The state of a new session from `source`, its subscriptions charged
    /// to the server's client memory budget.
    pub fn new_session(&self, source: IpAddr) -> SessionState {
        let state = SessionState::from_source(source);
        match &self.config.subscription_budget {
            Some(budget) => state.charged_to(budget),
            None => state,
        }
    }

    /// Answers a batch, replies in request order. What changes the session
    /// runs in order first (a subscription is registered); the work that
    /// only reads (statuses, histories, transactions, headers) then runs in
    /// parallel. A batch that also negotiates the version, subscribes to
    /// headers or outpoints or unsubscribes runs one request at a time, so
    /// that its effects keep their order.
    ///
    /// Answers are measured as they come: once they pass `reply_bytes_max`
    /// the requests not run yet are not run, and the whole batch is
    /// refused. A hostile batch of big requests (200 times 2,016 headers)
    /// so costs the server at most the limit plus one answer per worker,
    /// not the 15 MB reply it asked for.
    fn handle_batch(
        &self,
        state: &mut SessionState,
        messages: Vec<Message>,
        out: &mut Outcome,
    ) -> Vec<Value> {
        let protocol = state.protocol();
        let ordered_only = messages
            .iter()
            .any(|m| matches!(m, Message::Call(call) if runs_in_order(&call.method)));
        let cores_free = self.handling.load(Ordering::Relaxed) <= self.cores;
        let size = ReplySize::new(self.config.reply_bytes_max);
        let Some(pool) = self
            .batch_pool
            .as_ref()
            .filter(|_| !ordered_only && cores_free)
        else {
            // Effects of requests run before the batch went over the limit
            // stay (a subscription made is kept); their answers are refused
            // with the rest. Requests after that point are not run.
            let mut answers = Vec::new();
            let mut ids = Vec::new();
            for message in messages {
                match message {
                    Message::Call(Call { id: Some(id), .. }) if size.over() => ids.push(id),
                    message => {
                        if let Some(answer) = self.handle_message(state, message, out) {
                            size.add(&answer);
                            ids.push(answer["id"].clone());
                            answers.push(answer);
                        }
                    }
                }
            }
            return if size.over() {
                self.refuse_batch(ids, &size)
            } else {
                answers
            };
        };
        let pending: Vec<Pending> = messages
            .into_iter()
            .map(|message| match message {
                Message::Call(call) if call.id.is_some() => {
                    let id = call.id.expect("checked above");
                    let started = Instant::now();
                    let failed = |id: Value, method: &str, e: RpcError| {
                        let result = Err(e);
                        self.record(method, started, &result);
                        Pending::Done(Some(jsonrpc::response(id, result)))
                    };
                    match Request::parse(&call.method, &call.params, protocol) {
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
                            Pending::Done(Some(jsonrpc::response(id, Ok(Value::Bool(added)))))
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
                other => Pending::Done(self.handle_message(state, other, out)),
            })
            .collect();
        type Status = Result<Option<StatusHash>, RpcError>;
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
        let answered: Vec<(Pending, Option<Status>)> = if !work_left {
            pending
        } else {
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
                            let answer = jsonrpc::response(id, result);
                            size.add(&answer);
                            (Pending::Done(Some(answer)), None)
                        }
                        (Pending::Subscribe { id, key, new, call }, None) => {
                            let status =
                                self.backend.status(&key.scripthash).map_err(RpcError::from);
                            (Pending::Subscribe { id, key, new, call }, Some(status))
                        }
                        done => done,
                    })
                    .collect()
            })
        };
        if size.over() {
            // The client is told none of it was done: subscriptions this
            // batch made are undone (one it had before stays).
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
                    Pending::Done(response) => response.map(|r| r["id"].clone()),
                })
                .collect();
            return self.refuse_batch(ids, &size);
        }
        answered
            .into_iter()
            .filter_map(|answer| match answer {
                (Pending::Subscribe { id, key, call, .. }, Some(Ok(status))) => {
                    let result = Ok(scripthash::status_json(status));
                    self.record(&call.method, call.started, &result);
                    out.effects.push(Effect::Subscribed { key, status });
                    Some(jsonrpc::response(id, result))
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
                    let result = Err(e);
                    self.record(&call.method, call.started, &result);
                    Some(jsonrpc::response(id, result))
                }
                (Pending::Done(response), _) => response,
                (Pending::Subscribe { id, .. } | Pending::Query { id, .. }, _) => Some(
                    jsonrpc::response(id, Err(RpcError::Internal("request was not run".into()))),
                ),
            })
            .collect()
    }

    fn handle_message(
        &self,
        state: &mut SessionState,
        message: Message,
        out: &mut Outcome,
    ) -> Option<Value> {
        match message {
            Message::Response => None,
            Message::Invalid { id, error } => {
                state.note_other_message();
                self.metrics.requests.error(error.code());
                Some(jsonrpc::response(id, Err(error)))
            }
            Message::Call(call) => {
                // Notifications (no id) are not answered, so they are not run
                // either: the only one a client sends is a 1.7-draft
                // `server.ping`.
                let id = call.id?;
                let started = Instant::now();
                let result = Request::parse(&call.method, &call.params, state.protocol())
                    .and_then(|request| self.execute(state, request, out));
                if let Err(e) = &result {
                    tracing::debug!(method = %call.method, error = %e, "request failed");
                }
                self.record(&call.method, started, &result);
                Some(jsonrpc::response(id, result))
            }
        }
    }

    fn execute(
        &self,
        state: &mut SessionState,
        request: Request,
        out: &mut Outcome,
    ) -> Result<Value, RpcError> {
        if !matches!(request, Request::ServerVersion { .. }) {
            state.note_other_message();
        }
        let backend: &dyn Backend = &*self.backend;
        let config = &self.config;
        match request {
            Request::ServerVersion {
                client_name,
                min,
                max,
            } => match state.negotiate(min, max) {
                Ok(version) => {
                    tracing::debug!(client = %client_name.chars().take(64).collect::<String>(), %version, "negotiated");
                    Ok(server::version(&config.info, version))
                }
                Err(e) => {
                    // No version in common: the spec says to close.
                    out.close = state.negotiated().is_none();
                    Err(e)
                }
            },
            Request::HeadersSubscribe => {
                let tip = headers::subscribe(backend)?;
                state.subscribe_headers();
                out.effects.push(Effect::HeadersSubscribed);
                Ok(tip)
            }
            Request::Script {
                method: ScriptMethod::Subscribe,
                key,
            } => {
                let new = state.subscribe(&key, config.subscriptions_per_session_max)?;
                let status = match backend.status(&key.scripthash) {
                    Ok(status) => status,
                    Err(e) => {
                        // Not subscribed if the client never got a status; a
                        // subscription it had before stays, as the notifier
                        // still has it.
                        if new {
                            state.unsubscribe(&key);
                        }
                        return Err(e.into());
                    }
                };
                out.effects.push(Effect::Subscribed { key, status });
                Ok(scripthash::status_json(status))
            }
            Request::Script {
                method: ScriptMethod::Unsubscribe,
                key,
            } => {
                let removed = state.unsubscribe(&key);
                if removed {
                    out.effects.push(Effect::Unsubscribed { key });
                }
                Ok(Value::Bool(removed))
            }
            Request::ServerAddPeer { features } => {
                Ok(Value::Bool(self.add_peer(state.source(), &features)))
            }
            Request::OutpointSubscribe { outpoint, spk_hint } => {
                let new =
                    state.subscribe_outpoint(&outpoint, config.subscriptions_per_session_max)?;
                let answer = match backend.outpoint_status(&outpoint, spk_hint.as_ref()) {
                    Ok(answer) => answer,
                    Err(e) => {
                        // As for scripts: no status told, no subscription.
                        if new {
                            state.unsubscribe_outpoint(&outpoint);
                        }
                        return Err(e.into());
                    }
                };
                out.effects
                    .push(Effect::OutpointSubscribed { outpoint, answer });
                Ok(outpoint::status_json(&answer.status))
            }
            Request::OutpointUnsubscribe { outpoint } => {
                let removed = state.unsubscribe_outpoint(&outpoint);
                if removed {
                    out.effects.push(Effect::OutpointUnsubscribed { outpoint });
                }
                Ok(Value::Bool(removed))
            }
            query => self.execute_query(state.protocol(), query),
        }
    }

    /// Runs a request that reads the backend and nothing of the session but
    /// its protocol version, so batches run these in parallel.
    fn execute_query(
        &self,
        protocol: ProtocolVersion,
        request: Request,
    ) -> Result<Value, RpcError> {
        let backend: &dyn Backend = &*self.backend;
        let config = &self.config;
        match request {
            Request::ServerBanner => Ok(Value::String(config.info.banner.clone())),
            Request::ServerDonationAddress => {
                Ok(Value::String(config.info.donation_address.clone()))
            }
            Request::ServerFeatures => Ok(server::features(&config.info, protocol)),
            Request::ServerPeersSubscribe => Ok(server::peers(
                &self.peers.as_ref().map(|p| p.known()).unwrap_or_default(),
            )),
            Request::ServerPing { pong_len } => {
                server::ping(protocol, pong_len, config.pong_len_max)
            }
            Request::BlockHeader { height, cp_height } => {
                headers::header(backend, height, cp_height)
            }
            Request::BlockHeaders {
                start_height,
                count,
                cp_height,
            } => headers::headers(
                backend,
                config.headers_per_call_max,
                protocol.is_1_6_or_later(),
                start_height,
                count,
                cp_height,
            ),
            Request::EstimateFee { number, mode } => {
                fee::estimatefee(backend, number, mode.as_deref())
            }
            // 1.6 replaced `relayfee` with `mempool.get_info`, but we keep
            // serving it: electrum-client 0.25 (BDK) negotiates 1.6 and still
            // calls it, and servers may support extra methods.
            Request::RelayFee => fee::relayfee(backend),
            Request::Script { method, key } => scripthash::query(backend, method, &key.scripthash),
            Request::OutpointGetStatus { outpoint, spk_hint } => {
                outpoint::get_status(backend, &outpoint, spk_hint.as_ref())
            }
            Request::TxBroadcast { raw_tx } => transaction::broadcast(backend, &raw_tx),
            Request::TxBroadcastPackage { raw_txs, verbose } => {
                transaction::broadcast_package(backend, &raw_txs, verbose)
            }
            Request::TxGet { txid, verbose } => transaction::get(backend, &txid, verbose),
            Request::TxGetMerkle { txid, height } => {
                transaction::get_merkle(backend, &txid, height, protocol.is_1_7_draft())
            }
            Request::TxIdFromPos {
                height,
                tx_pos,
                merkle,
            } => transaction::id_from_pos(backend, height, tx_pos, merkle),
            Request::MempoolFeeHistogram => Ok(mempool::fee_histogram(backend)),
            Request::MempoolGetInfo => mempool::info(backend),
            Request::ServerVersion { .. }
            | Request::HeadersSubscribe
            | Request::ServerAddPeer { .. }
            | Request::OutpointSubscribe { .. }
            | Request::OutpointUnsubscribe { .. } => Err(RpcError::Internal(
                "a request that changes the session was run as a query".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(in_order.len(), 6, "{in_order:?}");
    }
}
