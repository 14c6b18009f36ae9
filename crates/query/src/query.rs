//! Answers about scripts, transactions, blocks and fees, from the index plus
//! the mempool overlay.

use crate::mempool::{Mempool, MempoolEntry};
use crate::merkle::MerkleTree;
use crate::status_cache::StatusCache;
use bitcoin::consensus::{deserialize, serialize};
use bitcoin::hashes::Hash;
use bitcoin::{BlockHash, OutPoint, Transaction, TxMerkleNode, Txid};
use osprey_answers::{
    Balance, Change, Error, HistoryEntry, Indexing, Merging, RecentTx, TxMerkle, Utxo,
};
use osprey_chain::{ChainSource, MempoolAcceptance, MempoolFees, TxLocation};
use osprey_core::{Height, ScriptHash, StatusHash, TxNum};
use osprey_store::codec::HistoryRow;
use osprey_store::Store;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use tokio::sync::broadcast;

#[derive(Clone, Debug)]
pub struct QueryConfig {
    /// History rows (one per output received, one per input spent) a
    /// script may have before queries about it fail with "history too
    /// large" instead of using unbounded memory and time.
    pub history_entries_max: usize,
    /// Bytes the cache of status hashes may use ([`StatusCache`]).
    pub status_cache_bytes: usize,
}

impl Default for QueryConfig {
    fn default() -> Self {
        QueryConfig {
            history_entries_max: 500_000,
            // ~170k script hashes: every address of dozens of big wallets.
            status_cache_bytes: 16 << 20,
        }
    }
}

/// A database error, as an answer's error: internal, its detail for the
/// log only (it may name the index's files). A function, not a `From`: the
/// error type is `osprey-answers`', which knows no store.
pub(crate) fn store_failed(e: osprey_store::Error) -> Error {
    Error::Internal(e.to_string())
}

/// Queries over the index and the mempool. Thread-safe; share as `Arc`.
pub struct Query {
    store: Arc<Store>,
    source: Arc<dyn ChainSource>,
    config: QueryConfig,
    pub(crate) mempool: RwLock<Mempool>,
    changes: broadcast::Sender<Arc<Change>>,
    /// The block-hash tree of the last `cp_height` asked, under the hash of
    /// the checkpoint block: wallets use one fixed checkpoint, so proofs
    /// against it cost a lookup.
    header_tree: Mutex<Option<(BlockHash, Arc<MerkleTree>)>>,
    /// Statuses of recently asked script hashes, forgotten by every
    /// [`Change`] that touches them.
    statuses: StatusCache,
    /// Set while the first sync runs and wallets wait for it
    /// ([`Query::hold_wallets`]): only then is [`Query::indexing`] `Some`.
    wallets_held: AtomicBool,
    /// The node's height as the last sync step saw it, for
    /// [`Query::indexing`].
    node_height: AtomicU32,
    /// The tip last announced to header subscribers during the first sync
    /// ([`Query::announce_tip`]).
    announced: Mutex<Option<BlockHash>>,
}

/// One moment of the chain and the mempool, for answers about a script
/// ([`Query::script_view`]).
struct ScriptView {
    /// Transactions of the chain the answer sees: those numbered below.
    visible: u64,
    /// The mempool entries touching the script that those do not confirm.
    mempool: Vec<Arc<MempoolEntry>>,
}

impl Query {
    pub fn new(store: Arc<Store>, source: Arc<dyn ChainSource>, config: QueryConfig) -> Query {
        let (changes, _) = broadcast::channel(1024);
        Query {
            store,
            source,
            mempool: RwLock::new(Mempool::default()),
            changes,
            header_tree: Mutex::new(None),
            statuses: StatusCache::new(config.status_cache_bytes),
            config,
            wallets_held: AtomicBool::new(false),
            node_height: AtomicU32::new(0),
            announced: Mutex::new(None),
        }
    }

    /// Holds wallets off until [`Query::release_wallets`]: from now on
    /// [`Query::indexing`] says how far the first sync is, and the
    /// protocol layer answers only what is right at any height. A server
    /// that opens its ports before its first sync calls this first.
    pub fn hold_wallets(&self) {
        self.wallets_held.store(true, Ordering::SeqCst);
    }

