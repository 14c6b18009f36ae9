//! Bitcoin Core's undo records (`CBlockUndo` in `revNNNNN.dat`), decoded
//! into the outputs a block spends.
//!
//! Input: byte 0 picks the mode.
//! - Even: byte 1 is the number of transactions of a block besides its
//!   coinbase (up to 15), each of the next that many bytes the number of
//!   inputs of one (up to 63), and the rest is the undo record (the seeds
//!   are Core's, from regtest). Properties: no panic; a decoded record
//!   gives exactly one output per input, each script no longer than
//!   consensus allows.
//! - Odd: the rest is an `arbitrary` list of spent outputs per transaction,
//!   written the way Core writes them (`TxInUndoFormatter`: VARINT code,
//!   the legacy version byte, `CompressAmount`, `ScriptCompression`).
//!   Property: decoding gives those outputs back, in order.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use bitcoin::secp256k1::{PublicKey, Secp256k1, SecretKey};
use bitcoin::{absolute, transaction, Amount, Block, ScriptBuf, Transaction, TxIn, TxOut};
use libfuzzer_sys::fuzz_target;
use osprey_chain::fuzzing::decode_block_undo;

/// Consensus: the largest script that can be spent.
const SCRIPT_BYTES_MAX: usize = 10_000;
/// Core's MAX_MONEY, in satoshis.
const MONEY_MAX: u64 = 21_000_000 * 100_000_000;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        decode_any(rest);
    } else {
        if let Ok(spent) = Vec::<Vec<Spent>>::arbitrary_take_rest(Unstructured::new(rest)) {
            round_trip(&spent);
        }
    }
});

fn decode_any(data: &[u8]) {
    let Some((&txs, rest)) = data.split_first() else {
        return;
    };
    let txs = usize::from(txs % 16);
    if rest.len() < txs {
        return;
    }
    let (shape, undo) = rest.split_at(txs);
    let inputs: Vec<usize> = shape.iter().map(|&n| usize::from(n % 64)).collect();
    let block = block_with_inputs(&inputs);
    if let Ok(outputs) = decode_block_undo(undo, &block) {
        assert_eq!(outputs.len(), inputs.iter().sum::<usize>());
        for out in outputs {
            assert!(out.script_pubkey.len() <= SCRIPT_BYTES_MAX);
        }
    }
}

/// A block of a coinbase and transactions with these many inputs: all the
/// decoder looks at.
fn block_with_inputs(inputs: &[usize]) -> Block {
    let tx = |n: usize| Transaction {
        version: transaction::Version::TWO,
        lock_time: absolute::LockTime::ZERO,
        input: vec![TxIn::default(); n],
        output: vec![],
    };
    let mut block = bitcoin::constants::genesis_block(bitcoin::Network::Regtest);
    block.txdata.extend(inputs.iter().map(|&n| tx(n)));
    block
}

#[derive(Arbitrary, Debug)]
struct Spent {
    height: u32,
    coinbase: bool,
    amount: u64,
    script: Script,
}

/// Scripts of each form Core compresses, and any other.
#[derive(Arbitrary, Debug)]
enum Script {
    P2pkh([u8; 20]),
    P2sh([u8; 20]),
    /// A compressed public key (any x: Core does not check it).
    P2pkCompressed {
        odd: bool,
        x: [u8; 32],
    },
    /// An uncompressed public key, from a secret key.
    P2pkUncompressed([u8; 32]),
    Raw(Vec<u8>),
}

impl Script {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Script::P2pkh(hash) => [&[0x76, 0xa9, 20], &hash[..], &[0x88, 0xac]].concat(),
            Script::P2sh(hash) => [&[0xa9, 20], &hash[..], &[0x87]].concat(),
            Script::P2pkCompressed { odd, x } => {
                [&[33, 2 + u8::from(*odd)], &x[..], &[0xac]].concat()
            }
            Script::P2pkUncompressed(secret) => {
                let secret = SecretKey::from_slice(secret)
                    .unwrap_or_else(|_| SecretKey::from_slice(&[1; 32]).expect("a valid key"));
                let key = PublicKey::from_secret_key(&Secp256k1::signing_only(), &secret);
                [&[65][..], &key.serialize_uncompressed(), &[0xac]].concat()
            }
            Script::Raw(bytes) => bytes.iter().copied().take(SCRIPT_BYTES_MAX).collect(),
        }
    }
}

