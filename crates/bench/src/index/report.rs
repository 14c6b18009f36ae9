//! The outputs of `osprey bench index`: one JSON record per run (every raw
//! figure, the indexer's batches included, so any number in the report can
//! be recomputed) and a Markdown report with a column per run and the
//! median. Renders and writes; measures nothing.

use super::procfs::{DiskUsage, Io, SpFiles};
use super::progress::{Batch, LsmShape, Tenth, TENTHS};
use crate::machine::Machine;
use crate::report::{escape_cell, fmt_significant};
use crate::stats::median;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Below this last/first-tenth ratio the report says ingest is not flat. A
/// tolerance rather than 1.0: on a shared machine two tenths of one run
/// differ by a few percent with nothing wrong.
pub const FLAT_RATIO_MIN: f64 = 0.9;

/// Under this many batches the report warns that tenths share batches.
const FINE_BATCHES_MIN: usize = 2 * TENTHS;

fn one() -> u32 {
    1
}

/// The indexer measured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Indexer {
    pub path: String,
    /// Its `--version` line, e.g. "osprey 0.1.0".
    pub version: String,
}

/// The chain indexed, from its manifest.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainRef {
    pub dir: String,
    pub preset: String,
    pub seed: u64,
    pub tip_height: u32,
    /// Transactions, coinbases and genesis included.
    pub tx_count: u64,
}

/// One index build: the content of `index.runN.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IndexRunRecord {
    /// `osprey-bench <version>`.
    pub bench: String,
    /// Start of the bench (UTC).
    pub date: String,
    pub machine: Machine,
    pub indexer: Indexer,
    pub chain: ChainRef,
    /// The command line of the indexer, for rerunning it by hand.
    pub command: Vec<String>,
    /// 1..=N.
    pub run: usize,
    /// False when the indexer failed, or did not reach the manifest's tip.
    pub ok: bool,
    pub error: Option<String>,
    /// Exit status as the OS reported it.
    pub exit: String,
    /// Spawn to exit: start-up, sync, final flush and close.
    pub wall_seconds: f64,
    /// The indexer's own clock at its last commit (`elapsed_secs`): the sync
    /// without start-up and final flush.
    pub sync_seconds: Option<f64>,
    pub final_height: Option<u32>,
    pub blocks: u64,
    pub txs: u64,
    pub rows: u64,
    pub block_bytes: u64,
    /// Over the wall time.
    pub txs_per_second: f64,
    pub block_mb_per_second: f64,
    pub tenths: Vec<Tenth>,
    /// Last tenth's transaction rate over the first's: 1.0 is flat ingest.
    pub last_over_first_txs: Option<f64>,
    /// The same for block bytes per second.
    pub last_over_first_bytes: Option<f64>,
    /// Last tenth's transaction rate over the median tenth's.
    #[serde(default)]
    pub last_over_median_txs: Option<f64>,
    /// Whether the indexer kept silent-payment records (`--silent-payments`).
    #[serde(default)]
    pub silent_payments: bool,
    /// Records the indexer wrote, by its batches: the eligible transactions.
    #[serde(default)]
    pub sp_records: u64,
    /// Its `sptweaks.dat` and `spoffsets.dat`; `None` without silent payments.
    #[serde(default)]
    pub sp_files: Option<SpFiles>,
    /// The database directory after the exit; `None` if it could not be read.
    pub db: Option<DiskUsage>,
    /// The largest the database got while the indexer ran (sampled), and
    /// that over its size after the exit.
    #[serde(default)]
    pub db_peak_bytes: Option<u64>,
    #[serde(default)]
    pub db_peak_over_final: Option<f64>,
    /// `--lsm-scale` of the run (1: the real sizes).
    #[serde(default = "one")]
    pub lsm_scale: u32,
    /// The LSM's shape the indexer reported, once synced and once compacted.
    #[serde(default)]
    pub lsm: Vec<LsmShape>,
    /// Where the database was kept (`--keep-db`); it is deleted otherwise.
    pub db_dir: Option<PathBuf>,
    /// Highest VmHWM sampled, in bytes.
    pub peak_rss_bytes: Option<u64>,
    pub cpu_user_seconds: Option<f64>,
    pub cpu_system_seconds: Option<f64>,
    /// `getconf CLK_TCK`, the unit of the CPU times in /proc/PID/stat.
    pub clock_ticks: u64,
    /// `/proc/PID/io` at the exit (or at the last sample, see `final_sample`).
    pub io: Option<Io>,
    /// `io.write_bytes` per byte of database on disk.
    pub write_amplification: Option<f64>,
    pub samples: u64,
    /// True when CPU and I/O were read from the exited process, so they
    /// include its last moments.
    pub final_sample: bool,
    /// The last lines the indexer logged (warnings and errors only).
    pub stderr_tail: Vec<String>,
    /// Every progress line of the indexer, in order.
    pub batches: Vec<Batch>,
}

