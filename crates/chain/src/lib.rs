//! Everything that talks to the node: JSON-RPC, block sources (a node over
//! RPC, or `blk*.dat` files) with the spent outputs each block needs. No
//! other crate talks to bitcoind or btcd.

mod blkfile;
mod blkfiles;
mod corefiles;
mod daemon;
mod error;
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
}
pub use source::{BlockWithPrevouts, ChainSource, MempoolFees, MempoolTx, TxLocation};
