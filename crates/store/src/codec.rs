//! Encodes and decodes index rows. Knows key layouts; knows nothing about
//! RocksDB handles. `docs/schema.md` describes the same layouts in prose and
//! changes in the same commit as this file.
//!
//! A history key starts with [`SCRIPT_ID_LEN`] bytes of the script hash, so
//! one prefix scan finds a script's rows in chain order and nothing else.
//! The first [`SCRIPT_BUCKET_LEN`] of them are what the prefix bloom filters
//! index, and the first [`UNDO_BUCKET_LEN`] what undo records keep: code
//! that works by bucket (a rollback) must expect several scripts in one.
//! The `short-prefixes` feature shrinks the buckets and the txid prefixes to
//! one byte, which makes shared buckets and txid prefix collisions common on a
//! tiny chain without changing any answer.
//!
//! The whole script id leads the key, rather than 8 bytes in the key and 4
//! check bytes in the value (format 2): RocksDB stores a key as the bytes
//! it does not share with the previous key, so a script's rows after its
//! first now pay nothing for its id. On the 1M-transaction mainnet-profile
//! chain this took the history column family from 16.2 to 14.5 bytes per
//! row.
//!
//! Format 4 keeps a script's rows of one epoch ([`EPOCH_SHIFT`] bits of
//! tx_num) in one stored value: the indexer still makes one
//! [`HistoryRow::encode`] entry per row, [`history_operands`] turns a
//! batch's entries into one RocksDB merge operand per script and epoch,
//! and [`merge_history`], the column family's merge operator, appends
//! operands as compactions meet them. Each row then pays neither RocksDB's
//! per-key framing nor the tx_num bytes it shares with the row before: on
//! the 10M-transaction mainnet-profile chain the history column family
//! went from 71.3 to 53.1 bytes per transaction together with the 2-byte
//! spent-txid prefix (`crates/bench/runs/2026-11-26-index-format-4`).

use bitcoin::hashes::Hash;
use bitcoin::Txid;
use osprey_core::{read_varint, write_varint, ScriptHash, TxNum};

/// Bytes of a script hash in every history key (96 bits: rows of another
/// script under the same id need a second preimage of that many bits).
pub const SCRIPT_ID_LEN: usize = 12;

/// Leading bytes of the script id indexed by the prefix bloom filters.
#[cfg(not(feature = "short-prefixes"))]
pub const SCRIPT_BUCKET_LEN: usize = 8;
#[cfg(feature = "short-prefixes")]
pub const SCRIPT_BUCKET_LEN: usize = 1;

/// Leading bytes of the script id an undo record keeps for each script a
/// block wrote rows for. A rollback visits every script that starts with
/// them; on mainnet (~1.5 billion scripts) 4 bytes are shared by one
/// script or none most of the time, and they halve the undo records,
/// which on a young chain are a quarter of the index.
#[cfg(not(feature = "short-prefixes"))]
pub const UNDO_BUCKET_LEN: usize = 4;
#[cfg(feature = "short-prefixes")]
pub const UNDO_BUCKET_LEN: usize = 1;

/// Bytes of a txid leading a `txid` key; matches are confirmed against the
/// full txid in the txids file. With mainnet's ~1.2 billion transactions a
/// lookup meets ~0.3 other transactions on average, each one 32-byte read
/// of that file; 8 bytes (format 2) cost 4 more bytes per transaction.
#[cfg(not(feature = "short-prefixes"))]
pub const TXID_PREFIX_LEN: usize = 4;
#[cfg(feature = "short-prefixes")]
pub const TXID_PREFIX_LEN: usize = 1;

/// Bytes of the spent txid kept in a spending row: enough to pair a spend
/// with the script's own funding rows that are still unspent when it
/// comes; the rare ambiguity is resolved exactly by the query layer. On
/// the 10M-transaction mainnet-profile chain 2 bytes leave 238 of 26.3
/// million spends ambiguous (72 at most for one script), 1 byte 36,828
/// (8,513), 4 bytes none; each byte costs ~2.7 bytes per transaction.
#[cfg(not(feature = "short-prefixes"))]
pub const SPENT_TXID_PREFIX_LEN: usize = 2;
#[cfg(feature = "short-prefixes")]
pub const SPENT_TXID_PREFIX_LEN: usize = 1;

