//! Every Electrum method, asked over a socket of the real binary, answers
//! what the btcd node behind it says: server identity and negotiation,
//! headers and checkpoint proofs, fees, every script method for every
//! output type (confirmed, mempool height 0 and -1), transactions and
//! merkle proofs, broadcasts, and notifications. Expected answers come from
//! the node (`NodeView`, `getrawtransaction`, `getblockheader`), computed by
//! the spec's rules in the test.

use std::time::Duration;

use bitcoin::consensus::encode::serialize_hex;
use bitcoin::hashes::Hash;
use bitcoin::{Amount, ScriptBuf, Transaction, Txid};
use electrum_client::ElectrumApi;
use osprey_testenv::{mining_address, Node, ScriptKind, TestWallet};
use serde_json::{json, Value};

use crate::common::merkle::{branch_of, fold, from_display_hex, root, to_display_hex};
use crate::common::oracle::{btc_to_sat, confirmed_height_by_rpc};
use crate::common::{scripthash, start_btcd, wait_until, NodeView, Osprey, OspreyConfig, Session};
use osprey_testenv::burn_script;

/// Height the chain is mined to first: past segwit activation (432 on btcd
/// regtest) and past 2016 blocks, so one `blockchain.block.headers` call
/// can return a full 2016.
const INITIAL_HEIGHT: u32 = 2100;

const BANNER: &str = "osprey functional test banner";

/// How long a notification may take (the server polls every 100 ms).
const NOTIFICATION_TIMEOUT: Duration = Duration::from_secs(30);

/// The transactions of the scenario and the scripts they touch.
struct Scenario {
    /// One fresh wallet script per output type.
    targets: Vec<(ScriptKind, ScriptBuf)>,
    /// Confirmed in block A: pays every target (P2WPKH twice).
    fund: Transaction,
    /// Confirmed in block B: each spends a target's output from `fund`.
    spends: Vec<Transaction>,
    /// Confirmed in block B after `spends`: pays every target again.
    refund: Transaction,
    /// Mempool, confirmed inputs only (height 0): pays every target.
    m0: Transaction,
    /// Mempool, spends `m0`'s P2TR output (height -1), pays the P2PKH target.
    m1: Transaction,
    /// Mempool, confirmed inputs only: a second height-0 entry for the
    /// P2SH-P2WPKH target, so mempool entries need the txid tie-break.
    m2: Transaction,
}

impl Scenario {
    fn target(&self, kind: ScriptKind) -> &ScriptBuf {
        &self
            .targets
            .iter()
            .find(|(k, _)| *k == kind)
            .expect("a target per kind")
            .1
    }
}

fn send(node: &dyn Node, tx: &Transaction) -> Txid {
    node.send_raw_transaction(tx)
        .unwrap_or_else(|e| panic!("node refused {}: {e:#}", tx.compute_txid()))
}

/// Builds the scenario on a chain past segwit activation; leaves three
/// transactions in the mempool.
fn build_scenario(node: &dyn Node, wallet: &mut TestWallet) -> Scenario {
    let sat = Amount::from_sat;
    let targets: Vec<(ScriptKind, ScriptBuf)> = ScriptKind::ALL
        .iter()
        .map(|&k| (k, wallet.new_script(k)))
        .collect();
    let mut outputs: Vec<(ScriptBuf, Amount)> = targets
        .iter()
        .map(|(_, s)| (s.clone(), sat(1_000_000)))
        .collect();
    let p2wpkh = targets
        .iter()
        .find(|(k, _)| *k == ScriptKind::P2wpkh)
        .expect("p2wpkh")
        .1
        .clone();
    outputs.push((p2wpkh.clone(), sat(2_000_000)));
    let fund = wallet.send_many(&outputs).expect("funding the targets");
    send(node, &fund);
    node.generate(1).expect("mining block A");
    wallet.sync(node).expect("wallet sync");

    // Block B: every target spent once (P2WPKH keeps its second output),
    // then paid again by a later transaction of the same block.
    let fund_txid = fund.compute_txid();
    let mut spends = Vec::new();
    for (i, (kind, script)) in targets.iter().enumerate() {
        let outpoint = wallet
            .coins()
            .find(|c| {
                c.outpoint.txid == fund_txid
                    && &c.spend.txout.script_pubkey == script
                    && c.spend.txout.value == sat(1_000_000)
            })
            .expect("the target's coin from fund")
            .outpoint;
        // P2WSH pays itself: a transaction both spending from and paying to
        // a script is one history entry.
        let to = if *kind == ScriptKind::P2wsh {
            script.clone()
        } else {
            burn_script(i as u8 + 1)
        };
        let tx = wallet
            .spend(&[outpoint], &[(to, sat(400_000))])
            .expect("spending a target");
        send(node, &tx);
        spends.push(tx);
    }
    let refund = wallet
        .send_many(
            &targets
                .iter()
                .map(|(_, s)| (s.clone(), sat(300_000)))
                .collect::<Vec<_>>(),
        )
        .expect("paying the targets again");
    send(node, &refund);
    node.generate(1).expect("mining block B");
    wallet.sync(node).expect("wallet sync");

    // The mempool.
    let refund_txid = refund.compute_txid();
    let m0 = wallet
        .spend(
            &[wallet.coin_paying(refund_txid, &p2wpkh)],
            &targets
                .iter()
                .map(|(_, s)| (s.clone(), sat(20_000)))
                .collect::<Vec<_>>(),
        )
        .expect("m0");
    send(node, &m0);
    let p2tr = targets
        .iter()
        .find(|(k, _)| *k == ScriptKind::P2tr)
        .expect("p2tr")
        .1
        .clone();
    let p2pkh = targets
        .iter()
        .find(|(k, _)| *k == ScriptKind::P2pkh)
        .expect("p2pkh")
        .1
        .clone();
    let m1 = wallet
        .spend(
            &[wallet.coin_paying(m0.compute_txid(), &p2tr)],
            &[(p2pkh, sat(5_000))],
        )
        .expect("m1");
    send(node, &m1);
    let nested = targets
        .iter()
        .find(|(k, _)| *k == ScriptKind::P2shP2wpkh)
        .expect("p2sh-p2wpkh")
        .1
        .clone();
    let extra = wallet
        .coins()
        .find(|c| c.outpoint.txid == fund_txid && c.spend.txout.value == sat(2_000_000))
        .expect("p2wpkh's second output")
        .outpoint;
    let m2 = wallet
        .spend(&[extra], &[(nested, sat(10_000))])
        .expect("m2");
    send(node, &m2);
    Scenario {
        targets,
        fund,
        spends,
        refund,
        m0,
        m1,
        m2,
    }
}

