//! The binary against Bitcoin Core, run the way its users run it: no
//! `-txindex`, the cookie and the (XOR-obfuscated) block files found through
//! `--daemon-dir`, REST on or off. Each block source builds the same index;
//! an index built from Core's own files survives SIGKILLs, a reorg and a
//! restart, and answers exactly like the node.
//!
//! bitcoind is found through `$BITCOIND_EXE`, the PATH, then
//! `../shared/peers/bin`. Without one these tests say so loudly and pass,
//! except under CI (`CI` set), where a missing bitcoind fails them.

use std::str::FromStr;
use std::time::Duration;

use bitcoin::{Address, Amount, BlockHash};
use osprey_testenv::{BitcoindNode, BitcoindOptions, Node, ScriptKind, TestWallet};
use serde_json::json;

use crate::common::answers::{
    assert_answers_match_node, assert_chain_matches_node, assert_same_answers, collect_chain,
    wait_answers_match_node,
};
use crate::common::command::{generate_chain, submit_chain};
use crate::common::{
    collect_answers, scripthash, seed, wait_until, wallet_and_sampled_scripts, NodeView, Osprey,
    OspreyConfig, Rng, Session, SYNC_TIMEOUT,
};
use crate::kill9::{start_and_kill, KillAt};

/// Scripts besides the chaingen wallet's whose answers are compared.
const SAMPLE_SCRIPTS: usize = 100;

/// How long a server may take to show the node's mempool.
const SETTLE: Duration = Duration::from_secs(30);

/// Asserts that the server's startup lines name Bitcoin Core, the block
/// source it chose, and that no txindex is needed (the harness's Core has
/// none, as its users' need not).
fn assert_block_source(osprey: &Osprey, source: &str) {
    let log = osprey.log();
    for want in [
        "node: Bitcoin Core ".to_string(),
        format!("block source: {source}:"),
        "txindex: not needed (the node has none)".to_string(),
    ] {
        assert!(
            log.contains(&want),
            "osprey should have logged {want:?}; log:\n{}",
            osprey.log_tail(40)
        );
    }
}

