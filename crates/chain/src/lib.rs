//! Everything that talks to the node: JSON-RPC, block sources (a node over
//! RPC, or `blk*.dat` files) with the spent outputs each block needs. No
//! other crate talks to bitcoind or btcd.

mod blkfile;
mod blkfiles;
mod corefiles;
mod daemon;
mod error;
mod parallel;
pub mod rpc;
mod source;

pub use blkfile::{BlockPosition, BlocksDir, FileKind, Records};
pub use blkfiles::BlkFiles;
pub use corefiles::CoreBlockFiles;
pub use daemon::{BlockSource, BlockSourceChoice, Daemon, NodeKind};
pub use error::{Error, ErrorKind};
// The fuzz targets (`fuzz/`, feature `fuzzing`) decode undo records
// directly: through `CoreBlockFiles` a record is only decoded once its
// checksum matches, which random bytes never do.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::corefiles::decode_block_undo;

    /// Decodes a node's HTTP answer (`status`, `body`) to a JSON-RPC call,
    /// or, with `batch_len` set, to a batch of that many calls numbered
    /// from 1: the part of the node client that is ours (ureq parses the
    /// HTTP).
    ///
    /// # Errors
    /// As `RpcClient::call` and `RpcClient::call_batch`.
    pub fn decode_rpc_reply(
        status: u16,
        body: &[u8],
        batch_len: Option<usize>,
    ) -> Result<Vec<Result<serde_json::Value, crate::Error>>, crate::Error> {
        let reply = crate::rpc::decode_reply("fuzz", status, body)?;
        match batch_len {
            Some(count) => crate::rpc::split_batch("fuzz", 1, count, reply),
            None => Ok(vec![crate::rpc::take_result("fuzz", reply)]),
        }
    }
}
pub use source::{
    BlockFeed, BlockWithPrevouts, ChainSource, MempoolAcceptance, MempoolFees, MempoolTx,
    TxLocation,
};
