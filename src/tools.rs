//! `osprey chaingen` and `osprey bench` live in a binary of their own,
//! `osprey-tools` (crates/tools), so that the server operators install
//! carries neither the chain generator nor the benchmark client. This
//! module finds that binary and hands it the subcommand.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

const TOOLS_EXE: &str = "osprey-tools";

/// `osprey-tools` next to this executable (where cargo and the packages put
/// it), else the one on `PATH`.
fn tools_exe() -> PathBuf {
    std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name(TOOLS_EXE))
        .filter(|sibling| sibling.is_file())
        .unwrap_or_else(|| PathBuf::from(TOOLS_EXE))
}

/// A command running `osprey-tools <subcommand>`.
pub fn command(subcommand: &str) -> Command {
    let mut command = Command::new(tools_exe());
    command.arg(subcommand);
    command
}

fn not_found(e: std::io::Error) -> anyhow::Error {
    anyhow::Error::new(e).context(format!(
        "running {TOOLS_EXE}, which holds `osprey chaingen` and `osprey bench` \
         (build it with `cargo build --release -p osprey-tools`; it goes next to `osprey`)"
    ))
}

/// Runs `osprey-tools <subcommand> <args>` in place of this process.
pub fn exec(subcommand: &str, args: Vec<OsString>) -> anyhow::Result<()> {
    let mut command = command(subcommand);
    command.args(args);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // Only returns on failure; on success the tool owns the process,
        // its signals and its exit code.
        Err(not_found(command.exec()))
    }
    #[cfg(not(unix))]
    {
        let status = command.status().map_err(not_found)?;
        std::process::exit(status.code().unwrap_or(1));
    }
}

/// Runs `osprey-tools <subcommand> <args>` to completion.
pub fn run(subcommand: &str, args: &[OsString]) -> anyhow::Result<()> {
    let status = command(subcommand).args(args).status().map_err(not_found)?;
    anyhow::ensure!(status.success(), "osprey {subcommand} failed ({status})");
    Ok(())
}