/// 1. Generate a 2300-block chaingen chain and submit it to Core: its old
///    timestamps leave Core in initial block download. Osprey I indexes the
///    chain meanwhile and serves no wallet: its port answers what node
///    boxes ask during a first sync (StartOS's `server.banner`, Umbrel's
///    progress from `blockchain.headers.subscribe`), notifies the indexed
///    tip as it moves (20 blocks invalidated, then reconsidered), and
///    refuses a script question with the progress. Once one block more is
///    mined (Core leaves initial block download) it serves the tip.
/// 2. Osprey R indexes it over JSON-RPC, osprey T over REST.
/// 3. Osprey K (source `auto`: Core's files) is SIGKILLed several times
///    during its initial sync, at seeded moments and at commits, then
///    restarted to the tip.
/// 4. The chaingen wallet's answers on K equal the manifest's; for those
///    and a seeded sample of other scripts, K's answers equal the node's,
///    R's and T's; the headers too.
/// 5. A reorg: the last two blocks invalidated, three others mined (their
///    transactions go back to Core's mempool, and are mined again). All
///    three follow, and answer like the node.
/// 6. SIGTERM K, mine and pay while it is down, restart it: it catches up
///    from the files and answers like the node and R.
#[test]
fn core_files_index_survives_kills_a_reorg_and_a_restart() {
    let Some(node) = BitcoindNode::start_or_skip(&BitcoindOptions::default()) else {
        return;
    };
    let seed = seed("core");
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    // 1.
    let chain_seed = (seed % 1000).to_string();
    let (chain, manifest) = generate_chain(
        dir.path(),
        &[
            "--preset",
            "tiny",
            "--seed",
            &chain_seed,
            "--blocks",
            "2300",
        ],
    );
    submit_chain(dir.path(), &chain, &node);
    let mut during_ibd = Osprey::spawn(&node, &dir.path().join("db-ibd"), OspreyConfig::default());
    let indexed = format!("height={}", manifest.tip_height);
    wait_until(
        "osprey indexes during initial block download",
        SYNC_TIMEOUT,
        || {
            let log = during_ibd.log();
            log.lines()
                .any(|l| l.contains("node is in initial block download") && l.contains(&indexed))
                .then_some(())
        },
    );
    // The port is open: what node boxes read (the banner, the indexed
    // tip) is answered; what wallets ask gets the progress, not a
    // partial answer.
    during_ibd.wait_listening();
    let mut early = during_ibd.session();
    early.negotiate(json!("1.4"));
    early.call("server.banner", json!([]));
    let tip = early.call("blockchain.headers.subscribe", json!([]));
    assert_eq!(tip["height"], json!(manifest.tip_height), "the indexed tip");
    let balance = json!([manifest.wallet.addresses[0].scripthash]);
    let progress = format!(
        "indexing: height {} of {}",
        manifest.tip_height, manifest.tip_height
    );
    let assert_refused = |session: &mut Session| {
        let refused = session.call_err("blockchain.scripthash.get_balance", balance.clone());
        assert_eq!(
            refused.code, -32603,
            "electrs' code for an unavailable index"
        );
        assert!(
            refused.message.contains(&progress),
            "{refused:?} should say {progress:?}"
        );
    };
    assert_refused(&mut early);
    // The index's tip is notified as it moves while wallets wait: 20
    // blocks undone on the node and done again (Core stays in initial
    // block download: its tip is still old).
    let back = manifest.tip_height - 20;
    let hash: String = node
        .rpc()
        .call("getblockhash", &[json!(back + 1)])
        .expect("getblockhash");
    node.rpc()
        .call::<serde_json::Value>("invalidateblock", &[json!(hash)])
        .expect("invalidateblock");
    let moved = early.wait_notification("blockchain.headers.subscribe", SYNC_TIMEOUT);
    assert_eq!(moved["params"][0]["height"], json!(back));
    node.rpc()
        .call::<serde_json::Value>("reconsiderblock", &[json!(hash)])
        .expect("reconsiderblock");
    // Each commit's tip, rising, up to the node's.
    let mut last = back;
    while last < manifest.tip_height {
        let moved = early.wait_notification("blockchain.headers.subscribe", SYNC_TIMEOUT);
        let height = moved["params"][0]["height"]
            .as_u64()
            .and_then(|h| u32::try_from(h).ok())
            .expect("a height");
        assert!(
            height > last && height <= manifest.tip_height,
            "{height} after {last}"
        );
        last = height;
    }
    // The node is still in initial block download.
    assert_refused(&mut early);
    node.generate(1)
        .expect("mining past initial block download");
    // The subscriber of the first sync is told of the new tip.
    let header = early.wait_notification("blockchain.headers.subscribe", SYNC_TIMEOUT);
    assert_eq!(
        header["params"][0]["height"],
        json!(manifest.tip_height + 1)
    );
    during_ibd.wait_ready(&node);
    early.call("blockchain.scripthash.get_balance", balance);
    drop(during_ibd);
    // 2.
    let mut over_rpc = Osprey::spawn(
        &node,
        &dir.path().join("db-rpc"),
        OspreyConfig::with_args(&["--block-source", "rpc"]),
    );
    let mut over_rest = Osprey::spawn(
        &node,
        &dir.path().join("db-rest"),
        OspreyConfig::with_args(&["--block-source", "rest"]),
    );
    // 3.
    let db = dir.path().join("db-files");
    let jitter =
        |rng: &mut Rng, ms: u64| KillAt::After(Duration::from_millis(ms + rng.below(ms / 2 + 1)));
    for when in [
        jitter(&mut rng, 100),
        KillAt::Commit,
        jitter(&mut rng, 400),
        KillAt::Commit,
    ] {
        start_and_kill(&node, &db, &OspreyConfig::default(), when);
    }
    let mut files = Osprey::spawn(&node, &db, OspreyConfig::default());
    files.wait_ready(&node);
    over_rpc.wait_ready(&node);
    over_rest.wait_ready(&node);
    assert_block_source(&files, "files");
    assert_block_source(&over_rest, "rest");
    assert_block_source(&over_rpc, "rpc");
    // 4.
    let mut session = files.session();
    session.negotiate(json!("1.4"));
    for address in &manifest.wallet.addresses {
        let history = session.call(
            "blockchain.scripthash.get_history",
            json!([address.scripthash]),
        );
        let want: Vec<serde_json::Value> = address
            .history
            .iter()
            .map(|(txid, height)| json!({"tx_hash": txid, "height": height}))
            .collect();
        assert_eq!(history, json!(want), "history of {}", address.address);
    }
    let view = NodeView::load(&node);
    let scripts = wallet_and_sampled_scripts(&manifest, &view, &mut rng, SAMPLE_SCRIPTS);
    let scripthashes: Vec<String> = scripts.iter().map(|s| scripthash(s)).collect();
    let answers = collect_answers(files.addr(), &scripthashes);
    assert_answers_match_node(
        "osprey from Core's files, killed",
        &answers,
        &view,
        &scripts,
    );
    for (what, other) in [("over JSON-RPC", &over_rpc), ("over REST", &over_rest)] {
        assert_same_answers(
            &format!("from the files vs {what}"),
            &answers,
            &collect_answers(other.addr(), &scripthashes),
        );
    }
    let chain_answers = collect_chain(files.addr());
    assert_chain_matches_node("osprey from Core's files", &chain_answers, &view);
    assert_eq!(chain_answers, collect_chain(over_rpc.addr()), "headers");

    // 5.
    let (tip, _) = node.tip().expect("tip");
    node.invalidate_block(&node.block_hash(tip - 1).expect("block hash"))
        .expect("invalidateblock");
    let elsewhere = TestWallet::new().address(ScriptKind::P2tr).to_string();
    let mined: Vec<BlockHash> = node
        .rpc()
        .call("generatetoaddress", &[json!(3), json!(elsewhere)])
        .expect("mining a longer branch");
    assert_eq!(mined.len(), 3);
    for server in [&mut files, &mut over_rpc, &mut over_rest] {
        server.wait_synced(&node);
    }
    let view = NodeView::load(&node);
    let mut reorg_scripts = scripts.clone();
    reorg_scripts.push(
        Address::from_str(&elsewhere)
            .expect("address")
            .assume_checked()
            .script_pubkey(),
    );
    let after_reorg = wait_answers_match_node(
        "files, after the reorg",
        files.addr(),
        &view,
        &reorg_scripts,
        SETTLE,
    );
    for (what, other) in [("JSON-RPC", &over_rpc), ("REST", &over_rest)] {
        let theirs = wait_answers_match_node(what, other.addr(), &view, &reorg_scripts, SETTLE);
        assert_same_answers(
            &format!("files vs {what} after the reorg"),
            &after_reorg,
            &theirs,
        );
    }

    // 6.
    let status = files.terminate();
    assert!(status.success(), "osprey exited with {status} on SIGTERM");
    let mut wallet = TestWallet::new();
    node.generate(101).expect("mining to the test wallet's key");
    wallet.sync(&node).expect("wallet sync");
    let paid: Vec<_> = ScriptKind::ALL
        .iter()
        // Regtest halves the subsidy every 150 blocks: coinbases are small
        // this high.
        .map(|k| (wallet.new_script(*k), Amount::from_sat(20_000)))
        .collect();
    let tx = wallet.send_many(&paid).expect("a payment to every kind");
    node.send_raw_transaction(&tx).expect("broadcast");
    node.generate(1).expect("mining the payment");
    let files = Osprey::start(&node, &db, OspreyConfig::default());
    over_rpc.wait_synced(&node);
    let view = NodeView::load(&node);
    let mut scripts = reorg_scripts;
    scripts.extend(paid.into_iter().map(|(script, _)| script));
    let restarted =
        wait_answers_match_node("files, restarted", files.addr(), &view, &scripts, SETTLE);
    let reference = wait_answers_match_node("JSON-RPC", over_rpc.addr(), &view, &scripts, SETTLE);
    assert_same_answers(
        "restarted from the files vs JSON-RPC",
        &restarted,
        &reference,
    );
    assert_chain_matches_node(
        "restarted from the files",
        &collect_chain(files.addr()),
        &view,
    );
}

