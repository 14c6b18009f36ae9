//! Brings the index to the source's best block: undoes blocks the source
//! no longer has (reorgs of any depth the undo data covers), then indexes
//! new blocks in batches. Fetching runs one chunk ahead of row building,
//! and rows are built on all cores.

use crate::rows::{block_rows, BlockRows};
use crate::Error;
use bitcoin::BlockHash;
use osprey_chain::{BlockFeed, BlockWithPrevouts};
use osprey_core::{Height, ScriptHash, TxNum};
use osprey_store::{IndexedBlock, PreparedBatch, Store};
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct IndexerConfig {
    /// Blocks fetched from the source per request.
    pub fetch_blocks: u32,
    /// A batch is committed once it holds this many history rows (small
    /// enough that commits spread evenly over a sync and bound memory,
    /// large enough that per-commit fsyncs do not matter)…
    pub batch_rows_max: usize,
    /// …or this many blocks.
    pub batch_blocks_max: usize,
    /// Script hashes remembered per sync for notifications; past this, the
    /// report says "everything may have changed" instead.
    pub touched_max: usize,
    /// A sync with at least this many blocks to go, and no fewer than the
    /// index already holds, is a bulk load (see
    /// [`Store::begin_bulk_load`]). Catching up a big index after some days
    /// offline is not: merging a few new rows into all the old ones would
    /// rewrite the whole index.
    pub bulk_blocks_min: u32,
}

impl Default for IndexerConfig {
    fn default() -> Self {
        IndexerConfig {
            fetch_blocks: 16,
            batch_rows_max: 250_000,
            batch_blocks_max: 1000,
            touched_max: 1_000_000,
            bulk_blocks_min: 100,
        }
    }
}

/// What one call to [`Indexer::sync`] changed.
#[derive(Debug, Default)]
pub struct SyncReport {
    pub connected: u32,
    pub disconnected: u32,
    /// Script hashes touched by connected blocks.
    pub touched: Vec<ScriptHash>,
    /// Set when blocks were disconnected or too many scripts were touched
    /// to list: every script's status may have changed.
    pub all_touched: bool,
    /// The source's best block height when the sync started.
    pub source_height: Height,
}

/// Figures of one chunk of blocks indexed (committed or not yet), for
/// progress reports and benchmarks.
#[derive(Clone, Debug)]
pub struct ChunkStats {
    pub height: Height,
    pub source_height: Height,
    pub blocks: u32,
    pub txs: u64,
    pub rows: u64,
    pub block_bytes: u64,
    /// Silent-payment records written: the eligible transactions (0 when
    /// the index keeps none).
    pub sp_records: u64,
    pub elapsed: Duration,
}

pub struct Indexer {
    pub(crate) store: Arc<Store>,
    pub(crate) source: Arc<dyn BlockFeed>,
    pub(crate) config: IndexerConfig,
    /// Set by a shutdown request: the sync commits what it has and returns.
    stop: Arc<AtomicBool>,
    /// A read-only replica's: [`Indexer::sync`] follows what the writer
    /// commits (`follow.rs`) instead of indexing.
    follows_writer: bool,
    /// A replica's: the node's height when its tip last moved.
    pub(crate) replica_source_height: Option<Height>,
}

impl Indexer {
    pub fn new(store: Arc<Store>, source: Arc<dyn BlockFeed>, config: IndexerConfig) -> Indexer {
        Indexer {
            store,
            source,
            config,
            stop: Arc::new(AtomicBool::new(false)),
            follows_writer: false,
            replica_source_height: None,
        }
    }

    /// The indexer of a read-only replica, whose `store` is
    /// [`Store::open_replica`]'s: each [`Indexer::sync`] takes up what the
    /// writer committed meanwhile, and `source` only names the scripts new
    /// blocks touched.
    pub fn replica(
        store: Arc<Store>,
        source: Arc<dyn BlockFeed>,
        config: IndexerConfig,
    ) -> Indexer {
        Indexer {
            follows_writer: true,
            ..Indexer::new(store, source, config)
        }
    }

    /// Makes the sync stop (after committing what it has) once `stop` is set,
    /// so a shutdown during a long initial sync is prompt and loses nothing.
    pub fn with_stop(mut self, stop: Arc<AtomicBool>) -> Indexer {
        self.stop = stop;
        self
    }

