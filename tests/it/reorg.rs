//! A reorg on the real node (`invalidateblock`, then a longer branch that
//! double-spends a transaction of the old one): Osprey follows it, its
//! answers equal the node's view, a subscribed client is told the new
//! status, and every answer equals that of a fresh index of the new chain.

use std::collections::HashSet;
use std::time::Duration;

use bitcoin::hashes::Hash;
use bitcoin::{Amount, ScriptBuf};
use osprey_testenv::{mining_address, Node, ScriptKind, TestWallet};
use serde_json::json;

use crate::common::answers::{
    assert_chain_matches_node, assert_same_answers, collect_chain, wait_answers_match_node,
};
use crate::common::command::{index_digest, sp_record_bytes};
use crate::common::merkle::{root, to_display_hex};
use crate::common::oracle::confirmed_height_by_rpc;
use crate::common::{
    collect_answers, scripthash, start_btcd, wait_until, NodeView, Osprey, OspreyConfig,
    SYNC_TIMEOUT,
};
use osprey_testenv::{burn_script, submit_block_on};

/// Every output script the node knows of now, plus `extra`, deduplicated.
fn scripts_of(view: &NodeView, extra: &[ScriptBuf]) -> Vec<ScriptBuf> {
    let mut seen = HashSet::new();
    view.scripts()
        .into_iter()
        .chain(extra.iter().cloned())
        .filter(|s| seen.insert(s.clone()))
        .collect()
}

/// 1. Start btcd, mine 110 blocks (mature coinbases, segwit not active:
///    blocks built by the test need no witness commitment).
/// 2. Start osprey A.
/// 3. Block N confirms tx1 (pays script S1), block N+1 confirms tx2 (pays
///    S2), block N+2 is empty; A shows S1 at height N (as the node says).
/// 4. Subscribe S1 and S2 on A.
/// 5. `invalidateblock` N: the node's tip is N-1; its mempool holds
///    whatever it put back.
/// 6. A block built by the test at N spends tx1's input to an untracked
///    script instead (a double spend); the node mines three more on it:
///    the new branch (tip N+3) is longer than the old (N+2).
/// 7. A follows to the new tip; S1's history, status and balance equal the
///    node's (tx1 is gone for good); S2's equal the node's too (tx2 back in
///    the mempool or mined again, whatever the node did).
/// 8. The S1 subscription gets a notification with the node's new status,
///    the headers subscription one with the new tip.
/// 9. Every answer of A about every script of both branches, and every
///    header, equals the node's view and a fresh osprey B's on an empty
///    --db-dir.
/// 10. Back again: `reconsiderblock` N (the old branch is shorter: nothing
///     moves), `invalidateblock` the test's block: the node returns to the
///     old branch (tx1 confirmed at N again). A and B follow; both equal the
///     node's view and a fresh osprey C.
#[test]
fn reorg_answers_equal_the_nodes_and_a_fresh_index() {
    reorg_case(false);
}

/// The same with silent payments on: tx1, tx2 and the double spend also pay
/// a taproot output from their P2PKH inputs (eligible transactions, so the
/// undone and the new blocks have records), and at the end A's index,
/// records included, has the digest of fresh C's.
#[test]
fn reorg_with_silent_payments_equals_a_fresh_index() {
    reorg_case(true);
}

