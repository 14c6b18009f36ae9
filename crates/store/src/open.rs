//! Opening an index: RocksDB's options (each with the measurement behind
//! it), the format and network checks, and the flat files cut back to the
//! committed tip.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};

use bitcoin::block::Header;
use bitcoin::consensus::deserialize;
use bitcoin::hashes::Hash;
use bitcoin::BlockHash;
use rocksdb::{ColumnFamilyDescriptor, Options, DB};

use crate::flat::FlatFile;
use crate::runs::{self, RunBuffer};
use crate::{
    all_cfs, codec, layout, schema_tag, space, Chain, Error, Family, Files, Result, SpFiles, Store,
    StoreConfig, CF_META, META_BULK, META_NETWORK, META_SCHEMA, META_TIP,
};
use osprey_core::Height;

impl Store {
    /// Opens (or creates) the index in `dir` for `network`, and cuts the flat
    /// files back to the committed tip.
    ///
    /// # Errors
    /// On I/O errors ([`Error::NoSpace`] when the disk is too full to
    /// open it), a format or network mismatch, or an inconsistent index.
    pub fn open(dir: &Path, network: &str, config: StoreConfig) -> Result<Store> {
        Self::open_unchecked(dir, network, config)
            .map_err(|e| space::no_space_or(e, dir, space::FLUSH_MARGIN_BYTES))
    }

    fn open_unchecked(dir: &Path, network: &str, config: StoreConfig) -> Result<Store> {
        std::fs::create_dir_all(dir).map_err(file_err(dir))?;
        let db_path = dir.join(layout::ROCKSDB_DIR);
        refuse_foreign_column_families(dir, &db_path, config.silent_payments)?;
        let opts = db_options(&config)?;
        let db = open_db(&db_path, &opts, &config)?;
        check_format(&db, dir, network, config.silent_payments, true)?;
        // A bulk load that did not reach its merge's end (stopped, killed,
        // a node gone) goes on where it was: its complete runs wait for
        // the merge at the tip, and the tip is the last run's.
        let bulk = bulk_load_recorded(&db)?;
        runs::clear(dir, bulk)?;
        if bulk.is_some() {
            runs::refuse_earlier_runs(dir, config.silent_payments)?;
        }
        let (files, chain) = load_chain(&db, dir, config.silent_payments)?;
        let store = Store {
            db: RwLock::new(Some(db)),
            options: opts,
            path: dir.to_path_buf(),
            config,
            chain: RwLock::new(chain),
            files: RwLock::new(files),
            unlogged: AtomicBool::new(false),
            bulk: AtomicBool::new(bulk.is_some()),
            runs: Mutex::new(RunBuffer::default()),
            runs_written: AtomicU32::new(bulk.unwrap_or(0)),
            secondary: None,
            stalled: Mutex::new(None),
            merging: AtomicUsize::new(0),
            runs_merged: AtomicU64::new(0),
            merge_micros: AtomicU64::new(0),
            merged_at_height: AtomicU64::new(0),
            bulk_write_bytes: AtomicU64::new(0),
        };
        Ok(store)
    }