    /// Indexes up to the source's best block, calling `on_chunk` after each
    /// chunk of blocks.
    ///
    /// # Errors
    /// Source errors (see [`Error::is_transient`]), store errors, and blocks
    /// that fail validation. Everything committed before an error stays.
    pub fn sync(&mut self, on_chunk: &mut dyn FnMut(&ChunkStats)) -> Result<SyncReport, Error> {
        if self.follows_writer {
            return self.follow(true);
        }
        let (source_height, source_hash) = self.source.best_block()?;
        let mut report = SyncReport {
            source_height,
            ..SyncReport::default()
        };
        if self.store.tip().map(|(_, h)| h) == Some(source_hash) {
            return Ok(report);
        }
        report.disconnected = self.undo_stale_blocks()?;
        report.all_touched = report.disconnected > 0;
        let next = self.store.tip().map_or(0, |(h, _)| h.0 + 1);
        if next > source_height.0 {
            return Ok(report);
        }
        self.connect(next, source_height, &mut report, on_chunk)?;
        Ok(report)
    }

    /// Rolls back to the highest block the source still has on its best
    /// chain; returns the number of blocks undone.
    fn undo_stale_blocks(&mut self) -> Result<u32, Error> {
        let Some((tip, _)) = self.store.tip() else {
            return Ok(0);
        };
        let mut high = tip.0;
        loop {
            let low = high.saturating_sub(63);
            let ours = self.store.block_hashes(Height(low), Height(high));
            let theirs = self.source.block_hashes(Height(low), high - low + 1)?;
            // `theirs` is shorter when the source's chain is shorter than ours.
            let matching = ours.iter().zip(&theirs).rposition(|(a, b)| a == b);
            if let Some(i) = matching {
                let fork = Height(low + i as u32);
                if fork != tip {
                    tracing::warn!(
                        fork = fork.0,
                        undone = tip.0 - fork.0,
                        "chain reorganised: undoing blocks"
                    );
                    self.store.rollback_to(fork)?;
                }
                return Ok(tip.0 - fork.0);
            }
            if low == 0 {
                return Err(Error::BadBlock(
                    "the source's chain shares no block with the index, not even genesis".into(),
                ));
            }
            high = low - 1;
        }
    }

    /// Indexes blocks `from..=source_height`, as a bulk load up to
    /// `reorg_depth_max` below the source's tip when there are enough of
    /// them (see [`Indexer::bulk_load_end`]): the load is merged there, and
    /// the blocks a reorg may still undo follow it as usual.
    fn connect(
        &mut self,
        from: u32,
        source_height: Height,
        report: &mut SyncReport,
        on_chunk: &mut dyn FnMut(&ChunkStats),
    ) -> Result<(), Error> {
        let mut from = from;
        if let Some(bulk_end) = self.bulk_load_end(from, source_height)? {
            // A load that stops short of its end (a stop, a node error, a
            // reorg) goes on at the next sync, or after a restart.
            if bulk_end.0 >= from
                && !self.connect_range(from, bulk_end, source_height, report, on_chunk)?
            {
                return Ok(());
            }
            tracing::info!("bulk load done: merging it, partition by partition");
            if !self.store.end_bulk_load(&self.stop)? {
                return Ok(());
            }
            from = from.max(bulk_end.0 + 1);
        }
        if from <= source_height.0 {
            self.connect_range(from, source_height, source_height, report, on_chunk)?;
        }
        Ok(())
    }

    /// Indexes blocks `from..=to`: fetched one chunk ahead on one thread,
    /// turned into rows here (on all cores), committed on another thread.
    /// Blocks that stop linking up (the source reorganised while we
    /// fetched) end the sync without an error: everything before them is
    /// committed, and the next sync undoes and retries. Returns whether the
    /// tip reached `to`.
    fn connect_range(
        &mut self,
        from: u32,
        to: Height,
        source_height: Height,
        report: &mut SyncReport,
        on_chunk: &mut dyn FnMut(&ChunkStats),
    ) -> Result<bool, Error> {
        let (chunks, fetcher) = spawn_fetcher(
            Arc::clone(&self.source),
            from,
            to,
            self.config.fetch_blocks.max(1),
        );
        let mut committer = Committer::spawn(Arc::clone(&self.store), source_height);
        let indexed = self.index_chunks(
            chunks,
            &mut committer,
            from,
            source_height,
            report,
            on_chunk,
        );
        let (committed, written) = committer.finish();
        report.connected += committed;
        fetcher.join().expect("fetch thread does not panic");
        written?;
        report.settle_touched();
        let reached = indexed.is_ok()
            && !self.stop.load(Ordering::SeqCst)
            && self.store.tip().is_some_and(|(height, _)| height >= to);
        match indexed {
            Err(Error::Reorged) => Ok(false),
            Err(e) => Err(e),
            Ok(()) => Ok(reached),
        }
    }

