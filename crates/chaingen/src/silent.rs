//! Silent payments (BIP-352) in generated chains (docs/silent-payments.md,
//! 4.3): the receivers a chain pays, and the sender that makes their
//! outputs.
//!
//! The sender is spdk's `silentpayments` crate, not `osprey-sp`: the
//! chain's payments are the oracle `osprey-sp`'s receiver and the server
//! are tested against, so a mistake in one cannot hide in both. What this
//! module adds around spdk is what a wallet adds: which inputs count (spdk's
//! own reading of each input, on the transaction as it will be signed),
//! the secret key of each counted input (for taproot, that of the tweaked
//! output key: [`crate::sign::Key::spending_secret`]), their sum `a`, the
//! `k` of each output, and BIP-352's `K_max` limit.
//!
//! The sum is this module's because spdk 0.8.1 adds the keys one by one
//! and fails when a partial sum is zero, which BIP-352's vector "Input keys
//! intermediate sum is zero but final sum is non-zero" says must not fail;
//! spdk is given `a` as one non-taproot key.

use bitcoin::bip32::{DerivationPath, Xpriv};
use bitcoin::hashes::hmac::{Hmac, HmacEngine};
use bitcoin::hashes::{sha512, Hash, HashEngine};
use bitcoin::secp256k1::{Parity, PublicKey, Scalar, SecretKey, XOnlyPublicKey};
use bitcoin::{OutPoint, Script, Transaction, Witness};
use silentpayments::receiving::{Label, Receiver as SpdkReceiver};
use silentpayments::sending::generate_recipient_pubkeys;
use silentpayments::utils::receiving::get_pubkey_from_input;
use silentpayments::utils::sending::calculate_partial_secret;
use silentpayments::{SilentPaymentCode, SilentPaymentKeyMaterial, SpVersion};

use crate::sign::{sign_placeholders, Holder, Key, ScriptKind, SignError, Spend, SECP};

/// Receivers a chain with silent payments pays.
pub const RECEIVERS: usize = 8;

/// Index of the first receiver key in the chain seed's key family: far
/// above the fresh keys, which count up from 1, so no receiver key is ever
/// a fresh key.
const RECEIVER_KEYS: u64 = 1 << 63;

/// The labels receiver 0 is paid through and subscribes with.
const RECEIVER_0_LABELS: [u32; 2] = [1, 2];

/// BIP-352's change label, which every receiver scans.
const CHANGE_LABEL: u32 = 0;

/// One receiver of a chain's silent payments, derived from the chain's
/// seed: scan key `2i`, spend key `2i + 1` past [`RECEIVER_KEYS`].
/// Receiver 0 is paid through its unlabelled address and labels 1 and 2;
/// receiver 1 through its unlabelled address and its change label 0; the
/// others through their unlabelled address only.
pub struct Receiver {
    scan: Key,
    spend: PublicKey,
    /// The addresses it is paid through: `None` for the unlabelled one,
    /// else the label `m`, with the keys a sender pays.
    addresses: Vec<(Option<u32>, SilentPaymentKeyMaterial)>,
    /// Regtest code (`sprt1q...`) of the unlabelled address.
    code: SilentPaymentCode,
}

impl Receiver {
    /// Receiver number `index` of the chain of `seed`.
    pub fn new(seed: u64, index: usize) -> Receiver {
        let base = RECEIVER_KEYS + 2 * index as u64;
        let labels: &[u32] = match index {
            0 => &RECEIVER_0_LABELS,
            1 => &[CHANGE_LABEL],
            _ => &[],
        };
        Receiver::with_keys(
            Key::from_seed(seed, base),
            Key::from_seed(seed, base + 1),
            labels,
        )
    }

    /// The receiver of scan key `scan` and spend key `spend`, paid through
    /// its unlabelled address and each of `labels`.
    pub fn with_keys(scan: Key, spend: Key, labels: &[u32]) -> Receiver {
        Receiver::with_spend_public_key(scan, *spend.public_key(), labels)
    }

