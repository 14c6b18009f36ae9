//! Bitcoin Core's `blocks` directory, read at the level of its record
//! format: the one reader of `blk*.dat` (and `rev*.dat`) files, used by
//! [`crate::CoreBlockFiles`] (a running node's files), [`crate::BlkFiles`]
//! (`osprey demo`) and `osprey-chaingen` (feeding and checking generated
//! chains).
//!
//! - Each file is a sequence of records `magic | size (u32 LE) | data`;
//!   rev records are followed by a 32-byte checksum (see `corefiles`).
//! - Core preallocates files with zeros, so a zero magic ends a file's data.
//!   Those zeros are written plain, never obfuscated.
//! - Since Core 28 every byte `i` of a file is XORed with `key[i % 8]`, the
//!   8-byte key in `blocks/xor.dat` (absent or all zeros: no obfuscation).
//! - Core appends while we read: a record whose bytes are not all there yet
//!   is "not yet" ([`Record::Partial`]), not an error. Readers of a static
//!   directory ([`Records`]) report it as a truncated file.
//!
//! Every length read from a file is bounded, so a damaged file is an error,
//! never a panic or a huge allocation.

use crate::Error;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// Largest record accepted: a block is at most 4 MB serialized; the bound
/// is the same for undo records.
const RECORD_BYTES_MAX: u32 = 8 << 20;
/// Smallest block record: a block starts with its 80-byte header.
const BLOCK_BYTES_MIN: u32 = 80;
/// Open files kept for reuse (Core has thousands on mainnet).
const OPEN_FILES_MAX: usize = 64;
/// Bytes after each rev record's data: SHA256d(parent hash || undo).
const REV_CHECKSUM_BYTES: u64 = 32;

/// Where a record's data (a block's bytes, for blk files) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockPosition {
    /// The file number `N` of `blkN.dat` (or `revN.dat`).
    pub file: u32,
    /// Offset of the data's first byte (after the record head).
    pub offset: u64,
    pub len: u32,
}

/// Which of the two kinds of numbered files in a blocks directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// `blkNNNNN.dat`: blocks.
    Blk,
    /// `revNNNNN.dat`: undo data of the blocks in `blkNNNNN.dat`.
    Rev,
}

impl FileKind {
    fn prefix(self) -> &'static str {
        match self {
            FileKind::Blk => "blk",
            FileKind::Rev => "rev",
        }
    }

    fn trailer(self) -> u64 {
        match self {
            FileKind::Blk => 0,
            FileKind::Rev => REV_CHECKSUM_BYTES,
        }
    }
}

/// What is at a position of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Record {
    /// A complete record: `len` bytes of data at `offset`; the next record
    /// starts at `next`.
    Complete { offset: u64, len: u32, next: u64 },
    /// No more records: the file ends, or Core's zero preallocation begins.
    End,
    /// A record whose bytes are not all in the file: Core is still writing
    /// it, or a static file is truncated.
    Partial,
    /// Bytes that are no record head (another magic, a length no record
    /// has), and why: a damaged file, or, in a file Core writes to, bytes
    /// it wrote over what was read before (see `CoreBlockFiles::rescan`).
    Damaged(String),
}

/// A blocks directory: its network magic, its XOR key and a bounded cache
/// of open files, shared by every thread that reads it.
pub struct BlocksDir {
    dir: PathBuf,
    /// Known from the network, or taken from the first record read.
    magic: OnceLock<[u8; 4]>,
    xor: [u8; 8],
    open: Mutex<HashMap<(FileKind, u32), Arc<File>>>,
}

