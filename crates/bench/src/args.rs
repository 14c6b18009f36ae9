//! The command line of `osprey bench`: raw flags as clap parses them, and
//! their validation into the settings a bench runs on.

use crate::scans::SP_SCANS_MAX;
use crate::workload::Workload;
use anyhow::{bail, Context};
use std::path::PathBuf;

/// `osprey bench`: measures Electrum servers on the workloads of
/// BENCHMARKS.md and checks every answer against a chaingen manifest.
///
/// The flags below belong to the Electrum workloads; a subcommand has its
/// own, and clap rejects them before it (`args_conflicts_with_subcommands`)
/// rather than silently ignoring `osprey bench --out X index`.
#[derive(Clone, Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    /// Benchmarks other than the Electrum workloads: `index` measures
    /// Osprey's own index build (workload 3).
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
    #[arg(long, default_value_t = 50)]
    pub wallets: usize,

    /// Addresses per many-wallets session: session i (from 0) takes the
    /// wallet's addresses i×N to i×N+N-1, wrapping around its end.
    #[arg(long, value_name = "N", default_value_t = 60)]
    pub slice: usize,

    /// Workload to run.
    #[arg(long, value_enum, default_value_t = WorkloadArg::All)]
    pub workload: WorkloadArg,

    /// Seconds to wait for a connection, and for the whole answer to one batch.
    #[arg(long, default_value_t = 60)]
    pub timeout_secs: u64,

    /// Longest response line accepted, in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    pub max_response_bytes: usize,

    /// Silent-payment scans kept running on each server during its runs:
    /// N extra sessions, each subscribing a receiver of the manifest from
    /// height 0 and subscribing again when its scan ends (the server must
    /// list `silent_payments` in server.features; at most 16).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub sp_scans: usize,

    /// With --sp-scans: after the last run, wait until each scan session
    /// has completed a whole scan, checked against the manifest's payments
    /// (at most 10 minutes), so that the run checks every scan's answer,
    /// not only those that happened to end during the runs.
    #[arg(long, requires = "sp_scans")]
    pub sp_scans_to_end: bool,
}

/// Subcommands of `osprey bench`.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Time Osprey's index build of a chaingen chain from an empty database
    /// (workload 3): rate per tenth of the chain, size, RSS, CPU, disk writes
    Index(IndexArgs),
    /// Time Osprey's silent-payment scans of a whole chain, per CPU-second
    /// and per wall second, checking every match against the manifest (run
    /// by osprey-tools, which links Osprey's index; see its `sp_scan`)
    SpScan(SpScanArgs),
}

/// `osprey bench sp-scan`.
#[derive(Clone, Debug, clap::Args)]
pub struct SpScanArgs {
    /// Chain indexed: an `osprey chaingen --sp-share` output directory
    /// (manifest.json with its silent-payment receivers, blocks/).
    #[arg(long, value_name = "DIR")]
    pub chain: PathBuf,

    /// `--db-dir` of an index of that chain built with silent payments on
    /// (e.g. kept by `osprey bench index --silent-payments --keep-db`). No
    /// server may run on it meanwhile.
    #[arg(long, value_name = "DIR")]
    pub db_dir: PathBuf,

    /// Directory for the reports: sp-scan.md and sp-scan.json.
    #[arg(long, value_name = "OUTDIR", default_value = "bench-results")]
    pub out: PathBuf,

    /// Runs, each scanning every receiver one at a time, then two at once.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,

    /// Records per `Query::sp_scan` call, as the server's scan chunks.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub chunk_records: usize,
}

/// `osprey bench index`.
#[derive(Clone, Debug, clap::Args)]
pub struct IndexArgs {
    /// Chain to index: an `osprey chaingen` output directory (blocks/blk*.dat, manifest.json).
    #[arg(long, value_name = "DIR")]
    pub chain: PathBuf,

    /// Directory for the reports: one JSON file per run, index.md, index.svg.
    #[arg(long, value_name = "OUTDIR", default_value = "bench-results")]
    pub out: PathBuf,

    /// Index builds to run, each from an empty database.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,

    /// The osprey binary to measure [default: the `osprey` next to this
    /// executable].
    #[arg(long, value_name = "PATH")]
    pub osprey: Option<PathBuf>,

    /// Where the fresh database of each run is made [default: OUTDIR]. Not
    /// /tmp by default: it is often a tmpfs, whose writes /proc/PID/io does
    /// not count and whose size says nothing about a disk.
    #[arg(long, value_name = "DIR")]
    pub db_parent: Option<PathBuf>,

    /// Keep each run's database instead of deleting it.
    #[arg(long)]
    pub keep_db: bool,

    /// Index with silent payments on (`osprey index --silent-payments`) and
    /// report what their records cost: eligible transactions, bytes of
    /// sptweaks.dat and spoffsets.dat, bytes per eligible transaction.
    #[arg(long)]
    pub silent_payments: bool,

