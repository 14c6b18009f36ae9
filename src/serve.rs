//! Wires the pieces together: store, chain source, indexer, query, tracker
//! thread and Electrum server.

use crate::admin;
use crate::config::{ChainConfig, Config};
use crate::index_report;
use crate::memory;
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
use std::sync::{mpsc, Arc};
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
fn dir_bytes(dir: &Path) -> u64 {
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

fn sleep_unless_stopped(duration: Duration, stop: &AtomicBool) {
    let until = Instant::now() + duration;
    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
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

/// Runs one tracker update, retrying transient errors, and a full disk
/// once it has room again, until `stop`. A wait is said once, not at
/// every retry: the node client says when the node stops answering and
/// when it is back, so a node's transient errors are only debug lines
/// here; another's (the index's) gets one warning and one line when
/// indexing resumes.
fn update_until_ok(
    tracker: &mut Tracker,
    progress: &mut Progress,
    disk_full: &DiskFull<'_>,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let mut warned = false;
    loop {
        match tracker.update(&mut |s| progress.on_chunk(s)) {
            Ok(()) => {
                if warned {
                    tracing::info!("indexing resumes");
                }
                progress.on_update(tracker.node_height());
                return Ok(());
            }
            Err(e) if e.is_transient() => {
                if warned || matches!(e, osprey_indexer::Error::Chain(_)) {
                    tracing::debug!("{e}; retrying in 5 s");
                } else {
                    warned = true;
                    tracing::warn!("{e}: indexing waits, retrying every 5 s");
                }
                sleep_unless_stopped(Duration::from_secs(5), stop);
            }
            Err(osprey_indexer::Error::Store(e)) if e.is_no_space() => disk_full.wait(&e, stop)?,
            Err(e) => return Err(e).context("indexing"),
        }
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
    }
}

/// How the sync waits out a full disk: the index stays open for reads
/// (wallets are answered from what is committed) while its filesystem is
/// checked at doubling intervals, from 1 s up to `retry_max`, until it
/// has the room the failed write needed; then the index is reopened
/// ([`Store::resume_writes`]) and the sync goes on from its tip.
struct DiskFull<'a> {
    store: &'a Store,
    retry_max: Duration,
}

/// While the disk stays full, the reminder comes at most this often.
const DISK_FULL_REMINDER: Duration = Duration::from_secs(60);

impl DiskFull<'_> {
    fn new<'a>(config: &Config, store: &'a Store) -> DiskFull<'a> {
        DiskFull {
            store,
            retry_max: Duration::from_secs(config.disk_full_retry_max_secs),
        }
    }

    /// Returns once writes resumed, or at `stop`.
    ///
    /// # Errors
    /// When the index cannot be opened again for another reason than a
    /// full disk.
    fn wait(&self, full: &osprey_store::Error, stop: &AtomicBool) -> anyhow::Result<()> {
        let osprey_store::Error::NoSpace { path, needed, free } = full else {
            return Err(anyhow::anyhow!("{full}"));
        };
        log_disk_full(
            path,
            *free,
            *needed,
            "indexing is paused and the server answers from what is committed",
            self.retry_max,
        );
        let mut delay = Duration::from_secs(1).min(self.retry_max);
        let mut reminded = Instant::now();
        loop {
            sleep_unless_stopped(delay, stop);
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            match self.store.resume_writes() {
                Ok(_) => {
                    tracing::info!(path = %path.display(), "disk has room again: indexing resumes");
                    return Ok(());
                }
                Err(osprey_store::Error::NoSpace { free, needed, .. }) => {
                    if reminded.elapsed() >= DISK_FULL_REMINDER {
                        reminded = Instant::now();
                        tracing::warn!(
                            "disk still full: {} free in {}, about {} needed; indexing waits",
                            human_bytes(free),
                            path.display(),
                            human_bytes(needed)
                        );
                    }
                }
                Err(e) => return Err(e).context("opening the index again after a full disk"),
            }
            delay = (delay * 2).min(self.retry_max);
        }
    }
}

/// The one line a full disk gets: where, how much room there is and is
/// needed, what `paused` meanwhile, and that it resumes by itself.
pub(crate) fn log_disk_full(
    path: &Path,
    free: u64,
    needed: u64,
    paused: &str,
    retry_max: Duration,
) {
    tracing::error!(
        "disk full: the index in {} has {} free, about {} needed to write on; {paused}; it resumes by itself once space is freed (checked every {} s at most)",
        path.display(),
        human_bytes(free),
        human_bytes(needed),
        retry_max.as_secs()
    );
}

/// Bytes for a log line a person reads: KiB or MiB with one decimal.
pub(crate) fn human_bytes(bytes: u64) -> String {
    if bytes < 1 << 20 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
    }
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

