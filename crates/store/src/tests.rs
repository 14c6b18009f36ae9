use super::*;
use bitcoin::block::Version;
use bitcoin::hashes::Hash;
use bitcoin::{CompactTarget, TxMerkleNode};
use codec::{HistoryRow, RowKind};
use osprey_core::ScriptHash;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

fn header(height: u32, prev: BlockHash) -> Header {
    Header {
        version: Version::TWO,
        prev_blockhash: prev,
        merkle_root: TxMerkleNode::all_zeros(),
        time: height,
        bits: CompactTarget::from_consensus(0x207fffff),
        nonce: 0,
    }
}

/// Distinct for each `n` and `fork`, in partitions 0 to 15 by `n`.
fn txid(n: u64, fork: u8) -> Txid {
    let mut b = [fork; 32];
    b[..8].copy_from_slice(&n.to_le_bytes());
    b[0] = b[0].wrapping_mul(0x11);
    Txid::from_byte_array(b)
}

/// Scripts 0, 1 and 2 are in partitions 0, 5 and 10.
fn script(n: u8) -> ScriptHash {
    ScriptHash([n.wrapping_mul(0x51); 32])
}

/// A chain of `len` blocks where block h has 2 transactions: the first
/// pays script `h % 3`, the second spends the first output of the previous
/// block (a row of the script that output paid).
fn blocks(
    from: u32,
    len: u32,
    prev: Option<BlockHash>,
    fork: u8,
    first_tx: u64,
) -> Vec<IndexedBlock> {
    let mut prev = prev.unwrap_or_else(BlockHash::all_zeros);
    let mut tx = first_tx;
    (from..from + len)
        .map(|h| {
            let hdr = header(h + u32::from(fork) * 1000, prev);
            prev = hdr.block_hash();
            let first_tx_num = TxNum(tx);
            let txids = vec![txid(tx, fork), txid(tx + 1, fork)];
            let tx_ends = vec![81 + 100, 81 + 100 + 60 + u32::from(fork)];
            let s = script((h % 3) as u8);
            let mut rows = vec![HistoryRow::funding(TxNum(tx), 0, 50).of(&s)];
            let mut spent_txids = Vec::new();
            if tx >= 2 {
                let spent = script(((h + 2) % 3) as u8);
                rows.push(HistoryRow::spending(TxNum(tx + 1), &txid(tx - 2, fork), 0).of(&spent));
                spent_txids.push(txid(tx - 2, fork));
            }
            tx += 2;
            IndexedBlock {
                height: Height(h),
                header: hdr,
                first_tx_num,
                txids,
                tx_ends,
                rows,
                spent_txids,
                sp: Vec::new(),
            }
        })
        .collect()
}

#[test]
fn apply_then_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap();
    assert_eq!(store.tip(), None);
    let chain = blocks(0, 10, None, 0, 0);
    store.apply(&chain[..4], false, Height(0)).unwrap();
    store.apply(&chain[4..], true, Height(0)).unwrap();
    assert_eq!(store.tip(), Some((Height(9), chain[9].header.block_hash())));
    assert_eq!(store.tx_count(), 20);
    assert_eq!(store.locate(TxNum(7)), Some((Height(3), 1)));
    assert_eq!(store.locate(TxNum(20)), None);
    assert_eq!(store.block_tx_nums(Height(2)), Some(4..6));
    assert_eq!(store.txid(TxNum(13)).unwrap(), txid(13, 0));
    assert_eq!(store.find_tx_num(&txid(13, 0)).unwrap(), Some(TxNum(13)));
    assert_eq!(store.find_tx_num(&txid(99, 0)).unwrap(), None);
    let rows = store.history(&script(1), 100).unwrap().unwrap();
    // Heights 1, 4, 7 pay script 1; heights 2, 5, 8 spend those outputs.
    assert_eq!(rows.len(), 6);
    assert!(rows.windows(2).all(|w| w[0].tx_num <= w[1].tx_num));
    assert_eq!(
        store.history(&script(1), 5).unwrap(),
        None,
        "limit must be enforced"
    );
    assert_eq!(store.history(&script(1), 6).unwrap(), Some(rows));
    assert_eq!(store.history(&script(7), 5).unwrap(), Some(vec![]));
}

#[test]
fn reopen_cuts_files_that_ran_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let chain = blocks(0, 6, None, 0, 0);
    {
        let store = Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap();
        store.apply(&chain[..5], true, Height(0)).unwrap();
    }
    // Simulate a crash after the flat files were written but before the
    // database commit: append garbage records.
    for (name, len) in [
        ("headers.dat", 80),
        ("txcounts.dat", 8),
        ("txids.dat", 32 * 3),
    ] {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(name))
            .unwrap();
        f.write_all(&vec![0xAB; len]).unwrap();
    }
    let store = Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap();
    assert_eq!(store.tip().unwrap().0, Height(4));
    assert_eq!(
        std::fs::metadata(dir.path().join("txids.dat"))
            .unwrap()
            .len(),
        10 * 32
    );
    store.apply(&chain[5..], true, Height(0)).unwrap();
    assert_eq!(store.txid(TxNum(11)).unwrap(), txid(11, 0));
}

#[test]
fn rollback_equals_fresh_index() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let reorged = Store::open(a.path(), "regtest", StoreConfig::default()).unwrap();
    let fresh = Store::open(b.path(), "regtest", StoreConfig::default()).unwrap();
    let main = blocks(0, 8, None, 0, 0);
    reorged.apply(&main, true, Height(0)).unwrap();
    reorged.rollback_to(Height(4)).unwrap();
    let fork = blocks(5, 4, Some(main[4].header.block_hash()), 1, 10);
    reorged.apply(&fork, true, Height(0)).unwrap();

    fresh
        .apply(&blocks(0, 5, None, 0, 0), true, Height(0))
        .unwrap();
    fresh.apply(&fork, true, Height(0)).unwrap();
    assert_eq!(reorged.digest().unwrap(), fresh.digest().unwrap());
    assert_eq!(reorged.find_tx_num(&txid(12, 0)).unwrap(), None);
    assert_eq!(reorged.find_tx_num(&txid(12, 1)).unwrap(), Some(TxNum(12)));
    drop(reorged);
    let reopened = Store::open(a.path(), "regtest", StoreConfig::default()).unwrap();
    assert_eq!(reopened.digest().unwrap(), fresh.digest().unwrap());
}

#[test]
fn rollback_past_pruned_undo_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        reorg_depth_max: 3,
        ..StoreConfig::default()
    };
    let store = Store::open(dir.path(), "regtest", config).unwrap();
    store
        .apply(&blocks(0, 10, None, 0, 0), true, Height(0))
        .unwrap();
    assert!(matches!(
        store.rollback_to(Height(2)),
        Err(Error::UndoPruned { .. })
    ));
    assert_eq!(
        store.tip().unwrap().0,
        Height(9),
        "a refused rollback changes nothing"
    );
    store.rollback_to(Height(7)).unwrap();
    assert_eq!(store.tip().unwrap().0, Height(7));
}

