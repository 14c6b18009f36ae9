//! Input no well-behaved client sends, and limits a greedy one hits, over
//! raw TCP against the real binary started with small limits: each gets the
//! documented JSON-RPC error (never a crash, a hang or a silently truncated
//! answer), and the session, or at least the server, goes on serving.
//!
//! Documented behaviour checked here (`osprey_electrum::error`,
//! `osprey_server::Limits`): malformed JSON -32700 (id null), not a request
//! -32600, unknown method -32601, bad params -32602, a line, batch or
//! subscription limit -101 with the session continuing, "history too
//! large" code 1.

use bitcoin::Amount;
use osprey_testenv::{mining_address, Node, ScriptKind, TestWallet};
use serde_json::{json, Value};

use crate::common::session::outcome;
use crate::common::{scripthash, start_btcd, NodeView, Osprey, OspreyConfig, Session};

const SUBSCRIPTIONS_MAX: usize = 3;
const BATCH_MAX: usize = 5;
const LINE_BYTES_MAX: usize = 2000;
const HISTORY_ENTRIES_MAX: usize = 2;

/// Asserts `response` is an error with `code` and the given id.
fn assert_error(response: &Value, code: i64, id: Value, what: &str) {
    assert_eq!(response["id"], id, "{what}: id of {response}");
    let e = outcome(response).expect_err(what);
    assert_eq!(e.code, code, "{what}: {e:?}");
    assert!(!e.message.is_empty(), "{what}: an error needs a message");
}

/// Asserts the session still answers a valid request.
fn assert_alive(session: &mut Session, what: &str) {
    let banner = session.raw_call("server.banner", json!([]));
    assert!(
        banner.is_ok_and(|b| b.is_string()),
        "{what}: the session no longer answers"
    );
}

