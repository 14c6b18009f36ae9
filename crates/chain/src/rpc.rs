//! A JSON-RPC 1.0 client for bitcoind and btcd.
//!
//! The HTTP/1.1 is ureq's: framing (content-length, chunked), a keep-alive
//! pool so that parallel callers (indexer workers, client queries) do not
//! queue behind each other, timeouts and a bound on every body. This module
//! speaks the strict dialect btcd needs (`"jsonrpc":"1.0"`, a non-null id,
//! positional params), reads the cookie file once and again only when the
//! node answers 401 (it restarted with a new cookie), and sorts every
//! outcome into an [`Error`] of the right kind.
//!
//! A node that stops answering (killed, restarting, warming up) is logged
//! once per outage by the client itself, whichever caller met it first,
//! and once more when it answers again: callers retry quietly.

use crate::error::Error;
use base64::Engine;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::io::ErrorKind as IoKind;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How the node authenticates us.
#[derive(Clone, Debug)]
pub enum Auth {
    UserPass(String, String),
    /// Bitcoin Core's `.cookie` file (`__cookie__:<random>`): read on first
    /// use, and again when the node answers 401 because it restarted with a
    /// new cookie.
    CookieFile(PathBuf),
}

impl Auth {
    fn header(&self) -> Result<String, Error> {
        let user_pass = match self {
            Auth::UserPass(user, pass) => format!("{user}:{pass}"),
            Auth::CookieFile(path) => std::fs::read_to_string(path)
                .map_err(|e| {
                    Error::transient(format!("cannot read cookie file {}: {e}", path.display()))
                })?
                .trim()
                .to_string(),
        };
        Ok(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(user_pass)
        ))
    }
}

type Response = ureq::http::Response<ureq::Body>;

/// Connections kept open for reuse; more are opened on demand.
const IDLE_CONNECTIONS_MAX: usize = 8;
/// An idle connection older than this is not reused: Bitcoin Core closes
/// idle connections after `-rpcservertimeout` (30 s by default), and a
/// connection the node is closing fails the request sent on it.
const IDLE_AGE_MAX: Duration = Duration::from_secs(15);
/// Responses larger than this are refused rather than buffered (a 4 MB block
/// is ~8 MB of hex, a verbose block is far bigger).
const RESPONSE_BYTES_MAX: u64 = 512 << 20;
/// How long the node may stay silent while we send or wait for its answer.
const IO_TIMEOUT: Duration = Duration::from_secs(120);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A JSON-RPC client for one node.
pub struct RpcClient {
    addr: String,
    /// `http://<addr>`, the base of every request's URL.
    base_url: String,
    auth: Auth,
    /// The `Authorization` header value, computed on first use (so that a
    /// cookie file is read once) and again after a 401.
    authorization: Mutex<Option<String>>,
    agent: ureq::Agent,
    response_bytes_max: u64,
    next_id: AtomicU64,
    /// Since when the node has not answered, during an outage: its first
    /// failure is logged and the others are not, however many callers
    /// retry, and the first answer after it ends it.
    outage: Mutex<Option<Instant>>,
}

impl RpcClient {
    /// Creates a client for `addr` (`host:port`). Connects lazily.
    pub fn new(addr: &str, auth: Auth) -> RpcClient {
        RpcClient::with_limits(addr, auth, IO_TIMEOUT, RESPONSE_BYTES_MAX)
    }

    /// A client whose node may stay silent for `io_timeout` at most and
    /// whose responses may hold `response_bytes_max` bytes at most.
    pub(crate) fn with_limits(
        addr: &str,
        auth: Auth,
        io_timeout: Duration,
        response_bytes_max: u64,
    ) -> RpcClient {
        let config = ureq::Agent::config_builder()
            // Every status is an answer to sort here, not a ureq error.
            .http_status_as_error(false)
            // The node is addressed directly: no proxy from the
            // environment, no redirects.
            .proxy(None)
            .max_redirects(0)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_per_read(Some(io_timeout))
            .timeout_per_write(Some(io_timeout))
            .max_idle_connections(IDLE_CONNECTIONS_MAX)
            .max_idle_connections_per_host(IDLE_CONNECTIONS_MAX)
            .max_idle_age(IDLE_AGE_MAX)
            .build();
        RpcClient {
            addr: addr.to_string(),
            base_url: format!("http://{addr}"),
            auth,
            authorization: Mutex::new(None),
            agent: ureq::Agent::new_with_config(config),
            response_bytes_max,
            next_id: AtomicU64::new(1),
            outage: Mutex::new(None),
        }
    }