    /// After a failed write (a full disk, an I/O error), makes the index
    /// writable again: once the filesystem has the room the failed write
    /// needed, the index is closed and opened again, which is the recovery
    /// a crash gets (proven by the kill -9 tests): RocksDB leaves its
    /// background-error state, comes back at its last durable tip, and the
    /// flat files are cut back to it. Reads wait for the reopen (they take
    /// the same locks) and then see that tip, which during an initial sync
    /// may be below the one before the failure (batches written without the
    /// WAL and never flushed); the next sync indexes those blocks again.
    /// Returns whether it reopened (`false`: no write had failed).
    ///
    /// # Errors
    /// [`Error::NoSpace`] while the filesystem still lacks the room (writes
    /// stay stopped; call again later); the errors of [`Store::open`] when
    /// the reopen fails (reads then fail too, until a later call succeeds).
    pub fn resume_writes(&self) -> Result<bool> {
        let Some(stall) = self.stalled.lock().expect("stall lock poisoned").clone() else {
            return Ok(false);
        };
        if stall.needed > 0 {
            if let Some(free) = space::free_bytes(&self.path) {
                if free < stall.needed {
                    return Err(Error::NoSpace {
                        path: self.path.clone(),
                        needed: stall.needed,
                        free,
                    });
                }
            }
        }
        let mut db = self.db.write().expect("db lock poisoned");
        // Closed before it opens again: RocksDB's lock file admits one.
        drop(db.take());
        let db_path = self.path.join(layout::ROCKSDB_DIR);
        let reopened = open_db(&db_path, &self.options, &self.config).and_then(|opened| {
            let (files, chain) = load_chain(&opened, &self.path, self.config.silent_payments)?;
            Ok((opened, files, chain))
        });
        let (opened, files, chain) = reopened.map_err(|e| self.no_space_or(e, stall.needed))?;
        let bulk = bulk_load_recorded(&opened)?;
        runs::clear(&self.path, bulk).map_err(|e| self.no_space_or(e, stall.needed))?;
        // Rows gathered after the last run belong to blocks past the tip
        // the index came back at: the next sync indexes them again.
        *self.runs.lock().expect("runs lock poisoned") = RunBuffer::default();
        *self.chain.write().expect("chain lock poisoned") = chain;
        *self.files.write().expect("files lock poisoned") = files;
        *db = Some(opened);
        drop(db);
        self.unlogged.store(false, Ordering::SeqCst);
        // A bulk load goes on from its last complete run.
        self.bulk.store(bulk.is_some(), Ordering::SeqCst);
        self.runs_written.store(bulk.unwrap_or(0), Ordering::SeqCst);
        *self.stalled.lock().expect("stall lock poisoned") = None;
        tracing::info!(
            path = %self.path.display(),
            tip = self.chain().headers.len().checked_sub(1),
            "index reopened after the failed write ({}): writes resume",
            stall.reason
        );
        Ok(true)
    }
}

/// Opens the RocksDB database of an index with its column families.
fn open_db(db_path: &Path, opts: &Options, config: &StoreConfig) -> Result<DB> {
    Ok(DB::open_cf_descriptors(
        opts,
        db_path,
        column_families(config),
    )?)
}

/// The flat files of an opened database's index, cut back to its
/// committed tip, and the chain they hold.
fn load_chain(db: &DB, dir: &Path, silent_payments: bool) -> Result<(Files, Chain)> {
    let blocks = read_tip(db)?.map_or(0, |(h, _)| u64::from(h.0) + 1);
    let (files, headers, tx_counts, sp_offsets) = open_files(dir, blocks, silent_payments)?;
    let hashes = headers.iter().map(Header::block_hash).collect();
    Ok((
        files,
        Chain {
            headers,
            hashes,
            tx_counts,
            sp_offsets,
        },
    ))
}

/// The column families of this format, with their options (one block
/// cache of `config.cache_bytes`, scaled, for all).
pub(crate) fn column_families(config: &StoreConfig) -> Vec<ColumnFamilyDescriptor> {
    let cache = rocksdb::Cache::new_lru_cache(config.scaled(config.cache_bytes));
    all_cfs()
        .map(|(family, name)| column_family(family, name, config, &cache))
        .collect()
}

/// The complete runs of the bulk load under way (`meta`'s `bulk`
/// record); `None` outside one.
pub(crate) fn bulk_load_recorded(db: &DB) -> Result<Option<u32>> {
    let meta = db.cf_handle(CF_META).expect("meta cf opened");
    Ok(db
        .get_cf(meta, META_BULK)?
        .map(|record| record.try_into().map(u32::from_be_bytes).unwrap_or(0)))
}

/// The committed tip: its height and block hash (`None` for an empty
/// index).
pub(crate) fn read_tip(db: &DB) -> Result<Option<(Height, BlockHash)>> {
    let meta = db.cf_handle(CF_META).expect("meta cf opened");
    let Some(record) = db.get_cf(meta, META_TIP)? else {
        return Ok(None);
    };
    let (height, hash) = record
        .split_first_chunk::<4>()
        .filter(|(_, hash)| hash.len() == 32)
        .ok_or_else(|| Error::Corrupt("bad tip record".into()))?;
    let hash = BlockHash::from_byte_array(hash.try_into().expect("32 bytes, checked above"));
    Ok(Some((Height(u32::from_be_bytes(*height)), hash)))
}

