//! The index on disk: RocksDB column families plus flat files, committed
//! atomically per batch of blocks. The only crate that knows RocksDB.
//!
//! Layout (see `docs/schema.md`):
//! - `headers.dat`: 80-byte headers by height;
//! - `txcounts.dat`: cumulative transaction count after each height;
//! - `txids.dat`: 32-byte txids by tx_num;
//! - `txsizes.dat`: each transaction's size in bytes (2 bytes; the rare
//!   one of 64 KiB or more in `meta`), so that its bytes can be read
//!   from the node's copy of the block;
//! - with silent payments on, `sptweaks.dat` (the records of
//!   `osprey_sp::append_block_records`, blocks in chain order) and
//!   `spoffsets.dat` (u64 LE per block: where its records end);
//! - column family `history`: rows of [`codec::HistoryRow`];
//! - column family `txid`: the tx_nums of each bucket of txids
//!   ([`codec::txid_bucket_key`]);
//! - column family `undo`: the script buckets each recent block wrote rows
//!   under;
//! - column family `meta`: schema version and the committed tip, which is the
//!   only truth: flat files are cut back to it on open.
//!
//! [`snapshot`] packs all of it into one file and back. The code is split
//! by path: `open` (options and checks), `write` (prepare, commit,
//! rollback), `read` (what queries ask), `maintenance` (bulk loads, flushes,
//! sizes, the digest), `runs` (the bulk load's sorted runs and their
//! merge).

pub mod codec;
mod flat;
mod layout;
mod maintenance;
mod open;
mod read;
mod replica;
mod runs;
pub mod snapshot;
mod space;
mod write;

pub use layout::remove_index;
pub use read::{SpBlock, SpRecords};
pub use replica::TipMove;

use bitcoin::block::Header;
use bitcoin::{BlockHash, Txid};
use codec::CodecError;
use flat::FlatFile;
use osprey_core::{Height, TxNum};
use rocksdb::{Options, DB};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
use std::sync::{Mutex, RwLock};

/// Bumped whenever any key, value or file layout changes; a database with
/// another version is refused ([`Error::Schema`]) and must be rebuilt,
/// which `osprey serve` does by itself unless told not to.
pub const SCHEMA_VERSION: u32 = 9;

/// The prefix configuration is part of the format: a database built with
/// short test prefixes must never be read by a normal build. So is the
/// `silent_payments` setting, whose files an index either has from genesis
/// or not at all: on, one byte [`SILENT_PAYMENTS_TAG`] follows, and an index
/// built without them keeps the tag it always had.
fn schema_tag(silent_payments: bool) -> Vec<u8> {
    let mut tag = SCHEMA_VERSION.to_be_bytes().to_vec();
    tag.extend_from_slice(&[
        codec::SCRIPT_BUCKET_LEN as u8,
        codec::UNDO_BUCKET_LEN as u8,
        codec::TXID_PREFIX_LEN as u8,
        codec::SPENT_TXID_PREFIX_LEN as u8,
        codec::EPOCH_SHIFT as u8,
        PARTITIONS as u8,
    ]);
    if silent_payments {
        tag.push(SILENT_PAYMENTS_TAG);
    }
    tag
}

/// The byte the format tag ends with when the index keeps silent-payment
/// records.
const SILENT_PAYMENTS_TAG: u8 = 0x01;

/// Bytes of a transaction's size in `txsizes.dat`. A transaction's place
/// in its block is its block's header and transaction count, then the
/// sizes of the transactions before it: a lookup adds up at most a
/// block's few thousand records, one read. Format 8 kept each
/// transaction's end in its block, 3 bytes (a block's bytes pass 64
/// KiB); on the 10M-transaction mainnet-profile chain sizes took 1 byte
/// per transaction less.
pub(crate) const TX_SIZE_LEN: usize = 2;

