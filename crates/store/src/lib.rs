//! The index on disk: RocksDB column families plus flat files, committed
//! atomically per batch of blocks. The only crate that knows RocksDB.
//!
//! Layout (see `docs/schema.md`):
//! - `headers.dat`: 80-byte headers by height;
//! - `txcounts.dat`: cumulative transaction count after each height;
//! - `txids.dat`: 32-byte txids by tx_num;
//! - `txends.dat`: where each transaction ends within its block (u32), so
//!   its bytes can be read from the node's copy of the block;
//! - column family `history`: rows of [`codec::HistoryRow`];
//! - column family `txid`: txid prefix + tx_num;
//! - column family `undo`: the history keys each recent block wrote;
//! - column family `meta`: schema version and the committed tip, which is the
//!   only truth: flat files are cut back to it on open.
//!
//! [`snapshot`] packs all of it into one file and back.

pub mod codec;
mod flat;
mod layout;
pub mod snapshot;

pub use layout::remove_index;

use bitcoin::block::Header;
use bitcoin::consensus::{deserialize, serialize};
use bitcoin::hashes::Hash;
use bitcoin::{BlockHash, Txid};
use codec::{CodecError, HistoryRow};
use flat::FlatFile;
use osprey_core::{Height, ScriptHash, TxNum};
use rayon::slice::ParallelSliceMut;
use rocksdb::{ColumnFamilyDescriptor, IteratorMode, Options, WriteBatch, WriteOptions, DB};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{RwLock, RwLockReadGuard};

/// Bumped whenever any key, value or file layout changes; a database with
/// another version is refused ([`Error::Schema`]) and must be rebuilt,
/// which `osprey serve` does by itself unless told not to.
pub const SCHEMA_VERSION: u32 = 3;

/// The prefix configuration is part of the format: a database built with
/// short test prefixes must never be read by a normal build.
fn schema_tag() -> Vec<u8> {
    let mut tag = SCHEMA_VERSION.to_be_bytes().to_vec();
    tag.extend_from_slice(&[
        codec::SCRIPT_BUCKET_LEN as u8,
        codec::UNDO_BUCKET_LEN as u8,
        codec::TXID_PREFIX_LEN as u8,
        codec::SPENT_TXID_PREFIX_LEN as u8,
    ]);
    tag
}

const CF_META: &str = "meta";
const CF_HISTORY: &str = "history";
const CF_TXID: &str = "txid";
const CF_UNDO: &str = "undo";
/// Every column family of this format.
const ALL_CFS: [&str; 4] = [CF_META, CF_HISTORY, CF_TXID, CF_UNDO];
/// Column families whose rows arrive in random key order, the ones a bulk
/// load leaves uncompacted.
const BULK_CFS: [&str; 2] = [CF_HISTORY, CF_TXID];
const META_SCHEMA: &[u8] = b"schema";
const META_TIP: &[u8] = b"tip";
const META_NETWORK: &[u8] = b"network";

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
    #[error("cannot undo block {height}: its undo data was pruned (reorg deeper than --reorg-depth-max); rebuild with --reindex")]
    UndoPruned { height: Height },
}

pub type Result<T> = std::result::Result<T, Error>;

/// Tunables of the store.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Blocks below the tip whose undo data is kept; a deeper reorg needs a
    /// reindex.
    pub reorg_depth_max: u32,
    /// RocksDB block cache, in bytes.
    pub cache_bytes: usize,
    /// Level-0 files a bulk load (see [`Store::begin_bulk_load`]) may pile
    /// up in one column family before it hands over to normal compaction.
    pub bulk_l0_files_max: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            reorg_depth_max: 1000,
            cache_bytes: 256 << 20,
            // ~200 flushes of a 32 MB memtable: a few GB of rows, and file
            // handles well inside the usual 1024 descriptors.
            bulk_l0_files_max: 200,
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
    /// Encoded history rows (see [`HistoryRow::encode`]).
    pub rows: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Blocks encoded by [`Store::prepare`], for [`Store::commit`].
pub struct PreparedBatch {
    /// Height, header, first tx_num and transaction count of each block.
    blocks: Vec<(Height, Header, TxNum, u64)>,
    /// Every transaction's txid, in chain order.
    txids: Vec<[u8; 32]>,
    /// Every transaction's end within its block, in chain order.
    tx_ends: Vec<u32>,
    /// History, txid and undo rows.
    batch: WriteBatch,
}

impl PreparedBatch {
    /// Blocks in the batch.
    pub fn len(&self) -> u32 {
        self.blocks.len() as u32
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }
}

/// In-memory view of the chain part of the index, swapped under one lock so
/// readers never see headers and tx counts of different tips.
struct Chain {
    headers: Vec<Header>,
    hashes: Vec<BlockHash>,
    /// `tx_counts[h]` = transactions in blocks `0..=h`.
    tx_counts: Vec<u64>,
}

struct Files {
    headers: FlatFile,
    txcounts: FlatFile,
    txids: FlatFile,
    txends: FlatFile,
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
    db: DB,
    /// The DB's options, which hold its statistics (bytes written).
    options: Options,
    path: PathBuf,
    config: StoreConfig,
    chain: RwLock<Chain>,
    files: RwLock<Files>,
    /// Set while memtables hold batches written without the WAL (initial
    /// sync); they must be flushed before the next WAL-protected write.
    unlogged: AtomicBool,
    /// Set during a bulk load: automatic compaction of [`BULK_CFS`] is off.
    bulk: AtomicBool,
}

