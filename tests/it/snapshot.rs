//! `osprey snapshot export` and `import` against a real btcd: an imported
//! snapshot is the original index byte for byte and serves the same
//! answers once caught up; a damaged, cut, foreign or reorged-away
//! snapshot is refused with a clear error and leaves nothing in --db-dir.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bitcoin::Amount;
use osprey_testenv::{BtcdNode, Node, ScriptKind, TestWallet};

use crate::common::answers::{
    assert_chain_matches_node, assert_same_answers, collect_chain, wait_answers_match_node,
};
use crate::common::command::{run_osprey, CommandOutput};
use crate::common::{start_btcd, NodeView, Osprey, OspreyConfig};
use osprey_testenv::submit_block_on;

const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// The flags that point a command at `node`'s regtest chain and `db_dir`.
fn flags(node: &BtcdNode, db_dir: &Path) -> Vec<String> {
    let (user, pass) = node.auth();
    vec![
        "--network".into(),
        "regtest".into(),
        "--daemon-rpc-addr".into(),
        node.rpc_addr().to_string(),
        "--auth".into(),
        format!("{user}:{pass}"),
        "--db-dir".into(),
        db_dir.display().to_string(),
    ]
}

fn osprey(dir: &Path, command: &[&str], flags: &[String], must_succeed: bool) -> CommandOutput {
    let mut args: Vec<&str> = command.to_vec();
    args.extend(flags.iter().map(String::as_str));
    run_osprey(dir, &args, COMMAND_TIMEOUT, must_succeed)
}

/// Imports `snapshot` into `db_dir` and returns the command's output.
fn import(dir: &Path, node: &BtcdNode, db_dir: &Path, snapshot: &Path) -> CommandOutput {
    let from = snapshot.display().to_string();
    osprey(
        dir,
        &["snapshot", "import", "--from", &from],
        &flags(node, db_dir),
        false,
    )
}

