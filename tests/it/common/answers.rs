//! Everything one server says about a set of scripts and about the chain,
//! gathered in a form two servers (or a server and the node's view) can be
//! compared in: exact JSON, errors included. Used by the reorg, restart and
//! kill tests, whose claim is "same answers as a fresh index".

use std::net::SocketAddr;

use bitcoin::Script;
use serde_json::{json, Value};

use super::oracle::NodeView;
use super::scripthash;
use super::session::{RpcError, Session};

/// One server's answers about one script: each a result, or
/// `{"error": {code, message}}`.
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptAnswers {
    pub scripthash: String,
    pub history: Value,
    pub mempool: Value,
    pub balance: Value,
    pub unspent: Value,
    pub status: Value,
}

impl ScriptAnswers {
    /// The same answers with `listunspent` sorted by (txid, vout): the spec
    /// leaves its order open, so comparisons with the node's view use this.
    pub fn with_sorted_unspent(&self) -> ScriptAnswers {
        let mut copy = self.clone();
        if let Value::Array(items) = &mut copy.unspent {
            items.sort_by_key(|u| {
                (
                    u["tx_hash"].as_str().unwrap_or_default().to_string(),
                    u["tx_pos"].as_u64(),
                )
            });
        }
        copy
    }

    /// The answers an exact server gives about `script`, from the node.
    pub fn expected(view: &NodeView, script: &Script) -> ScriptAnswers {
        ScriptAnswers {
            scripthash: scripthash(script),
            history: view.history_json(script),
            mempool: view.mempool_json(script),
            balance: view.balance_json(script),
            unspent: view.unspent_json(script),
            status: view.status(script),
        }
    }
}

fn as_value(outcome: Result<Value, RpcError>) -> Value {
    match outcome {
        Ok(v) => v,
        Err(e) => json!({"error": {"code": e.code, "message": e.message}}),
    }
}

/// Asks the server at `addr` (one fresh protocol 1.6 session, one batch
/// per script) everything about each script hash.
pub fn collect_answers(addr: SocketAddr, scripthashes: &[String]) -> Vec<ScriptAnswers> {
    answers_on(Session::connect(addr), scripthashes)
}

/// Asks, on `session` (no `server.version` sent yet), everything about
/// each script hash, as [`collect_answers`] does.
pub fn answers_on(mut session: Session, scripthashes: &[String]) -> Vec<ScriptAnswers> {
    session.negotiate(json!(["1.4", "1.6"]));
    scripthashes
        .iter()
        .map(|sh| {
            let p = json!([sh]);
            let mut outcomes = session
                .batch(&[
                    ("blockchain.scripthash.get_history", p.clone()),
                    ("blockchain.scripthash.get_mempool", p.clone()),
                    ("blockchain.scripthash.get_balance", p.clone()),
                    ("blockchain.scripthash.listunspent", p.clone()),
                    ("blockchain.scripthash.subscribe", p.clone()),
                ])
                .into_iter()
                .map(as_value);
            let mut next = || outcomes.next().expect("five answers");
            ScriptAnswers {
                scripthash: sh.clone(),
                history: next(),
                mempool: next(),
                balance: next(),
                unspent: next(),
                status: next(),
            }
        })
        .collect()
}

/// The server's view of the chain: its tip notification and every header
/// from genesis, fetched 2016 at a time.
#[derive(Clone, Debug, PartialEq)]
pub struct ChainAnswers {
    pub tip: Value,
    pub headers: Vec<Value>,
}

/// Asks the server at `addr` for its tip and all its headers.
pub fn collect_chain(addr: SocketAddr) -> ChainAnswers {
    let mut session = Session::connect(addr);
    session.negotiate(json!(["1.4", "1.6"]));
    let tip = session.call("blockchain.headers.subscribe", json!([]));
    let height = tip["height"]
        .as_u64()
        .unwrap_or_else(|| panic!("tip without height: {tip}"));
    let mut headers = Vec::new();
    let mut start = 0;
    while start <= height {
        let answer = session.call("blockchain.block.headers", json!([start, 2016]));
        let chunk = answer["headers"]
            .as_array()
            .unwrap_or_else(|| panic!("1.6 headers answer: {answer}"))
            .clone();
        assert!(
            !chunk.is_empty(),
            "no headers from {start} though the tip is {height}"
        );
        start += chunk.len() as u64;
        headers.extend(chunk);
    }
    ChainAnswers { tip, headers }
}

/// Asserts that two servers gave the same answers, naming the first script
/// where they differ.
///
/// # Panics
/// On the first difference.
pub fn assert_same_answers(what: &str, left: &[ScriptAnswers], right: &[ScriptAnswers]) {
    assert_eq!(
        left.len(),
        right.len(),
        "{what}: different numbers of scripts"
    );
    for (l, r) in left.iter().zip(right) {
        assert_eq!(
            l, r,
            "{what}: answers differ for script hash {}",
            l.scripthash
        );
    }
}

/// Asserts that a server's answers equal the node's view of each script.
///
/// # Panics
/// On the first difference, naming the script.
pub fn assert_answers_match_node(
    what: &str,
    answers: &[ScriptAnswers],
    view: &NodeView,
    scripts: &[bitcoin::ScriptBuf],
) {
    assert_eq!(answers.len(), scripts.len());
    for (got, script) in answers.iter().zip(scripts) {
        let want = ScriptAnswers::expected(view, script);
        assert_eq!(
            got.with_sorted_unspent(),
            want,
            "{what}: server and node disagree about script {script:x}"
        );
    }
}

/// Waits (the mempool is polled) until the server's answers about
/// `scripts` equal the node's view, and returns them.
///
/// # Panics
/// After `timeout`, with the first difference.
pub fn wait_answers_match_node(
    what: &str,
    addr: SocketAddr,
    view: &NodeView,
    scripts: &[bitcoin::ScriptBuf],
    timeout: std::time::Duration,
) -> Vec<ScriptAnswers> {
    let scripthashes: Vec<String> = scripts.iter().map(|s| scripthash(s)).collect();
    let started = std::time::Instant::now();
    loop {
        let answers = collect_answers(addr, &scripthashes);
        let same = answers
            .iter()
            .zip(scripts)
            .all(|(a, s)| a.with_sorted_unspent() == ScriptAnswers::expected(view, s));
        if same {
            return answers;
        }
        if started.elapsed() > timeout {
            eprintln!("{what}: answers still differ from the node's after {timeout:?}");
            assert_answers_match_node(what, &answers, view, scripts);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Asserts that a server's chain answers equal the node's chain.
///
/// # Panics
/// On a difference.
pub fn assert_chain_matches_node(what: &str, chain: &ChainAnswers, view: &NodeView) {
    assert_eq!(
        chain.tip,
        json!({"height": view.tip_height, "hex": view.headers[view.tip_height as usize]}),
        "{what}: tip"
    );
    let want: Vec<Value> = view.headers.iter().map(|h| json!(h)).collect();
    assert_eq!(chain.headers.len(), want.len(), "{what}: number of headers");
    for (height, (got, want)) in chain.headers.iter().zip(&want).enumerate() {
        assert_eq!(got, want, "{what}: header at height {height}");
    }
}