/// The rows of one script whose tx_nums share their bits above these
/// share one stored value. 2^24 transactions are about 40 days of
/// mainnet: a funding row and the row that spends it mostly share it, and
/// the busiest script's value stays a few MB. The test build shrinks it so
/// that a tiny chain crosses epochs.
#[cfg(not(feature = "short-prefixes"))]
pub const EPOCH_SHIFT: u32 = 24;
#[cfg(feature = "short-prefixes")]
pub const EPOCH_SHIFT: u32 = 3;

/// Bytes of the epoch in a history key, after the script id.
pub const EPOCH_LEN: usize = 2;

/// What one history row says about one transaction and one script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKind {
    /// Output `vout` of the transaction pays `amount` to the script.
    Funding { vout: u32, amount: u64 },
    /// Input `input` of the transaction spends `prev_vout` of a transaction
    /// whose txid starts with `prev_txid_prefix`, locked by the script.
    Spending {
        input: u32,
        prev_txid_prefix: [u8; SPENT_TXID_PREFIX_LEN],
        prev_vout: u32,
    },
}

/// A decoded history row (the script hash itself is implied by the scan).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryRow {
    pub tx_num: TxNum,
    pub kind: RowKind,
}

impl HistoryRow {
    pub fn funding(tx_num: TxNum, vout: u32, amount: u64) -> HistoryRow {
        HistoryRow {
            tx_num,
            kind: RowKind::Funding { vout, amount },
        }
    }

    pub fn spending(tx_num: TxNum, input: u32, prev_txid: &Txid, prev_vout: u32) -> HistoryRow {
        let mut prefix = [0u8; SPENT_TXID_PREFIX_LEN];
        prefix.copy_from_slice(&prev_txid.as_byte_array()[..SPENT_TXID_PREFIX_LEN]);
        HistoryRow {
            tx_num,
            kind: RowKind::Spending {
                input,
                prev_txid_prefix: prefix,
                prev_vout,
            },
        }
    }

    /// Encodes the row of `scripthash` as a (key, value) pair.
    pub fn encode(&self, scripthash: &ScriptHash) -> (Vec<u8>, Vec<u8>) {
        let mut key = Vec::with_capacity(SCRIPT_ID_LEN + TxNum::LEN + 5);
        key.extend_from_slice(history_prefix(scripthash));
        key.extend_from_slice(&self.tx_num.to_bytes());
        let mut value = Vec::with_capacity(10);
        match self.kind {
            RowKind::Funding { vout, amount } => {
                write_varint(&mut key, u64::from(vout) << 1);
                write_varint(&mut value, amount);
            }
            RowKind::Spending {
                input,
                prev_txid_prefix,
                prev_vout,
            } => {
                write_varint(&mut key, (u64::from(input) << 1) | 1);
                value.extend_from_slice(&prev_txid_prefix);
                write_varint(&mut value, u64::from(prev_vout));
            }
        }
        (key, value)
    }