/// 1. Start btcd and mine 2100 blocks (segwit active from 432).
/// 2. Build the scenario: block A pays a fresh script of each type
///    (P2PKH, P2SH-P2WPKH, P2WPKH, P2WSH, P2TR); block B spends each (P2WSH
///    paying itself) and pays each again; the mempool holds m0 (confirmed inputs: height 0), m1
///    (spends m0: height -1) and m2 (a second height-0 entry).
/// 3. Start osprey; wait until it serves the tip and sees the mempool.
/// 4. Check the server.* methods, negotiation of 1.4, 1.6 and 1.7 included.
/// 5. Check headers: subscribe, block.header(s), cp_height proofs folded
///    to a root computed here from the node's block hashes, 2016 at once.
/// 6. Check fees: estimatefee, relayfee, mempool.get_info,
///    mempool.get_fee_histogram against the node's mempool.
/// 7. Check every scripthash (and 1.7 scriptpubkey) method for each target,
///    the mining script and an unused script, against the node's view.
/// 8. Check transaction.get (raw and verbose), get_merkle, id_from_pos.
/// 9. Broadcast a good transaction (it reaches the node's mempool), a bad
///    one (an error, no hang), and a package (btcd: a clear error).
/// 10. Subscribe a fresh script (by script hash, by 1.7 scriptpubkey and
///     with electrum-client), an unused script and the headers; pay the
///     script: a status notification (mempool); mine: a headers and a
///     status notification; spend it: a status notification. Never one
///     about the unused script.
#[test]
fn every_method_answers_like_the_node() {
    // 1.
    let node = start_btcd();
    node.generate(INITIAL_HEIGHT).expect("mining");
    let mut wallet = TestWallet::new();
    wallet.sync(&node).expect("wallet sync");
    // 2.
    let scenario = build_scenario(&node, &mut wallet);
    let view = NodeView::load(&node);
    assert_eq!(
        view.mempool().count(),
        3,
        "the scenario leaves three transactions in the mempool"
    );
    assert_eq!(
        view.tx(&scenario.m1.compute_txid())
            .expect("m1")
            .electrum_height,
        -1
    );
    assert_eq!(
        view.tx(&scenario.m0.compute_txid())
            .expect("m0")
            .electrum_height,
        0
    );
    // 3.
    let dir = tempfile::tempdir().expect("tempdir");
    let osprey = Osprey::start(
        &node,
        &dir.path().join("db"),
        OspreyConfig::with_args(&["--banner", BANNER]),
    );
    let p2pkh_sh = scripthash(scenario.target(ScriptKind::P2pkh));
    let mut session = osprey.session();
    wait_until("osprey sees the mempool", Duration::from_secs(30), || {
        let mempool = session.call("blockchain.scripthash.get_mempool", json!([p2pkh_sh]));
        (mempool.as_array().map(Vec::len) == Some(2)).then_some(())
    });
    // 4.
    check_server_methods(&osprey, &node, &view);
    // 5.
    check_headers(&osprey, &view);
    // 6.
    check_fees(&osprey, &node, &view);
    // 7.
    let mut scripts: Vec<ScriptBuf> = scenario.targets.iter().map(|(_, s)| s.clone()).collect();
    scripts.push(mining_address().script_pubkey());
    scripts.push(burn_script(0xee));
    // The genesis coinbase is unspendable and not indexed (spec): its
    // script has no history.
    let genesis = node
        .get_block(&view.block_hashes[0])
        .expect("genesis block");
    scripts.push(genesis.txdata[0].output[0].script_pubkey.clone());
    check_scripts(&osprey, &node, &view, &scripts);
    // 8.
    let mut txids = vec![scenario.fund.compute_txid(), scenario.refund.compute_txid()];
    txids.extend(scenario.spends.iter().map(Transaction::compute_txid));
    txids.push(view.block_txids[1][0]);
    txids.push(view.block_txids[view.tip_height as usize][0]);
    let mempool_txids = [&scenario.m0, &scenario.m1, &scenario.m2].map(|t| t.compute_txid());
    check_transactions(&osprey, &node, &view, &txids, &mempool_txids);
    // 9.
    check_broadcast(&osprey, &node, &mut wallet);
    // 10.
    check_notifications(&osprey, &node, &mut wallet);
}

