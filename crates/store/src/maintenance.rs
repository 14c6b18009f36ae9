//! Keeping the index in shape and measuring it: bulk loads and their
//! merge, flushes, sizes and bytes written, and the digest tests compare.

use std::sync::atomic::Ordering;

use bitcoin::consensus::serialize;
use bitcoin::hashes::Hash;
use osprey_core::{Height, TxNum};
use rocksdb::IteratorMode;

use crate::{
    CfLevels, LsmShape, Part, Result, Store, ALL_CFS, BULK_CFS, CF_HISTORY, CF_META, CF_TXID,
    CF_UNDO,
};

impl Store {
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
        // Silent-payment records: each block's bytes after its offset (an
        // index without them hashes nothing more, so its digest is the one
        // it always had).
        if self.config.silent_payments {
            let tip = self.tip().map_or(0, |(height, _)| height.0 + 1);
            for height in 0..tip {
                let records = self.sp_records(Height(height), Height(height), 0)?;
                engine.input(&records.end.to_le_bytes());
                engine.input(&records.bytes);
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

    pub(crate) fn set_auto_compaction(&self, on: bool) -> Result<()> {
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
        for (name, file) in files.named() {
            parts.push(Part {
                name,
                bytes: file.bytes(),
                records: file.len(),
            });
        }
        parts
    }

    /// Bytes of the flat files (headers, tx counts, txids, tx ends, and the
    /// silent-payment files).
    pub fn flat_files_bytes(&self) -> u64 {
        let files = self.files.read().expect("files lock poisoned");
        files.named().iter().map(|(_, file)| file.bytes()).sum()
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

    /// The LSM's shape now: files and bytes per level of each column family,
    /// write stalls, and the bytes flushes and compactions moved since the
    /// index was opened. Asked by `osprey index` when it is done, so that a
    /// benchmark sees how the index got its shape, not only its size.
    ///
    /// # Errors
    /// On database errors.
    pub fn lsm_shape(&self) -> Result<LsmShape> {
        use rocksdb::statistics::Ticker;
        let live = self.db.live_files()?;
        let column_families = ALL_CFS
            .iter()
            .map(|&name| {
                let mut levels = CfLevels {
                    name,
                    ..CfLevels::default()
                };
                for file in live.iter().filter(|f| f.column_family_name == name) {
                    let level = usize::try_from(file.level).unwrap_or(0);
                    if levels.files.len() <= level {
                        levels.files.resize(level + 1, 0);
                        levels.bytes.resize(level + 1, 0);
                    }
                    levels.files[level] += 1;
                    levels.bytes[level] += file.size as u64;
                }
                levels
            })
            .collect();
        let ticker = |t| self.options.get_ticker_count(t);
        Ok(LsmShape {
            column_families,
            stall_micros: ticker(Ticker::StallMicros),
            flush_write_bytes: ticker(Ticker::FlushWriteBytes),
            compact_read_bytes: ticker(Ticker::CompactReadBytes),
            compact_write_bytes: ticker(Ticker::CompactWriteBytes),
            bulk_handed_over_at_tx: Some(self.handed_over_at_tx.load(Ordering::SeqCst))
                .filter(|&tx| tx > 0),
        })
    }

    /// The most level-0 files any bulk-loaded column family holds.
    pub(crate) fn l0_files(&self) -> Result<u64> {
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

    pub(crate) fn flush_unlogged(&self) -> Result<()> {
        if self.unlogged.load(Ordering::SeqCst) {
            self.flush()?;
        }
        Ok(())
    }
}
