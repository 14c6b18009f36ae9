//! `Indexer::sync` against an in-memory chain that reorganises on cue
//! ([`ChainFeed`]) and a real store in a temporary directory: every way the
//! index follows the source's chain (catching up, reorgs of every depth,
//! the chain changing during a fetch, a shorter chain, a source that fails
//! or lies), checked on the index itself: its tip, its block hashes, the
//! history of every script, and its digest against a fresh index.

use bitcoin::{BlockHash, Txid};
use osprey_chain::{BlockFeed, ErrorKind};
use osprey_core::{Height, ScriptHash};
use osprey_indexer::rows::block_rows;
use osprey_indexer::{ChunkStats, Error, Indexer, IndexerConfig, SyncReport};
use osprey_store::{Store, StoreConfig};
use osprey_testenv::ChainFeed;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use tempfile::TempDir;

/// Transfers start at 101; a chain past it has history to move around.
const TIP: u32 = 130;

struct Index {
    store: Arc<Store>,
    _dir: TempDir,
}

impl Index {
    fn new() -> Index {
        Index::with_undo_depth(StoreConfig::default().reorg_depth_max)
    }

    /// An index that keeps undo data for `depth` blocks below the tip.
    fn with_undo_depth(depth: u32) -> Index {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig {
            reorg_depth_max: depth,
            ..StoreConfig::default()
        };
        let store = Arc::new(Store::open(dir.path(), "regtest", config).unwrap());
        Index { store, _dir: dir }
    }

    fn sync(&self, feed: &Arc<ChainFeed>) -> Result<SyncReport, Error> {
        self.sync_with(feed, chunks_of_ten()).0
    }

    /// Syncs once; also returns the progress reports.
    fn sync_with(
        &self,
        feed: &Arc<ChainFeed>,
        config: IndexerConfig,
    ) -> (Result<SyncReport, Error>, Vec<ChunkStats>) {
        let mut chunks = Vec::new();
        let report = Indexer::new(Arc::clone(&self.store), feed.clone(), config)
            .sync(&mut |chunk| chunks.push(chunk.clone()));
        (report, chunks)
    }

    fn tip(&self) -> (Height, BlockHash) {
        self.store.tip().expect("the index has blocks")
    }

    /// The heights and txids of the transactions in `script`'s history.
    fn history(&self, script: &ScriptHash) -> BTreeSet<(Height, Txid)> {
        let rows = self.store.history(script, usize::MAX).unwrap().unwrap();
        rows.iter()
            .map(|row| {
                let (height, _) = self.store.locate(row.tx_num).expect("row below the tip");
                (height, self.store.txid(row.tx_num).unwrap())
            })
            .collect()
    }

    /// Checks that the index holds exactly the feed's best chain: tip,
    /// block hashes, every script's history, and the same digest as an
    /// index built from scratch.
    fn assert_follows(&self, feed: &Arc<ChainFeed>) {
        let (height, hash) = feed.tip();
        assert_eq!(self.tip(), (height, hash), "tip");
        assert_eq!(
            self.store.block_hashes(Height(0), height),
            feed.hashes(),
            "block hashes"
        );
        let expected = histories(feed);
        assert!(!expected.is_empty(), "the chain pays scripts");
        for (script, history) in &expected {
            assert_eq!(&self.history(script), history, "history of {script:?}");
        }
        let fresh = Index::new();
        fresh.sync_with(feed, IndexerConfig::default()).0.unwrap();
        assert_eq!(
            self.store.digest().unwrap(),
            fresh.store.digest().unwrap(),
            "same rows as a fresh index"
        );
    }

    /// Checks that scripts paid only on a branch the feed left have no
    /// history; returns how many there were.
    fn assert_forgotten(
        &self,
        old: &BTreeMap<ScriptHash, BTreeSet<(Height, Txid)>>,
        feed: &Arc<ChainFeed>,
    ) -> usize {
        let now = histories(feed);
        let gone: Vec<_> = old.keys().filter(|s| !now.contains_key(s)).collect();
        for script in &gone {
            assert!(
                self.history(script).is_empty(),
                "{script:?} was left behind"
            );
        }
        gone.len()
    }
}

fn chunks_of_ten() -> IndexerConfig {
    IndexerConfig {
        fetch_blocks: 10,
        ..IndexerConfig::default()
    }
}

fn feed(tip: u32, seed: u64) -> Arc<ChainFeed> {
    Arc::new(ChainFeed::new(tip, seed))
}

