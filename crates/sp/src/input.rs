//! Which inputs count and what a transaction contributes: BIP-352 "Inputs For
//! Shared Secret Derivation" and "Scanning silent payment eligible
//! transactions", exactly as `reference.py` (`get_pubkey_from_input`)
//! reads them.

use bitcoin::hashes::{hash160, Hash};
use bitcoin::secp256k1::{PublicKey, Scalar, SecretKey};
use bitcoin::{Script, Transaction, TxOut, Witness, WitnessVersion};

use crate::{hash, Error, SECP};

/// BIP-341's NUMS point `H`, the x-coordinate of an internal key nobody can
/// spend with. A script-path spend whose control block names it does not
/// count ("P2TR", "Script path spend").
const NUMS_H: [u8; 32] = [
    0x50, 0x92, 0x9b, 0x74, 0xc1, 0xa0, 0x49, 0x54, 0xb7, 0x8b, 0x4b, 0x60, 0x35, 0xe9, 0x7a, 0x5e,
    0x07, 0x8a, 0x5a, 0x0f, 0x28, 0xec, 0x96, 0xd5, 0x47, 0xbf, 0xee, 0x9a, 0xce, 0x80, 0x3a, 0xc0,
];

/// BIP-341: a last witness item starting with this byte, when there are at
/// least two items, is the annex, not a control block.
const ANNEX_TAG: u8 = 0x50;

/// The public key an input contributes to the shared secret, or `None` when
/// it does not count. `spent` is the script of the output it spends.
///
/// Only P2PKH, P2SH-P2WPKH, P2WPKH and P2TR count, and only with compressed
/// or x-only keys ("For all of the output types listed, only X-only and
/// compressed public keys are permitted"); a key that does not parse makes
/// the input not count, never an error.
pub fn input_public_key(
    spent: &Script,
    script_sig: &Script,
    witness: &Witness,
) -> Option<PublicKey> {
    if spent.is_p2pkh() {
        p2pkh_key(spent, script_sig)
    } else if spent.is_p2sh() {
        // "P2SH-P2WPKH": the redeem script is the scriptSig after its first
        // byte (the push), as `reference.py` takes it; any other P2SH input
        // does not count (vector "Skip invalid P2SH inputs").
        let redeem = Script::from_bytes(script_sig.as_bytes().get(1..)?);
        redeem.is_p2wpkh().then(|| last_item_key(witness)).flatten()
    } else if spent.is_p2wpkh() {
        // "P2WPKH": the last witness item; a 65-byte key does not parse as
        // compressed (vector "P2PKH and P2WPKH Uncompressed Keys are skipped").
        last_item_key(witness)
    } else if spent.is_p2tr() {
        p2tr_key(spent, witness)
    } else {
        None
    }
}

/// "P2PKH": "The receiver MUST parse the scriptSig for the public key, even
/// if the scriptSig does not match the template". Like `reference.py`, a
/// 33-byte window slides from the scriptSig's end towards its start; the
/// first window that hashes to the script's key hash and parses as a
/// compressed key is the key. A standard scriptSig matches at once (the key
/// is its last push); only a malleated one costs more hashing, and an
/// uncompressed (or hybrid) key can never be found, as the BIP requires.
fn p2pkh_key(spent: &Script, script_sig: &Script) -> Option<PublicKey> {
    // OP_DUP OP_HASH160 <20> OP_EQUALVERIFY OP_CHECKSIG: the hash is bytes 3..23.
    let key_hash = &spent.as_bytes()[3..23];
    script_sig
        .as_bytes()
        .windows(33)
        .rev()
        .filter(|window| hash160::Hash::hash(window).as_byte_array() == key_hash)
        .find_map(|window| PublicKey::from_slice(window).ok())
}

/// The last witness item as a 33-byte compressed key (P2WPKH, P2SH-P2WPKH).
fn last_item_key(witness: &Witness) -> Option<PublicKey> {
    // `from_slice` would also take a 65-byte uncompressed key.
    witness
        .last()
        .filter(|item| item.len() == 33)
        .and_then(|item| PublicKey::from_slice(item).ok())
}

