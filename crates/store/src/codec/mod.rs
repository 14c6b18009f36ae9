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
//! tx_num) in one stored value: the indexer makes one [`ScriptRow`] per
//! row, [`Operands`] turns a sorted batch of them into one RocksDB merge
//! operand per script and epoch,
//! and [`merge_history`], the column family's merge operator, appends
//! operands as compactions meet them. Each row then pays neither RocksDB's
//! per-key framing nor the tx_num bytes it shares with the row before: on
//! the 10M-transaction mainnet-profile chain the history column family
//! went from 71.3 to 53.1 bytes per transaction together with the 2-byte
//! spent-txid prefix (`crates/bench/runs/2026-11-26-index-format-4`).

use bitcoin::hashes::Hash;
use bitcoin::Txid;
use osprey_core::{read_varint, write_varint, ScriptHash, TxNum};

pub(crate) mod bits;
mod bulk;
mod txid;
pub(crate) use bulk::{comparable_values, EpochValues};
pub use txid::{
    decode_txid_value, merge_txids, truncate_txid_value, txid_bucket_key, txid_candidates,
    txid_check, txid_key_bits, txid_of_bits, txid_prefix, txid_value, TXID_BUCKET_BITS,
    TXID_BUCKET_KEY_LEN, TXID_CHECK_BITS, TXID_PREFIX_LEN,
};
pub(crate) use txid::{txid_prefix_bits, BucketValues};

/// Bytes of a script hash in every history key: 88 bits, the hashX of
/// ElectrumX, which has keyed its history by them for years. Rows of
/// another script under a wallet's id need a second preimage of 88 bits
/// (~2^88 hashes); any two of mainnet's ~1.5 billion scripts share one by
/// chance with odds of ~4 in a billion. 12 bytes (format 8) cost 1.3
/// bytes per transaction more on the 10M-transaction mainnet-profile
/// chain.
pub const SCRIPT_ID_LEN: usize = 11;

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

/// The low bits of a spending entry's tag (`prev_vout · 4` above them):
/// bit 0 marks a spend, bit 1 a spend whose spent-txid prefix follows.
pub(crate) const SPEND_WITH_PREFIX: u32 = 0b11;

/// The low bits of a funding entry's tag (`vout · 4` above them) for an
/// output a bulk load found spent: bit 0 clear (funding), bit 1 set (its
/// amount is left out, format 8). Nothing answers with the amount of a
/// spent output (a balance and `listunspent` sum the unspent ones, the
/// outpoint methods name the spender), and on the 10M-transaction
/// mainnet-profile chain the amounts of spent outputs were 8.7 of the
/// history family's 46.1 bytes per transaction.
pub(crate) const FUNDING_SPENT: u32 = 0b10;

/// Epochs a history key names in one byte, after the script id: 255 of
/// them, 2^32 transactions (mainnet has 1.2 billion). From the 256th on,
/// the byte is `0xFF` and two bytes follow, the epoch less 255, so that
/// keys still sort by epoch and no epoch is ever shared. A byte less than
/// format 8's two: 0.6 bytes per transaction on the 10M-transaction
/// mainnet-profile chain.
const ONE_BYTE_EPOCHS: u64 = 0xFF;

/// The last epoch a key can name; tx_nums past it share it, which only
/// makes that value long (merges and reads order entries by their
/// tx_nums). At [`EPOCH_SHIFT`] 24 it starts past [`TxNum::MAX`].
const EPOCH_MAX: u64 = ONE_BYTE_EPOCHS + u16::MAX as u64;

/// Bytes of the epoch in a history key at most.
pub const EPOCH_LEN_MAX: usize = 3;

/// The epoch of a tx_num, as keys order and name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Epoch(u64);

impl Epoch {
    fn of(tx_num: u64) -> Epoch {
        Epoch((tx_num >> EPOCH_SHIFT).min(EPOCH_MAX))
    }

    /// Its first tx_num: the base its values' first entry counts from.
    fn start(self) -> u64 {
        self.0 << EPOCH_SHIFT
    }