/// Step 4: server.version, banner, features, ping, donation_address,
/// peers.subscribe.
fn check_server_methods(osprey: &Osprey, node: &dyn Node, view: &NodeView) {
    // Negotiation: exactly 1.4; a range up to 1.6; only once per session.
    let mut s14 = osprey.session();
    let answer = s14.call("server.version", json!(["osprey-it", "1.4"]));
    assert_eq!(answer[1], json!("1.4"), "server.version 1.4: {answer}");
    let software = answer[0]
        .as_str()
        .expect("server software version")
        .to_string();
    assert!(
        software.starts_with("Osprey"),
        "server software: {software}"
    );
    let again = s14.call_err("server.version", json!(["osprey-it", "1.4"]));
    assert_eq!(again.code, 1, "a second server.version: {again:?}");
    let mut s16 = osprey.session();
    assert_eq!(s16.negotiate(json!(["1.4", "1.6"])), "1.6");
    // 1.6 must be negotiated by the first message: after another one the
    // best is below 1.6.
    let mut late = osprey.session();
    late.call("server.banner", json!([]));
    let version = late.negotiate(json!(["1.4", "1.6"]));
    assert!(
        version.starts_with("1.4"),
        "1.6 negotiated after another message: {version}"
    );
    // Nothing in common: an error, then the connection is closed.
    let mut old = osprey.session();
    let e = old.call_err("server.version", json!(["osprey-it", ["1.0", "1.2"]]));
    assert_eq!(e.code, 1, "{e:?}");
    let (closed, _) = old.closed_within(Duration::from_secs(10));
    assert!(
        closed,
        "no common version: the server must close the connection"
    );

    let client = osprey.client();
    assert_eq!(
        client.protocol_version().expect("protocol_version"),
        "1.6",
        "electrum-client negotiates 1.6"
    );

    // Banner, donation address, peers, ping.
    assert_eq!(s14.call("server.banner", json!([])), json!(BANNER));
    assert!(s14.call("server.donation_address", json!([])).is_string());
    assert_eq!(
        s14.call("server.peers.subscribe", json!([])),
        json!([]),
        "a server without --peers lists none"
    );
    assert_eq!(
        s14.call("server.ping", json!([])),
        Value::Null,
        "1.4 ping answers null"
    );
    client.ping().expect("electrum-client ping");
    assert_eq!(
        s16.call("server.ping", json!([])),
        Value::Null,
        "1.6 as released answers null"
    );
    let mut s17 = osprey.session();
    assert_eq!(s17.negotiate(json!(["1.4", "1.7"])), "1.7");
    assert_eq!(
        s17.call("server.ping", json!([4, "ab"])),
        json!({"data": "0000"}),
        "1.7 pads"
    );
    let features17 = s17.call("server.features", json!([]));
    assert!(features17.get("hash_function").is_none(), "{features17}");
    assert!(features17.get("method_flavours").is_none(), "{features17}");

    // Features: the genesis hash is the node's block 0.
    let genesis = node.block_hash(0).expect("getblockhash 0").to_string();
    let features = s14.call("server.features", json!([]));
    assert_eq!(features["genesis_hash"], json!(genesis), "{features}");
    assert_eq!(features["hash_function"], json!("sha256"));
    assert_eq!(features["protocol_min"], json!("1.4"));
    assert_eq!(features["protocol_max"], json!("1.7"));
    assert!(features.get("method_flavours").is_none(), "{features}");
    assert_eq!(features["server_version"], json!(software));
    let typed = client
        .server_features()
        .expect("electrum-client server_features");
    assert_eq!(hex::encode(typed.genesis_hash), genesis);
    assert_eq!(view.block_hashes[0].to_string(), genesis);
}

/// Step 5: headers.subscribe, block.header, block.headers, cp_height.
fn check_headers(osprey: &Osprey, view: &NodeView) {
    let tip = view.tip_height;
    let mut s14 = osprey.session();
    s14.negotiate(json!("1.4"));
    let mut s16 = osprey.session();
    s16.negotiate(json!("1.6"));
    let client = osprey.client();

    let want_tip = json!({"height": tip, "hex": view.headers[tip as usize]});
    assert_eq!(
        s14.call("blockchain.headers.subscribe", json!([])),
        want_tip
    );
    let typed = client
        .block_headers_subscribe_raw()
        .expect("electrum-client headers subscribe");
    assert_eq!(
        (typed.height as u32, hex::encode(&typed.header)),
        (tip, view.headers[tip as usize].clone())
    );

    for height in [0, 1, 431, 432, tip / 2, tip - 1, tip] {
        let want = &view.headers[height as usize];
        assert_eq!(
            &s14.call("blockchain.block.header", json!([height])),
            want,
            "header {height}"
        );
        let raw = client
            .block_header_raw(height as usize)
            .expect("electrum-client block_header_raw");
        assert_eq!(&hex::encode(raw), want, "electrum-client header {height}");
    }
    let e = s14.call_err("blockchain.block.header", json!([tip + 1]));
    assert_eq!(e.code, 1, "header above the tip: {e:?}");

    // Checkpoint proofs: the branch folds to the root of the block hashes
    // 0..=cp_height, which the test computes from the node's hashes.
    let leaves: Vec<[u8; 32]> = view
        .block_hashes
        .iter()
        .map(|h| h.to_byte_array())
        .collect();
    for (height, cp) in [
        (0, 1),
        (1, 1),
        (5, 5),
        (100, 431),
        (7, tip),
        (tip - 1, tip),
        (tip, tip),
    ] {
        let answer = s14.call("blockchain.block.header", json!([height, cp]));
        let want_root = to_display_hex(root(&leaves[..=cp as usize]));
        assert_eq!(
            answer["header"],
            json!(view.headers[height as usize]),
            "header {height} cp {cp}"
        );
        assert_eq!(answer["root"], json!(want_root), "root of cp {cp}");
        let folded = fold(
            leaves[height as usize],
            u64::from(height),
            &branch_of(&answer["branch"]),
        );
        assert_eq!(
            to_display_hex(folded),
            want_root,
            "branch of header {height} under cp {cp} does not fold to the root"
        );
    }
    let by_name = s14.call(
        "blockchain.block.header",
        json!({"height": 7, "cp_height": tip}),
    );
    assert_eq!(
        by_name,
        s14.call("blockchain.block.header", json!([7, tip])),
        "by-name cp_height"
    );
    assert!(
        s14.raw_call("blockchain.block.header", json!([10, 9]))
            .is_err(),
        "height above cp_height"
    );
    assert!(
        s14.raw_call("blockchain.block.header", json!([1, tip + 1]))
            .is_err(),
        "cp_height above the tip"
    );

    // block.headers: 1.4 concatenates, 1.6 lists; clipped at the tip and
    // at `max`; 2016 in one call.
    let answer = s14.call("blockchain.block.headers", json!([0, 10]));
    assert_eq!(
        (answer["count"].clone(), answer["hex"].clone()),
        (json!(10), json!(view.headers_hex(0, 10)))
    );
    let max = answer["max"].as_u64().expect("max");
    assert!(max >= 2016, "max {max} below 2016");
    let answer = s14.call("blockchain.block.headers", json!([tip - 2, 10]));
    assert_eq!(answer["count"], json!(3), "clipped at the tip: {answer}");
    assert_eq!(answer["hex"], json!(view.headers_hex(tip - 2, 3)));
    let answer = s16.call("blockchain.block.headers", json!([0, 2016]));
    assert_eq!(answer["count"], json!(2016));
    let list: Vec<Value> = view.headers[..2016].iter().map(|h| json!(h)).collect();
    assert_eq!(
        answer["headers"],
        Value::Array(list),
        "2016 headers in one 1.6 call"
    );
    assert!(answer.get("hex").is_none(), "1.6 sends a list, not hex");
    let answer = s14.call("blockchain.block.headers", json!([1, max + 100]));
    assert_eq!(
        answer["count"].as_u64(),
        Some(max.min(u64::from(tip))),
        "count is clipped at max"
    );
    let typed = client
        .block_headers(0, 2016)
        .expect("electrum-client block_headers");
    assert_eq!(typed.headers.len(), 2016);
    for (height, header) in typed.headers.iter().enumerate() {
        assert_eq!(
            serialize_hex(header),
            view.headers[height],
            "electrum-client header {height}"
        );
    }
    // With cp_height the proof is for the last header returned.
    let answer = s16.call("blockchain.block.headers", json!([10, 5, tip]));
    let folded = fold(leaves[14], 14, &branch_of(&answer["branch"]));
    assert_eq!(answer["root"], json!(to_display_hex(root(&leaves))));
    assert_eq!(
        json!(to_display_hex(folded)),
        answer["root"],
        "headers proof of height 14"
    );
}

