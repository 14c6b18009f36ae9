//! BIP-352's official test vectors (`bip-0352/send_and_receive_test_vectors.json`,
//! see `vectors/README.md` for its origin) against `osprey-sp`.
//!
//! Receiving cases: input keys and eligibility, `A`, `input_hash·A`, the
//! shared secret, the addresses, the full scan (outputs, spending tweaks,
//! and the BIP-340 signatures made with them), the record written for the
//! transaction and the `k = 0` kernel on it. Sending cases: what this
//! crate computes for a sender, i.e. which inputs count and their keys,
//! `input_hash`, `t_k` and the address encoding; the rest of the sender
//! (summing and negating secret keys) is test code here.

use std::collections::BTreeSet;

use bitcoin::hashes::{sha256, Hash};
use bitcoin::key::Parity;
use bitcoin::secp256k1::{schnorr, Keypair, Message, PublicKey, Scalar, Secp256k1, SecretKey};
use bitcoin::{
    absolute, consensus, transaction, Amount, Network, OutPoint, ScriptBuf, Sequence, Transaction,
    TxIn, TxOut, Txid, Witness,
};
use osprey_sp::{append_block_records, BlockRecords, CandidateBatch, ScanKeys, K_MAX};
use serde::Deserialize;

const VECTORS: &str = include_str!("vectors/send_and_receive_test_vectors.json");

#[derive(Deserialize)]
struct Case {
    comment: String,
    sending: Vec<Sending>,
    receiving: Vec<Receiving>,
}

#[derive(Deserialize)]
struct Vin {
    txid: String,
    vout: u32,
    #[serde(rename = "scriptSig")]
    script_sig: String,
    txinwitness: String,
    prevout: Prevout,
    /// Sending cases only.
    private_key: Option<String>,
}

#[derive(Deserialize)]
struct Prevout {
    #[serde(rename = "scriptPubKey")]
    script_pubkey: HexScript,
}

#[derive(Deserialize)]
struct HexScript {
    hex: String,
}

#[derive(Deserialize)]
struct Sending {
    given: SendingGiven,
    expected: SendingExpected,
}

#[derive(Deserialize)]
struct SendingGiven {
    vin: Vec<Vin>,
    recipients: Vec<Recipient>,
}

#[derive(Deserialize)]
struct Recipient {
    address: String,
    scan_pub_key: String,
    spend_pub_key: String,
    /// How many outputs to this address (the `K_max` case); 1 when absent.
    count: Option<usize>,
}

#[derive(Deserialize)]
struct SendingExpected {
    /// Every acceptable output set (orderings of labelled recipients give
    /// different sets).
    outputs: Vec<Vec<String>>,
    /// Per recipient entry; null where sending fails.
    shared_secrets: Vec<Option<String>>,
    input_private_key_sum: Option<String>,
    input_pub_keys: Vec<String>,
}

#[derive(Deserialize)]
struct Receiving {
    given: ReceivingGiven,
    expected: ReceivingExpected,
}

#[derive(Deserialize)]
struct ReceivingGiven {
    vin: Vec<Vin>,
    outputs: Vec<String>,
    key_material: KeyMaterial,
    labels: Vec<u32>,
}

#[derive(Deserialize)]
struct KeyMaterial {
    scan_priv_key: String,
    spend_priv_key: String,
}

#[derive(Deserialize)]
struct ReceivingExpected {
    addresses: Vec<String>,
    tweak: Option<String>,
    shared_secret: Option<String>,
    input_pub_key_sum: Option<String>,
    outputs: Option<Vec<ExpectedOutput>>,
    n_outputs: Option<usize>,
}

#[derive(Deserialize, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct ExpectedOutput {
    pub_key: String,
    priv_key_tweak: String,
    signature: String,
}

fn cases() -> Vec<Case> {
    serde_json::from_str(VECTORS).expect("the vector file parses")
}

fn bytes(text: &str) -> Vec<u8> {
    hex::decode(text).expect("hex")
}

