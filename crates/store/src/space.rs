//! A full disk: telling it apart from other write failures, and how much
//! room the index's filesystem has.

use std::ffi::CString;
use std::io;
use std::ops::Deref;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::RwLockReadGuard;

use rocksdb::DB;

use crate::{Error, Result, Stall, Store};

/// Room a retry needs beyond the failed write's own bytes: one memtable
/// flush (`write_buffer_size`, see `open::column_family`), which RocksDB
/// writes as soon as it is open again.
pub(crate) const FLUSH_MARGIN_BYTES: u64 = 32 << 20;

/// Whether an I/O error is a full filesystem (or a full quota, which an
/// operator frees the same way).
pub(crate) fn io_is_no_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// Whether a RocksDB error is a full filesystem: RocksDB reports it as an
/// I/O error with `strerror(ENOSPC)` in its message (its `NoSpace`
/// subcode has no other trace in the C API), and every write after it
/// repeats that background error.
pub(crate) fn db_is_no_space(e: &rocksdb::Error) -> bool {
    let message = e.to_string();
    message.contains("No space left on device") || message.contains("Disk quota exceeded")
}

/// Bytes an unprivileged process may still write on the filesystem that
/// holds `path`; `None` when it cannot be asked.
pub(crate) fn free_bytes(path: &Path) -> Option<u64> {
    let c_path = CString::new(path.as_os_str().as_bytes()).ok()?;
    statvfs_available(&c_path)
}

/// `statvfs(2)`: no safe wrapper in the standard library. (Its fields are
/// u64 here, u32 on 32-bit targets.)
#[allow(unsafe_code, clippy::useless_conversion)]
fn statvfs_available(path: &CString) -> Option<u64> {
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is a NUL-terminated string that outlives the call, and
    // `stat` points to writable memory of the struct's size, which
    // statvfs fills completely when it returns 0.
    let stat = unsafe {
        if libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) != 0 {
            return None;
        }
        stat.assume_init()
    };
    Some(u64::from(stat.f_bavail).saturating_mul(u64::from(stat.f_frsize)))
}

/// The open database, read-locked: a reopen ([`Store::resume_writes`])
/// waits for every holder.
pub(crate) struct DbRef<'a>(RwLockReadGuard<'a, Option<DB>>);

impl Deref for DbRef<'_> {
    type Target = DB;

    fn deref(&self) -> &DB {
        self.0
            .as_ref()
            .expect("Store::db hands out open databases only")
    }
}

impl Store {
    /// The database, unless a reopen after a failed write failed.
    pub(crate) fn db(&self) -> Result<DbRef<'_>> {
        let db = self.db.read().expect("db lock poisoned");
        if db.is_none() {
            return Err(Error::WritesStopped {
                path: self.path.clone(),
                reason: "the index could not be opened again after a failed write".into(),
            });
        }
        Ok(DbRef(db))
    }

    /// Runs one write of the index that may need `bytes` of free space.
    /// Refused while an earlier write's failure stands; a failure of this
    /// one stops writes until [`Store::resume_writes`]: the flat files
    /// may then be ahead of the tip, RocksDB in its background-error state,
    /// and only a reopen puts both back in step.
    pub(crate) fn write_step<T>(&self, bytes: u64, write: impl FnOnce() -> Result<T>) -> Result<T> {
        if let Some(stall) = &*self.stalled.lock().expect("stall lock poisoned") {
            return Err(Error::WritesStopped {
                path: self.path.clone(),
                reason: stall.reason.clone(),
            });
        }
        write().map_err(|e| {
            // A refusal (a pruned undo record, a malformed block) wrote
            // nothing.
            if !matches!(e, Error::Db(_) | Error::File { .. } | Error::NoSpace { .. }) {
                return e;
            }
            let e = self.no_space_or(e, bytes.saturating_add(FLUSH_MARGIN_BYTES));
            let needed = match &e {
                Error::NoSpace { needed, .. } => *needed,
                _ => 0,
            };
            *self.stalled.lock().expect("stall lock poisoned") = Some(Stall {
                reason: e.to_string(),
                needed,
            });
            e
        })
    }

    /// `e` as [`Error::NoSpace`] when it is a full filesystem, with the
    /// free bytes now and `needed`.
    pub(crate) fn no_space_or(&self, e: Error, needed: u64) -> Error {
        no_space_or(e, &self.path, needed)
    }
}

/// `e` as [`Error::NoSpace`] for the index in `dir` when it is a full
/// filesystem, with the free bytes now and `needed`.
pub(crate) fn no_space_or(e: Error, dir: &Path, needed: u64) -> Error {
    let full = match &e {
        Error::NoSpace { .. } => return e,
        Error::File { source, .. } => io_is_no_space(source),
        Error::Db(db) => db_is_no_space(db),
        _ => false,
    };
    if !full {
        return e;
    }
    Error::NoSpace {
        path: dir.to_path_buf(),
        needed,
        free: free_bytes(dir).unwrap_or(0),
    }
}