fn reorg_case(silent_payments: bool) {
    let config = if silent_payments {
        OspreyConfig::with_args(&["--silent-payments"])
    } else {
        OspreyConfig::default()
    };
    // With silent payments, each transaction also pays a taproot output.
    let taproot_change = |wallet: &mut TestWallet| {
        silent_payments.then(|| {
            (
                wallet.new_script(ScriptKind::P2tr),
                Amount::from_sat(20_000),
            )
        })
    };
    // 1.
    let node = start_btcd();
    node.generate(110).expect("mining");
    let mut wallet = TestWallet::new();
    wallet.sync(&node).expect("wallet sync");
    // 2.
    let dir = tempfile::tempdir().expect("tempdir");
    let db_a = dir.path().join("db-a");
    let osprey_a = Osprey::start(&node, &db_a, config.clone());
    // 3.
    let s1 = wallet.new_script(ScriptKind::P2wpkh);
    let s2 = wallet.new_script(ScriptKind::P2pkh);
    let outputs: Vec<_> = [(s1.clone(), Amount::from_sat(1_500_000))]
        .into_iter()
        .chain(taproot_change(&mut wallet))
        .collect();
    let tx1 = wallet.send_many(&outputs).expect("tx1");
    node.send_raw_transaction(&tx1).expect("broadcast tx1");
    let block_n = node.generate(1).expect("mining block N")[0];
    let (height_n, _) = node.tip().expect("tip");
    wallet.sync(&node).expect("wallet sync");
    let outputs: Vec<_> = [(s2.clone(), Amount::from_sat(700_000))]
        .into_iter()
        .chain(taproot_change(&mut wallet))
        .collect();
    let tx2 = wallet.send_many(&outputs).expect("tx2");
    node.send_raw_transaction(&tx2).expect("broadcast tx2");
    node.generate(2).expect("mining N+1, N+2");
    let txid1 = tx1.compute_txid();
    assert_eq!(confirmed_height_by_rpc(&node, &txid1), Some(height_n));
    let mut osprey_a = osprey_a;
    osprey_a.wait_synced(&node);
    let old_view = NodeView::load(&node);
    let mut session = osprey_a.session();
    session.negotiate(json!("1.6"));
    let sh1 = scripthash(&s1);
    let sh2 = scripthash(&s2);
    wait_until("osprey A shows tx1 confirmed", SYNC_TIMEOUT, || {
        (session.call("blockchain.scripthash.get_history", json!([sh1]))
            == old_view.history_json(&s1))
        .then_some(())
    });
    // 4.
    let old_status = session.call("blockchain.scripthash.subscribe", json!([sh1]));
    assert_eq!(old_status, old_view.status(&s1));
    session.call("blockchain.scripthash.subscribe", json!([sh2]));
    session.call("blockchain.headers.subscribe", json!([]));
    // A header proof to the old tip, which the reorg replaces: its root
    // must then change.
    let checkpoint = height_n + 2;
    let root_of = |view: &NodeView| {
        let leaves: Vec<[u8; 32]> = view.block_hashes[..=checkpoint as usize]
            .iter()
            .map(|h| h.to_byte_array())
            .collect();
        json!(to_display_hex(root(&leaves)))
    };
    let old_proof = session.call("blockchain.block.header", json!([0, checkpoint]));
    assert_eq!(old_proof["root"], root_of(&old_view), "{old_proof}");

    // 5.
    node.invalidate_block(&block_n).expect("invalidateblock");
    let (tip, parent) = node.tip().expect("tip");
    assert_eq!(tip, height_n - 1, "invalidateblock N leaves the tip at N-1");
    eprintln!(
        "after invalidateblock the node's mempool holds {:?}",
        node.mempool_txids().expect("mempool")
    );
    // 6.
    let mut other = TestWallet::new();
    other.sync(&node).expect("wallet sync");
    let spent = tx1.input[0].previous_output;
    let outputs: Vec<_> = [(burn_script(7), Amount::from_sat(1_000_000))]
        .into_iter()
        .chain(taproot_change(&mut other))
        .collect();
    let double_spend = other
        .spend(&[spent], &outputs)
        .expect("a double spend of tx1");
    let new_block_n = submit_block_on(&node, parent, vec![double_spend.clone()], 1).block_hash();
    node.generate(3).expect("mining the new branch");
    let (new_tip, _) = node.tip().expect("tip");
    assert_eq!(new_tip, height_n + 3, "the new branch is longer");
    assert_eq!(
        confirmed_height_by_rpc(&node, &double_spend.compute_txid()),
        Some(height_n),
        "the double spend is at N"
    );
    assert!(
        node.get_raw_transaction_verbose(&txid1).is_err(),
        "the node forgot tx1"
    );

    // 7.
    osprey_a.wait_synced(&node);
    let view = NodeView::load(&node);
    assert!(
        view.history(&s1).is_empty(),
        "the node's S1 history is empty after the double spend"
    );
    let scripts = scripts_of(
        &view,
        &scripts_of(
            &old_view,
            &[s1.clone(), s2.clone(), mining_address().script_pubkey()],
        ),
    );
    let scripthashes: Vec<String> = scripts.iter().map(|s| scripthash(s)).collect();
    let answers_a = wait_answers_match_node(
        "osprey A after the reorg",
        osprey_a.addr(),
        &view,
        &scripts,
        SYNC_TIMEOUT,
    );
    assert_chain_matches_node(
        "osprey A after the reorg",
        &collect_chain(osprey_a.addr()),
        &view,
    );
    let new_proof = session.call("blockchain.block.header", json!([0, checkpoint]));
    assert_eq!(
        new_proof["root"],
        root_of(&view),
        "a checkpoint proof after the reorg is of the new chain"
    );
    assert_ne!(new_proof["root"], old_proof["root"]);

    // 8.
    let want = view.status(&s1);
    assert_ne!(want, old_status);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let n = session.wait_notification("blockchain.scripthash.subscribe", left);
        if n["params"] == json!([sh1, want]) {
            break;
        }
        eprintln!("other notification while waiting for S1's new status: {n}");
    }

    let tip = json!({"height": view.tip_height, "hex": view.headers[view.tip_height as usize]});
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let n = session.wait_notification("blockchain.headers.subscribe", left);
        if n["params"] == json!([tip]) {
            break;
        }
        eprintln!("headers notification before the new tip: {n}");
    }

    // 9.
    let mut osprey_b = Osprey::start(&node, &dir.path().join("db-b"), config.clone());
    let answers_b = collect_answers(osprey_b.addr(), &scripthashes);
    assert_same_answers("reorged osprey A vs fresh osprey B", &answers_a, &answers_b);
    assert_eq!(
        collect_chain(osprey_a.addr()),
        collect_chain(osprey_b.addr()),
        "headers of A and B"
    );

    // 10.
    node.reconsider_block(&block_n).expect("reconsiderblock");
    assert_eq!(
        node.tip().expect("tip").0,
        height_n + 3,
        "the shorter old branch does not win"
    );
    node.invalidate_block(&new_block_n)
        .expect("invalidateblock");
    assert_eq!(
        node.tip().expect("tip").0,
        height_n + 2,
        "back on the old branch"
    );
    assert_eq!(
        confirmed_height_by_rpc(&node, &txid1),
        Some(height_n),
        "tx1 confirmed again"
    );
    osprey_a.wait_synced(&node);
    osprey_b.wait_synced(&node);
    let back = NodeView::load(&node);
    let scripts = scripts_of(&back, &scripts);
    let scripthashes: Vec<String> = scripts.iter().map(|s| scripthash(s)).collect();
    let answers_a = wait_answers_match_node(
        "osprey A back on the old branch",
        osprey_a.addr(),
        &back,
        &scripts,
        SYNC_TIMEOUT,
    );
    let answers_b = wait_answers_match_node(
        "osprey B back on the old branch",
        osprey_b.addr(),
        &back,
        &scripts,
        SYNC_TIMEOUT,
    );
    assert_same_answers("A vs B back on the old branch", &answers_a, &answers_b);
    let db_c = dir.path().join("db-c");
    let mut osprey_c = Osprey::start(&node, &db_c, config.clone());
    let answers_c = collect_answers(osprey_c.addr(), &scripthashes);
    assert_same_answers(
        "A vs fresh osprey C on the old branch",
        &answers_a,
        &answers_c,
    );
    let chain = collect_chain(osprey_a.addr());
    assert_chain_matches_node("osprey A back on the old branch", &chain, &back);
    assert_eq!(chain, collect_chain(osprey_c.addr()), "headers of A and C");
    if silent_payments {
        assert!(
            sp_record_bytes(&db_a) > 0,
            "the chain has eligible transactions"
        );
        osprey_a.terminate();
        osprey_c.terminate();
        let digests =
            [&db_a, &db_c].map(|db| index_digest(&node, dir.path(), db, &["--silent-payments"]));
        assert_eq!(
            digests[0], digests[1],
            "reorged A and fresh C, silent-payment records included"
        );
    }
}

