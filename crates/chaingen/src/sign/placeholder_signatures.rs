//! Placeholder signatures: of a real signature's form and size, made from
//! a hash instead of a key, for chains too large to sign.

use bitcoin::hashes::{sha256, Hash, HashEngine};
use bitcoin::secp256k1;
use bitcoin::sighash::EcdsaSighashType;
use bitcoin::{OutPoint, Transaction};

use super::kind::ScriptKind;
use super::{check_input_count, unlock_of, SignError, Spend};

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
///
/// [`sign_transaction`]: super::sign_transaction
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
pub(super) fn placeholder_ecdsa(outpoint: &OutPoint) -> Vec<u8> {
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