    /// Decodes a row of `scripthash`; returns `None` when the row is
    /// another script's.
    ///
    /// # Errors
    /// When the bytes are not a history row (a corrupt database).
    pub fn decode(
        scripthash: &ScriptHash,
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<HistoryRow>, CodecError> {
        let bad = || CodecError::History(key.to_vec());
        if key.len() < SCRIPT_ID_LEN + TxNum::LEN + 1 {
            return Err(bad());
        }
        if !key.starts_with(history_prefix(scripthash)) {
            return Ok(None);
        }
        let tx_num_bytes: [u8; TxNum::LEN] = key[SCRIPT_ID_LEN..SCRIPT_ID_LEN + TxNum::LEN]
            .try_into()
            .expect("slice has TxNum::LEN bytes by construction");
        let tx_num = TxNum::from_bytes(tx_num_bytes);
        let mut key_rest = &key[SCRIPT_ID_LEN + TxNum::LEN..];
        let tagged = read_varint(&mut key_rest).ok_or_else(bad)?;
        if !key_rest.is_empty() {
            return Err(bad());
        }
        decode_row(tx_num, tagged, value).map(Some).ok_or_else(bad)
    }
}

/// The epoch of `tx_num` as it appears in a history key. Epochs past
/// `u16::MAX` (2^40 transactions) share the last one, which only makes
/// that value long: merges and reads order entries by their tx_nums, not
/// by the key.
fn epoch_of(tx_num: u64) -> [u8; EPOCH_LEN] {
    u16::try_from(tx_num >> EPOCH_SHIFT)
        .unwrap_or(u16::MAX)
        .to_be_bytes()
}

/// The first tx_num of the epoch a history key names: the base its
/// value's first entry counts from.
fn epoch_base(key: &[u8]) -> Option<u64> {
    let bytes: [u8; EPOCH_LEN] = key
        .get(SCRIPT_ID_LEN..SCRIPT_ID_LEN + EPOCH_LEN)?
        .try_into()
        .ok()?;
    Some(u64::from(u16::from_be_bytes(bytes)) << EPOCH_SHIFT)
}

/// The stored key of `script_id`'s rows in the epoch of `tx_num`.
pub fn history_key(script_id: &[u8], tx_num: TxNum) -> Vec<u8> {
    let mut key = Vec::with_capacity(SCRIPT_ID_LEN + EPOCH_LEN);
    key.extend_from_slice(&script_id[..SCRIPT_ID_LEN]);
    key.extend_from_slice(&epoch_of(tx_num.0));
    key
}

/// One entry of a stored history value: `delta` is its tx_num minus the
/// previous entry's (the first entry's: minus the epoch's first tx_num),
/// then the row's tagged index and payload exactly as an
/// [`HistoryRow::encode`] key ends and its value holds.
struct Entry<'a> {
    tx_num: u64,
    /// The entry without its delta: tagged index and payload.
    body: &'a [u8],
}

/// Reads the entries of a stored value or merge operand, checking each.
fn entries(base: u64, value: &[u8]) -> impl Iterator<Item = Option<Entry<'_>>> {
    let mut rest = value;
    let mut previous = base;
    let mut failed = false;
    std::iter::from_fn(move || {
        if rest.is_empty() || failed {
            return None;
        }
        let entry = (|| {
            let tx_num = previous.checked_add(read_varint(&mut rest)?)?;
            let start = rest;
            let tagged = read_varint(&mut rest)?;
            u32::try_from(tagged >> 1).ok()?;
            if tagged & 1 == 1 {
                rest = rest.get(SPENT_TXID_PREFIX_LEN..)?;
                u32::try_from(read_varint(&mut rest)?).ok()?;
            } else {
                read_varint(&mut rest)?;
            }
            let body = &start[..start.len() - rest.len()];
            previous = tx_num;
            Some(Entry { tx_num, body })
        })();
        failed = entry.is_none();
        Some(entry)
    })
}

/// A stored history key and a merge operand (or value) for it.
pub type KeyedValue = (Vec<u8>, Vec<u8>);

/// Turns a batch's [`HistoryRow::encode`] entries, sorted by key, into one
/// merge operand per script and epoch: `(history key, operand)`.
///
/// # Errors
/// When an entry is not one `HistoryRow::encode` makes.
pub fn history_operands<'a>(
    sorted: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
) -> Result<Vec<KeyedValue>, CodecError> {
    let mut out: Vec<KeyedValue> = Vec::new();
    let mut previous = 0;
    for (key, payload) in sorted {
        let bad = || CodecError::History(key.to_vec());
        let tx_bytes: [u8; TxNum::LEN] = key
            .get(SCRIPT_ID_LEN..SCRIPT_ID_LEN + TxNum::LEN)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(bad)?;
        let tx_num = TxNum::from_bytes(tx_bytes).0;
        let stored_key = history_key(key, TxNum(tx_num));
        let same = out.last().is_some_and(|(k, _)| *k == stored_key);
        if !same {
            previous = epoch_base(&stored_key).ok_or_else(bad)?;
            out.push((stored_key, Vec::new()));
        }
        let value = &mut out.last_mut().expect("pushed above").1;
        write_varint(value, tx_num.checked_sub(previous).ok_or_else(bad)?);
        value.extend_from_slice(&key[SCRIPT_ID_LEN + TxNum::LEN..]);
        value.extend_from_slice(payload);
        previous = tx_num;
    }
    Ok(out)
}