/// A format that dropped or renamed a column family would make RocksDB's
/// open fail with "column families not opened": that is a format change
/// too, and must say so.
pub(crate) fn refuse_foreign_column_families(
    dir: &Path,
    db_path: &Path,
    silent_payments: bool,
) -> Result<()> {
    if let Ok(found) = DB::list_cf(&Options::default(), db_path) {
        if let Some(foreign) = found
            .iter()
            .find(|cf| cf.as_str() != "default" && !all_cfs().any(|(_, name)| name == cf.as_str()))
        {
            return Err(Error::Schema {
                path: dir.to_path_buf(),
                found: format!(
                    "of another version (its column family {foreign:?} is not this one's)"
                ),
                expected: osprey_core::to_hex(&schema_tag(silent_payments)),
            });
        }
    }
    Ok(())
}

/// Target size of an SST file past level 0.
pub(crate) const TARGET_FILE_BYTES: usize = 128 << 20;

/// The database's options (the column families have their own).
pub(crate) fn db_options(config: &StoreConfig) -> Result<Options> {
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
    // RocksDB's LOG names every flush and compaction of each of the 34
    // column families: unbounded, it grew to 20 MB on a 1M-transaction
    // chain (2% of the index), so it rolls at 4 MB.
    opts.set_max_log_file_size(4 << 20);
    opts.increase_parallelism(2);
    opts.set_target_file_size_base(config.scaled(TARGET_FILE_BYTES) as u64);
    opts.set_max_bytes_for_level_base(config.scaled(1 << 30) as u64);
    opts.set_level_compaction_dynamic_level_bytes(true);
    // The initial sync writes without the WAL (see `apply`): flushing
    // every column family together is what keeps a crash consistent,
    // since all of them then come back at the same earlier batch.
    opts.set_atomic_flush(true);
    // Counters only (bytes written, for monitoring): no histograms or
    // timers, whose clock reads would cost on every write.
    opts.enable_statistics();
    opts.set_statistics_level(rocksdb::statistics::StatsLevel::ExceptHistogramOrTimers);
    Ok(opts)
}

/// The options of one column family `name` of `family`.
fn column_family(
    family: Family,
    name: &str,
    config: &StoreConfig,
    cache: &rocksdb::Cache,
) -> ColumnFamilyDescriptor {
    ColumnFamilyDescriptor::new(name, family_options(family, config, cache, false))
}

/// The options of the SST files a bulk load's merge writes for `family`:
/// its column families' tables as their last level has them (compression,
/// filters), since RocksDB ingests them there.
pub(crate) fn sst_options(family: Family, config: &StoreConfig) -> Options {
    let cache = rocksdb::Cache::new_lru_cache(1 << 20);
    let mut o = family_options(family, config, &cache, true);
    o.set_compression_options(-14, BOTTOMMOST_ZSTD_LEVEL, 0, 0);
    o
}

/// zstd's level in the last level (see `family_options`).
const BOTTOMMOST_ZSTD_LEVEL: i32 = 3;