/// "P2TR": the output key itself (key path, and script path too, against
/// CoinJoin malleability), except a script-path spend whose internal key is
/// `H`. The key is the x-coordinate's lift with even y (BIP-340), which is
/// what the sender's negation of odd-y secret keys ("Creating outputs")
/// agrees with.
fn p2tr_key(spent: &Script, witness: &Witness) -> Option<PublicKey> {
    // `reference.py` reads keys only from a non-empty witness.
    let mut items = witness.len();
    if items == 0 {
        return None;
    }
    if items > 1 && witness.last().and_then(|last| last.first()) == Some(&ANNEX_TAG) {
        items -= 1;
    }
    if items > 1 {
        // Script path: the control block is the last item left, the internal
        // key its bytes 1..33 (BIP-341). A control block too short to hold
        // one cannot name H, so the input counts, as in `reference.py`.
        let control_block = witness.nth(items - 1)?;
        if control_block.get(1..33) == Some(&NUMS_H[..]) {
            return None;
        }
    }
    let mut even = [0u8; 33];
    even[0] = 0x02;
    even[1..].copy_from_slice(&spent.as_bytes()[2..34]);
    // An x-coordinate off the curve cannot be a key: the input does not count.
    PublicKey::from_slice(&even).ok()
}

/// What an eligible transaction contributes to every receiver's scan: `A`,
/// the sum of its counted input keys, and `input_hash`. A receiver's shared
/// secret is `input_hash·b_scan·A`; the tweak a client gets is
/// `input_hash·A`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TweakData {
    input_key_sum: PublicKey,
    input_hash: SecretKey,
}

impl TweakData {
    /// From a record's bytes: `A` uncompressed without its SEC1 prefix
    /// (`ser256(x) || ser256(y)`), and `input_hash`. Malformed bytes are an
    /// error, not a panic: the record comes from a file.
    pub fn from_bytes(input_key_sum: &[u8; 64], input_hash: &[u8; 32]) -> Result<TweakData, Error> {
        let mut sec1 = [0x04; 65];
        sec1[1..].copy_from_slice(input_key_sum);
        Ok(TweakData {
            input_key_sum: PublicKey::from_slice(&sec1)
                .map_err(|_| Error::Record("A is not a point on the curve"))?,
            input_hash: SecretKey::from_slice(input_hash)
                .map_err(|_| Error::Record("input_hash is not a valid scalar"))?,
        })
    }

    /// `A` as a record keeps it, `ser256(x) || ser256(y)`.
    pub fn input_key_sum_bytes(&self) -> [u8; 64] {
        let mut bytes = [0u8; 64];
        bytes.copy_from_slice(&self.input_key_sum.serialize_uncompressed()[1..]);
        bytes
    }

    /// `A`.
    pub fn input_key_sum(&self) -> &PublicKey {
        &self.input_key_sum
    }

    /// `input_hash`, big-endian.
    pub fn input_hash(&self) -> &SecretKey {
        &self.input_hash
    }

    /// `ser_P(input_hash·A)`, the `tweak_key` a client is sent (and the
    /// vectors' `tweak`). Variable-time multiplication: both factors are
    /// public.
    pub fn tweak_key(&self) -> Result<[u8; 33], Error> {
        let tweak = self
            .input_key_sum
            .mul_tweak(&SECP, &Scalar::from(self.input_hash))
            .map_err(|_| Error::Derivation("input_hash·A failed"))?;
        Ok(tweak.serialize())
    }
}

/// The tweak data of a transaction, or `None` when it is not eligible.
/// `spent` holds the outputs its inputs spend, in input order.
///
/// "Scanning silent payment eligible transactions": it has a taproot
/// output, at least one counted input, and spends no output of segwit
/// version above 1. "Scanning": `A` at infinity skips it, and an
/// `input_hash` that is not a valid scalar makes it unscannable, so it is
/// skipped too.
pub fn tweak_data(tx: &Transaction, spent: &[TxOut]) -> Result<Option<TweakData>, Error> {
    // A coinbase spends nothing, so no input of it can count.
    if tx.is_coinbase() {
        return Ok(None);
    }
    if spent.len() != tx.input.len() {
        return Err(Error::PrevoutCount {
            spent: spent.len(),
            inputs: tx.input.len(),
        });
    }
    // The cheap tests first: a malleated P2PKH scriptSig can cost thousands
    // of hashes, spent only on transactions that can be eligible.
    // BIP-352 lets a scanner skip transactions whose taproot outputs are all
    // spent; the index keeps them (a full history wants them).
    if !tx.output.iter().any(|out| out.script_pubkey.is_p2tr()) {
        return Ok(None);
    }
    if spent
        .iter()
        .any(|out| spends_future_segwit(&out.script_pubkey))
    {
        return Ok(None);
    }
    let keys: Vec<PublicKey> = tx
        .input
        .iter()
        .zip(spent)
        .filter_map(|(input, out)| {
            input_public_key(&out.script_pubkey, &input.script_sig, &input.witness)
        })
        .collect();
    if keys.is_empty() {
        return Ok(None);
    }
    // Summed at once: an intermediate sum may be infinity when the total is
    // not (vector "Input keys intermediate sum is zero but final sum is
    // non-zero"); `combine_keys` fails only on the total.
    let key_refs: Vec<&PublicKey> = keys.iter().collect();
    let Ok(input_key_sum) = PublicKey::combine_keys(&key_refs) else {
        // "If A is the point at infinity, skip the transaction".
        return Ok(None);
    };
    let outpoints = tx.input.iter().map(|input| &input.previous_output);
    Ok(hash::input_hash(outpoints, &input_key_sum)
        .ok()
        .map(|input_hash| TweakData {
            input_key_sum,
            input_hash,
        }))
}