    /// Ends [`Query::hold_wallets`]: the index is at the node's tip and the
    /// mempool followed, so every method is answered from here on.
    pub fn release_wallets(&self) {
        self.wallets_held.store(false, Ordering::SeqCst);
    }

    /// Records the node's best height, as a sync step saw it.
    pub fn set_node_height(&self, height: Height) {
        self.node_height.store(height.0, Ordering::Relaxed);
    }

    /// While wallets are held off: the index's tip and the node's.
    pub fn indexing(&self) -> Option<Indexing> {
        if !self.wallets_held.load(Ordering::SeqCst) {
            return None;
        }
        let height = self.tip().0;
        let node_height = Height(self.node_height.load(Ordering::Relaxed).max(height.0));
        let merging = self.store.merging().map(|(partition, partitions)| Merging {
            partition,
            partitions,
        });
        Some(Indexing {
            height,
            node_height,
            merging,
        })
    }

    /// During the first sync, tells header subscribers of the index's tip
    /// if it moved since the last call: wallets are not served yet, but a
    /// node dashboard's progress (the indexed height over the node's) and
    /// a health check follow `blockchain.headers.subscribe`. Nothing else
    /// changed for anyone, so the change names no script.
    pub fn announce_tip(&self) {
        let (height, hash) = self.tip();
        let mut announced = self.announced.lock().expect("announced tip lock poisoned");
        if *announced == Some(hash) {
            return;
        }
        *announced = Some(hash);
        let new_tip = self.header(height).map(|header| (height, header));
        self.publish(Change {
            new_tip,
            ..Change::default()
        });
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn source(&self) -> &Arc<dyn ChainSource> {
        &self.source
    }

    pub(crate) fn mempool(&self) -> RwLockReadGuard<'_, Mempool> {
        self.mempool.read().expect("mempool lock poisoned")
    }

    /// Subscribes to changes (new blocks, reorgs, mempool updates).
    pub fn changes(&self) -> broadcast::Receiver<Arc<Change>> {
        self.changes.subscribe()
    }

    /// Publishes a change, after the state changed: cached statuses of the
    /// touched script hashes are forgotten first.
    pub(crate) fn publish(&self, change: Change) {
        self.statuses
            .invalidate(&change.scripthashes, change.all_scripthashes);
        // No receiver is fine: nobody is connected yet.
        let _ = self.changes.send(Arc::new(change));
    }

    /// The indexed tip (the genesis block before anything is indexed).
    pub fn tip(&self) -> (Height, BlockHash) {
        self.store
            .tip()
            .unwrap_or((Height(0), BlockHash::all_zeros()))
    }

    pub fn header(&self, height: Height) -> Option<[u8; 80]> {
        self.store.raw_headers(height, 1).pop()
    }

    pub fn headers(&self, start: Height, count: usize) -> Vec<[u8; 80]> {
        self.store.raw_headers(start, count)
    }

    /// The proof of header `height` against the block-hash tree up to
    /// `cp_height`: the branch and the root.
    ///
    /// # Errors
    /// When `height > cp_height` or `cp_height` is beyond the tip.
    pub fn header_proof(
        &self,
        height: Height,
        cp_height: Height,
    ) -> Result<(Vec<TxMerkleNode>, TxMerkleNode), Error> {
        let tip = self.tip().0;
        if cp_height > tip {
            return Err(Error::BlockNotFound(cp_height));
        }
        if height > cp_height {
            return Err(Error::BadRequest(format!(
                "height {height} is above cp_height {cp_height}"
            )));
        }
        // Keyed by the checkpoint's block hash, which commits to every
        // block below it: a reorg under the checkpoint changes the key.
        let checkpoint = self
            .store
            .block_hash(cp_height)
            .ok_or(Error::BlockNotFound(cp_height))?;
        let mut cache = self.header_tree.lock().expect("header tree lock poisoned");
        let tree = match cache.as_ref() {
            Some((cached, tree)) if *cached == checkpoint => Arc::clone(tree),
            _ => {
                // One read of the chain: its last hash keys the tree, even
                // if a reorg came after `checkpoint` was read.
                let leaves = self.store.block_hashes(Height(0), cp_height);
                let checkpoint = match leaves.last() {
                    Some(last) if leaves.len() == cp_height.as_usize() + 1 => *last,
                    _ => return Err(Error::BlockNotFound(cp_height)),
                };
                let leaves = leaves.iter().map(|h| h.to_byte_array()).collect();
                let tree = Arc::new(MerkleTree::new(leaves));
                *cache = Some((checkpoint, Arc::clone(&tree)));
                tree
            }
        };
        drop(cache);
        Ok((tree.branch(height.as_usize()), tree.root()))
    }