/// The history column family's merge operator: appends operands (later
/// rows of the same script and epoch) to the stored value, re-basing each
/// one's first entry on the entry before it, so a value is the same bytes
/// however its rows were split into writes and merged. `None` (RocksDB
/// reports corruption) when a value does not decode or an operand's rows
/// come before the rows already stored.
pub fn merge_history<'a>(
    key: &[u8],
    existing: Option<&'a [u8]>,
    operands: impl Iterator<Item = &'a [u8]>,
) -> Option<Vec<u8>> {
    let base = epoch_base(key)?;
    let mut out = Vec::new();
    let mut last: Option<u64> = None;
    for part in existing.into_iter().chain(operands) {
        let mut first = true;
        let mut copied_from = 0;
        for entry in entries(base, part) {
            let entry = entry?;
            if first {
                let delta = match last {
                    None => entry.tx_num - base,
                    Some(last) => entry.tx_num.checked_sub(last)?,
                };
                write_varint(&mut out, delta);
                copied_from = offset_of(part, entry.body);
                first = false;
            }
            last = Some(entry.tx_num);
        }
        // Everything after the first entry's delta is relative already.
        out.extend_from_slice(&part[copied_from..]);
    }
    Some(out)
}

/// Where `inner`, a sub-slice of `outer`, starts in it.
fn offset_of(outer: &[u8], inner: &[u8]) -> usize {
    inner.as_ptr() as usize - outer.as_ptr() as usize
}

/// The rows a stored history value holds, in chain order.
///
/// # Errors
/// When the bytes are not a history value (a corrupt database).
pub fn decode_history_value(key: &[u8], value: &[u8]) -> Result<Vec<HistoryRow>, CodecError> {
    history_value_rows(key, value).collect()
}

/// The rows of a stored history value one by one, so that a reader with
/// a limit stops at it instead of decoding a busy script's whole value
/// (a million rows is one value on the 10M-transaction chain).
pub fn history_value_rows<'a>(
    key: &'a [u8],
    value: &'a [u8],
) -> impl Iterator<Item = Result<HistoryRow, CodecError>> + 'a {
    let bad = move || CodecError::History(key.to_vec());
    let base = epoch_base(key);
    let mut entries = entries(base.unwrap_or(0), value);
    let mut failed = base.is_none();
    std::iter::from_fn(move || {
        if failed {
            failed = false;
            return Some(Err(bad()));
        }
        let entry = entries.next()?;
        let row = entry.and_then(|entry| {
            let mut body = entry.body;
            let tagged = read_varint(&mut body)?;
            decode_row(TxNum(entry.tx_num), tagged, body)
        });
        Some(row.ok_or_else(bad))
    })
}

/// A stored history value cut to its rows before `first_removed` (a
/// rollback); `None` when none is left.
///
/// # Errors
/// When the bytes are not a history value (a corrupt database).
pub fn truncate_history_value(
    key: &[u8],
    value: &[u8],
    first_removed: TxNum,
) -> Result<Option<Vec<u8>>, CodecError> {
    let bad = || CodecError::History(key.to_vec());
    let base = epoch_base(key).ok_or_else(bad)?;
    let mut end = 0;
    for entry in entries(base, value) {
        let entry = entry.ok_or_else(bad)?;
        if entry.tx_num >= first_removed.0 {
            break;
        }
        end = offset_of(value, entry.body) + entry.body.len();
    }
    Ok((end > 0).then(|| value[..end].to_vec()))
}

/// A row's kind from its tagged index and payload; `None` unless the
/// payload is exactly what `HistoryRow::encode` writes.
fn decode_row(tx_num: TxNum, tagged: u64, payload: &[u8]) -> Option<HistoryRow> {
    let index = u32::try_from(tagged >> 1).ok()?;
    let mut rest = payload;
    let kind = if tagged & 1 == 0 {
        RowKind::Funding {
            vout: index,
            amount: read_varint(&mut rest)?,
        }
    } else {
        let prefix: [u8; SPENT_TXID_PREFIX_LEN] =
            rest.get(..SPENT_TXID_PREFIX_LEN)?.try_into().ok()?;
        rest = &rest[SPENT_TXID_PREFIX_LEN..];
        RowKind::Spending {
            input: index,
            prev_txid_prefix: prefix,
            prev_vout: u32::try_from(read_varint(&mut rest)?).ok()?,
        }
    };
    rest.is_empty().then_some(HistoryRow { tx_num, kind })
}

