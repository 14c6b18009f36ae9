use super::keys::envelope_leaf;
use super::kind::envelope_leaf_len;
use super::placeholder_signatures::placeholder_ecdsa;
use super::*;
use bitcoin::absolute::LockTime;
use bitcoin::key::TapTweak;
use bitcoin::secp256k1;
use bitcoin::transaction::Version;
use bitcoin::{Amount, OutPoint, Sequence, TxIn, Txid};

fn key_of(spend: &Spend) -> Key {
    match spend.holder {
        Holder::Key(key) => key,
        Holder::Placeholder(_) => panic!("test spends have real keys"),
    }
}

fn spend_tx(kinds: &[ScriptKind]) -> (Transaction, Vec<Spend>) {
    let spends: Vec<Spend> = kinds
        .iter()
        .enumerate()
        .map(|(i, &kind)| {
            let key = Key::from_seed(7, i as u64);
            Spend {
                txout: TxOut {
                    value: Amount::from_sat(10_000),
                    script_pubkey: key.script_pubkey(kind),
                },
                holder: key.into(),
                kind,
            }
        })
        .collect();
    let tx = Transaction {
        version: Version::TWO,
        lock_time: LockTime::ZERO,
        input: (0..kinds.len())
            .map(|i| TxIn {
                previous_output: OutPoint {
                    txid: Txid::all_zeros(),
                    vout: i as u32,
                },
                sequence: Sequence::ENABLE_RBF_NO_LOCKTIME,
                ..TxIn::default()
            })
            .collect(),
        output: vec![TxOut {
            value: Amount::from_sat(5_000),
            script_pubkey: ScriptBuf::new_op_return([1u8; 4]),
        }],
    };
    (tx, spends)
}

#[test]
fn keys_are_deterministic_and_distinct() {
    assert_eq!(Key::from_seed(1, 2), Key::from_seed(1, 2));
    assert_ne!(Key::from_seed(1, 2), Key::from_seed(1, 3));
    assert_ne!(Key::from_seed(1, 2), Key::from_seed(2, 2));
}

#[test]
fn scripts_have_the_expected_shapes() {
    let key = Key::from_seed(1, 1);
    assert!(key.script_pubkey(ScriptKind::P2pkh).is_p2pkh());
    assert!(key.script_pubkey(ScriptKind::P2shP2wpkh).is_p2sh());
    assert!(key.script_pubkey(ScriptKind::P2wpkh).is_p2wpkh());
    assert!(key.script_pubkey(ScriptKind::P2wsh).is_p2wsh());
    assert!(key.script_pubkey(ScriptKind::P2tr).is_p2tr());
}

#[test]
fn signatures_verify_and_sizes_stay_within_estimates() {
    let (mut tx, spends) = spend_tx(&ScriptKind::ALL);
    sign_transaction_checked(&mut tx, &spends).unwrap();
    let txouts: Vec<&TxOut> = spends.iter().map(|s| &s.txout).collect();
    let cache = SighashCache::new(&tx);
    for (i, spend) in spends.iter().enumerate() {
        let input = &tx.input[i];
        let base = bitcoin::consensus::serialize(&TxIn {
            witness: Witness::new(),
            ..input.clone()
        })
        .len();
        assert!(
            base <= spend.kind.input_base_size_max(),
            "{}: base {base}",
            spend.kind
        );
        let witness_len = bitcoin::consensus::serialize(&input.witness).len();
        assert!(
            witness_len <= spend.kind.input_witness_size_max(),
            "{}: witness {witness_len}",
            spend.kind
        );
        if spend.kind == ScriptKind::P2tr {
            let mut cache = SighashCache::new(&tx);
            let hash = cache
                .taproot_key_spend_signature_hash(
                    i,
                    &Prevouts::All(&txouts),
                    TapSighashType::Default,
                )
                .unwrap();
            let sig = secp256k1::schnorr::Signature::from_slice(&input.witness[0]).unwrap();
            let out_key = bitcoin::key::XOnlyPublicKey::from_slice(
                &spend.txout.script_pubkey.as_bytes()[2..],
            )
            .unwrap();
            SECP.verify_schnorr(&sig, &Message::from_digest(hash.to_byte_array()), &out_key)
                .unwrap();
        } else if spend.kind == ScriptKind::P2pkh {
            let hash = cache
                .legacy_signature_hash(i, &spend.txout.script_pubkey, 1)
                .unwrap();
            let push = input.script_sig.instructions().next().unwrap().unwrap();
            let der = push.push_bytes().unwrap().as_bytes();
            let sig = secp256k1::ecdsa::Signature::from_der(&der[..der.len() - 1]).unwrap();
            SECP.verify_ecdsa(
                &Message::from_digest(hash.to_byte_array()),
                &sig,
                key_of(spend).public_key(),
            )
            .unwrap();
        }
    }
}