/// Step 6: estimatefee, relayfee, mempool.get_info, get_fee_histogram.
fn check_fees(osprey: &Osprey, node: &dyn Node, view: &NodeView) {
    let mut s14 = osprey.session();
    s14.negotiate(json!("1.4"));
    let mut s16 = osprey.session();
    s16.negotiate(json!("1.6"));
    let client = osprey.client();

    for blocks in [1, 6, 25] {
        let node_fee: f64 = node
            .rpc()
            .call("estimatefee", &[json!(blocks)])
            .expect("estimatefee");
        // The spec's answer when the node has no estimate is -1.
        let want = if node_fee > 0.0 {
            json!(node_fee)
        } else {
            json!(-1)
        };
        assert_eq!(
            s14.call("blockchain.estimatefee", json!([blocks])),
            want,
            "estimatefee {blocks}"
        );
        let typed = client
            .estimate_fee(blocks, None)
            .expect("electrum-client estimate_fee");
        assert_eq!(
            json!(typed),
            if node_fee > 0.0 {
                json!(node_fee)
            } else {
                json!(-1.0)
            }
        );
    }
    s16.call("blockchain.estimatefee", json!([6, "economical"]));
    let e = s16.call_err("blockchain.estimatefee", json!([6, "fastest"]));
    assert_eq!(e.code, -32602, "an unknown mode: {e:?}");

    let info: Value = node.rpc().call("getinfo", &[]).expect("getinfo");
    let relay = info["relayfee"].as_f64().expect("relayfee");
    assert_eq!(s14.call("blockchain.relayfee", json!([])), json!(relay));
    // Dropped by the 1.6 spec but kept (documented) for BDK's client.
    assert_eq!(s16.call("blockchain.relayfee", json!([])), json!(relay));
    assert_eq!(
        client.relay_fee().expect("electrum-client relay_fee"),
        relay
    );
    let mempool_info = s16.call("mempool.get_info", json!([]));
    assert_eq!(
        mempool_info["minrelaytxfee"],
        json!(relay),
        "{mempool_info}"
    );
    for field in ["mempoolminfee", "incrementalrelayfee"] {
        assert!(
            mempool_info[field].as_f64().is_some_and(|f| f >= 0.0),
            "{field}: {mempool_info}"
        );
    }
    let typed = client
        .mempool_get_info()
        .expect("electrum-client mempool_get_info");
    assert_eq!(typed.minrelaytxfee, relay);

    // Histogram: [[rate, vsize], ...] by falling rate; it accounts for every
    // vbyte of the node's mempool, and every rate is a rate of one of its
    // transactions (sat/vB).
    let histogram = s14.call("mempool.get_fee_histogram", json!([]));
    let bins = histogram.as_array().expect("histogram is an array");
    let mut rates = Vec::new();
    let mut vsize_total = 0u64;
    for tx in view.mempool() {
        let vsize = tx.tx.vsize() as u64;
        let entry = &view.mempool_verbose[tx.txid.to_string()];
        if let Some(node_vsize) = entry.get("vsize").and_then(Value::as_u64) {
            assert_eq!(vsize, node_vsize, "vsize of {}", tx.txid);
        }
        assert_eq!(tx.fee, Some(btc_to_sat(&entry["fee"])));
        rates.push(tx.fee.expect("mempool fee") as f64 / vsize as f64);
        vsize_total += vsize;
    }
    let binned: u64 = bins.iter().map(|b| b[1].as_u64().expect("bin vsize")).sum();
    assert_eq!(
        binned, vsize_total,
        "histogram {histogram} vs mempool of {vsize_total} vB"
    );
    let mut last = f64::INFINITY;
    for bin in bins {
        let rate = bin[0].as_f64().expect("bin rate");
        assert!(rate <= last, "histogram not by falling rate: {histogram}");
        assert!(
            rates.iter().any(|r| (r - rate).abs() < 1e-6),
            "rate {rate} is no mempool transaction's ({rates:?})"
        );
        last = rate;
    }
    let min_rate = rates.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(
        (last - min_rate).abs() < 1e-6,
        "the last bin ends at the lowest rate {min_rate}: {histogram}"
    );
}