#[test]
fn wrong_network_or_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap());
    assert!(matches!(
        Store::open(dir.path(), "bitcoin", StoreConfig::default()),
        Err(Error::Network { .. })
    ));
    {
        let db = DB::open_cf(
            &Options::default(),
            dir.path().join("rocksdb"),
            all_cfs().map(|(_, name)| name),
        )
        .unwrap();
        db.put_cf(
            db.cf_handle(CF_META).unwrap(),
            META_SCHEMA,
            [0, 0, 0, 0, 8, 8, 4],
        )
        .unwrap();
    }
    let err = Store::open(dir.path(), "regtest", StoreConfig::default())
        .err()
        .unwrap();
    assert!(matches!(err, Error::Schema { .. }), "{err}");
    assert!(err.to_string().contains("--reindex"));
}

/// A format without one of today's column families, or with one today's
/// does not know, is a format change, not a RocksDB error.
#[test]
fn a_foreign_column_family_is_a_format_change() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap());
    {
        let mut opts = Options::default();
        opts.create_missing_column_families(true);
        let mut cfs: Vec<&str> = all_cfs().map(|(_, name)| name).collect();
        // Format 4's single history column family.
        cfs.push("history");
        drop(DB::open_cf(&opts, dir.path().join("rocksdb"), cfs).unwrap());
    }
    let err = Store::open(dir.path(), "regtest", StoreConfig::default())
        .err()
        .unwrap();
    assert!(
        matches!(err, Error::Schema { ref found, .. } if found.contains("\"history\"")),
        "{err}"
    );
}

/// `remove_index` deletes the index and nothing beside it: another
/// program's files in the same directory (electrs keeps its RocksDB files
/// right in `<db_dir>/bitcoin`) survive, and so does the directory.
#[test]
fn remove_index_deletes_only_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("bitcoin");
    let store = Store::open(&index, "regtest", StoreConfig::default()).unwrap();
    store
        .apply(&blocks(0, 3, None, 0, 0), true, Height(2))
        .unwrap();
    drop(store);
    let foreign = ["CURRENT", "000012.sst", "electrs/LOG"];
    for name in foreign {
        let path = index.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, name).unwrap();
    }
    let removed = remove_index(&index).unwrap();
    assert_eq!(
        removed.len(),
        5,
        "rocksdb/ and four flat files: {removed:?}"
    );
    let mut left: Vec<String> = walk(&index);
    left.sort();
    assert_eq!(left, ["000012.sst", "CURRENT", "electrs/LOG"]);
    for name in foreign {
        assert_eq!(std::fs::read_to_string(index.join(name)).unwrap(), name);
    }
    // Alone, the index goes with its directory; a second call finds nothing.
    let alone = dir.path().join("regtest");
    drop(Store::open(&alone, "regtest", StoreConfig::default()).unwrap());
    assert_eq!(remove_index(&alone).unwrap().last(), Some(&alone));
    assert!(!alone.exists());
    assert_eq!(
        remove_index(&alone).unwrap(),
        Vec::<std::path::PathBuf>::new()
    );
}

/// The files under `dir`, relative to it.
fn walk(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            found.extend(walk(&path).into_iter().map(|f| format!("{name}/{f}")));
        } else {
            found.push(name);
        }
    }
    found
}

#[test]
fn sort_key_orders_like_the_key_bytes() {
    // Keys of 1 to 20 bytes drawn from a few byte values (zeros included,
    // so that padding and real zero bytes meet), by a fixed-seed LCG.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) as usize
    };
    let keys: Vec<Vec<u8>> = (0..20_000)
        .map(|_| {
            let len = 1 + next() % 20;
            (0..len).map(|_| [0u8, 1, 0x80, 0xff][next() % 4]).collect()
        })
        .collect();
    let mut by_bytes = keys.clone();
    by_bytes.sort();
    let mut by_sort_key = keys;
    by_sort_key.sort_by(|a, b| {
        crate::write::sort_key(a)
            .cmp(&crate::write::sort_key(b))
            .then_with(|| a.cmp(b))
    });
    assert_eq!(by_sort_key, by_bytes);
    assert!(crate::write::sort_key(&[1]) < crate::write::sort_key(&[1, 1]));
}

/// Level-0 files of the history and txid families that hold keys of
/// another partition than their column family's.
fn files_in_other_partitions(store: &Store) -> usize {
    store
        .db()
        .unwrap()
        .live_files()
        .unwrap()
        .iter()
        .filter(|f| {
            let Some(partition) = HISTORY_CFS
                .iter()
                .chain(&TXID_CFS)
                .position(|&name| name == f.column_family_name)
            else {
                return false;
            };
            let partition = partition % PARTITIONS;
            let ends = [&f.start_key, &f.end_key];
            ends.iter()
                .any(|key| key.as_deref().map(partition_of) != Some(partition))
        })
        .count()
}

/// The files in the runs' directory of the index in `dir`.
fn run_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(dir.join(runs::RUNS_DIR)) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

/// A source tip far above the test chains: no block of theirs is near it,
/// so none gets an undo record and a bulk load takes them all.
const FAR_TIP: Height = Height(1_000_000);

