//! Osprey's node client and indexer against a real Bitcoin Core in regtest,
//! run the way users run it: no `-txindex`, cookie authentication, block
//! files XOR-obfuscated (Core's default), REST on or off. In process: the
//! chain source, the indexer, the store and the query layer, with every
//! answer compared with what the node itself says.
//!
//! bitcoind is found through `$BITCOIND_EXE`, the PATH, then
//! `../shared/peers/bin`. Without one the tests say so loudly and pass,
//! except under CI (`CI` set), where a missing bitcoind fails them.

use bitcoin::consensus::serialize;
use bitcoin::{Amount, BlockHash};
use osprey_chain::rpc::{Auth, RpcClient};
use osprey_chain::{BlockFeed, BlockSource, BlockSourceChoice, ChainSource, Daemon};
use osprey_core::Network;
use osprey_indexer::{Indexer, IndexerConfig};
use osprey_query::{Query, QueryConfig};
use osprey_store::{Store, StoreConfig};
use osprey_testenv::{BitcoindNode, BitcoindOptions, Node, ScriptKind, TestWallet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Connects like `osprey serve --daemon-dir`: with the cookie Core wrote,
/// and Core's blocks directory readable.
fn connect(node: &BitcoindNode, choice: BlockSourceChoice) -> Result<Daemon, osprey_chain::Error> {
    connect_with(node, choice, Some(&node.datadir().join("regtest/blocks")))
}

fn connect_with(
    node: &BitcoindNode,
    choice: BlockSourceChoice,
    blocks_dir: Option<&Path>,
) -> Result<Daemon, osprey_chain::Error> {
    let mut daemon = Daemon::connect(
        &node.rpc_addr().to_string(),
        Auth::CookieFile(node.cookie_file()),
        Network::Regtest,
    )?;
    daemon.use_block_source(choice, blocks_dir)?;
    Ok(daemon)
}

/// Indexes the node's chain into `dir` (small batches, so several commits
/// and fetches happen) and returns the query layer over it.
fn index(daemon: Arc<Daemon>, dir: &Path) -> Query {
    let store = Arc::new(Store::open(dir, "regtest", StoreConfig::default()).unwrap());
    let config = IndexerConfig {
        fetch_blocks: 7,
        batch_rows_max: 40,
        ..IndexerConfig::default()
    };
    Indexer::new(Arc::clone(&store), daemon.clone(), config)
        .sync(&mut |_| {})
        .unwrap();
    Query::new(store, daemon, QueryConfig::default())
}

/// 101 blocks, then every script kind paid and spent again, a few blocks
/// apart, so blocks spend outputs of every kind.
fn make_chain(node: &BitcoindNode) -> TestWallet {
    node.generate(101).unwrap();
    let mut wallet = TestWallet::new();
    wallet.sync(node).unwrap();
    for round in 0..3u64 {
        let outputs: Vec<_> = ScriptKind::ALL
            .iter()
            .map(|k| (wallet.new_script(*k), Amount::from_sat(700_000 + round)))
            .collect();
        let tx = wallet.send_many(&outputs).unwrap();
        node.send_raw_transaction(&tx).unwrap();
        node.generate(2).unwrap();
        wallet.sync(node).unwrap();
    }
    wallet
}

/// Every transaction of every block, as the query layer serves it, equals
/// the node's bytes.
fn assert_transactions_match(node: &BitcoindNode, query: &Query) {
    let (tip, _) = node.tip().unwrap();
    for height in 0..=tip {
        let block = node.get_block(&node.block_hash(height).unwrap()).unwrap();
        for tx in &block.txdata {
            let txid = tx.compute_txid();
            assert_eq!(
                query.transaction(&txid).unwrap(),
                serialize(tx),
                "transaction {txid} of block {height}"
            );
        }
    }
}

fn tip_of(query: &Query) -> (u32, BlockHash) {
    let (height, hash) = query.tip();
    (height.0, hash)
}

/// With the blocks directory readable, `auto` reads Core's (XOR-obfuscated)
/// files; without it, REST. Files, REST and JSON-RPC build byte-identical
/// indexes; transactions come back exact (from the files, and from REST
/// blockpart); after a reorg the index built from the files equals a fresh
/// one of the new chain; the long poll for new blocks times out quietly and
/// wakes on a block.
#[test]
fn core_files_rest_and_rpc_build_the_same_index_and_follow_a_reorg() {
    let Some(node) = BitcoindNode::start_or_skip(&BitcoindOptions::default()) else {
        return;
    };
    make_chain(&node);
    let xor = std::fs::read(node.datadir().join("regtest/blocks/xor.dat")).unwrap();
    assert!(
        xor.iter().any(|b| *b != 0),
        "Core obfuscates its block files by default"
    );
    let files = Arc::new(connect(&node, BlockSourceChoice::Auto).unwrap());
    assert_eq!(files.block_source(), BlockSource::Files);
    // `mempool.get_info`'s floors are the node's, each its own.
    let info: serde_json::Value = node.rpc().call("getmempoolinfo", &[]).unwrap();
    let fees = files.mempool_fees().unwrap();
    assert_eq!(fees.incrementalrelayfee, 0.0000005);
    assert_eq!(
        serde_json::json!([
            fees.mempoolminfee,
            fees.minrelaytxfee,
            fees.incrementalrelayfee
        ]),
        serde_json::json!([
            info["mempoolminfee"],
            info["minrelaytxfee"],
            info["incrementalrelayfee"]
        ]),
    );
    assert_ne!(fees.minrelaytxfee, fees.incrementalrelayfee);
    let rest = Arc::new(connect_with(&node, BlockSourceChoice::Auto, None).unwrap());
    assert_eq!(rest.block_source(), BlockSource::Rest);
    let rpc = Arc::new(connect(&node, BlockSourceChoice::Only(BlockSource::Rpc)).unwrap());
    let dirs = [(); 3].map(|()| tempfile::tempdir().unwrap());
    let over_files = index(Arc::clone(&files), dirs[0].path());
    let over_rest = index(Arc::clone(&rest), dirs[1].path());
    let over_rpc = index(Arc::clone(&rpc), dirs[2].path());
    assert_eq!(tip_of(&over_files), node.tip().unwrap());
    let digest = over_files.store().digest().unwrap();
    assert_eq!(
        digest,
        over_rest.store().digest().unwrap(),
        "Core's files and REST must give the same index"
    );
    assert_eq!(
        digest,
        over_rpc.store().digest().unwrap(),
        "Core's files and JSON-RPC must give the same index"
    );
    assert_transactions_match(&node, &over_files);
    assert_transactions_match(&node, &over_rest);

    // A reorg: the last two blocks replaced by three others, paying another
    // address (mined to the same one, the first would be the very block
    // just invalidated).
    let (tip, _) = node.tip().unwrap();
    node.invalidate_block(&node.block_hash(tip - 1).unwrap())
        .unwrap();
    let elsewhere = TestWallet::new().address(ScriptKind::P2tr).to_string();
    let _: Vec<BlockHash> = node
        .rpc()
        .call(
            "generatetoaddress",
            &[serde_json::json!(3), serde_json::json!(elsewhere)],
        )
        .unwrap();
    // Both the files (blocks appended since they were scanned, the stale
    // ones still in them) and REST follow it.
    for (query, source) in [(&over_files, &files), (&over_rest, &rest)] {
        Indexer::new(
            Arc::clone(query.store()),
            Arc::clone(source) as Arc<dyn ChainSource>,
            IndexerConfig::default(),
        )
        .sync(&mut |_| {})
        .unwrap();
        assert_eq!(tip_of(query), node.tip().unwrap());
    }
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = index(rpc, fresh_dir.path());
    let fresh = fresh.store().digest().unwrap();
    assert_eq!(
        over_files.store().digest().unwrap(),
        fresh,
        "after a reorg the index from the files must equal a fresh one"
    );
    assert_eq!(
        over_rest.store().digest().unwrap(),
        fresh,
        "after a reorg the index from REST must equal a fresh one"
    );
    assert_transactions_match(&node, &over_files);

    // The long poll: nothing new within 100 ms, then a block mined meanwhile.
    let (_, tip_hash) = node.tip().unwrap();
    assert!(!rest
        .wait_for_new_block(tip_hash, Duration::from_millis(100))
        .unwrap());
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            node.generate(1).unwrap();
        });
        assert!(rest
            .wait_for_new_block(tip_hash, Duration::from_secs(30))
            .unwrap());
    });
}

