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
//! compressed length (u32 LE) · LZ4 block`; a block's records are
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
/// one block, raw and compressed, for each run: mainnet's ~650 runs, two
/// partitions at a time, take ~85 MB.
const BLOCK_BYTES: usize = 32 << 10;

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
    previous: Vec<u8>,
    bytes: u64,
}

impl RunWriter {
    fn create(path: &Path) -> io::Result<RunWriter> {
        Ok(RunWriter {
            out: BufWriter::with_capacity(256 << 10, File::create(path)?),
            block: Vec::with_capacity(BLOCK_BYTES + 1024),
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
        let compressed = lz4_flex::block::compress(&self.block);
        let too_big = |_| io::Error::new(io::ErrorKind::InvalidInput, "run block over 4 GiB");
        self.out.write_all(
            &u32::try_from(self.block.len())
                .map_err(too_big)?
                .to_le_bytes(),
        )?;
        self.out.write_all(
            &u32::try_from(compressed.len())
                .map_err(too_big)?
                .to_le_bytes(),
        )?;
        self.out.write_all(&compressed)?;
        self.bytes += 8 + compressed.len() as u64;
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
    fn advance(&mut self) -> Result<bool> {
        if self.at >= self.block.len() && !self.read_block()? {
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
    fn read_block(&mut self) -> Result<bool> {
        let mut lengths = [0u8; 8];
        match self.input.read_exact(&mut lengths) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(false),
            Err(e) => return Err(file_err(&self.path)(e)),
        }
        let raw = u32::from_le_bytes(lengths[..4].try_into().expect("4 bytes")) as usize;
        let compressed = u32::from_le_bytes(lengths[4..].try_into().expect("4 bytes")) as usize;
        if raw > 2 * BLOCK_BYTES + (1 << 20)
            || compressed > lz4_flex::block::get_maximum_output_size(raw)
        {
            return Err(self.corrupt("bad block length"));
        }
        self.compressed.resize(compressed, 0);
        self.input
            .read_exact(&mut self.compressed)
            .map_err(file_err(&self.path))?;
        self.block.resize(raw, 0);
        let n = lz4_flex::block::decompress_into(&self.compressed, &mut self.block)
            .map_err(|e| self.corrupt(&format!("bad block: {e}")))?;
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
///
/// # Errors
/// On I/O errors, a damaged run, or an error of `emit`.
pub(crate) fn merge_runs(
    paths: &[PathBuf],
    mut emit: impl FnMut(&[u8], &[u8]) -> Result<()>,
) -> Result<u64> {
    let mut readers = Vec::with_capacity(paths.len());
    for path in paths {
        readers.push(RunReader::open(path).map_err(|source| Error::File {
            path: path.clone(),
            source,
        })?);
    }
    let mut heap = BinaryHeap::with_capacity(readers.len());
    for (i, reader) in readers.iter_mut().enumerate() {
        if reader.advance()? {
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
            if readers[j].advance()? {
                let next = crate::write::sort_key(&readers[j].key);
                if next <= sort_key {
                    return Err(readers[j].corrupt("keys out of order"));
                }
                heap.push(Reverse((next, j)));
            }
        }
    }
    Ok(rows)
}

/// File descriptors the process keeps for everything but a merge's runs:
/// RocksDB's open files (`max_open_files`), sockets, the flat files.
const OTHER_OPEN_FILES: u64 = 1024;

/// Makes room for merges that open `runs` files at once: mainnet's ~650
/// runs for each of two merges, and RocksDB's files, pass the soft limit
/// many systems start processes with (1,024), so it is raised towards the
/// hard limit (as Bitcoin Core does); when even that is too low, the merge
/// is refused with what to raise, rather than failing halfway.
pub(crate) fn allow_open_files(runs: u64, merges: u64) -> Result<()> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let needed = runs * merges + OTHER_OPEN_FILES;
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
        "the bulk load's merge reads its {runs} runs in {merges} partitions at once and needs {needed} open files, \
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
