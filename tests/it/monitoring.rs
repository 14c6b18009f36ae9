//! What an operator sees: the startup lines that say what Osprey found,
//! the initial sync's summary line, and Prometheus metrics on
//! `--monitoring-addr`, scraped over HTTP and read with a Prometheus
//! text-format parser. Every expected value comes from the node or from
//! the requests the test made.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use osprey_testenv::Node;
use prometheus_parse::{Scrape, Value};
use serde_json::json;

use crate::common::osprey::ANY_PORT;
use crate::common::{start_btcd, wait_until, Osprey, OspreyConfig};

/// How long a gauge may take to follow what the test did.
const SETTLE: Duration = Duration::from_secs(30);

/// Sends one HTTP/1.0 GET and returns (status code, body).
pub(crate) fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream =
        TcpStream::connect(addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("sending the request");
    let mut reply = String::new();
    stream
        .read_to_string(&mut reply)
        .expect("reading the reply");
    let (head, body) = reply
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP reply: {reply:?}"));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, body.to_string())
}

/// One scrape of `/metrics`, parsed.
struct Metrics(Scrape);

impl Metrics {
    fn scrape(addr: SocketAddr) -> Metrics {
        let (status, body) = http_get(addr, "/metrics");
        assert_eq!(status, 200, "GET /metrics: {body}");
        let scrape = Scrape::parse(body.lines().map(|line| Ok(line.to_string())))
            .expect("the Prometheus text format");
        Metrics(scrape)
    }

    /// The value of the counter or gauge `name` whose label `label` (if
    /// any) is `value`; 0 for a labelled series not created yet.
    fn get(&self, name: &str, label: Option<(&str, &str)>) -> f64 {
        let found = self.0.samples.iter().find(|s| {
            s.metric == name && label.is_none_or(|(key, want)| s.labels.get(key) == Some(want))
        });
        match found.map(|s| &s.value) {
            Some(Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v)) => *v,
            Some(other) => panic!("{name} is not a number: {other:?}"),
            None if label.is_some() => 0.0,
            None => panic!("no metric {name}"),
        }
    }

    fn value(&self, name: &str) -> f64 {
        self.get(name, None)
    }

    fn requests(&self, method: &str) -> f64 {
        self.get("osprey_requests_total", Some(("method", method)))
    }

    fn errors(&self, code: i64) -> f64 {
        self.get("osprey_errors_total", Some(("code", &code.to_string())))
    }

    /// Observations in the latency histogram of `method` (its +Inf bucket).
    fn latency_count(&self, method: &str) -> f64 {
        self.0
            .samples
            .iter()
            .filter(|s| {
                s.metric == "osprey_request_duration_seconds"
                    && s.labels.get("method") == Some(method)
            })
            .find_map(|s| match &s.value {
                Value::Histogram(buckets) => buckets
                    .iter()
                    .find(|b| b.less_than.is_infinite())
                    .map(|b| b.count),
                _ => None,
            })
            .unwrap_or(0.0)
    }
}