    /// Writes the epoch's key bytes at the start of `out`; returns how
    /// many.
    fn encode(self, out: &mut [u8]) -> usize {
        if self.0 < ONE_BYTE_EPOCHS {
            out[0] = self.0 as u8;
            1
        } else {
            out[0] = 0xFF;
            out[1..3].copy_from_slice(&((self.0 - ONE_BYTE_EPOCHS) as u16).to_be_bytes());
            3
        }
    }

    /// The epoch whose key bytes are exactly `bytes`.
    fn decode(bytes: &[u8]) -> Option<Epoch> {
        match *bytes {
            [b] if u64::from(b) < ONE_BYTE_EPOCHS => Some(Epoch(u64::from(b))),
            [0xFF, high, low] => Some(Epoch(
                ONE_BYTE_EPOCHS + u64::from(u16::from_be_bytes([high, low])),
            )),
            _ => None,
        }
    }
}

/// A history key: a script id and an epoch, the first `len` bytes.
#[derive(Clone, Copy)]
pub(crate) struct HistoryKey {
    bytes: [u8; SCRIPT_ID_LEN + EPOCH_LEN_MAX],
    len: usize,
}

impl HistoryKey {
    fn new(id: &[u8], epoch: Epoch) -> HistoryKey {
        let mut bytes = [0u8; SCRIPT_ID_LEN + EPOCH_LEN_MAX];
        bytes[..SCRIPT_ID_LEN].copy_from_slice(&id[..SCRIPT_ID_LEN]);
        let len = SCRIPT_ID_LEN + epoch.encode(&mut bytes[SCRIPT_ID_LEN..]);
        HistoryKey { bytes, len }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// What one history row says about one transaction and one script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKind {
    /// Output `vout` of the transaction pays `amount` to the script.
    /// `None`: a bulk load found the output spent, and left its amount out
    /// ([`FUNDING_SPENT`]); an output without one that no spend pairs
    /// with is a damaged index.
    Funding { vout: u32, amount: Option<u64> },
    /// An input of the transaction spends `prev_vout` of a transaction
    /// whose txid starts with `prev_txid_prefix`, locked by the script.
    /// `None`: a bulk load left the prefix out, where the output spent is
    /// the latest of the script's outputs with that vout, before the
    /// spend, that no spend took before it (format 8; its run knew, or its
    /// merge found that one output only could be it, [`EpochValues`]). Which input is not
    /// kept (format 7): nothing answers with it, and the rare spend its
    /// prefix leaves ambiguous is told apart by the spending transaction's
    /// inputs themselves.
    Spending {
        prev_txid_prefix: Option<[u8; SPENT_TXID_PREFIX_LEN]>,
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
            kind: RowKind::Funding {
                vout,
                amount: Some(amount),
            },
        }
    }

    pub fn spending(tx_num: TxNum, prev_txid: &Txid, prev_vout: u32) -> HistoryRow {
        let mut prefix = [0u8; SPENT_TXID_PREFIX_LEN];
        prefix.copy_from_slice(&prev_txid.as_byte_array()[..SPENT_TXID_PREFIX_LEN]);
        HistoryRow {
            tx_num,
            kind: RowKind::Spending {
                prev_txid_prefix: Some(prefix),
                prev_vout,
            },
        }
    }