#[test]
fn bulk_load_writes_runs_then_merges_them_by_partition() {
    let mut chain = blocks(0, 12, None, 0, 0);
    // Transactions of 64 KiB or more, whose sizes go to `meta`: one in a
    // run that a restart keeps, one in rows a restart loses.
    chain[3].tx_ends[1] = chain[3].tx_ends[0] + 70_000;
    chain[9].tx_ends[0] = 81 + 0x1_0000;
    chain[9].tx_ends[1] = 81 + 0x1_0000 + 60;
    let plain_dir = tempfile::tempdir().unwrap();
    let plain = Store::open(plain_dir.path(), "regtest", StoreConfig::default()).unwrap();
    plain.apply(&chain, false, FAR_TIP).unwrap();

    // A run after every commit.
    let small_runs = StoreConfig {
        bulk_run_bytes: 1,
        ..StoreConfig::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "regtest", small_runs.clone()).unwrap();
    assert!(store.begin_bulk_load().unwrap());
    for block in &chain[..8] {
        store
            .apply(std::slice::from_ref(block), false, FAR_TIP)
            .unwrap();
    }
    // A file per slice and run, RocksDB untouched,
    // and reads refused rather than answered from nothing.
    assert_eq!(run_files(dir.path()).len(), 8 * runs::SLICES);
    assert!(!store.bulk_families_hold_rows().unwrap());
    assert!(matches!(
        store.history(&script(1), 100),
        Err(Error::BulkLoad)
    ));
    assert!(matches!(
        store.find_tx_num(&txid(0, 0)),
        Err(Error::BulkLoad)
    ));
    // Runs cannot be rolled back, nor exported: they are not in the
    // database a snapshot copies.
    assert!(store.rollback_to(Height(6)).is_err());
    let scratch = tempfile::tempdir().unwrap();
    let refused = store
        .export_snapshot(&scratch.path().join("checkpoint"), Vec::new())
        .unwrap_err();
    assert!(refused.to_string().contains("bulk load"), "{refused}");

    // Stopped (or killed): reopened, the load goes on from its last run;
    // rows gathered in memory since are lost with the process, and the
    // flat files are cut back to that run's tip.
    drop(store);
    let store = Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap();
    assert!(store.in_bulk_load());
    assert_eq!(store.tip().unwrap().0, Height(7));
    store.apply(&chain[8..10], false, FAR_TIP).unwrap();
    assert_eq!(store.tip().unwrap().0, Height(9));
    drop(store);
    // A synced commit (a clean stop's last) writes its run at once.
    let store = Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap();
    assert_eq!(store.tip().unwrap().0, Height(7));
    store.apply(&chain[8..9], true, FAR_TIP).unwrap();
    drop(store);
    let store = Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap();
    assert_eq!(store.tip().unwrap().0, Height(8));
    store.apply(&chain[9..10], false, FAR_TIP).unwrap();
    drop(store);
    // A run a crash interrupted is not part of the load.
    std::fs::write(dir.path().join(runs::RUNS_DIR).join("000009.00"), b"torn").unwrap();
    let store = Store::open(dir.path(), "regtest", small_runs.clone()).unwrap();
    assert_eq!(store.tip().unwrap().0, Height(8));
    assert_eq!(run_files(dir.path()).len(), 9 * runs::SLICES);
    store.apply(&chain[9..], false, FAR_TIP).unwrap();

    // A stop before the first partition leaves the load under way.
    assert!(!store.end_bulk_load(&AtomicBool::new(true)).unwrap());
    assert!(store.in_bulk_load());
    assert!(store.end_bulk_load(&AtomicBool::new(false)).unwrap());
    assert!(!store.in_bulk_load());
    assert!(run_files(dir.path()).is_empty());
    let shape = store.lsm_shape().unwrap();
    assert_eq!(shape.bulk_runs_merged, Some(10));
    assert!(shape.bulk_write_bytes > 0);
    for family in &shape.column_families[1..3] {
        assert!(
            family.files.len() > 1 && family.files[0] == 0,
            "{}: everything ingested below level 0: {:?}",
            family.name,
            family.files
        );
    }
    assert_eq!(files_in_other_partitions(&store), 0);
    assert_eq!(store.digest().unwrap(), plain.digest().unwrap());
    // The same rows, but that the merge paired spends by their vouts.
    let spent_vouts = |rows: Vec<HistoryRow>| -> Vec<(TxNum, Option<u32>)> {
        rows.into_iter()
            .map(|row| match row.kind {
                RowKind::Spending { prev_vout, .. } => (row.tx_num, Some(prev_vout)),
                RowKind::Funding { .. } => (row.tx_num, None),
            })
            .collect()
    };
    let merged = store.history(&script(1), 100).unwrap().unwrap();
    assert!(merged.iter().any(|row| matches!(
        row.kind,
        RowKind::Spending {
            prev_txid_prefix: None,
            ..
        }
    )));
    assert_eq!(
        spent_vouts(merged),
        spent_vouts(plain.history(&script(1), 100).unwrap().unwrap())
    );
    drop(store);
    let store = Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap();
    assert!(!store.in_bulk_load(), "the merge's end is durable");
    assert_eq!(store.digest().unwrap(), plain.digest().unwrap());
    let span = |n| store.tx_span(TxNum(n)).unwrap().unwrap();
    assert_eq!(span(7), (Height(3), 181, 70_000));
    assert_eq!(span(18), (Height(9), 81, 0x1_0000));
    assert_eq!(span(19), (Height(9), 81 + 0x1_0000, 60));
}

/// A merge stopped between partitions (or killed) goes on with the
/// partitions not yet ingested; those ingested keep their rows once.
#[test]
fn a_bulk_load_merge_goes_on_after_a_restart() {
    let chain = blocks(0, 40, None, 0, 0);
    let plain_dir = tempfile::tempdir().unwrap();
    let plain = Store::open(plain_dir.path(), "regtest", StoreConfig::default()).unwrap();
    plain.apply(&chain, false, FAR_TIP).unwrap();
    let config = StoreConfig {
        bulk_run_bytes: 200,
        ..StoreConfig::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "regtest", config.clone()).unwrap();
    assert!(store.begin_bulk_load().unwrap());
    for batch in chain.chunks(3) {
        store.apply(batch, false, FAR_TIP).unwrap();
    }
    store.flush().unwrap();
    let runs = store.runs_written.load(std::sync::atomic::Ordering::SeqCst);
    assert!(runs > 3, "{runs} runs");
    // Partition 1's runs (slices 2 and 3) survive its ingestion (a crash
    // between the two), and partition 0's but their first run's (a crash
    // in their deletion): kept aside, put back below.
    let runs_dir = dir.path().join(runs::RUNS_DIR);
    let mut kept_paths = Vec::new();
    for run in 0..runs {
        for slice in [2, 3] {
            kept_paths.push(runs::run_path(&runs_dir, run, slice));
        }
        if run > 0 {
            kept_paths.push(runs::run_path(&runs_dir, run, 0));
        }
    }
    let kept: Vec<(PathBuf, Vec<u8>)> = kept_paths
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    // Partitions 0 and 1 merged, as a merge that a crash ends there.
    for partition in 0..2 {
        store.merge_partition(partition, runs).unwrap();
    }
    for (path, bytes) in &kept {
        std::fs::write(path, bytes).unwrap();
    }
    drop(store);
    let store = Store::open(dir.path(), "regtest", config).unwrap();
    assert!(store.in_bulk_load());
    assert!(store.end_bulk_load(&AtomicBool::new(false)).unwrap());
    assert!(kept.iter().all(|(path, _)| !path.exists()));
    assert_eq!(store.digest().unwrap(), plain.digest().unwrap());
}

#[test]
fn a_merge_that_cannot_write_its_files_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap();
    let runs = tempfile::tempdir().unwrap();
    let mut buffer = runs::RunBuffer::default();
    let rows = [HistoryRow::funding(TxNum(7), 0, 1_000).of(&script(1))];
    buffer.push(&rows, &[], &[], 7, &[]);
    runs::write_run(runs.path(), 0, buffer).unwrap();
    let run = runs::run_path(runs.path(), 0, rows[0].id_top_bits(runs::SLICE_BITS));
    let gone = runs.path().join("gone");
    let failed = store
        .write_merged_files(
            Family::History,
            &[run],
            runs::KeyRange::default(),
            &gone,
            "history.0.0",
        )
        .unwrap_err();
    assert!(matches!(failed, Error::Db(_)), "{failed}");
}

