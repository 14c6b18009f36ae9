//! `osprey bench`: an Electrum client that runs the workloads of
//! BENCHMARKS.md against any Electrum server (Osprey, electrs, Fulcrum,
//! ElectrumX), checks every answer against a chaingen manifest, and writes
//! reports. Node operators compare servers on their own hardware with it, so
//! a server that answers wrongly fails, it is never merely timed.
//!
//! Layout:
//! - [`args`]: the command line and its validation;
//! - [`client`]: one Electrum session (framing, batches, ids, limits, byte
//!   and latency accounting);
//! - [`check`]: the expected answers derived from the manifest, and the
//!   comparisons (status hash, history, transactions, headers);
//! - [`workload`]: the workloads, as a wallet runs them;
//! - [`server_process`]: the local process listening on a server's port,
//!   whose RSS is sampled during the many-wallets runs;
//! - [`stats`], [`machine`], [`report`], [`svg`]: numbers, context and output;
//! - [`scans`]: `--sp-scans N`, silent-payment scans kept running during
//!   the runs, to measure what they cost the wallets;
//! - [`index`]: `osprey bench index`, the index build (workload 3), which
//!   runs Osprey's indexer as a child process instead of talking to a server.
//!
//! `osprey bench sp-scan` is parsed here ([`SpScanArgs`]) but runs in
//! osprey-tools: it calls Osprey's own scan code, which this crate does not
//! link.
//!
//! [`run`] ties them together. Servers are measured one after the other,
//! never at once, so they do not compete for the machine; and each server's
//! runs are kept together rather than interleaved with other servers', so
//! its warm runs find its caches as its previous run left them, as in the
//! public benchmark.
//!
//! ```text
//! osprey bench --server 127.0.0.1:50001 --server 127.0.0.1:50002 \
//!     --manifest chain/manifest.json --out runs/today [--runs 3] [--batch 50] \
//!     [--wallets 50] [--slice 60] [--workload initial-load|refresh|many-wallets|all] \
//!     [--timeout-secs 60] [--max-response-bytes 67108864] [--sp-scans N]
//! ```
//!
//! The single-session workloads cover the whole wallet; many wallets runs
//! `--wallets` concurrent sessions, session i on the `--slice` addresses
//! from i×slice on (wrapping around the wallet), as the wallets of many
//! users would.
//!
//! Writes into `--out`: `<host>-<port>.<workload>.<run>.json` per run
//! ([`report::RunRecord`]: wall seconds, requests, bytes, batch latencies and
//! their histogram; for many wallets, the server's peak RSS when its process
//! is local), [`REPORT_FILE`] (one table per workload: cold, run 1..N,
//! median, and for many wallets requests/s, p50/p99 and server RSS; machine,
//! date, ratios between servers) and [`CHART_FILE`] (batch latency
//! distribution per server).

pub mod args;
pub mod check;
pub mod client;
pub mod error;
pub mod index;
pub mod machine;
pub mod report;
pub mod scans;
pub mod server_process;
pub mod stats;
pub mod svg;
pub mod workload;

pub use args::{BenchArgs, BenchCommand, IndexArgs, SpScanArgs, WorkloadArg};
pub use check::status_hash;
pub use error::BenchError;

use anyhow::{bail, Context};
use args::Plan;
use check::Expected;
use client::Limits;
use machine::Machine;
use osprey_chaingen::manifest::Manifest;
use report::{RecordContext, Report, RunRecord, ServerRef, ServerReport, WalletSummary};
use scans::{ExpectedScan, ScanLoad};
use server_process::PeakRssSampler;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use workload::{Config, Workload};

/// File name of the Markdown report inside the output directory.
pub const REPORT_FILE: &str = "report.md";

/// File name of the latency chart inside the output directory.
pub const CHART_FILE: &str = "latency.svg";

/// How long `--sp-scans-to-end` waits after the last run for every scan
/// session to complete a scan.
const SCANS_TO_END_MAX: Duration = Duration::from_secs(600);

