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
    /// The node refused (a broadcast, a package): its own message.
    #[error("{0}")]
    Node(String),
    /// The node cannot be reached right now.
    #[error("node unavailable: {0}")]
    Unavailable(String),
    /// The node lacks a feature the request needs (package relay).
    #[error("not supported: {0}")]
    NotSupported(String),
    /// A valid request about something that does not exist (a position
    /// past a block's end, a transaction not in the block named).
    #[error("{0}")]
    BadRequest(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<osprey_store::Error> for Error {
    fn from(e: osprey_store::Error) -> Self {
        Error::Internal(e.to_string())
    }
}

impl From<osprey_chain::Error> for Error {
    fn from(e: osprey_chain::Error) -> Self {
        match e.kind() {
            osprey_chain::ErrorKind::Transient => Error::Unavailable(e.to_string()),
            // The node refused: its own words, for the wallet.
            osprey_chain::ErrorKind::Rpc => Error::Node(e.message().to_string()),
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
        assert!(matches!(Error::from(refused), Error::Node(_)));
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
}