    /// The receiver of scan key `scan` and spend public key `spend` (all a
    /// sender and a scanning server know of it, e.g. a wallet's whose spend
    /// secret stays in the wallet), paid through its unlabelled address and
    /// each of `labels`.
    pub fn with_spend_public_key(scan: Key, spend: PublicKey, labels: &[u32]) -> Receiver {
        // spdk derives the labelled spend keys too: the sender's side of
        // the test oracle stays spdk's.
        let change = Label::new(*scan.secret_key(), CHANGE_LABEL);
        let mut spdk = SpdkReceiver::new(
            SpVersion::ZERO,
            *scan.public_key(),
            spend,
            change,
            silentpayments::Network::Regtest,
        )
        .expect("B_spend + label·G is infinity with negligible probability");
        let mut addresses = vec![(
            None,
            SilentPaymentKeyMaterial::new_v0(*scan.public_key(), spend),
        )];
        for &m in labels {
            let label = Label::new(*scan.secret_key(), m);
            spdk.add_label(label.clone())
                .expect("B_spend + label·G is infinity with negligible probability");
            let code = spdk
                .receiving_code_for_label(&label)
                .expect("the label was just added");
            addresses.push((Some(m), code.into()));
        }
        let code =
            SilentPaymentCode::new_v0(*scan.public_key(), spend, silentpayments::Network::Regtest);
        Receiver {
            scan,
            spend,
            addresses,
            code,
        }
    }

    /// `b_scan`.
    pub fn scan_secret(&self) -> &SecretKey {
        self.scan.secret_key()
    }

    /// `B_spend`.
    pub fn spend_public_key(&self) -> &PublicKey {
        &self.spend
    }

    /// The unlabelled address, with the regtest prefix `sprt`.
    pub fn address(&self) -> String {
        self.code.to_string()
    }

    /// The labels a subscription must ask for to see every payment: the
    /// ones it is paid through, but the change label, which a receiver
    /// always scans (and Frigate refuses as a parameter).
    pub fn subscription_labels(&self) -> Vec<u32> {
        self.addresses
            .iter()
            .filter_map(|(label, _)| *label)
            .filter(|m| *m != CHANGE_LABEL)
            .collect()
    }

    /// The labels it is paid through, `None` for the unlabelled address.
    pub fn paid_labels(&self) -> impl Iterator<Item = Option<u32>> + '_ {
        self.addresses.iter().map(|(label, _)| *label)
    }

    /// The keys a sender pays for `label` (`None`: unlabelled).
    ///
    /// # Panics
    /// When `label` is not one of [`Receiver::paid_labels`], a bug of the
    /// caller.
    pub fn key_material(&self, label: Option<u32>) -> SilentPaymentKeyMaterial {
        self.addresses
            .iter()
            .find(|(m, _)| *m == label)
            .map(|(_, keys)| *keys)
            .expect("receivers are only paid through their own labels")
    }
}

/// Rounds of PBKDF2-HMAC-SHA512 from a BIP-39 mnemonic to its seed.
const BIP39_ROUNDS: u32 = 2048;

/// The keys of the silent-payment wallet a BIP-39 `mnemonic` (no
/// passphrase) restores in Sparrow on regtest, testnet or signet: scan
/// secret at m/352'/1'/0'/1'/0 and spend key at m/352'/1'/0'/0'/0
/// (BIP-352's paths, account 0, coin type 1'; drongo's
/// `KeyDerivation.getBip352ScanDerivation`). Returns the receiver paid
/// through its unlabelled address only.
///
/// The mnemonic's words are not checked against BIP-39's list (a wallet
/// refuses a bad checksum; the seed is PBKDF2 of the words whatever they
/// are), so this needs no word list.
///
/// # Errors
/// When `mnemonic` is not lowercase ASCII words: BIP-39 hashes the NFKD
/// form, which for those is the text itself.
pub fn receiver_of_mnemonic(mnemonic: &str) -> Result<Receiver, String> {
    let words: Vec<&str> = mnemonic.split_whitespace().collect();
    if words.is_empty()
        || !words
            .iter()
            .all(|w| w.bytes().all(|b| b.is_ascii_lowercase()))
    {
        return Err("a mnemonic is lowercase ASCII words".into());
    }
    let seed = bip39_seed(&words.join(" "));
    let master = Xpriv::new_master(bitcoin::NetworkKind::Test, &seed)
        .map_err(|e| format!("no master key from the mnemonic's seed: {e}"))?;
    let derive = |path: &str| {
        let path: DerivationPath = path.parse().expect("a valid constant path");
        master
            .derive_priv(&SECP, &path)
            .map(|key| key.private_key)
            .map_err(|e| format!("deriving {path}: {e}"))
    };
    let scan = derive("m/352'/1'/0'/1'/0")?;
    let spend = derive("m/352'/1'/0'/0'/0")?;
    Ok(Receiver::with_spend_public_key(
        Key::from_secret(scan),
        spend.public_key(&SECP),
        &[],
    ))
}

