//! BIP-352 silent payments, the parts a server needs (docs/silent-payments.md,
//! sections 2 and 3.2): which inputs count and their public keys, which
//! transactions are eligible, `input_hash`, the records of `sptweaks.dat`,
//! the `k = 0` scan kernel and the full receiver scan, `sp1`/`tsp1`/`sprt1`
//! addresses and the receiver's [`ScanKeys`].
//!
//! Section names in the comments are those of `bip-0352.mediawiki`
//! (version 1.1.1); `reference.py` is the BIP's reference implementation,
//! followed where the text leaves a choice.
//!
//! The curve arithmetic is libsecp256k1 through the `secp256k1` crate that
//! `bitcoin` 0.32 already links, so the workspace builds the C library once.

mod address;
mod field;
mod hash;
mod input;
mod record;
mod scan;
#[cfg(test)]
mod testing;

use std::sync::LazyLock;

use bitcoin::secp256k1::{All, Secp256k1};

pub use address::address;
pub use hash::{input_hash, shared_secret_tweak};
pub use input::{input_public_key, tweak_data, TweakData};
pub use record::{
    append_block_records, taproot_output_keys, BlockRecords, Record, OUTPUT_PREFIX_LEN,
};
pub use scan::{CandidateBatch, Candidates, FoundOutput, ScanKeys};

/// BIP-352 "Scanning": a receiver stops at `k == K_max`; senders never put
/// more outputs for one scan key in a transaction ("Creating outputs").
pub const K_MAX: u32 = 2323;

/// One context for the crate: its generator multiplications need a signing
/// context, and creating one per call would cost more than the call.
pub(crate) static SECP: LazyLock<Secp256k1<All>> = LazyLock::new(Secp256k1::new);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("the scan private key must be a 32-byte secret key")]
    ScanKey,
    #[error("the spend public key must be a 33-byte compressed public key")]
    SpendKey,
    #[error("{spent} spent outputs given for {inputs} inputs")]
    PrevoutCount { spent: usize, inputs: usize },
    #[error("not a valid block: {0}")]
    Block(&'static str),
    #[error("malformed silent-payments record: {0}")]
    Record(&'static str),
    /// A hash that must be a valid scalar is 0 or at least the group order,
    /// or a sum of points is the point at infinity. BIP-352 says "fail" for
    /// these; each has probability about 2^-128 unless keys are chosen
    /// adversarially.
    #[error("BIP-352 derivation failed: {0}")]
    Derivation(&'static str),
}