    /// What one answer about `scripthash` sees of the chain and the
    /// mempool: one consistent moment, so that no transaction is answered
    /// both confirmed and unconfirmed (Electrum drops a server that does
    /// that), nor neither.
    ///
    /// The mempool is read first, the chain's length right after:
    /// - a transaction the mempool still lists but the chain (up to that
    ///   length) confirms is answered once, as confirmed: the tracker drops
    ///   those from the mempool only after the commit;
    /// - a transaction the mempool no longer lists left it after the commit
    ///   that confirmed it (the tracker keeps a transaction while the node
    ///   is ahead of the index), so that commit is within the length read
    ///   after.
    fn script_view(&self, scripthash: &ScriptHash) -> Result<ScriptView, Error> {
        let entries = self.mempool().entries_for(scripthash);
        #[cfg(test)]
        crate::race::window();
        let visible = self.store.tx_count();
        let mut mempool = Vec::with_capacity(entries.len());
        for entry in entries {
            if !self.confirmed_within(&entry.txid, visible)? {
                mempool.push(entry);
            }
        }
        Ok(ScriptView { visible, mempool })
    }

    /// The confirmed history rows of `scripthash`, within the limit, as far
    /// as `visible` transactions reach: a commit writes its rows a moment
    /// before it extends the chain, and a rollback cuts the chain a moment
    /// after it deletes its rows, so a row beyond belongs to a block that
    /// is not (or no longer) part of the answer's view. Skipping it answers
    /// from that view instead of failing.
    pub(crate) fn rows(
        &self,
        scripthash: &ScriptHash,
        visible: u64,
    ) -> Result<Vec<HistoryRow>, Error> {
        let mut rows = self
            .store
            .history(scripthash, self.config.history_entries_max)
            .map_err(store_failed)?
            .ok_or(Error::HistoryTooLarge {
                limit: self.config.history_entries_max,
            })?;
        rows.retain(|row| row.tx_num.0 < visible);
        Ok(rows)
    }

    /// Whether `txid` is among the first `visible` transactions of the chain.
    pub(crate) fn confirmed_within(&self, txid: &Txid, visible: u64) -> Result<bool, Error> {
        Ok(self
            .store
            .find_tx_num(txid)
            .map_err(store_failed)?
            .is_some_and(|tx_num| tx_num.0 < visible))
    }

    /// The confirmed history then the mempool part, in protocol order. Its
    /// status is cached on the way (see [`Query::status`]): a client that
    /// asks for a history usually asks again, or subscribes, and sessions
    /// share a long history's text while its status stays cached
    /// (`osprey_electrum`'s dispatcher).
    ///
    /// # Errors
    /// History too large, or a store error.
    pub fn history(&self, scripthash: &ScriptHash) -> Result<Vec<HistoryEntry>, Error> {
        self.history_and_status(scripthash)
            .map(|(history, _)| history)
    }

    /// The history and its status, which is cached unless the state
    /// changed while it was read.
    fn history_and_status(
        &self,
        scripthash: &ScriptHash,
    ) -> Result<(Vec<HistoryEntry>, Option<StatusHash>), Error> {
        let epoch = self.statuses.epoch();
        let history = self.read_history(scripthash)?;
        let status = StatusHash::of_history(history.iter().map(|e| (&e.txid, e.height)));
        self.statuses.insert(epoch, *scripthash, status);
        Ok((history, status))
    }

    fn read_history(&self, scripthash: &ScriptHash) -> Result<Vec<HistoryEntry>, Error> {
        let view = self.script_view(scripthash)?;
        let rows = self.rows(scripthash, view.visible)?;
        let mut history = Vec::new();
        let mut last = None;
        for row in rows {
            // Rows come in tx_num order: a transaction's rows are adjacent.
            if last == Some(row.tx_num) {
                continue;
            }
            last = Some(row.tx_num);
            let Some((height, _)) = self.store.locate(row.tx_num) else {
                // A rollback cut the chain since the rows were read.
                continue;
            };
            history.push(HistoryEntry {
                txid: self.store.txid(row.tx_num).map_err(store_failed)?,
                height: i64::from(height.0),
                fee: None,
            });
        }
        history.extend(self.sorted_mempool_history(&view.mempool));
        Ok(history)
    }