/// Step 7: every script method for each script, raw and with
/// electrum-client, against the node.
fn check_scripts(osprey: &Osprey, node: &dyn Node, view: &NodeView, scripts: &[ScriptBuf]) {
    let mut s16 = osprey.session();
    s16.negotiate(json!("1.6"));
    let mut s17 = osprey.session();
    s17.negotiate(json!("1.7"));
    let client = osprey.client();
    let mut saw_heights = std::collections::BTreeSet::new();
    for script in scripts {
        let sh = scripthash(script);
        let p = json!([sh]);
        let what = format!("script {script:x} ({sh})");
        let history = s16.call("blockchain.scripthash.get_history", p.clone());
        assert_eq!(history, view.history_json(script), "get_history of {what}");
        let mempool = s16.call("blockchain.scripthash.get_mempool", p.clone());
        assert_eq!(mempool, view.mempool_json(script), "get_mempool of {what}");
        let balance = s16.call("blockchain.scripthash.get_balance", p.clone());
        assert_eq!(balance, view.balance_json(script), "get_balance of {what}");
        let mut unspent = s16.call("blockchain.scripthash.listunspent", p.clone());
        if let Value::Array(items) = &mut unspent {
            items.sort_by_key(|u| {
                (
                    u["tx_hash"].as_str().unwrap_or_default().to_string(),
                    u["tx_pos"].as_u64(),
                )
            });
        }
        assert_eq!(unspent, view.unspent_json(script), "listunspent of {what}");
        let status = s16.call("blockchain.scripthash.subscribe", p.clone());
        assert_eq!(status, view.status(script), "status of {what}");
        assert_eq!(
            s16.call("blockchain.scripthash.unsubscribe", p.clone()),
            json!(true)
        );
        assert_eq!(
            s16.call("blockchain.scripthash.unsubscribe", p.clone()),
            json!(false),
            "unsubscribed twice"
        );

        // By-name parameters (the spec's names) give the same answers.
        assert_eq!(
            s16.call(
                "blockchain.scripthash.get_history",
                json!({"scripthash": sh})
            ),
            history,
            "{what}"
        );

        // 1.7 names scripts by their bytes, and wraps lists in objects.
        let spk = json!([hex::encode(script.as_bytes())]);
        assert_eq!(
            s17.call("blockchain.scriptpubkey.get_history", spk.clone()),
            json!({"history": view.history_json(script)}),
            "{what}"
        );
        assert_eq!(
            s17.call("blockchain.scriptpubkey.get_mempool", spk.clone()),
            json!({"history": view.mempool_json(script)}),
            "{what}"
        );
        assert_eq!(
            s17.call("blockchain.scriptpubkey.get_balance", spk.clone()),
            view.balance_json(script),
            "{what}"
        );
        let mut utxos = s17.call("blockchain.scriptpubkey.listunspent", spk.clone());
        if let Some(Value::Array(items)) = utxos.get_mut("utxos") {
            items.sort_by_key(|u| {
                (
                    u["tx_hash"].as_str().unwrap_or_default().to_string(),
                    u["tx_pos"].as_u64(),
                )
            });
        }
        assert_eq!(utxos, json!({"utxos": view.unspent_json(script)}), "{what}");
        assert_eq!(
            s17.call("blockchain.scriptpubkey.subscribe", spk.clone()),
            view.status(script),
            "{what}"
        );
        assert_eq!(
            s17.call("blockchain.scriptpubkey.unsubscribe", spk.clone()),
            json!(true)
        );
        let e = s16.call_err("blockchain.scriptpubkey.get_history", spk.clone());
        assert_eq!(e.code, -32601, "a 1.7 method at 1.6: {e:?}");
        let e = s17.call_err("blockchain.scripthash.get_history", p.clone());
        assert_eq!(e.code, -32601, "replaced in 1.7: {e:?}");

        // The confirmed heights agree with the node's verbose transactions
        // (`blockhash` -> height), checked for the scenario's small scripts.
        let entries = view.history(script);
        if entries.len() < 20 {
            for entry in entries.iter().filter(|e| e.height > 0) {
                assert_eq!(
                    confirmed_height_by_rpc(node, &entry.txid),
                    Some(entry.height as u32),
                    "{}",
                    entry.txid
                );
            }
        }
        saw_heights.extend(entries.iter().map(|e| e.height.signum()));

        // electrum-client, typed.
        let typed: Vec<(String, i64, Option<u64>)> = client
            .script_get_history(script)
            .expect("electrum-client script_get_history")
            .into_iter()
            .map(|h| (h.tx_hash.to_string(), i64::from(h.height), h.fee))
            .collect();
        let want: Vec<(String, i64, Option<u64>)> = entries
            .iter()
            .map(|e| (e.txid.to_string(), e.height, e.fee))
            .collect();
        assert_eq!(typed, want, "electrum-client history of {what}");
        let typed = client
            .script_get_balance(script)
            .expect("electrum-client script_get_balance");
        assert_eq!(
            (typed.confirmed, typed.unconfirmed),
            view.balance(script),
            "electrum-client balance of {what}"
        );
        let mut typed: Vec<(String, u32, u32, u64)> = client
            .script_list_unspent(script)
            .expect("electrum-client script_list_unspent")
            .into_iter()
            .map(|u| {
                (
                    u.tx_hash.to_string(),
                    u.tx_pos as u32,
                    u.height as u32,
                    u.value,
                )
            })
            .collect();
        typed.sort();
        let want: Vec<(String, u32, u32, u64)> = view
            .unspent(script)
            .into_iter()
            .map(|u| (u.txid, u.vout, u.height, u.value))
            .collect();
        assert_eq!(typed, want, "electrum-client listunspent of {what}");
        let typed = client
            .script_subscribe(script)
            .expect("electrum-client script_subscribe");
        assert_eq!(
            json!(typed.map(|s| hex::encode(*s))),
            view.status(script),
            "electrum-client status of {what}"
        );
        assert!(client
            .script_unsubscribe(script)
            .expect("electrum-client script_unsubscribe"));
    }
    // The scenario did reach every kind of entry.
    assert_eq!(
        saw_heights.into_iter().collect::<Vec<_>>(),
        vec![-1, 0, 1],
        "confirmed, height 0 and height -1 entries"
    );
}