impl IndexRunRecord {
    /// CPU seconds, user plus system.
    pub fn cpu_seconds(&self) -> Option<f64> {
        Some(self.cpu_user_seconds? + self.cpu_system_seconds?)
    }

    /// CPU microseconds per transaction of the chain: an index with silent
    /// payments on costs this much more than one without, over its
    /// eligible transactions.
    pub fn cpu_us_per_tx(&self) -> Option<f64> {
        Some(self.cpu_seconds()? * 1e6 / self.txs as f64).filter(|v| v.is_finite())
    }

    /// The LSM's shape the indexer reported at `when` ("synced", "compacted").
    pub fn lsm_when(&self, when: &str) -> Option<&LsmShape> {
        self.lsm.iter().find(|shape| shape.when == when)
    }

    /// Bytes of the silent-payment files per eligible transaction.
    pub fn sp_bytes_per_record(&self) -> Option<f64> {
        let files = self.sp_files?;
        (self.sp_records > 0).then(|| files.total_bytes() as f64 / self.sp_records as f64)
    }

    /// Returns the file name of this record: `index.run<N>.json`.
    pub fn file_name(&self) -> String {
        format!("index.run{}.json", self.run)
    }

    /// Writes the record as pretty JSON into `dir` and returns its path.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn write(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        let path = dir.join(self.file_name());
        let text = serde_json::to_string_pretty(self).context("serialising an index run record")?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}

/// A whole `osprey bench index`: what `index.md` and `index.svg` are drawn from.
#[derive(Clone, Debug)]
pub struct IndexReport {
    pub date: String,
    pub machine: Machine,
    pub indexer: Indexer,
    pub chain: ChainRef,
    /// Where the indexer read the blocks, for the reader.
    pub source: String,
    /// Runs asked for; fewer are in `runs` when one failed.
    pub runs_planned: usize,
    pub runs: Vec<IndexRunRecord>,
}

const MB: f64 = 1e6;

impl IndexReport {
    fn ok_runs(&self) -> impl Iterator<Item = &IndexRunRecord> {
        self.runs.iter().filter(|r| r.ok)
    }

    /// Median over the successful runs of `value`.
    fn median_of(&self, value: impl Fn(&IndexRunRecord) -> Option<f64>) -> Option<f64> {
        let values: Vec<f64> = self.ok_runs().filter_map(value).collect();
        median(&values)
    }

    /// Median over the successful runs of the last/first-tenth ratio of
    /// transactions per second: the flat-ingest figure.
    pub fn flat_ratio(&self) -> Option<f64> {
        self.median_of(|r| r.last_over_first_txs)
    }

