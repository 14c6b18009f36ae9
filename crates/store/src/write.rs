//! The write path: blocks encoded into one batch (`prepare`), committed
//! after the flat files (`commit`), and undone on a reorg (`rollback_to`).

use std::sync::atomic::Ordering;

use bitcoin::consensus::serialize;
use bitcoin::hashes::Hash;
use osprey_core::{Height, TxNum};
use rayon::slice::ParallelSliceMut;
use rocksdb::{WriteBatch, WriteOptions};

use crate::codec;
use crate::{
    cf, history_cf, partition_of, txid_cf, Error, IndexedBlock, PreparedBatch, Result, Store,
    CF_META, CF_UNDO, META_TIP,
};

impl Store {
    /// Commits blocks on top of the tip in one atomic write:
    /// [`Store::prepare`] then [`Store::commit`].
    ///
    /// # Errors
    /// See [`Store::commit`].
    pub fn apply(&self, blocks: &[IndexedBlock], sync: bool, source_tip: Height) -> Result<()> {
        self.commit(self.prepare(blocks, source_tip)?, sync)
    }

    /// Gathers blocks for [`Store::commit`]: their rows and txid keys in
    /// one array each, sorted (outside a bulk load), and their undo
    /// records. This reads nothing of the index, so the indexer runs it off
    /// the committing thread, while the previous batch is written; the sort
    /// runs on all cores.
    ///
    /// `source_tip` is the source's best height: blocks more than
    /// `reorg_depth_max` below it get no undo record, since no reorg the
    /// index can undo reaches that deep (during an initial sync that is
    /// nearly every block).
    ///
    /// # Errors
    /// When a block's transaction ends or silent-payment records do not
    /// fit the index.
    pub fn prepare(&self, blocks: &[IndexedBlock], source_tip: Height) -> Result<PreparedBatch> {
        let mut undo = Vec::new();
        let undo_from = source_tip.0.saturating_sub(self.config.reorg_depth_max);
        let rows: usize = blocks.iter().map(|b| b.rows.len()).sum();
        let mut history = Vec::with_capacity(rows);
        let txs = blocks.iter().map(|b| b.txids.len()).sum();
        let mut txid_keys = Vec::with_capacity(txs);
        let mut tx_sizes = Vec::with_capacity(txs);
        for block in blocks {
            tx_sizes.extend(tx_sizes_of(block)?);
            if !self.config.silent_payments && !block.sp.is_empty() {
                return Err(Error::Corrupt(format!(
                    "block {} comes with silent-payment records, which this index does not keep",
                    block.height
                )));
            }
            history.extend_from_slice(&block.rows);
            // The undo record: the distinct script buckets the block wrote
            // rows under (rollback finds the rows from them).
            if block.height.0 >= undo_from {
                undo.push((block.height, codec::undo_record(block.rows.iter())));
            }
            for (i, txid) in block.txids.iter().enumerate() {
                txid_keys.push(codec::txid_key_bits(
                    txid,
                    TxNum(block.first_tx_num.0 + i as u64),
                ));
            }
        }
        // A bulk load's rows are sorted once, in their run (`write_run`),
        // which pairs spends and outputs by the spent txids.
        let mut spent_txids = Vec::new();
        if self.in_bulk_load() {
            for block in blocks {
                spent_txids.extend(block.spent_txids.iter().map(|t| t.to_byte_array()));
            }
        } else {
            sort_batch(&mut history, &mut txid_keys);
        }
        Ok(PreparedBatch {
            blocks: blocks
                .iter()
                .map(|b| (b.height, b.header, b.first_tx_num, b.txids.len() as u64))
                .collect(),
            txids: blocks
                .iter()
                .flat_map(|b| b.txids.iter().map(|t| t.to_byte_array()))
                .collect(),
            tx_sizes,
            sp_records: blocks.iter().flat_map(|b| b.sp.iter().copied()).collect(),
            sp_block_bytes: blocks.iter().map(|b| b.sp.len() as u64).collect(),
            history,
            txid_keys,
            spent_txids,
            undo,
        })
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
    /// On I/O or database errors ([`Error::NoSpace`] when the disk is
    /// full); the committed tip is then unchanged, and writes stay stopped
    /// until [`Store::resume_writes`].
    ///
    /// # Panics
    /// When the batch does not extend the tip (a bug in the caller).
    pub fn commit(&self, prepared: PreparedBatch, sync: bool) -> Result<()> {
        if self.is_replica() {
            return Err(Error::ReadOnly);
        }
        let bytes = prepared.bytes();
        self.write_step(bytes, || self.commit_unchecked(prepared, sync))
    }

    fn commit_unchecked(&self, prepared: PreparedBatch, sync: bool) -> Result<()> {
        let PreparedBatch {
            blocks,
            txids,
            tx_sizes,
            sp_records,
            sp_block_bytes,
            mut history,
            mut txid_keys,
            spent_txids,
            undo: undo_records,
        } = prepared;
        let Some(&(last_height, last_header, _, _)) = blocks.last() else {
            return Ok(());
        };
        let bulk = self.bulk.load(Ordering::SeqCst);
        if bulk && !undo_records.is_empty() {
            return Err(Error::Corrupt(format!(
                "block {} is near the node's tip, where a bulk load must have ended",
                undo_records[0].0
            )));
        }
        let (mut next_height, mut tx_count, mut sp_offset) = {
            let chain = self.chain();
            (
                chain.headers.len() as u32,
                chain.tx_counts.last().copied().unwrap_or(0),
                chain.sp_offsets.last().copied().unwrap_or(0),
            )
        };
        // Before the database is held: the flush takes it too.
        if sync {
            self.flush_unlogged()?;
        }
        // Sizes past what two bytes hold go to `meta`, under their
        // tx_num; in a bulk load at once (with the WAL, which the synced
        // write that moves the tip makes durable), otherwise with the
        // batch.
        let first_tx_num = tx_count;
        let large_sizes: Vec<(u64, u32)> = (first_tx_num..)
            .zip(&tx_sizes)
            .filter(|&(_, &size)| size >= crate::TX_SIZE_ESCAPE)
            .map(|(tx_num, &size)| (tx_num, size))
            .collect();
        if bulk && !large_sizes.is_empty() {
            let db = self.db()?;
            let meta = cf(&db, CF_META);
            let mut batch = WriteBatch::default();
            for &(tx_num, size) in &large_sizes {
                batch.put_cf(meta, crate::tx_size_key(tx_num), size.to_le_bytes());
            }
            db.write(batch)?;
        }
        let mut new_counts = Vec::with_capacity(blocks.len());
        let mut new_sp_offsets = Vec::new();
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
            for &size in &tx_sizes {
                let record = size.min(crate::TX_SIZE_ESCAPE) as u16;
                files.txsizes.append(&record.to_le_bytes());
            }
            if let Some(sp) = &mut files.sp {
                sp.tweaks.append(&sp_records);
                for bytes in &sp_block_bytes {
                    sp_offset += bytes;
                    sp.offsets.append(&sp_offset.to_le_bytes());
                    new_sp_offsets.push(sp_offset);
                }
            }
            files.flush().map_err(|(name, source)| Error::File {
                path: self.path.join(name),
                source,
            })?;
        }
        // The flat files must be durable before the tip that covers them.
        // Synced under the read lock: readers, which never read past the
        // chain in memory (extended below, after the tip is written), go
        // on meanwhile instead of waiting for the disk. (This is the only
        // writer.) In a bulk load the tip on disk moves only with a run,
        // which syncs them (`spill_run`): a sync per batch there cost
        // seconds of a 1M-transaction sync on a busy disk.
        if !bulk {
            let files = self.files.read().expect("files lock poisoned");
            files.sync_written().map_err(|(name, source)| Error::File {
                path: self.path.join(name),
                source,
            })?;
        }
        let extend_chain = |chain: &mut crate::Chain| {
            for (&(_, header, _, _), &count) in blocks.iter().zip(&new_counts) {
                chain.headers.push(header);
                chain.hashes.push(header.block_hash());
                chain.tx_counts.push(count);
            }
            chain.sp_offsets.extend(&new_sp_offsets);
        };
        if bulk {
            // The rows wait in memory for their run; the tip on disk moves
            // when they are written out (`spill_run`), so a crash comes
            // back to the last run and the flat files are cut back to it.
            // A synced commit (the indexer's last before a stop) writes
            // its run at once: a clean stop loses nothing.
            let mut runs = self.runs.lock().expect("runs lock poisoned");
            let first_tx_num = blocks[0].2 .0;
            runs.push(&history, &txid_keys, &txids, first_tx_num, &spent_txids);
            extend_chain(&mut self.chain.write().expect("chain lock poisoned"));
            let run_bytes = self.config.scaled(self.config.bulk_run_bytes);
            if sync || runs.bytes() >= run_bytes || runs.map_bytes() >= run_bytes / 2 {
                self.spill_run(&mut runs)?;
            }
            return Ok(());
        }

        // Prepared during a bulk load, whose end came since: not sorted yet.
        if !(history.is_sorted() && txid_keys.is_sorted()) {
            sort_batch(&mut history, &mut txid_keys);
        }
        let db = self.db()?;
        let undo = cf(&db, CF_UNDO);
        let meta = cf(&db, CF_META);
        // Sized up front: a growing batch doubles and copies its buffer,
        // which showed as memmove in profiles of the initial sync. ~8 bytes
        // of framing per entry.
        let batch_bytes: usize = history.len() * crate::HISTORY_ROW_BYTES
            + txid_keys.len() * (codec::TXID_BUCKET_KEY_LEN + 8)
            + undo_records
                .iter()
                .map(|(_, r)| r.len() + 12)
                .sum::<usize>();
        let mut batch = WriteBatch::with_capacity_bytes(batch_bytes + 256);
        for &(tx_num, size) in &large_sizes {
            batch.put_cf(meta, crate::tx_size_key(tx_num), size.to_le_bytes());
        }
        for (height, record) in &undo_records {
            batch.put_cf(undo, height.0.to_be_bytes(), record);
        }
        let mut operands = codec::Operands::new(&history);
        while let Some((key, operand)) = operands.next_operand() {
            batch.merge_cf(history_cf(&db, key), key, operand);
        }
        // One merge operand per txid bucket, its transactions in chain
        // order (`codec::merge_txids` appends them).
        let mut buckets = codec::BucketValues::new();
        let mut merge = |key: &[u8], operand: &[u8]| -> Result<()> {
            batch.merge_cf(txid_cf(&db, key), key, operand);
            Ok(())
        };
        for &bits in &txid_keys {
            let (prefix, tx_num) = codec::txid_of_bits(bits);
            buckets.push(&prefix, tx_num.0, &mut merge)?;
        }
        buckets.finish(&mut merge)?;
        let mut tip = last_height.0.to_be_bytes().to_vec();
        tip.extend_from_slice(last_header.block_hash().as_byte_array());
        batch.put_cf(meta, META_TIP, tip);
        if let Some(prune_below) = last_height.0.checked_sub(self.config.reorg_depth_max) {
            batch.delete_range_cf(undo, 0u32.to_be_bytes(), prune_below.to_be_bytes());
        }
        let mut opts = WriteOptions::default();
        if sync {
            opts.set_sync(true);
        } else {
            opts.disable_wal(true);
            self.unlogged.store(true, Ordering::SeqCst);
        }
        db.write_opt(batch, &opts)?;
        drop(db);
        extend_chain(&mut self.chain.write().expect("chain lock poisoned"));
        Ok(())
    }

