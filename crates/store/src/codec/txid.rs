//! The `txid` family's keys and values (format 9): the transactions whose
//! txids share their first [`TXID_BUCKET_BITS`] bits (a *bucket*) are one
//! stored value, their tx_nums in chain order, each with the next
//! [`TXID_CHECK_BITS`] bits of its txid. A lookup reads its bucket's value
//! and confirms each entry whose check bits match against `txids.dat`.
//!
//! One key per transaction (formats 2 to 8: the txid's first 4 bytes and
//! the tx_num) paid RocksDB's framing (three length bytes) and the tx_num
//! whole for each. A bucket's entries are steps from the entry before
//! (~2^20 apart at any chain length, since buckets fill as the chain
//! grows), Rice-coded ([`super::bits`]): on the 10M-transaction
//! mainnet-profile chain the family went from 7.27 to 4.77 bytes per
//! transaction (5.17 with the steps and check bits as one LEB128 varint).
//! On mainnet a bucket holds ~1,100 transactions, a value of ~5 KB that
//! a lookup decodes whole.
//!
//! A bulk load's runs and a batch keep a transaction as its txid's first
//! [`TXID_PREFIX_LEN`] bytes and its tx_num ([`txid_key_bits`]); the
//! bucket and check bits are those bytes' first 32 bits, so a lookup
//! meets as many other transactions as with format 8's 4-byte prefix.

use bitcoin::hashes::Hash;
use bitcoin::Txid;
use osprey_core::{read_varint, write_varint, TxNum};

use super::bits::{BitReader, BitWriter};
use super::CodecError;

/// Bytes of a txid kept in a batch's and a run's txid rows: its bucket
/// and its check bits. With mainnet's ~1.2 billion transactions a lookup
/// meets ~0.3 other transactions on average, each one 32-byte read of
/// `txids.dat`.
#[cfg(not(feature = "short-prefixes"))]
pub const TXID_PREFIX_LEN: usize = 4;
#[cfg(feature = "short-prefixes")]
pub const TXID_PREFIX_LEN: usize = 1;

/// Leading bits of a txid that name its bucket: 2^20 buckets hold ~1,100
/// transactions each on mainnet (a value of ~5 KB, one data block), ~10
/// on a 10M-transaction chain. At least the bits a bulk load's merge
/// splits its work by (`runs::SLICE_BITS` and one), so that a bucket is
/// merged whole.
#[cfg(not(feature = "short-prefixes"))]
pub const TXID_BUCKET_BITS: u32 = 20;
#[cfg(feature = "short-prefixes")]
pub const TXID_BUCKET_BITS: u32 = 6;

/// Bits of a txid after its bucket's kept in each entry.
pub const TXID_CHECK_BITS: u32 = 8 * TXID_PREFIX_LEN as u32 - TXID_BUCKET_BITS;

/// Bytes of a `txid` key: the bucket's bits, left-aligned, the rest zero.
pub const TXID_BUCKET_KEY_LEN: usize = TXID_BUCKET_BITS.div_ceil(8) as usize;

/// A txid's first [`TXID_PREFIX_LEN`] bytes.
pub fn txid_prefix(txid: &Txid) -> &[u8] {
    &txid.as_byte_array()[..TXID_PREFIX_LEN]
}

/// A txid's prefix as a big-endian integer.
pub(crate) fn txid_prefix_bits(prefix: &[u8]) -> u64 {
    prefix[..TXID_PREFIX_LEN]
        .iter()
        .fold(0, |n, &b| n << 8 | u64::from(b))
}

/// The `txid` key of the bucket of a txid with `prefix`.
pub fn txid_bucket_key(prefix: &[u8]) -> [u8; TXID_BUCKET_KEY_LEN] {
    let bucket = txid_prefix_bits(prefix) >> TXID_CHECK_BITS;
    let aligned = bucket << (8 * TXID_BUCKET_KEY_LEN as u32 - TXID_BUCKET_BITS);
    aligned.to_be_bytes()[8 - TXID_BUCKET_KEY_LEN..]
        .try_into()
        .expect("TXID_BUCKET_KEY_LEN bytes")
}

/// The check bits of a txid with `prefix`.
pub fn txid_check(prefix: &[u8]) -> u64 {
    txid_prefix_bits(prefix) & ((1 << TXID_CHECK_BITS) - 1)
}

