//! Protocol 1.7 as merged, end to end on Bitcoin Core regtest, driven by a
//! client of the 1.7 kind: one that files its subscriptions the way the
//! Electrum client's 1.7 branch does (`NotificationSession` in
//! `electrum/interface.py`, spesmilo/electrum f7b536b) and matches each
//! notification to one by the parameters it repeats, refusing any it
//! cannot match. Every expected answer comes from the node: its blocks,
//! mempool and UTXO set (`NodeView`), its `testmempoolaccept` and its
//! `getmempoolentry`.
//!
//! bitcoind is found as for `core`; without one this test says so and
//! passes, except under CI.

use std::collections::HashMap;
use std::time::Duration;

use bitcoin::{Amount, OutPoint, ScriptBuf, Transaction, Txid};
use osprey_testenv::{BitcoindNode, BitcoindOptions, Node, ScriptKind, TestWallet};
use serde_json::{json, Value};

use crate::common::oracle::btc_to_sat;
use crate::common::{scripthash, wait_until, NodeView, Osprey, OspreyConfig, Session};

const NOTIFICATION_TIMEOUT: Duration = Duration::from_secs(30);
const SCRIPTPUBKEY_SUBSCRIBE: &str = "blockchain.scriptpubkey.subscribe";
const OUTPOINT_SUBSCRIBE: &str = "blockchain.outpoint.subscribe";
/// The server's history limit here: a script with more transactions than
/// this is "too large".
const HISTORY_ENTRIES_MAX: usize = 3;

/// A 1.7 client: a session that negotiated 1.7, and its subscriptions
/// filed as the Electrum client files them, each with the status it was
/// last told.
struct Client17 {
    session: Session,
    told: HashMap<String, Value>,
}

/// The key the Electrum client files a subscription or a notification
/// under: `str(method) + repr(params)` there, the method and the JSON of
/// the parameters here.
fn key(method: &str, params: &[Value]) -> String {
    format!("{method}{}", Value::Array(params.to_vec()))
}

impl Client17 {
    fn connect(osprey: &Osprey) -> Client17 {
        let mut session = osprey.session();
        assert_eq!(session.negotiate(json!(["1.4", "1.7"])), "1.7");
        Client17 {
            session,
            told: HashMap::new(),
        }
    }

    /// Subscribes, returning the status answered and the key the
    /// subscription is filed under: a scriptPubKey's notifications name it
    /// by its script hash, an outpoint's repeat it without the `spk_hint`.
    fn subscribe(&mut self, method: &str, params: Value) -> (String, Value) {
        let mut filed = params.as_array().expect("positional params").clone();
        match method {
            SCRIPTPUBKEY_SUBSCRIBE => {
                let spk = hex::decode(filed[0].as_str().expect("hex")).expect("hex");
                filed[0] = json!(scripthash(&ScriptBuf::from_bytes(spk)));
            }
            OUTPOINT_SUBSCRIBE => filed.truncate(2),
            _ => {}
        }
        let status = self.session.call(method, params);
        let key = key(method, &filed);
        self.told.insert(key.clone(), status.clone());
        (key, status)
    }

    /// Reads notifications until the subscription filed as `filed_as` is
    /// told `want`.
    /// Every notification must belong to a subscription (the Electrum
    /// client closes the session on one that does not); a `server.ping`
    /// notification is padding, and passed over.
    fn expect(&mut self, filed_as: &str, want: &Value, what: &str) {
        let deadline = std::time::Instant::now() + NOTIFICATION_TIMEOUT;
        while self.told.get(filed_as) != Some(want) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let n = self.session.next_notification(left);
            let method = n["method"].as_str().expect("a method").to_string();
            let params = n["params"].as_array().expect("positional params");
            if method == "server.ping" {
                assert!(params.len() <= 1, "{n}");
                continue;
            }
            let (status, named) = params.split_last().expect("a status");
            let filed = key(&method, named);
            let Some(old) = self.told.get_mut(&filed) else {
                panic!("{what}: a notification matching no subscription: {n}");
            };
            *old = status.clone();
        }
    }
}

/// The outpoint status 1.7 prescribes for `o`, from the node's view.
fn outpoint_status(view: &NodeView, o: &OutPoint) -> Value {
    let Some(funder) = view
        .tx(&o.txid)
        .filter(|t| (o.vout as usize) < t.tx.output.len())
    else {
        return json!({});
    };
    let mut status = json!({"funder_height": funder.electrum_height});
    if let Some(spender) = view
        .txs
        .iter()
        .find(|t| t.tx.input.iter().any(|i| i.previous_output == *o))
    {
        status["spender_txhash"] = json!(spender.txid.to_string());
        status["spender_height"] = json!(spender.electrum_height);
    }
    status
}