/// Step 8: transaction.get (raw, verbose), get_merkle, id_from_pos.
fn check_transactions(
    osprey: &Osprey,
    node: &dyn Node,
    view: &NodeView,
    confirmed: &[Txid],
    mempool: &[Txid],
) {
    let mut s14 = osprey.session();
    s14.negotiate(json!("1.4"));
    let mut s16 = osprey.session();
    s16.negotiate(json!("1.6"));
    let mut s17 = osprey.session();
    s17.negotiate(json!("1.7"));
    let client = osprey.client();
    // The genesis coinbase has a position, though it is not indexed.
    let genesis = view.block_txids[0][0].to_string();
    assert_eq!(
        s14.call("blockchain.transaction.id_from_pos", json!([0, 0])),
        json!(genesis)
    );
    let answer = s14.call("blockchain.transaction.id_from_pos", json!([0, 0, true]));
    assert_eq!(
        answer,
        json!({"tx_hash": genesis, "merkle": []}),
        "a lone coinbase has an empty branch"
    );
    for txid in confirmed.iter().chain(mempool) {
        let raw: String = node
            .rpc()
            .call("getrawtransaction", &[json!(txid.to_string()), json!(0)])
            .expect("raw tx");
        assert_eq!(
            s14.call("blockchain.transaction.get", json!([txid.to_string()])),
            json!(raw),
            "raw {txid}"
        );
        assert_eq!(
            s14.call(
                "blockchain.transaction.get",
                json!([txid.to_string(), false])
            ),
            json!(raw)
        );
        let typed = client
            .transaction_get_raw(txid)
            .expect("electrum-client transaction_get_raw");
        assert_eq!(hex::encode(typed), raw, "electrum-client raw {txid}");
        let verbose = node.get_raw_transaction_verbose(txid).expect("verbose tx");
        assert_eq!(
            s14.call(
                "blockchain.transaction.get",
                json!([txid.to_string(), true])
            ),
            verbose,
            "verbose {txid}"
        );
        let by_name = json!({"tx_hash": txid.to_string(), "verbose": true});
        assert_eq!(
            s14.call("blockchain.transaction.get", by_name),
            verbose,
            "by-name verbose {txid}"
        );
    }
    let unknown = "00".repeat(32);
    let e = s14.call_err("blockchain.transaction.get", json!([unknown]));
    assert_eq!(e.code, 1, "unknown transaction: {e:?}");

    for txid in confirmed {
        let tx = view.tx(txid).expect("confirmed tx in the view");
        let height = tx.height.expect("confirmed");
        let header: Value = node
            .rpc()
            .call(
                "getblockheader",
                &[
                    json!(view.block_hashes[height as usize].to_string()),
                    json!(true),
                ],
            )
            .expect("getblockheader");
        let merkle_root = header["merkleroot"]
            .as_str()
            .expect("merkleroot")
            .to_string();
        let answer = s14.call(
            "blockchain.transaction.get_merkle",
            json!([txid.to_string(), height]),
        );
        assert_eq!(answer["block_height"], json!(height), "{answer}");
        assert_eq!(answer["pos"], json!(tx.pos), "{answer}");
        let leaf = from_display_hex(&txid.to_string());
        let folded = fold(leaf, u64::from(tx.pos), &branch_of(&answer["merkle"]));
        assert_eq!(
            to_display_hex(folded),
            merkle_root,
            "merkle branch of {txid} does not fold to the block's root"
        );
        // 1.6 as released and 1.7 as merged have the 1.4 shape.
        for session in [&mut s16, &mut s17] {
            let again = session.call(
                "blockchain.transaction.get_merkle",
                json!([txid.to_string(), height]),
            );
            assert_eq!(again, answer, "1.6 and 1.7 get_merkle");
        }
        let e = s17.call_err(
            "blockchain.transaction.get_merkle",
            json!([txid.to_string()]),
        );
        assert_eq!(e.code, -32602, "the height is required at 1.7: {e:?}");
        let typed = client
            .transaction_get_merkle(txid, height as usize)
            .expect("electrum-client get_merkle");
        let root_node = merkle_root.parse().expect("merkle root");
        assert!(
            electrum_client::utils::validate_merkle_proof(txid, &root_node, &typed),
            "electrum-client proof of {txid}"
        );

        let answer = s14.call(
            "blockchain.transaction.id_from_pos",
            json!([height, tx.pos]),
        );
        assert_eq!(
            answer,
            json!(txid.to_string()),
            "id_from_pos {height} {}",
            tx.pos
        );
        let answer = s14.call(
            "blockchain.transaction.id_from_pos",
            json!([height, tx.pos, true]),
        );
        assert_eq!(answer["tx_hash"], json!(txid.to_string()));
        let folded = fold(leaf, u64::from(tx.pos), &branch_of(&answer["merkle"]));
        assert_eq!(
            to_display_hex(folded),
            merkle_root,
            "id_from_pos branch of {txid}"
        );
        let typed = client
            .txid_from_pos_with_merkle(height as usize, tx.pos as usize)
            .expect("electrum-client");
        assert_eq!(typed.tx_hash, *txid);
        assert_eq!(
            client
                .txid_from_pos(height as usize, tx.pos as usize)
                .expect("txid_from_pos"),
            *txid
        );
        let count = view.block_txids[height as usize].len();
        assert!(
            s14.raw_call("blockchain.transaction.id_from_pos", json!([height, count]))
                .is_err(),
            "past the end"
        );
    }
    let (txid, height) = (
        confirmed[0],
        view.tx(&confirmed[0])
            .and_then(|t| t.height)
            .expect("height"),
    );
    assert!(
        s14.raw_call(
            "blockchain.transaction.get_merkle",
            json!([txid.to_string(), height + 1])
        )
        .is_err(),
        "wrong height"
    );
    for txid in mempool {
        assert!(
            s14.raw_call(
                "blockchain.transaction.get_merkle",
                json!([txid.to_string(), 0])
            )
            .is_err(),
            "mempool tx"
        );
    }
    assert!(
        s14.raw_call(
            "blockchain.transaction.id_from_pos",
            json!([view.tip_height + 1, 0])
        )
        .is_err(),
        "above tip"
    );
}

