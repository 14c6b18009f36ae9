//! The bench's outputs: one JSON record per run (the raw numbers), and a
//! Markdown report laid out like the public server-performance benchmark
//! (one table per workload; cold, run 1..N, median; one row per server) with
//! ratios between servers. Renders text and writes files; measures nothing.

use crate::machine::Machine;
use crate::scans::{ScanActivity, ScanSummary};
use crate::stats::{histogram, median, Bucket, LatencySummary};
use crate::workload::{Measured, ServerInfo, Workload};
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Bytes in a MiB, the unit of the server RSS column.
const MIB: f64 = (1u64 << 20) as f64;

/// The server a record is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerRef {
    /// HOST:PORT as given on the command line.
    pub address: String,
    /// Software and version from `server.version`, when it answered.
    pub software: Option<String>,
    pub protocol: Option<String>,
}

/// One run of one workload against one server: the content of a JSON file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// `osprey-bench <version>`.
    pub bench: String,
    /// Start of the bench (UTC).
    pub date: String,
    pub machine: Machine,
    pub server: ServerRef,
    pub workload: Workload,
    /// "cold", then "run1", "run2", ...
    pub run: String,
    /// 0 for the cold run, then 1..=N.
    pub run_index: usize,
    pub sessions: usize,
    pub batch_size: usize,
    /// False when the server answered wrongly or the session broke.
    pub ok: bool,
    pub error: Option<String>,
    /// First request to last response (see `Measured::wall`).
    pub wall_seconds: f64,
    pub check_seconds: f64,
    pub requests: u64,
    pub batches: u64,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub requests_per_second: f64,
    pub latency: LatencySummary,
    pub latency_histogram: Vec<Bucket>,
    /// Every batch's latency in microseconds, in the order sent per session.
    pub batch_latencies_us: Vec<u64>,
    /// Highest RSS of the server's process, in bytes, sampled every 100 ms
    /// during a many-wallets run; `None` for the other workloads and when
    /// the process could not be found or read (remote server, another
    /// user's process).
    pub server_rss_peak_bytes: Option<u64>,
    /// What the `--sp-scans` sessions did during this run (`None`: no scans
    /// ran; absent in records of benches before the option).
    #[serde(default)]
    pub sp_scans: Option<ScanActivity>,
}

/// Context shared by every record of a bench.
#[derive(Clone, Debug)]
pub struct RecordContext<'a> {
    pub date: &'a str,
    pub machine: &'a Machine,
    pub batch_size: usize,
}

impl RunRecord {
    pub fn new(
        context: &RecordContext<'_>,
        server: ServerRef,
        workload: Workload,
        run_index: usize,
        measured: &Measured,
        error: Option<String>,
    ) -> RunRecord {
        let wall_seconds = measured.wall.as_secs_f64();
        RunRecord {
            bench: format!("osprey-bench {}", env!("CARGO_PKG_VERSION")),
            date: context.date.to_owned(),
            machine: context.machine.clone(),
            server,
            workload,
            run: run_label(run_index),
            run_index,
            sessions: measured.sessions,
            batch_size: context.batch_size,
            ok: error.is_none(),
            error,
            wall_seconds,
            check_seconds: measured.check.as_secs_f64(),
            requests: measured.requests,
            batches: measured.batches,
            bytes_out: measured.bytes_out,
            bytes_in: measured.bytes_in,
            requests_per_second: if wall_seconds > 0.0 {
                measured.requests as f64 / wall_seconds
            } else {
                0.0
            },
            latency: LatencySummary::of(&measured.batch_latencies),
            latency_histogram: histogram(&measured.batch_latencies),
            batch_latencies_us: measured
                .batch_latencies
                .iter()
                .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
                .collect(),
            server_rss_peak_bytes: measured.server_rss_peak_bytes,
            sp_scans: measured.sp_scans,
        }
    }

    /// Returns the file name of this record: `<server>.<workload>.<run>.json`.
    pub fn file_name(&self) -> String {
        format!(
            "{}.{}.{}.json",
            file_slug(&self.server.address),
            self.workload.slug(),
            self.run
        )
    }

