//! Errors from talking to the node, with whether retrying can help.

use std::fmt;

/// Whether an error may go away on its own (node restarting, still warming
/// up, connection dropped) or needs someone to act (bad credentials, a
/// block the node does not have, a rejected transaction).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    Transient,
    Persistent,
    /// The node answered with a JSON-RPC error.
    Rpc,
    /// The source cannot do this at all (the blk-file source has no node
    /// to broadcast to or ask for fees): the request was fine, the
    /// server's setup cannot serve it.
    Unsupported,
}

/// An error from the node or on the way to it.
#[derive(Clone, Debug)]
pub struct Error {
    kind: ErrorKind,
    /// JSON-RPC error code, for [`ErrorKind::Rpc`].
    code: i64,
    message: String,
}

/// Bitcoin Core's "still loading / verifying / rescanning" code.
const RPC_IN_WARMUP: i64 = -28;

impl Error {
    pub fn transient(message: String) -> Error {
        Error {
            kind: ErrorKind::Transient,
            code: 0,
            message,
        }
    }

    pub fn persistent(message: String) -> Error {
        Error {
            kind: ErrorKind::Persistent,
            code: 0,
            message,
        }
    }

    pub fn unsupported(message: String) -> Error {
        Error {
            kind: ErrorKind::Unsupported,
            code: 0,
            message,
        }
    }

    pub fn rpc(method: &str, code: i64, message: String) -> Error {
        let kind = if code == RPC_IN_WARMUP {
            ErrorKind::Transient
        } else {
            ErrorKind::Rpc
        };
        Error {
            kind,
            code,
            message: format!("{method}: {message} (code {code})"),
        }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The JSON-RPC error code (0 unless the node sent one).
    pub fn code(&self) -> i64 {
        self.code
    }

    /// Whether waiting and retrying may succeed.
    pub fn is_transient(&self) -> bool {
        self.kind == ErrorKind::Transient
    }

    /// The node's message without our method prefix, for relaying to clients.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
