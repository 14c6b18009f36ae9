//! The Prometheus metrics of one Osprey process: the registry and the
//! handles (counters, gauges, histograms) that the crates doing the work
//! update, and the text format a scrape gets ([`Metrics::encode`]).
//!
//! Knows nothing of HTTP (the binary serves `/metrics` on
//! `--monitoring-addr`), of RocksDB or of the node: values read from those
//! are set by whoever reads them. Every handle is resolved once, when
//! [`Metrics::new`] builds it, so a request costs a map lookup by method
//! name and a few atomic adds, with no lock of ours.

/// The handle types, for the crates that keep one.
pub use prometheus::{Counter, IntCounter, IntGauge};

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};
use std::collections::HashMap;
use std::time::Duration;

/// Upper bounds of the request latency buckets, in seconds: from a cached
/// status (tens of µs) to a huge history or a slow node (seconds).
const LATENCY_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// The `method` label of requests whose method is not in the table (they
/// are answered "method not found"): one label for all of them, so that a
/// client cannot create series at will.
pub const UNKNOWN_METHOD: &str = "unknown";

/// Every metric of the process.
pub struct Metrics {
    registry: Registry,
    pub index: IndexMetrics,
    pub store: StoreMetrics,
    pub sessions: SessionMetrics,
    pub requests: RequestMetrics,
    pub process: ProcessMetrics,
    pub silent_payments: SilentPaymentMetrics,
}

/// Silent-payment subscriptions and their scans (docs/silent-payments.md,
/// 3.6). No label: nothing of a subscription (its address, its keys) is
/// ever a metric's.
pub struct SilentPaymentMetrics {
    /// Subscriptions held, summed over sessions.
    pub subscriptions: IntGauge,
    pub records_scanned: IntCounter,
    /// Time scan chunks held a handler slot.
    pub scan_seconds: Counter,
    /// Transactions in the notifications written to subscribers (counted by
    /// the session as it writes them: a replaced subscription's lines,
    /// dropped, are not).
    pub matches: IntCounter,
}

/// The index and the node: tips, lag, sync progress.
pub struct IndexMetrics {
    pub index_height: IntGauge,
    /// The same height under electrs' name and label
    /// (`electrs_index_height{type="tip"}`), which node dashboards read to
    /// tell how far an electrs is (myNode, among others).
    electrs_index_height: IntGauge,
    pub node_height: IntGauge,
    pub lag_blocks: IntGauge,
    /// 1 while the initial sync runs (wallets are not served yet), else 0.
    pub initial_sync: IntGauge,
    pub blocks_indexed: IntCounter,
    pub txs_indexed: IntCounter,
}

/// The index on disk, set from RocksDB's properties and statistics at each
/// scrape.
pub struct StoreMetrics {
    pub rocksdb_live_sst_bytes: IntGauge,
    pub flat_files_bytes: IntGauge,
    rocksdb_written_bytes: IntCounter,
}

/// Electrum sessions: connections, subscriptions, bytes.
pub struct SessionMetrics {
    pub connected: IntGauge,
    pub accepted: IntCounter,
    /// Connections turned away: the server was full, or their address had
    /// too many sessions.
    pub refused: IntCounter,
    /// Idle sessions closed to make room for a new connection.
    pub shed: IntCounter,
    /// Distinct script hashes with at least one subscriber.
    pub subscribed_scripthashes: IntGauge,
    /// (session, script hash) pairs.
    pub subscriptions: IntGauge,
    pub received_bytes: IntCounter,
    pub sent_bytes: IntCounter,
}

/// One method's request counter and latency histogram.
#[derive(Clone)]
pub struct MethodMetrics {
    count: IntCounter,
    latency: prometheus::Histogram,
}

impl MethodMetrics {
    /// Counts one request that took `elapsed` to answer.
    pub fn observe(&self, elapsed: Duration) {
        self.count.inc();
        self.latency.observe(elapsed.as_secs_f64());
    }
}

/// Requests by method and errors by JSON-RPC code.
pub struct RequestMetrics {
    by_method: HashMap<&'static str, MethodMetrics>,
    unknown: MethodMetrics,
    errors: IntCounterVec,
}

impl RequestMetrics {
    /// The handles of `method`, or of [`UNKNOWN_METHOD`] for a method the
    /// table does not have.
    pub fn method(&self, method: &str) -> &MethodMetrics {
        self.by_method.get(method).unwrap_or(&self.unknown)
    }

    /// Counts one error answered with JSON-RPC `code` (a fixed, small set:
    /// see `osprey_electrum::error`).
    pub fn error(&self, code: i64) {
        self.errors.with_label_values(&[&code.to_string()]).inc();
    }
}

