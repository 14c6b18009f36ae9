//! The mempool part of the answers as the mempool changes under a
//! subscribed client: a child whose parent gets mined alone (its height
//! goes from -1 to 0) and comes back, a transaction replaced by a
//! conflicting one, and a block that confirms a transaction the server
//! never saw in the mempool.
//! Every answer is compared with the node's view after each change.

use std::collections::HashMap;
use std::time::Duration;

use bitcoin::{Amount, ScriptBuf, Transaction};
use osprey_testenv::{Node, ScriptKind, TestWallet};
use serde_json::{json, Value};

use crate::common::answers::wait_answers_match_node;
use crate::common::{scripthash, start_btcd, NodeView, Osprey, OspreyConfig, Session};
use osprey_testenv::submit_block_on;

const SETTLE: Duration = Duration::from_secs(30);

/// A subscribed session and the last status it was told of each script.
struct Subscriber {
    session: Session,
    told: HashMap<String, Value>,
}

impl Subscriber {
    /// Waits until every script whose status differs from what the session
    /// was last told has been notified of exactly `want`'s status (a
    /// notification may be followed by a later one).
    fn expect_statuses(&mut self, want: &HashMap<String, Value>) {
        let deadline = std::time::Instant::now() + SETTLE;
        while want
            .iter()
            .any(|(sh, status)| self.told.get(sh) != Some(status))
        {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let n = self
                .session
                .wait_notification("blockchain.scripthash.subscribe", left);
            let sh = n["params"][0]
                .as_str()
                .unwrap_or_else(|| panic!("notification without a script hash: {n}"));
            assert!(
                want.contains_key(sh),
                "notification about a script nobody subscribed: {n}"
            );
            self.told.insert(sh.to_string(), n["params"][1].clone());
        }
    }
}

/// Checks every answer about `scripts` against the node, and that the
/// subscriber was told each changed status.
fn check(
    osprey: &Osprey,
    node: &dyn Node,
    subscriber: &mut Subscriber,
    scripts: &[ScriptBuf],
    what: &str,
) -> NodeView {
    let view = NodeView::load(node);
    wait_answers_match_node(what, osprey.addr(), &view, scripts, SETTLE);
    let want: HashMap<String, Value> = scripts
        .iter()
        .map(|s| (scripthash(s), view.status(s)))
        .collect();
    subscriber.expect_statuses(&want);
    view
}

fn send(node: &dyn Node, tx: &Transaction) {
    node.send_raw_transaction(tx)
        .unwrap_or_else(|e| panic!("node refused {}: {e:#}", tx.compute_txid()));
}

/// Starts btcd (105 blocks: coins to spend; segwit not active, so every
/// transaction here is legacy and test-built blocks need no witness
/// commitment), osprey, and a session subscribed to three fresh scripts.
fn setup() -> (
    osprey_testenv::BtcdNode,
    TestWallet,
    tempfile::TempDir,
    Osprey,
    Subscriber,
    Vec<ScriptBuf>,
) {
    let node = start_btcd();
    node.generate(105).expect("mining");
    let mut wallet = TestWallet::new();
    wallet.sync(&node).expect("wallet sync");
    let dir = tempfile::tempdir().expect("tempdir");
    let osprey = Osprey::start(&node, &dir.path().join("db"), OspreyConfig::default());
    let scripts: Vec<ScriptBuf> = (0..3)
        .map(|_| wallet.new_script(ScriptKind::P2pkh))
        .collect();
    let mut session = osprey.session();
    session.negotiate(json!("1.6"));
    let mut told = HashMap::new();
    for script in &scripts {
        let sh = scripthash(script);
        assert_eq!(
            session.call("blockchain.scripthash.subscribe", json!([sh])),
            Value::Null
        );
        told.insert(sh, Value::Null);
    }
    (
        node,
        wallet,
        dir,
        osprey,
        Subscriber { session, told },
        scripts,
    )
}

/// 1. Start btcd, osprey, and subscribe scripts X, Y (see `setup`).
/// 2. P pays X; C spends P's output and pays Y: in the mempool, P has
///    height 0 and C height -1 (in X's and Y's histories).
/// 3. A block built by the test confirms P alone: C stays in the mempool,
///    now with confirmed inputs only, so its height is 0 (protocol-basics,
///    "Status"). Every answer (history, status, balance, unspent, mempool)
///    equals the node's; the subscriptions are told the new statuses.
/// 4. The test invalidates that block: P returns to the node's mempool and
///    C's height is -1 again; the answers follow. (The reverse order, C
///    sent after P is mined, is `child_height_becomes_minus_1_when_its_parent_returns`.)
#[test]
fn child_height_follows_its_parent_in_and_out_of_a_block() {
    // 1.
    let (node, mut wallet, _dir, osprey, mut subscriber, scripts) = setup();
    let (x, y) = (scripts[0].clone(), scripts[1].clone());
    // 2.
    let p = wallet
        .send(x.clone(), Amount::from_sat(3_000_000))
        .expect("P");
    send(&node, &p);
    let coin = wallet
        .coins()
        .find(|c| c.outpoint.txid == p.compute_txid() && c.spend.txout.script_pubkey == x)
        .expect("P's output to X")
        .outpoint;
    let c = wallet
        .spend(&[coin], &[(y.clone(), Amount::from_sat(1_000_000))])
        .expect("C");
    send(&node, &c);
    let view = check(
        &osprey,
        &node,
        &mut subscriber,
        &scripts,
        "P and C in the mempool",
    );
    assert_eq!(view.tx(&c.compute_txid()).expect("C").electrum_height, -1);
    // 3.
    let block = submit_block_on(&node, view.tip_hash, vec![p.clone()], 1);
    let view = NodeView::load(&node);
    assert_eq!(
        view.tx(&c.compute_txid())
            .expect("C still in the mempool")
            .electrum_height,
        0
    );
    assert!(
        view.tx(&p.compute_txid()).expect("P").height.is_some(),
        "P is confirmed"
    );
    check(
        &osprey,
        &node,
        &mut subscriber,
        &scripts,
        "P mined alone, C left in the mempool",
    );
    // 4.
    node.invalidate_block(&block.block_hash())
        .expect("invalidateblock");
    let view = NodeView::load(&node);
    assert_eq!(
        view.tx(&c.compute_txid()).expect("C").electrum_height,
        -1,
        "P is back in the mempool"
    );
    check(
        &osprey,
        &node,
        &mut subscriber,
        &scripts,
        "P back in the mempool",
    );
}

