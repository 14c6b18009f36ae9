//! The names of one network's index inside its directory, and the only code
//! that deletes an index.
//!
//! The directory is not assumed to be Osprey's alone. An operator may keep
//! notes there, and a node package that swaps Osprey in for electrs often
//! keeps electrs' `db_dir`: electrs 0.12 puts its own RocksDB files
//! straight into `<db_dir>/bitcoin`, the very directory Osprey's mainnet
//! index lives in. So deleting an index (`--reindex`, a rebuild after a
//! format change) removes these names and nothing else.

use std::io;
use std::path::{Path, PathBuf};

/// The directory of the RocksDB files, in the index and in a snapshot.
pub(crate) const ROCKSDB_DIR: &str = "rocksdb";

/// The flat files (see `Store::open`); the last two exist only in an index
/// with silent payments.
pub(crate) const FLAT_FILES: [&str; 6] = [
    "headers.dat",
    "txcounts.dat",
    "txids.dat",
    "txsizes.dat",
    "spoffsets.dat",
    "sptweaks.dat",
];

/// Flat files of earlier formats, deleted with the index that a format
/// change rebuilds: `txends.dat` until format 9.
const FORMER_FLAT_FILES: [&str; 1] = ["txends.dat"];

/// Deletes the index in `dir`: its RocksDB directory and its flat files,
/// then `dir` itself if that left it empty. Anything else in `dir` stays.
/// Returns what was deleted.
///
/// # Errors
/// When one of the index's files exists but cannot be deleted; what was
/// deleted before stays deleted (a half-deleted index is refused at open,
/// and deleting again finishes the job).
pub fn remove_index(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    let rocksdb = dir.join(ROCKSDB_DIR);
    match std::fs::remove_dir_all(&rocksdb) {
        Ok(()) => removed.push(rocksdb),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(with_path(e, &rocksdb)),
    }
    for name in FLAT_FILES.iter().chain(&FORMER_FLAT_FILES) {
        let path = dir.join(name);
        match std::fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(with_path(e, &path)),
        }
    }
    // Only when empty: `remove_dir` refuses a directory that still holds
    // someone else's files, and that refusal is the point.
    if std::fs::remove_dir(dir).is_ok() {
        removed.push(dir.to_path_buf());
    }
    Ok(removed)
}

fn with_path(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("deleting {}: {e}", path.display()))
}