    /// Mempool transactions touching `scripthash`: height 0 (all inputs
    /// confirmed) before -1, then by txid as displayed (protocol 1.6's
    /// canonical order).
    ///
    /// # Errors
    /// A store error.
    pub fn mempool_history(&self, scripthash: &ScriptHash) -> Result<Vec<HistoryEntry>, Error> {
        let view = self.script_view(scripthash)?;
        Ok(self.sorted_mempool_history(&view.mempool))
    }

    fn sorted_mempool_history(&self, unconfirmed: &[Arc<MempoolEntry>]) -> Vec<HistoryEntry> {
        let mempool = self.mempool();
        let mut entries: Vec<(i64, String, HistoryEntry)> = unconfirmed
            .iter()
            .map(|e| {
                let height = mempool.height(e);
                let entry = HistoryEntry {
                    txid: e.txid,
                    height,
                    fee: Some(e.fee),
                };
                (-height, e.txid.to_string(), entry)
            })
            .collect();
        drop(mempool);
        entries.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        entries.into_iter().map(|(_, _, e)| e).collect()
    }

    /// The Electrum status of `scripthash`, `None` for an unused script.
    ///
    /// # Errors
    /// History too large, or a store error.
    pub fn status(&self, scripthash: &ScriptHash) -> Result<Option<StatusHash>, Error> {
        if let Some(status) = self.statuses.get(scripthash) {
            return Ok(status);
        }
        self.history_and_status(scripthash)
            .map(|(_, status)| status)
    }

    /// The status of `scripthash` if it is cached: `Some(None)` for an
    /// unused script, `None` when it must be computed.
    pub fn cached_status(&self, scripthash: &ScriptHash) -> Option<Option<StatusHash>> {
        self.statuses.get(scripthash)
    }

    /// Forgets every cached status: the state changed in a way no
    /// [`Change`] describes (an update that failed half-way).
    pub(crate) fn forget_statuses(&self) {
        self.statuses.invalidate(&[], true);
    }

    /// Where the node keeps a confirmed transaction's bytes.
    pub(crate) fn location(&self, tx_num: TxNum) -> Result<TxLocation, Error> {
        self.located(tx_num)
            .map_err(store_failed)?
            .ok_or_else(|| Error::Internal(format!("tx_num {tx_num} beyond the tip")))
    }

    /// Where the node keeps transaction `tx_num`'s bytes; `None` when its
    /// block is not in the chain: one being committed (its rows come a
    /// moment before the chain grows) or undone right now.
    pub(crate) fn located(&self, tx_num: TxNum) -> Result<Option<TxLocation>, osprey_store::Error> {
        let Some((height, position)) = self.store.locate(tx_num) else {
            return Ok(None);
        };
        let Some((_, offset, len)) = self.store.tx_span(tx_num)? else {
            return Ok(None);
        };
        let Some(block_hash) = self.store.block_hash(height) else {
            return Ok(None);
        };
        Ok(Some(TxLocation {
            block_hash,
            height,
            position,
            offset,
            len,
        }))
    }

    /// Where a confirmed transaction's bytes are; `None` when `txid` is not
    /// in the chain this answer sees, so that a request racing a commit or
    /// a reorg gets "not found", never an internal error.
    ///
    /// A reorg between finding `txid`'s number and locating that number
    /// can give the number to another transaction of the new branch: the
    /// txid is read again after the location, so a location is never
    /// answered for a transaction it does not hold.
    fn confirmed_location(&self, txid: &Txid) -> Result<Option<TxLocation>, Error> {
        let Some(tx_num) = self.store.find_tx_num(txid).map_err(store_failed)? else {
            return Ok(None);
        };
        #[cfg(test)]
        crate::race::window();
        let Some(location) = self.located(tx_num).map_err(store_failed)? else {
            return Ok(None);
        };
        match self.store.txid(tx_num) {
            Ok(now) if now == *txid => Ok(Some(location)),
            Ok(_) => Ok(None),
            // A rollback cut the txids file since the location was read.
            Err(_) if self.store.locate(tx_num).is_none() => Ok(None),
            Err(e) => Err(store_failed(e)),
        }
    }

