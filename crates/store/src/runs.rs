//! The bulk load's sorted runs: how a first sync writes each history and
//! txid row about twice, at the same rate whatever the index already holds.
//!
//! During a bulk load (see `Store::begin_bulk_load`) a commit's rows do not
//! go to RocksDB. They collect in a [`RunBuffer`] in memory; when it holds
//! `bulk_run_bytes`, it is sorted and written out as one *run*: for each
//! partition of each family a file of its rows in key order
//! ([`write_run`]), a script's operands of one epoch already merged into
//! one value. At the node's tip the runs of one partition are merged into
//! SST files ([`merge_partition`]) that RocksDB ingests as its last level,
//! and their run files go before the next partition begins.
//!
//! Why not RocksDB's own flushes and compactions: the keys are hashes, so
//! every flushed file overlaps every other. Leveled compaction rewrites a
//! row once per level (6.21 bytes written per index byte at mainnet's depth,
//! the last tenth at 0.56 of the first); left in level 0 until the tip
//! (formats 4 and 5), mainnet's ~7,000 flushes make a quarter of a million
//! files, and RocksDB's work per flush, its memory and its write stalls grow
//! with them (at lsm_scale 24 on a 50M chain the last tenth ran at 0.29 of
//! the first). A run costs the same to write whatever came before it, the
//! merge reads each run once, and mainnet's ~650 runs of 256 MiB merge in
//! one pass with one buffered reader each.
//!
//! A run file is a sequence of blocks, each `raw length (u32 LE) ·
//! compressed length (u32 LE, its top bit set for zstd) · compressed
//! block`. Blocks are zstd's (level 1). Earlier builds wrote LZ4's, which
//! are still read: a bulk load may be carried on across an upgrade. Why
//! zstd: the runs are the first sync's peak on disk, and with LZ4 the 50M
//! chain's at `lsm_scale` 24 took the database to 1.25 times its final
//! size (issue 33 asks for 1.15); zstd's runs are about a tenth smaller.
//! A block's records are
//! `varint(bytes shared with the previous key) · varint(bytes not shared) ·
//! those bytes · varint(value length) · value`, the first of a block
//! sharing nothing. Runs are named by their number, which is their order in
//! the chain (`000012.h3` holds run 12's history rows of partition 3); the
//! index's `bulk` record counts the runs that are complete, and a file of a
//! later number (a run whose writing a crash interrupted) is deleted on
//! open.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use osprey_core::{read_varint, write_varint};

use crate::codec;
use crate::open::file_err;
use crate::{Error, Family, Result, PARTITIONS};

/// The directory of the runs, inside the index's directory.
pub(crate) const RUNS_DIR: &str = "bulk";

/// Raw bytes of a run file's block before it is compressed. A merge holds
/// one block, raw and compressed, for each run, in each of the two halves
/// of a partition it merges at once: mainnet's ~650 runs take ~85 MB.
const BLOCK_BYTES: usize = 32 << 10;

/// The flag, in a block's compressed length, of a zstd block (an LZ4 one
/// without it).
const ZSTD_BLOCK: u32 = 1 << 31;

/// zstd's level for run blocks: written once and read once, they want
/// the fastest level that still finds a block's repeats.
const RUN_ZSTD_LEVEL: i32 = 1;

/// The rows of the blocks committed since the last run was written.
#[derive(Default)]
pub(crate) struct RunBuffer {
    /// History rows, in commit order.
    history: Vec<codec::ScriptRow>,
    /// Txid keys as [`codec::txid_key_bits`].
    txids: Vec<u128>,
}

impl RunBuffer {
    /// Takes a batch's rows and txid keys.
    pub(crate) fn push(&mut self, history: &[codec::ScriptRow], txids: &[u128]) {
        self.history.extend_from_slice(history);
        self.txids.extend_from_slice(txids);
    }

    /// Memory it holds, in bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.history.len() * std::mem::size_of::<codec::ScriptRow>()
            + self.txids.len() * std::mem::size_of::<u128>()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.history.is_empty() && self.txids.is_empty()
    }
}

/// The file of run `run`'s rows of `family` in `partition`.
pub(crate) fn run_path(dir: &Path, run: u32, family: Family, partition: usize) -> PathBuf {
    // A bulk load writes history and txid rows only.
    let letter = match family {
        Family::History => 'h',
        Family::Txid | Family::Meta | Family::Undo => 't',
    };
    dir.join(format!("{run:06}.{letter}{partition:x}"))
}

