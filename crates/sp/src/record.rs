//! The records of `sptweaks.dat` (docs/silent-payments.md, 3.2): one per
//! eligible transaction, a block's in transaction order.
//!
//! ```text
//! varint  position − previous position in the block (the previous one 0 at
//!         the block's start; the coinbase, at 0, is never eligible, so ≥ 1)
//! 64 B    A uncompressed without its SEC1 prefix: ser256(x) || ser256(y)
//! 32 B    input_hash (big-endian, a valid scalar)
//! varint  n = number of taproot outputs (≥ 1)
//! n × 4 B the first 4 bytes of each taproot output's x-only key, in output order
//! ```
//!
//! Integers are LEB128 with one encoding each, as the store's history rows.
//! Both choices below were measured on the 2-core VM (`benches/ops.rs`,
//! docs/silent-payments.md 2.5):
//!
//! - `A` and `input_hash` are kept apart rather than multiplied at index
//!   time: the product costs a variable-time point multiplication, 30.7 µs,
//!   per eligible transaction while indexing (tweak data of a two-input
//!   transaction 11.3 µs → 40.4 µs); the scanner multiplies
//!   `input_hash·b_scan` first, a 0.07-µs scalar product, and pays nothing
//!   more for the factors.
//! - `A` is uncompressed: decompressing it (a square root) costs 4.4 µs,
//!   and the scan kernel then misses the bar of 15,000 records per second
//!   per core (≈ 70 µs, 14,200/s); parsing x and y costs 0.1 µs (≈ 63 µs,
//!   15,800/s). 31 more bytes a record (Frigate stores `x || y` for the
//!   same reason).

use bitcoin::{Transaction, TxOut};

use crate::{input, Error, TweakData};

/// Bytes of each taproot output key a record keeps: enough that a false hit
/// (which costs one confirming lookup) comes about once per 2^32
/// comparisons. The `short-prefixes` test feature keeps one byte, so false
/// hits happen on every small test chain.
pub const OUTPUT_PREFIX_LEN: usize = if cfg!(feature = "short-prefixes") {
    1
} else {
    4
};

/// One record, borrowed from the bytes it was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// The transaction's position in its block (0 is the coinbase).
    pub position: u32,
    /// `A`, `ser256(x) || ser256(y)`.
    pub input_key_sum: &'a [u8; 64],
    /// `input_hash`, big-endian.
    pub input_hash: &'a [u8; 32],
    output_prefixes: &'a [u8],
}

impl<'a> Record<'a> {
    /// The prefixes of the transaction's taproot output keys, in output order.
    pub fn output_prefixes(&self) -> impl Iterator<Item = &'a [u8]> {
        self.output_prefixes.chunks_exact(OUTPUT_PREFIX_LEN)
    }

    /// The record's `A` and `input_hash`, parsed.
    pub fn tweak_data(&self) -> Result<TweakData, Error> {
        TweakData::from_bytes(self.input_key_sum, self.input_hash)
    }
}

/// The x-only keys of `tx`'s taproot outputs, in output order: what a
/// scan's candidate keys are compared with (the record keeps their
/// prefixes, the mempool the whole keys).
pub fn taproot_output_keys(tx: &Transaction) -> impl Iterator<Item = [u8; 32]> + '_ {
    tx.output
        .iter()
        .filter(|output| output.script_pubkey.is_p2tr())
        .filter_map(|output| output.script_pubkey.as_bytes()[2..34].try_into().ok())
}

/// Appends the records of a block's eligible transactions to `out` and
/// returns how many it wrote. `spent` holds the outputs spent by every
/// input of every transaction but the coinbase, in block order (what the
/// block sources give as `BlockWithPrevouts.prevouts`).
pub fn append_block_records(
    txdata: &[Transaction],
    spent: &[TxOut],
    out: &mut Vec<u8>,
) -> Result<usize, Error> {
    let mut rest = spent;
    let mut previous_position = 0u32;
    let mut records = 0;
    for (position, tx) in txdata.iter().enumerate() {
        if tx.is_coinbase() {
            continue;
        }
        let Some((tx_spent, after)) = rest.split_at_checked(tx.input.len()) else {
            return Err(Error::PrevoutCount {
                spent: spent.len(),
                inputs: inputs_of(txdata),
            });
        };
        rest = after;
        let Some(tweak) = input::tweak_data(tx, tx_spent)? else {
            continue;
        };
        let position =
            u32::try_from(position).map_err(|_| Error::Block("over 2^32 transactions"))?;
        // Positions are stored as increments from 0, the coinbase's.
        if position == 0 {
            return Err(Error::Block("its first transaction is not a coinbase"));
        }
        write_varint(out, position - previous_position);
        previous_position = position;
        out.extend_from_slice(&tweak.input_key_sum_bytes());
        out.extend_from_slice(&tweak.input_hash().secret_bytes());
        let taproot_keys: Vec<[u8; 32]> = taproot_output_keys(tx).collect();
        // At most 4M / 43 taproot outputs fit in a block: always a u32.
        write_varint(out, taproot_keys.len() as u32);
        for key in taproot_keys {
            out.extend_from_slice(&key[..OUTPUT_PREFIX_LEN]);
        }
        records += 1;
    }
    if !rest.is_empty() {
        return Err(Error::PrevoutCount {
            spent: spent.len(),
            inputs: inputs_of(txdata),
        });
    }
    Ok(records)
}