    /// Where a bulk load of this sync ends (below the blocks within
    /// `reorg_depth_max` of the source's tip, which get undo records: runs
    /// cannot be rolled back), starting one
    /// when the blocks up to there make one; `None` when the sync is not
    /// one. A load under way (an earlier sync's, maybe an earlier
    /// process's) goes on.
    fn bulk_load_end(&self, from: u32, source_height: Height) -> Result<Option<Height>, Error> {
        let end = source_height
            .0
            .saturating_sub(self.store.config().reorg_depth_max.saturating_add(1));
        if self.store.in_bulk_load() {
            tracing::info!("bulk load: going on with the one under way");
            return Ok(Some(Height(end)));
        }
        let to_go = (end + 1).saturating_sub(from);
        if to_go == 0 || to_go < self.config.bulk_blocks_min.max(from) {
            return Ok(None);
        }
        if !self.store.begin_bulk_load()? {
            return Ok(None);
        }
        tracing::info!(
            blocks = to_go,
            "bulk load: rows sorted in runs until {end}, merged there"
        );
        Ok(Some(Height(end)))
    }

    /// Turns each fetched chunk into rows and hands them to `committer` in
    /// batches, until the chunks run out, one fails, a block is malformed
    /// or does not link, or a stop is requested. Pending blocks are left to
    /// the caller's final commit. Dropping `chunks` on return stops the
    /// fetcher.
    fn index_chunks(
        &self,
        chunks: mpsc::Receiver<Result<Vec<BlockWithPrevouts>, Error>>,
        committer: &mut Committer,
        from: u32,
        source_height: Height,
        report: &mut SyncReport,
        on_chunk: &mut dyn FnMut(&ChunkStats),
    ) -> Result<(), Error> {
        let mut stats = ChunkStats {
            height: Height(from),
            source_height,
            blocks: 0,
            txs: 0,
            rows: 0,
            block_bytes: 0,
            sp_records: 0,
            elapsed: Duration::ZERO,
        };
        let mut started = Instant::now();
        let mut links = Links {
            next_tx_num: self.store.tx_count(),
            prev_hash: self.store.tip().map(|(_, h)| h),
        };
        for chunk in chunks {
            let blocks = chunk?;
            let (firsts, linked) = links.number(&blocks);
            // The store's setting decides whether blocks carry records: an
            // index keeps them from genesis or not at all (its format tag).
            let built = build_rows(
                &blocks[..firsts.len()],
                &firsts,
                !report.all_touched,
                self.store.silent_payments(),
            );
            let mut result = linked;
            // The last block of this chunk taken, committed or pending.
            let mut last = None;
            for (rows, block) in built.into_iter().zip(&blocks) {
                match rows {
                    Ok(rows) => {
                        last = Some(block.height);
                        self.take_rows(rows, block.size, committer, &mut stats, report);
                        // A batch is committed as soon as it is full, even
                        // inside a chunk: scaled down (`lsm_scale`) or with
                        // big blocks, a chunk holds several batches, and one
                        // write bigger than a memtable would decide the
                        // size of its flush.
                        let near_tip = block.height.0 + 8 >= source_height.0;
                        if committer.is_full(&self.config) && !committer.commit(near_tip) {
                            return result;
                        }
                    }
                    Err(what) => {
                        result = Err(Error::BadBlock(format!(
                            "block {} ({}) from the source is malformed: {what}",
                            block.height,
                            block.block.block_hash()
                        )));
                        break;
                    }
                }
            }
            let at_tip = last.is_some_and(|h: Height| h.0 + 8 >= source_height.0);
            let stopping = self.stop.load(Ordering::Relaxed);
            if (result.is_err() || stopping || at_tip || committer.is_full(&self.config))
                && !committer.commit(at_tip || stopping)
            {
                // The writer failed: the caller collects its error.
                return result;
            }
            if let Some(last) = last {
                report_chunk(&mut stats, last, &mut started, on_chunk);
            }
            // Freed on the pool: a block's transactions are thousands of
            // small allocations, and freeing them here was a sixth of
            // this thread's time (perf, 1M chain from Core's files).
            rayon::spawn(move || drop(blocks));
            result?;
            if stopping {
                break;
            }
        }
        Ok(())
    }

