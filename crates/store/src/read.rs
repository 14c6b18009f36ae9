//! What the index answers: the chain of headers, where a transaction is,
//! txids, and a script's history rows.

use std::sync::RwLockReadGuard;

use bitcoin::consensus::serialize;
use bitcoin::hashes::Hash;
use bitcoin::{BlockHash, Txid};
use osprey_core::{Height, ScriptHash, TxNum};

use crate::codec::{self, HistoryRow};
use crate::{
    cf, compact_size_len, history_cf, txid_cf, Chain, Error, Result, Store, StoreConfig, CF_META,
};

impl Store {
    pub(crate) fn chain(&self) -> RwLockReadGuard<'_, Chain> {
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

    /// Calls `f` with the block times from genesis to the tip, under the
    /// chain's read lock (no copy of the headers).
    pub fn with_header_times<R>(&self, f: impl FnOnce(&mut dyn Iterator<Item = u32>) -> R) -> R {
        let chain = self.chain();
        f(&mut chain.headers.iter().map(|header| header.time))
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
        let spans = self.block_tx_spans(height, position + 1)?;
        Ok(spans.last().map(|&(offset, len)| (height, offset, len)))
    }

    /// The offset and length of each of the first `count` transactions
    /// of block `height` (fewer when the block has fewer): the block's
    /// header and transaction count, then the transactions' sizes in
    /// turn (`txsizes.dat`).
    ///
    /// # Errors
    /// When the sizes file or `meta` cannot be read, or a transaction's
    /// size is missing or passes what a block can hold.
    pub(crate) fn block_tx_spans(&self, height: Height, count: u32) -> Result<Vec<(u32, u32)>> {
        let Some(txs) = self.block_tx_nums(height) else {
            return Ok(Vec::new());
        };
        let count = u64::from(count).min(txs.end - txs.start);
        let mut records = vec![0u8; count as usize * crate::TX_SIZE_LEN];
        self.files
            .read()
            .expect("files lock poisoned")
            .txsizes
            .read_many(txs.start, &mut records)
            .map_err(|source| Error::File {
                path: self.path.join("txsizes.dat"),
                source,
            })?;
        let mut offset = 80 + compact_size_len(txs.end - txs.start);
        let mut spans = Vec::with_capacity(count as usize);
        for (tx_num, record) in (txs.start..).zip(records.chunks_exact(crate::TX_SIZE_LEN)) {
            let mut size = u32::from(u16::from_le_bytes([record[0], record[1]]));
            if size == crate::TX_SIZE_ESCAPE {
                size = self.large_tx_size(tx_num)?;
            }
            spans.push((offset, size));
            offset = offset.checked_add(size).ok_or_else(|| {
                Error::Corrupt(format!("block {height}'s transactions pass 4 GiB"))
            })?;
        }
        Ok(spans)
    }

    /// The size of transaction `tx_num`, whose record in `txsizes.dat`
    /// says it is in `meta`.
    fn large_tx_size(&self, tx_num: u64) -> Result<u32> {
        let db = self.db()?;
        let value = db.get_cf(cf(&db, CF_META), crate::tx_size_key(tx_num))?;
        value
            .and_then(|v| Some(u32::from_le_bytes(v.as_slice().try_into().ok()?)))
            .filter(|&size| size >= crate::TX_SIZE_ESCAPE)
            .ok_or_else(|| {
                Error::Corrupt(format!(
                    "transaction {tx_num} is of 64 KiB or more, but its size is not in the index"
                ))
            })
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
        self.refuse_during_bulk_load()?;
        let prefix = codec::txid_prefix(txid);
        let key = codec::txid_bucket_key(prefix);
        let candidates = {
            let db = self.db()?;
            let Some(value) = db.get_pinned_cf(txid_cf(&db, &key), key)? else {
                return Ok(None);
            };
            codec::txid_candidates(&key, &value, prefix)?
        };
        let mut found = None;
        for tx_num in candidates {
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
        self.refuse_during_bulk_load()?;
        let prefix = codec::history_prefix(scripthash);
        let db = self.db()?;
        let cf = history_cf(&db, prefix);
        // The bound lets RocksDB stop at the end of the script's block
        // (the index tells it the next block is past the bound) without
        // reading the next one, which may be one busy script's whole
        // value, MBs in one block.
        let mut read = rocksdb::ReadOptions::default();
        read.set_prefix_same_as_start(true);
        if let Some(bound) = next_prefix(prefix) {
            read.set_iterate_upper_bound(bound);
        }
        let mut rows = Vec::new();
        let from = rocksdb::IteratorMode::From(prefix, rocksdb::Direction::Forward);
        for item in db.iterator_cf_opt(cf, read, from) {
            let (key, value) = item?;
            if !key.starts_with(prefix) {
                break;
            }
            for row in codec::history_value_rows(&key, &value) {
                if rows.len() == limit {
                    return Ok(None);
                }
                rows.push(row?);
            }
        }
        Ok(Some(rows))
    }
}

/// Silent-payment records of consecutive blocks, read from `sptweaks.dat`
/// ([`Store::sp_records`]). Offsets count bytes of that file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpRecords {
    /// The blocks read that have records, in chain order.
    pub blocks: Vec<SpBlock>,
    /// Their records, back to back.
    pub bytes: Vec<u8>,
    /// Where `bytes` start and end.
    pub start: u64,
    pub end: u64,
    /// The first height not read.
    pub next_height: Height,
    /// Whether the read reached the end of block `to`, or of the tip when
    /// `to` is above it.
    pub done: bool,
    /// Where the records of the last block asked for end: `range_end - end`
    /// bytes are left to read.
    pub range_end: u64,
}