    /// The row as a row of `scripthash`, for the store to sort and write.
    /// Its vout is below 2^30: a valid block of 4M weight units holds
    /// fewer than 2^17 outputs in one transaction.
    pub fn of(&self, scripthash: &ScriptHash) -> ScriptRow {
        let id = history_prefix(scripthash);
        let (RowKind::Funding { vout, .. }
        | RowKind::Spending {
            prev_vout: vout, ..
        }) = self.kind;
        debug_assert!(vout < 1 << 30, "vout {vout} of a row");
        let (tagged, payload) = match self.kind {
            RowKind::Funding { vout, amount } => (
                (vout << 2) | if amount.is_some() { 0 } else { FUNDING_SPENT },
                amount.unwrap_or(0),
            ),
            RowKind::Spending {
                prev_txid_prefix,
                prev_vout,
            } => {
                let prev_txid_prefix =
                    prev_txid_prefix.expect("the indexer's rows carry the spent txid's prefix");
                let mut prefix = [0u8; 8];
                prefix[..SPENT_TXID_PREFIX_LEN].copy_from_slice(&prev_txid_prefix);
                (
                    (prev_vout << 2) | SPEND_WITH_PREFIX,
                    u64::from_be_bytes(prefix),
                )
            }
        };
        let mut low = [0u8; 4];
        low[..SCRIPT_ID_LEN - 8].copy_from_slice(&id[8..]);
        ScriptRow {
            id_high: u64::from_be_bytes(id[..8].try_into().expect("8 bytes")),
            id_low: u32::from_be_bytes(low),
            tx_num: self.tx_num.0,
            tagged,
            payload,
        }
    }
}

/// One history row of one script, as the indexer hands rows to the store:
/// plain integers, 32 bytes, no allocation. A batch of them sorts by value
/// (the derived order is the script id's bytes, then the tx_num, then the
/// tag, then the payload) and is read in that order from one array. Rows as two
/// small vectors each, sorted through pointers, took malloc and free at
/// 15% of a first sync's CPU, and cache misses in reading them in key
/// order 21% more (perf, 1M mainnet-profile chain from Bitcoin Core).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ScriptRow {
    /// The script id's bytes 0..8 and 8..11 (then a zero byte),
    /// big-endian, so that integer order is the order of the key bytes.
    id_high: u64,
    id_low: u32,
    tx_num: u64,
    /// The entry's tag as stored: funding `vout · 4` (`+ 2` once a bulk
    /// load's run found it spent, [`FUNDING_SPENT`]), spending
    /// `prev_vout · 4 + 3` ([`SPEND_WITH_PREFIX`]).
    tagged: u32,
    /// Funding: the amount. Spending: the spent txid's prefix in the top
    /// bytes, big-endian; below it, in a bulk load, the spent
    /// transaction's tx_num + 1 when it is in the same run
    /// ([`ScriptRow::resolve_spend`]), which is never stored.
    payload: u64,
}

// What the memory figures assume (the run buffer counts rows by it).
const _: () = assert!(std::mem::size_of::<ScriptRow>() == 32);

impl ScriptRow {
    /// The first bytes of the script id, as the bytes' big-endian integer.
    fn id_top(&self, bytes: usize) -> u64 {
        self.id_high >> (64 - 8 * bytes)
    }

    /// The row's transaction.
    pub(crate) fn tx_num(&self) -> u64 {
        self.tx_num
    }

    /// Whether the row is a spend.
    pub fn is_spend(&self) -> bool {
        self.tagged & 1 == 1
    }

    /// Records, in a spend, that the transaction it spends from is
    /// `spent_tx_num` (found in a bulk load's run; see
    /// [`ScriptRow::spent_tx_num`]). A tx_num past 2^40 is not recorded.
    pub fn resolve_spend(&mut self, spent_tx_num: u64) {
        debug_assert!(self.is_spend());
        if spent_tx_num + 1 < SPENT_TX_NUM_LIMIT {
            self.payload |= spent_tx_num + 1;
        }
    }

    /// A spend's transaction spent from, as [`ScriptRow::resolve_spend`]
    /// recorded it.
    pub(crate) fn spent_tx_num(&self) -> Option<u64> {
        let resolved = self.payload & (SPENT_TX_NUM_LIMIT - 1);
        (self.is_spend() && resolved != 0).then(|| resolved - 1)
    }

    /// The funding row's output, as the spend that spends it names it:
    /// its tx_num and a funding tag (`vout · 4`) for a spend.
    pub(crate) fn spent_output(&self) -> Option<(u64, u32)> {
        Some((self.spent_tx_num()?, self.tagged & !SPEND_WITH_PREFIX))
    }