/// The process itself.
pub struct ProcessMetrics {
    pub resident_memory_bytes: IntGauge,
}

impl ProcessMetrics {
    /// Reads the resident set size from `/proc/self/status` (Linux; left
    /// as it was elsewhere).
    pub fn refresh(&self) {
        if let Some(bytes) = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| vm_rss_bytes(&status))
        {
            self.resident_memory_bytes.set(saturating_i64(bytes));
        }
    }
}

/// `VmRSS` (in kB) of a `/proc/PID/status` text, in bytes.
fn vm_rss_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

fn saturating_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl IndexMetrics {
    /// Sets the index's and the node's tip heights and the lag between.
    pub fn set_tips(&self, index_height: u32, node_height: u32) {
        self.index_height.set(i64::from(index_height));
        self.electrs_index_height.set(i64::from(index_height));
        self.node_height.set(i64::from(node_height));
        self.lag_blocks
            .set(i64::from(node_height.saturating_sub(index_height)));
    }
}

impl StoreMetrics {
    /// Sets the total bytes RocksDB has written since the index was opened
    /// (a counter: only increases are taken).
    pub fn set_rocksdb_written_bytes(&self, total: u64) {
        let counted = self.rocksdb_written_bytes.get();
        if total > counted {
            self.rocksdb_written_bytes.inc_by(total - counted);
        }
    }
}

struct Registrar<'a>(&'a Registry);

impl Registrar<'_> {
    fn register<M: prometheus::core::Collector + Clone + 'static>(&self, metric: M) -> M {
        self.0
            .register(Box::new(metric.clone()))
            .expect("metric names are unique and valid by construction");
        metric
    }

    fn gauge(&self, name: &str, help: &str) -> IntGauge {
        self.register(IntGauge::new(name, help).expect("valid metric name"))
    }

    fn counter(&self, name: &str, help: &str) -> IntCounter {
        self.register(IntCounter::new(name, help).expect("valid metric name"))
    }
}