#[test]
fn a_bulk_load_begins_only_on_empty_families() {
    let chain = blocks(0, 4, None, 0, 0);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap();
    store.apply(&chain[..2], false, FAR_TIP).unwrap();
    assert!(!store.begin_bulk_load().unwrap());
    assert!(!store.in_bulk_load());
    store.apply(&chain[2..], false, FAR_TIP).unwrap();
    assert_eq!(store.history(&script(1), 100).unwrap().unwrap().len(), 2);
}

#[test]
fn a_bulk_load_refuses_blocks_near_the_tip() {
    let chain = blocks(0, 4, None, 0, 0);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap();
    assert!(store.begin_bulk_load().unwrap());
    // Within reorg_depth_max of the source's tip: blocks that need undo
    // records, which a run cannot give.
    let error = store.apply(&chain, false, Height(3)).unwrap_err();
    assert!(matches!(error, Error::Corrupt(_)), "{error}");
    assert!(store.tip().is_none());
}

/// `store` exported as a snapshot (`scratch` is the export's scratch
/// directory): the archive and its manifest.
fn exported(store: &Store, scratch: &Path) -> (Vec<u8>, snapshot::Manifest) {
    let mut archive = Vec::new();
    let manifest = store.export_snapshot(scratch, &mut archive).unwrap();
    (archive, manifest)
}

/// A snapshot of an index whose last batches are still only in memtables
/// (written without the WAL) unpacks into the same index: same tip, same
/// digest. The exported store goes on working.
#[test]
fn snapshot_round_trip_equals_the_original() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a"), "regtest", StoreConfig::default()).unwrap();
    let chain = blocks(0, 12, None, 0, 0);
    store.apply(&chain[..6], true, Height(0)).unwrap();
    store.apply(&chain[6..], false, Height(0)).unwrap();
    let (archive, manifest) = exported(&store, &dir.path().join("scratch"));
    assert_eq!(manifest.tip_height, 11);
    assert_eq!(manifest.network, "regtest");
    let reader = snapshot::SnapshotReader::open(archive.as_slice(), "regtest", false).unwrap();
    assert_eq!(reader.manifest(), &manifest);
    let unpacked = dir.path().join("b");
    reader.unpack(&unpacked).unwrap();
    let imported = Store::open(&unpacked, "regtest", StoreConfig::default()).unwrap();
    assert_eq!(imported.tip(), store.tip());
    assert_eq!(imported.digest().unwrap(), store.digest().unwrap());
    store
        .apply(
            &blocks(12, 1, store.tip().map(|t| t.1), 0, 24),
            true,
            Height(0),
        )
        .unwrap();
    assert_eq!(store.tip().unwrap().0, Height(12));
}

/// A manifest naming a path outside the index, or an archive holding a file
/// its manifest does not list, is refused and nothing stays behind.
#[test]
fn snapshot_paths_outside_the_index_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a"), "regtest", StoreConfig::default()).unwrap();
    store
        .apply(&blocks(0, 3, None, 0, 0), true, Height(0))
        .unwrap();
    let (_, manifest) = exported(&store, &dir.path().join("scratch"));
    let rebuild = |manifest: &snapshot::Manifest, extra: Option<&str>| {
        let mut builder = tar::Builder::new(Vec::new());
        let json = serde_json::to_vec(manifest).unwrap();
        let mut header = tar::Header::new_gnu();
        header.set_size(json.len() as u64);
        builder
            .append_data(&mut header, snapshot::MANIFEST_NAME, json.as_slice())
            .unwrap();
        if let Some(name) = extra {
            let mut header = tar::Header::new_gnu();
            header.set_size(3);
            builder.append_data(&mut header, name, &b"abc"[..]).unwrap();
        }
        builder.into_inner().unwrap()
    };
    for evil in [
        "../evil",
        "rocksdb/../../evil",
        "/etc/passwd",
        "rocksdb/a/b",
    ] {
        let mut listed = manifest.clone();
        listed.files.push(snapshot::FileEntry {
            path: evil.into(),
            bytes: 3,
            sha256: String::new(),
        });
        let err =
            snapshot::SnapshotReader::open(rebuild(&listed, None).as_slice(), "regtest", false)
                .err()
                .expect("refused");
        assert!(err.to_string().contains("no index file"), "{evil}: {err}");
    }
    let mut empty = manifest.clone();
    empty.files.clear();
    let unlisted = rebuild(&empty, Some("rocksdb/extra"));
    let reader = snapshot::SnapshotReader::open(unlisted.as_slice(), "regtest", false).unwrap();
    let target = dir.path().join("b");
    let err = reader.unpack(&target).unwrap_err();
    assert!(err.to_string().contains("does not list"), "{err}");
    assert!(
        !target.exists(),
        "the failed import left {}",
        target.display()
    );
}

#[test]
fn sizes_and_bytes_written_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap();
    assert_eq!(store.flat_files_bytes(), 0);
    assert_eq!(store.rocksdb_live_sst_bytes(), 0, "nothing flushed yet");
    let chain = blocks(0, 10, None, 0, 0);
    store.apply(&chain, true, Height(9)).unwrap();
    // 10 headers (80 bytes) and tx counts (8), 20 txids (32) and sizes (2).
    assert_eq!(store.flat_files_bytes(), 10 * (80 + 8) + 20 * (32 + 2));
    let logged = store.rocksdb_written_bytes();
    assert!(logged > 0, "a synced batch goes through the WAL");
    store.flush().unwrap();
    let sst = store.rocksdb_live_sst_bytes();
    assert!(sst > 0, "a flush writes SST files");
    assert!(store.rocksdb_written_bytes() >= logged + sst);
    // The footprint names every part once, and adds up to the same sizes.
    let parts = store.footprint();
    let part = |name: &str| {
        let found: Vec<_> = parts.iter().filter(|p| p.name == name).collect();
        assert_eq!(found.len(), 1, "{name} in {parts:?}");
        found[0].clone()
    };
    assert_eq!(parts.len(), 8, "{parts:?}");
    let flat: u64 = ["headers.dat", "txcounts.dat", "txids.dat", "txsizes.dat"]
        .iter()
        .map(|name| part(name).bytes)
        .sum();
    assert_eq!(flat, store.flat_files_bytes());
    let column_families: u64 = ["meta", "history", "txid", "undo"]
        .iter()
        .map(|name| part(name).bytes)
        .sum();
    assert_eq!(column_families, sst);
    assert_eq!(part("txids.dat").records, 20);
    assert_eq!(part("headers.dat").records, 10);
    let buckets: std::collections::BTreeSet<_> = (0..20)
        .map(|n| codec::txid_bucket_key(codec::txid_prefix(&txid(n, 0))))
        .collect();
    assert_eq!(
        part("txid").records,
        buckets.len() as u64,
        "one txid value per bucket"
    );
    assert_eq!(
        part("undo").records,
        10,
        "every block is within the undo window"
    );
    assert!(part("history").records > 0);
}

