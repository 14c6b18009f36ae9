//! Wires the pieces together: store, chain source, indexer, query, tracker
//! thread and Electrum server.

use crate::admin;
use crate::config::{ChainConfig, Config};
use crate::follow::{
    follow_the_tip, log_disk_full, sleep_unless_stopped, update_until_ok, DiskFull,
};
use crate::index_report;
use crate::monitoring::Monitoring;
use crate::progress::Progress;
use anyhow::Context;
use osprey_chain::{BlkFiles, BlockSource, BlockSourceChoice, ChainSource, Daemon, NodeKind};
use osprey_indexer::{Indexer, IndexerConfig};
use osprey_metrics::Metrics;
use osprey_query::{Query, QueryConfig, Tracker};
use osprey_store::{Store, StoreConfig};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Opens the index: deleted first with `--reindex`, and rebuilt from
/// scratch when it is in another format than this build's (an upgrade or
/// a downgrade of Osprey) unless `reindex_on_format_change` is off. Either
/// way only the index's own files are deleted (`osprey_store::remove_index`).
///
/// A disk too full to open the index on is waited out like a full disk
/// during a sync ([`DiskFull`]), before the Electrum port opens.
fn open_store(config: &Config, stop: &AtomicBool) -> anyhow::Result<Arc<Store>> {
    if config.read_only {
        return open_replica(config);
    }
    if config.reindex {
        tracing::warn!(path = %config.db_path.display(), "--reindex: deleting the index");
        remove_index(&config.db_path)?;
    }
    let store_config = StoreConfig {
        reorg_depth_max: config.reorg_depth_max,
        cache_bytes: config.db_cache_bytes,
        silent_payments: config.silent_payments,
        lsm_scale: config.lsm_scale,
        ..StoreConfig::default()
    };
    let retry_max = Duration::from_secs(config.disk_full_retry_max_secs);
    let mut delay = Duration::ZERO;
    let mut open = || loop {
        match Store::open(&config.db_path, config.network.name(), store_config.clone()) {
            Err(osprey_store::Error::NoSpace { path, needed, free })
                if !stop.load(Ordering::Relaxed) =>
            {
                if delay.is_zero() {
                    log_disk_full(
                        &path,
                        free,
                        needed,
                        "the index is not opened yet",
                        retry_max,
                    );
                }
                delay = (delay * 2).clamp(Duration::from_secs(1), retry_max);
                sleep_unless_stopped(delay, stop);
            }
            other => break other,
        }
    };
    let store = match open() {
        Err(osprey_store::Error::Schema {
            found, expected, ..
        }) if config.reindex_on_format_change => {
            tracing::warn!(
                path = %config.db_path.display(),
                "the index is in format {found}, this build writes format {expected}: \
                 deleting it and indexing again (reindex_on_format_change = false refuses instead)"
            );
            remove_index(&config.db_path)?;
            open()
        }
        other => other,
    }
    .with_context(|| format!("opening index at {}", config.db_path.display()))?;
    Ok(Arc::new(store))
}

/// Opens the index another `osprey serve` writes in `db_path`, to read
/// only ([`Store::open_replica`]). Its format is the writer's to change:
/// a mismatch is refused, never rebuilt.
fn open_replica(config: &Config) -> anyhow::Result<Arc<Store>> {
    let store_config = StoreConfig {
        cache_bytes: config.db_cache_bytes,
        silent_payments: config.silent_payments,
        ..StoreConfig::default()
    };
    let store = Store::open_replica(&config.db_path, config.network.name(), store_config)
        .with_context(|| format!("opening index at {} read-only", config.db_path.display()))?;
    Ok(Arc::new(store))
}

/// Deletes the index in `path`, and only it, saying what went.
fn remove_index(path: &Path) -> anyhow::Result<()> {
    let removed = osprey_store::remove_index(path)
        .with_context(|| format!("deleting the index in {}", path.display()))?;
    tracing::info!(files = removed.len(), path = %path.display(), "index deleted");
    Ok(())
}