    pub(crate) fn confirmed_transaction(
        &self,
        txid: &Txid,
        tx_num: TxNum,
    ) -> Result<Transaction, Error> {
        let raw = self
            .source
            .transaction(txid, Some(self.location(tx_num)?))?;
        deserialize(&raw).map_err(|e| {
            Error::Internal(format!(
                "transaction {txid} from the node does not parse: {e}"
            ))
        })
    }

    /// Confirmed and unconfirmed balance of `scripthash`.
    ///
    /// # Errors
    /// History too large, or a store or node error.
    pub fn balance(&self, scripthash: &ScriptHash) -> Result<Balance, Error> {
        let view = self.script_view(scripthash)?;
        let confirmed = self
            .confirmed_outputs(scripthash, view.visible)?
            .iter()
            .filter(|f| f.spent_by.is_none())
            .filter_map(|f| f.value)
            .sum();
        let mut unconfirmed = 0i64;
        for entry in &view.mempool {
            unconfirmed += entry
                .funding
                .iter()
                .filter(|f| f.0 == *scripthash)
                .map(|f| f.2 as i64)
                .sum::<i64>();
            unconfirmed -= entry
                .spending
                .iter()
                .filter(|s| s.0 == *scripthash)
                .map(|s| s.2 as i64)
                .sum::<i64>();
        }
        Ok(Balance {
            confirmed,
            unconfirmed,
        })
    }

    /// Unspent outputs of `scripthash`: confirmed ones in chain order (minus
    /// those the mempool spends), then mempool ones (height 0).
    ///
    /// # Errors
    /// History too large, or a store or node error.
    pub fn unspent(&self, scripthash: &ScriptHash) -> Result<Vec<Utxo>, Error> {
        let view = self.script_view(scripthash)?;
        let outputs = self.confirmed_outputs(scripthash, view.visible)?;
        let unconfirmed_entries = view.mempool;
        let mempool = self.mempool();
        let mut utxos = Vec::new();
        for f in outputs.iter().filter(|f| f.spent_by.is_none()) {
            if mempool
                .spender(&OutPoint {
                    txid: f.txid,
                    vout: f.vout,
                })
                .is_some()
            {
                continue;
            }
            let Some((height, _)) = self.store.locate(f.tx_num) else {
                // A rollback cut the chain since the rows were read.
                continue;
            };
            // `confirmed_outputs` checked that an unspent output has one.
            let Some(value) = f.value else {
                continue;
            };
            utxos.push(Utxo {
                txid: f.txid,
                vout: f.vout,
                height: height.0,
                value,
            });
        }
        let mut unconfirmed: BTreeMap<(String, u32), Utxo> = BTreeMap::new();
        for entry in &unconfirmed_entries {
            for &(sh, vout, value) in &entry.funding {
                if sh == *scripthash
                    && mempool
                        .spender(&OutPoint {
                            txid: entry.txid,
                            vout,
                        })
                        .is_none()
                {
                    unconfirmed.insert(
                        (entry.txid.to_string(), vout),
                        Utxo {
                            txid: entry.txid,
                            vout,
                            height: 0,
                            value,
                        },
                    );
                }
            }
        }
        utxos.extend(unconfirmed.into_values());
        Ok(utxos)
    }

    /// Raw bytes of a mempool or confirmed transaction.
    ///
    /// # Errors
    /// When the transaction is unknown, or the node cannot serve it.
    pub fn transaction(&self, txid: &Txid) -> Result<Vec<u8>, Error> {
        if let Some(entry) = self.mempool().get(txid) {
            return Ok(serialize(&entry.tx));
        }
        let location = self
            .confirmed_location(txid)?
            .ok_or(Error::TxNotFound(*txid))?;
        Ok(self.source.transaction(txid, Some(location))?)
    }

    /// The node's verbose JSON of a transaction.
    ///
    /// # Errors
    /// When the transaction is unknown or the source has no node.
    pub fn transaction_verbose(&self, txid: &Txid) -> Result<serde_json::Value, Error> {
        // The mempool first: a transaction leaves it only after the
        // commit that confirms it (see `script_view`).
        let in_mempool = self.mempool().get(txid).is_some();
        let location = match self.confirmed_location(txid)? {
            Some(location) => Some(location),
            None if in_mempool => None,
            None => return Err(Error::TxNotFound(*txid)),
        };
        Ok(self.source.transaction_verbose(txid, location)?)
    }