impl BlocksDir {
    /// Opens `dir` (Core's `<datadir>/<network>/blocks`, chaingen's
    /// `DIR/blocks`) and reads its XOR key. With `magic` `None`, the first
    /// record read fixes the network, and every later one must match it.
    ///
    /// # Errors
    /// When `xor.dat` cannot be read or does not hold 8 bytes.
    pub fn open(dir: &Path, magic: Option<[u8; 4]>) -> Result<BlocksDir, Error> {
        let path = dir.join("xor.dat");
        let xor = match std::fs::read(&path) {
            Ok(key) => key.as_slice().try_into().map_err(|_| {
                Error::persistent(format!(
                    "{}: must hold 8 bytes, found {}",
                    path.display(),
                    key.len()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => [0; 8],
            Err(e) => return Err(Error::persistent(format!("{}: {e}", path.display()))),
        };
        Ok(BlocksDir::with_key(dir, magic, xor))
    }

    fn with_key(dir: &Path, magic: Option<[u8; 4]>, xor: [u8; 8]) -> BlocksDir {
        let known = OnceLock::new();
        if let Some(magic) = magic {
            known.set(magic).expect("a new cell is empty");
        }
        BlocksDir {
            dir: dir.to_path_buf(),
            magic: known,
            xor,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// The path of file `n` of this kind, named as Core names it.
    pub fn path(&self, kind: FileKind, n: u32) -> PathBuf {
        self.dir.join(format!("{}{n:05}.dat", kind.prefix()))
    }

    /// The numbers of the `blkNNNNN.dat` files present, in order (Core
    /// numbers them from 0; a pruned node has deleted the first ones).
    ///
    /// # Errors
    /// When the directory cannot be listed.
    pub fn blk_files(&self) -> Result<Vec<u32>, Error> {
        let io = |e: std::io::Error| Error::persistent(format!("{}: {e}", self.dir.display()));
        let mut numbers = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(io)? {
            let name = entry.map_err(io)?.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            let number = name
                .strip_prefix("blk")
                .and_then(|rest| rest.strip_suffix(".dat"))
                .filter(|digits| digits.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|digits| digits.parse::<u32>().ok());
            // Only the names `path` gives back: `blk7.dat` is not file 7.
            if let Some(n) = number.filter(|&n| self.path(FileKind::Blk, n).ends_with(name)) {
                numbers.push(n);
            }
        }
        numbers.sort_unstable();
        Ok(numbers)
    }

    /// File `n` of this kind, opened once and kept; `None` when it does not
    /// exist (not written yet, or pruned).
    pub(crate) fn file(&self, kind: FileKind, n: u32) -> Result<Option<Arc<File>>, Error> {
        let mut open = self.open.lock().expect("open files lock");
        if let Some(f) = open.get(&(kind, n)) {
            return Ok(Some(Arc::clone(f)));
        }
        let path = self.path(kind, n);
        let f = match File::open(&path) {
            Ok(f) => Arc::new(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::persistent(format!("{}: {e}", path.display()))),
        };
        if open.len() >= OPEN_FILES_MAX {
            open.clear();
        }
        open.insert((kind, n), Arc::clone(&f));
        Ok(Some(f))
    }

    /// The length of file `n` of this kind now, `None` when it does not
    /// exist.
    pub(crate) fn file_len(&self, kind: FileKind, n: u32) -> Result<Option<u64>, Error> {
        let Some(f) = self.file(kind, n)? else {
            return Ok(None);
        };
        let meta = f
            .metadata()
            .map_err(|e| Error::persistent(format!("{}: {e}", self.path(kind, n).display())))?;
        Ok(Some(meta.len()))
    }

    /// Reads `buf.len()` bytes at `offset` of a file, undoing the XOR
    /// obfuscation. Fails when the file is missing or shorter.
    pub(crate) fn read_exact(
        &self,
        kind: FileKind,
        n: u32,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), Error> {
        self.read_stored(kind, n, offset, buf)?;
        self.unobfuscate(offset, buf);
        Ok(())
    }

    /// Reads bytes as stored: the space Core preallocated but has not
    /// written yet is zeros there, not obfuscated zeros.
    pub(crate) fn read_stored(
        &self,
        kind: FileKind,
        n: u32,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), Error> {
        let f = self.file(kind, n)?.ok_or_else(|| {
            Error::persistent(format!("{} is missing", self.path(kind, n).display()))
        })?;
        f.read_exact_at(buf, offset).map_err(|e| {
            Error::persistent(format!(
                "{} at offset {offset}: {e}",
                self.path(kind, n).display()
            ))
        })
    }

    /// Undoes the XOR obfuscation of `buf`, read at `offset` of a file.
    pub(crate) fn unobfuscate(&self, offset: u64, buf: &mut [u8]) {
        if self.xor != [0; 8] {
            for (i, byte) in buf.iter_mut().enumerate() {
                *byte ^= self.xor[((offset + i as u64) % 8) as usize];
            }
        }
    }

    /// The data of a complete blk record (a block's bytes).
    ///
    /// # Errors
    /// When the file is missing or shorter than the record.
    pub fn read_block(&self, pos: BlockPosition) -> Result<Vec<u8>, Error> {
        let mut bytes = vec![0u8; pos.len as usize];
        self.read_exact(FileKind::Blk, pos.file, pos.offset, &mut bytes)?;
        Ok(bytes)
    }

    /// The record at `pos` of a file `file_len` bytes long.
    pub(crate) fn record_at(
        &self,
        kind: FileKind,
        n: u32,
        pos: u64,
        file_len: u64,
    ) -> Result<Record, Error> {
        if pos >= file_len {
            return Ok(Record::End);
        }
        if file_len - pos < 8 {
            // Too short for a record head: preallocated zeros, or a head
            // being written.
            let mut tail = vec![0u8; (file_len - pos) as usize];
            self.read_stored(kind, n, pos, &mut tail)?;
            return Ok(if tail.iter().all(|&b| b == 0) {
                Record::End
            } else {
                Record::Partial
            });
        }
        let mut head = [0u8; 8];
        self.read_stored(kind, n, pos, &mut head)?;
        if head[..4] == [0; 4] {
            return Ok(Record::End); // Core preallocates files with (plain) zeros.
        }
        self.unobfuscate(pos, &mut head);
        let magic: [u8; 4] = head[..4].try_into().expect("4 bytes");
        let expected = *self.magic.get_or_init(|| magic);
        if magic != expected {
            return Ok(Record::Damaged(format!(
                "{} at offset {pos}: magic {}, expected {} (another network's file, or not a block file)",
                self.path(kind, n).display(),
                hex::encode(magic),
                hex::encode(expected),
            )));
        }
        let len = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        if len > RECORD_BYTES_MAX {
            return Ok(Record::Damaged(format!(
                "{} at offset {pos}: record announces {len} bytes, more than any {}",
                self.path(kind, n).display(),
                match kind {
                    FileKind::Blk => "block",
                    FileKind::Rev => "block's undo data",
                }
            )));
        }
        let next = pos + 8 + u64::from(len) + kind.trailer();
        if next > file_len {
            return Ok(Record::Partial);
        }
        Ok(Record::Complete {
            offset: pos + 8,
            len,
            next,
        })
    }

    /// Walks the records of a file from `from`, calling `found` with each
    /// complete record's (offset of its data, length); returns where the
    /// walk stopped (the end of the data, a record not fully written yet,
    /// or bytes that are no record), which is where the next walk resumes,
    /// and, when it stopped at bytes that are no record, what is wrong
    /// there.
    pub(crate) fn walk(
        &self,
        kind: FileKind,
        n: u32,
        from: u64,
        mut found: impl FnMut(u64, u32) -> Result<(), Error>,
    ) -> Result<(u64, Option<String>), Error> {
        let Some(file_len) = self.file_len(kind, n)? else {
            return Ok((from, None));
        };
        let mut pos = from;
        loop {
            match self.record_at(kind, n, pos, file_len)? {
                Record::Complete { offset, len, next } => {
                    found(offset, len)?;
                    pos = next;
                }
                Record::End | Record::Partial => return Ok((pos, None)),
                Record::Damaged(what) => return Ok((pos, Some(what))),
            }
        }
    }

    /// Every block record of the blk files present, in file order, for a
    /// directory nobody writes to: there a record cut short is an error.
    ///
    /// # Errors
    /// When the directory cannot be listed or holds no blk files.
    pub fn blocks(&self) -> Result<Records<&BlocksDir>, Error> {
        Records::new(self)
    }

    /// Like [`BlocksDir::blocks`], owning the directory.
    ///
    /// # Errors
    /// As [`BlocksDir::blocks`].
    pub fn into_blocks(self) -> Result<Records<BlocksDir>, Error> {
        Records::new(self)
    }
}

/// The positions of the block records of a static blocks directory, in file
/// order (height order for chaingen's files and `osprey demo`'s, not
/// necessarily for Core's). After an error it ends.
pub struct Records<D: Borrow<BlocksDir>> {
    dir: D,
    files: std::vec::IntoIter<u32>,
    /// The file being read: its number, the next record's position, its
    /// length.
    current: Option<(u32, u64, u64)>,
    failed: bool,
}

impl<D: Borrow<BlocksDir>> Records<D> {
    fn new(dir: D) -> Result<Records<D>, Error> {
        let files = dir.borrow().blk_files()?;
        if files.is_empty() {
            return Err(Error::persistent(format!(
                "{}: no blk?????.dat files",
                dir.borrow().dir.display()
            )));
        }
        Ok(Records {
            dir,
            files: files.into_iter(),
            current: None,
            failed: false,
        })
    }

    /// The directory read.
    pub fn dir(&self) -> &BlocksDir {
        self.dir.borrow()
    }

    fn next_record(&mut self) -> Result<Option<BlockPosition>, Error> {
        let dir = self.dir.borrow();
        loop {
            let (n, pos, file_len) = match self.current {
                Some(current) => current,
                None => {
                    let Some(n) = self.files.next() else {
                        return Ok(None);
                    };
                    let file_len = dir.file_len(FileKind::Blk, n)?.ok_or_else(|| {
                        Error::persistent(format!(
                            "{} is missing",
                            dir.path(FileKind::Blk, n).display()
                        ))
                    })?;
                    (n, 0, file_len)
                }
            };
            match dir.record_at(FileKind::Blk, n, pos, file_len)? {
                Record::Damaged(what) => return Err(Error::persistent(what)),
                Record::End => self.current = None,
                Record::Partial => {
                    return Err(Error::persistent(format!(
                        "{} at offset {pos}: file ends inside a block record",
                        dir.path(FileKind::Blk, n).display()
                    )))
                }
                Record::Complete { offset, len, next } => {
                    if len < BLOCK_BYTES_MIN {
                        return Err(Error::persistent(format!(
                            "{} at offset {pos}: record of {len} bytes, too short for a block",
                            dir.path(FileKind::Blk, n).display()
                        )));
                    }
                    self.current = Some((n, next, file_len));
                    return Ok(Some(BlockPosition {
                        file: n,
                        offset,
                        len,
                    }));
                }
            }
        }
    }
}

impl<D: Borrow<BlocksDir>> Iterator for Records<D> {
    type Item = Result<BlockPosition, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = self.next_record().transpose();
        if matches!(item, Some(Err(_))) {
            // Past a broken record nothing can be found: report once, stop.
            self.failed = true;
        }
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::consensus::serialize;

    const REGTEST_MAGIC: [u8; 4] = [0xfa, 0xbf, 0xb5, 0xda];

    fn genesis_bytes() -> Vec<u8> {
        serialize(&bitcoin::blockdata::constants::genesis_block(
            bitcoin::Network::Regtest,
        ))
    }

    fn record(magic: [u8; 4], data: &[u8]) -> Vec<u8> {
        let mut r = magic.to_vec();
        r.extend_from_slice(&(data.len() as u32).to_le_bytes());
        r.extend_from_slice(data);
        r
    }

    fn xor(plain: &[u8], key: [u8; 8]) -> Vec<u8> {
        plain
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ key[i % 8])
            .collect()
    }

    #[test]
    fn xor_applies_by_file_offset() {
        let dir = tempfile::tempdir().unwrap();
        let key = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let plain: Vec<u8> = (0u8..40).collect();
        std::fs::write(dir.path().join("blk00000.dat"), xor(&plain, key)).unwrap();
        std::fs::write(dir.path().join("xor.dat"), key).unwrap();
        let files = BlocksDir::open(dir.path(), None).unwrap();
        let mut buf = [0u8; 5];
        files.read_exact(FileKind::Blk, 0, 13, &mut buf).unwrap();
        assert_eq!(buf, plain[13..18]);
    }

    #[test]
    fn records_end_where_cores_preallocated_zeros_begin() {
        let dir = tempfile::tempdir().unwrap();
        let key = [0x9d, 0x71, 0x93, 0x32, 0x0c, 0x58, 0xfa, 0x99];
        let mut plain = record(REGTEST_MAGIC, &[7u8; 5]);
        plain.extend(record(REGTEST_MAGIC, &[8u8; 3]));
        let written = plain.len();
        let mut stored = xor(&plain, key);
        // Preallocated space is plain zeros, which do not decode to zeros.
        stored.resize(written + 64, 0);
        std::fs::write(dir.path().join("blk00000.dat"), &stored).unwrap();
        let files = BlocksDir::with_key(dir.path(), Some(REGTEST_MAGIC), key);
        let mut records = Vec::new();
        let end = files
            .walk(FileKind::Blk, 0, 0, |offset, len| {
                records.push((offset, len));
                Ok(())
            })
            .unwrap();
        assert_eq!(records, vec![(8, 5), (21, 3)]);
        assert_eq!(end, (written as u64, None));
    }

    #[test]
    fn a_record_being_written_is_not_yet_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rev00000.dat");
        let files = BlocksDir::open(dir.path(), Some(REGTEST_MAGIC)).unwrap();
        let walk = || {
            let mut found = Vec::new();
            let (end, damage) = files
                .walk(FileKind::Rev, 0, 0, |offset, len| {
                    found.push((offset, len));
                    Ok(())
                })
                .unwrap();
            assert_eq!(damage, None);
            (found, end)
        };
        assert_eq!(walk(), (vec![], 0), "no file yet");
        let mut data = record(REGTEST_MAGIC, &[7u8; 5]);
        std::fs::write(&path, &data).unwrap();
        // A rev record is followed by its 32-byte checksum.
        assert_eq!(walk(), (vec![], 0), "the checksum is not there yet");
        data.extend_from_slice(&[1u8; 32]);
        std::fs::write(&path, &data).unwrap();
        assert_eq!(walk(), (vec![(8, 5)], 45));
        data.extend_from_slice(&REGTEST_MAGIC[..3]);
        std::fs::write(&path, &data).unwrap();
        assert_eq!(walk(), (vec![(8, 5)], 45), "a head cut short");
        assert_eq!(
            files.record_at(FileKind::Rev, 0, 45, 48).unwrap(),
            Record::Partial
        );
        data.truncate(45);
        data.extend_from_slice(&[0; 3]);
        std::fs::write(&path, &data).unwrap();
        assert_eq!(
            files.record_at(FileKind::Rev, 0, 45, 48).unwrap(),
            Record::End,
            "preallocated zeros"
        );
    }

    #[test]
    fn reads_obfuscated_and_zero_padded_files() {
        let dir = tempfile::tempdir().unwrap();
        let key = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let block = genesis_bytes();
        let mut plain = record(REGTEST_MAGIC, &block);
        plain.extend_from_slice(&[0u8; 64]);
        // Core's padding is plain zeros...
        let mut stored = xor(&plain, key);
        let written = block.len() + 8;
        stored[written..].fill(0);
        std::fs::write(dir.path().join("blk00000.dat"), stored).unwrap();
        // ...obfuscated ones are garbage after the record.
        std::fs::write(dir.path().join("blk00001.dat"), xor(&plain, key)).unwrap();
        std::fs::write(dir.path().join("blk1.dat"), b"not a blk file").unwrap();
        std::fs::write(dir.path().join("xor.dat"), key).unwrap();
        let files = BlocksDir::open(dir.path(), None).unwrap();
        let mut blocks = files.blocks().unwrap();
        let first = blocks.next().unwrap().unwrap();
        let len = block.len() as u32;
        assert_eq!(
            first,
            BlockPosition {
                file: 0,
                offset: 8,
                len
            }
        );
        assert_eq!(files.read_block(first).unwrap(), block);
        let second = blocks.next().unwrap().unwrap();
        assert_eq!(
            second,
            BlockPosition {
                file: 1,
                offset: 8,
                len
            }
        );
        let err = blocks.next().unwrap().unwrap_err();
        assert!(
            err.message().contains(&format!(
                "blk00001.dat at offset {written}: magic 00000000, expected fabfb5da"
            )),
            "{err}"
        );
        assert!(blocks.next().is_none(), "ends after an error");
    }

    #[test]
    fn reports_truncation_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blk00000.dat");
        let block = genesis_bytes();
        let message = |dir: &Path| {
            let files = BlocksDir::open(dir, Some(REGTEST_MAGIC)).unwrap();
            let mut blocks = files.blocks().unwrap();
            let err = blocks.next().unwrap().unwrap_err();
            assert!(blocks.next().is_none());
            err.message().to_string()
        };

        let mut data = record(REGTEST_MAGIC, &block);
        data.truncate(data.len() - 1);
        std::fs::write(&path, &data).unwrap();
        let m = message(dir.path());
        assert!(
            m.contains("blk00000.dat at offset 0: file ends inside"),
            "{m}"
        );

        let mut data = REGTEST_MAGIC.to_vec();
        data.extend_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&path, &data).unwrap();
        let m = message(dir.path());
        assert!(m.contains("announces 4294967295 bytes"), "{m}");

        std::fs::write(&path, record(REGTEST_MAGIC, &[1; 79])).unwrap();
        let m = message(dir.path());
        assert!(m.contains("record of 79 bytes"), "{m}");

        let mut data = record(REGTEST_MAGIC, &block);
        data.extend(record([0xf9, 0xbe, 0xb4, 0xd9], &block));
        std::fs::write(&path, &data).unwrap();
        let files = BlocksDir::open(dir.path(), None).unwrap();
        let m = files.blocks().unwrap().nth(1).unwrap().unwrap_err();
        assert!(
            m.message().contains(&format!(
                "offset {}: magic f9beb4d9, expected fabfb5da",
                block.len() + 8
            )),
            "{m}"
        );

        let empty = tempfile::tempdir().unwrap();
        let files = BlocksDir::open(empty.path(), None).unwrap();
        let m = files.blocks().err().unwrap();
        assert!(m.message().contains("no blk?????.dat files"), "{m}");

        std::fs::write(empty.path().join("xor.dat"), [1u8; 7]).unwrap();
        let m = BlocksDir::open(empty.path(), None).err().unwrap();
        assert!(
            m.message().contains("xor.dat: must hold 8 bytes, found 7"),
            "{m}"
        );
    }
}