    /// Adds one block's rows to the pending batch, its figures to `stats`
    /// and its scripts to the report's touched ones (until there are too
    /// many to name).
    fn take_rows(
        &self,
        rows: BlockRows,
        size: usize,
        committer: &mut Committer,
        stats: &mut ChunkStats,
        report: &mut SyncReport,
    ) {
        stats.txs += rows.indexed.txids.len() as u64;
        stats.block_bytes += size as u64;
        stats.blocks += 1;
        stats.rows += rows.indexed.rows.len() as u64;
        stats.sp_records += rows.sp_records as u64;
        if !report.all_touched {
            report.touched.extend(rows.touched);
            if report.touched.len() > self.config.touched_max {
                report.touched = Vec::new();
                report.all_touched = true;
            }
        }
        committer.push(rows.indexed);
    }
}

impl SyncReport {
    /// Sorts the touched script hashes, or drops them when every script
    /// counts as touched.
    pub(crate) fn settle_touched(&mut self) {
        if self.all_touched {
            self.touched.clear();
        } else {
            self.touched.sort_unstable();
            self.touched.dedup();
        }
    }
}

/// Fetches blocks `from..=source_height` in chunks of `chunk` blocks on a
/// thread of its own, at most two chunks ahead of the receiver. It stops
/// after an error, or after a chunk shorter than asked (the source's chain
/// got shorter meanwhile).
fn spawn_fetcher(
    source: Arc<dyn BlockFeed>,
    from: u32,
    source_height: Height,
    chunk: u32,
) -> (
    mpsc::Receiver<Result<Vec<BlockWithPrevouts>, Error>>,
    JoinHandle<()>,
) {
    let (tx, rx) = mpsc::sync_channel(2);
    let fetcher = std::thread::Builder::new()
        .name("fetch".into())
        .spawn(move || {
            let mut start = from;
            while start <= source_height.0 {
                let count = chunk.min(source_height.0 - start + 1);
                let result = fetch_chunk(source.as_ref(), Height(start), count);
                let stop = match &result {
                    Ok(blocks) => blocks.len() < count as usize,
                    Err(_) => true,
                };
                if tx.send(result).is_err() || stop {
                    return;
                }
                start += count;
            }
        })
        .expect("spawning a thread");
    (rx, fetcher)
}

/// The blocks at `start..start+count` on the source's best chain (fewer
/// when it is shorter).
fn fetch_chunk(
    source: &dyn BlockFeed,
    start: Height,
    count: u32,
) -> Result<Vec<BlockWithPrevouts>, Error> {
    let hashes = source.block_hashes(start, count)?;
    let wanted: Vec<_> = hashes
        .iter()
        .enumerate()
        .map(|(i, h)| (Height(start.0 + i as u32), *h))
        .collect();
    Ok(source.blocks(&wanted)?)
}

/// Where the next block must attach: the hash it must build on and the
/// tx_num of its first transaction.
struct Links {
    next_tx_num: u64,
    prev_hash: Option<BlockHash>,
}

impl Links {
    /// Numbers the first transaction of each block that builds on the one
    /// before, in order; stops at the first that does not, with
    /// [`Error::Reorged`] (the source reorganised while we fetched).
    fn number(&mut self, blocks: &[BlockWithPrevouts]) -> (Vec<TxNum>, Result<(), Error>) {
        let mut firsts = Vec::with_capacity(blocks.len());
        for block in blocks {
            if self
                .prev_hash
                .is_some_and(|prev| block.block.header.prev_blockhash != prev)
            {
                tracing::info!(height = block.height.0, "source chain changed during sync");
                return (firsts, Err(Error::Reorged));
            }
            firsts.push(TxNum(self.next_tx_num));
            self.next_tx_num += block.block.txdata.len() as u64;
            self.prev_hash = Some(block.block.block_hash());
        }
        (firsts, Ok(()))
    }
}