/// The options of `family`'s column families; `last_level`: of files
/// written for their last level only.
fn family_options(
    family: Family,
    config: &StoreConfig,
    cache: &rocksdb::Cache,
    last_level: bool,
) -> Options {
    let mut o = Options::default();
    // Memtables are most of the initial sync's memory. On chaingen
    // `medium` over Core REST, 32 MB instead of 128 MB took peak RSS
    // from ~450 to ~270 MB at the same speed and index size. A partition
    // gets its share: the family's memtables together are 32 MB, and
    // flushes (all column families at once, atomic flush) come as often.
    let partitions = family.column_families().len();
    o.set_write_buffer_size(config.scaled((32 << 20) / partitions));
    o.set_target_file_size_base(config.scaled(TARGET_FILE_BYTES) as u64);
    // RocksDB's default (256 MiB), named so that `lsm_scale` divides it.
    o.set_max_bytes_for_level_base(config.scaled(256 << 20) as u64);
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
    o.set_bottommost_compression_options(-14, BOTTOMMOST_ZSTD_LEVEL, 0, 0, true);
    let mut table = rocksdb::BlockBasedOptions::default();
    // 16 KiB blocks instead of 4 KiB: zstd sees more rows at once
    // (history 76.0 to 72.6 MB on the mainnet-profile chain), a
    // wallet's lookup still reads one block per script, and the
    // index blocks are a quarter as big: on the 10M-transaction
    // mainnet-profile chain, 4 KiB blocks made a refresh 4.3x and
    // many wallets 3.3x slower (bench, same run). Partitioned
    // filters and indexes changed neither figure there.
    table.set_block_size(16 << 10);
    table.set_block_cache(cache);
    // (`optimize_filters_for_hits` below: the txid family's last level
    // has none.)
    if !(last_level && family == Family::Txid) {
        table.set_bloom_filter(10.0, false);
    }
    // A restart point (a key stored whole, and 4 bytes to find it) every
    // 64 keys rather than 16: history and txid keys are random bytes
    // past the few a key shares with the one before, so each restart
    // costs most of a key. On the 10M-transaction mainnet-profile chain
    // that took history 0.4 and txid ~0.3 bytes per transaction; a lookup
    // scans at most 63 short keys more in a block it has read anyway.
    table.set_block_restart_interval(64);
    table.set_cache_index_and_filter_blocks(true);
    // Filters and indexes in 4 KiB partitions under a small pinned top
    // level: a lookup reads the partitions it needs, never a whole SST
    // file's filter (1.6 MB on the 10M-transaction chain, ~2 GB of them
    // on mainnet, far past the block cache). With whole filters, one
    // busy script's value (MBs, its own data block) evicted them from
    // the cache, and a wallet's lookups read and checksummed them again
    // and again: format 4's get_history took 3x format 3's.
    table.set_partition_filters(true);
    table.set_index_type(rocksdb::BlockBasedIndexType::TwoLevelIndexSearch);
    table.set_pin_top_level_index_and_filter(true);
    match family {
        Family::History => {
            // Lookups are prefix scans: prefix blooms let a scan skip
            // files that cannot hold the script at all.
            o.set_prefix_extractor(rocksdb::SliceTransform::create_fixed_prefix(
                codec::SCRIPT_BUCKET_LEN,
            ));
            table.set_whole_key_filtering(false);
            // A script's rows of one epoch are one value, appended to by
            // merge operands (`codec::Operands`): see `codec`.
            o.set_merge_operator_associative("osprey-history-4", |key, existing, operands| {
                codec::merge_history(key, existing, operands.iter())
            });
        }
        Family::Txid => {
            // A lookup reads one whole key, its txid's bucket, whose
            // transactions are one value, appended to by merge operands
            // (`codec::txid`).
            o.set_merge_operator_associative("osprey-txid-9", |_, existing, operands| {
                codec::merge_txids(existing, operands.iter())
            });
            // Its lookups are of transactions a wallet or the mempool saw
            // confirmed: they nearly always hit, and a filter answers only
            // misses. None in the last level, where nearly every row is,
            // saved 1.3 bytes per transaction (mainnet-profile chain, 10
            // bits per key, format 3). The history family keeps its
            // filters: without them the index was 1.68 bytes per transaction
            // smaller on the 10M-transaction chain, but 5,000 lookups of
            // addresses with no history took 0.20 s instead of 0.037
            // (format 7), and a first sync's peak on disk, which the runs
            // set, came to 1.157 of the smaller index on that chain at
            // `lsm_scale` 24 (format 9; issue 33 asks for 1.15).
            o.set_optimize_filters_for_hits(true);
        }
        Family::Meta | Family::Undo => {}
    }
    o.set_block_based_table_factory(&table);
    o
}

