//! The questions the protocol layer asks about the chain and the mempool.
//!
//! `Backend` exists for two reasons: a second implementation, the in-memory
//! fake (`osprey_electrum::fake`, feature `fake`), lets dispatch, parameter
//! parsing and result shaping be tested in `osprey-electrum` and
//! `osprey-server` with no database and no node; and those crates, asking
//! only through it, do not link RocksDB. It has exactly
//! `osprey_query::Query`'s methods and this crate's types;
//! `osprey_query` implements it for `Query` by plain delegation. This
//! module knows nothing of JSON.

use crate::{
    Balance, Error, HistoryEntry, Indexing, OutpointAnswer, RecentTx, SpChunk, SpCursor, SpMatch,
    TxMerkle, Utxo,
};
use bitcoin::{BlockHash, OutPoint, TxMerkleNode, Txid};
use osprey_chain::{MempoolAcceptance, MempoolFees};
use osprey_core::{Height, ScriptHash, StatusHash};
use osprey_sp::ScanKeys;
use std::sync::Arc;

/// Where the CPU-heavy part of a silent-payments scan runs (the point
/// multiplications, about 63 µs a record). The server runs it on threads
/// at the lowest CPU priority; the rest of a scan (the index's and the
/// mempool's locks, reads, the confirming lookups) stays on the caller's
/// thread. A thread at that priority that is preempted holding a lock does
/// not run again until a core is idle: the commit of a new block would
/// wait behind it, and every reader behind the commit.
pub trait Compute: Sync {
    /// Runs `job`, returning once it has run, or when it gives up on it
    /// (the threads are gone, or the server is stopping): the caller takes
    /// a job's result as missing then.
    fn run(&self, job: Box<dyn FnOnce() + Send>);
}

/// `job`'s result, run in `compute`.
///
/// # Errors
/// `Unavailable` when `compute` gave up on the job (the server is stopping).
pub fn computed<T: Send + 'static>(
    compute: &dyn Compute,
    job: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Error> {
    let (done, result) = std::sync::mpsc::sync_channel(1);
    compute.run(Box::new(move || {
        let _ = done.send(job());
    }));
    result
        .try_recv()
        .map_err(|_| Error::Unavailable("the scan job did not run: the server is stopping".into()))
}

/// [`Compute`] on the caller's own thread.
pub struct InPlace;

impl Compute for InPlace {
    fn run(&self, job: Box<dyn FnOnce() + Send>) {
        job();
    }
}