/// The key prefix under which all rows of `scripthash` are stored.
pub fn history_prefix(scripthash: &ScriptHash) -> &[u8] {
    &scripthash.0[..SCRIPT_ID_LEN]
}

/// The `txid` column family key of a transaction.
pub fn txid_key(txid: &Txid, tx_num: TxNum) -> Vec<u8> {
    let mut key = Vec::with_capacity(TXID_PREFIX_LEN + TxNum::LEN);
    key.extend_from_slice(&txid.as_byte_array()[..TXID_PREFIX_LEN]);
    key.extend_from_slice(&tx_num.to_bytes());
    key
}

pub fn txid_prefix(txid: &Txid) -> &[u8] {
    &txid.as_byte_array()[..TXID_PREFIX_LEN]
}

/// Decodes the tx_num of a `txid` column family key.
///
/// # Errors
/// When the key has the wrong length (a corrupt database).
pub fn decode_txid_key(key: &[u8]) -> Result<TxNum, CodecError> {
    let bytes: [u8; TxNum::LEN] = key
        .get(TXID_PREFIX_LEN..)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| CodecError::Txid(key.to_vec()))?;
    Ok(TxNum::from_bytes(bytes))
}

/// The undo record of a block whose history keys are `keys`: the distinct
/// undo buckets they fall in, ascending, each written as its difference
/// from the one before (the first from zero) in LEB128. A block's ~10,000
/// scripts are ~2^18 apart in 32-bit bucket space: 3 bytes each instead of
/// 4.
pub fn undo_record<'a>(keys: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut buckets: Vec<u32> = keys.map(undo_bucket).collect();
    buckets.sort_unstable();
    buckets.dedup();
    let mut record = Vec::with_capacity(buckets.len() * 3);
    let mut previous = 0;
    for bucket in buckets {
        write_varint(&mut record, u64::from(bucket - previous));
        previous = bucket;
    }
    record
}

/// The buckets of an undo record, ascending, as key prefixes.
///
/// # Errors
/// When the bytes are not an undo record (a corrupt database).
pub fn undo_buckets(record: &[u8]) -> Result<Vec<Vec<u8>>, CodecError> {
    let bad = || CodecError::Undo(record.to_vec());
    let mut rest = record;
    let mut buckets = Vec::new();
    let mut bucket: u64 = 0;
    while !rest.is_empty() {
        let step = read_varint(&mut rest).ok_or_else(bad)?;
        // Strictly ascending after the first, and within the bucket's bytes.
        if step == 0 && !buckets.is_empty() {
            return Err(bad());
        }
        bucket = bucket.checked_add(step).ok_or_else(bad)?;
        if bucket >> (8 * UNDO_BUCKET_LEN) != 0 {
            return Err(bad());
        }
        buckets.push(bucket.to_be_bytes()[8 - UNDO_BUCKET_LEN..].to_vec());
    }
    Ok(buckets)
}

/// The undo bucket of a history key, as a number.
fn undo_bucket(key: &[u8]) -> u32 {
    key[..UNDO_BUCKET_LEN]
        .iter()
        .fold(0, |n, &byte| (n << 8) | u32::from(byte))
}

#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("corrupt undo record {}", hex_string(.0))]
    Undo(Vec<u8>),
    #[error("corrupt history row with key {}", hex_string(.0))]
    History(Vec<u8>),
    #[error("corrupt txid row with key {}", hex_string(.0))]
    Txid(Vec<u8>),
}