/// Every script's history on the feed's best chain, worked out from the
/// blocks and their spent outputs: one entry per transaction paying or
/// spending from it (not the genesis coinbase, not `OP_RETURN`s).
fn histories(feed: &ChainFeed) -> BTreeMap<ScriptHash, BTreeSet<(Height, Txid)>> {
    let wanted: Vec<_> = feed
        .hashes()
        .into_iter()
        .enumerate()
        .skip(1)
        .map(|(height, hash)| (Height(height as u32), hash))
        .collect();
    let mut histories: BTreeMap<ScriptHash, BTreeSet<(Height, Txid)>> = BTreeMap::new();
    for block in feed.blocks(&wanted).unwrap() {
        let mut prevouts = block.prevouts.iter();
        for (i, tx) in block.block.txdata.iter().enumerate() {
            let txid = tx.compute_txid();
            let spent = if i == 0 { 0 } else { tx.input.len() };
            let scripts = prevouts
                .by_ref()
                .take(spent)
                .map(|out| &out.script_pubkey)
                .chain(tx.output.iter().map(|out| &out.script_pubkey))
                .filter(|script| !script.is_op_return());
            for script in scripts {
                histories
                    .entry(ScriptHash::from_script(script.as_bytes()))
                    .or_default()
                    .insert((block.height, txid));
            }
        }
    }
    histories
}

/// The scripts touched by the feed's blocks in `heights`.
fn scripts_in(feed: &ChainFeed, heights: std::ops::RangeInclusive<u32>) -> Vec<ScriptHash> {
    let touched: BTreeSet<_> = histories(feed)
        .into_iter()
        .filter(|(_, history)| history.iter().any(|(h, _)| heights.contains(&h.0)))
        .map(|(script, _)| script)
        .collect();
    touched.into_iter().collect()
}

#[test]
fn a_new_index_catches_up_in_chunks_and_then_has_nothing_to_do() {
    let feed = feed(TIP, 1);
    let index = Index::new();
    let (report, chunks) = index.sync_with(&feed, chunks_of_ten());
    let report = report.unwrap();
    assert_eq!(report.connected, TIP + 1);
    assert_eq!(report.disconnected, 0);
    assert_eq!(report.source_height, Height(TIP));
    index.assert_follows(&feed);
    let heights: Vec<u32> = chunks.iter().map(|c| c.height.0).collect();
    let expected: Vec<u32> = (9..TIP).step_by(10).chain([TIP]).collect();
    assert_eq!(heights, expected, "one progress report per chunk");
    assert_eq!(chunks.iter().map(|c| c.blocks).sum::<u32>(), TIP + 1);
    assert_eq!(
        chunks.iter().map(|c| c.txs).sum::<u64>(),
        index.store.tx_count()
    );

    let again = index.sync(&feed).unwrap();
    assert_eq!((again.connected, again.disconnected), (0, 0));
    assert!(again.touched.is_empty() && !again.all_touched);
    index.assert_follows(&feed);
}

#[test]
fn blocks_on_top_of_the_index_are_connected_and_their_scripts_reported() {
    let feed = feed(TIP, 2);
    // One block at a time, in batches of every size: the same index as one
    // bulk load.
    let index = Index::new();
    let tiny_batches = IndexerConfig {
        fetch_blocks: 1,
        batch_rows_max: 3,
        batch_blocks_max: 2,
        bulk_blocks_min: u32::MAX,
        ..IndexerConfig::default()
    };
    index.sync_with(&feed, tiny_batches).0.unwrap();
    index.assert_follows(&feed);

    feed.extend(6);
    let report = index.sync(&feed).unwrap();
    assert_eq!((report.connected, report.disconnected), (6, 0));
    assert!(!report.all_touched);
    assert_eq!(report.touched, scripts_in(&feed, TIP + 1..=TIP + 6));
    index.assert_follows(&feed);

    // Past `touched_max`, every script counts as touched instead.
    feed.extend(6);
    let few = IndexerConfig {
        touched_max: 3,
        ..chunks_of_ten()
    };
    let report = index.sync_with(&feed, few).0.unwrap();
    assert_eq!(report.connected, 6);
    assert!(report.all_touched && report.touched.is_empty());
    index.assert_follows(&feed);
}

#[test]
fn a_shallow_reorg_is_undone_and_the_new_branch_indexed() {
    let feed = feed(TIP, 3);
    let index = Index::new();
    index.sync(&feed).unwrap();
    let old = histories(&feed);
    let stale_tip = index.tip();

    feed.fork(Height(TIP - 4), 7, 33);
    let report = index.sync(&feed).unwrap();
    assert_eq!((report.disconnected, report.connected), (4, 7));
    assert!(report.all_touched && report.touched.is_empty());
    assert_ne!(index.tip(), stale_tip);
    index.assert_follows(&feed);
    assert!(index.assert_forgotten(&old, &feed) > 0);
}