impl Metrics {
    /// Registers every metric, with request handles for each of `methods`
    /// (the protocol's method table) and one for unknown methods.
    pub fn new(methods: &[&'static str]) -> Metrics {
        let registry = Registry::new();
        let r = Registrar(&registry);
        let index = IndexMetrics {
            index_height: r.gauge("osprey_index_height", "Height of the index's tip"),
            electrs_index_height: r
                .register(
                    prometheus::IntGaugeVec::new(
                        Opts::new(
                            "electrs_index_height",
                            "Height of the index's tip (electrs' name, for what reads electrs)",
                        ),
                        &["type"],
                    )
                    .expect("valid metric name"),
                )
                .with_label_values(&["tip"]),
            node_height: r.gauge(
                "osprey_node_height",
                "Height of the node's best block, as last seen",
            ),
            lag_blocks: r.gauge(
                "osprey_index_lag_blocks",
                "Blocks the index is behind the node",
            ),
            initial_sync: r.gauge(
                "osprey_initial_sync",
                "1 during the initial sync (wallets are not served yet), else 0",
            ),
            blocks_indexed: r.counter(
                "osprey_indexed_blocks_total",
                "Blocks indexed by this process",
            ),
            txs_indexed: r.counter(
                "osprey_indexed_transactions_total",
                "Transactions indexed by this process",
            ),
        };
        let store = StoreMetrics {
            rocksdb_live_sst_bytes: r.gauge(
                "osprey_rocksdb_live_sst_bytes",
                "Size of the index's live RocksDB SST files",
            ),
            flat_files_bytes: r.gauge(
                "osprey_index_flat_files_bytes",
                "Size of the index's flat files (headers, txids, tx counts and ends)",
            ),
            rocksdb_written_bytes: r.counter(
                "osprey_rocksdb_written_bytes_total",
                "Bytes RocksDB wrote (flushes, compactions, WAL) since the index was opened",
            ),
        };
        let sessions = SessionMetrics {
            connected: r.gauge("osprey_sessions", "Electrum sessions connected"),
            accepted: r.counter("osprey_sessions_total", "Electrum sessions accepted"),
            refused: r.counter(
                "osprey_sessions_refused_total",
                "Connections refused: the server was full, or their address had too many sessions",
            ),
            shed: r.counter(
                "osprey_sessions_shed_total",
                "Idle sessions closed to make room for a new connection",
            ),
            subscribed_scripthashes: r.gauge(
                "osprey_subscribed_scripthashes",
                "Distinct script hashes with at least one subscriber",
            ),
            subscriptions: r.gauge(
                "osprey_subscriptions",
                "Script hash subscriptions held, summed over sessions",
            ),
            received_bytes: r.counter(
                "osprey_received_bytes_total",
                "Bytes received from Electrum clients",
            ),
            sent_bytes: r.counter(
                "osprey_sent_bytes_total",
                "Bytes sent to Electrum clients (responses and notifications)",
            ),
        };
        let count = r.register(
            IntCounterVec::new(
                Opts::new("osprey_requests_total", "Electrum requests answered"),
                &["method"],
            )
            .expect("valid metric"),
        );
        let latency = r.register(
            HistogramVec::new(
                HistogramOpts::new(
                    "osprey_request_duration_seconds",
                    "Time to answer an Electrum request",
                )
                .buckets(LATENCY_BUCKETS.to_vec()),
                &["method"],
            )
            .expect("valid metric"),
        );
        let errors = r.register(
            IntCounterVec::new(
                Opts::new(
                    "osprey_errors_total",
                    "Electrum error responses by JSON-RPC code",
                ),
                &["code"],
            )
            .expect("valid metric"),
        );
        let handles = |method: &str| MethodMetrics {
            count: count.with_label_values(&[method]),
            latency: latency.with_label_values(&[method]),
        };
        let requests = RequestMetrics {
            by_method: methods.iter().map(|m| (*m, handles(m))).collect(),
            unknown: handles(UNKNOWN_METHOD),
            errors,
        };
        let process = ProcessMetrics {
            resident_memory_bytes: r.gauge(
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
            ),
        };
        let silent_payments = SilentPaymentMetrics {
            subscriptions: r.gauge(
                "osprey_sp_subscriptions",
                "Silent-payment subscriptions held, summed over sessions",
            ),
            records_scanned: r.counter(
                "osprey_sp_records_scanned_total",
                "Silent-payment records scanned for subscriptions",
            ),
            scan_seconds: r.register(
                Counter::new(
                    "osprey_sp_scan_seconds_total",
                    "Time silent-payment scan chunks held a handler slot",
                )
                .expect("valid metric name"),
            ),
            matches: r.counter(
                "osprey_sp_matches_total",
                "Transactions in silent-payment notifications written to subscribers",
            ),
        };
        Metrics {
            registry,
            index,
            store,
            sessions,
            requests,
            process,
            silent_payments,
        }
    }

    /// Every metric in Prometheus' text format.
    pub fn encode(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("writing to a Vec cannot fail");
        String::from_utf8(out).expect("the text format is UTF-8")
    }

    /// The `Content-Type` of [`Metrics::encode`]'s text.
    pub fn content_type() -> &'static str {
        prometheus::TEXT_FORMAT
    }
}

impl Default for Metrics {
    /// Metrics without per-method request handles (every method counts as
    /// unknown): for components built without the method table, in tests.
    fn default() -> Metrics {
        Metrics::new(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resident_memory_is_read_from_vm_rss() {
        let status = "Name:\tosprey\nVmPeak:\t  9000 kB\nVmRSS:\t   1234 kB\nThreads:\t4\n";
        assert_eq!(vm_rss_bytes(status), Some(1234 * 1024));
        assert_eq!(vm_rss_bytes("Name:\tx\n"), None);
    }

    #[test]
    fn requests_of_unknown_methods_share_one_label() {
        let metrics = Metrics::new(&["server.ping"]);
        metrics
            .requests
            .method("server.ping")
            .observe(Duration::from_millis(2));
        metrics
            .requests
            .method("no.such.method")
            .observe(Duration::ZERO);
        metrics
            .requests
            .method("another.one")
            .observe(Duration::ZERO);
        metrics.requests.error(-32601);
        let text = metrics.encode();
        assert!(
            text.contains("osprey_requests_total{method=\"server.ping\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("osprey_requests_total{method=\"unknown\"} 2"),
            "{text}"
        );
        assert!(!text.contains("no.such.method"), "{text}");
        assert!(
            text.contains("osprey_errors_total{code=\"-32601\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn written_bytes_only_go_up_and_lag_never_goes_negative() {
        let metrics = Metrics::default();
        metrics.store.set_rocksdb_written_bytes(100);
        metrics.store.set_rocksdb_written_bytes(40);
        metrics.store.set_rocksdb_written_bytes(150);
        assert_eq!(metrics.store.rocksdb_written_bytes.get(), 150);
        metrics.index.set_tips(10, 7);
        assert_eq!(metrics.index.lag_blocks.get(), 0);
        metrics.index.set_tips(7, 10);
        assert_eq!(metrics.index.lag_blocks.get(), 3);
    }
}