/// Runs `osprey bench`: measures every server, writes the reports into
/// `--out`, and prints the Markdown report.
///
/// Creates its own tokio runtime, so it must not be called from async code.
///
/// # Errors
/// On unusable arguments or manifest, when the reports cannot be written, and
/// when any server failed (wrong answer, broken session) — after the reports
/// of every server are written.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if let Some(command) = args.command {
        return match command {
            BenchCommand::Index(index_args) => index::run(&index_args),
            BenchCommand::SpScan(_) => bail!(
                "`osprey bench sp-scan` scans Osprey's index in-process: osprey-tools runs it, \
                 this crate links no index"
            ),
        };
    }
    let plan = Plan::from_args(&args)?;
    if tokio::runtime::Handle::try_current().is_ok() {
        bail!("osprey_bench::run starts its own runtime; call it outside async code");
    }
    let manifest = Manifest::load(&plan.manifest)
        .with_context(|| format!("loading manifest {}", plan.manifest.display()))?;
    let expected = Arc::new(Expected::from_manifest(&manifest)?);
    let sp_receivers = manifest.silent_payments.as_deref().unwrap_or_default();
    if plan.sp_scans > 0 && sp_receivers.is_empty() {
        bail!(
            "--sp-scans {} needs silent-payment receivers to scan for, and manifest {} has none \
             (generate the chain with `osprey chaingen --sp-share`)",
            plan.sp_scans,
            plan.manifest.display()
        );
    }
    let sp_scans = Arc::new(ExpectedScan::of_receivers(sp_receivers));
    std::fs::create_dir_all(&plan.out)
        .with_context(|| format!("creating {}", plan.out.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;

    let date = machine::utc_now();
    let machine = Machine::current();
    let config = Config {
        batch: plan.batch,
        wallets: plan.wallets,
        slice: plan.slice,
        limits: Limits {
            timeout: Duration::from_secs(plan.timeout_secs),
            response_bytes_max: plan.response_bytes_max,
        },
    };
    let context = RecordContext {
        date: &date,
        machine: &machine,
        batch_size: plan.batch,
    };
    let mut servers = Vec::with_capacity(plan.servers.len());
    for address in &plan.servers {
        let server = runtime.block_on(bench_server(
            address, &plan, &expected, &sp_scans, config, &context,
        ))?;
        servers.push(server);
    }

    let report = Report {
        date: date.clone(),
        machine: machine.clone(),
        wallet: WalletSummary {
            preset: manifest.preset.clone(),
            seed: manifest.seed,
            tip_height: manifest.tip_height,
            addresses: expected.addresses.len(),
            history_entries: expected.history_entries(),
            transactions: expected.txids.len(),
            heights: expected.heights.len(),
        },
        runs: plan.runs,
        batch: plan.batch,
        wallets: plan.wallets,
        slice: plan.slice,
        workloads: plan.workloads.clone(),
        sp_scans: plan.sp_scans,
        servers,
    };
    let markdown = report.to_markdown();
    write_file(&plan.out.join(REPORT_FILE), &markdown)?;
    write_file(&plan.out.join(CHART_FILE), &svg::latency_chart(&report))?;
    print_report(&markdown, &plan.out, REPORT_FILE, CHART_FILE);

    let failures: Vec<String> = report
        .servers
        .iter()
        .filter_map(|s| s.failure.as_ref().map(|f| format!("- {}: {f}", s.name())))
        .collect();
    if !failures.is_empty() {
        bail!(
            "{} of {} servers failed (reports in {}):\n{}",
            failures.len(),
            report.servers.len(),
            plan.out.display(),
            failures.join("\n")
        );
    }
    Ok(())
}

/// Measures one server on every planned workload, writing each run's record
/// as soon as it is done, so a bench stopped midway keeps what it measured.
/// The first failure ends the server's bench: its later numbers would mean
/// nothing. With `--sp-scans`, the scans run from before the first run to
/// after the last.
///
/// # Errors
/// Only when a record cannot be written; server failures go in the report.
async fn bench_server(
    address: &str,
    plan: &Plan,
    expected: &Arc<Expected>,
    sp_scans: &Arc<Vec<ExpectedScan>>,
    config: Config,
    context: &RecordContext<'_>,
) -> anyhow::Result<ServerReport> {
    let mut report = ServerReport {
        address: address.to_owned(),
        info: None,
        runs: Vec::new(),
        scans: None,
        failure: None,
    };
    tracing::info!(server = address, "checking the server's tip");
    match workload::preflight(address, expected, config.limits).await {
        Ok(info) => report.info = Some(info),
        Err(e) => {
            tracing::warn!(server = address, error = %e, "server failed");
            report.failure = Some(e.to_string());
            return Ok(report);
        }
    }
    let server_ref = ServerRef {
        address: address.to_owned(),
        software: report.info.as_ref().map(|i| i.software.clone()),
        protocol: report.info.as_ref().map(|i| i.protocol.clone()),
    };
    let server_pid = if plan.workloads.contains(&Workload::ManyWallets) {
        find_server_process(address)
    } else {
        None
    };
    let scan_load = if plan.sp_scans > 0 {
        tracing::info!(
            server = address,
            sessions = plan.sp_scans,
            "starting silent-payment scans"
        );
        match ScanLoad::start(address, sp_scans, plan.sp_scans, config.limits).await {
            Ok(load) => Some(load),
            Err(e) => {
                tracing::warn!(server = address, error = %e, "server failed");
                report.failure = Some(e.to_string());
                return Ok(report);
            }
        }
    } else {
        None
    };
    'workloads: for &workload in &plan.workloads {
        for run_index in 0..=plan.runs {
            // Only many wallets is sampled: the server's memory under many
            // sessions at once is the figure asked for.
            let rss_sampler = match workload {
                Workload::ManyWallets => server_pid.and_then(PeakRssSampler::start),
                Workload::InitialLoad | Workload::Refresh => None,
            };
            let scans_before = scan_load.as_ref().map(ScanLoad::activity);
            let mut outcome =
                workload::run_once(address, workload, Arc::clone(expected), config).await;
            outcome.measured.server_rss_peak_bytes = rss_sampler.and_then(PeakRssSampler::finish);
            if let (Some(load), Some(before)) = (&scan_load, scans_before) {
                outcome.measured.sp_scans = Some(load.activity().since(&before));
            }
            let error = outcome.error.map(|e| e.to_string());
            let record = RunRecord::new(
                context,
                server_ref.clone(),
                workload,
                run_index,
                &outcome.measured,
                error,
            );
            record.write(&plan.out)?;
            log_run(&record);
            let failed = record.error.clone();
            report.runs.push(record);
            if let Some(error) = failed {
                report.failure = Some(format!(
                    "{} {}: {error}",
                    workload.slug(),
                    report::run_label(run_index)
                ));
                break 'workloads;
            }
            // A run measured without all its scans did not measure what was
            // asked: stop here, and the scan's error says why.
            if scan_load.as_ref().is_some_and(ScanLoad::broken) {
                break 'workloads;
            }
        }
    }
    if let Some(load) = scan_load {
        let each_completed = if plan.sp_scans_to_end && report.failure.is_none() {
            Some(load.each_completed(SCANS_TO_END_MAX).await)
        } else {
            None
        };
        let (summary, error) = load.stop(address).await;
        tracing::info!(
            server = address,
            completed = summary.activity.completed,
            entries = summary.activity.entries,
            "silent-payment scans stopped"
        );
        report.scans = Some(summary);
        if let Some(error) = error {
            report
                .failure
                .get_or_insert(format!("silent-payment scans: {error}"));
        }
        if each_completed == Some(false) {
            report.failure.get_or_insert(format!(
                "--sp-scans-to-end: not every silent-payment scan session completed a scan \
                 within {} s of the last run",
                SCANS_TO_END_MAX.as_secs()
            ));
        }
    }
    Ok(report)
}