/// 1. Start btcd (with --txindex, as Osprey needs) and mine 110 blocks,
///    coinbases only.
/// 2. Start osprey with --monitoring-addr on port 0: it binds a free
///    loopback port itself and says which in its log. Its log
///    says, in one block: btcd and its version, the rpc block source, that
///    btcd needs a txindex and has one, where the new index lives, where
///    the metrics are; then a summary of the initial sync (111 blocks,
///    111 transactions).
/// 3. Scrape: index and node heights equal the node's tip, no lag, not in
///    initial sync, 111 blocks indexed; the flat files hold exactly 80 + 8
///    bytes per block and 32 + 2 per transaction; RocksDB has live SST
///    files and wrote bytes; the process has resident memory; any other
///    path is a 404.
/// 4. One session: server.version, two headers.subscribe, two scripthash
///    subscriptions, an unknown method, bad params. The next scrape counts
///    exactly those requests per method (and in the latency histograms),
///    one -32601 and one -32602, one session, two subscriptions, and the
///    bytes the session sent at least.
/// 5. Mine 3 blocks: the heights follow the node.
/// 6. Close the session: no session and no subscription are left.
#[test]
fn startup_lines_sync_summary_and_metrics_tell_the_truth() {
    // 1.
    let node = start_btcd();
    node.generate(110).expect("mining");
    let (tip, _) = node.tip().expect("the node's tip");
    let blocks = u64::from(tip) + 1;
    // 2.
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let osprey = Osprey::start(
        &node,
        &db,
        OspreyConfig::with_args(&["--monitoring-addr", ANY_PORT]),
    );
    let monitoring = osprey.metrics_addr();
    assert!(
        monitoring.ip().is_loopback() && monitoring.port() != 0,
        "the log names the bound address: {monitoring}"
    );
    let log = osprey.log();
    let line = |needle: &str| {
        log.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no log line with {needle:?}; log:\n{log}"))
            .to_string()
    };
    let node_line = line("node: btcd ");
    assert!(
        node_line.contains("btcd 0.24.") && node_line.contains(&node.rpc_addr().to_string()),
        "{node_line}"
    );
    line("block source: rpc: ");
    let txindex = line("txindex: ");
    assert!(
        txindex.contains("txindex: needed") && txindex.contains("the node has one"),
        "{txindex}"
    );
    let index = line(&format!("index: {}", db.join("regtest").display()));
    assert!(
        index.contains(", new, ") && index.contains(" MB on disk"),
        "{index}"
    );
    line(&format!(
        "initial sync done: {blocks} blocks, {blocks} transactions in "
    ));
    // 3.
    let before = Metrics::scrape(monitoring);
    assert_eq!(before.value("osprey_index_height"), f64::from(tip));
    assert_eq!(before.value("osprey_node_height"), f64::from(tip));
    assert_eq!(before.value("osprey_index_lag_blocks"), 0.0);
    assert_eq!(before.value("osprey_initial_sync"), 0.0);
    assert_eq!(before.value("osprey_indexed_blocks_total"), blocks as f64);
    assert_eq!(
        before.value("osprey_indexed_transactions_total"),
        blocks as f64
    );
    assert_eq!(
        before.value("osprey_index_flat_files_bytes"),
        // Per block a header and a tx count; per transaction a txid and
        // its size (2 bytes, docs/schema.md).
        (blocks * (80 + 8) + blocks * (32 + 2)) as f64
    );
    assert!(before.value("osprey_rocksdb_live_sst_bytes") > 0.0);
    assert!(before.value("osprey_rocksdb_written_bytes_total") > 0.0);
    assert!(before.value("process_resident_memory_bytes") > 1e6);
    // electrs answers every path with its metrics; node boxes read `/`.
    let (status, body) = http_get(monitoring, "/");
    assert_eq!(status, 200, "GET /: {body}");
    let electrs_height = format!("electrs_index_height{{type=\"tip\"}} {tip}");
    assert!(
        body.lines().any(|l| l == electrs_height),
        "GET / should give {electrs_height:?}:\n{body}"
    );
    let (status, _) = http_get(monitoring, "/nothing-here");
    assert_eq!(status, 404);
    // 4.
    let mut session = osprey.session();
    session.negotiate(json!("1.4"));
    let mut sent = 0;
    let mut call = |method: &str, params: serde_json::Value| {
        sent += method.len() + params.to_string().len();
        session.raw_call(method, params)
    };
    for _ in 0..2 {
        let header = call("blockchain.headers.subscribe", json!([])).expect("headers");
        assert_eq!(header["height"], json!(tip));
    }
    for scripthash in ["11".repeat(32), "22".repeat(32)] {
        call("blockchain.scripthash.subscribe", json!([scripthash])).expect("subscribe");
    }
    let unknown = call("blockchain.no_such_method", json!([])).expect_err("unknown method");
    assert_eq!(unknown.code, -32601);
    let bad = call("blockchain.block.header", json!(["not a height"])).expect_err("bad params");
    assert_eq!(bad.code, -32602);
    let after = wait_until("the subscriptions are counted", SETTLE, || {
        let after = Metrics::scrape(monitoring);
        (after.value("osprey_subscriptions") == 2.0).then_some(after)
    });
    let delta = |f: &dyn Fn(&Metrics) -> f64| f(&after) - f(&before);
    for (method, count) in [
        ("server.version", 1.0),
        ("blockchain.headers.subscribe", 2.0),
        ("blockchain.scripthash.subscribe", 2.0),
        ("blockchain.block.header", 1.0),
        ("unknown", 1.0),
    ] {
        assert_eq!(
            delta(&|m| m.requests(method)),
            count,
            "requests of {method}"
        );
        assert_eq!(
            delta(&|m| m.latency_count(method)),
            count,
            "latencies of {method}"
        );
    }
    assert_eq!(after.requests("blockchain.no_such_method"), 0.0);
    assert_eq!(delta(&|m| m.errors(-32601)), 1.0);
    assert_eq!(delta(&|m| m.errors(-32602)), 1.0);
    assert_eq!(delta(&|m| m.errors(1)), 0.0);
    assert_eq!(after.value("osprey_subscribed_scripthashes"), 2.0);
    let sessions = wait_until("only the test's session is connected", SETTLE, || {
        let m = Metrics::scrape(monitoring);
        (m.value("osprey_sessions") == 1.0).then_some(m)
    });
    assert!(
        delta(&|m| m.value("osprey_received_bytes_total")) >= sent as f64,
        "received bytes"
    );
    assert!(delta(&|m| m.value("osprey_sent_bytes_total")) > 0.0);
    assert!(sessions.value("osprey_sessions_total") >= 1.0);
    // 5.
    node.generate(3).expect("mining");
    let (new_tip, _) = node.tip().expect("the node's tip");
    wait_until("the heights follow the node", SETTLE, || {
        let m = Metrics::scrape(monitoring);
        (m.value("osprey_index_height") == f64::from(new_tip)
            && m.value("osprey_node_height") == f64::from(new_tip)
            && m.value("osprey_index_lag_blocks") == 0.0)
            .then_some(())
    });
    // 6.
    drop(session);
    wait_until("the session is gone", SETTLE, || {
        let m = Metrics::scrape(monitoring);
        (m.value("osprey_sessions") == 0.0
            && m.value("osprey_subscriptions") == 0.0
            && m.value("osprey_subscribed_scripthashes") == 0.0)
            .then_some(())
    });
}
