//! What the Electrum protocol asks of the chain and the mempool, and the
//! shape of the answers: the `Backend` trait, the answer types, the change
//! feed's `Change`, and the `Error` an answer can end in.
//!
//! The contract sits apart from both sides of it: `osprey-query`
//! implements `Backend` over the index (and so over RocksDB), while
//! `osprey-electrum` and `osprey-server` only ask, and build without the
//! database.

mod answer;
mod backend;
mod change;
mod error;
mod sp;

pub use answer::{
    Balance, HistoryEntry, Indexing, Merging, OutpointAnswer, OutpointStatus, RecentTx, TxMerkle,
    Utxo,
};
pub use backend::{computed, Backend, Compute, InPlace};
pub use change::Change;
pub use error::Error;
pub use sp::{height_at_time, SpChunk, SpCursor, SpMatch};