/// Connects to the chain source, waiting (with one log line, not one per
/// attempt) while the node is down or still starting. Returns the source
/// and the startup lines that say what it is.
fn connect_source(
    config: &Config,
    stop: &AtomicBool,
) -> anyhow::Result<(Arc<dyn ChainSource>, Vec<String>)> {
    match &config.chain {
        ChainConfig::BlkFiles { dir } => Ok((
            Arc::new(
                BlkFiles::open(dir, config.network)
                    .with_context(|| format!("reading blocks from {}", dir.display()))?,
            ),
            vec![format!(
                "blocks: blk*.dat files in {} (no node: no mempool, no broadcast)",
                dir.display()
            )],
        )),
        ChainConfig::Node {
            rpc_addr,
            auth,
            block_source,
            blocks_dir,
        } => {
            let mut waiting = false;
            loop {
                let connected = Daemon::connect(rpc_addr, auth.clone(), config.network).and_then(
                    |mut daemon| {
                        daemon.use_block_source(*block_source, blocks_dir.as_deref())?;
                        Ok(daemon)
                    },
                );
                match connected {
                    Ok(daemon) => {
                        if waiting {
                            tracing::info!("node at {rpc_addr} answers");
                        }
                        let about = describe_node(&daemon, rpc_addr, *block_source, blocks_dir);
                        return Ok((Arc::new(daemon), about));
                    }
                    Err(e) if e.is_transient() => {
                        if waiting {
                            tracing::debug!("still waiting for node at {rpc_addr}: {e}");
                        } else {
                            waiting = true;
                            tracing::warn!("waiting for node at {rpc_addr}: {e}");
                        }
                        sleep_unless_stopped(Duration::from_secs(5), stop);
                        if stop.load(Ordering::Relaxed) {
                            anyhow::bail!("stopped while waiting for the node");
                        }
                    }
                    Err(e) => return Err(e).context(format!("node at {rpc_addr}")),
                }
            }
        }
    }
}

/// The startup lines about the node: software and version, the block
/// source and why, and what a `txindex` has to do with it.
fn describe_node(
    daemon: &Daemon,
    rpc_addr: &str,
    choice: BlockSourceChoice,
    blocks_dir: &Option<PathBuf>,
) -> Vec<String> {
    let chosen = match choice {
        BlockSourceChoice::Auto => "the fastest the node offers",
        BlockSourceChoice::Only(_) => "as --block-source says",
    };
    let source = match (daemon.block_source(), daemon.kind()) {
        (BlockSource::Files, _) => format!(
            "files: Bitcoin Core's blk*.dat and rev*.dat in {}",
            blocks_dir
                .as_deref()
                .map_or_else(|| "?".into(), |d| d.display().to_string())
        ),
        (BlockSource::Rest, _) => "rest: Bitcoin Core's binary REST".into(),
        (BlockSource::Rpc, NodeKind::BitcoinCore { .. }) => {
            "rpc: JSON-RPC getblock with prevouts".into()
        }
        (BlockSource::Rpc, NodeKind::Btcd) => {
            "rpc: JSON-RPC blocks and the transactions they spend".into()
        }
    };
    let has = match daemon.has_txindex() {
        Some(true) => "the node has one",
        Some(false) => "the node has none",
        None => "the node does not say whether it has one",
    };
    let txindex = match daemon.kind() {
        NodeKind::BitcoinCore { .. } => format!("txindex: not needed ({has})"),
        NodeKind::Btcd => format!(
            "txindex: needed, btcd serves no undo data so spent outputs come from getrawtransaction ({has})"
        ),
    };
    let mut lines = vec![
        format!("node: {} at {rpc_addr}", daemon.node_version()),
        format!("block source: {source} ({chosen})"),
        txindex,
    ];
    if let (Some(reason), Some(dir)) = (daemon.files_refused(), blocks_dir) {
        lines.push(files_refused_line(
            reason,
            dir,
            daemon.block_source(),
            unreadable(dir),
        ));
    }
    lines
}

/// Whether `dir` (the node's blocks directory) or its first block file
/// exists but is refused to this process.
fn unreadable(dir: &Path) -> bool {
    let denied = |r: std::io::Result<()>| matches!(r, Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied);
    denied(std::fs::read_dir(dir).map(drop))
        || denied(std::fs::File::open(dir.join("blk00000.dat")).map(drop))
}

/// The startup line that says why Core's block files are not read, which
/// source is used instead, and, when only permissions stand in the way,
/// how to grant them: Core writes its files readable by its own user only
/// (umask 077) unless started with `-sysperms`.
fn files_refused_line(reason: &str, dir: &Path, fallback: BlockSource, unreadable: bool) -> String {
    let advice = if unreadable {
        format!(
            ". To read them (faster, and it spares the node): start bitcoind with -sysperms so that its files are group-readable, \
             make {} and its files readable by bitcoind's group (chmod -R g+rX), and add Osprey's user to that group \
             (usermod -aG bitcoin osprey)",
            dir.display()
        )
    } else {
        String::new()
    };
    format!("block files: not read, {reason}; using {fallback} instead{advice}")
}