/// Writes `buffer` as run number `run` in `dir`: its rows sorted, a
/// script's rows of one epoch as one value, one file per family and
/// partition, each synced, then the directory. Returns the bytes written.
///
/// # Errors
/// On I/O errors.
pub(crate) fn write_run(dir: &Path, run: u32, mut buffer: RunBuffer) -> Result<u64> {
    std::fs::create_dir_all(dir).map_err(file_err(dir))?;
    // Sorted, a script's rows of one epoch are together, in chain order.
    buffer.history.par_sort_unstable();
    buffer.txids.par_sort_unstable();
    let buffer = &buffer;
    let history_parts = split_by_partition(&buffer.history, codec::ScriptRow::partition);
    let txid_parts = split_by_partition(&buffer.txids, |key| (key >> 124) as usize);
    let written: Vec<u64> = (0..PARTITIONS)
        .into_par_iter()
        .map(|partition| -> Result<u64> {
            let path = run_path(dir, run, Family::History, partition);
            let mut out = RunWriter::create(&path).map_err(file_err(&path))?;
            let mut operands = codec::Operands::new(history_parts[partition]);
            while let Some((key, value)) = operands.next_operand() {
                out.push(key, value).map_err(file_err(&path))?;
            }
            let mut bytes = out.finish().map_err(file_err(&path))?;
            let path = run_path(dir, run, Family::Txid, partition);
            let mut out = RunWriter::create(&path).map_err(file_err(&path))?;
            for key in txid_parts[partition] {
                out.push(&codec::txid_key_of_bits(*key), &[])
                    .map_err(file_err(&path))?;
            }
            bytes += out.finish().map_err(file_err(&path))?;
            Ok(bytes)
        })
        .collect::<Result<_>>()?;
    sync_dir(dir).map_err(file_err(dir))?;
    Ok(written.iter().sum())
}

/// `sorted` cut into the runs of each partition (`partition_of` rises
/// along it).
fn split_by_partition<T>(sorted: &[T], partition_of: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut parts = Vec::with_capacity(PARTITIONS);
    let mut start = 0;
    for partition in 0..PARTITIONS {
        let end = start + sorted[start..].partition_point(|item| partition_of(item) <= partition);
        parts.push(&sorted[start..end]);
        start = end;
    }
    parts
}

/// Makes the entries of `dir` durable (a file created or removed).
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Writes one run file.
struct RunWriter {
    out: BufWriter<File>,
    block: Vec<u8>,
    compressed: Vec<u8>,
    zstd: zstd_safe::CCtx<'static>,
    previous: Vec<u8>,
    bytes: u64,
}

impl RunWriter {
    fn create(path: &Path) -> io::Result<RunWriter> {
        Ok(RunWriter {
            out: BufWriter::with_capacity(256 << 10, File::create(path)?),
            block: Vec::with_capacity(BLOCK_BYTES + 1024),
            compressed: Vec::new(),
            // (It panics only where zstd's malloc fails: Rust's own
            // allocations abort there too.)
            zstd: zstd_safe::CCtx::create(),
            previous: Vec::new(),
            bytes: 0,
        })
    }

    fn push(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        let shared = key
            .iter()
            .zip(&self.previous)
            .take_while(|(a, b)| a == b)
            .count();
        write_varint(&mut self.block, shared as u64);
        write_varint(&mut self.block, (key.len() - shared) as u64);
        self.block.extend_from_slice(&key[shared..]);
        write_varint(&mut self.block, value.len() as u64);
        self.block.extend_from_slice(value);
        self.previous.clear();
        self.previous.extend_from_slice(key);
        if self.block.len() >= BLOCK_BYTES {
            self.write_block()?;
        }
        Ok(())
    }

