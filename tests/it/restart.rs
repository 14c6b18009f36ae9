//! A clean stop (SIGTERM) and a restart on the same index, after the chain
//! moved on while Osprey was down: the restarted server catches up and
//! answers exactly like a fresh index of the same chain, and like the node.
//! A SIGTERM during the initial sync is honoured promptly.

use std::time::Duration;

use bitcoin::Amount;
use osprey_testenv::{mining_address, Node, ScriptKind, TestWallet};

use crate::common::answers::{
    assert_chain_matches_node, assert_same_answers, collect_chain, wait_answers_match_node,
};
use crate::common::command::{generate_chain, submit_chain};
use crate::common::{start_btcd, NodeView, Osprey, OspreyConfig, SYNC_TIMEOUT};

/// How long a server may take to show the node's mempool.
const SETTLE: Duration = Duration::from_secs(30);

/// Pays a fresh script of each kind from the wallet, one transaction each.
fn pay_each_kind(node: &dyn Node, wallet: &mut TestWallet, sats: u64) {
    for kind in ScriptKind::ALL {
        let script = wallet.new_script(kind);
        let tx = wallet
            .send(script, Amount::from_sat(sats))
            .expect("a payment");
        node.send_raw_transaction(&tx).expect("broadcast");
    }
}

/// 1. Start btcd and mine 440 blocks (past segwit activation), pay a script
///    of each kind and mine it.
/// 2. Start osprey A on a fresh --db-dir; it serves the tip.
/// 3. SIGTERM: A exits cleanly (status 0) within 30 s.
/// 4. While A is down: mine 20 blocks, pay scripts of each kind and mine
///    them, spend some of the earlier coins, leave payments in the mempool.
/// 5. Restart A on the same --db-dir: it catches up to the node's tip.
/// 6. Start osprey B on an empty --db-dir.
/// 7. For every script the node knows: A's answers equal the node's and
///    B's, exactly; so do the headers.
#[test]
fn restart_after_sigterm_equals_a_fresh_index() {
    // 1.
    let node = start_btcd();
    node.generate(440).expect("mining");
    let mut wallet = TestWallet::new();
    wallet.sync(&node).expect("wallet sync");
    pay_each_kind(&node, &mut wallet, 2_000_000);
    node.generate(1).expect("mining");
    wallet.sync(&node).expect("wallet sync");
    // 2.
    let dir = tempfile::tempdir().expect("tempdir");
    let db_a = dir.path().join("db-a");
    let mut osprey_a = Osprey::start(&node, &db_a, OspreyConfig::default());
    // 3.
    let status = osprey_a.terminate();
    assert!(status.success(), "osprey exited with {status} on SIGTERM");
    // 4.
    node.generate(20).expect("mining while osprey is down");
    wallet.sync(&node).expect("wallet sync");
    pay_each_kind(&node, &mut wallet, 1_000_000);
    node.generate(1).expect("mining");
    wallet.sync(&node).expect("wallet sync");
    // Spend coins the wallet got before the stop, then leave a chain of two
    // payments in the mempool.
    let early: Vec<_> = wallet
        .coins()
        .filter(|c| !c.coinbase && c.spend.txout.value == Amount::from_sat(2_000_000))
        .map(|c| c.outpoint)
        .take(3)
        .collect();
    assert_eq!(early.len(), 3, "coins paid before the stop");
    let target = wallet.new_script(ScriptKind::P2tr);
    let tx = wallet
        .spend(&early, &[(target.clone(), Amount::from_sat(5_000_000))])
        .expect("spending early coins");
    node.send_raw_transaction(&tx).expect("broadcast");
    node.generate(1).expect("mining");
    wallet.sync(&node).expect("wallet sync");
    pay_each_kind(&node, &mut wallet, 300_000);
    // 5.
    let osprey_a = Osprey::start(&node, &db_a, OspreyConfig::default());
    // 6.
    let osprey_b = Osprey::start(&node, &dir.path().join("db-b"), OspreyConfig::default());
    // 7.
    let view = NodeView::load(&node);
    assert!(
        view.mempool().count() >= 5,
        "payments are waiting in the mempool"
    );
    let scripts = view.scripts();
    assert!(scripts.contains(&mining_address().script_pubkey()));
    let answers_a = wait_answers_match_node(
        "restarted osprey A",
        osprey_a.addr(),
        &view,
        &scripts,
        SETTLE,
    );
    let answers_b =
        wait_answers_match_node("fresh osprey B", osprey_b.addr(), &view, &scripts, SETTLE);
    assert_same_answers(
        "restarted osprey A vs fresh osprey B",
        &answers_a,
        &answers_b,
    );
    let chain_a = collect_chain(osprey_a.addr());
    assert_chain_matches_node("restarted osprey A", &chain_a, &view);
    assert_eq!(
        chain_a,
        collect_chain(osprey_b.addr()),
        "headers of A and B"
    );
}