fn round_trip(spent: &[Vec<Spent>]) {
    let inputs: Vec<usize> = spent.iter().map(Vec::len).collect();
    let block = block_with_inputs(&inputs);
    let mut undo = Vec::new();
    write_compact_size(&mut undo, spent.len() as u64);
    let mut expected = Vec::new();
    for tx in spent {
        write_compact_size(&mut undo, tx.len() as u64);
        for s in tx {
            // Core's heights fit 31 bits: the code is height * 2 + coinbase.
            let height = s.height >> 1;
            let amount = s.amount % (MONEY_MAX + 1);
            let script = s.script.bytes();
            write_varint(&mut undo, u64::from(height) * 2 + u64::from(s.coinbase));
            if height > 0 {
                undo.push(0); // The legacy transaction version.
            }
            write_varint(&mut undo, compress_amount(amount));
            write_script(&mut undo, &script);
            expected.push(TxOut {
                value: Amount::from_sat(amount),
                script_pubkey: ScriptBuf::from_bytes(script),
            });
        }
    }
    let decoded = decode_block_undo(&undo, &block)
        .unwrap_or_else(|e| panic!("Core's encoding does not decode: {e}"));
    assert_eq!(decoded, expected);
}

/// Bitcoin's CompactSize (the counts of `CBlockUndo` and `CTxUndo`).
fn write_compact_size(out: &mut Vec<u8>, n: u64) {
    match n {
        0..=0xfc => out.push(n as u8),
        0xfd..=0xffff => {
            out.push(0xfd);
            out.extend_from_slice(&(n as u16).to_le_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(0xfe);
            out.extend_from_slice(&(n as u32).to_le_bytes());
        }
        _ => {
            out.push(0xff);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
}

/// Core's `WriteVarInt` (serialize.h), written here from Core's code, not
/// from the decoder under test.
fn write_varint(out: &mut Vec<u8>, mut n: u64) {
    let mut tmp = Vec::new();
    loop {
        tmp.push((n & 0x7f) as u8 | if tmp.is_empty() { 0 } else { 0x80 });
        if n <= 0x7f {
            break;
        }
        n = (n >> 7) - 1;
    }
    out.extend(tmp.iter().rev());
}

/// Core's `CompressAmount` (compressor.cpp).
fn compress_amount(mut n: u64) -> u64 {
    if n == 0 {
        return 0;
    }
    let mut e = 0;
    while n % 10 == 0 && e < 9 {
        n /= 10;
        e += 1;
    }
    if e < 9 {
        let d = n % 10;
        n /= 10;
        1 + (n * 9 + d - 1) * 10 + e
    } else {
        1 + (n - 1) * 10 + 9
    }
}

/// Core's `ScriptCompression` (compressor.h, `CompressScript`).
fn write_script(out: &mut Vec<u8>, s: &[u8]) {
    let is_p2pkh = s.len() == 25 && s[..3] == [0x76, 0xa9, 20] && s[23..] == [0x88, 0xac];
    let is_p2sh = s.len() == 23 && s[..2] == [0xa9, 20] && s[22] == 0x87;
    let is_compressed_key = s.len() == 35 && s[0] == 33 && s[34] == 0xac && matches!(s[1], 2 | 3);
    let is_uncompressed_key = s.len() == 67
        && s[0] == 65
        && s[66] == 0xac
        && s[1] == 4
        && PublicKey::from_slice(&s[1..66]).is_ok();
    if is_p2pkh {
        out.push(0);
        out.extend_from_slice(&s[3..23]);
    } else if is_p2sh {
        out.push(1);
        out.extend_from_slice(&s[2..22]);
    } else if is_compressed_key {
        out.push(s[1]);
        out.extend_from_slice(&s[2..34]);
    } else if is_uncompressed_key {
        out.push(4 | (s[65] & 1));
        out.extend_from_slice(&s[2..34]);
    } else {
        write_varint(out, s.len() as u64 + 6);
        out.extend_from_slice(s);
    }
}
