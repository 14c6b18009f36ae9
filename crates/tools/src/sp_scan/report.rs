//! The outputs of `osprey bench sp-scan`: every scan's figures as JSON, and
//! a Markdown report with a column per run and the median. Renders only.

use osprey_bench::machine::Machine;
use osprey_bench::report::fmt_significant;
use osprey_bench::stats::median;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Records per CPU-second of one scanning thread that issue 24 asks for.
pub const BAR_RECORDS_PER_CPU_SECOND: f64 = 15_000.0;

/// The share of the multiplications' limit (pairs per CPU-second) that
/// issue 35 asks one scan's records per CPU-second to reach.
pub const BAR_SHARE_OF_LIMIT: f64 = 0.9;

/// One receiver's scan of the whole chain.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScanRecord {
    /// Its index among the manifest's receivers.
    pub receiver: usize,
    /// The thread of its phase that ran it, from 0.
    pub thread: usize,
    pub records: usize,
    /// `Query::sp_scan` calls.
    pub chunks: usize,
    /// Payments found, each checked against the manifest.
    pub matches: usize,
    /// The scanning thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`).
    pub cpu_seconds: f64,
    pub wall_seconds: f64,
}

/// Every receiver scanned once, `threads` scans at a time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    pub threads: usize,
    /// From the first scan's start to the last one's end.
    pub wall_seconds: f64,
    /// By receiver.
    pub scans: Vec<ScanRecord>,
}

impl Phase {
    fn records(&self) -> f64 {
        self.scans.iter().map(|s| s.records as f64).sum()
    }

    /// Records per second of a scanning thread's CPU time: per core.
    pub fn records_per_cpu_second(&self) -> Option<f64> {
        let cpu: f64 = self.scans.iter().map(|s| s.cpu_seconds).sum();
        (cpu > 0.0).then(|| self.records() / cpu)
    }

    /// Records per wall second of the phase, all its threads together.
    pub fn records_per_wall_second(&self) -> Option<f64> {
        (self.wall_seconds > 0.0).then(|| self.records() / self.wall_seconds)
    }

    /// CPU time over wall time of the scans: under 1 when the machine's
    /// other jobs took the scanning threads' cores.
    pub fn cpu_share(&self) -> Option<f64> {
        let cpu: f64 = self.scans.iter().map(|s| s.cpu_seconds).sum();
        let wall: f64 = self.scans.iter().map(|s| s.wall_seconds).sum();
        (wall > 0.0).then(|| cpu / wall)
    }
}

/// One run: the phases in order (one scan at a time, then several).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run: usize,
    /// Pairs of point multiplications (one ECDH, one generator
    /// multiplication) per CPU-second, measured before the run's scans and
    /// after them.
    pub limit_pairs_per_cpu_second: [f64; 2],
    pub phases: Vec<Phase>,
}

impl RunRecord {
    /// The run's limit: the mean of its two measurements.
    pub fn limit(&self) -> Option<f64> {
        let [before, after] = self.limit_pairs_per_cpu_second;
        let mean = (before + after) / 2.0;
        (mean > 0.0).then_some(mean)
    }

    /// Phase `k`'s records per CPU-second over the run's limit.
    pub fn share_of_limit(&self, k: usize) -> Option<f64> {
        Some(self.phases.get(k)?.records_per_cpu_second()? / self.limit()?)
    }
}

/// A whole `osprey bench sp-scan`: the content of `sp-scan.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpScanReport {
    pub date: String,
    pub machine: Machine,
    pub chain: String,
    pub db_dir: String,
    pub tip_height: u32,
    pub tx_count: u64,
    /// The receivers' addresses, in the manifest's order.
    pub receivers: Vec<String>,
    /// Payments to them all; each scan found exactly its receiver's.
    pub payments: usize,
    pub chunk_records: usize,
    /// `/proc/loadavg` before the first and after the last scan.
    pub load_before: Option<String>,
    pub load_after: Option<String>,
    pub runs: Vec<RunRecord>,
}

