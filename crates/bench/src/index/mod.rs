//! `osprey bench index`: workload 3 of BENCHMARKS.md, the index build.
//!
//! Runs `osprey index` on a chaingen chain's blk*.dat files, each run into a
//! fresh empty database, and measures it from the outside: the indexer's
//! progress lines (`--progress-json`: one JSON object per committed batch)
//! give the rate over each tenth of the chain, /proc gives peak RSS, CPU
//! time and bytes written, and the database directory's size is taken after
//! the exit. A run fails unless the indexer exits 0 having indexed every
//! block up to the manifest's tip, in order: an index that is fast but
//! incomplete is not measured.
//!
//! ```text
//! osprey bench index --chain DIR [--out OUTDIR] [--runs 3] [--osprey PATH]
//!     [--db-parent DIR] [--keep-db] [--silent-payments]
//! ```
//!
//! With `--silent-payments` the indexer keeps silent-payment records, and
//! each run also reports the eligible transactions (the records the
//! indexer's batches say they wrote) and the size of `sptweaks.dat` and
//! `spoffsets.dat`; a run whose index lacks them, or whose offsets do not
//! cover every block, fails.
//!
//! Writes into `--out`: `index.run<N>.json` per run
//! ([`report::IndexRunRecord`]), [`INDEX_REPORT_FILE`] (a column per run and
//! the median; per-tenth table; the flat-ingest ratio) and
//! [`INDEX_CHART_FILE`] (rates per tenth, a line per run).
//!
//! Layout: [`progress`] parses the batches and cuts them into tenths,
//! [`procfs`] reads /proc and sizes the database, [`child`] runs and
//! watches the indexer, [`report`] and [`chart`] render.

pub mod chart;
pub mod child;
pub mod procfs;
pub mod progress;
pub mod report;

use crate::args::{IndexArgs, IndexPlan, IndexSource};
use crate::machine::{self, Machine};
use crate::{print_report, write_file};
use anyhow::{bail, Context};
use osprey_chaingen::manifest::Manifest;
use procfs::SpFiles;
use progress::{Batch, Line, LsmShape};
use report::{ChainRef, IndexReport, IndexRunRecord, Indexer};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Between samples of the database's size for its peak, at least: the
/// bulk load's merge holds a partition's merged files beside its runs for
/// a second or two before it deletes the runs, and a sample every 2 s
/// could miss that peak. A walk of the runs' tens of thousands of files
/// (810 runs of 32 files at `--lsm-scale 24`) takes tens of
/// milliseconds, so the sampler waits 20 walks' time when that is longer:
/// it costs the indexer under 5% of a core.
const DB_SAMPLE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);

/// File name of the Markdown report inside the output directory.
pub const INDEX_REPORT_FILE: &str = "index.md";
/// File name of the ingest chart inside the output directory.
pub const INDEX_CHART_FILE: &str = "index.svg";

/// What every run of one bench shares.
struct Shared<'a> {
    plan: &'a IndexPlan,
    osprey: &'a Path,
    date: &'a str,
    machine: &'a Machine,
    indexer: &'a Indexer,
    chain: &'a ChainRef,
    network: &'a str,
    clock_ticks: u64,
}