    /// The funding row's output: its tx_num and its tag.
    pub(crate) fn output(&self) -> (u64, u32) {
        (self.tx_num, self.tagged)
    }

    /// Whether a spend's row names `txid`'s prefix as the txid it spends
    /// from.
    pub(crate) fn has_spent_prefix(&self, txid: &[u8; 32]) -> bool {
        self.payload.to_be_bytes()[..SPENT_TXID_PREFIX_LEN] == txid[..SPENT_TXID_PREFIX_LEN]
    }

    /// The row's vout: a funding row's output, a spend's spent output.
    pub(crate) fn vout(&self) -> u32 {
        self.tagged >> 2
    }

    /// Leaves a spend's prefix out: the output it spends is the latest of
    /// the script's with its vout not taken before it (see
    /// [`RowKind::Spending`]).
    pub(crate) fn leave_prefix_out(&mut self) {
        debug_assert!(self.is_spend());
        self.tagged = (self.tagged & !SPEND_WITH_PREFIX) | 1;
    }

    /// Marks a funding row's output spent: its amount is not written.
    pub(crate) fn mark_spent(&mut self) {
        debug_assert!(!self.is_spend());
        self.tagged |= FUNDING_SPENT;
    }

    /// Whether two rows are of the same script.
    pub(crate) fn same_script(&self, other: &ScriptRow) -> bool {
        (self.id_high, self.id_low) == (other.id_high, other.id_low)
    }

    /// The partition of its history key (see `crate::partition_of`): the
    /// top 4 bits of the script id.
    pub fn partition(&self) -> usize {
        self.id_top_bits(4)
    }

    /// The top `bits` bits of the script id (a bulk load's run slice).
    pub(crate) fn id_top_bits(&self, bits: u32) -> usize {
        (self.id_high >> (64 - bits)) as usize
    }

    /// The stored key of the row's script and epoch.
    fn key(&self) -> HistoryKey {
        let mut id = [0u8; SCRIPT_ID_LEN];
        id[..8].copy_from_slice(&self.id_high.to_be_bytes());
        id[8..].copy_from_slice(&self.id_low.to_be_bytes()[..SCRIPT_ID_LEN - 8]);
        HistoryKey::new(&id, Epoch::of(self.tx_num))
    }

    /// Appends the row to a stored value as an entry after the one of
    /// tx_num `previous`; `first`: as a value's first entry, `previous`
    /// being its base (the epoch's or the run's first tx_num).
    fn write_entry(&self, out: &mut Vec<u8>, first: Option<First>, previous: u64) {
        write_tx_num(out, first, self.tx_num, previous);
        write_varint(out, u64::from(self.tagged));
        if self.tagged & 1 == 0 {
            if self.tagged & FUNDING_SPENT == 0 {
                write_varint(out, self.payload);
            }
        } else if self.tagged & SPEND_WITH_PREFIX == SPEND_WITH_PREFIX {
            out.extend_from_slice(&self.payload.to_be_bytes()[..SPENT_TXID_PREFIX_LEN]);
        }
    }
}

/// The bits of a spend's payload below its prefix, which
/// [`ScriptRow::resolve_spend`] may use.
const SPENT_TX_NUM_LIMIT: u64 = 1 << (64 - 8 * SPENT_TXID_PREFIX_LEN);

/// The first tx_num of the epoch a history key names: the base its
/// value's first entry counts from.
fn epoch_base(key: &[u8]) -> Option<u64> {
    Some(Epoch::decode(key.get(SCRIPT_ID_LEN..)?)?.start())
}

/// The stored key of `script_id`'s rows in the epoch of `tx_num`.
pub fn history_key(script_id: &[u8], tx_num: TxNum) -> Vec<u8> {
    HistoryKey::new(script_id, Epoch::of(tx_num.0))
        .as_bytes()
        .to_vec()
}

