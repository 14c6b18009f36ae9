//! `osprey`: an Electrum server for your own Bitcoin node.
//!
//! The binary is glue: it reads the config, installs logging, and runs one
//! subcommand. The work happens in the crates under `crates/`.

mod admin;
mod bans;
mod config;
mod demo;
mod follow;
mod index_report;
mod memory;
mod monitoring;
mod ping;
mod progress;
mod serve;
mod snapshot;
mod tools;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::OnceLock;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{reload, EnvFilter, Registry};

#[derive(Parser)]
#[command(
    name = "osprey",
    version,
    about = "A fast Electrum server for your own Bitcoin node"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Index the node's chain and serve Electrum wallets
    Serve {
        #[command(flatten)]
        config: config::ConfigArgs,
        /// Serve the index that another `osprey serve` on the same index
        /// directory writes, writing nothing (a read replica; no admin socket)
        #[arg(long, env = "OSPREY_READ_ONLY", value_parser = clap::builder::BoolishValueParser::new())]
        read_only: bool,
    },
    /// Index the chain up to the node's tip, then exit
    Index {
        #[command(flatten)]
        config: config::ConfigArgs,
        /// Print one JSON line per committed batch on stdout (for `osprey bench index`)
        #[arg(long)]
        progress_json: bool,
        /// When done, print the index's tip and digest (every row, header
        /// and txid; two indexes of one chain print the same) as a JSON
        /// line on stdout
        #[arg(long)]
        digest: bool,
    },
    /// Write the index to one file, or check one and make it the index
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCommand),
    /// Generate a regtest chain, index it and serve it: no node needed
    Demo(demo::DemoArgs),
    /// Ask an Electrum server for server.ping; exits 0 if it answers (a health check)
    Ping(ping::PingArgs),
    /// Ask the running `osprey serve` (found from the same settings) about
    /// its state or sessions, or tell it to act, over its local admin socket
    #[command(after_help = admin::COMMANDS)]
    Admin {
        #[command(flatten)]
        config: config::ConfigArgs,
        /// Print the answer as one JSON line, for scripts
        #[arg(long)]
        json: bool,
        /// getinfo, sessions, kick, loglevel, query or stop
        command: String,
        /// The command's arguments
        args: Vec<String>,
    },
    /// Generate a deterministic regtest chain (or feed one to a node); runs osprey-tools
    #[command(disable_help_flag = true, disable_version_flag = true)]
    Chaingen {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Measure Electrum servers with a generated chain's wallet; runs osprey-tools
    #[command(disable_help_flag = true, disable_version_flag = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

/// The log filter's handle, which `osprey admin loglevel` changes it through.
static LOG_FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

fn init_logging(filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|e| {
        // Logging is not up yet, so this one goes straight to stderr.
        #[allow(clippy::print_stderr)]
        {
            eprintln!("invalid --log-filter {filter:?} ({e}); using \"info\"");
        }
        EnvFilter::new("info")
    });
    let (filter, handle) = reload::Layer::new(filter);
    // Colours only for a person at a terminal, not in log files.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(ansi)
                .with_writer(progress::stderr_around_bar),
        )
        .init();
    // Set once: logging is initialised once per process.
    let _ = LOG_FILTER.set(handle);
}

/// Replaces the log filter (`osprey admin loglevel`).
fn set_log_filter(filter: &str) -> Result<(), String> {
    let filter =
        EnvFilter::try_new(filter).map_err(|e| format!("invalid filter {filter:?}: {e}"))?;
    LOG_FILTER
        .get()
        .ok_or_else(|| "logging is not set up".to_string())?
        .reload(filter)
        .map_err(|e| format!("setting the log filter: {e}"))
}

/// Starts logging at the config's filter, then logs the settings the
/// config accepted without honouring (electrs' settings Osprey has no use
/// for), one line each.
fn start_logging(config: &config::Config) {
    init_logging(&config.log_filter);
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
}

/// `osprey --version`: the release and the index format it reads and
/// writes (a different format needs `--reindex`).
fn version() -> &'static str {
    let line = format!(
        "{} (index format {})",
        env!("CARGO_PKG_VERSION"),
        osprey_store::SCHEMA_VERSION
    );
    // Once per process, for clap's 'static strings.
    Box::leak(line.into_boxed_str())
}