/// Looks for the local process listening on the server's port, and logs
/// what was found by name: a port-forwarder (`docker-proxy`) listening in
/// the server's place would otherwise be measured unnoticed.
fn find_server_process(address: &str) -> Option<u32> {
    let pid = server_process::find_server_pid(address);
    match pid {
        Some(pid) => tracing::info!(
            server = address,
            pid,
            process = server_process::process_name(pid).as_deref().unwrap_or("?"),
            "sampling the RSS of the process listening on the server's port"
        ),
        None => tracing::info!(
            server = address,
            "no local process seen listening on the server's port: its RSS is not reported"
        ),
    }
    pid
}

fn log_run(record: &RunRecord) {
    match &record.error {
        None => tracing::info!(
            server = %record.server.address,
            workload = record.workload.slug(),
            run = %record.run,
            wall_seconds = record.wall_seconds,
            requests = record.requests,
            p99_ms = record.latency.p99_ms,
            "run done"
        ),
        Some(error) => tracing::warn!(
            server = %record.server.address,
            workload = record.workload.slug(),
            run = %record.run,
            %error,
            "run failed"
        ),
    }
}

pub(crate) fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Prints a report and where its files went: `osprey bench` and `osprey
/// bench index` are commands whose output is the report.
#[allow(clippy::print_stdout)] // The CLI's own output, called only from the run functions.
pub(crate) fn print_report(markdown: &str, out: &Path, report_file: &str, chart_file: &str) {
    println!("{markdown}");
    println!(
        "Reports written to {}: {report_file}, {chart_file}, one JSON file per run.",
        out.display()
    );
}
