//! Protocol errors and their JSON-RPC error objects. `RpcError::to_json` is
//! the only place that picks an error code; call sites only pick a variant.
//!
//! | code   | variant                         | when |
//! |--------|---------------------------------|------|
//! | -32700 | `Parse`                         | the line is not JSON (or not UTF-8); id is null |
//! | -32600 | `InvalidRequest`                | not a request object, empty batch, bad `jsonrpc`/`id`/`method` |
//! | -32601 | `MethodNotFound`, `MethodUnavailable` | unknown method (named in the message), or one this server does not serve (silent payments without their index), with why |
//! | -32602 | `InvalidParams`                 | wrong type, bad hex, wrong length, negative height, unknown name... |
//! | -32603 | `Internal`, `Indexing`          | a bug or a database error on our side; or, during the first sync, a method that needs the whole index (electrs' "unavailable index", same code) |
//! | -101   | `LimitExceeded`                 | line, batch or subscription limit (aiorpcx's "excessive resource usage") |
//! | -102   | `ServerBusy`                    | too many sessions (the connection is then closed), or the server's client memory budget is spent |
//! | 1      | `BadRequest`, `HistoryTooLarge`, `NodeRejected` | valid request that cannot be served: not found, bad checkpoint, version already negotiated, node refused a broadcast (ElectrumX's `BAD_REQUEST`) |
//! | 2      | `NodeFailed`, `NodeUnavailable` | the node failed a call that is no broadcast (a fee estimate, a transaction, mempool information) or could not be reached (ElectrumX's `DAEMON_ERROR`) |
//! | 10001  | `HistoryTooLong`                | 1.7: a `blockchain.scriptpubkey.*` method refused a script whose history is too long (ElectrumX's `RPC_ERROR_HISTORY_TOO_LONG`) |
//!
//! Only a broadcast the node refused says "rejected": a wallet takes that
//! as a verdict on its transaction. Any other node failure is ElectrumX's
//! `DAEMON_ERROR` (code 2, "daemon error: ..."), which wallets know as the
//! server's trouble, not theirs: with the node's method, message and code
//! when the node answered, without detail when it could not be reached.
//! Details that may name local files (the cookie file, the index's files)
//! go to the log, never to a client: `Internal` and `NodeUnavailable`
//! answers made from query errors carry fixed messages.

use osprey_answers::Error;
use serde_json::{json, Value};

/// An error answered to a client instead of a result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RpcError {
    #[error("parse error: {0}")]
    Parse(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("unknown method \"{0}\"")]
    MethodNotFound(String),
    /// A method of the protocol this server does not serve as configured.
    #[error("unknown method \"{method}\": {why}")]
    MethodUnavailable { method: String, why: String },
    #[error("invalid params: {0}")]
    InvalidParams(String),
    #[error("{0}")]
    LimitExceeded(String),
    #[error("server busy: {0}")]
    ServerBusy(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("history too large: more than {limit} transactions")]
    HistoryTooLarge { limit: usize },
    /// The same refusal in 1.7's `blockchain.scriptpubkey.*` methods,
    /// which give it a code of its own so that a client can tell it apart.
    #[error("history too large: more than {limit} transactions")]
    HistoryTooLong { limit: usize },
    #[error("the transaction was rejected by network rules: {0}")]
    NodeRejected(String),
    #[error("daemon error: {method}: {message} (code {code})")]
    NodeFailed {
        method: String,
        code: i64,
        message: String,
    },
    #[error("daemon error: the node is unavailable, try again later")]
    NodeUnavailable,
    #[error("internal error: {0}")]
    Internal(String),
    /// The first sync is not done: the answer would be partial. The text
    /// starts as electrs' does, so that what waits for electrs knows it.
    #[error("unavailable index: indexing: {0}")]
    Indexing(osprey_answers::Indexing),
}

impl RpcError {
    /// The JSON-RPC error code (see the table in the module docs).
    pub fn code(&self) -> i64 {
        match self {
            RpcError::Parse(_) => -32700,
            RpcError::InvalidRequest(_) => -32600,
            RpcError::MethodNotFound(_) | RpcError::MethodUnavailable { .. } => -32601,
            RpcError::InvalidParams(_) => -32602,
            RpcError::Internal(_) | RpcError::Indexing(_) => -32603,
            RpcError::LimitExceeded(_) => -101,
            RpcError::ServerBusy(_) => -102,
            RpcError::BadRequest(_)
            | RpcError::HistoryTooLarge { .. }
            | RpcError::NodeRejected(_) => 1,
            RpcError::NodeFailed { .. } | RpcError::NodeUnavailable => 2,
            RpcError::HistoryTooLong { .. } => 10001,
        }
    }

