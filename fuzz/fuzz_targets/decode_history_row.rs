//! The index's row codecs (`osprey_store::codec`).
//!
//! Input: byte 0 picks the mode.
//! - Even: arbitrary bytes as a stored key and value: 32 bytes of script
//!   hash (unused), a byte splitting the rest into key and value.
//!   Properties: decoding never panics; read as a stored history value or
//!   a `txid` bucket's value, one that decodes merges back to itself and,
//!   cut before any of its rows or transactions, gives the ones before.
//! - Odd: `arbitrary` rows. Properties: a row written as a value decodes
//!   back to itself, under a key that starts with the script's prefix; a
//!   script sharing the bucket but not the whole id sorts apart; of two
//!   rows of a script, the one of the earlier transaction sorts first
//!   (chain order); the two written as merge operands, in either of two
//!   batches or in one, give the same stored values, which decode to the
//!   two rows; a transaction in a `txid` bucket's value is among its
//!   txid's candidates.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use bitcoin::hashes::Hash;
use bitcoin::Txid;
use libfuzzer_sys::fuzz_target;
use osprey_core::{ScriptHash, TxNum};
use osprey_store::codec::{
    decode_history_value, decode_txid_value, history_prefix, merge_history, merge_txids,
    truncate_history_value,
    truncate_txid_value, txid_bucket_key, txid_candidates, txid_check, txid_prefix, txid_value,
    HistoryRow, Operands, RowKind, ScriptRow, SCRIPT_BUCKET_LEN, SCRIPT_ID_LEN,
};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        decode_any(rest);
    } else if let Ok(rows) =
        <(ScriptHashIn, Row, Row)>::arbitrary_take_rest(Unstructured::new(rest))
    {
        round_trip(rows);
    }
});

fn decode_any(data: &[u8]) {
    if data.len() < 33 {
        return;
    }
    let rest = &data[32..];
    let split = usize::from(rest[0]).min(rest.len() - 1);
    let (key, value) = rest[1..].split_at(split);
    if let Ok(rows) = decode_history_value(key, value) {
        let merged = merge_history(key, None, [value].into_iter());
        assert_eq!(merged.as_deref(), Some(value));
        for (i, row) in rows.iter().enumerate() {
            let kept = rows.iter().take_while(|r| r.tx_num < row.tx_num).count();
            let cut = truncate_history_value(key, value, row.tx_num).expect("decoded above");
            let cut_rows = cut.map_or(Vec::new(), |v| decode_history_value(key, &v).unwrap());
            assert_eq!(cut_rows, rows[..kept], "cut before row {i}");
        }
    }
    if let Ok(entries) = decode_txid_value(key, value) {
        assert_eq!(txid_value(entries.iter().copied()), value, "one encoding");
        assert_eq!(merge_txids(None, [value].into_iter()).as_deref(), Some(value));
        for (i, &(tx_num, _)) in entries.iter().enumerate() {
            let cut = truncate_txid_value(key, value, TxNum(tx_num)).expect("decoded above");
            let kept = (i > 0).then(|| txid_value(entries[..i].iter().copied()));
            assert_eq!(cut, kept, "cut before transaction {i}");
        }
    }
}

#[derive(Arbitrary, Debug)]
struct ScriptHashIn([u8; 32]);

#[derive(Arbitrary, Debug)]
struct Row {
    tx_num: u64,
    spending: bool,
    /// A funding row's vout, quartered: a row's vout is below 2^30
    /// (`HistoryRow::of`).
    vout: u32,
    amount_or_prev_vout: u64,
    prev_txid: [u8; 32],
}

impl Row {
    fn row(&self) -> HistoryRow {
        let tx_num = TxNum(self.tx_num % (TxNum::MAX + 1));
        if self.spending {
            let prev_txid = Txid::from_byte_array(self.prev_txid);
            HistoryRow::spending(tx_num, &prev_txid, self.amount_or_prev_vout as u32 >> 2)
        } else {
            HistoryRow::funding(tx_num, self.vout >> 2, self.amount_or_prev_vout)
        }
    }
}

/// The stored values of `rows` written as one batch.
fn stored(mut rows: Vec<ScriptRow>) -> Vec<(Vec<u8>, Vec<u8>)> {
    rows.sort_unstable();
    let mut operands = Operands::new(&rows);
    let mut out = Vec::new();
    while let Some((key, value)) = operands.next_operand() {
        out.push((key.to_vec(), value.to_vec()));
    }
    out
}

fn round_trip((ScriptHashIn(hash), a, b): (ScriptHashIn, Row, Row)) {
    let scripthash = ScriptHash(hash);
    let (a, b) = (a.row(), b.row());
    let one = stored(vec![a.of(&scripthash)]);
    assert_eq!(one.len(), 1);
    assert!(one[0].0.starts_with(history_prefix(&scripthash)));
    assert_eq!(decode_history_value(&one[0].0, &one[0].1).ok(), Some(vec![a]));
    if let RowKind::Spending {
        prev_txid_prefix, ..
    } = a.kind
    {
        // The indexer's spends carry their prefix; only a bulk load's
        // merge leaves it out.
        assert!(prev_txid_prefix.is_some());
    }
    // Another script in the same bucket, with another id.
    let mut other = hash;
    other[SCRIPT_ID_LEN - 1] ^= 1;
    let other = ScriptHash(other);
    assert_eq!(other.0[..SCRIPT_BUCKET_LEN], scripthash.0[..SCRIPT_BUCKET_LEN]);
    assert_eq!(
        a.of(&other) < a.of(&scripthash),
        other.0[..SCRIPT_ID_LEN] < scripthash.0[..SCRIPT_ID_LEN]
    );
    if a.tx_num != b.tx_num {
        assert_eq!(
            a.of(&scripthash) < b.of(&scripthash),
            a.tx_num < b.tx_num,
            "{a:?} {b:?}"
        );
    }
    let txid = Txid::from_byte_array(hash);
    let prefix = txid_prefix(&txid);
    let value = txid_value([(a.tx_num.0, txid_check(prefix))]);
    let candidates = txid_candidates(&txid_bucket_key(prefix), &value, prefix);
    assert_eq!(candidates.ok(), Some(vec![a.tx_num]));
    stored_values(&scripthash, a, b);
}

/// Rows `a` and `b` written as merge operands, together or one batch each
/// (in chain order), give the same stored values, which decode to them.
fn stored_values(scripthash: &ScriptHash, a: HistoryRow, b: HistoryRow) {
    let mut rows = [a.of(scripthash), b.of(scripthash)];
    rows.sort_unstable();
    if rows[0] == rows[1] {
        return;
    }
    let together = stored(rows.to_vec());
    let mut apart = stored(rows[..1].to_vec());
    for (key, operand) in stored(rows[1..].to_vec()) {
        match apart.iter_mut().find(|(k, _)| *k == key) {
            Some((k, value)) => {
                *value = merge_history(k, Some(value), [operand.as_slice()].into_iter()).unwrap()
            }
            None => apart.push((key, operand)),
        }
    }
    assert_eq!(together, apart);
    let decoded: Vec<HistoryRow> = together
        .iter()
        .flat_map(|(k, v)| decode_history_value(k, v).unwrap())
        .collect();
    let mut expected = vec![a, b];
    // In the rows' order.
    expected.sort_by_key(|r| r.of(scripthash));
    assert_eq!(decoded, expected);
}