impl Store {
    /// Opens (or creates) the index in `dir` for `network`, and cuts the flat
    /// files back to the committed tip.
    ///
    /// # Errors
    /// On I/O errors, a format or network mismatch, or an inconsistent index.
    pub fn open(dir: &Path, network: &str, config: StoreConfig) -> Result<Store> {
        let file_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::File { path, source }
        };
        std::fs::create_dir_all(dir).map_err(file_err(dir))?;
        let db_path = dir.join(layout::ROCKSDB_DIR);
        // A format that dropped or renamed a column family would make the
        // open below fail with RocksDB's "column families not opened":
        // that is a format change too, and must say so.
        if let Ok(found) = DB::list_cf(&Options::default(), &db_path) {
            if let Some(foreign) = found
                .iter()
                .find(|cf| !ALL_CFS.contains(&cf.as_str()) && cf.as_str() != "default")
            {
                return Err(Error::Schema {
                    path: dir.to_path_buf(),
                    found: format!("with column family {foreign:?}"),
                    expected: osprey_core::to_hex(&schema_tag()),
                });
            }
        }
        // No fallocate (a DB option the Rust API only takes as a string):
        // RocksDB would reserve 1.1x a memtable for each WAL and a whole
        // target file for each SST being written, which showed as ~36 MB of
        // a 152 MB index on disk (peerlab, medium chain). Osprey writes big
        // sequential files, so the reservation buys nothing.
        let mut opts = Options::default().get_options_from_string("allow_fallocate=false")?;
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.set_max_open_files(256);
        opts.set_keep_log_file_num(4);
        opts.increase_parallelism(2);
        opts.set_target_file_size_base(128 << 20);
        opts.set_max_bytes_for_level_base(1 << 30);
        opts.set_level_compaction_dynamic_level_bytes(true);
        // The merge that ends a bulk load is one compaction of every level-0
        // file: split by key range, it uses both background threads.
        opts.set_max_subcompactions(2);
        // The initial sync writes without the WAL (see `apply`): flushing
        // every column family together is what keeps a crash consistent,
        // since all of them then come back at the same earlier batch.
        opts.set_atomic_flush(true);
        // Counters only (bytes written, for monitoring): no histograms or
        // timers, whose clock reads would cost on every write.
        opts.enable_statistics();
        opts.set_statistics_level(rocksdb::statistics::StatsLevel::ExceptHistogramOrTimers);
        let cache = rocksdb::Cache::new_lru_cache(config.cache_bytes);
        let cf = |name: &str, prefix_len: Option<usize>| {
            let mut o = Options::default();
            // Memtables are most of the initial sync's memory. On chaingen
            // `medium` over Core REST, 32 MB instead of 128 MB took peak RSS
            // from ~450 to ~270 MB at the same speed and index size.
            o.set_write_buffer_size(32 << 20);
            o.set_target_file_size_base(128 << 20);
            // A bulk load ends with up to `bulk_l0_files_max` level-0 files;
            // writes (a new block) must not stall while they are merged.
            // Outside bulk loads level 0 stays at the compaction trigger.
            let l0_max = i32::try_from(config.bulk_l0_files_max).unwrap_or(i32::MAX);
            o.set_level_zero_slowdown_writes_trigger(l0_max.saturating_add(20));
            o.set_level_zero_stop_writes_trigger(l0_max.saturating_add(40));
            // zstd level 1 on every level, memtable flushes included: on
            // chaingen `medium` it cut the index from 178 to 136 MB for 0.8 s
            // more CPU; level 3 saved 3 MB more for twice the CPU. (Leaving
            // upper levels uncompressed saves nothing: an initial sync of a
            // small chain ends with every row still in level-0 flushes.)
            o.set_compression_type(rocksdb::DBCompressionType::Zstd);
            o.set_compression_options(-14, 1, 0, 0);
            // Once a bulk load is merged, nearly every row sits in the last
            // level and is written there once: zstd level 3 there took the
            // mainnet-profile chain's history from 76.0 to 73.6 MB (level
            // 9: 73.0 MB, for 2.5x the compaction CPU; a 16 KiB trained
            // dictionary: no better than level 3 alone).
            o.set_bottommost_compression_type(rocksdb::DBCompressionType::Zstd);
            o.set_bottommost_compression_options(-14, 3, 0, 0, true);
            let mut table = rocksdb::BlockBasedOptions::default();
            // 16 KiB blocks instead of 4 KiB: zstd sees more rows at once
            // (history 76.0 to 72.6 MB on the mainnet-profile chain), a
            // wallet's lookup still reads one block per script, and the
            // index blocks are a quarter as big: on the 10M-transaction
            // mainnet-profile chain, 4 KiB blocks made a refresh 4.3x and
            // many wallets 3.3x slower (bench, same run). Partitioned
            // filters and indexes changed neither figure there.
            table.set_block_size(16 << 10);
            table.set_block_cache(&cache);
            table.set_bloom_filter(10.0, false);
            table.set_cache_index_and_filter_blocks(true);
            if let Some(len) = prefix_len {
                // Lookups are prefix scans: prefix blooms let a scan skip
                // files that cannot hold the script or txid at all.
                o.set_prefix_extractor(rocksdb::SliceTransform::create_fixed_prefix(len));
                table.set_whole_key_filtering(false);
            }
            if name == CF_TXID {
                // Its lookups are of transactions a wallet or the mempool
                // saw confirmed: they nearly always hit, and a filter
                // answers only misses. None in the last level, where
                // nearly every row is, saved 1.3 bytes per transaction
                // (mainnet-profile chain, 10 bits per key).
                o.set_optimize_filters_for_hits(true);
            }
            o.set_block_based_table_factory(&table);
            ColumnFamilyDescriptor::new(name, o)
        };
        let cfs = vec![
            cf(CF_META, None),
            cf(CF_HISTORY, Some(codec::SCRIPT_BUCKET_LEN)),
            cf(CF_TXID, Some(codec::TXID_PREFIX_LEN)),
            cf(CF_UNDO, None),
        ];
        let db = DB::open_cf_descriptors(&opts, &db_path, cfs)?;
        let meta = db.cf_handle(CF_META).expect("meta cf opened above");

