//! Append-only files of fixed-size records (headers, txids, tx counts, and
//! `sptweaks.dat`, whose variable-length records are one-byte records
//! here: `spoffsets.dat` delimits them).
//!
//! Records are appended before the database commit that covers them and
//! synced with it (in a bulk load, before the run that moves the tip); on
//! open, anything beyond the committed tip is cut off, so a crash can
//! leave a file ahead of the tip but never behind it.
//!
//! A read-only replica opens them without write access and reads only the
//! records its committed tip covers ([`FlatFile::open_read_only`],
//! [`FlatFile::follow`]): what lies beyond may be a batch the writer has
//! not committed yet.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

pub(crate) struct FlatFile {
    path: PathBuf,
    file: File,
    record_len: u64,
    records: u64,
    /// Appended bytes not yet written to the file.
    pending: Vec<u8>,
    /// Written since the last sync ([`FlatFile::flush`]). Atomic so that
    /// [`FlatFile::sync`] needs only a shared reference: the writer syncs
    /// under the read lock of the files, and readers go on meanwhile.
    unsynced: AtomicBool,
}

impl FlatFile {
    pub(crate) fn open(path: &Path, record_len: usize) -> io::Result<FlatFile> {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)?;
        let len = file.metadata()?.len();
        let record_len = record_len as u64;
        Ok(FlatFile {
            path: path.to_path_buf(),
            file,
            record_len,
            records: len / record_len,
            pending: Vec::new(),
            unsynced: AtomicBool::new(false),
        })
    }

    /// Opens `path` for reading only, with no record readable until
    /// [`FlatFile::follow`] says how many are committed.
    pub(crate) fn open_read_only(path: &Path, record_len: usize) -> io::Result<FlatFile> {
        Ok(FlatFile {
            path: path.to_path_buf(),
            file: File::open(path)?,
            record_len: record_len as u64,
            records: 0,
            pending: Vec::new(),
            unsynced: AtomicBool::new(false),
        })
    }

    /// Records on disk now, committed or not (a replica checks that its
    /// tip's records are there before it follows them).
    pub(crate) fn records_on_disk(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len() / self.record_len)
    }

    /// Makes the first `records` records, and only those, readable: the
    /// ones a replica's committed tip covers. Nothing on disk changes.
    pub(crate) fn follow(&mut self, records: u64) {
        self.records = records;
    }

    /// Records on disk plus those appended but not yet flushed.
    pub(crate) fn len(&self) -> u64 {
        self.records + self.pending.len() as u64 / self.record_len
    }

    /// Bytes of the records on disk and appended.
    pub(crate) fn bytes(&self) -> u64 {
        self.len() * self.record_len
    }

    /// Appends whole records (one, or several back to back).
    pub(crate) fn append(&mut self, records: &[u8]) {
        assert_eq!(
            records.len() as u64 % self.record_len,
            0,
            "{}: not whole records",
            self.path.display()
        );
        self.pending.extend_from_slice(records);
    }

    /// Writes pending records and makes them durable.
    pub(crate) fn flush_and_sync(&mut self) -> io::Result<()> {
        self.flush()?;
        self.sync()
    }

    /// Makes the records written ([`FlatFile::flush`]) durable.
    pub(crate) fn sync(&self) -> io::Result<()> {
        if self.unsynced.swap(false, Ordering::SeqCst) {
            if let Err(e) = self.file.sync_data() {
                self.unsynced.store(true, Ordering::SeqCst);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Writes pending records, leaving them to the page cache: durable by
    /// a later [`FlatFile::flush_and_sync`].
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.file.write_all(&self.pending)?;
        self.records += self.pending.len() as u64 / self.record_len;
        self.pending.clear();
        self.unsynced.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Cuts the file back to `records` records (a crash or a reorg left more).
    pub(crate) fn truncate(&mut self, records: u64) -> io::Result<()> {
        self.pending.clear();
        if records < self.records || self.file.metadata()?.len() != records * self.record_len {
            self.file.set_len(records * self.record_len)?;
            self.file.sync_data()?;
        }
        self.records = records;
        Ok(())
    }

    /// Reads records from `index` straight from the file, committed or not:
    /// for a replica checking what it is about to follow.
    pub(crate) fn read_exact_at(&self, index: u64, out: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(out, index * self.record_len)
    }

    pub(crate) fn read(&self, index: u64, out: &mut [u8]) -> io::Result<()> {
        self.read_many(index, out)
    }

    /// Reads consecutive records starting at `index` into `out` (a multiple
    /// of the record length).
    pub(crate) fn read_many(&self, index: u64, out: &mut [u8]) -> io::Result<()> {
        let count = out.len() as u64 / self.record_len;
        if index + count > self.records {
            // Still in the pending buffer (only within the writer's batch).
            let start = index.checked_sub(self.records).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "read spans flushed and pending records",
                )
            })?;
            let start = (start * self.record_len) as usize;
            let src = self.pending.get(start..start + out.len()).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("{}: record {index} beyond end", self.path.display()),
                )
            })?;
            out.copy_from_slice(src);
            return Ok(());
        }
        self.file.read_exact_at(out, index * self.record_len)
    }
}
