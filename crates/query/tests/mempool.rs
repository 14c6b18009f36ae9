//! The tracker's mempool bookkeeping without a node: a [`ChainFeed`] is the
//! chain source (its own blocks and mempool), a [`TestWallet`] signs real
//! transactions on its coinbases, and the index is a real store in a
//! temporary directory. Each case is a node's mempool event the tracker
//! must follow: a child of an unconfirmed parent (height -1, then 0 once
//! the parent confirms, with its own fee, not its ancestors'), a
//! replacement that takes its original and the original's children away,
//! and reorgs that return transactions to the mempool or drop them for a
//! double spend the new branch confirmed. The same answers against real
//! nodes are the functional suite's (`tests/it/mempool.rs`, `reorg.rs`).

use std::sync::Arc;

use bitcoin::{Amount, OutPoint, ScriptBuf, Transaction, Txid};
use osprey_answers::Change;
use osprey_chain::{BlockFeed, ChainSource};
use osprey_core::{Height, ScriptHash};
use osprey_indexer::{Indexer, IndexerConfig};
use osprey_query::{Query, Tracker};
use osprey_store::{Store, StoreConfig};
use osprey_testenv::{ChainFeed, ScriptKind, TestWallet};
use tokio::sync::broadcast;

/// The feed's drawn chain ends here; the test's own blocks follow.
const DRAWN_TIP: u32 = 1;

/// Blocks mined on the drawn chain so that the first coinbases paying the
/// wallet are spendable (100 confirmations).
const MATURING_BLOCKS: u32 = 101;

/// A feed with spendable coins, a wallet that holds them, and an index
/// of the feed kept up to date by a tracker.
struct Setup {
    feed: Arc<ChainFeed>,
    wallet: TestWallet,
    query: Arc<Query>,
    tracker: Tracker,
    changes: broadcast::Receiver<Arc<Change>>,
    _dir: tempfile::TempDir,
}

impl Setup {
    fn new(seed: u64) -> Setup {
        let feed = Arc::new(ChainFeed::new(DRAWN_TIP, seed));
        for _ in 0..MATURING_BLOCKS {
            feed.mine(&[]);
        }
        let mut wallet = TestWallet::new();
        wallet.sync_feed(&feed);
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(
            Store::open(&dir.path().join("db"), "regtest", StoreConfig::default()).expect("store"),
        );
        let blocks: Arc<dyn BlockFeed> = feed.clone();
        let source: Arc<dyn ChainSource> = feed.clone();
        let indexer = Indexer::new(Arc::clone(&store), blocks, IndexerConfig::default());
        let query = Arc::new(Query::new(store, source, Default::default()));
        let changes = query.changes();
        let tracker = Tracker::new(indexer, Arc::clone(&query));
        let mut setup = Setup {
            feed,
            wallet,
            query,
            tracker,
            changes,
            _dir: dir,
        };
        setup.update();
        setup
    }

    /// One poll of the tracker; returns the changes it published, merged.
    fn update(&mut self) -> Change {
        self.tracker.update(&mut |_| {}).expect("tracker update");
        let mut merged = Change::default();
        while let Ok(change) = self.changes.try_recv() {
            merged.new_tip = change.new_tip.or(merged.new_tip);
            merged.scripthashes.extend(&change.scripthashes);
            merged.txids.extend(&change.txids);
            merged.all_scripthashes |= change.all_scripthashes;
        }
        assert_eq!(self.query.tip(), self.feed.tip(), "the index is at the tip");
        merged
    }

    /// `script`'s history as (txid, Electrum height, fee).
    fn history(&self, script: &ScriptBuf) -> Vec<(Txid, i64, Option<u64>)> {
        self.query
            .history(&scripthash(script))
            .expect("history")
            .iter()
            .map(|e| (e.txid, e.height, e.fee))
            .collect()
    }

    /// `script`'s history as (txid, Electrum height).
    fn heights(&self, script: &ScriptBuf) -> Vec<(Txid, i64)> {
        self.history(script)
            .into_iter()
            .map(|(txid, height, _)| (txid, height))
            .collect()
    }

    fn height(&self) -> i64 {
        i64::from(self.feed.tip().0 .0)
    }

    /// A payment of `sats` to `to` (the parent), and a transaction
    /// spending it to `then` (the child); neither sent.
    fn parent_and_child(
        &mut self,
        to: &ScriptBuf,
        sats: u64,
        then: &ScriptBuf,
        then_sats: u64,
    ) -> (Transaction, Transaction) {
        let parent = self
            .wallet
            .send(to.clone(), Amount::from_sat(sats))
            .expect("paying the parent's script");
        let child = self.spend_output(&parent, to, then, then_sats);
        (parent, child)
    }

