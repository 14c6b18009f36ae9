//! Brings the index to the source's best block: undoes blocks the source
//! no longer has (reorgs of any depth the undo data covers), then indexes
//! new blocks in batches. Fetching runs one chunk ahead of row building,
//! and rows are built on all cores.

use crate::rows::block_rows;
use crate::Error;
use osprey_chain::{BlockWithPrevouts, ChainSource};
use osprey_core::{Height, ScriptHash, TxNum};
use osprey_store::{IndexedBlock, PreparedBatch, Store};
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
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
    pub elapsed: Duration,
}

pub struct Indexer {
    store: Arc<Store>,
    source: Arc<dyn ChainSource>,
    config: IndexerConfig,
    /// Set by a shutdown request: the sync commits what it has and returns.
    stop: Arc<AtomicBool>,
}

impl Indexer {
    pub fn new(store: Arc<Store>, source: Arc<dyn ChainSource>, config: IndexerConfig) -> Indexer {
        Indexer {
            store,
            source,
            config,
            stop: Arc::new(AtomicBool::new(false)),
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

    fn connect(
        &mut self,
        from: u32,
        source_height: Height,
        report: &mut SyncReport,
        on_chunk: &mut dyn FnMut(&ChunkStats),
    ) -> Result<(), Error> {
        let to_go = source_height.0 - from + 1;
        let bulk = to_go >= self.config.bulk_blocks_min.max(from);
        if bulk {
            tracing::info!(
                blocks = to_go,
                "bulk load: compaction waits for the end of the sync"
            );
            self.store.begin_bulk_load()?;
        }
        let chunk = self.config.fetch_blocks.max(1);
        let source = Arc::clone(&self.source);
        // One chunk is fetched while the previous one is indexed.
        let (tx, rx) = mpsc::sync_channel::<Result<Vec<BlockWithPrevouts>, Error>>(2);
        let fetcher = std::thread::Builder::new()
            .name("fetch".into())
            .spawn(move || {
                let mut start = from;
                while start <= source_height.0 {
                    let count = chunk.min(source_height.0 - start + 1);
                    let result = source
                        .block_hashes(Height(start), count)
                        .map_err(Error::from)
                        .and_then(|hashes| {
                            let wanted: Vec<_> = hashes
                                .iter()
                                .enumerate()
                                .map(|(i, h)| (Height(start + i as u32), *h))
                                .collect();
                            source.blocks(&wanted).map_err(Error::from)
                        });
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

        // Commits run on their own thread, so the next batch's rows are built
        // while RocksDB takes the last one; at most one batch waits between.
        let (commit_tx, commit_rx) = mpsc::sync_channel::<(PreparedBatch, Height, bool)>(1);
        let writer = {
            let store = Arc::clone(&self.store);
            std::thread::Builder::new()
                .name("commit".into())
                .spawn(move || -> (u32, Result<(), Error>) {
                    let mut committed = 0;
                    for (batch, last, sync) in commit_rx {
                        let blocks = batch.len();
                        let _span = tracing::info_span!("index", to = last.0).entered();
                        if let Err(e) = store.commit(batch, sync) {
                            return (committed, Err(e.into()));
                        }
                        committed += blocks;
                    }
                    (committed, Ok(()))
                })
                .expect("spawning a thread")
        };
        let store = Arc::clone(&self.store);
        let commit = |batch: &mut Vec<IndexedBlock>, sync: bool| -> bool {
            let Some(last) = batch.last().map(|b| b.height) else {
                return true;
            };
            let prepared = store.prepare(batch, source_height);
            batch.clear();
            commit_tx.send((prepared, last, sync)).is_ok()
        };

        let mut batch: Vec<IndexedBlock> = Vec::new();
        let mut stats = ChunkStats {
            height: Height(from),
            source_height,
            blocks: 0,
            txs: 0,
            rows: 0,
            block_bytes: 0,
            elapsed: Duration::ZERO,
        };
        let mut batch_rows = 0usize;
        let mut started = Instant::now();
        let mut next_tx_num = self.store.tx_count();
        let mut prev_hash = self.store.tip().map(|(_, h)| h);
        let mut result = Ok(());
        for chunk in rx {
            let blocks = match chunk {
                Ok(b) => b,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            // Links and first tx_nums sequentially; checks and rows in parallel.
            let mut firsts = Vec::with_capacity(blocks.len());
            for block in &blocks {
                if let Some(prev) = prev_hash {
                    if block.block.header.prev_blockhash != prev {
                        // The source reorganised while we fetched: stop here,
                        // the next sync undoes and retries.
                        tracing::info!(height = block.height.0, "source chain changed during sync");
                        result = Err(Error::Reorged);
                        break;
                    }
                }
                firsts.push(TxNum(next_tx_num));
                next_tx_num += block.block.txdata.len() as u64;
                prev_hash = Some(block.block.block_hash());
            }
            let collect_touched = !report.all_touched;
            let built: Vec<_> = blocks[..firsts.len()]
                .par_iter()
                .zip(firsts.par_iter())
                .map(|(block, first)| block_rows(block, *first, collect_touched))
                .collect();
            for (rows, block) in built.into_iter().zip(&blocks) {
                let rows = match rows {
                    Ok(rows) => rows,
                    Err(what) => {
                        result = Err(Error::BadBlock(format!(
                            "block {} ({}) from the source is malformed: {what}",
                            block.height,
                            block.block.block_hash()
                        )));
                        break;
                    }
                };
                let size = block.size;
                stats.txs += rows.indexed.txids.len() as u64;
                stats.block_bytes += size as u64;
                stats.blocks += 1;
                batch_rows += rows.indexed.rows.len();
                stats.rows += rows.indexed.rows.len() as u64;
                if !report.all_touched {
                    report.touched.extend(rows.touched);
                    if report.touched.len() > self.config.touched_max {
                        report.touched = Vec::new();
                        report.all_touched = true;
                    }
                }
                batch.push(rows.indexed);
            }
            let last = batch.last().map(|b| b.height);
            let at_tip = last.is_some_and(|h| h.0 + 8 >= source_height.0);
            let stopping = self.stop.load(Ordering::Relaxed);
            if result.is_err()
                || stopping
                || batch_rows >= self.config.batch_rows_max
                || batch.len() >= self.config.batch_blocks_max
                || at_tip
            {
                batch_rows = 0;
                if !commit(&mut batch, at_tip || stopping) {
                    break; // The writer failed: its error is collected below.
                }
            }
            // Progress is reported per chunk, not per commit, so that rates
            // over parts of the chain mean something even when one commit
            // covers them all; a commit's cost lands in the chunk that made it.
            if let Some(last) = last {
                stats.height = last;
                stats.elapsed = started.elapsed();
                on_chunk(&stats);
                stats.blocks = 0;
                stats.txs = 0;
                stats.rows = 0;
                stats.block_bytes = 0;
                started = Instant::now();
            }
            if result.is_err() || stopping {
                break;
            }
        }
        commit(&mut batch, true);
        drop(commit_tx);
        let (committed, written) = writer.join().expect("commit thread does not panic");
        report.connected += committed;
        fetcher.join().expect("fetch thread does not panic");
        // Compaction resumes whatever happened: a failed sync is retried
        // from where it stopped, maybe as a catch-up that is no bulk load.
        let bulk_ended = if bulk {
            self.store.end_bulk_load()
        } else {
            Ok(())
        };
        written?;
        bulk_ended?;
        if report.all_touched {
            report.touched.clear();
        } else {
            report.touched.sort_unstable();
            report.touched.dedup();
        }
        match result {
            Err(Error::Reorged) => Ok(()),
            other => other,
        }
    }
}