/// 1. Generate a 2300-block chain with `osprey chaingen --preset tiny
///    --blocks 2300` and submit it to btcd: the initial sync takes over a
///    second and two batches.
/// 2. Start osprey; send SIGTERM as soon as it logs its first progress
///    line ("indexed height H of 2300", H below the tip): it is indexing
///    then, whatever the machine's speed.
/// 3. It exits cleanly (status 0) without indexing on to the tip: a stop
///    request is honoured during the initial sync, not only once it is over
///    (on mainnet that takes hours, and a service manager would SIGKILL it).
/// 4. Restarted on the same --db-dir, it finishes the sync; its answers
///    about the chaingen wallet equal the manifest's.
#[test]
fn sigterm_during_initial_sync_stops_promptly() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 1.
    let (chain, manifest) = generate_chain(
        dir.path(),
        &["--preset", "tiny", "--seed", "3", "--blocks", "2300"],
    );
    let node = start_btcd();
    submit_chain(dir.path(), &chain, &node);
    // 2.
    let db = dir.path().join("db");
    let mut osprey = Osprey::spawn(&node, &db, OspreyConfig::default());
    let marker = osprey.log().len();
    let of_tip = format!(" of {} (", manifest.tip_height);
    let progress = osprey.wait_log_line("the first progress line", SYNC_TIMEOUT, |line| {
        line.contains("indexed height ") && line.contains(&of_tip)
    });
    let tip_line = format!("indexed height {}{of_tip}", manifest.tip_height);
    assert!(
        !progress.contains(&tip_line),
        "the first batch reached the tip, leaving no sync to interrupt (a longer chain is needed): {progress}"
    );
    let sent_at = osprey.uptime();
    // 3.
    let status = osprey.terminate();
    let stopped_at = osprey.uptime();
    let log = osprey.log();
    let after = &log[marker.min(log.len())..];
    eprintln!("SIGTERM at {sent_at:?} after {progress:?}, exited at {stopped_at:?} with {status}");
    assert!(status.success(), "osprey exited with {status} on SIGTERM");
    assert!(
        !after.contains(&tip_line),
        "after SIGTERM at {sent_at:?} osprey went on indexing to the tip and exited only at {stopped_at:?}"
    );
    // 4.
    let osprey = Osprey::start(&node, &db, OspreyConfig::default());
    let mut session = osprey.session();
    session.negotiate(serde_json::json!("1.4"));
    for address in &manifest.wallet.addresses {
        let history = session.call(
            "blockchain.scripthash.get_history",
            serde_json::json!([address.scripthash]),
        );
        let want: Vec<serde_json::Value> = address
            .history
            .iter()
            .map(|(txid, height)| serde_json::json!({"tx_hash": txid, "height": height}))
            .collect();
        assert_eq!(
            history,
            serde_json::Value::Array(want),
            "history of {}",
            address.address
        );
    }
}