    /// A transaction spending `tx`'s output to `script`, paying `to`.
    fn spend_output(
        &mut self,
        tx: &Transaction,
        script: &ScriptBuf,
        to: &ScriptBuf,
        sats: u64,
    ) -> Transaction {
        let (paid, _) = outpoint_paying(tx, script);
        self.wallet
            .spend(&[paid], &[(to.clone(), Amount::from_sat(sats))])
            .expect("spending the output")
    }

    /// A transaction spending `tx`'s inputs again, paying `to`: `tx` is
    /// forgotten by the wallet first (it must be pending), so that its
    /// inputs are the wallet's again.
    fn double_spend(&mut self, tx: &Transaction, to: &ScriptBuf, sats: u64) -> Transaction {
        self.wallet
            .abandon(tx.compute_txid())
            .expect("the transaction is pending");
        let inputs: Vec<OutPoint> = tx.input.iter().map(|i| i.previous_output).collect();
        self.wallet
            .spend(&inputs, &[(to.clone(), Amount::from_sat(sats))])
            .expect("the double spend")
    }
}

fn scripthash(script: &ScriptBuf) -> ScriptHash {
    ScriptHash::from_script(script.as_bytes())
}

/// What `tx` pays in fees, from the outputs it spends (`spent`).
fn fee(tx: &Transaction, spent: &[Amount]) -> u64 {
    let inputs: Amount = spent.iter().copied().sum();
    let outputs: Amount = tx.output.iter().map(|o| o.value).sum();
    (inputs - outputs).to_sat()
}

fn outpoint_paying(tx: &Transaction, script: &ScriptBuf) -> (OutPoint, Amount) {
    let (vout, out) = tx
        .output
        .iter()
        .enumerate()
        .find(|(_, o)| o.script_pubkey == *script)
        .expect("an output paying the script");
    (
        OutPoint {
            txid: tx.compute_txid(),
            vout: vout as u32,
        },
        out.value,
    )
}

/// 1. Pay script A (parent), and spend that payment to script B (child);
///    both in the mempool.
/// 2. A's history: the parent at height 0 (its inputs are confirmed)
///    before the child at -1 (it spends a mempool output); B's: the child
///    at -1. Each with its own fee, the child's not counting its parent's.
///    B's balance is the child's payment, unconfirmed.
/// 3. Mine the parent alone: the child stays in the mempool and is now at
///    height 0, and B, whose transactions did not change, is announced as
///    changed (its status did).
#[test]
fn a_child_waits_at_height_minus_one_until_its_parent_confirms() {
    // 1.
    let mut setup = Setup::new(11);
    let (a, b) = (
        setup.wallet.new_script(ScriptKind::P2wpkh),
        setup.wallet.new_script(ScriptKind::P2tr),
    );
    let (parent, child) = setup.parent_and_child(&a, 1_000_000, &b, 600_000);
    let parent_fee = {
        let spent: Vec<Amount> = parent
            .input
            .iter()
            .map(|i| {
                let coinbase = setup
                    .feed
                    .transaction(&i.previous_output.txid, None)
                    .expect("the spent coinbase");
                let coinbase: Transaction =
                    bitcoin::consensus::deserialize(&coinbase).expect("a transaction");
                coinbase.output[i.previous_output.vout as usize].value
            })
            .collect();
        fee(&parent, &spent)
    };
    let child_fee = fee(&child, &[Amount::from_sat(1_000_000)]);
    let (parent_id, child_id) = (parent.compute_txid(), child.compute_txid());
    setup.feed.add_to_mempool(parent.clone());
    setup.feed.add_to_mempool(child);
    let change = setup.update();
    assert!(change.txids.contains(&parent_id) && change.txids.contains(&child_id));

    // 2.
    assert_eq!(
        setup.history(&a),
        [
            (parent_id, 0, Some(parent_fee)),
            (child_id, -1, Some(child_fee))
        ]
    );
    assert_eq!(setup.history(&b), [(child_id, -1, Some(child_fee))]);
    let balance = setup.query.balance(&scripthash(&b)).expect("balance");
    assert_eq!((balance.confirmed, balance.unconfirmed), (0, 600_000));

    // 3.
    setup.feed.mine(&[parent]);
    assert_eq!(setup.feed.mempool(), [child_id], "the child waits");
    let change = setup.update();
    let mined = setup.height();
    assert_eq!(
        setup.history(&a),
        [(parent_id, mined, None), (child_id, 0, Some(child_fee))]
    );
    assert_eq!(setup.history(&b), [(child_id, 0, Some(child_fee))]);
    assert!(
        change.scripthashes.contains(&scripthash(&b)),
        "B's status changed with its parent's confirmation"
    );
}

