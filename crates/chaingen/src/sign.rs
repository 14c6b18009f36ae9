//! Keys, the script kinds they can lock coins with, and real signatures for
//! spending them. Shared by the chain generator and by `osprey-testenv`, so
//! that every transaction a test or benchmark sends is signed by one piece of
//! code. Knows nothing about chains, pools or files.
//!
//! For chains too large to sign in the time at hand there are placeholder
//! keys and signatures ([`PlaceholderKey`], [`sign_placeholders`]): the
//! same transactions byte for byte in form and size, without a point
//! multiplication, valid only to a node that skips script checks.

use std::sync::LazyLock;

use bitcoin::hashes::{sha256, Hash, HashEngine};
use bitcoin::key::{CompressedPublicKey, Keypair, TapTweak, UntweakedPublicKey};
use bitcoin::opcodes::all::{OP_CHECKSIG, OP_ENDIF, OP_IF, OP_PUSHBYTES_0, OP_PUSHNUM_1};
use bitcoin::script::{Builder, PushBytesBuf};
use bitcoin::secp256k1::{self, All, Message, PublicKey, Secp256k1, SecretKey};
use bitcoin::sighash::{EcdsaSighashType, Prevouts, SighashCache, TapSighashType};
use bitcoin::taproot::{
    LeafVersion, TapLeafHash, TapNodeHash, TapTweakHash, TaprootBuilder, TaprootSpendInfo,
};
use bitcoin::{
    Address, Network, OutPoint, PubkeyHash, ScriptBuf, Transaction, TxOut, WPubkeyHash, Witness,
};

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

/// A serialized compressed public key: what scripts and witnesses carry.
type PublicKeyBytes = [u8; 33];

/// The script `<pubkey> OP_CHECKSIG` a [`ScriptKind::P2wsh`] output of
/// `pubkey` commits to.
fn witness_script(pubkey: &PublicKeyBytes) -> ScriptBuf {
    Builder::new()
        .push_slice(pubkey)
        .push_opcode(OP_CHECKSIG)
        .into_script()
}

/// The scriptPubKey locking a coin of `kind` to `pubkey`. The taproot kinds
/// lock to an output key rather than to `pubkey`: `taproot_output_key`
/// gives it, and is only called for them (for a real key it costs a point
/// multiplication).
fn script_pubkey_of(
    pubkey: &PublicKeyBytes,
    kind: ScriptKind,
    taproot_output_key: impl FnOnce() -> [u8; 32],
) -> ScriptBuf {
    match kind {
        ScriptKind::P2pkh => ScriptBuf::new_p2pkh(&PubkeyHash::hash(pubkey)),
        ScriptKind::P2shP2wpkh => {
            ScriptBuf::new_p2sh(&ScriptBuf::new_p2wpkh(&WPubkeyHash::hash(pubkey)).script_hash())
        }
        ScriptKind::P2wpkh => ScriptBuf::new_p2wpkh(&WPubkeyHash::hash(pubkey)),
        ScriptKind::P2wsh => ScriptBuf::new_p2wsh(&witness_script(pubkey).wscript_hash()),
        // Segwit v1: OP_1 and the 32-byte output key.
        ScriptKind::P2tr | ScriptKind::P2trEnvelope(_) => Builder::new()
            .push_opcode(OP_PUSHNUM_1)
            .push_slice(taproot_output_key())
            .into_script(),
    }
}

