//! A read-only replica of an index another process (the writer, `osprey
//! serve`) keeps: RocksDB opened as a secondary instance, the flat files
//! opened for reading and followed up to the committed tip.
//!
//! The replica writes nothing in the index's directory: no lock (a
//! secondary takes none), no file created or cut. Its secondary directory
//! (RocksDB's own log and manifest copy) is a temporary directory outside
//! the index, removed when the store closes.
//!
//! The tip in RocksDB is the truth here as for the writer. The writer
//! appends and syncs the flat files before the batch with its new tip, so
//! once a catch-up shows a tip, the files hold it; they may hold more (a
//! batch not yet committed), which the replica never reads. A rollback
//! (`Store::rollback_to`) commits the fork point, then cuts the files,
//! then the writer appends the new branch: a catch-up that reads the files
//! while this happens sees headers that do not hash to its tip, and tries
//! again rather than take them.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
use std::sync::{Mutex, RwLock};

use bitcoin::block::Header;
use bitcoin::consensus::deserialize;
use bitcoin::BlockHash;
use rocksdb::DB;

use crate::flat::FlatFile;
use crate::open::{
    check_format, column_families, db_options, file_err, read_tip, refuse_foreign_column_families,
};
use crate::{layout, Chain, Error, Files, Result, SpFiles, Store, StoreConfig};
use osprey_core::Height;

/// Attempts of one catch-up when the writer's files move under it (a
/// rollback between its reads): each sees a newer state of the writer.
const CATCH_UP_ATTEMPTS: usize = 3;

/// How a replica's tip moved in one [`Store::catch_up`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TipMove {
    /// Blocks of the old chain no longer in it (the writer's rollback).
    pub undone: u32,
    /// Blocks added on top of the ones kept.
    pub added: u32,
}

/// What a catch-up read of the flat files: the blocks from `from` to the
/// tip.
struct Followed {
    from: usize,
    headers: Vec<Header>,
    tx_counts: Vec<u64>,
    sp_offsets: Vec<u64>,
}

impl Store {
    /// Opens the index in `dir` that another process writes, to read it
    /// only: see the module's documentation. `config.silent_payments` must
    /// be the writer's (it is part of the format).
    ///
    /// # Errors
    /// No index in `dir` yet ([`Error::NoIndex`]), a format or network
    /// mismatch, or I/O and database errors.
    pub fn open_replica(dir: &Path, network: &str, config: StoreConfig) -> Result<Store> {
        let db_path = dir.join(layout::ROCKSDB_DIR);
        if !db_path.join("CURRENT").is_file() {
            return Err(Error::NoIndex(dir.to_path_buf()));
        }
        refuse_foreign_column_families(dir, &db_path, config.silent_payments)?;
        let mut opts = db_options(&config)?;
        opts.create_if_missing(false);
        opts.create_missing_column_families(false);
        // Every SST file held open: the writer's compactions delete files
        // the secondary's current version may still name until its next
        // catch-up, which RocksDB allows only for files already open.
        opts.set_max_open_files(-1);
        // Each catch-up loads the table handlers of the version it reads
        // on this many new threads per column family: 16 (the default)
        // made an idle catch-up cost 3.5-4 ms, mostly creating ~56
        // threads, 20 times a second; with one, 32 µs (1000 catch-ups of
        // an idle 100-block index). A catch-up opens only the files the
        // writer's last flushes and compactions made, a few at a time.
        opts.set_max_file_opening_threads(1);
        let secondary = tempfile::Builder::new()
            .prefix("osprey-replica-")
            .tempdir()
            .map_err(file_err(&std::env::temp_dir()))?;
        let db = DB::open_cf_descriptors_as_secondary(
            &opts,
            &db_path,
            &secondary.path().to_path_buf(),
            column_families(&config),
        )?;
        check_format(&db, dir, network, config.silent_payments, false)?;
        let files = open_files_read_only(dir, config.silent_payments)?;
        let store = Store {
            db: RwLock::new(Some(db)),
            secondary: Some(secondary),
            options: opts,
            path: dir.to_path_buf(),
            config,
            chain: RwLock::new(Chain {
                headers: Vec::new(),
                hashes: Vec::new(),
                tx_counts: Vec::new(),
                sp_offsets: Vec::new(),
            }),
            files: RwLock::new(files),
            unlogged: AtomicBool::new(false),
            bulk: AtomicBool::new(false),
            runs: Mutex::new(crate::runs::RunBuffer::default()),
            runs_written: AtomicU32::new(0),
            stalled: Mutex::new(None),
            merging: AtomicUsize::new(0),
            runs_merged: AtomicU64::new(0),
            merge_micros: AtomicU64::new(0),
            merged_at_height: AtomicU64::new(0),
            bulk_write_bytes: AtomicU64::new(0),
        };
        let db = store.db()?;
        let tip = read_tip(&db)?;
        let bulk = crate::open::bulk_load_recorded(&db)?.is_some();
        drop(db);
        store.bulk.store(bulk, std::sync::atomic::Ordering::SeqCst);
        store.follow_tip(tip)?;
        Ok(store)
    }

