//! One Electrum session over plain TCP: JSON-RPC framing (one JSON value per
//! line), batches, matching responses to requests by id, timeouts, a cap on
//! response size, and the byte and latency accounting of the session. Knows
//! nothing about what the answers should be: that is `check`'s job.

use crate::error::{excerpt, BenchError, RpcCode};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// Characters of server-supplied text quoted in an error message.
const EXCERPT_CHARS: usize = 300;

/// Notifications kept between two checks. A still chain sends none; a server
/// flooding them must not grow the bench's memory until the timeout.
const NOTIFICATIONS_MAX: usize = 10_000;

/// Limits that keep a broken or hostile server from hanging the bench or
/// exhausting its memory.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest wait for a TCP connection, and for the whole answer to one batch.
    pub timeout: Duration,
    /// Longest response line accepted, in bytes.
    pub response_bytes_max: usize,
}

/// What a session measured: the raw numbers of a run.
#[derive(Clone, Debug, Default)]
pub struct SessionStats {
    pub requests: u64,
    pub batches: u64,
    pub bytes_out: u64,
    pub bytes_in: u64,
    /// Send of the first byte of a batch to parse of its last response.
    pub batch_latencies: Vec<Duration>,
    pub first_request: Option<Instant>,
    pub last_response: Option<Instant>,
}

/// A connected Electrum session that sends one request or batch at a time.
///
/// One batch in flight at a time, like a wallet that waits for its answers:
/// each batch's latency is then the server's alone, not a queue's.
pub struct Session {
    /// Names the server in errors: "host:port", then "software at host:port"
    /// once `server.version` has answered.
    server: String,
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    next_id: u64,
    limits: Limits,
    stats: SessionStats,
    /// Responses of the batch in flight received so far; kept outside the
    /// exchange future so a timeout can say how far the server got.
    answered_in_flight: usize,
    notifications: Vec<Value>,
}

impl Session {
    /// Opens a TCP connection to `address` ("host:port").
    ///
    /// # Errors
    /// When the connection is refused or not made within the timeout.
    pub async fn connect(address: &str, limits: Limits) -> Result<Session, BenchError> {
        let server = address.to_owned();
        let stream = tokio::time::timeout(limits.timeout, TcpStream::connect(address))
            .await
            .map_err(|_| BenchError::ConnectTimeout {
                server: server.clone(),
                secs: limits.timeout.as_secs(),
            })?
            .map_err(|error| BenchError::Connect {
                server: server.clone(),
                error,
            })?;
        // Small request lines must leave at once, or Nagle's algorithm adds
        // tens of milliseconds to every batch and we would measure that.
        stream
            .set_nodelay(true)
            .map_err(|error| BenchError::Connect {
                server: server.clone(),
                error,
            })?;
        let (read, writer) = stream.into_split();
        Ok(Session {
            server,
            reader: BufReader::new(read),
            writer,
            next_id: 0,
            limits,
            stats: SessionStats::default(),
            answered_in_flight: 0,
            notifications: Vec::new(),
        })
    }

    /// Returns the name of the server used in errors.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Renames the server in later errors (after `server.version` answered).
    pub fn set_server(&mut self, server: String) {
        self.server = server;
    }

    pub fn stats(&self) -> &SessionStats {
        &self.stats
    }

    /// Returns the notifications received so far and forgets them.
    pub fn take_notifications(&mut self) -> Vec<Value> {
        std::mem::take(&mut self.notifications)
    }

    /// Returns the next notification: one received while a batch was in
    /// flight, else the next line the server sends, which must be one.
    /// `method` names what the session waits on in errors.
    ///
    /// # Errors
    /// When none comes within the timeout, the connection breaks, or the
    /// line is not a notification (a response nobody asked for).
    pub async fn next_notification(&mut self, method: &str) -> Result<Value, BenchError> {
        if !self.notifications.is_empty() {
            return Ok(self.notifications.remove(0));
        }
        let timeout = self.limits.timeout;
        let line = loop {
            let line = match tokio::time::timeout(timeout, self.read_line(method, 0)).await {
                Ok(line) => line?,
                Err(_) => {
                    return Err(BenchError::NotificationTimeout {
                        server: self.server.clone(),
                        method: method.to_owned(),
                        secs: timeout.as_secs(),
                    })
                }
            };
            if !line.iter().all(u8::is_ascii_whitespace) {
                break line;
            }
        };
        let text = String::from_utf8_lossy(&line);
        match serde_json::from_slice::<Value>(&line) {
            Ok(value) if value.get("method").is_some() && value["id"].is_null() => Ok(value),
            Ok(_) => Err(self.protocol_error(
                method,
                format!(
                    "expected a notification, got {}",
                    excerpt(&text, EXCERPT_CHARS)
                ),
            )),
            Err(e) => Err(self.protocol_error(
                method,
                format!("invalid JSON ({e}): {}", excerpt(&text, EXCERPT_CHARS)),
            )),
        }
    }