/// The envelope leaf of `pubkey` carrying `len` bytes:
/// `<x-only pubkey> OP_CHECKSIG OP_FALSE OP_IF <data> OP_ENDIF`. The data
/// is SHA-256 in counter mode over the public key: incompressible like
/// real inscriptions, and derived from the key so spending needs no extra
/// state.
fn envelope_leaf(pubkey: &PublicKeyBytes, len: u16) -> ScriptBuf {
    let mut data = Vec::with_capacity(usize::from(len) + 32);
    let mut counter = 0u32;
    while data.len() < usize::from(len) {
        let mut block = pubkey.to_vec();
        block.extend_from_slice(&counter.to_le_bytes());
        data.extend_from_slice(sha256::Hash::hash(&block).as_byte_array());
        counter += 1;
    }
    data.truncate(usize::from(len));
    let mut x_only = [0u8; 32];
    x_only.copy_from_slice(&pubkey[1..]);
    let mut builder = Builder::new()
        .push_slice(x_only)
        .push_opcode(OP_CHECKSIG)
        .push_opcode(OP_PUSHBYTES_0)
        .push_opcode(OP_IF);
    for chunk in data.chunks(MAX_PUSH) {
        builder = builder.push_slice(push_bytes(chunk.to_vec()));
    }
    builder.push_opcode(OP_ENDIF).into_script()
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
        witness_script(&self.public.serialize())
    }

    /// The scriptPubKey locking a coin of `kind` to this key. For
    /// [`ScriptKind::P2tr`] this costs a point multiplication (the tweak).
    pub fn script_pubkey(&self, kind: ScriptKind) -> ScriptBuf {
        script_pubkey_of(&self.public.serialize(), kind, || match kind {
            ScriptKind::P2trEnvelope(len) => self.envelope(len).1.output_key().serialize(),
            _ => {
                let internal: UntweakedPublicKey = self.public.x_only_public_key().0;
                internal.tap_tweak(&SECP, None).0.serialize()
            }
        })
    }

    /// The envelope leaf carrying `len` bytes for this key and the taproot
    /// tree of that one leaf (one point multiplication).
    pub fn envelope(&self, len: u16) -> (ScriptBuf, TaprootSpendInfo) {
        let internal = self.public.x_only_public_key().0;
        let leaf = envelope_leaf(&self.public.serialize(), len);
        let info = TaprootBuilder::new()
            .add_leaf(0, leaf.clone())
            .expect("a single leaf at depth 0")
            .finalize(&SECP, internal)
            .expect("a one-leaf tree is complete");
        (leaf, info)
    }

    /// What spending this key's envelope of `len` bytes reveals: the leaf
    /// and its serialized control block.
    fn envelope_reveal(&self, len: u16) -> (ScriptBuf, Vec<u8>) {
        let (leaf, info) = self.envelope(len);
        let control = info
            .control_block(&(leaf.clone(), LeafVersion::TapScript))
            .expect("the leaf is in its own tree")
            .serialize();
        (leaf, control)
    }

    /// The key pair that signs for this key's [`ScriptKind::P2tr`] output
    /// (BIP341 key-path tweak with no script tree). Tweaks the secret with
    /// scalar arithmetic, so it costs one point multiplication instead of
    /// the two of tweaking a key pair.
    pub fn taproot_keypair(&self) -> Keypair {
        Keypair::from_secret_key(&SECP, &self.taproot_output_secret(None))
    }

    /// The secret of the BIP341 output key this key makes with the script
    /// tree `merkle_root`: scalar arithmetic only, no point multiplication
    /// (the internal key's parity is known from the public key).
    fn taproot_output_secret(&self, merkle_root: Option<TapNodeHash>) -> SecretKey {
        let (internal, parity) = self.public.x_only_public_key();
        let secret = if parity == secp256k1::Parity::Odd {
            self.secret.negate()
        } else {
            self.secret
        };
        let tweak = TapTweakHash::from_key_and_tweak(internal, merkle_root).to_scalar();
        secret
            .add_tweak(&tweak)
            .expect("a tweak of a hash hits zero with negligible probability")
    }

    /// The secret key of the public key that a spend of this key's coin of
    /// `kind` shows BIP-352 (docs/silent-payments.md, 2.1): the key itself
    /// for the key-hash kinds (and P2WSH, which does not count), and for
    /// taproot the output key, tweaked by BIP341 (with the envelope's leaf
    /// as the tree, whose one leaf is its root), because a silent-payment
    /// receiver takes the key of a taproot input from the spent output.
    pub fn spending_secret(&self, kind: ScriptKind) -> SecretKey {
        match kind {
            ScriptKind::P2pkh | ScriptKind::P2shP2wpkh | ScriptKind::P2wpkh | ScriptKind::P2wsh => {
                self.secret
            }
            ScriptKind::P2tr => self.taproot_output_secret(None),
            ScriptKind::P2trEnvelope(len) => {
                let leaf = envelope_leaf(&self.public.serialize(), len);
                let root = TapLeafHash::from_script(&leaf, LeafVersion::TapScript).into();
                self.taproot_output_secret(Some(root))
            }
        }
    }

    /// The address of this key for `kind` on `network`.
    pub fn address(&self, kind: ScriptKind, network: Network) -> Address {
        Address::from_script(&self.script_pubkey(kind), network)
            .expect("every ScriptKind script has an address form")
    }
}