#[test]
fn a_transaction_of_64_kib_or_more_keeps_its_size_through_a_rollback_and_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap();
    store
        .apply(&blocks(0, 2, None, 0, 0), true, Height(1))
        .unwrap();
    let before = store.digest().unwrap();
    // Ends that do not increase are refused, and nothing is written.
    let mut next = blocks(2, 2, store.tip().map(|t| t.1), 0, 4);
    next[0].tx_ends[1] = next[0].tx_ends[0];
    let err = store.apply(&next, true, Height(3)).unwrap_err();
    assert!(err.to_string().contains("not past its start"), "{err}");
    assert_eq!(store.tip().unwrap().0, Height(1));
    assert_eq!(store.digest().unwrap(), before);
    // Sizes on either side of what two bytes hold; the largest past the
    // 16 MiB of format 8's ends.
    let start = next[0].tx_ends[0];
    next[0].tx_ends[1] = start + 0xFFFE;
    next[1].tx_ends[0] = 81 + 0xFFFF;
    next[1].tx_ends[1] = 81 + 0xFFFF + (1 << 24);
    store.apply(&next, true, Height(3)).unwrap();
    let spans = |store: &Store| -> Vec<(u32, u32)> {
        (5..8)
            .map(|n| {
                let (_, offset, len) = store.tx_span(TxNum(n)).unwrap().unwrap();
                (offset, len)
            })
            .collect()
    };
    let expected = vec![(start, 0xFFFE), (81, 0xFFFF), (81 + 0xFFFF, 1 << 24)];
    assert_eq!(spans(&store), expected);
    let grown = store.digest().unwrap();
    drop(store);
    let store = Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap();
    assert_eq!(spans(&store), expected);
    // Undone, the large sizes go with their blocks: the same blocks again
    // with small transactions read as small.
    store.rollback_to(Height(1)).unwrap();
    assert_eq!(store.digest().unwrap(), before);
    let small = blocks(2, 2, store.tip().map(|t| t.1), 0, 4);
    store.apply(&small, true, Height(3)).unwrap();
    assert_eq!(store.tx_span(TxNum(6)).unwrap().unwrap().2, 100);
    store.rollback_to(Height(1)).unwrap();
    store.apply(&next, true, Height(3)).unwrap();
    assert_eq!(store.digest().unwrap(), grown);
}

fn sp_config() -> StoreConfig {
    StoreConfig {
        silent_payments: true,
        ..StoreConfig::default()
    }
}

/// Made-up record bytes of block `h` on `fork` (the store never parses
/// them): every third block has none, the others 1 to 5 bytes.
fn sp_bytes(h: u32, fork: u8) -> Vec<u8> {
    if h.is_multiple_of(3) {
        Vec::new()
    } else {
        vec![(h as u8) ^ fork.wrapping_mul(0x40); 1 + (h % 5) as usize]
    }
}

/// `blocks`, with silent-payment records.
fn sp_blocks(
    from: u32,
    len: u32,
    prev: Option<BlockHash>,
    fork: u8,
    first_tx: u64,
) -> Vec<IndexedBlock> {
    let mut chain = blocks(from, len, prev, fork, first_tx);
    for block in &mut chain {
        block.sp = sp_bytes(block.height.0, fork);
    }
    chain
}

/// Every block's records as `sp_records` reads them one block at a time.
fn sp_by_block(store: &Store) -> Vec<Vec<u8>> {
    let blocks = store.tip().map_or(0, |(h, _)| h.0 + 1);
    (0..blocks)
        .map(|h| store.sp_records(Height(h), Height(h), 0).unwrap().bytes)
        .collect()
}

#[test]
fn silent_payment_records_read_back_by_block_and_by_budget() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "regtest", sp_config()).unwrap();
    assert!(store.silent_payments());
    let chain = sp_blocks(0, 10, None, 0, 0);
    store.apply(&chain[..4], false, Height(0)).unwrap();
    store.apply(&chain[4..], true, Height(0)).unwrap();
    let expected: Vec<Vec<u8>> = (0..10).map(|h| sp_bytes(h, 0)).collect();
    assert_eq!(sp_by_block(&store), expected);

    // All of it: blocks 1..=8 with records, positioned in the bytes.
    let all = store.sp_records(Height(0), Height(9), u64::MAX).unwrap();
    assert_eq!(all.bytes, expected.concat());
    assert_eq!((all.start, all.end, all.range_end), (0, 18, 18));
    assert_eq!(all.next_height, Height(10));
    assert!(all.done);
    assert_eq!(
        all.blocks.iter().map(|b| b.height.0).collect::<Vec<_>>(),
        [1, 2, 4, 5, 7, 8]
    );
    for block in &all.blocks {
        let h = block.height.0;
        assert_eq!(all.bytes[block.records.clone()], sp_bytes(h, 0));
        assert_eq!(block.first_tx_num, TxNum(2 * u64::from(h)));
        assert_eq!(block.hash, chain[h as usize].header.block_hash());
    }
    // A budget stops after the block that passes it: blocks 2 (3 bytes)
    // and 3 (none) fit in 4, block 4 (5 bytes) passes it and is read whole.
    let part = store.sp_records(Height(2), Height(8), 4).unwrap();
    assert_eq!(part.blocks.len(), 2);
    assert_eq!((part.start, part.end, part.range_end), (2, 10, 18));
    assert_eq!(part.next_height, Height(5));
    assert!(!part.done);
    // Empty ranges and ranges past the tip read nothing.
    let none = store.sp_records(Height(3), Height(3), 100).unwrap();
    assert!(none.blocks.is_empty() && none.bytes.is_empty());
    assert_eq!(none.next_height, Height(4));
    assert!(none.done);
    let past = store.sp_records(Height(10), Height(20), 100).unwrap();
    assert_eq!(
        (past.start, past.range_end, past.next_height, past.done),
        (18, 18, Height(10), true)
    );
    assert_eq!(
        store.sp_records(Height(12), Height(20), 100).unwrap(),
        SpRecords {
            next_height: Height(12),
            done: true,
            ..SpRecords::default()
        }
    );
    let names: Vec<_> = store.footprint().iter().map(|p| p.name).collect();
    assert!(
        names.ends_with(&["spoffsets.dat", "sptweaks.dat"]),
        "{names:?}"
    );
    let sp_part = store.footprint().pop().unwrap();
    assert_eq!((sp_part.bytes, sp_part.records), (18, 18));
}

