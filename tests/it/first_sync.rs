//! Before wallets are served: the monitoring port answers what node boxes
//! read from electrs' (`GET /`, `electrs_index_height{type="tip"}`) from
//! the start, before the node is reached. (What the Electrum port answers
//! during the first sync, on Bitcoin Core in initial block download, is in
//! `core`.)

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::wait_until;
use crate::monitoring::http_get;

/// Kills the child when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `osprey serve` pointed at a port where no node listens and
/// `--monitoring-addr` on port 0:
/// while it waits for the node, `GET /` and `GET /metrics` answer 200 with
/// the index's height under Osprey's name and electrs', and any other path
/// 404.
#[test]
fn monitoring_answers_electrs_paths_before_the_node_is_reached() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A port the system just had free: connections to it are refused.
    let no_node = TcpListener::bind("127.0.0.1:0").expect("a port for no node");
    let node_addr = no_node.local_addr().expect("its address");
    drop(no_node);
    let log_path = dir.path().join("osprey.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let child = Command::new(env!("CARGO_BIN_EXE_osprey"))
        .args(["serve", "--network", "regtest", "--skip-default-conf-files"])
        .arg("--db-dir")
        .arg(dir.path().join("db"))
        .args(["--daemon-rpc-addr", &node_addr.to_string()])
        .args(["--auth", "user:password"])
        .args(["--electrum-rpc-addr", "127.0.0.1:0"])
        .args(["--monitoring-addr", "127.0.0.1:0"])
        .env("OSPREY_LOG_FILTER", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("starting osprey");
    let _child = Killed(child);
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let metrics: SocketAddr = wait_until(
        "the metrics address in the log",
        Duration::from_secs(60),
        || {
            read_log()
                .lines()
                .find_map(|l| l.split_once("metrics: http://"))
                .and_then(|(_, rest)| rest.split_once("/metrics"))
                .and_then(|(addr, _)| addr.parse().ok())
        },
    );
    wait_until(
        "osprey waiting for the node",
        Duration::from_secs(60),
        || read_log().contains("waiting for node").then_some(()),
    );
    for path in ["/", "/metrics"] {
        let (status, body) = http_get(metrics, path);
        assert_eq!(status, 200, "GET {path}: {body}");
        let has = |line: &str| body.lines().any(|l| l == line);
        assert!(
            has("electrs_index_height{type=\"tip\"} 0"),
            "GET {path} should give electrs' metric:\n{body}"
        );
        assert!(has("osprey_index_height 0"), "GET {path}:\n{body}");
    }
    let (status, _) = http_get(metrics, "/nothing-here");
    assert_eq!(status, 404);
    assert!(
        !read_log().contains("serving Electrum clients"),
        "no node: no wallet served"
    );
}