/// Runs `osprey bench index`: the planned index builds one after the other,
/// then writes the reports into `--out` and prints the Markdown one.
///
/// # Errors
/// On unusable arguments or chain, when the indexer cannot be started or the
/// reports written, and when a run failed (after writing the reports).
pub fn run(args: &IndexArgs) -> anyhow::Result<()> {
    let plan = IndexPlan::from_args(args)?;
    let manifest = Manifest::load(&plan.chain)
        .with_context(|| format!("loading the manifest of {}", plan.chain.display()))?;
    std::fs::create_dir_all(&plan.out)
        .with_context(|| format!("creating {}", plan.out.display()))?;
    std::fs::create_dir_all(&plan.db_parent)
        .with_context(|| format!("creating {}", plan.db_parent.display()))?;
    let osprey = match &plan.osprey {
        Some(path) => path.clone(),
        // This runs in `osprey-tools`, which is installed beside `osprey`.
        None => std::env::current_exe()
            .context("finding this executable (give --osprey PATH)")?
            .with_file_name("osprey"),
    };
    let indexer = Indexer {
        path: osprey.display().to_string(),
        version: indexer_version(&osprey)?,
    };
    let chain = ChainRef {
        dir: plan.chain.display().to_string(),
        preset: manifest.preset.clone(),
        seed: manifest.seed,
        tip_height: manifest.tip_height,
        tx_count: manifest.tx_count,
    };
    let date = machine::utc_now();
    let machine = Machine::current();
    let context = Shared {
        plan: &plan,
        osprey: &osprey,
        date: &date,
        machine: &machine,
        indexer: &indexer,
        chain: &chain,
        network: &manifest.network,
        clock_ticks: procfs::clock_ticks(),
    };

    let mut runs = Vec::with_capacity(plan.runs);
    for run in 1..=plan.runs {
        tracing::info!(run, of = plan.runs, chain = %chain.dir, "index build from an empty database");
        let record = run_once(&context, run)?;
        record.write(&plan.out)?;
        log_run(&record);
        let failed = !record.ok;
        runs.push(record);
        // A failed build says the indexer is broken: later timings would mean nothing.
        if failed {
            break;
        }
    }

    let report = IndexReport {
        date: date.clone(),
        machine: machine.clone(),
        indexer: indexer.clone(),
        chain: chain.clone(),
        source: match &plan.source {
            IndexSource::BlkFiles(_) => "read from blk*.dat files".into(),
            IndexSource::Node { daemon_dir, .. } => {
                format!("read from the Bitcoin Core at `{}`", daemon_dir.display())
            }
        },
        runs_planned: plan.runs,
        runs,
    };
    let markdown = report.to_markdown();
    write_file(&plan.out.join(INDEX_REPORT_FILE), &markdown)?;
    write_file(
        &plan.out.join(INDEX_CHART_FILE),
        &chart::ingest_chart(&report),
    )?;
    print_report(&markdown, &plan.out, INDEX_REPORT_FILE, INDEX_CHART_FILE);
    if let Some(failed) = report.runs.iter().find(|r| !r.ok) {
        bail!(
            "index run {} failed: {} (reports in {})",
            failed.run,
            failed.error.as_deref().unwrap_or("unknown error"),
            plan.out.display()
        );
    }
    Ok(())
}

