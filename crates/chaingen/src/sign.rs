//! Keys, the script kinds they can lock coins with, and real signatures for
//! spending them. Shared by the chain generator and by `osprey-testenv`, so
//! that every transaction a test or benchmark sends is signed by one piece of
//! code. Knows nothing about chains, pools or files.

use std::sync::LazyLock;

use bitcoin::hashes::{sha256, Hash};
use bitcoin::key::{CompressedPublicKey, Keypair, UntweakedPublicKey};
use bitcoin::opcodes::all::{OP_CHECKSIG, OP_ENDIF, OP_IF, OP_PUSHBYTES_0};
use bitcoin::script::{Builder, PushBytesBuf};
use bitcoin::secp256k1::{self, All, Message, PublicKey, Secp256k1, SecretKey};
use bitcoin::sighash::{EcdsaSighashType, Prevouts, SighashCache, TapSighashType};
use bitcoin::taproot::{LeafVersion, TapLeafHash, TapTweakHash, TaprootBuilder, TaprootSpendInfo};
use bitcoin::{Address, Network, ScriptBuf, Transaction, TxOut, Witness};

/// One signing/verification context for the whole process: building one
/// costs far more than a signature.
pub static SECP: LazyLock<Secp256k1<All>> = LazyLock::new(Secp256k1::new);

/// The single-key output types chaingen and the test wallet pay to and spend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScriptKind {
    /// Pay to public key hash (legacy, spendable before segwit activates).
    P2pkh,
    /// P2WPKH nested in P2SH.
    P2shP2wpkh,
    /// Native segwit v0 key hash.
    P2wpkh,
    /// Native segwit v0 script hash of `<pubkey> OP_CHECKSIG`.
    P2wsh,
    /// Taproot, key path only (no script tree).
    P2tr,
    /// Taproot whose one script leaf is `<key> OP_CHECKSIG` followed by an
    /// `OP_FALSE OP_IF <n bytes> OP_ENDIF` envelope, spent through that
    /// leaf: the shape of an ordinals inscription reveal, the main source
    /// of witness bytes on mainnet since 2023. Not in [`ScriptKind::ALL`]:
    /// only the mainnet profile creates it.
    P2trEnvelope(u16),
}

/// Largest data push a script may hold (consensus `MAX_SCRIPT_ELEMENT_SIZE`).
const MAX_PUSH: usize = 520;

/// Bytes of a Bitcoin compact-size length prefix.
fn varint_len(n: usize) -> usize {
    match n {
        0..=0xfc => 1,
        0xfd..=0xffff => 3,
        _ => 5,
    }
}

/// Bytes of the push opcodes a script needs to push `len` bytes of data in
/// chunks of at most [`MAX_PUSH`].
fn envelope_push_overhead(len: usize) -> usize {
    let full = len / MAX_PUSH;
    let rest = len % MAX_PUSH;
    let opcode = |n: usize| match n {
        0 => 0,
        1..=75 => 1,
        76..=255 => 2,
        _ => 3,
    };
    full * opcode(MAX_PUSH) + opcode(rest)
}

/// Length of the envelope leaf script carrying `len` data bytes:
/// `<32-byte key> OP_CHECKSIG OP_FALSE OP_IF <pushes> OP_ENDIF`.
fn envelope_leaf_len(len: usize) -> usize {
    33 + 1 + 1 + 1 + envelope_push_overhead(len) + len + 1
}

impl ScriptKind {
    /// Every kind, legacy first.
    pub const ALL: [ScriptKind; 5] = [
        ScriptKind::P2pkh,
        ScriptKind::P2shP2wpkh,
        ScriptKind::P2wpkh,
        ScriptKind::P2wsh,
        ScriptKind::P2tr,
    ];

    /// Returns true when spending this kind needs witness data, i.e. only
    /// once segwit is active.
    pub fn needs_witness(self) -> bool {
        !matches!(self, ScriptKind::P2pkh)
    }

    /// Returns true for the segwit v1 kinds, whose spends count no sigops
    /// against the block limit.
    pub fn is_taproot(self) -> bool {
        matches!(self, ScriptKind::P2tr | ScriptKind::P2trEnvelope(_))
    }

