//! One raw Electrum session: JSON-RPC lines over a `TcpStream`, for the
//! methods `electrum-client` does not have and for input no well-behaved
//! client would send. Server pushes (responses without an id) met while
//! waiting for a response are queued, so none is lost.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long one response may take before the test fails: a server that
/// hangs fails the test instead of stalling it.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

/// A JSON-RPC error object as the server sent it.
#[derive(Clone, Debug, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

/// Splits a response object into its result or its error.
///
/// # Panics
/// When it has neither or both, or an error without a code.
pub fn outcome(response: &Value) -> Result<Value, RpcError> {
    match (response.get("result"), response.get("error")) {
        (Some(result), None) => Ok(result.clone()),
        (None, Some(error)) => Err(RpcError {
            code: error["code"]
                .as_i64()
                .unwrap_or_else(|| panic!("error without a code: {response}")),
            message: error["message"].as_str().unwrap_or_default().to_string(),
        }),
        _ => panic!("response with neither result nor error (or both): {response}"),
    }
}

/// A connection speaking newline-delimited JSON-RPC.
pub struct Session {
    addr: SocketAddr,
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    /// Bytes of a line not complete yet (kept across read timeouts).
    partial: Vec<u8>,
    next_id: u64,
    notifications: VecDeque<Value>,
}

impl Session {
    /// Connects to an Electrum server.
    ///
    /// # Panics
    /// When the connection is refused.
    pub fn connect(addr: SocketAddr) -> Session {
        Session::try_connect(addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}"))
    }

