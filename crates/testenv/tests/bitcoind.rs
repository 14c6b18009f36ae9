//! Osprey's node client and indexer against a real Bitcoin Core in regtest,
//! run the way users run it: no `-txindex`, cookie authentication, block
//! files XOR-obfuscated (Core's default), REST on or off. In process: the
//! chain source, the indexer, the store and the query layer, with every
//! answer compared with what the node itself says.
//!
//! bitcoind is found through `$BITCOIND_EXE`, the PATH, then
//! `../shared/peers/bin`. Without one the tests say so loudly and pass,
//! except under CI (`CI` set), where a missing bitcoind fails them.

#![allow(clippy::print_stderr)]

use bitcoin::consensus::serialize;
use bitcoin::{Amount, BlockHash};
use osprey_chain::rpc::Auth;
use osprey_chain::{BlockSource, BlockSourceChoice, ChainSource, Daemon};
use osprey_core::Network;
use osprey_indexer::{Indexer, IndexerConfig};
use osprey_query::{Query, QueryConfig};
use osprey_store::{Store, StoreConfig};
use osprey_testenv::{BitcoindNode, BitcoindOptions, Node, ScriptKind, TestWallet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A node, or `None` (after a loud line) when no bitcoind is installed.
fn start(options: &BitcoindOptions) -> Option<BitcoindNode> {
    if let Err(e) = BitcoindNode::find() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the Bitcoin Core tests: {e:#}"
        );
        eprintln!("SKIPPING the Bitcoin Core tests, no bitcoind: {e:#}");
        return None;
    }
    Some(BitcoindNode::start_with(options).expect("bitcoind starts"))
}

/// Connects like `osprey serve --daemon-dir`: with the cookie Core wrote.
fn connect(node: &BitcoindNode, choice: BlockSourceChoice) -> Result<Daemon, osprey_chain::Error> {
    let mut daemon = Daemon::connect(
        &node.rpc_addr().to_string(),
        Auth::CookieFile(node.cookie_file()),
        Network::Regtest,
    )?;
    daemon.use_block_source(choice)?;
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

/// With REST on, `auto` picks REST; REST and JSON-RPC build byte-identical
/// indexes; transactions come back exact (REST blockpart); after a reorg
/// the index equals a fresh one of the new chain; the long poll for new
/// blocks times out quietly and wakes on a block.
#[test]
fn core_over_rest_and_rpc_builds_the_same_index_and_follows_a_reorg() {
    let Some(node) = start(&BitcoindOptions { rest: true }) else {
        return;
    };
    make_chain(&node);
    let rest = Arc::new(connect(&node, BlockSourceChoice::Auto).unwrap());
    assert_eq!(rest.block_source(), BlockSource::Rest);
    let rpc = Arc::new(connect(&node, BlockSourceChoice::Only(BlockSource::Rpc)).unwrap());
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let over_rest = index(Arc::clone(&rest), dirs[0].path());
    let over_rpc = index(rpc, dirs[1].path());
    assert_eq!(tip_of(&over_rest), node.tip().unwrap());
    assert_eq!(
        over_rest.store().digest().unwrap(),
        over_rpc.store().digest().unwrap(),
        "REST and JSON-RPC must give the same index"
    );
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
    Indexer::new(
        Arc::clone(over_rest.store()),
        Arc::clone(&rest) as Arc<dyn ChainSource>,
        IndexerConfig::default(),
    )
    .sync(&mut |_| {})
    .unwrap();
    assert_eq!(tip_of(&over_rest), node.tip().unwrap());
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = index(Arc::clone(&rest), fresh_dir.path());
    assert_eq!(
        over_rest.store().digest().unwrap(),
        fresh.store().digest().unwrap(),
        "after a reorg the index must equal a fresh one"
    );

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

/// With REST off, `auto` falls back to JSON-RPC, asking for REST is an
/// error that says how to turn it on, and transactions still come back
/// exact without a txindex (`getrawtransaction` with the block hash).
#[test]
fn core_without_rest_indexes_over_rpc_and_serves_transactions_without_txindex() {
    let Some(node) = start(&BitcoindOptions { rest: false }) else {
        return;
    };
    make_chain(&node);
    let err = connect(&node, BlockSourceChoice::Only(BlockSource::Rest))
        .err()
        .expect("REST is off");
    assert!(err.to_string().contains("-rest=1"), "{err}");
    let daemon = Arc::new(connect(&node, BlockSourceChoice::Auto).unwrap());
    assert_eq!(daemon.block_source(), BlockSource::Rpc);
    let dir = tempfile::tempdir().unwrap();
    let query = index(daemon, dir.path());
    assert_eq!(tip_of(&query), node.tip().unwrap());
    assert_transactions_match(&node, &query);
}
