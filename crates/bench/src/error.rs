//! The one error type of the bench's library boundary. Every variant names the
//! server it is about, so a failed comparison of several servers says which
//! one broke and how; messages carry the method and what was asked.

use std::fmt;

/// Why a benchmark run against a server failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The chaingen manifest is unusable (malformed hashes, heights past the tip).
    #[error("manifest: {0}")]
    Manifest(String),

    #[error("{server}: cannot connect: {error}")]
    Connect {
        server: String,
        error: std::io::Error,
    },

    #[error("{server}: no TCP connection after {secs} s")]
    ConnectTimeout { server: String, secs: u64 },

    #[error(
        "{server}: {method}: no complete answer within {secs} s \
         ({answered} of {expected} responses of the batch received)"
    )]
    Timeout {
        server: String,
        method: String,
        secs: u64,
        answered: usize,
        expected: usize,
    },

    /// A subscription the bench waits on went quiet.
    #[error("{server}: no {method} notification within {secs} s")]
    NotificationTimeout {
        server: String,
        method: String,
        secs: u64,
    },

    #[error(
        "{server}: connection closed by the server during {method} \
         ({answered} of {expected} responses of the batch received)"
    )]
    Closed {
        server: String,
        method: String,
        answered: usize,
        expected: usize,
    },

    #[error("{server}: i/o error during {method}: {error}")]
    Io {
        server: String,
        method: String,
        error: std::io::Error,
    },

    #[error(
        "{server}: a response line to {method} exceeds {limit} bytes \
         (raise --max-response-bytes if the server is right to send it)"
    )]
    LineTooLong {
        server: String,
        method: String,
        limit: usize,
    },

    /// The server broke JSON-RPC framing: bad JSON, unknown or repeated ids.
    #[error("{server}: protocol error in the response to {method}: {detail}")]
    Protocol {
        server: String,
        method: String,
        detail: String,
    },

    /// The server answered a request with a JSON-RPC error object.
    #[error("{server}: {method} {params} returned JSON-RPC error{code}: {message}")]
    Rpc {
        server: String,
        method: String,
        params: String,
        code: RpcCode,
        message: String,
    },

    /// A bug of the bench itself (a session task panicked), not of the server.
    #[error("{server}: internal error of the bench: {detail}")]
    Internal { server: String, detail: String },

    /// The server answered, but not what the manifest says a correct server answers.
    #[error("{server}: wrong answer to {method} for {subject}: {detail}")]
    Mismatch {
        server: String,
        method: String,
        subject: String,
        detail: String,
    },
}

/// The `code` of a JSON-RPC error object, which some servers leave out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpcCode(pub Option<i64>);

impl fmt::Display for RpcCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(code) => write!(f, " {code}"),
            None => Ok(()),
        }
    }
}

/// A wrong answer found by `check`, before the caller names server and method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wrong {
    /// What was asked about: `scripthash <hex>`, `txid <hex>`, `height <n>`.
    pub subject: String,
    /// The difference between the answer and the manifest.
    pub detail: String,
}

impl Wrong {
    pub fn new(subject: impl Into<String>, detail: impl Into<String>) -> Wrong {
        Wrong {
            subject: subject.into(),
            detail: detail.into(),
        }
    }

    /// Names the server and method the wrong answer came from.
    pub fn into_error(self, server: &str, method: &str) -> BenchError {
        BenchError::Mismatch {
            server: server.to_owned(),
            method: method.to_owned(),
            subject: self.subject,
            detail: self.detail,
        }
    }
}

/// Shortens server-supplied text quoted in an error so one bad answer cannot
/// flood the terminal or the report.
pub(crate) fn excerpt(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    let head: String = text.chars().take(max_chars).collect();
    format!("{head}… ({} bytes)", text.len())
}
