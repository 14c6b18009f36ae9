//! The files an operator installs: `contrib/osprey.service` is a unit that
//! systemd accepts as written (no unknown key, no bad value, the binary
//! runs), and its descriptor limit leaves room for every session.

use std::path::Path;
use std::process::Command;

const UNIT: &str = include_str!("../../contrib/osprey.service");

/// RocksDB's table files that the store keeps open (`max_open_files`).
const ROCKSDB_OPEN_FILES: usize = 256;

/// 1. Copy the unit into a temp dir with ExecStart pointing at the binary
///    this build made (verify needs an executable there).
/// 2. `systemd-analyze verify` exits 0 and prints nothing: it only warns
///    (exit 0) about an unknown key or a bad value, so a warning fails too.
///
/// Skipped, loudly, where systemd-analyze is missing.
#[test]
fn systemd_unit_passes_systemd_analyze_verify() {
    let analyze = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let Some(analyze) = analyze else {
        eprintln!("!!! SKIPPED: systemd-analyze is not installed; the unit is unchecked");
        return;
    };
    // 1.
    let exec_start = UNIT
        .lines()
        .find(|line| line.starts_with("ExecStart="))
        .expect("the unit has an ExecStart");
    let installed = exec_start
        .trim_start_matches("ExecStart=")
        .split_whitespace()
        .next()
        .expect("ExecStart names a binary");
    assert_eq!(
        installed, "/usr/local/bin/osprey",
        "where the install steps put it"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let unit = dir.path().join("osprey.service");
    std::fs::write(
        &unit,
        UNIT.replace(
            exec_start,
            &exec_start.replace(installed, env!("CARGO_BIN_EXE_osprey")),
        ),
    )
    .expect("writing the unit");
    // 2.
    let out = Command::new(analyze)
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("running systemd-analyze");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty() && out.stdout.is_empty(),
        "systemd-analyze verify {}: {}\n{stderr}{}",
        unit.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The unit's LimitNOFILE covers the default sessions_max, RocksDB's open
/// table files and some margin, and the unit stops Osprey with SIGTERM and
/// gives it time to close the index.
#[test]
fn systemd_unit_limits_fit_the_defaults() {
    let value = |key: &str| -> String {
        UNIT.lines()
            .find_map(|line| line.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("the unit sets {key}"))
            .to_string()
    };
    let nofile: usize = value("LimitNOFILE").parse().expect("a number");
    let sessions = osprey_server::Limits::default().sessions_max;
    assert!(
        nofile >= sessions + ROCKSDB_OPEN_FILES + 100,
        "LimitNOFILE={nofile} leaves no room beside {sessions} sessions and {ROCKSDB_OPEN_FILES} RocksDB files"
    );
    assert_eq!(value("KillSignal"), "SIGTERM");
    let stop_secs: u64 = value("TimeoutStopSec").parse().expect("seconds");
    assert!(stop_secs >= 120, "TimeoutStopSec={stop_secs}");
    assert_eq!(value("User"), "osprey");
    assert_eq!(value("ProtectSystem"), "strict");
}