    fn write_block(&mut self) -> io::Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        self.compressed
            .resize(zstd_safe::compress_bound(self.block.len()), 0);
        let compressed = self
            .zstd
            .compress(&mut self.compressed[..], &self.block, RUN_ZSTD_LEVEL)
            .map_err(|code| {
                io::Error::other(format!("zstd: {}", zstd_safe::get_error_name(code)))
            })?;
        let too_big = |_| io::Error::new(io::ErrorKind::InvalidInput, "run block over 2 GiB");
        let length = |n: usize| {
            u32::try_from(n)
                .ok()
                .filter(|n| n & ZSTD_BLOCK == 0)
                .ok_or(())
        };
        self.out
            .write_all(&length(self.block.len()).map_err(too_big)?.to_le_bytes())?;
        self.out
            .write_all(&(length(compressed).map_err(too_big)? | ZSTD_BLOCK).to_le_bytes())?;
        self.out.write_all(&self.compressed[..compressed])?;
        self.bytes += 8 + compressed as u64;
        self.block.clear();
        self.previous.clear();
        Ok(())
    }

    /// Writes the last block and syncs the file; returns its bytes.
    fn finish(mut self) -> io::Result<u64> {
        self.write_block()?;
        self.out.flush()?;
        self.out.get_ref().sync_all()?;
        Ok(self.bytes)
    }
}

/// Reads one run file's records in order. Unbuffered: it reads whole
/// blocks, and a merge holds one reader per run.
struct RunReader {
    input: File,
    path: PathBuf,
    block: Vec<u8>,
    compressed: Vec<u8>,
    at: usize,
    key: Vec<u8>,
    value: std::ops::Range<usize>,
}

impl RunReader {
    fn open(path: &Path) -> io::Result<RunReader> {
        Ok(RunReader {
            input: File::open(path)?,
            path: path.to_path_buf(),
            block: Vec::new(),
            compressed: Vec::new(),
            at: 0,
            key: Vec::new(),
            value: 0..0,
        })
    }

    fn corrupt(&self, what: &str) -> Error {
        Error::Corrupt(format!("bulk load run {}: {what}", self.path.display()))
    }

    /// Moves to the next record; `false` at the end of the file.
    fn advance(&mut self, decompressor: &mut zstd_safe::DCtx<'_>) -> Result<bool> {
        if self.at >= self.block.len() && !self.read_block(decompressor)? {
            return Ok(false);
        }
        let mut rest = &self.block[self.at..];
        let before = rest.len();
        let shared = read_varint(&mut rest).ok_or_else(|| self.corrupt("bad record"))? as usize;
        let unshared = read_varint(&mut rest).ok_or_else(|| self.corrupt("bad record"))? as usize;
        if shared > self.key.len() || unshared > rest.len() {
            return Err(self.corrupt("bad key"));
        }
        self.key.truncate(shared);
        self.key.extend_from_slice(&rest[..unshared]);
        rest = &rest[unshared..];
        let len = read_varint(&mut rest).ok_or_else(|| self.corrupt("bad record"))? as usize;
        if len > rest.len() {
            return Err(self.corrupt("bad value"));
        }
        let start = self.at + (before - rest.len());
        self.value = start..start + len;
        self.at = start + len;
        Ok(true)
    }

    /// Reads and decompresses the next block; `false` at the end of the
    /// file.
    fn read_block(&mut self, decompressor: &mut zstd_safe::DCtx<'_>) -> Result<bool> {
        let mut lengths = [0u8; 8];
        match self.input.read_exact(&mut lengths) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(false),
            Err(e) => return Err(file_err(&self.path)(e)),
        }
        let raw = u32::from_le_bytes(lengths[..4].try_into().expect("4 bytes")) as usize;
        let field = u32::from_le_bytes(lengths[4..].try_into().expect("4 bytes"));
        let zstd = field & ZSTD_BLOCK != 0;
        let compressed = (field & !ZSTD_BLOCK) as usize;
        let bound = if zstd {
            zstd_safe::compress_bound(raw)
        } else {
            lz4_flex::block::get_maximum_output_size(raw)
        };
        if raw > 2 * BLOCK_BYTES + (1 << 20) || compressed > bound {
            return Err(self.corrupt("bad block length"));
        }
        self.compressed.resize(compressed, 0);
        self.input
            .read_exact(&mut self.compressed)
            .map_err(file_err(&self.path))?;
        self.block.resize(raw, 0);
        let n = if zstd {
            decompressor
                .decompress(&mut self.block[..], &self.compressed)
                .map_err(|code| {
                    self.corrupt(&format!("bad block: {}", zstd_safe::get_error_name(code)))
                })?
        } else {
            lz4_flex::block::decompress_into(&self.compressed, &mut self.block)
                .map_err(|e| self.corrupt(&format!("bad block: {e}")))?
        };
        if n != raw {
            return Err(self.corrupt("short block"));
        }
        self.at = 0;
        self.key.clear();
        Ok(true)
    }

    fn value(&self) -> &[u8] {
        &self.block[self.value.clone()]
    }
}

