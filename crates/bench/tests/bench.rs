//! End-to-end tests of `osprey bench` against in-process fake Electrum
//! servers on loopback: an honest one must pass and be reported; each lie
//! must fail the run with an error naming server, method, subject and the
//! difference.

mod common;

use common::{chain, closed_port, start, Chain, Lie};
use osprey_bench::{run, BenchArgs, WorkloadArg};
use osprey_chaingen::manifest::SilentPaymentReceiver;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

fn args(servers: Vec<String>, manifest: &Path, out: &Path, workload: WorkloadArg) -> BenchArgs {
    BenchArgs {
        command: None,
        servers,
        manifest: Some(manifest.to_path_buf()),
        out: out.to_path_buf(),
        runs: 2,
        batch: 2,
        wallets: 3,
        slice: 2,
        workload,
        timeout_secs: 5,
        max_response_bytes: 1 << 20,
        sp_scans: 0,
        sp_scans_to_end: false,
    }
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("run record is JSON")
}

fn json_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("out dir exists")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    names
}

#[test]
fn honest_server_passes_and_is_reported() {
    let chain = Arc::new(chain());
    let server = start(Arc::clone(&chain), Lie::None, "FakeElectrum 1.0");
    let dir = tempfile::tempdir().unwrap();
    let manifest = chain.save_manifest(dir.path());
    let out = dir.path().join("out");

    run(args(
        vec![server.clone()],
        &manifest,
        &out,
        WorkloadArg::All,
    ))
    .expect("an honest server passes");

    // 3 workloads × (cold + 2 warm runs).
    let files = json_files(&out);
    assert_eq!(files.len(), 9, "{files:?}");
    let slug = server.replace(':', "-");
    let cold = read_json(&out.join(format!("{slug}.initial-load.cold.json")));
    assert_eq!(cold["ok"], true);
    assert_eq!(cold["server"]["software"], "FakeElectrum 1.0");
    assert_eq!(cold["workload"], "initial-load");
    // server.version + 5 subscribes in batches of 2.
    assert_eq!(cold["requests"], 6);
    assert_eq!(cold["batches"], 4);
    assert_eq!(cold["batch_latencies_us"].as_array().map(Vec::len), Some(4));
    assert!(cold["bytes_in"].as_u64().unwrap() > 0 && cold["bytes_out"].as_u64().unwrap() > 0);
    assert!(cold["wall_seconds"].as_f64().unwrap() > 0.0);
    assert!(cold["machine"]["cpus"].as_u64().unwrap() >= 1);

    // version + 5 histories + 6 transactions + 5 distinct heights.
    let refresh = read_json(&out.join(format!("{slug}.refresh.run2.json")));
    assert_eq!(refresh["requests"], 17);
    assert_eq!(refresh["run_index"], 2);
    let many = read_json(&out.join(format!("{slug}.many-wallets.run1.json")));
    assert_eq!(many["sessions"], 3);
    // Each session: version, then subscribe and history of its 2 addresses,
    // then their transactions and heights. Session 0 has addresses 0 and 1
    // (tx 1-4 at heights 1, 3, 5), session 1 addresses 2 and 3 (tx 5, 1, 6
    // at heights 7, 1, 6), session 2 wraps around to addresses 4 and 0 (tx
    // 1, 2 at heights 1, 3).
    assert_eq!(
        many["requests"],
        (1 + 2 + 2 + 4 + 3) + (1 + 2 + 2 + 3 + 3) + (1 + 2 + 2 + 2 + 2)
    );
    // The fake server listens in this test process, so its RSS is found;
    // the single-session workloads are not sampled.
    if cfg!(target_os = "linux") {
        assert!(
            many["server_rss_peak_bytes"].as_u64().unwrap() > 0,
            "{many}"
        );
    }
    assert_eq!(cold["server_rss_peak_bytes"], Value::Null);

    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("## Initial wallet load"), "{md}");
    assert!(md.contains("## Wallet refresh"), "{md}");
    assert!(
        md.contains("## Many wallets (3 concurrent sessions of 2 addresses)"),
        "{md}"
    );
    assert!(md.contains("| server RSS MiB |"), "{md}");
    if cfg!(target_os = "linux") {
        assert!(!md.contains("| n/a |"), "{md}");
    }
    assert!(
        md.contains("| Server | Cold | Run 1 | Run 2 | Median |"),
        "{md}"
    );
    assert!(
        md.contains(&format!("| FakeElectrum 1.0 ({server}) |")),
        "{md}"
    );
    assert!(md.contains("CPUs") && md.contains("RAM"), "{md}");
    assert!(!md.contains("FAILED"), "{md}");
    let svg = std::fs::read_to_string(out.join("latency.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("<polyline"),
        "{svg}"
    );
}

