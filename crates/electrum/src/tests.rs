//! Line-in, line-out tests of the whole protocol layer against the fake
//! backend: framing, negotiation, every method's result shape and errors.

use crate::dispatch::{BatchThreads, DispatchConfig, Dispatcher, Effect, Outcome, ReplyEstimate};
use crate::fake::{fake_header, FakeBackend};
use crate::jsonrpc::Incoming;
use crate::script::{ScriptForm, ScriptKey};
use crate::server::{PeerFeatures, PeerInfo, Peers, PublicHost, ServerInfo};
use crate::session::SessionState;
use crate::version::ProtocolVersion;
use bitcoin::hashes::Hash;
use bitcoin::{BlockHash, TxMerkleNode, Txid};
use osprey_answers::{Balance, Error, HistoryEntry, TxMerkle, Utxo};
use osprey_core::{Height, ScriptHash, StatusHash};
use serde_json::{json, Value};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

const SH: &str = "8b01df4e368ea28f8dc0423bcf7a4923e3a12d307c875e47a0cfbf90b5c39161";
const P2PKH: &str = "76a91462e907b15cbf27d5425399ebf6f0fb50ebb88f1888ac";

struct Harness {
    backend: Arc<FakeBackend>,
    dispatcher: Dispatcher,
    state: SessionState,
}

fn config() -> DispatchConfig {
    DispatchConfig {
        info: ServerInfo {
            server_version: "Osprey 0.1.0".into(),
            banner: "Welcome".into(),
            donation_address: "bc1qdonate".into(),
            genesis_hash: BlockHash::all_zeros(),
            hosts: Vec::new(),
        },
        headers_per_call_max: 2016,
        batch_requests_max: 5,
        reply_bytes_max: 1 << 20,
        subscription_budget: None,
        subscriptions_per_session_max: 2,
        pong_len_max: 64,
        silent_payments: crate::SilentPaymentsConfig {
            network: bitcoin::Network::Regtest,
            labels_max: 3,
            subscriptions_per_session_max: 2,
        },
    }
}

/// Threads batches are spread over in these tests, as many as the server
/// gives them when transactions come from the node (the fake's case).
const BATCH_THREADS: usize = 8;

/// One set of batch threads for every test, as a server has one.
fn batch_threads() -> Option<&'static BatchThreads> {
    static THREADS: std::sync::OnceLock<BatchThreads> = std::sync::OnceLock::new();
    Some(THREADS.get_or_init(|| BatchThreads::new(BATCH_THREADS).expect("batch threads")))
}

impl Harness {
    /// A new session of a server as configured by default.
    fn new() -> Self {
        Harness::with_config(config())
    }

    fn with_config(config: DispatchConfig) -> Self {
        let backend = Arc::new(FakeBackend::with_tip(3000));
        let dispatcher = Dispatcher::new(backend.clone(), config);
        Harness {
            backend,
            dispatcher,
            state: SessionState::new(),
        }
    }

    /// A session that negotiated `version`.
    fn at(version: &str) -> Self {
        Harness::new().negotiated(version)
    }

    fn negotiated(mut self, version: &str) -> Self {
        let r = self.call("server.version", json!(["test", version]));
        assert_eq!(r["result"][1], version, "{r}");
        self
    }

    fn line(&mut self, line: &str) -> Outcome {
        self.dispatcher
            .handle_line(&mut self.state, line.as_bytes(), batch_threads())
    }

    fn raw(&mut self, line: &str) -> Value {
        let out = self.line(line);
        serde_json::from_str(&out.response.expect("a response")).unwrap()
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let line = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let r = self.raw(&line.to_string());
        assert_eq!(r["id"], 1, "{r}");
        r
    }

    fn ok(&mut self, method: &str, params: Value) -> Value {
        let r = self.call(method, params);
        assert!(r.get("error").is_none(), "{method}: {r}");
        r["result"].clone()
    }

    fn err(&mut self, method: &str, params: Value) -> (i64, String) {
        let r = self.call(method, params);
        let e = &r["error"];
        assert!(r.get("result").is_none(), "{method}: {r}");
        (
            e["code"].as_i64().unwrap(),
            e["message"].as_str().unwrap().to_string(),
        )
    }
}

fn txid(byte: u8) -> Txid {
    Txid::from_byte_array([byte; 32])
}

