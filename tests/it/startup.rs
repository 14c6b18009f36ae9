//! What happens at startup, before any wallet connects: a node that cannot
//! work is refused in one line that says why (pruned, another network);
//! Core's block files that cannot be read are named with the source used
//! instead; an index of another format is rebuilt by itself, deleting only
//! its own files, or refused when the operator turned that off.

use std::path::Path;
use std::time::Duration;

use osprey_testenv::{BitcoindNode, BitcoindOptions, Node};

use crate::common::command::{generate_chain, run_osprey, CommandOutput};

const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// `osprey index` against `node` over its cookie, with `extra` flags.
fn index_from(dir: &Path, node: &BitcoindNode, network: &str, extra: &[&str]) -> CommandOutput {
    let rpc = node.rpc_addr().to_string();
    let cookie = node.cookie_file().display().to_string();
    let db = dir.join("db").display().to_string();
    let mut args = vec![
        "index",
        "--network",
        network,
        "--daemon-rpc-addr",
        &rpc,
        "--cookie-file",
        &cookie,
        "--db-dir",
        &db,
    ];
    args.extend_from_slice(extra);
    run_osprey(dir, &args, COMMAND_TIMEOUT, false)
}

/// The `error:` lines of a failed command: exactly one, which it returns.
fn one_error_line(what: &str, output: &CommandOutput) -> String {
    assert!(!output.status.success(), "{what}: it succeeded");
    let errors: Vec<&str> = output
        .stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{what}: stderr:\n{}", output.stderr);
    errors[0].to_string()
}

/// 1. A pruned Core is refused, saying so and what to do.
/// 2. A regtest Core asked for signet is refused, naming both networks.
/// 3. With `--daemon-dir` naming a directory without Core's blocks, `auto`
///    says the files are not read and that REST is used instead, and
///    indexes.
#[test]
fn a_node_that_cannot_work_is_refused_in_one_line() {
    let Some(pruned) = BitcoindNode::start_or_skip(&BitcoindOptions {
        prune: true,
        ..BitcoindOptions::default()
    }) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    // 1.
    let line = one_error_line("pruned", &index_from(dir.path(), &pruned, "regtest", &[]));
    assert!(
        line.contains("is pruned") && line.contains("without -prune"),
        "{line}"
    );
    drop(pruned);
    let node = BitcoindNode::start_or_skip(&BitcoindOptions::default()).expect("bitcoind");
    node.generate(3).expect("mining");
    // 2.
    let line = one_error_line(
        "another network",
        &index_from(dir.path(), &node, "signet", &[]),
    );
    assert!(line.contains("is on regtest, not signet"), "{line}");
    // 3.
    let elsewhere = dir.path().join("not-the-node");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    let out = index_from(
        dir.path(),
        &node,
        "regtest",
        &["--daemon-dir", elsewhere.to_str().expect("utf-8")],
    );
    assert!(out.status.success(), "stderr:\n{}", out.stderr);
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("block files: not read"))
        .unwrap_or_else(|| panic!("no block files line:\n{}", out.stderr));
    assert!(
        line.contains(&elsewhere.join("regtest/blocks").display().to_string())
            && line.contains("using rest instead"),
        "{line}"
    );
    assert!(out.stderr.contains("block source: rest:"), "{}", out.stderr);
}

/// The chain's index under `db`, built from its blk files; returns the
/// printed tip and digest line.
fn index_blocks(dir: &Path, chain: &Path, db: &Path, extra: &[&str]) -> CommandOutput {
    let blocks = chain.join("blocks").display().to_string();
    let db = db.display().to_string();
    let mut args = vec![
        "index",
        "--network",
        "regtest",
        "--blocks-dir",
        &blocks,
        "--db-dir",
        &db,
        "--digest",
    ];
    args.extend_from_slice(extra);
    run_osprey(dir, &args, COMMAND_TIMEOUT, false)
}

/// Writes `tag` as the index's format, as an older or newer build would
/// have.
fn set_format_tag(index: &Path, tag: &[u8]) {
    let path = index.join("rocksdb");
    let families = rocksdb::DB::list_cf(&rocksdb::Options::default(), &path)
        .expect("listing the index's column families");
    let db = rocksdb::DB::open_cf(&rocksdb::Options::default(), &path, families)
        .expect("opening the index's RocksDB");
    db.put_cf(db.cf_handle("meta").expect("meta"), b"schema", tag)
        .expect("writing the format");
}

/// The files under `dir` that are not the index's, with their contents.
fn foreign_files(dir: &Path) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = ["CURRENT", "000012.sst", "electrs/LOG", "../notes.txt"]
        .iter()
        .filter_map(|name| {
            std::fs::read_to_string(dir.join(name))
                .ok()
                .map(|text| (name.to_string(), text))
        })
        .collect();
    found.sort();
    found
}

/// 1. Index a generated chain; put another program's files beside it (in
///    the network's directory, as electrs 0.12 keeps its own RocksDB in
///    `<db_dir>/bitcoin`, and in `--db-dir`).
/// 2. Rewrite the index's format as an older build's: `osprey index`
///    deletes it, says so, indexes again to the same digest, and leaves
///    every other file as it was.
/// 3. The same with `--reindex-on-format-change false`: refused in one line
///    that says how to rebuild, and nothing is deleted.
/// 4. `--reindex` also deletes only the index.
#[test]
fn an_index_of_another_format_is_rebuilt_and_nothing_else_is_touched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (chain, _) = generate_chain(dir.path(), &["--preset", "tiny", "--seed", "3"]);
    let db = dir.path().join("db");
    let index = db.join("regtest");
    // 1.
    let first = index_blocks(dir.path(), &chain, &db, &[]);
    assert!(first.status.success(), "{}", first.stderr);
    for (name, text) in [
        ("CURRENT", "MANIFEST-000042\n"),
        ("000012.sst", "electrs' rows"),
        ("electrs/LOG", "electrs' log"),
        ("../notes.txt", "the operator's notes"),
    ] {
        let path = index.join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("writing a foreign file");
    }
    let foreign = foreign_files(&index);
    assert_eq!(foreign.len(), 4);
    // 2.
    let older: [u8; 7] = [0, 0, 0, 1, 8, 8, 4];
    set_format_tag(&index, &older);
    let rebuilt = index_blocks(dir.path(), &chain, &db, &[]);
    assert!(rebuilt.status.success(), "{}", rebuilt.stderr);
    assert!(
        rebuilt.stderr.contains("deleting it and indexing again"),
        "{}",
        rebuilt.stderr
    );
    assert_eq!(rebuilt.stdout, first.stdout, "the same tip and digest");
    assert_eq!(foreign_files(&index), foreign);
    // 3.
    set_format_tag(&index, &older);
    let refused = index_blocks(
        dir.path(),
        &chain,
        &db,
        &["--reindex-on-format-change", "false"],
    );
    let line = one_error_line("format change refused", &refused);
    assert!(line.contains("--reindex"), "{line}");
    assert!(index.join("rocksdb").exists() && index.join("txids.dat").exists());
    assert_eq!(foreign_files(&index), foreign);
    // 4.
    let reindexed = index_blocks(dir.path(), &chain, &db, &["--reindex"]);
    assert!(reindexed.status.success(), "{}", reindexed.stderr);
    assert_eq!(reindexed.stdout, first.stdout);
    assert_eq!(foreign_files(&index), foreign);
}
