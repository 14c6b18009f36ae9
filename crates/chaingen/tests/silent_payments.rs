//! The silent payments of a generated chain against `osprey-sp`'s receiver,
//! from the written blocks only: for every payment the manifest lists, the
//! receiver's full scan (BIP-352 "Scanning", with the manifest's keys and
//! labels, over the tweak data `osprey-sp` computes from the transaction
//! and the outputs it spends) finds exactly the manifest's outputs, with
//! the manifest's `tweak_key`; other receivers and a sample of the eligible
//! transactions that pay nobody give nothing; and the statistics count
//! what the blocks hold. Signed and with placeholder signatures.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use bitcoin::{Block, OutPoint, Transaction, TxOut, Txid};
use osprey_chaingen::manifest::{Manifest, SilentPaymentOutput, SilentPaymentReceiver};
use osprey_chaingen::stats::{SilentPaymentStats, STATS_FILE};
use osprey_chaingen::{generate, read_blocks, ChainStats, Config, Preset, Shape, Signatures};
use osprey_sp::{FoundOutput, ScanKeys, TweakData};

fn seed() -> u64 {
    // Replay a failure with OSPREY_TEST_SEED=<seed>.
    std::env::var("OSPREY_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(42)
}

/// The mainnet profile at a small size (inputs of every counted kind but
/// the envelopes, which a chain this small does not spend yet: the unit
/// tests of `generate/tests.rs` pay from one), a fifth of the transfers that can
/// pay a silent payment paying one.
fn config(signatures: Signatures) -> Config {
    Config {
        preset: "custom".into(),
        seed: seed() ^ 0x5350,
        shape: Shape {
            blocks: 600,
            txs_per_block: 30,
            wallet_addresses: 80,
            silent_payments_ppm: 200_000,
            ..Preset::Mainnet.shape()
        },
        signatures,
    }
}

fn scan_keys(receiver: &SilentPaymentReceiver) -> ScanKeys {
    ScanKeys::from_slices(
        &hex::decode(&receiver.scan_private_key).unwrap(),
        &hex::decode(&receiver.spend_public_key).unwrap(),
        receiver.labels.iter().copied(),
    )
    .unwrap()
}

/// The receiver's outputs in `tx` by its full scan, as the manifest lists
/// them.
fn found_outputs(keys: &ScanKeys, tweak: &TweakData, tx: &Transaction) -> Vec<SilentPaymentOutput> {
    let taproot: Vec<(u32, [u8; 32])> = tx
        .output
        .iter()
        .enumerate()
        .filter(|(_, out)| out.script_pubkey.is_p2tr())
        .map(|(vout, out)| {
            let key: [u8; 32] = out.script_pubkey.as_bytes()[2..].try_into().unwrap();
            (vout as u32, key)
        })
        .collect();
    let output_keys: Vec<[u8; 32]> = taproot.iter().map(|(_, key)| *key).collect();
    let found = keys.scan_outputs(tweak, &output_keys).unwrap();
    let mut outputs: Vec<SilentPaymentOutput> = found
        .iter()
        .map(|f: &FoundOutput| {
            let (vout, _) = taproot
                .iter()
                .find(|(_, key)| *key == f.output_key)
                .expect("found among the outputs");
            SilentPaymentOutput {
                vout: *vout,
                value: tx.output[*vout as usize].value.to_sat(),
                k: f.k,
                label: f.label,
            }
        })
        .collect();
    outputs.sort_by_key(|out| out.vout);
    outputs
}

/// What paying transactions spent: the kinds of input whose keys the
/// sender summed.
#[derive(Debug, Default)]
struct Paid {
    transactions: u64,
    input_kinds: HashSet<&'static str>,
}

fn input_kind(spent: &TxOut, witness_items: usize) -> &'static str {
    let script = &spent.script_pubkey;
    if script.is_p2pkh() {
        "p2pkh"
    } else if script.is_p2sh() {
        "p2sh-p2wpkh"
    } else if script.is_p2wpkh() {
        "p2wpkh"
    } else if script.is_p2tr() && witness_items == 1 {
        "p2tr key path"
    } else if script.is_p2tr() {
        "p2tr script path"
    } else {
        "other"
    }
}

