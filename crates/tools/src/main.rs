//! `osprey-tools`: the instruments, kept out of the server binary. Users
//! reach them as `osprey chaingen ...` and `osprey bench ...`: `osprey`
//! hands those subcommands to this binary, found next to itself.

mod sp_scan;

use clap::{Parser, Subcommand};
use osprey_bench::{BenchArgs, BenchCommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "osprey",
    bin_name = "osprey",
    version,
    about = "Osprey's instruments: the chain generator and the benchmark client"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate a deterministic regtest chain (or feed one to a node)
    Chaingen(osprey_chaingen::cli::ChaingenArgs),
    /// Measure Electrum servers with a generated chain's wallet
    Bench(BenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Chaingen(args) => osprey_chaingen::cli::run(args),
        Command::Bench(BenchArgs {
            command: Some(BenchCommand::SpScan(args)),
            ..
        }) => sp_scan::run(&args),
        Command::Bench(args) => osprey_bench::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            #[allow(clippy::print_stderr)]
            {
                eprintln!("error: {e:#}");
            }
            ExitCode::FAILURE
        }
    }
}