impl SpScanReport {
    /// Renders the Markdown report.
    pub fn to_markdown(&self) -> String {
        let mut md = String::new();
        let records = self
            .runs
            .first()
            .and_then(|r| r.phases.first())
            .and_then(|p| p.scans.first())
            .map_or(0, |s| s.records);
        // Writing into a String cannot fail.
        let _ = writeln!(md, "# Silent-payment scan benchmark\n");
        let _ = writeln!(md, "- Date: {}", self.date);
        let _ = writeln!(md, "- Machine: {}", self.machine.describe());
        let _ = writeln!(
            md,
            "- Load average (1, 5, 15 min): {} before, {} after",
            self.load_before.as_deref().unwrap_or("unknown"),
            self.load_after.as_deref().unwrap_or("unknown")
        );
        let _ = writeln!(
            md,
            "- Chain: `{}`, tip height {}, {} transactions, {records} silent-payment records \
             (eligible transactions)",
            self.chain, self.tip_height, self.tx_count
        );
        let _ = writeln!(md, "- Index: `{}`", self.db_dir);
        let _ = writeln!(
            md,
            "- Scans: each of the manifest's {} receivers from height 0 to the tip, in chunks \
             of {} records (`Query::sp_scan`); every scan found exactly its receiver's payments \
             in the manifest ({} in all), none missing, none extra",
            self.receivers.len(),
            self.chunk_records,
            self.payments
        );
        let _ = writeln!(md, "- Tool: osprey-tools {}\n", env!("CARGO_PKG_VERSION"));
        let _ = writeln!(
            md,
            "CPU is each scanning thread's own time (`CLOCK_THREAD_CPUTIME_ID`): records per \
             CPU-second are records per second per core, whatever else the machine runs. Wall \
             rates are of all the phase's threads together.\n"
        );
        let _ = writeln!(
            md,
            "The limit is the rate of the two point multiplications every record costs \
             (libsecp256k1's constant-time ECDH and generator multiplication, as the scan \
             calls them), in pairs per CPU-second of one thread, measured before and after \
             each run's scans (their mean); a phase's share of it is its records per \
             CPU-second over that.\n"
        );
        let mut header = "| |".to_owned();
        let mut rule = "|---|".to_owned();
        for run in &self.runs {
            let _ = write!(header, " Run {} |", run.run);
            rule.push_str("---:|");
        }
        let _ = writeln!(md, "{header} Median |\n{rule}---:|");
        type Show = fn(f64) -> String;
        let mut row = |label: &str, figure: &dyn Fn(&RunRecord) -> Option<f64>, show: Show| {
            let values: Vec<Option<f64>> = self.runs.iter().map(figure).collect();
            let _ = write!(md, "| {label} |");
            for v in &values {
                let _ = write!(md, " {} |", v.map_or("–".to_owned(), show));
            }
            let present: Vec<f64> = values.into_iter().flatten().collect();
            let _ = writeln!(
                md,
                " **{}** |",
                median(&present).map_or("–".to_owned(), show)
            );
        };
        row(
            "limit: multiplication pairs per CPU-second",
            &RunRecord::limit,
            whole,
        );
        let phases = self.runs.first().map_or(0, |r| r.phases.len());
        for k in 0..phases {
            let threads = self.runs[0].phases[k].threads;
            let name = if threads == 1 {
                "1 scan at a time".to_owned()
            } else {
                format!("{threads} scans at once")
            };
            type Figure = fn(&Phase) -> Option<f64>;
            let figures: [(&str, Figure, Show); 3] = [
                (
                    "records per CPU-second",
                    Phase::records_per_cpu_second,
                    whole,
                ),
                (
                    "records per wall second",
                    Phase::records_per_wall_second,
                    whole,
                ),
                ("CPU / wall of the scans", Phase::cpu_share, two_places),
            ];
            for (label, figure, show) in figures {
                row(
                    &format!("{name}: {label}"),
                    &|r: &RunRecord| r.phases.get(k).and_then(figure),
                    show,
                );
            }
            row(
                &format!("{name}: share of the limit"),
                &|r: &RunRecord| r.share_of_limit(k),
                two_places,
            );
        }
        md.push('\n');
        if let Some(rate) = self.median_single_rate() {
            let verdict = if rate >= BAR_RECORDS_PER_CPU_SECOND {
                "**met**"
            } else {
                "**missed**"
            };
            let _ = writeln!(
                md,
                "Bar of issue 24, at least {} records per second per core: {verdict} ({} per \
                 CPU-second, median of one scan at a time; {} µs per record).",
                whole(BAR_RECORDS_PER_CPU_SECOND),
                whole(rate),
                fmt_significant(1e6 / rate, 3)
            );
        }
        if let Some(share) = self.median_single_share() {
            let verdict = if share >= BAR_SHARE_OF_LIMIT {
                "**met**"
            } else {
                "**missed**"
            };
            let _ = writeln!(
                md,
                "Bar of issue 35, at least {BAR_SHARE_OF_LIMIT} of the multiplications' limit: \
                 {verdict} ({share:.3}, median of one scan at a time over its run's limit)."
            );
        }
        md
    }

    /// Median over the runs of the first phase's share of its run's limit.
    pub fn median_single_share(&self) -> Option<f64> {
        let shares: Vec<f64> = self
            .runs
            .iter()
            .filter_map(|r| r.share_of_limit(0))
            .collect();
        median(&shares)
    }