#[test]
fn malformed_json_gets_parse_error_with_null_id() {
    let mut h = Harness::new();
    let r = h.raw(r#"{"id": 5, "method": "server.ping""#);
    assert_eq!(r["id"], Value::Null);
    assert_eq!(r["error"]["code"], -32700);
    assert_eq!(r["jsonrpc"], "2.0");
    assert!(h.line("").response.is_none(), "blank lines are ignored");
}

#[test]
fn unknown_methods_and_bad_params_are_named() {
    let mut h = Harness::new();
    let (code, msg) = h.err("blockchain.numblocks.subscribe", json!([]));
    assert_eq!(code, -32601);
    assert!(msg.contains("blockchain.numblocks.subscribe"), "{msg}");
    let (code, msg) = h.err("blockchain.scripthash.get_history", json!(["abcd"]));
    assert_eq!(code, -32602);
    assert_eq!(
        msg,
        "invalid params: scripthash: expected 64 hex characters, got 4"
    );
    let (code, msg) = h.err("blockchain.block.header", json!({"height": -5}));
    assert_eq!(
        (code, msg.as_str()),
        (
            -32602,
            "invalid params: height: must be a non-negative integer"
        )
    );
}

#[test]
fn notifications_and_responses_get_no_answer() {
    let mut h = Harness::new();
    assert!(h
        .line(r#"{"jsonrpc":"2.0","method":"server.ping","params":[]}"#)
        .response
        .is_none());
    assert!(h
        .line(r#"{"jsonrpc":"2.0","id":9,"result":null}"#)
        .response
        .is_none());
    assert!(h
        .line(r#"[{"method":"server.ping"},{"method":"server.ping"}]"#)
        .response
        .is_none());
}

#[test]
fn batches_answer_in_order_and_are_limited() {
    let mut h = Harness::new();
    let r = h.raw(
        r#"[{"id":1,"method":"server.version","params":["x","1.6"]},
            {"id":2,"method":"server.banner"},{"method":"server.ping"},7,
            {"id":3,"method":"nope"}]"#
            .replace('\n', "")
            .as_str(),
    );
    let items = r.as_array().unwrap();
    assert_eq!(items.len(), 4, "the notification gets no entry: {r}");
    assert_eq!(items[0]["result"], json!(["Osprey 0.1.0", "1.6"]));
    assert_eq!(items[1]["result"], "Welcome");
    assert_eq!(
        (items[2]["id"].clone(), items[2]["error"]["code"].clone()),
        (Value::Null, json!(-32600))
    );
    assert_eq!(items[3]["error"]["code"], -32601);
    let six = format!("[{}]", [r#"{"id":1,"method":"server.ping"}"#; 6].join(","));
    let r = h.raw(&six);
    assert_eq!(r.as_array().map(Vec::len), Some(6), "{r}");
    assert_eq!(r[5]["error"]["code"], -101);
    assert_eq!(r[5]["id"], 1);
}

#[test]
fn only_the_first_server_version_is_accepted() {
    let mut h = Harness::new();
    assert_eq!(
        h.ok("server.version", json!(["Electrum 4.6", ["1.4", "1.6"]])),
        json!(["Osprey 0.1.0", "1.6"])
    );
    let (code, msg) = h.err("server.version", json!(["Electrum 4.6", "1.4"]));
    assert_eq!((code, msg.as_str()), (1, "server.version already sent"));
    assert_eq!(h.state.protocol().to_string(), "1.6");
}

#[test]
fn no_common_version_closes_the_session() {
    let mut h = Harness::new();
    let out = h.line(r#"{"id":1,"method":"server.version","params":["old","1.2"]}"#);
    assert!(out.close);
    let r: Value = serde_json::from_str(&out.response.unwrap()).unwrap();
    assert_eq!(r["error"]["code"], 1);
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("unsupported protocol version"));
}

/// 1.7 is offered: a client that takes it gets it, one that asks for it
/// alone too, and the features announce it; one that wants only later
/// versions is refused and the connection closed.
#[test]
fn version_1_7_is_offered() {
    for asked in [json!(["1.4", "1.7"]), json!(["1.4", "2.0"]), json!("1.7")] {
        let mut h = Harness::new();
        assert_eq!(
            h.ok("server.version", json!(["Electrum 4.7", asked])),
            json!(["Osprey 0.1.0", "1.7"]),
            "{asked}"
        );
        assert_eq!(h.state.protocol(), ProtocolVersion::V1_7);
        assert_eq!(h.ok("server.features", json!([]))["protocol_max"], "1.7");
    }
    let mut h = Harness::new();
    let out = h.line(r#"{"id":1,"method":"server.version","params":["x",["1.8","2.0"]]}"#);
    assert!(out.close, "no version in common");
    let r: Value = serde_json::from_str(&out.response.unwrap()).unwrap();
    assert_eq!(
        r["error"]["message"],
        "unsupported protocol version: [1.8, 2.0]; this server speaks 1.4 to 1.7"
    );
    // A client of 1.6 still gets 1.6, and 1.7's methods are unknown to it.
    let mut h = Harness::at("1.6");
    assert_eq!(h.ok("server.features", json!([]))["protocol_max"], "1.7");
    let (code, msg) = h.err("blockchain.scriptpubkey.subscribe", json!([P2PKH]));
    assert_eq!(
        (code, msg.as_str()),
        (
            -32601,
            "unknown method \"blockchain.scriptpubkey.subscribe (a 1.7 method; this session speaks 1.6)\""
        )
    );
    assert_eq!(h.state.subscription_count(), 0);
}

#[test]
fn version_1_6_must_come_first() {
    let mut h = Harness::new();
    h.ok("server.banner", json!([]));
    assert_eq!(
        h.state.protocol().to_string(),
        "1.4",
        "no server.version: 1.4"
    );
    assert_eq!(
        h.ok("server.version", json!(["x", ["1.4", "1.6"]])),
        json!(["Osprey 0.1.0", "1.4.2"])
    );
    let mut h = Harness::new();
    h.ok("server.ping", json!([]));
    let out = h.line(r#"{"id":1,"method":"server.version","params":["x","1.6"]}"#);
    assert!(
        out.close,
        "a 1.6-only client that did not start with server.version is refused"
    );
}

#[test]
fn server_family() {
    let mut h = Harness::at("1.4");
    assert_eq!(h.ok("server.ping", json!([])), Value::Null);
    assert_eq!(h.ok("server.donation_address", json!([])), "bc1qdonate");
    assert_eq!(h.ok("server.peers.subscribe", json!([])), json!([]));
    let f = h.ok("server.features", json!([]));
    assert_eq!(f["genesis_hash"], BlockHash::all_zeros().to_string());
    assert_eq!(f["hash_function"], "sha256");
    // The released 1.6 did not change `server.ping`: still `null`.
    let mut h = Harness::at("1.6");
    assert_eq!(
        h.ok("server.ping", json!({"pong_len": 3, "data": "ff"})),
        Value::Null
    );
    assert_eq!(
        h.ok("server.features", json!([]))["hash_function"],
        "sha256"
    );
    // 1.7: the ping pads its answer, the client's padding may be of odd
    // length (it is padding, not bytes) but must be hex.
    let mut h = Harness::at("1.7");
    assert_eq!(
        h.ok("server.ping", json!({"pong_len": 3, "data": "fff"})),
        json!({"data": "000"})
    );
    assert_eq!(h.ok("server.ping", json!([])), json!({"data": ""}));
    assert_eq!(h.err("server.ping", json!([65])).0, -32602);
    assert_eq!(h.err("server.ping", json!([1, "xyz"])).0, -32602);
    // As a notification (1.7 lets the client send one) it is not answered.
    let out = h.line(r#"{"jsonrpc":"2.0","method":"server.ping","params":["00ff"]}"#);
    assert!(out.response.is_none() && out.effects.is_empty() && !out.close);
    let f = h.ok("server.features", json!([]));
    assert!(f.get("hash_function").is_none(), "{f}");
    assert!(f.get("method_flavours").is_none(), "{f}");
}

#[test]
fn block_header_with_and_without_checkpoint() {
    let mut h = Harness::at("1.4");
    assert_eq!(
        h.ok("blockchain.block.header", json!([5])),
        hex::encode(fake_header(5))
    );
    let r = h.ok(
        "blockchain.block.header",
        json!({"height": 5, "cp_height": 8}),
    );
    assert_eq!(r["header"], hex::encode(fake_header(5)));
    assert_eq!(r["branch"], json!(["05".repeat(32)]));
    assert_eq!(r["root"], "08".repeat(32));
    let (code, msg) = h.err("blockchain.block.header", json!([9, 8]));
    assert_eq!(code, 1);
    assert_eq!(
        msg,
        "require header height 9 <= cp_height 8 <= chain height 3000"
    );
    assert_eq!(h.err("blockchain.block.header", json!([5, 3001])).0, 1);
    let (code, msg) = h.err("blockchain.block.header", json!([3001]));
    assert_eq!((code, msg.as_str()), (1, "block at height 3001 not found"));
}

#[test]
fn block_headers_1_4_concatenates_and_clamps_to_max() {
    let mut h = Harness::at("1.4");
    let r = h.ok("blockchain.block.headers", json!([0, 3]));
    assert_eq!(r["count"], 3);
    assert_eq!(r["max"], 2016);
    assert_eq!(
        r["hex"],
        hex::encode([fake_header(0), fake_header(1), fake_header(2)].concat())
    );
    let r = h.ok("blockchain.block.headers", json!([0, 5000]));
    assert_eq!(r["count"], 2016, "at most max");
    let r = h.ok("blockchain.block.headers", json!([2999, 10]));
    assert_eq!(r["count"], 2, "stops at the tip");
    let r = h.ok("blockchain.block.headers", json!([10, 2, 20]));
    assert_eq!(
        r["branch"],
        json!(["0b".repeat(32)]),
        "proof is for the last header"
    );
    assert_eq!(r["root"], "14".repeat(32));
    let r = h.ok("blockchain.block.headers", json!([5000, 2, 20]));
    assert_eq!(r["count"], 0);
    assert!(r.get("root").is_none(), "no proof without headers");
}

#[test]
fn block_headers_1_6_is_a_list() {
    let mut h = Harness::at("1.6");
    let r = h.ok(
        "blockchain.block.headers",
        json!({"start_height": 1, "count": 2}),
    );
    assert_eq!(
        r,
        json!({"count": 2, "max": 2016, "headers": [hex::encode(fake_header(1)), hex::encode(fake_header(2))]})
    );
}

#[test]
fn headers_subscribe_returns_tip_and_records_effect() {
    let mut h = Harness::new();
    let out = h.line(r#"{"id":1,"method":"blockchain.headers.subscribe","params":[]}"#);
    assert_eq!(out.effects, vec![Effect::HeadersSubscribed]);
    let r: Value = serde_json::from_str(&out.response.unwrap()).unwrap();
    assert_eq!(
        r["result"],
        json!({"height": 3000, "hex": hex::encode(fake_header(3000))})
    );
    assert!(h.state.headers_subscribed());
}

#[test]
fn scripthash_queries_shape_results() {
    let mut h = Harness::at("1.4");
    let sh: ScriptHash = SH.parse().unwrap();
    h.backend.update(|s| {
        s.histories.insert(
            sh,
            vec![
                HistoryEntry {
                    txid: txid(1),
                    height: 100,
                    fee: None,
                },
                HistoryEntry {
                    txid: txid(2),
                    height: 0,
                    fee: Some(300),
                },
            ],
        );
        s.balances.insert(
            sh,
            Balance {
                confirmed: 1000,
                unconfirmed: -200,
            },
        );
        s.unspent.insert(
            sh,
            vec![Utxo {
                txid: txid(1),
                vout: 3,
                height: 100,
                value: 1000,
            }],
        );
    });
    let history = h.ok("blockchain.scripthash.get_history", json!([SH]));
    assert_eq!(
        history,
        json!([
            {"height": 100, "tx_hash": txid(1).to_string()},
            {"height": 0, "tx_hash": txid(2).to_string(), "fee": 300},
        ])
    );
    assert_eq!(
        h.ok("blockchain.scripthash.get_mempool", json!([SH])),
        json!([history[1]])
    );
    assert_eq!(
        h.ok(
            "blockchain.scripthash.get_balance",
            json!({"scripthash": SH})
        ),
        json!({"confirmed": 1000, "unconfirmed": -200})
    );
    assert_eq!(
        h.ok("blockchain.scripthash.listunspent", json!([SH])),
        json!([{"height": 100, "tx_hash": txid(1).to_string(), "tx_pos": 3, "value": 1000}])
    );
    // 1.7's scriptpubkey family answers for the script (P2PKH hashes to
    // SH) what the script hash family answers, lists wrapped in objects;
    // it is unknown below 1.7, and the script hash family is at 1.7.
    assert_eq!(
        h.err("blockchain.scriptpubkey.get_history", json!([P2PKH]))
            .0,
        -32601
    );
    let mut h17 = Harness::at("1.7");
    h17.backend
        .update(|s| *s = h.backend.update(|old| old.clone()));
    assert_eq!(
        h17.ok("blockchain.scriptpubkey.get_history", json!([P2PKH])),
        json!({"history": history})
    );
    assert_eq!(
        h17.ok("blockchain.scriptpubkey.get_mempool", json!([P2PKH])),
        json!({"history": [history[1]]})
    );
    assert_eq!(
        h17.ok(
            "blockchain.scriptpubkey.get_balance",
            json!({"scriptpubkey": P2PKH})
        ),
        json!({"confirmed": 1000, "unconfirmed": -200})
    );
    assert_eq!(
        h17.ok("blockchain.scriptpubkey.listunspent", json!([P2PKH])),
        json!({"utxos": [{"height": 100, "tx_hash": txid(1).to_string(), "tx_pos": 3, "value": 1000}]})
    );
    for method in ["get_history", "get_mempool", "get_balance", "listunspent"] {
        let method = format!("blockchain.scripthash.{method}");
        assert_eq!(h17.err(&method, json!([SH])).0, -32601, "{method}");
    }
}

/// Makes the history of `sh` one entry longer than the limit.
fn over_the_history_limit(s: &mut crate::fake::FakeState, sh: ScriptHash) {
    s.history_entries_max = 1;
    let entries = (0..2)
        .map(|i| HistoryEntry {
            txid: txid(i),
            height: 5,
            fee: None,
        })
        .collect();
    s.histories.insert(sh, entries);
}

/// 1.7 gives "history too large" code 10001 in every scriptpubkey method
/// that reads the history, subscribe included, alone or in a batch; the
/// script hash methods of earlier versions keep code 1 (above).
#[test]
fn history_too_large_is_10001_at_1_7() {
    let mut h = Harness::at("1.7");
    let sh: ScriptHash = SH.parse().unwrap();
    h.backend.update(|s| over_the_history_limit(s, sh));
    for method in ["get_history", "get_mempool", "subscribe"] {
        let (code, msg) = h.err(&format!("blockchain.scriptpubkey.{method}"), json!([P2PKH]));
        assert_eq!(
            (code, msg.as_str()),
            (10001, "history too large: more than 1 transactions"),
            "{method}"
        );
    }
    let batch = json!([
        {"id": 1, "method": "blockchain.scriptpubkey.subscribe", "params": [P2PKH]},
        {"id": 2, "method": "blockchain.scriptpubkey.get_history", "params": [P2PKH]},
    ]);
    let reply: Value = serde_json::from_str(&h.line(&batch.to_string()).response.unwrap()).unwrap();
    assert_eq!(reply[0]["error"]["code"], 10001, "{reply}");
    assert_eq!(reply[1]["error"]["code"], 10001, "{reply}");
    assert_eq!(
        h.state.subscription_count(),
        0,
        "a failed subscribe does not count"
    );
}

#[test]
fn history_too_large_is_an_error_not_a_truncation() {
    let mut h = Harness::at("1.4");
    let sh: ScriptHash = SH.parse().unwrap();
    h.backend.update(|s| over_the_history_limit(s, sh));
    let (code, msg) = h.err("blockchain.scripthash.get_history", json!([SH]));
    assert_eq!(code, 1);
    assert!(msg.starts_with("history too large"), "{msg}");
    let (code, _) = h.err("blockchain.scripthash.subscribe", json!([SH]));
    assert_eq!(code, 1);
    assert_eq!(
        h.state.subscription_count(),
        0,
        "a failed subscribe does not count"
    );
}

/// A subscription the session holds survives a re-subscribe that fails:
/// the notifier still has it, so the session must too.
#[test]
fn a_failed_resubscribe_keeps_the_subscription() {
    let mut h = Harness::at("1.4");
    let sh: ScriptHash = SH.parse().unwrap();
    let entry = |i| HistoryEntry {
        txid: txid(i),
        height: 5,
        fee: None,
    };
    h.backend.update(|s| {
        s.history_entries_max = 1;
        s.histories.insert(sh, vec![entry(0)]);
    });
    h.ok("blockchain.scripthash.subscribe", json!([SH]));
    assert_eq!(h.state.subscription_count(), 1);
    h.backend
        .update(|s| s.histories.insert(sh, vec![entry(0), entry(1)]));
    let (code, _) = h.err("blockchain.scripthash.subscribe", json!([SH]));
    assert_eq!(code, 1, "history too large now");
    assert_eq!(h.state.subscription_count(), 1, "still subscribed");
    // The same through a batch (the parallel path).
    let batch = json!([
        {"id": 1, "method": "blockchain.scripthash.subscribe", "params": [SH]},
        {"id": 2, "method": "server.banner", "params": []},
    ]);
    let reply: Value = serde_json::from_str(&h.line(&batch.to_string()).response.unwrap()).unwrap();
    assert_eq!(reply[0]["error"]["code"], 1, "{reply}");
    assert_eq!(h.state.subscription_count(), 1, "still subscribed");
}

#[test]
fn subscribe_unsubscribe_and_limit() {
    let mut h = Harness::at("1.6");
    let sh: ScriptHash = SH.parse().unwrap();
    h.backend.update(|s| {
        s.histories.insert(
            sh,
            vec![HistoryEntry {
                txid: txid(1),
                height: 7,
                fee: None,
            }],
        );
    });
    let want = StatusHash::of_history([(&txid(1), 7)]);
    let out = h.line(
        &json!({"id": 1, "method": "blockchain.scripthash.subscribe", "params": [SH]}).to_string(),
    );
    assert_eq!(out.effects.len(), 1);
    assert!(
        matches!(&out.effects[0], Effect::Subscribed { status, key } if *status == want && key.scripthash == sh)
    );
    let r: Value = serde_json::from_str(&out.response.unwrap()).unwrap();
    assert_eq!(r["result"], want.unwrap().to_string());
    // Subscribing again is no second subscription; a third is over the limit.
    let other = "00".repeat(32);
    assert_eq!(
        h.ok("blockchain.scripthash.subscribe", json!([SH])),
        want.unwrap().to_string()
    );
    assert_eq!(h.state.subscription_count(), 1);
    h.ok("blockchain.scripthash.subscribe", json!(["11".repeat(32)]));
    let (code, msg) = h.err("blockchain.scripthash.subscribe", json!([other]));
    assert_eq!(code, -101);
    assert!(msg.contains("subscription limit of 2"), "{msg}");
    assert_eq!(
        h.ok("blockchain.scripthash.unsubscribe", json!([SH])),
        json!(true)
    );
    assert_eq!(
        h.ok("blockchain.scripthash.unsubscribe", json!([SH])),
        json!(false)
    );
    assert_eq!(
        h.ok("blockchain.scripthash.subscribe", json!([other])),
        Value::Null,
        "no history: null"
    );
}

/// 1.7 subscribes scripts by scriptpubkey: the status as the script hash
/// family answers it, an effect in the scriptpubkey form (whose
/// notification names the script by its hash), unsubscribe's true/false.
#[test]
fn scriptpubkey_subscribe_and_unsubscribe_at_1_7() {
    let mut h = Harness::at("1.7");
    let sh: ScriptHash = SH.parse().unwrap();
    h.backend.update(|s| {
        s.histories.insert(
            sh,
            vec![HistoryEntry {
                txid: txid(1),
                height: 7,
                fee: None,
            }],
        );
    });
    let want = StatusHash::of_history([(&txid(1), 7)]);
    let key = ScriptKey {
        scripthash: sh,
        form: ScriptForm::ScriptPubKey,
    };
    let out = h.line(
        &json!({"id": 1, "method": "blockchain.scriptpubkey.subscribe", "params": [P2PKH]})
            .to_string(),
    );
    assert_eq!(
        out.effects,
        vec![Effect::Subscribed {
            key: key.clone(),
            status: want
        }]
    );
    let r: Value = serde_json::from_str(&out.response.unwrap()).unwrap();
    assert_eq!(r["result"], want.unwrap().to_string());
    assert_eq!(h.state.subscription_count(), 1);
    let out = h.line(
        &json!({"id": 2, "method": "blockchain.scriptpubkey.unsubscribe", "params": [P2PKH]})
            .to_string(),
    );
    assert_eq!(out.effects, vec![Effect::Unsubscribed { key }]);
    assert_eq!(
        h.ok("blockchain.scriptpubkey.unsubscribe", json!([P2PKH])),
        false
    );
    assert_eq!(h.state.subscription_count(), 0);
}

#[test]
fn transaction_family() {
    let mut h = Harness::at("1.4");
    h.backend.update(|s| {
        s.transactions.insert(txid(1), vec![1, 2, 3]);
        s.merkles.insert(
            txid(1),
            TxMerkle {
                block_height: Height(42),
                pos: 2,
                branch: vec![TxMerkleNode::from_byte_array([5; 32])],
            },
        );
        s.blocks.insert(42, vec![txid(9), txid(8), txid(1)]);
    });
    let t = txid(1).to_string();
    assert_eq!(h.ok("blockchain.transaction.get", json!([t])), "010203");
    assert_eq!(
        h.ok("blockchain.transaction.get", json!([t, true]))["hex"],
        "010203"
    );
    let (code, msg) = h.err("blockchain.transaction.get", json!([txid(2).to_string()]));
    assert_eq!(code, 1);
    assert!(msg.contains("not found"), "{msg}");
    let m = h.ok("blockchain.transaction.get_merkle", json!([t, 42]));
    assert_eq!(
        m,
        json!({"block_height": 42, "merkle": ["05".repeat(32)], "pos": 2})
    );
    assert_eq!(
        h.err("blockchain.transaction.get_merkle", json!([t, 41])).0,
        1
    );
    assert_eq!(
        h.ok("blockchain.transaction.id_from_pos", json!([42, 2])),
        t
    );
    let r = h.ok(
        "blockchain.transaction.id_from_pos",
        json!({"height": 42, "tx_pos": 0, "merkle": true}),
    );
    assert_eq!(
        r,
        json!({"tx_hash": txid(9).to_string(), "merkle": ["00".repeat(32)]})
    );
    // 1.6 as released, and 1.7 as merged: height still required, no
    // block_hash.
    for version in ["1.6", "1.7"] {
        let mut h16 = Harness::at(version);
        h16.backend
            .update(|s| s.merkles = h.backend.update(|old| old.merkles.clone()));
        assert_eq!(
            h16.err("blockchain.transaction.get_merkle", json!({"tx_hash": t}))
                .0,
            -32602
        );
        let m = h16.ok("blockchain.transaction.get_merkle", json!([t, 42]));
        assert_eq!(
            m,
            json!({"block_height": 42, "merkle": ["05".repeat(32)], "pos": 2}),
            "{version}"
        );
    }
}

/// 1.7's `blockchain.transaction.testmempoolaccept`: the raw transactions
/// reach the node as given, each verdict comes back as
/// `{txid, wtxid, allowed?, reason?}`, and the node's failure is a daemon
/// error; unknown below 1.7.
#[test]
fn testmempoolaccept_at_1_7() {
    use bitcoin::Wtxid;
    use osprey_chain::MempoolAcceptance;
    let mut h = Harness::at("1.7");
    h.backend.update(|s| {
        s.acceptances = vec![
            MempoolAcceptance {
                txid: txid(1),
                wtxid: Wtxid::from_byte_array([2; 32]),
                allowed: Some(true),
                reason: None,
            },
            MempoolAcceptance {
                txid: txid(3),
                wtxid: Wtxid::from_byte_array([4; 32]),
                allowed: Some(false),
                reason: Some("bad-txns-inputs-missingorspent".into()),
            },
        ]
    });
    assert_eq!(
        h.ok(
            "blockchain.transaction.testmempoolaccept",
            json!([["0100", "0200"]])
        ),
        json!([
            {"txid": txid(1).to_string(), "wtxid": "02".repeat(32), "allowed": true},
            {"txid": txid(3).to_string(), "wtxid": "04".repeat(32), "allowed": false,
             "reason": "bad-txns-inputs-missingorspent"},
        ])
    );
    assert_eq!(
        h.backend.update(|s| s.last_tested.clone()),
        ["0100", "0200"]
    );
    h.backend.update(|s| {
        s.node_failure = Some(|| node_failed("testmempoolaccept", -22, "TX decode failed"))
    });
    assert_eq!(
        h.err("blockchain.transaction.testmempoolaccept", json!([["00"]])),
        (
            2,
            "daemon error: testmempoolaccept: TX decode failed (code -22)".into()
        )
    );
    let mut h16 = Harness::at("1.6");
    assert_eq!(
        h16.err("blockchain.transaction.testmempoolaccept", json!([["00"]]))
            .0,
        -32601
    );
}

/// 1.7's `mempool.recent`: the backend's newest transactions, ten at most,
/// as `{txid, fee, vsize}`; unknown below 1.7.
#[test]
fn mempool_recent_at_1_7() {
    use osprey_answers::RecentTx;
    let mut h = Harness::at("1.7");
    assert_eq!(h.ok("mempool.recent", json!([])), json!([]));
    h.backend.update(|s| {
        s.recent = (1..=12)
            .map(|n| RecentTx {
                txid: txid(n),
                fee: u64::from(n) * 100,
                vsize: 141,
            })
            .collect()
    });
    let recent = h.ok("mempool.recent", json!([]));
    let recent = recent.as_array().unwrap();
    assert_eq!(recent.len(), 10);
    assert_eq!(
        recent[0],
        json!({"txid": txid(1).to_string(), "fee": 100, "vsize": 141})
    );
    assert_eq!(recent[9]["txid"], txid(10).to_string());
    assert_eq!(
        Harness::at("1.6").err("mempool.recent", json!([])).0,
        -32601
    );
}

#[test]
fn broadcast_returns_txid_or_the_node_message() {
    let mut h = Harness::at("1.4");
    let raw = "0100";
    let want = Txid::from_raw_hash(bitcoin::hashes::sha256d::Hash::hash(&[1, 0])).to_string();
    assert_eq!(h.ok("blockchain.transaction.broadcast", json!([raw])), want);
    h.backend
        .update(|s| s.broadcast_error = Some("txn-mempool-conflict".into()));
    let (code, msg) = h.err("blockchain.transaction.broadcast", json!([raw]));
    assert_eq!(code, 1);
    assert!(msg.contains("txn-mempool-conflict"), "{msg}");
    assert_eq!(
        h.err("blockchain.transaction.broadcast", json!(["xyz"])).0,
        -32602
    );
    h.backend
        .update(|s| s.package_answer = json!({"package_msg": "success", "tx-results": {}}));
    assert_eq!(
        h.ok(
            "blockchain.transaction.broadcast_package",
            json!([["00", "01"]])
        ),
        json!({"success": true})
    );
    let verbose = h.ok(
        "blockchain.transaction.broadcast_package",
        json!({"raw_txs": ["00"], "verbose": true}),
    );
    assert_eq!(verbose["package_msg"], "success");
}

/// The answer to `method` while the node fails every call with `failure`.
fn with_failing_node(failure: fn() -> Error, method: &str, params: Value) -> (i64, String) {
    let mut h = Harness::at("1.6");
    h.backend.update(|s| {
        s.transactions.insert(txid(1), vec![1, 2, 3]);
        s.node_failure = Some(failure);
    });
    h.err(method, params)
}

fn node_failed(method: &str, code: i64, message: &str) -> Error {
    Error::NodeFailed {
        method: method.into(),
        code,
        message: message.into(),
    }
}

#[test]
fn a_failed_fee_estimate_is_a_daemon_error_not_a_rejection() {
    let answer = with_failing_node(
        || node_failed("estimatesmartfee", -32603, "Fee estimation disabled"),
        "blockchain.estimatefee",
        json!([6]),
    );
    assert_eq!(
        answer,
        (
            2,
            "daemon error: estimatesmartfee: Fee estimation disabled (code -32603)".into()
        )
    );
}

#[test]
fn a_failed_transaction_fetch_is_a_daemon_error_not_a_rejection() {
    let (code, message) = with_failing_node(
        || {
            node_failed(
                "getrawtransaction",
                -5,
                "No such mempool or blockchain transaction",
            )
        },
        "blockchain.transaction.get",
        json!([txid(1).to_string()]),
    );
    assert_eq!(code, 2);
    assert_eq!(
        message,
        "daemon error: getrawtransaction: No such mempool or blockchain transaction (code -5)"
    );
}

#[test]
fn a_failed_mempool_info_is_a_daemon_error_not_a_rejection() {
    let (code, message) = with_failing_node(
        || node_failed("getmempoolinfo", -1, "out of memory"),
        "mempool.get_info",
        json!([]),
    );
    assert_eq!(
        (code, message.as_str()),
        (2, "daemon error: getmempoolinfo: out of memory (code -1)")
    );
}

#[test]
fn a_failed_relay_fee_is_a_daemon_error_not_a_rejection() {
    let (code, message) = with_failing_node(
        || node_failed("getnetworkinfo", -1, "broken"),
        "blockchain.relayfee",
        json!([]),
    );
    assert_eq!(
        (code, message.as_str()),
        (2, "daemon error: getnetworkinfo: broken (code -1)")
    );
}

#[test]
fn a_broadcast_refusal_is_the_only_rejection() {
    let (code, message) = with_failing_node(
        || Error::Rejected("bad-txns-inputs-missingorspent".into()),
        "blockchain.transaction.broadcast",
        json!(["0100"]),
    );
    assert_eq!(code, 1);
    assert_eq!(
        message,
        "the transaction was rejected by network rules: bad-txns-inputs-missingorspent"
    );
}

#[test]
fn a_broadcast_to_an_unreachable_node_is_no_rejection_and_names_no_file() {
    let (code, message) = with_failing_node(
        || Error::Unavailable("cannot read cookie file /home/u/.bitcoin/.cookie: denied".into()),
        "blockchain.transaction.broadcast",
        json!(["0100"]),
    );
    assert_eq!(
        (code, message.as_str()),
        (2, "daemon error: the node is unavailable, try again later")
    );
}

#[test]
fn an_internal_error_names_no_file_of_the_index() {
    let (code, message) = with_failing_node(
        || Error::Internal("IO error: /var/lib/osprey/db/000042.sst: No such file".into()),
        "blockchain.transaction.get",
        json!([txid(1).to_string()]),
    );
    assert_eq!(
        (code, message.as_str()),
        (
            -32603,
            "internal error: the server failed; its log has the details"
        )
    );
}

#[test]
fn fees_and_mempool() {
    let mut h = Harness::at("1.4");
    assert_eq!(h.ok("blockchain.estimatefee", json!([6])), json!(-1));
    h.backend.update(|s| s.estimate = Some(0.0002));
    assert_eq!(
        h.ok("blockchain.estimatefee", json!([2000, "conservative"])),
        json!(0.0002)
    );
    assert_eq!(
        h.backend.update(|s| s.last_estimate_args.clone()),
        Some((1008, Some("CONSERVATIVE".into())))
    );
    assert_eq!(h.ok("blockchain.relayfee", json!([])), json!(0.00001));
    h.backend
        .update(|s| s.histogram = vec![(10.0, 500), (1.0, 20000)]);
    assert_eq!(
        h.ok("mempool.get_fee_histogram", json!([])),
        json!([[10.0, 500], [1.0, 20000]])
    );
    let mut h = Harness::at("1.6");
    assert_eq!(
        h.ok("blockchain.relayfee", json!([])),
        json!(0.00001),
        "kept for BDK"
    );
    let info = h.ok("mempool.get_info", json!([]));
    assert_eq!(info["minrelaytxfee"], json!(0.00001));
    assert!(info.get("mempoolminfee").is_some() && info.get("incrementalrelayfee").is_some());
}

/// The id JSON-RPC 2.0 says the reply to `element` (one request of a line)
/// carries: its own, or null when it has none or an invalid one; `None`
/// when it gets no reply (a response object, or a notification: a valid
/// call without id). Written from the spec, apart from `jsonrpc`.
fn reply_id(element: &Value) -> Option<Value> {
    let Some(object) = element.as_object() else {
        return Some(Value::Null);
    };
    let id = match object.get("id") {
        None => None,
        Some(id @ (Value::Null | Value::Number(_) | Value::String(_))) => Some(id.clone()),
        Some(_) => return Some(Value::Null),
    };
    let method = object.get("method");
    if method.is_none() && (object.contains_key("result") || object.contains_key("error")) {
        return None;
    }
    let version_ok = match object.get("jsonrpc") {
        None => true,
        Some(Value::String(v)) => v == "2.0" || v == "1.0",
        Some(_) => false,
    };
    let params_ok = matches!(
        object.get("params"),
        None | Some(Value::Null | Value::Array(_) | Value::Object(_))
    );
    let valid_call = version_ok && params_ok && matches!(method, Some(Value::String(_)));
    match id {
        Some(id) => Some(id),
        None if valid_call => None,
        None => Some(Value::Null),
    }
}

/// A xorshift generator: the same lines on every run.
struct Lines(u64);

impl Lines {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a>(&mut self, choices: &[&'a str]) -> &'a str {
        choices[(self.next() % choices.len() as u64) as usize]
    }

    /// JSON whose requests mix valid and invalid members: one request, or
    /// a batch of one to seven, past the limit of five at times.
    fn requests(&mut self) -> String {
        if self.next().is_multiple_of(3) {
            return self.request();
        }
        let count = 1 + self.next() % 7;
        let batch: Vec<String> = (0..count).map(|_| self.request()).collect();
        format!("[{}]", batch.join(", "))
    }

    /// A request object of members picked right or wrong (one picked empty
    /// is left out), or now and then no object at all.
    fn request(&mut self) -> String {
        if self.next().is_multiple_of(8) {
            return self.pick(&["1", "\"x\"", "[]"]).to_string();
        }
        let members: Vec<String> = [
            (
                "id",
                self.pick(&[
                    "",
                    "1",
                    "\"x\"",
                    "null",
                    "-1",
                    "true",
                    "[]",
                    "1.5",
                    "\"\\u0000\"",
                ]),
            ),
            (
                "method",
                self.pick(&[
                    "",
                    "\"server.version\"",
                    "\"blockchain.block.headers\"",
                    "\"server.ping\"",
                    "\"no.such.method\"",
                    "1",
                ]),
            ),
            (
                "params",
                self.pick(&[
                    "",
                    "[]",
                    "null",
                    "{}",
                    "1",
                    "[\"x\"]",
                    "[0, 1]",
                    "[\"a\", \"1.4\"]",
                ]),
            ),
            ("jsonrpc", self.pick(&["", "\"2.0\"", "\"1.0\"", "2"])),
            ("result", self.pick(&["", "0"])),
        ]
        .into_iter()
        .filter(|(_, value)| !value.is_empty())
        .map(|(name, value)| format!("\"{name}\": {value}"))
        .collect();
        format!("{{{}}}", members.join(", "))
    }
}

/// Fuzz-style check: arbitrary bytes never panic and always answer valid
/// JSON with the request's id (or null): one reply per request owed one,
/// in request order. Half the lines are pieces of JSON in any order, half
/// JSON requests with members right and wrong.
#[test]
fn arbitrary_lines_never_panic() {
    let mut h = Harness::new();
    let mut ids_told = 0;
    let mut lines = Lines(0x2545f4914f6cdd1d);
    let pieces = [
        "{",
        "}",
        "[",
        "]",
        "\"id\":",
        "1",
        "\"method\":",
        "\"server.version\"",
        "\"params\":",
        ",",
        "null",
        "\"blockchain.block.headers\"",
        "-1",
        "1e400",
        "\"\\u0000\"",
        "true",
        ":",
        "\"x\"",
    ];
    for i in 0..6000u32 {
        let line = if i.is_multiple_of(2) {
            let count = lines.next() % 12;
            (0..count).map(|_| lines.pick(&pieces)).collect()
        } else {
            lines.requests()
        };
        let out = h.line(&line);
        let reply: Option<Value> = out
            .response
            .as_deref()
            .map(|resp| serde_json::from_str(resp).expect("responses are JSON"));
        // What the reply must be: `Ok(id)` one object under `id`, `Err(ids)`
        // an array of replies under `ids`; `None` no reply at all.
        let owed: Option<Result<Value, Vec<Value>>> = match serde_json::from_str(&line) {
            _ if line.trim().is_empty() => None,
            // Not JSON, or an empty batch: one error, its id null.
            Err(_) => Some(Ok(Value::Null)),
            Ok(Value::Array(items)) if items.is_empty() => Some(Ok(Value::Null)),
            Ok(Value::Array(items)) => {
                let ids: Vec<Value> = items.iter().filter_map(reply_id).collect();
                (!ids.is_empty()).then_some(Err(ids))
            }
            Ok(element) => reply_id(&element).map(Ok),
        };
        let got = reply.as_ref().map(|reply| match reply {
            Value::Array(replies) => Err(replies.iter().map(|r| r["id"].clone()).collect()),
            reply => {
                assert!(reply.is_object(), "{line} -> {reply}");
                Ok(reply["id"].clone())
            }
        });
        assert_eq!(got, owed, "{line} -> {reply:?}");
        if let Some(reply) = &reply {
            let replies = reply
                .as_array()
                .cloned()
                .unwrap_or_else(|| vec![reply.clone()]);
            ids_told += replies.iter().filter(|r| !r["id"].is_null()).count();
        }
    }
    // Not a check of null ids only: many requests had ids of their own.
    assert!(
        ids_told > 100,
        "{ids_told} replies under a request's own id"
    );
}

#[test]
fn batches_run_in_parallel_but_answer_and_subscribe_in_request_order() {
    let mut h = Harness::at("1.4");
    let sh: ScriptHash = SH.parse().unwrap();
    h.backend.update(|s| {
        s.histories.insert(
            sh,
            vec![HistoryEntry {
                txid: txid(1),
                height: 7,
                fee: None,
            }],
        );
    });
    let want = StatusHash::of_history([(&txid(1), 7)]).unwrap().to_string();
    let other = "00".repeat(32);
    let third = "11".repeat(32);
    // Subscribes, a query and a bad request mixed: replies in request order,
    // effects in request order, and the limit (2) refuses the third
    // subscription without subscribing it.
    let batch = json!([
        {"id": "a", "method": "blockchain.scripthash.subscribe", "params": [SH]},
        {"id": "b", "method": "blockchain.scripthash.get_history", "params": [SH]},
        {"id": "c", "method": "blockchain.scripthash.subscribe", "params": [other]},
        {"id": "d", "method": "blockchain.scripthash.subscribe", "params": [third]},
        {"id": "e", "method": "blockchain.scripthash.get_history", "params": ["zz"]},
    ]);
    let out = h.line(&batch.to_string());
    let r: Value = serde_json::from_str(out.response.as_deref().unwrap()).unwrap();
    let ids: Vec<&Value> = r.as_array().unwrap().iter().map(|x| &x["id"]).collect();
    assert_eq!(ids, ["a", "b", "c", "d", "e"], "{r}");
    assert_eq!(r[0]["result"], want);
    assert_eq!(r[1]["result"][0]["height"], 7);
    assert_eq!(r[2]["result"], Value::Null);
    assert_eq!(r[3]["error"]["code"], -101, "{r}");
    assert_eq!(r[4]["error"]["code"], -32602, "{r}");
    let subscribed: Vec<String> = out
        .effects
        .iter()
        .map(|e| match e {
            Effect::Subscribed { key, .. } => key.scripthash.to_string(),
            other => panic!("unexpected effect {other:?}"),
        })
        .collect();
    assert_eq!(subscribed, [SH.to_string(), other.clone()]);
    assert_eq!(h.state.subscription_count(), 2);

    // With an unsubscribe in it, a batch runs in order: the subscription
    // made first and undone after is gone, and its effects say so in order.
    let batch = json!([
        {"id": 1, "method": "blockchain.scripthash.unsubscribe", "params": [other]},
        {"id": 2, "method": "blockchain.scripthash.subscribe", "params": [third]},
        {"id": 3, "method": "blockchain.scripthash.unsubscribe", "params": [third]},
    ]);
    let out = h.line(&batch.to_string());
    let r: Value = serde_json::from_str(out.response.as_deref().unwrap()).unwrap();
    assert_eq!(r[0]["result"], true);
    assert_eq!(r[1]["result"], Value::Null);
    assert_eq!(r[2]["result"], true);
    assert!(
        matches!(out.effects.last(), Some(Effect::Unsubscribed { key }) if key.scripthash.to_string() == third)
    );
    assert_eq!(h.state.subscription_count(), 1);
}

/// A line of subscriptions whose statuses are all cached is answered where
/// blocking is not allowed: it computes no status, and answers and
/// subscribes exactly like the general path, the per-session cap (2 here)
/// included. Any other line is given back untouched, with no effect.
#[test]
fn cached_subscriptions_are_answered_without_computing_statuses() {
    let mut fast = Harness::at("1.4");
    let mut general = Harness::at("1.4");
    let used: ScriptHash = SH.parse().unwrap();
    let unused = "11".repeat(32);
    let third = "22".repeat(32);
    for h in [&fast, &general] {
        h.backend.update(|s| {
            s.histories.insert(
                used,
                vec![HistoryEntry {
                    txid: txid(1),
                    height: 5,
                    fee: None,
                }],
            );
            s.cached.insert(used);
            s.cached.insert(unused.parse().unwrap());
            s.cached.insert(third.parse().unwrap());
        });
    }
    let subscribe = |id: u32, sh: &str| json!({"id": id, "method": "blockchain.scripthash.subscribe", "params": [sh]});

    let uncached = json!([subscribe(1, SH), subscribe(2, &"33".repeat(32))]);
    let history = json!({"id": 9, "method": "blockchain.scripthash.get_history", "params": [SH]});
    for (line, why) in [
        (uncached, "the second status is not cached"),
        (history, "reads the history"),
    ] {
        let incoming = fast.dispatcher.parse(line.to_string().as_bytes());
        let back =
            inline_answer(&fast.dispatcher, &mut fast.state, incoming.clone()).expect_err(why);
        assert_eq!(back, incoming, "{why}");
    }
    assert_eq!(fast.state.subscription_count(), 0, "nothing subscribed");

    let calls = fast.backend.update(|s| s.status_calls);
    for line in [
        subscribe(1, SH).to_string(),
        json!([
            subscribe(2, &unused),
            subscribe(3, &third),
            subscribe(4, SH)
        ])
        .to_string(),
    ] {
        let incoming = fast.dispatcher.parse(line.as_bytes());
        let answered = inline_answer(&fast.dispatcher, &mut fast.state, incoming)
            .expect("every status is cached");
        let expected = general.line(&line);
        assert_eq!(answered.response, expected.response, "{line}");
        assert_eq!(answered.effects, expected.effects, "{line}");
    }
    assert_eq!(
        fast.backend.update(|s| s.status_calls),
        calls,
        "no status computed"
    );
    let replies: Value = serde_json::from_str(
        general
            .line(&subscribe(5, SH).to_string())
            .response
            .as_deref()
            .unwrap(),
    )
    .unwrap();
    let want = StatusHash::of_history([(&txid(1), 5)]).unwrap().to_string();
    assert_eq!(replies["result"], json!(want));
    assert_eq!(fast.state.subscription_count(), 2);
    assert!(fast.state.is_subscribed(&ScriptKey {
        scripthash: used,
        form: ScriptForm::ScriptHash,
    }));
}

/// [`Dispatcher::answer_inline`] given the line's own estimate, as the
/// session calls it.
fn inline_answer(
    dispatcher: &Dispatcher,
    state: &mut SessionState,
    incoming: Incoming,
) -> Result<Outcome, Incoming> {
    let estimate = dispatcher.reply_estimate(state, &incoming);
    dispatcher.answer_inline(state, incoming, &estimate)
}

/// A newcomer's version, a ping, the server's description and the tip
/// are answered from memory on the session's own thread, reading no
/// header range and no status, exactly as the general path answers them
/// (the version negotiated, the headers subscription made); a line that
/// also reads the chain is given back.
#[test]
fn memory_only_requests_are_answered_inline() {
    let mut fast = Harness::new();
    let mut general = Harness::new();
    let lines = [
        json!({"id": 1, "method": "server.version", "params": ["wallet", "1.4"]}),
        json!([
            {"id": 2, "method": "server.ping", "params": []},
            {"id": 3, "method": "server.features", "params": []},
            {"id": 4, "method": "server.banner", "params": []},
            {"id": 5, "method": "server.donation_address", "params": []},
            {"id": 6, "method": "blockchain.headers.subscribe", "params": []},
        ]),
    ];
    for line in lines {
        let line = line.to_string();
        let incoming = fast.dispatcher.parse(line.as_bytes());
        let answered = inline_answer(&fast.dispatcher, &mut fast.state, incoming)
            .expect("answered from memory");
        let expected = general.line(&line);
        assert_eq!(answered.response, expected.response, "{line}");
        assert_eq!(answered.effects, expected.effects, "{line}");
    }
    assert_eq!(fast.state.negotiated(), general.state.negotiated());
    assert!(
        fast.state.negotiated().is_some(),
        "the version was negotiated"
    );
    assert_eq!(
        fast.backend.update(|s| (s.headers_calls, s.status_calls)),
        (0, 0)
    );
    let chain = json!([
        {"id": 7, "method": "server.ping", "params": []},
        {"id": 8, "method": "blockchain.block.header", "params": [1]},
    ])
    .to_string();
    let incoming = fast.dispatcher.parse(chain.as_bytes());
    let back = inline_answer(&fast.dispatcher, &mut fast.state, incoming.clone())
        .expect_err("a header is read from the chain");
    assert_eq!(back, incoming);
}

/// Cached subscriptions whose answers together pass `reply_bytes_max` (a
/// batch limit raised far above the reply limit) are refused as the general
/// path refuses them.
#[test]
fn cached_subscriptions_over_the_reply_limit_are_refused_alike() {
    let backend = Arc::new(FakeBackend::with_tip(3000));
    let hashes: Vec<String> = (1..=3).map(|i| format!("{i:02x}").repeat(32)).collect();
    backend.update(|s| {
        for sh in &hashes {
            s.cached.insert(sh.parse().unwrap());
        }
    });
    let limited = DispatchConfig {
        reply_bytes_max: 100,
        subscriptions_per_session_max: 10,
        ..config()
    };
    let dispatcher = Dispatcher::new(backend.clone(), limited);
    let batch = Value::Array(
        hashes
            .iter()
            .enumerate()
            .map(|(id, sh)| json!({"id": id, "method": "blockchain.scripthash.subscribe", "params": [sh]}))
            .collect(),
    )
    .to_string();
    let mut fast = SessionState::new();
    let incoming = dispatcher.parse(batch.as_bytes());
    let answered = inline_answer(&dispatcher, &mut fast, incoming).expect("every status is cached");
    let general =
        dispatcher.handle_line(&mut SessionState::new(), batch.as_bytes(), batch_threads());
    assert_eq!(answered.response, general.response);
    assert_eq!(answered.effects, general.effects);
    let answers: Value = serde_json::from_str(answered.response.as_deref().unwrap()).unwrap();
    for (id, answer) in answers.as_array().unwrap().iter().enumerate() {
        assert_eq!(answer["id"], id);
        assert_eq!(answer["error"]["code"], -101, "{answer}");
    }
}

/// A response line over `reply_bytes_max` (1 MiB here, the least allowed)
/// is refused, per request and under each request's id; the session goes
/// on.
#[test]
fn responses_over_the_reply_limit_are_refused() {
    let mut h = Harness::at("1.4");
    // 2,016 headers in hex: 322,560 characters, under the limit.
    let fits = h.ok("blockchain.block.headers", json!([0, 2016]));
    assert_eq!(fits["count"], 2016);
    // Four of them in one batch: 1.29 MB.
    let call =
        |id: Value| json!({"id": id, "method": "blockchain.block.headers", "params": [0, 2016]});
    let batch = json!([
        call(json!(7)),
        call(json!("x")),
        call(json!(8)),
        call(json!(9))
    ]);
    let out = h.line(&batch.to_string());
    let line = out.response.unwrap();
    assert!(
        line.len() < 2000,
        "the refusal is small: {} bytes",
        line.len()
    );
    let answers: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(answers.as_array().map(Vec::len), Some(4));
    assert_eq!(answers[0]["id"], 7);
    assert_eq!(answers[1]["id"], "x");
    for answer in answers.as_array().unwrap() {
        assert_eq!(answer["error"]["code"], -101, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("exceeds the limit of 1048576"),
            "{message}"
        );
    }
    assert_eq!(h.ok("server.banner", json!([])), "Welcome");
}

/// A batch whose answers pass `reply_bytes_max` stops being answered: the
/// requests after that point are never run, so the server never holds the
/// reply the client asked for. Every way a batch is run: in parallel, and
/// one request at a time, whether because it also subscribes to headers or
/// because its caller gave it no threads (a busy server). Histories, whose
/// length is not known before they are read.
#[test]
fn a_batch_over_the_reply_limit_stops_being_answered() {
    for (ordered, threads) in [
        (false, batch_threads()),
        (true, batch_threads()),
        (false, None),
    ] {
        let spread = !ordered && threads.is_some();
        let case = format!("ordered {ordered}, threads given {}", threads.is_some());
        let backend = Arc::new(FakeBackend::with_tip(3000));
        let long = history_of(1_500);
        backend.update(|s| {
            s.history_entries_max = 10_000;
            s.histories.insert(SH.parse().unwrap(), long)
        });
        let dispatcher = Dispatcher::new(
            backend.clone(),
            DispatchConfig {
                batch_requests_max: 100,
                ..config()
            },
        );
        let mut state = SessionState::new();
        // 100 histories of 1,500 entries (~138 kB each): a 14 MB reply,
        // 13 times the 1 MiB limit.
        let mut batch: Vec<Value> = (0..100)
            .map(|id| json!({"id": id, "method": "blockchain.scripthash.get_history", "params": [SH]}))
            .collect();
        if ordered {
            batch[0] = json!({"id": 0, "method": "blockchain.headers.subscribe", "params": []});
        }
        let out = dispatcher.handle_line(
            &mut state,
            Value::Array(batch).to_string().as_bytes(),
            threads,
        );
        assert_all_refused(&out, 100, &case);
        // Eight answers pass 1 MiB; each of the batch threads may have one
        // more under way when the limit is passed.
        let run = backend.update(|s| s.history_calls);
        let bound = if spread { 8 + BATCH_THREADS } else { 8 };
        assert!(
            (7..=bound).contains(&run),
            "{case}: {run} of 100 history requests were run"
        );
    }
}

/// `len` confirmed history entries.
fn history_of(len: u32) -> Vec<HistoryEntry> {
    (0..len)
        .map(|i| HistoryEntry {
            txid: txid((i % 250) as u8),
            height: i64::from(1_000 + i),
            fee: None,
        })
        .collect()
}

/// Every one of `count` answers of `out` is the reply limit's -101, under
/// its request's id.
fn assert_all_refused(out: &Outcome, count: usize, case: &str) {
    let answers: Value = serde_json::from_str(out.response.as_deref().unwrap()).unwrap();
    let answers = answers.as_array().unwrap();
    assert_eq!(answers.len(), count, "{case}");
    for (id, answer) in answers.iter().enumerate() {
        assert_eq!(answer["id"], id, "{case}: {answer}");
        assert_eq!(answer["error"]["code"], -101, "{case}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("more than") && message.contains("exceeds the limit of 1048576"),
            "{message}"
        );
    }
}

/// A batch whose answers certainly cannot fit (headers: 160 hex characters
/// each, as many as the chain has) is refused before any of it runs, on
/// the session's own thread or a handler's alike; and what it would take
/// is known beforehand, for the session's cost.
#[test]
fn a_batch_that_cannot_fit_is_refused_unrun() {
    let backend = Arc::new(FakeBackend::with_tip(3000));
    let dispatcher = Dispatcher::new(
        backend.clone(),
        DispatchConfig {
            batch_requests_max: 100,
            ..config()
        },
    );
    // 100 requests of 2,016 headers (322,560 hex characters each): a
    // 32 MB reply, 31 times the 1 MiB limit.
    let batch = Value::Array(
        (0..100)
            .map(|id| json!({"id": id, "method": "blockchain.block.headers", "params": [0, 2016]}))
            .collect(),
    )
    .to_string();
    let mut state = SessionState::new();
    let incoming = dispatcher.parse(batch.as_bytes());
    let estimate = dispatcher.reply_estimate(&state, &incoming);
    assert_eq!(estimate.at_least, 100 * 2016 * 160);
    let inline = inline_answer(&dispatcher, &mut state, incoming).expect("refused on the spot");
    assert_all_refused(&inline, 100, "inline");
    let general = dispatcher.handle_line(&mut state, batch.as_bytes(), batch_threads());
    assert_eq!(general.response, inline.response);
    assert_eq!(backend.update(|s| s.headers_calls), 0, "nothing was run");
    // Near the tip only what the chain has counts: 100 times one header.
    let near_tip = Value::Array(
        (0..100)
            .map(|id| json!({"id": id, "method": "blockchain.block.headers", "params": [3000, 2016]}))
            .collect(),
    )
    .to_string();
    let estimate = dispatcher.reply_estimate(&state, &dispatcher.parse(near_tip.as_bytes()));
    assert_eq!(estimate.at_least, 100 * 160);
}

/// Once a long history has been written for sharing, a line asking for
/// it is expected to take that many bytes before it runs (the session
/// charges it to its cost first); one never written is expected to take
/// nothing in particular.
#[test]
fn a_shared_history_is_expected_before_it_is_asked_again() {
    let mut h = Harness::at("1.4");
    let sh: ScriptHash = SH.parse().unwrap();
    h.backend.update(|s| {
        s.history_entries_max = 10_000;
        s.histories.insert(sh, history_of(500));
        s.cached.insert(sh);
    });
    let ask =
        json!({"id": 1, "method": "blockchain.scripthash.get_history", "params": [SH]}).to_string();
    let before = h
        .dispatcher
        .reply_estimate(&h.state, &h.dispatcher.parse(ask.as_bytes()));
    assert_eq!(before, ReplyEstimate::default());
    let answer: Value = serde_json::from_str(&h.line(&ask).response.unwrap()).unwrap();
    let text_len = answer["result"].to_string().len();
    let after = h
        .dispatcher
        .reply_estimate(&h.state, &h.dispatcher.parse(ask.as_bytes()));
    assert_eq!(
        after,
        ReplyEstimate {
            at_least: 0,
            expected: text_len
        }
    );
}

/// A peer list that answers `accept` to add_peer and records each call.
struct RecordingPeers {
    listed: Vec<PeerInfo>,
    accept: bool,
    added: Mutex<Vec<(PeerFeatures, IpAddr)>>,
}

impl Peers for RecordingPeers {
    fn known(&self) -> Vec<PeerInfo> {
        self.listed.clone()
    }

    fn add(&self, features: PeerFeatures, source: IpAddr) -> bool {
        self.added.lock().unwrap().push((features, source));
        self.accept
    }
}

fn with_peers(peers: Arc<RecordingPeers>, source: Option<&str>) -> Harness {
    let mut config = config();
    config.info.hosts = vec![
        "electrum.example.com:t50001:s50002".parse().unwrap(),
        "abcdefghij234567.onion:t50001".parse().unwrap(),
    ];
    let backend = Arc::new(FakeBackend::with_tip(3000));
    Harness {
        dispatcher: Dispatcher::new(backend.clone(), config).with_peers(peers),
        backend,
        state: match source {
            Some(ip) => SessionState::from_source(ip.parse().unwrap()),
            None => SessionState::new(),
        },
    }
}

/// `hosts` in the spec's shape, a host without TLS omitting `ssl_port`;
/// the peer list as `[ip, host, ["v…", "p…", "t…", "s…"]]`.
#[test]
fn public_hosts_and_peers_have_the_specs_shape() {
    let peers = Arc::new(RecordingPeers {
        listed: vec![
            PeerInfo {
                ip: "203.0.113.7".parse().unwrap(),
                host: "peer.example.org".into(),
                protocol_max: "1.6".into(),
                pruning: None,
                tcp_port: Some(50001),
                ssl_port: Some(50002),
            },
            PeerInfo {
                ip: "2001:db8::7".parse().unwrap(),
                host: "2001:db8::7".into(),
                protocol_max: "1.4".into(),
                pruning: Some(10000),
                tcp_port: None,
                ssl_port: Some(995),
            },
        ],
        accept: true,
        added: Mutex::new(Vec::new()),
    });
    let mut h = with_peers(peers, None);
    let f = h.ok("server.features", json!([]));
    assert_eq!(
        f["hosts"],
        json!({
            "electrum.example.com": {"tcp_port": 50001, "ssl_port": 50002},
            "abcdefghij234567.onion": {"tcp_port": 50001},
        })
    );
    assert_eq!(
        h.ok("server.peers.subscribe", json!([])),
        json!([
            [
                "203.0.113.7",
                "peer.example.org",
                ["v1.6", "t50001", "s50002"]
            ],
            ["2001:db8::7", "2001:db8::7", ["v1.4", "p10000", "s995"]],
        ])
    );
    // What a server without public hosts reports: the mandatory key, empty.
    let mut h = Harness::at("1.4");
    assert_eq!(h.ok("server.features", json!([]))["hosts"], json!({}));
}

/// add_peer hands the peer list the announced features and the caller's
/// address and answers its verdict; another chain's features never reach
/// it; a server without a peer list, or a caller without an address,
/// gets false.
#[test]
fn add_peer_reaches_the_peer_list_with_the_callers_address() {
    let features = |genesis: String| {
        json!({
            "genesis_hash": genesis,
            "hosts": {"Peer.Example.org": {"tcp_port": 50001, "ssl_port": null}},
            "protocol_max": "1.6",
            "protocol_min": "1.4",
            "pruning": null,
            "server_version": "ElectrumX 1.18",
            "hash_function": "sha256",
        })
    };
    let ours = BlockHash::all_zeros().to_string();
    for accept in [true, false] {
        let peers = Arc::new(RecordingPeers {
            listed: Vec::new(),
            accept,
            added: Mutex::new(Vec::new()),
        });
        let mut h = with_peers(Arc::clone(&peers), Some("198.51.100.9"));
        assert_eq!(
            h.ok("server.add_peer", json!([features(ours.clone())])),
            accept
        );
        let added = peers.added.lock().unwrap().clone();
        assert_eq!(added.len(), 1);
        let (announced, source) = &added[0];
        assert_eq!(*source, "198.51.100.9".parse::<IpAddr>().unwrap());
        assert_eq!(
            announced.hosts,
            vec![PublicHost {
                host: "peer.example.org".into(),
                tcp_port: Some(50001),
                ssl_port: None
            }]
        );
        assert_eq!(announced.protocol_max, "1.6");
    }
    let peers = Arc::new(RecordingPeers {
        listed: Vec::new(),
        accept: true,
        added: Mutex::new(Vec::new()),
    });
    let mut h = with_peers(Arc::clone(&peers), Some("198.51.100.9"));
    let other_chain = "00".repeat(31) + "01";
    assert_eq!(
        h.ok(
            "server.add_peer",
            json!({"features": features(other_chain)})
        ),
        false
    );
    assert_eq!(
        h.ok("server.add_peer", json!([{"hosts": {}}])),
        false,
        "no genesis hash"
    );
    assert!(peers.added.lock().unwrap().is_empty());
    let (code, msg) = h.err("server.add_peer", json!(["peer.example.org"]));
    assert_eq!(
        (code, msg.as_str()),
        (-32602, "invalid params: features: must be an object")
    );
    // Batched, it is answered too.
    let call = json!({"id": 3, "method": "server.add_peer", "params": [features(ours.clone())]});
    let out = h.line(&json!([call, {"id": 4, "method": "server.banner"}]).to_string());
    let answers: Value = serde_json::from_str(&out.response.unwrap()).unwrap();
    assert_eq!(
        answers[0],
        json!({"jsonrpc": "2.0", "id": 3, "result": true})
    );
    assert_eq!(peers.added.lock().unwrap().len(), 1);
    // No peer list, or no caller address: false.
    let mut h = Harness::at("1.4");
    assert_eq!(
        h.ok("server.add_peer", json!([features(ours.clone())])),
        false
    );
    let mut h = with_peers(peers, None);
    assert_eq!(h.ok("server.add_peer", json!([features(ours)])), false);
}

/// 1.7's outpoint methods: unknown below 1.7; at 1.7 the three shapes of
/// a status, the mandatory hint passed on as a script hash, subscriptions
/// counted against the session's limit, and unsubscribe's true/false.
#[test]
fn outpoint_methods_answer_in_the_1_7_shapes_at_1_7_only() {
    use bitcoin::OutPoint;
    use osprey_answers::{OutpointAnswer, OutpointStatus};
    let funded = OutPoint {
        txid: txid(1),
        vout: 0,
    };
    let spent = OutPoint {
        txid: txid(2),
        vout: 1,
    };
    let sh: ScriptHash = SH.parse().unwrap();
    let answers = [
        (
            funded,
            OutpointStatus {
                height: Some(120),
                spender: None,
            },
        ),
        (
            spent,
            OutpointStatus {
                height: Some(0),
                spender: Some((txid(3), -1)),
            },
        ),
    ];
    for version in ["1.4", "1.6"] {
        let mut h = Harness::at(version);
        for method in [
            "blockchain.outpoint.subscribe",
            "blockchain.outpoint.get_status",
            "blockchain.outpoint.unsubscribe",
        ] {
            let (code, msg) = h.err(method, json!([funded.txid.to_string(), 0, P2PKH]));
            assert_eq!(code, -32601, "{version} {method}: {msg}");
        }
        assert_eq!(h.state.subscription_count(), 0);
    }
    let mut h = Harness::at("1.7");
    h.backend.update(|s| {
        for (outpoint, status) in answers {
            s.outpoints.insert(
                outpoint,
                OutpointAnswer {
                    status,
                    scripthash: Some(sh),
                },
            );
        }
    });
    let params = |o: &OutPoint| json!([o.txid.to_string(), o.vout, P2PKH]);
    let unhinted = |o: &OutPoint| json!([o.txid.to_string(), o.vout]);
    assert_eq!(
        h.ok("blockchain.outpoint.get_status", params(&funded)),
        json!({"funder_height": 120})
    );
    for method in [
        "blockchain.outpoint.get_status",
        "blockchain.outpoint.subscribe",
    ] {
        let (code, msg) = h.err(method, unhinted(&funded));
        assert_eq!(code, -32602, "{method}");
        assert!(
            msg.ends_with("spk_hint: missing required parameter"),
            "{msg}"
        );
    }
    assert_eq!(
        h.ok(
            "blockchain.outpoint.get_status",
            json!({"tx_hash": spent.txid.to_string(), "txout_idx": 1, "spk_hint": P2PKH})
        ),
        json!({"funder_height": 0, "spender_txhash": txid(3).to_string(), "spender_height": -1})
    );
    let script = hex::decode(P2PKH).unwrap();
    assert_eq!(
        h.backend.update(|s| s.last_outpoint_hint),
        Some(ScriptHash::from_script(&script)),
        "the hint reaches the backend as the script's hash"
    );
    let unknown = OutPoint {
        txid: txid(9),
        vout: 0,
    };
    assert_eq!(
        h.ok("blockchain.outpoint.get_status", params(&unknown)),
        json!({})
    );
    assert_eq!(
        h.state.subscription_count(),
        0,
        "get_status subscribes nothing"
    );

    // Subscribing answers the status and tells the notifier, even for an
    // outpoint nobody knows yet (the server "MUST save the subscription
    // even if the outpoint does not exist yet").
    let out = h.line(
        &json!({"id": 1, "method": "blockchain.outpoint.subscribe", "params": params(&unknown)})
            .to_string(),
    );
    let r: Value = serde_json::from_str(out.response.as_deref().unwrap()).unwrap();
    assert_eq!(r["result"], json!({}));
    assert_eq!(
        out.effects,
        vec![Effect::OutpointSubscribed {
            outpoint: unknown,
            answer: OutpointAnswer::default()
        }]
    );
    assert_eq!(
        h.ok("blockchain.outpoint.subscribe", params(&spent))["spender_height"],
        -1
    );
    // The limit (2) counts outpoints like scripts.
    let (code, _) = h.err("blockchain.outpoint.subscribe", params(&funded));
    assert_eq!(code, -101);
    let (code, _) = h.err("blockchain.scriptpubkey.subscribe", json!([P2PKH]));
    assert_eq!(code, -101);

    let out = h.line(
        &json!({"id": 2, "method": "blockchain.outpoint.unsubscribe", "params": unhinted(&unknown)})
            .to_string(),
    );
    let r: Value = serde_json::from_str(out.response.as_deref().unwrap()).unwrap();
    assert_eq!(r["result"], true);
    assert_eq!(
        out.effects,
        vec![Effect::OutpointUnsubscribed { outpoint: unknown }]
    );
    assert_eq!(
        h.ok("blockchain.outpoint.unsubscribe", unhinted(&unknown)),
        false
    );
    assert_eq!(
        h.ok("blockchain.outpoint.unsubscribe", unhinted(&funded)),
        false,
        "never subscribed"
    );
    assert_eq!(h.state.subscription_count(), 1);

    // In a batch, subscriptions keep their order and queries still answer.
    let batch = json!([
        {"id": "a", "method": "blockchain.outpoint.subscribe", "params": params(&funded)},
        {"id": "b", "method": "blockchain.outpoint.get_status", "params": params(&spent)},
        {"id": "c", "method": "blockchain.outpoint.unsubscribe", "params": unhinted(&spent)},
    ]);
    let out = h.line(&batch.to_string());
    let r: Value = serde_json::from_str(out.response.as_deref().unwrap()).unwrap();
    assert_eq!(r[0]["result"], json!({"funder_height": 120}), "{r}");
    assert_eq!(r[1]["result"]["spender_txhash"], txid(3).to_string());
    assert_eq!(r[2]["result"], true);
    assert!(matches!(
        out.effects.as_slice(),
        [
            Effect::OutpointSubscribed { outpoint: a, .. },
            Effect::OutpointUnsubscribed { outpoint: c }
        ] if *a == funded && *c == spent
    ));
}

/// Silent payments (docs/silent-payments.md, 1.2-1.4) against the fake
/// with its index on.
mod silent_payments {
    use super::*;
    use crate::session::{SubscriptionBudget, SP_SUBSCRIPTION_BYTES};
    use crate::silent_payments::{SP_SUBSCRIBE, SP_UNSUBSCRIBE};
    use bitcoin::secp256k1::{PublicKey, Secp256k1, SecretKey};
    use osprey_core::ByteBudget;

    /// The hex of secret key `i` (any small `i` is a valid key).
    fn scan_key(i: u8) -> String {
        let mut bytes = [0u8; 32];
        bytes[31] = i;
        hex::encode(bytes)
    }

    fn spend_key(i: u8) -> String {
        let mut bytes = [0u8; 32];
        bytes[0] = 0x42;
        bytes[31] = i;
        let secret = SecretKey::from_slice(&bytes).unwrap();
        PublicKey::from_secret_key(&Secp256k1::new(), &secret).to_string()
    }

    fn enabled(h: Harness) -> Harness {
        h.backend.update(|s| s.sp_enabled = true);
        h
    }

    fn subscribe_effect(out: &Outcome) -> &crate::SpSubscription {
        match out.effects.as_slice() {
            [Effect::SilentPaymentsSubscribed(subscription)] => subscription,
            other => panic!("{other:?}"),
        }
    }

    fn call_line(method: &str, params: Value) -> String {
        json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string()
    }

    /// `server.features` has `"silent_payments": [0]` exactly when the
    /// backend keeps the index, at every version.
    #[test]
    fn features_announce_silent_payments_only_with_the_index() {
        for version in ["1.4", "1.6", "1.7"] {
            let mut h = Harness::at(version);
            assert_eq!(
                h.ok("server.features", json!([])).get("silent_payments"),
                None
            );
            let mut h = enabled(Harness::at(version));
            assert_eq!(
                h.ok("server.features", json!([]))["silent_payments"],
                json!([0])
            );
        }
    }

    #[test]
    fn without_the_index_both_methods_are_unknown() {
        let mut h = Harness::new();
        for (method, params) in [
            (SP_SUBSCRIBE, json!([scan_key(1), spend_key(1), 0, []])),
            // Even malformed parameters: the method itself is unknown.
            (SP_SUBSCRIBE, json!(["zz"])),
            (SP_UNSUBSCRIBE, json!([scan_key(1), spend_key(1)])),
        ] {
            let (code, message) = h.err(method, params);
            assert_eq!(code, -32601);
            assert_eq!(
                message,
                format!("unknown method \"{method}\": this server keeps no silent payments index")
            );
        }
    }

    /// Every error row of 1.2 with its code and message.
    #[test]
    fn every_parameter_error_has_its_code_and_message() {
        let mut h = enabled(Harness::new());
        let (scan, spend) = (scan_key(1), spend_key(1));
        let order = "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141";
        let scan_error = "invalid params: scan_private_key must be a 32-byte secret key in hex";
        let spend_error = "invalid params: spend_public_key must be a compressed public key in hex";
        let start_error = "invalid params: start must be a height, a Unix time or \"FROM-TO\"";
        let labels_error = "invalid params: labels must be integers from 0 to 4294967295";
        let uncompressed = {
            let key: PublicKey = spend.parse().unwrap();
            hex::encode(key.serialize_uncompressed())
        };
        let cases = [
            (json!([]), scan_error.to_string()),
            (json!([7, spend]), scan_error.into()),
            (json!([&scan[..62], spend]), scan_error.into()),
            (json!([scan.replace('0', "g"), spend]), scan_error.into()),
            (json!(["00".repeat(32), spend]), scan_error.into()),
            (json!([order, spend]), scan_error.into()),
            (json!([format!("{scan}00"), spend]), scan_error.into()),
            (json!([scan]), spend_error.into()),
            (json!([scan, &spend[2..]]), spend_error.into()),
            (
                json!([scan, format!("04{}", &spend[2..])]),
                spend_error.into(),
            ),
            (
                json!([scan, format!("02{}", "00".repeat(32))]),
                spend_error.into(),
            ),
            (json!([scan, uncompressed]), spend_error.into()),
            (json!([scan, spend, -1]), start_error.into()),
            (json!([scan, spend, 1.5]), start_error.into()),
            (json!([scan, spend, true]), start_error.into()),
            (json!([scan, spend, [1, 2]]), start_error.into()),
            (
                json!([scan, spend, "abc"]),
                "invalid params: start range \"abc\" must be two decimal heights, \"FROM-TO\""
                    .into(),
            ),
            (
                json!([scan, spend, "5-"]),
                "invalid params: start range \"5-\" must be two decimal heights, \"FROM-TO\""
                    .into(),
            ),
            (
                json!([scan, spend, "-5-7"]),
                "invalid params: start range \"-5-7\" must be two decimal heights, \"FROM-TO\""
                    .into(),
            ),
            (
                json!([scan, spend, "7-5"]),
                "invalid params: start range \"7-5\": FROM is above TO".into(),
            ),
            (
                json!([scan, spend, "10-3001"]),
                "invalid params: start range \"10-3001\": TO is above the tip (3000)".into(),
            ),
            (json!([scan, spend, 0, [-1]]), labels_error.into()),
            (json!([scan, spend, 0, [1.5]]), labels_error.into()),
            (json!([scan, spend, 0, ["1"]]), labels_error.into()),
            (
                json!([scan, spend, 0, [4_294_967_296u64]]),
                labels_error.into(),
            ),
            (json!([scan, spend, 0, 5]), labels_error.into()),
            (
                json!([scan, spend, 0, [1, 2, 3, 4]]),
                "invalid params: at most 3 labels".into(),
            ),
            (
                json!([scan, spend, 0, [], "more"]),
                "invalid params: expected at most 4 parameters (scan_private_key, \
                 spend_public_key, start, labels), got 5"
                    .into(),
            ),
        ];
        for (params, want) in cases {
            let (code, message) = h.err(SP_SUBSCRIBE, params.clone());
            assert_eq!(
                (code, message.as_str()),
                (-32602, want.as_str()),
                "{params}"
            );
            assert!(!message.contains(&scan), "no message repeats the key");
        }
        assert_eq!(h.state.silent_subscription_count(), 0);
        for (params, want) in [
            (json!([scan]), spend_error),
            (json!(["1"]), scan_error),
            (json!({"scan_private_key": scan}), spend_error),
        ] {
            assert_eq!(h.err(SP_UNSUBSCRIBE, params), (-32602, want.to_string()));
        }
        // The largest label, 0 and duplicates are fine: 0 is always scanned.
        let r = h.ok(
            SP_SUBSCRIBE,
            json!([scan, spend, 0, [4_294_967_295u64, 0, 3, 3, 1]]),
        );
        assert_eq!(r["labels"], json!([0, 1, 3, 4_294_967_295u64]));
    }

    /// A connection holds at most `subscriptions_per_session_max` addresses;
    /// subscribing one again does not count, unsubscribing makes room.
    #[test]
    fn the_subscription_limit_counts_addresses() {
        let mut h = enabled(Harness::new());
        for i in [1, 2, 1, 2] {
            h.ok(SP_SUBSCRIBE, json!([scan_key(i), spend_key(i)]));
        }
        let (code, message) = h.err(SP_SUBSCRIBE, json!([scan_key(3), spend_key(3)]));
        assert_eq!(
            (code, message.as_str()),
            (
                -32602,
                "invalid params: subscription limit reached (2) for this connection"
            )
        );
        h.ok(SP_UNSUBSCRIBE, json!([scan_key(1), spend_key(1)]));
        h.ok(SP_SUBSCRIBE, json!([scan_key(3), spend_key(3)]));
        // Script subscriptions have a limit of their own.
        h.ok("blockchain.scripthash.subscribe", json!([SH]));
    }

    /// A subscription the client memory budget cannot hold is refused
    /// with -102, as other subscriptions are.
    #[test]
    fn the_memory_budget_bounds_subscriptions() {
        let keep_free = 1000;
        let budget = ByteBudget::new(keep_free + SP_SUBSCRIPTION_BYTES + 10);
        let config = DispatchConfig {
            subscription_budget: Some(SubscriptionBudget {
                budget: Arc::clone(&budget),
                keep_free,
            }),
            ..config()
        };
        let mut h = enabled(Harness::with_config(config));
        h.state = h.dispatcher.new_session("127.0.0.1".parse().unwrap());
        h.ok(SP_SUBSCRIBE, json!([scan_key(1), spend_key(1)]));
        let (code, _) = h.err(SP_SUBSCRIBE, json!([scan_key(2), spend_key(2)]));
        assert_eq!(code, -102);
        h.ok(SP_UNSUBSCRIBE, json!([scan_key(1), spend_key(1)]));
        h.ok(SP_SUBSCRIBE, json!([scan_key(2), spend_key(2)]));
    }

    /// The result has exactly `address`, `labels` and `start_height`, in
    /// that order, and is the text the notifications repeat.
    #[test]
    fn the_result_is_the_subscription_text() {
        let mut h = enabled(Harness::new());
        let out = h.line(&call_line(
            SP_SUBSCRIBE,
            json!([scan_key(1), spend_key(1), 120, [7]]),
        ));
        let response = out.response.clone().unwrap();
        let subscription = subscribe_effect(&out);
        assert!(
            response.contains(&format!("\"result\":{}", subscription.text)),
            "{response}"
        );
        let result: Value = serde_json::from_str(&subscription.text).unwrap();
        let keys: Vec<&String> = result.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["address", "labels", "start_height"]);
        assert!(subscription.text.starts_with("{\"address\":\"sprt1q"));
        assert!(subscription
            .text
            .ends_with(",\"labels\":[0,7],\"start_height\":120}"));
        assert_eq!(result["address"], subscription.address);
        assert_eq!(subscription.address.len(), "sprt1q".len() + 112);
        assert_eq!(
            (subscription.start_height, subscription.end_height),
            (Height(120), Height(3000))
        );
        assert!(!subscription.named);
        assert_eq!(
            subscription.keys.labels().collect::<Vec<_>>(),
            [0, 7],
            "the keys scan what the client was told"
        );
        // The address names the keys: another spend key, another address.
        let other = h.ok(SP_SUBSCRIBE, json!([scan_key(1), spend_key(2)]));
        assert_ne!(other["address"], result["address"]);
        assert_eq!(other["labels"], json!([0]));
        assert_eq!(other["start_height"], 0, "no start: height 0");
    }

    /// `start` as a time resolves through the headers' times (1.2.1), a
    /// range covers exactly its heights, and parameters may come by name.
    #[test]
    fn start_as_time_range_or_by_name() {
        let mut h = enabled(Harness::new());
        const T0: u32 = 1_600_000_000;
        h.backend.update(|s| {
            for (height, header) in s.headers.iter_mut().enumerate() {
                let time = T0 + 600 * height as u32;
                header[68..72].copy_from_slice(&time.to_le_bytes());
            }
        });
        // Times up to `start - 7200` cover heights 0..=10.
        let start = u64::from(T0) + 7200 + 6000;
        let out = h.line(&call_line(
            SP_SUBSCRIBE,
            json!([scan_key(1), spend_key(1), start]),
        ));
        let subscription = subscribe_effect(&out);
        assert_eq!(
            (subscription.start_height, subscription.end_height),
            (Height(10), Height(3000))
        );
        // 499,999,999 is still a height.
        let r = h.ok(
            SP_SUBSCRIBE,
            json!([scan_key(2), spend_key(2), 499_999_999]),
        );
        assert_eq!(r["start_height"], 499_999_999);
        h.ok(SP_UNSUBSCRIBE, json!([scan_key(2), spend_key(2)]));
        let out = h.line(&call_line(
            SP_SUBSCRIBE,
            json!({
                "scan_private_key": scan_key(3),
                "spend_public_key": spend_key(3),
                "start": "100-2000",
                "labels": [1],
            }),
        ));
        let subscription = subscribe_effect(&out);
        assert_eq!(
            (
                subscription.start_height,
                subscription.end_height,
                subscription.tip_height
            ),
            (Height(100), Height(2000), Height(3000)),
            "the range, then the tip"
        );
        assert!(subscription.named, "notifications answer by name");
        let (code, message) = h.err(
            SP_SUBSCRIBE,
            json!({"scan_private_key": scan_key(3), "spend_public_key": spend_key(3), "begin": 1}),
        );
        assert_eq!(code, -32602);
        assert!(message.contains("unknown parameter \"begin\""), "{message}");
    }

    /// Subscribing again never narrows coverage: the lower start is
    /// answered; the labels are the new request's; each is an effect (its
    /// historical scan runs again).
    #[test]
    fn subscribing_again_keeps_the_lower_start() {
        let mut h = enabled(Harness::new());
        let (scan, spend) = (scan_key(1), spend_key(1));
        for (start, labels, want) in [
            (500, json!([1]), 500),
            (100, json!([]), 100),
            (900, json!([2]), 100),
        ] {
            let out = h.line(&call_line(
                SP_SUBSCRIBE,
                json!([scan, spend, start, labels]),
            ));
            let subscription = subscribe_effect(&out);
            assert_eq!(subscription.start_height, Height(want));
            let labels: Vec<u32> = subscription.keys.labels().collect();
            let asked: Vec<u32> = serde_json::from_value(labels_of(&out)).unwrap();
            assert_eq!(labels, asked);
        }
        assert_eq!(h.state.silent_subscription_count(), 1);
    }

    fn labels_of(out: &Outcome) -> Value {
        let r: Value = serde_json::from_str(out.response.as_ref().unwrap()).unwrap();
        r["result"]["labels"].clone()
    }

    /// Unsubscribe answers the address whether or not it was subscribed;
    /// only a real unsubscription is an effect.
    #[test]
    fn unsubscribe_answers_the_address() {
        let mut h = enabled(Harness::new());
        let (scan, spend) = (scan_key(1), spend_key(1));
        let address = h.ok(SP_SUBSCRIBE, json!([scan, spend]))["address"].clone();
        let out = h.line(&call_line(
            SP_UNSUBSCRIBE,
            json!({"scan_private_key": scan, "spend_public_key": spend}),
        ));
        assert_eq!(
            out.effects,
            [Effect::SilentPaymentsUnsubscribed {
                address: address.as_str().unwrap().to_string()
            }]
        );
        let out = h.line(&call_line(SP_UNSUBSCRIBE, json!([scan, spend])));
        assert!(out.effects.is_empty());
        let r: Value = serde_json::from_str(&out.response.unwrap()).unwrap();
        assert_eq!(r["result"], address);
    }

    /// A batch with a silent-payments call runs in order, so its effects
    /// keep their order.
    #[test]
    fn a_batch_subscribes_in_order() {
        let mut h = enabled(Harness::new());
        let batch = json!([
            {"id": 1, "method": SP_SUBSCRIBE, "params": [scan_key(1), spend_key(1)]},
            {"id": 2, "method": SP_UNSUBSCRIBE, "params": [scan_key(1), spend_key(1)]},
            {"id": 3, "method": "server.ping", "params": []},
        ]);
        let out = h.line(&batch.to_string());
        assert!(matches!(
            out.effects.as_slice(),
            [
                Effect::SilentPaymentsSubscribed(_),
                Effect::SilentPaymentsUnsubscribed { .. }
            ]
        ));
    }

    /// Nothing prints the scan key: not a request's `Debug`, not an
    /// effect's.
    #[test]
    fn debug_never_shows_the_scan_key() {
        let mut h = enabled(Harness::new());
        let scan = scan_key(0xab);
        let params = crate::jsonrpc::Params::Positional(vec![json!(scan), json!(spend_key(1))]);
        let request = crate::request::Request::parse(SP_SUBSCRIBE, &params, ProtocolVersion::V1_6);
        let text = format!("{request:?}");
        assert!(text.contains("SilentPaymentsSubscribe"), "{text}");
        assert!(!text.contains(&scan), "{text}");
        let out = h.line(&call_line(SP_SUBSCRIBE, json!([scan, spend_key(1)])));
        let text = format!("{:?}", out.effects);
        assert!(text.contains("sprt1q"), "{text}");
        assert!(!text.contains(&scan), "{text}");
    }
}

/// During the first sync (the backend says how far it is), what is right
/// at any height is answered: the server's methods, headers up to the
/// indexed tip, the node's fee estimates. Everything a wallet asks about
/// scripts, transactions, outpoints, the mempool or silent payments gets
/// electrs' "unavailable index" code with the progress, also on the
/// inline path a cached status would take. Once the sync is over, the
/// same requests are answered.
#[test]
fn during_the_first_sync_only_what_is_right_at_any_height_is_answered() {
    let mut h = Harness::at("1.4");
    h.backend.update(|s| {
        s.indexing = Some(osprey_answers::Indexing {
            height: Height(3000),
            node_height: Height(870_000),
            merging: None,
        });
        s.estimate = Some(0.0002);
        s.cached.insert(SH.parse().unwrap());
    });
    h.ok("server.banner", json!([]));
    h.ok("server.features", json!([]));
    h.ok("server.ping", json!([]));
    h.ok("server.peers.subscribe", json!([]));
    assert_eq!(
        h.ok("blockchain.headers.subscribe", json!([]))["height"],
        3000
    );
    h.ok("blockchain.block.header", json!([2999]));
    h.ok("blockchain.block.headers", json!([0, 10]));
    h.ok("blockchain.estimatefee", json!([2]));
    h.ok("blockchain.relayfee", json!([]));
    let refused = [
        ("blockchain.scripthash.get_history", json!([SH])),
        ("blockchain.scripthash.get_balance", json!([SH])),
        ("blockchain.scripthash.listunspent", json!([SH])),
        ("blockchain.scripthash.get_mempool", json!([SH])),
        ("blockchain.scripthash.subscribe", json!([SH])),
        ("blockchain.transaction.get", json!([txid(1).to_string()])),
        (
            "blockchain.transaction.get_merkle",
            json!([txid(1).to_string(), 5]),
        ),
        ("blockchain.transaction.id_from_pos", json!([5, 0])),
        ("blockchain.transaction.broadcast", json!(["00"])),
        ("mempool.get_fee_histogram", json!([])),
    ];
    for (method, params) in &refused {
        let (code, message) = h.err(method, params.clone());
        assert_eq!(code, -32603, "{method}");
        assert!(
            message.starts_with("unavailable index: indexing: height 3000 of 870000"),
            "{method}: {message}"
        );
    }
    assert_eq!(h.state.subscription_count(), 0, "nothing subscribed");
    // The fast path of a reconnecting wallet refuses too, rather than
    // answering a status of a partial history.
    let line = json!({"id": 7, "method": "blockchain.scripthash.subscribe", "params": [SH]});
    let incoming = h.dispatcher.parse(line.to_string().as_bytes());
    let answered = inline_answer(&h.dispatcher, &mut h.state, incoming.clone());
    let outcome = match answered {
        Ok(outcome) => outcome,
        Err(back) => h.dispatcher.handle_incoming(&mut h.state, back, None),
    };
    let reply: Value = serde_json::from_str(&outcome.response.expect("a reply")).unwrap();
    assert_eq!(reply["error"]["code"], -32603, "{reply}");
    assert!(outcome.effects.is_empty());

    // Before the first commit there is no tip to give.
    let headers = h.backend.update(|s| std::mem::take(&mut s.headers));
    let (code, message) = h.err("blockchain.headers.subscribe", json!([]));
    assert_eq!(code, -32603);
    assert!(
        message.starts_with("unavailable index: indexing"),
        "{message}"
    );
    h.backend.update(|s| s.headers = headers);

    // At the tip, while the bulk load is merged, the error says so.
    h.backend.update(|s| {
        s.indexing = Some(osprey_answers::Indexing {
            height: Height(870_000),
            node_height: Height(870_000),
            merging: Some(osprey_answers::Merging {
                partition: 3,
                partitions: 16,
            }),
        })
    });
    let (code, message) = h.err("blockchain.scripthash.get_history", json!([SH]));
    assert_eq!(code, -32603);
    assert_eq!(
        message,
        "unavailable index: indexing: height 870000 of 870000, merging the index \
         (partition 3 of 16); wallets are served once it is merged"
    );
    h.ok("blockchain.headers.subscribe", json!([]));

    h.backend.update(|s| s.indexing = None);
    for (method, params) in [
        ("blockchain.scripthash.get_balance", json!([SH])),
        ("blockchain.scripthash.subscribe", json!([SH])),
        ("mempool.get_fee_histogram", json!([])),
    ] {
        h.ok(method, params);
    }
}

/// A valid compressed public key (the generator's), as a spend key.
const SP_SPEND_KEY: &str = "0279be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798";

/// The 1.7 methods and silent payments are held back the same way.
#[test]
fn during_the_first_sync_1_7_and_silent_payment_methods_are_refused() {
    let mut h = Harness::at("1.7");
    h.backend.update(|s| {
        s.sp_enabled = true;
        s.indexing = Some(osprey_answers::Indexing {
            height: Height(10),
            node_height: Height(20),
            merging: None,
        });
    });
    h.ok("server.ping", json!([]));
    for (method, params) in [
        ("blockchain.scriptpubkey.get_history", json!([P2PKH])),
        (
            "blockchain.outpoint.get_status",
            json!([txid(1).to_string(), 0, P2PKH]),
        ),
        ("mempool.recent", json!([])),
        (
            "blockchain.silentpayments.subscribe",
            json!([format!("{:064x}", 1), SP_SPEND_KEY, 0, []]),
        ),
    ] {
        let (code, message) = h.err(method, params);
        assert_eq!(code, -32603, "{method}");
        assert!(
            message.contains("indexing: height 10 of 20"),
            "{method}: {message}"
        );
    }
}
