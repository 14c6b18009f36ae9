//! Keys, the script kinds they can lock coins with, and real signatures for
//! spending them. Shared by the chain generator and by `osprey-testenv`, so
//! that every transaction a test or benchmark sends is signed by one piece of
//! code. Knows nothing about chains, pools or files.
//!
//! For chains too large to sign in the time at hand there are placeholder
//! keys and signatures ([`PlaceholderKey`], [`sign_placeholders`]): the
//! same transactions byte for byte in form and size, without a point
//! multiplication, valid only to a node that skips script checks.
//!
//! Split by concern: `kind` (the script kinds and the size bounds of
//! transactions spending them), `keys` (real and placeholder keys and the
//! scripts locking coins to them), `placeholder_signatures`, and here the
//! real signing.

use std::sync::LazyLock;

use bitcoin::hashes::Hash;
use bitcoin::key::Keypair;
use bitcoin::script::{Builder, PushBytesBuf};
use bitcoin::secp256k1::{All, Message, Secp256k1};
use bitcoin::sighash::{EcdsaSighashType, Prevouts, SighashCache, TapSighashType};
use bitcoin::taproot::{LeafVersion, TapLeafHash};
use bitcoin::{ScriptBuf, Transaction, TxOut, WPubkeyHash, Witness};

use keys::{witness_script, PublicKeyBytes};

mod keys;
mod kind;
mod placeholder_signatures;
#[cfg(test)]
mod tests;

pub use keys::{Holder, Key, PlaceholderKey};
pub use kind::{size_max, vsize_max, ScriptKind};
pub use placeholder_signatures::sign_placeholders;

/// One signing/verification context for the whole process: building one
/// costs far more than a signature.
pub static SECP: LazyLock<Secp256k1<All>> = LazyLock::new(Secp256k1::new);

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