    /// Sends one request as a single JSON object and returns its result.
    ///
    /// # Errors
    /// See [`Session::batch`].
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, BenchError> {
        let mut results = self.exchange(method, vec![params], false).await?;
        Ok(results.pop().unwrap_or(Value::Null))
    }

    /// Sends one request per element of `params_list` as a single JSON-RPC
    /// batch (a JSON array on one line) and returns the results in request
    /// order, whatever order the server answered in.
    ///
    /// # Errors
    /// On a JSON-RPC error object for any request, a timeout, a dropped
    /// connection, an oversized line, or a response that breaks JSON-RPC.
    pub async fn batch(
        &mut self,
        method: &str,
        params_list: Vec<Value>,
    ) -> Result<Vec<Value>, BenchError> {
        if params_list.is_empty() {
            return Ok(Vec::new());
        }
        self.exchange(method, params_list, true).await
    }

    async fn exchange(
        &mut self,
        method: &str,
        params_list: Vec<Value>,
        as_batch: bool,
    ) -> Result<Vec<Value>, BenchError> {
        let expected = params_list.len();
        self.answered_in_flight = 0;
        let timeout = self.limits.timeout;
        match tokio::time::timeout(timeout, self.exchange_inner(method, params_list, as_batch))
            .await
        {
            Ok(result) => result,
            Err(_) => Err(BenchError::Timeout {
                server: self.server.clone(),
                method: method.to_owned(),
                secs: timeout.as_secs(),
                answered: self.answered_in_flight,
                expected,
            }),
        }
    }

    async fn exchange_inner(
        &mut self,
        method: &str,
        params_list: Vec<Value>,
        as_batch: bool,
    ) -> Result<Vec<Value>, BenchError> {
        let first_id = self.next_id;
        let requests: Vec<Value> = params_list
            .iter()
            .enumerate()
            .map(|(i, params)| {
                json!({"jsonrpc": "2.0", "id": first_id + i as u64, "method": method, "params": params})
            })
            .collect();
        self.next_id += requests.len() as u64;
        let mut line = if as_batch {
            serde_json::to_vec(&requests)
        } else {
            serde_json::to_vec(&requests[0])
        }
        .expect("serde_json::Value always serialises");
        line.push(b'\n');

        let sent_at = Instant::now();
        self.stats.first_request.get_or_insert(sent_at);
        self.writer
            .write_all(&line)
            .await
            .map_err(|error| self.io_error(method, error))?;
        self.stats.bytes_out += line.len() as u64;
        self.stats.requests += requests.len() as u64;
        self.stats.batches += 1;

        let mut results: Vec<Option<Value>> = vec![None; requests.len()];
        while self.answered_in_flight < requests.len() {
            let line = self.read_line(method, requests.len()).await?;
            // Tolerate blank lines between responses.
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let value: Value = match serde_json::from_slice(&line) {
                Ok(value) => value,
                Err(e) => {
                    return Err(self.protocol_error(
                        method,
                        format!(
                            "invalid JSON ({e}): {}",
                            excerpt(&String::from_utf8_lossy(&line), EXCERPT_CHARS)
                        ),
                    ))
                }
            };
            // Servers answer a batch with an array, but nothing forbids them
            // from answering some requests one per line: accept both.
            let items = match value {
                Value::Array(items) => items,
                other => vec![other],
            };
            for item in items {
                self.accept_item(method, &params_list, first_id, item, &mut results)?;
            }
        }
        let now = Instant::now();
        self.stats.batch_latencies.push(now - sent_at);
        self.stats.last_response = Some(now);
        // Every slot is filled: answered_in_flight counts distinct ids only.
        Ok(results
            .into_iter()
            .map(|r| r.unwrap_or(Value::Null))
            .collect())
    }