/// Returns the indexer's `--version` line; running it first also checks
/// that `--osprey` names a program that starts.
fn indexer_version(osprey: &Path) -> anyhow::Result<String> {
    let output = Command::new(osprey)
        .arg("--version")
        .output()
        .with_context(|| format!("running {} --version", osprey.display()))?;
    if !output.status.success() {
        bail!(
            "{} --version failed ({}): is it an osprey binary?",
            osprey.display(),
            output.status
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The indexer's arguments for one run.
fn index_args(
    network: &str,
    source: &IndexSource,
    db_dir: &Path,
    silent_payments: bool,
    lsm_scale: u32,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = ["index", "--network", network].map(OsString::from).into();
    match source {
        IndexSource::BlkFiles(dir) => {
            args.push("--blocks-dir".into());
            args.push(dir.into());
        }
        IndexSource::Node {
            daemon_dir,
            rpc_addr,
        } => {
            args.push("--daemon-dir".into());
            args.push(daemon_dir.into());
            if let Some(addr) = rpc_addr {
                args.push("--daemon-rpc-addr".into());
                args.push(addr.into());
            }
        }
    }
    args.push("--db-dir".into());
    args.push(db_dir.into());
    if silent_payments {
        args.push("--silent-payments".into());
    }
    if lsm_scale != 1 {
        args.extend(["--lsm-scale".into(), lsm_scale.to_string().into()]);
    }
    args.extend(["--progress-json", "--log-filter", "warn"].map(OsString::from));
    args
}

/// One index build into a fresh database.
///
/// # Errors
/// Only for failures of the bench itself (no temporary directory, the
/// indexer does not start); the indexer's failures are in the record.
fn run_once(context: &Shared<'_>, run: usize) -> anyhow::Result<IndexRunRecord> {
    let plan = context.plan;
    let db = tempfile::Builder::new()
        .prefix("osprey-index-db-")
        .tempdir_in(&plan.db_parent)
        .with_context(|| {
            format!(
                "creating a database directory in {}",
                plan.db_parent.display()
            )
        })?;
    let args = index_args(
        context.network,
        &plan.source,
        db.path(),
        plan.silent_payments,
        plan.lsm_scale,
    );
    let mut command = Command::new(context.osprey);
    // Inside the empty database directory no osprey.toml of the caller's
    // working directory is read, and without OSPREY_* variables no setting
    // of the caller's environment (OSPREY_REINDEX, OSPREY_CONF,
    // OSPREY_SILENT_PAYMENTS, ...) changes what is measured: only the flags
    // above do.
    command.args(&args).current_dir(db.path());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("OSPREY_") {
            command.env_remove(key);
        }
    }
    let db_peak = procfs::DiskPeak::watch(db.path(), DB_SAMPLE_INTERVAL);
    let watched = child::watch(command)?;
    let db_peak_bytes = db_peak.stop();

    let db_usage = match procfs::disk_usage(db.path()) {
        Ok(usage) => Some(usage),
        Err(e) => {
            tracing::warn!(dir = %db.path().display(), error = %e, "cannot size the database");
            None
        }
    };
    // The index lives in the network's directory inside `--db-dir`.
    let sp_files = procfs::sp_files(&db.path().join(context.network));
    let db_dir = if plan.keep_db {
        Some(db.keep())
    } else {
        let path = db.path().to_path_buf();
        if let Err(e) = db.close() {
            tracing::warn!(dir = %path.display(), error = %e, "cannot delete the database");
        }
        None
    };

    let exit = if watched.status.success() {
        Ok(())
    } else {
        let last = watched.stderr_tail.last().map_or("", String::as_str);
        Err(format!("osprey index failed ({}): {last}", watched.status))
    };
    let mut outcome = evaluate(&watched.stdout, exit, context.chain);
    let sp_files = match sp_files {
        Ok(files) => files,
        Err(e) => {
            outcome
                .error
                .get_or_insert(format!("cannot size the silent-payment files: {e}"));
            None
        }
    };
    if let Err(e) = check_sp_files(plan.silent_payments, sp_files, context.chain) {
        outcome.error.get_or_insert(e);
    }
    let (cpu_user_seconds, cpu_system_seconds) =
        watched.sampler.cpu_seconds(context.clock_ticks).unzip();
    let mut command_line = vec![context.osprey.display().to_string()];
    command_line.extend(args.iter().map(|a| a.to_string_lossy().into_owned()));
    Ok(build_record(
        context,
        Measured {
            run,
            command: command_line,
            exit: watched.status.to_string(),
            wall_seconds: watched.wall.as_secs_f64(),
            outcome,
            db: db_usage,
            db_peak_bytes,
            db_dir,
            sp_files,
            peak_rss_bytes: watched.sampler.peak_rss,
            cpu_user_seconds,
            cpu_system_seconds,
            io: watched.sampler.io,
            samples: watched.sampler.samples,
            final_sample: watched.final_sample,
            stderr_tail: watched.stderr_tail,
        },
    ))
}

/// The indexer's batches and whether the run counts.
#[derive(Debug, PartialEq)]
struct Outcome {
    batches: Vec<Batch>,
    /// The LSM's shape the indexer reported (when synced, when compacted).
    lsm: Vec<LsmShape>,
    /// True when the batches passed [`progress::check_sequence`], so their
    /// tenths account for every block once.
    sequence_ok: bool,
    error: Option<String>,
}

/// Parses the indexer's stdout and checks the run: exit status, well-formed
/// contiguous batches, the manifest's tip reached, every transaction of the
/// chain indexed. The first failed check is the run's error.
fn evaluate(stdout: &[String], exit: Result<(), String>, chain: &ChainRef) -> Outcome {
    let mut batches = Vec::new();
    let mut lsm = Vec::new();
    let mut parse_error = None;
    for (i, line) in stdout.iter().enumerate() {
        match progress::parse_line(i + 1, line) {
            Ok(Some(Line::Batch(batch))) => batches.push(batch),
            Ok(Some(Line::Lsm(shape))) => lsm.push(shape),
            Ok(None) => {}
            Err(e) => {
                parse_error.get_or_insert(e.to_string());
            }
        }
    }
    let sequence = progress::check_sequence(&batches);
    let sequence_ok = sequence.is_ok();
    let error = exit
        .err()
        .or(parse_error)
        .or_else(|| sequence.err().map(|e| e.to_string()))
        .or_else(|| check_totals(&batches, chain).err());
    Outcome {
        batches,
        lsm,
        sequence_ok,
        error,
    }
}

/// Checks that the batches end at the manifest's tip and, when they start
/// at genesis (an empty database), hold all its transactions.
fn check_totals(batches: &[Batch], chain: &ChainRef) -> Result<(), String> {
    let last = batches.last().map(|b| b.height);
    if last != Some(chain.tip_height) {
        return Err(format!(
            "the indexer stopped at height {}, but the chain's tip is {}",
            last.map_or("(none)".to_owned(), |h| h.to_string()),
            chain.tip_height
        ));
    }
    let txs: u64 = batches.iter().map(|b| b.txs).sum();
    let from_genesis = batches.first().is_some_and(|b| b.first_height() == 0);
    if from_genesis && txs != chain.tx_count {
        return Err(format!(
            "the indexer counted {txs} transactions, but the chain has {}",
            chain.tx_count
        ));
    }
    Ok(())
}

/// Checks that an index built with silent payments has their files, with
/// an offset for every block of the chain, and that one built without has
/// none.
fn check_sp_files(
    silent_payments: bool,
    files: Option<SpFiles>,
    chain: &ChainRef,
) -> Result<(), String> {
    match (silent_payments, files) {
        (false, None) => Ok(()),
        (false, Some(_)) => Err(
            "the index has silent-payment files, but they were not asked for \
             (an osprey.toml or an OSPREY_* variable reached the indexer?)"
                .to_owned(),
        ),
        (true, None) => Err("the index has no sptweaks.dat and spoffsets.dat: \
             does this indexer know --silent-payments?"
            .to_owned()),
        (true, Some(files)) => {
            let expected = 8 * (u64::from(chain.tip_height) + 1);
            if files.offsets_bytes == expected {
                Ok(())
            } else {
                Err(format!(
                    "spoffsets.dat holds {} bytes, but the chain's {} blocks need {expected}",
                    files.offsets_bytes,
                    u64::from(chain.tip_height) + 1
                ))
            }
        }
    }
}

/// Everything measured in one run, before it becomes a record.
struct Measured {
    run: usize,
    command: Vec<String>,
    exit: String,
    wall_seconds: f64,
    outcome: Outcome,
    db: Option<procfs::DiskUsage>,
    db_peak_bytes: Option<u64>,
    db_dir: Option<PathBuf>,
    sp_files: Option<SpFiles>,
    peak_rss_bytes: Option<u64>,
    cpu_user_seconds: Option<f64>,
    cpu_system_seconds: Option<f64>,
    io: Option<procfs::Io>,
    samples: u64,
    final_sample: bool,
    stderr_tail: Vec<String>,
}

/// Derives the record's figures (totals, rates, tenths, ratios,
/// amplification) from what was measured.
fn build_record(context: &Shared<'_>, m: Measured) -> IndexRunRecord {
    let batches = m.outcome.batches;
    let sum = |f: fn(&Batch) -> u64| batches.iter().map(f).sum::<u64>();
    let (blocks, txs, rows, block_bytes, sp_records) = (
        sum(|b| u64::from(b.blocks)),
        sum(|b| b.txs),
        sum(|b| b.rows),
        sum(|b| b.block_bytes),
        sum(|b| b.sp_records),
    );
    let per_second = |n: f64| {
        if m.wall_seconds > 0.0 {
            n / m.wall_seconds
        } else {
            0.0
        }
    };
    // The bulk load's merge indexes nothing: the tenths compare the rate
    // of indexing, and the merge has a row of its own.
    let merge = m
        .outcome
        .lsm
        .iter()
        .find(|shape| shape.when == "synced")
        .and_then(progress::Pause::bulk_merge);
    let tenths = if m.outcome.sequence_ok {
        progress::tenths(&batches, merge)
    } else {
        Vec::new()
    };
    let write_amplification = match (m.io, m.db) {
        (Some(io), Some(db)) if db.allocated_bytes > 0 => {
            Some(io.write_bytes as f64 / db.allocated_bytes as f64)
        }
        _ => None,
    };
    IndexRunRecord {
        bench: format!("osprey-bench {}", env!("CARGO_PKG_VERSION")),
        date: context.date.to_owned(),
        machine: context.machine.clone(),
        indexer: context.indexer.clone(),
        chain: context.chain.clone(),
        command: m.command,
        run: m.run,
        ok: m.outcome.error.is_none(),
        error: m.outcome.error,
        exit: m.exit,
        wall_seconds: m.wall_seconds,
        sync_seconds: batches.last().map(|b| b.elapsed_secs),
        final_height: batches.last().map(|b| b.height),
        blocks,
        txs,
        rows,
        block_bytes,
        txs_per_second: per_second(txs as f64),
        block_mb_per_second: per_second(block_bytes as f64) / 1e6,
        last_over_first_txs: progress::last_over_first(&tenths, |t| t.txs_per_second),
        last_over_first_bytes: progress::last_over_first(&tenths, |t| t.block_mb_per_second),
        last_over_median_txs: progress::last_over_median(&tenths, |t| t.txs_per_second),
        tenths,
        silent_payments: context.plan.silent_payments,
        sp_records,
        sp_files: m.sp_files,
        db_peak_over_final: match (m.db_peak_bytes, m.db) {
            (Some(peak), Some(db)) if db.allocated_bytes > 0 => {
                Some(peak.max(db.allocated_bytes) as f64 / db.allocated_bytes as f64)
            }
            _ => None,
        },
        db_peak_bytes: m.db_peak_bytes,
        db: m.db,
        db_dir: m.db_dir,
        lsm_scale: context.plan.lsm_scale,
        lsm: m.outcome.lsm,
        peak_rss_bytes: m.peak_rss_bytes,
        cpu_user_seconds: m.cpu_user_seconds,
        cpu_system_seconds: m.cpu_system_seconds,
        clock_ticks: context.clock_ticks,
        io: m.io,
        write_amplification,
        samples: m.samples,
        final_sample: m.final_sample,
        stderr_tail: m.stderr_tail,
        batches,
    }
}

fn log_run(record: &IndexRunRecord) {
    match &record.error {
        None => tracing::info!(
            run = record.run,
            wall_seconds = record.wall_seconds,
            txs_per_second = record.txs_per_second,
            last_over_first = record.last_over_first_txs,
            "index build done"
        ),
        Some(error) => tracing::warn!(run = record.run, %error, "index build failed"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn chain() -> ChainRef {
        ChainRef {
            dir: "/chain".into(),
            preset: "tiny".into(),
            seed: 1,
            tip_height: 99,
            tx_count: 300,
        }
    }

    /// Progress lines of a build of heights 0..=99 in four batches.
    pub(crate) fn lines() -> Vec<String> {
        [
            (24, 25, 50, 1.0),
            (49, 25, 50, 2.0),
            (89, 40, 120, 3.5),
            (99, 10, 80, 4.5),
        ]
        .iter()
        .map(|(height, blocks, txs, elapsed)| {
            format!(
                r#"{{"height":{height},"source_height":99,"blocks":{blocks},"txs":{txs},"rows":{},"block_bytes":{},"batch_secs":0.9,"elapsed_secs":{elapsed}}}"#,
                txs * 5,
                txs * 400
            )
        })
        .collect()
    }

    /// Progress lines of a build of heights 0..=99 in twenty batches of five
    /// blocks and 15 txs, each taking 0.5 s, the last two `last_secs` each.
    pub(crate) fn fine_lines(last_secs: f64) -> Vec<String> {
        let mut elapsed = 0.0;
        (0..20u32)
            .map(|i| {
                elapsed += if i >= 18 { last_secs } else { 0.5 };
                format!(
                    r#"{{"height":{},"source_height":99,"blocks":5,"txs":15,"rows":75,"block_bytes":6000,"batch_secs":0.5,"elapsed_secs":{elapsed}}}"#,
                    i * 5 + 4
                )
            })
            .collect()
    }

    #[test]
    fn a_complete_build_passes() {
        assert_eq!(evaluate(&fine_lines(0.5), Ok(()), &chain()).error, None);
        let outcome = evaluate(&lines(), Ok(()), &chain());
        assert_eq!(outcome.error, None);
        assert!(outcome.sequence_ok);
        assert_eq!(outcome.batches.len(), 4);
    }

    #[test]
    fn failures_are_named_in_order() {
        let exit = Err("osprey index failed (exit status: 1): boom".to_owned());
        let outcome = evaluate(&lines(), exit, &chain());
        assert!(outcome.error.unwrap().contains("boom"));

        let short = &lines()[..3];
        let err = evaluate(short, Ok(()), &chain()).error.unwrap();
        assert_eq!(
            err,
            "the indexer stopped at height 89, but the chain's tip is 99"
        );

        let mut gap = lines();
        gap.remove(1);
        let outcome = evaluate(&gap, Ok(()), &chain());
        assert!(!outcome.sequence_ok);
        assert!(outcome.error.unwrap().contains("skipped or repeated"));

        let mut broken = lines();
        broken.insert(2, r#"{"height":"#.to_owned());
        let err = evaluate(&broken, Ok(()), &chain()).error.unwrap();
        assert!(err.starts_with("progress line 3:"), "{err}");

        let mut fewer = chain();
        fewer.tx_count = 299;
        let err = evaluate(&lines(), Ok(()), &fewer).error.unwrap();
        assert_eq!(
            err,
            "the indexer counted 300 transactions, but the chain has 299"
        );

        assert!(evaluate(&[], Ok(()), &chain())
            .error
            .unwrap()
            .contains("no progress line"));
    }

    #[test]
    fn index_command_line() {
        let line = |silent_payments, lsm_scale| {
            index_args(
                "regtest",
                &IndexSource::BlkFiles("/c/blocks".into()),
                Path::new("/d/db"),
                silent_payments,
                lsm_scale,
            )
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
        };
        assert_eq!(
            line(false, 1),
            "index --network regtest --blocks-dir /c/blocks --db-dir /d/db \
             --progress-json --log-filter warn"
        );
        assert_eq!(
            line(true, 1),
            "index --network regtest --blocks-dir /c/blocks --db-dir /d/db \
             --silent-payments --progress-json --log-filter warn"
        );
        assert_eq!(
            line(false, 24),
            "index --network regtest --blocks-dir /c/blocks --db-dir /d/db \
             --lsm-scale 24 --progress-json --log-filter warn"
        );
    }

    #[test]
    fn silent_payment_files_match_the_setting_and_the_chain() {
        // The test chain's tip is 99: 100 blocks, 800 bytes of offsets.
        let files = |offsets_bytes| SpFiles {
            tweaks_bytes: 10_400,
            offsets_bytes,
        };
        assert_eq!(check_sp_files(false, None, &chain()), Ok(()));
        assert_eq!(check_sp_files(true, Some(files(800)), &chain()), Ok(()));
        let err = check_sp_files(true, None, &chain()).unwrap_err();
        assert!(err.contains("no sptweaks.dat"), "{err}");
        let err = check_sp_files(false, Some(files(800)), &chain()).unwrap_err();
        assert!(err.contains("not asked for"), "{err}");
        assert_eq!(
            check_sp_files(true, Some(files(792)), &chain()),
            Err("spoffsets.dat holds 792 bytes, but the chain's 100 blocks need 800".to_owned())
        );
    }

    /// A record as `run_once` builds it, from fixed measurements.
    pub(crate) fn record(run: usize, wall_seconds: f64, lines: &[String]) -> IndexRunRecord {
        let plan = IndexPlan {
            chain: "/chain".into(),
            source: IndexSource::BlkFiles("/chain/blocks".into()),
            out: "o".into(),
            runs: 3,
            osprey: None,
            db_parent: "/o".into(),
            keep_db: false,
            silent_payments: false,
            lsm_scale: 1,
        };
        let machine = Machine {
            hostname: "h".into(),
            cpus: 2,
            cpu_model: "cpu".into(),
            mem_total_bytes: 1 << 30,
            os: "linux".into(),
        };
        let indexer = Indexer {
            path: "/bin/osprey".into(),
            version: "osprey 0.1.0".into(),
        };
        let chain = chain();
        let context = Shared {
            plan: &plan,
            osprey: Path::new("/bin/osprey"),
            date: "2026-01-01T00:00:00Z",
            machine: &machine,
            indexer: &indexer,
            chain: &chain,
            network: "regtest",
            clock_ticks: 100,
        };
        build_record(
            &context,
            Measured {
                run,
                command: vec!["/bin/osprey".into(), "index".into()],
                exit: "exit status: 0".into(),
                wall_seconds,
                outcome: evaluate(lines, Ok(()), &chain),
                db: Some(procfs::DiskUsage {
                    allocated_bytes: 2_000_000,
                    apparent_bytes: 1_900_000,
                    files: 12,
                }),
                db_peak_bytes: Some(3_000_000),
                db_dir: None,
                sp_files: None,
                peak_rss_bytes: Some(150_000_000),
                cpu_user_seconds: Some(6.0),
                cpu_system_seconds: Some(1.5),
                io: Some(procfs::Io {
                    read_bytes: 0,
                    write_bytes: 5_000_000,
                    cancelled_write_bytes: 100_000,
                }),
                samples: 50,
                final_sample: true,
                stderr_tail: Vec::new(),
            },
        )
    }

    #[test]
    fn record_figures() {
        let r = record(1, 5.0, &lines());
        assert!(r.ok);
        assert_eq!(
            (r.blocks, r.txs, r.rows, r.block_bytes),
            (100, 300, 1500, 120_000)
        );
        assert_eq!(r.txs_per_second, 60.0);
        assert_eq!(r.block_mb_per_second, 0.024);
        assert_eq!(r.write_amplification, Some(2.5));
        assert_eq!(r.cpu_seconds(), Some(7.5));
        assert_eq!((r.sync_seconds, r.final_height), (Some(4.5), Some(99)));
        // First tenth: heights 0..=9 of the first batch, 20 txs in 0.4 s;
        // last tenth: the last batch, 80 txs in 1 s.
        assert_eq!(r.tenths.len(), 10);
        assert!((r.tenths[0].txs_per_second.unwrap() - 50.0).abs() < 1e-9);
        assert!((r.tenths[9].txs_per_second.unwrap() - 80.0).abs() < 1e-9);
        assert!((r.last_over_first_txs.unwrap() - 1.6).abs() < 1e-9);
        let json = serde_json::to_string(&r).unwrap();
        let back: IndexRunRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
        assert_eq!(r.file_name(), "index.run1.json");
    }

    #[test]
    fn a_failed_run_has_no_tenths_when_its_batches_do_not_tile() {
        let mut gap = lines();
        gap.remove(1);
        let r = record(2, 5.0, &gap);
        assert!(!r.ok);
        assert!(r.tenths.is_empty());
        assert_eq!(r.last_over_first_txs, None);
    }
}
