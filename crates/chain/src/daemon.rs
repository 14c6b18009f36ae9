//! A Bitcoin Core or btcd node over JSON-RPC, as a [`ChainSource`].
//!
//! Spent outputs come from Bitcoin Core's undo data (`getblock <hash> 3`,
//! Core 23+). btcd keeps no undo data it will serve, so there each block's
//! spent outputs are resolved by fetching the funding transactions in one
//! batch (`getrawtransaction`, which needs btcd's `--txindex`): slower, but
//! the rows are the same.

use crate::rpc::{Auth, RpcClient};
use crate::source::{BlockWithPrevouts, ChainSource, MempoolTx, TxLocation};
use crate::Error;
use bitcoin::consensus::{deserialize, encode::deserialize_hex};
use bitcoin::{Amount, Block, BlockHash, ScriptBuf, Transaction, TxOut, Txid};
use osprey_core::{Height, Network};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

/// Which node software answers, for the methods where they differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// Bitcoin Core with its numeric version (e.g. 310100 for 31.1).
    BitcoinCore {
        version: u64,
    },
    Btcd,
}

pub struct Daemon {
    rpc: RpcClient,
    kind: NodeKind,
    fee_fallback_logged: AtomicBool,
}

/// JSON-RPC code for "method not found".
const RPC_METHOD_NOT_FOUND: i64 = -32601;

impl Daemon {
    /// Connects to the node at `addr`, tells Bitcoin Core from btcd and
    /// checks that it serves `network`.
    ///
    /// # Errors
    /// Transient errors while the node is unreachable or warming up;
    /// persistent ones for bad credentials or the wrong network.
    pub fn connect(addr: &str, auth: Auth, network: Network) -> Result<Daemon, Error> {
        let rpc = RpcClient::new(addr, auth);
        let genesis: BlockHash = rpc.call("getblockhash", &[json!(0)])?;
        if genesis != network.genesis_hash() {
            return Err(Error::persistent(format!(
                "node at {addr} is not on {network}: its genesis block is {genesis}"
            )));
        }
        let kind = match rpc.call::<Value>("getnetworkinfo", &[]) {
            Ok(info) => NodeKind::BitcoinCore {
                version: info.get("version").and_then(Value::as_u64).unwrap_or(0),
            },
            Err(e) if e.is_transient() => return Err(e),
            // btcd: "Command unimplemented".
            Err(_) => NodeKind::Btcd,
        };
        Ok(Daemon {
            rpc,
            kind,
            fee_fallback_logged: AtomicBool::new(false),
        })
    }

    pub fn kind(&self) -> NodeKind {
        self.kind
    }

    /// Whether the node is still in its initial block download.
    ///
    /// # Errors
    /// When the node cannot be reached.
    pub fn initial_block_download(&self) -> Result<bool, Error> {
        let info: Value = self.rpc.call("getblockchaininfo", &[])?;
        Ok(info
            .get("initialblockdownload")
            .and_then(Value::as_bool)
            .unwrap_or(false))
    }