    /// Writes the record as pretty JSON into `dir` and returns its path.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn write(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        let path = dir.join(self.file_name());
        let text = serde_json::to_string_pretty(self).context("serialising a run record")?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}

/// Returns "cold" for run 0 and "runN" after it.
pub fn run_label(run_index: usize) -> String {
    if run_index == 0 {
        "cold".to_owned()
    } else {
        format!("run{run_index}")
    }
}

/// Turns HOST:PORT into a file-name-safe string ("127.0.0.1-50001").
fn file_slug(address: &str) -> String {
    address
        .chars()
        .map(|c| match c {
            ':' => '-',
            c if c.is_ascii_alphanumeric() || c == '.' || c == '-' => c,
            _ => '_',
        })
        .collect()
}

/// Everything measured about one server.
#[derive(Clone, Debug)]
pub struct ServerReport {
    pub address: String,
    pub info: Option<ServerInfo>,
    pub runs: Vec<RunRecord>,
    /// What the `--sp-scans` sessions did over all its runs.
    pub scans: Option<ScanSummary>,
    /// Why the server's bench stopped early, if it did.
    pub failure: Option<String>,
}

impl ServerReport {
    /// Returns the row name: "software (host:port)".
    pub fn name(&self) -> String {
        match &self.info {
            Some(info) => format!("{} ({})", info.software, self.address),
            None => self.address.clone(),
        }
    }

    fn runs_of(&self, workload: Workload) -> Vec<&RunRecord> {
        self.runs
            .iter()
            .filter(|r| r.workload == workload)
            .collect()
    }

    /// Returns the headline seconds of a workload: the median of the warm
    /// runs (of the cold run if there are none), or `None` unless every run
    /// of it succeeded.
    pub fn headline_seconds(&self, workload: Workload, runs: usize) -> Option<f64> {
        let records = self.runs_of(workload);
        if records.len() != runs + 1 || records.iter().any(|r| !r.ok) {
            return None;
        }
        let warm: Vec<f64> = records
            .iter()
            .filter(|r| r.run_index > 0)
            .map(|r| r.wall_seconds)
            .collect();
        median(&warm).or_else(|| records.first().map(|r| r.wall_seconds))
    }
}

/// What the chain's wallet asks of a server, for the report's preamble.
#[derive(Clone, Debug, Default)]
pub struct WalletSummary {
    pub preset: String,
    pub seed: u64,
    pub tip_height: u32,
    pub addresses: usize,
    pub history_entries: usize,
    pub transactions: usize,
    pub heights: usize,
}

/// A whole bench: what the Markdown report and the chart are drawn from.
#[derive(Clone, Debug)]
pub struct Report {
    pub date: String,
    pub machine: Machine,
    pub wallet: WalletSummary,
    pub runs: usize,
    pub batch: usize,
    pub wallets: usize,
    /// Addresses per many-wallets session.
    pub slice: usize,
    pub workloads: Vec<Workload>,
    /// Silent-payment scan sessions kept running during every run.
    pub sp_scans: usize,
    pub servers: Vec<ServerReport>,
}

impl Report {
    /// Returns one sentence per pair of (fastest server, other server) and
    /// workload, e.g. "osprey 0.1.0 is 3.1x faster than electrs/0.10.0 on
    /// initial wallet load (median 0.52 s vs 1.61 s)".
    pub fn comparisons(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for &workload in &self.workloads {
            let mut timed: Vec<(String, f64)> = self
                .servers
                .iter()
                // A server that answered anything wrongly is never "faster".
                .filter(|s| s.failure.is_none())
                .filter_map(|s| {
                    s.headline_seconds(workload, self.runs)
                        .map(|t| (self.short_name(s), t))
                })
                .collect();
            if timed.len() < 2 {
                continue;
            }
            timed.sort_by(|a, b| a.1.total_cmp(&b.1));
            let (fast_name, fast) = &timed[0];
            for (name, slow) in &timed[1..] {
                let ratio = if *fast > 0.0 {
                    slow / fast
                } else {
                    f64::INFINITY
                };
                lines.push(format!(
                    "{fast_name} is {ratio:.1}x faster than {name} on {} (median {} s vs {} s)",
                    workload.title(),
                    fmt_secs(*fast),
                    fmt_secs(*slow)
                ));
            }
        }
        lines
    }