/// 1. Start btcd and mine 105 blocks: the mining script has 105 coinbase
///    transactions; pay a fresh script once (one history entry).
/// 2. Start osprey with --subscriptions-per-session-max 3,
///    --batch-requests-max 5, --line-bytes-max 2000, --history-entries-max 2.
/// 3. Malformed JSON, invalid UTF-8, non-request values: -32700/-32600, and
///    the same session answers the next request.
/// 4. Unknown method: -32601 naming it.
/// 5. Wrong parameter types, bad hex, wrong-length hashes, extra and unknown
///    named parameters: -32602.
/// 6. A line over 2000 bytes: -101 with a null id, the session goes on; a
///    line just under the limit is served; new connections are served.
/// 7. Batches: 5 requests answered, 6 refused as a whole with -101, an empty
///    one -32600.
/// 8. Subscriptions: 3 fine, the 4th -101, re-subscribing costs nothing,
///    unsubscribing frees a slot, another session has its own 3.
/// 9. History too large: the mining script's history, balance, unspent and
///    status are explicit errors; the small script answers like the node.
#[test]
fn bad_input_gets_clear_errors_and_the_server_goes_on() {
    // 1.
    let node = start_btcd();
    node.generate(105).expect("mining");
    let mut wallet = TestWallet::new();
    wallet.sync(&node).expect("wallet sync");
    let small = wallet.new_script(ScriptKind::P2wpkh);
    let tx = wallet
        .send(small.clone(), Amount::from_sat(100_000))
        .expect("paying a fresh script");
    node.send_raw_transaction(&tx).expect("broadcast");
    node.generate(1).expect("mining");
    // 2.
    let dir = tempfile::tempdir().expect("tempdir");
    let osprey = Osprey::start(
        &node,
        &dir.path().join("db"),
        OspreyConfig::with_args(&[
            "--subscriptions-per-session-max",
            &SUBSCRIPTIONS_MAX.to_string(),
            "--batch-requests-max",
            &BATCH_MAX.to_string(),
            "--line-bytes-max",
            &LINE_BYTES_MAX.to_string(),
            "--history-entries-max",
            &HISTORY_ENTRIES_MAX.to_string(),
        ]),
    );
    let mut s = osprey.session();
    s.negotiate(json!("1.4"));

    // 3.
    for line in [
        &b"{\"id\":1,\"method\":"[..],
        b"nope",
        b"[1,",
        b"\xff\xfe{}",
        b"{\"id\":2,\"method\":\"server.ping\"]",
    ] {
        s.send_line(line).expect("sending");
        assert_error(
            &s.read_response(),
            -32700,
            Value::Null,
            &format!("malformed {:?}", String::from_utf8_lossy(line)),
        );
        assert_alive(&mut s, "after malformed JSON");
    }
    for (line, id) in [
        (r#"5"#, Value::Null),
        (r#"{"id":7}"#, json!(7)),
        (r#"{"id":8,"method":9}"#, json!(8)),
    ] {
        s.send_line(line.as_bytes()).expect("sending");
        assert_error(
            &s.read_response(),
            -32600,
            id,
            &format!("not a request: {line}"),
        );
    }
    assert_alive(&mut s, "after invalid requests");

    // 4.
    let e = s.call_err("blockchain.address.get_history", json!(["x"]));
    assert_eq!(e.code, -32601, "{e:?}");
    assert!(
        e.message.contains("blockchain.address.get_history"),
        "the error names the method: {e:?}"
    );

    // 5.
    let good_sh = scripthash(&small);
    let bad_params = [
        ("blockchain.block.header", json!(["x"])),
        ("blockchain.block.header", json!([-1])),
        ("blockchain.block.header", json!([1.5])),
        ("blockchain.block.header", json!([])),
        ("blockchain.block.headers", json!([0, "ten"])),
        (
            "blockchain.scripthash.get_history",
            json!(["zz".repeat(32)]),
        ),
        ("blockchain.scripthash.get_history", json!([&good_sh[..62]])),
        (
            "blockchain.scripthash.get_history",
            json!([format!("{good_sh}00")]),
        ),
        ("blockchain.scripthash.get_balance", json!([42])),
        (
            "blockchain.scripthash.get_balance",
            json!([good_sh, good_sh]),
        ),
        (
            "blockchain.scripthash.listunspent",
            json!({"script_hash": good_sh}),
        ),
        ("blockchain.transaction.get", json!([123])),
        ("blockchain.transaction.get", json!(["ab"])),
        ("blockchain.transaction.get", json!([good_sh, "yes"])),
        ("blockchain.transaction.broadcast", json!(["0g"])),
        ("blockchain.transaction.broadcast", json!(["abc"])),
        ("blockchain.transaction.id_from_pos", json!([1, -3])),
        ("server.banner", json!(["unexpected"])),
    ];
    for (method, params) in bad_params {
        let e = s.call_err(method, params.clone());
        assert_eq!(e.code, -32602, "{method} {params}: {e:?}");
    }
    let response = s.request("server.ping", json!("not an array"));
    assert_eq!(
        outcome(&response)
            .expect_err("params must be an array or object")
            .code,
        -32602
    );
    assert_alive(&mut s, "after bad params");

    // 6.
    let padding = "0".repeat(LINE_BYTES_MAX);
    let long = format!(
        r#"{{"jsonrpc":"2.0","id":99,"method":"server.ping","params":[],"pad":"{padding}"}}"#
    );
    assert!(long.len() > LINE_BYTES_MAX);
    s.send_line(long.as_bytes()).expect("sending a long line");
    assert_error(&s.read_response(), -101, Value::Null, "oversized line");
    assert_alive(&mut s, "after an oversized line");
    let fits = format!(
        r#"{{"jsonrpc":"2.0","id":100,"method":"server.ping","params":[],"pad":"{}"}}"#,
        "0".repeat(LINE_BYTES_MAX - 100)
    );
    assert!(fits.len() <= LINE_BYTES_MAX);
    s.send_line(fits.as_bytes())
        .expect("sending a line under the limit");
    let response = s.read_response();
    assert_eq!(
        (response["id"].clone(), outcome(&response).ok()),
        (json!(100), Some(Value::Null)),
        "{response}"
    );
    // A megabyte without a newline, then the end of the line: memory stays
    // bounded and one error is sent.
    let mut other = osprey.session();
    let huge = vec![b'x'; 1 << 20];
    other.send_line(&huge).expect("sending a huge line");
    assert_error(&other.read_response(), -101, Value::Null, "huge line");
    assert_alive(&mut other, "after a huge line");
    let mut fresh = osprey.session();
    assert_alive(&mut fresh, "a new connection");

    // 7.
    let calls: Vec<(&str, Value)> = (0..BATCH_MAX)
        .map(|_| ("server.banner", json!([])))
        .collect();
    let answers = s.batch(&calls);
    assert!(
        answers.iter().all(|a| a.is_ok()),
        "a batch at the limit: {answers:?}"
    );
    let too_many: Vec<Value> = (0..=BATCH_MAX)
        .map(|i| json!({"jsonrpc": "2.0", "id": 1000 + i, "method": "server.banner", "params": []}))
        .collect();
    s.send_line(Value::Array(too_many).to_string().as_bytes())
        .expect("sending a big batch");
    // A batch is answered by an array: each call refused under its own id.
    let refused = s.read_response();
    let refused = refused.as_array().expect("an array answers a batch");
    assert_eq!(refused.len(), BATCH_MAX + 1, "one error per call");
    for (i, answer) in refused.iter().enumerate() {
        assert_error(answer, -101, json!(1000 + i), "batch over the limit");
    }
    s.send_line(b"[]").expect("sending an empty batch");
    assert_error(&s.read_response(), -32600, Value::Null, "empty batch");
    assert_alive(&mut s, "after batches");

    // 8.
    let unused: Vec<String> = (0..=SUBSCRIPTIONS_MAX as u8)
        .map(|i| format!("{:02x}", i + 1).repeat(32))
        .collect();
    for sh in &unused[..SUBSCRIPTIONS_MAX] {
        assert_eq!(
            s.call("blockchain.scripthash.subscribe", json!([sh])),
            Value::Null
        );
    }
    let e = s.call_err(
        "blockchain.scripthash.subscribe",
        json!([unused[SUBSCRIPTIONS_MAX]]),
    );
    assert_eq!(
        e.code,
        -101,
        "subscription {} of {SUBSCRIPTIONS_MAX}: {e:?}",
        SUBSCRIPTIONS_MAX + 1
    );
    assert_eq!(
        s.call("blockchain.scripthash.subscribe", json!([unused[0]])),
        Value::Null,
        "re-subscribing is free"
    );
    assert_eq!(
        s.call("blockchain.scripthash.unsubscribe", json!([unused[0]])),
        json!(true)
    );
    assert_eq!(
        s.call(
            "blockchain.scripthash.subscribe",
            json!([unused[SUBSCRIPTIONS_MAX]])
        ),
        Value::Null
    );
    let mut s2 = osprey.session();
    for sh in &unused[..SUBSCRIPTIONS_MAX] {
        assert_eq!(
            s2.call("blockchain.scripthash.subscribe", json!([sh])),
            Value::Null,
            "another session's quota"
        );
    }

    // 9.
    let view = NodeView::load(&node);
    let miner = mining_address().script_pubkey();
    let big = scripthash(&miner);
    assert!(
        view.history(&miner).len() > HISTORY_ENTRIES_MAX,
        "the mining script must have a long history"
    );
    let mut s3 = osprey.session();
    s3.negotiate(json!("1.4"));
    for method in [
        "blockchain.scripthash.get_history",
        "blockchain.scripthash.get_balance",
        "blockchain.scripthash.listunspent",
        "blockchain.scripthash.subscribe",
    ] {
        let e = match s3.raw_call(method, json!([big])) {
            Ok(v) => panic!("{method} of a too-long history answered {v} instead of an error"),
            Err(e) => e,
        };
        assert_eq!(e.code, 1, "{method}: {e:?}");
        assert!(e.message.contains("history too large"), "{method}: {e:?}");
    }
    // The refused subscribe took no slot.
    for sh in &unused[..SUBSCRIPTIONS_MAX] {
        s3.call("blockchain.scripthash.subscribe", json!([sh]));
    }
    let p = json!([good_sh]);
    assert_eq!(
        s3.call("blockchain.scripthash.get_history", p.clone()),
        view.history_json(&small)
    );
    assert_eq!(
        s3.call("blockchain.scripthash.get_balance", p.clone()),
        view.balance_json(&small)
    );
    assert_eq!(
        s3.call("blockchain.scripthash.listunspent", p.clone()),
        view.unspent_json(&small)
    );
    let mut fresh = osprey.session();
    fresh.negotiate(json!("1.4"));
    assert_eq!(
        fresh.call("blockchain.scripthash.subscribe", p),
        view.status(&small)
    );

    // Nothing above took the server down.
    let mut last = osprey.session();
    assert_eq!(last.negotiate(json!(["1.4", "1.6"])), "1.6");
}

/// Returns a session the server answers, retrying while it refuses
/// connections for lack of a slot (a -102 line with a null id instead of
/// the answer).
fn served_session(osprey: &Osprey) -> Session {
    crate::common::wait_until("a session slot", std::time::Duration::from_secs(10), || {
        let mut s = osprey.session();
        s.send_line(br#"{"jsonrpc":"2.0","id":1,"method":"server.banner","params":[]}"#)
            .ok()?;
        let answer = s
            .read_message_within(std::time::Duration::from_secs(10))
            .ok()??;
        (answer["id"] == json!(1)).then_some(s)
    })
}

/// 1. Start btcd (a few blocks) and osprey with --sessions-max 2.
/// 2. Two sessions are served.
/// 3. A third connection gets one -102 "server busy" error and is closed;
///    the two sessions still answer.
/// 4. Once one session closes, a new connection is served.
#[test]
fn sessions_over_the_limit_are_told_and_closed() {
    // 1.
    let node = start_btcd();
    node.generate(3).expect("mining");
    let dir = tempfile::tempdir().expect("tempdir");
    let osprey = Osprey::start(
        &node,
        &dir.path().join("db"),
        OspreyConfig::with_args(&["--sessions-max", "2"]),
    );
    // 2. (The harness's own probing sessions may take a moment to end.)
    let mut first = served_session(&osprey);
    let mut second = served_session(&osprey);
    assert_alive(&mut first, "first session");
    assert_alive(&mut second, "second session");
    // 3.
    let mut third = osprey.session();
    let (closed, sent) = third.closed_within(std::time::Duration::from_secs(10));
    assert!(closed, "the third session must be closed; it got {sent:?}");
    assert_eq!(sent.len(), 1, "one error line before the close: {sent:?}");
    assert_error(&sent[0], -102, Value::Null, "session over the limit");
    assert_alive(&mut first, "first session after the refusal");
    assert_alive(&mut second, "second session after the refusal");
    // 4.
    drop(first);
    let mut fourth = served_session(&osprey);
    assert_alive(&mut fourth, "a session after one closed");
}