/// Writes the format tag and network of a new index (when `writer`; a
/// replica is refused an index that has none yet), or refuses an index of
/// another format (silent payments included) or network.
pub(crate) fn check_format(
    db: &DB,
    dir: &Path,
    network: &str,
    silent_payments: bool,
    writer: bool,
) -> Result<()> {
    let meta = db.cf_handle(CF_META).expect("meta cf opened");
    let tag = schema_tag(silent_payments);
    match db.get_cf(meta, META_SCHEMA)? {
        None if !writer => return Err(Error::NoIndex(dir.to_path_buf())),
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
    Ok(())
}

/// The flat files, the headers, the transaction counts and the
/// silent-payment offsets of an index being opened.
type OpenedFiles = (Files, Vec<Header>, Vec<u64>, Vec<u64>);

/// Opens the flat files, cuts them back to the committed tip (`blocks`
/// blocks), and reads the headers, transaction counts and (with silent
/// payments) the records' offsets.
fn open_files(dir: &Path, blocks: u64, silent_payments: bool) -> Result<OpenedFiles> {
    let open_flat = |name: &str, len: usize| {
        let path = dir.join(name);
        FlatFile::open(&path, len).map_err(file_err(&path))
    };
    let mut files = Files {
        headers: open_flat("headers.dat", 80)?,
        txcounts: open_flat("txcounts.dat", 8)?,
        txids: open_flat("txids.dat", 32)?,
        txsizes: open_flat("txsizes.dat", crate::TX_SIZE_LEN)?,
        sp: None,
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
    let tx_counts = read_u64s(&files.txcounts, blocks, &dir.join("txcounts.dat"))?;
    let txs = tx_counts.last().copied().unwrap_or(0);
    if files.txids.len() < txs || files.txsizes.len() < txs {
        return Err(Error::Corrupt(format!(
            "{} txids and {} tx sizes on file, {txs} expected",
            files.txids.len(),
            files.txsizes.len()
        )));
    }
    files
        .txids
        .truncate(txs)
        .map_err(file_err(&dir.join("txids.dat")))?;
    files
        .txsizes
        .truncate(txs)
        .map_err(file_err(&dir.join("txsizes.dat")))?;
    let sp_offsets = if silent_payments {
        let (sp, offsets) = open_sp_files(dir, blocks)?;
        files.sp = Some(sp);
        offsets
    } else {
        Vec::new()
    };
    if truncated {
        tracing::info!(blocks, "cut flat files back to the committed tip");
    }
    Ok((files, headers, tx_counts, sp_offsets))
}

/// Opens `spoffsets.dat` and `sptweaks.dat`, cuts them back to the
/// committed tip (`blocks` blocks, and the bytes the last one's offset
/// says), and reads the offsets. Files shorter than the tip are refused: a
/// commit writes them before the tip, so only damage makes them short.
fn open_sp_files(dir: &Path, blocks: u64) -> Result<(SpFiles, Vec<u64>)> {
    let offsets_path = dir.join("spoffsets.dat");
    let tweaks_path = dir.join("sptweaks.dat");
    let mut offsets_file = FlatFile::open(&offsets_path, 8).map_err(file_err(&offsets_path))?;
    let mut tweaks = FlatFile::open(&tweaks_path, 1).map_err(file_err(&tweaks_path))?;
    if offsets_file.len() < blocks {
        return Err(Error::Corrupt(format!(
            "tip is height {} but spoffsets.dat holds {} blocks",
            blocks.saturating_sub(1),
            offsets_file.len()
        )));
    }
    offsets_file
        .truncate(blocks)
        .map_err(file_err(&offsets_path))?;
    let offsets = read_u64s(&offsets_file, blocks, &offsets_path)?;
    if offsets.windows(2).any(|pair| pair[1] < pair[0]) {
        return Err(Error::Corrupt("spoffsets.dat does not increase".into()));
    }
    let bytes = offsets.last().copied().unwrap_or(0);
    if tweaks.len() < bytes {
        return Err(Error::Corrupt(format!(
            "sptweaks.dat holds {} bytes, {bytes} expected",
            tweaks.len()
        )));
    }
    tweaks.truncate(bytes).map_err(file_err(&tweaks_path))?;
    Ok((
        SpFiles {
            tweaks,
            offsets: offsets_file,
        },
        offsets,
    ))
}

/// The first `count` records of a file of u64 LE (`txcounts.dat`,
/// `spoffsets.dat`).
pub(crate) fn read_u64s(file: &FlatFile, count: u64, path: &Path) -> Result<Vec<u64>> {
    let mut raw = vec![0u8; count as usize * 8];
    file.read_many(0, &mut raw).map_err(file_err(path))?;
    Ok(raw
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8-byte chunk")))
        .collect())
}

/// The error of an I/O failure on `path`.
pub(crate) fn file_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::File { path, source }
}