fn hex_string(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(first: u8, check: u8) -> ScriptHash {
        let mut b = [7u8; 32];
        b[0] = first;
        b[SCRIPT_ID_LEN - 1] = check;
        ScriptHash(b)
    }

    #[test]
    fn rows_round_trip() {
        let txid: Txid = "a6c9c361bd0bc536d6a22648efbf8f9b200e425ef6c3a7a9669dc444c532a347"
            .parse()
            .unwrap();
        let s = sh(1, 2);
        for row in [
            HistoryRow::funding(TxNum(0), 0, 0),
            HistoryRow::funding(TxNum(TxNum::MAX), u32::MAX, u64::MAX),
            HistoryRow::spending(TxNum(12345), 300, &txid, 70000),
        ] {
            let (k, v) = row.encode(&s);
            assert!(k.starts_with(history_prefix(&s)));
            assert_eq!(HistoryRow::decode(&s, &k, &v).unwrap(), Some(row));
        }
    }

    #[test]
    fn rows_of_another_script_in_the_bucket_are_not_its() {
        let (a, b) = (sh(1, 2), sh(1, 3));
        assert_eq!(a.0[..SCRIPT_BUCKET_LEN], b.0[..SCRIPT_BUCKET_LEN]);
        let (k, v) = HistoryRow::funding(TxNum(5), 1, 1000).encode(&a);
        assert_eq!(HistoryRow::decode(&b, &k, &v).unwrap(), None);
        assert!(HistoryRow::decode(&a, &k, &v).unwrap().is_some());
    }

    /// Rows of one script over three epochs, in chain order.
    fn rows_over_epochs() -> Vec<HistoryRow> {
        let txid: Txid = "a6c9c361bd0bc536d6a22648efbf8f9b200e425ef6c3a7a9669dc444c532a347"
            .parse()
            .unwrap();
        let epoch = 1u64 << EPOCH_SHIFT;
        [
            HistoryRow::funding(TxNum(1), 0, 5000),
            HistoryRow::funding(TxNum(1), 3, 7),
            HistoryRow::spending(TxNum(epoch - 1), 2, &txid, 0),
            HistoryRow::funding(TxNum(epoch), 1, u64::MAX),
            HistoryRow::spending(TxNum(epoch + epoch / 2), 0, &txid, 70000),
            HistoryRow::funding(TxNum(3 * epoch + 2), 0, 1),
        ]
        .to_vec()
    }

    /// What the history column family holds for `rows` written as
    /// `batches` (row counts), each batch's operands merged in order.
    fn stored(rows: &[HistoryRow], batches: &[usize]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let s = sh(4, 4);
        let mut values: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = Default::default();
        let mut rest = rows;
        for &n in batches {
            let (batch, later) = rest.split_at(n);
            rest = later;
            let mut entries: Vec<_> = batch.iter().map(|r| r.encode(&s)).collect();
            entries.sort();
            let operands =
                history_operands(entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice())))
                    .unwrap();
            for (key, operand) in operands {
                let existing = values.get(&key).cloned();
                let merged =
                    merge_history(&key, existing.as_deref(), [operand.as_slice()].into_iter())
                        .unwrap();
                values.insert(key, merged);
            }
        }
        values.into_iter().collect()
    }

    #[test]
    fn a_value_is_the_same_bytes_however_its_rows_were_written() {
        let rows = rows_over_epochs();
        let whole = stored(&rows, &[rows.len()]);
        assert_eq!(whole.len(), 3, "one value per epoch");
        for batches in [&[1, 1, 1, 1, 1, 1][..], &[2, 1, 3], &[3, 3], &[1, 5]] {
            assert_eq!(stored(&rows, batches), whole, "batches {batches:?}");
        }
        let decoded: Vec<HistoryRow> = whole
            .iter()
            .flat_map(|(k, v)| decode_history_value(k, v).unwrap())
            .collect();
        assert_eq!(decoded, rows);
        // A merge of operands with no stored value is the same as merging
        // them one by one (RocksDB's partial merges).
        let s = sh(4, 4);
        let (k1, v1) = rows[0].encode(&s);
        let (k2, v2) = rows[1].encode(&s);
        let one = history_operands([(k1.as_slice(), v1.as_slice())]).unwrap();
        let two = history_operands([(k2.as_slice(), v2.as_slice())]).unwrap();
        let key = &one[0].0;
        let together = merge_history(
            key,
            None,
            [one[0].1.as_slice(), two[0].1.as_slice()].into_iter(),
        );
        assert_eq!(together, Some(stored(&rows[..2], &[2]).remove(0).1));
    }

    #[test]
    fn a_rollback_cut_leaves_the_value_of_the_rows_before_it() {
        let rows = rows_over_epochs();
        let whole = stored(&rows, &[rows.len()]);
        for cut in 0..=rows.len() {
            let first_removed = rows.get(cut).map_or(TxNum(u64::MAX >> 8), |r| r.tx_num);
            // Rows of the same transaction go together.
            let kept = rows.iter().take_while(|r| r.tx_num < first_removed).count();
            let expected = stored(&rows[..kept], &[kept]);
            let cut_values: Vec<(Vec<u8>, Vec<u8>)> = whole
                .iter()
                .filter_map(|(k, v)| {
                    truncate_history_value(k, v, first_removed)
                        .unwrap()
                        .map(|v| (k.clone(), v))
                })
                .collect();
            assert_eq!(cut_values, expected, "cut before {first_removed:?}");
        }
    }

    #[test]
    fn damaged_values_are_errors_and_out_of_order_merges_fail() {
        let rows = rows_over_epochs();
        let whole = stored(&rows, &[rows.len()]);
        let (key, value) = &whole[0];
        for end in 1..value.len() {
            let result = decode_history_value(key, &value[..end]);
            // A cut between entries is a shorter value, not damage.
            if let Ok(decoded) = result {
                assert!(decoded.len() < 3 && decoded[..] == rows[..decoded.len()]);
            }
        }
        let mut long = value.clone();
        long.push(0x80);
        assert!(decode_history_value(key, &long).is_err());
        assert!(decode_history_value(&key[..SCRIPT_ID_LEN], value).is_err());
        assert!(truncate_history_value(key, &long, TxNum(u64::MAX >> 8)).is_err());
        // Rows of the first transaction after the last stored one's.
        let s = sh(4, 4);
        let (k, v) = rows[0].encode(&s);
        let earlier = history_operands([(k.as_slice(), v.as_slice())]).unwrap();
        assert_eq!(
            merge_history(key, Some(value), [earlier[0].1.as_slice()].into_iter()),
            None
        );
        assert!(history_operands([(&k[..SCRIPT_ID_LEN], v.as_slice())]).is_err());
    }

    #[test]
    fn keys_sort_in_chain_order_within_a_script() {
        let s = sh(9, 9);
        let k1 = HistoryRow::funding(TxNum(255), 200, 1).encode(&s).0;
        let k2 = HistoryRow::funding(TxNum(256), 0, 1).encode(&s).0;
        assert!(k1 < k2);
    }

    #[test]
    fn corrupt_rows_are_errors_not_panics() {
        let s = sh(1, 2);
        let (k, v) = HistoryRow::funding(TxNum(5), 1, 1000).encode(&s);
        assert!(HistoryRow::decode(&s, &k[..k.len() - 1], &v).is_err());
        assert!(HistoryRow::decode(&s, &k, &v[..v.len() - 1]).is_err());
        let mut long = v.clone();
        long.push(0);
        assert!(HistoryRow::decode(&s, &k, &long).is_err());
        assert!(decode_txid_key(&[1, 2]).is_err());
    }

    #[test]
    fn undo_records_round_trip_and_refuse_damage() {
        let keys: Vec<Vec<u8>> = [[9u8; 17], [1u8; 17], [9u8; 17], [0u8; 17], [255u8; 17]]
            .iter()
            .map(|k| k.to_vec())
            .collect();
        let record = undo_record(keys.iter().map(Vec::as_slice));
        let expected: Vec<Vec<u8>> = [0u8, 1, 9, 255]
            .iter()
            .map(|&b| vec![b; UNDO_BUCKET_LEN])
            .collect();
        assert_eq!(undo_buckets(&record).unwrap(), expected);
        assert_eq!(undo_buckets(&[]).unwrap(), Vec::<Vec<u8>>::new());
        // A repeated bucket (a zero step after the first), a truncated
        // number, a bucket past its bytes.
        assert!(undo_buckets(&[0, 0]).is_err());
        assert!(undo_buckets(&[0x80]).is_err());
        let mut past = Vec::new();
        write_varint(&mut past, 1u64 << (8 * UNDO_BUCKET_LEN));
        assert!(undo_buckets(&past).is_err());
    }

    #[test]
    fn a_row_index_has_one_encoding() {
        let s = sh(1, 2);
        // Output 5 is tagged 10, one byte; written in two, it is refused.
        let (mut k, v) = HistoryRow::funding(TxNum(5), 5, 1000).encode(&s);
        assert_eq!(k.pop(), Some(10));
        k.extend_from_slice(&[0x8a, 0x00]);
        assert!(HistoryRow::decode(&s, &k, &v).is_err());
    }
}