fn inputs_of(txdata: &[Transaction]) -> usize {
    txdata
        .iter()
        .filter(|tx| !tx.is_coinbase())
        .map(|tx| tx.input.len())
        .sum()
}

/// The records of one block, read from the bytes `append_block_records`
/// wrote for it (`spoffsets.dat` delimits them). Positions are relative to
/// the block's start, so a reader never starts mid-block. After an error it
/// yields nothing more.
#[derive(Clone, Debug)]
pub struct BlockRecords<'a> {
    rest: &'a [u8],
    position: u32,
}

impl<'a> BlockRecords<'a> {
    pub fn new(block_bytes: &'a [u8]) -> BlockRecords<'a> {
        BlockRecords {
            rest: block_bytes,
            position: 0,
        }
    }

    /// Bytes not read yet: a scan that stops after a record resumes (and
    /// measures its progress) by them.
    pub fn bytes_left(&self) -> usize {
        self.rest.len()
    }

    fn read(&mut self) -> Result<Record<'a>, Error> {
        let delta =
            read_varint(&mut self.rest).ok_or(Error::Record("truncated or malformed position"))?;
        if delta == 0 {
            return Err(Error::Record("position does not increase"));
        }
        self.position = self
            .position
            .checked_add(delta)
            .ok_or(Error::Record("position past 2^32"))?;
        let input_key_sum = self.take::<64>()?;
        let input_hash = self.take::<32>()?;
        let outputs = read_varint(&mut self.rest)
            .ok_or(Error::Record("truncated or malformed output count"))?;
        if outputs == 0 {
            return Err(Error::Record("no taproot output"));
        }
        let prefix_bytes = (outputs as usize)
            .checked_mul(OUTPUT_PREFIX_LEN)
            .filter(|&len| len <= self.rest.len())
            .ok_or(Error::Record("truncated output prefixes"))?;
        let (output_prefixes, rest) = self.rest.split_at(prefix_bytes);
        self.rest = rest;
        Ok(Record {
            position: self.position,
            input_key_sum,
            input_hash,
            output_prefixes,
        })
    }

    fn take<const N: usize>(&mut self) -> Result<&'a [u8; N], Error> {
        let (bytes, rest) = self
            .rest
            .split_first_chunk::<N>()
            .ok_or(Error::Record("truncated key or hash"))?;
        self.rest = rest;
        Ok(bytes)
    }
}

impl<'a> Iterator for BlockRecords<'a> {
    type Item = Result<Record<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let record = self.read();
        if record.is_err() {
            self.rest = &[];
        }
        Some(record)
    }
}

/// LEB128, as the store's rows (`osprey_core::write_varint`): positions
/// and output counts take one byte up to 127.
fn write_varint(out: &mut Vec<u8>, n: u32) {
    osprey_core::write_varint(out, u64::from(n));
}