/// SHA-256 of `tag`, `seed` and `index`: the root of every key the
/// generator derives from a seed.
fn seed_hash(tag: &[u8], seed: u64, index: u64) -> sha256::Hash {
    let mut data = Vec::with_capacity(tag.len() + 16);
    data.extend_from_slice(tag);
    data.extend_from_slice(&seed.to_le_bytes());
    data.extend_from_slice(&index.to_le_bytes());
    sha256::Hash::hash(&data)
}

fn secret_from_seed(seed: u64, index: u64) -> SecretKey {
    let mut hash = seed_hash(b"osprey-chaingen key", seed, index);
    loop {
        if let Ok(secret) = SecretKey::from_slice(hash.as_byte_array()) {
            return secret;
        }
        hash = sha256::Hash::hash(hash.as_byte_array());
    }
}

/// The stand-in for a key in a chain with placeholder signatures: 33 bytes
/// shaped like a compressed public key (0x02 or 0x03, then 32 bytes of a
/// hash of the seed and index), made without the point multiplication a
/// real key costs. About half are not points of the curve, and its taproot
/// output keys are hashes too: nothing notices, because its coins are only
/// ever spent with placeholder signatures, whose scripts a node runs
/// nowhere but in blocks it must check, and such blocks hold none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlaceholderKey(PublicKeyBytes);

impl PlaceholderKey {
    /// Placeholder key number `index` of the key family `seed` (a family
    /// of its own: no placeholder key is the public key of [`Key::from_seed`]).
    pub fn from_seed(seed: u64, index: u64) -> PlaceholderKey {
        let hash = seed_hash(b"osprey-chaingen placeholder key", seed, index).to_byte_array();
        let mut bytes = [0u8; 33];
        bytes[0] = 0x02 | (hash[0] & 1);
        bytes[1..].copy_from_slice(&hash);
        PlaceholderKey(bytes)
    }

    /// The made-up taproot output key of `kind` (and its parity, for an
    /// envelope's control block).
    fn taproot_output_key(&self, kind: ScriptKind) -> ([u8; 32], u8) {
        let len = match kind {
            ScriptKind::P2trEnvelope(len) => u32::from(len),
            // Above every envelope length.
            _ => u32::MAX,
        };
        let mut data = self.0.to_vec();
        data.extend_from_slice(&len.to_le_bytes());
        let hash = sha256::Hash::hash(&data).to_byte_array();
        (hash, hash[0] & 1)
    }

    pub fn script_pubkey(&self, kind: ScriptKind) -> ScriptBuf {
        script_pubkey_of(&self.0, kind, || self.taproot_output_key(kind).0)
    }

    /// The leaf and a control block of a real one's shape: leaf version
    /// and output key parity, then the internal key.
    fn envelope_reveal(&self, len: u16) -> (ScriptBuf, Vec<u8>) {
        let parity = self.taproot_output_key(ScriptKind::P2trEnvelope(len)).1;
        let mut control = Vec::with_capacity(33);
        control.push(LeafVersion::TapScript.to_consensus() | parity);
        control.extend_from_slice(&self.0[1..]);
        (envelope_leaf(&self.0, len), control)
    }
}

/// Who can spend a coin: a key pair, or, in chains with placeholder
/// signatures, a [`PlaceholderKey`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    Key(Key),
    Placeholder(PlaceholderKey),
}

impl From<Key> for Holder {
    fn from(key: Key) -> Holder {
        Holder::Key(key)
    }
}

impl Holder {
    /// The public key as scripts and witnesses carry it.
    fn public_key_bytes(&self) -> PublicKeyBytes {
        match self {
            Holder::Key(key) => key.public.serialize(),
            Holder::Placeholder(placeholder) => placeholder.0,
        }
    }

    /// The scriptPubKey locking a coin of `kind` to this holder.
    pub fn script_pubkey(&self, kind: ScriptKind) -> ScriptBuf {
        match self {
            Holder::Key(key) => key.script_pubkey(kind),
            Holder::Placeholder(placeholder) => placeholder.script_pubkey(kind),
        }
    }

    fn envelope_reveal(&self, len: u16) -> (ScriptBuf, Vec<u8>) {
        match self {
            Holder::Key(key) => key.envelope_reveal(len),
            Holder::Placeholder(placeholder) => placeholder.envelope_reveal(len),
        }
    }
}

/// What it takes to sign one input: the output it spends and the holder
/// and kind that locked it.
#[derive(Clone, Debug)]
pub struct Spend {
    pub txout: TxOut,
    pub holder: Holder,
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
    #[error("input {index}: a placeholder key cannot sign")]
    Placeholder { index: usize },
}

