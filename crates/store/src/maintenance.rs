//! Keeping the index in shape and measuring it: bulk loads and their
//! merge, flushes, sizes and bytes written, and the digest tests compare.

use std::sync::atomic::{AtomicBool, Ordering};

use bitcoin::consensus::serialize;
use bitcoin::hashes::Hash;
use osprey_core::Height;
use rocksdb::{IteratorMode, DB};

use crate::{
    all_cfs, cf, codec, open, runs, CfLevels, Error, Family, LsmShape, Part, Result, Store,
    CF_META, META_BULK, META_TIP, PARTITIONS,
};

/// A bulk load's merge works on a partition's halves by key at once, a
/// thread each; each half reads every run of the partition.
const PARTITION_HALVES: usize = 2;

/// Feeds a row's key and value, each after its length, to a digest.
fn hash_row(engine: &mut bitcoin::hashes::sha256::HashEngine, key: &[u8], value: &[u8]) {
    use bitcoin::hashes::HashEngine;
    engine.input(&(key.len() as u32).to_le_bytes());
    engine.input(key);
    engine.input(&(value.len() as u32).to_le_bytes());
    engine.input(value);
}

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
        // A bulk load leaves out the prefixes of spends and the amounts of
        // outputs it finds spent: a script's values are compared without
        // them (`codec::comparable_values`), so that an index digests the
        // same however it was built.
        let mut script: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let hash_script =
            |script: &mut Vec<(Vec<u8>, Vec<u8>)>, engine: &mut sha256::HashEngine| -> Result<()> {
                codec::comparable_values(script)?;
                for (k, v) in script.drain(..) {
                    hash_row(engine, &k, &v);
                }
                Ok(())
            };
        for family in [Family::History, Family::Txid] {
            engine.input(family.name().as_bytes());
            // Partitions in order: the family's rows in key order.
            for &name in family.column_families() {
                for item in db.iterator_cf(cf(&db, name), IteratorMode::Start) {
                    let (k, v) = item?;
                    if family != Family::History {
                        hash_row(&mut engine, &k, &v);
                        continue;
                    }
                    // A script's values, its epochs, come one after another.
                    let id = &k[..codec::SCRIPT_ID_LEN.min(k.len())];
                    if script
                        .first()
                        .is_some_and(|(first, _)| !first.starts_with(id))
                    {
                        hash_script(&mut script, &mut engine)?;
                    }
                    script.push((k.into(), v.into()));
                }
            }
            hash_script(&mut script, &mut engine)?;
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
        let blocks = self.chain().headers.len() as u32;
        for height in (0..blocks).map(Height) {
            for (offset, len) in self.block_tx_spans(height, u32::MAX)? {
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

    /// Starts a bulk load: from here the history and txid rows gather in
    /// memory and are written out as sorted runs (see `runs`), which
    /// [`Store::end_bulk_load`] merges into RocksDB's last level at the
    /// tip. Returns whether it began: only an index whose history and txid
    /// column families are empty (a first sync) takes one, since the merge
    /// hands RocksDB files of whole values.
    ///
    /// Why: the keys are script and txid hashes, random, so every memtable
    /// flush overlaps every other. Leveled compaction rewrote each row once
    /// per level (chaingen `large`: 2.34 bytes written per index byte;
    /// mainnet's depth: 6.21, the last tenth at 0.56 of the first), and
    /// format 5's flushes left in level 0 until the tip made a quarter of a
    /// million files at mainnet's depth, on which RocksDB's every flush
    /// slowed (the last tenth at 0.29). A run is written at the same cost
    /// whatever the index holds, and the merge writes each row once more.
    /// Nothing reads those rows during a sync: wallets are answered once
    /// the index is merged, and reads in between are refused.
    ///
    /// Blocks within `reorg_depth_max` of the node's tip must not be
    /// committed during one (the indexer ends it before them): runs cannot
    /// be rolled back.
    ///
    /// The load is recorded in the index, so that one interrupted goes on
    /// after a restart (see [`Store::in_bulk_load`]). Does nothing when one
    /// is under way.
    ///
    /// # Errors
    /// On database errors.
    pub fn begin_bulk_load(&self) -> Result<bool> {
        if self.bulk.load(Ordering::SeqCst) {
            return Ok(true);
        }
        self.flush_unlogged()?;
        if self.bulk_families_hold_rows()? {
            return Ok(false);
        }
        self.write_step(0, || {
            let db = self.db()?;
            let mut opts = rocksdb::WriteOptions::default();
            opts.set_sync(true);
            db.put_cf_opt(cf(&db, CF_META), META_BULK, 0u32.to_be_bytes(), &opts)?;
            Ok(())
        })?;
        self.runs_written.store(0, Ordering::SeqCst);
        self.bulk.store(true, Ordering::SeqCst);
        Ok(true)
    }

    /// Whether any history or txid column family holds a row.
    pub(crate) fn bulk_families_hold_rows(&self) -> Result<bool> {
        let db = self.db()?;
        for (_, name) in all_cfs().filter(|(family, _)| family.bulk()) {
            if column_family_holds_rows(&db, name, &[], None)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether a bulk load is under way: begun and not merged yet, maybe by
    /// an earlier run of the process.
    pub fn in_bulk_load(&self) -> bool {
        self.bulk.load(Ordering::SeqCst)
    }

    /// Writes the rows gathered so far as the next run, then records it
    /// and the tip it reaches (synced): from here a crash comes back to
    /// this tip. `runs` is the buffer, locked by the caller so that no
    /// commit adds rows (and moves the tip) meanwhile.
    pub(crate) fn spill_run(&self, runs: &mut runs::RunBuffer) -> Result<()> {
        if runs.is_empty() {
            return Ok(());
        }
        let run = self.runs_written.load(Ordering::SeqCst);
        let buffer = std::mem::take(runs);
        let bytes = runs::write_run(&self.path.join(runs::RUNS_DIR), run, buffer)?;
        self.bulk_write_bytes.fetch_add(bytes, Ordering::SeqCst);
        self.flush_unlogged()?;
        // The flat files the commits since the last run wrote, durable
        // before the tip that covers them.
        self.files
            .write()
            .expect("files lock poisoned")
            .sync()
            .map_err(|(name, source)| Error::File {
                path: self.path.join(name),
                source,
            })?;
        let tip = self.tip();
        let db = self.db()?;
        let meta = cf(&db, CF_META);
        let mut batch = rocksdb::WriteBatch::default();
        batch.put_cf(meta, META_BULK, (run + 1).to_be_bytes());
        if let Some((height, hash)) = tip {
            let mut record = height.0.to_be_bytes().to_vec();
            record.extend_from_slice(hash.as_byte_array());
            batch.put_cf(meta, META_TIP, record);
        }
        let mut opts = rocksdb::WriteOptions::default();
        opts.set_sync(true);
        db.write_opt(batch, &opts)?;
        self.runs_written.store(run + 1, Ordering::SeqCst);
        Ok(())
    }

    /// Ends a bulk load: the rows still in memory are written as a last
    /// run, then the runs are merged one partition at a time, a half of it
    /// (a slice) after the other, history then txid rows, each into SST
    /// files that RocksDB ingests as the partition's last level, after
    /// which that slice's runs are deleted. Returns when done, or when
    /// `stop` is set between two partitions: then `Ok(false)`, and the
    /// load is still under way (the slices merged stay merged). Does
    /// nothing outside a bulk load.
    ///
    /// Why by slice: the runs' files of one slice hold only its keys
    /// ([`runs::SLICES`], two per partition and its column families), so
    /// the index is on disk twice for 1/32 of it at most. A slice whose
    /// keys a column family holds was ingested there before a crash (each
    /// ingestion is atomic, and the families were empty when the load
    /// began), and a slice with a run file gone was merged and its
    /// deletion cut short: its runs only go.
    ///
    /// # Errors
    /// On I/O or database errors, or a damaged run.
    pub fn end_bulk_load(&self, stop: &AtomicBool) -> Result<bool> {
        if !self.bulk.load(Ordering::SeqCst) {
            return Ok(true);
        }
        self.write_step(0, || {
            let mut runs = self.runs.lock().expect("runs lock poisoned");
            self.spill_run(&mut runs)
        })?;
        let runs = self.runs_written.load(Ordering::SeqCst);
        self.runs_merged.store(u64::from(runs), Ordering::SeqCst);
        let started = std::time::Instant::now();
        // One partition at a time, its two halves on two threads
        // (`merge_partition` says why).
        runs::allow_open_files(u64::from(runs) * PARTITION_HALVES as u64)?;
        for partition in 0..PARTITIONS {
            if stop.load(Ordering::SeqCst) {
                self.merging.store(0, Ordering::SeqCst);
                return Ok(false);
            }
            let merging = std::time::Instant::now();
            self.merging.store(partition + 1, Ordering::SeqCst);
            self.merge_partition(partition, runs)?;
            tracing::info!(
                partition = partition + 1,
                of = PARTITIONS,
                runs,
                seconds = format!("{:.1}", merging.elapsed().as_secs_f64()),
                "bulk load: partition merged"
            );
        }
        self.write_step(0, || {
            let db = self.db()?;
            let mut opts = rocksdb::WriteOptions::default();
            opts.set_sync(true);
            db.delete_cf_opt(cf(&db, CF_META), META_BULK, &opts)?;
            Ok(())
        })?;
        runs::clear(&self.path, None)?;
        self.bulk.store(false, Ordering::SeqCst);
        self.merging.store(0, Ordering::SeqCst);
        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.merge_micros.store(micros.max(1), Ordering::SeqCst);
        let height = self.tip().map_or(0, |(height, _)| height.0);
        // Stored plus one: 0 is "no merge ended".
        self.merged_at_height
            .store(u64::from(height) + 1, Ordering::SeqCst);
        Ok(true)
    }

    /// Merges the runs of one partition into SST files of whole values, a
    /// slice after the other and in each history then txid rows, hands
    /// them to RocksDB (moved, not copied) as the column families' last
    /// level, and deletes the slice's runs.
    ///
    /// A slice's two halves by key are merged at once, each on a thread
    /// of its own (reading and decompressing the runs, merging,
    /// compressing the SST files), and ingested together. One slice at a
    /// time: until it is ingested and its runs deleted, its merged files
    /// sit on disk beside its runs, so two in flight doubled that overlap
    /// (the 50M chain's peak at `lsm_scale` 24 was 1.155 times the final
    /// index with two partitions in flight; issue 33 asks for 1.15).
    pub(crate) fn merge_partition(&self, partition: usize, runs: u32) -> Result<()> {
        let per_partition = runs::SLICES / PARTITIONS;
        let dir = self.path.join(runs::RUNS_DIR);
        for slice in partition * per_partition..(partition + 1) * per_partition {
            let paths: Vec<_> = (0..runs)
                .map(|run| runs::run_path(&dir, run, slice))
                .collect();
            // Run files go only once their slice is ingested (or found to
            // hold no rows): one of them missing is a deletion that a crash
            // interrupted.
            if paths.iter().all(|path| path.exists()) {
                for family in [Family::History, Family::Txid] {
                    self.write_step(0, || {
                        self.merge_slice(family, partition, slice, &dir, &paths)
                    })?;
                }
            }
            self.write_step(0, || runs::remove_files(&paths))?;
        }
        Ok(())
    }

    /// Merges the runs `paths` (in `dir`) of `slice` of `family`'s
    /// `partition` and ingests them, unless its column family holds its keys already (see
    /// [`Store::merge_partition`]).
    fn merge_slice(
        &self,
        family: Family,
        partition: usize,
        slice: usize,
        dir: &std::path::Path,
        paths: &[std::path::PathBuf],
    ) -> Result<()> {
        let name = family.column_families()[partition];
        let (start, end) = runs::slice_bounds(slice);
        let ingested = column_family_holds_rows(&*self.db()?, name, &start, end.as_ref())?;
        if !ingested && !paths.is_empty() {
            // A slice's keys share the top 5 bits of their first byte;
            // the next bit halves it.
            let middle = [start[0] | 1 << (7 - runs::SLICE_BITS)];
            let halves: [runs::KeyRange; PARTITION_HALVES] = [
                runs::KeyRange {
                    start: None,
                    end: Some(&middle),
                },
                runs::KeyRange {
                    start: Some(&middle),
                    end: None,
                },
            ];
            let outputs = std::thread::scope(|scope| {
                let merges: Vec<_> = halves
                    .iter()
                    .enumerate()
                    .map(|(half, &range)| {
                        scope.spawn(move || {
                            self.write_merged_files(
                                family,
                                paths,
                                range,
                                dir,
                                &format!("{name}.{slice}.{half}"),
                            )
                        })
                    })
                    .collect();
                // A full disk is the error to report: the one a caller
                // waits out.
                let mut outputs = Vec::new();
                let mut failed: Option<Error> = None;
                for merge in merges {
                    match merge.join().expect("a merge does not panic") {
                        Ok(files) => outputs.extend(files),
                        Err(e) => {
                            if failed.as_ref().is_none_or(|f| !f.is_no_space()) {
                                failed = Some(e);
                            }
                        }
                    }
                }
                failed.map_or(Ok(outputs), Err)
            })?;
            for path in &outputs {
                let bytes = std::fs::metadata(path).map_err(open::file_err(path))?.len();
                self.bulk_write_bytes.fetch_add(bytes, Ordering::SeqCst);
            }
            if !outputs.is_empty() {
                let db = self.db()?;
                let mut opts = rocksdb::IngestExternalFileOptions::default();
                opts.set_move_files(true);
                db.ingest_external_file_cf_opts(cf(&db, name), &opts, outputs)?;
            }
        }
        Ok(())
    }

    /// Merges the keys in `range` of the run files `paths` into SST files
    /// of `family`'s last level, `ingest.NAME.N.sst` in `dir`, each closed
    /// at the scaled target file size. Returns their paths in key order.
    pub(crate) fn write_merged_files(
        &self,
        family: Family,
        paths: &[std::path::PathBuf],
        range: runs::KeyRange<'_>,
        dir: &std::path::Path,
        name: &str,
    ) -> Result<Vec<std::path::PathBuf>> {
        let options = open::sst_options(family, &self.config);
        let target = self.config.scaled(open::TARGET_FILE_BYTES) as u64;
        let mut outputs: Vec<std::path::PathBuf> = Vec::new();
        let mut writer: Option<rocksdb::SstFileWriter> = None;
        runs::merge_runs(paths, family, range, |key, value| {
            if writer.as_ref().is_some_and(|w| w.file_size() >= target) {
                writer.take().expect("checked above").finish()?;
            }
            let w = match &mut writer {
                Some(w) => w,
                None => {
                    let path = dir.join(format!("ingest.{}.{}.sst", name, outputs.len()));
                    let w = rocksdb::SstFileWriter::create(&options);
                    w.open(&path)?;
                    outputs.push(path);
                    writer.insert(w)
                }
            };
            w.put(key, value)?;
            Ok(())
        })?;
        if let Some(mut w) = writer.take() {
            w.finish()?;
        }
        Ok(outputs)
    }

    /// The partition a bulk load's merge is merging now (1 for the first)
    /// and how many there are; `None` when no merge runs.
    pub fn merging(&self) -> Option<(usize, usize)> {
        match self.merging.load(Ordering::SeqCst) {
            0 => None,
            partition => Some((partition, PARTITIONS)),
        }
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

    /// Bytes the database has written since the index was opened: memtable
    /// flushes, compactions and the write-ahead log, and a bulk load's runs
    /// and the files its merge handed to RocksDB.
    pub fn rocksdb_written_bytes(&self) -> u64 {
        use rocksdb::statistics::Ticker;
        [
            Ticker::FlushWriteBytes,
            Ticker::CompactWriteBytes,
            Ticker::WalFileBytes,
        ]
        .into_iter()
        .map(|ticker| self.options.get_ticker_count(ticker))
        .sum::<u64>()
            + self.bulk_write_bytes.load(Ordering::SeqCst)
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
            bulk_runs_merged: Some(self.runs_merged.load(Ordering::SeqCst))
                .filter(|&runs| runs > 0),
            bulk_merge_micros: Some(self.merge_micros.load(Ordering::SeqCst))
                .filter(|&micros| micros > 0),
            bulk_merged_at_height: self
                .merged_at_height
                .load(Ordering::SeqCst)
                .checked_sub(1)
                .map(|height| height as u32),
            bulk_write_bytes: self.bulk_write_bytes.load(Ordering::SeqCst),
        })
    }

    /// Flushes memtables (every column family at once), so that what was
    /// written without the WAL is on disk and the on-disk size reflects the
    /// whole index; during a bulk load, the rows gathered so far are
    /// written as a run first.
    ///
    /// # Errors
    /// On database errors.
    pub fn flush(&self) -> Result<()> {
        if self.bulk.load(Ordering::SeqCst) {
            self.write_step(0, || {
                let mut runs = self.runs.lock().expect("runs lock poisoned");
                self.spill_run(&mut runs)
            })?;
        }
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

/// Whether the column family `name` of `db` holds a row from key `start`,
/// and before a key starting with `end`, if any.
fn column_family_holds_rows(
    db: &DB,
    name: &str,
    start: &[u8],
    end: Option<&[u8; 1]>,
) -> Result<bool> {
    let mut read = rocksdb::ReadOptions::default();
    read.set_total_order_seek(true);
    let mut rows = db.raw_iterator_cf_opt(cf(db, name), read);
    rows.seek(start);
    rows.status()?;
    Ok(rows
        .key()
        .is_some_and(|key| end.is_none_or(|end| key < &end[..])))
}
