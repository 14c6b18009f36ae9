//! What the indexer and the query layer need from a chain, whoever serves
//! it: a node over JSON-RPC ([`crate::Daemon`]) or, with no node at all,
//! `blk*.dat` files ([`crate::BlkFiles`], used by `osprey demo`).

use crate::Error;
use bitcoin::{Block, BlockHash, Transaction, TxOut, Txid, Wtxid};
use osprey_core::Height;

/// A block with the outputs its inputs spend (its "undo data"): one
/// [`TxOut`] per input of every non-coinbase transaction, in block order.
pub struct BlockWithPrevouts {
    pub height: Height,
    pub block: Block,
    pub prevouts: Vec<TxOut>,
    /// Serialized size of the block, for throughput reports.
    pub size: usize,
}

/// Where a confirmed transaction sits, when the index knows it; sources
/// without a transaction index use it to find the bytes.
#[derive(Clone, Copy, Debug)]
pub struct TxLocation {
    pub block_hash: BlockHash,
    pub height: Height,
    pub position: u32,
    /// The transaction's offset and length within the serialized block.
    pub offset: u32,
    pub len: u32,
}

/// A mempool transaction as the node reports it.
pub struct MempoolTx {
    pub txid: Txid,
    pub tx: Transaction,
}

/// The blocks of a chain, as the indexer follows them: the best block, the
/// hashes along the best chain, and blocks by hash with the outputs they
/// spend. Everything else a node does is [`ChainSource`]'s; keeping the
/// feed this small lets tests drive the indexer with an in-memory chain.
pub trait BlockFeed: Send + Sync {
    /// Whether the node is still in its initial block download (a source
    /// without a node never is). The index follows the node meanwhile;
    /// wallets are served once both are done.
    ///
    /// # Errors
    /// When the node cannot be reached.
    fn initial_block_download(&self) -> Result<bool, Error> {
        Ok(false)
    }

    /// Waits up to `timeout` for the source's best block to change from
    /// `tip`; returns whether it did. A source that cannot be waited on
    /// just sleeps, and the caller polls.
    ///
    /// # Errors
    /// When the node cannot be reached.
    fn wait_for_new_block(
        &self,
        tip: BlockHash,
        timeout: std::time::Duration,
    ) -> Result<bool, Error> {
        std::thread::sleep(timeout);
        Ok(self.best_block()?.1 != tip)
    }

    /// The best block the source has.
    ///
    /// # Errors
    /// When the source cannot be reached.
    fn best_block(&self) -> Result<(Height, BlockHash), Error>;

    /// Hashes of blocks `start..start+count` on the best chain (fewer if the
    /// chain is shorter).
    ///
    /// # Errors
    /// When the source cannot be reached.
    fn block_hashes(&self, start: Height, count: u32) -> Result<Vec<BlockHash>, Error>;

    /// The blocks with these hashes (heights given alongside), each with
    /// the outputs its inputs spend.
    ///
    /// # Errors
    /// When a block or a spent output cannot be had.
    fn blocks(&self, blocks: &[(Height, BlockHash)]) -> Result<Vec<BlockWithPrevouts>, Error>;
}

/// A chain to index and a node to relay to: the [`BlockFeed`], plus
/// transaction lookups, the mempool, relay and fee estimates.
pub trait ChainSource: BlockFeed {
    /// Whether confirmed transactions are read from files on this machine
    /// (the node's blk files), not asked of the node over the network.
    fn transactions_are_local(&self) -> bool {
        false
    }

    /// Raw bytes of a transaction; `location` is set for confirmed ones.
    ///
    /// # Errors
    /// When the transaction is unknown to the source.
    fn transaction(&self, txid: &Txid, location: Option<TxLocation>) -> Result<Vec<u8>, Error>;

    /// The node's verbose JSON for a transaction (`getrawtransaction … true`).
    ///
    /// # Errors
    /// When the source has no node or the node does not know the transaction.
    fn transaction_verbose(
        &self,
        txid: &Txid,
        location: Option<TxLocation>,
    ) -> Result<serde_json::Value, Error>;

    /// Txids in the node's mempool.
    ///
    /// # Errors
    /// When the node cannot be reached.
    fn mempool_txids(&self) -> Result<Vec<Txid>, Error>;

    /// The mempool transactions with these txids; ones that left the mempool
    /// meanwhile are skipped.
    ///
    /// # Errors
    /// When the node cannot be reached.
    fn mempool_transactions(&self, txids: &[Txid]) -> Result<Vec<MempoolTx>, Error>;

    /// Relays a transaction and returns its txid.
    ///
    /// # Errors
    /// The node's rejection, with its message.
    fn broadcast(&self, raw_hex: &str) -> Result<Txid, Error>;

    /// Relays a package (`submitpackage`); returns the node's answer.
    ///
    /// # Errors
    /// The node's rejection, or "not supported" for nodes without it.
    fn broadcast_package(&self, raw_hexes: &[String]) -> Result<serde_json::Value, Error>;

    /// Asks the node whether its mempool would take each transaction
    /// (`testmempoolaccept`), without relaying any: one verdict per
    /// transaction, in order.
    ///
    /// # Errors
    /// The node's error (undecodable transactions, too many of them), or
    /// "not supported" for sources without a node.
    fn test_mempool_accept(&self, raw_hexes: &[String]) -> Result<Vec<MempoolAcceptance>, Error>;

    /// Fee rate in BTC/kvB to confirm within `blocks`, or `None` when the
    /// node has no estimate.
    ///
    /// # Errors
    /// When the node cannot be reached.
    fn estimate_fee(&self, blocks: u16, mode: Option<&str>) -> Result<Option<f64>, Error>;

    /// The node's minimum relay fee rate, in BTC/kvB.
    ///
    /// # Errors
    /// When the node cannot be reached.
    fn relay_fee(&self) -> Result<f64, Error>;

    /// The node's mempool fee floors (`getmempoolinfo`), in BTC/kvB.
    ///
    /// # Errors
    /// When the node cannot be reached.
    fn mempool_fees(&self) -> Result<MempoolFees, Error>;
}

/// The node's verdict on one transaction of `testmempoolaccept`, in terms
/// that hold for Bitcoin Core and btcd alike.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MempoolAcceptance {
    pub txid: Txid,
    pub wtxid: Wtxid,
    /// Whether the mempool would take it; `None` when the node did not
    /// judge it (Core stops at the first failing transaction of a package).
    pub allowed: Option<bool>,
    /// Why not, in the node's words: the package's error, else the
    /// transaction's detailed reason, else its short one.
    pub reason: Option<String>,
}

/// The fee floors of the node's mempool, in BTC/kvB: what
/// `mempool.get_info` answers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MempoolFees {
    /// The dynamic floor: the larger of `minrelaytxfee` and the fee rate a
    /// full mempool evicts below.
    pub mempoolminfee: f64,
    /// The configured minimum relay fee rate.
    pub minrelaytxfee: f64,
    /// The configured step a replacement or an eviction raises fees by.
    pub incrementalrelayfee: f64,
}