/// "The transaction does not spend an output with SegWit version > 1": a
/// witness program (BIP-141's shape: 4 to 42 bytes, a version opcode, one
/// push of 2 to 40 bytes) of version 2 to 16. Version-1 programs that are
/// not P2TR (a P2A anchor, `51 02 4e73`) are version 1 and do not
/// disqualify.
fn spends_future_segwit(spent: &Script) -> bool {
    spent
        .witness_version()
        .is_some_and(|version| version.to_num() > WitnessVersion::V1.to_num())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;
    use bitcoin::{ScriptBuf, TxIn};

    fn key_of(spent: &ScriptBuf, script_sig: &[u8], witness: &[&[u8]]) -> Option<PublicKey> {
        input_public_key(
            spent,
            Script::from_bytes(script_sig),
            &Witness::from_slice(witness),
        )
    }

    fn p2pkh_script(key: &[u8]) -> ScriptBuf {
        let mut script = vec![0x76, 0xa9, 0x14];
        script.extend_from_slice(hash160::Hash::hash(key).as_byte_array());
        script.extend_from_slice(&[0x88, 0xac]);
        ScriptBuf::from_bytes(script)
    }

    fn push(data: &[u8]) -> Vec<u8> {
        [&[data.len() as u8][..], data].concat()
    }

    #[test]
    fn p2pkh_key_found_anywhere_in_the_script_sig() {
        let key = public(1).serialize();
        let spent = p2pkh_script(&key);
        let standard = [push(&[0x30; 71]), push(&key)].concat();
        assert_eq!(key_of(&spent, &standard, &[]), Some(public(1)));
        // <sig> <key> OP_1 OP_DROP: the key is not the last push, and the
        // reference's sliding window still finds it (BIP-352 "P2PKH": MUST).
        let malleated = [push(&[0x30; 71]), push(&key), vec![0x51, 0x75]].concat();
        assert_eq!(key_of(&spent, &malleated, &[]), Some(public(1)));
        // Another key, or no key at all.
        let other = [push(&[0x30; 71]), push(&public(2).serialize())].concat();
        assert_eq!(key_of(&spent, &other, &[]), None);
        assert_eq!(key_of(&spent, &[], &[]), None);
    }

    #[test]
    fn uncompressed_and_hybrid_keys_do_not_count() {
        let uncompressed = public(1).serialize_uncompressed();
        let script_sig = [push(&[0x30; 71]), vec![0x41], uncompressed.to_vec()].concat();
        assert_eq!(key_of(&p2pkh_script(&uncompressed), &script_sig, &[]), None);
        // Hybrid: 06/07 and the uncompressed coordinates.
        let mut hybrid = uncompressed;
        hybrid[0] = 0x06 | (uncompressed[64] & 1);
        let script_sig = [push(&[0x30; 71]), vec![0x41], hybrid.to_vec()].concat();
        assert_eq!(key_of(&p2pkh_script(&hybrid), &script_sig, &[]), None);
        // P2WPKH with a 65-byte key, which `PublicKey::from_slice` would take.
        let mut p2wpkh = vec![0x00, 0x14];
        p2wpkh.extend_from_slice(hash160::Hash::hash(&uncompressed).as_byte_array());
        assert_eq!(
            key_of(
                &ScriptBuf::from_bytes(p2wpkh),
                &[],
                &[&[0x30; 71], &uncompressed]
            ),
            None
        );
    }

    #[test]
    fn p2sh_counts_only_when_it_wraps_p2wpkh() {
        let key = public(3);
        let redeem = p2wpkh_script(&key);
        let spent = ScriptBuf::new_p2sh(&redeem.script_hash());
        let script_sig = push(redeem.as_bytes());
        assert_eq!(
            key_of(&spent, &script_sig, &[&[0x30; 71], &key.serialize()]),
            Some(key)
        );
        // A P2SH-P2WSH spend: skipped ("Skip invalid P2SH inputs").
        let p2wsh = ScriptBuf::new_p2wsh(&ScriptBuf::from_bytes(vec![0x51]).wscript_hash());
        let spent = ScriptBuf::new_p2sh(&p2wsh.script_hash());
        let script_sig = push(p2wsh.as_bytes());
        assert_eq!(
            key_of(&spent, &script_sig, &[&[0x51], &key.serialize()]),
            None
        );
        assert_eq!(
            key_of(&spent, &[], &[&key.serialize()]),
            None,
            "empty scriptSig"
        );
    }

    #[test]
    fn taproot_key_and_script_paths() {
        let (x, _) = public(4).x_only_public_key();
        let spent = taproot_script(x.serialize());
        let even = x.public_key(bitcoin::key::Parity::Even);
        let signature = [0x01; 64];
        assert_eq!(key_of(&spent, &[], &[&signature]), Some(even), "key path");
        let annex = [ANNEX_TAG, 1, 2];
        assert_eq!(
            key_of(&spent, &[], &[&signature, &annex]),
            Some(even),
            "key path and annex"
        );
        assert_eq!(key_of(&spent, &[], &[]), None, "no witness");
        // Script path: counts (the output key), unless the internal key is H.
        let leaf = [0x51];
        let control_other = [&[0xc0][..], &public(5).x_only_public_key().0.serialize()].concat();
        let control_nums = [&[0xc0][..], &NUMS_H].concat();
        assert_eq!(key_of(&spent, &[], &[&leaf, &control_other]), Some(even));
        assert_eq!(key_of(&spent, &[], &[&leaf, &control_nums]), None);
        assert_eq!(
            key_of(&spent, &[], &[&leaf, &control_nums, &annex]),
            None,
            "annex then H"
        );
        // A last item that is empty is no annex and no panic.
        assert_eq!(key_of(&spent, &[], &[&leaf, &[]]), Some(even));
        // An x-coordinate off the curve (x = 0: 7 is not a square mod p).
        assert_eq!(key_of(&taproot_script([0; 32]), &[], &[&signature]), None);
    }

    #[test]
    fn other_scripts_do_not_count() {
        let key = public(6).serialize();
        for spent in [
            ScriptBuf::new_p2wsh(&ScriptBuf::from_bytes(vec![0x51]).wscript_hash()),
            ScriptBuf::from_bytes([push(&key), vec![0xac]].concat()), // P2PK
            ScriptBuf::from_bytes(vec![0x51, 0x02, 0x4e, 0x73]),      // P2A
        ] {
            assert_eq!(
                key_of(&spent, &push(&key), &[&[0x30; 71], &key]),
                None,
                "{spent}"
            );
        }
    }

    /// One counted P2WPKH input and a taproot output: eligible. Adding an
    /// input changes it as BIP-352's "Scanning silent payment eligible
    /// transactions" says.
    #[test]
    fn eligibility() {
        let (counted, counted_spent) = p2wpkh_spend(1);
        let taproot = output(taproot_script([9; 32]));
        let eligible = transaction(vec![counted.clone()], vec![taproot.clone()]);
        let tweak = tweak_data(&eligible, std::slice::from_ref(&counted_spent))
            .unwrap()
            .unwrap();
        assert_eq!(*tweak.input_key_sum(), public(1));
        let other = |script: Vec<u8>| {
            (
                input(7, 3, ScriptBuf::new(), &[&[1]]),
                output(ScriptBuf::from_bytes(script)),
            )
        };
        let with = |extra: (TxIn, TxOut)| {
            let tx = transaction(vec![counted.clone(), extra.0], vec![taproot.clone()]);
            tweak_data(&tx, &[counted_spent.clone(), extra.1]).unwrap()
        };
        // A segwit v2 program spent: not eligible.
        assert_eq!(with(other([&[0x52, 0x20][..], &[5; 32]].concat())), None);
        // v16 too. A 43-byte script starting OP_2 is no witness program
        // (BIP-141 allows 4 to 42 bytes), so it does not disqualify.
        assert_eq!(with(other([&[0x60, 0x02][..], &[5; 2]].concat())), None);
        assert_eq!(
            with(other([&[0x52, 0x29][..], &[5; 41]].concat())),
            Some(tweak)
        );
        // A P2A anchor (v1, not P2TR) spent: eligible, and the tweak data
        // unchanged: A has no new key, and the smallest outpoint (over all
        // inputs) is still the counted input's, txid 01.. before 07...
        assert_eq!(with(other(vec![0x51, 0x02, 0x4e, 0x73])), Some(tweak));
        // The same anchor under a txid that sorts first: same A, another
        // input_hash.
        let first = (
            input(0, 3, ScriptBuf::new(), &[&[1]]),
            output(ScriptBuf::from_bytes(vec![0x51, 0x02, 0x4e, 0x73])),
        );
        let moved = with(first).unwrap();
        assert_eq!(moved.input_key_sum(), tweak.input_key_sum());
        assert_ne!(moved.input_hash(), tweak.input_hash());
        // No taproot output, no counted input, a coinbase: not eligible.
        let no_taproot = transaction(
            vec![counted.clone()],
            vec![output(p2wpkh_script(&public(1)))],
        );
        assert_eq!(
            tweak_data(&no_taproot, std::slice::from_ref(&counted_spent)).unwrap(),
            None
        );
        let (uncounted, uncounted_spent) = other(vec![0x51, 0x02, 0x4e, 0x73]);
        let none_counted = transaction(vec![uncounted], vec![taproot.clone()]);
        assert_eq!(tweak_data(&none_counted, &[uncounted_spent]).unwrap(), None);
        assert_eq!(tweak_data(&coinbase(), &[]).unwrap(), None);
        // The spent outputs must match the inputs.
        assert_eq!(
            tweak_data(&eligible, &[]),
            Err(Error::PrevoutCount {
                spent: 0,
                inputs: 1
            })
        );
    }

    #[test]
    fn keys_summing_to_infinity_skip_the_transaction() {
        let key = public(1);
        let negated = key.negate(&SECP);
        let spend = |i: u8, key: &PublicKey| {
            (
                input(i, 0, ScriptBuf::new(), &[&[0x30; 71], &key.serialize()]),
                output(p2wpkh_script(key)),
            )
        };
        let (a, a_spent) = spend(1, &key);
        let (b, b_spent) = spend(2, &negated);
        let tx = transaction(vec![a, b], vec![output(taproot_script([9; 32]))]);
        assert_eq!(tweak_data(&tx, &[a_spent, b_spent]).unwrap(), None);
    }

    #[test]
    fn tweak_key_is_the_product() {
        let (counted, spent) = p2wpkh_spend(1);
        let tx = transaction(vec![counted], vec![output(taproot_script([9; 32]))]);
        let tweak = tweak_data(&tx, &[spent]).unwrap().unwrap();
        let expected = public(1)
            .mul_tweak(&SECP, &Scalar::from(*tweak.input_hash()))
            .unwrap();
        assert_eq!(tweak.tweak_key().unwrap(), expected.serialize());
        assert_eq!(
            TweakData::from_bytes(
                &tweak.input_key_sum_bytes(),
                &tweak.input_hash().secret_bytes()
            ),
            Ok(tweak)
        );
    }

    #[test]
    fn tweak_data_from_bytes_refuses_malformed_fields() {
        let mut point = [0u8; 64];
        point.copy_from_slice(&public(1).serialize_uncompressed()[1..]);
        assert!(TweakData::from_bytes(&point, &[1; 32]).is_ok());
        assert!(
            TweakData::from_bytes(&point, &[0; 32]).is_err(),
            "zero scalar"
        );
        assert!(
            TweakData::from_bytes(&point, &[0xff; 32]).is_err(),
            "scalar past the order"
        );
        let mut off_curve = point;
        off_curve[63] ^= 1;
        assert!(
            TweakData::from_bytes(&off_curve, &[1; 32]).is_err(),
            "y changed"
        );
    }
}