/// Everything the Electrum methods need to know: `osprey_query::Query`'s
/// methods, as a trait so that the fake (`osprey_electrum::fake::FakeBackend`)
/// can stand in for `Query` in tests. Calls are synchronous and may block
/// (database reads, node RPC): the server runs them on a blocking thread,
/// never on an async worker.
pub trait Backend: Send + Sync + 'static {
    fn tip(&self) -> (Height, BlockHash);
    /// `Some` while the first sync runs and wallets are not served yet
    /// (see [`Indexing`]); `None` once they are.
    fn indexing(&self) -> Option<Indexing>;
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
    ) -> Result<(Vec<TxMerkleNode>, TxMerkleNode), Error>;
    fn history(&self, scripthash: &ScriptHash) -> Result<Vec<HistoryEntry>, Error>;
    fn mempool_history(&self, scripthash: &ScriptHash) -> Result<Vec<HistoryEntry>, Error>;
    fn status(&self, scripthash: &ScriptHash) -> Result<Option<StatusHash>, Error>;
    /// The status if it is at hand without any work (a cache hit):
    /// `Some(None)` for an unused script, `None` when it must be computed.
    fn cached_status(&self, _scripthash: &ScriptHash) -> Option<Option<StatusHash>> {
        None
    }
    fn balance(&self, scripthash: &ScriptHash) -> Result<Balance, Error>;
    fn unspent(&self, scripthash: &ScriptHash) -> Result<Vec<Utxo>, Error>;
    /// The status of an outpoint; `script_hint` is the script hash its
    /// output is believed to pay (a hint only: a wrong one changes nothing).
    fn outpoint_status(
        &self,
        outpoint: &OutPoint,
        script_hint: Option<&ScriptHash>,
    ) -> Result<OutpointAnswer, Error>;
    fn transaction(&self, txid: &Txid) -> Result<Vec<u8>, Error>;
    /// Whether confirmed transactions are read from local files rather
    /// than asked of the node: the server sizes the threads batches are
    /// spread over by it (`osprey-server`'s `fair`).
    fn transactions_are_local(&self) -> bool {
        false
    }
    fn transaction_verbose(&self, txid: &Txid) -> Result<serde_json::Value, Error>;
    /// The proof of `txid` in its block, which the client says is at
    /// `height`.
    fn merkle(&self, txid: &Txid, height: Height) -> Result<TxMerkle, Error>;
    fn id_from_pos(&self, height: Height, pos: u32) -> Result<(Txid, Vec<TxMerkleNode>), Error>;
    fn broadcast(&self, raw_hex: &str) -> Result<Txid, Error>;
    /// Returns the node's `submitpackage` answer.
    fn broadcast_package(&self, raw_hexes: &[String]) -> Result<serde_json::Value, Error>;
    /// The node's verdict on each transaction, none of them relayed.
    fn test_mempool_accept(&self, raw_hexes: &[String]) -> Result<Vec<MempoolAcceptance>, Error>;
    /// Returns the fee rate in BTC/kvB, or `None` when the node has no estimate.
    fn estimate_fee(&self, blocks: u16, mode: Option<&str>) -> Result<Option<f64>, Error>;
    /// Returns the minimum relay fee rate in BTC/kvB.
    fn relay_fee(&self) -> Result<f64, Error>;
    /// Returns `(sat/vB, vsize)` buckets, highest fee rate first.
    fn fee_histogram(&self) -> Vec<(f64, u64)>;
    /// The last `count` transactions to enter the mempool that are still
    /// in it, newest first.
    fn mempool_recent(&self, count: usize) -> Vec<RecentTx>;
    /// The node's mempool fee floors (the fields of `mempool.get_info`).
    fn mempool_fees(&self) -> Result<MempoolFees, Error>;

    /// Whether the index keeps silent-payment records (the setting
    /// `silent_payments`); when not, the `sp_` methods below fail.
    fn sp_enabled(&self) -> bool;
    /// The height a silent-payments scan from Unix time `unix` starts at:
    /// the last one whose running maximum of block times is at most
    /// `unix − 7200` ([`crate::height_at_time`]).
    fn sp_height_at(&self, unix: u64) -> Height;
    /// Scans the confirmed records from `from` up to the end of block `to`
    /// (at most the tip), stopping after about `records_max` records, for
    /// transactions whose `k = 0` output pays `keys`. A chunk costs about
    /// 63 µs of CPU per record, spent in `compute`; the rest runs on the
    /// caller's thread (a blocking one, in the server).
    ///
    /// # Errors
    /// `NotSupported` when silent payments are off; `Internal` if the
    /// records cannot be read.
    fn sp_scan(
        &self,
        keys: &Arc<ScanKeys>,
        from: SpCursor,
        to: Height,
        records_max: usize,
        compute: &dyn Compute,
    ) -> Result<SpChunk, Error>;
    /// Scans the mempool's transactions (all of them, or only those named
    /// that are still in it) for payments to `keys`, the point
    /// multiplications in `compute`; each match has height 0.
    ///
    /// # Errors
    /// `NotSupported` when silent payments are off.
    fn sp_scan_mempool(
        &self,
        keys: &Arc<ScanKeys>,
        only: Option<&[Txid]>,
        compute: &dyn Compute,
    ) -> Result<Vec<SpMatch>, Error>;
}
