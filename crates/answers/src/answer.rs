//! The answers about scripts, outpoints and transactions, as the index and
//! the mempool give them (the protocol layer shapes them into JSON).

use bitcoin::{TxMerkleNode, Txid};
use osprey_core::{Height, ScriptHash};

/// Where the first sync of a process that serves while it indexes stands:
/// until it ends, only what is right at any height is answered (the
/// server's own methods, headers, fees), and every question about scripts,
/// transactions, outpoints or silent payments gets an error naming these
/// heights, never a partial answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Indexing {
    /// The index's tip.
    pub height: Height,
    /// The node's best block, as the last sync step saw it (the index's
    /// tip before the node has answered).
    pub node_height: Height,
    /// Set once the first sync's bulk load reached the tip and is being
    /// merged, partition by partition: wallets wait for the merge.
    pub merging: Option<Merging>,
}

/// The merge that ends a bulk load: which partition is being merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Merging {
    /// 1 for the first.
    pub partition: usize,
    pub partitions: usize,
}

impl std::fmt::Display for Indexing {
    /// What a wallet is told: the heights, and the merge when there is one.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "height {} of {}", self.height, self.node_height)?;
        match self.merging {
            None => write!(
                f,
                "; wallets are served once the index reaches the node's tip"
            ),
            Some(m) => write!(
                f,
                ", merging the index (partition {} of {}); wallets are served once it is merged",
                m.partition, m.partitions
            ),
        }
    }
}

/// One transaction of a script's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryEntry {
    pub txid: Txid,
    /// The block height; for mempool transactions 0 when every input is
    /// confirmed and -1 otherwise.
    pub height: i64,
    /// The fee in satoshis, for mempool transactions.
    pub fee: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Balance {
    pub confirmed: u64,
    /// What the mempool adds (or, if negative, spends).
    pub unconfirmed: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Utxo {
    pub txid: Txid,
    pub vout: u32,
    /// 0 for mempool outputs.
    pub height: u32,
    pub value: u64,
}

#[derive(Clone, Debug)]
pub struct TxMerkle {
    pub block_height: Height,
    pub pos: u32,
    pub branch: Vec<TxMerkleNode>,
}

/// A transaction that entered the mempool lately (`mempool.recent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecentTx {
    pub txid: Txid,
    /// In satoshis.
    pub fee: u64,
    pub vsize: u64,
}

/// What the protocol tells of an outpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutpointStatus {
    /// The height of the funding transaction (1.7's `funder_height`): its
    /// block, or in the mempool 0 (every input confirmed) or -1. `None`: no
    /// such output is known.
    pub height: Option<i64>,
    /// The spending transaction and its height, by the same rules.
    pub spender: Option<(Txid, i64)>,
}

/// An outpoint's status and the script hash of its output, when the output
/// is known: the script of `txid:vout` never changes, so a change touching
/// that script hash is the only one (with one naming `txid`) that can change
/// the status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutpointAnswer {
    pub status: OutpointStatus,
    pub scripthash: Option<ScriptHash>,
}