    /// Renders the Markdown report.
    pub fn to_markdown(&self) -> String {
        let mut md = String::new();
        let c = &self.chain;
        let first = self.ok_runs().next();
        let block_bytes = first.map_or(0, |r| r.block_bytes);
        // Writing into a String cannot fail.
        let _ = writeln!(md, "# Index build benchmark\n");
        let _ = writeln!(md, "- Date: {}", self.date);
        let _ = writeln!(md, "- Machine: {}", self.machine.describe());
        let _ = writeln!(
            md,
            "- Indexer: {} (`{}`)",
            self.indexer.version,
            escape_cell(&self.indexer.path)
        );
        let _ = writeln!(
            md,
            "- Chain: chaingen preset `{}`, seed {}, tip height {}, {} transactions, {} MB of blocks",
            c.preset,
            c.seed,
            c.tip_height,
            c.tx_count,
            fmt_significant(block_bytes as f64 / MB, 3)
        );
        let scale = self.runs.first().map_or(1, |r| r.lsm_scale);
        let _ = writeln!(
            md,
            "- Settings: {} runs, each from an empty database, {}{}{}",
            self.runs_planned,
            self.source,
            if self.runs.iter().any(|r| r.silent_payments) {
                ", silent payments on (`--silent-payments`)"
            } else {
                ""
            },
            if scale == 1 {
                String::new()
            } else {
                format!(", LSM scaled down {scale}x (`--lsm-scale {scale}`: the LSM of a chain {scale}x this one)")
            }
        );
        let _ = writeln!(md, "- Tool: osprey-bench {}\n", env!("CARGO_PKG_VERSION"));
        let _ = writeln!(
            md,
            "`osprey index` from an empty database to the chain's tip. Wall time is from \
             starting the indexer to its exit (final flush included); rates are over the wall \
             time; CPU, peak RSS (VmHWM, sampled at every commit and every 100 ms) and disk writes (`write_bytes` \
             of /proc/PID/io) are the indexer's own. MB = 10^6 bytes.\n"
        );
        self.summary_table(&mut md);
        self.tenths_table(&mut md);
        self.notes(&mut md);
        md
    }