/// Merges the run files `paths` (in run order) into one sequence of rows
/// in key order, handed to `emit`; a key in several runs (a script's rows
/// of one epoch) is merged with the history merge, the earlier run's rows
/// first. Keys of one family are all of one length, at most 16 bytes.
/// Only the keys in `range` (from its start, up to but not including its
/// end) are merged: a reader passes the keys below the start without
/// merging them (it decompresses their blocks) and stops at the end.
///
/// # Errors
/// On I/O errors, a damaged run, or an error of `emit`.
pub(crate) fn merge_runs(
    paths: &[PathBuf],
    range: KeyRange<'_>,
    mut emit: impl FnMut(&[u8], &[u8]) -> Result<()>,
) -> Result<u64> {
    let mut readers = Vec::with_capacity(paths.len());
    for path in paths {
        readers.push(RunReader::open(path).map_err(|source| Error::File {
            path: path.clone(),
            source,
        })?);
    }
    // One decompression context for all the runs: a reader each would
    // hold ~100 KB more per run, mainnet's ~650 runs.
    let mut decompressor = zstd_safe::DCtx::create();
    let mut heap = BinaryHeap::with_capacity(readers.len());
    for (i, reader) in readers.iter_mut().enumerate() {
        let mut more = reader.advance(&mut decompressor)?;
        while more && range.is_before_start(&reader.key) {
            more = reader.advance(&mut decompressor)?;
        }
        if more && range.is_before_end(&reader.key) {
            heap.push(Reverse((crate::write::sort_key(&reader.key), i)));
        }
    }
    let mut rows = 0;
    let mut merged: Vec<u8> = Vec::new();
    let mut key: Vec<u8> = Vec::new();
    let mut advanced: Vec<usize> = Vec::new();
    while let Some(Reverse((sort_key, i))) = heap.pop() {
        key.clear();
        key.extend_from_slice(&readers[i].key);
        // The same key in later runs: their rows come after this run's.
        let mut more = heap
            .peek()
            .is_some_and(|Reverse((next, _))| *next == sort_key);
        if more {
            merged.clear();
            merged.extend_from_slice(readers[i].value());
        }
        advanced.clear();
        advanced.push(i);
        while more {
            let Some(Reverse((_, j))) = heap.pop() else {
                break;
            };
            if readers[j].key != key {
                return Err(readers[j].corrupt("keys of different lengths"));
            }
            merged = codec::merge_history(&key, Some(&merged), std::iter::once(readers[j].value()))
                .ok_or_else(|| Error::Codec(codec::CodecError::History(key.clone())))?;
            advanced.push(j);
            more = heap
                .peek()
                .is_some_and(|Reverse((next, _))| *next == sort_key);
        }
        if advanced.len() == 1 {
            emit(&key, readers[i].value())?;
        } else {
            emit(&key, &merged)?;
        }
        rows += 1;
        for &j in &advanced {
            if readers[j].advance(&mut decompressor)? {
                let next = crate::write::sort_key(&readers[j].key);
                if next <= sort_key {
                    return Err(readers[j].corrupt("keys out of order"));
                }
                if range.is_before_end(&readers[j].key) {
                    heap.push(Reverse((next, j)));
                }
            }
        }
    }
    Ok(rows)
}

/// Keys from `start` (all when `None`) up to but not including `end` (all
/// the rest when `None`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct KeyRange<'a> {
    pub start: Option<&'a [u8]>,
    pub end: Option<&'a [u8]>,
}

impl KeyRange<'_> {
    fn is_before_start(&self, key: &[u8]) -> bool {
        self.start.is_some_and(|start| key < start)
    }

    fn is_before_end(&self, key: &[u8]) -> bool {
        self.end.is_none_or(|end| key < end)
    }
}

/// File descriptors the process keeps for everything but a merge's runs:
/// RocksDB's open files (`max_open_files`), sockets, the flat files.
const OTHER_OPEN_FILES: u64 = 1024;

