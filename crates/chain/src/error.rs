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
    /// The JSON-RPC method the node answered with an error, kept apart from
    /// the node's message so that callers can tell a refused broadcast from
    /// a failed query without parsing text.
    method: Option<String>,
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
            method: None,
            code: 0,
            message,
        }
    }

    pub fn persistent(message: String) -> Error {
        Error {
            kind: ErrorKind::Persistent,
            method: None,
            code: 0,
            message,
        }
    }

    pub fn unsupported(message: String) -> Error {
        Error {
            kind: ErrorKind::Unsupported,
            method: None,
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
            method: Some(method.to_string()),
            code,
            message,
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

    /// The JSON-RPC method the node answered with an error, if it did.
    pub fn method(&self) -> Option<&str> {
        self.method.as_deref()
    }

    /// The node's message without our method prefix, for relaying to clients.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.method {
            Some(method) => write!(f, "{method}: {} (code {})", self.message, self.code),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_error_keeps_method_code_and_message_apart() {
        let e = Error::rpc(
            "getrawtransaction",
            -5,
            "No such mempool transaction".into(),
        );
        assert_eq!(e.kind(), ErrorKind::Rpc);
        assert_eq!(e.method(), Some("getrawtransaction"));
        assert_eq!(e.code(), -5);
        assert_eq!(e.message(), "No such mempool transaction");
        assert_eq!(
            e.to_string(),
            "getrawtransaction: No such mempool transaction (code -5)"
        );
        let warming = Error::rpc("getblockhash", -28, "Loading block index".into());
        assert!(warming.is_transient());
        let down = Error::transient("connection refused".into());
        assert_eq!(
            (down.method(), down.to_string().as_str()),
            (None, "connection refused")
        );
    }
}
