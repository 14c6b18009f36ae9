//! The bulk load's sorted runs: how a first sync writes each history and
//! txid row about twice, at the same rate whatever the index already holds.
//!
//! During a bulk load (see `Store::begin_bulk_load`) a commit's rows do not
//! go to RocksDB. They collect in a [`RunBuffer`] in memory; when it holds
//! `bulk_run_bytes`, it is sorted and written out as one *run*: for each
//! slice (a half of a partition, [`SLICES`]) a file of its history rows,
//! then its txid rows, each in key order ([`write_run`]), a script's
//! operands of one epoch already merged into one value. At the node's tip
//! the runs of one slice are merged into SST files (`Store::merge_partition`)
//! that RocksDB ingests as its partitions' last level, and their run files
//! go before the next slice begins.
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
//! Why slices of half a partition, both families in one file: until a
//! slice is ingested and its runs deleted, its merged files sit on disk
//! beside every run, which is the first sync's peak on disk. Whole
//! partitions made that 1/16 of the index's rows: on the 50M chain at
//! `lsm_scale` 24 with index format 7, the peak came to 1.126-1.154 times
//! the final index (issue 33 asks for 1.15). Slices halve it; a file per
//! family and slice (52,000 files there) then cost as much again in the
//! filesystem's partly filled blocks (1.141).
//!
//! A run file (`runs/file.rs` writes and reads one) is a 24-byte header,
//! [`RUN_MAGIC`], the run's first tx_num
//! (u64 LE) and where its txid section starts (u64 LE), then its history
//! section and its txid section, each a sequence of blocks, each `raw length (u32 LE) ·
//! compressed length (u32 LE, its top bit set: zstd) · compressed block`,
//! zstd's level 1. Why zstd: the runs are the first sync's peak on disk,
//! and with LZ4 the 50M chain's at `lsm_scale` 24 took the database to
//! 1.25 times its final size (issue 33 asks for 1.15); zstd's runs are
//! about a tenth smaller. zstd finds little to take out of hashes and
//! varints (a tenth), so the records themselves are lean:
//! - history: `varint(bytes of the key shared with the previous one) ·
//!   the rest of the key`, the first of a block sharing nothing, the key
//!   being the script id (11 bytes; no epoch), then `varint(value
//!   length) · value`, the script's rows in the run with the first entry
//!   counting from the run's first tx_num ([`codec::Operands::for_run`]);
//! - txid: a block is its Rice parameter (u8), the bits of its tx_nums
//!   (u8) and its rows (u32 LE), then a bit string: each row's txid
//!   prefix (4 bytes; the first row's whole, the others' as the step
//!   from the one before, Rice-coded) and its tx_num less the run's first
//!   ([`RunWriter::push_txid`]). Against the shared bytes and varints of
//!   `osprun5`, the first sync of the 10M chain at `lsm_scale` 24 peaked
//!   on disk at 1.136 of the final index instead of 1.146, and wrote 1.67
//!   bytes per byte of it instead of 1.69.
//!
//! Against runs of stored keys and values (the layout before `osprun2`)
//! that is 9.7% fewer history bytes and 26% fewer txid bytes, compressed
//! (one partition's 129 runs of the 10M mainnet-profile chain at
//! `lsm_scale` 24, rewritten both ways). A bulk load under way with runs
//! of the earlier layout is not carried on ([`refuse_earlier_runs`]). Runs are named by their number, which is their order in
//! the chain (`000012.07` holds run 12's rows of slice 7, the upper half
//! of partition 3); the
//! index's `bulk` record counts the runs that are complete, and a file of a
//! later number (a run whose writing a crash interrupted) is deleted on
//! open.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use osprey_core::TxNum;

use crate::codec;
use crate::open::file_err;
use crate::{Error, Family, Result, PARTITIONS};

mod buffer;
mod file;
pub(crate) use buffer::RunBuffer;
use file::{RunReader, RunWriter, RUN_MAGIC};
#[cfg(test)]
use file::{HEADER_BYTES, ZSTD_BLOCK};

/// The directory of the runs, inside the index's directory.
pub(crate) const RUNS_DIR: &str = "bulk";