    /// Connects, returning the error instead of panicking.
    ///
    /// # Errors
    /// When the connection is refused.
    pub fn try_connect(addr: SocketAddr) -> std::io::Result<Session> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        Session::from_stream(stream)
    }

    /// A session on a connection made elsewhere (from a chosen address).
    ///
    /// # Errors
    /// When the socket cannot be set up.
    pub fn from_stream(stream: TcpStream) -> std::io::Result<Session> {
        stream.set_nodelay(true)?;
        let addr = stream.peer_addr()?;
        let writer = stream.try_clone()?;
        Ok(Session {
            addr,
            reader: BufReader::new(stream),
            writer,
            partial: Vec::new(),
            next_id: 1,
            notifications: VecDeque::new(),
        })
    }

    /// Sends raw bytes followed by a newline.
    ///
    /// # Errors
    /// When the server closed the connection.
    pub fn send_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line);
        bytes.push(b'\n');
        self.writer.write_all(&bytes)?;
        self.writer.flush()
    }

    /// Reads the next line as JSON within `timeout`: `Ok(None)` when the
    /// server closed the connection.
    ///
    /// # Errors
    /// `TimedOut` when nothing complete arrived in time, or a socket error.
    pub fn read_message_within(&mut self, timeout: Duration) -> std::io::Result<Option<Value>> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(std::io::Error::new(
                    ErrorKind::TimedOut,
                    "no complete line in time",
                ));
            }
            self.reader.get_ref().set_read_timeout(Some(left))?;
            match self.reader.read_until(b'\n', &mut self.partial) {
                Ok(0) => return Ok(None),
                Ok(_) if self.partial.ends_with(b"\n") => {
                    let line = std::mem::take(&mut self.partial);
                    let value = serde_json::from_slice(&line).unwrap_or_else(|e| {
                        panic!(
                            "server sent a line that is not JSON ({e}): {}",
                            String::from_utf8_lossy(&line)
                        )
                    });
                    return Ok(Some(value));
                }
                // EOF in the middle of a line.
                Ok(_) => return Ok(None),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    continue
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads the next response (an object with an `id`, or an array for a
    /// batch), queueing notifications met on the way.
    ///
    /// # Panics
    /// When the server closes the connection or takes longer than
    /// [`RESPONSE_TIMEOUT`].
    pub fn read_response(&mut self) -> Value {
        loop {
            match self.read_message_within(RESPONSE_TIMEOUT) {
                Ok(Some(v)) if v.get("method").is_some() && v.get("id").is_none() => {
                    self.notifications.push_back(v);
                }
                Ok(Some(v)) => return v,
                Ok(None) => panic!("{} closed the connection instead of answering", self.addr),
                Err(e) => panic!(
                    "no answer from {} within {RESPONSE_TIMEOUT:?}: {e}",
                    self.addr
                ),
            }
        }
    }

    /// Sends one request and returns the whole response object.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_line(line.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("sending {method} to {}: {e}", self.addr));
        let response = self.read_response();
        assert_eq!(
            response["id"],
            json!(id),
            "{method}: response to another request: {response}"
        );
        assert_eq!(response["jsonrpc"], json!("2.0"), "{method}: {response}");
        response
    }

    /// Calls `method` and returns its result or its error object.
    pub fn raw_call(&mut self, method: &str, params: Value) -> Result<Value, RpcError> {
        let response = self.request(method, params);
        outcome(&response)
    }

    /// Sends one JSON-RPC batch and returns each call's outcome, in the
    /// order of `calls` (the server may answer a batch in any order).
    pub fn batch(&mut self, calls: &[(&str, Value)]) -> Vec<Result<Value, RpcError>> {
        let first = self.next_id;
        self.next_id += calls.len() as u64;
        let requests: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (method, params))| {
                json!({"jsonrpc": "2.0", "id": first + i as u64, "method": method, "params": params})
            })
            .collect();
        self.send_line(Value::Array(requests).to_string().as_bytes())
            .unwrap_or_else(|e| panic!("sending a batch to {}: {e}", self.addr));
        let response = self.read_response();
        let items = response
            .as_array()
            .unwrap_or_else(|| panic!("a batch answered with {response}"));
        assert_eq!(
            items.len(),
            calls.len(),
            "batch answered with {} responses: {response}",
            items.len()
        );
        let mut outcomes = vec![None; calls.len()];
        for item in items {
            let id = item["id"]
                .as_u64()
                .unwrap_or_else(|| panic!("batch response without a numeric id: {item}"));
            let slot = id
                .checked_sub(first)
                .filter(|i| (*i as usize) < calls.len());
            let slot =
                slot.unwrap_or_else(|| panic!("batch response with a foreign id: {item}")) as usize;
            assert!(outcomes[slot].is_none(), "two responses with id {id}");
            outcomes[slot] = Some(outcome(item));
        }
        outcomes
            .into_iter()
            .map(|o| o.expect("every id answered once"))
            .collect()
    }

    /// Calls `method`, which must succeed.
    ///
    /// # Panics
    /// With the method, params and error when it fails.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.raw_call(method, params.clone())
            .unwrap_or_else(|e| panic!("{method} {params} failed: {e:?}"))
    }

    /// Calls `method`, which must fail; returns the error.
    ///
    /// # Panics
    /// When it succeeds.
    pub fn call_err(&mut self, method: &str, params: Value) -> RpcError {
        match self.raw_call(method, params.clone()) {
            Ok(result) => panic!("{method} {params} should fail, answered {result}"),
            Err(e) => e,
        }
    }

    /// Negotiates the protocol version (`server.version`, the first message
    /// of a 1.6 session) and returns the agreed version.
    pub fn negotiate(&mut self, version: Value) -> String {
        let answer = self.call("server.version", json!(["osprey-it", version]));
        answer[1]
            .as_str()
            .unwrap_or_else(|| panic!("server.version answer {answer}"))
            .to_string()
    }

    /// Returns the next notification of `method`, waiting up to `timeout`;
    /// notifications of other methods are kept.
    ///
    /// # Panics
    /// When none arrives in time.
    pub fn wait_notification(&mut self, method: &str, timeout: Duration) -> Value {
        self.wait_notification_where(method, timeout, |n| n["method"] == json!(method))
    }

    /// Returns the next notification, whatever its method, waiting up to
    /// `timeout`.
    ///
    /// # Panics
    /// When none arrives in time.
    pub fn next_notification(&mut self, timeout: Duration) -> Value {
        self.wait_notification_where("any", timeout, |_| true)
    }

    /// Returns the first notification `wanted` accepts (`what` names it in
    /// failures), waiting up to `timeout`; the others are kept.
    fn wait_notification_where(
        &mut self,
        what: &str,
        timeout: Duration,
        wanted: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.notifications.iter().position(&wanted) {
                return self.notifications.remove(i).expect("index found above");
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!(
                    "no {what} notification within {timeout:?} (queued: {:?})",
                    self.notifications
                );
            }
            match self.read_message_within(left) {
                Ok(Some(v)) if v.get("id").is_none() => self.notifications.push_back(v),
                Ok(Some(v)) => panic!("unexpected response while waiting for {what}: {v}"),
                Ok(None) => panic!(
                    "{} closed the connection while we waited for {what}",
                    self.addr
                ),
                Err(e) if e.kind() == ErrorKind::TimedOut => {}
                Err(e) => panic!("reading from {}: {e}", self.addr),
            }
        }
    }

    /// Returns true when the server closes the connection within `timeout`
    /// (anything it sends first is returned too).
    pub fn closed_within(&mut self, timeout: Duration) -> (bool, Vec<Value>) {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return (false, seen);
            }
            match self.read_message_within(left) {
                Ok(Some(v)) => seen.push(v),
                Ok(None) => return (true, seen),
                Err(e) if e.kind() == ErrorKind::TimedOut => return (false, seen),
                // A reset is a close too.
                Err(_) => return (true, seen),
            }
        }
    }

    /// Notifications received but not consumed yet.
    pub fn pending_notifications(&self) -> &VecDeque<Value> {
        &self.notifications
    }
}
