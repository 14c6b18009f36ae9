//! Answers about the indexed chain and the mempool: history, status hashes,
//! balances, unspent outputs, outpoint statuses, transactions and merkle
//! proofs, in `osprey-answers`' types: `Query` is the `osprey_answers::Backend`
//! the server asks. Knows nothing of JSON-RPC or sessions (that is
//! `osprey-electrum`); knows RocksDB only through `osprey-store` and the node
//! only through `osprey-chain`.

mod backend;
mod mempool;
mod merkle;
mod outpoint;
mod outputs;
mod query;
#[cfg(test)]
mod race;
mod silent;
mod status_cache;
mod tracker;

pub use merkle::MerkleTree;
pub use query::{Query, QueryConfig};
pub use tracker::Tracker;
