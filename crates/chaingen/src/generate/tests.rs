use bitcoin::hashes::Hash;
use bitcoin::{Amount, OutPoint, TxOut, Txid};

use super::build::{build_tx, OutPlan, TxPlan};
use super::coins::{Coin, Dest, Owner};
use super::*;
use crate::sign::{PlaceholderKey, Spend};

fn coin(n: u64, holder: Holder, kind: ScriptKind) -> Coin {
    let txid = Txid::from_byte_array(
        bitcoin::hashes::sha256d::Hash::hash(&n.to_le_bytes()).to_byte_array(),
    );
    Coin {
        outpoint: OutPoint { txid, vout: 1 },
        spend: Spend {
            txout: TxOut {
                value: Amount::from_sat(1_000_000),
                script_pubkey: holder.script_pubkey(kind),
            },
            holder,
            kind,
        },
        owner: Owner::World,
    }
}

fn generator(silent_payments_ppm: u32) -> Generator {
    Generator::new(Config {
        preset: "test".into(),
        seed: 3,
        shape: Shape {
            silent_payments_ppm,
            ..crate::Preset::Tiny.shape()
        },
        signatures: Signatures::Real,
    })
    .unwrap()
}

/// A transfer spending every kind of coin (the envelope through its
/// script path, P2WSH not counted) pays three silent outputs: what
/// `osprey-sp`'s receivers find is what the build says it paid.
#[test]
fn built_silent_payments_are_found_by_their_receivers() {
    let mut kinds = ScriptKind::ALL.to_vec();
    kinds.push(ScriptKind::P2trEnvelope(300));
    let inputs: Vec<Coin> = kinds
        .iter()
        .enumerate()
        .map(|(i, &kind)| coin(i as u64, Key::from_seed(9, i as u64).into(), kind))
        .collect();
    let out = |dest| OutPlan {
        value: 10_000,
        dest,
    };
    let plan = TxPlan {
        inputs,
        outputs: vec![
            out(Dest::Silent {
                receiver: 0,
                label: Some(2),
            }),
            out(Dest::Fresh {
                index: 1,
                kind: ScriptKind::P2tr,
            }),
            out(Dest::Silent {
                receiver: 3,
                label: None,
            }),
            out(Dest::Silent {
                receiver: 0,
                label: None,
            }),
        ],
        lock_time: 0,
    };
    let receivers = silent::receivers(3);
    let built = build_tx(3, Signatures::Real, Some(&receivers), &plan);
    let silent = built.silent.expect("a chain with silent payments");
    assert!(silent.eligible);
    let payment = silent.payment.expect("the plan pays");
    let paid: Vec<(u32, u8, Option<u32>, u32)> = payment
        .outputs
        .iter()
        .map(|o| (o.vout, o.receiver, o.label, o.k))
        .collect();
    assert_eq!(paid, [(0, 0, Some(2), 0), (2, 3, None, 0), (3, 0, None, 1)]);
    let spent: Vec<TxOut> = plan.inputs.iter().map(|c| c.spend.txout.clone()).collect();
    let tweak = osprey_sp::tweak_data(&built.tx, &spent).unwrap().unwrap();
    assert_eq!(tweak.tweak_key().unwrap(), payment.tweak_key);
    let output_keys: Vec<[u8; 32]> = built
        .tx
        .output
        .iter()
        .map(|o| o.script_pubkey.as_bytes()[2..].try_into().unwrap())
        .collect();
    for (r, receiver) in receivers.iter().enumerate() {
        let keys = osprey_sp::ScanKeys::new(
            *receiver.scan_secret(),
            *receiver.spend_public_key(),
            receiver.subscription_labels(),
        )
        .unwrap();
        let mut found: Vec<(u32, Option<u32>, u32)> = keys
            .scan_outputs(&tweak, &output_keys)
            .unwrap()
            .iter()
            .map(|f| {
                let vout = output_keys.iter().position(|k| *k == f.output_key).unwrap();
                (vout as u32, f.label, f.k)
            })
            .collect();
        found.sort_unstable();
        let expected: Vec<(u32, Option<u32>, u32)> = paid
            .iter()
            .filter(|p| usize::from(p.1) == r)
            .map(|p| (p.0, p.2, p.3))
            .collect();
        assert_eq!(found, expected, "receiver {r}");
    }
}