/// The size record of a transaction of [`TX_SIZE_ESCAPE`] bytes or more:
/// its size is in `meta`, under [`META_TX_SIZE`] and its tx_num
/// ([`tx_size_key`]). A few in ten thousand on mainnet (large
/// consolidations and inscriptions).
pub(crate) const TX_SIZE_ESCAPE: u32 = 0xFFFF;

/// The `meta` key of the size of transaction `tx_num`, which is
/// [`TX_SIZE_ESCAPE`] bytes or more: big-endian, so that a rollback
/// deletes the sizes of the transactions it undoes as one range.
pub(crate) fn tx_size_key(tx_num: u64) -> [u8; 15] {
    let mut key = [0u8; 15];
    key[..7].copy_from_slice(META_TX_SIZE);
    key[7..].copy_from_slice(&tx_num.to_be_bytes());
    key
}

const CF_META: &str = "meta";
const CF_UNDO: &str = "undo";

/// Partitions of the history and txid rows, each a column family of its
/// own (format 5), by the top bits of the hash leading their keys
/// ([`partition_of`]). Why: a bulk load's runs are written a file per
/// half of a partition (`runs::SLICES`), and the merge that ends it goes
/// partition by partition, half by half, deleting a half's runs once
/// RocksDB has ingested it, so the index is on disk twice for 1/32 of it
/// at most (`Store::end_bulk_load`).
pub const PARTITIONS: usize = 16;

/// The history column families, partition 0 first.
const HISTORY_CFS: [&str; PARTITIONS] = [
    "history.0",
    "history.1",
    "history.2",
    "history.3",
    "history.4",
    "history.5",
    "history.6",
    "history.7",
    "history.8",
    "history.9",
    "history.a",
    "history.b",
    "history.c",
    "history.d",
    "history.e",
    "history.f",
];
/// The txid column families, partition 0 first.
const TXID_CFS: [&str; PARTITIONS] = [
    "txid.0", "txid.1", "txid.2", "txid.3", "txid.4", "txid.5", "txid.6", "txid.7", "txid.8",
    "txid.9", "txid.a", "txid.b", "txid.c", "txid.d", "txid.e", "txid.f",
];

/// The partition of a history or txid key: the top 4 bits of its first
/// byte, the first of a script hash or txid.
fn partition_of(key: &[u8]) -> usize {
    usize::from(key.first().copied().unwrap_or(0) >> 4)
}

/// What the rows of a column family are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Meta,
    History,
    Txid,
    Undo,
}

impl Family {
    /// The families as `footprint` and `lsm_shape` name them.
    const ALL: [Family; 4] = [Family::Meta, Family::History, Family::Txid, Family::Undo];

    fn name(self) -> &'static str {
        match self {
            Family::Meta => CF_META,
            Family::History => "history",
            Family::Txid => "txid",
            Family::Undo => CF_UNDO,
        }
    }

    /// Its column families, in key order.
    fn column_families(self) -> &'static [&'static str] {
        match self {
            Family::Meta => &[CF_META],
            Family::History => &HISTORY_CFS,
            Family::Txid => &TXID_CFS,
            Family::Undo => &[CF_UNDO],
        }
    }

    /// Rows arrive in random key order: a bulk load sorts them in runs.
    fn bulk(self) -> bool {
        matches!(self, Family::History | Family::Txid)
    }
}

/// Every column family of this format, with its family.
fn all_cfs() -> impl Iterator<Item = (Family, &'static str)> {
    Family::ALL
        .into_iter()
        .flat_map(|family| family.column_families().iter().map(move |&cf| (family, cf)))
}

