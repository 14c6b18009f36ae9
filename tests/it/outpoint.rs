//! 1.7's `blockchain.outpoint.*` against btcd: an outpoint's status (`{}`,
//! `{"funder_height"}`, or with `spender_txhash` and `spender_height`) at
//! every stage of its life, a subscription notified at each change (its
//! parameters the request's `tx_hash` and `txout_idx`, then the status),
//! and exact spenders among many outputs of one script (under the
//! 1-byte-prefix build, their spent-txid prefixes collide). Below 1.7 the
//! methods do not exist. (`v1_7` drives the same on Bitcoin Core.)
//!
//! Expected statuses come from the node only: the transaction that funds
//! the outpoint and the one that spends it, found in the node's blocks and
//! mempool (`NodeView`) with their Electrum heights, checked against the
//! node's own UTXO set (`gettxout` without the mempool).

use std::time::Duration;

use bitcoin::hashes::Hash;
use bitcoin::{Amount, OutPoint, ScriptBuf, Transaction, Txid};
use osprey_testenv::{BtcdNode, Node, ScriptKind, TestWallet};
use serde_json::{json, Value};

use crate::common::oracle::confirmed_height_by_rpc;
use crate::common::{start_btcd, NodeView, Osprey, OspreyConfig, Session};

const NOTIFICATION_TIMEOUT: Duration = Duration::from_secs(30);
const SUBSCRIBE: &str = "blockchain.outpoint.subscribe";

/// `unsubscribe`'s parameters: the outpoint.
fn params(o: &OutPoint) -> Value {
    json!([o.txid.to_string(), o.vout])
}

/// `subscribe`'s and `get_status`'s: the outpoint and the script it pays
/// (1.7 requires the hint).
fn hinted(o: &OutPoint, script: &ScriptBuf) -> Value {
    json!([o.txid.to_string(), o.vout, hex::encode(script.as_bytes())])
}

fn send(node: &dyn Node, tx: &Transaction) -> Txid {
    node.send_raw_transaction(tx)
        .unwrap_or_else(|e| panic!("node refused {}: {e:#}", tx.compute_txid()))
}

/// The status 1.7 prescribes for `o`, from the node: the funding
/// transaction's height (block, or 0 / -1 in the mempool) and, if one
/// exists, the spending transaction's. Cross-checked with the node's UTXO
/// set: `gettxout` (mempool excluded) knows `o` exactly when it is funded
/// in a block and not spent in one.
fn node_status(node: &dyn Node, view: &NodeView, o: &OutPoint) -> Value {
    let funder = view
        .tx(&o.txid)
        .filter(|t| (o.vout as usize) < t.tx.output.len());
    let spender = view
        .txs
        .iter()
        .find(|t| t.tx.input.iter().any(|i| i.previous_output == *o));
    let utxo: Value = node
        .rpc()
        .call(
            "gettxout",
            &[json!(o.txid.to_string()), json!(o.vout), json!(false)],
        )
        .expect("gettxout");
    let in_utxo_set =
        funder.is_some_and(|f| f.height.is_some()) && spender.is_none_or(|s| s.height.is_none());
    assert_eq!(!utxo.is_null(), in_utxo_set, "gettxout {o}: {utxo}");
    let Some(funder) = funder else {
        return json!({});
    };
    if let Some(height) = funder.height {
        assert_eq!(
            confirmed_height_by_rpc(node, &o.txid),
            Some(height),
            "getrawtransaction {}",
            o.txid
        );
    }
    let mut status = json!({"funder_height": funder.electrum_height});
    if let Some(spender) = spender {
        status["spender_txhash"] = json!(spender.txid.to_string());
        status["spender_height"] = json!(spender.electrum_height);
    }
    status
}

/// A session subscribed to one outpoint, and the last status it was told.
struct Watcher {
    session: Session,
    outpoint: OutPoint,
    told: Value,
}

impl Watcher {
    /// Waits until the session is told `want`; each notification must
    /// name the outpoint as the request did and differ from the one before
    /// it (a status is sent only when it changes).
    fn expect(&mut self, want: &Value, what: &str) {
        let deadline = std::time::Instant::now() + NOTIFICATION_TIMEOUT;
        while self.told != *want {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let n = self.session.wait_notification(SUBSCRIBE, left);
            let named = json!([n["params"][0], n["params"][1]]);
            assert_eq!(named, params(&self.outpoint), "{what}: {n}");
            assert_eq!(n["params"].as_array().map(Vec::len), Some(3), "{n}");
            let status = n["params"][2].clone();
            assert_ne!(status, self.told, "{what}: the same status twice: {n}");
            self.told = status;
        }
    }
}

