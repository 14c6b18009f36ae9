//! The index's disk fills up: during the first sync, during a block at the
//! tip, and during `osprey snapshot import`, each on a tmpfs of its own
//! filled by a file at a seeded point. Osprey says so in one line (the
//! path, the bytes free and needed), keeps answering from what it has
//! committed, resumes by itself once the file is deleted, and its index
//! then has the digest of a fresh build of the same chain.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use osprey_testenv::{BtcdNode, Node as _};
use serde_json::{json, Value};

use crate::common::command::{generate_chain, index_digest, run_osprey, submit_chain};
use crate::common::small_fs::SmallFilesystem;
use crate::common::{seed, start_btcd, Osprey, OspreyConfig, Rng, SYNC_TIMEOUT};

/// Blocks of the generated chain: enough rows that the first sync commits
/// in several batches, and an index of a few MB, so that fill points spread
/// over the sync.
const CHAIN_BLOCKS: &str = "4000";

/// Runs by default, one of each kind; `OSPREY_DISK_FULL_RUNS=20` for the
/// issue's twenty (a few seconds each).
const RUNS_DEFAULT: u64 = 3;

/// How long Osprey has to notice a full disk, or to resume once it has
/// room (it checks at most every second here).
const NOTICE_TIMEOUT: Duration = Duration::from_secs(60);

/// The line a full disk gets.
const DISK_FULL: &str = "disk full: the index in ";

#[derive(Clone, Copy, Debug)]
enum FillAt {
    /// The first sync runs out of room after `keep` bytes.
    FirstSync { keep: u64 },
    /// At the tip, blocks are mined until one finds `keep` bytes too few.
    Tip { keep: u64 },
    /// An import runs out of room after `keep` bytes.
    Import { keep: u64 },
}

/// What the runs share: the node and its chain, the fresh index's size,
/// a snapshot of it, and fresh digests by tip hash.
struct Bench {
    dir: tempfile::TempDir,
    node: BtcdNode,
    manifest: osprey_chaingen::Manifest,
    index_bytes: u64,
    /// Bytes an empty index takes once opened (RocksDB's manifest, options
    /// and log): a first sync's fill point leaves at least these.
    opened_bytes: u64,
    snapshot: PathBuf,
    snapshot_bytes: u64,
    fresh_digests: HashMap<String, String>,
}

impl Bench {
    fn new(seed: u64) -> Bench {
        let dir = tempfile::tempdir().expect("tempdir");
        let chain_seed = (seed % 1000).to_string();
        let (chain, manifest) = generate_chain(
            dir.path(),
            &[
                "--preset",
                "tiny",
                "--seed",
                &chain_seed,
                "--blocks",
                CHAIN_BLOCKS,
            ],
        );
        let node = start_btcd();
        submit_chain(dir.path(), &chain, &node);
        let fresh_db = dir.path().join("db-fresh");
        let (_, hash, digest) = index_digest(&node, dir.path(), &fresh_db, &[]);
        let index_bytes = dir_bytes(&fresh_db);
        let out = dir.path().display().to_string();
        let mut args = vec!["snapshot", "export", "--out", &out];
        let flags = node_flags(&node, &fresh_db);
        args.extend(flags.iter().map(String::as_str));
        run_osprey(dir.path(), &args, SYNC_TIMEOUT, true);
        let (height, _) = node.tip().expect("tip");
        let snapshot = dir.path().join(format!("osprey-regtest-{height}.tar"));
        let snapshot_bytes = std::fs::metadata(&snapshot).expect("the snapshot").len();
        let probe = SmallFilesystem::mount(&dir.path().join("fs-probe"), 64 << 20);
        let free = probe.free();
        let store = osprey_store::Store::open(
            &probe.path().join("regtest"),
            "regtest",
            osprey_store::StoreConfig::default(),
        )
        .expect("opening an empty index");
        let opened_bytes = free - probe.free();
        drop(store);
        drop(probe);
        eprintln!(
            "fresh index: {index_bytes} bytes; snapshot: {snapshot_bytes} bytes; an empty index: {opened_bytes} bytes"
        );
        Bench {
            dir,
            node,
            manifest,
            index_bytes,
            opened_bytes,
            snapshot,
            snapshot_bytes,
            fresh_digests: HashMap::from([(hash, digest)]),
        }
    }