    fn summary_table(&self, md: &mut String) {
        let _ = writeln!(md, "## Summary\n");
        let mut header = "| |".to_owned();
        let mut rule = "|---|".to_owned();
        for run in 1..=self.runs_planned {
            let _ = write!(header, " Run {run} |");
            rule.push_str("---:|");
        }
        header.push_str(" Median |");
        rule.push_str("---:|");
        let _ = writeln!(md, "{header}\n{rule}");

        type Row = (&'static str, fn(&IndexRunRecord) -> Option<f64>, Fmt);
        let mut rows: Vec<Row> = vec![
            ("Wall time, s", |r| Some(r.wall_seconds), Fmt::Sig3),
            ("Of which syncing, s", |r| r.sync_seconds, Fmt::Sig3),
            ("Transactions/s", |r| Some(r.txs_per_second), Fmt::Whole),
            (
                "Block data, MB/s",
                |r| Some(r.block_mb_per_second),
                Fmt::Sig3,
            ),
            (
                "Last/first tenth, tx/s",
                |r| r.last_over_first_txs,
                Fmt::Ratio,
            ),
            (
                "Last/first tenth, MB/s",
                |r| r.last_over_first_bytes,
                Fmt::Ratio,
            ),
            (
                "Last/median tenth, tx/s",
                |r| r.last_over_median_txs,
                Fmt::Ratio,
            ),
            (
                "Database on disk, MB",
                |r| r.db.map(|d| d.allocated_bytes as f64 / MB),
                Fmt::Sig3,
            ),
            (
                "Peak RSS, MB",
                |r| r.peak_rss_bytes.map(|b| b as f64 / MB),
                Fmt::Sig3,
            ),
            (
                "CPU, s (user + system)",
                IndexRunRecord::cpu_seconds,
                Fmt::Sig3,
            ),
            (
                "CPU per transaction, µs",
                IndexRunRecord::cpu_us_per_tx,
                Fmt::Sig3,
            ),
            (
                "CPU use, cores",
                |r| Some(r.cpu_seconds()? / r.wall_seconds).filter(|v| v.is_finite()),
                Fmt::Ratio,
            ),
            (
                "Written to disk, MB",
                |r| r.io.map(|io| io.write_bytes as f64 / MB),
                Fmt::Sig3,
            ),
            (
                "Written per byte of index",
                |r| r.write_amplification,
                Fmt::Ratio,
            ),
            (
                "Database's peak while building / final",
                |r| r.db_peak_over_final,
                Fmt::Ratio,
            ),
            (
                "History levels when synced",
                |r| Some(r.lsm_when("synced")?.levels("history") as f64),
                Fmt::Whole,
            ),
            (
                "History level-0 files when synced",
                |r| {
                    Some(
                        *r.lsm_when("synced")?
                            .column_families
                            .get("history")?
                            .files
                            .first()? as f64,
                    )
                },
                Fmt::Whole,
            ),
            (
                "Write stalls, s",
                |r| Some(r.lsm.last()?.stall_micros as f64 / 1e6),
                Fmt::Sig3,
            ),
            (
                "Bulk load's merge, s (not in the tenths)",
                |r| Some(r.lsm_when("synced")?.bulk_merge_micros? as f64 / 1e6),
                Fmt::Sig3,
            ),
            (
                "Bulk load's runs merged",
                |r| Some(r.lsm_when("synced")?.bulk_runs_merged? as f64),
                Fmt::Whole,
            ),
            (
                "Bulk load's runs and merged files, MB",
                |r| Some(r.lsm_when("synced")?.bulk_write_bytes as f64 / MB),
                Fmt::Sig3,
            ),
            (
                "Batches committed",
                |r| Some(r.batches.len() as f64),
                Fmt::Whole,
            ),
        ];
        if self.runs.iter().any(|r| r.silent_payments) {
            rows.extend::<[Row; 4]>([
                (
                    "Eligible transactions (sp records)",
                    |r| Some(r.sp_records as f64),
                    Fmt::Whole,
                ),
                (
                    "Eligible share of transactions",
                    |r| Some(r.sp_records as f64 / r.txs as f64).filter(|v| v.is_finite()),
                    Fmt::Ratio,
                ),
                (
                    "sptweaks.dat + spoffsets.dat, MB",
                    |r| r.sp_files.map(|f| f.total_bytes() as f64 / MB),
                    Fmt::Sig3,
                ),
                (
                    "Bytes per eligible transaction",
                    IndexRunRecord::sp_bytes_per_record,
                    Fmt::Sig3,
                ),
            ]);
        }
        for (label, value, fmt) in rows {
            let mut line = format!("| {label} |");
            for run in 1..=self.runs_planned {
                let cell = match self.runs.iter().find(|r| r.run == run) {
                    Some(r) if r.ok => value(r).map_or("–".to_owned(), |v| fmt.show(v)),
                    Some(_) => "FAILED".to_owned(),
                    None => "–".to_owned(),
                };
                let _ = write!(line, " {cell} |");
            }
            let headline = self
                .median_of(value)
                .map_or("–".to_owned(), |v| fmt.show(v));
            let _ = writeln!(line, " **{headline}** |");
            md.push_str(&line);
        }
        md.push('\n');
    }

    fn tenths_table(&self, md: &mut String) {
        let Some(first) = self.ok_runs().next() else {
            return;
        };
        let ok = self.ok_runs().count();
        let _ = writeln!(
            md,
            "## Ingest over the chain\n\nEach tenth of the chain's transactions (by transactions, not \
             heights: the index grows with transactions){}. A batch is seen only when it \
             commits: its transactions, bytes and time are spread evenly over it, so a tenth's \
             rate averages the batches overlapping it (\"Batches\"). The bulk load's merge, \
             which indexes nothing, is left out of the tenth it falls in (its time is in the \
             summary).\n",
            if ok > 1 {
                format!(", median of {ok} runs")
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            md,
            "| Tenth | Heights | Blocks | Transactions | Block MB | Seconds | tx/s | MB/s | tx/s vs 1st | Batches |\n\
             |---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        let first_rate = self.median_of(|r| r.tenths.first()?.txs_per_second);
        for (k, tenth) in first.tenths.iter().enumerate() {
            let at = |value: fn(&Tenth) -> Option<f64>| {
                self.median_of(|r| r.tenths.get(k).and_then(value))
            };
            let show = |v: Option<f64>, fmt: Fmt| v.map_or("–".to_owned(), |v| fmt.show(v));
            let rate = at(|t| t.txs_per_second);
            let heights = if tenth.blocks > 0.0 {
                format!("{}–{}", tenth.first_height, tenth.last_height)
            } else {
                "–".to_owned()
            };
            let _ = writeln!(
                md,
                "| {} | {heights} | {:.0} | {:.0} | {} | {} | {} | {} | {} | {} |",
                tenth.tenth,
                tenth.blocks,
                tenth.txs,
                fmt_significant(tenth.block_bytes / MB, 3),
                show(
                    at(|t| Some(t.seconds).filter(|_| t.blocks > 0.0)),
                    Fmt::Sig3
                ),
                show(rate, Fmt::Whole),
                show(at(|t| t.block_mb_per_second), Fmt::Sig3),
                show(
                    rate.zip(first_rate)
                        .filter(|(_, f)| *f > 0.0)
                        .map(|(r, f)| r / f),
                    Fmt::Ratio
                ),
                tenth.batches
            );
        }
        md.push('\n');
        let coarse = self.is_coarse();
        match (
            self.flat_ratio(),
            self.median_of(|r| r.last_over_first_bytes),
        ) {
            (Some(txs), bytes) => {
                let verdict = if coarse {
                    "too few batches for a verdict (see the notes)".to_owned()
                } else if txs >= FLAT_RATIO_MIN {
                    format!("**flat** (at least {FLAT_RATIO_MIN:.2})")
                } else {
                    format!("**NOT flat** (under {FLAT_RATIO_MIN:.2}: the index slows as it grows)")
                };
                let _ = writeln!(
                    md,
                    "Flat ingest, last tenth over first: **{txs:.2}×** in transactions/s, {} in \
                     block MB/s: {verdict}.\n",
                    bytes.map_or("–".to_owned(), |b| format!("{b:.2}×"))
                );
            }
            (None, _) => {
                let _ = writeln!(
                    md,
                    "Flat ingest: no ratio (a tenth without blocks or time: the chain is too short).\n"
                );
            }
        }
    }

    /// True when the indexer committed too few batches for the tenths to
    /// differ by more than how batches straddle them.
    fn is_coarse(&self) -> bool {
        self.ok_runs()
            .next()
            .is_some_and(|r| r.batches.len() < FINE_BATCHES_MIN)
    }

    fn notes(&self, md: &mut String) {
        let mut notes = Vec::new();
        if let Some(r) = self.ok_runs().next().filter(|_| self.is_coarse()) {
            notes.push(format!(
                "Coarse: the indexer committed {} for {TENTHS} tenths, so tenths \
                 share batches and their rates are averages; a larger chain (preset `large`) \
                 gives a sharper picture.",
                match r.batches.len() {
                    1 => "a single batch".to_owned(),
                    n => format!("{n} batches"),
                }
            ));
        }
        if self
            .ok_runs()
            .any(|r| r.io.is_some_and(|io| io.write_bytes == 0))
        {
            notes.push(
                "The kernel counted no disk writes: the database was probably on a tmpfs, \
                 which /proc/PID/io does not count. Use --db-parent on a disk."
                    .to_owned(),
            );
        }
        if self.ok_runs().any(|r| r.io.is_none()) {
            notes.push("/proc/PID/io was unreadable: no disk-write figures.".to_owned());
        }
        if self.ok_runs().any(|r| !r.final_sample) {
            notes.push(
                "The exited indexer could not be sampled: CPU and writes stop at the last \
                 sample, up to 100 ms before the exit."
                    .to_owned(),
            );
        }
        if !notes.is_empty() {
            let _ = writeln!(md, "## Notes\n");
            for note in notes {
                let _ = writeln!(md, "- {note}");
            }
            md.push('\n');
        }
        let failed: Vec<&IndexRunRecord> = self.runs.iter().filter(|r| !r.ok).collect();
        if !failed.is_empty() {
            let _ = writeln!(md, "## Failures\n");
            for r in failed {
                let _ = writeln!(
                    md,
                    "- **Run {}** FAILED: {}",
                    r.run,
                    escape_cell(r.error.as_deref().unwrap_or_default())
                );
                if let Some(last) = r.stderr_tail.last() {
                    let _ = writeln!(md, "  - last log line: `{}`", escape_cell(last));
                }
            }
            md.push('\n');
        }
    }
}

/// How a figure is shown.
#[derive(Clone, Copy)]
enum Fmt {
    /// Three significant digits: "382", "1.61".
    Sig3,
    /// Rounded to a whole number: rates in the thousands.
    Whole,
    /// Two decimals: ratios near 1.
    Ratio,
}

impl Fmt {
    fn show(self, value: f64) -> String {
        match self {
            Fmt::Sig3 => fmt_significant(value, 3),
            Fmt::Whole => format!("{value:.0}"),
            Fmt::Ratio => format!("{value:.2}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::tests::{chain, fine_lines, lines, record};

    fn report(runs: Vec<IndexRunRecord>) -> IndexReport {
        IndexReport {
            date: "2026-01-01T00:00:00Z".into(),
            machine: runs[0].machine.clone(),
            indexer: runs[0].indexer.clone(),
            chain: chain(),
            source: "read from blk*.dat files".into(),
            runs_planned: 3,
            runs,
        }
    }

    #[test]
    fn summary_has_a_column_per_run_and_the_median() {
        let r = report(vec![
            record(1, 5.0, &lines()),
            record(2, 4.0, &lines()),
            record(3, 6.0, &lines()),
        ]);
        let md = r.to_markdown();
        assert!(md.contains("- Date: 2026-01-01T00:00:00Z"), "{md}");
        assert!(
            md.contains("- Machine: 2 CPUs (cpu), 1.0 GiB RAM, linux, host h"),
            "{md}"
        );
        assert!(
            md.contains("tip height 99, 300 transactions, 0.120 MB of blocks"),
            "{md}"
        );
        assert!(md.contains("| | Run 1 | Run 2 | Run 3 | Median |"), "{md}");
        assert!(
            md.contains("| Wall time, s | 5.00 | 4.00 | 6.00 | **5.00** |"),
            "{md}"
        );
        assert!(
            md.contains("| Transactions/s | 60 | 75 | 50 | **60** |"),
            "{md}"
        );
        assert!(
            md.contains("| Written per byte of index | 2.50 | 2.50 | 2.50 | **2.50** |"),
            "{md}"
        );
        assert!(
            md.contains("| Peak RSS, MB | 150 | 150 | 150 | **150** |"),
            "{md}"
        );
        assert!(
            md.contains("| CPU use, cores | 1.50 | 1.88 | 1.25 | **1.50** |"),
            "{md}"
        );
        // The tenths, 30 transactions each: the first (heights 0..=14) at
        // 50 tx/s, the last (96..=99) at 80 tx/s.
        assert!(
            md.contains("| 1 | 0–14 | 15 | 30 | 0.0120 | 0.600 | 50 |"),
            "{md}"
        );
        assert!(
            md.contains("| 10 | 96–99 | 4 | 30 | 0.0120 | 0.375 | 80 |"),
            "{md}"
        );
        assert!(
            md.contains(
                "Flat ingest, last tenth over first: **1.60×** in transactions/s, 1.60× in block \
                 MB/s: too few batches for a verdict (see the notes)."
            ),
            "{md}"
        );
        // Four batches for ten tenths: the report says the picture is coarse.
        assert!(
            md.contains("Coarse: the indexer committed 4 batches"),
            "{md}"
        );
        assert!(!md.contains("Failures"), "{md}");
    }

    #[test]
    fn silent_payment_rows_only_when_on() {
        let md = report(vec![record(1, 5.0, &lines())]).to_markdown();
        // 7.5 CPU-seconds over 300 transactions.
        assert!(
            md.contains("| CPU per transaction, µs | 25000 | – | – | **25000** |"),
            "{md}"
        );
        assert!(!md.contains("silent payments on"), "{md}");
        assert!(!md.contains("Eligible"), "{md}");

        let on = |run, sp_records| {
            let mut r = record(run, 5.0, &lines());
            r.silent_payments = true;
            r.sp_records = sp_records;
            r.sp_files = Some(SpFiles {
                tweaks_bytes: sp_records * 104,
                offsets_bytes: 800,
            });
            r
        };
        let r = on(1, 60);
        assert_eq!(r.sp_bytes_per_record(), Some(7_040.0 / 60.0));
        let md = report(vec![r, on(2, 60)]).to_markdown();
        assert!(
            md.contains(", silent payments on (`--silent-payments`)"),
            "{md}"
        );
        assert!(
            md.contains("| Eligible transactions (sp records) | 60 | 60 | – | **60** |"),
            "{md}"
        );
        assert!(
            md.contains("| Eligible share of transactions | 0.20 | 0.20 | – | **0.20** |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| sptweaks.dat + spoffsets.dat, MB | 0.00704 | 0.00704 | – | **0.00704** |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| Bytes per eligible transaction | 117 | 117 | – | **117** |"),
            "{md}"
        );
        // No record, no bytes per record.
        assert_eq!(on(1, 0).sp_bytes_per_record(), None);
    }

    #[test]
    fn flat_verdict_from_fine_batches() {
        let flat = report(vec![record(1, 11.0, &fine_lines(0.5))]);
        assert_eq!(flat.flat_ratio(), Some(1.0));
        let md = flat.to_markdown();
        assert!(
            md.contains(
                "**1.00×** in transactions/s, 1.00× in block MB/s: **flat** (at least 0.90)."
            ),
            "{md}"
        );
        assert!(!md.contains("Coarse"), "{md}");

        // The last tenth (the last two batches) takes twice as long.
        let slow = report(vec![record(1, 12.0, &fine_lines(1.0))]);
        assert_eq!(slow.flat_ratio(), Some(0.5));
        let md = slow.to_markdown();
        assert!(md.contains("**0.50×** in transactions/s"), "{md}");
        assert!(md.contains("**NOT flat** (under 0.90"), "{md}");
        assert!(
            md.contains("| 10 | 90–99 | 10 | 30 | 0.0120 | 2.00 | 15 | 0.00600 | 0.50 | 2 |"),
            "{md}"
        );
    }

    #[test]
    fn failed_runs_show_and_leave_the_median() {
        let mut bad = record(2, 1.0, &lines()[..2]);
        bad.stderr_tail = vec!["ERROR store: disk full | oops".into()];
        assert!(!bad.ok);
        let r = report(vec![record(1, 5.0, &lines()), bad]);
        let md = r.to_markdown();
        assert!(
            md.contains("| Wall time, s | 5.00 | FAILED | – | **5.00** |"),
            "{md}"
        );
        assert!(
            md.contains(
                "- **Run 2** FAILED: the indexer stopped at height 49, but the chain's tip is 99"
            ),
            "{md}"
        );
        assert!(
            md.contains("last log line: `ERROR store: disk full \\| oops`"),
            "{md}"
        );
    }

    #[test]
    fn warns_when_writes_are_not_counted() {
        let mut r = record(1, 5.0, &lines());
        r.io = Some(Io::default());
        r.final_sample = false;
        let md = report(vec![r]).to_markdown();
        assert!(md.contains("probably on a tmpfs"), "{md}");
        assert!(md.contains("could not be sampled"), "{md}");
    }

    #[test]
    fn chart_draws_a_line_per_successful_run() {
        let r = report(vec![record(1, 5.0, &lines()), record(2, 4.0, &lines())]);
        let svg = crate::index::chart::ingest_chart(&r);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        // Two panels (tx/s, MB/s) × two runs.
        assert_eq!(svg.matches("<polyline").count(), 4);
        assert_eq!(svg.matches("<circle").count(), 40);
        assert!(svg.contains("run 2"));
    }
}