/// A receiver added to a chain's own is paid too, listed last in the
/// manifest; the chain's own receivers are those of its seed still.
#[test]
fn added_silent_receivers_are_paid_and_listed_last() {
    let mnemonic = "life life life life life life life life life life life life";
    let mut added = generator(500_000);
    added
        .add_silent_receiver(silent::receiver_of_mnemonic(mnemonic).unwrap())
        .unwrap();
    while added.next_block().is_some() {}
    let manifest = added.manifest(Vec::new());
    let receivers = manifest
        .silent_payments
        .expect("a chain with silent payments");
    assert_eq!(receivers.len(), silent::RECEIVERS + 1);
    let last = &receivers[silent::RECEIVERS];
    assert_eq!(
        last.address,
        silent::receiver_of_mnemonic(mnemonic).unwrap().address()
    );
    assert!(
        last.payments.len() > 3,
        "{} payments to the added receiver",
        last.payments.len()
    );
    assert!(last
        .payments
        .iter()
        .flat_map(|p| &p.outputs)
        .all(|o| o.label.is_none()));
    for (r, receiver) in receivers[..silent::RECEIVERS].iter().enumerate() {
        assert_eq!(receiver.address, silent::Receiver::new(3, r).address());
    }

    let mut started = generator(500_000);
    started.next_block();
    assert!(started
        .add_silent_receiver(silent::receiver_of_mnemonic(mnemonic).unwrap())
        .is_err());
    assert!(generator(0)
        .add_silent_receiver(silent::receiver_of_mnemonic(mnemonic).unwrap())
        .is_err());
}

/// Silent payments are planned only from inputs one of which counts
/// and whose counted ones all have known keys, and leave an output
/// somebody spends.
#[test]
fn silent_payments_need_every_counted_key() {
    let payments = || {
        vec![
            Dest::Fresh {
                index: 1,
                kind: ScriptKind::P2wpkh,
            },
            Dest::Fresh {
                index: 2,
                kind: ScriptKind::P2pkh,
            },
        ]
    };
    let real = |n: u64, kind| coin(n, Key::from_seed(4, n).into(), kind);
    let placeholder = |n: u64, kind| {
        coin(
            n,
            Holder::Placeholder(PlaceholderKey::from_seed(4, n)),
            kind,
        )
    };
    let silent_outputs = |g: &mut Generator, inputs: &[Coin]| {
        let mut dests = payments();
        g.plan_silent_payments(inputs, &mut dests, false);
        dests
            .iter()
            .filter(|d| matches!(d, Dest::Silent { .. }))
            .count()
    };
    let mut g = generator(1_000_000);
    assert_eq!(silent_outputs(&mut g, &[real(1, ScriptKind::P2wpkh)]), 1);
    // A placeholder key not counted does not matter; one counted does.
    let mixed = [real(1, ScriptKind::P2tr), placeholder(2, ScriptKind::P2wsh)];
    assert_eq!(silent_outputs(&mut g, &mixed), 1);
    let unknown = [
        real(1, ScriptKind::P2tr),
        placeholder(2, ScriptKind::P2wpkh),
    ];
    assert_eq!(silent_outputs(&mut g, &unknown), 0);
    assert_eq!(silent_outputs(&mut g, &[real(1, ScriptKind::P2wsh)]), 0);
    // Never without the share.
    let mut g = generator(0);
    assert_eq!(silent_outputs(&mut g, &[real(1, ScriptKind::P2wpkh)]), 0);
    // A single payment stays: nobody would take the value.
    let mut g = generator(1_000_000);
    let mut dests = payments()[..1].to_vec();
    g.plan_silent_payments(&[real(1, ScriptKind::P2wpkh)], &mut dests, false);
    assert!(matches!(dests[0], Dest::Fresh { .. }));
}