    /// Files one response object of the batch in flight into `results`.
    fn accept_item(
        &mut self,
        method: &str,
        params_list: &[Value],
        first_id: u64,
        item: Value,
        results: &mut [Option<Value>],
    ) -> Result<(), BenchError> {
        let Value::Object(mut object) = item else {
            return Err(self.protocol_error(
                method,
                format!(
                    "response is not a JSON object: {}",
                    excerpt(&item.to_string(), EXCERPT_CHARS)
                ),
            ));
        };
        let id = object.get("id").cloned().unwrap_or(Value::Null);
        if id.is_null() {
            if object.contains_key("method") {
                if self.notifications.len() >= NOTIFICATIONS_MAX {
                    return Err(self.protocol_error(
                        method,
                        format!(
                            "more than {NOTIFICATIONS_MAX} notifications while waiting for a batch"
                        ),
                    ));
                }
                self.notifications.push(Value::Object(object));
                return Ok(());
            }
            // An error with a null id rejects the request line as a whole
            // (a batch too large, a parse error on the server's side).
            if let Some(error) = object.remove("error") {
                return Err(self.rpc_error(method, "(whole request)".to_owned(), &error));
            }
            return Err(self.protocol_error(
                method,
                format!(
                    "response without id: {}",
                    excerpt(&Value::Object(object).to_string(), EXCERPT_CHARS)
                ),
            ));
        }
        let slot = id
            .as_u64()
            .and_then(|id| id.checked_sub(first_id))
            .and_then(|offset| usize::try_from(offset).ok())
            .filter(|&offset| offset < results.len());
        let Some(slot) = slot else {
            return Err(self.protocol_error(
                method,
                format!("response with id {id}, which no request in flight has"),
            ));
        };
        if results[slot].is_some() {
            return Err(self.protocol_error(method, format!("two responses with id {id}")));
        }
        if let Some(error) = object.remove("error").filter(|e| !e.is_null()) {
            let params = excerpt(&params_list[slot].to_string(), EXCERPT_CHARS);
            return Err(self.rpc_error(method, params, &error));
        }
        let Some(result) = object.remove("result") else {
            return Err(self.protocol_error(
                method,
                format!("response with id {id} has neither result nor error"),
            ));
        };
        results[slot] = Some(result);
        self.answered_in_flight += 1;
        Ok(())
    }

    /// Reads one line, refusing to buffer more than the response size limit.
    async fn read_line(&mut self, method: &str, expected: usize) -> Result<Vec<u8>, BenchError> {
        let limit = self.limits.response_bytes_max;
        let mut line = Vec::new();
        // One byte over the limit tells an oversized line from one of
        // exactly the limit.
        let read = (&mut self.reader)
            .take(limit as u64 + 1)
            .read_until(b'\n', &mut line)
            .await
            .map_err(|error| self.io_error(method, error))?;
        self.stats.bytes_in += read as u64;
        if line.last() == Some(&b'\n') {
            return Ok(line);
        }
        if line.len() > limit {
            return Err(BenchError::LineTooLong {
                server: self.server.clone(),
                method: method.to_owned(),
                limit,
            });
        }
        // End of stream, mid-line or between lines.
        Err(BenchError::Closed {
            server: self.server.clone(),
            method: method.to_owned(),
            answered: self.answered_in_flight,
            expected,
        })
    }

    fn io_error(&self, method: &str, error: std::io::Error) -> BenchError {
        BenchError::Io {
            server: self.server.clone(),
            method: method.to_owned(),
            error,
        }
    }

    fn protocol_error(&self, method: &str, detail: String) -> BenchError {
        BenchError::Protocol {
            server: self.server.clone(),
            method: method.to_owned(),
            detail,
        }
    }

    fn rpc_error(&self, method: &str, params: String, error: &Value) -> BenchError {
        let code = error.get("code").and_then(Value::as_i64);
        let message = match error.get("message").and_then(Value::as_str) {
            Some(message) => message.to_owned(),
            None => error.to_string(),
        };
        BenchError::Rpc {
            server: self.server.clone(),
            method: method.to_owned(),
            params,
            code: RpcCode(code),
            message: excerpt(&message, EXCERPT_CHARS),
        }
    }
}
