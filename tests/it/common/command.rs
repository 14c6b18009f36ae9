//! One-shot `osprey` subcommands (`chaingen`, `chaingen submit`, `bench`)
//! run to completion with a time limit, their output kept in files and
//! shown when they fail.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use osprey_chaingen::manifest::SilentPaymentReceiver;
use osprey_chaingen::Manifest;
use osprey_testenv::{Node, NodeKind};

/// `osprey index --digest` on `db` (with the flags `extra`, e.g.
/// `--silent-payments`): catches up to the node's tip and returns `(height,
/// tip hash, digest)`. Bitcoin Core is reached as its users do (the cookie
/// and the block files through `--daemon-dir`), btcd with its password.
pub fn index_digest(
    node: &dyn Node,
    dir: &Path,
    db: &Path,
    extra: &[&str],
) -> (u64, String, String) {
    let rpc = node.rpc_addr().to_string();
    let (user, pass) = node.auth();
    let credentials = match node.kind() {
        NodeKind::Bitcoind => [
            "--daemon-dir".to_string(),
            node.datadir().display().to_string(),
        ],
        NodeKind::Btcd => ["--auth".to_string(), format!("{user}:{pass}")],
    };
    let db = db.display().to_string();
    let mut args = vec![
        "index",
        "--network",
        "regtest",
        "--daemon-rpc-addr",
        &rpc,
        &credentials[0],
        &credentials[1],
        "--db-dir",
        &db,
        "--log-filter",
        "warn",
        "--digest",
    ];
    args.extend_from_slice(extra);
    let out = run_osprey(dir, &args, crate::common::SYNC_TIMEOUT, true);
    let line: serde_json::Value = serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("osprey index --digest printed {:?}: {e}", out.stdout));
    (
        line["height"].as_u64().expect("height"),
        line["hash"].as_str().expect("hash").to_string(),
        line["digest"].as_str().expect("digest").to_string(),
    )
}

/// Bytes of silent-payment records in the regtest index under `db` (0
/// without the file): a test that turns them on checks that its chain
/// really has eligible transactions.
pub fn sp_record_bytes(db: &Path) -> u64 {
    std::fs::metadata(db.join("regtest").join("sptweaks.dat")).map_or(0, |m| m.len())
}

/// What a finished command printed.
pub struct CommandOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `osprey ARGS` in `dir` and waits at most `timeout`.
///
/// # Panics
/// When it cannot start, outlives `timeout` (it is then killed), or exits
/// with an error while `must_succeed`.
pub fn run_osprey(
    dir: &Path,
    args: &[&str],
    timeout: Duration,
    must_succeed: bool,
) -> CommandOutput {
    let out_path = dir.join(format!("cmd-{}.out", std::process::id()));
    let err_path = dir.join(format!("cmd-{}.err", std::process::id()));
    let out = std::fs::File::create(&out_path).expect("creating the stdout file");
    let err = std::fs::File::create(&err_path).expect("creating the stderr file");
    let mut command = Command::new(env!("CARGO_BIN_EXE_osprey"));
    command
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("OSPREY_") {
            command.env_remove(key);
        }
    }
    let started = Instant::now();
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("starting osprey {args:?}: {e}"));
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting on osprey") {
            break status;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "osprey {args:?} still ran after {timeout:?}; stderr:\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = CommandOutput {
        status,
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
    };
    eprintln!("osprey {args:?}: {status} in {:.1?}", started.elapsed());
    if must_succeed && !status.success() {
        panic!(
            "osprey {args:?} failed with {status}\nstdout:\n{}\nstderr:\n{}",
            output.stdout, output.stderr
        );
    }
    output
}

/// Generates a chain with `osprey chaingen --out DIR/chain ARGS` and
/// returns its directory and manifest.
pub fn generate_chain(dir: &Path, args: &[&str]) -> (PathBuf, Manifest) {
    let chain = dir.join("chain");
    let mut all = vec!["chaingen", "--out", chain.to_str().expect("utf-8 path")];
    all.extend_from_slice(args);
    run_osprey(dir, &all, Duration::from_secs(300), true);
    let manifest = Manifest::load(&chain)
        .unwrap_or_else(|e| panic!("reading {}/manifest.json: {e}", chain.display()));
    (chain, manifest)
}

/// Generates a tiny chain of `seed` in which a share `sp_share` of the
/// transactions that can pay silent payments does; returns its directory,
/// manifest and the receivers the manifest lists.
pub fn generate_sp_chain(
    dir: &Path,
    seed: &str,
    sp_share: &str,
) -> (PathBuf, Manifest, Vec<SilentPaymentReceiver>) {
    let (chain, manifest) = generate_chain(
        dir,
        &["--preset", "tiny", "--seed", seed, "--sp-share", sp_share],
    );
    let receivers = manifest
        .silent_payments
        .clone()
        .expect("a chain with silent payments");
    (chain, manifest, receivers)
}

/// Feeds a generated chain to `node` with `osprey chaingen submit`.
pub fn submit_chain(dir: &Path, chain: &Path, node: &dyn Node) {
    let (user, pass) = node.auth();
    let auth = format!("{user}:{pass}");
    let rpc = node.rpc_addr().to_string();
    run_osprey(
        dir,
        &[
            "chaingen",
            "submit",
            "--dir",
            chain.to_str().expect("utf-8 path"),
            "--daemon-rpc-addr",
            &rpc,
            "--auth",
            &auth,
        ],
        Duration::from_secs(300),
        true,
    );
}