const META_SCHEMA: &[u8] = b"schema";
const META_TIP: &[u8] = b"tip";
/// The prefix of [`tx_size_key`].
const META_TX_SIZE: &[u8; 7] = b"txsize/";
const META_NETWORK: &[u8] = b"network";
/// Present while a bulk load is under way (from its start to its merge's
/// end), so that one interrupted goes on after a restart; its value is the
/// number of complete runs (u32 BE; empty: none).
const META_BULK: &[u8] = b"bulk";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("database error: {0}")]
    Db(#[from] rocksdb::Error),
    #[error("index file {path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error("index at {path} has format {found}, this build writes format {expected}: rebuild it with --reindex (or leave reindex_on_format_change on)")]
    Schema {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error("index at {path} is for network {found}, not {expected}")]
    Network {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error("snapshot refused: {0}")]
    Snapshot(String),
    #[error("index is inconsistent: {0}")]
    Corrupt(String),
    #[error("no index at {0} yet: a read-only replica follows an index that `osprey serve` (the writer) has created")]
    NoIndex(PathBuf),
    /// A read-only replica's catch-up found the writer's files moving under
    /// it (a rollback between its reads), or RocksDB could not catch up:
    /// the next catch-up tries again.
    #[error("catching up with the writer: {0}")]
    CatchUp(String),
    #[error("a read-only replica does not write its index")]
    ReadOnly,
    /// The process may not open the files a bulk load's merge needs.
    #[error("too few open files allowed: {0}")]
    OpenFiles(String),
    /// A read of script or transaction rows during a bulk load, which
    /// keeps them outside RocksDB until its merge.
    #[error("the index is being built: scripts and transactions are answered once its bulk load is merged at the node's tip")]
    BulkLoad,
    #[error("cannot undo block {height}: its undo data was pruned (reorg deeper than --reorg-depth-max); rebuild with --reindex")]
    UndoPruned { height: Height },
    /// A write found the filesystem of the index full. Nothing past the
    /// committed tip counts; writes wait for [`Store::resume_writes`].
    #[error("no space left for the index in {path}: {free} bytes free, about {needed} needed")]
    NoSpace {
        path: PathBuf,
        /// Bytes the failed write needed, with room for a memtable flush.
        needed: u64,
        free: u64,
    },
    /// A write failed earlier and the index has not been reopened since
    /// (see [`Store::resume_writes`]).
    #[error("writes to the index in {path} stopped after a failed write: {reason}")]
    WritesStopped { path: PathBuf, reason: String },
}

impl Error {
    /// Whether this is [`Error::NoSpace`]: retrying once space is freed
    /// may succeed.
    pub fn is_no_space(&self) -> bool {
        matches!(self, Error::NoSpace { .. })
    }
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Whether trying again later may succeed (a replica's catch-up).
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::CatchUp(_))
    }
}

/// Tunables of the store.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Blocks below the tip whose undo data is kept; a deeper reorg needs a
    /// reindex.
    pub reorg_depth_max: u32,
    /// RocksDB block cache, in bytes.
    pub cache_bytes: usize,
    /// Memory a bulk load (see [`Store::begin_bulk_load`]) gathers rows in
    /// before it writes them out as one sorted run, in bytes (scaled).
    pub bulk_run_bytes: usize,
    /// Whether the index keeps silent-payment records (`sptweaks.dat`,
    /// `spoffsets.dat`). Part of the format: an index built the other way
    /// is refused ([`Error::Schema`]).
    pub silent_payments: bool,
    /// Every size that decides the LSM's shape is divided by this: write
    /// buffers, target file sizes, level base sizes and the block cache
    /// (1: the real sizes). A chain 1/F of another then builds the same
    /// LSM as that one (files, levels, hand-over, compactions per byte),
    /// so a chain this machine holds models mainnet's
    /// (`osprey bench index --lsm-scale`). File counts stay: each file is
    /// already 1/F the bytes. The indexer's batches must shrink with it
    /// ([`StoreConfig::scaled`]), or a batch larger than a scaled memtable
    /// would decide the flushes' size instead.
    pub lsm_scale: u32,
}

