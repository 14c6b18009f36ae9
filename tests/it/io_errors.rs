//! Reads and writes of the index that fail with EIO, injected by an
//! LD_PRELOAD shim (`eio_shim.c`, compiled here with `cc`) at seeded
//! points: a failed write ends `osprey serve` with a clear error (never a
//! panic, never a silent skip), a failed read gives the wallet an error
//! (never a wrong answer), and after a restart without the faults the
//! index has the digest of a fresh build.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use osprey_testenv::{BtcdNode, Node as _};
use serde_json::{json, Value};

use crate::common::command::{generate_chain, index_digest, submit_chain};
use crate::common::session::RpcError;
use crate::common::{seed, start_btcd, Osprey, OspreyConfig, Rng, Session};

/// Runs by default, alternately writes during the first sync and reads at
/// the tip; `OSPREY_IO_ERROR_RUNS` sets how many.
const RUNS_DEFAULT: u64 = 2;

/// How long a run waits for the fault to show (the process's exit, or an
/// error answer).
const FAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Compiles the shim into `dir` and returns the library's path.
///
/// # Panics
/// When `cc` fails: the test needs a C compiler (Rust's linker is one).
pub(crate) fn build_shim(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/eio_shim.c");
    let library = dir.join("libeio_shim.so");
    let output = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&library)
        .arg(&source)
        .arg("-ldl")
        .output()
        .unwrap_or_else(|e| panic!("running cc to build the EIO shim: {e}"));
    assert!(
        output.status.success(),
        "cc {}: {}",
        source.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    library
}

/// `osprey serve` with the shim loaded: errors on `ops` ("r" or "w") of
/// files under `db`, one call in `one_in`, while `trigger` exists.
fn faulty_config(
    shim: &Path,
    db: &Path,
    trigger: &Path,
    ops: &str,
    one_in: u64,
    seed: u64,
) -> OspreyConfig {
    OspreyConfig {
        args: Vec::new(),
        env: vec![
            ("LD_PRELOAD".into(), shim.display().to_string()),
            ("EIO_SHIM_DIR".into(), format!("{}/", db.display())),
            ("EIO_SHIM_TRIGGER".into(), trigger.display().to_string()),
            ("EIO_SHIM_OPS".into(), ops.into()),
            ("EIO_SHIM_ONE_IN".into(), one_in.to_string()),
            ("EIO_SHIM_SEED".into(), seed.to_string()),
        ],
        ..OspreyConfig::default()
    }
}

/// What each wallet address of `manifest` answers: its history, its
/// balance and its count of unspent outputs, by script hash.
fn expected_answers(
    manifest: &osprey_chaingen::Manifest,
) -> HashMap<String, (Value, Value, usize)> {
    manifest
        .wallet
        .addresses
        .iter()
        .map(|address| {
            let history: Vec<Value> = address
                .history
                .iter()
                .map(|(txid, height)| json!({"tx_hash": txid, "height": height}))
                .collect();
            let balance = json!({"confirmed": address.balance, "unconfirmed": 0});
            (
                address.scripthash.clone(),
                (Value::Array(history), balance, address.utxo_count as usize),
            )
        })
        .collect()
}

/// One wallet question about `scripthash` (its history, balance or
/// unspent outputs, by `which`): `Some(error)` when the server answered
/// with an error, `None` when it answered exactly what `want` says.
///
/// # Panics
/// On any other answer.
fn ask(
    session: &mut Session,
    scripthash: &str,
    want: &(Value, Value, usize),
    which: usize,
) -> Option<RpcError> {
    let method = [
        "blockchain.scripthash.get_history",
        "blockchain.scripthash.get_balance",
        "blockchain.scripthash.listunspent",
    ][which % 3];
    match session.raw_call(method, json!([scripthash])) {
        Ok(answer) => {
            let right = match which % 3 {
                0 => answer == want.0,
                1 => answer == want.1,
                _ => answer.as_array().map(Vec::len) == Some(want.2),
            };
            assert!(right, "{method} of {scripthash} answered {answer}");
            None
        }
        Err(e) => Some(e),
    }
}

/// Asserts that the last run of the log at `log` ended on a clear error
/// naming the failed I/O, without a panic.
fn assert_clear_exit(log: &str, status: std::process::ExitStatus) {
    assert!(
        !status.success(),
        "osprey exited with {status} after an I/O error"
    );
    assert!(!log.contains("panicked"), "osprey panicked:\n{log}");
    let last = log
        .lines()
        .rev()
        .find(|l| l.contains("ERROR"))
        .unwrap_or_default();
    assert!(
        last.contains("Input/output error")
            || last.contains("I/O error")
            || last.contains("IO error"),
        "the last error names the failed I/O: {last}"
    );
    eprintln!("exited with {status}: {last}");
}

/// Writes fail during the first sync (or, when it finished first, at the
/// next block): the process ends with a clear error.
fn write_run(
    node: &BtcdNode,
    shim: &Path,
    dir: &Path,
    run: u64,
    one_in: u64,
    seed: u64,
) -> PathBuf {
    let db = dir.join(format!("db-{run}"));
    let trigger = dir.join(format!("trigger-{run}"));
    let mut osprey = Osprey::spawn(
        node,
        &db,
        faulty_config(shim, &db, &trigger, "w", one_in, seed),
    );
    osprey.wait_log_line("the first sync's start", FAULT_TIMEOUT, |l| {
        l.contains("indexed height")
    });
    std::fs::write(&trigger, b"").expect("the trigger");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = osprey.wait_exit(Duration::from_millis(200)) {
            break status;
        }
        assert!(
            started.elapsed() < FAULT_TIMEOUT,
            "osprey still runs with failing writes"
        );
        node.generate(1).expect("mining");
    };
    std::fs::remove_file(&trigger).expect("removing the trigger");
    assert_clear_exit(&osprey.log(), status);
    db
}

