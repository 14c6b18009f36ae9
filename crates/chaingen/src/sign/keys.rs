//! Keys: real key pairs derived from a seed, the placeholder keys of
//! chains with placeholder signatures, the holder of a coin (either), and
//! the scripts (envelope leaves included) that lock coins to them.

use bitcoin::hashes::{sha256, Hash};
use bitcoin::key::{CompressedPublicKey, Keypair, TapTweak, UntweakedPublicKey};
use bitcoin::opcodes::all::{OP_CHECKSIG, OP_ENDIF, OP_IF, OP_PUSHBYTES_0, OP_PUSHNUM_1};
use bitcoin::script::Builder;
use bitcoin::secp256k1::{self, PublicKey, SecretKey};
use bitcoin::taproot::{
    LeafVersion, TapLeafHash, TapNodeHash, TapTweakHash, TaprootBuilder, TaprootSpendInfo,
};
use bitcoin::{Address, Network, PubkeyHash, ScriptBuf, WPubkeyHash};

use super::kind::{ScriptKind, MAX_PUSH};
use super::{push_bytes, SECP};

/// A serialized compressed public key: what scripts and witnesses carry.
pub(super) type PublicKeyBytes = [u8; 33];

/// The script `<pubkey> OP_CHECKSIG` a [`ScriptKind::P2wsh`] output of
/// `pubkey` commits to.
pub(super) fn witness_script(pubkey: &PublicKeyBytes) -> ScriptBuf {
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
pub(super) fn envelope_leaf(pubkey: &PublicKeyBytes, len: u16) -> ScriptBuf {
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
    pub(super) secret: SecretKey,
    pub(super) public: PublicKey,
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
    pub(super) fn envelope_reveal(&self, len: u16) -> (ScriptBuf, Vec<u8>) {
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
pub struct PlaceholderKey(pub(super) PublicKeyBytes);

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
    pub(super) fn public_key_bytes(&self) -> PublicKeyBytes {
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

    pub(super) fn envelope_reveal(&self, len: u16) -> (ScriptBuf, Vec<u8>) {
        match self {
            Holder::Key(key) => key.envelope_reveal(len),
            Holder::Placeholder(placeholder) => placeholder.envelope_reveal(len),
        }
    }
}