/// BIP-39's seed of a mnemonic without passphrase: PBKDF2-HMAC-SHA512 of
/// the mnemonic, salt "mnemonic", one 64-byte block (the hash's size).
fn bip39_seed(mnemonic: &str) -> [u8; 64] {
    let hmac = |data: &[&[u8]]| {
        let mut engine = HmacEngine::<sha512::Hash>::new(mnemonic.as_bytes());
        for part in data {
            engine.input(part);
        }
        Hmac::<sha512::Hash>::from_engine(engine).to_byte_array()
    };
    let mut u = hmac(&[b"mnemonic", &1u32.to_be_bytes()]);
    let mut seed = u;
    for _ in 1..BIP39_ROUNDS {
        u = hmac(&[&u]);
        for (s, b) in seed.iter_mut().zip(u) {
            *s ^= b;
        }
    }
    seed
}

/// The receivers of the chain of `seed`.
pub fn receivers(seed: u64) -> Vec<Receiver> {
    (0..RECEIVERS).map(|i| Receiver::new(seed, i)).collect()
}

/// True for the kinds of coin whose spends BIP-352 counts (2.1): the key
/// hashes, wrapped or not, and taproot, key path or (for the envelope,
/// whose internal key is a real key) script path; not P2WSH.
pub fn counts(kind: ScriptKind) -> bool {
    !matches!(kind, ScriptKind::P2wsh)
}

/// The secret key of the public key a spend of a coin of `kind` held by
/// `holder` shows BIP-352, when it is known: not for a placeholder key,
/// which has none.
pub fn spending_secret(holder: &Holder, kind: ScriptKind) -> Option<SecretKey> {
    match holder {
        Holder::Key(key) => Some(key.spending_secret(kind)),
        Holder::Placeholder(_) => None,
    }
}

/// One input of a transaction that pays silent payments, as the sender
/// sees it: the input as it will be signed (signatures may be
/// placeholders: BIP-352 reads only keys and scripts) and the secret key
/// behind its public key.
pub struct SenderInput<'a> {
    pub outpoint: OutPoint,
    /// The scriptPubKey of the output it spends.
    pub spent_script: &'a Script,
    pub script_sig: &'a Script,
    pub witness: &'a Witness,
    /// For taproot, the secret of the output key; `None` when unknown.
    pub secret: Option<SecretKey>,
}

/// The outputs of a silent payment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// `ser_P(input_hash·A)`: what a server sends a receiver for the
    /// transaction (`tweak_key`).
    pub tweak_key: [u8; 33],
    /// For each recipient, in the order given: the output's x-only key and
    /// its `k`.
    pub outputs: Vec<(XOnlyPublicKey, u32)>,
}

/// Why a silent payment cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("input {index}: {message}")]
    Input { index: usize, message: String },
    #[error("input {index} counts for silent payments, but its secret key is unknown")]
    NoSecret { index: usize },
    #[error("input {index}: the secret key given is not the key the input shows")]
    WrongSecret { index: usize },
    #[error(transparent)]
    Spends(#[from] SignError),
    #[error("no input counts for silent payments")]
    NoInputs,
    #[error("more than K_max = {} outputs to one scan key", osprey_sp::K_MAX)]
    TooManyOutputs,
    /// BIP-352: "If a = 0, fail".
    #[error("the keys of the counted inputs sum to zero")]
    KeysSumToZero,
    /// spdk's failures: a hash that is not a valid scalar, or a point at
    /// infinity (each of probability about 2^-128).
    #[error("BIP-352 derivation failed: {0}")]
    Derivation(String),
}

/// Makes the output keys of `tx`, which spends `spends` (one per input, in
/// order), paying `recipients` (as [`pay`]): from its inputs as they will
/// be signed. BIP-352 reads the keys and scripts an input shows, never its
/// signature: placeholders show the same ones, at no cost, before the
/// outputs the real signatures commit to are known.
///
/// # Errors
/// When `spends` does not line up with the inputs, or as [`pay`].
pub fn pay_spends<S: AsRef<Spend>>(
    tx: &Transaction,
    spends: &[S],
    recipients: &[SilentPaymentKeyMaterial],
) -> Result<Sent, SendError> {
    let mut shaped = tx.clone();
    sign_placeholders(&mut shaped, spends)?;
    let inputs: Vec<SenderInput<'_>> = shaped
        .input
        .iter()
        .zip(spends.iter().map(AsRef::as_ref))
        .map(|(input, spend)| SenderInput {
            outpoint: input.previous_output,
            spent_script: &spend.txout.script_pubkey,
            script_sig: &input.script_sig,
            witness: &input.witness,
            secret: spending_secret(&spend.holder, spend.kind),
        })
        .collect();
    pay(&inputs, recipients)
}

