//! Turns blocks into index rows ([`rows`], pure functions) and keeps the
//! index at the node's tip ([`Indexer`]: batches, reorgs, progress), or a
//! read-only replica at its writer's ([`Indexer::replica`]).

mod follow;
pub mod rows;
mod sync;

pub use sync::{ChunkStats, Indexer, IndexerConfig, SyncReport};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Chain(#[from] osprey_chain::Error),
    #[error(transparent)]
    Store(#[from] osprey_store::Error),
    #[error("{0}")]
    BadBlock(String),
    /// The source's chain changed under a sync; the next sync catches up.
    #[error("the chain changed during sync")]
    Reorged,
}

impl Error {
    /// Whether retrying later may succeed (the node restarting, a reorg).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Chain(e) => e.is_transient(),
            Error::Reorged => true,
            Error::Store(e) => e.is_transient(),
            Error::BadBlock(_) => false,
        }
    }
}