/// Bytes of a stored value's first tx_num, its offset in the epoch
/// (format 7): below 2^24, it took a 4-byte varint 7 times in 8. On the
/// 10M-transaction mainnet-profile chain that saved 0.66 bytes per
/// transaction. In the last epoch a key can name ([`EPOCH_MAX`]), which
/// later tx_nums share, the offset is a varint. A run's values count from
/// the run's first tx_num instead, as varints ([`Operands::for_run`]).
const FIRST_OFFSET_LEN: usize = 3;
const _: () = assert!(EPOCH_SHIFT as usize <= 8 * FIRST_OFFSET_LEN);

/// Whether the first entry of a value whose epoch starts at `base` gives
/// its offset as a varint: in the last epoch only.
fn offset_is_varint(base: u64) -> bool {
    base >> EPOCH_SHIFT >= EPOCH_MAX
}

/// How a value's first entry gives its tx_num.
#[derive(Clone, Copy)]
enum First {
    /// A stored value or merge operand: the offset in the epoch,
    /// [`FIRST_OFFSET_LEN`] bytes big-endian.
    EpochOffset,
    /// A run's value: a varint, from the run's first tx_num.
    RunDelta,
}

/// Appends an entry's tx_num: `first` for a value's first entry, a varint
/// delta from `previous` otherwise.
fn write_tx_num(out: &mut Vec<u8>, first: Option<First>, tx_num: u64, previous: u64) {
    match first {
        Some(First::EpochOffset) if !offset_is_varint(previous) => {
            let offset = (tx_num - previous).to_be_bytes();
            out.extend_from_slice(&offset[8 - FIRST_OFFSET_LEN..]);
        }
        Some(First::EpochOffset | First::RunDelta) | None => write_varint(out, tx_num - previous),
    }
}

/// One entry of a stored history value: its tx_num (see [`First`]; after
/// the first, a varint delta from the previous entry's), then the row's
/// tag and payload as [`ScriptRow`] writes them.
struct Entry<'a> {
    tx_num: u64,
    /// The entry without its tx_num: tag and payload.
    body: &'a [u8],
}

/// Reads the entries of a stored value, merge operand or run value,
/// checking each.
fn entries(base: u64, value: &[u8], first: First) -> impl Iterator<Item = Option<Entry<'_>>> {
    let mut rest = value;
    let mut previous = base;
    let mut first = Some(first);
    let mut failed = false;
    std::iter::from_fn(move || {
        if rest.is_empty() || failed {
            return None;
        }
        let entry = (|| {
            let step = match first.take() {
                Some(First::EpochOffset) if !offset_is_varint(base) => {
                    let bytes = rest.get(..FIRST_OFFSET_LEN)?;
                    rest = &rest[FIRST_OFFSET_LEN..];
                    bytes.iter().fold(0, |n, &b| n << 8 | u64::from(b))
                }
                Some(First::EpochOffset | First::RunDelta) | None => read_varint(&mut rest)?,
            };
            let tx_num = previous.checked_add(step)?;
            let start = rest;
            let tagged = u32::try_from(read_varint(&mut rest)?).ok()?;
            if tagged & 1 == 0 {
                if tagged & FUNDING_SPENT == 0 {
                    read_varint(&mut rest)?;
                }
            } else if tagged & SPEND_WITH_PREFIX == SPEND_WITH_PREFIX {
                rest = rest.get(SPENT_TXID_PREFIX_LEN..)?;
            }
            let body = &start[..start.len() - rest.len()];
            previous = tx_num;
            Some(Entry { tx_num, body })
        })();
        failed = entry.is_none();
        Some(entry)
    })
}

/// A sorted batch's rows as one stored value per script and epoch (a
/// merge operand for RocksDB), or, for a bulk load's run, one value per
/// script. A lending iterator, so that a batch's operands need no
/// allocation each.
pub struct Operands<'a> {
    rows: &'a [ScriptRow],
    key: Option<HistoryKey>,
    value: Vec<u8>,
    /// A run's first tx_num: `Some` for a run's values (see
    /// [`Operands::for_run`]).
    run_base: Option<u64>,
}