    /// Names a server by its software alone when no other server has the
    /// same software string, else with its address.
    fn short_name(&self, server: &ServerReport) -> String {
        let Some(info) = &server.info else {
            return server.address.clone();
        };
        let same = self
            .servers
            .iter()
            .filter(|s| s.info.as_ref().map(|i| &i.software) == Some(&info.software));
        if same.count() > 1 {
            server.name()
        } else {
            info.software.clone()
        }
    }

    /// Renders the Markdown report.
    pub fn to_markdown(&self) -> String {
        let mut md = String::new();
        let w = &self.wallet;
        // Writing into a String cannot fail.
        let _ = writeln!(md, "# Electrum server benchmark\n");
        let _ = writeln!(md, "- Date: {}", self.date);
        let _ = writeln!(md, "- Machine: {}", self.machine.describe());
        let _ = writeln!(
            md,
            "- Chain: chaingen preset `{}`, seed {}, tip height {}",
            w.preset, w.seed, w.tip_height
        );
        let _ = writeln!(
            md,
            "- Wallet: {} addresses, {} history entries, {} transactions, {} block heights",
            w.addresses, w.history_entries, w.transactions, w.heights
        );
        let _ = writeln!(
            md,
            "- Settings: batches of {}, 1 cold + {} warm runs, {} sessions of {} addresses for \
             many wallets; every answer checked against the manifest",
            self.batch, self.runs, self.wallets, self.slice
        );
        if self.sp_scans > 0 {
            let _ = writeln!(
                md,
                "- Silent-payment scans: {} sessions scanning the whole chain during every run \
                 (receivers of the manifest, subscribed again at each scan's end; see below)",
                self.sp_scans
            );
        }
        let _ = writeln!(md, "- Tool: osprey-bench {}\n", env!("CARGO_PKG_VERSION"));
        let _ = writeln!(
            md,
            "Seconds from the first request (`server.version`) to the last response on a fresh \
             connection, without the bench's own checking time; lower is better. \
             \"Cold\" is the first run of a workload in this bench (truly cold only if the server was \
             just started); \"Median\" is the median of the warm runs.\n"
        );
        for &workload in &self.workloads {
            self.workload_table(&mut md, workload);
        }
        if self.sp_scans > 0 {
            self.scans_table(&mut md);
        }
        let comparisons = self.comparisons();
        if !comparisons.is_empty() {
            let _ = writeln!(md, "## Comparison\n");
            for line in comparisons {
                let _ = writeln!(md, "- {line}");
            }
            md.push('\n');
        }
        let failures: Vec<&ServerReport> = self
            .servers
            .iter()
            .filter(|s| s.failure.is_some())
            .collect();
        if !failures.is_empty() {
            let _ = writeln!(md, "## Failures\n");
            for server in failures {
                let _ = writeln!(
                    md,
                    "- **{}** FAILED: {}",
                    escape_cell(&server.name()),
                    escape_cell(server.failure.as_deref().unwrap_or_default())
                );
            }
            md.push('\n');
        }
        md
    }