    /// Index from a running Bitcoin Core that holds the chain (its data
    /// directory, as `osprey serve --daemon-dir` takes it) instead of the
    /// chain's blk files; the manifest still checks the result.
    #[arg(long, value_name = "DIR")]
    pub daemon_dir: Option<PathBuf>,

    /// That node's JSON-RPC address [default: the network's].
    #[arg(long, value_name = "HOST:PORT", requires = "daemon_dir")]
    pub daemon_rpc_addr: Option<String>,

    /// Divide every size that shapes the index's LSM by F (`osprey index
    /// --lsm-scale`): a chain F times smaller than another then builds the
    /// LSM that one would, so mainnet's depth can be modelled here.
    #[arg(long, value_name = "F", default_value_t = 1)]
    pub lsm_scale: u32,
}

/// Where `osprey index` reads the chain in `osprey bench index`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum IndexSource {
    /// The chain's own `blocks/blk*.dat`.
    BlkFiles(PathBuf),
    /// A Bitcoin Core node holding the chain.
    Node {
        daemon_dir: PathBuf,
        rpc_addr: Option<String>,
    },
}

/// Validated settings of `osprey bench index`.
#[derive(Clone, Debug)]
pub(crate) struct IndexPlan {
    /// Absolute, since the indexer runs in another working directory.
    pub chain: PathBuf,
    pub source: IndexSource,
    pub out: PathBuf,
    pub runs: usize,
    /// `None`: the `osprey` next to this executable.
    pub osprey: Option<PathBuf>,
    /// Absolute, like `chain`: the indexer gets a database path under it.
    pub db_parent: PathBuf,
    pub keep_db: bool,
    pub silent_payments: bool,
    pub lsm_scale: u32,
}