/// Bytes of the files under `dir` (0 for what cannot be read).
pub(crate) fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => dir_bytes(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Says in one block of lines what Osprey found and will use.
fn log_startup(config: &Config, store: &Store, about_source: &[String]) {
    tracing::info!(
        "osprey {} (index format {}) on {}",
        env!("CARGO_PKG_VERSION"),
        osprey_store::SCHEMA_VERSION,
        config.network
    );
    for line in about_source {
        tracing::info!("{line}");
    }
    tracing::info!(
        "resources: {} worker threads, {} MiB of RocksDB block cache",
        config.worker_threads,
        config.db_cache_bytes >> 20
    );
    let state = match store.tip() {
        Some((height, _)) => format!("at height {height}"),
        None => "new".to_string(),
    };
    let role = if store.is_replica() {
        ", a read-only replica of the server that writes it"
    } else {
        ""
    };
    tracing::info!(
        "index: {}{role}, {state}, {:.1} MB on disk",
        config.db_path.display(),
        dir_bytes(&config.db_path) as f64 / 1e6
    );
}

/// What [`build`] wires together: the tracker that keeps the index at the
/// node's tip, the queries wallets are answered from, the metrics both
/// update, and the `/metrics` endpoint when `--monitoring-addr` asks.
pub struct Parts {
    pub tracker: Tracker,
    pub query: Arc<Query>,
    pub metrics: Arc<Metrics>,
    monitoring: Option<Monitoring>,
    /// When the build began: the server's uptime counts from here.
    started: Instant,
}

/// The async runtime that serves wallets, on `worker_threads` threads.
pub fn runtime(config: &Config) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.worker_threads)
        .max_blocking_threads(osprey_server::blocking_threads(config.worker_threads))
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// The index, the chain source and what serves from them, as `config` says.
pub fn build(config: &Config, stop: &Arc<AtomicBool>) -> anyhow::Result<Parts> {
    let started = Instant::now();
    // Block parsing and the sort before each commit run on rayon's global
    // pool: `worker_threads` of them, so a small board keeps cores for its
    // node. Only the first call sets it; a process builds once.
    if let Err(e) = rayon::ThreadPoolBuilder::new()
        .num_threads(config.worker_threads)
        .thread_name(|i| format!("index-{i}"))
        .build_global()
    {
        tracing::debug!("indexing threads were set already: {e}");
    }
    let store = open_store(config, stop)?;
    // Before the node is reached: what watches the port (myNode waits on
    // it before starting its explorer) sees the index's height at once.
    let metrics = Arc::new(Metrics::new(&osprey_electrum::METHODS));
    let monitoring = config
        .monitoring_addr
        .map(|addr| Monitoring::start(addr, Arc::clone(&metrics), Arc::clone(&store)))
        .transpose()?;
    if let Some(monitoring) = &monitoring {
        tracing::info!("metrics: http://{}/metrics", monitoring.addr());
    }
    let (source, about_source) = connect_source(config, stop)?;
    log_startup(config, &store, &about_source);
    let indexer_config = IndexerConfig::default();
    let indexer_config = IndexerConfig {
        // A batch is one write: it must shrink with the memtables it fills.
        batch_rows_max: store.config().scaled(indexer_config.batch_rows_max),
        ..indexer_config
    };
    let indexer = if config.read_only {
        Indexer::replica(Arc::clone(&store), source.clone(), indexer_config)
    } else {
        Indexer::new(Arc::clone(&store), source.clone(), indexer_config)
    }
    .with_stop(Arc::clone(stop));
    let query = Arc::new(Query::new(
        store,
        source,
        QueryConfig {
            history_entries_max: config.history_entries_max,
            ..QueryConfig::default()
        },
    ));
    Ok(Parts {
        tracker: Tracker::new(indexer, Arc::clone(&query)),
        query,
        metrics,
        monitoring,
        started,
    })
}

/// `osprey index`: sync to the tip and exit.
pub fn index_only(config: Config, progress_json: bool, digest: bool) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let Parts {
        mut tracker,
        query,
        metrics,
        monitoring,
        ..
    } = build(&config, &stop)?;
    let mut progress = Progress::new(progress_json, metrics);
    let disk_full = DiskFull::new(&config, query.store());
    // Everything on disk, memtables included: what is measured. (The bulk
    // load was merged during the sync.) A full disk there may take the
    // index back to an earlier tip (see `Store::resume_writes`): it syncs
    // again once there is room.
    loop {
        update_until_ok(&mut tracker, &mut progress, &disk_full, &stop)?;
        progress.finish(dir_bytes(&config.db_path));
        index_report::lsm(query.store(), "synced", progress_json)?;
        match query.store().flush() {
            Ok(()) => break,
            Err(e) if e.is_no_space() => disk_full.wait(&e, &stop)?,
            Err(e) => return Err(e).context("flushing the index"),
        }
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
    }
    index_report::lsm(query.store(), "flushed", progress_json)?;
    let (height, hash) = query.tip();
    tracing::info!(height = height.0, %hash, "index is at the tip");
    index_report::footprint(&query.store().footprint());
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
    // The endpoint holds the index: closed before it.
    drop(monitoring);
    Ok(())
}