#[test]
fn taproot_keypair_matches_the_library_tweak() {
    for i in 0..8 {
        let key = Key::from_seed(3, i);
        let reference = Keypair::from_secret_key(&SECP, key.secret_key())
            .tap_tweak(&SECP, None)
            .to_keypair();
        assert_eq!(key.taproot_keypair(), reference);
        let output_key = reference.x_only_public_key().0;
        assert_eq!(
            &key.script_pubkey(ScriptKind::P2tr).as_bytes()[2..],
            &output_key.serialize()
        );
    }
}

#[test]
fn vsize_bound_holds_for_every_kind_mix() {
    for n in 1..=ScriptKind::ALL.len() {
        let kinds = &ScriptKind::ALL[..n];
        let (mut tx, spends) = spend_tx(kinds);
        sign_transaction(&mut tx, &spends).unwrap();
        let bound = vsize_max(kinds, tx.output.iter().map(|o| o.script_pubkey.len()));
        assert!(
            tx.vsize() as u64 <= bound,
            "{n} inputs: {} > {bound}",
            tx.vsize()
        );
        assert!(
            bound <= tx.vsize() as u64 + 2 * n as u64 + 1,
            "bound is tight: {bound} vs {}",
            tx.vsize()
        );
    }
}

#[test]
fn envelope_spends_verify_and_stay_within_estimates() {
    for len in [32u16, 75, 76, 255, 256, 520, 521, 1_040, 3_001] {
        let kind = ScriptKind::P2trEnvelope(len);
        let (mut tx, spends) = spend_tx(&[ScriptKind::P2wpkh, kind]);
        sign_transaction_checked(&mut tx, &spends).unwrap();
        let spend = &spends[1];
        let (leaf, info) = key_of(spend).envelope(len);
        assert_eq!(leaf.len(), envelope_leaf_len(usize::from(len)), "{len}");
        let witness = &tx.input[1].witness;
        assert_eq!(witness.len(), 3);
        assert_eq!(&witness[1], leaf.as_bytes());
        let control = bitcoin::taproot::ControlBlock::decode(&witness[2]).unwrap();
        let output_key = info.output_key().to_x_only_public_key();
        assert!(control.verify_taproot_commitment(&SECP, output_key, &leaf));
        let txouts: Vec<&TxOut> = spends.iter().map(|s| &s.txout).collect();
        let hash = SighashCache::new(&tx)
            .taproot_script_spend_signature_hash(
                1,
                &Prevouts::All(&txouts),
                TapLeafHash::from_script(&leaf, LeafVersion::TapScript),
                TapSighashType::Default,
            )
            .unwrap();
        let sig = secp256k1::schnorr::Signature::from_slice(&witness[0]).unwrap();
        let internal = key_of(spend).public_key().x_only_public_key().0;
        SECP.verify_schnorr(&sig, &Message::from_digest(hash.to_byte_array()), &internal)
            .unwrap();
        let witness_len = bitcoin::consensus::serialize(witness).len();
        assert!(witness_len <= kind.input_witness_size_max(), "{len}");
        let kinds = [ScriptKind::P2wpkh, kind];
        let bound = vsize_max(&kinds, tx.output.iter().map(|o| o.script_pubkey.len()));
        assert!(tx.vsize() as u64 <= bound, "{len}");
        assert!(bound <= tx.vsize() as u64 + 5, "{len}: bound is tight");
    }
}

#[test]
fn signing_rejects_mismatched_prevouts() {
    let (mut tx, mut spends) = spend_tx(&[ScriptKind::P2wpkh, ScriptKind::P2tr]);
    assert!(matches!(
        sign_transaction(&mut tx, &spends[..1]),
        Err(SignError::InputCount { .. })
    ));
    spends[1].kind = ScriptKind::P2wsh;
    assert!(matches!(
        sign_transaction_checked(&mut tx, &spends),
        Err(SignError::ScriptMismatch { index: 1, .. })
    ));
}

/// Every witness item and script push of an input, in order.
fn unlock_items(input: &TxIn) -> Vec<Vec<u8>> {
    let pushes = input
        .script_sig
        .instructions()
        .map(|i| i.unwrap().push_bytes().unwrap().as_bytes().to_vec());
    pushes
        .chain(input.witness.iter().map(<[u8]>::to_vec))
        .collect()
}

/// A low-S DER ECDSA signature with SIGHASH_ALL, as Core's standardness
/// rules want it.
fn is_strict_ecdsa(item: &[u8]) -> bool {
    let Some((&hash_type, der)) = item.split_last() else {
        return false;
    };
    let Ok(sig) = secp256k1::ecdsa::Signature::from_der(der) else {
        return false;
    };
    let mut normalized = sig;
    normalized.normalize_s();
    hash_type == 1 && normalized == sig
}