/// The first sync, then the tip followed, until `stop` or the server's end.
fn follow_the_tip(
    config: &Config,
    tracker: &mut Tracker,
    progress: &mut Progress,
    query: &Arc<Query>,
    stop: &Arc<AtomicBool>,
    server: &tokio::task::JoinHandle<anyhow::Result<()>>,
    addr: std::net::SocketAddr,
) -> anyhow::Result<()> {
    let poll = Duration::from_millis(config.poll_interval_ms);
    // While the node itself is still in its initial block download, keep
    // following it and serve wallets once it is done.
    let mut ibd_logged = Instant::now() - Duration::from_secs(3600);
    let disk_full = DiskFull::new(config, query.store());
    loop {
        update_until_ok(tracker, progress, &disk_full, stop)?;
        if stop.load(Ordering::Relaxed) || server.is_finished() {
            return Ok(());
        }
        // A writer's update syncs to the node's tip; a replica's takes
        // what its writer has, which may be behind (its first sync).
        let at_node_tip = tracker
            .node_height()
            .is_some_and(|node| query.tip().0 >= node);
        match query.source().initial_block_download() {
            Ok(false) if at_node_tip => break,
            Ok(false) => {
                if ibd_logged.elapsed() >= Duration::from_secs(30) {
                    ibd_logged = Instant::now();
                    tracing::info!(
                        height = query.tip().0 .0,
                        "the index is behind the node's tip (a replica's writer still indexing): wallets are served once it reaches it"
                    );
                }
            }
            Ok(true) => {
                if ibd_logged.elapsed() >= Duration::from_secs(30) {
                    ibd_logged = Instant::now();
                    tracing::info!(
                        height = query.tip().0 .0,
                        "node is in initial block download: indexing as it goes; wallets are served once it is done"
                    );
                }
            }
            // The node client says when the node stops answering.
            Err(e) => tracing::debug!("node: {e}"),
        }
        sleep_unless_stopped(poll, stop);
    }
    // The first sync's last blocks (all of a short chain's) are in
    // memtables and the WAL: flushed once here, the index on disk is
    // tables only, as the startup summary and the metrics report it, and
    // a restart has no log to replay. A failure is a write's (a full
    // disk): the next write waits it out as any other.
    let store = query.store();
    if !store.is_replica() {
        if let Err(e) = store.flush() {
            tracing::warn!("flushing the index after its first sync: {e}");
        }
    }
    progress.finish(dir_bytes(&config.db_path));
    query.release_wallets();
    let (height, hash) = query.tip();
    tracing::info!(height = height.0, %hash, %addr, "serving Electrum clients");
    let (new_block, watcher) = watch_for_new_blocks(Arc::clone(query), poll, Arc::clone(stop));
    let mut result = Ok(());
    let mut trimmer = memory::Trimmer::new();
    while !stop.load(Ordering::Relaxed) && !server.is_finished() {
        if let Err(e) = update_until_ok(tracker, progress, &disk_full, stop) {
            result = Err(e);
            break;
        }
        trimmer.tick();
        // Woken at once by a new block; the mempool is polled every
        // `poll` either way.
        let next_update = Instant::now() + poll;
        if config.read_only {
            if let Err(e) = follow_writer_until(tracker, &new_block, next_update, stop) {
                result = Err(e);
                break;
            }
            continue;
        }
        match new_block.recv_timeout(poll) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => sleep_unless_stopped(poll, stop),
        }
    }
    stop.store(true, Ordering::Relaxed);
    // The watcher holds the index: wait for it (it sees `stop` within one
    // long poll), so that the index is closed before the process exits.
    // Exiting with RocksDB open races its background flushes against the
    // C++ static destructors ("pthread lock: Invalid argument", SIGABRT).
    if let Some(watcher) = watcher {
        let _ = watcher.join();
    }
    result
}

/// How often a read-only replica asks RocksDB whether its writer committed
/// (`Store::catch_up`): the writer's commit is the event, and nothing
/// announces it to another process. A catch-up that finds nothing reads
/// the writer's manifest and log tail only.
const REPLICA_CATCH_UP_INTERVAL: Duration = Duration::from_millis(50);

/// A replica between two full updates: takes up the writer's commits every
/// [`REPLICA_CATCH_UP_INTERVAL`] until `until` (the next mempool poll),
/// or until the node announces a block.
fn follow_writer_until(
    tracker: &mut Tracker,
    new_block: &mpsc::Receiver<()>,
    until: Instant,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    loop {
        let now = Instant::now();
        if now >= until || stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        match new_block.recv_timeout(REPLICA_CATCH_UP_INTERVAL.min(until - now)) {
            Ok(()) => return Ok(()),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(REPLICA_CATCH_UP_INTERVAL.min(until - now));
            }
        }
        match tracker.follow_writer() {
            Ok(()) => {}
            Err(e) if e.is_transient() => tracing::debug!("following the writer: {e}"),
            Err(e) => return Err(e).context("following the writer"),
        }
    }
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
