//! The questions the protocol layer asks about the chain and the mempool.
//!
//! `Backend` mirrors `osprey_query::Query` method for method (sync, `&self`,
//! thread-safe), with its own plain data types, so that dispatch, parameter
//! parsing and result shaping can be tested with an in-memory fake and no
//! database. `osprey_query::Query` implements it (see `query_backend`, behind
//! the `query` feature). This module knows nothing of JSON.

use bitcoin::{BlockHash, TxMerkleNode, Txid};
use osprey_core::{Height, ScriptHash, StatusHash};

/// Why the backend could not answer. Mirrors `osprey_query::Error`; turned
/// into a JSON-RPC error object by `RpcError::to_json` only.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BackendError {
    /// The script has more history entries than the server will return.
    #[error("history too large (more than {limit} entries)")]
    HistoryTooLarge { limit: usize },
    #[error("transaction {0} not found")]
    TxNotFound(Txid),
    #[error("block at height {0} not found")]
    BlockNotFound(Height),
    /// The node rejected the request (for example a broadcast); its message.
    #[error("{0}")]
    Node(String),
    /// The node could not be reached.
    #[error("node unavailable: {0}")]
    Unavailable(String),
    #[error("not supported: {0}")]
    NotSupported(String),
    /// A valid request about something that does not exist.
    #[error("{0}")]
    BadRequest(String),
    #[error("internal error: {0}")]
    Internal(String),
}

/// One transaction of a script's history, in protocol order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    pub txid: Txid,
    /// The block height when confirmed; 0 in the mempool with confirmed
    /// inputs only; -1 in the mempool with an unconfirmed input.
    pub height: i64,
    /// The fee in satoshis, for mempool transactions.
    pub fee: Option<u64>,
}

/// A script's balance in satoshis; `unconfirmed` is the mempool delta.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Balance {
    pub confirmed: u64,
    pub unconfirmed: i64,
}

/// An unspent output of a script; `height` is 0 for a mempool output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Utxo {
    pub txid: Txid,
    pub vout: u32,
    pub height: u32,
    pub value: u64,
}

/// Where a confirmed transaction sits and its merkle branch (deepest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxMerkle {
    pub block_height: Height,
    pub block_hash: BlockHash,
    pub pos: u32,
    pub branch: Vec<TxMerkleNode>,
}

/// The node's mempool fee rates, in BTC/kvB (the fields of `mempool.get_info`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MempoolInfo {
    pub mempoolminfee: f64,
    pub minrelaytxfee: f64,
    pub incrementalrelayfee: f64,
}

/// Everything the Electrum methods need to know. Calls are synchronous and
/// may block (database reads, node RPC): the server runs them on a blocking
/// thread, never on an async worker.
pub trait Backend: Send + Sync + 'static {
    fn tip(&self) -> (Height, BlockHash);
    fn header(&self, height: Height) -> Option<[u8; 80]>;
    /// Returns up to `count` consecutive headers from `start`, stopping at the tip.
    fn headers(&self, start: Height, count: usize) -> Vec<[u8; 80]>;
    /// Returns the branch and root proving header `height` under the
    /// checkpoint `cp_height`.
    ///
    /// # Errors
    /// If `height > cp_height` or `cp_height` is above the tip.
    fn header_proof(
        &self,
        height: Height,
        cp_height: Height,
    ) -> Result<(Vec<TxMerkleNode>, TxMerkleNode), BackendError>;
    fn history(&self, scripthash: &ScriptHash) -> Result<Vec<HistoryEntry>, BackendError>;
    fn mempool_history(&self, scripthash: &ScriptHash) -> Result<Vec<HistoryEntry>, BackendError>;
    fn status(&self, scripthash: &ScriptHash) -> Result<Option<StatusHash>, BackendError>;
    /// The status if it is at hand without any work (a cache hit):
    /// `Some(None)` for an unused script, `None` when it must be computed.
    fn cached_status(&self, _scripthash: &ScriptHash) -> Option<Option<StatusHash>> {
        None
    }
    fn balance(&self, scripthash: &ScriptHash) -> Result<Balance, BackendError>;
    fn unspent(&self, scripthash: &ScriptHash) -> Result<Vec<Utxo>, BackendError>;
    fn transaction(&self, txid: &Txid) -> Result<Vec<u8>, BackendError>;
    fn transaction_verbose(&self, txid: &Txid) -> Result<serde_json::Value, BackendError>;
    fn merkle(&self, txid: &Txid, height: Option<Height>) -> Result<TxMerkle, BackendError>;
    fn id_from_pos(
        &self,
        height: Height,
        pos: u32,
    ) -> Result<(Txid, Vec<TxMerkleNode>), BackendError>;
    fn broadcast(&self, raw_hex: &str) -> Result<Txid, BackendError>;
    /// Returns the node's `submitpackage` answer.
    fn broadcast_package(&self, raw_hexes: &[String]) -> Result<serde_json::Value, BackendError>;
    /// Returns the fee rate in BTC/kvB, or `None` when the node has no estimate.
    fn estimate_fee(&self, blocks: u16, mode: Option<&str>) -> Result<Option<f64>, BackendError>;
    /// Returns the minimum relay fee rate in BTC/kvB.
    fn relay_fee(&self) -> Result<f64, BackendError>;
    /// Returns `(sat/vB, vsize)` buckets, highest fee rate first.
    fn fee_histogram(&self) -> Vec<(f64, u64)>;
    fn mempool_info(&self) -> Result<MempoolInfo, BackendError>;
}