/// Asserts that an import failed with a message containing `want`, and
/// that it left nothing in `db_dir`.
fn assert_refused(what: &str, output: &CommandOutput, want: &str, db_dir: &Path) {
    assert!(
        !output.status.success(),
        "{what}: the import succeeded\n{}",
        output.stderr
    );
    assert!(
        output.stderr.contains(want),
        "{what}: the error does not say {want:?}:\n{}",
        output.stderr
    );
    let left: Vec<_> = std::fs::read_dir(db_dir)
        .map(|dir| dir.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{what}: the import left {left:?} behind");
}

/// The digest and tip of the regtest index under `db_dir` (the store is
/// closed again on return).
fn digest_and_tip(db_dir: &Path) -> ([u8; 32], Option<(osprey_core::Height, bitcoin::BlockHash)>) {
    let store = osprey_store::Store::open(
        &db_dir.join("regtest"),
        "regtest",
        osprey_store::StoreConfig::default(),
    )
    .unwrap_or_else(|e| panic!("opening the index in {}: {e}", db_dir.display()));
    (store.digest().expect("digest"), store.tip())
}

/// Mines past segwit activation with a payment to a script of each kind.
fn node_with_payments() -> (BtcdNode, TestWallet) {
    let node = start_btcd();
    node.generate(440).expect("mining");
    let mut wallet = TestWallet::new();
    wallet.sync(&node).expect("wallet sync");
    pay_each_kind(&node, &mut wallet, 1_000_000);
    node.generate(1).expect("mining");
    wallet.sync(&node).expect("wallet sync");
    (node, wallet)
}

fn pay_each_kind(node: &dyn Node, wallet: &mut TestWallet, sats: u64) {
    for kind in ScriptKind::ALL {
        let script = wallet.new_script(kind);
        let tx = wallet
            .send(script, Amount::from_sat(sats))
            .expect("a payment");
        node.send_raw_transaction(&tx).expect("broadcast");
    }
}

/// Indexes the node's chain into `dir/db-orig` with `osprey index` and
/// exports it into `dir`; returns the snapshot's path.
fn index_and_export(dir: &Path, node: &BtcdNode) -> PathBuf {
    let db = dir.join("db-orig");
    osprey(dir, &["index"], &flags(node, &db), true);
    let out = dir.display().to_string();
    osprey(
        dir,
        &["snapshot", "export", "--out", &out],
        &flags(node, &db),
        true,
    );
    let (height, _) = node.tip().expect("tip");
    let snapshot = dir.join(format!("osprey-regtest-{height}.tar"));
    assert!(snapshot.exists(), "{} was written", snapshot.display());
    snapshot
}

/// 1. btcd past segwit, a payment to a script of each kind.
/// 2. osprey A serves the tip from db-a. While it runs, an export of db-a
///    is refused (a snapshot is taken from a stopped index).
/// 3. SIGTERM A; `snapshot export --out DIR` writes
///    `osprey-regtest-<tip>.tar`.
/// 4. `snapshot import` into an empty db-b succeeds; db-b's index has db-a's
///    digest and the node's tip.
/// 5. The chain moves on: blocks, payments, spends of earlier coins,
///    payments left in the mempool.
/// 6. Osprey B on db-b and A on db-a catch up; for every script the node
///    knows, B's answers equal the node's and A's, and so do the headers.
#[test]
fn imported_snapshot_equals_the_original_and_resumes() {
    // 1.
    let (node, mut wallet) = node_with_payments();
    let dir = tempfile::tempdir().expect("tempdir");
    let db_a = dir.path().join("db-a");
    let db_b = dir.path().join("db-b");
    // 2.
    let mut osprey_a = Osprey::start(&node, &db_a, OspreyConfig::default());
    let out = dir.path().display().to_string();
    let running = osprey(
        dir.path(),
        &["snapshot", "export", "--out", &out],
        &flags(&node, &db_a),
        false,
    );
    assert!(
        !running.status.success() && running.stderr.contains("stop osprey first"),
        "exporting a running index: {}\n{}",
        running.status,
        running.stderr
    );
    // 3.
    let status = osprey_a.terminate();
    assert!(status.success(), "osprey exited with {status} on SIGTERM");
    osprey(
        dir.path(),
        &["snapshot", "export", "--out", &out],
        &flags(&node, &db_a),
        true,
    );
    let (height, hash) = node.tip().expect("tip");
    let snapshot = dir.path().join(format!("osprey-regtest-{height}.tar"));
    // 4.
    let imported = import(dir.path(), &node, &db_b, &snapshot);
    assert!(
        imported.status.success(),
        "import: {}\n{}",
        imported.status,
        imported.stderr
    );
    let (digest_a, tip_a) = digest_and_tip(&db_a);
    let (digest_b, tip_b) = digest_and_tip(&db_b);
    assert_eq!(
        tip_b,
        Some((osprey_core::Height(height), hash)),
        "imported tip"
    );
    assert_eq!(tip_a, tip_b);
    assert_eq!(digest_a, digest_b, "the imported index is the original");
    // 5.
    node.generate(5).expect("mining");
    wallet.sync(&node).expect("wallet sync");
    let early: Vec<_> = wallet
        .coins()
        .filter(|c| !c.coinbase && c.spend.txout.value == Amount::from_sat(1_000_000))
        .map(|c| c.outpoint)
        .take(2)
        .collect();
    assert_eq!(early.len(), 2, "coins paid before the export");
    let target = wallet.new_script(ScriptKind::P2wpkh);
    let tx = wallet
        .spend(&early, &[(target, Amount::from_sat(1_500_000))])
        .expect("spending coins from before the export");
    node.send_raw_transaction(&tx).expect("broadcast");
    pay_each_kind(&node, &mut wallet, 400_000);
    node.generate(1).expect("mining");
    wallet.sync(&node).expect("wallet sync");
    pay_each_kind(&node, &mut wallet, 300_000);
    // 6.
    let osprey_b = Osprey::start(&node, &db_b, OspreyConfig::default());
    let osprey_a = Osprey::start(&node, &db_a, OspreyConfig::default());
    let view = NodeView::load(&node);
    let scripts = view.scripts();
    let settle = Duration::from_secs(30);
    let answers_b = wait_answers_match_node(
        "imported osprey B",
        osprey_b.addr(),
        &view,
        &scripts,
        settle,
    );
    let answers_a = wait_answers_match_node(
        "original osprey A",
        osprey_a.addr(),
        &view,
        &scripts,
        settle,
    );
    assert_same_answers("imported B vs original A", &answers_b, &answers_a);
    let chain_b = collect_chain(osprey_b.addr());
    assert_chain_matches_node("imported osprey B", &chain_b, &view);
    assert_eq!(
        chain_b,
        collect_chain(osprey_a.addr()),
        "headers of B and A"
    );
}

/// The byte offset of `name`'s contents in the tar file `archive`: the
/// 512-byte header block that starts with the name, plus one block.
fn contents_offset(archive: &[u8], name: &str) -> usize {
    let mut field = name.as_bytes().to_vec();
    field.push(0);
    (0..archive.len())
        .step_by(512)
        .find(|&at| archive[at..].starts_with(&field))
        .map(|at| at + 512)
        .unwrap_or_else(|| panic!("{name} is in the snapshot"))
}

/// 1. Index 110 blocks of btcd and export them.
/// 2. One byte of `txids.dat` flipped: refused, naming the file's SHA-256;
///    nothing is left in --db-dir.
/// 3. The snapshot cut in half: refused as cut short.
/// 4. Imported as signet: refused as a snapshot of regtest.
/// 5. Not a snapshot at all: refused.
/// 6. The intact snapshot then imports into the same --db-dir.
#[test]
fn damaged_or_foreign_snapshots_are_refused() {
    // 1.
    let node = start_btcd();
    node.generate(110).expect("mining");
    let dir = tempfile::tempdir().expect("tempdir");
    let snapshot = index_and_export(dir.path(), &node);
    let bytes = std::fs::read(&snapshot).expect("reading the snapshot");
    let db = dir.path().join("db-new");
    // 2.
    let mut flipped = bytes.clone();
    let at = contents_offset(&bytes, "txids.dat") + 32 * 50 + 7;
    flipped[at] ^= 0x01;
    let damaged = dir.path().join("flipped.tar");
    std::fs::write(&damaged, &flipped).expect("writing");
    let output = import(dir.path(), &node, &db, &damaged);
    assert_refused(
        "one byte flipped",
        &output,
        "txids.dat: its SHA-256 is",
        &db,
    );
    assert!(output.stderr.contains("damaged"), "{}", output.stderr);
    // 3.
    let cut = dir.path().join("cut.tar");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("writing");
    let output = import(dir.path(), &node, &db, &cut);
    assert_refused("cut in half", &output, "snapshot refused", &db);
    // 4.
    let from = snapshot.display().to_string();
    let mut signet = flags(&node, &db);
    signet[1] = "signet".into();
    let output = osprey(
        dir.path(),
        &["snapshot", "import", "--from", &from],
        &signet,
        false,
    );
    assert_refused(
        "another network",
        &output,
        "the snapshot is of network regtest, not signet",
        &db,
    );
    // 5.
    let not_a_snapshot = dir.path().join("not.tar");
    std::fs::write(&not_a_snapshot, vec![b'x'; 4096]).expect("writing");
    let output = import(dir.path(), &node, &db, &not_a_snapshot);
    assert_refused("not a snapshot", &output, "not an Osprey snapshot", &db);
    // 6.
    let output = import(dir.path(), &node, &db, &snapshot);
    assert!(output.status.success(), "import: {}", output.stderr);
    assert_eq!(
        digest_and_tip(&db).0,
        digest_and_tip(&dir.path().join("db-orig")).0
    );
}

/// 1. Index 110 blocks of btcd and export them (tip T).
/// 2. `invalidateblock` T: the node is below the snapshot's tip; the import
///    is refused as too early, nothing written.
/// 3. A sibling of T, and one block on it: T is no longer in the node's
///    best chain; the import is refused as of another branch.
#[test]
fn snapshot_of_a_reorged_away_tip_is_refused() {
    // 1.
    let node = start_btcd();
    node.generate(110).expect("mining");
    let dir = tempfile::tempdir().expect("tempdir");
    let snapshot = index_and_export(dir.path(), &node);
    let (height, tip) = node.tip().expect("tip");
    let db = dir.path().join("db-new");
    // 2.
    node.invalidate_block(&tip).expect("invalidateblock");
    let (below, parent) = node.tip().expect("tip");
    assert_eq!(below, height - 1);
    let output = import(dir.path(), &node, &db, &snapshot);
    assert_refused(
        "node below the tip",
        &output,
        &format!("below the snapshot's tip at {height}"),
        &db,
    );
    // 3.
    let sibling = submit_block_on(&node, parent, vec![], 9).block_hash();
    assert_ne!(sibling, tip);
    node.generate(1).expect("mining on the sibling");
    assert_eq!(node.tip().expect("tip").0, height + 1);
    let output = import(dir.path(), &node, &db, &snapshot);
    assert_refused(
        "tip reorged away",
        &output,
        &format!("the snapshot's tip {tip} at height {height} is not in the node's best chain"),
        &db,
    );
}