    /// Short lower-case name, as used in logs and test names.
    pub fn name(self) -> &'static str {
        match self {
            ScriptKind::P2pkh => "p2pkh",
            ScriptKind::P2shP2wpkh => "p2sh-p2wpkh",
            ScriptKind::P2wpkh => "p2wpkh",
            ScriptKind::P2wsh => "p2wsh",
            ScriptKind::P2tr => "p2tr",
            ScriptKind::P2trEnvelope(_) => "p2tr-envelope",
        }
    }

    /// Upper bound of the non-witness bytes of an input spending this kind
    /// (outpoint, script length, scriptSig, sequence).
    pub fn input_base_size_max(self) -> usize {
        // 36 outpoint + 4 sequence + 1 scriptSig length.
        let fixed = 41;
        match self {
            // <sig (<= 72 + hash type)> <33-byte pubkey>
            ScriptKind::P2pkh => fixed + 1 + 73 + 1 + 33,
            // <22-byte redeem script>
            ScriptKind::P2shP2wpkh => fixed + 1 + 22,
            ScriptKind::P2wpkh
            | ScriptKind::P2wsh
            | ScriptKind::P2tr
            | ScriptKind::P2trEnvelope(_) => fixed,
        }
    }

    /// Upper bound of the witness bytes of an input spending this kind,
    /// counting the item-count byte that every input of a witness
    /// transaction has.
    pub fn input_witness_size_max(self) -> usize {
        match self {
            ScriptKind::P2pkh => 1,
            ScriptKind::P2shP2wpkh | ScriptKind::P2wpkh => 1 + 1 + 73 + 1 + 33,
            // The witness script is `<33-byte pubkey> OP_CHECKSIG`.
            ScriptKind::P2wsh => 1 + 1 + 73 + 1 + 35,
            // A 64-byte Schnorr signature with the default sighash type.
            ScriptKind::P2tr => 1 + 1 + 64,
            // Signature, leaf script, 33-byte control block (one leaf).
            ScriptKind::P2trEnvelope(len) => {
                let leaf = envelope_leaf_len(usize::from(len));
                1 + 1 + 64 + varint_len(leaf) + leaf + 1 + 33
            }
        }
    }
}

/// Upper bounds of the non-witness and witness bytes of a transaction
/// spending `inputs` (by kind) to outputs whose scriptPubKeys have the
/// given lengths.
fn size_parts_max(
    inputs: &[ScriptKind],
    output_script_lens: impl IntoIterator<Item = usize>,
) -> (usize, usize) {
    let mut outputs = 0;
    let mut base = 8 + varint_len(inputs.len());
    for len in output_script_lens {
        outputs += 1;
        base += 8 + varint_len(len) + len;
    }
    base += varint_len(outputs);
    base += inputs
        .iter()
        .map(|k| k.input_base_size_max())
        .sum::<usize>();
    let witness = if inputs.iter().any(|k| k.needs_witness()) {
        // Segwit marker and flag, then each input's witness.
        2 + inputs
            .iter()
            .map(|k| k.input_witness_size_max())
            .sum::<usize>()
    } else {
        0
    };
    (base, witness)
}

/// Upper bound of the virtual size of a transaction spending `inputs` (by
/// kind) to outputs whose scriptPubKeys have the given lengths. Fees
/// computed from it never fall below the intended rate.
pub fn vsize_max(
    inputs: &[ScriptKind],
    output_script_lens: impl IntoIterator<Item = usize>,
) -> u64 {
    let (base, witness) = size_parts_max(inputs, output_script_lens);
    (4 * base + witness).div_ceil(4) as u64
}

/// Upper bound of the serialized size (witness included) of the same
/// transaction.
pub fn size_max(inputs: &[ScriptKind], output_script_lens: impl IntoIterator<Item = usize>) -> u64 {
    let (base, witness) = size_parts_max(inputs, output_script_lens);
    (base + witness) as u64
}

impl std::fmt::Display for ScriptKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A secp256k1 key pair with its public key precomputed, so that building
/// scripts and signing never pays for a point multiplication twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    secret: SecretKey,
    public: PublicKey,
}

impl Key {
    /// Builds the key pair of `secret` (one point multiplication).
    pub fn from_secret(secret: SecretKey) -> Key {
        Key {
            secret,
            public: secret.public_key(&SECP),
        }
    }