    /// Whether this store is a read-only replica ([`Store::open_replica`]).
    pub fn is_replica(&self) -> bool {
        self.secondary.is_some()
    }

    /// A replica takes up what the writer committed since the last call:
    /// new blocks, or a rollback and the new branch. Returns how the tip
    /// moved, `None` when it did not (and always for the writer).
    ///
    /// # Errors
    /// [`Error::CatchUp`] (transient) when RocksDB cannot catch up or the
    /// writer's files kept moving under the reads; an inconsistent index.
    pub fn catch_up(&self) -> Result<Option<TipMove>> {
        if !self.is_replica() {
            return Ok(None);
        }
        let db = self.db()?;
        db.try_catch_up_with_primary()
            .map_err(|e| Error::CatchUp(e.to_string()))?;
        let tip = read_tip(&db)?;
        // The writer's bulk load keeps its rows in runs until its merge:
        // until then the replica has nothing to answer wallets from.
        let bulk = crate::open::bulk_load_recorded(&db)?.is_some();
        self.bulk.store(bulk, std::sync::atomic::Ordering::SeqCst);
        drop(db);
        if tip.map(|(_, hash)| hash) == self.chain().hashes.last().copied() {
            return Ok(None);
        }
        self.follow_tip(tip).map(Some)
    }

