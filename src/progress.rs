//! Sync progress for people and for Prometheus: during the initial sync, a
//! bar with rate and ETA when stderr is a terminal (`indicatif`), else a
//! log line every few seconds; one summary line when it is done; and the
//! sync metrics (tips, blocks and transactions indexed) all along.
//!
//! Log lines written while the bar is drawn go around it (see
//! [`stderr_around_bar`]), so that neither tears the other.

use indicatif::{ProgressBar, ProgressStyle};
use osprey_core::Height;
use osprey_indexer::ChunkStats;
use osprey_metrics::Metrics;
use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How far back the rate behind the ETA looks. Not the whole sync: blocks
/// grow along the chain, so the rate over the first, nearly empty, blocks
/// says little about the next ones.
const RATE_WINDOW: Duration = Duration::from_secs(60);
/// Time between two progress log lines when no bar is drawn.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// The bar being drawn, if any, for the log writer.
static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Stderr for the log: a line is written with the bar (if one is drawn)
/// cleared first and redrawn after.
pub struct StderrAroundBar;

/// The log's writer (`tracing_subscriber`'s `with_writer`).
pub fn stderr_around_bar() -> StderrAroundBar {
    StderrAroundBar
}

impl Write for StderrAroundBar {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let bar = BAR.lock().ok().and_then(|bar| bar.clone());
        match bar {
            Some(bar) => bar.suspend(|| std::io::stderr().write_all(buf))?,
            None => std::io::stderr().write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Blocks done at recent instants, for the rate behind the ETA.
#[derive(Debug, Default)]
struct RateWindow {
    /// (seconds since the sync started, blocks done by then), oldest first.
    samples: VecDeque<(f64, u64)>,
}

impl RateWindow {
    /// Records `blocks` done at `at_secs`; forgets samples older than the
    /// window, keeping two at least.
    fn push(&mut self, at_secs: f64, blocks: u64) {
        self.samples.push_back((at_secs, blocks));
        while self.samples.len() > 2
            && self
                .samples
                .get(1)
                .is_some_and(|(t, _)| at_secs - t >= RATE_WINDOW.as_secs_f64())
        {
            self.samples.pop_front();
        }
    }

    /// Blocks per second over the window; `None` before any progress.
    fn blocks_per_sec(&self) -> Option<f64> {
        let (t0, b0) = *self.samples.front()?;
        let (t1, b1) = *self.samples.back()?;
        let secs = t1 - t0;
        (secs > 0.0 && b1 > b0).then(|| (b1 - b0) as f64 / secs)
    }
}

/// Time left for `remaining` blocks at `blocks_per_sec`; `None` when the
/// rate is unknown.
fn eta(remaining: u64, blocks_per_sec: Option<f64>) -> Option<Duration> {
    if remaining == 0 {
        return Some(Duration::ZERO);
    }
    let rate = blocks_per_sec.filter(|r| *r > 0.0)?;
    Some(Duration::from_secs_f64(remaining as f64 / rate))
}

/// "1h02m", "3m05s", "42s", or "?" for an unknown ETA.
fn format_eta(eta: Option<Duration>) -> String {
    let Some(eta) = eta else {
        return "?".into();
    };
    let secs = eta.as_secs();
    match (secs / 3600, secs / 60 % 60, secs % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

/// Sync progress: counts, the bar or log lines, the metrics.
pub struct Progress {
    started: Instant,
    last_log: Instant,
    blocks: u64,
    txs: u64,
    bytes: u64,
    rate: RateWindow,
    /// One JSON line per chunk on stdout (`osprey index --progress-json`).
    json: bool,
    /// Whether a bar may be drawn (stderr is a terminal).
    terminal: bool,
    bar: Option<ProgressBar>,
    /// Set once the initial sync is done: later blocks are logged only.
    finished: bool,
    metrics: Arc<Metrics>,
}

impl Progress {
    pub fn new(json: bool, metrics: Arc<Metrics>) -> Progress {
        let now = Instant::now();
        let mut rate = RateWindow::default();
        rate.push(0.0, 0);
        metrics.index.initial_sync.set(1);
        Progress {
            started: now,
            last_log: now.checked_sub(LOG_EVERY).unwrap_or(now),
            blocks: 0,
            txs: 0,
            bytes: 0,
            rate,
            json,
            terminal: std::io::stderr().is_terminal(),
            bar: None,
            finished: false,
            metrics,
        }
    }

    pub fn on_chunk(&mut self, stats: &ChunkStats) {
        self.blocks += u64::from(stats.blocks);
        self.txs += stats.txs;
        self.bytes += stats.block_bytes;
        self.metrics
            .index
            .blocks_indexed
            .inc_by(u64::from(stats.blocks));
        self.metrics.index.txs_indexed.inc_by(stats.txs);
        self.metrics
            .index
            .set_tips(stats.height.0, stats.source_height.0);
        let elapsed = self.started.elapsed().as_secs_f64().max(1e-6);
        self.rate.push(elapsed, self.blocks);
        if self.json {
            let line = serde_json::json!({
                "height": stats.height.0,
                "source_height": stats.source_height.0,
                "blocks": stats.blocks,
                "txs": stats.txs,
                "rows": stats.rows,
                "block_bytes": stats.block_bytes,
                "sp_records": stats.sp_records,
                "batch_secs": stats.elapsed.as_secs_f64(),
                "elapsed_secs": elapsed,
            });
            // The machine-readable progress stream of `osprey index`.
            #[allow(clippy::print_stdout)]
            {
                println!("{line}");
            }
        }
        let remaining = u64::from(stats.source_height.0.saturating_sub(stats.height.0));
        let eta = format_eta(eta(remaining, self.rate.blocks_per_sec()));
        let rates = format!(
            "{:.0} tx/s, {:.1} MB/s",
            self.txs as f64 / elapsed,
            self.bytes as f64 / elapsed / 1e6
        );
        if self.terminal && !self.finished {
            let bar = self.bar.get_or_insert_with(|| {
                let bar = ProgressBar::new(u64::from(stats.source_height.0));
                bar.set_style(
                    ProgressStyle::with_template(
                        "indexing [{elapsed_precise}] {wide_bar} {pos}/{len} blocks, {msg}",
                    )
                    .expect("a valid template"),
                );
                if let Ok(mut shown) = BAR.lock() {
                    *shown = Some(bar.clone());
                }
                bar
            });
            bar.set_length(u64::from(stats.source_height.0));
            bar.set_position(u64::from(stats.height.0));
            bar.set_message(format!("{rates}, ETA {eta}"));
            return;
        }
        if self.last_log.elapsed() < LOG_EVERY && stats.height != stats.source_height {
            return;
        }
        self.last_log = Instant::now();
        tracing::info!(
            "indexed height {} of {} ({:.1}%), {rates}, ETA {eta}",
            stats.height,
            stats.source_height,
            100.0 * f64::from(stats.height.0) / f64::from(stats.source_height.0.max(1)),
        );
    }

    /// Records the node's tip as the last update saw it (the index's is
    /// read from the store when metrics are scraped).
    pub fn on_update(&self, node_height: Option<Height>) {
        if let Some(height) = node_height {
            self.metrics.index.node_height.set(i64::from(height.0));
        }
    }

    /// Ends the initial sync: clears the bar and logs one summary line
    /// (when blocks were indexed), with the index's size on disk.
    pub fn finish(&mut self, index_bytes: u64) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.metrics.index.initial_sync.set(0);
        if let Some(bar) = self.bar.take() {
            if let Ok(mut shown) = BAR.lock() {
                *shown = None;
            }
            bar.finish_and_clear();
        }
        if self.blocks == 0 {
            return;
        }
        let secs = self.started.elapsed().as_secs_f64().max(1e-6);
        tracing::info!(
            "initial sync done: {} blocks, {} transactions in {:.1} s ({:.0} blocks/s, {:.0} tx/s); index {:.1} MB",
            self.blocks,
            self.txs,
            secs,
            self.blocks as f64 / secs,
            self.txs as f64 / secs,
            index_bytes as f64 / 1e6,
        );
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = self.bar.take() {
            if let Ok(mut shown) = BAR.lock() {
                *shown = None;
            }
            bar.abandon();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_is_what_is_left_at_the_recent_rate() {
        let mut rate = RateWindow::default();
        assert_eq!(rate.blocks_per_sec(), None);
        rate.push(0.0, 0);
        assert_eq!(rate.blocks_per_sec(), None, "one sample, no rate");
        rate.push(10.0, 1000);
        assert_eq!(rate.blocks_per_sec(), Some(100.0));
        assert_eq!(
            eta(500, rate.blocks_per_sec()),
            Some(Duration::from_secs(5))
        );
        // Past the window, the early (fast) blocks no longer count: 100
        // blocks in the last 60 s is 100/60 blocks/s.
        rate.push(70.0, 1100);
        rate.push(80.0, 1100);
        assert_eq!(rate.samples.front(), Some(&(10.0, 1000)));
        rate.push(130.0, 1200);
        assert_eq!(rate.samples.front(), Some(&(70.0, 1100)));
        let per_sec = rate.blocks_per_sec().unwrap();
        assert!((per_sec - 100.0 / 60.0).abs() < 1e-9, "{per_sec}");
        let left = eta(100, rate.blocks_per_sec()).unwrap();
        assert!((left.as_secs_f64() - 60.0).abs() < 1e-6, "{left:?}");
    }

    #[test]
    fn eta_is_zero_when_done_and_unknown_without_progress() {
        assert_eq!(eta(0, None), Some(Duration::ZERO));
        assert_eq!(eta(10, None), None);
        assert_eq!(eta(10, Some(0.0)), None);
        let mut stalled = RateWindow::default();
        stalled.push(0.0, 50);
        stalled.push(30.0, 50);
        assert_eq!(stalled.blocks_per_sec(), None);
    }

    #[test]
    fn etas_read_as_hours_minutes_or_seconds() {
        assert_eq!(format_eta(None), "?");
        assert_eq!(format_eta(Some(Duration::from_secs(42))), "42s");
        assert_eq!(format_eta(Some(Duration::from_secs(185))), "3m05s");
        assert_eq!(format_eta(Some(Duration::from_secs(3720))), "1h02m");
        assert_eq!(format_eta(Some(Duration::from_secs(30 * 3600))), "30h00m");
    }
}
