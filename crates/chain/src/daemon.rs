//! A Bitcoin Core or btcd node, as a [`ChainSource`].
//!
//! Blocks and the outputs they spend (the node's undo data) come from the
//! fastest source the node offers, chosen once at startup
//! ([`Daemon::use_block_source`]):
//! - [`BlockSource::Files`]: Core's own `blk*.dat` and `rev*.dat`, read
//!   straight from its data directory ([`CoreBlockFiles`]) when Osprey can
//!   read it: no work at all for the node. A block the files do not give
//!   (not flushed yet, pruned) comes from REST or JSON-RPC instead;
//! - [`BlockSource::Rest`]: Bitcoin Core's binary REST,
//!   `/rest/block/<hash>.bin` and `/rest/spenttxouts/<hash>.bin` (Core
//!   30+, `-rest=1`), several blocks in flight at once. Core serves both
//!   straight from disk, so it costs the node almost nothing;
//! - [`BlockSource::Rpc`]: JSON-RPC. On Core `getblock <hash> 3` carries each
//!   input's prevout and each transaction's hex, so a block is one request
//!   (Core spends real CPU writing that JSON: the slow path). btcd keeps no
//!   undo data it will serve, so there each block's spent outputs are
//!   resolved by fetching the funding transactions in one batch
//!   (`getrawtransaction`, which needs btcd's `--txindex`): slower, but the
//!   rows are the same.

use crate::corefiles::CoreBlockFiles;
use crate::rpc::{Auth, RpcClient};
use crate::source::{BlockWithPrevouts, ChainSource, MempoolFees, MempoolTx, TxLocation};
use crate::Error;
use bitcoin::block::{Header, Version};
use bitcoin::consensus::{deserialize, encode::deserialize_hex, Decodable};
use bitcoin::{Amount, Block, BlockHash, CompactTarget, ScriptBuf, Transaction, TxOut, Txid};
use osprey_core::{Height, Network};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Which node software answers, for the methods where they differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// Bitcoin Core with its numeric version (e.g. 310100 for 31.1).
    BitcoinCore {
        version: u64,
    },
    Btcd,
}

/// Where blocks and their spent outputs are read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockSource {
    /// Bitcoin Core's block and undo files, read directly.
    Files,
    /// Bitcoin Core's binary REST interface.
    Rest,
    /// JSON-RPC (`getblock <hash> 3` on Core; block plus funding
    /// transactions on btcd).
    Rpc,
}

impl std::fmt::Display for BlockSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BlockSource::Files => "files",
            BlockSource::Rest => "rest",
            BlockSource::Rpc => "rpc",
        })
    }
}

/// Which block source to use: the fastest the node offers, or one named.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BlockSourceChoice {
    #[default]
    Auto,
    Only(BlockSource),
}

pub struct Daemon {
    rpc: RpcClient,
    kind: NodeKind,
    network: Network,
    block_source: BlockSource,
    /// Core's block files, when readable ([`BlockSource::Files`]).
    files: Option<CoreBlockFiles>,
    /// Why Core's block files are not read, when `auto` wanted them.
    files_refused: Option<String>,
    /// Whether the node serves binary REST blocks and spent outputs: the
    /// fallback for blocks the files do not give.
    rest: bool,
    /// Whether `/rest/blockpart` may serve transactions (Core 31+ with
    /// REST); cleared, and logged once, the first time it does not.
    blockpart: AtomicBool,
    fee_fallback_logged: AtomicBool,
}

/// Blocks requested from the node at once over REST: enough to keep the
/// node's disk and our parser busy while a reply is in flight, few enough
/// that a chunk of large blocks stays a few tens of MB.
const REST_REQUESTS_IN_FLIGHT: usize = 4;

/// JSON-RPC code for "method not found".
const RPC_METHOD_NOT_FOUND: i64 = -32601;

