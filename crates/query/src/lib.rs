//! Answers about the indexed chain and the mempool: history, status hashes,
//! balances, unspent outputs, outpoint statuses, transactions and merkle
//! proofs. Knows nothing
//! of JSON-RPC or sessions (that is `osprey-electrum`); knows RocksDB only
//! through `osprey-store` and the node only through `osprey-chain`.

mod error;
mod mempool;
mod merkle;
mod outpoint;
mod query;
#[cfg(test)]
mod race;
mod status_cache;
mod tracker;

pub use error::Error;
pub use merkle::MerkleTree;
/// What `Query::mempool_fees` answers (owned by `osprey-chain`).
pub use osprey_chain::MempoolFees;
pub use outpoint::{OutpointAnswer, OutpointStatus};
pub use query::{Balance, Change, HistoryEntry, Query, QueryConfig, TxMerkle, Utxo};
pub use tracker::Tracker;
