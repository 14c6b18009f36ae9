//! Blocks over plain JSON-RPC, for nodes without undo data to serve
//! (btcd, and Core before 23): each block's spent outputs are resolved by
//! fetching the funding transactions (`getrawtransaction`, which needs
//! btcd's `--txindex`).

use super::Daemon;
use crate::source::BlockWithPrevouts;
use crate::Error;
use bitcoin::consensus::encode::deserialize_hex;
use bitcoin::{Block, BlockHash, Transaction, Txid};
use osprey_core::Height;
use serde_json::{json, Value};
use std::collections::HashMap;

impl Daemon {
    pub(super) fn raw_blocks(
        &self,
        hashes: &[(Height, BlockHash)],
    ) -> Result<Vec<(Block, usize)>, Error> {
        let params: Vec<Vec<Value>> = hashes
            .iter()
            .map(|(_, h)| vec![json!(h), json!(0)])
            .collect();
        self.rpc
            .call_batch("getblock", &params)?
            .into_iter()
            .zip(hashes)
            .map(|(reply, (height, hash))| {
                let hex = reply?;
                let hex = hex
                    .as_str()
                    .ok_or_else(|| Error::persistent(format!("getblock {hash}: not hex")))?;
                let block: Block = deserialize_hex(hex).map_err(|e| {
                    Error::persistent(format!("block {height} ({hash}) does not parse: {e}"))
                })?;
                Ok((block, hex.len() / 2))
            })
            .collect()
    }

    /// btcd: fetch every funding transaction not in the block itself.
    pub(super) fn blocks_by_funding_txs(
        &self,
        hashes: &[(Height, BlockHash)],
    ) -> Result<Vec<BlockWithPrevouts>, Error> {
        let raw = self.raw_blocks(hashes)?;
        let mut created: HashMap<Txid, &Transaction> = HashMap::new();
        let mut wanted: Vec<Txid> = Vec::new();
        for (block, _) in &raw {
            for tx in &block.txdata {
                created.insert(tx.compute_txid(), tx);
            }
        }
        for (block, _) in &raw {
            for tx in block.txdata.iter().skip(1) {
                for input in &tx.input {
                    let txid = input.previous_output.txid;
                    if !created.contains_key(&txid) {
                        wanted.push(txid);
                    }
                }
            }
        }
        wanted.sort_unstable();
        wanted.dedup();
        let params: Vec<Vec<Value>> = wanted.iter().map(|t| vec![json!(t), json!(0)]).collect();
        let mut fetched: HashMap<Txid, Transaction> = HashMap::with_capacity(wanted.len());
        for chunk in wanted.chunks(500).zip(params.chunks(500)) {
            for (txid, reply) in chunk
                .0
                .iter()
                .zip(self.rpc.call_batch("getrawtransaction", chunk.1)?)
            {
                let hex = reply.map_err(|e| {
                    Error::persistent(format!(
                        "cannot fetch spent transaction {txid}: {e} (btcd needs --txindex)"
                    ))
                })?;
                let tx: Transaction =
                    deserialize_hex(hex.as_str().unwrap_or_default()).map_err(|e| {
                        Error::persistent(format!("transaction {txid} does not parse: {e}"))
                    })?;
                fetched.insert(*txid, tx);
            }
        }
        raw.iter()
            .zip(hashes)
            .map(|((block, size), (height, _))| {
                let mut prevouts = Vec::new();
                for tx in block.txdata.iter().skip(1) {
                    for input in &tx.input {
                        let op = input.previous_output;
                        let funding = created
                            .get(&op.txid)
                            .copied()
                            .or_else(|| fetched.get(&op.txid));
                        let out = funding
                            .and_then(|t| t.output.get(op.vout as usize))
                            .ok_or_else(|| {
                                Error::persistent(format!(
                                    "block {height} spends unknown output {op}"
                                ))
                            })?;
                        prevouts.push(out.clone());
                    }
                }
                Ok(BlockWithPrevouts {
                    height: *height,
                    block: block.clone(),
                    prevouts,
                    size: *size,
                })
            })
            .collect()
    }
}