fn array<const N: usize>(text: &str) -> [u8; N] {
    bytes(text).try_into().expect("length")
}

/// The vin entries as a transaction's inputs and the outputs they spend.
fn inputs(vin: &[Vin]) -> (Vec<TxIn>, Vec<TxOut>) {
    vin.iter()
        .map(|input| {
            let witness = if input.txinwitness.is_empty() {
                Witness::new()
            } else {
                consensus::deserialize(&bytes(&input.txinwitness)).expect("a serialised witness")
            };
            let txin = TxIn {
                previous_output: OutPoint {
                    txid: input.txid.parse::<Txid>().expect("txid"),
                    vout: input.vout,
                },
                script_sig: ScriptBuf::from_bytes(bytes(&input.script_sig)),
                sequence: Sequence::MAX,
                witness,
            };
            let spent = TxOut {
                value: Amount::from_sat(100_000),
                script_pubkey: ScriptBuf::from_bytes(bytes(&input.prevout.script_pubkey.hex)),
            };
            (txin, spent)
        })
        .unzip()
}

fn taproot_output(x_only: &[u8; 32]) -> TxOut {
    let mut script = vec![0x51, 0x20];
    script.extend_from_slice(x_only);
    TxOut {
        value: Amount::from_sat(10_000),
        script_pubkey: ScriptBuf::from_bytes(script),
    }
}

/// A block's first transaction, which spends nothing.
fn coinbase() -> Transaction {
    Transaction {
        version: transaction::Version::TWO,
        lock_time: absolute::LockTime::ZERO,
        input: vec![TxIn {
            previous_output: OutPoint::null(),
            script_sig: ScriptBuf::from_bytes(vec![1, 1]),
            sequence: Sequence::MAX,
            witness: Witness::new(),
        }],
        output: vec![TxOut {
            value: Amount::from_sat(50),
            script_pubkey: ScriptBuf::new(),
        }],
    }
}

/// BIP-352 "Test Vectors": the receiving side signs `sha256("message")`
/// with aux `sha256("random auxiliary data")` and the key
/// `b_spend + priv_key_tweak`, negated to even y (BIP-340).
fn signature(
    secp: &Secp256k1<bitcoin::secp256k1::All>,
    spend_secret: &SecretKey,
    tweak: &SecretKey,
) -> String {
    let key = spend_secret
        .add_tweak(&Scalar::from(*tweak))
        .expect("a valid key");
    let keypair = Keypair::from_secret_key(secp, &key);
    let msg = Message::from_digest(sha256::Hash::hash(b"message").to_byte_array());
    let aux = sha256::Hash::hash(b"random auxiliary data").to_byte_array();
    let signature: schnorr::Signature = secp.sign_schnorr_with_aux_rand(&msg, &keypair, &aux);
    hex::encode(signature.serialize())
}

#[test]
fn the_file_is_the_one_the_design_names() {
    // docs/silent-payments.md, "Sources read": 28 cases, last changed by
    // bitcoin/bips c2ac36f4.
    let digest = sha256::Hash::hash(VECTORS.as_bytes());
    assert_eq!(
        digest.to_string(),
        "f5f9ed4afd76a1b76f3c70b1cbe67532f89abbe559f8e02d7fc3d8ecb93af4a1"
    );
    assert_eq!(cases().len(), 28);
}

#[test]
fn receiving_vectors() {
    let secp = Secp256k1::new();
    let mut checked = 0;
    for case in cases() {
        for (index, test) in case.receiving.iter().enumerate() {
            let name = format!("{} (receiving {index})", case.comment);
            receive(&secp, &name, test);
            checked += 1;
        }
    }
    // 28 cases, one of which ("use silent payments for sender change")
    // has two receivers.
    assert_eq!(checked, 29);
}