/// With REST off: `auto` still reads Core's files; `--block-source rest`
/// stops with an error that says how to turn REST on; `--block-source rpc`
/// indexes over JSON-RPC (no txindex). Both servers answer like the node,
/// transactions included.
#[test]
fn core_without_rest_reads_its_files_or_json_rpc() {
    let Some(node) = BitcoindNode::start_or_skip(&BitcoindOptions {
        rest: false,
        ..BitcoindOptions::default()
    }) else {
        return;
    };
    let mut wallet = TestWallet::new();
    node.generate(110).expect("mining to the test wallet's key");
    wallet.sync(&node).expect("wallet sync");
    for round in 0..3u64 {
        let outputs: Vec<_> = ScriptKind::ALL
            .iter()
            .map(|k| (wallet.new_script(*k), Amount::from_sat(600_000 + round)))
            .collect();
        let tx = wallet.send_many(&outputs).expect("a payment");
        node.send_raw_transaction(&tx).expect("broadcast");
        node.generate(1).expect("mining");
        wallet.sync(&node).expect("wallet sync");
    }
    let dir = tempfile::tempdir().expect("tempdir");

    let mut refused = Osprey::spawn(
        &node,
        &dir.path().join("db-rest"),
        OspreyConfig::with_args(&["--block-source", "rest"]),
    );
    let status = refused
        .wait_exit(SYNC_TIMEOUT)
        .expect("osprey stops when REST is asked for and off");
    assert!(!status.success(), "exit status {status}");
    assert!(
        refused.log().contains("-rest=1"),
        "the error says how to turn REST on; log:\n{}",
        refused.log_tail(20)
    );

    let files = Osprey::start(&node, &dir.path().join("db-files"), OspreyConfig::default());
    let over_rpc = Osprey::start(
        &node,
        &dir.path().join("db-rpc"),
        OspreyConfig::with_args(&["--block-source", "rpc"]),
    );
    assert_block_source(&files, "files");
    assert_block_source(&over_rpc, "rpc");
    // Batches take fewer threads when transactions cost no round trip.
    for (server, from) in [(&files, "local files"), (&over_rpc, "the node")] {
        let want = format!("requests at once (transactions from {from})");
        assert!(
            server.log().contains(&want),
            "osprey should have logged {want:?}; log:\n{}",
            server.log_tail(40)
        );
    }
    let view = NodeView::load(&node);
    let scripts = view.scripts();
    let from_files = wait_answers_match_node("files", files.addr(), &view, &scripts, SETTLE);
    let from_rpc = wait_answers_match_node("JSON-RPC", over_rpc.addr(), &view, &scripts, SETTLE);
    assert_same_answers("files vs JSON-RPC", &from_files, &from_rpc);
    assert_answers_match_node("files", &from_files, &view, &scripts);
    // Transactions, confirmed ones without a txindex: from the files, and
    // from getrawtransaction with the block hash.
    let (tip, _) = node.tip().expect("tip");
    for height in tip - 3..=tip {
        let block = node
            .get_block(&node.block_hash(height).expect("hash"))
            .expect("block");
        for tx in &block.txdata {
            let txid = tx.compute_txid().to_string();
            let want = json!(hex::encode(bitcoin::consensus::serialize(tx)));
            for server in [&files, &over_rpc] {
                let mut session = server.session();
                session.negotiate(json!("1.4"));
                assert_eq!(
                    session.call("blockchain.transaction.get", json!([txid])),
                    want,
                    "transaction {txid} of block {height} from {}",
                    server.addr()
                );
            }
        }
    }
}