/// A transaction as a batch and a run keep it: its txid's prefix, then its
/// tx_num (5 bytes), big-endian and left-aligned in 16 bytes, so that a
/// batch sorts as integers and needs no allocation each.
pub fn txid_key_bits(txid: &Txid, tx_num: TxNum) -> u128 {
    let mut bytes = [0u8; 16];
    bytes[..TXID_PREFIX_LEN].copy_from_slice(txid_prefix(txid));
    bytes[TXID_PREFIX_LEN..TXID_PREFIX_LEN + TxNum::LEN].copy_from_slice(&tx_num.to_bytes());
    u128::from_be_bytes(bytes)
}

/// The prefix and tx_num of a transaction as [`txid_key_bits`] keeps it.
pub fn txid_of_bits(bits: u128) -> ([u8; TXID_PREFIX_LEN], TxNum) {
    let bytes = bits.to_be_bytes();
    let prefix = bytes[..TXID_PREFIX_LEN].try_into().expect("prefix bytes");
    let tx_num = bytes[TXID_PREFIX_LEN..TXID_PREFIX_LEN + TxNum::LEN]
        .try_into()
        .expect("tx_num bytes");
    (prefix, TxNum::from_bytes(tx_num))
}

/// The Rice parameter of a bucket's tx_num steps: a bucket holds about
/// one transaction in 2^[`TXID_BUCKET_BITS`], so its steps are about
/// that apart, whatever the chain's length, and nearly geometric, which
/// Rice codes well: ~21.6 bits a step, against the 5 bytes LEB128 took
/// for a step and the check bits together (0.9 bytes per transaction on
/// the 10M-transaction chain).
const RICE_BITS: u32 = TXID_BUCKET_BITS;

/// A bucket's value (or a merge operand) for `entries`, (tx_num, check
/// bits) in chain order, tx_nums increasing: the first tx_num as a
/// varint, then a bit string (most significant bit first, zero-padded to
/// a byte): the first entry's check bits, then for each later entry its
/// step from the one before less one, Rice-coded ([`RICE_BITS`],
/// [`super::bits`]), and its check bits.
pub fn txid_value(entries: impl IntoIterator<Item = (u64, u64)>) -> Vec<u8> {
    let mut value = Vec::new();
    let mut bits = BitWriter::default();
    let mut previous: Option<u64> = None;
    for (tx_num, check) in entries {
        match previous {
            None => write_varint(&mut value, tx_num),
            Some(previous) => bits.push_step(tx_num - previous - 1, RICE_BITS),
        }
        bits.push(check, TXID_CHECK_BITS);
        previous = Some(tx_num);
    }
    value.extend_from_slice(&bits.take());
    value
}

/// A bucket's entries, (tx_num, check bits) in chain order, each checked:
/// `None` for bytes that are not such a value (a varint or a unary
/// quotient cut short, a tx_num past [`TxNum::MAX`], padding that is not
/// zeros).
fn entries(value: &[u8]) -> impl Iterator<Item = Option<(u64, u64)>> + '_ {
    let mut rest = value;
    let first = read_varint(&mut rest);
    let mut bits = BitReader::new(rest);
    let mut previous: Option<u64> = None;
    let mut failed = false;
    let entry_bits = (1 + RICE_BITS + TXID_CHECK_BITS) as usize;
    std::iter::from_fn(move || {
        if failed {
            return None;
        }
        let entry = match previous {
            None => first.and_then(|tx_num| Some((tx_num, bits.bits(TXID_CHECK_BITS)?))),
            // What is left is padding: zeros, less than a byte.
            Some(_) if bits.left() < entry_bits => {
                let padding = bits.left();
                if padding < 8 && bits.bits(padding as u32) == Some(0) {
                    return None;
                }
                None
            }
            Some(previous) => (|| {
                let tx_num = previous
                    .checked_add(bits.step(RICE_BITS)?)?
                    .checked_add(1)?;
                Some((tx_num, bits.bits(TXID_CHECK_BITS)?))
            })(),
        };
        let entry = entry.filter(|&(tx_num, _)| tx_num <= TxNum::MAX);
        previous = entry.map(|(tx_num, _)| tx_num);
        failed = entry.is_none();
        Some(entry)
    })
}

/// A bucket's entries, (tx_num, check bits) in chain order.
///
/// # Errors
/// When the bytes are not a bucket's value (a corrupt database).
pub fn decode_txid_value(key: &[u8], value: &[u8]) -> Result<Vec<(u64, u64)>, CodecError> {
    entries(value)
        .map(|entry| entry.ok_or_else(|| CodecError::Txid(key.to_vec())))
        .collect()
}

