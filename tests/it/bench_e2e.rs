//! The benchmark pipeline end to end with the real binary: `osprey
//! chaingen` writes a chain, `osprey chaingen submit` feeds it to btcd,
//! `osprey serve` indexes it, and `osprey bench` measures the server with
//! every answer checked against the manifest, writing its reports.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::common::command::{
    generate_chain, generate_sp_chain, run_osprey, submit_chain, CommandOutput,
};
use crate::common::{start_btcd, Osprey, OspreyConfig};

/// 1. `osprey chaingen --preset tiny --seed 7 --out DIR/chain`.
/// 2. Start btcd and `osprey chaingen submit` the chain into it.
/// 3. Start osprey on it; wait until it serves the chain's tip.
/// 4. `osprey bench --server 127.0.0.1:PORT --manifest DIR/chain/manifest.json
///    --out DIR/bench --runs 1 --wallets 2` succeeds.
/// 5. DIR/bench holds a JSON record per workload and run, each about this
///    server and marked ok, and a Markdown report with this server's row.
#[test]
fn chaingen_submit_serve_and_bench_end_to_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 1.
    let (chain, manifest) = generate_chain(dir.path(), &["--preset", "tiny", "--seed", "7"]);
    assert_eq!(manifest.seed, 7);
    // 2.
    let node = start_btcd();
    submit_chain(dir.path(), &chain, &node);
    // 3.
    let osprey = Osprey::start(&node, &dir.path().join("db"), OspreyConfig::default());
    // 4.
    let server = osprey.addr().to_string();
    let (out, output) = bench_once(dir.path(), &server, &chain, &["--runs", "1"]);
    // 5.
    let mut records = Vec::new();
    let mut reports = Vec::new();
    for entry in std::fs::read_dir(&out).expect("reading the bench output") {
        let path = entry.expect("dir entry").path();
        match path.extension().and_then(|e| e.to_str()) {
            Some("json") => records.push(path),
            Some("md") => reports.push(path),
            _ => {}
        }
    }
    assert!(
        !records.is_empty(),
        "no JSON record in {}; bench said:\n{}",
        out.display(),
        output.stderr
    );
    let slug = server.replace(':', "-");
    for path in &records {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("file name");
        assert!(
            name.starts_with(&slug),
            "record {name} is not about {server}"
        );
        let record: Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("reading a record"))
                .expect("record JSON");
        assert_eq!(record["ok"], Value::Bool(true), "{name}: {record}");
    }
    assert_eq!(reports.len(), 1, "one Markdown report: {reports:?}");
    let report = std::fs::read_to_string(&reports[0]).expect("reading the report");
    let row = report
        .lines()
        .find(|l| l.starts_with('|') && l.contains(&server));
    let row = row.unwrap_or_else(|| panic!("no table row for {server} in the report:\n{report}"));
    assert!(
        row.contains("Osprey"),
        "the row names the server's software: {row}"
    );
}

/// Runs `osprey bench --server SERVER --manifest CHAIN/manifest.json --out
/// DIR/bench --wallets 2` with `extra` flags, which must succeed; returns
/// the output directory and what the command printed.
fn bench_once(dir: &Path, server: &str, chain: &Path, extra: &[&str]) -> (PathBuf, CommandOutput) {
    let out = dir.join("bench");
    let manifest = chain.join("manifest.json");
    let mut args = vec![
        "bench",
        "--server",
        server,
        "--manifest",
        manifest.to_str().expect("utf-8 path"),
        "--out",
        out.to_str().expect("utf-8 path"),
        "--wallets",
        "2",
    ];
    args.extend_from_slice(extra);
    let output = run_osprey(dir, &args, Duration::from_secs(300), true);
    assert!(output.status.success());
    (out, output)
}

/// Runs `osprey bench index --chain CHAIN --out DIR/index --runs 1` with
/// `extra` flags; returns the output directory and the run's JSON record.
fn bench_index_once(dir: &Path, chain: &Path, extra: &[&str]) -> (PathBuf, Value) {
    let out = dir.join("index");
    let mut args = vec![
        "bench",
        "index",
        "--chain",
        chain.to_str().expect("utf-8 path"),
        "--out",
        out.to_str().expect("utf-8 path"),
        "--runs",
        "1",
    ];
    args.extend_from_slice(extra);
    let output = run_osprey(dir, &args, Duration::from_secs(300), true);
    assert!(output.status.success());
    let record = read_json(&out.join("index.run1.json"));
    (out, record)
}

fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// 1. `osprey chaingen --preset tiny --seed 3 --out DIR/chain`.
/// 2. `osprey bench index --chain DIR/chain --out DIR/index --runs 1`
///    indexes it from an empty database in a child `osprey index`.
/// 3. The run's JSON record says ok and reached the manifest's tip with all
///    of its transactions; the Markdown and SVG reports exist.
#[test]
fn bench_index_measures_a_full_index_build() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 1.
    let (chain, manifest) = generate_chain(dir.path(), &["--preset", "tiny", "--seed", "3"]);
    // 2.
    let (out, record) = bench_index_once(dir.path(), &chain, &[]);
    // 3.
    assert_eq!(record["ok"], Value::Bool(true), "{record}");
    assert_eq!(
        record["final_height"],
        Value::from(manifest.tip_height),
        "{record}"
    );
    let md = std::fs::read_to_string(out.join("index.md")).expect("index.md written");
    assert!(md.contains("Transactions/s"), "{md}");
    assert!(out.join("index.svg").exists());
    // The indexer measured is named with the index format it writes (its
    // `--version`), so that reports of different formats are not compared
    // unawares.
    let format = format!("(index format {})", osprey_store::SCHEMA_VERSION);
    assert!(
        record["indexer"]["version"]
            .as_str()
            .is_some_and(|v| v.ends_with(&format)),
        "{record}"
    );
}

/// 1. `osprey chaingen --preset tiny --seed 5 --sp-share 0.5` writes a
///    chain paying silent payments.
/// 2. `osprey bench index --silent-payments --keep-db --runs 1` indexes it
///    with silent payments on: the run counts the eligible transactions and
///    sizes sptweaks.dat and spoffsets.dat, and the report shows them.
/// 3. `osprey bench sp-scan` scans the kept index for every receiver of the
///    manifest, finding every payment and no other.
#[test]
fn bench_index_and_sp_scan_with_silent_payments() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 1.
    let (chain, manifest, receivers) = generate_sp_chain(dir.path(), "5", "0.5");
    // A transaction may pay two receivers: it is one eligible transaction.
    let paying: std::collections::BTreeSet<&str> = receivers
        .iter()
        .flat_map(|r| r.payments.iter().map(|p| p.txid.as_str()))
        .collect();
    assert!(!paying.is_empty(), "the chain pays silent payments");
    // 2.
    let (out, record) = bench_index_once(dir.path(), &chain, &["--keep-db", "--silent-payments"]);
    assert_eq!(record["ok"], Value::Bool(true), "{record}");
    assert_eq!(record["silent_payments"], Value::Bool(true), "{record}");
    // Every paying transaction is eligible; other transactions spending
    // key-hash or taproot coins to taproot outputs are too.
    let eligible = record["sp_records"].as_u64().expect("sp_records");
    assert!(
        eligible as usize >= paying.len(),
        "{eligible} < {}",
        paying.len()
    );
    let offsets = record["sp_files"]["offsets_bytes"].as_u64();
    assert_eq!(offsets, Some(8 * (u64::from(manifest.tip_height) + 1)));
    let tweaks = record["sp_files"]["tweaks_bytes"]
        .as_u64()
        .expect("tweaks_bytes");
    // 98 bytes and a prefix per taproot output at least (3.2).
    assert!(
        tweaks >= 99 * eligible,
        "{tweaks} bytes for {eligible} records"
    );
    let md = std::fs::read_to_string(out.join("index.md")).expect("index.md written");
    assert!(md.contains("| Bytes per eligible transaction |"), "{md}");
    // 3. osprey-tools is not rebuilt with the `short-prefixes` test feature:
    // it would read the 1-byte prefixes of that build's index as 4 bytes.
    if cfg!(feature = "short-prefixes") {
        return;
    }
    let db_dir = record["db_dir"].as_str().expect("the kept database");
    let scan_out = dir.path().join("sp-scan");
    let output = run_osprey(
        dir.path(),
        &[
            "bench",
            "sp-scan",
            "--chain",
            chain.to_str().expect("utf-8 path"),
            "--db-dir",
            db_dir,
            "--out",
            scan_out.to_str().expect("utf-8 path"),
            "--runs",
            "1",
            "--chunk-records",
            "7",
        ],
        Duration::from_secs(300),
        true,
    );
    assert!(output.status.success());
    let scans = read_json(&scan_out.join("sp-scan.json"));
    let phases = scans["runs"][0]["phases"].as_array().expect("phases");
    assert_eq!(phases.len(), 2, "one scan at a time, then two: {scans}");
    for phase in phases {
        let scans = phase["scans"].as_array().expect("scans");
        assert_eq!(scans.len(), receivers.len(), "{phase}");
        for (scan, receiver) in scans.iter().zip(&receivers) {
            assert_eq!(scan["records"].as_u64(), Some(eligible), "{scan}");
            assert_eq!(
                scan["matches"].as_u64(),
                Some(receiver.payments.len() as u64),
                "{scan}"
            );
        }
    }
    let md = std::fs::read_to_string(scan_out.join("sp-scan.md")).expect("sp-scan.md written");
    assert!(md.contains("records per CPU-second"), "{md}");
}