    fn raw_blocks(&self, hashes: &[(Height, BlockHash)]) -> Result<Vec<(Block, usize)>, Error> {
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

    /// Bitcoin Core: `getblock <hash> 3` carries every input's prevout.
    fn blocks_verbose3(
        &self,
        hashes: &[(Height, BlockHash)],
    ) -> Result<Vec<BlockWithPrevouts>, Error> {
        let params: Vec<Vec<Value>> = hashes
            .iter()
            .map(|(_, h)| vec![json!(h), json!(3)])
            .collect();
        let replies = self.rpc.call_batch("getblock", &params)?;
        let raw = self.raw_blocks(hashes)?;
        replies
            .into_iter()
            .zip(raw)
            .zip(hashes)
            .map(|((reply, (block, size)), (height, hash))| {
                let verbose = reply?;
                let bad = |what: &str| Error::persistent(format!("getblock {hash} 3: {what}"));
                let txs = verbose
                    .get("tx")
                    .and_then(Value::as_array)
                    .ok_or_else(|| bad("no tx array"))?;
                let mut prevouts = Vec::new();
                for tx in txs.iter().skip(1) {
                    for vin in tx
                        .get("vin")
                        .and_then(Value::as_array)
                        .ok_or_else(|| bad("no vin"))?
                    {
                        let prevout = vin
                            .get("prevout")
                            .ok_or_else(|| bad("no prevout (undo data pruned?)"))?;
                        prevouts
                            .push(parse_prevout(prevout).ok_or_else(|| bad("malformed prevout"))?);
                    }
                }
                Ok(BlockWithPrevouts {
                    height: *height,
                    block,
                    prevouts,
                    size,
                })
            })
            .collect()
    }

    /// btcd: fetch every funding transaction not in the block itself.
    fn blocks_by_funding_txs(
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

fn parse_prevout(prevout: &Value) -> Option<TxOut> {
    // Amounts are BTC as JSON numbers with 8 decimals; 21e14 sat < 2^53, so
    // rounding the f64 recovers the exact satoshi value.
    let btc = prevout.get("value")?.as_f64()?;
    let script = prevout.get("scriptPubKey")?.get("hex")?.as_str()?;
    Some(TxOut {
        value: Amount::from_sat((btc * 1e8).round() as u64),
        script_pubkey: ScriptBuf::from_hex(script).ok()?,
    })
}

impl ChainSource for Daemon {
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
        match self.kind {
            NodeKind::BitcoinCore { version } if version >= 230000 => self.blocks_verbose3(blocks),
            _ => self.blocks_by_funding_txs(blocks),
        }
    }

    fn transaction(&self, txid: &Txid, location: Option<TxLocation>) -> Result<Vec<u8>, Error> {
        let hex: Result<String, Error> = match (self.kind, location) {
            // Without -txindex, Core finds a confirmed transaction given its block.
            (NodeKind::BitcoinCore { .. }, Some(loc)) => self.rpc.call(
                "getrawtransaction",
                &[json!(txid), json!(false), json!(loc.block_hash)],
            ),
            (NodeKind::BitcoinCore { .. }, None) => self
                .rpc
                .call("getrawtransaction", &[json!(txid), json!(false)]),
            (NodeKind::Btcd, _) => self.rpc.call("getrawtransaction", &[json!(txid), json!(0)]),
        };
        match (hex, location) {
            (Ok(hex), _) => hex::decode(&hex)
                .map_err(|e| Error::persistent(format!("transaction {txid}: bad hex: {e}"))),
            (Err(e), _) if e.is_transient() => Err(e),
            // btcd without --txindex: read it out of its block.
            (Err(_), Some(loc)) => {
                let (block, _) = self
                    .raw_blocks(&[(loc.height, loc.block_hash)])?
                    .pop()
                    .expect("one block asked");
                let tx = block.txdata.get(loc.position as usize).ok_or_else(|| {
                    Error::persistent(format!(
                        "block {} has no transaction {}",
                        loc.height, loc.position
                    ))
                })?;
                Ok(bitcoin::consensus::serialize(tx))
            }
            (Err(e), None) => Err(e),
        }
    }

    fn transaction_verbose(
        &self,
        txid: &Txid,
        location: Option<TxLocation>,
    ) -> Result<Value, Error> {
        match (self.kind, location) {
            (NodeKind::BitcoinCore { .. }, Some(loc)) => self.rpc.call(
                "getrawtransaction",
                &[json!(txid), json!(true), json!(loc.block_hash)],
            ),
            (NodeKind::BitcoinCore { .. }, None) => self
                .rpc
                .call("getrawtransaction", &[json!(txid), json!(true)]),
            (NodeKind::Btcd, _) => self.rpc.call("getrawtransaction", &[json!(txid), json!(1)]),
        }
    }

    fn mempool_txids(&self) -> Result<Vec<Txid>, Error> {
        self.rpc.call("getrawmempool", &[])
    }

    fn mempool_transactions(&self, txids: &[Txid]) -> Result<Vec<MempoolTx>, Error> {
        let verbosity = if self.kind == NodeKind::Btcd {
            json!(0)
        } else {
            json!(false)
        };
        let mut found = Vec::with_capacity(txids.len());
        for chunk in txids.chunks(500) {
            let params: Vec<Vec<Value>> = chunk
                .iter()
                .map(|t| vec![json!(t), verbosity.clone()])
                .collect();
            for (txid, reply) in chunk
                .iter()
                .zip(self.rpc.call_batch("getrawtransaction", &params)?)
            {
                // Gone from the mempool since we listed it: skip.
                let Ok(hex) = reply else { continue };
                let bytes = hex::decode(hex.as_str().unwrap_or_default()).unwrap_or_default();
                if let Ok(tx) = deserialize::<Transaction>(&bytes) {
                    found.push(MempoolTx { txid: *txid, tx });
                }
            }
        }
        Ok(found)
    }

    fn broadcast(&self, raw_hex: &str) -> Result<Txid, Error> {
        self.rpc.call("sendrawtransaction", &[json!(raw_hex)])
    }

    fn broadcast_package(&self, raw_hexes: &[String]) -> Result<Value, Error> {
        match self.rpc.call("submitpackage", &[json!(raw_hexes)]) {
            Err(e) if e.code() == RPC_METHOD_NOT_FOUND || self.kind == NodeKind::Btcd => Err(
                Error::persistent("the node does not support package relay (submitpackage)".into()),
            ),
            other => other,
        }
    }

    fn estimate_fee(&self, blocks: u16, mode: Option<&str>) -> Result<Option<f64>, Error> {
        let mut params = vec![json!(blocks)];
        if let Some(mode) = mode {
            params.push(json!(mode));
        }
        match self.rpc.call::<Value>("estimatesmartfee", &params) {
            Ok(v) => Ok(v.get("feerate").and_then(Value::as_f64)),
            Err(e) if e.code() == RPC_METHOD_NOT_FOUND => {
                if !self.fee_fallback_logged.swap(true, Ordering::Relaxed) {
                    tracing::info!(
                        "node has no estimatesmartfee; using estimatefee (btcd) for fee estimates"
                    );
                }
                let fee: f64 = self.rpc.call("estimatefee", &[json!(blocks)])?;
                Ok((fee > 0.0).then_some(fee))
            }
            Err(e) => Err(e),
        }
    }

    fn relay_fee(&self) -> Result<f64, Error> {
        let method = if self.kind == NodeKind::Btcd {
            "getinfo"
        } else {
            "getnetworkinfo"
        };
        let info: Value = self.rpc.call(method, &[])?;
        info.get("relayfee")
            .and_then(Value::as_f64)
            .ok_or_else(|| Error::persistent(format!("{method}: no relayfee")))
    }
}
