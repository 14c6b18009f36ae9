//! Wires the pieces together: store, chain source, indexer, query, tracker
//! thread and Electrum server.

use crate::config::{ChainConfig, Config};
use anyhow::Context;
use osprey_chain::{BlkFiles, ChainSource, Daemon};
use osprey_indexer::{ChunkStats, Indexer, IndexerConfig};
use osprey_query::{Query, QueryConfig, Tracker};
use osprey_store::{Store, StoreConfig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Opens the index (wiping it first with `--reindex`).
fn open_store(config: &Config) -> anyhow::Result<Arc<Store>> {
    if config.reindex && config.db_path.exists() {
        tracing::warn!(path = %config.db_path.display(), "--reindex: deleting the index");
        std::fs::remove_dir_all(&config.db_path)
            .with_context(|| format!("deleting {}", config.db_path.display()))?;
    }
    let store_config = StoreConfig {
        reorg_depth_max: config.reorg_depth_max,
        ..StoreConfig::default()
    };
    let store = Store::open(&config.db_path, config.network.name(), store_config)
        .with_context(|| format!("opening index at {}", config.db_path.display()))?;
    Ok(Arc::new(store))
}

/// Connects to the chain source, waiting (with one log line per attempt)
/// while the node is down or still starting.
fn connect_source(config: &Config, stop: &AtomicBool) -> anyhow::Result<Arc<dyn ChainSource>> {
    match &config.chain {
        ChainConfig::BlkFiles { dir } => Ok(Arc::new(
            BlkFiles::open(dir, config.network)
                .with_context(|| format!("reading blocks from {}", dir.display()))?,
        )),
        ChainConfig::Node {
            rpc_addr,
            auth,
            block_source,
            blocks_dir,
        } => loop {
            let connected =
                Daemon::connect(rpc_addr, auth.clone(), config.network).and_then(|mut daemon| {
                    daemon.use_block_source(*block_source, blocks_dir.as_deref())?;
                    Ok(daemon)
                });
            match connected {
                Ok(daemon) => {
                    tracing::info!(
                        node = rpc_addr,
                        kind = ?daemon.kind(),
                        block_source = %daemon.block_source(),
                        "connected to node; no txindex needed"
                    );
                    return Ok(Arc::new(daemon));
                }
                Err(e) if e.is_transient() => {
                    tracing::warn!("waiting for node at {rpc_addr}: {e}");
                    sleep_unless_stopped(Duration::from_secs(5), stop);
                    if stop.load(Ordering::Relaxed) {
                        anyhow::bail!("stopped while waiting for the node");
                    }
                }
                Err(e) => return Err(e).context(format!("node at {rpc_addr}")),
            }
        },
    }
}

fn sleep_unless_stopped(duration: Duration, stop: &AtomicBool) {
    let until = Instant::now() + duration;
    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Logs sync progress at most every few seconds, with rate and ETA.
pub struct ProgressLog {
    started: Instant,
    last_log: Instant,
    blocks: u64,
    txs: u64,
    bytes: u64,
    json: bool,
}

impl ProgressLog {
    pub fn new(json: bool) -> ProgressLog {
        let now = Instant::now();
        ProgressLog {
            started: now,
            last_log: now - Duration::from_secs(60),
            blocks: 0,
            txs: 0,
            bytes: 0,
            json,
        }
    }

    pub fn on_chunk(&mut self, stats: &ChunkStats) {
        self.blocks += u64::from(stats.blocks);
        self.txs += stats.txs;
        self.bytes += stats.block_bytes;
        let elapsed = self.started.elapsed().as_secs_f64().max(1e-6);
        if self.json {
            let line = serde_json::json!({
                "height": stats.height.0,
                "source_height": stats.source_height.0,
                "blocks": stats.blocks,
                "txs": stats.txs,
                "rows": stats.rows,
                "block_bytes": stats.block_bytes,
                "batch_secs": stats.elapsed.as_secs_f64(),
                "elapsed_secs": elapsed,
            });
            // The machine-readable progress stream of `osprey index`.
            #[allow(clippy::print_stdout)]
            {
                println!("{line}");
            }
        }
        if self.last_log.elapsed() < Duration::from_secs(5) && stats.height != stats.source_height {
            return;
        }
        self.last_log = Instant::now();
        let remaining = u64::from(stats.source_height.0.saturating_sub(stats.height.0));
        let blocks_per_sec = self.blocks as f64 / elapsed;
        let eta = if remaining == 0 {
            "done".to_string()
        } else {
            format!("{:.0}s", remaining as f64 / blocks_per_sec.max(1e-9))
        };
        tracing::info!(
            "indexed height {} of {} ({:.1}%), {:.0} tx/s, {:.1} MB/s, ETA {eta}",
            stats.height,
            stats.source_height,
            100.0 * f64::from(stats.height.0) / f64::from(stats.source_height.0.max(1)),
            self.txs as f64 / elapsed,
            self.bytes as f64 / elapsed / 1e6,
        );
    }
}

/// The index, the chain source and what serves from them, as `config` says.
pub fn build(config: &Config, stop: &Arc<AtomicBool>) -> anyhow::Result<(Tracker, Arc<Query>)> {
    let store = open_store(config)?;
    let source = connect_source(config, stop)?;
    let indexer = Indexer::new(
        Arc::clone(&store),
        Arc::clone(&source),
        IndexerConfig::default(),
    )
    .with_stop(Arc::clone(stop));
    let query = Arc::new(Query::new(
        store,
        source,
        QueryConfig {
            history_entries_max: config.history_entries_max,
            ..QueryConfig::default()
        },
    ));
    Ok((Tracker::new(indexer, Arc::clone(&query)), query))
}

/// Runs one tracker update, retrying transient node errors until `stop`.
fn update_until_ok(
    tracker: &mut Tracker,
    progress: &mut ProgressLog,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    loop {
        match tracker.update(&mut |s| progress.on_chunk(s)) {
            Ok(()) => return Ok(()),
            Err(e) if e.is_transient() => {
                tracing::warn!("node: {e}; retrying in 5 s");
                sleep_unless_stopped(Duration::from_secs(5), stop);
                if stop.load(Ordering::Relaxed) {
                    return Ok(());
                }
            }
            Err(e) => return Err(e).context("indexing"),
        }
    }
}

/// `osprey index`: sync to the tip and exit.
pub fn index_only(config: Config, progress_json: bool, digest: bool) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let (mut tracker, query) = build(&config, &stop)?;
    let mut progress = ProgressLog::new(progress_json);
    update_until_ok(&mut tracker, &mut progress, &stop)?;
    // A finished index, not a pile of level-0 files: what is measured and
    // what `serve` would otherwise merge in the background.
    let merging = Instant::now();
    query.store().compact().context("compacting the index")?;
    tracing::info!(
        seconds = format!("{:.1}", merging.elapsed().as_secs_f64()),
        "index compacted"
    );
    let (height, hash) = query.tip();
    tracing::info!(height = height.0, %hash, "index is at the tip");
    if digest {
        let digest = query.store().digest().context("reading the index")?;
        let line = serde_json::json!({
            "height": height.0,
            "hash": hash.to_string(),
            "digest": osprey_core::to_hex(&digest),
        });
        #[allow(clippy::print_stdout)]
        {
            println!("{line}");
        }
    }
    Ok(())
}

/// `osprey serve`: initial sync, then serve while following the tip.
pub fn serve(config: Config) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    {
        let stop = Arc::clone(&stop);
        runtime.spawn(async move {
            shutdown_signal().await;
            tracing::info!("shutting down");
            stop.store(true, Ordering::Relaxed);
        });
    }
    let (tracker, query) = build(&config, &stop)?;
    run_server(&config, tracker, query, runtime, stop)
}

