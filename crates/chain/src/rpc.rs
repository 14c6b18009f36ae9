//! A small JSON-RPC 1.0 client over HTTP/1.1 for bitcoind and btcd.
//!
//! Keeps a pool of keep-alive connections so that parallel callers (indexer
//! workers, client queries) do not queue behind each other, re-reads the
//! cookie file when the node restarts, and speaks the strict dialect btcd
//! needs (`"jsonrpc":"1.0"`, a non-null id, positional params).

use crate::error::{Error, ErrorKind};
use base64::Engine;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// How the node authenticates us.
#[derive(Clone, Debug)]
pub enum Auth {
    UserPass(String, String),
    /// Bitcoin Core's `.cookie` file (`__cookie__:<random>`), re-read when the
    /// node answers 401 because it restarted with a new cookie.
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

/// Connections kept open for reuse; more are opened on demand.
const IDLE_CONNECTIONS_MAX: usize = 8;
/// Responses larger than this are refused rather than buffered (a 4 MB block
/// is ~8 MB of hex, a verbose block is far bigger).
const RESPONSE_BYTES_MAX: usize = 512 << 20;

/// A JSON-RPC client for one node.
pub struct RpcClient {
    addr: String,
    auth: Auth,
    timeout: Duration,
    idle: Mutex<Vec<BufReader<TcpStream>>>,
    next_id: AtomicU64,
}

impl RpcClient {
    /// Creates a client for `addr` (`host:port`). Connects lazily.
    pub fn new(addr: &str, auth: Auth) -> RpcClient {
        RpcClient {
            addr: addr.to_string(),
            auth,
            timeout: Duration::from_secs(120),
            idle: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
        }
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Calls `method` and decodes its result.
    ///
    /// # Errors
    /// Transport failures (transient), HTTP errors, and the node's own
    /// JSON-RPC errors as [`ErrorKind::Rpc`].
    pub fn call<T: DeserializeOwned>(&self, method: &str, params: &[Value]) -> Result<T, Error> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let request = json!({"jsonrpc": "1.0", "id": id, "method": method, "params": params});
        let response = self.post(&request)?;
        let value = Self::take_result(method, response)?;
        serde_json::from_value(value)
            .map_err(|e| Error::persistent(format!("{method}: unexpected result shape: {e}")))
    }

