//! The change feed's item: what the index or the mempool just changed, so
//! that the server can tell subscribers.

use bitcoin::Txid;
use osprey_core::{Height, ScriptHash};

/// What changed with a new block, a reorg or a mempool update.
#[derive(Clone, Debug, Default)]
pub struct Change {
    pub new_tip: Option<(Height, [u8; 80])>,
    /// Script hashes whose status may have changed.
    pub scripthashes: Vec<ScriptHash>,
    /// Transactions that were confirmed, or entered or left the mempool:
    /// the status of an outpoint whose script is not known yet (or has no
    /// rows, `OP_RETURN`) changes only with its funding transaction.
    pub txids: Vec<Txid>,
    /// Blocks were undone: every script's status may have changed.
    pub all_scripthashes: bool,
}
