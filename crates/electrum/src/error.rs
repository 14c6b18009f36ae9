//! Protocol errors and their JSON-RPC error objects. `RpcError::to_json` is
//! the only place that picks an error code; call sites only pick a variant.
//!
//! | code   | variant                         | when |
//! |--------|---------------------------------|------|
//! | -32700 | `Parse`                         | the line is not JSON (or not UTF-8); id is null |
//! | -32600 | `InvalidRequest`                | not a request object, empty batch, bad `jsonrpc`/`id`/`method` |
//! | -32601 | `MethodNotFound`                | unknown method (named in the message) |
//! | -32602 | `InvalidParams`                 | wrong type, bad hex, wrong length, negative height, unknown name... |
//! | -32603 | `Internal`                      | a bug or a database error on our side |
//! | -101   | `LimitExceeded`                 | line, batch or subscription limit (aiorpcx's "excessive resource usage") |
//! | -102   | `ServerBusy`                    | too many sessions (the connection is then closed), or the server's client memory budget is spent |
//! | 1      | `BadRequest`, `HistoryTooLarge`, `NodeRejected` | valid request that cannot be served: not found, bad checkpoint, version already negotiated, node rejected the transaction (ElectrumX's `BAD_REQUEST`) |
//! | 2      | `NodeUnavailable`               | the node could not be reached (ElectrumX's `DAEMON_ERROR`) |

use osprey_query::Error;
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
    #[error("the transaction was rejected by network rules: {0}")]
    NodeRejected(String),
    #[error("node unavailable: {0}")]
    NodeUnavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl RpcError {
    /// The JSON-RPC error code (see the table in the module docs).
    pub fn code(&self) -> i64 {
        match self {
            RpcError::Parse(_) => -32700,
            RpcError::InvalidRequest(_) => -32600,
            RpcError::MethodNotFound(_) => -32601,
            RpcError::InvalidParams(_) => -32602,
            RpcError::Internal(_) => -32603,
            RpcError::LimitExceeded(_) => -101,
            RpcError::ServerBusy(_) => -102,
            RpcError::BadRequest(_)
            | RpcError::HistoryTooLarge { .. }
            | RpcError::NodeRejected(_) => 1,
            RpcError::NodeUnavailable(_) => 2,
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

/// Picks the variant, hence the code, for each query error; not-found and
/// not-supported errors are sent with the query error's own message.
impl From<Error> for RpcError {
    fn from(e: Error) -> Self {
        match e {
            Error::HistoryTooLarge { limit } => RpcError::HistoryTooLarge { limit },
            Error::TxNotFound(_) | Error::BlockNotFound(_) => RpcError::BadRequest(e.to_string()),
            Error::NotSupported(_) => RpcError::BadRequest(e.to_string()),
            Error::BadRequest(msg) => RpcError::BadRequest(msg),
            Error::Node(msg) => RpcError::NodeRejected(msg),
            Error::Unavailable(msg) => RpcError::NodeUnavailable(msg),
            Error::Internal(msg) => RpcError::Internal(msg),
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
        let e: RpcError = Error::Node("bad-txns-inputs-missingorspent".into()).into();
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
}
