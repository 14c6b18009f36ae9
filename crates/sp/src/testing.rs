//! Transactions and keys for the unit tests.

use bitcoin::hashes::{sha256, Hash};
use bitcoin::secp256k1::{PublicKey, SecretKey};
use bitcoin::{
    absolute, transaction, Amount, CompressedPublicKey, OutPoint, ScriptBuf, Sequence, Transaction,
    TxIn, TxOut, Txid, Witness,
};

use crate::SECP;

pub(crate) fn secret(i: u32) -> SecretKey {
    SecretKey::from_slice(sha256::Hash::hash(&i.to_le_bytes()).as_byte_array()).unwrap()
}

pub(crate) fn public(i: u32) -> PublicKey {
    secret(i).public_key(&SECP)
}

pub(crate) fn p2wpkh_script(key: &PublicKey) -> ScriptBuf {
    ScriptBuf::new_p2wpkh(&CompressedPublicKey(*key).wpubkey_hash())
}

pub(crate) fn taproot_script(x_only: [u8; 32]) -> ScriptBuf {
    let mut script = vec![0x51, 0x20];
    script.extend_from_slice(&x_only);
    ScriptBuf::from_bytes(script)
}

pub(crate) fn output(script_pubkey: ScriptBuf) -> TxOut {
    TxOut {
        value: Amount::from_sat(1_000),
        script_pubkey,
    }
}

/// An input spending output `vout` of a transaction named by `txid_byte`.
pub(crate) fn input(txid_byte: u8, vout: u32, script_sig: ScriptBuf, witness: &[&[u8]]) -> TxIn {
    TxIn {
        previous_output: OutPoint {
            txid: Txid::from_byte_array([txid_byte; 32]),
            vout,
        },
        script_sig,
        sequence: Sequence::MAX,
        witness: Witness::from_slice(witness),
    }
}

/// A P2WPKH spend by key `i`, and the output it spends.
pub(crate) fn p2wpkh_spend(i: u32) -> (TxIn, TxOut) {
    let key = public(i);
    (
        input(
            i as u8,
            0,
            ScriptBuf::new(),
            &[&[0x30; 71], &key.serialize()],
        ),
        output(p2wpkh_script(&key)),
    )
}

pub(crate) fn transaction(input: Vec<TxIn>, output: Vec<TxOut>) -> Transaction {
    Transaction {
        version: transaction::Version::TWO,
        lock_time: absolute::LockTime::ZERO,
        input,
        output,
    }
}

pub(crate) fn coinbase() -> Transaction {
    transaction(
        vec![TxIn {
            previous_output: OutPoint::null(),
            script_sig: ScriptBuf::from_bytes(vec![1, 1]),
            sequence: Sequence::MAX,
            witness: Witness::new(),
        }],
        vec![output(ScriptBuf::new())],
    )
}