    /// Returns the deterministic key number `index` of the key family
    /// `seed`: the secret is SHA-256 of a tag, the seed and the index (hashed
    /// again in the astronomically rare case it is not a valid scalar).
    pub fn from_seed(seed: u64, index: u64) -> Key {
        Key::from_secret(secret_from_seed(seed, index))
    }

    pub fn secret_key(&self) -> &SecretKey {
        &self.secret
    }

    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// The compressed public key, as the segwit v0 kinds require.
    pub fn compressed_public_key(&self) -> CompressedPublicKey {
        CompressedPublicKey(self.public)
    }

    /// The script `<pubkey> OP_CHECKSIG` that a [`ScriptKind::P2wsh`] output
    /// of this key commits to.
    pub fn witness_script(&self) -> ScriptBuf {
        Builder::new()
            .push_slice(self.public.serialize())
            .push_opcode(OP_CHECKSIG)
            .into_script()
    }

    /// The scriptPubKey locking a coin of `kind` to this key. For
    /// [`ScriptKind::P2tr`] this costs a point multiplication (the tweak).
    pub fn script_pubkey(&self, kind: ScriptKind) -> ScriptBuf {
        let pk = self.compressed_public_key();
        match kind {
            ScriptKind::P2pkh => {
                ScriptBuf::new_p2pkh(&bitcoin::PublicKey::new(self.public).pubkey_hash())
            }
            ScriptKind::P2shP2wpkh => {
                ScriptBuf::new_p2sh(&ScriptBuf::new_p2wpkh(&pk.wpubkey_hash()).script_hash())
            }
            ScriptKind::P2wpkh => ScriptBuf::new_p2wpkh(&pk.wpubkey_hash()),
            ScriptKind::P2wsh => ScriptBuf::new_p2wsh(&self.witness_script().wscript_hash()),
            ScriptKind::P2tr => {
                let internal: UntweakedPublicKey = self.public.x_only_public_key().0;
                ScriptBuf::new_p2tr(&SECP, internal, None)
            }
            ScriptKind::P2trEnvelope(len) => {
                ScriptBuf::new_p2tr_tweaked(self.envelope(len).1.output_key())
            }
        }
    }

    /// The envelope leaf carrying `len` bytes for this key and the taproot
    /// tree of that one leaf (one point multiplication). The data is
    /// SHA-256 in counter mode over the public key: incompressible like
    /// real inscriptions, and derived from the key so spending needs no
    /// extra state.
    pub fn envelope(&self, len: u16) -> (ScriptBuf, TaprootSpendInfo) {
        let internal = self.public.x_only_public_key().0;
        let pubkey = self.public.serialize();
        let mut data = Vec::with_capacity(usize::from(len) + 32);
        let mut counter = 0u32;
        while data.len() < usize::from(len) {
            let mut block = pubkey.to_vec();
            block.extend_from_slice(&counter.to_le_bytes());
            data.extend_from_slice(sha256::Hash::hash(&block).as_byte_array());
            counter += 1;
        }
        data.truncate(usize::from(len));
        let mut builder = Builder::new()
            .push_x_only_key(&internal)
            .push_opcode(OP_CHECKSIG)
            .push_opcode(OP_PUSHBYTES_0)
            .push_opcode(OP_IF);
        for chunk in data.chunks(MAX_PUSH) {
            builder = builder.push_slice(push_bytes(chunk.to_vec()));
        }
        let leaf = builder.push_opcode(OP_ENDIF).into_script();
        let info = TaprootBuilder::new()
            .add_leaf(0, leaf.clone())
            .expect("a single leaf at depth 0")
            .finalize(&SECP, internal)
            .expect("a one-leaf tree is complete");
        (leaf, info)
    }

    /// The key pair that signs for this key's [`ScriptKind::P2tr`] output
    /// (BIP341 key-path tweak with no script tree). Tweaks the secret with
    /// scalar arithmetic, so it costs one point multiplication instead of
    /// the two of tweaking a key pair.
    pub fn taproot_keypair(&self) -> Keypair {
        let (internal, parity) = self.public.x_only_public_key();
        let secret = if parity == secp256k1::Parity::Odd {
            self.secret.negate()
        } else {
            self.secret
        };
        let tweak = TapTweakHash::from_key_and_tweak(internal, None).to_scalar();
        let tweaked = secret
            .add_tweak(&tweak)
            .expect("a tweak of a hash hits zero with negligible probability");
        Keypair::from_secret_key(&SECP, &tweaked)
    }

