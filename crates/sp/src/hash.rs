//! BIP-352's tagged hashes, `hash_tag(x) = SHA256(SHA256(tag) || SHA256(tag) || x)`
//! (the BIP-340 notation the "Specification" section adopts). The tag's
//! midstate is computed at compile time, so each hash is one or two
//! SHA-256 compressions.

use bitcoin::hashes::{sha256t_hash_newtype, Hash, HashEngine};
use bitcoin::secp256k1::{PublicKey, SecretKey};
use bitcoin::OutPoint;

use crate::Error;

sha256t_hash_newtype! {
    pub(crate) struct InputsTag = hash_str("BIP0352/Inputs");
    #[hash_newtype(forward)]
    pub(crate) struct InputsHash(_);

    pub(crate) struct SharedSecretTag = hash_str("BIP0352/SharedSecret");
    #[hash_newtype(forward)]
    pub(crate) struct SharedSecretHash(_);

    pub(crate) struct LabelTag = hash_str("BIP0352/Label");
    #[hash_newtype(forward)]
    pub(crate) struct LabelHash(_);
}

/// An outpoint as BIP-352 sorts and hashes it ("Specification"): as in a
/// serialised transaction, the txid in internal byte order, then the vout
/// little-endian.
fn serialize_outpoint(outpoint: &OutPoint) -> [u8; 36] {
    let mut bytes = [0u8; 36];
    bytes[..32].copy_from_slice(outpoint.txid.as_byte_array());
    bytes[32..].copy_from_slice(&outpoint.vout.to_le_bytes());
    bytes
}

/// `input_hash = hash_BIP0352/Inputs(outpoint_L || ser_P(A))` ("Receiver",
/// "Scanning"), as a scalar, where `outpoint_L` is the serialised outpoint
/// that sorts first among **all** the transaction's inputs, counted or not
/// (`reference.py` sorts every vin; vector "Outpoint ordering
/// byte-lexicographically vs. vout-integer"). BIP-352: "If input_hash is
/// not a valid scalar ... fail".
pub fn input_hash<'a>(
    outpoints: impl IntoIterator<Item = &'a OutPoint>,
    input_key_sum: &PublicKey,
) -> Result<SecretKey, Error> {
    let smallest = outpoints
        .into_iter()
        .map(serialize_outpoint)
        .min()
        .ok_or(Error::Derivation(
            "a transaction without inputs has no input_hash",
        ))?;
    let mut engine = InputsHash::engine();
    engine.input(&smallest);
    engine.input(&input_key_sum.serialize());
    SecretKey::from_slice(InputsHash::from_engine(engine).as_byte_array())
        .map_err(|_| Error::Derivation("input_hash is not a valid scalar"))
}

/// `t_k = hash_BIP0352/SharedSecret(ser_P(ecdh_shared_secret) || ser32(k))`
/// ("Creating outputs" and "Scanning"; both sides fail if it is not a valid
/// scalar).
pub fn shared_secret_tweak(shared_secret: &[u8; 33], k: u32) -> Result<SecretKey, Error> {
    let mut engine = SharedSecretHash::engine();
    engine.input(shared_secret);
    engine.input(&k.to_be_bytes());
    SecretKey::from_slice(SharedSecretHash::from_engine(engine).as_byte_array())
        .map_err(|_| Error::Derivation("t_k is not a valid scalar"))
}

/// `hash_BIP0352/Label(ser256(b_scan) || ser32(m))` ("Address encoding").
/// The BIP treats it as an integer tweak; a value of 0 or at least the order
/// cannot be a key and is refused.
pub(crate) fn label_tweak(scan_secret: &SecretKey, m: u32) -> Result<SecretKey, Error> {
    let mut engine = LabelHash::engine();
    engine.input(&scan_secret.secret_bytes());
    engine.input(&m.to_be_bytes());
    SecretKey::from_slice(LabelHash::from_engine(engine).as_byte_array())
        .map_err(|_| Error::Derivation("the label tweak is not a valid scalar"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::hashes::sha256;

    /// The compile-time midstates equal the definition spelled out.
    #[test]
    fn tagged_hashes_follow_bip340_notation() {
        fn by_definition(tag: &str, data: &[u8]) -> [u8; 32] {
            let tag = sha256::Hash::hash(tag.as_bytes());
            let mut engine = sha256::Hash::engine();
            engine.input(tag.as_byte_array());
            engine.input(tag.as_byte_array());
            engine.input(data);
            sha256::Hash::from_engine(engine).to_byte_array()
        }
        let data = [7u8; 69];
        assert_eq!(
            InputsHash::hash(&data).to_byte_array(),
            by_definition("BIP0352/Inputs", &data)
        );
        assert_eq!(
            SharedSecretHash::hash(&data).to_byte_array(),
            by_definition("BIP0352/SharedSecret", &data)
        );
        assert_eq!(
            LabelHash::hash(&data).to_byte_array(),
            by_definition("BIP0352/Label", &data)
        );
    }

    #[test]
    fn outpoints_serialise_as_in_transactions() {
        let outpoint = OutPoint {
            txid: "f4184fc596403b9d638783cf57adfe4c75c605f6356fbc91338530e9831e9e16"
                .parse()
                .unwrap(),
            vout: 0x0102_0304,
        };
        let bytes = serialize_outpoint(&outpoint);
        assert_eq!(bitcoin::consensus::serialize(&outpoint), bytes.to_vec());
        assert_eq!(bytes[0], 0x16, "txid bytes in internal (reversed) order");
        assert_eq!(&bytes[32..], &[4, 3, 2, 1]);
    }
}