/// Makes room for a merge that opens `files` run files at once: mainnet's
/// ~650 runs, twice, and RocksDB's files pass the soft limit
/// many systems start processes with (1,024), so it is raised towards the
/// hard limit (as Bitcoin Core does); when even that is too low, the merge
/// is refused with what to raise, rather than failing halfway.
pub(crate) fn allow_open_files(files: u64) -> Result<()> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let needed = files + OTHER_OPEN_FILES;
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_none_or(|current| current >= needed) {
        return Ok(());
    }
    let raised = rustix::process::Rlimit {
        current: Some(
            limit
                .maximum
                .map_or(needed, |max| max.min(needed.max(65_536))),
        ),
        maximum: limit.maximum,
    };
    if raised.current.is_some_and(|current| current >= needed)
        && setrlimit(Resource::Nofile, raised).is_ok()
    {
        return Ok(());
    }
    Err(Error::OpenFiles(format!(
        "the bulk load's merge reads {files} run files at once and needs {needed} open files, \
         but the limit is {} (hard limit {}): raise it (LimitNOFILE= in a systemd unit, ulimit -n)",
        limit.current.unwrap_or(0),
        limit
            .maximum
            .map_or("none".to_string(), |max| max.to_string()),
    )))
}

/// Deletes what in the runs' directory of the index in `index_dir` is
/// not part of a bulk load's first `runs` runs: a run a crash interrupted,
/// a merge's output not yet ingested; with `runs` `None` (no bulk load),
/// the whole directory.
pub(crate) fn clear(index_dir: &Path, runs: Option<u32>) -> Result<()> {
    let dir = index_dir.join(RUNS_DIR);
    let cleared = match runs {
        Some(runs) => remove_stray_files(&dir, runs),
        None => std::fs::remove_dir_all(&dir).or_else(absent_is_removed),
    };
    cleared.map_err(file_err(&dir))
}

/// Deletes the files `paths` (a merged partition's runs), those already
/// gone included.
pub(crate) fn remove_files(paths: &[PathBuf]) -> Result<()> {
    for path in paths {
        std::fs::remove_file(path)
            .or_else(absent_is_removed)
            .map_err(file_err(path))?;
    }
    Ok(())
}

/// A removal that found nothing to remove did its job.
fn absent_is_removed(e: io::Error) -> io::Result<()> {
    match e.kind() {
        io::ErrorKind::NotFound => Ok(()),
        _ => Err(e),
    }
}

