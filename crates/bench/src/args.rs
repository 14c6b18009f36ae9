//! The command line of `osprey bench`: raw flags as clap parses them, and
//! their validation into the settings a bench runs on.

use crate::workload::Workload;
use anyhow::{bail, Context};
use std::path::PathBuf;

/// `osprey bench`: measures Electrum servers on the workloads of
/// BENCHMARKS.md and checks every answer against a chaingen manifest.
#[derive(Clone, Debug, clap::Args)]
pub struct BenchArgs {
    /// Benchmarks other than the Electrum workloads (none yet; `index` will
    /// measure the index build).
    #[command(subcommand)]
    pub command: Option<BenchCommand>,

    /// Electrum server to measure over TCP (no TLS); repeat to compare servers.
    #[arg(long = "server", value_name = "HOST:PORT")]
    pub servers: Vec<String>,

    /// Manifest of the chain the servers index (chaingen's manifest.json, or its directory).
    #[arg(long, value_name = "DIR/manifest.json")]
    pub manifest: Option<PathBuf>,

    /// Directory for the reports: one JSON file per run, report.md, latency.svg.
    #[arg(long, value_name = "OUTDIR", default_value = "bench-results")]
    pub out: PathBuf,

    /// Warm runs after the cold one.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,

    /// Requests per JSON-RPC batch.
    #[arg(long, default_value_t = 50)]
    pub batch: usize,

    /// Concurrent sessions of the many-wallets workload.
    #[arg(long, default_value_t = 10)]
    pub wallets: usize,

    /// Workload to run.
    #[arg(long, value_enum, default_value_t = WorkloadArg::All)]
    pub workload: WorkloadArg,

    /// Seconds to wait for a connection, and for the whole answer to one batch.
    #[arg(long, default_value_t = 60)]
    pub timeout_secs: u64,

    /// Longest response line accepted, in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    pub max_response_bytes: usize,
}

/// Subcommands of `osprey bench`. None yet: `index` (workload 3) comes later.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum BenchCommand {}

/// The `--workload` choices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkloadArg {
    InitialLoad,
    Refresh,
    ManyWallets,
    All,
}

impl WorkloadArg {
    pub fn workloads(self) -> Vec<Workload> {
        match self {
            WorkloadArg::InitialLoad => vec![Workload::InitialLoad],
            WorkloadArg::Refresh => vec![Workload::Refresh],
            WorkloadArg::ManyWallets => vec![Workload::ManyWallets],
            WorkloadArg::All => Workload::ALL.to_vec(),
        }
    }
}

/// Validated settings of a bench of the Electrum workloads.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub servers: Vec<String>,
    pub manifest: PathBuf,
    pub out: PathBuf,
    pub runs: usize,
    pub batch: usize,
    pub wallets: usize,
    pub workloads: Vec<Workload>,
    pub timeout_secs: u64,
    pub response_bytes_max: usize,
}

impl Plan {
    pub fn from_args(args: &BenchArgs) -> anyhow::Result<Plan> {
        if args.servers.is_empty() {
            bail!("no server to measure: give --server HOST:PORT (repeat it to compare servers)");
        }
        for (i, server) in args.servers.iter().enumerate() {
            if args.servers[..i].contains(server) {
                bail!("--server {server} is given twice");
            }
            let (host, port) = server
                .rsplit_once(':')
                .with_context(|| format!("--server {server:?}: expected HOST:PORT"))?;
            if host.is_empty() || port.parse::<u16>().is_err() {
                bail!("--server {server:?}: expected HOST:PORT with a port number");
            }
        }
        let Some(manifest) = args.manifest.clone() else {
            bail!("no manifest: give --manifest DIR/manifest.json (written by `osprey chaingen`)");
        };
        if args.batch == 0 {
            bail!("--batch must be at least 1");
        }
        if args.wallets == 0 {
            bail!("--wallets must be at least 1");
        }
        if args.timeout_secs == 0 {
            bail!("--timeout-secs must be at least 1");
        }
        if args.max_response_bytes < 1024 {
            bail!("--max-response-bytes must be at least 1024");
        }
        Ok(Plan {
            servers: args.servers.clone(),
            manifest,
            out: args.out.clone(),
            runs: args.runs,
            batch: args.batch,
            wallets: args.wallets,
            workloads: args.workload.workloads(),
            timeout_secs: args.timeout_secs,
            response_bytes_max: args.max_response_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_the_documented_interface() {
        let cli = Cli::try_parse_from([
            "bench",
            "--server",
            "127.0.0.1:50001",
            "--server",
            "[::1]:50002",
            "--manifest",
            "m/manifest.json",
            "--out",
            "o",
            "--runs",
            "5",
            "--batch",
            "20",
            "--wallets",
            "4",
            "--workload",
            "initial-load",
            "--timeout-secs",
            "7",
        ])
        .unwrap();
        let plan = Plan::from_args(&cli.bench).unwrap();
        assert_eq!(plan.servers, ["127.0.0.1:50001", "[::1]:50002"]);
        assert_eq!(
            (plan.runs, plan.batch, plan.wallets, plan.timeout_secs),
            (5, 20, 4, 7)
        );
        assert_eq!(plan.workloads, [Workload::InitialLoad]);

        let defaults =
            Cli::try_parse_from(["bench", "--server", "h:1", "--manifest", "m"]).unwrap();
        let plan = Plan::from_args(&defaults.bench).unwrap();
        assert_eq!((plan.runs, plan.batch, plan.wallets), (3, 50, 10));
        assert_eq!(plan.workloads, Workload::ALL);
    }

    #[test]
    fn rejects_unusable_settings() {
        let plan = |args: &[&str]| Plan::from_args(&Cli::try_parse_from(args).unwrap().bench);
        let err = plan(&["bench", "--manifest", "m"]).unwrap_err().to_string();
        assert!(err.contains("--server"), "{err}");
        assert!(plan(&["bench", "--server", "nohost", "--manifest", "m"]).is_err());
        let twice = plan(&[
            "bench",
            "--server",
            "h:1",
            "--server",
            "h:1",
            "--manifest",
            "m",
        ]);
        assert!(twice.unwrap_err().to_string().contains("twice"));
        assert!(plan(&["bench", "--server", "h:notaport", "--manifest", "m"]).is_err());
        assert!(plan(&["bench", "--server", "h:1"])
            .unwrap_err()
            .to_string()
            .contains("--manifest"));
        assert!(plan(&[
            "bench",
            "--server",
            "h:1",
            "--manifest",
            "m",
            "--batch",
            "0"
        ])
        .is_err());
    }
}