/// What the chain holds, checked against the manifest and the statistics.
fn check_payments(dir: &Path, manifest: &Manifest) -> Paid {
    let receivers = manifest
        .silent_payments
        .as_ref()
        .expect("the manifest lists the receivers");
    assert_eq!(receivers.len(), 8);
    let keys: Vec<ScanKeys> = receivers.iter().map(scan_keys).collect();
    for (receiver, keys) in receivers.iter().zip(&keys) {
        assert_eq!(
            keys.address(bitcoin::Network::Regtest),
            receiver.address,
            "the manifest's address is its keys'"
        );
        assert!(receiver.address.starts_with("sprt1q"));
    }
    // The expected outputs of each paying transaction, per receiver.
    let mut paid: HashMap<Txid, (u32, String, Vec<Vec<SilentPaymentOutput>>)> = HashMap::new();
    for (r, receiver) in receivers.iter().enumerate() {
        for payment in &receiver.payments {
            let entry = paid
                .entry(payment.txid.parse().unwrap())
                .or_insert_with(|| {
                    (
                        payment.height,
                        payment.tweak_key.clone(),
                        vec![Vec::new(); receivers.len()],
                    )
                });
            assert_eq!(
                (entry.0, &entry.1),
                (payment.height, &payment.tweak_key),
                "one height and tweak per transaction"
            );
            entry.2[r] = payment.outputs.clone();
        }
    }

    let blocks: Vec<Block> = read_blocks(&dir.join("blocks"))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut coins: HashMap<OutPoint, TxOut> = HashMap::new();
    let mut counted = SilentPaymentStats::default();
    let mut input_kinds = HashSet::new();
    let (mut unpaid_scanned, mut labels_seen, mut two_receivers, mut k1) =
        (0, Vec::new(), 0, false);
    for (height, block) in blocks.iter().enumerate() {
        for tx in &block.txdata {
            let txid = tx.compute_txid();
            let spent: Vec<TxOut> = if tx.is_coinbase() {
                Vec::new()
            } else {
                tx.input
                    .iter()
                    .map(|input| coins.remove(&input.previous_output).expect("a known coin"))
                    .collect()
            };
            for (vout, out) in tx.output.iter().enumerate() {
                coins.insert(
                    OutPoint {
                        txid,
                        vout: vout as u32,
                    },
                    out.clone(),
                );
            }
            let tweak = osprey_sp::tweak_data(tx, &spent).unwrap();
            counted.eligible_txs += u64::from(tweak.is_some());
            let expected = paid.remove(&txid);
            if let Some((paid_height, tweak_key, outputs)) = &expected {
                assert_eq!(*paid_height as usize, height, "{txid}");
                let tweak = tweak.expect("a paying transaction is eligible");
                assert_eq!(
                    hex::encode(tweak.tweak_key().unwrap()),
                    *tweak_key,
                    "{txid}: tweak_key"
                );
                counted.paying_txs += 1;
                for (input, spent) in tx.input.iter().zip(&spent) {
                    input_kinds.insert(input_kind(spent, input.witness.len()));
                }
                counted.outputs += outputs.iter().map(Vec::len).sum::<usize>() as u64;
                two_receivers += u32::from(outputs.iter().filter(|o| !o.is_empty()).count() > 1);
                for out in outputs.iter().flatten() {
                    labels_seen.push(out.label);
                    k1 |= out.k == 1;
                }
            }
            // Every payment, and one in four of the eligible transactions
            // paying nobody (each scan costs eight receivers' ECDH).
            let scan = match (&expected, tweak) {
                (Some(_), Some(tweak)) => Some(tweak),
                (None, Some(tweak)) if counted.eligible_txs % 4 == 0 => {
                    unpaid_scanned += 1;
                    Some(tweak)
                }
                _ => None,
            };
            if let Some(tweak) = scan {
                for (r, keys) in keys.iter().enumerate() {
                    let want = expected
                        .as_ref()
                        .map(|(_, _, outputs)| outputs[r].clone())
                        .unwrap_or_default();
                    assert_eq!(
                        found_outputs(keys, &tweak, tx),
                        want,
                        "{txid} at {height}, receiver {r}"
                    );
                }
            }
        }
    }
    assert!(paid.is_empty(), "payments not in the chain: {paid:?}");
    let stats: ChainStats =
        serde_json::from_str(&std::fs::read_to_string(dir.join(STATS_FILE)).unwrap()).unwrap();
    assert_eq!(stats.silent_payments, Some(counted.clone()));

    // The variety the receivers' scans must handle.
    assert!(
        unpaid_scanned > 50,
        "{unpaid_scanned} unpaid eligible scanned"
    );
    for label in [None, Some(0), Some(1), Some(2)] {
        assert!(
            labels_seen.contains(&label),
            "no payment to label {label:?}"
        );
    }
    assert!(k1, "no receiver paid twice in one transaction");
    assert!(two_receivers > 0, "no transaction paying two receivers");
    Paid {
        transactions: counted.paying_txs,
        input_kinds,
    }
}

fn generate_into(dir: &Path, config: Config) -> Manifest {
    generate(config, dir, &mut |_| {})
        .expect("generation succeeds")
        .0
}

#[test]
fn receivers_find_exactly_the_manifest_payments() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = generate_into(dir.path(), config(Signatures::Real));
    let paid = check_payments(dir.path(), &manifest);
    for kind in ["p2pkh", "p2sh-p2wpkh", "p2wpkh", "p2tr key path"] {
        assert!(paid.input_kinds.contains(kind), "no payment spends {kind}");
    }
    // A fifth of the transfers that can pay, which are most of them.
    let stats: ChainStats =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(STATS_FILE)).unwrap())
            .unwrap();
    let transfers = stats.txs - stats.blocks;
    let share = paid.transactions as f64 / transfers as f64;
    assert!(
        (0.12..=0.2).contains(&share),
        "{} of {transfers} transfers pay",
        paid.transactions
    );
}

/// Placeholder keys have no secret: only transfers whose counted inputs
/// all have real keys (the wallet's, exchanges', miners') pay, and the
/// receivers find them as in a signed chain.
#[test]
fn placeholder_chains_pay_from_real_keys_only() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = generate_into(dir.path(), config(Signatures::Placeholder));
    assert!(manifest.placeholder_signatures.is_some());
    let paid = check_payments(dir.path(), &manifest);
    assert!(paid.transactions > 50, "{paid:?}");
}