/// The rows of each block, built on all cores.
fn build_rows(
    blocks: &[BlockWithPrevouts],
    firsts: &[TxNum],
    collect_touched: bool,
    sp: bool,
) -> Vec<Result<BlockRows, String>> {
    blocks
        .par_iter()
        .zip(firsts.par_iter())
        .map(|(block, first)| block_rows(block, *first, collect_touched, sp))
        .collect()
}

/// Reports one chunk's figures and starts the next chunk's. Progress is
/// reported per chunk, not per commit, so that rates over parts of the
/// chain mean something even when one commit covers them all; a commit's
/// cost lands in the chunk that made it.
fn report_chunk(
    stats: &mut ChunkStats,
    last: Height,
    started: &mut Instant,
    on_chunk: &mut dyn FnMut(&ChunkStats),
) {
    stats.height = last;
    stats.elapsed = started.elapsed();
    on_chunk(stats);
    stats.blocks = 0;
    stats.txs = 0;
    stats.rows = 0;
    stats.block_bytes = 0;
    stats.sp_records = 0;
    *started = Instant::now();
}

/// The blocks indexed but not yet committed, and the thread that commits
/// them: commits run there so the next batch's rows are built while
/// RocksDB takes the last one; at most one batch waits between.
struct Committer {
    store: Arc<Store>,
    /// Decides which blocks get undo records ([`Store::prepare`]).
    source_height: Height,
    pending: Vec<IndexedBlock>,
    pending_rows: usize,
    to_writer: mpsc::SyncSender<(osprey_store::Result<PreparedBatch>, Height, bool)>,
    writer: JoinHandle<(u32, Result<(), Error>)>,
}

impl Committer {
    fn spawn(store: Arc<Store>, source_height: Height) -> Committer {
        let (to_writer, batches) =
            mpsc::sync_channel::<(osprey_store::Result<PreparedBatch>, Height, bool)>(1);
        let writer = {
            let store = Arc::clone(&store);
            std::thread::Builder::new()
                .name("commit".into())
                .spawn(move || -> (u32, Result<(), Error>) {
                    let mut committed = 0;
                    for (batch, last, sync) in batches {
                        let _span = tracing::info_span!("index", to = last.0).entered();
                        let blocks = match &batch {
                            Ok(batch) => batch.len(),
                            Err(_) => 0,
                        };
                        if let Err(e) = batch.and_then(|batch| store.commit(batch, sync)) {
                            return (committed, Err(e.into()));
                        }
                        committed += blocks;
                    }
                    (committed, Ok(()))
                })
                .expect("spawning a thread")
        };
        Committer {
            store,
            source_height,
            pending: Vec::new(),
            pending_rows: 0,
            to_writer,
            writer,
        }
    }

    fn push(&mut self, block: IndexedBlock) {
        self.pending_rows += block.rows.len();
        self.pending.push(block);
    }

    fn last_height(&self) -> Option<Height> {
        self.pending.last().map(|b| b.height)
    }

    /// Whether the pending blocks make a batch (see
    /// [`IndexerConfig::batch_rows_max`]).
    fn is_full(&self, config: &IndexerConfig) -> bool {
        self.pending_rows >= config.batch_rows_max || self.pending.len() >= config.batch_blocks_max
    }

    /// Hands the pending blocks to the writer (`sync`: through the WAL, see
    /// [`Store::commit`]); false when the writer has failed.
    fn commit(&mut self, sync: bool) -> bool {
        self.pending_rows = 0;
        let Some(last) = self.last_height() else {
            return true;
        };
        let prepared = self.store.prepare(&self.pending, self.source_height);
        self.pending.clear();
        self.to_writer.send((prepared, last, sync)).is_ok()
    }

    /// Commits what is pending and waits for the writer: the blocks it
    /// committed, and its error.
    fn finish(mut self) -> (u32, Result<(), Error>) {
        self.commit(true);
        drop(self.to_writer);
        self.writer.join().expect("commit thread does not panic")
    }
}
