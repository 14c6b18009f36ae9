//! Errors a query can end in, in terms a client can be told (the not-found
//! and not-supported messages reach Electrum clients word for word).

use bitcoin::Txid;
use osprey_core::Height;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("history too large: more than {limit} entries (raise history_entries_max)")]
    HistoryTooLarge { limit: usize },
    #[error("transaction {0} not found")]
    TxNotFound(Txid),
    #[error("block at height {0} not found")]
    BlockNotFound(Height),
    /// The node refused a broadcast (a transaction, a package): its own
    /// message. Nothing else is a refusal.
    #[error("{0}")]
    Rejected(String),
    /// The node answered a JSON-RPC error to anything but a broadcast (a
    /// fee estimate, a transaction, mempool information).
    #[error("{method}: {message} (code {code})")]
    NodeFailed {
        method: String,
        code: i64,
        message: String,
    },
    /// The node cannot be reached right now. The detail is for the log: it
    /// may name local files (the cookie file).
    #[error("node unavailable: {0}")]
    Unavailable(String),
    /// The node lacks a feature the request needs (package relay).
    #[error("not supported: {0}")]
    NotSupported(String),
    /// A valid request about something that does not exist (a position
    /// past a block's end, a transaction not in the block named).
    #[error("{0}")]
    BadRequest(String),
    /// A bug, a database error or a node reply we cannot use. The detail
    /// is for the log: it may name the index's files.
    #[error("internal error: {0}")]
    Internal(String),
}

/// The node methods whose JSON-RPC errors are refusals of what a wallet
/// broadcast.
const BROADCAST_METHODS: [&str; 2] = ["sendrawtransaction", "submitpackage"];

impl From<osprey_chain::Error> for Error {
    fn from(e: osprey_chain::Error) -> Self {
        match e.kind() {
            osprey_chain::ErrorKind::Transient => Error::Unavailable(e.to_string()),
            // The node refused a broadcast: its own words, for the wallet.
            osprey_chain::ErrorKind::Rpc
                if e.method().is_some_and(|m| BROADCAST_METHODS.contains(&m)) =>
            {
                Error::Rejected(e.message().to_string())
            }
            osprey_chain::ErrorKind::Rpc => Error::NodeFailed {
                method: e.method().unwrap_or_default().to_string(),
                code: e.code(),
                message: e.message().to_string(),
            },
            osprey_chain::ErrorKind::Unsupported => Error::NotSupported(e.to_string()),
            // The node did not refuse anything: the way to it or what it
            // sent back is broken. Not "rejected by network rules".
            osprey_chain::ErrorKind::Persistent => Error::Internal(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_nodes_refusals_read_as_refusals() {
        let refused =
            osprey_chain::Error::rpc("sendrawtransaction", -26, "min relay fee not met".into());
        assert!(matches!(Error::from(refused), Error::Rejected(_)));
        // The demo's source has no node to broadcast to: that is no
        // rejection by network rules.
        let unsupported = osprey_chain::Error::unsupported("broadcast needs a node".into());
        let e = Error::from(unsupported);
        assert!(matches!(e, Error::NotSupported(_)), "{e:?}");
        assert_eq!(e.to_string(), "not supported: broadcast needs a node");
        let broken = osprey_chain::Error::persistent("getblock: not hex".into());
        assert!(matches!(Error::from(broken), Error::Internal(_)));
        let down = osprey_chain::Error::transient("connection refused".into());
        assert!(matches!(Error::from(down), Error::Unavailable(_)));
    }

    #[test]
    fn a_package_refusal_is_a_refusal() {
        let refused = osprey_chain::Error::rpc(
            "submitpackage",
            -25,
            "package-not-child-with-parents".into(),
        );
        let e = Error::from(refused);
        assert!(
            matches!(&e, Error::Rejected(m) if m == "package-not-child-with-parents"),
            "{e:?}"
        );
    }

    #[test]
    fn other_node_errors_are_failures_with_method_code_and_message() {
        let cases = [
            ("estimatesmartfee", -32603, "Fee estimation disabled"),
            (
                "getrawtransaction",
                -5,
                "No such mempool or blockchain transaction",
            ),
            ("getmempoolinfo", -1, "unexpected"),
        ];
        for (method, code, message) in cases {
            let e = Error::from(osprey_chain::Error::rpc(method, code, message.into()));
            let Error::NodeFailed {
                method: m,
                code: c,
                message: text,
            } = &e
            else {
                panic!("{method}: {e:?}");
            };
            assert_eq!((m.as_str(), *c, text.as_str()), (method, code, message));
        }
    }
}