#[test]
fn a_reorg_below_the_first_search_window_is_found_further_down() {
    // The fork search looks 64 blocks at a time.
    let feed = feed(TIP + 40, 4);
    let index = Index::new();
    index.sync(&feed).unwrap();
    let old = histories(&feed);

    feed.fork(Height(60), 100, 44);
    let report = index.sync(&feed).unwrap();
    assert_eq!(
        (report.disconnected, report.connected),
        (TIP + 40 - 60, 100)
    );
    index.assert_follows(&feed);
    assert!(index.assert_forgotten(&old, &feed) > 0);
}

#[test]
fn a_reorg_deeper_than_the_undo_data_fails_and_leaves_the_index_as_it_was() {
    let feed = feed(TIP, 5);
    // Undo records are kept for blocks TIP-5..=TIP.
    let index = Index::with_undo_depth(5);
    index.sync(&feed).unwrap();
    let before = index.store.digest().unwrap();
    let hashes = feed.hashes();

    feed.fork(Height(TIP - 10), 12, 55);
    for _ in 0..2 {
        let err = index.sync(&feed).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Store(osprey_store::Error::UndoPruned { height }) if height == Height(TIP - 9)
            ),
            "{err:?}"
        );
        assert!(!err.is_transient(), "retrying cannot help");
        assert_eq!(index.tip(), (Height(TIP), hashes[TIP as usize]));
        assert_eq!(index.store.digest().unwrap(), before);
    }

    // The deepest reorg the undo data covers still goes through.
    let feed = self::feed(TIP, 6);
    let index = Index::with_undo_depth(5);
    index.sync(&feed).unwrap();
    feed.fork(Height(TIP - 6), 8, 66);
    let report = index.sync(&feed).unwrap();
    assert_eq!((report.disconnected, report.connected), (6, 8));
    index.assert_follows(&feed);
}

#[test]
fn a_reorg_during_the_fetch_stops_the_sync_and_the_next_one_follows_the_new_branch() {
    let feed = feed(TIP, 7);
    let index = Index::new();
    // Blocks 0..=19 are fetched, then the chain forks below them: block 20
    // no longer builds on the 19 the index got.
    feed.after_fetches(2, |feed| feed.fork(Height(15), TIP - 10, 77));
    let report = index.sync(&feed).unwrap();
    assert_eq!(report.connected, 20);
    assert_eq!(report.source_height, Height(TIP));
    let stale_19 = index.tip();
    assert_eq!(stale_19.0, Height(19));
    assert_ne!(Some(stale_19.1), feed.hashes().get(19).copied());

    let report = index.sync(&feed).unwrap();
    assert_eq!(report.disconnected, 4);
    assert_eq!(report.connected, TIP + 5 - 15);
    index.assert_follows(&feed);
}

#[test]
fn a_fork_that_keeps_moving_is_followed_once_it_settles() {
    let feed = feed(TIP, 8);
    let index = Index::new();
    index.sync(&feed).unwrap();
    let old = histories(&feed);

    // A reorg deep in the chain, and, while the index fetches the new
    // branch, another one below the first.
    feed.fork(Height(110), 30, 81);
    feed.after_fetches(1, |feed| feed.fork(Height(105), 40, 82));
    let report = index.sync(&feed).unwrap();
    assert_eq!(report.disconnected, TIP - 110);
    assert_eq!(report.connected, 10, "the first chunk of the first branch");
    assert_eq!(index.tip().0, Height(120));

    // And again, below what was fetched, while that is caught up with.
    feed.after_fetches(2, |feed| feed.fork(Height(110), 40, 83));
    let report = index.sync(&feed).unwrap();
    assert_eq!(report.disconnected, 120 - 105);
    assert_eq!(report.connected, 20, "two chunks of the second branch");
    assert_eq!(index.tip().0, Height(125));

    let report = index.sync(&feed).unwrap();
    assert_eq!((report.disconnected, report.connected), (125 - 110, 40));
    index.assert_follows(&feed);
    assert!(index.assert_forgotten(&old, &feed) > 0);
}

#[test]
fn a_fork_above_the_fetched_blocks_is_followed_within_the_sync() {
    let feed = feed(TIP, 9);
    let index = Index::new();
    // The fork is above what was fetched: the next chunks build on it.
    feed.after_fetches(1, |feed| feed.fork(Height(50), TIP, 99));
    let report = index.sync(&feed).unwrap();
    assert_eq!(
        report.connected,
        TIP + 1,
        "up to the height the sync began with"
    );
    assert_eq!(index.tip(), (Height(TIP), feed.hashes()[TIP as usize]));

    let report = index.sync(&feed).unwrap();
    assert_eq!((report.disconnected, report.connected), (0, 50));
    index.assert_follows(&feed);
}

