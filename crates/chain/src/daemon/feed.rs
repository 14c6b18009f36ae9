//! The node as a [`BlockFeed`]: its best block, long polls for the next
//! one, and blocks from the source [`Daemon::use_block_source`] picked.

use super::{BlockSource, Daemon, NodeKind};
use crate::corefiles::CoreBlockFiles;
use crate::parallel::in_parallel;
use crate::source::{BlockFeed, BlockWithPrevouts};
use crate::Error;
use bitcoin::BlockHash;
use osprey_core::Height;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;

impl Daemon {
    /// Core's own files: blocks and undo records read and parsed on several
    /// threads; a block they do not give comes from REST or JSON-RPC, and
    /// so does one they cannot give (a file unreadable for a while: a disk
    /// failing or gone, permissions changed), said once until the files
    /// serve again.
    fn blocks_from_files(
        &self,
        files: &CoreBlockFiles,
        hashes: &[(Height, BlockHash)],
    ) -> Result<Vec<BlockWithPrevouts>, Error> {
        in_parallel(hashes, 2, |&(height, hash)| {
            match block_from_files(files, height, hash) {
                Ok(Some(block)) => {
                    if self.files_failing.swap(false, Ordering::Relaxed) {
                        tracing::info!("Core's block files read again: blocks come from them");
                    }
                    return Ok(block);
                }
                Ok(None) => {
                    tracing::debug!(height = height.0, %hash, "block not in Core's files yet; asking the node");
                }
                Err(e) => {
                    if !self.files_failing.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            "Core's block files cannot be read ({e}): blocks come from the node until they can"
                        );
                    }
                }
            }
            let one = [(height, hash)];
            let mut fetched = if self.rest {
                self.blocks_rest(&one)?
            } else {
                self.blocks_verbose3(&one)?
            };
            fetched
                .pop()
                .ok_or_else(|| Error::transient(format!("node has no block {height}")))
        })
    }
}

/// Block `hash` with its spent outputs from Core's files, `None` when the
/// files do not hold it or its undo record (yet).
fn block_from_files(
    files: &CoreBlockFiles,
    height: Height,
    hash: BlockHash,
) -> Result<Option<BlockWithPrevouts>, Error> {
    let Some((block, pos)) = files.block(&hash)? else {
        return Ok(None);
    };
    Ok(files
        .spent_outputs(&block, pos)?
        .map(|prevouts| BlockWithPrevouts {
            height,
            block,
            prevouts,
            size: pos.len as usize,
        }))
}

impl BlockFeed for Daemon {
    /// Bitcoin Core: `waitfornewblock`, a long poll that returns as soon as
    /// the tip changes (or at the timeout), so new blocks reach wallets
    /// within milliseconds without ZMQ settings on the node. btcd has no
    /// such call: sleep, and the caller polls.
    fn wait_for_new_block(
        &self,
        tip: BlockHash,
        timeout: std::time::Duration,
    ) -> Result<bool, Error> {
        if self.kind == NodeKind::Btcd {
            std::thread::sleep(timeout);
            return Ok(self.best_block()?.1 != tip);
        }
        if self.best_block()?.1 != tip {
            return Ok(true);
        }
        let millis = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let reply: Value = self.rpc.call("waitfornewblock", &[json!(millis)])?;
        let hash = reply
            .get("hash")
            .and_then(Value::as_str)
            .and_then(|h| h.parse::<BlockHash>().ok());
        Ok(hash.is_some_and(|h| h != tip))
    }

    fn initial_block_download(&self) -> Result<bool, Error> {
        let info: Value = self.rpc.call("getblockchaininfo", &[])?;
        Ok(info
            .get("initialblockdownload")
            .and_then(Value::as_bool)
            .unwrap_or(false))
    }

    fn best_block(&self) -> Result<(Height, BlockHash), Error> {
        let info: Value = self.rpc.call("getblockchaininfo", &[])?;
        let height = info.get("blocks").and_then(Value::as_u64);
        let hash = info
            .get("bestblockhash")
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok());
        match (height, hash) {
            (Some(h), Some(hash)) => Ok((Height(h as u32), hash)),
            _ => Err(Error::persistent(
                "getblockchaininfo: missing blocks or bestblockhash".into(),
            )),
        }
    }

    fn block_hashes(&self, start: Height, count: u32) -> Result<Vec<BlockHash>, Error> {
        let params: Vec<Vec<Value>> = (start.0..start.0.saturating_add(count))
            .map(|h| vec![json!(h)])
            .collect();
        let mut hashes = Vec::with_capacity(params.len());
        for reply in self.rpc.call_batch("getblockhash", &params)? {
            // Out of range (Core -8, btcd -1): the chain ends here.
            let Ok(value) = reply else { break };
            hashes.push(
                serde_json::from_value(value)
                    .map_err(|e| Error::persistent(format!("getblockhash: {e}")))?,
            );
        }
        Ok(hashes)
    }

    fn blocks(&self, blocks: &[(Height, BlockHash)]) -> Result<Vec<BlockWithPrevouts>, Error> {
        match (self.block_source, self.kind) {
            (BlockSource::Files, _) => match &self.files {
                Some(files) => self.blocks_from_files(files, blocks),
                None => self.blocks_verbose3(blocks),
            },
            (BlockSource::Rest, _) => self.blocks_rest(blocks),
            (BlockSource::Rpc, NodeKind::BitcoinCore { version }) if version >= 230000 => {
                self.blocks_verbose3(blocks)
            }
            (BlockSource::Rpc, _) => self.blocks_by_funding_txs(blocks),
        }
    }
}
