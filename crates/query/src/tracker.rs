//! Keeps the index and the mempool at the node's state and publishes what
//! changed: one call to [`Tracker::update`] per poll.

use crate::mempool::{MempoolEntry, SpMempool};
use crate::query::Query;
use bitcoin::{Transaction, TxOut, Txid};
use osprey_answers::Change;
use osprey_chain::MempoolTx;
use osprey_core::{Height, ScriptHash};
use osprey_indexer::{ChunkStats, Indexer};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The most confirmed transactions one update lists by txid (32 MiB of
/// them); past this, the update says that everything may have changed.
const CONFIRMED_TXIDS_MAX: u64 = 1 << 20;

pub struct Tracker {
    indexer: Indexer,
    query: Arc<Query>,
    /// The node's best block height at the last update.
    node_height: Option<Height>,
}

impl Tracker {
    pub fn new(indexer: Indexer, query: Arc<Query>) -> Tracker {
        Tracker {
            indexer,
            query,
            node_height: None,
        }
    }

    /// The node's best block height as the last update saw it (`None`
    /// before one succeeded).
    pub fn node_height(&self) -> Option<Height> {
        self.node_height
    }

    /// Indexes new blocks (undoing stale ones), then refreshes the mempool,
    /// then publishes one [`Change`] if anything changed.
    ///
    /// # Errors
    /// What the indexer returns; the mempool is then left as it was.
    pub fn update(
        &mut self,
        on_chunk: &mut dyn FnMut(&ChunkStats),
    ) -> Result<(), osprey_indexer::Error> {
        self.update_with(on_chunk, true)
    }

    /// A read-only replica's short poll: takes up what its writer committed
    /// and publishes it, as [`Tracker::update`] does, without asking the
    /// node for its mempool (which [`Tracker::update`] does every
    /// `poll_interval_ms`), nor for its height unless the tip moved
    /// ([`Indexer::follow_writer`]).
    ///
    /// # Errors
    /// As [`Tracker::update`].
    pub fn follow_writer(&mut self) -> Result<(), osprey_indexer::Error> {
        self.update_with(&mut |_| {}, false)
    }

    fn update_with(
        &mut self,
        on_chunk: &mut dyn FnMut(&ChunkStats),
        poll_mempool: bool,
    ) -> Result<(), osprey_indexer::Error> {
        let first_new_tx = self.query.store().tx_count();
        let query = Arc::clone(&self.query);
        let mut on_chunk = |stats: &ChunkStats| {
            query.set_node_height(stats.source_height);
            if query.indexing().is_some() {
                query.announce_tip();
            }
            on_chunk(stats);
        };
        let synced = if poll_mempool {
            self.indexer.sync(&mut on_chunk)
        } else {
            self.indexer.follow_writer()
        };
        let report = match synced {
            Ok(report) => report,
            Err(e) => {
                // Some blocks may be committed (or undone) already, and no
                // change names their scripts.
                self.query.forget_statuses();
                return Err(e);
            }
        };
        self.node_height = Some(report.source_height);
        self.query.set_node_height(report.source_height);
        if self.query.indexing().is_some() {
            self.query.announce_tip();
        }
        let mut touched = report.touched;
        let mut txids = Vec::new();
        let mut all_changed = report.all_touched;
        if report.connected > 0 || report.disconnected > 0 {
            // Drop transactions the new blocks confirmed right away, so no
            // answer lists one both confirmed and unconfirmed until the next
            // mempool poll.
            let store = self.query.store();
            let start = first_new_tx.min(store.tx_count());
            let end = store.tx_count();
            // Past CONFIRMED_TXIDS_MAX (an initial sync or a long
            // catch-up), listing every confirmed txid would hold 32 bytes
            // per transaction (10M transactions took a 1 GiB-capped process
            // over its cap; mainnet would need 38 GB): each mempool
            // transaction is looked up in the index instead, and
            // subscribers are told that everything may have changed, as for
            // many touched scripts.
            let in_pool_confirmed: Vec<Txid>;
            let confirmed: &[Txid] = if end - start <= CONFIRMED_TXIDS_MAX {
                txids = store
                    .txids(start..end)
                    .map_err(osprey_indexer::Error::Store)?;
                &txids
            } else {
                all_changed = true;
                let pooled: Vec<Txid> = self.query.mempool().txids().copied().collect();
                let mut confirmed = Vec::new();
                for txid in pooled {
                    if store
                        .find_tx_num(&txid)
                        .map_err(osprey_indexer::Error::Store)?
                        .is_some()
                    {
                        confirmed.push(txid);
                    }
                }
                in_pool_confirmed = confirmed;
                &in_pool_confirmed
            };
            let mut mempool = self.query.mempool.write().expect("mempool lock poisoned");
            for txid in confirmed {
                mempool.remove(txid, &mut touched);
            }
            // The node's mempool lost these too, so the poll below may
            // see nothing new: the histogram must not keep them.
            mempool.update_histogram();
        }
        let polled = if poll_mempool {
            self.update_mempool(&mut txids)
        } else {
            Ok(Vec::new())
        };
        let mempool_touched = match polled {
            Ok(touched) => touched,
            Err(e) => {
                self.query.forget_statuses();
                return Err(e);
            }
        };
        touched.extend(mempool_touched);
        touched.sort_unstable();
        touched.dedup();
        let new_tip = (report.connected > 0 || report.disconnected > 0)
            .then(|| {
                let (height, _) = self.query.tip();
                self.query.header(height).map(|h| (height, h))
            })
            .flatten();
        if let Some((height, _)) = new_tip {
            if report.connected <= 8 {
                tracing::info!(height = height.0, hash = %self.query.tip().1, "new tip");
            }
        }
        if new_tip.is_some() || !touched.is_empty() || !txids.is_empty() || all_changed {
            self.query.publish(Change {
                new_tip,
                scripthashes: touched,
                txids,
                all_scripthashes: all_changed,
            });
        }
        Ok(())
    }

    /// Diffs the node's mempool against ours; returns the touched scripts
    /// and adds the transactions that came or went to `txids`.
    fn update_mempool(
        &self,
        txids: &mut Vec<Txid>,
    ) -> Result<Vec<ScriptHash>, osprey_indexer::Error> {
        let source = self.query.source();
        let current: HashSet<Txid> = source.mempool_txids()?.into_iter().collect();
        let (removed, added): (Vec<Txid>, Vec<Txid>) = {
            let mempool = self.query.mempool();
            let removed = mempool
                .txids()
                .filter(|t| !current.contains(*t))
                .copied()
                .collect();
            let added = current
                .iter()
                .filter(|t| mempool.get(t).is_none())
                .copied()
                .collect();
            (removed, added)
        };
        // A transaction leaves the node's mempool when a block confirms
        // it. If that block is not indexed yet, dropping the transaction
        // now would leave it in no answer at all until the next update: it
        // stays until the commit that confirms it drops it (above).
        let removed = if !removed.is_empty() && source.best_block()?.1 != self.query.tip().1 {
            tracing::debug!(
                left = removed.len(),
                "the node has a block the index has not: mempool removals wait for it"
            );
            Vec::new()
        } else {
            removed
        };
        let mut touched = Vec::new();
        if removed.is_empty() && added.is_empty() {
            return Ok(touched);
        }
        let new_txs = source.mempool_transactions(&added)?;
        let entries = self.resolve(new_txs)?;
        let mut mempool = self.query.mempool.write().expect("mempool lock poisoned");
        for txid in &removed {
            mempool.remove(txid, &mut touched);
        }
        txids.extend(removed);
        for entry in entries {
            txids.push(entry.txid);
            mempool.add(entry, &mut touched);
        }
        mempool.update_histogram();
        Ok(touched)
    }

    /// Resolves the spent outputs of new mempool transactions (from the
    /// mempool itself, or from confirmed transactions through the index)
    /// and builds their entries. Transactions whose inputs cannot be
    /// resolved yet (a parent in a block not indexed yet) wait for the next
    /// poll. A failed read of the index is an error, not an unknown parent:
    /// the transaction must not silently wait.
    fn resolve(&self, new_txs: Vec<MempoolTx>) -> Result<Vec<MempoolEntry>, osprey_indexer::Error> {
        let new_by_txid: HashMap<Txid, &Transaction> =
            new_txs.iter().map(|m| (m.txid, &m.tx)).collect();
        let mut confirmed_cache: HashMap<Txid, Option<Transaction>> = HashMap::new();
        let mut entries = Vec::with_capacity(new_txs.len());
        let silent_payments = self.query.store().silent_payments();
        'txs: for MempoolTx { txid, tx } in &new_txs {
            let mut spending = Vec::with_capacity(tx.input.len());
            // The spent outputs themselves, for silent payments only.
            let mut spent = Vec::new();
            let mut input_value = 0u64;
            for input in &tx.input {
                let op = input.previous_output;
                let from_mempool: Option<TxOut> = new_by_txid
                    .get(&op.txid)
                    .and_then(|t| t.output.get(op.vout as usize).cloned())
                    .or_else(|| {
                        self.query
                            .mempool()
                            .get(&op.txid)
                            .and_then(|e| e.tx.output.get(op.vout as usize).cloned())
                    });
                let out = match from_mempool {
                    Some(out) => out,
                    None => {
                        let parent = match confirmed_cache.get(&op.txid) {
                            Some(t) => t.clone(),
                            None => {
                                let t = self.confirmed_parent(&op.txid)?;
                                confirmed_cache.insert(op.txid, t.clone());
                                t
                            }
                        };
                        match parent.and_then(|t| t.output.get(op.vout as usize).cloned()) {
                            Some(out) => out,
                            None => {
                                tracing::debug!(%txid, spent = %op, "mempool transaction spends an unknown output; retrying later");
                                continue 'txs;
                            }
                        }
                    }
                };
                input_value += out.value.to_sat();
                spending.push((
                    ScriptHash::from_script(out.script_pubkey.as_bytes()),
                    op,
                    out.value.to_sat(),
                ));
                if silent_payments {
                    spent.push(out);
                }
            }
            let output_value: u64 = tx.output.iter().map(|o| o.value.to_sat()).sum();
            let funding = tx
                .output
                .iter()
                .enumerate()
                .filter(|(_, o)| !o.script_pubkey.is_op_return())
                .map(|(vout, o)| {
                    (
                        ScriptHash::from_script(o.script_pubkey.as_bytes()),
                        vout as u32,
                        o.value.to_sat(),
                    )
                })
                .collect();
            entries.push(MempoolEntry {
                txid: *txid,
                tx: tx.clone(),
                fee: input_value.saturating_sub(output_value),
                vsize: tx.vsize() as u64,
                funding,
                spending,
                sp: silent_payments.then(|| SpMempool::of(tx, &spent)).flatten(),
            });
        }
        Ok(entries)
    }

    fn confirmed_parent(&self, txid: &Txid) -> Result<Option<Transaction>, osprey_indexer::Error> {
        let store = self.query.store();
        let Some(tx_num) = store.find_tx_num(txid)? else {
            return Ok(None);
        };
        // None: its block is being committed or undone right now.
        let Some(location) = self.query.located(tx_num)? else {
            return Ok(None);
        };
        let raw = self.query.source().transaction(txid, Some(location))?;
        Ok(bitcoin::consensus::deserialize(&raw).ok())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bitcoin::{Amount, ScriptBuf};
    use osprey_chain::{ChainSource, Daemon};
    use osprey_core::Network;
    use osprey_indexer::IndexerConfig;
    use osprey_store::{Store, StoreConfig};
    use osprey_testenv::{BtcdNode, ChainFeed, Node, ScriptKind, TestWallet};

    /// A new index of `node` (nothing indexed yet): its directory, its
    /// queries and the tracker that keeps it up to date.
    pub(crate) fn tracking(node: &BtcdNode) -> (tempfile::TempDir, Arc<Query>, Tracker) {
        tracking_with(node, StoreConfig::default())
    }

    /// `tracking` with an index of `config`, of any node.
    pub(crate) fn tracking_with(
        node: &dyn Node,
        config: StoreConfig,
    ) -> (tempfile::TempDir, Arc<Query>, Tracker) {
        let source: Arc<dyn ChainSource> = Arc::new(
            Daemon::connect(
                &node.rpc_addr().to_string(),
                node.rpc_auth(),
                Network::Regtest,
            )
            .expect("connecting to btcd"),
        );
        tracking_source(source, config)
    }

    /// A new index of `source` and the tracker that keeps it up to date.
    fn tracking_source(
        source: Arc<dyn ChainSource>,
        config: StoreConfig,
    ) -> (tempfile::TempDir, Arc<Query>, Tracker) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store =
            Arc::new(Store::open(&dir.path().join("db"), "regtest", config).expect("store"));
        let indexer = Indexer::new(Arc::clone(&store), source.clone(), IndexerConfig::default());
        let query = Arc::new(Query::new(store, source, Default::default()));
        let tracker = Tracker::new(indexer, Arc::clone(&query));
        (dir, query, tracker)
    }

    /// A btcd node 105 blocks high, a wallet holding its spendable
    /// coinbases, and a new script of that wallet to pay.
    pub(crate) fn funded_node() -> (BtcdNode, TestWallet, ScriptBuf) {
        let node = BtcdNode::start().expect("btcd");
        node.generate(105).expect("mining");
        let mut wallet = TestWallet::new();
        wallet.sync(&node).expect("wallet sync");
        let payee = wallet.new_script(ScriptKind::P2wpkh);
        (node, wallet, payee)
    }

    /// A payment the node mined into a block the index has not reached yet
    /// stays in the mempool's answers until that block is indexed: dropped
    /// at once (as the node's mempool drops it), it would be in no answer
    /// at all in between. The mempool poll is run alone here, which is the
    /// moment a block found between the sync and the poll creates.
    #[test]
    fn a_mined_payment_stays_unconfirmed_until_its_block_is_indexed() {
        let (node, mut wallet, payee) = funded_node();
        let (_dir, query, mut tracker) = tracking(&node);

        let tx = wallet
            .send(payee.clone(), Amount::from_sat(100_000))
            .expect("paying");
        let txid = node.send_raw_transaction(&tx).expect("broadcast");
        tracker.update(&mut |_| {}).expect("update");
        let history = || heights(&query, &payee);
        assert_eq!(history(), [(txid, 0)], "in the mempool");

        node.generate(1).expect("mining");
        assert!(node.mempool_txids().expect("mempool").is_empty());
        tracker
            .update_mempool(&mut Vec::new())
            .expect("mempool poll");
        assert_eq!(history(), [(txid, 0)], "still unconfirmed, not gone");

        tracker.update(&mut |_| {}).expect("update");
        assert_eq!(history(), [(txid, 106)], "confirmed once indexed");
    }

    /// `script`'s history as (txid, Electrum height).
    fn heights(query: &Query, script: &ScriptBuf) -> Vec<(Txid, i64)> {
        let history = query
            .history(&ScriptHash::from_script(script.as_bytes()))
            .expect("history");
        history.iter().map(|e| (e.txid, e.height)).collect()
    }

    /// The same moment on an in-memory chain and mempool ([`ChainFeed`]),
    /// which makes it exact: the block is mined between the poll that saw
    /// the payment and the next one, with no node timing in between.
    #[test]
    fn a_mined_payment_stays_unconfirmed_until_its_block_is_indexed_on_a_feed() {
        let feed = Arc::new(ChainFeed::new(1, 21));
        // Coinbases paying the wallet, the first ones mature.
        for _ in 0..101 {
            feed.mine(&[]);
        }
        let mut wallet = TestWallet::new();
        wallet.sync_feed(&feed);
        let (_dir, query, mut tracker) = tracking_source(feed.clone(), StoreConfig::default());
        let payee = wallet.new_script(ScriptKind::P2wpkh);
        let tx = wallet
            .send(payee.clone(), Amount::from_sat(100_000))
            .expect("paying");
        let txid = feed.add_to_mempool(tx);
        tracker.update(&mut |_| {}).expect("update");
        let history = || heights(&query, &payee);
        assert_eq!(history(), [(txid, 0)], "in the mempool");

        feed.mine_mempool();
        assert!(feed.mempool().is_empty());
        tracker
            .update_mempool(&mut Vec::new())
            .expect("mempool poll");
        assert_eq!(history(), [(txid, 0)], "still unconfirmed, not gone");

        tracker.update(&mut |_| {}).expect("update");
        let mined = i64::from(feed.tip().0 .0);
        assert_eq!(history(), [(txid, mined)], "confirmed once indexed");
    }
}