    /// Undoes every block above `height`, leaving the index exactly as if
    /// they had never been applied.
    ///
    /// # Errors
    /// When a block's undo data was pruned, or on I/O or database errors
    /// (after which writes stay stopped until [`Store::resume_writes`]).
    pub fn rollback_to(&self, height: Height) -> Result<()> {
        if self.is_replica() {
            return Err(Error::ReadOnly);
        }
        self.write_step(0, || self.rollback_unchecked(height))
    }

    fn rollback_unchecked(&self, height: Height) -> Result<()> {
        let (tip, first_removed_tx, sp_bytes_kept) = {
            let chain = self.chain();
            let Some(tip) = chain.headers.len().checked_sub(1) else {
                return Ok(());
            };
            if height.as_usize() >= tip {
                return Ok(());
            }
            (
                tip as u32,
                chain.tx_counts[height.as_usize()],
                chain.sp_offsets.get(height.as_usize()).copied(),
            )
        };
        let total = self.tx_count();
        self.flush_unlogged()?;
        let db = self.db()?;
        let undo = cf(&db, CF_UNDO);
        let meta = cf(&db, CF_META);
        // Every row of the undone blocks has a tx_num of at least
        // `first_removed_tx` and belongs to a script in a bucket their undo
        // records name: for each script of those buckets, the value of the
        // epoch holding that tx_num is cut before it, and every later
        // epoch's deleted.
        let mut buckets: Vec<Vec<u8>> = Vec::new();
        let mut batch = WriteBatch::default();
        for h in height.0 + 1..=tip {
            let record = db
                .get_cf(undo, h.to_be_bytes())?
                .ok_or(Error::UndoPruned { height: Height(h) })?;
            buckets.extend(codec::undo_buckets(&record)?);
            batch.delete_cf(undo, h.to_be_bytes());
        }
        buckets.sort_unstable();
        buckets.dedup();
        let first_removed = TxNum(first_removed_tx);
        // One iterator per partition, in total order: an undo bucket is
        // shorter than the bloom prefix, so a scan crosses bloom prefixes.
        // Buckets are sorted, so partitions come in order.
        for partition_buckets in buckets.chunk_by(|a, b| partition_of(a) == partition_of(b)) {
            let history = history_cf(&db, &partition_buckets[0]);
            let mut read = rocksdb::ReadOptions::default();
            read.set_total_order_seek(true);
            let mut rows = db.raw_iterator_cf_opt(history, read);
            for bucket in partition_buckets {
                rows.seek(bucket);
                while let Some(script_id) = rows
                    .key()
                    .filter(|key| key.starts_with(bucket) && key.len() >= codec::SCRIPT_ID_LEN)
                    .map(|key| key[..codec::SCRIPT_ID_LEN].to_vec())
                {
                    rows.seek(codec::history_key(&script_id, first_removed));
                    while let Some((key, value)) =
                        rows.item().filter(|(key, _)| key.starts_with(&script_id))
                    {
                        match codec::truncate_history_value(key, value, first_removed)? {
                            Some(kept) if kept.len() < value.len() => {
                                batch.put_cf(history, key, kept)
                            }
                            Some(_) => {}
                            None => batch.delete_cf(history, key),
                        }
                        rows.next();
                    }
                }
            }
            rows.status()?;
        }
        batch.delete_range_cf(
            meta,
            crate::tx_size_key(first_removed_tx),
            crate::tx_size_key(u64::MAX),
        );
        // The undone transactions' buckets, each cut before them.
        let mut txid_buckets: Vec<_> = self
            .txids(first_removed_tx..total)?
            .iter()
            .map(|txid| codec::txid_bucket_key(codec::txid_prefix(txid)))
            .collect();
        txid_buckets.sort_unstable();
        txid_buckets.dedup();
        for key in txid_buckets {
            let cf = txid_cf(&db, &key);
            let Some(value) = db.get_pinned_cf(cf, key)? else {
                continue;
            };
            match codec::truncate_txid_value(&key, &value, first_removed)? {
                Some(kept) if kept.len() < value.len() => batch.put_cf(cf, key, kept),
                Some(_) => {}
                None => batch.delete_cf(cf, key),
            }
        }
        let mut tip_record = height.0.to_be_bytes().to_vec();
        tip_record.extend_from_slice(
            self.block_hash(height)
                .expect("height is below the tip")
                .as_byte_array(),
        );
        batch.put_cf(meta, META_TIP, tip_record);
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        db.write_opt(batch, &opts)?;
        drop(db);

        // The new tip is committed: first the in-memory chain follows it,
        // so that no reader sizes a read by blocks about to be cut from the
        // files (a silent-payment scan reads under the chain's lock, see
        // `Store::sp_records`), then the files are cut back to it. A crash
        // before the cut is repaired by `open` in the same way.
        let blocks = u64::from(height.0) + 1;
        {
            let mut chain = self.chain.write().expect("chain lock poisoned");
            chain.headers.truncate(blocks as usize);
            chain.hashes.truncate(blocks as usize);
            chain.tx_counts.truncate(blocks as usize);
            chain.sp_offsets.truncate(blocks as usize);
        }
        let mut files = self.files.write().expect("files lock poisoned");
        let res = files
            .headers
            .truncate(blocks)
            .and_then(|()| files.txcounts.truncate(blocks))
            .and_then(|()| files.txids.truncate(first_removed_tx))
            .and_then(|()| files.txsizes.truncate(first_removed_tx))
            .and_then(|()| match (&mut files.sp, sp_bytes_kept) {
                (Some(sp), Some(kept)) => sp
                    .offsets
                    .truncate(blocks)
                    .and_then(|()| sp.tweaks.truncate(kept)),
                _ => Ok(()),
            });
        res.map_err(|source| Error::File {
            path: self.path.clone(),
            source,
        })
    }
}