    /// The address of this key for `kind` on `network`.
    pub fn address(&self, kind: ScriptKind, network: Network) -> Address {
        Address::from_script(&self.script_pubkey(kind), network)
            .expect("every ScriptKind script has an address form")
    }
}

fn secret_from_seed(seed: u64, index: u64) -> SecretKey {
    let mut data = Vec::with_capacity(48);
    data.extend_from_slice(b"osprey-chaingen key");
    data.extend_from_slice(&seed.to_le_bytes());
    data.extend_from_slice(&index.to_le_bytes());
    let mut hash = sha256::Hash::hash(&data);
    loop {
        if let Ok(secret) = SecretKey::from_slice(hash.as_byte_array()) {
            return secret;
        }
        hash = sha256::Hash::hash(hash.as_byte_array());
    }
}

/// What it takes to sign one input: the output it spends and the key and
/// kind that locked it.
#[derive(Clone, Debug)]
pub struct Spend {
    pub txout: TxOut,
    pub key: Key,
    pub kind: ScriptKind,
}

impl AsRef<Spend> for Spend {
    fn as_ref(&self) -> &Spend {
        self
    }
}

/// Why a transaction could not be signed. These are caller bugs (wrong
/// prevouts), never properties of chain data.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("transaction has {inputs} inputs but {spends} spent outputs were given")]
    InputCount { inputs: usize, spends: usize },
    #[error("input {index}: spent output script does not match its key as {kind}")]
    ScriptMismatch { index: usize, kind: ScriptKind },
    #[error("input {index}: sighash: {message}")]
    Sighash { index: usize, message: String },
}

/// Signs every input of `tx` with SIGHASH_ALL (ECDSA) or SIGHASH_DEFAULT
/// (Taproot key path), filling scriptSigs and witnesses. `spends[i]` is the
/// output input `i` spends.
///
/// # Errors
/// When `spends` does not line up with the inputs.
pub fn sign_transaction<S: AsRef<Spend>>(
    tx: &mut Transaction,
    spends: &[S],
) -> Result<(), SignError> {
    if tx.input.len() != spends.len() {
        return Err(SignError::InputCount {
            inputs: tx.input.len(),
            spends: spends.len(),
        });
    }
    let unlocks = {
        let txouts: Vec<&TxOut> = spends.iter().map(|s| &s.as_ref().txout).collect();
        let prevouts = Prevouts::All(&txouts);
        let mut cache = SighashCache::new(&*tx);
        let mut unlocks = Vec::with_capacity(spends.len());
        for (index, spend) in spends.iter().map(AsRef::as_ref).enumerate() {
            let sighash_err = |e: &dyn std::fmt::Display| SignError::Sighash {
                index,
                message: e.to_string(),
            };
            let key = &spend.key;
            let pubkey = key.public.serialize();
            let unlock = match spend.kind {
                ScriptKind::P2pkh => {
                    let hash = cache
                        .legacy_signature_hash(
                            index,
                            &spend.txout.script_pubkey,
                            EcdsaSighashType::All.to_u32(),
                        )
                        .map_err(|e| sighash_err(&e))?;
                    let sig = ecdsa_sig(Message::from_digest(hash.to_byte_array()), key);
                    let script_sig = Builder::new()
                        .push_slice(push_bytes(sig))
                        .push_slice(pubkey)
                        .into_script();
                    (script_sig, Witness::new())
                }
                ScriptKind::P2shP2wpkh | ScriptKind::P2wpkh => {
                    let wpkh = ScriptBuf::new_p2wpkh(&key.compressed_public_key().wpubkey_hash());
                    let hash = cache
                        .p2wpkh_signature_hash(
                            index,
                            &wpkh,
                            spend.txout.value,
                            EcdsaSighashType::All,
                        )
                        .map_err(|e| sighash_err(&e))?;
                    let sig = ecdsa_sig(Message::from_digest(hash.to_byte_array()), key);
                    let script_sig = if spend.kind == ScriptKind::P2shP2wpkh {
                        Builder::new()
                            .push_slice(push_bytes(wpkh.into_bytes()))
                            .into_script()
                    } else {
                        ScriptBuf::new()
                    };
                    let mut witness = Witness::new();
                    witness.push(sig);
                    witness.push(pubkey);
                    (script_sig, witness)
                }
                ScriptKind::P2wsh => {
                    let witness_script = key.witness_script();
                    let hash = cache
                        .p2wsh_signature_hash(
                            index,
                            &witness_script,
                            spend.txout.value,
                            EcdsaSighashType::All,
                        )
                        .map_err(|e| sighash_err(&e))?;
                    let sig = ecdsa_sig(Message::from_digest(hash.to_byte_array()), key);
                    let mut witness = Witness::new();
                    witness.push(sig);
                    witness.push(witness_script.as_bytes());
                    (ScriptBuf::new(), witness)
                }
                ScriptKind::P2tr => {
                    let hash = cache
                        .taproot_key_spend_signature_hash(index, &prevouts, TapSighashType::Default)
                        .map_err(|e| sighash_err(&e))?;
                    let keypair = key.taproot_keypair();
                    let msg = Message::from_digest(hash.to_byte_array());
                    // No auxiliary randomness: the same seed must give the
                    // same bytes, and the nonce stays secret-derived.
                    let sig = SECP.sign_schnorr_no_aux_rand(&msg, &keypair);
                    let mut witness = Witness::new();
                    witness.push(sig.as_ref());
                    (ScriptBuf::new(), witness)
                }
                ScriptKind::P2trEnvelope(len) => {
                    let (leaf, info) = key.envelope(len);
                    let leaf_hash = TapLeafHash::from_script(&leaf, LeafVersion::TapScript);
                    let hash = cache
                        .taproot_script_spend_signature_hash(
                            index,
                            &prevouts,
                            leaf_hash,
                            TapSighashType::Default,
                        )
                        .map_err(|e| sighash_err(&e))?;
                    let control = info
                        .control_block(&(leaf.clone(), LeafVersion::TapScript))
                        .expect("the leaf is in its own tree");
                    // The leaf checks the untweaked internal key.
                    let keypair = Keypair::from_secret_key(&SECP, &key.secret);
                    let msg = Message::from_digest(hash.to_byte_array());
                    let sig = SECP.sign_schnorr_no_aux_rand(&msg, &keypair);
                    let mut witness = Witness::new();
                    witness.push(sig.as_ref());
                    witness.push(leaf.as_bytes());
                    witness.push(control.serialize());
                    (ScriptBuf::new(), witness)
                }
            };
            unlocks.push(unlock);
        }
        unlocks
    };
    for (input, (script_sig, witness)) in tx.input.iter_mut().zip(unlocks) {
        input.script_sig = script_sig;
        input.witness = witness;
    }
    Ok(())
}