/// 1. `osprey chaingen --preset tiny --seed 5 --sp-share 0.5` writes a
///    chain paying silent payments; btcd gets it, osprey serves it with
///    `--silent-payments`.
/// 2. `osprey bench --workload many-wallets --runs 3 --sp-scans 2` runs the
///    wallets while two sessions scan for the manifest's receivers, each
///    subscribing again when its scan ends, and succeeds: every scan that
///    reached progress 1.0 listed exactly its receiver's payments.
/// 3. Each run's record says two scan sessions ran during it; the report's
///    scan table shows completed scans and the entries received, which a
///    completed scan of either receiver brings.
#[test]
fn bench_with_silent_payment_scans_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 1.
    let (chain, _, receivers) = generate_sp_chain(dir.path(), "5", "0.5");
    let fewest_payments = receivers[..2.min(receivers.len())]
        .iter()
        .map(|r| r.payments.len() as u64)
        .min()
        .expect("receivers");
    assert!(fewest_payments > 0, "both scanned receivers are paid");
    let node = start_btcd();
    submit_chain(dir.path(), &chain, &node);
    let osprey = Osprey::start(
        &node,
        &dir.path().join("db"),
        OspreyConfig::with_args(&["--silent-payments"]),
    );
    // 2.
    let server = osprey.addr().to_string();
    let (out, _) = bench_once(
        dir.path(),
        &server,
        &chain,
        &[
            "--workload",
            "many-wallets",
            "--runs",
            "3",
            // One request per batch: runs long enough for a scan of the
            // tiny chain (a few hundred records, milliseconds) to end in.
            "--batch",
            "1",
            "--sp-scans",
            "2",
            // Each session completes a scan even when the tests beside
            // this one keep the cores busy (scans take only idle CPU).
            "--sp-scans-to-end",
        ],
    );
    // 3.
    let slug = server.replace(':', "-");
    for run in ["cold", "run1", "run2", "run3"] {
        let record = read_json(&out.join(format!("{slug}.many-wallets.{run}.json")));
        assert_eq!(record["ok"], Value::Bool(true), "{record}");
        assert_eq!(record["sp_scans"]["sessions"], 2, "{record}");
    }
    let report = std::fs::read_to_string(out.join("report.md")).expect("reading the report");
    assert!(
        report.contains("- Silent-payment scans: 2 sessions"),
        "{report}"
    );
    let row = report
        .lines()
        .skip_while(|l| !l.starts_with("## Silent-payment scans during the runs"))
        .find(|l| l.starts_with('|') && l.contains(&server))
        .unwrap_or_else(|| panic!("no scan row for {server}:\n{report}"));
    // | Server | Subscribes | Scans completed | Per run | Notifications | Entries | Progress at stop |
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    let number = |i: usize| -> u64 {
        cells[i]
            .parse()
            .unwrap_or_else(|e| panic!("cell {i} of {row}: {e}"))
    };
    let (subscribes, completed, entries) = (number(2), number(3), number(6));
    assert!(
        completed >= 2,
        "each of the 2 sessions completes a scan: {row}"
    );
    // Each session subscribes once, then again after each completed scan,
    // unless the bench stopped it first: `--sp-scans-to-end` stops the
    // sessions as soon as the last of them completes, often before either
    // has subscribed again.
    assert!(
        (completed..=completed + 2).contains(&subscribes),
        "{subscribes} subscribes for {completed} completed scans: {row}"
    );
    assert!(
        entries >= completed * fewest_payments,
        "{entries} entries for {completed} completed scans: {row}"
    );
}