impl<'a> Operands<'a> {
    /// Over `sorted`, rows in [`ScriptRow`]'s order.
    pub fn new(sorted: &'a [ScriptRow]) -> Operands<'a> {
        debug_assert!(sorted.is_sorted());
        Operands {
            rows: sorted,
            key: None,
            value: Vec::new(),
            run_base: None,
        }
    }

    /// Over `sorted`, as a bulk load's run holds them: a script's rows of
    /// every epoch as one value under its script id alone, the first entry
    /// a varint counting from `base`, the run's first tx_num. One of
    /// mainnet's ~650 runs spans ~1.8M transactions, under 2^21, so that
    /// entry takes 3 bytes, where a varint from its epoch's start took 4;
    /// and a key needs no epoch. A tenth of a run's bytes (the merge puts
    /// the epochs back, [`EpochValues`]).
    pub(crate) fn for_run(sorted: &'a [ScriptRow], base: u64) -> Operands<'a> {
        Operands {
            run_base: Some(base),
            ..Operands::new(sorted)
        }
    }

    /// The next script and epoch's stored key and value (a run's: the
    /// next script's).
    pub fn next_operand(&mut self) -> Option<(&[u8], &[u8])> {
        let first = self.rows.first()?;
        let key = self.key.insert(first.key());
        self.value.clear();
        let epoch = Epoch::of(first.tx_num);
        let (key_len, mut previous) = match self.run_base {
            Some(base) => (SCRIPT_ID_LEN, base),
            None => (key.len, epoch.start()),
        };
        let mut taken = 0;
        let mut first_entry = Some(match self.run_base {
            Some(_) => First::RunDelta,
            None => First::EpochOffset,
        });
        for row in self.rows {
            if (row.id_high, row.id_low) != (first.id_high, first.id_low)
                || (self.run_base.is_none() && Epoch::of(row.tx_num) != epoch)
            {
                break;
            }
            row.write_entry(&mut self.value, first_entry.take(), previous);
            previous = row.tx_num;
            taken += 1;
        }
        self.rows = &self.rows[taken..];
        Some((&key.bytes[..key_len], &self.value))
    }
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
        for entry in entries(base, part, First::EpochOffset) {
            let entry = entry?;
            if first {
                match last {
                    None => write_tx_num(&mut out, Some(First::EpochOffset), entry.tx_num, base),
                    Some(last) => write_varint(&mut out, entry.tx_num.checked_sub(last)?),
                }
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
    let mut entries = entries(base.unwrap_or(0), value, First::EpochOffset);
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
    for entry in entries(base, value, First::EpochOffset) {
        let entry = entry.ok_or_else(bad)?;
        if entry.tx_num >= first_removed.0 {
            break;
        }
        end = offset_of(value, entry.body) + entry.body.len();
    }
    Ok((end > 0).then(|| value[..end].to_vec()))
}

/// A row's kind from its tag and payload; `None` unless the
/// payload is exactly what [`ScriptRow`] writes.
fn decode_row(tx_num: TxNum, tagged: u64, payload: &[u8]) -> Option<HistoryRow> {
    let tagged = u32::try_from(tagged).ok()?;
    let mut rest = payload;
    let kind = if tagged & 1 == 0 {
        RowKind::Funding {
            vout: tagged >> 2,
            amount: if tagged & FUNDING_SPENT == 0 {
                Some(read_varint(&mut rest)?)
            } else {
                None
            },
        }
    } else {
        let prefix = if tagged & SPEND_WITH_PREFIX == SPEND_WITH_PREFIX {
            let prefix: [u8; SPENT_TXID_PREFIX_LEN] =
                rest.get(..SPENT_TXID_PREFIX_LEN)?.try_into().ok()?;
            rest = &rest[SPENT_TXID_PREFIX_LEN..];
            Some(prefix)
        } else {
            None
        };
        RowKind::Spending {
            prev_txid_prefix: prefix,
            prev_vout: tagged >> 2,
        }
    };
    rest.is_empty().then_some(HistoryRow { tx_num, kind })
}

/// The key prefix under which all rows of `scripthash` are stored.
pub fn history_prefix(scripthash: &ScriptHash) -> &[u8] {
    &scripthash.0[..SCRIPT_ID_LEN]
}

/// The undo record of a block whose history rows are `rows`: the distinct
/// undo buckets they fall in, ascending, each written as its difference
/// from the one before (the first from zero) in LEB128. A block's ~10,000
/// scripts are ~2^18 apart in 32-bit bucket space: 3 bytes each instead of
/// 4.
pub fn undo_record<'a>(rows: impl Iterator<Item = &'a ScriptRow>) -> Vec<u8> {
    let mut buckets: Vec<u32> = rows.map(|row| row.id_top(UNDO_BUCKET_LEN) as u32).collect();
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

    /// The stored values of `rows` (sorted here) written as one batch.
    fn operands(rows: &[ScriptRow]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut sorted = rows.to_vec();
        sorted.sort_unstable();
        let mut operands = Operands::new(&sorted);
        let mut out = Vec::new();
        while let Some((key, value)) = operands.next_operand() {
            out.push((key.to_vec(), value.to_vec()));
        }
        out
    }

    #[test]
    fn rows_round_trip() {
        let txid: Txid = "a6c9c361bd0bc536d6a22648efbf8f9b200e425ef6c3a7a9669dc444c532a347"
            .parse()
            .unwrap();
        let s = sh(1, 2);
        for row in [
            HistoryRow::funding(TxNum(0), 0, 0),
            HistoryRow::funding(TxNum(TxNum::MAX), (1 << 30) - 1, u64::MAX),
            // A spent output whose amount a bulk load left out.
            HistoryRow {
                tx_num: TxNum(77),
                kind: RowKind::Funding {
                    vout: 3,
                    amount: None,
                },
            },
            HistoryRow::spending(TxNum(12345), &txid, 70000),
            HistoryRow::spending(TxNum(12345), &txid, (1 << 30) - 1),
        ] {
            let stored = operands(&[row.of(&s)]);
            let [(key, value)] = &stored[..] else {
                panic!("one value for one row: {stored:?}");
            };
            assert!(key.starts_with(history_prefix(&s)));
            assert_eq!(decode_history_value(key, value).unwrap(), [row]);
        }
    }

    #[test]
    fn epochs_past_the_one_byte_ones_keep_keys_in_chain_order() {
        let s = sh(1, 2);
        // Both sides of the one-byte epochs, the last epoch and past it
        // (which shares it), and TxNum::MAX: in chain order.
        let mut tx_nums: Vec<u64> = [0, 1, 254, 255, 256, 0xFFFF, EPOCH_MAX - 1, EPOCH_MAX]
            .iter()
            .map(|&e| (e << EPOCH_SHIFT) + 7)
            .chain([(EPOCH_MAX + 2) << EPOCH_SHIFT, TxNum::MAX])
            .collect();
        tx_nums.sort_unstable();
        let rows: Vec<HistoryRow> = tx_nums
            .iter()
            .map(|&tx_num| HistoryRow::funding(TxNum(tx_num), 1, tx_num >> 3))
            .collect();
        let stored = operands(&rows.iter().map(|r| r.of(&s)).collect::<Vec<_>>());
        let mut epochs: Vec<u64> = tx_nums.iter().map(|&t| Epoch::of(t).0).collect();
        epochs.dedup();
        let lengths: Vec<usize> = stored.iter().map(|(k, _)| k.len()).collect();
        let expected: Vec<usize> = epochs
            .iter()
            .map(|&e| SCRIPT_ID_LEN + if e < 255 { 1 } else { 3 })
            .collect();
        assert_eq!(lengths, expected);
        let keys: Vec<&Vec<u8>> = stored.iter().map(|(k, _)| k).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        let decoded: Vec<HistoryRow> = stored
            .iter()
            .flat_map(|(k, v)| decode_history_value(k, v).unwrap())
            .collect();
        assert_eq!(decoded, rows);
        // A lone 0xFF, or the three-byte form with a byte more, is no
        // epoch.
        let mut long = history_prefix(&s).to_vec();
        long.extend_from_slice(&[0xFF]);
        assert!(decode_history_value(&long, &stored[0].1).is_err());
        long.extend_from_slice(&[0, 0, 0]);
        assert!(decode_history_value(&long, &stored[0].1).is_err());
    }

    #[test]
    fn rows_sort_by_script_id_bytes_then_chain_order() {
        // Scripts that differ in the id's first byte, its 9th and its last:
        // row order is the order of their keys' bytes.
        let scripts = [sh(1, 2), sh(1, 3), sh(2, 0), {
            let mut b = sh(1, 2);
            b.0[8] = 0;
            b
        }];
        let mut rows = Vec::new();
        for s in &scripts {
            for tx in [300u64, 5, 1 << EPOCH_SHIFT] {
                rows.push(HistoryRow::funding(TxNum(tx), 200, 1).of(s));
                rows.push(HistoryRow::funding(TxNum(tx + 1), 0, 1).of(s));
            }
        }
        let stored = operands(&rows);
        // One value per script and epoch, in key order, holding every row.
        let keys: Vec<&Vec<u8>> = stored.iter().map(|(k, _)| k).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        let mut decoded = 0;
        for (key, value) in &stored {
            let tx_nums: Vec<u64> = decode_history_value(key, value)
                .unwrap()
                .iter()
                .map(|r| r.tx_num.0)
                .collect();
            assert!(tx_nums.is_sorted(), "{tx_nums:?}");
            decoded += tx_nums.len();
        }
        assert_eq!(decoded, rows.len());
        // A script's rows sort together, whatever the other scripts of its
        // bucket.
        let a = HistoryRow::funding(TxNum(9), 1, 1000);
        assert_eq!(
            scripts[0].0[..SCRIPT_BUCKET_LEN],
            scripts[1].0[..SCRIPT_BUCKET_LEN]
        );
        assert!(a.of(&scripts[0]) < a.of(&scripts[1]));
        assert!(a.of(&scripts[3]) < a.of(&scripts[0]));
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
            HistoryRow::spending(TxNum(epoch - 1), &txid, 0),
            HistoryRow::funding(TxNum(epoch), 1, u64::MAX),
            HistoryRow::spending(TxNum(epoch + epoch / 2), &txid, 70000),
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
            let batch: Vec<ScriptRow> = batch.iter().map(|r| r.of(&s)).collect();
            for (key, operand) in operands(&batch) {
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
        let one = operands(&[rows[0].of(&s)]);
        let two = operands(&[rows[1].of(&s)]);
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
        let earlier = operands(&[rows[0].of(&s)]);
        assert_eq!(
            merge_history(key, Some(value), [earlier[0].1.as_slice()].into_iter()),
            None
        );
    }

    #[test]
    fn undo_records_round_trip_and_refuse_damage() {
        let rows: Vec<ScriptRow> = [9u8, 1, 9, 0, 255]
            .iter()
            .map(|&b| HistoryRow::funding(TxNum(5), 0, 1).of(&ScriptHash([b; 32])))
            .collect();
        let record = undo_record(rows.iter());
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
        // Output 5 is tagged 20, one byte after the 3-byte offset of tx 5;
        // written in two, it is refused.
        let stored = operands(&[HistoryRow::funding(TxNum(5), 5, 1000).of(&s)]);
        let (key, value) = &stored[0];
        assert_eq!(value[..4], [0, 0, 5, 20]);
        let mut long = value[..3].to_vec();
        long.extend_from_slice(&[0x94, 0x00]);
        long.extend_from_slice(&value[4..]);
        assert!(decode_history_value(key, value).is_ok());
        assert!(decode_history_value(key, &long).is_err());
    }
}