/// Like [`sign_transaction`], but first checks that each spent output's
/// script really is `key.script_pubkey(kind)` (costs a point multiplication
/// per P2TR input; meant for tests and tools, not the generator's hot loop).
///
/// # Errors
/// When `spends` does not line up with the inputs or a script does not match.
pub fn sign_transaction_checked<S: AsRef<Spend>>(
    tx: &mut Transaction,
    spends: &[S],
) -> Result<(), SignError> {
    for (index, spend) in spends.iter().map(AsRef::as_ref).enumerate() {
        if spend.key.script_pubkey(spend.kind) != spend.txout.script_pubkey {
            return Err(SignError::ScriptMismatch {
                index,
                kind: spend.kind,
            });
        }
    }
    sign_transaction(tx, spends)
}

/// DER signature with the SIGHASH_ALL byte appended (RFC 6979 nonces, low S).
fn ecdsa_sig(msg: Message, key: &Key) -> Vec<u8> {
    let sig = SECP.sign_ecdsa(&msg, &key.secret);
    let mut bytes = sig.serialize_der().to_vec();
    bytes.push(EcdsaSighashType::All as u8);
    bytes
}

fn push_bytes(bytes: Vec<u8>) -> PushBytesBuf {
    PushBytesBuf::try_from(bytes)
        .expect("signatures and redeem scripts are far below the push limit")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::absolute::LockTime;
    use bitcoin::key::TapTweak;
    use bitcoin::transaction::Version;
    use bitcoin::{Amount, OutPoint, Sequence, TxIn, Txid};

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
                    key,
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
                    spend.key.public_key(),
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
            let (leaf, info) = spend.key.envelope(len);
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
            let internal = spend.key.public_key().x_only_public_key().0;
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
}