#[test]
fn placeholder_spends_have_the_form_and_size_of_signed_ones() {
    let mut kinds = ScriptKind::ALL.to_vec();
    kinds.extend([75, 521, 3_001].map(ScriptKind::P2trEnvelope));
    let (mut signed, spends) = spend_tx(&kinds);
    let mut placeholder = signed.clone();
    sign_transaction(&mut signed, &spends).unwrap();
    sign_placeholders(&mut placeholder, &spends).unwrap();
    let bound = vsize_max(&kinds, signed.output.iter().map(|o| o.script_pubkey.len()));
    assert!(placeholder.vsize() as u64 <= bound);
    for (i, kind) in kinds.iter().enumerate() {
        let (real, fake) = (
            unlock_items(&signed.input[i]),
            unlock_items(&placeholder.input[i]),
        );
        assert_eq!(real.len(), fake.len(), "{kind}");
        // Only the signature differs; the public key, scripts and
        // control block are the same bytes.
        let differing: Vec<usize> = (0..real.len()).filter(|&j| real[j] != fake[j]).collect();
        let [sig] = differing[..] else {
            panic!("{kind}: items {differing:?} differ")
        };
        let (real, fake) = (&real[sig], &fake[sig]);
        if kind.is_taproot() {
            assert_eq!(fake.len(), 64, "{kind}");
        } else {
            assert!(is_strict_ecdsa(real), "{kind}");
            assert!(is_strict_ecdsa(fake), "{kind}: {}", hex::encode(fake));
            assert!(real.len().abs_diff(fake.len()) <= 2, "{kind}");
        }
    }
}

#[test]
fn placeholder_ecdsa_lengths_follow_real_ones() {
    let key = Key::from_seed(9, 9);
    let n = 1_000u32;
    let share_of_72 = |lengths: Vec<usize>| {
        assert!(lengths.iter().all(|l| (69..=72).contains(l)), "{lengths:?}");
        lengths.iter().filter(|l| **l == 72).count() as f64 / f64::from(n)
    };
    let real = share_of_72(
        (0..n)
            .map(|i| ecdsa_sig(Message::from_digest([i as u8; 32]), &key).len())
            .collect(),
    );
    let fake = share_of_72(
        (0..n)
            .map(|vout| {
                let outpoint = OutPoint {
                    txid: Txid::all_zeros(),
                    vout,
                };
                placeholder_ecdsa(&outpoint).len()
            })
            .collect(),
    );
    // A 33-byte r (its top bit set) half the time in both.
    assert!((0.4..0.6).contains(&fake), "{fake}");
    assert!((real - fake).abs() < 0.1, "real {real}, placeholder {fake}");
}

#[test]
fn placeholder_keys_lock_every_kind_like_real_keys() {
    let mut kinds = ScriptKind::ALL.to_vec();
    kinds.push(ScriptKind::P2trEnvelope(100));
    let (a, b) = (
        PlaceholderKey::from_seed(1, 1),
        PlaceholderKey::from_seed(1, 2),
    );
    assert_eq!(a, PlaceholderKey::from_seed(1, 1));
    let real = Key::from_seed(1, 1);
    for kind in kinds {
        let script = a.script_pubkey(kind);
        assert_eq!(script.len(), real.script_pubkey(kind).len(), "{kind}");
        assert_eq!(
            crate::stats::OutputClass::of(&script),
            crate::stats::OutputClass::of(&real.script_pubkey(kind)),
            "{kind}"
        );
        assert_ne!(script, b.script_pubkey(kind), "{kind}");
    }
    assert_ne!(
        a.script_pubkey(ScriptKind::P2tr),
        a.script_pubkey(ScriptKind::P2trEnvelope(100)),
        "an envelope is another output key"
    );
}

#[test]
fn placeholder_keys_cannot_sign_but_spend_with_placeholders() {
    let kinds = [ScriptKind::P2pkh, ScriptKind::P2trEnvelope(300)];
    let (mut tx, mut spends) = spend_tx(&kinds);
    for (i, spend) in spends.iter_mut().enumerate() {
        let key = PlaceholderKey::from_seed(5, i as u64);
        spend.holder = Holder::Placeholder(key);
        spend.txout.script_pubkey = key.script_pubkey(spend.kind);
    }
    assert!(matches!(
        sign_transaction(&mut tx, &spends),
        Err(SignError::Placeholder { index: 0 })
    ));
    sign_placeholders(&mut tx, &spends).unwrap();
    let Holder::Placeholder(PlaceholderKey(pubkey)) = spends[1].holder else {
        unreachable!("set above")
    };
    let witness = &tx.input[1].witness;
    assert_eq!(witness.len(), 3);
    assert_eq!(&witness[1], envelope_leaf(&pubkey, 300).as_bytes());
    assert_eq!(witness[2].len(), 33);
    assert_eq!(witness[2][0] & 0xfe, 0xc0, "tapscript leaf version");
    assert_eq!(&witness[2][1..], &pubkey[1..], "internal key");
    let bound = vsize_max(&kinds, tx.output.iter().map(|o| o.script_pubkey.len()));
    assert!(tx.vsize() as u64 <= bound);
}