    /// Calls `method` once per parameter list in one HTTP request and returns
    /// each call's result (or error) in order.
    ///
    /// # Errors
    /// When the batch as a whole fails (transport, HTTP, malformed reply).
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
        let response = self.post(&Value::Array(requests))?;
        let Value::Array(replies) = response else {
            return Err(Error::persistent(format!(
                "{method}: batch reply is not an array"
            )));
        };
        let mut results: Vec<Option<Result<Value, Error>>> =
            (0..params.len()).map(|_| None).collect();
        for reply in replies {
            let index = reply
                .get("id")
                .and_then(Value::as_u64)
                .and_then(|id| id.checked_sub(first))
                .filter(|i| (*i as usize) < params.len())
                .ok_or_else(|| {
                    Error::persistent(format!("{method}: batch reply with unknown id"))
                })?;
            results[index as usize] = Some(Self::take_result(method, reply));
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

    fn take_result(method: &str, mut reply: Value) -> Result<Value, Error> {
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

    fn post(&self, body: &Value) -> Result<Value, Error> {
        let body = serde_json::to_vec(body).expect("JSON values serialise");
        let (status, reply) = self.request("POST / HTTP/1.1", Some(&body))?;
        match status {
            401 | 403 => {
                return Err(Error::persistent(format!(
                "node {} refused our credentials (HTTP {status}): check --auth or --cookie-file",
                self.addr
            )))
            }
            503 => {
                return Err(Error::transient(format!(
                    "node {} is busy (HTTP 503)",
                    self.addr
                )))
            }
            _ => {}
        }
        if reply.is_empty() {
            // btcd answers a request it cannot parse with HTTP 200 and no body.
            return Err(Error::persistent(format!(
                "node {} sent an empty reply (HTTP {status})",
                self.addr
            )));
        }
        serde_json::from_slice(&reply).map_err(|e| {
            let text = String::from_utf8_lossy(&reply[..reply.len().min(200)]).into_owned();
            Error::persistent(format!(
                "node {} sent non-JSON (HTTP {status}): {e}: {text}",
                self.addr
            ))
        })
    }

    /// GETs a Bitcoin Core REST resource (`/rest/...`, served on the RPC
    /// port without authentication when the node runs with `-rest`).
    /// Returns `None` for HTTP 404: REST is off, or the node does not have
    /// what was asked.
    ///
    /// # Errors
    /// Transport failures (transient) and any other non-200 status.
    pub fn rest_get(&self, path: &str) -> Result<Option<Vec<u8>>, Error> {
        let (status, body) = self.request(&format!("GET {path} HTTP/1.1"), None)?;
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
                String::from_utf8_lossy(&body[..body.len().min(200)]).trim()
            ))),
        }
    }

    /// One HTTP exchange on a pooled keep-alive connection. A pooled
    /// connection may have been closed by the node while idle: retry once
    /// on a fresh one before calling the node unreachable.
    fn request(&self, request_line: &str, body: Option<&[u8]>) -> Result<(u16, Vec<u8>), Error> {
        let pooled = self.idle.lock().expect("rpc pool lock").pop();
        if let Some(conn) = pooled {
            match self.exchange(conn, request_line, body) {
                Ok(v) => return Ok(v),
                Err(e) if e.kind() != ErrorKind::Transient => return Err(e),
                Err(_) => {}
            }
        }
        let conn = self.connect()?;
        self.exchange(conn, request_line, body)
    }

    fn connect(&self) -> Result<BufReader<TcpStream>, Error> {
        let unreachable = |e: std::io::Error| {
            Error::transient(format!("cannot connect to node at {}: {e}", self.addr))
        };
        let addrs: Vec<_> = self.addr.to_socket_addrs().map_err(unreachable)?.collect();
        let mut last = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(10)) {
                Ok(stream) => {
                    stream
                        .set_read_timeout(Some(self.timeout))
                        .map_err(unreachable)?;
                    stream
                        .set_write_timeout(Some(self.timeout))
                        .map_err(unreachable)?;
                    stream.set_nodelay(true).map_err(unreachable)?;
                    // Block-sized replies: a bigger buffer means fewer reads.
                    return Ok(BufReader::with_capacity(256 << 10, stream));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(unreachable(
            last.unwrap_or_else(|| std::io::Error::other("no address")),
        ))
    }

    /// Sends one request and reads its status and body; the connection goes
    /// back to the pool when the node keeps it open.
    fn exchange(
        &self,
        mut conn: BufReader<TcpStream>,
        request_line: &str,
        body: Option<&[u8]>,
    ) -> Result<(u16, Vec<u8>), Error> {
        let io =
            |e: std::io::Error| Error::transient(format!("node connection {}: {e}", self.addr));
        let head = match body {
            Some(body) => format!(
                "{request_line}\r\nHost: {}\r\nAuthorization: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: keep-alive\r\n\r\n",
                self.addr,
                self.auth.header()?,
                body.len()
            ),
            None => format!(
                "{request_line}\r\nHost: {}\r\nConnection: keep-alive\r\n\r\n",
                self.addr
            ),
        };
        let stream = conn.get_mut();
        stream.write_all(head.as_bytes()).map_err(io)?;
        if let Some(body) = body {
            stream.write_all(body).map_err(io)?;
        }

        let mut status_line = String::new();
        if conn.read_line(&mut status_line).map_err(io)? == 0 {
            return Err(Error::transient(format!(
                "node {} closed the connection",
                self.addr
            )));
        }
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| {
                Error::persistent(format!("bad HTTP status line from node: {status_line:?}"))
            })?;
        let mut content_length = None;
        let mut chunked = false;
        let mut keep_alive = true;
        loop {
            let mut line = String::new();
            if conn.read_line(&mut line).map_err(io)? == 0 {
                return Err(Error::transient(
                    "node closed the connection mid-headers".into(),
                ));
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                let value = value.trim();
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => content_length = value.parse::<usize>().ok(),
                    "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
                    "connection" => keep_alive = !value.eq_ignore_ascii_case("close"),
                    _ => {}
                }
            }
        }
        let body = if chunked {
            read_chunked(&mut conn).map_err(io)?
        } else if let Some(len) = content_length {
            if len > RESPONSE_BYTES_MAX {
                return Err(Error::persistent(format!(
                    "node response of {len} bytes is too large"
                )));
            }
            let mut buf = vec![0u8; len];
            conn.read_exact(&mut buf).map_err(io)?;
            buf
        } else {
            keep_alive = false;
            let mut buf = Vec::new();
            conn.by_ref()
                .take(RESPONSE_BYTES_MAX as u64)
                .read_to_end(&mut buf)
                .map_err(io)?;
            buf
        };
        if keep_alive {
            let mut idle = self.idle.lock().expect("rpc pool lock");
            if idle.len() < IDLE_CONNECTIONS_MAX {
                idle.push(conn);
            }
        }
        Ok((status, body))
    }
}

fn read_chunked(conn: &mut BufReader<TcpStream>) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size_line = String::new();
        conn.read_line(&mut size_line)?;
        let size = usize::from_str_radix(size_line.trim().split(';').next().unwrap_or(""), 16)
            .map_err(|_| std::io::Error::other("bad chunk size"))?;
        if body.len() + size > RESPONSE_BYTES_MAX {
            return Err(std::io::Error::other("chunked response too large"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        conn.read_exact(&mut body[start..])?;
        let mut crlf = String::new();
        conn.read_line(&mut crlf)?;
        if size == 0 {
            return Ok(body);
        }
    }
}