/// Waits until `get_status` of `o` (hinting `script`) answers what the
/// node says.
fn expect_status(
    session: &mut Session,
    node: &BtcdNode,
    o: &OutPoint,
    script: &ScriptBuf,
    what: &str,
) -> Value {
    let want = node_status(node, &NodeView::load(node), o);
    let deadline = std::time::Instant::now() + NOTIFICATION_TIMEOUT;
    loop {
        let got = session.call("blockchain.outpoint.get_status", hinted(o, script));
        if got == want {
            return want;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: get_status {o} answers {got}, the node says {want}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// 1. btcd (105 blocks), osprey; at 1.6 the three methods are not found.
/// 2. At 1.7, subscribe to P:x before P exists: `{}` (and the
///    subscription is kept, as 1.7 requires). Without `spk_hint` the
///    request is refused.
/// 3. P enters the mempool: notified `{"funder_height": 0}`.
/// 4. P is mined: notified its block height; `get_status` agrees, with the
///    right `spk_hint` or a wrong one.
/// 5. C spends P:x in the mempool: notified with C at height 0.
/// 6. C is mined: notified with C's block height.
/// 7. A mempool chain P2 -> C2: P2's output is spent at height -1; C2's
///    output is funded at height -1.
/// 8. Unknown txids and a vout past a transaction's end: `{}`.
/// 9. Unsubscribe: true, then false.
#[test]
fn outpoint_status_follows_the_node_and_is_notified() {
    // 1.
    let node = start_btcd();
    node.generate(105).expect("mining");
    let mut wallet = TestWallet::new();
    wallet.sync(&node).expect("wallet sync");
    let dir = tempfile::tempdir().expect("tempdir");
    let osprey = Osprey::start(&node, &dir.path().join("db"), OspreyConfig::default());
    let mut old = osprey.session();
    assert_eq!(old.negotiate(json!("1.6")), "1.6");
    let any = OutPoint {
        txid: Txid::all_zeros(),
        vout: 0,
    };
    for method in [
        "blockchain.outpoint.subscribe",
        "blockchain.outpoint.get_status",
        "blockchain.outpoint.unsubscribe",
    ] {
        assert_eq!(old.call_err(method, params(&any)).code, -32601, "{method}");
    }
    let mut session = osprey.session();
    assert_eq!(session.negotiate(json!("1.7")), "1.7");

    // 2.
    let x = wallet.new_script(ScriptKind::P2pkh);
    let p = wallet
        .send(x.clone(), Amount::from_sat(3_000_000))
        .expect("P");
    let o = wallet.coin_paying(p.compute_txid(), &x);
    assert_eq!(node_status(&node, &NodeView::load(&node), &o), json!({}));
    let mut watcher = Watcher {
        session: osprey.session(),
        outpoint: o,
        told: json!({}),
    };
    assert_eq!(watcher.session.negotiate(json!("1.7")), "1.7");
    let e = watcher.session.call_err(SUBSCRIBE, params(&o));
    assert_eq!(e.code, -32602, "no spk_hint: {e:?}");
    assert_eq!(watcher.session.call(SUBSCRIBE, hinted(&o, &x)), json!({}));

    // 3.
    send(&node, &p);
    let want = node_status(&node, &NodeView::load(&node), &o);
    assert_eq!(
        want,
        json!({"funder_height": 0}),
        "P has confirmed inputs only"
    );
    watcher.expect(&want, "P in the mempool");
    expect_status(&mut session, &node, &o, &x, "P in the mempool");

    // 4.
    node.generate(1).expect("mining P");
    wallet.sync(&node).expect("wallet sync");
    let want = node_status(&node, &NodeView::load(&node), &o);
    assert!(want["funder_height"].as_i64().unwrap() > 0, "{want}");
    watcher.expect(&want, "P mined");
    expect_status(&mut session, &node, &o, &x, "P mined");
    let wrong = wallet.new_script(ScriptKind::P2wpkh);
    assert_eq!(
        session.call("blockchain.outpoint.get_status", hinted(&o, &wrong)),
        want,
        "a wrong spk_hint changes nothing"
    );

    // 5.
    let y = wallet.new_script(ScriptKind::P2pkh);
    let c = wallet
        .spend(&[o], &[(y.clone(), Amount::from_sat(1_000_000))])
        .expect("C");
    send(&node, &c);
    let want = node_status(&node, &NodeView::load(&node), &o);
    assert_eq!(want["spender_txhash"], c.compute_txid().to_string());
    assert_eq!(want["spender_height"], 0);
    watcher.expect(&want, "C in the mempool");
    expect_status(&mut session, &node, &o, &x, "C in the mempool");

    // 6.
    node.generate(1).expect("mining C");
    wallet.sync(&node).expect("wallet sync");
    let want = node_status(&node, &NodeView::load(&node), &o);
    assert!(want["spender_height"].as_i64().unwrap() > 0, "{want}");
    watcher.expect(&want, "C mined");
    expect_status(&mut session, &node, &o, &x, "C mined");

    // 7.
    let z = wallet.new_script(ScriptKind::P2pkh);
    let p2 = wallet
        .send(z.clone(), Amount::from_sat(2_000_000))
        .expect("P2");
    send(&node, &p2);
    let o2 = wallet.coin_paying(p2.compute_txid(), &z);
    let w = wallet.new_script(ScriptKind::P2pkh);
    let c2 = wallet
        .spend(&[o2], &[(w.clone(), Amount::from_sat(500_000))])
        .expect("C2");
    send(&node, &c2);
    let want = expect_status(&mut session, &node, &o2, &z, "P2 -> C2 in the mempool");
    assert_eq!(want["funder_height"], 0);
    assert_eq!(want["spender_txhash"], c2.compute_txid().to_string());
    assert_eq!(want["spender_height"], -1, "C2 spends a mempool output");
    let o3 = wallet.coin_paying(c2.compute_txid(), &w);
    let want = expect_status(&mut session, &node, &o3, &w, "C2's output");
    assert_eq!(want, json!({"funder_height": -1}));

    // 8.
    for unknown in [
        OutPoint {
            txid: Txid::from_byte_array([0x5a; 32]),
            vout: 0,
        },
        OutPoint {
            txid: p.compute_txid(),
            vout: p.output.len() as u32,
        },
        OutPoint {
            txid: p2.compute_txid(),
            vout: p2.output.len() as u32,
        },
    ] {
        assert_eq!(
            expect_status(&mut session, &node, &unknown, &x, "unknown"),
            json!({})
        );
    }

    // 9.
    let unsubscribe = |s: &mut Session| s.call("blockchain.outpoint.unsubscribe", params(&o));
    assert_eq!(unsubscribe(&mut watcher.session), true);
    assert_eq!(unsubscribe(&mut watcher.session), false);
    assert_eq!(unsubscribe(&mut session), false, "never subscribed");
}

/// Many outputs of one script at the same vout, some spent in blocks, some
/// in the mempool, some not at all: each outpoint's spender is exactly the
/// node's. With 1-byte prefixes (`--features short-prefixes`) 24 funding
/// txids share a first byte more often than not, so the spend rows that
/// name them must be told apart by the spending transactions.
#[test]
fn outpoint_spenders_are_exact_among_many_outputs_of_one_script() {
    let node = start_btcd();
    node.generate(110).expect("mining");
    let mut wallet = TestWallet::new();
    wallet.sync(&node).expect("wallet sync");
    let dir = tempfile::tempdir().expect("tempdir");
    let osprey = Osprey::start(&node, &dir.path().join("db"), OspreyConfig::default());
    let mut session = osprey.session();
    assert_eq!(session.negotiate(json!("1.7")), "1.7");
    let x = wallet.new_script(ScriptKind::P2pkh);
    let mut outpoints = Vec::new();
    for i in 0..24u64 {
        let tx = wallet
            .send(x.clone(), Amount::from_sat(100_000 + i))
            .expect("a payment to x");
        send(&node, &tx);
        outpoints.push(wallet.coin_paying(tx.compute_txid(), &x));
        if i % 8 == 7 {
            node.generate(1).expect("mining");
            wallet.sync(&node).expect("wallet sync");
        }
    }
    // Every third output spent in a block, every third in the mempool.
    let y = wallet.new_script(ScriptKind::P2pkh);
    let spend = |wallet: &mut TestWallet, o: &OutPoint| {
        let tx = wallet
            .spend(&[*o], &[(y.clone(), Amount::from_sat(50_000))])
            .expect("a spend");
        send(&node, &tx);
    };
    for o in outpoints.iter().step_by(3) {
        spend(&mut wallet, o);
    }
    node.generate(1).expect("mining");
    wallet.sync(&node).expect("wallet sync");
    for o in outpoints.iter().skip(1).step_by(3) {
        spend(&mut wallet, o);
    }
    let view = NodeView::load(&node);
    let mut first_bytes: Vec<u8> = outpoints
        .iter()
        .map(|o| o.txid.as_byte_array()[0])
        .collect();
    first_bytes.sort_unstable();
    first_bytes.dedup();
    eprintln!(
        "{} outputs of one script, {} distinct first txid bytes",
        outpoints.len(),
        first_bytes.len()
    );
    for o in &outpoints {
        let want = node_status(&node, &view, o);
        assert!(want.get("funder_height").is_some(), "{o}: {want}");
        assert_eq!(
            expect_status(&mut session, &node, o, &x, "many outputs of one script"),
            want
        );
    }
}