/// The scriptSig and witness of an input of `kind` spent by `pubkey` with
/// `sig` (DER and the sighash byte for ECDSA, 64 bytes for Schnorr);
/// `envelope` is the leaf and control block an envelope spend reveals
/// (`None` for the other kinds).
fn unlock_of(
    kind: ScriptKind,
    pubkey: &PublicKeyBytes,
    sig: Vec<u8>,
    envelope: Option<(ScriptBuf, Vec<u8>)>,
) -> (ScriptBuf, Witness) {
    let mut witness = Witness::new();
    let script_sig = match kind {
        ScriptKind::P2pkh => Builder::new()
            .push_slice(push_bytes(sig))
            .push_slice(pubkey)
            .into_script(),
        ScriptKind::P2shP2wpkh | ScriptKind::P2wpkh => {
            witness.push(sig);
            witness.push(pubkey);
            if kind == ScriptKind::P2shP2wpkh {
                let redeem = ScriptBuf::new_p2wpkh(&WPubkeyHash::hash(pubkey));
                Builder::new()
                    .push_slice(push_bytes(redeem.into_bytes()))
                    .into_script()
            } else {
                ScriptBuf::new()
            }
        }
        ScriptKind::P2wsh => {
            witness.push(sig);
            witness.push(witness_script(pubkey).as_bytes());
            ScriptBuf::new()
        }
        ScriptKind::P2tr | ScriptKind::P2trEnvelope(_) => {
            witness.push(sig);
            if let Some((leaf, control)) = envelope {
                witness.push(leaf.as_bytes());
                witness.push(control);
            }
            ScriptBuf::new()
        }
    };
    (script_sig, witness)
}

/// Signs every input of `tx` with SIGHASH_ALL (ECDSA) or SIGHASH_DEFAULT
/// (Taproot key path), filling scriptSigs and witnesses. `spends[i]` is the
/// output input `i` spends.
///
/// # Errors
/// When `spends` does not line up with the inputs, or a placeholder key
/// holds one.
pub fn sign_transaction<S: AsRef<Spend>>(
    tx: &mut Transaction,
    spends: &[S],
) -> Result<(), SignError> {
    check_input_count(tx, spends)?;
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
            let Holder::Key(key) = &spend.holder else {
                return Err(SignError::Placeholder { index });
            };
            let pubkey = key.public.serialize();
            let (sig, envelope) = match spend.kind {
                ScriptKind::P2pkh => {
                    let hash = cache
                        .legacy_signature_hash(
                            index,
                            &spend.txout.script_pubkey,
                            EcdsaSighashType::All.to_u32(),
                        )
                        .map_err(|e| sighash_err(&e))?;
                    (
                        ecdsa_sig(Message::from_digest(hash.to_byte_array()), key),
                        None,
                    )
                }
                ScriptKind::P2shP2wpkh | ScriptKind::P2wpkh => {
                    let wpkh = ScriptBuf::new_p2wpkh(&WPubkeyHash::hash(&pubkey));
                    let hash = cache
                        .p2wpkh_signature_hash(
                            index,
                            &wpkh,
                            spend.txout.value,
                            EcdsaSighashType::All,
                        )
                        .map_err(|e| sighash_err(&e))?;
                    (
                        ecdsa_sig(Message::from_digest(hash.to_byte_array()), key),
                        None,
                    )
                }
                ScriptKind::P2wsh => {
                    let hash = cache
                        .p2wsh_signature_hash(
                            index,
                            &witness_script(&pubkey),
                            spend.txout.value,
                            EcdsaSighashType::All,
                        )
                        .map_err(|e| sighash_err(&e))?;
                    (
                        ecdsa_sig(Message::from_digest(hash.to_byte_array()), key),
                        None,
                    )
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
                    (sig.as_ref().to_vec(), None)
                }
                ScriptKind::P2trEnvelope(len) => {
                    let (leaf, control) = key.envelope_reveal(len);
                    let leaf_hash = TapLeafHash::from_script(&leaf, LeafVersion::TapScript);
                    let hash = cache
                        .taproot_script_spend_signature_hash(
                            index,
                            &prevouts,
                            leaf_hash,
                            TapSighashType::Default,
                        )
                        .map_err(|e| sighash_err(&e))?;
                    // The leaf checks the untweaked internal key.
                    let keypair = Keypair::from_secret_key(&SECP, &key.secret);
                    let msg = Message::from_digest(hash.to_byte_array());
                    let sig = SECP.sign_schnorr_no_aux_rand(&msg, &keypair);
                    (sig.as_ref().to_vec(), Some((leaf, control)))
                }
            };
            unlocks.push(unlock_of(spend.kind, &pubkey, sig, envelope));
        }
        unlocks
    };
    for (input, (script_sig, witness)) in tx.input.iter_mut().zip(unlocks) {
        input.script_sig = script_sig;
        input.witness = witness;
    }
    Ok(())
}