/// With REST off and no readable blocks directory, `auto` falls back to
/// JSON-RPC; asking for REST or the files is an error that says what is
/// missing; transactions still come back exact without a txindex
/// (`getrawtransaction` with the block hash).
#[test]
fn core_without_rest_indexes_over_rpc_and_serves_transactions_without_txindex() {
    let Some(node) = BitcoindNode::start_or_skip(&BitcoindOptions {
        rest: false,
        ..BitcoindOptions::default()
    }) else {
        return;
    };
    make_chain(&node);
    let err = connect(&node, BlockSourceChoice::Only(BlockSource::Rest))
        .err()
        .expect("REST is off");
    assert!(err.to_string().contains("-rest=1"), "{err}");
    let missing = tempfile::tempdir().unwrap();
    let err = connect_with(
        &node,
        BlockSourceChoice::Only(BlockSource::Files),
        Some(missing.path()),
    )
    .err()
    .expect("no block files there");
    assert!(err.to_string().contains("block source files"), "{err}");
    let daemon =
        Arc::new(connect_with(&node, BlockSourceChoice::Auto, Some(missing.path())).unwrap());
    assert_eq!(daemon.block_source(), BlockSource::Rpc);
    let dir = tempfile::tempdir().unwrap();
    let query = index(daemon, dir.path());
    assert_eq!(tip_of(&query), node.tip().unwrap());
    assert_transactions_match(&node, &query);
}