/// The tx_nums in a bucket's value whose txids may start with `prefix`
/// (the check bits match), in chain order.
///
/// # Errors
/// When the bytes are not a bucket's value (a corrupt database).
pub fn txid_candidates(key: &[u8], value: &[u8], prefix: &[u8]) -> Result<Vec<TxNum>, CodecError> {
    let check = txid_check(prefix);
    let mut found = Vec::new();
    for entry in entries(value) {
        let (tx_num, entry_check) = entry.ok_or_else(|| CodecError::Txid(key.to_vec()))?;
        if entry_check == check {
            found.push(TxNum(tx_num));
        }
    }
    Ok(found)
}

/// The `txid` family's merge operator: appends operands (later
/// transactions of the bucket) to the stored value, re-basing each
/// operand's first entry on the last entry before it, so that a value is
/// the same bytes however its transactions were written. `None` (RocksDB
/// reports corruption) when a value does not decode or an operand's
/// transactions come before those already stored.
pub fn merge_txids<'a>(
    existing: Option<&'a [u8]>,
    operands: impl Iterator<Item = &'a [u8]>,
) -> Option<Vec<u8>> {
    let mut all: Vec<(u64, u64)> = Vec::new();
    for part in existing.into_iter().chain(operands) {
        for entry in entries(part) {
            let (tx_num, check) = entry?;
            if all.last().is_some_and(|&(last, _)| tx_num <= last) {
                return None;
            }
            all.push((tx_num, check));
        }
    }
    Some(txid_value(all))
}

/// A bucket's value cut to its transactions before `first_removed` (a
/// rollback); `None` when none is left.
///
/// # Errors
/// When the bytes are not a bucket's value (a corrupt database).
pub fn truncate_txid_value(
    key: &[u8],
    value: &[u8],
    first_removed: TxNum,
) -> Result<Option<Vec<u8>>, CodecError> {
    let mut kept = Vec::new();
    for entry in entries(value) {
        let (tx_num, check) = entry.ok_or_else(|| CodecError::Txid(key.to_vec()))?;
        if tx_num >= first_removed.0 {
            break;
        }
        kept.push((tx_num, check));
    }
    Ok((!kept.is_empty()).then(|| txid_value(kept)))
}

/// Turns txid rows given in key order (prefix, then tx_num: a sorted
/// batch, or a bulk load's runs merged) into one value per bucket, each
/// handed to `emit` with its key once the bucket's last row is in.
pub(crate) struct BucketValues {
    key: Option<[u8; TXID_BUCKET_KEY_LEN]>,
    /// The bucket's entries so far: (tx_num, check bits).
    entries: Vec<(u64, u64)>,
}

impl BucketValues {
    pub(crate) fn new() -> BucketValues {
        BucketValues {
            key: None,
            entries: Vec::new(),
        }
    }