impl StoreConfig {
    /// A size (bytes, or rows that become bytes) at this store's scale
    /// (see [`StoreConfig::lsm_scale`]); at least 1.
    pub fn scaled(&self, size: usize) -> usize {
        (size / self.lsm_scale.max(1) as usize).max(1)
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            reorg_depth_max: 1000,
            cache_bytes: 256 << 20,
            // Mainnet's ~1.2 billion transactions make ~650 runs of it,
            // merged in one pass; with the block cache and memtables the
            // initial sync stays well inside 1 GiB.
            bulk_run_bytes: 256 << 20,
            silent_payments: false,
            lsm_scale: 1,
        }
    }
}

/// One block turned into rows by the indexer, ready to commit.
pub struct IndexedBlock {
    pub height: Height,
    pub header: Header,
    /// The tx_num of the block's first transaction.
    pub first_tx_num: TxNum,
    pub txids: Vec<Txid>,
    /// Where each transaction ends within the serialized block (the first
    /// starts after the header and the transaction count).
    pub tx_ends: Vec<u32>,
    /// History rows, in any order (see [`codec::ScriptRow`]).
    pub rows: Vec<codec::ScriptRow>,
    /// The txid each spending row of `rows` spends from, in their order: a
    /// bulk load pairs the spends and outputs of one run by them.
    pub spent_txids: Vec<Txid>,
    /// The block's silent-payment records (`osprey_sp::append_block_records`);
    /// empty when it has no eligible transaction or the index keeps none.
    pub sp: Vec<u8>,
}

/// Blocks encoded by [`Store::prepare`], for [`Store::commit`].
pub struct PreparedBatch {
    /// Height, header, first tx_num and transaction count of each block.
    blocks: Vec<(Height, Header, TxNum, u64)>,
    /// Every transaction's txid, in chain order.
    txids: Vec<[u8; 32]>,
    /// Every transaction's size, in chain order.
    tx_sizes: Vec<u32>,
    /// Every block's silent-payment records, in chain order, and the bytes
    /// of each block's.
    sp_records: Vec<u8>,
    sp_block_bytes: Vec<u64>,
    /// History rows, sorted (but in a bulk load, whose runs sort them):
    /// one merge operand per script and epoch (`codec::Operands`).
    history: Vec<codec::ScriptRow>,
    /// Txid keys as [`codec::txid_key_bits`], sorted as the rows are.
    txid_keys: Vec<u128>,
    /// In a bulk load, the txid each spending row spends from, in the
    /// order of those rows ([`IndexedBlock::spent_txids`]).
    spent_txids: Vec<[u8; 32]>,
    /// Undo records, of the blocks near the source's tip only: a bulk
    /// load takes none of those, since its runs cannot be rolled back.
    undo: Vec<(Height, Vec<u8>)>,
}

