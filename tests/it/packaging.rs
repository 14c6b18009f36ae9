//! The files an operator installs: `contrib/osprey.service` is a unit that
//! systemd accepts as written (no unknown key, no bad value, the binary
//! runs), and its descriptor limit leaves room for every session; and
//! `osprey ping`, the container's health check.

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
/// systemd-analyze is required (scripts/setup.sh installs it): a missing
/// one fails the test rather than leaving the unit unchecked.
#[test]
fn systemd_unit_passes_systemd_analyze_verify() {
    let analyze = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("systemd-analyze is not installed (scripts/setup.sh installs it with apt)");
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

/// `osprey ping` (the Dockerfile's HEALTHCHECK) against a one-connection
/// server that reads the request line and answers `reply`; returns
/// whether it exited 0, and the request it sent. `listen_on_any` hands it
/// 0.0.0.0:PORT, as the container's OSPREY_ELECTRUM_RPC_ADDR is.
fn ping(reply: &'static str, listen_on_any: bool) -> (bool, String) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = std::thread::spawn(move || {
        let (stream, _) = listener.accept().expect("accept");
        let mut request = String::new();
        BufReader::new(&stream)
            .read_line(&mut request)
            .expect("read");
        (&stream).write_all(reply.as_bytes()).expect("write");
        request
    });
    let host = if listen_on_any {
        "0.0.0.0"
    } else {
        "127.0.0.1"
    };
    let out = Command::new(env!("CARGO_BIN_EXE_osprey"))
        .args(["ping", "--timeout", "5"])
        .env("OSPREY_ELECTRUM_RPC_ADDR", format!("{host}:{port}"))
        .output()
        .expect("running osprey ping");
    (out.status.success(), server.join().expect("server thread"))
}

#[test]
fn ping_succeeds_only_on_a_server_ping_answer() {
    let (ok, request) = ping("{\"jsonrpc\":\"2.0\",\"result\":null,\"id\":0}\n", true);
    assert!(ok, "an answer to server.ping");
    let request: serde_json::Value = serde_json::from_str(&request).expect("a JSON line");
    assert_eq!(request["method"], "server.ping");
    let refusals = [
        "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32603,\"message\":\"busy\"},\"id\":0}\n",
        "{\"jsonrpc\":\"2.0\",\"result\":null,\"id\":7}\n",
        "HTTP/1.1 400 Bad Request\r\n\r\n",
        "",
    ];
    for reply in refusals {
        assert!(!ping(reply, false).0, "ping accepted {reply:?}");
    }
}

#[test]
fn ping_fails_where_nothing_listens() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let out = Command::new(env!("CARGO_BIN_EXE_osprey"))
        .args(["ping", &format!("127.0.0.1:{port}")])
        .output()
        .expect("running osprey ping");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("connecting to 127.0.0.1"));
}