    fn workload_table(&self, md: &mut String, workload: Workload) {
        let w = &self.wallet;
        let (title, what) = match workload {
            Workload::InitialLoad => (
                "Initial wallet load".to_owned(),
                format!("`blockchain.scripthash.subscribe` × {}", w.addresses),
            ),
            Workload::Refresh => (
                "Wallet refresh".to_owned(),
                format!(
                    "`get_history` × {}, `transaction.get` × {}, `block.header` × {}",
                    w.addresses, w.transactions, w.heights
                ),
            ),
            Workload::ManyWallets => (
                format!(
                    "Many wallets ({} concurrent sessions of {} addresses)",
                    self.wallets, self.slice
                ),
                format!(
                    "Each session: initial load, then refresh, of its own {} addresses (session i \
                     from address i×{}, wrapping around the wallet), on one connection; batch \
                     latencies over the warm runs; the wall time includes the client's checks; \
                     server RSS is the highest sampled every 100 ms over the warm runs (n/a: no \
                     local process found listening on the server's port)",
                    self.slice, self.slice
                ),
            ),
        };
        let _ = writeln!(md, "## {title}\n\n{what}, batches of {}.\n", self.batch);
        let mut header = "| Server | Cold |".to_owned();
        let mut rule = "|---|---:|".to_owned();
        for i in 1..=self.runs {
            let _ = write!(header, " Run {i} |");
            rule.push_str("---:|");
        }
        header.push_str(" Median |");
        rule.push_str("---:|");
        if workload == Workload::ManyWallets {
            header.push_str(" req/s | p50 ms | p99 ms | max ms | server RSS MiB |");
            rule.push_str("---:|---:|---:|---:|---:|");
        }
        let _ = writeln!(md, "{header}\n{rule}");
        for server in &self.servers {
            let records = server.runs_of(workload);
            let mut row = format!("| {} |", escape_cell(&server.name()));
            for index in 0..=self.runs {
                let cell = match records.iter().find(|r| r.run_index == index) {
                    Some(r) if r.ok => fmt_secs(r.wall_seconds),
                    Some(_) => "FAILED".to_owned(),
                    None => "–".to_owned(),
                };
                let _ = write!(row, " {cell} |");
            }
            let headline = server
                .headline_seconds(workload, self.runs)
                .map_or("–".to_owned(), fmt_secs);
            let _ = write!(row, " **{headline}** |");
            if workload == Workload::ManyWallets {
                let warm: Vec<&&RunRecord> = records
                    .iter()
                    .filter(|r| r.ok && (r.run_index > 0 || self.runs == 0))
                    .collect();
                let rps: Vec<f64> = warm.iter().map(|r| r.requests_per_second).collect();
                let latencies: Vec<std::time::Duration> = warm
                    .iter()
                    .flat_map(|r| {
                        r.batch_latencies_us
                            .iter()
                            .map(|us| std::time::Duration::from_micros(*us))
                    })
                    .collect();
                if warm.is_empty() {
                    row.push_str(" – | – | – | – | – |");
                } else {
                    let l = LatencySummary::of(&latencies);
                    let rss = warm
                        .iter()
                        .filter_map(|r| r.server_rss_peak_bytes)
                        .max()
                        .map_or("n/a".to_owned(), |bytes| {
                            fmt_significant(bytes as f64 / MIB, 3)
                        });
                    let _ = write!(
                        row,
                        " {:.0} | {} | {} | {} | {rss} |",
                        median(&rps).unwrap_or(0.0),
                        fmt_significant(l.p50_ms, 3),
                        fmt_significant(l.p99_ms, 3),
                        fmt_significant(l.max_ms, 3)
                    );
                }
            }
            let _ = writeln!(md, "{row}");
        }
        md.push('\n');
    }

    /// The `--sp-scans` sessions' work per server: proof that the scans ran
    /// while the runs above were measured, and how far they got.
    fn scans_table(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "## Silent-payment scans during the runs\n\n{} sessions, each subscribing one \
             receiver from height 0 and again whenever its scan reached progress 1.0 with \
             exactly the receiver's payments of the manifest. Per run, in order (cold, run \
             1..N, workload by workload): scans completed / notifications received during \
             it. Progress at stop: each session's unfinished scan when the last run ended.\n",
            self.sp_scans
        );
        let _ = writeln!(
            md,
            "| Server | Subscribes | Scans completed | Per run | Notifications | Entries | \
             Progress at stop |\n|---|---:|---:|---|---:|---:|---|"
        );
        for server in &self.servers {
            let Some(scans) = &server.scans else {
                let _ = writeln!(
                    md,
                    "| {} | – | – | – | – | – | – |",
                    escape_cell(&server.name())
                );
                continue;
            };
            let per_run: Vec<String> = server
                .runs
                .iter()
                .map(|r| {
                    r.sp_scans.map_or("–".to_owned(), |a| {
                        format!("{}/{}", a.completed, a.notifications)
                    })
                })
                .collect();
            let progress: Vec<String> = scans
                .progress_at_stop
                .iter()
                .map(|p| format!("{p:.2}"))
                .collect();
            let a = &scans.activity;
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} |",
                escape_cell(&server.name()),
                a.subscribes,
                a.completed,
                per_run.join(", "),
                a.notifications,
                a.entries,
                progress.join(", ")
            );
        }
        md.push('\n');
    }
}