/// Reads fail at the tip: every wallet question gets the manifest's
/// answer or an error, and some get an error.
fn read_run(
    node: &BtcdNode,
    shim: &Path,
    dir: &Path,
    run: u64,
    one_in: u64,
    seed: u64,
    expected: &HashMap<String, (Value, Value, usize)>,
) -> PathBuf {
    let db = dir.join(format!("db-{run}"));
    let trigger = dir.join(format!("trigger-{run}"));
    let mut osprey = Osprey::spawn(
        node,
        &db,
        faulty_config(shim, &db, &trigger, "r", one_in, seed),
    );
    osprey.wait_ready(node);
    let mut session = osprey.session();
    session.negotiate(json!("1.4"));
    std::fs::write(&trigger, b"").expect("the trigger");
    let (mut errors, mut answers) = (0, 0);
    let started = Instant::now();
    'asking: while errors == 0 || answers < 300 {
        for (scripthash, want) in expected {
            // The server may exit on a failed read of its own (the
            // tracker's): that must be a clear error too.
            if !osprey.is_running() {
                break 'asking;
            }
            match ask(&mut session, scripthash, want, answers + errors) {
                None => answers += 1,
                Some(e) => {
                    if errors == 0 {
                        eprintln!("run {run}: the first error answer: {e:?}");
                    }
                    errors += 1;
                }
            }
        }
        assert!(
            started.elapsed() < FAULT_TIMEOUT,
            "{errors} errors in {answers} answers after {FAULT_TIMEOUT:?}"
        );
    }
    std::fs::remove_file(&trigger).expect("removing the trigger");
    eprintln!(
        "run {run}: {answers} right answers and {errors} errors with one read in {one_in} failing"
    );
    if osprey.is_running() {
        assert!(errors > 0, "no failed read reached a wallet");
        for (scripthash, want) in expected {
            for which in 0..3 {
                let error = ask(&mut session, scripthash, want, which);
                assert!(error.is_none(), "{error:?} once reads work again");
            }
        }
        let status = osprey.terminate();
        assert!(status.success(), "osprey exited with {status} on SIGTERM");
    } else {
        let status = osprey.wait_exit(Duration::from_secs(5)).expect("it exited");
        assert_clear_exit(&osprey.log(), status);
    }
    db
}

/// Runs with EIO injected at seeded points (replay with OSPREY_IT_SEED;
/// `OSPREY_IO_ERROR_RUNS` sets how many):
/// 1. a chaingen chain in btcd; the shim built;
/// 2. even runs: writes fail (one in 1-20) once the first sync started:
///    `osprey serve` exits with an error naming the failed I/O, no panic;
/// 3. odd runs: reads fail (one in 2-10) at the tip: each wallet question
///    (history, balance, unspent outputs) gets the manifest's answer or an
///    error, never another answer; if
///    the server exits on a failed read of its own, with a clear error;
/// 4. restarted without faults, it reaches the tip, and `osprey index
///    --digest` on its index equals a fresh index's digest.
#[test]
fn io_errors_give_clear_errors_never_wrong_answers_and_restarts_recover() {
    let seed = seed("io_errors");
    let mut rng = Rng::new(seed);
    let runs: u64 = std::env::var("OSPREY_IO_ERROR_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(RUNS_DEFAULT);
    let dir = tempfile::tempdir().expect("tempdir");
    let shim = build_shim(dir.path());
    let chain_seed = (seed % 1000).to_string();
    let (chain, manifest) = generate_chain(
        dir.path(),
        &[
            "--preset",
            "tiny",
            "--seed",
            &chain_seed,
            "--blocks",
            "2000",
        ],
    );
    let node = start_btcd();
    submit_chain(dir.path(), &chain, &node);
    let expected = expected_answers(&manifest);
    let mut fresh: HashMap<String, String> = HashMap::new();
    for run in 0..runs {
        let fault_seed = rng.next_u64() % 1000;
        let db = if run % 2 == 0 {
            let one_in = 1 + rng.below(20);
            eprintln!("run {run}: writes fail, one in {one_in}");
            write_run(&node, &shim, dir.path(), run, one_in, fault_seed)
        } else {
            let one_in = 2 + rng.below(9);
            eprintln!("run {run}: reads fail, one in {one_in}");
            read_run(&node, &shim, dir.path(), run, one_in, fault_seed, &expected)
        };
        let mut restarted = Osprey::spawn(&node, &db, OspreyConfig::default());
        restarted.wait_ready(&node);
        let status = restarted.terminate();
        assert!(status.success(), "osprey exited with {status} on SIGTERM");
        let (height, hash, digest) = index_digest(&node, dir.path(), &db, &[]);
        let want = fresh.entry(hash.clone()).or_insert_with(|| {
            let fresh_db = dir.path().join(format!("db-fresh-{run}"));
            let (_, fresh_hash, digest) = index_digest(&node, dir.path(), &fresh_db, &[]);
            assert_eq!(fresh_hash, hash, "the node moved");
            digest
        });
        assert_eq!(
            &digest, want,
            "run {run}: the index at {height} after the faults differs from a fresh one"
        );
        eprintln!("run {run}: restarted, digest at {height} equals a fresh index's");
    }
}