/// Makes the output keys of a transaction spending `inputs` (every input,
/// in order) that pays `recipients` (one entry per output; an address
/// given twice is paid twice).
///
/// # Errors
/// When no input counts, a counted input's secret is unknown or wrong,
/// more than `K_max` outputs go to one scan key, the counted keys sum to
/// zero, or the BIP-352 derivation fails.
pub fn pay(
    inputs: &[SenderInput<'_>],
    recipients: &[SilentPaymentKeyMaterial],
) -> Result<Sent, SendError> {
    // `a`, with zero as `None`: a partial sum may be zero when the total
    // is not.
    let mut sum: Option<SecretKey> = None;
    let mut counted = 0;
    for (index, input) in inputs.iter().enumerate() {
        let witness: Vec<Vec<u8>> = input.witness.iter().map(<[u8]>::to_vec).collect();
        let shown = get_pubkey_from_input(
            input.script_sig.as_bytes(),
            &witness,
            input.spent_script.as_bytes(),
        )
        .map_err(|e| SendError::Input {
            index,
            message: e.to_string(),
        })?;
        let Some(shown) = shown else {
            continue;
        };
        let mut secret = input.secret.ok_or(SendError::NoSecret { index })?;
        let mut public = secret.public_key(&SECP);
        // A taproot input shows its output key with an even y (BIP-352:
        // "negate the private key if the public key has an odd y").
        if input.spent_script.is_p2tr() && public.x_only_public_key().1 == Parity::Odd {
            secret = secret.negate();
            public = public.negate(&SECP);
        }
        if public != shown {
            return Err(SendError::WrongSecret { index });
        }
        counted += 1;
        sum = match sum {
            None => Some(secret),
            // Fails exactly when the sum is zero.
            Some(partial) => partial.add_tweak(&Scalar::from(secret)).ok(),
        };
    }
    if counted == 0 {
        return Err(SendError::NoInputs);
    }
    let sum = sum.ok_or(SendError::KeysSumToZero)?;
    // spdk numbers `k` per scan key in the order of the recipients: the
    // n-th recipient of a scan key gets k = n.
    let mut outputs_k = Vec::with_capacity(recipients.len());
    for (i, recipient) in recipients.iter().enumerate() {
        let k = recipients[..i]
            .iter()
            .filter(|earlier| earlier.scan_key() == recipient.scan_key())
            .count();
        let k = u32::try_from(k)
            .ok()
            .filter(|k| *k < osprey_sp::K_MAX)
            .ok_or(SendError::TooManyOutputs)?;
        outputs_k.push(k);
    }
    let outpoints: Vec<silentpayments::utils::OutPoint> = inputs
        .iter()
        .map(|input| {
            silentpayments::utils::OutPoint::from_txid_bytes_and_vout(
                input.outpoint.txid.to_byte_array(),
                input.outpoint.vout,
            )
        })
        .collect();
    let derivation = |e: silentpayments::Error| SendError::Derivation(e.to_string());
    let partial_secret =
        calculate_partial_secret(&[(sum, false)], &outpoints).map_err(derivation)?;
    let tweak_key = SecretKey::from(partial_secret)
        .public_key(&SECP)
        .serialize();
    let mut by_recipient = generate_recipient_pubkeys(recipients.iter().copied(), partial_secret)
        .map_err(derivation)?;
    // Each recipient's keys come in `k` order; hand them out in the order
    // the recipients were given.
    for keys in by_recipient.values_mut() {
        keys.reverse();
    }
    let outputs = recipients
        .iter()
        .zip(outputs_k)
        .map(|(recipient, k)| {
            let key = by_recipient
                .get_mut(recipient)
                .and_then(Vec::pop)
                .expect("spdk makes one key per recipient entry");
            (key, k)
        })
        .collect();
    Ok(Sent { tweak_key, outputs })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spending_secrets_are_those_of_the_keys_taproot_inputs_show() {
        for i in 0..16 {
            let key = Key::from_seed(11, i);
            for kind in [
                ScriptKind::P2tr,
                ScriptKind::P2trEnvelope(64),
                ScriptKind::P2trEnvelope(1_000),
            ] {
                let secret = key.spending_secret(kind);
                let script = key.script_pubkey(kind);
                assert_eq!(
                    secret.x_only_public_key(&SECP).0.serialize(),
                    script.as_bytes()[2..],
                    "{kind}, key {i}"
                );
            }
            for kind in [
                ScriptKind::P2pkh,
                ScriptKind::P2shP2wpkh,
                ScriptKind::P2wpkh,
            ] {
                assert_eq!(key.spending_secret(kind), *key.secret_key());
            }
        }
    }

    /// drongo's SilentPaymentScanAddressTest.testEncodeFromSeed (Sparrow's
    /// own vector, testnet: the same keys as regtest, another prefix).
    #[test]
    fn mnemonic_receivers_have_sparrows_keys() {
        let receiver =
            receiver_of_mnemonic("life life life life life life life life life life life life")
                .unwrap();
        assert_eq!(
            hex::encode(receiver.scan_secret().secret_bytes()),
            "36dc57ced5f4a76059947802f094ea40d0c11c74d444a1e7d3ea5e74b8d83d45"
        );
        assert_eq!(
            receiver.spend_public_key().to_string(),
            "03f92466aee84707997b5c596ac52a5867d5d9a4deef1338a9157218cdda9331ee"
        );
        let testnet = SilentPaymentCode::new_v0(
            receiver.scan.public_key().to_owned(),
            *receiver.spend_public_key(),
            silentpayments::Network::Testnet,
        );
        assert_eq!(
            testnet.to_string(),
            "tsp1qq0grgkzt7uwfst33pyge7k9mrkag0r9vrklc695n0pw7kwwc7qddqqley3n2a6z8q7vhkhzedtzj5kr86hv6fhh0zvu2j9tjrrxa4ye3acuv6f3q"
        );
        assert_eq!(receiver.paid_labels().collect::<Vec<_>>(), [None]);
        // Spaces between words do not count; case and non-words do.
        assert_eq!(
            receiver_of_mnemonic(
                " life life life life life life\tlife life life life life  life\n"
            )
            .unwrap()
            .address(),
            receiver.address()
        );
        for bad in ["", "  ", "Life life", "life lïfe", "life1"] {
            assert!(receiver_of_mnemonic(bad).is_err(), "{bad:?}");
        }
    }

    /// The seed BIP-39 tools give "abandon ... about" without passphrase.
    #[test]
    fn bip39_seeds_are_pbkdf2_of_the_mnemonic() {
        let mnemonic = "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about";
        assert_eq!(
            hex::encode(bip39_seed(mnemonic)),
            "5eb00bbddcf069084889a8ab9155568165f5c453ccb85e70811aaed6f6da5fc19a5ac40b389cd370d086206dec8aa6c43daea6690f20ad3d8d48b2d2ce9e38e4"
        );
    }

    #[test]
    fn receivers_are_distinct_and_labelled_as_documented() {
        let all = receivers(5);
        assert_eq!(all.len(), RECEIVERS);
        let mut addresses: Vec<String> = all.iter().map(Receiver::address).collect();
        assert!(addresses.iter().all(|a| a.starts_with("sprt1q")));
        addresses.sort();
        addresses.dedup();
        assert_eq!(addresses.len(), RECEIVERS);
        assert_eq!(all[0].subscription_labels(), [1, 2]);
        assert_eq!(
            all[0].paid_labels().collect::<Vec<_>>(),
            [None, Some(1), Some(2)]
        );
        assert!(all[1].subscription_labels().is_empty());
        assert_eq!(all[1].paid_labels().collect::<Vec<_>>(), [None, Some(0)]);
        assert_eq!(all[2].paid_labels().collect::<Vec<_>>(), [None]);
        // Another seed, other receivers.
        assert_ne!(receivers(6)[0].address(), all[0].address());
        // The labelled keys are osprey-sp's too.
        let keys = osprey_sp::ScanKeys::new(*all[0].scan_secret(), *all[0].spend_public_key(), [1])
            .unwrap();
        assert_eq!(keys.address(bitcoin::Network::Regtest), all[0].address());
        let labelled = all[0].key_material(Some(1));
        assert_eq!(
            keys.labelled_address(1, bitcoin::Network::Regtest).unwrap(),
            SilentPaymentCode::new_v0(
                labelled.scan_key(),
                labelled.m_pubkey(),
                silentpayments::Network::Regtest
            )
            .to_string()
        );
    }
}