    /// Median over the runs of the first phase's records per CPU-second.
    pub fn median_single_rate(&self) -> Option<f64> {
        let rates: Vec<f64> = self
            .runs
            .iter()
            .filter_map(|r| r.phases.first()?.records_per_cpu_second())
            .collect();
        median(&rates)
    }
}

fn whole(value: f64) -> String {
    format!("{value:.0}")
}

fn two_places(value: f64) -> String {
    format!("{value:.2}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(receiver: usize, thread: usize, cpu_seconds: f64, wall_seconds: f64) -> ScanRecord {
        ScanRecord {
            receiver,
            thread,
            records: 30_000,
            chunks: 30,
            matches: 4,
            cpu_seconds,
            wall_seconds,
        }
    }

    fn run(run: usize, cpu_seconds: f64) -> RunRecord {
        RunRecord {
            run,
            limit_pairs_per_cpu_second: [16_000.0, 14_000.0],
            phases: vec![
                Phase {
                    threads: 1,
                    wall_seconds: 4.0 * cpu_seconds,
                    scans: vec![
                        scan(0, 0, cpu_seconds, 2.0 * cpu_seconds),
                        scan(1, 0, cpu_seconds, 2.0 * cpu_seconds),
                    ],
                },
                Phase {
                    threads: 2,
                    wall_seconds: cpu_seconds,
                    scans: vec![
                        scan(0, 0, cpu_seconds, cpu_seconds),
                        scan(1, 1, cpu_seconds, cpu_seconds),
                    ],
                },
            ],
        }
    }

    fn report(runs: Vec<RunRecord>) -> SpScanReport {
        SpScanReport {
            date: "2026-01-01T00:00:00Z".into(),
            machine: Machine {
                hostname: "h".into(),
                cpus: 2,
                cpu_model: "cpu".into(),
                mem_total_bytes: 1 << 30,
                os: "linux".into(),
            },
            chain: "/chain".into(),
            db_dir: "/db".into(),
            tip_height: 99,
            tx_count: 300_000,
            receivers: vec!["sprt1qa".into(), "sprt1qb".into()],
            payments: 8,
            chunk_records: 1000,
            load_before: Some("1.00 2.00 3.00".into()),
            load_after: None,
            runs,
        }
    }

    #[test]
    fn rates_per_core_and_per_wall_second() {
        let r = run(1, 2.0);
        // The limit is the mean of the measurements before and after.
        assert_eq!(r.limit(), Some(15_000.0));
        assert_eq!(r.share_of_limit(0), Some(1.0));
        assert_eq!(r.share_of_limit(2), None);
        let (alone, pair) = (&r.phases[0], &r.phases[1]);
        // 60,000 records in 4 CPU-seconds, 8 wall seconds.
        assert_eq!(alone.records_per_cpu_second(), Some(15_000.0));
        assert_eq!(alone.records_per_wall_second(), Some(7_500.0));
        assert_eq!(alone.cpu_share(), Some(0.5));
        // Two at once: the same CPU, half the wall time of one alone.
        assert_eq!(pair.records_per_cpu_second(), Some(15_000.0));
        assert_eq!(pair.records_per_wall_second(), Some(30_000.0));
    }

    #[test]
    fn markdown_has_a_column_per_run_the_median_and_the_verdict() {
        let md = report(vec![run(1, 2.0), run(2, 3.0), run(3, 1.5)]).to_markdown();
        assert!(md.contains("| | Run 1 | Run 2 | Run 3 | Median |"), "{md}");
        assert!(
            md.contains(
                "| 1 scan at a time: records per CPU-second | 15000 | 10000 | 20000 | **15000** |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| 2 scans at once: records per wall second | 30000 | 20000 | 40000 | **30000** |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| 1 scan at a time: CPU / wall of the scans | 0.50 | 0.50 | 0.50 | **0.50** |"
            ),
            "{md}"
        );
        assert!(md.contains("30000 silent-payment records"), "{md}");
        assert!(md.contains("1.00 2.00 3.00 before, unknown after"), "{md}");
        assert!(
            md.contains("records per second per core: **met** (15000 per CPU-second, median of one scan at a time; 66.7 µs per record)"),
            "{md}"
        );
        assert!(
            md.contains(
                "| limit: multiplication pairs per CPU-second | 15000 | 15000 | 15000 | **15000** |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| 1 scan at a time: share of the limit | 1.00 | 0.67 | 1.33 | **1.00** |"),
            "{md}"
        );
        assert!(
            md.contains("0.9 of the multiplications' limit: **met** (1.000,"),
            "{md}"
        );
        let slow = report(vec![run(1, 2.5)]).to_markdown();
        assert!(slow.contains("**missed** (12000 per CPU-second"), "{slow}");
        assert!(
            slow.contains("0.9 of the multiplications' limit: **missed** (0.800,"),
            "{slow}"
        );
    }
}