/// Reads what `write_varint` writes and nothing else (a number has one
/// encoding, so damaged bytes are an error rather than another record):
/// `None` for a truncated number, a redundant last group of zeros, or one
/// past 32 bits.
fn read_varint(input: &mut &[u8]) -> Option<u32> {
    osprey_core::read_varint(input).and_then(|n| u32::try_from(n).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;
    use bitcoin::ScriptBuf;

    /// A block: coinbase, an ineligible transaction, then eligible ones at
    /// positions 2 and 3 (two taproot outputs, then one among others).
    fn block() -> (Vec<Transaction>, Vec<TxOut>) {
        let (a, a_spent) = p2wpkh_spend(1);
        let (b, b_spent) = p2wpkh_spend(2);
        let (c, c_spent) = p2wpkh_spend(3);
        let (d, d_spent) = p2wpkh_spend(4);
        let txs = vec![
            coinbase(),
            transaction(vec![a], vec![output(p2wpkh_script(&public(9)))]),
            transaction(
                vec![b, c],
                vec![
                    output(taproot_script([0xaa; 32])),
                    output(taproot_script([0xbb; 32])),
                ],
            ),
            transaction(
                vec![d],
                vec![output(ScriptBuf::new()), output(taproot_script([0xcc; 32]))],
            ),
        ];
        (txs, vec![a_spent, b_spent, c_spent, d_spent])
    }

    #[test]
    fn records_round_trip() {
        let (txs, spent) = block();
        let mut bytes = vec![0xee]; // what earlier blocks wrote stays
        assert_eq!(append_block_records(&txs, &spent, &mut bytes), Ok(2));
        assert_eq!(bytes[0], 0xee);
        // 1 + 64 + 32 + 1 + 4n bytes each.
        assert_eq!(
            bytes.len(),
            1 + (98 + 2 * OUTPUT_PREFIX_LEN) + (98 + OUTPUT_PREFIX_LEN)
        );
        let records: Vec<Record> = BlockRecords::new(&bytes[1..])
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            records.iter().map(|r| r.position).collect::<Vec<_>>(),
            [2, 3]
        );
        for (record, (tx, tx_spent)) in records
            .iter()
            .zip([(&txs[2], &spent[1..3]), (&txs[3], &spent[3..])])
        {
            let tweak = input::tweak_data(tx, tx_spent).unwrap().unwrap();
            assert_eq!(record.tweak_data(), Ok(tweak));
        }
        let prefixes = |record: &Record| {
            record
                .output_prefixes()
                .map(<[u8]>::to_vec)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            prefixes(&records[0]),
            [vec![0xaa; OUTPUT_PREFIX_LEN], vec![0xbb; OUTPUT_PREFIX_LEN]]
        );
        assert_eq!(prefixes(&records[1]), [vec![0xcc; OUTPUT_PREFIX_LEN]]);
        assert_eq!(BlockRecords::new(&[]).count(), 0);
        let mut reader = BlockRecords::new(&bytes[1..]);
        assert_eq!(reader.bytes_left(), bytes.len() - 1);
        reader.next();
        assert_eq!(reader.bytes_left(), 98 + OUTPUT_PREFIX_LEN);
        reader.next();
        assert_eq!(reader.bytes_left(), 0);
    }

    #[test]
    fn blocks_that_do_not_fit_their_spent_outputs_are_refused() {
        let (txs, spent) = block();
        let mismatch = Err(Error::PrevoutCount {
            spent: 3,
            inputs: 4,
        });
        assert_eq!(
            append_block_records(&txs, &spent[..3], &mut Vec::new()),
            mismatch
        );
        let extra = [&spent[..], &spent[..1]].concat();
        let mismatch = Err(Error::PrevoutCount {
            spent: 5,
            inputs: 4,
        });
        assert_eq!(
            append_block_records(&txs, &extra, &mut Vec::new()),
            mismatch
        );
        // Without its coinbase, the eligible transaction would sit at 0.
        let (tx, tx_spent) = p2wpkh_spend(1);
        let tx = transaction(vec![tx], vec![output(taproot_script([0xaa; 32]))]);
        assert!(matches!(
            append_block_records(&[tx], &[tx_spent], &mut Vec::new()),
            Err(Error::Block(_))
        ));
    }

    #[test]
    fn damaged_records_are_errors() {
        let (txs, spent) = block();
        let mut bytes = Vec::new();
        append_block_records(&txs, &spent, &mut bytes).unwrap();
        let first_len = 98 + 2 * OUTPUT_PREFIX_LEN;
        // Every truncation of the second record: the first reads, then one
        // error, then nothing.
        for end in first_len + 1..bytes.len() {
            let mut records = BlockRecords::new(&bytes[..end]);
            assert!(records.next().unwrap().is_ok());
            assert!(records.next().unwrap().is_err(), "cut at {end}");
            assert!(records.next().is_none());
        }
        let mut zero_delta = bytes.clone();
        zero_delta[first_len] = 0;
        assert_eq!(
            BlockRecords::new(&zero_delta).nth(1),
            Some(Err(Error::Record("position does not increase")))
        );
        let mut no_outputs = bytes.clone();
        no_outputs[97] = 0;
        assert_eq!(
            BlockRecords::new(&no_outputs).next(),
            Some(Err(Error::Record("no taproot output")))
        );
        // A key that is not a point reads as a record, and fails to parse.
        let mut bad_key = bytes.clone();
        bad_key[64] ^= 1;
        let record = BlockRecords::new(&bad_key).next().unwrap().unwrap();
        assert!(record.tweak_data().is_err());
    }

    #[test]
    fn varints_round_trip_with_one_encoding() {
        for n in [0u32, 1, 127, 128, 300, 1 << 28, u32::MAX] {
            let mut buf = Vec::new();
            write_varint(&mut buf, n);
            let mut slice = buf.as_slice();
            assert_eq!(read_varint(&mut slice), Some(n));
            assert!(slice.is_empty());
        }
        assert_eq!(read_varint(&mut &[0x80u8][..]), None, "truncated");
        assert_eq!(
            read_varint(&mut &[0x81u8, 0x00][..]),
            None,
            "redundant zero group"
        );
        assert_eq!(
            read_varint(&mut &[0xff, 0xff, 0xff, 0xff, 0x1f][..]),
            None,
            "past 32 bits"
        );
        assert_eq!(
            read_varint(&mut &[0xff, 0xff, 0xff, 0xff, 0x0f][..]),
            Some(u32::MAX)
        );
    }
}