    /// The digest of a fresh index at the node's tip `hash`, built once.
    fn fresh_digest(&mut self, height: u64, hash: &str) -> String {
        if let Some(digest) = self.fresh_digests.get(hash) {
            return digest.clone();
        }
        let db = self.dir.path().join(format!("db-fresh-{height}"));
        let (fresh_height, fresh_hash, digest) =
            index_digest(&self.node, self.dir.path(), &db, &[]);
        assert_eq!(
            (fresh_height, fresh_hash.as_str()),
            (height, hash),
            "the node moved"
        );
        let _ = std::fs::remove_dir_all(&db);
        self.fresh_digests.insert(hash.to_string(), digest.clone());
        digest
    }

    /// A filesystem for one run's index: room for the index as a sync
    /// leaves it (uncompacted) and for the margin a resumed write asks.
    fn filesystem(&self, run: u64) -> SmallFilesystem {
        let bytes = 3 * self.index_bytes.max(self.snapshot_bytes) + (96 << 20);
        SmallFilesystem::mount(&self.dir.path().join(format!("fs-{run}")), bytes)
    }
}

/// The flags that point a one-shot command at `node` and `db`.
fn node_flags(node: &BtcdNode, db: &Path) -> Vec<String> {
    let (user, pass) = node.auth();
    vec![
        "--network".into(),
        "regtest".into(),
        "--daemon-rpc-addr".into(),
        node.rpc_addr().to_string(),
        "--auth".into(),
        format!("{user}:{pass}"),
        "--db-dir".into(),
        db.display().to_string(),
    ]
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let meta = entry.metadata().expect("metadata");
        total += if meta.is_dir() {
            dir_bytes(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

/// The flags of the runs' `osprey serve`: checks for room every second.
fn config() -> OspreyConfig {
    OspreyConfig::with_args(&["--disk-full-retry-max-secs", "1"])
}

/// The lines of `log` that report a full disk.
fn disk_full_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains(DISK_FULL)).collect()
}

/// Checks the one line a full disk got: the index's path, and bytes free
/// and needed.
fn assert_clear_line(line: &str, index: &Path) {
    let wanted = format!("{DISK_FULL}{} has ", index.display());
    assert!(
        line.contains(&wanted) && line.contains("iB free, about ") && line.contains("iB needed"),
        "the disk-full line names the index {} and the bytes: {line}",
        index.display()
    );
    assert!(
        line.contains("it resumes by itself once space is freed"),
        "the line says it resumes: {line}"
    );
}

/// Every wallet address of the chain's manifest answers its history as
/// the manifest lists it.
fn assert_wallet_answers(osprey: &Osprey, manifest: &osprey_chaingen::Manifest) {
    let mut session = osprey.session();
    session.negotiate(json!("1.4"));
    for address in &manifest.wallet.addresses {
        let history = session.call(
            "blockchain.scripthash.get_history",
            json!([address.scripthash]),
        );
        let want: Vec<Value> = address
            .history
            .iter()
            .map(|(txid, height)| json!({"tx_hash": txid, "height": height}))
            .collect();
        assert_eq!(
            history,
            Value::Array(want),
            "history of {}",
            address.address
        );
    }
}

/// One `osprey serve` run whose disk fills during its first sync or at the
/// tip; returns once its index, resumed and caught up, was compared with
/// a fresh one.
fn serve_run(bench: &mut Bench, run: u64, fill: FillAt) {
    let fs = bench.filesystem(run);
    let db = fs.path().to_path_buf();
    let index = db.join("regtest");
    let filler = match fill {
        FillAt::FirstSync { keep } => Some(fs.fill(keep)),
        _ => None,
    };
    let mut osprey = Osprey::spawn(&bench.node, &db, config());
    let filler = match fill {
        FillAt::Tip { keep } => {
            osprey.wait_ready(&bench.node);
            let filler = fs.fill(keep);
            // Blocks until one finds no room: each writes a few hundred
            // bytes through the WAL.
            let started = Instant::now();
            loop {
                if disk_full_lines(&osprey.log()).len() == 1 {
                    break;
                }
                assert!(
                    started.elapsed() < NOTICE_TIMEOUT,
                    "{keep} bytes free and no full disk after {NOTICE_TIMEOUT:?} of new blocks"
                );
                bench.node.generate(5).expect("mining");
                let (height, _) = bench.node.tip().expect("tip");
                wait_for_tip_or_full(&mut osprey, height.into());
            }
            filler
        }
        _ => filler.expect("filled before the start"),
    };
    let line = osprey.wait_log_line("the disk-full line", NOTICE_TIMEOUT, |l| {
        l.contains(DISK_FULL)
    });
    assert_clear_line(&line, &index);
    assert!(osprey.is_running(), "osprey runs on with a full disk");
    // What it serves meanwhile: at the tip, the committed index; during
    // the first sync, no wallet answer at all (never a partial one).
    osprey.wait_listening();
    let mut session = osprey.session();
    session.negotiate(json!("1.4"));
    match fill {
        FillAt::Tip { .. } => assert_wallet_answers(&osprey, &bench.manifest),
        _ => {
            let address = &bench.manifest.wallet.addresses[0];
            let answer = session.raw_call(
                "blockchain.scripthash.get_history",
                json!([address.scripthash]),
            );
            let full_history = answer.as_ref().is_ok_and(|history| {
                history.as_array().map(Vec::len) == Some(address.history.len())
            });
            assert!(
                answer.is_err() || full_history,
                "during the first sync a wallet gets an error or its whole history, not {answer:?}"
            );
        }
    }
    std::fs::remove_file(&filler).expect("deleting the filler");
    osprey.wait_log_line("writes resuming", NOTICE_TIMEOUT, |l| {
        l.contains("disk has room again")
    });
    osprey.wait_ready(&bench.node);
    let lines = disk_full_lines(&osprey.log()).len();
    assert_eq!(lines, 1, "one disk-full line, not {lines}");
    let status = osprey.terminate();
    assert!(status.success(), "osprey exited with {status} on SIGTERM");
    compare_with_fresh(bench, &db, fill);
}

/// Waits until the index serves `height` or the disk-full line appears.
fn wait_for_tip_or_full(osprey: &mut Osprey, height: u64) {
    let mut session = osprey.session();
    session.negotiate(json!("1.4"));
    let started = Instant::now();
    loop {
        let tip = session
            .raw_call("blockchain.headers.subscribe", json!([]))
            .unwrap_or_default();
        if tip["height"] == json!(height) || !disk_full_lines(&osprey.log()).is_empty() {
            return;
        }
        assert!(
            started.elapsed() < NOTICE_TIMEOUT,
            "the index neither reached {height} nor found the disk full"
        );
        assert!(
            osprey.is_running(),
            "osprey exited; log:\n{}",
            osprey.log_tail(60)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `osprey snapshot import` into a filesystem that fills after `keep`
/// bytes; the filler is deleted once it says so, and the import finishes.
fn import_run(bench: &mut Bench, run: u64, keep: u64) {
    let fs = bench.filesystem(run);
    let db = fs.path().to_path_buf();
    let index = db.join("regtest");
    let filler = fs.fill(keep);
    let log_path = bench.dir.path().join(format!("import-{run}.log"));
    let log = std::fs::File::create(&log_path).expect("the import's log");
    let from = bench.snapshot.display().to_string();
    let mut args = vec![
        "snapshot".to_string(),
        "import".into(),
        "--from".into(),
        from,
        "--disk-full-retry-max-secs".into(),
        "1".into(),
    ];
    args.extend(node_flags(&bench.node, &db));
    let mut child = ChildGuard(
        Command::new(env!("CARGO_BIN_EXE_osprey"))
            .args(&args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("starting osprey snapshot import"),
    );
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let started = Instant::now();
    let line = loop {
        if let Some(line) = disk_full_lines(&read_log()).first() {
            break line.to_string();
        }
        if let Some(status) = child.0.try_wait().expect("waiting on the import") {
            panic!(
                "the import ended with {status} before the disk-full line:\n{}",
                read_log()
            );
        }
        assert!(
            started.elapsed() < NOTICE_TIMEOUT,
            "no disk-full line from the import with {keep} bytes free:\n{}",
            read_log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_clear_line(&line, &index);
    assert!(
        child.0.try_wait().expect("waiting on the import").is_none(),
        "the import waits for room"
    );
    std::fs::remove_file(&filler).expect("deleting the filler");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("waiting on the import") {
            break status;
        }
        assert!(
            started.elapsed() < NOTICE_TIMEOUT,
            "the import did not finish after the filler was deleted:\n{}",
            read_log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = read_log();
    assert!(status.success(), "the import ended with {status}:\n{log}");
    assert!(log.contains("snapshot imported"), "{log}");
    let lines = disk_full_lines(&log).len();
    assert_eq!(lines, 1, "one disk-full line, not {lines}:\n{log}");
    compare_with_fresh(bench, &db, FillAt::Import { keep });
}

/// Kills the import if the test fails while it runs.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `osprey index --digest` on the run's index (catching up to the node's
/// tip) equals a fresh index's digest at that tip.
fn compare_with_fresh(bench: &mut Bench, db: &Path, fill: FillAt) {
    let (height, hash, digest) = index_digest(&bench.node, bench.dir.path(), db, &[]);
    let fresh = bench.fresh_digest(height, &hash);
    assert_eq!(
        digest, fresh,
        "{fill:?}: the index at {height} {hash} after the full disk differs from a fresh one"
    );
    eprintln!("{fill:?}: resumed, digest at {height} equals a fresh index's");
}

/// Runs of `osprey serve` and `osprey snapshot import` whose disk fills
/// at seeded points (replay with OSPREY_IT_SEED; `OSPREY_DISK_FULL_RUNS`
/// sets how many, in turn during the first sync, at the tip and during an
/// import):
/// 1. a chaingen chain in btcd, indexed fresh (its digest, its size) and
///    exported as a snapshot;
/// 2. each run on a tmpfs of its own, a filler leaving a seeded share (5
///    to 80%) of the index's (or the snapshot's) bytes free (and, for a
///    first sync, what opening an empty index takes), or, at the tip, a few KiB
///    before blocks are mined;
/// 3. one line names the index's path and the bytes free and needed; the
///    process runs on; at the tip every wallet address answers the
///    manifest's history, during the first sync no partial history;
/// 4. the filler deleted, it resumes by itself and reaches the tip (the
///    import finishes), with no second disk-full line;
/// 5. `osprey index --digest` on it equals a fresh index's digest.
#[test]
fn a_full_disk_is_reported_waited_out_and_loses_nothing() {
    let seed = seed("disk_full");
    let mut rng = Rng::new(seed);
    let runs: u64 = std::env::var("OSPREY_DISK_FULL_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(RUNS_DEFAULT);
    let mut bench = Bench::new(seed);
    for run in 0..runs {
        // A share of 5% to 80% of the bytes it will write.
        let share = |rng: &mut Rng, bytes: u64| bytes * (5 + rng.below(76)) / 100;
        let fill = match run % 3 {
            0 => FillAt::FirstSync {
                keep: bench.opened_bytes + share(&mut rng, bench.index_bytes),
            },
            1 => FillAt::Tip {
                keep: rng.below(16 << 10),
            },
            _ => FillAt::Import {
                keep: share(&mut rng, bench.snapshot_bytes),
            },
        };
        eprintln!("run {run}: {fill:?} (seed {seed})");
        let started = Instant::now();
        match fill {
            FillAt::Import { keep } => import_run(&mut bench, run, keep),
            _ => serve_run(&mut bench, run, fill),
        }
        eprintln!("run {run}: done in {:.1?}", started.elapsed());
    }
    eprintln!("{runs} runs, every index equal to a fresh one");
}
