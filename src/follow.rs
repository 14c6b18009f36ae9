//! Keeping the index at the node's tip: the update loop that retries a
//! node's errors and waits out a full disk, the first sync and then the
//! tip followed once the server runs, and the thread parked on the node's
//! long poll for new blocks.

use crate::config::Config;
use crate::memory;
use crate::progress::Progress;
use crate::serve::dir_bytes;
use anyhow::Context;
use osprey_query::{Query, Tracker};
use osprey_store::Store;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Sleeps for `duration`, or less once `stop` is set (looked at every
/// 50 ms), so that a stop is not held up by a wait.
pub(crate) fn sleep_unless_stopped(duration: Duration, stop: &AtomicBool) {
    let until = Instant::now() + duration;
    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs one tracker update, retrying transient errors, and a full disk
/// once it has room again, until `stop`. A wait is said once, not at
/// every retry: the node client says when the node stops answering and
/// when it is back, so a node's transient errors are only debug lines
/// here; another's (the index's) gets one warning and one line when
/// indexing resumes.
pub(crate) fn update_until_ok(
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
pub(crate) struct DiskFull<'a> {
    store: &'a Store,
    retry_max: Duration,
}

/// While the disk stays full, the reminder comes at most this often.
const DISK_FULL_REMINDER: Duration = Duration::from_secs(60);

impl DiskFull<'_> {
    pub(crate) fn new<'a>(config: &Config, store: &'a Store) -> DiskFull<'a> {
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
    pub(crate) fn wait(&self, full: &osprey_store::Error, stop: &AtomicBool) -> anyhow::Result<()> {
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

/// The first sync, then the tip followed, until `stop` or the server's end.
pub(crate) fn follow_the_tip(
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
        let waiting = match query.source().initial_block_download() {
            Ok(false) if at_node_tip => break,
            Ok(false) => Some("the index is behind the node's tip (a replica's writer still indexing): wallets are served once it reaches it"),
            Ok(true) => Some("node is in initial block download: indexing as it goes; wallets are served once it is done"),
            // The node client says when the node stops answering.
            Err(e) => {
                tracing::debug!("node: {e}");
                None
            }
        };
        if let Some(waiting) = waiting {
            if ibd_logged.elapsed() >= Duration::from_secs(30) {
                ibd_logged = Instant::now();
                tracing::info!(height = query.tip().0 .0, "{waiting}");
            }
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