        let tag = schema_tag();
        match db.get_cf(meta, META_SCHEMA)? {
            None => {
                db.put_cf(meta, META_SCHEMA, &tag)?;
                db.put_cf(meta, META_NETWORK, network.as_bytes())?;
            }
            Some(found) if found != tag => {
                return Err(Error::Schema {
                    path: dir.to_path_buf(),
                    found: osprey_core::to_hex(&found),
                    expected: osprey_core::to_hex(&tag),
                })
            }
            Some(_) => {
                let found = db.get_cf(meta, META_NETWORK)?.unwrap_or_default();
                if found != network.as_bytes() {
                    return Err(Error::Network {
                        path: dir.to_path_buf(),
                        found: String::from_utf8_lossy(&found).into_owned(),
                        expected: network.to_string(),
                    });
                }
            }
        }
        let tip_height = match db.get_cf(meta, META_TIP)? {
            None => None,
            Some(v) => Some(Height(u32::from_be_bytes(
                v.get(..4)
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(|| Error::Corrupt("bad tip record".into()))?,
            ))),
        };
        let blocks = tip_height.map_or(0, |h| u64::from(h.0) + 1);

        let open_flat = |name: &str, len: usize| {
            let path = dir.join(name);
            FlatFile::open(&path, len).map_err(file_err(&path))
        };
        let mut files = Files {
            headers: open_flat("headers.dat", 80)?,
            txcounts: open_flat("txcounts.dat", 8)?,
            txids: open_flat("txids.dat", 32)?,
            txends: open_flat("txends.dat", 4)?,
        };
        if files.headers.len() < blocks || files.txcounts.len() < blocks {
            return Err(Error::Corrupt(format!(
                "tip is height {} but the flat files hold {} headers and {} tx counts",
                blocks.saturating_sub(1),
                files.headers.len(),
                files.txcounts.len()
            )));
        }
        let truncated = files.headers.len() > blocks;
        files
            .headers
            .truncate(blocks)
            .map_err(file_err(&dir.join("headers.dat")))?;
        files
            .txcounts
            .truncate(blocks)
            .map_err(file_err(&dir.join("txcounts.dat")))?;