/// 1. Start btcd and mine 110 blocks.
/// 2. Start osprey with --reorg-depth-max 2 (undo data for two blocks).
/// 3. Invalidate the block 4 below the tip and mine 6 blocks: a reorg of 5
///    blocks, deeper than Osprey can undo.
/// 4. Osprey never serves the stale branch as current: it stops with an
///    error that names --reindex (the documented way out), within 60 s.
/// 5. Restarted with --reindex on the same --db-dir, it serves the new
///    chain: headers and every script's answers equal the node's.
#[test]
fn reorg_deeper_than_the_undo_limit_stops_and_reindex_recovers() {
    // 1.
    let node = start_btcd();
    node.generate(110).expect("mining");
    // 2.
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let mut osprey = Osprey::start(
        &node,
        &db,
        OspreyConfig::with_args(&["--reorg-depth-max", "2"]),
    );
    // 3.
    let (tip, _) = node.tip().expect("tip");
    node.invalidate_block(&node.block_hash(tip - 4).expect("block hash"))
        .expect("invalidateblock");
    node.generate(6).expect("mining the new branch");
    // 4.
    let status = osprey.wait_exit(Duration::from_secs(60));
    let Some(status) = status else {
        let served = crate::common::answers::collect_chain(osprey.addr()).tip;
        panic!("osprey still runs 60 s after a reorg deeper than --reorg-depth-max; it serves tip {served}");
    };
    assert!(
        !status.success(),
        "osprey exited with {status} after a reorg it cannot undo"
    );
    let log = osprey.log();
    assert!(
        log.contains("--reindex"),
        "the error names --reindex; log tail:\n{}",
        osprey.log_tail(30)
    );
    // 5.
    let osprey = Osprey::start(
        &node,
        &db,
        OspreyConfig::with_args(&["--reorg-depth-max", "2", "--reindex"]),
    );
    let view = NodeView::load(&node);
    let scripts = view.scripts();
    wait_answers_match_node(
        "osprey after --reindex",
        osprey.addr(),
        &view,
        &scripts,
        SYNC_TIMEOUT,
    );
    assert_chain_matches_node(
        "osprey after --reindex",
        &collect_chain(osprey.addr()),
        &view,
    );
}