    /// Takes the next row: its txid's prefix and its tx_num.
    pub(crate) fn push<E>(
        &mut self,
        prefix: &[u8],
        tx_num: u64,
        emit: &mut impl FnMut(&[u8], &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let key = txid_bucket_key(prefix);
        if self.key != Some(key) {
            self.finish(emit)?;
            self.key = Some(key);
        }
        self.entries.push((tx_num, txid_check(prefix)));
        Ok(())
    }

    /// Hands the bucket being gathered, if any, to `emit`: its entries in
    /// chain order.
    pub(crate) fn finish<E>(
        &mut self,
        emit: &mut impl FnMut(&[u8], &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let Some(key) = self.key.take() else {
            return Ok(());
        };
        self.entries.sort_unstable();
        let value = txid_value(self.entries.drain(..));
        emit(&key, &value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txid(first: [u8; 4]) -> Txid {
        let mut bytes = [0x5A; 32];
        bytes[..4].copy_from_slice(&first);
        Txid::from_byte_array(bytes)
    }

    /// The stored values of `rows` (txid, tx_num) written in `batches`
    /// (row counts), each batch's operands merged in order.
    fn stored(rows: &[(Txid, u64)], batches: &[usize]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut values: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = Default::default();
        let mut rest = rows;
        for &n in batches {
            let (batch, later) = rest.split_at(n);
            rest = later;
            let mut bits: Vec<u128> = batch
                .iter()
                .map(|(txid, tx_num)| txid_key_bits(txid, TxNum(*tx_num)))
                .collect();
            bits.sort_unstable();
            let mut buckets = BucketValues::new();
            let mut operands = Vec::new();
            let mut emit = |key: &[u8], value: &[u8]| -> Result<(), ()> {
                operands.push((key.to_vec(), value.to_vec()));
                Ok(())
            };
            for bits in bits {
                let (prefix, tx_num) = txid_of_bits(bits);
                buckets.push(&prefix, tx_num.0, &mut emit).unwrap();
            }
            buckets.finish(&mut emit).unwrap();
            for (key, operand) in operands {
                let existing = values.get(&key).cloned();
                let merged =
                    merge_txids(existing.as_deref(), [operand.as_slice()].into_iter()).unwrap();
                values.insert(key, merged);
            }
        }
        values.into_iter().collect()
    }

    /// Transactions in chain order: two buckets, one of them with two
    /// transactions whose prefixes match in every check bit, and the
    /// first transaction of the chain.
    fn rows() -> Vec<(Txid, u64)> {
        vec![
            (txid([0x10, 0x20, 0x3F, 0xFF]), 0),
            (txid([0x10, 0x20, 0x30, 0x01]), 7),
            (txid([0xEE, 0, 0, 0]), 8),
            (txid([0x10, 0x20, 0x3F, 0xFF]), 1 << 30),
            (txid([0x10, 0x20, 0x30, 0x00]), TxNum::MAX),
        ]
    }

    #[test]
    fn a_bucket_is_the_same_bytes_however_its_transactions_were_written() {
        let rows = rows();
        let whole = stored(&rows, &[rows.len()]);
        assert_eq!(whole.len(), 2, "one value per bucket");
        for batches in [&[1, 1, 1, 1, 1][..], &[2, 3], &[4, 1], &[1, 4]] {
            assert_eq!(stored(&rows, batches), whole, "batches {batches:?}");
        }
        // Every transaction is found by its prefix, among those whose
        // check bits match it.
        for (txid, tx_num) in &rows {
            let prefix = txid_prefix(txid);
            let key = txid_bucket_key(prefix);
            let (_, value) = whole.iter().find(|(k, _)| k[..] == key).unwrap();
            let candidates = txid_candidates(&key, value, prefix).unwrap();
            assert!(candidates.contains(&TxNum(*tx_num)), "{txid} {tx_num}");
            let same: Vec<TxNum> = rows
                .iter()
                .filter(|(other, _)| {
                    txid_bucket_key(txid_prefix(other)) == key
                        && txid_check(txid_prefix(other)) == txid_check(prefix)
                })
                .map(|&(_, n)| TxNum(n))
                .collect();
            assert_eq!(candidates, same);
        }
    }

    #[test]
    fn a_rollback_cut_leaves_the_value_of_the_transactions_before_it() {
        let rows = rows();
        let whole = stored(&rows, &[rows.len()]);
        for cut in 0..=rows.len() {
            let first_removed = rows.get(cut).map_or(TxNum(TxNum::MAX + 1), |r| TxNum(r.1));
            let expected = stored(&rows[..cut], &[cut]);
            let cut_values: Vec<(Vec<u8>, Vec<u8>)> = whole
                .iter()
                .filter_map(|(k, v)| {
                    truncate_txid_value(k, v, first_removed)
                        .unwrap()
                        .map(|v| (k.clone(), v))
                })
                .collect();
            assert_eq!(cut_values, expected, "cut before {first_removed:?}");
        }
    }

    #[test]
    fn damaged_values_are_errors_and_out_of_order_merges_fail() {
        let prefix = [0x10, 0x20, 0x3F, 0xFF];
        let key = txid_bucket_key(&prefix);
        let value = txid_value([(5, 1), (9, 2)]);
        assert_eq!(txid_candidates(&key, &value, &prefix).unwrap().len(), 0);
        let mut long = value.clone();
        long.extend_from_slice(&[0xFF; 16]);
        assert!(txid_candidates(&key, &long, &prefix).is_err());
        assert!(truncate_txid_value(&key, &long, TxNum(TxNum::MAX)).is_err());
        // A unary quotient cut short, padding that is not zeros.
        let mut ones = txid_value([(5, 1)]);
        ones.extend_from_slice(&[0xFF; 8]);
        assert!(txid_candidates(&key, &ones, &prefix).is_err());
        let mut padded = value.clone();
        *padded.last_mut().unwrap() |= 1;
        assert!(txid_candidates(&key, &padded, &prefix).is_err());
        // Transactions before the ones stored.
        let earlier = txid_value([(3, 0)]);
        assert_eq!(
            merge_txids(Some(&value), [earlier.as_slice()].into_iter()),
            None
        );
    }
}