/// Refuses a pruned node: Osprey indexes every block from genesis, and a
/// pruned node has deleted most of them (and deletes each new one's
/// predecessors as it goes). A node that cannot say (an old btcd without
/// `getblockchaininfo`) is taken as unpruned, which btcd always is.
fn refuse_pruned(rpc: &RpcClient) -> Result<(), Error> {
    let info: Value = match rpc.call("getblockchaininfo", &[]) {
        Ok(info) => info,
        Err(e) if e.is_transient() => return Err(e),
        Err(_) => return Ok(()),
    };
    if info.get("pruned").and_then(Value::as_bool) != Some(true) {
        return Ok(());
    }
    let kept_from = info
        .get("pruneheight")
        .and_then(Value::as_u64)
        .map_or_else(String::new, |h| {
            format!(" (it keeps blocks from height {h} on)")
        });
    Err(Error::persistent(format!(
        "the node is pruned{kept_from}: Osprey indexes every block from genesis, so it needs a node started without -prune (the index itself stays small)"
    )))
}

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
            let on = Network::ALL
                .into_iter()
                .find(|n| n.genesis_hash() == genesis)
                .map_or_else(
                    || format!("a chain Osprey does not know (genesis {genesis})"),
                    |n| n.name().to_string(),
                );
            return Err(Error::persistent(format!(
                "the node is on {on}, not {network}: set network to match the node, or daemon_rpc_addr to a {network} node"
            )));
        }
        refuse_pruned(&rpc)?;
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
            network,
            block_source: BlockSource::Rpc,
            files: None,
            files_refused: None,
            rest: false,
            blockpart: AtomicBool::new(matches!(kind, NodeKind::BitcoinCore { .. })),
            fee_fallback_logged: AtomicBool::new(false),
        })
    }

    pub fn kind(&self) -> NodeKind {
        self.kind
    }

    /// The node's software and version, e.g. "Bitcoin Core 30.0.0" or
    /// "btcd 0.24.2" (btcd's only from `getinfo`, asked here).
    pub fn node_version(&self) -> String {
        match self.kind {
            NodeKind::BitcoinCore { version } => format!("Bitcoin Core {}", core_version(version)),
            NodeKind::Btcd => match self.rpc.call::<Value>("getinfo", &[]) {
                Ok(info) => match info.get("version").and_then(Value::as_u64) {
                    Some(version) => format!("btcd {}", btcd_version(version)),
                    None => "btcd".to_string(),
                },
                Err(_) => "btcd".to_string(),
            },
        }
    }

    /// Whether the node keeps a transaction index, `None` when it cannot
    /// tell. Core says so in `getindexinfo`. btcd does not say: its
    /// `getrawtransaction` of a confirmed transaction (the genesis
    /// coinbase, on every network) fails with "specify --txindex" without
    /// one, and finds it or says "No information" with one.
    pub fn has_txindex(&self) -> Option<bool> {
        match self.kind {
            NodeKind::BitcoinCore { .. } => {
                let info: Value = self.rpc.call("getindexinfo", &[]).ok()?;
                Some(info.get("txindex").is_some())
            }
            NodeKind::Btcd => {
                let genesis = bitcoin::constants::genesis_block(self.network.bitcoin());
                let coinbase = genesis.txdata[0].compute_txid();
                match self
                    .rpc
                    .call::<Value>("getrawtransaction", &[json!(coinbase), json!(0)])
                {
                    Ok(_) => Some(true),
                    Err(e) if e.message().contains("--txindex") => Some(false),
                    Err(e) if e.message().contains("No information") => Some(true),
                    Err(_) => None,
                }
            }
        }
    }

    pub fn block_source(&self) -> BlockSource {
        self.block_source
    }

    /// Why `auto` did not take Core's block files, when it wanted them
    /// (the directory is missing, unreadable, or another network's).
    pub fn files_refused(&self) -> Option<&str> {
        self.files_refused.as_deref()
    }

    /// Picks where blocks come from: with [`BlockSourceChoice::Auto`],
    /// Core's own files when `blocks_dir` (`<datadir>/<network>/blocks`)
    /// can be read, else binary REST when the node serves it (spent outputs
    /// need Core 30+), else JSON-RPC. A named source the node cannot serve
    /// is an error that says how to enable it.
    ///
    /// # Errors
    /// When the node cannot be reached, or cannot serve the named source.
    pub fn use_block_source(
        &mut self,
        choice: BlockSourceChoice,
        blocks_dir: Option<&std::path::Path>,
    ) -> Result<BlockSource, Error> {
        self.rest = if matches!(self.kind, NodeKind::BitcoinCore { .. }) {
            let genesis: BlockHash = self.rpc.call("getblockhash", &[json!(0)])?;
            self.rpc
                .rest_get(&format!("/rest/spenttxouts/{genesis}.bin"))?
                .is_some()
        } else {
            false
        };
        let wants_files = matches!(
            choice,
            BlockSourceChoice::Auto | BlockSourceChoice::Only(BlockSource::Files)
        );
        self.files = match (blocks_dir, self.kind) {
            (Some(dir), NodeKind::BitcoinCore { .. }) if wants_files => {
                match CoreBlockFiles::open(dir, self.network) {
                    Ok(files) => Some(files),
                    Err(e) if choice == BlockSourceChoice::Auto => {
                        self.files_refused = Some(e.to_string());
                        None
                    }
                    Err(e) => {
                        return Err(Error::persistent(format!(
                            "block source files: {e} (Osprey needs read access to the node's blocks directory)"
                        )))
                    }
                }
            }
            _ => None,
        };
        self.block_source = match choice {
            BlockSourceChoice::Only(BlockSource::Files) => match self.files {
                Some(_) => BlockSource::Files,
                None => {
                    return Err(Error::persistent(
                        "block source files: needs Bitcoin Core and --daemon-dir naming its data directory".into(),
                    ))
                }
            },
            BlockSourceChoice::Only(BlockSource::Rpc) => BlockSource::Rpc,
            BlockSourceChoice::Only(BlockSource::Rest) => {
                if !self.rest {
                    return Err(Error::persistent(format!(
                        "block source rest: the node at {} does not serve /rest/spenttxouts (needs Bitcoin Core 30+ started with -rest=1)",
                        self.rpc.addr()
                    )));
                }
                BlockSource::Rest
            }
            BlockSourceChoice::Auto if self.files.is_some() => BlockSource::Files,
            BlockSourceChoice::Auto if self.rest => BlockSource::Rest,
            BlockSourceChoice::Auto => BlockSource::Rpc,
        };
        Ok(self.block_source)
    }

    /// Core's own files: blocks and undo records read and parsed on several
    /// threads; a block they do not give comes from REST or JSON-RPC.
    fn blocks_from_files(
        &self,
        files: &CoreBlockFiles,
        hashes: &[(Height, BlockHash)],
    ) -> Result<Vec<BlockWithPrevouts>, Error> {
        in_parallel(hashes, 2, |&(height, hash)| {
            if let Some((block, pos)) = files.block(&hash)? {
                if let Some(prevouts) = files.spent_outputs(&block, pos)? {
                    return Ok(BlockWithPrevouts {
                        height,
                        block,
                        prevouts,
                        size: pos.len as usize,
                    });
                }
            }
            tracing::debug!(height = height.0, %hash, "block not in Core's files yet; asking the node");
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

    /// Binary REST: the block and its spent outputs, both as Core stores
    /// them, several blocks in flight at once; parsing happens on the
    /// requesting threads, so it runs on all cores.
    fn blocks_rest(&self, hashes: &[(Height, BlockHash)]) -> Result<Vec<BlockWithPrevouts>, Error> {
        in_parallel(hashes, REST_REQUESTS_IN_FLIGHT, |&(height, hash)| {
            let missing = || {
                Error::transient(format!(
                    "REST: node has no block {height} ({hash}) or its undo data"
                ))
            };
            let raw = self
                .rpc
                .rest_get(&format!("/rest/block/{hash}.bin"))?
                .ok_or_else(missing)?;
            let block: Block = deserialize(&raw).map_err(|e| {
                Error::persistent(format!("block {height} ({hash}) does not parse: {e}"))
            })?;
            let spent = self
                .rpc
                .rest_get(&format!("/rest/spenttxouts/{hash}.bin"))?
                .ok_or_else(missing)?;
            let prevouts = decode_spent_outputs(&spent, &block).map_err(|what| {
                Error::persistent(format!(
                    "REST spenttxouts of block {height} ({hash}): {what}"
                ))
            })?;
            Ok(BlockWithPrevouts {
                height,
                block,
                prevouts,
                size: raw.len(),
            })
        })
    }

    /// Bitcoin Core: `getblock <hash> 3` carries every input's prevout and
    /// every transaction's hex, so one request gives the whole block.
    fn blocks_verbose3(
        &self,
        hashes: &[(Height, BlockHash)],
    ) -> Result<Vec<BlockWithPrevouts>, Error> {
        let params: Vec<Vec<Value>> = hashes
            .iter()
            .map(|(_, h)| vec![json!(h), json!(3)])
            .collect();
        let replies = self.rpc.call_batch("getblock", &params)?;
        replies
            .into_iter()
            .zip(hashes)
            .map(|(reply, (height, hash))| {
                let verbose = reply?;
                let bad = |what: &str| Error::persistent(format!("getblock {hash} 3: {what}"));
                let block = block_from_verbose(&verbose).ok_or_else(|| bad("malformed block"))?;
                if block.block_hash() != *hash {
                    return Err(bad("header does not hash to the block asked for"));
                }
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
                let size = verbose
                    .get("size")
                    .and_then(Value::as_u64)
                    .unwrap_or_default() as usize;
                Ok(BlockWithPrevouts {
                    height: *height,
                    block,
                    prevouts,
                    size,
                })
            })
            .collect()
    }

    /// A confirmed transaction's own bytes out of its block, over REST
    /// (`/rest/blockpart`, Core 31+): no JSON, no hex, and the node reads
    /// only those bytes. The bytes must hash to `txid`; `None` when REST
    /// cannot serve them (then callers use JSON-RPC, and so does every later
    /// call).
    fn transaction_from_blockpart(
        &self,
        txid: &Txid,
        loc: &TxLocation,
    ) -> Result<Option<Vec<u8>>, Error> {
        let path = format!(
            "/rest/blockpart/{}.bin?offset={}&size={}",
            loc.block_hash, loc.offset, loc.len
        );
        let reply = match self.rpc.rest_get(&path) {
            Ok(reply) => reply,
            Err(e) if e.is_transient() => return Err(e),
            Err(_) => None,
        };
        match reply {
            Some(bytes)
                if deserialize::<Transaction>(&bytes)
                    .is_ok_and(|tx| tx.compute_txid() == *txid) =>
            {
                Ok(Some(bytes))
            }
            Some(_) => Err(Error::persistent(format!(
                "block {} ({}) at offset {} does not hold transaction {txid} (reorg under way?)",
                loc.height, loc.block_hash, loc.offset
            ))),
            None => {
                if self.blockpart.swap(false, Ordering::Relaxed) {
                    tracing::info!(
                        "node does not serve /rest/blockpart (Bitcoin Core 31+ with -rest=1): transactions come over JSON-RPC"
                    );
                }
                Ok(None)
            }
        }
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

/// Runs `fetch` for every item on up to `workers` threads; results keep the
/// items' order. The first error wins.
fn in_parallel<T: Sync, R: Send>(
    items: &[T],
    workers: usize,
    fetch: impl Fn(&T) -> Result<R, Error> + Sync,
) -> Result<Vec<R>, Error> {
    let next = AtomicUsize::new(0);
    let workers = workers.clamp(1, items.len().max(1));
    let mut results: Vec<(usize, Result<R, Error>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        let result = fetch(item);
                        let failed = result.is_err();
                        done.push((i, result));
                        if failed {
                            // Stop handing out work; others finish theirs.
                            next.store(items.len(), Ordering::Relaxed);
                            break;
                        }
                    }
                    done
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("fetch workers do not panic"))
            .collect()
    });
    results.sort_unstable_by_key(|(i, _)| *i);
    if let Some(pos) = results.iter().position(|(_, r)| r.is_err()) {
        return Err(results.swap_remove(pos).1.err().expect("an error"));
    }
    Ok(results.into_iter().filter_map(|(_, r)| r.ok()).collect())
}

/// Decodes Core's `/rest/spenttxouts/<hash>.bin`: a compact-size count of
/// transactions, then for each a compact-size count of spent outputs and
/// those outputs (`CTxOut`: 8-byte LE value, script). The coinbase's list is
/// empty. Returns the outputs flattened in block order, after checking that
/// they fit `block` input for input.
///
/// # Errors
/// A description of the first mismatch or malformed byte.
fn decode_spent_outputs(bytes: &[u8], block: &Block) -> Result<Vec<TxOut>, String> {
    let mut cursor = std::io::Cursor::new(bytes);
    let mut count = || {
        bitcoin::VarInt::consensus_decode(&mut cursor)
            .map(|v| v.0)
            .map_err(|e| format!("bad count: {e}"))
    };
    let txs = count()?;
    if txs != block.txdata.len() as u64 {
        return Err(format!(
            "{txs} transactions, the block has {}",
            block.txdata.len()
        ));
    }
    let inputs: usize = block.txdata.iter().skip(1).map(|tx| tx.input.len()).sum();
    let mut outputs = Vec::with_capacity(inputs);
    for (i, tx) in block.txdata.iter().enumerate() {
        let spent = bitcoin::VarInt::consensus_decode(&mut cursor)
            .map_err(|e| format!("bad count: {e}"))?
            .0;
        let expected = if i == 0 { 0 } else { tx.input.len() as u64 };
        if spent != expected {
            return Err(format!(
                "transaction {i} spends {spent} outputs, it has {expected} inputs"
            ));
        }
        for _ in 0..spent {
            outputs.push(
                TxOut::consensus_decode(&mut cursor).map_err(|e| format!("bad output: {e}"))?,
            );
        }
    }
    if cursor.position() != bytes.len() as u64 {
        return Err("trailing bytes".into());
    }
    Ok(outputs)
}

/// Rebuilds a block from `getblock <hash> 2|3` JSON: the header from its
/// fields, each transaction from its `hex`.
fn block_from_verbose(v: &Value) -> Option<Block> {
    let hash = |key: &str| -> Option<[u8; 32]> {
        let mut bytes: [u8; 32] = hex::decode(v.get(key)?.as_str()?).ok()?.try_into().ok()?;
        bytes.reverse();
        Some(bytes)
    };
    use bitcoin::hashes::Hash;
    let header = Header {
        version: Version::from_consensus(v.get("version")?.as_i64()? as i32),
        prev_blockhash: match v.get("previousblockhash") {
            Some(_) => BlockHash::from_byte_array(hash("previousblockhash")?),
            None => BlockHash::all_zeros(),
        },
        merkle_root: bitcoin::TxMerkleNode::from_byte_array(hash("merkleroot")?),
        time: u32::try_from(v.get("time")?.as_u64()?).ok()?,
        bits: CompactTarget::from_consensus(
            u32::from_str_radix(v.get("bits")?.as_str()?, 16).ok()?,
        ),
        nonce: u32::try_from(v.get("nonce")?.as_u64()?).ok()?,
    };
    let txdata = v
        .get("tx")?
        .as_array()?
        .iter()
        .map(|tx| deserialize_hex(tx.get("hex")?.as_str()?).ok())
        .collect::<Option<Vec<Transaction>>>()?;
    Some(Block { header, txdata })
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

    fn transactions_are_local(&self) -> bool {
        self.files.is_some()
    }

    fn transaction(&self, txid: &Txid, location: Option<TxLocation>) -> Result<Vec<u8>, Error> {
        if let (Some(loc), Some(files)) = (location, &self.files) {
            if let Some(pos) = files.block_position(&loc.block_hash)? {
                let bytes = files.read_in_block(pos, loc.offset, loc.len)?;
                if deserialize::<Transaction>(&bytes).is_ok_and(|tx| tx.compute_txid() == *txid) {
                    return Ok(bytes);
                }
            }
        }
        if let (Some(loc), true) = (location, self.blockpart.load(Ordering::Relaxed)) {
            if let Some(bytes) = self.transaction_from_blockpart(txid, &loc)? {
                return Ok(bytes);
            }
        }
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

    fn mempool_fees(&self) -> Result<MempoolFees, Error> {
        if self.kind == NodeKind::Btcd {
            // btcd's getmempoolinfo has only `size` and `bytes`, and its
            // mempool has no dynamic floor: every floor is its relay fee.
            let relay = self.relay_fee()?;
            return Ok(MempoolFees {
                mempoolminfee: relay,
                minrelaytxfee: relay,
                incrementalrelayfee: relay,
            });
        }
        let info: Value = self.rpc.call("getmempoolinfo", &[])?;
        let field = |name: &str| {
            info.get(name)
                .and_then(Value::as_f64)
                .ok_or_else(|| Error::persistent(format!("getmempoolinfo: no {name}")))
        };
        Ok(MempoolFees {
            mempoolminfee: field("mempoolminfee")?,
            minrelaytxfee: field("minrelaytxfee")?,
            incrementalrelayfee: field("incrementalrelayfee")?,
        })
    }
}

/// Core's numeric version as people write it: 300100 is 30.1.0 (and
/// 210100, before Core 22, was 0.21.1).
fn core_version(version: u64) -> String {
    let (major, minor, patch) = (version / 10_000, version / 100 % 100, version % 100);
    if major < 22 {
        format!("0.{major}.{minor}")
    } else {
        format!("{major}.{minor}.{patch}")
    }
}

/// btcd's numeric version as people write it: 240200 is 0.24.2.
fn btcd_version(version: u64) -> String {
    format!(
        "{}.{}.{}",
        version / 1_000_000,
        version / 10_000 % 100,
        version / 100 % 100
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::absolute::LockTime;
    use bitcoin::transaction::Version as TxVersion;
    use bitcoin::{OutPoint, Sequence, TxIn, Witness};

    #[test]
    fn versions_read_as_their_releases_are_named() {
        assert_eq!(core_version(300100), "30.1.0");
        assert_eq!(core_version(250200), "25.2.0");
        assert_eq!(core_version(210100), "0.21.1");
        assert_eq!(btcd_version(240200), "0.24.2");
        assert_eq!(btcd_version(1_020_300), "1.2.3");
    }

    fn tx(inputs: usize) -> Transaction {
        Transaction {
            version: TxVersion::TWO,
            lock_time: LockTime::ZERO,
            input: (0..inputs.max(1))
                .map(|i| TxIn {
                    previous_output: if inputs == 0 {
                        OutPoint::null()
                    } else {
                        OutPoint::new(Txid::from_byte_array([i as u8 + 1; 32]), i as u32)
                    },
                    script_sig: ScriptBuf::new(),
                    sequence: Sequence::MAX,
                    witness: Witness::new(),
                })
                .collect(),
            output: vec![TxOut {
                value: Amount::from_sat(1),
                script_pubkey: ScriptBuf::from_bytes(vec![0x51]),
            }],
        }
    }

    use bitcoin::hashes::Hash;

    /// A coinbase and two transactions spending one and two outputs.
    fn block() -> Block {
        Block {
            header: bitcoin::constants::genesis_block(bitcoin::Network::Regtest).header,
            txdata: vec![tx(0), tx(1), tx(2)],
        }
    }

    /// Core's layout (`SerializeBlockUndo` in rest.cpp), written out by hand.
    fn spent_bytes() -> Vec<u8> {
        let mut b = vec![3, 0, 1];
        b.extend_from_slice(&5_000_000_000u64.to_le_bytes());
        b.push(22);
        b.extend_from_slice(&[0x00, 0x14]);
        b.extend_from_slice(&[0x11; 20]);
        b.push(2);
        b.extend_from_slice(&1_000u64.to_le_bytes());
        b.push(34);
        b.extend_from_slice(&[0x51, 0x20]);
        b.extend_from_slice(&[0x22; 32]);
        b.extend_from_slice(&0u64.to_le_bytes());
        b.push(0);
        b
    }

    #[test]
    fn spent_outputs_decode_in_block_order() {
        let outs = decode_spent_outputs(&spent_bytes(), &block()).unwrap();
        assert_eq!(outs.len(), 3);
        assert_eq!(outs[0].value, Amount::from_sat(5_000_000_000));
        assert_eq!(outs[0].script_pubkey.len(), 22);
        assert_eq!(outs[1].value, Amount::from_sat(1_000));
        assert!(outs[1].script_pubkey.is_p2tr());
        assert!(outs[2].script_pubkey.is_empty());
    }

    #[test]
    fn spent_outputs_that_do_not_fit_the_block_are_refused() {
        let good = spent_bytes();
        let mut trailing = good.clone();
        trailing.push(0);
        let mut wrong_tx_count = good.clone();
        wrong_tx_count[0] = 2;
        let mut coinbase_spends = good.clone();
        coinbase_spends[1] = 1;
        for (what, bytes) in [
            ("empty", vec![]),
            ("truncated", good[..good.len() - 3].to_vec()),
            ("trailing", trailing),
            ("tx count", wrong_tx_count),
            ("coinbase", coinbase_spends),
            (
                "huge count",
                vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
            ),
        ] {
            assert!(
                decode_spent_outputs(&bytes, &block()).is_err(),
                "{what} was accepted"
            );
        }
    }

    #[test]
    fn verbose_json_rebuilds_the_block() {
        let genesis = bitcoin::constants::genesis_block(bitcoin::Network::Regtest);
        let h = &genesis.header;
        let verbose = json!({
            "hash": genesis.block_hash().to_string(),
            "version": h.version.to_consensus(),
            "merkleroot": h.merkle_root.to_string(),
            "time": h.time,
            "bits": format!("{:08x}", h.bits.to_consensus()),
            "nonce": h.nonce,
            "tx": [{"hex": bitcoin::consensus::encode::serialize_hex(&genesis.txdata[0])}],
        });
        let rebuilt = block_from_verbose(&verbose).unwrap();
        assert_eq!(rebuilt, genesis);
        let mut next = verbose.clone();
        next["previousblockhash"] = json!(genesis.block_hash().to_string());
        assert_eq!(
            block_from_verbose(&next).unwrap().header.prev_blockhash,
            genesis.block_hash()
        );
        let mut broken = verbose;
        broken["tx"][0]["hex"] = json!("00");
        assert!(block_from_verbose(&broken).is_none());
    }

    #[test]
    fn parallel_fetches_keep_order_and_report_the_first_error() {
        let items: Vec<u32> = (0..50).collect();
        let doubled = in_parallel(&items, 4, |&i| Ok(i * 2)).unwrap();
        assert_eq!(doubled, items.iter().map(|i| i * 2).collect::<Vec<_>>());
        let failed = in_parallel(&items, 4, |&i| {
            if i == 17 {
                Err(Error::persistent("seventeen".into()))
            } else {
                Ok(i)
            }
        });
        assert_eq!(failed.unwrap_err().message(), "seventeen");
    }
}