#[test]
fn silent_payment_files_follow_rollbacks_and_reopens() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let reorged = Store::open(a.path(), "regtest", sp_config()).unwrap();
    let fresh = Store::open(b.path(), "regtest", sp_config()).unwrap();
    let main = sp_blocks(0, 8, None, 0, 0);
    reorged.apply(&main, true, Height(0)).unwrap();
    let before = reorged.digest().unwrap();
    reorged.rollback_to(Height(4)).unwrap();
    assert_eq!(
        std::fs::metadata(a.path().join("spoffsets.dat"))
            .unwrap()
            .len(),
        5 * 8
    );
    assert_eq!(
        std::fs::metadata(a.path().join("sptweaks.dat"))
            .unwrap()
            .len(),
        (0..5).map(|h| sp_bytes(h, 0).len() as u64).sum::<u64>()
    );
    let fork = sp_blocks(5, 4, Some(main[4].header.block_hash()), 1, 10);
    reorged.apply(&fork, true, Height(0)).unwrap();
    assert_ne!(reorged.digest().unwrap(), before);

    fresh
        .apply(&sp_blocks(0, 5, None, 0, 0), true, Height(0))
        .unwrap();
    fresh.apply(&fork, true, Height(0)).unwrap();
    assert_eq!(reorged.digest().unwrap(), fresh.digest().unwrap());
    assert_eq!(sp_by_block(&reorged)[6], sp_bytes(6, 1));
    drop(reorged);
    let reopened = Store::open(a.path(), "regtest", sp_config()).unwrap();
    assert_eq!(reopened.digest().unwrap(), fresh.digest().unwrap());
    assert_eq!(sp_by_block(&reopened), sp_by_block(&fresh));
}

/// The records enter the digest: two indexes that differ only in them
/// differ in digest, and an index without them keeps its old digest.
#[test]
fn the_digest_covers_the_records() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let with = Store::open(dirs[0].path(), "regtest", sp_config()).unwrap();
    let other = Store::open(dirs[1].path(), "regtest", sp_config()).unwrap();
    let without = Store::open(dirs[2].path(), "regtest", StoreConfig::default()).unwrap();
    let chain = sp_blocks(0, 5, None, 0, 0);
    with.apply(&chain, true, Height(0)).unwrap();
    let mut changed = sp_blocks(0, 5, None, 0, 0);
    changed[4].sp[0] ^= 1;
    other.apply(&changed, true, Height(0)).unwrap();
    without
        .apply(&blocks(0, 5, None, 0, 0), true, Height(0))
        .unwrap();
    let digests = [&with, &other, &without].map(|s| s.digest().unwrap());
    assert_ne!(digests[0], digests[1]);
    assert_ne!(digests[0], digests[2]);
    // Records offered to an index without silent payments are refused.
    let err = without
        .apply(
            &sp_blocks(5, 1, without.tip().map(|t| t.1), 0, 10),
            true,
            Height(0),
        )
        .err()
        .unwrap();
    assert!(matches!(err, Error::Corrupt(_)), "{err}");
}

#[test]
fn silent_payment_files_ahead_are_cut_and_short_ones_refused() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let chain = sp_blocks(0, 6, None, 0, 0);
    let digest = {
        let store = Store::open(dir.path(), "regtest", sp_config()).unwrap();
        store.apply(&chain[..5], true, Height(0)).unwrap();
        store.digest().unwrap()
    };
    let path = |name: &str| dir.path().join(name);
    let len = |name: &str| std::fs::metadata(path(name)).unwrap().len();
    let (offsets, tweaks) = (len("spoffsets.dat"), len("sptweaks.dat"));
    // A crash after the files were written, before the tip.
    for (name, extra) in [("spoffsets.dat", 8 * 2), ("sptweaks.dat", 7)] {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(path(name))
            .unwrap();
        f.write_all(&vec![0xAB; extra]).unwrap();
    }
    {
        let store = Store::open(dir.path(), "regtest", sp_config()).unwrap();
        assert_eq!(
            (len("spoffsets.dat"), len("sptweaks.dat")),
            (offsets, tweaks)
        );
        assert_eq!(store.digest().unwrap(), digest);
        store.apply(&chain[5..], true, Height(0)).unwrap();
        assert_eq!(sp_by_block(&store)[5], sp_bytes(5, 0));
    }
    // Files shorter than the tip: damage, refused.
    for (name, keep) in [("sptweaks.dat", tweaks - 1), ("spoffsets.dat", 8 * 3)] {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path(name))
            .unwrap();
        file.set_len(keep).unwrap();
        let err = Store::open(dir.path(), "regtest", sp_config())
            .err()
            .unwrap();
        assert!(matches!(err, Error::Corrupt(_)), "{name}: {err}");
    }
}

/// The setting is part of the format: an index is refused by a
/// configuration that has it the other way, with the error that makes
/// `serve` rebuild it; without it the tag is exactly the old one.
#[test]
fn the_silent_payments_setting_is_part_of_the_format() {
    assert_eq!(schema_tag(false).len(), 10);
    assert_eq!(schema_tag(true), [schema_tag(false), vec![0x01]].concat());
    for built_with in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let config = |silent_payments| StoreConfig {
            silent_payments,
            ..StoreConfig::default()
        };
        drop(Store::open(dir.path(), "regtest", config(built_with)).unwrap());
        let err = Store::open(dir.path(), "regtest", config(!built_with))
            .err()
            .unwrap();
        assert!(matches!(err, Error::Schema { .. }), "{err}");
        assert!(err.to_string().contains("--reindex"), "{err}");
        let sp_files = ["spoffsets.dat", "sptweaks.dat"].map(|f| dir.path().join(f).exists());
        assert_eq!(sp_files, [built_with; 2]);
        assert!(Store::open(dir.path(), "regtest", config(built_with)).is_ok());
    }
}

#[test]
fn snapshot_round_trip_keeps_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a"), "regtest", sp_config()).unwrap();
    store
        .apply(&sp_blocks(0, 9, None, 0, 0), true, Height(0))
        .unwrap();
    let (archive, manifest) = exported(&store, &dir.path().join("scratch"));
    let listed: Vec<_> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    assert!(listed.contains(&"spoffsets.dat") && listed.contains(&"sptweaks.dat"));
    // A configuration without silent payments refuses it before writing.
    let err = snapshot::SnapshotReader::open(archive.as_slice(), "regtest", false)
        .err()
        .unwrap();
    assert!(err.to_string().contains("silent_payments on"), "{err}");
    let reader = snapshot::SnapshotReader::open(archive.as_slice(), "regtest", true).unwrap();
    let unpacked = dir.path().join("b");
    reader.unpack(&unpacked).unwrap();
    let imported = Store::open(&unpacked, "regtest", sp_config()).unwrap();
    assert_eq!(imported.digest().unwrap(), store.digest().unwrap());
    assert_eq!(sp_by_block(&imported), sp_by_block(&store));
    // And `remove_index` removes them with the rest.
    drop(imported);
    let removed = remove_index(&unpacked).unwrap();
    assert!(removed.contains(&unpacked.join("sptweaks.dat")));
    assert!(!unpacked.exists());
}