    /// Whether the node is in an outage: its last call failed in a way
    /// that waiting can mend (unreachable, restarting, warming up).
    #[cfg(test)]
    fn is_down(&self) -> bool {
        self.outage.lock().expect("rpc outage lock").is_some()
    }

    /// Notes how a call went: a transient failure starts an outage (one
    /// line), any answer from the node ends one (one line).
    fn note<T>(&self, result: Result<T, Error>) -> Result<T, Error> {
        let failed = matches!(&result, Err(e) if e.is_transient());
        let mut outage = self.outage.lock().expect("rpc outage lock");
        match (&*outage, &result) {
            (None, Err(e)) if failed => {
                *outage = Some(Instant::now());
                tracing::warn!(
                    "node at {} is not answering ({e}): waiting for it, and going on by itself once it is back",
                    self.addr
                );
            }
            (Some(since), _) if !failed => {
                tracing::info!(
                    "node at {} answers again, after {:.1} s",
                    self.addr,
                    since.elapsed().as_secs_f64()
                );
                *outage = None;
            }
            _ => {}
        }
        result
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Calls `method` and decodes its result.
    ///
    /// # Errors
    /// Transport failures (transient), HTTP errors, and the node's own
    /// JSON-RPC errors as [`crate::ErrorKind::Rpc`].
    pub fn call<T: DeserializeOwned>(&self, method: &str, params: &[Value]) -> Result<T, Error> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let request = json!({"jsonrpc": "1.0", "id": id, "method": method, "params": params});
        let value = self.note(
            self.post(&request)
                .and_then(|(status, body)| decode_reply(&self.addr, status, &body))
                .and_then(|r| take_result(method, r)),
        )?;
        serde_json::from_value(value)
            .map_err(|e| Error::persistent(format!("{method}: unexpected result shape: {e}")))
    }

    /// Calls `method` once per parameter list in one HTTP request and returns
    /// each call's result (or error) in order.
    ///
    /// # Errors
    /// When the batch as a whole fails (transport, HTTP, malformed reply),
    /// or any call of it failed transiently (the node warming up).
    pub fn call_batch(
        &self,
        method: &str,
        params: &[Vec<Value>],
    ) -> Result<Vec<Result<Value, Error>>, Error> {
        if params.is_empty() {
            return Ok(Vec::new());
        }
        let first = self
            .next_id
            .fetch_add(params.len() as u64, Ordering::Relaxed);
        let requests: Vec<Value> = params
            .iter()
            .enumerate()
            .map(|(i, p)| json!({"jsonrpc": "1.0", "id": first + i as u64, "method": method, "params": p}))
            .collect();
        let reply = self.note(
            self.post(&Value::Array(requests))
                .and_then(|(status, body)| decode_reply(&self.addr, status, &body)),
        )?;
        // A node warming up answers each call of a batch with -28: the
        // batch failed as a whole (a caller reading "out of range" from a
        // failed `getblockhash` would take the chain for shorter).
        let results = split_batch(method, first, params.len(), reply)?;
        if let Some(Err(e)) = results
            .iter()
            .find(|r| matches!(r, Err(e) if e.is_transient()))
        {
            return self.note(Err(e.clone()));
        }
        Ok(results)
    }