impl PreparedBatch {
    /// Blocks in the batch.
    pub fn len(&self) -> u32 {
        self.blocks.len() as u32
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Bytes the batch adds to the index before compression: its flat-file
    /// records and its database rows.
    pub fn bytes(&self) -> u64 {
        let per_block = 80 + 8 + if self.sp_block_bytes.is_empty() { 0 } else { 8 };
        let flat = self.blocks.len() * per_block
            + self.txids.len() * 32
            + self.tx_sizes.len() * TX_SIZE_LEN
            + self.sp_records.len();
        let history = self.history.len() * HISTORY_ROW_BYTES;
        let txids = self.txid_keys.len() * (codec::TXID_PREFIX_LEN + TxNum::LEN);
        let undo: usize = self.undo.iter().map(|(_, record)| 4 + record.len()).sum();
        (flat + history + txids + undo) as u64
    }
}

/// Bytes of a history row before compression, with its share of a key,
/// for [`PreparedBatch::bytes`]: ~10 bytes an entry, a 12-byte key for
/// every 1.3 rows of a batch.
const HISTORY_ROW_BYTES: usize = 21;

/// In-memory view of the chain part of the index, swapped under one lock so
/// readers never see headers and tx counts of different tips.
struct Chain {
    headers: Vec<Header>,
    hashes: Vec<BlockHash>,
    /// `tx_counts[h]` = transactions in blocks `0..=h`.
    tx_counts: Vec<u64>,
    /// `sp_offsets[h]` = bytes of `sptweaks.dat` up to the end of block
    /// `h`'s records; empty without silent payments.
    sp_offsets: Vec<u64>,
}

struct Files {
    headers: FlatFile,
    txcounts: FlatFile,
    txids: FlatFile,
    txsizes: FlatFile,
    /// Present exactly when the index keeps silent payments.
    sp: Option<SpFiles>,
}

struct SpFiles {
    /// `sptweaks.dat`, as one-byte records.
    tweaks: FlatFile,
    /// `spoffsets.dat`, 8 bytes per block.
    offsets: FlatFile,
}

impl Files {
    /// The files present, each with its name, in the order of
    /// `layout::FLAT_FILES`.
    fn named(&self) -> Vec<(&'static str, &FlatFile)> {
        let mut named = vec![
            ("headers.dat", &self.headers),
            ("txcounts.dat", &self.txcounts),
            ("txids.dat", &self.txids),
            ("txsizes.dat", &self.txsizes),
        ];
        if let Some(sp) = &self.sp {
            named.push(("spoffsets.dat", &sp.offsets));
            named.push(("sptweaks.dat", &sp.tweaks));
        }
        named
    }

    /// Writes every file's pending records ([`FlatFile::flush`]); on an
    /// error, the file's name.
    fn flush(&mut self) -> std::result::Result<(), (&'static str, std::io::Error)> {
        for (name, file) in self.named_mut() {
            file.flush().map_err(|e| (name, e))?;
        }
        Ok(())
    }

    /// Writes and syncs every file ([`FlatFile::flush_and_sync`]); on an
    /// error, the file's name.
    fn sync(&mut self) -> std::result::Result<(), (&'static str, std::io::Error)> {
        for (name, file) in self.named_mut() {
            file.flush_and_sync().map_err(|e| (name, e))?;
        }
        Ok(())
    }

    /// Syncs what [`Files::flush`] wrote ([`FlatFile::sync`]), with a
    /// shared reference: under the read lock, which readers share; on an
    /// error, the file's name.
    fn sync_written(&self) -> std::result::Result<(), (&'static str, std::io::Error)> {
        for (name, file) in self.named() {
            file.sync().map_err(|e| (name, e))?;
        }
        Ok(())
    }

    /// [`Files::named`], to write.
    fn named_mut(&mut self) -> Vec<(&'static str, &mut FlatFile)> {
        let mut named = vec![
            ("headers.dat", &mut self.headers),
            ("txcounts.dat", &mut self.txcounts),
            ("txids.dat", &mut self.txids),
            ("txsizes.dat", &mut self.txsizes),
        ];
        if let Some(sp) = &mut self.sp {
            named.push(("spoffsets.dat", &mut sp.offsets));
            named.push(("sptweaks.dat", &mut sp.tweaks));
        }
        named
    }
}

/// The LSM's shape (see [`Store::lsm_shape`]): what decides whether ingest
/// stays flat as the index grows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LsmShape {
    /// Each column family's live SST files, by level.
    pub column_families: Vec<CfLevels>,
    /// Time writes waited for RocksDB (slowed down or stopped) since open.
    pub stall_micros: u64,
    /// Bytes flushed from memtables, and read and written by compactions,
    /// since open.
    pub flush_write_bytes: u64,
    pub compact_read_bytes: u64,
    pub compact_write_bytes: u64,
    /// Runs a bulk load's merge took (see `runs`); `None` if none began
    /// since open.
    pub bulk_runs_merged: Option<u64>,
    /// The last merge's time, and the tip it merged the index at (the
    /// blocks after it were indexed after the merge); `None` if none ended
    /// since open.
    pub bulk_merge_micros: Option<u64>,
    pub bulk_merged_at_height: Option<u32>,
    /// Bytes a bulk load wrote outside RocksDB's counters since open: its
    /// runs and the SST files its merge handed to RocksDB.
    pub bulk_write_bytes: u64,
}