    /// Reloads the chain in memory to `tip` from the flat files, trying
    /// again (from a newer catch-up) while the writer moves them.
    fn follow_tip(&self, mut tip: Option<(Height, BlockHash)>) -> Result<TipMove> {
        let mut attempt = 1;
        loop {
            match self.read_followed(tip) {
                Ok(followed) => return Ok(self.take_followed(followed)),
                Err(Error::CatchUp(why)) if attempt < CATCH_UP_ATTEMPTS => {
                    tracing::debug!(attempt, "catching up with the writer again: {why}");
                    attempt += 1;
                    let db = self.db()?;
                    db.try_catch_up_with_primary()
                        .map_err(|e| Error::CatchUp(e.to_string()))?;
                    tip = read_tip(&db)?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads from the flat files the blocks up to `tip` that the chain in
    /// memory does not have (from the fork with it, if the writer rolled
    /// back), and checks that they are `tip`'s.
    fn read_followed(&self, tip: Option<(Height, BlockHash)>) -> Result<Followed> {
        let blocks = tip.map_or(0, |(h, _)| h.as_usize() + 1);
        let files = self.files.read().expect("files lock poisoned");
        let on_disk = |file: &FlatFile, name: &str| {
            file.records_on_disk()
                .map_err(file_err(&self.path.join(name)))
        };
        let moving = |what: String| Error::CatchUp(format!("{what} (the writer is moving them)"));
        if on_disk(&files.headers, "headers.dat")? < blocks as u64
            || on_disk(&files.txcounts, "txcounts.dat")? < blocks as u64
        {
            return Err(moving(format!(
                "headers.dat or txcounts.dat holds fewer than the tip's {blocks} blocks"
            )));
        }
        let read_header = |height: usize| -> Result<Header> {
            let mut raw = [0u8; 80];
            files
                .headers
                .read_exact_at(height as u64, &mut raw)
                .map_err(file_err(&self.path.join("headers.dat")))?;
            deserialize(&raw).map_err(|e| Error::Corrupt(format!("bad header: {e}")))
        };
        // The fork with the chain in memory: the highest block both have.
        let from = {
            let chain = self.chain();
            let mut from = chain.hashes.len().min(blocks);
            while from > 0 && read_header(from - 1)?.block_hash() != chain.hashes[from - 1] {
                from -= 1;
            }
            from
        };
        let count = blocks - from;
        let tx_counts = read_u64s_at(&files.txcounts, from, count, &self.path, "txcounts.dat")?;
        let sp_offsets = match &files.sp {
            Some(sp) => {
                if on_disk(&sp.offsets, "spoffsets.dat")? < blocks as u64 {
                    return Err(moving(format!(
                        "spoffsets.dat holds fewer than the tip's {blocks} blocks"
                    )));
                }
                read_u64s_at(&sp.offsets, from, count, &self.path, "spoffsets.dat")?
            }
            None => Vec::new(),
        };
        // Read last: when the headers hash to the tip, the files held the
        // tip's chain at least from here back, so the counts and offsets
        // read above are the tip's too (a rollback would have changed the
        // headers first).
        let mut raw = vec![0u8; count * 80];
        files
            .headers
            .read_exact_at(from as u64, &mut raw)
            .map_err(file_err(&self.path.join("headers.dat")))?;
        let headers: Vec<Header> = raw
            .chunks_exact(80)
            .map(|c| deserialize(c).map_err(|e| Error::Corrupt(format!("bad header: {e}"))))
            .collect::<Result<_>>()?;
        let chained = {
            let chain = self.chain();
            let mut prev = from
                .checked_sub(1)
                .and_then(|h| chain.hashes.get(h))
                .copied();
            headers.iter().all(|header| {
                let linked = prev.is_none_or(|p| header.prev_blockhash == p);
                prev = Some(header.block_hash());
                linked
            }) && prev == tip.map(|(_, hash)| hash)
        };
        if !chained {
            return Err(moving(format!(
                "the headers on file do not lead to the tip {}",
                tip.map_or_else(|| "(none)".into(), |(h, hash)| format!("{h} {hash}"))
            )));
        }
        let txs = match tx_counts.last() {
            Some(&last) => last,
            None => self
                .chain()
                .tx_counts
                .get(from.wrapping_sub(1))
                .copied()
                .unwrap_or(0),
        };
        if on_disk(&files.txids, "txids.dat")? < txs
            || on_disk(&files.txsizes, "txsizes.dat")? < txs
        {
            return Err(moving(format!(
                "txids.dat or txsizes.dat holds fewer than the tip's {txs} transactions"
            )));
        }
        if let (Some(sp), Some(&bytes)) = (&files.sp, sp_offsets.last()) {
            if on_disk(&sp.tweaks, "sptweaks.dat")? < bytes {
                return Err(moving(format!(
                    "sptweaks.dat holds fewer than the tip's {bytes} bytes"
                )));
            }
        }
        Ok(Followed {
            from,
            headers,
            tx_counts,
            sp_offsets,
        })
    }

    /// Swaps in what [`Store::read_followed`] read: the files grow before
    /// the chain in memory does and shrink after it, so that a reader
    /// sizing a read by the chain never reads past what a file follows.
    fn take_followed(&self, followed: Followed) -> TipMove {
        let Followed {
            from,
            headers,
            tx_counts,
            sp_offsets,
        } = followed;
        let added = headers.len();
        // What the files follow for the chain of `blocks` blocks whose
        // last transaction count and record offset are given.
        let counts = |blocks: usize, txs: Option<&u64>, sp_bytes: Option<&u64>| {
            (
                blocks as u64,
                txs.copied().unwrap_or(0),
                sp_bytes.copied().unwrap_or(0),
            )
        };
        let (old, kept_txs, kept_sp_bytes) = {
            let chain = self.chain();
            let old = counts(
                chain.headers.len(),
                chain.tx_counts.last(),
                chain.sp_offsets.last(),
            );
            let kept = |values: &[u64]| from.checked_sub(1).and_then(|h| values.get(h)).copied();
            (old, kept(&chain.tx_counts), kept(&chain.sp_offsets))
        };
        let new = counts(
            from + added,
            tx_counts.last().or(kept_txs.as_ref()),
            sp_offsets.last().or(kept_sp_bytes.as_ref()),
        );
        let widest = (old.0.max(new.0), old.1.max(new.1), old.2.max(new.2));
        self.files
            .write()
            .expect("files lock poisoned")
            .follow(widest);
        let undone = {
            // In place, as the writer's commit and rollback do: a copy of
            // the chain per block would be ~100 MB on mainnet.
            let mut chain = self.chain.write().expect("chain lock poisoned");
            let undone = chain.headers.len() - from;
            chain.hashes.truncate(from);
            chain.headers.truncate(from);
            chain.tx_counts.truncate(from);
            chain.sp_offsets.truncate(from);
            chain.hashes.extend(headers.iter().map(Header::block_hash));
            chain.headers.extend(headers);
            chain.tx_counts.extend(tx_counts);
            chain.sp_offsets.extend(sp_offsets);
            undone
        };
        self.files.write().expect("files lock poisoned").follow(new);
        TipMove {
            undone: undone as u32,
            added: added as u32,
        }
    }
}

impl Files {
    /// Makes readable the records of `blocks` blocks, `txs` transactions
    /// and `sp_bytes` bytes of silent-payment records.
    fn follow(&mut self, (blocks, txs, sp_bytes): (u64, u64, u64)) {
        self.headers.follow(blocks);
        self.txcounts.follow(blocks);
        self.txids.follow(txs);
        self.txsizes.follow(txs);
        if let Some(sp) = &mut self.sp {
            sp.offsets.follow(blocks);
            sp.tweaks.follow(sp_bytes);
        }
    }
}

/// The index's flat files, opened for reading; none readable until
/// followed. A file missing is an index the writer has not created.
fn open_files_read_only(dir: &Path, silent_payments: bool) -> Result<Files> {
    let open = |name: &str, len: usize| {
        let path = dir.join(name);
        FlatFile::open_read_only(&path, len).map_err(file_err(&path))
    };
    Ok(Files {
        headers: open("headers.dat", 80)?,
        txcounts: open("txcounts.dat", 8)?,
        txids: open("txids.dat", 32)?,
        txsizes: open("txsizes.dat", crate::TX_SIZE_LEN)?,
        sp: if silent_payments {
            Some(SpFiles {
                tweaks: open("sptweaks.dat", 1)?,
                offsets: open("spoffsets.dat", 8)?,
            })
        } else {
            None
        },
    })
}

/// `count` u64 LE records from `first` (`txcounts.dat`, `spoffsets.dat`),
/// read past what the file follows: the caller checked they are on disk.
fn read_u64s_at(
    file: &FlatFile,
    first: usize,
    count: usize,
    dir: &Path,
    name: &str,
) -> Result<Vec<u64>> {
    let mut raw = vec![0u8; count * 8];
    file.read_exact_at(first as u64, &mut raw)
        .map_err(file_err(&dir.join(name)))?;
    Ok(raw
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8-byte chunk")))
        .collect())
}