    /// The merkle proof of a confirmed transaction.
    ///
    /// # Errors
    /// When the transaction is not confirmed at `height`.
    pub fn merkle(&self, txid: &Txid, height: Height) -> Result<TxMerkle, Error> {
        let location = self
            .confirmed_location(txid)?
            .ok_or(Error::TxNotFound(*txid))?;
        if height != location.height {
            return Err(Error::BadRequest(format!(
                "transaction {txid} is not in block {height}"
            )));
        }
        let (at_position, branch) = self.block_branch(location.height, location.position)?;
        if at_position != *txid {
            // A reorg since the location was read: the block now there
            // holds another transaction at that position.
            return Err(Error::TxNotFound(*txid));
        }
        Ok(TxMerkle {
            block_height: location.height,
            pos: location.position,
            branch,
        })
    }

    /// The txid at `pos` in block `height`, with its merkle branch.
    ///
    /// # Errors
    /// When there is no such block or position.
    pub fn id_from_pos(
        &self,
        height: Height,
        pos: u32,
    ) -> Result<(Txid, Vec<TxMerkleNode>), Error> {
        self.block_branch(height, pos)
    }

    fn block_branch(&self, height: Height, pos: u32) -> Result<(Txid, Vec<TxMerkleNode>), Error> {
        let range = self
            .store
            .block_tx_nums(height)
            .ok_or(Error::BlockNotFound(height))?;
        if u64::from(pos) >= range.end - range.start {
            return Err(Error::BadRequest(format!(
                "block {height} has no transaction at position {pos}"
            )));
        }
        let txids = self.store.txids(range).map_err(store_failed)?;
        let txid = txids[pos as usize];
        let tree = MerkleTree::new(txids.iter().map(|t| t.to_byte_array()).collect());
        Ok((txid, tree.branch(pos as usize)))
    }

    /// Relays a transaction through the node.
    ///
    /// # Errors
    /// The node's rejection.
    pub fn broadcast(&self, raw_hex: &str) -> Result<Txid, Error> {
        Ok(self.source.broadcast(raw_hex)?)
    }

    /// Relays a package through the node.
    ///
    /// # Errors
    /// The node's rejection, or no package support.
    pub fn broadcast_package(&self, raw_hexes: &[String]) -> Result<serde_json::Value, Error> {
        self.source.broadcast_package(raw_hexes).map_err(|e| {
            if e.message().contains("does not support") {
                Error::NotSupported(e.message().to_string())
            } else {
                e.into()
            }
        })
    }

    /// The node's verdict on each transaction, none of them relayed.
    ///
    /// # Errors
    /// The node's error, or no node to ask.
    pub fn test_mempool_accept(
        &self,
        raw_hexes: &[String],
    ) -> Result<Vec<MempoolAcceptance>, Error> {
        Ok(self.source.test_mempool_accept(raw_hexes)?)
    }

    /// # Errors
    /// When the node cannot be reached.
    pub fn estimate_fee(&self, blocks: u16, mode: Option<&str>) -> Result<Option<f64>, Error> {
        Ok(self.source.estimate_fee(blocks, mode)?)
    }

    /// # Errors
    /// When the node cannot be reached.
    pub fn relay_fee(&self) -> Result<f64, Error> {
        Ok(self.source.relay_fee()?)
    }

    pub fn fee_histogram(&self) -> Vec<(f64, u64)> {
        self.mempool().histogram().to_vec()
    }

    /// The last `count` transactions to enter the mempool that are still
    /// in it, newest first.
    pub fn mempool_recent(&self, count: usize) -> Vec<RecentTx> {
        self.mempool()
            .recent(count)
            .map(|e| RecentTx {
                txid: e.txid,
                fee: e.fee,
                vsize: e.vsize,
            })
            .collect()
    }

    /// # Errors
    /// When the node cannot be reached.
    pub fn mempool_fees(&self) -> Result<MempoolFees, Error> {
        Ok(self.source.mempool_fees()?)
    }
}