impl IndexPlan {
    pub fn from_args(args: &IndexArgs) -> anyhow::Result<IndexPlan> {
        if args.runs == 0 {
            bail!("--runs must be at least 1");
        }
        if args.lsm_scale == 0 {
            bail!("--lsm-scale must be at least 1");
        }
        let chain = std::path::absolute(&args.chain)
            .with_context(|| format!("--chain {}", args.chain.display()))?;
        let blocks_dir = chain.join("blocks");
        if !blocks_dir.is_dir() {
            bail!(
                "--chain {}: no blocks/ directory; expected the output directory of `osprey chaingen`",
                chain.display()
            );
        }
        let osprey = match &args.osprey {
            Some(path) => Some(
                std::path::absolute(path)
                    .with_context(|| format!("--osprey {}", path.display()))?,
            ),
            None => None,
        };
        let db_parent = args.db_parent.as_ref().unwrap_or(&args.out);
        let db_parent = std::path::absolute(db_parent)
            .with_context(|| format!("database parent directory {}", db_parent.display()))?;
        let source = match &args.daemon_dir {
            None => IndexSource::BlkFiles(blocks_dir),
            Some(dir) => IndexSource::Node {
                daemon_dir: std::path::absolute(dir)
                    .with_context(|| format!("--daemon-dir {}", dir.display()))?,
                rpc_addr: args.daemon_rpc_addr.clone(),
            },
        };
        Ok(IndexPlan {
            chain,
            source,
            out: args.out.clone(),
            runs: args.runs,
            osprey,
            db_parent,
            keep_db: args.keep_db,
            silent_payments: args.silent_payments,
            lsm_scale: args.lsm_scale,
        })
    }
}

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
    pub slice: usize,
    pub workloads: Vec<Workload>,
    pub timeout_secs: u64,
    pub response_bytes_max: usize,
    pub sp_scans: usize,
    pub sp_scans_to_end: bool,
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
        if args.slice == 0 {
            bail!("--slice must be at least 1");
        }
        if args.timeout_secs == 0 {
            bail!("--timeout-secs must be at least 1");
        }
        if args.max_response_bytes < 1024 {
            bail!("--max-response-bytes must be at least 1024");
        }
        if args.sp_scans > SP_SCANS_MAX {
            bail!("--sp-scans must be at most {SP_SCANS_MAX}");
        }
        Ok(Plan {
            servers: args.servers.clone(),
            manifest,
            out: args.out.clone(),
            runs: args.runs,
            batch: args.batch,
            wallets: args.wallets,
            slice: args.slice,
            workloads: args.workload.workloads(),
            timeout_secs: args.timeout_secs,
            response_bytes_max: args.max_response_bytes,
            sp_scans: args.sp_scans,
            sp_scans_to_end: args.sp_scans_to_end,
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
            "--slice",
            "9",
            "--workload",
            "initial-load",
            "--timeout-secs",
            "7",
            "--sp-scans",
            "4",
        ])
        .unwrap();
        let plan = Plan::from_args(&cli.bench).unwrap();
        assert_eq!(plan.servers, ["127.0.0.1:50001", "[::1]:50002"]);
        assert_eq!(
            (
                plan.runs,
                plan.batch,
                plan.wallets,
                plan.slice,
                plan.timeout_secs
            ),
            (5, 20, 4, 9, 7)
        );
        assert_eq!(plan.sp_scans, 4);
        assert_eq!(plan.workloads, [Workload::InitialLoad]);

        let defaults =
            Cli::try_parse_from(["bench", "--server", "h:1", "--manifest", "m"]).unwrap();
        let plan = Plan::from_args(&defaults.bench).unwrap();
        // The many-wallets load: 50 sessions of 60 addresses.
        assert_eq!(
            (plan.runs, plan.batch, plan.wallets, plan.slice),
            (3, 50, 50, 60)
        );
        assert_eq!(plan.workloads, Workload::ALL);
        assert_eq!(plan.sp_scans, 0, "no scans unless asked");
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
        let err = plan(&[
            "bench",
            "--server",
            "h:1",
            "--manifest",
            "m",
            "--sp-scans",
            "17",
        ])
        .unwrap_err();
        assert!(err.to_string().contains("--sp-scans"), "{err}");
        for flag in ["--wallets", "--slice"] {
            let err =
                plan(&["bench", "--server", "h:1", "--manifest", "m", flag, "0"]).unwrap_err();
            assert!(err.to_string().contains(flag), "{err}");
        }
    }

    fn index_args(cli: Cli) -> IndexArgs {
        match cli.bench.command {
            Some(BenchCommand::Index(args)) => args,
            other => panic!("not the index subcommand: {other:?}"),
        }
    }

    #[test]
    fn parses_the_sp_scan_subcommand() {
        let cli = Cli::try_parse_from([
            "bench",
            "sp-scan",
            "--chain",
            "c",
            "--db-dir",
            "d",
            "--runs",
            "1",
            "--chunk-records",
            "50",
        ])
        .unwrap();
        let Some(BenchCommand::SpScan(args)) = cli.bench.command else {
            panic!("not the sp-scan subcommand");
        };
        assert_eq!(
            (args.chain, args.db_dir, args.runs, args.chunk_records),
            ("c".into(), "d".into(), 1, 50)
        );
        assert_eq!(args.out, PathBuf::from("bench-results"));
        let cli =
            Cli::try_parse_from(["bench", "sp-scan", "--chain", "c", "--db-dir", "d"]).unwrap();
        let Some(BenchCommand::SpScan(defaults)) = cli.bench.command else {
            panic!("not the sp-scan subcommand");
        };
        assert_eq!((defaults.runs, defaults.chunk_records), (3, 1000));
        assert!(
            Cli::try_parse_from(["bench", "sp-scan", "--chain", "c"]).is_err(),
            "--db-dir is required"
        );
    }

    #[test]
    fn parses_the_index_subcommand() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("blocks")).unwrap();
        let chain = dir.path().to_str().unwrap();
        let cli = Cli::try_parse_from([
            "bench",
            "index",
            "--chain",
            chain,
            "--out",
            "o",
            "--runs",
            "5",
            "--osprey",
            "bin/osprey",
            "--keep-db",
            "--silent-payments",
        ])
        .unwrap();
        let plan = IndexPlan::from_args(&index_args(cli)).unwrap();
        assert_eq!(plan.runs, 5);
        assert!(plan.keep_db);
        assert!(plan.silent_payments);
        assert_eq!(
            plan.source,
            IndexSource::BlkFiles(dir.path().join("blocks"))
        );
        // Paths handed to the indexer, which runs elsewhere, are absolute.
        let osprey = plan.osprey.unwrap();
        assert!(osprey.is_absolute() && osprey.ends_with("bin/osprey"));
        assert!(plan.db_parent.is_absolute() && plan.db_parent.ends_with("o"));
        assert_eq!(plan.out, PathBuf::from("o"));

        let cli = Cli::try_parse_from(["bench", "index", "--chain", chain]).unwrap();
        let defaults = IndexPlan::from_args(&index_args(cli)).unwrap();
        assert_eq!(defaults.runs, 3);
        assert_eq!(defaults.osprey, None);
        assert!(!defaults.keep_db);
        assert!(!defaults.silent_payments);
        assert!(defaults.db_parent.ends_with("bench-results"));
    }

    #[test]
    fn index_rejects_unusable_settings() {
        let plan =
            |args: &[&str]| IndexPlan::from_args(&index_args(Cli::try_parse_from(args).unwrap()));
        assert!(
            Cli::try_parse_from(["bench", "index"]).is_err(),
            "--chain is required"
        );
        let err = plan(&["bench", "index", "--chain", "/nonexistent/chain"]).unwrap_err();
        assert!(err.to_string().contains("no blocks/ directory"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("blocks")).unwrap();
        let chain = dir.path().to_str().unwrap();
        let err = plan(&["bench", "index", "--chain", chain, "--runs", "0"]).unwrap_err();
        assert!(err.to_string().contains("--runs"), "{err}");
        // Flags of the Electrum workloads before the subcommand are refused,
        // not silently ignored.
        assert!(Cli::try_parse_from(["bench", "--out", "x", "index", "--chain", chain]).is_err());
        assert!(
            Cli::try_parse_from(["bench", "--server", "h:1", "index", "--chain", chain]).is_err()
        );
    }
}
