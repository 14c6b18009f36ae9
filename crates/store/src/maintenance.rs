//! Keeping the index in shape and measuring it: bulk loads and their
//! merge, flushes, sizes and bytes written, and the digest tests compare.

use std::sync::atomic::{AtomicBool, Ordering};

use bitcoin::consensus::serialize;
use bitcoin::hashes::Hash;
use osprey_core::{Height, TxNum};
use rocksdb::{IteratorMode, DB};

use crate::{
    all_cfs, bulk_cfs_of, cf, CfLevels, Family, LsmShape, Part, Result, Store, CF_META, META_BULK,
    PARTITIONS,
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
        let db = self.db()?;
        for family in [Family::History, Family::Txid] {
            engine.input(family.name().as_bytes());
            // Partitions in order: the family's rows in key order.
            for &name in family.column_families() {
                for item in db.iterator_cf(cf(&db, name), IteratorMode::Start) {
                    let (k, v) = item?;
                    engine.input(&(k.len() as u32).to_le_bytes());
                    engine.input(&k);
                    engine.input(&(v.len() as u32).to_le_bytes());
                    engine.input(&v);
                }
            }
        }
        drop(db);
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
    /// compacting until [`Store::end_bulk_load`] merges them, or until one
    /// partition holds `bulk_l0_files_max` level-0 files.
    ///
    /// Why: their keys are script and txid hashes, random, so every memtable
    /// flush overlaps the whole key range and leveled compaction rewrites
    /// each row once per level it passes. On chaingen `large` that was 2.34
    /// bytes written per byte of index, and the ingest rate fell as levels
    /// were added; at mainnet's depth (the 50M chain handing over at 5%)
    /// 6.21, and the last tenths at 0.56-0.67 of the first. Left in level
    /// 0, rows are written once by the flush and once more by the merge
    /// (RocksDB's own advice for bulk loading), at the same rate whatever
    /// the index holds. Nothing reads those rows during a sync (wallets are
    /// answered once the index is merged at the tip), and level-0 lookups
    /// stay correct, only slower.
    ///
    /// The load is recorded in the index, so that one interrupted goes on
    /// after a restart (see [`Store::in_bulk_load`]). Does nothing when one
    /// is under way.
    ///
    /// # Errors
    /// On database errors.
    pub fn begin_bulk_load(&self) -> Result<()> {
        if self.bulk.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.flush_unlogged()?;
        self.write_step(0, || {
            let db = self.db()?;
            let mut opts = rocksdb::WriteOptions::default();
            opts.set_sync(true);
            db.put_cf_opt(cf(&db, CF_META), META_BULK, [], &opts)?;
            drop(db);
            self.set_auto_compaction(false)
        })?;
        self.bulk.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Whether a bulk load is under way: begun and not merged yet, maybe by
    /// an earlier run of the process.
    pub fn in_bulk_load(&self) -> bool {
        self.bulk.load(Ordering::SeqCst)
    }

    /// Ends a bulk load: the memtables are flushed, so that the merge takes
    /// every row (one left behind would make a later compaction rewrite the
    /// merged level), then the level-0 files are merged into the last
    /// level one partition at a time, for both column families, before
    /// compaction resumes as usual. Returns when done, or when `stop` is
    /// set between two partitions: then `Ok(false)`, and the load is still
    /// under way (the partitions merged stay merged). Does nothing outside
    /// a bulk load.
    ///
    /// Why by partition: the files of one partition hold only its keys
    /// ([`PARTITIONS`], a column family each), so merging it reads and writes 1/16 of
    /// the index and deletes its input before the next begins. One merge
    /// of everything held the whole input and the whole output at once:
    /// the database peaked at 1.69x its final size (50M chain).
    ///
    /// # Errors
    /// On database errors.
    pub fn end_bulk_load(&self, stop: &AtomicBool) -> Result<bool> {
        if !self.bulk.load(Ordering::SeqCst) {
            return Ok(true);
        }
        self.flush()?;
        let l0_files: u64 = all_cfs()
            .filter(|(family, _)| family.bulk())
            .map(|(_, name)| self.property(name, &rocksdb::properties::num_files_at_level(0)))
            .sum();
        self.merged_l0_files.store(l0_files, Ordering::SeqCst);
        for partition in 0..PARTITIONS {
            if stop.load(Ordering::SeqCst) {
                self.merging.store(0, Ordering::SeqCst);
                return Ok(false);
            }
            let merging = std::time::Instant::now();
            self.merging.store(partition + 1, Ordering::SeqCst);
            self.write_step(0, || self.compact_partition(partition))?;
            tracing::info!(
                partition = partition + 1,
                of = PARTITIONS,
                seconds = format!("{:.1}", merging.elapsed().as_secs_f64()),
                "bulk load: partition merged"
            );
        }
        self.close_bulk_load()?;
        self.merging.store(0, Ordering::SeqCst);
        Ok(true)
    }

    /// The end every bulk load shares, merged or handed over: its record
    /// goes (synced) and compaction resumes.
    fn close_bulk_load(&self) -> Result<()> {
        self.write_step(0, || {
            let db = self.db()?;
            let mut opts = rocksdb::WriteOptions::default();
            opts.set_sync(true);
            db.delete_cf_opt(cf(&db, CF_META), META_BULK, &opts)?;
            drop(db);
            self.set_auto_compaction(true)
        })?;
        self.bulk.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// The partition a bulk load's merge is merging now (1 for the first)
    /// and how many there are; `None` when no merge runs.
    pub fn merging(&self) -> Option<(usize, usize)> {
        match self.merging.load(Ordering::SeqCst) {
            0 => None,
            partition => Some((partition, PARTITIONS)),
        }
    }

    /// Hands a bulk load over to normal compaction without merging it by
    /// partition: what a load does once a partition holds
    /// `bulk_l0_files_max` level-0 files.
    pub(crate) fn hand_over_bulk_load(&self) -> Result<()> {
        if self.bulk.load(Ordering::SeqCst) {
            self.flush()?;
            self.close_bulk_load()?;
        }
        Ok(())
    }

    pub(crate) fn set_auto_compaction(&self, on: bool) -> Result<()> {
        let value = if on { "false" } else { "true" };
        let db = self.db()?;
        for (_, name) in all_cfs().filter(|(family, _)| family.bulk()) {
            db.set_options_cf(cf(&db, name), &[("disable_auto_compactions", value)])?;
        }
        Ok(())
    }

    /// An integer property of the column family `name`, 0 when unknown
    /// or while the database is closed (a failed reopen).
    fn property(&self, name: &str, property: &std::ffi::CStr) -> u64 {
        let Ok(db) = self.db() else {
            return 0;
        };
        db.property_int_value_cf(cf(&db, name), property)
            .ok()
            .flatten()
            .unwrap_or(0)
    }

    /// Bytes of the live SST files of every column family: the RocksDB
    /// part of the index on disk (memtables not flushed yet excluded).
    pub fn rocksdb_live_sst_bytes(&self) -> u64 {
        all_cfs()
            .map(|(_, name)| self.property(name, rocksdb::properties::LIVE_SST_FILES_SIZE))
            .sum()
    }

    /// Where the index's bytes go: each column family's live SST files
    /// (a family's partitions together) and each flat file, with its
    /// records. Asked by `osprey index` when it is done, so that a node
    /// runner (and a size benchmark) sees which part of the index grows
    /// with what. Memtables not yet flushed are not counted; RocksDB's key
    /// count is an estimate, exact after a full compaction.
    pub fn footprint(&self) -> Vec<Part> {
        let mut parts: Vec<Part> = Family::ALL
            .iter()
            .map(|family| {
                let sum = |p: &std::ffi::CStr| {
                    family
                        .column_families()
                        .iter()
                        .map(|name| self.property(name, p))
                        .sum()
                };
                Part {
                    name: family.name(),
                    bytes: sum(rocksdb::properties::LIVE_SST_FILES_SIZE),
                    records: sum(rocksdb::properties::ESTIMATE_NUM_KEYS),
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
        let live = self.db()?.live_files()?;
        let column_families = Family::ALL
            .iter()
            .map(|family| {
                let mut levels = CfLevels {
                    name: family.name(),
                    ..CfLevels::default()
                };
                let ours = |f: &&rocksdb::LiveFile| {
                    family
                        .column_families()
                        .contains(&f.column_family_name.as_str())
                };
                for file in live.iter().filter(ours) {
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
            bulk_merged_l0_files: Some(self.merged_l0_files.load(Ordering::SeqCst))
                .filter(|&files| files > 0),
        })
    }

    /// The most level-0 files any partition of the history and txid
    /// families holds.
    #[cfg(test)]
    pub(crate) fn l0_files(&self) -> Result<u64> {
        Self::l0_files_in(&*self.db()?)
    }

    /// The most level-0 files any partition of the history and txid
    /// families of `db` holds.
    pub(crate) fn l0_files_in(db: &DB) -> Result<u64> {
        let mut most = 0;
        for (_, name) in all_cfs().filter(|(family, _)| family.bulk()) {
            let files = db
                .property_int_value_cf(cf(db, name), rocksdb::properties::num_files_at_level(0))?
                .unwrap_or(0);
            most = most.max(files);
        }
        Ok(most)
    }

    /// Merges one partition of the history and txid families down to
    /// their last level.
    fn compact_partition(&self, partition: usize) -> Result<()> {
        let db = self.db()?;
        for name in bulk_cfs_of(partition) {
            db.compact_range_cf(cf(&db, name), None::<&[u8]>, None::<&[u8]>);
        }
        Ok(())
    }

    /// Flushes and merges the history and txid column families down to
    /// their last level, returning when done: what `osprey index` leaves,
    /// so that its size and bytes written are those of a finished index.
    /// By partition, as a bulk load's merge: one at a time is on disk
    /// twice.
    ///
    /// # Errors
    /// On database errors.
    pub fn compact(&self) -> Result<()> {
        self.flush()?;
        for partition in 0..PARTITIONS {
            self.write_step(0, || self.compact_partition(partition))?;
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
        self.write_step(0, || {
            let db = self.db()?;
            let cfs: Vec<_> = all_cfs().map(|(_, name)| cf(&db, name)).collect();
            db.flush_cfs_opt(&cfs, &rocksdb::FlushOptions::default())?;
            self.unlogged.store(false, Ordering::SeqCst);
            Ok(())
        })
    }

    pub(crate) fn flush_unlogged(&self) -> Result<()> {
        if self.unlogged.load(Ordering::SeqCst) {
            self.flush()?;
        }
        Ok(())
    }
}