fn receive(secp: &Secp256k1<bitcoin::secp256k1::All>, name: &str, test: &Receiving) {
    let given = &test.given;
    let expected = &test.expected;
    let scan_secret =
        SecretKey::from_slice(&bytes(&given.key_material.scan_priv_key)).expect("key");
    let spend_secret =
        SecretKey::from_slice(&bytes(&given.key_material.spend_priv_key)).expect("key");
    let keys = ScanKeys::from_slices(
        &scan_secret.secret_bytes(),
        &spend_secret.public_key(secp).serialize(),
        given.labels.iter().copied(),
    )
    .expect("valid keys");

    // Addresses: unlabelled, then each label in the order given.
    let mut addresses = vec![keys.address(Network::Bitcoin)];
    for &m in &given.labels {
        addresses.push(keys.labelled_address(m, Network::Bitcoin).expect("a label"));
    }
    assert_eq!(addresses, expected.addresses, "{name}: addresses");

    let (input, spent) = inputs(&given.vin);
    let output_keys: Vec<[u8; 32]> = given.outputs.iter().map(|key| array(key)).collect();
    let tx = Transaction {
        version: transaction::Version::TWO,
        lock_time: absolute::LockTime::ZERO,
        input,
        output: output_keys.iter().map(taproot_output).collect(),
    };
    let tweak = osprey_sp::tweak_data(&tx, &spent).expect("one spent output per input");

    // The record the index would write: exactly one for an eligible
    // transaction, none otherwise.
    let mut record_bytes = Vec::new();
    let written = append_block_records(&[coinbase(), tx.clone()], &spent, &mut record_bytes)
        .expect("valid block");
    let records: Vec<_> = BlockRecords::new(&record_bytes)
        .collect::<Result<_, _>>()
        .expect("readable records");
    assert_eq!(written, records.len());

    let Some(tweak) = tweak else {
        // "No valid inputs" and "Input keys sum up to zero": no tweak, no
        // output found, no record.
        assert_eq!(
            expected.tweak, None,
            "{name}: the transaction should be eligible"
        );
        assert_eq!(expected.shared_secret, None, "{name}");
        assert_eq!(expected.outputs.as_deref(), Some(&[][..]), "{name}");
        assert!(
            records.is_empty(),
            "{name}: a record for an ineligible transaction"
        );
        return;
    };
    assert_eq!(
        Some(hex::encode(tweak.input_key_sum().serialize())),
        expected.input_pub_key_sum,
        "{name}: A"
    );
    assert_eq!(
        Some(hex::encode(tweak.tweak_key().expect("a tweak"))),
        expected.tweak,
        "{name}: input_hash·A"
    );
    assert_eq!(
        Some(hex::encode(
            keys.shared_secret(&tweak).expect("a shared secret")
        )),
        expected.shared_secret,
        "{name}: shared secret"
    );

    // The record holds the same tweak data and the prefix of every taproot
    // output key, in output order.
    let [record] = records[..] else {
        panic!(
            "{name}: {} records for one eligible transaction",
            records.len()
        );
    };
    assert_eq!(record.position, 1, "after the coinbase");
    assert_eq!(record.tweak_data().expect("a valid record"), tweak);
    let prefixes: Vec<&[u8]> = record.output_prefixes().collect();
    let expected_prefixes: Vec<&[u8]> = output_keys
        .iter()
        .map(|key| &key[..osprey_sp::OUTPUT_PREFIX_LEN])
        .collect();
    assert_eq!(prefixes, expected_prefixes, "{name}: output prefixes");

    // The full scan.
    let found = keys.scan_outputs(&tweak, &output_keys).expect("a scan");
    match (&expected.outputs, expected.n_outputs) {
        (Some(outputs), _) => {
            let got: BTreeSet<ExpectedOutput> = found
                .iter()
                .map(|output| ExpectedOutput {
                    pub_key: hex::encode(output.output_key),
                    priv_key_tweak: hex::encode(output.spend_key_tweak.secret_bytes()),
                    signature: signature(secp, &spend_secret, &output.spend_key_tweak),
                })
                .collect();
            let want: BTreeSet<&ExpectedOutput> = outputs.iter().collect();
            assert_eq!(
                got.iter().collect::<BTreeSet<_>>(),
                want,
                "{name}: found outputs"
            );
            assert_eq!(got.len(), found.len(), "{name}: an output found twice");
        }
        (None, Some(count)) => {
            // The K_max case: 2,324 outputs to one receiver, the scan stops
            // at k = 2,323.
            assert_eq!(found.len(), count, "{name}: number of outputs found");
            assert_eq!(count as u32, K_MAX);
            assert_eq!(found.last().map(|output| output.k), Some(K_MAX - 1));
        }
        (None, None) => panic!("{name}: neither outputs nor n_outputs"),
    }
    // Each found output is at its k, in order.
    for (k, output) in found.iter().enumerate() {
        assert_eq!(output.k, k as u32, "{name}");
    }

    // The server's kernel: reports the transaction exactly when the full
    // scan finds something, through the record's prefixes then the full key.
    let candidates = keys.first_output_candidates(&tweak).expect("candidates");
    assert_eq!(candidates.keys().len(), 1 + keys.labels().count());
    // The batched kernel the server scans with gives the same candidates,
    // alone and beside another record.
    let mut batch = CandidateBatch::new();
    keys.first_output_candidates_batch(&[tweak, tweak], &mut batch);
    for record_index in 0..2 {
        assert_eq!(
            batch.keys(record_index),
            Some(candidates.keys()),
            "{name}: batched kernel"
        );
        assert_eq!(
            batch.prefix_hits(record_index, &record).collect::<Vec<_>>(),
            candidates.prefix_hits(&record).collect::<Vec<_>>(),
            "{name}: batched kernel's prefix hits"
        );
    }
    let confirmed = candidates
        .prefix_hits(&record)
        .filter(|key| output_keys.contains(key))
        .count();
    assert_eq!(
        confirmed > 0,
        !found.is_empty(),
        "{name}: kernel on the record"
    );
    assert_eq!(
        candidates.any_in(&output_keys),
        !found.is_empty(),
        "{name}: kernel on full keys"
    );
    if let Some(first) = found.first() {
        assert!(
            candidates.keys().contains(&first.output_key),
            "{name}: k = 0 is a candidate"
        );
    }
}