/// 1. Pay script A (original) and spend that payment to script B (its
///    child); both in the mempool and in the answers.
/// 2. Replace the original: the same inputs, a higher fee, paying script
///    C. The node's mempool loses the original and its child.
/// 3. After one update A and B have no history, C has the replacement; the
///    fee histogram holds the replacement alone; every script and all
///    three transactions are announced.
#[test]
fn a_replacement_takes_its_original_and_the_originals_child_away() {
    // 1.
    let mut setup = Setup::new(12);
    let (a, b, c) = (
        setup.wallet.new_script(ScriptKind::P2wpkh),
        setup.wallet.new_script(ScriptKind::P2pkh),
        setup.wallet.new_script(ScriptKind::P2tr),
    );
    let (original, child) = setup.parent_and_child(&a, 2_000_000, &b, 1_500_000);
    let (original_id, child_id) = (original.compute_txid(), child.compute_txid());
    setup.feed.add_to_mempool(original.clone());
    setup.feed.add_to_mempool(child);
    setup.update();
    assert_eq!(setup.history(&a).len(), 2);
    assert_eq!(setup.history(&b).len(), 1);

    // 2.
    setup
        .wallet
        .abandon(child_id)
        .expect("the child is pending");
    setup.wallet.fee_rate *= 5;
    let replacement = setup.double_spend(&original, &c, 2_000_000);
    let replacement_id = setup.feed.add_to_mempool(replacement.clone());
    assert_eq!(setup.feed.mempool(), [replacement_id]);

    // 3.
    let change = setup.update();
    assert_eq!(setup.history(&a), []);
    assert_eq!(setup.history(&b), []);
    assert_eq!(setup.heights(&c), [(replacement_id, 0)]);
    let vsizes: u64 = setup.query.fee_histogram().iter().map(|bin| bin.1).sum();
    assert_eq!(vsizes, replacement.vsize() as u64);
    for script in [&a, &b, &c] {
        assert!(change.scripthashes.contains(&scripthash(script)));
    }
    for txid in [original_id, child_id, replacement_id] {
        assert!(change.txids.contains(&txid), "{txid} announced");
    }
}

/// 1. Build P, paying script A, and D, a double spend of P's inputs paying
///    script D, but broadcast only P; mine it at height H. Spend P's
///    output to script C (child), left in the mempool.
/// 2. Reorg: back to H - 1, then two empty blocks. P is back in the
///    mempool (height 0) and the child now waits on it (-1); every script
///    is announced as possibly changed.
/// 3. Reorg again: back to H - 1, then a block confirming D. P and its
///    child leave the mempool (they conflict with D): A and C have no
///    history, D's script has D at height H.
#[test]
fn reorgs_return_transactions_to_the_mempool_or_drop_their_conflicts() {
    // 1.
    let mut setup = Setup::new(13);
    let (a, c, d) = (
        setup.wallet.new_script(ScriptKind::P2wpkh),
        setup.wallet.new_script(ScriptKind::P2shP2wpkh),
        setup.wallet.new_script(ScriptKind::P2tr),
    );
    let p = setup
        .wallet
        .send(a.clone(), Amount::from_sat(3_000_000))
        .expect("paying A");
    let p_id = p.compute_txid();
    let double_spend = setup.double_spend(&p, &d, 3_000_000);
    let d_id = double_spend.compute_txid();
    setup.wallet.abandon(d_id).expect("D is pending");
    setup.feed.add_to_mempool(p.clone());
    setup.feed.mine_mempool();
    let h = setup.height();
    setup.wallet.sync_feed(&setup.feed);
    let child = setup.spend_output(&p, &a, &c, 2_000_000);
    let child_id = setup.feed.add_to_mempool(child);
    setup.update();
    assert_eq!(setup.heights(&a), [(p_id, h), (child_id, 0)]);

    // 2.
    let fork_point = Height(h as u32 - 1);
    setup.feed.rewind(fork_point);
    setup.feed.mine(&[]);
    setup.feed.mine(&[]);
    assert_eq!(setup.feed.mempool(), [p_id, child_id], "P came back first");
    let change = setup.update();
    assert!(change.all_scripthashes, "blocks were undone");
    assert_eq!(setup.heights(&a), [(p_id, 0), (child_id, -1)]);
    assert_eq!(setup.heights(&c), [(child_id, -1)]);

    // 3.
    setup.feed.rewind(fork_point);
    setup.feed.mine(&[double_spend]);
    assert_eq!(setup.feed.mempool(), [], "P and its child conflict with D");
    let change = setup.update();
    assert!(change.all_scripthashes, "blocks were undone");
    assert_eq!(setup.history(&a), []);
    assert_eq!(setup.history(&c), []);
    assert_eq!(setup.history(&d), [(d_id, h, None)]);
}
