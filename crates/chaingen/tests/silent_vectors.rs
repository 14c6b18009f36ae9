//! chaingen's silent-payment sender ([`osprey_chaingen::silent::pay`],
//! spdk inside) against BIP-352's sending test vectors, the copy
//! `osprey-sp` keeps (crates/sp/tests/vectors/README.md says where it comes
//! from): which inputs count, the secrets of taproot inputs, `k`, and the
//! `K_max` limit. Every case's outputs must be one of its expected sets;
//! where the BIP says sending fails, the sender must fail.

use std::str::FromStr;

use bitcoin::secp256k1::SecretKey;
use bitcoin::{consensus, OutPoint, ScriptBuf, Txid, Witness};
use osprey_chaingen::silent::{pay, SendError, SenderInput};
use serde::Deserialize;
use silentpayments::{SilentPaymentCode, SilentPaymentKeyMaterial};

const VECTORS: &str = include_str!("../../sp/tests/vectors/send_and_receive_test_vectors.json");

#[derive(Deserialize)]
struct Case {
    comment: String,
    sending: Vec<Sending>,
}

#[derive(Deserialize)]
struct Sending {
    given: Given,
    expected: Expected,
}

#[derive(Deserialize)]
struct Given {
    vin: Vec<Vin>,
    recipients: Vec<Recipient>,
}

#[derive(Deserialize)]
struct Vin {
    txid: String,
    vout: u32,
    #[serde(rename = "scriptSig")]
    script_sig: String,
    txinwitness: String,
    prevout: Prevout,
    private_key: String,
}

#[derive(Deserialize)]
struct Prevout {
    #[serde(rename = "scriptPubKey")]
    script_pubkey: Hex,
}

#[derive(Deserialize)]
struct Hex {
    hex: String,
}

#[derive(Deserialize)]
struct Recipient {
    address: String,
    /// Outputs to this address (the `K_max` case); 1 when absent.
    count: Option<usize>,
}

#[derive(Deserialize)]
struct Expected {
    /// Every acceptable set of x-only output keys; `[[]]` where sending
    /// fails.
    outputs: Vec<Vec<String>>,
}

fn bytes(text: &str) -> Vec<u8> {
    hex::decode(text).expect("hex")
}

/// The case's inputs, owned: outpoint, spent script, scriptSig, witness
/// and secret key.
fn inputs(vin: &[Vin]) -> Vec<(OutPoint, ScriptBuf, ScriptBuf, Witness, SecretKey)> {
    vin.iter()
        .map(|input| {
            let witness = if input.txinwitness.is_empty() {
                Witness::new()
            } else {
                consensus::deserialize(&bytes(&input.txinwitness)).expect("a serialised witness")
            };
            (
                OutPoint {
                    txid: input.txid.parse::<Txid>().expect("txid"),
                    vout: input.vout,
                },
                ScriptBuf::from_bytes(bytes(&input.prevout.script_pubkey.hex)),
                ScriptBuf::from_bytes(bytes(&input.script_sig)),
                witness,
                SecretKey::from_slice(&bytes(&input.private_key)).expect("a secret key"),
            )
        })
        .collect()
}

#[test]
fn the_sender_makes_one_of_the_expected_output_sets() {
    let cases: Vec<Case> = serde_json::from_str(VECTORS).expect("the vector file parses");
    assert_eq!(cases.len(), 28);
    let (mut sent, mut refused) = (0, 0);
    for case in &cases {
        for sending in &case.sending {
            let name = &case.comment;
            let owned = inputs(&sending.given.vin);
            let inputs: Vec<SenderInput<'_>> = owned
                .iter()
                .map(
                    |(outpoint, spent, script_sig, witness, secret)| SenderInput {
                        outpoint: *outpoint,
                        spent_script: spent,
                        script_sig,
                        witness,
                        secret: Some(*secret),
                    },
                )
                .collect();
            let mut recipients: Vec<SilentPaymentKeyMaterial> = Vec::new();
            for recipient in &sending.given.recipients {
                let code = SilentPaymentCode::from_str(&recipient.address).expect("an address");
                recipients.extend(std::iter::repeat_n(
                    SilentPaymentKeyMaterial::from(code),
                    recipient.count.unwrap_or(1),
                ));
            }
            let expected: Vec<Vec<String>> = sending
                .expected
                .outputs
                .iter()
                .map(|set| {
                    let mut set = set.clone();
                    set.sort();
                    set
                })
                .collect();
            match pay(&inputs, &recipients) {
                Ok(made) => {
                    assert_eq!(made.outputs.len(), recipients.len(), "{name}");
                    let mut keys: Vec<String> = made
                        .outputs
                        .iter()
                        .map(|(key, _)| key.to_string())
                        .collect();
                    keys.sort();
                    assert!(
                        expected.contains(&keys),
                        "{name}: {keys:?} is none of {expected:?}"
                    );
                    // k counts each scan key's outputs in recipient order.
                    for (i, (_, k)) in made.outputs.iter().enumerate() {
                        let earlier = recipients[..i]
                            .iter()
                            .filter(|r| r.scan_key() == recipients[i].scan_key())
                            .count();
                        assert_eq!(*k as usize, earlier, "{name}: output {i}");
                    }
                    sent += 1;
                }
                Err(error) => {
                    assert_eq!(expected, [Vec::<String>::new()], "{name}: {error}");
                    let reason_expected = match name.as_str() {
                        "No valid inputs, sender generates no outputs" => {
                            matches!(error, SendError::NoInputs)
                        }
                        n if n.starts_with("Maximum per-group recipient limit K_max") => {
                            matches!(error, SendError::TooManyOutputs)
                        }
                        n if n.starts_with("Input keys sum up to zero") => {
                            matches!(error, SendError::KeysSumToZero)
                        }
                        _ => false,
                    };
                    assert!(reason_expected, "{name}: failed with {error}");
                    refused += 1;
                }
            }
        }
    }
    assert_eq!((sent, refused), (25, 3));
}

/// The sender checks each counted input's secret against the key the input
/// shows, and needs one for every counted input.
#[test]
fn the_sender_refuses_missing_or_wrong_secrets() {
    let cases: Vec<Case> = serde_json::from_str(VECTORS).expect("the vector file parses");
    let case = &cases[0].sending[0];
    let owned = inputs(&case.given.vin);
    let recipient: SilentPaymentKeyMaterial =
        SilentPaymentCode::from_str(&case.given.recipients[0].address)
            .expect("an address")
            .into();
    let with_secrets = |secrets: [Option<SecretKey>; 2]| {
        let inputs: Vec<SenderInput<'_>> = owned
            .iter()
            .zip(secrets)
            .map(
                |((outpoint, spent, script_sig, witness, _), secret)| SenderInput {
                    outpoint: *outpoint,
                    spent_script: spent,
                    script_sig,
                    witness,
                    secret,
                },
            )
            .collect();
        pay(&inputs, &[recipient])
    };
    let (a, b) = (owned[0].4, owned[1].4);
    assert!(with_secrets([Some(a), Some(b)]).is_ok());
    assert!(matches!(
        with_secrets([Some(a), None]),
        Err(SendError::NoSecret { index: 1 })
    ));
    assert!(matches!(
        with_secrets([Some(b), Some(a)]),
        Err(SendError::WrongSecret { index: 0 })
    ));
}