fn check_input_count<S>(tx: &Transaction, spends: &[S]) -> Result<(), SignError> {
    if tx.input.len() != spends.len() {
        return Err(SignError::InputCount {
            inputs: tx.input.len(),
            spends: spends.len(),
        });
    }
    Ok(())
}

/// Fills every input's scriptSig and witness like [`sign_transaction`],
/// but with placeholder signatures: of a real signature's form and size
/// (DER with a random r and a low s, and the sighash byte; 64 bytes for
/// Schnorr), made from a hash of the spent outpoint instead of a key, so
/// that no point multiplication is spent on them. A node accepts them only
/// where it skips script checks (Bitcoin Core's `-assumevalid`). Any
/// holder works, as only the public key goes into the transaction.
///
/// # Errors
/// When `spends` does not line up with the inputs.
pub fn sign_placeholders<S: AsRef<Spend>>(
    tx: &mut Transaction,
    spends: &[S],
) -> Result<(), SignError> {
    check_input_count(tx, spends)?;
    for (input, spend) in tx.input.iter_mut().zip(spends.iter().map(AsRef::as_ref)) {
        let outpoint = input.previous_output;
        let (sig, envelope) = match spend.kind {
            ScriptKind::P2trEnvelope(len) => (
                placeholder_bytes(&outpoint, 0).to_vec(),
                Some(spend.holder.envelope_reveal(len)),
            ),
            ScriptKind::P2tr => (placeholder_bytes(&outpoint, 0).to_vec(), None),
            _ => (placeholder_ecdsa(&outpoint), None),
        };
        (input.script_sig, input.witness) =
            unlock_of(spend.kind, &spend.holder.public_key_bytes(), sig, envelope);
    }
    Ok(())
}

/// 64 pseudo-random bytes for the placeholder signature of the input
/// spending `outpoint` (each outpoint is spent once, so no two inputs of a
/// chain share them); `attempt` draws others.
fn placeholder_bytes(outpoint: &OutPoint, attempt: u32) -> [u8; 64] {
    let half = |part: u8| {
        let mut engine = sha256::Hash::engine();
        engine.input(b"osprey-chaingen placeholder signature");
        engine.input(outpoint.txid.as_byte_array());
        engine.input(&outpoint.vout.to_le_bytes());
        engine.input(&attempt.to_le_bytes());
        engine.input(&[part]);
        sha256::Hash::from_engine(engine).to_byte_array()
    };
    let mut bytes = [0u8; 64];
    bytes[..32].copy_from_slice(&half(0));
    bytes[32..].copy_from_slice(&half(1));
    bytes
}

/// A placeholder ECDSA signature: r and s from [`placeholder_bytes`], s
/// made low like every signature Core relays, DER-encoded with
/// SIGHASH_ALL. A uniform r takes 33 DER bytes half the time, like the r
/// of a real signature, so the lengths (mostly 71 or 72 bytes) follow the
/// real distribution.
fn placeholder_ecdsa(outpoint: &OutPoint) -> Vec<u8> {
    let mut attempt = 0;
    loop {
        // Fails only for an r or s of at least the group order: ~2^-127.
        if let Ok(mut sig) =
            secp256k1::ecdsa::Signature::from_compact(&placeholder_bytes(outpoint, attempt))
        {
            sig.normalize_s();
            let mut bytes = sig.serialize_der().to_vec();
            bytes.push(EcdsaSighashType::All as u8);
            return bytes;
        }
        attempt += 1;
    }
}

/// Like [`sign_transaction`], but first checks that each spent output's
/// script really is `holder.script_pubkey(kind)` (costs a point
/// multiplication per P2TR input; meant for tests and tools, not the
/// generator's hot loop).
///
/// # Errors
/// When `spends` does not line up with the inputs or a script does not match.
pub fn sign_transaction_checked<S: AsRef<Spend>>(
    tx: &mut Transaction,
    spends: &[S],
) -> Result<(), SignError> {
    for (index, spend) in spends.iter().map(AsRef::as_ref).enumerate() {
        if spend.holder.script_pubkey(spend.kind) != spend.txout.script_pubkey {
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
}