/// Deletes the files in `dir` that are not part of the first `runs` runs
/// (a run a crash interrupted, a merge's output not yet ingested).
fn remove_stray_files(dir: &Path, runs: u32) -> io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => return absent_is_removed(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let run = name
            .to_str()
            .and_then(|name| name.split_once('.'))
            .and_then(|(number, _)| number.parse::<u32>().ok());
        if run.is_none_or(|run| run >= runs) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records of a run, in key order: keys sharing prefixes, values of
    /// varied lengths, several blocks' worth.
    fn records() -> Vec<(Vec<u8>, Vec<u8>)> {
        (0u32..20_000)
            .map(|i| {
                let mut key = vec![0x51, (i / 256) as u8];
                key.extend_from_slice(&i.to_be_bytes());
                let value = vec![(i % 251) as u8; (i % 37) as usize];
                (key, value)
            })
            .collect()
    }

    fn read_all(path: &Path) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut reader = RunReader::open(path).expect("open");
        let mut read = Vec::new();
        let mut decompressor = zstd_safe::DCtx::create();
        while reader.advance(&mut decompressor)? {
            read.push((reader.key.clone(), reader.value().to_vec()));
        }
        Ok(read)
    }

    /// Writes `records()` as a run at `path` (this build's blocks);
    /// returns the bytes written.
    fn write_records(path: &Path) -> u64 {
        let mut writer = RunWriter::create(path).unwrap();
        for (key, value) in records() {
            writer.push(&key, &value).unwrap();
        }
        writer.finish().unwrap()
    }

    /// The compressed-length fields of a run file's blocks.
    fn block_fields(path: &Path) -> Vec<u32> {
        let bytes = std::fs::read(path).unwrap();
        let mut fields = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let field = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap());
            fields.push(field);
            at += 8 + (field & !ZSTD_BLOCK) as usize;
        }
        fields
    }

    /// A partition's two halves, merged apart, are its whole merge: each
    /// key once, in order, the lower half's below the middle key and the
    /// upper half's from it, whichever block the middle falls in.
    #[test]
    fn a_merge_by_key_range_gives_exactly_the_keys_in_the_range() {
        let dir = tempfile::tempdir().unwrap();
        let all = records();
        // Two runs taking turns (no key in both, so no value merge).
        let paths: Vec<PathBuf> = (0..2)
            .map(|run| {
                let path = dir.path().join(format!("{run:06}.h5"));
                let mut writer = RunWriter::create(&path).unwrap();
                for (key, value) in all.iter().skip(run).step_by(2) {
                    writer.push(key, value).unwrap();
                }
                writer.finish().unwrap();
                path
            })
            .collect();
        let merge = |range: KeyRange<'_>| {
            let mut rows = Vec::new();
            let count = merge_runs(&paths, range, |key, value| {
                rows.push((key.to_vec(), value.to_vec()));
                Ok(())
            })
            .unwrap();
            assert_eq!(count as usize, rows.len());
            rows
        };
        assert_eq!(merge(KeyRange::default()), all);
        let middle = all[12_345].0.clone();
        let lower = merge(KeyRange {
            start: None,
            end: Some(&middle),
        });
        let upper = merge(KeyRange {
            start: Some(&middle),
            end: None,
        });
        assert_eq!(lower, all[..12_345]);
        assert_eq!(upper, all[12_345..]);
        let past = [0xff];
        assert!(merge(KeyRange {
            start: Some(&past),
            end: None
        })
        .is_empty());
    }

    #[test]
    fn a_run_reads_back_what_was_written_in_zstd_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("000000.h0");
        let bytes = write_records(&path);
        assert_eq!(bytes, std::fs::metadata(&path).unwrap().len());
        let fields = block_fields(&path);
        assert!(fields.len() > 3, "several blocks: {}", fields.len());
        assert!(
            fields.iter().all(|f| f & ZSTD_BLOCK != 0),
            "every block is zstd's"
        );
        assert_eq!(read_all(&path).unwrap(), records());
    }

    #[test]
    fn a_run_of_lz4_blocks_from_an_earlier_build_is_still_read() {
        // Written as builds before zstd wrote runs: LZ4 blocks, the flag
        // bit clear.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("000000.h0");
        let mut file = Vec::new();
        let mut block = Vec::new();
        let mut previous: Vec<u8> = Vec::new();
        let mut flush = |block: &mut Vec<u8>, previous: &mut Vec<u8>| {
            let compressed = lz4_flex::block::compress(block);
            file.extend_from_slice(&(block.len() as u32).to_le_bytes());
            file.extend_from_slice(&(compressed.len() as u32).to_le_bytes());
            file.extend_from_slice(&compressed);
            block.clear();
            previous.clear();
        };
        for (key, value) in records() {
            let shared = key
                .iter()
                .zip(&previous)
                .take_while(|(a, b)| a == b)
                .count();
            write_varint(&mut block, shared as u64);
            write_varint(&mut block, (key.len() - shared) as u64);
            block.extend_from_slice(&key[shared..]);
            write_varint(&mut block, value.len() as u64);
            block.extend_from_slice(&value);
            previous = key;
            if block.len() >= BLOCK_BYTES {
                flush(&mut block, &mut previous);
            }
        }
        flush(&mut block, &mut previous);
        std::fs::write(&path, &file).unwrap();
        assert!(block_fields(&path).iter().all(|f| f & ZSTD_BLOCK == 0));
        assert_eq!(read_all(&path).unwrap(), records());
    }

    #[test]
    fn a_damaged_zstd_block_is_corrupt_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("000000.h0");
        write_records(&path);
        let mut bytes = std::fs::read(&path).unwrap();
        // Inside the first block's compressed bytes.
        for byte in &mut bytes[20..60] {
            *byte ^= 0x5a;
        }
        std::fs::write(&path, &bytes).unwrap();
        match read_all(&path) {
            Err(Error::Corrupt(what)) => assert!(what.contains("bad block"), "{what}"),
            other => panic!("expected a corrupt run, got {:?}", other.map(|r| r.len())),
        }
    }
}