/// What `testmempoolaccept` answers for `txs`, from the node's own
/// verdicts stripped as 1.7 strips them: `txid`, `wtxid`, then `allowed`
/// when given and the package error, the detailed or the short reason.
fn node_verdicts(node: &dyn Node, txs: &[String]) -> Value {
    let verdicts: Value = node
        .rpc()
        .call("testmempoolaccept", &[json!(txs)])
        .expect("the node's testmempoolaccept");
    verdicts
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| {
            let mut item = json!({"txid": v["txid"], "wtxid": v["wtxid"]});
            if let Some(allowed) = v.get("allowed") {
                item["allowed"] = allowed.clone();
            }
            let reason = ["package-error", "reject-details", "reject-reason"]
                .iter()
                .find_map(|k| v.get(*k).and_then(Value::as_str));
            if let Some(reason) = reason {
                item["reason"] = json!(reason);
            }
            item
        })
        .collect()
}

fn hex_of(tx: &Transaction) -> String {
    bitcoin::consensus::encode::serialize_hex(tx)
}

/// `mempool.recent`'s entry for `txid`, from the node's mempool entry.
fn recent_entry(node: &dyn Node, txid: &Txid) -> Value {
    let entry: Value = node
        .rpc()
        .call("getmempoolentry", &[json!(txid.to_string())])
        .expect("getmempoolentry");
    json!({"txid": txid.to_string(), "fee": btc_to_sat(&entry["fees"]["base"]), "vsize": entry["vsize"]})
}