/// Step 9: broadcast (good, bad) and broadcast_package.
fn check_broadcast(osprey: &Osprey, node: &dyn Node, wallet: &mut TestWallet) {
    let client = osprey.client();
    let mut s16 = osprey.session();
    s16.negotiate(json!("1.6"));
    let script = wallet.new_script(ScriptKind::P2wpkh);
    let tx = wallet
        .send(script.clone(), Amount::from_sat(77_000))
        .expect("a payment");
    let txid = client
        .transaction_broadcast(&tx)
        .expect("electrum-client broadcast");
    assert_eq!(txid, tx.compute_txid());
    assert!(
        node.mempool_txids().expect("getrawmempool").contains(&txid),
        "broadcast tx is in the node's mempool"
    );
    let sh = scripthash(&script);
    wait_until(
        "osprey sees the broadcast transaction",
        Duration::from_secs(30),
        || {
            let mempool = s16.call("blockchain.scripthash.get_mempool", json!([sh]));
            (mempool[0]["tx_hash"] == json!(txid.to_string())).then_some(())
        },
    );
    // The same transaction again (btcd refuses duplicates; answering the
    // txid would be fine too), and garbage: answers, not hangs.
    match s16.raw_call(
        "blockchain.transaction.broadcast",
        json!([serialize_hex(&tx)]),
    ) {
        Ok(answer) => assert_eq!(answer, json!(txid.to_string()), "duplicate broadcast"),
        Err(e) => assert_eq!(e.code, 1, "duplicate broadcast: {e:?}"),
    }
    let e = s16.call_err("blockchain.transaction.broadcast", json!(["0100000000"]));
    assert_eq!(e.code, 1, "malformed transaction: {e:?}");
    assert!(!e.message.is_empty());
    assert!(
        client.transaction_broadcast_raw(&[0u8; 10]).is_err(),
        "electrum-client: garbage is refused"
    );

    // btcd has no package relay: a clear error, and nothing is relayed.
    // A second wallet builds the package, so the first never counts on it.
    let mut other = TestWallet::new();
    other.sync(node).expect("wallet sync");
    let unsent = other
        .send(burn_script(0xbb), Amount::from_sat(50_000))
        .expect("another payment");
    let e = s16.call_err(
        "blockchain.transaction.broadcast_package",
        json!([[serialize_hex(&unsent)]]),
    );
    assert!(
        e.message.contains("package"),
        "broadcast_package on btcd: {e:?}"
    );
    assert!(!node
        .mempool_txids()
        .expect("getrawmempool")
        .contains(&unsent.compute_txid()));
}

/// Step 10: script and header notifications, via a raw session and via
/// electrum-client.
fn check_notifications(osprey: &Osprey, node: &dyn Node, wallet: &mut TestWallet) {
    let script = wallet.new_script(ScriptKind::P2shP2wpkh);
    let sh = scripthash(&script);
    let spk = hex::encode(script.as_bytes());
    // Never paid: must never be notified.
    let quiet = wallet.new_script(ScriptKind::P2wsh);
    let mut s16 = osprey.session();
    s16.negotiate(json!("1.6"));
    let mut s17 = osprey.session();
    s17.negotiate(json!("1.7"));
    assert_eq!(
        s16.call("blockchain.scripthash.subscribe", json!([sh])),
        Value::Null,
        "unused script"
    );
    assert_eq!(
        s17.call("blockchain.scriptpubkey.subscribe", json!([spk])),
        Value::Null,
        "the 1.7 form"
    );
    assert_eq!(
        s16.call(
            "blockchain.scripthash.subscribe",
            json!([scripthash(&quiet)])
        ),
        Value::Null
    );
    assert_eq!(
        s17.call(
            "blockchain.scriptpubkey.subscribe",
            json!([hex::encode(quiet.as_bytes())])
        ),
        Value::Null
    );
    s17.call("blockchain.headers.subscribe", json!([]));
    let client = osprey.client();
    assert!(client
        .script_subscribe(&script)
        .expect("electrum-client subscribe")
        .is_none());
    client
        .block_headers_subscribe_raw()
        .expect("electrum-client headers subscribe");
    // Each change must reach both forms of the subscription and the
    // client; 1.7 names the script by its hash in the notification too.
    let expect_status = |s16: &mut Session, s17: &mut Session, want: &Value| {
        wait_status_notification(s16, "blockchain.scripthash.subscribe", &sh, want);
        wait_status_notification(s17, "blockchain.scriptpubkey.subscribe", &sh, want);
        wait_client_status(&client, &script, want);
    };

    // Paid: a mempool status.
    wallet.sync(node).expect("wallet sync");
    let tx = wallet
        .send(script.clone(), Amount::from_sat(123_456))
        .expect("paying the subscribed script");
    send(node, &tx);
    let view = NodeView::load(node);
    let want = view.status(&script);
    assert!(want.is_string());
    expect_status(&mut s16, &mut s17, &want);

    // Mined: a new tip and a confirmed status.
    node.generate(1).expect("mining");
    let view = NodeView::load(node);
    let want = view.status(&script);
    assert_eq!(
        view.history(&script)[0].height,
        i64::from(view.tip_height),
        "paid in the new block"
    );
    let tip = json!({"height": view.tip_height, "hex": view.headers[view.tip_height as usize]});
    let deadline = std::time::Instant::now() + NOTIFICATION_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let n = s17.wait_notification("blockchain.headers.subscribe", left);
        if n["params"][0] == tip {
            break;
        }
        eprintln!("intermediate headers notification {n}");
    }
    expect_status(&mut s16, &mut s17, &want);
    let header = wait_until(
        "electrum-client gets the new header",
        NOTIFICATION_TIMEOUT,
        || {
            client.ping().expect("ping");
            client
                .block_headers_pop_raw()
                .expect("headers pop")
                .filter(|h| h.height as u32 == view.tip_height)
        },
    );
    assert_eq!(
        hex::encode(&header.header),
        view.headers[view.tip_height as usize]
    );

    // Spent in the mempool: the spending transaction changes the status.
    wallet.sync(node).expect("wallet sync");
    let coin = wallet.coin_paying(tx.compute_txid(), &script);
    let spend = wallet
        .spend(&[coin], &[(burn_script(0x5e), Amount::from_sat(100_000))])
        .expect("spending it");
    send(node, &spend);
    let view = NodeView::load(node);
    let want = view.status(&script);
    assert_eq!(view.history(&script).len(), 2, "paid, then spent");
    expect_status(&mut s16, &mut s17, &want);
    // A round trip after the last change: anything about the quiet script
    // would have arrived before its answer.
    for session in [&mut s16, &mut s17] {
        session.call("server.ping", json!([]));
        let stray: Vec<&Value> = session
            .pending_notifications()
            .iter()
            .filter(|n| n["params"][0] != json!(sh))
            .collect();
        assert!(
            stray
                .iter()
                .all(|n| n["method"] == json!("blockchain.headers.subscribe")),
            "notifications about scripts nobody paid: {stray:?}"
        );
    }
}

