//! `GET /metrics` on `--monitoring-addr`: a `tiny_http` server on a thread
//! of its own, so that a slow scraper never holds up a wallet. Each scrape
//! first reads what is not counted as it happens (the index's tip and size
//! on disk, the bytes RocksDB wrote, the process's memory), then answers
//! with every metric in Prometheus' text format. `GET /` answers the same,
//! as electrs does on every path: node boxes read electrs' port there
//! (myNode's `electrs_index_height`, the image's `curl -f
//! http://localhost:4224/` health check).

use anyhow::Context;
use osprey_metrics::Metrics;
use osprey_store::Store;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

/// The running endpoint; dropping it stops the thread and waits for it
/// (it holds the index, which must be closed before the process exits).
pub struct Monitoring {
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl Monitoring {
    /// Binds `addr` and serves `metrics` there.
    ///
    /// # Errors
    /// When the address cannot be bound or the thread cannot start.
    pub fn start(
        addr: SocketAddr,
        metrics: Arc<Metrics>,
        store: Arc<Store>,
    ) -> anyhow::Result<Monitoring> {
        let server = tiny_http::Server::http(addr)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("binding the monitoring address {addr}"))?;
        // The address bound, not the one asked: with port 0 the log names
        // the port the system picked.
        let addr = server.server_addr().to_ip().unwrap_or(addr);
        let server = Arc::new(server);
        let thread = {
            let server = Arc::clone(&server);
            std::thread::Builder::new()
                .name("monitoring".into())
                .spawn(move || {
                    // Ends when `unblock` is called (on drop).
                    for request in server.incoming_requests() {
                        let path = request.url().split('?').next().unwrap_or_default();
                        let response = if *request.method() == tiny_http::Method::Get
                            && matches!(path, "/metrics" | "/")
                        {
                            refresh(&metrics, &store);
                            let header = tiny_http::Header::from_bytes(
                                "Content-Type",
                                Metrics::content_type(),
                            )
                            .expect("a valid header");
                            tiny_http::Response::from_string(metrics.encode()).with_header(header)
                        } else {
                            tiny_http::Response::from_string("metrics are at /metrics\n")
                                .with_status_code(404)
                        };
                        if let Err(e) = request.respond(response) {
                            tracing::debug!("monitoring: answering a scrape: {e}");
                        }
                    }
                })
                .context("starting the monitoring thread")?
        };
        Ok(Monitoring {
            server,
            thread: Some(thread),
            addr,
        })
    }

    /// The address `/metrics` is served on (as bound).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Monitoring {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Sets what is read rather than counted: the index's tip (the node's is
/// what the last sync saw), the index's size, RocksDB's bytes written and
/// the resident memory.
fn refresh(metrics: &Metrics, store: &Store) {
    let index_height = store.tip().map_or(0, |(height, _)| height.0);
    let node_height = u32::try_from(metrics.index.node_height.get()).unwrap_or(0);
    metrics.index.set_tips(index_height, node_height);
    let gauge = |bytes: u64| i64::try_from(bytes).unwrap_or(i64::MAX);
    metrics
        .store
        .rocksdb_live_sst_bytes
        .set(gauge(store.rocksdb_live_sst_bytes()));
    metrics
        .store
        .flat_files_bytes
        .set(gauge(store.flat_files_bytes()));
    metrics
        .store
        .set_rocksdb_written_bytes(store.rocksdb_written_bytes());
    metrics.process.refresh();
}