#[test]
fn sending_vectors() {
    let secp = Secp256k1::new();
    let mut checked = 0;
    for case in cases() {
        for (index, test) in case.sending.iter().enumerate() {
            send(&secp, &format!("{} (sending {index})", case.comment), test);
            checked += 1;
        }
    }
    assert_eq!(checked, 28);
}

fn send(secp: &Secp256k1<bitcoin::secp256k1::All>, name: &str, test: &Sending) {
    let given = &test.given;
    let expected = &test.expected;
    let (input, spent) = inputs(&given.vin);

    // Which inputs count, and their keys: this crate's code.
    let counted: Vec<(PublicKey, SecretKey)> = input
        .iter()
        .zip(&spent)
        .zip(&given.vin)
        .filter_map(|((txin, out), vin)| {
            let key =
                osprey_sp::input_public_key(&out.script_pubkey, &txin.script_sig, &txin.witness)?;
            let mut secret = SecretKey::from_slice(&bytes(
                vin.private_key.as_deref().expect("a sending vin has a key"),
            ))
            .expect("a key");
            // BIP-352 "Creating outputs": a taproot input's key is negated
            // when its point has odd y, matching the receiver's even lift.
            if out.script_pubkey.is_p2tr()
                && secret.public_key(secp).x_only_public_key().1 == Parity::Odd
            {
                secret = secret.negate();
            }
            Some((key, secret))
        })
        .collect();
    let input_pub_keys: Vec<String> = counted
        .iter()
        .map(|(key, _)| hex::encode(key.serialize()))
        .collect();
    assert_eq!(
        input_pub_keys, expected.input_pub_keys,
        "{name}: input keys"
    );

    // Each recipient entry's address encodes its keys.
    for recipient in &given.recipients {
        let scan: PublicKey = recipient.scan_pub_key.parse().expect("a key");
        let spend: PublicKey = recipient.spend_pub_key.parse().expect("a key");
        assert_eq!(
            osprey_sp::address(&scan, &spend, Network::Bitcoin),
            recipient.address,
            "{name}: address"
        );
    }

    // `A = a·G` as the sum of the counted keys' points (an intermediate sum
    // may be infinity, the total not), and `a·B_scan` likewise, so that no
    // scalar sum is needed.
    let points: Vec<PublicKey> = counted
        .iter()
        .map(|(_, secret)| secret.public_key(secp))
        .collect();
    let sum =
        |points: &[PublicKey]| PublicKey::combine_keys(&points.iter().collect::<Vec<_>>()).ok();
    let Some(input_key_sum) = sum(&points) else {
        // No counted input, or keys summing to zero: sending fails.
        assert_eq!(expected.outputs, vec![Vec::<String>::new()], "{name}");
        assert!(
            expected.shared_secrets.iter().all(Option::is_none),
            "{name}"
        );
        return;
    };
    if let Some(secret_sum) = &expected.input_private_key_sum {
        let secret_sum = SecretKey::from_slice(&bytes(secret_sum)).expect("a key");
        assert_eq!(secret_sum.public_key(secp), input_key_sum, "{name}: a·G");
    }
    let input_hash = osprey_sp::input_hash(
        input.iter().map(|txin| &txin.previous_output),
        &input_key_sum,
    )
    .expect("a valid input_hash");

    // Recipients grouped by scan key, in order of appearance, each entry
    // repeated `count` times ("Creating outputs").
    let mut groups: Vec<(PublicKey, Vec<PublicKey>)> = Vec::new();
    for recipient in &given.recipients {
        let scan: PublicKey = recipient.scan_pub_key.parse().expect("a key");
        let spend: PublicKey = recipient.spend_pub_key.parse().expect("a key");
        let count = recipient.count.unwrap_or(1);
        match groups.iter_mut().find(|(key, _)| *key == scan) {
            Some((_, spends)) => spends.extend(std::iter::repeat_n(spend, count)),
            None => groups.push((scan, vec![spend; count])),
        }
    }
    if groups
        .iter()
        .any(|(_, spends)| spends.len() > K_MAX as usize)
    {
        // "If any of the groups exceed the limit of K_max ... fail."
        assert_eq!(expected.outputs, vec![Vec::<String>::new()], "{name}");
        return;
    }
    let shared_secret = |scan: &PublicKey| -> [u8; 33] {
        let shares: Vec<PublicKey> = counted
            .iter()
            .map(|(_, secret)| {
                scan.mul_tweak(secp, &Scalar::from(*secret))
                    .expect("a point")
            })
            .collect();
        sum(&shares)
            .expect("a·B_scan is not infinity when a·G is not")
            .mul_tweak(secp, &Scalar::from(input_hash))
            .expect("a point")
            .serialize()
    };
    for (recipient, expected_secret) in given.recipients.iter().zip(&expected.shared_secrets) {
        let scan: PublicKey = recipient.scan_pub_key.parse().expect("a key");
        assert_eq!(
            Some(hex::encode(shared_secret(&scan))),
            *expected_secret,
            "{name}: shared secret"
        );
    }
    let mut outputs = BTreeSet::new();
    for (scan, spends) in &groups {
        let secret = shared_secret(scan);
        for (k, spend) in spends.iter().enumerate() {
            let t_k = osprey_sp::shared_secret_tweak(&secret, k as u32).expect("a valid t_k");
            let output = spend
                .combine(&t_k.public_key(secp))
                .expect("not infinity")
                .x_only_public_key()
                .0;
            outputs.insert(hex::encode(output.serialize()));
        }
    }
    assert!(
        expected
            .outputs
            .iter()
            .any(|set| set.iter().cloned().collect::<BTreeSet<_>>() == outputs),
        "{name}: outputs {outputs:?} are none of the expected sets"
    );
}