/// The command line, with `serve` put in front of settings given without a
/// subcommand or of no arguments at all: a node package starts electrs as
/// `electrs` or `electrs --conf FILE ...`, and swapping in Osprey must need
/// nothing but the program's name. `--help` and `--version` alone keep
/// their meaning. Also says whether `serve` was put in (a launch as
/// electrs').
fn with_default_subcommand(mut args: Vec<OsString>) -> (Vec<OsString>, config::Launch) {
    let first = args.get(1).and_then(|a| a.to_str()).unwrap_or("");
    let own_flag = matches!(first, "-h" | "--help" | "-V" | "--version");
    if args.len() <= 1 || (first.starts_with('-') && !own_flag) {
        args.insert(1.min(args.len()), "serve".into());
        return (args, config::Launch::Electrs);
    }
    (args, config::Launch::Osprey)
}

/// The matches of the innermost subcommand (`osprey snapshot write`'s
/// `write`): the one whose settings are resolved.
fn innermost(matches: &clap::ArgMatches) -> &clap::ArgMatches {
    let mut matches = matches;
    while let Some((_, sub)) = matches.subcommand() {
        matches = sub;
    }
    matches
}

fn main() -> ExitCode {
    let (args, launch) = with_default_subcommand(std::env::args_os().collect());
    let matches = Cli::command().version(version()).get_matches_from(args);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // Settings are resolved from the matches, which know where each flag
    // stood on the command line and which came from variables.
    let resolve = |args: &config::ConfigArgs| config::resolve(args, innermost(&matches), launch);
    let result = match cli.command {
        Command::Serve { config, read_only } => resolve(&config).and_then(|mut config| {
            start_logging(&config);
            config.read_only = read_only;
            if read_only && (config.sync_once || config.reindex) {
                anyhow::bail!("--read-only serves another server's index: it neither indexes (sync_once) nor deletes it (--reindex)");
            }
            if config.sync_once {
                serve::index_only(config, false, false)
            } else {
                serve::serve(config)
            }
        }),
        Command::Index {
            config,
            progress_json,
            digest,
        } => resolve(&config).and_then(|config| {
            start_logging(&config);
            serve::index_only(config, progress_json, digest)
        }),
        Command::Snapshot(command) => resolve(command.config()).and_then(|config| {
            start_logging(&config);
            command.run(config)
        }),
        Command::Demo(args) => {
            init_logging(&args.log_filter);
            demo::run(args)
        }
        Command::Ping(args) => ping::run(args),
        Command::Admin {
            config,
            json,
            command,
            args,
        } => resolve(&config).and_then(|config| admin::run(&config, json, &command, &args)),
        Command::Chaingen { args } => tools::exec("chaingen", args),
        Command::Bench { args } => tools::exec("bench", args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` prints the whole context chain on one line, no backtrace.
            tracing::error!("{e:#}");
            #[allow(clippy::print_stderr)]
            {
                eprintln!("error: {e:#}");
            }
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &[&str]) -> Result<Cli, clap::Error> {
        let (args, _) = with_default_subcommand(line.iter().map(OsString::from).collect());
        Cli::try_parse_from(args)
    }

    /// electrs' command line with the program renamed, none included, is
    /// `osprey serve`; Osprey's own subcommands, `--help` and `--version`
    /// are left alone.
    #[test]
    fn settings_without_a_subcommand_are_serves() {
        let cli = parse(&[
            "osprey",
            "--conf",
            "/data/electrs.toml",
            "--network",
            "signet",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        let Command::Serve { config: args, .. } = cli.command else {
            panic!("not serve");
        };
        assert_eq!(
            args.conf.as_deref(),
            Some(std::path::Path::new("/data/electrs.toml"))
        );
        assert_eq!(args.network.as_deref(), Some("signet"));
        let cli = parse(&["osprey", "index", "--network", "regtest"]).unwrap();
        assert!(matches!(cli.command, Command::Index { .. }));
        for own in ["--help", "-h", "--version", "-V"] {
            let kind = parse(&["osprey", own]).map(|_| ()).unwrap_err().kind();
            assert!(
                matches!(
                    kind,
                    clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
                ),
                "{own}: {kind:?}"
            );
        }
        let Command::Serve { config: args, .. } =
            parse(&["osprey"]).unwrap_or_else(|e| panic!("{e}")).command
        else {
            panic!("a bare osprey is not serve");
        };
        assert!(args.conf.is_none(), "electrs started without arguments");
        for (line, launch) in [
            (&["osprey"][..], config::Launch::Electrs),
            (&["osprey", "--network", "regtest"], config::Launch::Electrs),
            (&["osprey", "serve"], config::Launch::Osprey),
            (&["osprey", "--help"], config::Launch::Osprey),
        ] {
            let (_, found) = with_default_subcommand(line.iter().map(OsString::from).collect());
            assert_eq!(found, launch, "{line:?}");
        }
    }
}