/// The size of each transaction of `block`, from where each ends in it.
///
/// # Errors
/// When the ends do not fit a block: one does not pass the end before it
/// (or, the first, the header and transaction count).
fn tx_sizes_of(block: &IndexedBlock) -> Result<Vec<u32>> {
    let mut start = 80 + crate::compact_size_len(block.tx_ends.len() as u64);
    block
        .tx_ends
        .iter()
        .map(|&end| {
            let size = end.checked_sub(start).filter(|&size| size > 0);
            let size = size.ok_or_else(|| {
                Error::Corrupt(format!(
                    "block {} has a transaction ending at byte {end}, not past its start at {start}",
                    block.height
                ))
            })?;
            start = end;
            Ok(size)
        })
        .collect()
}

/// Sorts a batch for RocksDB. Keys are inserted in ascending order: the
/// memtable's skip list resumes each search where the previous insert
/// ended, so a sorted batch costs a short walk per key instead of a search
/// from the top. Unsorted, these inserts were 40% of all CPU and slowed
/// down as the memtable grew (perf, medium chain). Rows and txid keys are
/// plain integers, so the sort compares and moves them in place.
fn sort_batch(history: &mut [codec::ScriptRow], txid_keys: &mut [u128]) {
    history.par_sort_unstable();
    txid_keys.par_sort_unstable();
}

/// The first 16 bytes of `key` as a big-endian integer, zero-padded: two
/// keys whose integers differ compare the same way as their bytes (a
/// shorter key is padded with zeros, and a shorter key that is a prefix of
/// a longer one sorts first either way), so sorting on it and breaking ties
/// on the bytes gives RocksDB's order.
pub(crate) fn sort_key(key: &[u8]) -> u128 {
    let mut bytes = [0u8; 16];
    let n = key.len().min(16);
    bytes[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(bytes)
}