/// One column family's live files and bytes per level, level 0 first, up
/// to its last non-empty level.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CfLevels {
    pub name: &'static str,
    pub files: Vec<u64>,
    pub bytes: Vec<u64>,
}

/// One part of the index on disk (see [`Store::footprint`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// The column family or flat file.
    pub name: &'static str,
    pub bytes: u64,
    /// Rows (a column family) or fixed-size records (a flat file).
    pub records: u64,
}

pub struct Store {
    /// `None` only while [`Store::resume_writes`] reopens it, or after a
    /// reopen failed (reads then fail with [`Error::WritesStopped`]).
    db: RwLock<Option<DB>>,
    /// A read-only replica's RocksDB secondary directory (its own info
    /// log and manifest copy), removed when the store closes; `None` for
    /// the writer. After `db`, so that the database closes first.
    secondary: Option<tempfile::TempDir>,
    /// The DB's options, which hold its statistics (bytes written); a
    /// reopen reuses them, so the counters go on.
    options: Options,
    path: PathBuf,
    config: StoreConfig,
    chain: RwLock<Chain>,
    files: RwLock<Files>,
    /// Set while memtables hold batches written without the WAL (initial
    /// sync); they must be flushed before the next WAL-protected write.
    unlogged: AtomicBool,
    /// Set during a bulk load: history and txid rows go to `runs`, not to
    /// RocksDB, and are not read.
    bulk: AtomicBool,
    /// The rows a bulk load gathers until they make a run.
    runs: Mutex<runs::RunBuffer>,
    /// Complete runs of the bulk load under way.
    runs_written: AtomicU32,
    /// Set by a failed write: what the index in memory and on disk may
    /// disagree on since (flat files ahead of the tip, RocksDB in its
    /// background-error state) until [`Store::resume_writes`] reopens it.
    stalled: Mutex<Option<Stall>>,
    /// The partition a bulk load's merge is merging, counted from 1; 0:
    /// no merge runs.
    merging: AtomicUsize,
    /// Runs the last merge took, its time and the tip it merged at (see
    /// [`LsmShape`]).
    runs_merged: AtomicU64,
    merge_micros: AtomicU64,
    merged_at_height: AtomicU64,
    /// Bytes of runs and ingested SST files written since open.
    bulk_write_bytes: AtomicU64,
}

/// Why writes stopped, and what they need to resume.
#[derive(Clone, Debug)]
struct Stall {
    reason: String,
    /// Free bytes a retry needs; 0 when the failure was not a full disk
    /// (a reopen is tried at once).
    needed: u64,
}

/// The column family `name` of `db`: every one of the format is opened
/// with the index.
fn cf<'a>(db: &'a DB, name: &str) -> &'a rocksdb::ColumnFamily {
    db.cf_handle(name)
        .expect("every column family is opened with the index")
}

/// The history column family of the partition `key` (a history key, a
/// script hash or a bucket of one) falls in.
fn history_cf<'a>(db: &'a DB, key: &[u8]) -> &'a rocksdb::ColumnFamily {
    cf(db, HISTORY_CFS[partition_of(key)])
}

/// The txid column family of the partition `key` (a txid key or txid)
/// falls in.
fn txid_cf<'a>(db: &'a DB, key: &[u8]) -> &'a rocksdb::ColumnFamily {
    cf(db, TXID_CFS[partition_of(key)])
}

/// Bytes of Bitcoin's compact-size encoding of `n` (the transaction count
/// after a block header).
pub fn compact_size_len(n: u64) -> u32 {
    match n {
        0..=0xfc => 1,
        0xfd..=0xffff => 3,
        0x1_0000..=0xffff_ffff => 5,
        _ => 9,
    }
}

#[cfg(test)]
mod tests;