#[test]
fn funding_at_finds_exactly_the_funding_rows() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap();
    store
        .apply(&blocks(0, 6, None, 0, 0), true, Height(0))
        .unwrap();
    // Block h's first transaction (tx_num 2h) pays script h % 3; its second
    // spends from that script without paying it.
    for h in 0..6u64 {
        let paid = script((h % 3) as u8);
        assert!(store.funding_at(&paid, TxNum(2 * h)).unwrap(), "block {h}");
        assert!(!store.funding_at(&paid, TxNum(2 * h + 1)).unwrap());
        let other = script(((h + 1) % 3) as u8);
        assert!(!store.funding_at(&other, TxNum(2 * h)).unwrap());
    }
    assert!(!store.funding_at(&script(9), TxNum(0)).unwrap());
    assert!(!store.funding_at(&script(0), TxNum(40)).unwrap());
}

/// Every file under `dir` with its length and modification time.
fn listing(dir: &Path) -> Vec<(PathBuf, u64, std::time::SystemTime)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            found.extend(listing(&entry.path()));
        } else {
            found.push((entry.path(), meta.len(), meta.modified().unwrap()));
        }
    }
    found.sort();
    found
}

#[test]
fn replica_follows_commits_and_rollbacks() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap();
    let main = blocks(0, 8, None, 0, 0);
    writer.apply(&main[..5], true, Height(0)).unwrap();
    let replica = Store::open_replica(dir.path(), "regtest", StoreConfig::default()).unwrap();
    assert!(replica.is_replica() && !writer.is_replica());
    assert_eq!(replica.tip(), writer.tip());
    assert_eq!(replica.digest().unwrap(), writer.digest().unwrap());
    assert_eq!(replica.catch_up().unwrap(), None, "nothing new");

    writer.apply(&main[5..], true, Height(0)).unwrap();
    assert_eq!(replica.tip().unwrap().0, Height(4), "until it catches up");
    assert_eq!(
        replica.catch_up().unwrap(),
        Some(TipMove {
            undone: 0,
            added: 3
        })
    );
    assert_eq!(replica.tip(), writer.tip());
    assert_eq!(replica.digest().unwrap(), writer.digest().unwrap());
    assert_eq!(replica.txid(TxNum(15)).unwrap(), txid(15, 0));
    assert_eq!(
        replica.history(&script(1), 100).unwrap(),
        writer.history(&script(1), 100).unwrap()
    );

    // A longer branch from height 4, then one of the same length.
    writer.rollback_to(Height(4)).unwrap();
    let fork = blocks(5, 4, Some(main[4].header.block_hash()), 1, 10);
    writer.apply(&fork, true, Height(0)).unwrap();
    assert_eq!(
        replica.catch_up().unwrap(),
        Some(TipMove {
            undone: 3,
            added: 4
        })
    );
    assert_eq!(replica.tip(), writer.tip());
    assert_eq!(replica.digest().unwrap(), writer.digest().unwrap());
    assert_eq!(replica.find_tx_num(&txid(12, 0)).unwrap(), None);
    assert_eq!(replica.find_tx_num(&txid(12, 1)).unwrap(), Some(TxNum(12)));
    writer.rollback_to(Height(7)).unwrap();
    let same_length = blocks(8, 1, Some(fork[2].header.block_hash()), 2, 16);
    writer.apply(&same_length, true, Height(0)).unwrap();
    assert_eq!(
        replica.catch_up().unwrap(),
        Some(TipMove {
            undone: 1,
            added: 1
        })
    );
    assert_eq!(replica.tip(), writer.tip());
    assert_eq!(replica.digest().unwrap(), writer.digest().unwrap());
}

#[test]
fn replica_reads_nothing_past_the_committed_tip() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap();
    let chain = blocks(0, 4, None, 0, 0);
    writer.apply(&chain, true, Height(0)).unwrap();
    let replica = Store::open_replica(dir.path(), "regtest", StoreConfig::default()).unwrap();
    // A batch the writer appended but has not committed yet.
    for (name, len) in [("headers.dat", 80), ("txcounts.dat", 8), ("txids.dat", 32)] {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(name))
            .unwrap();
        f.write_all(&vec![0xAB; len]).unwrap();
    }
    assert_eq!(replica.catch_up().unwrap(), None);
    assert_eq!(replica.tip(), writer.tip());
    assert_eq!(replica.tx_count(), 8);
    assert!(replica.txid(TxNum(8)).is_err(), "past the tip");
    assert_eq!(replica.raw_headers(Height(0), 10).len(), 4);
}

#[test]
fn replica_writes_nothing_and_is_refused_writes() {
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        Store::open_replica(empty.path(), "regtest", StoreConfig::default()),
        Err(Error::NoIndex(_))
    ));
    assert_eq!(listing(empty.path()), vec![], "nothing created");

    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap();
    let chain = blocks(0, 6, None, 0, 0);
    writer.apply(&chain[..3], true, Height(0)).unwrap();
    assert!(matches!(
        Store::open_replica(dir.path(), "bitcoin", StoreConfig::default()),
        Err(Error::Network { .. })
    ));
    let before = listing(dir.path());
    let replica = Store::open_replica(dir.path(), "regtest", StoreConfig::default()).unwrap();
    assert!(matches!(
        replica.apply(&chain[3..], true, Height(0)),
        Err(Error::ReadOnly)
    ));
    assert!(matches!(
        replica.rollback_to(Height(0)),
        Err(Error::ReadOnly)
    ));
    assert_eq!(replica.catch_up().unwrap(), None);
    drop(replica);
    assert_eq!(listing(dir.path()), before, "the index is as it was");
}

#[test]
fn replica_follows_silent_payment_records() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), "regtest", sp_config()).unwrap();
    let main = sp_blocks(0, 8, None, 0, 0);
    writer.apply(&main[..4], true, Height(0)).unwrap();
    assert!(matches!(
        Store::open_replica(dir.path(), "regtest", StoreConfig::default()),
        Err(Error::Schema { .. })
    ));
    let replica = Store::open_replica(dir.path(), "regtest", sp_config()).unwrap();
    assert_eq!(sp_by_block(&replica), sp_by_block(&writer));
    writer.apply(&main[4..], true, Height(0)).unwrap();
    replica.catch_up().unwrap();
    assert_eq!(replica.digest().unwrap(), writer.digest().unwrap());
    assert_eq!(sp_by_block(&replica), sp_by_block(&writer));
    writer.rollback_to(Height(4)).unwrap();
    let fork = sp_blocks(5, 4, Some(main[4].header.block_hash()), 1, 10);
    writer.apply(&fork, true, Height(0)).unwrap();
    assert_eq!(
        replica.catch_up().unwrap(),
        Some(TipMove {
            undone: 3,
            added: 4
        })
    );
    assert_eq!(replica.digest().unwrap(), writer.digest().unwrap());
    assert_eq!(sp_by_block(&replica), sp_by_block(&writer));
    // A rollback alone, no new branch yet: the tip moves down.
    writer.rollback_to(Height(6)).unwrap();
    assert_eq!(
        replica.catch_up().unwrap(),
        Some(TipMove {
            undone: 2,
            added: 0
        })
    );
    assert_eq!(replica.tip(), writer.tip());
    assert_eq!(replica.digest().unwrap(), writer.digest().unwrap());
}