/// 1. Bitcoin Core (101 blocks), osprey with a history limit of 3.
/// 2. Negotiation: 1.7 for a client that takes it, alone or in a range; an
///    error and a closed connection for one that wants 1.8 at least. The
///    1.7 features drop `hash_function`; 1.6's keep it; both say
///    `protocol_max` 1.7. At 1.7 the script hash methods are unknown, at
///    1.6 the 1.7 methods are.
/// 3. `server.ping` pads its answer; a ping notification from the client
///    is not answered.
/// 4. Subscribe a fresh script S by scriptPubKey: null.
/// 5. `testmempoolaccept` of P (pays S, signed, not sent) and of a copy
///    spending an output that does not exist: the node's verdicts, alone and
///    together; nothing relayed; undecodable bytes are a daemon error (2).
/// 6. Broadcast P: S is notified its new status, under its script hash;
///    subscribe P's output O with S as `spk_hint`: `funder_height` 0;
///    `mempool.recent` starts with P as the node has it.
/// 7. Mine: S and O notified (O's funder at the new height).
/// 8. C spends O (tested, then sent): O notified with its spender at 0, S
///    too; `mempool.recent` starts with C. Mine: spender at C's height.
/// 9. S's history, mempool, balance and unspent outputs, in 1.7's objects,
///    equal the node's and the 1.6 script hash answers.
/// 10. A script paid four times: its history is too large, code 10001 at
///     1.7, 1; at 1.6.
/// 11. Unsubscribe: true, then false. A ping round trip: no notification
///     left that matches no subscription.
#[test]
fn a_1_7_client_is_served_on_bitcoin_core() {
    // 1.
    let Some(node) = BitcoindNode::start_or_skip(&BitcoindOptions::default()) else {
        return;
    };
    node.generate(101).expect("mining");
    let mut wallet = TestWallet::new();
    wallet.sync(&node).expect("wallet sync");
    let dir = tempfile::tempdir().expect("tempdir");
    let limit = HISTORY_ENTRIES_MAX.to_string();
    let osprey = Osprey::start(
        &node,
        &dir.path().join("db"),
        OspreyConfig::with_args(&["--history-entries-max", &limit]),
    );

    // 2.
    let mut client = Client17::connect(&osprey);
    let mut alone = osprey.session();
    assert_eq!(alone.negotiate(json!("1.7")), "1.7");
    let mut later = osprey.session();
    let e = later.call_err("server.version", json!(["osprey-it", ["1.8", "2.0"]]));
    assert_eq!(e.code, 1, "{e:?}");
    assert!(e.message.contains("this server speaks 1.4 to 1.7"), "{e:?}");
    assert!(later.closed_within(Duration::from_secs(10)).0, "closed");
    let genesis = node.block_hash(0).expect("getblockhash 0").to_string();
    let features = client.session.call("server.features", json!([]));
    assert_eq!(features["genesis_hash"], json!(genesis));
    assert_eq!(features["protocol_max"], json!("1.7"));
    assert!(features.get("hash_function").is_none(), "{features}");
    let mut s16 = osprey.session();
    assert_eq!(s16.negotiate(json!(["1.4", "1.6"])), "1.6");
    let features = s16.call("server.features", json!([]));
    assert_eq!(features["hash_function"], json!("sha256"));
    assert_eq!(features["protocol_max"], json!("1.7"));
    let s = wallet.new_script(ScriptKind::P2wpkh);
    let spk = hex::encode(s.as_bytes());
    let sh = scripthash(&s);
    let e = client
        .session
        .call_err("blockchain.scripthash.get_history", json!([sh]));
    assert_eq!(e.code, -32601, "replaced in 1.7: {e:?}");
    for (method, params) in [
        ("blockchain.scriptpubkey.get_history", json!([spk])),
        ("mempool.recent", json!([])),
        ("blockchain.transaction.testmempoolaccept", json!([["00"]])),
    ] {
        assert_eq!(s16.call_err(method, params).code, -32601, "{method} at 1.6");
    }

    // 3.
    assert_eq!(
        client
            .session
            .call("server.ping", json!({"pong_len": 5, "data": "abc"})),
        json!({"data": "00000"})
    );
    client
        .session
        .send_line(br#"{"jsonrpc":"2.0","method":"server.ping","params":["0000"]}"#)
        .expect("a ping notification");
    assert_eq!(
        client.session.call("server.ping", json!([])),
        json!({"data": ""}),
        "the next answer is this call's, not one to the notification"
    );

    // 4.
    let (s_key, status) = client.subscribe(SCRIPTPUBKEY_SUBSCRIBE, json!([spk]));
    assert_eq!(status, Value::Null, "a fresh script");
    assert_eq!(s_key, key(SCRIPTPUBKEY_SUBSCRIBE, &[json!(sh)]));

    // 5.
    let p = wallet
        .send(s.clone(), Amount::from_sat(2_000_000))
        .expect("P");
    let mut missing = p.clone();
    missing.input[0].previous_output.vout = 9_999;
    let testmempoolaccept = |client: &mut Client17, txs: &[String]| {
        let answer = client
            .session
            .call("blockchain.transaction.testmempoolaccept", json!([txs]));
        assert_eq!(answer, node_verdicts(&node, txs), "{txs:?}");
        answer
    };
    let verdict = testmempoolaccept(&mut client, &[hex_of(&p)]);
    assert_eq!(
        verdict,
        json!([{"txid": p.compute_txid().to_string(), "wtxid": p.compute_wtxid().to_string(), "allowed": true}])
    );
    let verdict = testmempoolaccept(&mut client, &[hex_of(&missing)]);
    assert_eq!(verdict[0]["allowed"], json!(false), "{verdict}");
    assert!(verdict[0]["reason"].is_string(), "{verdict}");
    testmempoolaccept(&mut client, &[hex_of(&p), hex_of(&missing)]);
    assert!(
        !node
            .mempool_txids()
            .expect("getrawmempool")
            .contains(&p.compute_txid()),
        "testmempoolaccept relays nothing"
    );
    let e = client
        .session
        .call_err("blockchain.transaction.testmempoolaccept", json!([["00"]]));
    assert_eq!(e.code, 2, "the node cannot decode it: {e:?}");

    // 6.
    let sent = client
        .session
        .call("blockchain.transaction.broadcast", json!([hex_of(&p)]));
    assert_eq!(sent, json!(p.compute_txid().to_string()));
    let view = NodeView::load(&node);
    client.expect(&s_key, &view.status(&s), "P in the mempool");
    let o = wallet.coin_paying(p.compute_txid(), &s);
    let (o_key, status) =
        client.subscribe(OUTPOINT_SUBSCRIBE, json!([o.txid.to_string(), o.vout, spk]));
    assert_eq!(status, outpoint_status(&view, &o));
    assert_eq!(status, json!({"funder_height": 0}));
    let recent = client.session.call("mempool.recent", json!([]));
    assert_eq!(
        recent[0],
        recent_entry(&node, &p.compute_txid()),
        "{recent}"
    );

    // 7.
    node.generate(1).expect("mining P");
    wallet.sync(&node).expect("wallet sync");
    let view = NodeView::load(&node);
    client.expect(&s_key, &view.status(&s), "P mined");
    let want = outpoint_status(&view, &o);
    assert_eq!(want["funder_height"], json!(view.tip_height));
    client.expect(&o_key, &want, "P mined");

    // 8.
    let elsewhere = wallet.new_script(ScriptKind::P2tr);
    let c = wallet
        .spend(&[o], &[(elsewhere, Amount::from_sat(1_500_000))])
        .expect("C");
    let verdict = testmempoolaccept(&mut client, &[hex_of(&c)]);
    assert_eq!(verdict[0]["allowed"], json!(true), "{verdict}");
    client
        .session
        .call("blockchain.transaction.broadcast", json!([hex_of(&c)]));
    let view = NodeView::load(&node);
    let want = outpoint_status(&view, &o);
    assert_eq!(want["spender_txhash"], json!(c.compute_txid().to_string()));
    assert_eq!(want["spender_height"], json!(0));
    client.expect(&o_key, &want, "C in the mempool");
    client.expect(&s_key, &view.status(&s), "C in the mempool");
    let recent = client.session.call("mempool.recent", json!([]));
    assert_eq!(
        recent[0],
        recent_entry(&node, &c.compute_txid()),
        "{recent}"
    );
    node.generate(1).expect("mining C");
    wallet.sync(&node).expect("wallet sync");
    let view = NodeView::load(&node);
    let want = outpoint_status(&view, &o);
    assert_eq!(want["spender_height"], json!(view.tip_height));
    client.expect(&o_key, &want, "C mined");
    client.expect(&s_key, &view.status(&s), "C mined");

    // 9.
    let p17 = json!([spk]);
    let p16 = json!([sh]);
    for (method, field) in [
        ("get_history", "history"),
        ("get_mempool", "history"),
        ("listunspent", "utxos"),
    ] {
        let list = s16.call(&format!("blockchain.scripthash.{method}"), p16.clone());
        assert_eq!(
            client
                .session
                .call(&format!("blockchain.scriptpubkey.{method}"), p17.clone()),
            json!({ field: list }),
            "{method}"
        );
    }
    assert_eq!(
        client
            .session
            .call("blockchain.scriptpubkey.get_history", p17.clone()),
        json!({"history": view.history_json(&s)})
    );
    assert_eq!(
        client
            .session
            .call("blockchain.scriptpubkey.listunspent", p17.clone()),
        json!({"utxos": view.unspent_json(&s)}),
        "S's only output is spent"
    );
    assert_eq!(
        client
            .session
            .call("blockchain.scriptpubkey.get_balance", p17.clone()),
        view.balance_json(&s)
    );

    // 10.
    let busy = wallet.new_script(ScriptKind::P2pkh);
    for n in 0..=HISTORY_ENTRIES_MAX as u64 {
        let tx = wallet
            .send(busy.clone(), Amount::from_sat(100_000 + n))
            .expect("a payment");
        node.send_raw_transaction(&tx).expect("relayed");
    }
    node.generate(1).expect("mining");
    wallet.sync(&node).expect("wallet sync");
    let busy_spk = json!([hex::encode(busy.as_bytes())]);
    let e = wait_until("osprey indexes the payments", NOTIFICATION_TIMEOUT, || {
        client
            .session
            .raw_call("blockchain.scriptpubkey.get_history", busy_spk.clone())
            .err()
    });
    assert_eq!(e.code, 10001, "{e:?}");
    assert!(e.message.starts_with("history too large"), "{e:?}");
    let e = client
        .session
        .call_err(SCRIPTPUBKEY_SUBSCRIBE, busy_spk.clone());
    assert_eq!(e.code, 10001, "{e:?}");
    let e = s16.call_err(
        "blockchain.scripthash.get_history",
        json!([scripthash(&busy)]),
    );
    assert_eq!(e.code, 1, "1.6 keeps its code: {e:?}");

    // 11.
    let unsubscribe =
        |client: &mut Client17, method: &str, params: Value| client.session.call(method, params);
    let o_params = json!([o.txid.to_string(), o.vout]);
    for want in [true, false] {
        assert_eq!(
            unsubscribe(
                &mut client,
                "blockchain.outpoint.unsubscribe",
                o_params.clone()
            ),
            json!(want)
        );
        assert_eq!(
            unsubscribe(
                &mut client,
                "blockchain.scriptpubkey.unsubscribe",
                p17.clone()
            ),
            json!(want)
        );
    }
    client.session.call("server.ping", json!([]));
    for n in client.session.pending_notifications().clone() {
        let params = n["params"].as_array().expect("params");
        if n["method"] == json!("server.ping") {
            continue;
        }
        let (_, named) = params.split_last().expect("a status");
        let filed = key(n["method"].as_str().expect("a method"), named);
        assert!(
            client.told.contains_key(&filed),
            "a notification matching no subscription: {n}"
        );
    }
}