#[test]
fn a_shorter_chain_is_followed_back() {
    let feed = feed(TIP, 10);
    let index = Index::new();
    index.sync(&feed).unwrap();
    let old = histories(&feed);

    // The node drops its last blocks: the index goes back with it.
    feed.rewind(Height(TIP - 8));
    let report = index.sync(&feed).unwrap();
    assert_eq!((report.disconnected, report.connected), (8, 0));
    assert_eq!(report.source_height, Height(TIP - 8));
    assert!(report.all_touched);
    index.assert_follows(&feed);

    // A shorter branch forking further down.
    feed.fork(Height(104), 3, 101);
    let report = index.sync(&feed).unwrap();
    assert_eq!((report.disconnected, report.connected), (TIP - 8 - 104, 3));
    index.assert_follows(&feed);
    assert!(index.assert_forgotten(&old, &feed) > 0);

    // So much shorter that the fork search's first window (64 blocks below
    // the index's tip) is past the node's tip.
    feed.rewind(Height(30));
    let report = index.sync(&feed).unwrap();
    assert_eq!((report.disconnected, report.connected), (107 - 30, 0));
    index.assert_follows(&feed);
}

#[test]
fn a_chain_that_gets_shorter_during_the_fetch_is_indexed_to_its_end() {
    let feed = feed(TIP, 11);
    let index = Index::new();
    feed.after_fetches(1, |feed| feed.rewind(Height(45)));
    let report = index.sync(&feed).unwrap();
    assert_eq!(report.source_height, Height(TIP));
    assert_eq!(report.connected, 46);
    index.assert_follows(&feed);
}

#[test]
fn a_source_that_shares_not_even_genesis_with_the_index_is_refused() {
    let index = Index::new();
    let testnet = bitcoin::constants::genesis_block(bitcoin::Network::Testnet);
    let genesis = osprey_chain::BlockWithPrevouts {
        height: Height(0),
        size: bitcoin::consensus::serialize(&testnet).len(),
        block: testnet,
        prevouts: Vec::new(),
    };
    let rows = block_rows(&genesis, osprey_core::TxNum(0), false, false).unwrap();
    index.store.apply(&[rows.indexed], true, Height(0)).unwrap();
    let before = index.tip();

    let err = index.sync(&feed(TIP, 12)).unwrap_err();
    assert!(
        matches!(&err, Error::BadBlock(what) if what.contains("not even genesis")),
        "{err:?}"
    );
    assert_eq!(index.tip(), before);
}

#[test]
fn a_failed_fetch_keeps_the_chunks_before_it_and_the_next_sync_resumes() {
    let feed = feed(TIP, 13);
    let index = Index::new();
    feed.fail_fetches_from(Some(Height(35)));
    let err = index.sync(&feed).unwrap_err();
    assert!(
        matches!(&err, Error::Chain(e) if e.kind() == ErrorKind::Transient),
        "{err:?}"
    );
    assert!(err.is_transient());
    assert_eq!(index.tip(), (Height(29), feed.hashes()[29]));

    feed.fail_fetches_from(None);
    let report = index.sync(&feed).unwrap();
    assert_eq!(report.connected, TIP - 29);
    index.assert_follows(&feed);
}

#[test]
fn a_block_without_its_spent_outputs_is_refused_after_the_blocks_before_it() {
    let feed = feed(TIP, 14);
    let bad = (105..TIP)
        .find(|&h| feed.block(Height(h)).unwrap().txdata.len() > 1)
        .expect("a block with transfers");
    feed.withhold_prevouts(Height(bad));
    let index = Index::new();
    let err = index.sync(&feed).unwrap_err();
    assert!(
        matches!(&err, Error::BadBlock(what) if what.contains(&format!("block {bad} "))),
        "{err:?}"
    );
    assert!(!err.is_transient());
    assert_eq!(
        index.tip(),
        (Height(bad - 1), feed.hashes()[bad as usize - 1])
    );
}

#[test]
fn a_stop_request_commits_the_chunk_at_hand_and_returns() {
    let feed = feed(TIP, 15);
    let index = Index::new();
    let stop = Arc::new(AtomicBool::new(true));
    let report = Indexer::new(Arc::clone(&index.store), feed.clone(), chunks_of_ten())
        .with_stop(Arc::clone(&stop))
        .sync(&mut |_| {})
        .unwrap();
    assert_eq!(report.connected, 10);
    assert_eq!(index.tip(), (Height(9), feed.hashes()[9]));

    index.sync(&feed).unwrap();
    index.assert_follows(&feed);
}