        let mut raw = vec![0u8; blocks as usize * 80];
        files
            .headers
            .read_many(0, &mut raw)
            .map_err(file_err(&dir.join("headers.dat")))?;
        let headers: Vec<Header> = raw
            .chunks_exact(80)
            .map(|c| deserialize(c).map_err(|e| Error::Corrupt(format!("bad header: {e}"))))
            .collect::<Result<_>>()?;
        let mut raw = vec![0u8; blocks as usize * 8];
        files
            .txcounts
            .read_many(0, &mut raw)
            .map_err(file_err(&dir.join("txcounts.dat")))?;
        let tx_counts: Vec<u64> = raw
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8-byte chunk")))
            .collect();
        let txs = tx_counts.last().copied().unwrap_or(0);
        if files.txids.len() < txs || files.txends.len() < txs {
            return Err(Error::Corrupt(format!(
                "{} txids and {} tx ends on file, {txs} expected",
                files.txids.len(),
                files.txends.len()
            )));
        }
        files
            .txids
            .truncate(txs)
            .map_err(file_err(&dir.join("txids.dat")))?;
        files
            .txends
            .truncate(txs)
            .map_err(file_err(&dir.join("txends.dat")))?;
        if truncated {
            tracing::info!(blocks, "cut flat files back to the committed tip");
        }
        let hashes = headers.iter().map(Header::block_hash).collect();
        Ok(Store {
            db,
            options: opts,
            path: dir.to_path_buf(),
            config,
            chain: RwLock::new(Chain {
                headers,
                hashes,
                tx_counts,
            }),
            files: RwLock::new(files),
            unlogged: AtomicBool::new(false),
            bulk: AtomicBool::new(false),
        })
    }

    fn chain(&self) -> RwLockReadGuard<'_, Chain> {
        self.chain.read().expect("chain lock poisoned")
    }

    /// The committed tip, or `None` for an empty index.
    pub fn tip(&self) -> Option<(Height, BlockHash)> {
        let chain = self.chain();
        chain
            .hashes
            .last()
            .map(|h| (Height(chain.hashes.len() as u32 - 1), *h))
    }

    /// Up to `count` headers from `start`, serialized, stopping at the tip.
    pub fn raw_headers(&self, start: Height, count: usize) -> Vec<[u8; 80]> {
        let chain = self.chain();
        let from = start.as_usize().min(chain.headers.len());
        let to = from.saturating_add(count).min(chain.headers.len());
        chain.headers[from..to]
            .iter()
            .map(|h| serialize(h).try_into().expect("a header is 80 bytes"))
            .collect()
    }

    pub fn block_hash(&self, height: Height) -> Option<BlockHash> {
        self.chain().hashes.get(height.as_usize()).copied()
    }

    /// Block hashes from `start` up to `end` inclusive (clamped to the tip).
    pub fn block_hashes(&self, start: Height, end: Height) -> Vec<BlockHash> {
        let chain = self.chain();
        let to = (end.as_usize() + 1).min(chain.hashes.len());
        chain
            .hashes
            .get(start.as_usize()..to)
            .map(<[_]>::to_vec)
            .unwrap_or_default()
    }

    /// The tx_nums of the block at `height`: `first..end`.
    pub fn block_tx_nums(&self, height: Height) -> Option<std::ops::Range<u64>> {
        let chain = self.chain();
        let end = *chain.tx_counts.get(height.as_usize())?;
        let first = if height.0 == 0 {
            0
        } else {
            chain.tx_counts[height.as_usize() - 1]
        };
        Some(first..end)
    }

    /// Total transactions indexed (the next tx_num).
    pub fn tx_count(&self) -> u64 {
        self.chain().tx_counts.last().copied().unwrap_or(0)
    }

    /// The height of the block holding `tx_num`, and its position in it.
    pub fn locate(&self, tx_num: TxNum) -> Option<(Height, u32)> {
        let chain = self.chain();
        let h = chain.tx_counts.partition_point(|&count| count <= tx_num.0);
        let first = if h == 0 {
            0
        } else {
            *chain.tx_counts.get(h - 1)?
        };
        chain.tx_counts.get(h)?;
        Some((Height(h as u32), (tx_num.0 - first) as u32))
    }

    /// Where the bytes of `tx_num` are: its block's height, and its offset
    /// and length within the serialized block. `None` beyond the tip.
    ///
    /// # Errors
    /// When the positions file cannot be read.
    pub fn tx_span(&self, tx_num: TxNum) -> Result<Option<(Height, u32, u32)>> {
        let Some((height, position)) = self.locate(tx_num) else {
            return Ok(None);
        };
        let read_end = |n: u64| -> Result<u32> {
            let mut buf = [0u8; 4];
            let files = self.files.read().expect("files lock poisoned");
            files
                .txends
                .read(n, &mut buf)
                .map_err(|source| Error::File {
                    path: self.path.join("txends.dat"),
                    source,
                })?;
            Ok(u32::from_le_bytes(buf))
        };
        let start = if position == 0 {
            let txs = self.block_tx_nums(height).map_or(0, |r| r.end - r.start);
            80 + compact_size_len(txs)
        } else {
            read_end(tx_num.0 - 1)?
        };
        let end = read_end(tx_num.0)?;
        if end <= start {
            return Err(Error::Corrupt(format!(
                "transaction {tx_num} ends at {end}, before its start {start}"
            )));
        }
        Ok(Some((height, start, end - start)))
    }

    /// The txid of `tx_num`.
    ///
    /// # Errors
    /// When the txids file cannot be read.
    pub fn txid(&self, tx_num: TxNum) -> Result<Txid> {
        let mut buf = [0u8; 32];
        let files = self.files.read().expect("files lock poisoned");
        files
            .txids
            .read(tx_num.0, &mut buf)
            .map_err(|source| Error::File {
                path: self.path.join("txids.dat"),
                source,
            })?;
        Ok(Txid::from_byte_array(buf))
    }

    /// Txids of consecutive tx_nums (a whole block, for merkle proofs).
    ///
    /// # Errors
    /// When the txids file cannot be read.
    pub fn txids(&self, range: std::ops::Range<u64>) -> Result<Vec<Txid>> {
        let mut buf = vec![0u8; (range.end - range.start) as usize * 32];
        let files = self.files.read().expect("files lock poisoned");
        files
            .txids
            .read_many(range.start, &mut buf)
            .map_err(|source| Error::File {
                path: self.path.join("txids.dat"),
                source,
            })?;
        Ok(buf
            .chunks_exact(32)
            .map(|c| Txid::from_byte_array(c.try_into().expect("32 bytes")))
            .collect())
    }

    /// Finds the tx_num of a confirmed transaction. Every prefix match is
    /// confirmed against the full txid; with duplicate txids (BIP30) the
    /// later transaction wins, as the earlier one can no longer be spent.
    ///
    /// # Errors
    /// On database or file errors.
    pub fn find_tx_num(&self, txid: &Txid) -> Result<Option<TxNum>> {
        let cf = self.db.cf_handle(CF_TXID).expect("txid cf");
        let prefix = codec::txid_prefix(txid);
        let mut found = None;
        for item in self.db.prefix_iterator_cf(cf, prefix) {
            let (key, _) = item?;
            if !key.starts_with(prefix) {
                break;
            }
            let tx_num = codec::decode_txid_key(&key)?;
            if self.txid(tx_num)? == *txid {
                found = Some(tx_num);
            }
        }
        Ok(found)
    }

    /// Returns the history rows of `scripthash` in key order (chain order),
    /// or `None` if there are more than `limit` of them.
    ///
    /// # Errors
    /// On database errors or corrupt rows.
    pub fn history(
        &self,
        scripthash: &ScriptHash,
        limit: usize,
    ) -> Result<Option<Vec<HistoryRow>>> {
        let cf = self.db.cf_handle(CF_HISTORY).expect("history cf");
        let prefix = codec::history_prefix(scripthash);
        let mut rows = Vec::new();
        for item in self.db.prefix_iterator_cf(cf, prefix) {
            let (key, value) = item?;
            if !key.starts_with(prefix) {
                break;
            }
            if let Some(row) = HistoryRow::decode(scripthash, &key, &value)? {
                if rows.len() == limit {
                    return Ok(None);
                }
                rows.push(row);
            }
        }
        Ok(Some(rows))
    }

    /// Commits blocks on top of the tip in one atomic write:
    /// [`Store::prepare`] then [`Store::commit`].
    ///
    /// # Errors
    /// See [`Store::commit`].
    pub fn apply(&self, blocks: &[IndexedBlock], sync: bool, source_tip: Height) -> Result<()> {
        self.commit(self.prepare(blocks, source_tip), sync)
    }

    /// Encodes blocks for [`Store::commit`]: the rows sorted, in a RocksDB
    /// write batch. This is most of a commit's work and reads nothing of the
    /// index, so the indexer runs it off the committing thread, while the
    /// previous batch is written; the sort runs on all cores.
    ///
    /// `source_tip` is the source's best height: blocks more than
    /// `reorg_depth_max` below it get no undo record, since no reorg the
    /// index can undo reaches that deep (during an initial sync that is
    /// nearly every block).
    pub fn prepare(&self, blocks: &[IndexedBlock], source_tip: Height) -> PreparedBatch {
        let history = self.db.cf_handle(CF_HISTORY).expect("history cf");
        let txid_cf = self.db.cf_handle(CF_TXID).expect("txid cf");
        let undo = self.db.cf_handle(CF_UNDO).expect("undo cf");
        // Sized up front: a growing batch doubles and copies its buffer,
        // which showed as memmove in profiles of the initial sync. Each
        // history row appears as itself and, at most, as its script's prefix
        // in the undo record; ~8 bytes of framing per entry.
        let batch_bytes: usize = blocks
            .iter()
            .map(|b| {
                let rows: usize = b
                    .rows
                    .iter()
                    .map(|(k, v)| k.len() + v.len() + codec::UNDO_BUCKET_LEN + 8)
                    .sum();
                rows + b.txids.len() * (codec::TXID_PREFIX_LEN + TxNum::LEN + 8) + 32
            })
            .sum();
        let mut batch = WriteBatch::with_capacity_bytes(batch_bytes + 256);
        let undo_from = source_tip.0.saturating_sub(self.config.reorg_depth_max);
        let mut history_rows: Vec<&(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut txid_keys: Vec<Vec<u8>> = Vec::new();
        for block in blocks {
            history_rows.extend(&block.rows);
            // The undo record: the distinct script buckets the block wrote
            // rows under (rollback finds the rows from them).
            if block.height.0 >= undo_from {
                let record = codec::undo_record(block.rows.iter().map(|(key, _)| key.as_slice()));
                batch.put_cf(undo, block.height.0.to_be_bytes(), record);
            }
            for (i, txid) in block.txids.iter().enumerate() {
                txid_keys.push(codec::txid_key(
                    txid,
                    TxNum(block.first_tx_num.0 + i as u64),
                ));
            }
        }
        // Keys are inserted in ascending order: RocksDB's memtable skip list
        // resumes each search where the previous insert ended, so a sorted
        // run costs a short walk per key instead of a search from the top.
        // Unsorted, these inserts were 40% of all CPU and slowed down as the
        // memtable grew (perf, medium chain).
        // Sorted on each key's first 16 bytes as one integer, the full
        // bytes breaking ties: byte-string comparisons (memcmp through a
        // pointer per row) were the top CPU symbol of the initial sync's
        // main thread (perf, chaingen `medium` from Core's files).
        let mut history_rows: Vec<_> = history_rows
            .into_iter()
            .map(|row| (sort_key(&row.0), row))
            .collect();
        history_rows.par_sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1 .0.cmp(&b.1 .0)));
        for (_, (key, value)) in history_rows {
            batch.put_cf(history, key, value);
        }
        // Txid keys are 13 bytes, so the integer alone orders them.
        txid_keys.par_sort_unstable_by_key(|key| sort_key(key));
        for key in txid_keys {
            batch.put_cf(txid_cf, key, []);
        }
        PreparedBatch {
            blocks: blocks
                .iter()
                .map(|b| (b.height, b.header, b.first_tx_num, b.txids.len() as u64))
                .collect(),
            txids: blocks
                .iter()
                .flat_map(|b| b.txids.iter().map(|t| t.to_byte_array()))
                .collect(),
            tx_ends: blocks
                .iter()
                .flat_map(|b| b.tx_ends.iter().copied())
                .collect(),
            batch,
        }
    }

    /// Writes a prepared batch on top of the tip in one atomic write.
    ///
    /// With `sync` the write goes through RocksDB's WAL and is synced: what
    /// the tip follows. Without it (the initial sync) the write skips the
    /// WAL, which halves the bytes written: the rows reach disk once, when
    /// the memtables are flushed, all column families together (atomic
    /// flush). A crash then loses the batches since the last flush, and
    /// `open` cuts the flat files back to the tip that survived. Before the
    /// next synced write, those memtables are flushed, so a WAL-protected tip
    /// never covers rows that were only in memory.
    ///
    /// # Errors
    /// On I/O or database errors; the committed tip is then unchanged.
    ///
    /// # Panics
    /// When the batch does not extend the tip (a bug in the caller).
    pub fn commit(&self, prepared: PreparedBatch, sync: bool) -> Result<()> {
        let PreparedBatch {
            blocks,
            txids,
            tx_ends,
            mut batch,
        } = prepared;
        let Some(&(last_height, last_header, _, _)) = blocks.last() else {
            return Ok(());
        };
        let (mut next_height, mut tx_count) = {
            let chain = self.chain();
            (
                chain.headers.len() as u32,
                chain.tx_counts.last().copied().unwrap_or(0),
            )
        };
        let undo = self.db.cf_handle(CF_UNDO).expect("undo cf");
        let meta = self.db.cf_handle(CF_META).expect("meta cf");
        let mut new_counts = Vec::with_capacity(blocks.len());
        {
            let mut files = self.files.write().expect("files lock poisoned");
            for &(height, header, first_tx_num, txs) in &blocks {
                assert_eq!(height.0, next_height, "blocks must extend the tip");
                assert_eq!(first_tx_num.0, tx_count, "tx_nums must extend the tip");
                files.headers.append(&serialize(&header));
                tx_count += txs;
                files.txcounts.append(&tx_count.to_le_bytes());
                new_counts.push(tx_count);
                next_height += 1;
            }
            for txid in &txids {
                files.txids.append(txid);
            }
            for end in &tx_ends {
                files.txends.append(&end.to_le_bytes());
            }
            // The flat files must be durable before the tip that covers them.
            let res = files
                .headers
                .flush_and_sync()
                .and_then(|()| files.txcounts.flush_and_sync())
                .and_then(|()| files.txids.flush_and_sync())
                .and_then(|()| files.txends.flush_and_sync());
            if let Err(source) = res {
                return Err(Error::File {
                    path: self.path.clone(),
                    source,
                });
            }
        }
        let mut tip = last_height.0.to_be_bytes().to_vec();
        tip.extend_from_slice(last_header.block_hash().as_byte_array());
        batch.put_cf(meta, META_TIP, tip);
        if let Some(prune_below) = last_height.0.checked_sub(self.config.reorg_depth_max) {
            batch.delete_range_cf(undo, 0u32.to_be_bytes(), prune_below.to_be_bytes());
        }
        let mut opts = WriteOptions::default();
        if sync {
            self.flush_unlogged()?;
            opts.set_sync(true);
        } else {
            opts.disable_wal(true);
            self.unlogged.store(true, Ordering::SeqCst);
        }
        self.db.write_opt(batch, &opts)?;
        if self.bulk.load(Ordering::SeqCst) {
            let l0_files = self.l0_files()?;
            if l0_files > self.config.bulk_l0_files_max {
                tracing::info!(
                    l0_files,
                    "bulk load reached its level-0 limit; compacting as usual from here"
                );
                self.end_bulk_load()?;
            }
        }

        let mut chain = self.chain.write().expect("chain lock poisoned");
        for (&(_, header, _, _), count) in blocks.iter().zip(new_counts) {
            chain.headers.push(header);
            chain.hashes.push(header.block_hash());
            chain.tx_counts.push(count);
        }
        Ok(())
    }

    /// Undoes every block above `height`, leaving the index exactly as if
    /// they had never been applied.
    ///
    /// # Errors
    /// When a block's undo data was pruned, or on I/O or database errors.
    pub fn rollback_to(&self, height: Height) -> Result<()> {
        let (tip, first_removed_tx) = {
            let chain = self.chain();
            let Some(tip) = chain.headers.len().checked_sub(1) else {
                return Ok(());
            };
            if height.as_usize() >= tip {
                return Ok(());
            }
            (tip as u32, chain.tx_counts[height.as_usize()])
        };
        let total = self.tx_count();
        let history = self.db.cf_handle(CF_HISTORY).expect("history cf");
        let txid_cf = self.db.cf_handle(CF_TXID).expect("txid cf");
        let undo = self.db.cf_handle(CF_UNDO).expect("undo cf");
        let meta = self.db.cf_handle(CF_META).expect("meta cf");
        // Every row of the undone blocks has a tx_num of at least
        // `first_removed_tx` and belongs to a script in a bucket their undo
        // records name: for each script of those buckets, seek to that
        // tx_num and delete to the script's end.
        let mut buckets: Vec<Vec<u8>> = Vec::new();
        let mut batch = WriteBatch::default();
        for h in height.0 + 1..=tip {
            let record = self
                .db
                .get_cf(undo, h.to_be_bytes())?
                .ok_or(Error::UndoPruned { height: Height(h) })?;
            buckets.extend(codec::undo_buckets(&record)?);
            batch.delete_cf(undo, h.to_be_bytes());
        }
        buckets.sort_unstable();
        buckets.dedup();
        let first_removed = TxNum(first_removed_tx).to_bytes();
        for bucket in buckets {
            // Across bloom prefixes: an undo bucket is shorter.
            let mut read = rocksdb::ReadOptions::default();
            read.set_total_order_seek(true);
            let mut rows = self.db.raw_iterator_cf_opt(history, read);
            rows.seek(&bucket);
            while let Some(script_id) = rows
                .key()
                .filter(|key| key.starts_with(&bucket) && key.len() >= codec::SCRIPT_ID_LEN)
                .map(|key| key[..codec::SCRIPT_ID_LEN].to_vec())
            {
                rows.seek([script_id.as_slice(), &first_removed].concat());
                while let Some(key) = rows.key().filter(|key| key.starts_with(&script_id)) {
                    batch.delete_cf(history, key);
                    rows.next();
                }
            }
            rows.status()?;
        }
        for (i, txid) in self.txids(first_removed_tx..total)?.iter().enumerate() {
            batch.delete_cf(
                txid_cf,
                codec::txid_key(txid, TxNum(first_removed_tx + i as u64)),
            );
        }
        let mut tip_record = height.0.to_be_bytes().to_vec();
        tip_record.extend_from_slice(
            self.block_hash(height)
                .expect("height is below the tip")
                .as_byte_array(),
        );
        batch.put_cf(meta, META_TIP, tip_record);
        self.flush_unlogged()?;
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        self.db.write_opt(batch, &opts)?;

        // The new tip is committed; now cut the files back to it. A crash
        // before this point is repaired by `open` in the same way.
        let blocks = u64::from(height.0) + 1;
        {
            let mut files = self.files.write().expect("files lock poisoned");
            let res = files
                .headers
                .truncate(blocks)
                .and_then(|()| files.txcounts.truncate(blocks))
                .and_then(|()| files.txids.truncate(first_removed_tx))
                .and_then(|()| files.txends.truncate(first_removed_tx));
            if let Err(source) = res {
                return Err(Error::File {
                    path: self.path.clone(),
                    source,
                });
            }
        }
        let mut chain = self.chain.write().expect("chain lock poisoned");
        chain.headers.truncate(blocks as usize);
        chain.hashes.truncate(blocks as usize);
        chain.tx_counts.truncate(blocks as usize);
        Ok(())
    }

    /// A digest of every row and file of the index, to check that two
    /// indexes (one reorged, one fresh) are the same byte for byte. Undo
    /// records are excluded: they depend on how far back blocks were kept.
    ///
    /// # Errors
    /// On database or file errors.
    pub fn digest(&self) -> Result<[u8; 32]> {
        use bitcoin::hashes::{sha256, HashEngine};
        let mut engine = sha256::Hash::engine();
        for name in [CF_HISTORY, CF_TXID] {
            let cf = self.db.cf_handle(name).expect("cf exists");
            engine.input(name.as_bytes());
            for item in self.db.iterator_cf(cf, IteratorMode::Start) {
                let (k, v) = item?;
                engine.input(&(k.len() as u32).to_le_bytes());
                engine.input(&k);
                engine.input(&(v.len() as u32).to_le_bytes());
                engine.input(&v);
            }
        }
        let chain = self.chain();
        for (header, count) in chain.headers.iter().zip(&chain.tx_counts) {
            engine.input(&serialize(header));
            engine.input(&count.to_le_bytes());
        }
        drop(chain);
        for txid in self.txids(0..self.tx_count())? {
            engine.input(txid.as_byte_array());
        }
        for tx_num in 0..self.tx_count() {
            if let Some((height, offset, len)) = self.tx_span(TxNum(tx_num))? {
                engine.input(&height.0.to_le_bytes());
                engine.input(&offset.to_le_bytes());
                engine.input(&len.to_le_bytes());
            }
        }
        Ok(sha256::Hash::from_engine(engine).to_byte_array())
    }

    /// Starts a bulk load: the history and txid column families stop
    /// compacting until [`Store::end_bulk_load`] or until one holds
    /// `bulk_l0_files_max` level-0 files.
    ///
    /// Why: their keys are script and txid hashes, random, so every memtable
    /// flush overlaps the whole key range and leveled compaction rewrites
    /// each row once per level it passes. On chaingen `large` that was 2.34
    /// bytes written per byte of index, and the ingest rate fell as levels
    /// were added. Left in level 0, rows are written once by the flush and
    /// once more by the single merge that follows (RocksDB's own advice for
    /// bulk loading). Nothing reads those rows during a sync, and level-0
    /// lookups stay correct, only slower, until the merge is done.
    ///
    /// # Errors
    /// On database errors.
    pub fn begin_bulk_load(&self) -> Result<()> {
        self.set_auto_compaction(false)?;
        self.bulk.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Ends a bulk load: the memtables are flushed, so that the merge takes
    /// every row (one left behind would make a later compaction rewrite the
    /// merged level), and RocksDB merges the level-0 files in the
    /// background. Does nothing outside a bulk load.
    ///
    /// # Errors
    /// On database errors.
    pub fn end_bulk_load(&self) -> Result<()> {
        if self.bulk.swap(false, Ordering::SeqCst) {
            self.flush()?;
            self.set_auto_compaction(true)?;
        }
        Ok(())
    }

    fn set_auto_compaction(&self, on: bool) -> Result<()> {
        let value = if on { "false" } else { "true" };
        for name in BULK_CFS {
            let cf = self.db.cf_handle(name).expect("cf exists");
            self.db
                .set_options_cf(cf, &[("disable_auto_compactions", value)])?;
        }
        Ok(())
    }

    /// Bytes of the live SST files of every column family: the RocksDB
    /// part of the index on disk (memtables not flushed yet excluded).
    pub fn rocksdb_live_sst_bytes(&self) -> u64 {
        [CF_META, CF_HISTORY, CF_TXID, CF_UNDO]
            .iter()
            .filter_map(|name| {
                let cf = self.db.cf_handle(name).expect("cf exists");
                self.db
                    .property_int_value_cf(cf, rocksdb::properties::LIVE_SST_FILES_SIZE)
                    .ok()
                    .flatten()
            })
            .sum()
    }

    /// Where the index's bytes go: each column family's live SST files and
    /// each flat file, with its records. Asked by `osprey index` when it is
    /// done, so that a node runner (and a size benchmark) sees which part
    /// of the index grows with what. Memtables not yet flushed are not
    /// counted; RocksDB's key count is an estimate, exact after a full
    /// compaction.
    pub fn footprint(&self) -> Vec<Part> {
        let mut parts: Vec<Part> = ALL_CFS
            .iter()
            .map(|&name| {
                let cf = self.db.cf_handle(name).expect("cf exists");
                let property = |p: &std::ffi::CStr| {
                    self.db
                        .property_int_value_cf(cf, p)
                        .ok()
                        .flatten()
                        .unwrap_or(0)
                };
                Part {
                    name,
                    bytes: property(rocksdb::properties::LIVE_SST_FILES_SIZE),
                    records: property(rocksdb::properties::ESTIMATE_NUM_KEYS),
                }
            })
            .collect();
        let files = self.files.read().expect("files lock poisoned");
        for (name, file) in [
            ("headers.dat", &files.headers),
            ("txcounts.dat", &files.txcounts),
            ("txids.dat", &files.txids),
            ("txends.dat", &files.txends),
        ] {
            parts.push(Part {
                name,
                bytes: file.bytes(),
                records: file.len(),
            });
        }
        parts
    }

    /// Bytes of the flat files (headers, tx counts, txids, tx ends).
    pub fn flat_files_bytes(&self) -> u64 {
        let files = self.files.read().expect("files lock poisoned");
        files.headers.bytes() + files.txcounts.bytes() + files.txids.bytes() + files.txends.bytes()
    }

    /// Bytes RocksDB has written since the index was opened: memtable
    /// flushes, compactions and the write-ahead log.
    pub fn rocksdb_written_bytes(&self) -> u64 {
        use rocksdb::statistics::Ticker;
        [
            Ticker::FlushWriteBytes,
            Ticker::CompactWriteBytes,
            Ticker::WalFileBytes,
        ]
        .into_iter()
        .map(|ticker| self.options.get_ticker_count(ticker))
        .sum()
    }

    /// The most level-0 files any bulk-loaded column family holds.
    fn l0_files(&self) -> Result<u64> {
        let mut most = 0;
        for name in BULK_CFS {
            let cf = self.db.cf_handle(name).expect("cf exists");
            let files = self
                .db
                .property_int_value_cf(cf, rocksdb::properties::num_files_at_level(0))?
                .unwrap_or(0);
            most = most.max(files);
        }
        Ok(most)
    }

    /// Flushes and merges the history and txid column families down to
    /// their last level, returning when done: what `osprey index` leaves,
    /// so that its size and bytes written are those of a finished index.
    ///
    /// # Errors
    /// On database errors.
    pub fn compact(&self) -> Result<()> {
        self.flush()?;
        for name in BULK_CFS {
            let cf = self.db.cf_handle(name).expect("cf exists");
            self.db.compact_range_cf(cf, None::<&[u8]>, None::<&[u8]>);
        }
        Ok(())
    }

    /// Flushes memtables (every column family at once), so that what was
    /// written without the WAL is on disk and the on-disk size reflects the
    /// whole index.
    ///
    /// # Errors
    /// On database errors.
    pub fn flush(&self) -> Result<()> {
        let cfs: Vec<_> = [CF_META, CF_HISTORY, CF_TXID, CF_UNDO]
            .iter()
            .map(|name| self.db.cf_handle(name).expect("cf exists"))
            .collect();
        self.db
            .flush_cfs_opt(&cfs, &rocksdb::FlushOptions::default())?;
        self.unlogged.store(false, Ordering::SeqCst);
        Ok(())
    }

    fn flush_unlogged(&self) -> Result<()> {
        if self.unlogged.load(Ordering::SeqCst) {
            self.flush()?;
        }
        Ok(())
    }
}

/// The first 16 bytes of `key` as a big-endian integer, zero-padded: two
/// keys whose integers differ compare the same way as their bytes (a
/// shorter key is padded with zeros, and a shorter key that is a prefix of
/// a longer one sorts first either way), so sorting on it and breaking ties
/// on the bytes gives RocksDB's order.
fn sort_key(key: &[u8]) -> u128 {
    let mut bytes = [0u8; 16];
    let n = key.len().min(16);
    bytes[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(bytes)
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