/// Cached statuses follow every change: a script's status is asked (and
/// cached) before each step, and after the step it is what the node's view
/// says: paid in the mempool, confirmed, back in the mempool after a reorg.
#[test]
fn cached_statuses_follow_the_mempool_blocks_and_reorgs() {
    let Some(node) = BitcoindNode::start_or_skip(&BitcoindOptions::default()) else {
        return;
    };
    let mut wallet = make_chain(&node);
    let daemon = Arc::new(connect(&node, BlockSourceChoice::Auto).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap());
    let query = Arc::new(Query::new(
        Arc::clone(&store),
        Arc::clone(&daemon) as Arc<dyn ChainSource>,
        QueryConfig::default(),
    ));
    let indexer = Indexer::new(store, daemon, IndexerConfig::default());
    let mut tracker = osprey_query::Tracker::new(indexer, Arc::clone(&query));
    tracker.update(&mut |_| {}).unwrap();

    let script = wallet.new_script(ScriptKind::P2wpkh);
    let sh = osprey_core::ScriptHash::from_script(script.as_bytes());
    let expect = |history: &[(bitcoin::Txid, i64)]| {
        osprey_core::StatusHash::of_history(history.iter().map(|(t, h)| (t, *h)))
    };
    assert_eq!(query.status(&sh).unwrap(), None);
    let tx = wallet.send(script, Amount::from_sat(123_456)).unwrap();
    let txid = node.send_raw_transaction(&tx).unwrap();
    tracker.update(&mut |_| {}).unwrap();
    assert_eq!(
        query.status(&sh).unwrap(),
        expect(&[(txid, 0)]),
        "in the mempool"
    );
    let histogram_vsize = |query: &Query| query.fee_histogram().iter().map(|b| b.1).sum::<u64>();
    assert_eq!(
        histogram_vsize(&query),
        tx.vsize() as u64,
        "in the histogram"
    );

    let block = node.generate(1).unwrap()[0];
    let (height, _) = node.tip().unwrap();
    tracker.update(&mut |_| {}).unwrap();
    assert_eq!(
        query.status(&sh).unwrap(),
        expect(&[(txid, i64::from(height))]),
        "confirmed"
    );
    assert!(node.mempool_txids().unwrap().is_empty());
    assert_eq!(
        query.fee_histogram(),
        vec![],
        "the block emptied the mempool: no stale histogram"
    );

    // The block undone, the node's tip is one lower and the payment is
    // back in its mempool.
    node.invalidate_block(&block).unwrap();
    tracker.update(&mut |_| {}).unwrap();
    assert_eq!(tip_of(&query), node.tip().unwrap());
    assert!(node.mempool_txids().unwrap().contains(&txid));
    assert_eq!(
        query.status(&sh).unwrap(),
        expect(&[(txid, 0)]),
        "back in the mempool after the reorg"
    );
    assert_eq!(histogram_vsize(&query), tx.vsize() as u64);
}

/// 1. Start bitcoind; a client logs in with the cookie it wrote.
/// 2. Kill and restart bitcoind: it writes a new cookie, and the client's
///    kept connection is gone.
/// 3. The same client answers again: it reads the new cookie on the 401.
#[test]
fn a_cookie_client_survives_a_restart_that_rotates_the_cookie() {
    // 1.
    let Some(mut node) = BitcoindNode::start_or_skip(&BitcoindOptions::default()) else {
        return;
    };
    let client = RpcClient::new(
        &node.rpc_addr().to_string(),
        Auth::CookieFile(node.cookie_file()),
    );
    let hash: String = client
        .call("getblockhash", &[serde_json::json!(0)])
        .expect("logged in with the cookie");
    let cookie = std::fs::read_to_string(node.cookie_file()).expect("the cookie");
    // 2.
    node.restart().expect("bitcoind restarts");
    let rotated = std::fs::read_to_string(node.cookie_file()).expect("the new cookie");
    assert_ne!(cookie, rotated, "a restart writes a new cookie");
    // 3.
    let again: String = client
        .call("getblockhash", &[serde_json::json!(0)])
        .expect("the client reads the new cookie");
    assert_eq!(again, hash);
}