/// One block of [`SpRecords`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpBlock {
    pub height: Height,
    /// The block it was read from: a caller that works on the records
    /// after the read can tell whether a reorg replaced it meanwhile.
    pub hash: BlockHash,
    /// The tx_num of its first transaction (a record holds its position).
    pub first_tx_num: TxNum,
    /// Its records within [`SpRecords::bytes`].
    pub records: std::ops::Range<usize>,
}

impl Store {
    /// During a bulk load the history and txid rows are in runs, not in
    /// RocksDB: a read would miss them.
    fn refuse_during_bulk_load(&self) -> Result<()> {
        if self.bulk.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::BulkLoad);
        }
        Ok(())
    }

    /// The settings the index was opened with.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// Whether the index keeps silent-payment records.
    pub fn silent_payments(&self) -> bool {
        self.config.silent_payments
    }

    /// The silent-payment records of the blocks from `from` up to `to`
    /// (clamped to the tip), stopping after the first block that takes the
    /// bytes read past `bytes_max` (so at least one block with records is
    /// read, however large). Nothing when the index keeps none.
    ///
    /// The offsets and the read come from one state of the chain: the read
    /// holds the chain's lock, and a rollback updates the chain before it
    /// cuts the files, so the bytes are there. It holds the lock for one
    /// `pread`; the caller scans the records afterwards.
    ///
    /// # Errors
    /// When `sptweaks.dat` cannot be read.
    pub fn sp_records(&self, from: Height, to: Height, bytes_max: u64) -> Result<SpRecords> {
        let chain = self.chain();
        let offsets = &chain.sp_offsets;
        let end_of = |height: usize| offsets.get(height).copied();
        let start_of = |height: usize| height.checked_sub(1).map_or(Some(0), &end_of);
        let last = to.as_usize().min(offsets.len().saturating_sub(1));
        let (Some(start), Some(range_end)) = (start_of(from.as_usize()), end_of(last)) else {
            return Ok(SpRecords {
                next_height: from,
                done: true,
                ..SpRecords::default()
            });
        };
        if from.as_usize() > last {
            return Ok(SpRecords {
                start,
                end: start,
                next_height: from,
                done: true,
                range_end: start,
                ..SpRecords::default()
            });
        }
        // The first block whose records end past the budget is the last
        // one read; offsets never decrease.
        let budget_end = start.saturating_add(bytes_max);
        let over = from.as_usize()
            + offsets[from.as_usize()..=last].partition_point(|&end| end <= budget_end);
        let last_read = over.min(last);
        let end = offsets[last_read];
        let mut blocks = Vec::new();
        let mut block_start = start;
        let read = offsets.iter().enumerate().take(last_read + 1);
        for (height, &block_end) in read.skip(from.as_usize()) {
            if block_end > block_start {
                blocks.push(SpBlock {
                    height: Height(height as u32),
                    hash: chain.hashes[height],
                    first_tx_num: TxNum(start_of_block_tx(&chain.tx_counts, height)),
                    records: (block_start - start) as usize..(block_end - start) as usize,
                });
            }
            block_start = block_end;
        }
        let mut bytes = vec![0u8; (end - start) as usize];
        let files = self.files.read().expect("files lock poisoned");
        if let Some(sp) = &files.sp {
            sp.tweaks
                .read_many(start, &mut bytes)
                .map_err(|source| Error::File {
                    path: self.path.join("sptweaks.dat"),
                    source,
                })?;
        }
        Ok(SpRecords {
            blocks,
            bytes,
            start,
            end,
            next_height: Height(last_read as u32 + 1),
            done: last_read == last,
            range_end,
        })
    }

    /// Whether `tx_num` pays `scripthash` (has a funding row for it): how a
    /// silent-payment scan confirms an output-key prefix that matched. One
    /// lookup of the script's value for that tx_num's epoch.
    ///
    /// # Errors
    /// On database errors or corrupt rows.
    pub fn funding_at(&self, scripthash: &ScriptHash, tx_num: TxNum) -> Result<bool> {
        self.refuse_during_bulk_load()?;
        let db = self.db()?;
        let key = codec::history_key(codec::history_prefix(scripthash), tx_num);
        let cf = history_cf(&db, &key);
        let Some(value) = db.get_pinned_cf(cf, &key)? else {
            return Ok(false);
        };
        for row in codec::history_value_rows(&key, &value) {
            let row = row?;
            if row.tx_num > tx_num {
                break;
            }
            if row.tx_num == tx_num && matches!(row.kind, codec::RowKind::Funding { .. }) {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// The first tx_num of block `height`, from the cumulative counts.
fn start_of_block_tx(tx_counts: &[u64], height: usize) -> u64 {
    height
        .checked_sub(1)
        .map_or(0, |previous| tx_counts[previous])
}

/// The smallest key above every key that starts with `prefix`; `None` when
/// there is none (the prefix is all 0xff).
fn next_prefix(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut next = prefix.to_vec();
    while let Some(last) = next.pop() {
        if last < u8::MAX {
            next.push(last + 1);
            return Some(next);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::next_prefix;

    #[test]
    fn the_next_prefix_bounds_every_key_with_the_prefix() {
        assert_eq!(next_prefix(&[1, 2, 3]), Some(vec![1, 2, 4]));
        assert_eq!(next_prefix(&[1, 0xff, 0xff]), Some(vec![2]));
        assert_eq!(next_prefix(&[0xff, 0xff]), None);
        let bound = next_prefix(&[7, 0xff]).unwrap();
        assert!([7u8, 0xff, 0xff, 0xff].as_slice() < bound.as_slice());
        assert!([8u8].as_slice() >= bound.as_slice());
    }
}