/// Syncs, starts the Electrum server, and follows the tip until stopped.
pub fn run_server(
    config: &Config,
    mut tracker: Tracker,
    query: Arc<Query>,
    runtime: tokio::runtime::Runtime,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    // Checked before the sync, which may take hours, not after it.
    let limits = osprey_server::Limits {
        line_bytes_max: config.line_bytes_max,
        reply_bytes_max: config.reply_bytes_max,
        batch_requests_max: config.batch_requests_max,
        subscriptions_per_session_max: config.subscriptions_per_session_max,
        sessions_max: config.sessions_max,
        client_memory_bytes_max: config.client_memory_bytes_max,
        sessions_per_ip_max: config.sessions_per_ip_max,
        ..osprey_server::Limits::default()
    };
    limits.validate().context("invalid server limits")?;
    if let Some(tls) = &config.tls {
        tls.check().context("TLS certificate")?;
    }
    let mut progress = ProgressLog::new(false);
    // Serving before the initial sync ends would give wallets partial
    // histories: sync first, and while the node itself is still in its
    // initial block download, keep following it and serve once it is done.
    let poll = Duration::from_millis(config.poll_interval_ms);
    let mut ibd_logged = Instant::now() - Duration::from_secs(3600);
    loop {
        update_until_ok(&mut tracker, &mut progress, &stop)?;
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        match query.source().initial_block_download() {
            Ok(false) => break,
            Ok(true) => {
                if ibd_logged.elapsed() >= Duration::from_secs(30) {
                    ibd_logged = Instant::now();
                    tracing::info!(
                        height = query.tip().0 .0,
                        "node is in initial block download: indexing as it goes; wallets are served once it is done"
                    );
                }
            }
            Err(e) => tracing::warn!("node: {e}"),
        }
        sleep_unless_stopped(poll, &stop);
    }
    let server_config = osprey_server::ServerConfig {
        electrum_rpc_addr: config.electrum_rpc_addr,
        electrum_tls_addr: config.electrum_tls_addr,
        electrum_ws_addr: config.electrum_ws_addr,
        electrum_wss_addr: config.electrum_wss_addr,
        tls: config.tls.clone(),
        network: config.network,
        banner: config.banner.clone(),
        donation_address: String::new(),
        server_version: format!("Osprey {}", env!("CARGO_PKG_VERSION")),
        limits,
        peering: osprey_server::PeerConfig {
            public_hosts: config.public_hosts.clone(),
            peers: config.peers.clone(),
            private_peers_allowed: false,
        },
    };
    let server = {
        let stop = Arc::clone(&stop);
        let query = Arc::clone(&query);
        runtime.spawn(async move {
            let shutdown = async move {
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            };
            osprey_server::serve(server_config, query, shutdown).await
        })
    };
    let (height, hash) = query.tip();
    tracing::info!(height = height.0, %hash, addr = %config.electrum_rpc_addr, "serving Electrum clients");
    let (new_block, watcher) = watch_for_new_blocks(Arc::clone(&query), poll, Arc::clone(&stop));
    let mut result = Ok(());
    while !stop.load(Ordering::Relaxed) {
        if server.is_finished() {
            break;
        }
        if let Err(e) = update_until_ok(&mut tracker, &mut progress, &stop) {
            result = Err(e);
            stop.store(true, Ordering::Relaxed);
            break;
        }
        // Woken at once by a new block; the mempool is polled every
        // `poll` either way.
        match new_block.recv_timeout(poll) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => sleep_unless_stopped(poll, &stop),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let served = runtime.block_on(server).context("server task");
    // The watcher holds the index: wait for it (it sees `stop` within one
    // long poll), so that the index is closed before the process exits.
    // Exiting with RocksDB open races its background flushes against the
    // C++ static destructors ("pthread lock: Invalid argument", SIGABRT).
    if let Some(watcher) = watcher {
        let _ = watcher.join();
    }
    drop(tracker);
    drop(query);
    result.and(served?)
}

/// A thread parked on the node's long poll for new blocks: each new block
/// sends one wake-up, so the tip is followed within milliseconds of the
/// node accepting a block rather than at the next poll.
fn watch_for_new_blocks(
    query: Arc<Query>,
    poll: Duration,
    stop: Arc<AtomicBool>,
) -> (mpsc::Receiver<()>, Option<std::thread::JoinHandle<()>>) {
    let (wake, woken) = mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new()
        .name("new-blocks".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let tip = query.tip().1;
                match query.source().wait_for_new_block(tip, poll) {
                    Ok(true) => {
                        // A full channel already holds a wake-up: fine.
                        let _ = wake.try_send(());
                        // Let the tracker index it before asking again.
                        let until = Instant::now() + poll;
                        while query.tip().1 == tip && Instant::now() < until {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    }
                    Ok(false) => {}
                    Err(_) => sleep_unless_stopped(poll, &stop),
                }
            }
        });
    match spawned {
        Ok(watcher) => (woken, Some(watcher)),
        Err(e) => {
            tracing::warn!("cannot start the new-block watcher ({e}); polling instead");
            (woken, None)
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