/// Waits for a `method` notification about `key` carrying the status
/// `want`, printing any other status of `key` that came first.
///
/// # Panics
/// On a notification about another script, or when none comes in time.
fn wait_status_notification(session: &mut Session, method: &str, key: &str, want: &Value) {
    let deadline = std::time::Instant::now() + NOTIFICATION_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let n = session.wait_notification(method, left);
        assert_eq!(
            n["params"][0],
            json!(key),
            "notification about another script: {n}"
        );
        if &n["params"][1] == want {
            return;
        }
        eprintln!("intermediate status notification {n} (waiting for {want})");
    }
}

/// Polls electrum-client (a `ping` reads pending notifications) until its
/// queue holds the status `want`.
fn wait_client_status(client: &electrum_client::Client, script: &ScriptBuf, want: &Value) {
    wait_until(
        "electrum-client gets the status notification",
        NOTIFICATION_TIMEOUT,
        || {
            client.ping().expect("ping");
            let status = client.script_pop(script).expect("script_pop")?;
            (json!(hex::encode(*status)) == *want).then_some(())
        },
    );
}

/// 1. Start btcd, mine 101 blocks and leave one payment in the mempool.
/// 2. Start osprey.
/// 3. Ask what cannot be answered though the request is well formed: a
///    position past a block's last transaction, a block above the tip, a
///    merkle proof at the wrong height or of a mempool transaction, an
///    unknown transaction, a header above the tip, bad checkpoints. Each is
///    the spec's (ElectrumX's) "bad request", code 1, with a message: the
///    documented -32603 means a bug or a database error on the server's
///    side, which these are not.
#[test]
fn unanswerable_requests_are_bad_requests_not_internal_errors() {
    // 1.
    let node = start_btcd();
    node.generate(101).expect("mining");
    let mut wallet = TestWallet::new();
    wallet.sync(&node).expect("wallet sync");
    let tx = wallet
        .send(burn_script(3), Amount::from_sat(10_000))
        .expect("a payment");
    send(&node, &tx);
    let view = NodeView::load(&node);
    let tip = view.tip_height;
    let coinbase = view.block_txids[1][0].to_string();
    // 2.
    let dir = tempfile::tempdir().expect("tempdir");
    let osprey = Osprey::start(&node, &dir.path().join("db"), OspreyConfig::default());
    let mut s = osprey.session();
    s.negotiate(json!("1.4"));
    let mempool_txid = tx.compute_txid().to_string();
    wait_until("osprey sees the mempool", Duration::from_secs(30), || {
        s.raw_call("blockchain.transaction.get", json!([mempool_txid]))
            .ok()
    });
    // 3.
    let cases = [
        ("blockchain.transaction.id_from_pos", json!([1, 1])),
        ("blockchain.transaction.id_from_pos", json!([1, 1, true])),
        ("blockchain.transaction.id_from_pos", json!([tip + 1, 0])),
        ("blockchain.transaction.get_merkle", json!([coinbase, 2])),
        (
            "blockchain.transaction.get_merkle",
            json!([mempool_txid, 0]),
        ),
        ("blockchain.transaction.get", json!(["11".repeat(32)])),
        (
            "blockchain.transaction.get_merkle",
            json!(["11".repeat(32), 1]),
        ),
        ("blockchain.block.header", json!([tip + 1])),
        ("blockchain.block.header", json!([5, 4])),
        ("blockchain.block.header", json!([5, tip + 1])),
    ];
    let mut wrong = Vec::new();
    for (method, params) in cases {
        match s.raw_call(method, params.clone()) {
            Ok(v) => wrong.push(format!("{method} {params} answered {v}")),
            Err(e) if e.code != 1 || e.message.is_empty() => wrong.push(format!(
                "{method} {params}: code {} {:?}",
                e.code, e.message
            )),
            Err(_) => {}
        }
    }
    assert!(
        wrong.is_empty(),
        "expected code 1 (bad request):\n{}",
        wrong.join("\n")
    );
}