/// 1. Start btcd, osprey, and subscribe script Z (see `setup`).
/// 2. R pays Z; a second wallet replaces it with R' (same input, higher
///    fee), which the node accepts or refuses: the answers follow the
///    node's mempool either way.
/// 3. A block built by the test confirms a payment to Z that never went
///    through the mempool: the answers equal the node's.
#[test]
fn mempool_answers_follow_replacements_and_surprise_blocks() {
    // 1.
    let (node, mut wallet, _dir, osprey, mut subscriber, scripts) = setup();
    let z = scripts[2].clone();
    // 2.
    let r = wallet
        .send(z.clone(), Amount::from_sat(2_000_000))
        .expect("R");
    send(&node, &r);
    check(
        &osprey,
        &node,
        &mut subscriber,
        &scripts,
        "R in the mempool",
    );
    let mut other = TestWallet::new();
    other.sync(&node).expect("wallet sync");
    other.fee_rate = 20;
    let replacement = other
        .spend(
            &[r.input[0].previous_output],
            &[(z.clone(), Amount::from_sat(1_900_000))],
        )
        .expect("R', spending R's input");
    match node.send_raw_transaction(&replacement) {
        Ok(_) => eprintln!("the node replaced R with R'"),
        Err(e) => eprintln!("the node refused the replacement: {e:#}"),
    }
    check(
        &osprey,
        &node,
        &mut subscriber,
        &scripts,
        "after the replacement attempt",
    );
    // 3.
    let view = NodeView::load(&node);
    let spent_in_mempool: std::collections::HashSet<_> = view
        .mempool()
        .flat_map(|t| t.tx.input.iter().map(|i| i.previous_output))
        .collect();
    let mut third = TestWallet::new();
    third.sync(&node).expect("wallet sync");
    let next_height = view.tip_height + 1;
    let coin = third
        .coins()
        .filter(|c| c.coinbase && c.height.is_some_and(|h| next_height - h >= 100))
        .find(|c| !spent_in_mempool.contains(&c.outpoint))
        .expect("a mature coinbase no mempool transaction spends")
        .outpoint;
    let direct = third
        .spend(&[coin], &[(z.clone(), Amount::from_sat(4_000_000))])
        .expect("a direct payment");
    submit_block_on(&node, view.tip_hash, vec![direct], 2);
    check(
        &osprey,
        &node,
        &mut subscriber,
        &scripts,
        "a block with a transaction never in the mempool",
    );
}

/// 1. Start btcd, osprey, and subscribe scripts X, Y (see `setup`).
/// 2. P pays X and is mined (by the node); C spends P's output and pays Y:
///    C has confirmed inputs only, height 0.
/// 3. The test invalidates P's block: the node puts P back in its mempool,
///    so C now has an unconfirmed input: height -1. Every answer equals the
///    node's; the subscriptions are told.
#[test]
fn child_height_becomes_minus_1_when_its_parent_returns() {
    // 1.
    let (node, mut wallet, _dir, osprey, mut subscriber, scripts) = setup();
    let (x, y) = (scripts[0].clone(), scripts[1].clone());
    // 2.
    let p = wallet
        .send(x.clone(), Amount::from_sat(3_000_000))
        .expect("P");
    send(&node, &p);
    let block = node.generate(1).expect("mining P")[0];
    wallet.sync(&node).expect("wallet sync");
    let coin = wallet
        .coins()
        .find(|c| c.outpoint.txid == p.compute_txid() && c.spend.txout.script_pubkey == x)
        .expect("P's output to X")
        .outpoint;
    let c = wallet
        .spend(&[coin], &[(y.clone(), Amount::from_sat(1_000_000))])
        .expect("C");
    send(&node, &c);
    let view = check(
        &osprey,
        &node,
        &mut subscriber,
        &scripts,
        "P mined, C in the mempool",
    );
    assert_eq!(view.tx(&c.compute_txid()).expect("C").electrum_height, 0);
    // 3.
    node.invalidate_block(&block).expect("invalidateblock");
    let view = NodeView::load(&node);
    assert!(
        view.tx(&p.compute_txid())
            .is_some_and(|t| t.height.is_none()),
        "P is back in the node's mempool"
    );
    assert_eq!(view.tx(&c.compute_txid()).expect("C").electrum_height, -1);
    check(
        &osprey,
        &node,
        &mut subscriber,
        &scripts,
        "P back in the mempool",
    );
}
