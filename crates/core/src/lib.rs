//! Osprey's shared vocabulary: heights, transaction numbers, script hashes,
//! status hashes and network parameters. No I/O, no async, no storage: every
//! other crate speaks in these types.

mod network;
mod types;

pub use network::Network;
pub use types::{Height, ScriptHash, StatusHash, TxNum};