    /// GETs a Bitcoin Core REST resource (`/rest/...`, served on the RPC
    /// port without authentication when the node runs with `-rest`).
    /// Returns `None` for HTTP 404: REST is off, or the node does not have
    /// what was asked.
    ///
    /// # Errors
    /// Transport failures (transient) and any other non-200 status.
    pub fn rest_get(&self, path: &str) -> Result<Option<Vec<u8>>, Error> {
        let url = format!("{}{path}", self.base_url);
        let (status, body) = self.note(self.exchange(|agent| agent.get(&url).call()))?;
        match status {
            200 => Ok(Some(body)),
            404 => Ok(None),
            503 => Err(Error::transient(format!(
                "node {} is busy (HTTP 503) for {path}",
                self.addr
            ))),
            _ => Err(Error::persistent(format!(
                "node {} answered HTTP {status} for {path}: {}",
                self.addr,
                excerpt(&body)
            ))),
        }
    }

    /// POSTs a JSON-RPC request; on a 401 with a cookie file, reads the
    /// cookie again and retries once (the node restarted with a new one).
    fn post(&self, request: &Value) -> Result<(u16, Vec<u8>), Error> {
        let body = serde_json::to_vec(request).expect("JSON values serialise");
        let authorization = self.authorization(false)?;
        let reply = self.post_with(&authorization, &body)?;
        if reply.0 == 401 && matches!(self.auth, Auth::CookieFile(_)) {
            let authorization = self.authorization(true)?;
            return self.post_with(&authorization, &body);
        }
        Ok(reply)
    }

    fn post_with(&self, authorization: &str, body: &[u8]) -> Result<(u16, Vec<u8>), Error> {
        self.exchange(|agent| {
            agent
                .post(&self.base_url)
                .header("Authorization", authorization)
                .header("Content-Type", "application/json")
                .send(body)
        })
    }

    /// The `Authorization` header value, read again from the cookie file
    /// when `reread`.
    fn authorization(&self, reread: bool) -> Result<String, Error> {
        let mut cached = self.authorization.lock().expect("rpc auth lock");
        match &*cached {
            Some(header) if !reread => Ok(header.clone()),
            _ => {
                let header = self.auth.header()?;
                *cached = Some(header.clone());
                Ok(header)
            }
        }
    }

    /// One HTTP exchange, its body read in full (up to the limit). A
    /// request on a connection the node closed under us (a pooled one it
    /// timed out as we sent on it) is sent once more: ureq does not pool
    /// the failed connection again, and checks that a pooled one is still
    /// open before using it.
    fn exchange(
        &self,
        send: impl Fn(&ureq::Agent) -> Result<Response, ureq::Error>,
    ) -> Result<(u16, Vec<u8>), Error> {
        match self.exchange_once(&send) {
            Err(e) if connection_closed(&e) => self.exchange_once(&send),
            other => other,
        }
        .map_err(|e| self.transport_error(e))
    }

    fn exchange_once(
        &self,
        send: &impl Fn(&ureq::Agent) -> Result<Response, ureq::Error>,
    ) -> Result<(u16, Vec<u8>), ureq::Error> {
        let mut response = send(&self.agent)?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(self.response_bytes_max)
            .read_to_vec()?;
        Ok((status, body))
    }

    fn transport_error(&self, e: ureq::Error) -> Error {
        let addr = &self.addr;
        match e {
            ureq::Error::BodyExceedsLimit(limit) => Error::persistent(format!(
                "node {addr} sent a response over the limit of {limit} bytes"
            )),
            ureq::Error::Timeout(_) => {
                Error::transient(format!("node {addr} did not answer in time"))
            }
            ureq::Error::Io(e) if matches!(e.kind(), IoKind::TimedOut | IoKind::WouldBlock) => {
                Error::transient(format!("node {addr} did not answer in time: {e}"))
            }
            ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => {
                Error::transient(format!("cannot connect to node at {addr}: {e}"))
            }
            ureq::Error::Io(e) if e.kind() == IoKind::ConnectionRefused => {
                Error::transient(format!("cannot connect to node at {addr}: {e}"))
            }
            ureq::Error::Io(e) => Error::transient(format!("node connection {addr}: {e}")),
            // A response that is not HTTP: not a restart, not worth a retry.
            e => Error::persistent(format!("node {addr} broke HTTP: {e}")),
        }
    }
}