    /// Returns the JSON-RPC error object `{"code": .., "message": ..}`.
    pub fn to_json(&self) -> Value {
        json!({ "code": self.code(), "message": self.to_string() })
    }

    /// Shorthand for an invalid parameter, naming it.
    pub fn param(name: &str, why: impl std::fmt::Display) -> RpcError {
        RpcError::InvalidParams(format!("{name}: {why}"))
    }
}

/// What an internal error tells the client; the detail is in the log.
const INTERNAL_ERROR_MESSAGE: &str = "the server failed; its log has the details";

/// Picks the variant, hence the code, for each query error; not-found and
/// not-supported errors are sent with the query error's own message.
/// Details that may name local files are logged here and not sent.
impl From<Error> for RpcError {
    fn from(e: Error) -> Self {
        match e {
            Error::HistoryTooLarge { limit } => RpcError::HistoryTooLarge { limit },
            Error::TxNotFound(_) | Error::BlockNotFound(_) => RpcError::BadRequest(e.to_string()),
            Error::NotSupported(_) => RpcError::BadRequest(e.to_string()),
            Error::BadRequest(msg) => RpcError::BadRequest(msg),
            Error::Rejected(msg) => RpcError::NodeRejected(msg),
            Error::NodeFailed {
                method,
                code,
                message,
            } => RpcError::NodeFailed {
                method,
                code,
                message,
            },
            Error::Unavailable(detail) => {
                tracing::warn!("a client request found the node unavailable: {detail}");
                RpcError::NodeUnavailable
            }
            Error::Internal(detail) => {
                tracing::error!("internal error answering a client: {detail}");
                RpcError::Internal(INTERNAL_ERROR_MESSAGE.into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_core::Height;

    #[test]
    fn error_objects_carry_code_and_message() {
        let e = RpcError::MethodNotFound("foo.bar".into());
        assert_eq!(
            e.to_json(),
            json!({"code": -32601, "message": "unknown method \"foo.bar\""})
        );
        let e = RpcError::param("height", "must be a non-negative integer");
        assert_eq!(e.code(), -32602);
        assert!(e.to_string().contains("height"));
    }

    #[test]
    fn query_errors_map_to_documented_codes() {
        let e: RpcError = Error::HistoryTooLarge { limit: 10 }.into();
        assert_eq!(e.code(), 1);
        assert!(e.to_string().contains("history too large"), "{e}");
        let e: RpcError = Error::Rejected("bad-txns-inputs-missingorspent".into()).into();
        assert_eq!(e.code(), 1);
        assert!(e.to_string().contains("bad-txns-inputs-missingorspent"));
        let e: RpcError = Error::Unavailable("connection refused".into()).into();
        assert_eq!(e.code(), 2);
        let e: RpcError = Error::BlockNotFound(Height(7)).into();
        assert_eq!(
            (e.code(), e.to_string().as_str()),
            (1, "block at height 7 not found")
        );
        let e: RpcError = Error::NotSupported("no submitpackage".into()).into();
        assert_eq!(
            (e.code(), e.to_string().as_str()),
            (1, "not supported: no submitpackage")
        );
        let e: RpcError = Error::Internal("rocksdb".into()).into();
        assert_eq!(e.code(), -32603);
    }

    #[test]
    fn only_a_broadcast_refusal_says_rejected() {
        let refused: RpcError = Error::Rejected("min relay fee not met".into()).into();
        assert_eq!(
            refused.to_json(),
            json!({"code": 1, "message": "the transaction was rejected by network rules: min relay fee not met"})
        );
        let failed: RpcError = Error::NodeFailed {
            method: "estimatesmartfee".into(),
            code: -32603,
            message: "Fee estimation disabled".into(),
        }
        .into();
        assert_eq!(
            failed.to_json(),
            json!({"code": 2, "message": "daemon error: estimatesmartfee: Fee estimation disabled (code -32603)"})
        );
    }

    #[test]
    fn an_unreachable_node_is_a_daemon_error_without_local_paths() {
        let e: RpcError =
            Error::Unavailable("cannot read cookie file /home/u/.bitcoin/.cookie: denied".into())
                .into();
        assert_eq!(e.code(), 2);
        assert_eq!(
            e.to_string(),
            "daemon error: the node is unavailable, try again later"
        );
    }

    #[test]
    fn internal_errors_carry_no_local_paths() {
        let e: RpcError =
            Error::Internal("IO error: /var/lib/osprey/db/000042.sst: No such file".into()).into();
        assert_eq!(e.code(), -32603);
        assert_eq!(
            e.to_string(),
            "internal error: the server failed; its log has the details"
        );
    }
}