/// A writer caught between its rollback and its new branch leaves headers
/// that do not lead to the tip in `meta`: the replica keeps its chain and
/// says to try again, then follows once the files are whole.
#[test]
fn replica_waits_out_files_that_do_not_lead_to_the_tip() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), "regtest", StoreConfig::default()).unwrap();
    let main = blocks(0, 6, None, 0, 0);
    writer.apply(&main[..4], true, Height(0)).unwrap();
    let replica = Store::open_replica(dir.path(), "regtest", StoreConfig::default()).unwrap();
    writer.apply(&main[4..], true, Height(0)).unwrap();
    let headers = dir.path().join("headers.dat");
    let whole = std::fs::read(&headers).unwrap();
    let mut moving = whole.clone();
    let other = blocks(5, 1, Some(main[4].header.block_hash()), 1, 10);
    moving[5 * 80..].copy_from_slice(&bitcoin::consensus::serialize(&other[0].header));
    std::fs::write(&headers, &moving).unwrap();
    let err = replica.catch_up().unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(err.to_string().contains("do not lead to the tip"), "{err}");
    assert_eq!(replica.tip().unwrap().0, Height(3), "the chain it had");
    std::fs::write(&headers, &whole).unwrap();
    assert_eq!(
        replica.catch_up().unwrap(),
        Some(TipMove {
            undone: 0,
            added: 2
        })
    );
    assert_eq!(replica.digest().unwrap(), writer.digest().unwrap());
}

/// A tmpfs of `bytes` mounted on a new directory, unmounted on drop: a
/// filesystem an index can fill. Mounting needs root (the tests run as
/// root); without it the test fails, never skips.
struct SmallFilesystem {
    dir: tempfile::TempDir,
}

impl SmallFilesystem {
    fn mount(bytes: u64) -> SmallFilesystem {
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("running mount");
        assert!(
            status.success(),
            "mounting a {bytes}-byte tmpfs on {} failed ({status}): this test fills a filesystem of its own and needs root",
            dir.path().display()
        );
        SmallFilesystem { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallFilesystem {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

/// Fills the filesystem of `dir` with a file of zeros until a write fails
/// for lack of space, leaving `keep` bytes free.
fn fill(dir: &Path, keep: u64) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let free = space::free_bytes(dir).unwrap();
    let chunk = vec![0u8; 1 << 16];
    let mut left = free.saturating_sub(keep);
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        if file.write_all(&chunk[..n]).is_err() {
            break;
        }
        left -= n as u64;
    }
    path
}

/// Blocks whose rows are many and incompressible (each pays scripts of
/// hashes of its height), so that a few MB of them fill a filesystem.
fn bulky_blocks(len: u32) -> Vec<IndexedBlock> {
    use bitcoin::hashes::sha256;
    let mut chain = blocks(0, len, None, 0, 0);
    for block in &mut chain {
        for vout in 0..100u32 {
            let seed = [block.height.0.to_le_bytes(), vout.to_le_bytes()].concat();
            let script = ScriptHash(sha256::Hash::hash(&seed).to_byte_array());
            block
                .rows
                .push(HistoryRow::funding(block.first_tx_num, vout, 1 << 40).of(&script));
        }
    }
    chain
}

/// A commit that finds the disk full, through the WAL (at the tip) or
/// without it (an initial sync, whose memtable flushes then fail): the
/// error says so, with the path and the bytes; reads go on from the
/// committed index; writes stay stopped until `resume_writes`, which waits
/// for room and then reopens; opening an index there says the disk is
/// full too; and the index finished afterwards is byte for byte a fresh
/// one's.
#[test]
fn a_full_disk_stops_writes_until_there_is_room_and_loses_nothing() {
    let chain = bulky_blocks(1200);
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = Store::open(fresh_dir.path(), "regtest", StoreConfig::default()).unwrap();
    fresh.apply(&chain, true, Height(0)).unwrap();
    let fresh_digest = fresh.digest().unwrap();
    for logged in [true, false] {
        let fs = SmallFilesystem::mount(96 << 20);
        let dir = fs.path().join("index");
        let store = Store::open(&dir, "regtest", StoreConfig::default()).unwrap();
        store.apply(&chain[..100], logged, Height(0)).unwrap();
        store.flush().unwrap();
        let filler = fill(fs.path(), 256 << 10);
        let committed = store.tip().unwrap();
        let history = store.history(&script(1), 10_000).unwrap();
        let mut next = 100;
        let error = loop {
            assert!(next < chain.len(), "the filesystem never filled up");
            let batch = &chain[next..next + 10];
            let applied = store.apply(batch, logged, Height(0)).and_then(|()| {
                // Without the WAL only a flush writes the rows.
                if logged {
                    Ok(())
                } else {
                    store.flush()
                }
            });
            match applied {
                Ok(()) => next += 10,
                Err(e) => break e,
            }
        };
        let Error::NoSpace { path, needed, free } = &error else {
            panic!("logged {logged}: a full disk gave {error:?}");
        };
        assert_eq!(path, &dir);
        assert!(*needed > *free, "{error}");
        // Reads answer from the committed index (what was flushed: without
        // the WAL the last batches may still be in memory).
        assert!(store.tip().unwrap().0 >= committed.0);
        assert_eq!(
            store
                .history(&script(1), 10_000)
                .unwrap()
                .map(|h| h.len() >= history.as_ref().unwrap().len()),
            Some(true)
        );
        let tip = store.tip().unwrap().0;
        let more = store.apply(
            &chain[tip.as_usize() + 1..tip.as_usize() + 2],
            logged,
            Height(0),
        );
        assert!(
            matches!(more, Err(Error::WritesStopped { .. })),
            "a write after a failed one: {more:?}"
        );
        let another = Store::open(
            &fs.path().join("another"),
            "regtest",
            StoreConfig::default(),
        );
        assert!(
            matches!(another, Err(Error::NoSpace { .. })),
            "opening an index on the full disk: {:?}",
            another.err()
        );
        let still_full = store.resume_writes();
        assert!(
            matches!(still_full, Err(Error::NoSpace { .. })),
            "resuming before there is room: {still_full:?}"
        );
        std::fs::remove_file(filler).unwrap();
        assert!(
            store.resume_writes().unwrap(),
            "reopened once there is room"
        );
        let tip = store.tip().unwrap().0;
        store
            .apply(&chain[tip.as_usize() + 1..], logged, Height(0))
            .unwrap();
        assert_eq!(
            store.digest().unwrap(),
            fresh_digest,
            "logged {logged}: the index finished after the full disk"
        );
    }
}