/// Whether the node closed or reset the connection under the request: a
/// pooled connection it timed out, or a restart.
fn connection_closed(e: &ureq::Error) -> bool {
    matches!(e, ureq::Error::Io(e) if matches!(
        e.kind(),
        IoKind::UnexpectedEof | IoKind::ConnectionReset | IoKind::ConnectionAborted | IoKind::BrokenPipe
    ))
}

/// Sorts an HTTP answer to a JSON-RPC POST: a JSON-RPC reply (an object, or
/// an array for a batch) whatever the status, since Bitcoin Core sends its
/// errors with HTTP 404 (unknown method) and 500; otherwise the status says
/// what went wrong.
///
/// # Errors
/// Refused credentials, a busy node (transient), and anything that is not a
/// JSON-RPC reply.
pub(crate) fn decode_reply(addr: &str, status: u16, body: &[u8]) -> Result<Value, Error> {
    match status {
        401 => {
            return Err(Error::persistent(format!(
                "node {addr} refused our credentials (HTTP 401): check --auth or --cookie-file"
            )))
        }
        403 => {
            return Err(Error::persistent(format!(
                "node {addr} refused us (HTTP 403): check its -rpcallowip"
            )))
        }
        _ => {}
    }
    let parsed = serde_json::from_slice::<Value>(body);
    if let Ok(reply @ (Value::Object(_) | Value::Array(_))) = parsed {
        return Ok(reply);
    }
    Err(match status {
        503 => Error::transient(format!("node {addr} is busy (HTTP 503)")),
        // btcd answers a request it cannot parse with HTTP 200 and no body.
        _ if body.is_empty() => {
            Error::persistent(format!("node {addr} sent an empty reply (HTTP {status})"))
        }
        _ => Error::persistent(format!(
            "node {addr} sent no JSON-RPC reply (HTTP {status}): {}",
            excerpt(body)
        )),
    })
}

/// The result of one JSON-RPC reply, or the node's error with its code.
///
/// # Errors
/// The node's error, as [`crate::ErrorKind::Rpc`] (or transient while it warms up).
pub(crate) fn take_result(method: &str, mut reply: Value) -> Result<Value, Error> {
    match reply.get("error") {
        Some(err) if !err.is_null() => {
            let code = err.get("code").and_then(Value::as_i64).unwrap_or(0);
            let message = err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            Err(Error::rpc(method, code, message))
        }
        _ => Ok(reply
            .get_mut("result")
            .map(Value::take)
            .unwrap_or(Value::Null)),
    }
}

/// Matches a batch reply to the `count` calls numbered from `first`.
///
/// # Errors
/// When the reply is no array, or an answer is missing or unasked for.
pub(crate) fn split_batch(
    method: &str,
    first: u64,
    count: usize,
    reply: Value,
) -> Result<Vec<Result<Value, Error>>, Error> {
    let Value::Array(replies) = reply else {
        // Core answers a batch it cannot run at all with one error object.
        take_result(method, reply)?;
        return Err(Error::persistent(format!(
            "{method}: batch reply is not an array"
        )));
    };
    let mut results: Vec<Option<Result<Value, Error>>> = (0..count).map(|_| None).collect();
    for reply in replies {
        let slot = reply
            .get("id")
            .and_then(Value::as_u64)
            .and_then(|id| id.checked_sub(first))
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| results.get_mut(i))
            .ok_or_else(|| Error::persistent(format!("{method}: batch reply with unknown id")))?;
        *slot = Some(take_result(method, reply));
    }
    results
        .into_iter()
        .map(|r| {
            r.ok_or_else(|| {
                Error::persistent(format!("{method}: batch reply is missing an answer"))
            })
        })
        .collect()
}

/// The start of a body, as text for an error message.
fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(200)])
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests;