/// The bits of a key's first byte that pick its slice: a partition's 4,
/// and the one that halves it.
pub(crate) const SLICE_BITS: u32 = 5;

/// The run files per run: two slices per partition.
pub(crate) const SLICES: usize = 1 << SLICE_BITS;

const _: () = assert!(SLICES == 2 * PARTITIONS);

/// The file of run `run`'s rows in `slice`: its history section, then its
/// txid section.
pub(crate) fn run_path(dir: &Path, run: u32, slice: usize) -> PathBuf {
    dir.join(format!("{run:06}.{slice:02x}"))
}

/// The first key byte of `slice`, and of the next one (`None` past the
/// last).
pub(crate) fn slice_bounds(slice: usize) -> ([u8; 1], Option<[u8; 1]>) {
    let shift = 8 - SLICE_BITS;
    let start = [(slice << shift) as u8];
    let end = (slice + 1 < SLICES).then(|| [((slice + 1) << shift) as u8]);
    (start, end)
}

/// Writes `buffer` as run number `run` in `dir`: its rows sorted, a
/// script's rows as one value, one file per slice (its history rows, then
/// its txid rows), each synced, then the directory. Returns the bytes
/// written.
///
/// # Errors
/// On I/O errors.
pub(crate) fn write_run(dir: &Path, run: u32, mut buffer: RunBuffer) -> Result<u64> {
    std::fs::create_dir_all(dir).map_err(file_err(dir))?;
    let base = buffer.sort_and_pair();
    let buffer = &buffer;
    let history_parts = split_by_slice(&buffer.history, |row| row.id_top_bits(SLICE_BITS));
    let txid_parts = split_by_slice(&buffer.txids, |key| (key >> (128 - SLICE_BITS)) as usize);
    let written: Vec<u64> = (0..SLICES)
        .into_par_iter()
        .map(|slice| -> Result<u64> {
            let path = run_path(dir, run, slice);
            let mut out = RunWriter::create(&path, base).map_err(file_err(&path))?;
            let mut operands = codec::Operands::for_run(history_parts[slice], base);
            while let Some((id, value)) = operands.next_operand() {
                out.push_history(id, value).map_err(file_err(&path))?;
            }
            out.begin_txid_section(txid_parts[slice])
                .map_err(file_err(&path))?;
            for &key in txid_parts[slice] {
                let (prefix, tx_num) = codec::txid_of_bits(key);
                out.push_txid(&prefix, tx_num.0).map_err(file_err(&path))?;
            }
            out.finish().map_err(file_err(&path))
        })
        .collect::<Result<_>>()?;
    sync_dir(dir).map_err(file_err(dir))?;
    Ok(written.iter().sum())
}

/// The tx_num of a txid row given as [`codec::txid_key_bits`].
fn txid_key_tx_num(bits: u128) -> u64 {
    codec::txid_of_bits(bits).1 .0
}

/// `sorted` cut into the runs of each slice (`slice_of` rises along it).
fn split_by_slice<T>(sorted: &[T], slice_of: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut parts = Vec::with_capacity(SLICES);
    let mut start = 0;
    for slice in 0..SLICES {
        let end = start + sorted[start..].partition_point(|item| slice_of(item) <= slice);
        parts.push(&sorted[start..end]);
        start = end;
    }
    parts
}