/// Formats seconds with three significant digits ("382", "1.61", "0.000234").
pub fn fmt_secs(secs: f64) -> String {
    fmt_significant(secs, 3)
}

/// Formats `value` with `digits` significant digits, without exponent.
pub fn fmt_significant(value: f64, digits: i32) -> String {
    if value == 0.0 || !value.is_finite() {
        return format!("{value}");
    }
    let magnitude = value.abs().log10().floor() as i32;
    let decimals = (digits - 1 - magnitude).clamp(0, 9) as usize;
    format!("{value:.decimals$}")
}

/// Keeps server-supplied text from breaking a Markdown table row.
pub(crate) fn escape_cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn record(
        address: &str,
        workload: Workload,
        run_index: usize,
        secs: f64,
        ok: bool,
    ) -> RunRecord {
        let machine = Machine {
            hostname: "h".into(),
            cpus: 2,
            cpu_model: "cpu".into(),
            mem_total_bytes: 1 << 30,
            os: "linux".into(),
        };
        let context = RecordContext {
            date: "2026-01-01T00:00:00Z",
            machine: &machine,
            batch_size: 50,
        };
        let measured = Measured {
            wall: Duration::from_secs_f64(secs),
            requests: 100,
            sessions: 1,
            batch_latencies: vec![Duration::from_millis(2)],
            ..Measured::default()
        };
        let server = ServerRef {
            address: address.into(),
            software: None,
            protocol: None,
        };
        RunRecord::new(
            &context,
            server,
            workload,
            run_index,
            &measured,
            (!ok).then(|| "boom".to_owned()),
        )
    }

    fn server(software: &str, address: &str, secs: [f64; 4]) -> ServerReport {
        ServerReport {
            address: address.into(),
            info: Some(ServerInfo {
                software: software.into(),
                protocol: "1.4".into(),
            }),
            runs: secs
                .iter()
                .enumerate()
                .map(|(i, s)| record(address, Workload::InitialLoad, i, *s, true))
                .collect(),
            scans: None,
            failure: None,
        }
    }

    fn report(servers: Vec<ServerReport>) -> Report {
        Report {
            date: "2026-01-01T00:00:00Z".into(),
            machine: servers[0].runs[0].machine.clone(),
            wallet: WalletSummary::default(),
            runs: 3,
            batch: 50,
            wallets: 10,
            slice: 60,
            workloads: vec![Workload::InitialLoad],
            sp_scans: 0,
            servers,
        }
    }

    #[test]
    fn median_row_and_ratio() {
        let r = report(vec![
            server("osprey 0.1.0", "a:1", [9.0, 1.0, 3.0, 2.0]),
            server("electrs/0.10.0", "b:2", [20.0, 7.0, 6.0, 6.5]),
        ]);
        let md = r.to_markdown();
        assert!(
            md.contains("| Server | Cold | Run 1 | Run 2 | Run 3 | Median |"),
            "{md}"
        );
        assert!(
            md.contains("| osprey 0.1.0 (a:1) | 9.00 | 1.00 | 3.00 | 2.00 | **2.00** |"),
            "{md}"
        );
        assert_eq!(
            r.comparisons(),
            ["osprey 0.1.0 is 3.2x faster than electrs/0.10.0 on initial wallet load (median 2.00 s vs 6.50 s)"]
        );
    }

    #[test]
    fn failed_runs_show_and_are_left_out_of_ratios() {
        let mut bad = server("liar", "c:3", [1.0, 1.0, 1.0, 1.0]);
        bad.runs[2].ok = false;
        bad.runs.truncate(3);
        bad.failure = Some("wrong answer".into());
        let r = report(vec![server("honest", "a:1", [2.0; 4]), bad]);
        let md = r.to_markdown();
        assert!(
            md.contains("| liar (c:3) | 1.00 | 1.00 | FAILED | – | **–** |"),
            "{md}"
        );
        assert!(md.contains("**liar (c:3)** FAILED: wrong answer"), "{md}");
        assert!(r.comparisons().is_empty());
    }

    #[test]
    fn many_wallets_row_shows_throughput_latency_and_server_rss() {
        let rss_mib = [Some(900), Some(100), Some(300), Some(200)];
        let mut local = server("osprey 0.1.0", "a:1", [1.0; 4]);
        let mut remote = server("electrs/0.10.0", "b:2", [1.0; 4]);
        for (i, run) in local.runs.iter_mut().enumerate() {
            run.workload = Workload::ManyWallets;
            run.server_rss_peak_bytes = rss_mib[i].map(|mib: u64| mib << 20);
        }
        for run in &mut remote.runs {
            run.workload = Workload::ManyWallets;
        }
        let mut r = report(vec![local, remote]);
        r.workloads = vec![Workload::ManyWallets];
        let md = r.to_markdown();
        assert!(
            md.contains("## Many wallets (10 concurrent sessions of 60 addresses)"),
            "{md}"
        );
        assert!(
            md.contains("| Median | req/s | p50 ms | p99 ms | max ms | server RSS MiB |"),
            "{md}"
        );
        // The highest of the warm runs' peaks: the cold run's is left out
        // like its latencies.
        assert!(
            md.contains("| osprey 0.1.0 (a:1) | 1.00 | 1.00 | 1.00 | 1.00 | **1.00** | 100 | 2.00 | 2.00 | 2.00 | 300 |"),
            "{md}"
        );
        assert!(
            md.contains("| **1.00** | 100 | 2.00 | 2.00 | 2.00 | n/a |"),
            "{md}"
        );
    }

    #[test]
    fn scans_during_the_runs_are_reported() {
        let mut scanned = server("osprey 0.1.0", "a:1", [1.0; 4]);
        for (i, run) in scanned.runs.iter_mut().enumerate() {
            run.sp_scans = Some(ScanActivity {
                sessions: 2,
                completed: i as u64,
                notifications: 10 + i as u64,
                ..ScanActivity::default()
            });
        }
        scanned.scans = Some(ScanSummary {
            activity: ScanActivity {
                sessions: 2,
                subscribes: 8,
                completed: 6,
                notifications: 46,
                entries: 1234,
            },
            progress_at_stop: vec![0.25, 0.5],
        });
        let mut r = report(vec![scanned, server("other", "b:2", [1.0; 4])]);
        let md = r.to_markdown();
        assert!(!md.contains("Silent-payment scans"), "none asked: {md}");
        r.sp_scans = 2;
        let md = r.to_markdown();
        assert!(md.contains("- Silent-payment scans: 2 sessions"), "{md}");
        assert!(
            md.contains(
                "| osprey 0.1.0 (a:1) | 8 | 6 | 0/10, 1/11, 2/12, 3/13 | 46 | 1234 | 0.25, 0.50 |"
            ),
            "{md}"
        );
        // A server whose scans never started says so instead of zeros.
        assert!(
            md.contains("| other (b:2) | – | – | – | – | – | – |"),
            "{md}"
        );
    }

    #[test]
    fn seconds_keep_three_significant_digits() {
        assert_eq!(fmt_secs(382.4), "382");
        assert_eq!(fmt_secs(49.34), "49.3");
        assert_eq!(fmt_secs(1.614), "1.61");
        assert_eq!(fmt_secs(0.000_234_4), "0.000234");
        assert_eq!(fmt_secs(0.0), "0");
    }

    #[test]
    fn file_names_are_safe() {
        let r = record("[::1]:50001", Workload::Refresh, 2, 1.0, true);
        assert_eq!(r.file_name(), "_--1_-50001.refresh.run2.json");
    }
}