#[test]
fn two_servers_are_compared() {
    let chain = Arc::new(chain());
    let a = start(Arc::clone(&chain), Lie::None, "FakeA 1.0");
    let b = start(Arc::clone(&chain), Lie::None, "FakeB 2.0");
    let dir = tempfile::tempdir().unwrap();
    let manifest = chain.save_manifest(dir.path());
    let out = dir.path().join("out");

    run(args(
        vec![a.clone(), b.clone()],
        &manifest,
        &out,
        WorkloadArg::InitialLoad,
    ))
    .expect("both pass");

    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains(&format!("| FakeA 1.0 ({a}) |"))
            && md.contains(&format!("| FakeB 2.0 ({b}) |")),
        "{md}"
    );
    assert!(md.contains("## Comparison"), "{md}");
    assert!(
        md.contains("x faster than") && md.contains("on initial wallet load"),
        "{md}"
    );
    assert_eq!(json_files(&out).len(), 2 * 3);
}

/// Runs one workload against a server telling `lie` and returns the error.
fn caught(
    lie: Lie,
    workload: WorkloadArg,
    tune: impl FnOnce(&mut BenchArgs),
) -> (Arc<Chain>, String, String) {
    let chain = Arc::new(chain());
    let server = start(Arc::clone(&chain), lie, "FakeElectrum 1.0");
    let dir = tempfile::tempdir().unwrap();
    let manifest = chain.save_manifest(dir.path());
    let out = dir.path().join("out");
    let mut bench = args(vec![server.clone()], &manifest, &out, workload);
    tune(&mut bench);
    let error = match run(bench) {
        Ok(()) => panic!("the bench passed a server lying with {lie:?}"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        error.contains(&server),
        "error does not name the server {server}: {error}"
    );
    let md = std::fs::read_to_string(out.join("report.md"))
        .expect("a failed bench still writes its report");
    assert!(md.contains("FAILED"), "{md}");
    (chain, server, error)
}

fn assert_contains_all(error: &str, parts: &[&str]) {
    for part in parts {
        assert!(error.contains(part), "error lacks {part:?}: {error}");
    }
}

#[test]
fn wrong_height_fails_refresh_naming_the_entry() {
    let (chain, _, error) = caught(Lie::WrongHeight, WorkloadArg::Refresh, |_| {});
    let tx4 = &chain.txids[4];
    assert_contains_all(
        &error,
        &[
            "wrong answer to blockchain.scripthash.get_history",
            &format!("scripthash {}", chain.scripthash(1)),
            &format!("entry 2 is ({tx4}, height 4), expected ({tx4}, height 5)"),
        ],
    );
}

#[test]
fn wrong_height_fails_initial_load_with_the_status_and_its_cause() {
    let (chain, _, error) = caught(Lie::WrongHeight, WorkloadArg::InitialLoad, |_| {});
    assert_contains_all(
        &error,
        &[
            "wrong answer to blockchain.scripthash.subscribe",
            &format!("scripthash {}", chain.scripthash(1)),
            "expected",
            "its blockchain.scripthash.get_history differs: entry 2",
        ],
    );
}

#[test]
fn wrong_status_fails_initial_load() {
    let (chain, _, error) = caught(Lie::WrongStatus, WorkloadArg::InitialLoad, |_| {});
    assert_contains_all(
        &error,
        &[
            "blockchain.scripthash.subscribe",
            &format!("scripthash {}", chain.scripthash(1)),
            &format!("status {}", "11".repeat(32)),
            "status hash itself is computed wrongly",
        ],
    );
}

#[test]
fn wrong_transaction_fails_refresh() {
    let (chain, _, error) = caught(Lie::WrongTx, WorkloadArg::Refresh, |_| {});
    assert_contains_all(
        &error,
        &[
            "wrong answer to blockchain.transaction.get",
            &format!("txid {}", chain.txids[3]),
            &format!("returned transaction {}", chain.txids[2]),
        ],
    );
}

#[test]
fn wrong_header_fails_refresh() {
    let (chain, _, error) = caught(Lie::WrongHeader, WorkloadArg::Refresh, |_| {});
    let hashes = &chain.manifest.block_hashes;
    assert_contains_all(
        &error,
        &[
            "wrong answer to blockchain.block.header for height 3",
            &format!(
                "hashes to {}, the manifest's block at this height is {}",
                hashes[2], hashes[3]
            ),
        ],
    );
}

#[test]
fn rpc_error_fails_the_run() {
    let (chain, _, error) = caught(Lie::RpcError, WorkloadArg::InitialLoad, |_| {});
    assert_contains_all(
        &error,
        &[
            "blockchain.scripthash.subscribe",
            chain.scripthash(2),
            "returned JSON-RPC error -32603: history too large",
        ],
    );
}

#[test]
fn mempool_entry_is_a_mismatch() {
    let (chain, _, error) = caught(Lie::MempoolEntry, WorkloadArg::Refresh, |_| {});
    assert_contains_all(
        &error,
        &[chain.scripthash(2), "is a mempool entry", "empty mempool"],
    );
}

#[test]
fn hanging_server_times_out() {
    let started = std::time::Instant::now();
    let (_, _, error) = caught(Lie::Hang, WorkloadArg::Refresh, |a| a.timeout_secs = 1);
    assert_contains_all(
        &error,
        &[
            "blockchain.scripthash.get_history",
            "no complete answer within 1 s",
        ],
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn dropped_connection_is_reported() {
    let (_, _, error) = caught(Lie::Drop, WorkloadArg::InitialLoad, |_| {});
    assert_contains_all(
        &error,
        &["connection closed by the server during blockchain.scripthash.subscribe"],
    );
}

#[test]
fn oversized_line_is_refused() {
    let (_, _, error) = caught(Lie::HugeLine, WorkloadArg::InitialLoad, |a| {
        a.max_response_bytes = 4096
    });
    assert_contains_all(
        &error,
        &["blockchain.scripthash.subscribe", "exceeds 4096 bytes"],
    );
}

#[test]
fn server_behind_the_manifest_tip_fails_before_measuring() {
    let (_, _, error) = caught(Lie::BehindTip, WorkloadArg::All, |_| {});
    assert_contains_all(
        &error,
        &["server tip is height 6, the manifest's tip is height 7"],
    );
}

/// A chain grown past the manifest's tip (Bitcoin Core needs one recent
/// block to leave initial block download) is measured when the manifest's
/// tip is in it, and fails when it is another chain.
#[test]
fn server_ahead_of_the_manifest_tip_is_measured_only_on_the_same_chain() {
    let chain = Arc::new(chain());
    let server = start(Arc::clone(&chain), Lie::AheadOfTip, "FakeElectrum 1.0");
    let dir = tempfile::tempdir().unwrap();
    let manifest = chain.save_manifest(dir.path());
    let bench = args(
        vec![server],
        &manifest,
        &dir.path().join("out"),
        WorkloadArg::InitialLoad,
    );
    run(bench).expect("the manifest's chain, one block longer");
    let (_, _, error) = caught(Lie::ForkAheadOfTip, WorkloadArg::InitialLoad, |_| {});
    assert_contains_all(&error, &["blockchain.block.header", "height 7"]);
}

#[test]
fn wrong_notification_fails_the_run() {
    let (chain, _, error) = caught(Lie::Notify, WorkloadArg::InitialLoad, |_| {});
    assert_contains_all(
        &error,
        &[
            &format!("scripthash {}", chain.scripthash(0)),
            "notification: status",
        ],
    );
}

#[test]
fn liar_fails_while_honest_server_is_still_reported() {
    let chain = Arc::new(chain());
    let honest = start(Arc::clone(&chain), Lie::None, "Honest 1.0");
    let liar = start(Arc::clone(&chain), Lie::WrongTx, "Liar 1.0");
    let dir = tempfile::tempdir().unwrap();
    let manifest = chain.save_manifest(dir.path());
    let out = dir.path().join("out");

    let error = format!(
        "{:#}",
        run(args(
            vec![liar.clone(), honest.clone()],
            &manifest,
            &out,
            WorkloadArg::All
        ))
        .unwrap_err()
    );
    assert!(error.contains("1 of 2 servers failed"), "{error}");
    assert!(error.contains(&liar) && !error.contains(&honest), "{error}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains(&format!("**Liar 1.0 ({liar})** FAILED")),
        "{md}"
    );
    // The liar passed initial load, but a server that answers wrongly is never "faster".
    assert!(!md.contains("## Comparison"), "{md}");
    let honest_row = md
        .lines()
        .find(|l| l.starts_with(&format!("| Honest 1.0 ({honest})")))
        .expect("honest row");
    assert!(
        !honest_row.contains("FAILED") && !honest_row.contains('–'),
        "{honest_row}"
    );
}

#[test]
fn unreachable_server_fails_clearly() {
    let chain = Arc::new(chain());
    let address = closed_port();
    let dir = tempfile::tempdir().unwrap();
    let manifest = chain.save_manifest(dir.path());
    let error = format!(
        "{:#}",
        run(args(
            vec![address.clone()],
            &manifest,
            &dir.path().join("out"),
            WorkloadArg::All
        ))
        .unwrap_err()
    );
    assert!(
        error.contains(&format!("{address}: cannot connect")),
        "{error}"
    );
}

#[test]
fn bad_manifest_is_refused_before_connecting() {
    let mut chain = chain();
    chain.manifest.wallet.addresses[0].history[0].1 = 99;
    let dir = tempfile::tempdir().unwrap();
    let manifest = chain.save_manifest(dir.path());
    let error = format!(
        "{:#}",
        run(args(
            vec![closed_port()],
            &manifest,
            &dir.path().join("out"),
            WorkloadArg::All
        ))
        .unwrap_err()
    );
    assert!(
        error.contains("manifest") && error.contains("height 99"),
        "{error}"
    );
}

#[test]
fn sp_scans_need_receivers_in_the_manifest() {
    let chain = chain();
    let dir = tempfile::tempdir().unwrap();
    let manifest = chain.save_manifest(dir.path());
    let mut args = args(
        vec![closed_port()],
        &manifest,
        &dir.path().join("out"),
        WorkloadArg::ManyWallets,
    );
    args.sp_scans = 2;
    let error = format!("{:#}", run(args).unwrap_err());
    assert!(
        error.contains("--sp-scans 2") && error.contains("--sp-share"),
        "{error}"
    );
}

#[test]
fn sp_scans_refuse_a_server_that_does_not_scan() {
    let mut chain = chain();
    chain.manifest.silent_payments = Some(vec![SilentPaymentReceiver {
        scan_private_key: "11".repeat(32),
        spend_public_key: format!("02{}", "22".repeat(32)),
        address: "sprt1qfake".into(),
        labels: vec![],
        payments: vec![],
    }]);
    let chain = Arc::new(chain);
    let server = start(Arc::clone(&chain), Lie::None, "FakeElectrum 1.0");
    let dir = tempfile::tempdir().unwrap();
    let manifest = chain.save_manifest(dir.path());
    let out = dir.path().join("out");
    let mut args = args(
        vec![server.clone()],
        &manifest,
        &out,
        WorkloadArg::ManyWallets,
    );
    args.sp_scans = 1;
    let error = format!("{:#}", run(args).unwrap_err());
    assert_contains_all(
        &error,
        &[
            &server,
            "server.features",
            "\"silent_payments\"",
            "--sp-scans 1",
        ],
    );
    // Refused before measuring: a run without its scans would be taken for
    // one with them.
    assert!(json_files(&out).is_empty(), "{:?}", json_files(&out));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("FAILED"), "{md}");
}