/// Makes the entries of `dir` durable (a file created or removed).
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Merges the run files `paths` of `family` (in run order) into its
/// stored keys and values in key order, handed to `emit`. A history key
/// of the runs is a script id: its values in every run that has it, the
/// earlier run's rows first, become the script's stored values, one per
/// epoch ([`codec::EpochValues`]). Only the keys in `range` (from its
/// start, up to but not including its end) are merged: a reader passes
/// the keys below the start without merging them (it decompresses their
/// blocks) and stops at the end. Returns the stored values emitted.
///
/// # Errors
/// On I/O errors, a damaged run, or an error of `emit`.
pub(crate) fn merge_runs(
    paths: &[PathBuf],
    family: Family,
    range: KeyRange<'_>,
    mut emit: impl FnMut(&[u8], &[u8]) -> Result<()>,
) -> Result<u64> {
    let mut readers = Vec::with_capacity(paths.len());
    for path in paths {
        readers.push(RunReader::open(path, family)?);
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
    let mut emitted = 0;
    let mut counted = |key: &[u8], value: &[u8]| {
        emitted += 1;
        emit(key, value)
    };
    let mut values = codec::EpochValues::new();
    let mut buckets = codec::BucketValues::new();
    let mut advanced: Vec<usize> = Vec::new();
    // Ties pop in run order: the reader's index breaks them.
    while let Some(Reverse((sort_key, i))) = heap.pop() {
        advanced.clear();
        advanced.push(i);
        while let Some(&Reverse((next, j))) = heap.peek() {
            if next != sort_key {
                break;
            }
            heap.pop();
            advanced.push(j);
        }
        match family {
            Family::History => {
                let parts: Vec<(u64, &[u8])> = advanced
                    .iter()
                    .map(|&j| (readers[j].base, readers[j].value()))
                    .collect();
                values
                    .merge(&readers[i].key, &parts, &mut counted)
                    .ok_or_else(|| readers[i].corrupt("a script's rows do not decode"))??;
            }
            _ => {
                if advanced.len() > 1 {
                    return Err(readers[advanced[1]].corrupt("a txid key in two runs"));
                }
                let (prefix, tx_num) = readers[i].key.split_at(codec::TXID_PREFIX_LEN);
                let tx_num = TxNum::from_bytes(tx_num.try_into().expect("a run's tx_num"));
                buckets.push(prefix, tx_num.0, &mut counted)?;
            }
        }
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
    buckets.finish(&mut counted)?;
    Ok(emitted)
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

/// Refuses a bulk load under way in the index in `index_dir` whose runs
/// an earlier build wrote, in the layout before [`RUN_MAGIC`]: it cannot
/// be carried on, so the index is of another format (and is rebuilt, or
/// refused when the user turned that off).
pub(crate) fn refuse_earlier_runs(index_dir: &Path, silent_payments: bool) -> Result<()> {
    let dir = index_dir.join(RUNS_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(file_err(&dir)(e)),
    };
    for entry in entries {
        let path = entry.map_err(file_err(&dir))?.path();
        let mut magic = [0u8; RUN_MAGIC.len()];
        let read = File::open(&path).and_then(|mut file| file.read_exact(&mut magic));
        match read {
            Ok(()) if magic == RUN_MAGIC => return Ok(()),
            // An empty or torn file says nothing: the next one does.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => continue,
            Ok(()) => {
                return Err(Error::Schema {
                    path: index_dir.to_path_buf(),
                    found: format!(
                        "of an earlier build: a first sync under way whose runs ({}) are in \
                         an earlier layout",
                        path.display()
                    ),
                    expected: osprey_core::to_hex(&crate::schema_tag(silent_payments)),
                })
            }
            Err(e) => return Err(file_err(&path)(e)),
        }
    }
    Ok(())
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
    use bitcoin::hashes::Hash;
    use osprey_core::ScriptHash;

    /// A script hash per number, spread over every partition.
    fn script(n: u32) -> ScriptHash {
        let mut hash = [0u8; 32];
        for (i, byte) in hash.iter_mut().enumerate() {
            *byte = (n.wrapping_mul(2_654_435_761).rotate_left(i as u32 % 32) >> 3) as u8 ^ i as u8;
        }
        ScriptHash(hash)
    }

    /// The first tx_num of the second epoch (in a `short-prefixes` build,
    /// of one epoch among millions).
    const EPOCH: u64 = 1 << 24;

    /// What the spends of [`rows`] spend.
    struct Spent {
        /// Outputs spent, as (script, tx_num, vout).
        spent: std::collections::HashSet<(u32, u64, u32)>,
        /// (script, the spend's tx_num, vout) -> the output's tx_num.
        spends: std::collections::HashMap<(u32, u64, u32), u64>,
    }

    /// History rows of 30,000 scripts over transactions on both sides of
    /// an epoch's start and a few two epochs later, in chain order: each
    /// transaction pays a script one output or two (amounts and indexes of
    /// every varint length), and three in four spend a script's oldest
    /// output, so that a script may hold several outputs of one vout.
    ///
    /// Also the outputs spent, as (script, tx_num, vout), and the txid
    /// each spending row spends from, in their order.
    fn rows() -> (Vec<codec::ScriptRow>, Spent, Vec<[u8; 32]>) {
        let mut rows = Vec::new();
        let mut spent = std::collections::HashSet::new();
        let mut spends = std::collections::HashMap::new();
        let mut spent_txids = Vec::new();
        let mut open: std::collections::HashMap<u32, std::collections::VecDeque<(u64, u32)>> =
            std::collections::HashMap::new();
        let far = 3 * EPOCH + 17;
        for (i, tx_num) in (EPOCH - 20_000..EPOCH + 20_000)
            .chain(far..far + 500)
            .enumerate()
        {
            let i = i as u32;
            if !i.is_multiple_of(4) {
                let owner = i * 7 % 30_000;
                if let Some((funding, vout)) = open.get_mut(&owner).and_then(|o| o.pop_front()) {
                    spent.insert((owner, funding, vout));
                    spends.insert((owner, tx_num, vout), funding);
                    spent_txids.push(txid_of(funding).to_byte_array());
                    rows.push(
                        codec::HistoryRow::spending(TxNum(tx_num), &txid_of(funding), vout)
                            .of(&script(owner)),
                    );
                }
            }
            let owner = i % 30_000;
            let outputs = if i.is_multiple_of(5) { 2 } else { 1 };
            for vout in [i % 3, i % 3 + 3].into_iter().take(outputs) {
                rows.push(
                    codec::HistoryRow::funding(TxNum(tx_num), vout, u64::from(i) << (i % 40))
                        .of(&script(owner)),
                );
                open.entry(owner).or_default().push_back((tx_num, vout));
            }
        }
        (rows, Spent { spent, spends }, spent_txids)
    }

    /// `rows` (in chain order) written as runs cut at `cuts` (tx_nums),
    /// a transaction at a time with its txid key and the txids its spends
    /// spend from (`spent_txids`, in the order of the spending rows);
    /// returns the runs' count.
    fn write_runs(
        dir: &Path,
        rows: &[codec::ScriptRow],
        spent_txids: &[[u8; 32]],
        cuts: &[u64],
    ) -> u32 {
        let mut run = 0;
        let mut start = 0;
        let mut spent = spent_txids;
        for end in cuts.iter().copied().chain([u64::MAX]) {
            let mut buffer = RunBuffer::default();
            while start < rows.len() && rows[start].tx_num() < end {
                let tx_num = rows[start].tx_num();
                let len = rows[start..].partition_point(|r| r.tx_num() == tx_num);
                let tx = &rows[start..start + len];
                start += len;
                // None when `spent_txids` is empty: no pairing in runs.
                let spends = tx.iter().filter(|r| r.is_spend()).count().min(spent.len());
                let txid = txid_of(tx_num);
                buffer.push(
                    tx,
                    &[codec::txid_key_bits(&txid, TxNum(tx_num))],
                    &[txid.to_byte_array()],
                    tx_num,
                    &spent[..spends],
                );
                spent = &spent[spends..];
            }
            if buffer.is_empty() {
                continue;
            }
            write_run(dir, run, buffer).unwrap();
            run += 1;
        }
        run
    }

    /// `values` (a slice's, in key order) with each script's
    /// [`codec::comparable_values`].
    fn comparable_values(values: &[(Vec<u8>, Vec<u8>)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        for script in
            values.chunk_by(|a, b| a.0[..codec::SCRIPT_ID_LEN] == b.0[..codec::SCRIPT_ID_LEN])
        {
            let mut script = script.to_vec();
            codec::comparable_values(&mut script).unwrap();
            out.extend(script);
        }
        out
    }

    fn txid_of(tx_num: u64) -> bitcoin::Txid {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&tx_num.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
        bitcoin::Txid::from_byte_array(bytes)
    }

    fn paths(dir: &Path, runs: u32, slice: usize) -> Vec<PathBuf> {
        (0..runs).map(|run| run_path(dir, run, slice)).collect()
    }

    fn merge(
        paths: &[PathBuf],
        family: Family,
        range: KeyRange<'_>,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut merged = Vec::new();
        let count = merge_runs(paths, family, range, |key, value| {
            merged.push((key.to_vec(), value.to_vec()));
            Ok(())
        })?;
        assert_eq!(count as usize, merged.len());
        Ok(merged)
    }

    /// What commits store for `rows` of `slice`: a value per script and
    /// epoch.
    fn stored(rows: &[codec::ScriptRow], slice: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut sorted: Vec<_> = rows
            .iter()
            .filter(|r| r.id_top_bits(SLICE_BITS) == slice)
            .copied()
            .collect();
        sorted.sort_unstable();
        let mut operands = codec::Operands::new(&sorted);
        let mut values = Vec::new();
        while let Some((key, value)) = operands.next_operand() {
            values.push((key.to_vec(), value.to_vec()));
        }
        values
    }

    /// However the rows fall into runs (a run across an epoch's start, a
    /// script in many runs or one), the merge gives the values commits
    /// store but for the prefixes and amounts it leaves out, and every
    /// transaction's txid key once. Each spend pairs, as a reader pairs
    /// it, with the output it spends; only spent outputs lose their
    /// amounts, and most do; some prefixes go, not all.
    #[test]
    fn merged_runs_are_the_values_commits_store() {
        let (rows, spent, spent_txids) = rows();
        let owners: std::collections::HashMap<Vec<u8>, u32> = (0..30_000)
            .map(|n| (codec::history_prefix(&script(n)).to_vec(), n))
            .collect();
        for cuts in [
            vec![],
            vec![EPOCH - 1_000, EPOCH + 10, EPOCH + 2_000, 3 * EPOCH],
        ] {
            let dir = tempfile::tempdir().unwrap();
            let runs = write_runs(dir.path(), &rows, &spent_txids, &cuts);
            assert_eq!(runs as usize, cuts.len() + 1);
            // Each transaction once, in its bucket, in chain order.
            let mut buckets: std::collections::BTreeMap<Vec<u8>, Vec<(u64, u64)>> =
                Default::default();
            for tx_num in rows.iter().map(|r| r.tx_num()) {
                let txid = txid_of(tx_num);
                let prefix = codec::txid_prefix(&txid);
                let entries = buckets
                    .entry(codec::txid_bucket_key(prefix).to_vec())
                    .or_default();
                if entries.last().is_none_or(|&(last, _)| last < tx_num) {
                    entries.push((tx_num, codec::txid_check(prefix)));
                }
            }
            let txids: Vec<(Vec<u8>, Vec<u8>)> = buckets
                .into_iter()
                .map(|(key, entries)| (key, codec::txid_value(entries)))
                .collect();
            let mut merged_txids = Vec::new();
            let (mut paired, mut kept, mut without_amount) = (0, 0, 0);
            for slice in 0..SLICES {
                let history = merge(
                    &paths(dir.path(), runs, slice),
                    Family::History,
                    KeyRange::default(),
                )
                .unwrap();
                for script in history
                    .chunk_by(|a, b| a.0[..codec::SCRIPT_ID_LEN] == b.0[..codec::SCRIPT_ID_LEN])
                {
                    let owner = owners[&script[0].0[..codec::SCRIPT_ID_LEN]];
                    // Each spend pairs, as a reader pairs it, with the
                    // output it spends; only a spent output lacks its amount.
                    let mut unspent: Vec<(u64, u32)> = Vec::new();
                    for (key, value) in script {
                        for row in codec::decode_history_value(key, value).unwrap() {
                            let tx_num = row.tx_num.0;
                            let (vout, prefix) = match row.kind {
                                codec::RowKind::Funding { vout, amount } => {
                                    if amount.is_none() {
                                        assert!(
                                            spent.spent.contains(&(owner, tx_num, vout)),
                                            "unspent output {tx_num}:{vout} lost its amount"
                                        );
                                        without_amount += 1;
                                    }
                                    unspent.push((tx_num, vout));
                                    continue;
                                }
                                codec::RowKind::Spending {
                                    prev_txid_prefix,
                                    prev_vout,
                                } => (prev_vout, prev_txid_prefix),
                            };
                            let truth = spent.spends[&(owner, tx_num, vout)];
                            let at = unspent
                                .iter()
                                .position(|&output| output == (truth, vout))
                                .expect("the output spent is unspent");
                            match prefix {
                                Some(prefix) => {
                                    kept += 1;
                                    assert_eq!(
                                        txid_of(truth).as_byte_array()[..prefix.len()],
                                        prefix
                                    );
                                }
                                None => {
                                    paired += 1;
                                    let latest =
                                        unspent.iter().rposition(|&(t, v)| v == vout && t < tx_num);
                                    assert_eq!(latest, Some(at), "spend in {tx_num} of {vout}");
                                }
                            }
                            unspent.remove(at);
                        }
                    }
                }
                let expected = stored(&rows, slice);
                assert!(!expected.is_empty());
                assert_eq!(
                    comparable_values(&history),
                    comparable_values(&expected),
                    "slice {slice}, cuts {cuts:?}"
                );
                let (start, end) = slice_bounds(slice);
                assert!(expected
                    .iter()
                    .all(|(key, _)| key[..1] >= start[..]
                        && end.is_none_or(|end| key[..1] < end[..])));
                let txid = merge(
                    &paths(dir.path(), runs, slice),
                    Family::Txid,
                    KeyRange::default(),
                )
                .unwrap();
                merged_txids.extend(txid);
            }
            assert_eq!(merged_txids, txids);
            assert!(paired > 1_000 && kept > 100, "paired {paired}, kept {kept}");
            // Nearly every spent output, in runs or by the merge.
            assert!(
                without_amount > spent.spent.len() * 3 / 4,
                "{without_amount} of {} spent outputs lost their amounts",
                spent.spent.len()
            );
        }
    }

    /// A partition's two halves, merged apart, are its whole merge: each
    /// key once, in order, the lower half's below the middle key and the
    /// upper half's from it, whichever block the middle falls in.
    #[test]
    fn a_merge_by_key_range_gives_exactly_the_keys_in_the_range() {
        let dir = tempfile::tempdir().unwrap();
        let (rows, _, spent_txids) = rows();
        let runs = write_runs(dir.path(), &rows, &spent_txids, &[EPOCH]);
        let paths = paths(dir.path(), runs, 5);
        let all = merge(&paths, Family::History, KeyRange::default()).unwrap();
        let at = all.len() * 5 / 8;
        let middle = all[at].0[..codec::SCRIPT_ID_LEN].to_vec();
        let lower = merge(
            &paths,
            Family::History,
            KeyRange {
                start: None,
                end: Some(&middle),
            },
        )
        .unwrap();
        let upper = merge(
            &paths,
            Family::History,
            KeyRange {
                start: Some(&middle),
                end: None,
            },
        )
        .unwrap();
        let at = all
            .iter()
            .position(|(key, _)| key[..codec::SCRIPT_ID_LEN] == middle[..])
            .unwrap();
        assert!(at > 0);
        assert_eq!(lower, all[..at]);
        assert_eq!(upper, all[at..]);
        let past = [0xff];
        assert!(merge(
            &paths,
            Family::History,
            KeyRange {
                start: Some(&past),
                end: None
            }
        )
        .unwrap()
        .is_empty());
    }

    #[test]
    fn a_run_is_written_in_zstd_blocks_after_its_header() {
        let dir = tempfile::tempdir().unwrap();
        // 20,000 scripts of slice 2 (their first byte's top 5 bits), so
        // that its file takes several blocks.
        let rows: Vec<codec::ScriptRow> = (0..20_000u32)
            .map(|n| {
                let mut owner = script(n);
                owner.0[0] = 0x10 | owner.0[0] & 0x07;
                codec::HistoryRow::funding(TxNum(u64::from(n) + 5), n % 3, u64::from(n) << 20)
                    .of(&owner)
            })
            .collect();
        let runs = write_runs(dir.path(), &rows, &[], &[]);
        let path = run_path(dir.path(), runs - 1, 2);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes[..RUN_MAGIC.len()], RUN_MAGIC);
        let base = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
        assert_eq!(base, rows[0].tx_num());
        let mut blocks = 0;
        let mut at = HEADER_BYTES as usize;
        while at < bytes.len() {
            let field = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap());
            assert!(field & ZSTD_BLOCK != 0, "every block is zstd's");
            at += 8 + (field & !ZSTD_BLOCK) as usize;
            blocks += 1;
        }
        assert_eq!(at, bytes.len());
        assert!(blocks > 1, "several blocks: {blocks}");
    }

    #[test]
    fn a_damaged_zstd_block_is_corrupt_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let runs = write_runs(dir.path(), &rows().0, &[], &[]);
        let path = run_path(dir.path(), runs - 1, 0);
        let mut bytes = std::fs::read(&path).unwrap();
        // Inside the first block's compressed bytes.
        for byte in &mut bytes[40..80] {
            *byte ^= 0x5a;
        }
        std::fs::write(&path, &bytes).unwrap();
        match merge(&[path], Family::History, KeyRange::default()) {
            Err(Error::Corrupt(what)) => assert!(what.contains("bad block"), "{what}"),
            other => panic!("expected a corrupt run, got {:?}", other.map(|r| r.len())),
        }
    }

    /// A txid section said to start past the file's end, or a history
    /// section that runs into it, is a corrupt run, for either family.
    #[test]
    fn a_damaged_section_offset_is_corrupt_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let runs = write_runs(dir.path(), &rows().0, &[], &[]);
        let path = run_path(dir.path(), runs - 1, 3);
        let bytes = std::fs::read(&path).unwrap();
        let txid_at = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
        assert!(txid_at > HEADER_BYTES && txid_at < bytes.len() as u64);
        for (offset, family, what) in [
            (
                bytes.len() as u64 + 1,
                Family::Txid,
                "bad txid section offset",
            ),
            (txid_at - 3, Family::History, "bad block length"),
            (txid_at + 3, Family::Txid, "bad block"),
        ] {
            let mut damaged = bytes.clone();
            damaged[16..24].copy_from_slice(&offset.to_le_bytes());
            std::fs::write(&path, &damaged).unwrap();
            match merge(std::slice::from_ref(&path), family, KeyRange::default()) {
                Err(Error::Corrupt(found)) => assert!(found.contains(what), "{found}"),
                other => panic!("expected a corrupt run, got {:?}", other.map(|r| r.len())),
            }
        }
    }

    /// Runs an earlier build wrote (no header; their first bytes are a
    /// block's lengths) are not read as this layout's: the merge calls
    /// them corrupt, and an index whose bulk load they belong to is of
    /// another format.
    #[test]
    fn runs_of_the_earlier_layout_are_another_format() {
        let dir = tempfile::tempdir().unwrap();
        let runs_dir = dir.path().join(RUNS_DIR);
        std::fs::create_dir_all(&runs_dir).unwrap();
        assert!(
            refuse_earlier_runs(dir.path(), false).is_ok(),
            "no runs yet"
        );
        let earlier = run_path(&runs_dir, 0, 0);
        let mut bytes = 40_000u32.to_le_bytes().to_vec();
        bytes.extend_from_slice(&(1_234u32 | ZSTD_BLOCK).to_le_bytes());
        bytes.extend_from_slice(&[7; 1_234]);
        std::fs::write(&earlier, &bytes).unwrap();
        match merge(
            std::slice::from_ref(&earlier),
            Family::History,
            KeyRange::default(),
        ) {
            Err(Error::Corrupt(what)) => assert!(what.contains("layout"), "{what}"),
            other => panic!("expected a corrupt run, got {:?}", other.map(|r| r.len())),
        }
        match refuse_earlier_runs(dir.path(), false) {
            Err(Error::Schema { found, .. }) => {
                assert!(found.contains("earlier layout"), "{found}")
            }
            other => panic!("expected another format, got {other:?}"),
        }
        // This build's runs beside it are not: the first file read decides,
        // so with only this build's the index is this format.
        std::fs::remove_file(&earlier).unwrap();
        write_runs(&runs_dir, &rows().0, &[], &[]);
        assert!(refuse_earlier_runs(dir.path(), false).is_ok());
    }
}