/// `osprey serve`: initial sync, then serve while following the tip.
pub fn serve(config: Config) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let runtime = runtime(&config)?;
    {
        let stop = Arc::clone(&stop);
        runtime.spawn(async move {
            shutdown_signal().await;
            tracing::info!("shutting down");
            stop.store(true, Ordering::Relaxed);
        });
    }
    let parts = build(&config, &stop)?;
    run_server(&config, parts, runtime, stop)
}

/// Opens the Electrum ports, syncs, and follows the tip until stopped.
///
/// The ports open before the first sync, as electrs' do: a node box's
/// dashboard computes the sync's progress from `blockchain.headers.subscribe`
/// (Umbrel) and its health check asks `server.banner` (StartOS), for the
/// hours of a first sync. Until the index is at the node's tip (and the
/// node out of its initial block download), wallets get an error with the
/// progress instead of a partial history ([`Query::hold_wallets`]).
pub fn run_server(
    config: &Config,
    parts: Parts,
    runtime: tokio::runtime::Runtime,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let Parts {
        mut tracker,
        query,
        metrics,
        monitoring,
        started,
    } = parts;
    let limits = osprey_server::Limits {
        line_bytes_max: config.line_bytes_max,
        reply_bytes_max: config.reply_bytes_max,
        batch_requests_max: config.batch_requests_max,
        subscriptions_per_session_max: config.subscriptions_per_session_max,
        sp_labels_max: config.sp_labels_max,
        sp_scan_priority: config.sp_scan_priority,
        sp_subscriptions_per_session_max: config.sp_subscriptions_per_session_max,
        sessions_max: config.sessions_max,
        client_memory_bytes_max: config.client_memory_bytes_max,
        sessions_per_ip_max: config.sessions_per_ip_max,
        trusted_subnets: config.trusted_subnets.clone(),
        proxy_protocol_from: config.proxy_protocol_from.clone(),
        ipv6_prefix_bits: config.ipv6_prefix_bits,
        worker_threads: config.worker_threads,
        ..osprey_server::Limits::default()
    };
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
    query.hold_wallets();
    // Bound here, so that a port in use fails the start at once.
    let bound = runtime.block_on(osprey_server::Server::bind(
        server_config,
        Arc::<Query>::clone(&query),
        query.changes(),
    ))?;
    let addr = bound.local_addr().unwrap_or(config.electrum_rpc_addr);
    // Before the first session: bans made with `osprey admin ban` before a
    // restart (a replica takes its writer's, as of its own start).
    let bans = crate::bans::BanFile::new(&config.db_path);
    let sessions = bound.sessions();
    // Before the read: a change made meanwhile is followed, not missed.
    let loaded = bans.stamp();
    let banned = bans.load();
    for subnet in &banned {
        if let Err(e) = sessions.ban(*subnet) {
            tracing::warn!(%subnet, "ban list: {e}");
        }
    }
    if !banned.is_empty() {
        tracing::info!(banned = banned.len(), path = %bans.path().display(), "bans restored");
    }
    // A replica has no admin interface: it takes its writer's bans.
    let (bans, following_bans) = if config.read_only {
        let following = crate::bans::follow(bans, sessions.clone(), loaded);
        (None, Some(runtime.spawn(following)))
    } else {
        (Some(bans), None)
    };
    // A replica writes nothing in the index's directory, where the
    // writer's admin socket is: it has none.
    let admin = match bans {
        None => None,
        Some(bans) => admin::start(
            &runtime,
            &config.db_path,
            admin::AdminContext {
                query: Arc::clone(&query),
                metrics: Arc::clone(&metrics),
                sessions,
                peers: bound.peers(),
                stop: Arc::clone(&stop),
                network: config.network,
                started,
                set_log_filter: crate::set_log_filter,
                bans,
            },
        )?,
    };
    if let Some(admin) = &admin {
        tracing::info!(path = %admin.path().display(), "admin socket open");
    }
    let server = {
        let stop = Arc::clone(&stop);
        let metrics = Arc::clone(&metrics);
        runtime.spawn(async move {
            let shutdown = async move {
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            };
            bound.with_metrics(metrics).run(shutdown).await
        })
    };
    tracing::info!(
        %addr,
        "Electrum port open: server methods, headers and fee estimates now; wallets once the index reaches the node's tip"
    );
    let mut progress = Progress::new(false, metrics);
    let result = follow_the_tip(
        config,
        &mut tracker,
        &mut progress,
        &query,
        &stop,
        &server,
        addr,
    );
    stop.store(true, Ordering::Relaxed);
    let served = runtime.block_on(server).context("server task");
    drop(admin);
    if let Some(following) = following_bans {
        following.abort();
    }
    drop(monitoring);
    drop(tracker);
    drop(query);
    result.and(served?)
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
