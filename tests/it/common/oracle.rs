//! The node's view of the chain and mempool, loaded over the node's RPC
//! (`getblockhash`, `getblock h 0`, `getblockheader h false`,
//! `getrawmempool true`, `getrawtransaction`) and turned into the answers an
//! exact Electrum server must give, by the rules of the protocol spec
//! (protocol-basics "Status"; `blockchain.scripthash.*`). Written from the
//! spec and the node only: no Osprey code computes an expected answer.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;

use bitcoin::hashes::{sha256, Hash};
use bitcoin::{Block, BlockHash, OutPoint, Script, ScriptBuf, Transaction, TxOut, Txid};
use osprey_testenv::Node;
use serde_json::{json, Value};

/// A transaction as the node reports it.
#[derive(Clone, Debug)]
pub struct NodeTx {
    pub txid: Txid,
    pub tx: Transaction,
    /// Block height, `None` in the mempool.
    pub height: Option<u32>,
    /// Position in its block.
    pub pos: u32,
    /// Fee in satoshis (mempool transactions only).
    pub fee: Option<u64>,
    /// Electrum height: the block height, or 0 / -1 in the mempool (-1 when
    /// an input spends another mempool transaction).
    pub electrum_height: i64,
}

/// One entry of a script's history as the spec orders it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryItem {
    pub txid: Txid,
    pub height: i64,
    pub fee: Option<u64>,
}

/// One unspent output of a script.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct UnspentItem {
    pub txid: String,
    pub vout: u32,
    /// 0 for a mempool output.
    pub height: u32,
    pub value: u64,
}

/// Everything the node knows, at one moment.
pub struct NodeView {
    pub tip_height: u32,
    pub tip_hash: BlockHash,
    /// Block hashes by height.
    pub block_hashes: Vec<BlockHash>,
    /// 80-byte headers in hex (`getblockheader h false`), by height.
    pub headers: Vec<String>,
    /// Txids of each block, by height.
    pub block_txids: Vec<Vec<Txid>>,
    /// Confirmed transactions in chain order, then mempool transactions.
    pub txs: Vec<NodeTx>,
    /// Index into `txs` by txid.
    by_txid: HashMap<Txid, usize>,
    /// Every output of every transaction in `txs`.
    outputs: HashMap<OutPoint, TxOut>,
    /// `getrawmempool true` as the node answered it.
    pub mempool_verbose: Value,
}

/// Converts a node's BTC amount (a JSON number) to satoshis.
pub fn btc_to_sat(value: &Value) -> u64 {
    let btc = value
        .as_f64()
        .unwrap_or_else(|| panic!("not a BTC amount: {value}"));
    (btc * 1e8).round() as u64
}

impl NodeView {
    /// Reads the whole chain and mempool from the node.
    ///
    /// # Panics
    /// On RPC failures, or when the chain changed while it was read.
    pub fn load(node: &dyn Node) -> NodeView {
        let (tip_height, tip_hash) = node.tip().expect("getbestblockhash");
        let heights: Vec<u32> = (0..=tip_height).collect();
        let mut block_hashes = Vec::with_capacity(heights.len());
        let mut headers = Vec::with_capacity(heights.len());
        let mut blocks: Vec<Block> = Vec::with_capacity(heights.len());
        for chunk in heights.chunks(200) {
            let params: Vec<Vec<Value>> = chunk.iter().map(|h| vec![json!(h)]).collect();
            let hashes: Vec<String> = node
                .rpc()
                .call_batch("getblockhash", &params)
                .expect("getblockhash batch")
                .into_iter()
                .map(|r| {
                    r.expect("getblockhash")
                        .as_str()
                        .expect("a hash string")
                        .to_string()
                })
                .collect();
            let params: Vec<Vec<Value>> = hashes
                .iter()
                .map(|h| vec![json!(h), json!(false)])
                .collect();
            for reply in node
                .rpc()
                .call_batch("getblockheader", &params)
                .expect("getblockheader batch")
            {
                headers.push(
                    reply
                        .expect("getblockheader")
                        .as_str()
                        .expect("header hex")
                        .to_string(),
                );
            }
            let params: Vec<Vec<Value>> = hashes.iter().map(|h| vec![json!(h), json!(0)]).collect();
            for reply in node
                .rpc()
                .call_batch("getblock", &params)
                .expect("getblock batch")
            {
                let hex = reply
                    .expect("getblock")
                    .as_str()
                    .expect("block hex")
                    .to_string();
                let block: Block =
                    bitcoin::consensus::deserialize(&hex::decode(hex).expect("block hex"))
                        .expect("block bytes");
                blocks.push(block);
            }
            block_hashes.extend(
                hashes
                    .iter()
                    .map(|h| BlockHash::from_str(h).expect("block hash")),
            );
        }
        assert_eq!(
            block_hashes.last(),
            Some(&tip_hash),
            "the node's chain changed while it was read"
        );

        let mut view = NodeView {
            tip_height,
            tip_hash,
            block_hashes,
            headers,
            block_txids: Vec::new(),
            txs: Vec::new(),
            by_txid: HashMap::new(),
            outputs: HashMap::new(),
            mempool_verbose: Value::Null,
        };
        for (height, block) in blocks.into_iter().enumerate() {
            assert_eq!(
                block.block_hash(),
                view.block_hashes[height],
                "block {height} bytes do not hash to its hash"
            );
            view.block_txids
                .push(block.txdata.iter().map(Transaction::compute_txid).collect());
            // The genesis coinbase is unspendable and never indexed (spec).
            if height == 0 {
                continue;
            }
            for (pos, tx) in block.txdata.into_iter().enumerate() {
                view.add(NodeTx {
                    txid: tx.compute_txid(),
                    tx,
                    height: Some(height as u32),
                    pos: pos as u32,
                    fee: None,
                    electrum_height: height as i64,
                });
            }
        }
        view.load_mempool(node);
        view
    }

    fn add(&mut self, tx: NodeTx) {
        for (vout, out) in tx.tx.output.iter().enumerate() {
            self.outputs.insert(
                OutPoint {
                    txid: tx.txid,
                    vout: vout as u32,
                },
                out.clone(),
            );
        }
        self.by_txid.insert(tx.txid, self.txs.len());
        self.txs.push(tx);
    }

    fn load_mempool(&mut self, node: &dyn Node) {
        let verbose: Value = node
            .rpc()
            .call("getrawmempool", &[json!(true)])
            .expect("getrawmempool true");
        let txids: Vec<Txid> = verbose
            .as_object()
            .expect("getrawmempool true is an object")
            .keys()
            .map(|t| Txid::from_str(t).expect("txid"))
            .collect();
        let params: Vec<Vec<Value>> = txids
            .iter()
            .map(|t| vec![json!(t.to_string()), json!(0)])
            .collect();
        let raw = if params.is_empty() {
            Vec::new()
        } else {
            node.rpc()
                .call_batch("getrawtransaction", &params)
                .expect("getrawtransaction batch")
        };
        let mempool: Vec<Transaction> = raw
            .into_iter()
            .map(|r| {
                let hex = r.expect("getrawtransaction of a mempool tx");
                bitcoin::consensus::deserialize(
                    &hex::decode(hex.as_str().expect("hex")).expect("hex"),
                )
                .expect("transaction bytes")
            })
            .collect();
        let in_mempool: HashSet<Txid> = txids.iter().copied().collect();
        // Outputs first: a mempool transaction may spend another one.
        for tx in &mempool {
            let txid = tx.compute_txid();
            for (vout, out) in tx.output.iter().enumerate() {
                self.outputs.insert(
                    OutPoint {
                        txid,
                        vout: vout as u32,
                    },
                    out.clone(),
                );
            }
        }
        for tx in mempool {
            let txid = tx.compute_txid();
            let inputs: u64 = tx
                .input
                .iter()
                .map(|i| {
                    self.outputs
                        .get(&i.previous_output)
                        .expect("mempool input spends a known output")
                        .value
                        .to_sat()
                })
                .sum();
            let outputs: u64 = tx.output.iter().map(|o| o.value.to_sat()).sum();
            let fee = inputs - outputs;
            // btcd says `fee`; Bitcoin Core `fees.base` (its `fee` went in 23).
            let entry = &verbose[txid.to_string()];
            let node_fee = entry.get("fee").unwrap_or(&entry["fees"]["base"]);
            assert_eq!(fee, btc_to_sat(node_fee), "node's fee of {txid}");
            let unconfirmed_parent = tx
                .input
                .iter()
                .any(|i| in_mempool.contains(&i.previous_output.txid));
            self.add(NodeTx {
                txid,
                tx,
                height: None,
                pos: 0,
                fee: Some(fee),
                electrum_height: if unconfirmed_parent { -1 } else { 0 },
            });
        }
        self.mempool_verbose = verbose;
    }

    /// The transaction `txid`, confirmed or in the mempool.
    pub fn tx(&self, txid: &Txid) -> Option<&NodeTx> {
        self.by_txid.get(txid).map(|&i| &self.txs[i])
    }

    /// Mempool transactions, in no particular order.
    pub fn mempool(&self) -> impl Iterator<Item = &NodeTx> {
        self.txs.iter().filter(|t| t.height.is_none())
    }

    fn touches(&self, tx: &NodeTx, script: &Script) -> bool {
        if !is_indexed(script) {
            return false;
        }
        tx.tx
            .output
            .iter()
            .any(|o| o.script_pubkey.as_script() == script)
            || (!tx.tx.is_coinbase()
                && tx.tx.input.iter().any(|i| {
                    self.outputs
                        .get(&i.previous_output)
                        .is_some_and(|o| o.script_pubkey.as_script() == script)
                }))
    }

    /// The history of `script` in protocol order: confirmed by height and
    /// position, then the mempool by (-height, txid as displayed).
    pub fn history(&self, script: &Script) -> Vec<HistoryItem> {
        let mut confirmed = Vec::new();
        let mut mempool = Vec::new();
        for tx in self.txs.iter().filter(|t| self.touches(t, script)) {
            let item = HistoryItem {
                txid: tx.txid,
                height: tx.electrum_height,
                fee: tx.fee,
            };
            if tx.height.is_some() {
                confirmed.push(item);
            } else {
                mempool.push(item);
            }
        }
        // `txs` is already in chain order; the mempool needs the spec's order.
        mempool.sort_by_key(|i| (-i.height, i.txid.to_string()));
        confirmed.extend(mempool);
        confirmed
    }

    /// The history as `blockchain.scripthash.get_history` sends it.
    pub fn history_json(&self, script: &Script) -> Value {
        Value::Array(self.history(script).iter().map(history_item_json).collect())
    }

    /// The mempool part as `blockchain.scripthash.get_mempool` sends it.
    pub fn mempool_json(&self, script: &Script) -> Value {
        Value::Array(
            self.history(script)
                .iter()
                .filter(|i| i.fee.is_some())
                .map(history_item_json)
                .collect(),
        )
    }

    /// The status hash of `script` (protocol-basics, "Status"), or null.
    pub fn status(&self, script: &Script) -> Value {
        status_of(&self.history(script))
    }

    /// Outputs paying `script` and not spent by any transaction the node
    /// knows (confirmed or mempool), sorted by (txid, vout).
    pub fn unspent(&self, script: &Script) -> Vec<UnspentItem> {
        if !is_indexed(script) {
            return Vec::new();
        }
        let spent: HashSet<OutPoint> = self
            .txs
            .iter()
            .filter(|t| !t.tx.is_coinbase())
            .flat_map(|t| t.tx.input.iter().map(|i| i.previous_output))
            .collect();
        let mut unspent = Vec::new();
        for tx in &self.txs {
            for (vout, out) in tx.tx.output.iter().enumerate() {
                let outpoint = OutPoint {
                    txid: tx.txid,
                    vout: vout as u32,
                };
                if out.script_pubkey.as_script() == script && !spent.contains(&outpoint) {
                    unspent.push(UnspentItem {
                        txid: tx.txid.to_string(),
                        vout: vout as u32,
                        height: tx.height.unwrap_or(0),
                        value: out.value.to_sat(),
                    });
                }
            }
        }
        unspent.sort();
        unspent
    }

    /// `listunspent` entries, sorted by (txid, vout) (the spec leaves the
    /// order open).
    pub fn unspent_json(&self, script: &Script) -> Value {
        Value::Array(
            self.unspent(script)
                .iter()
                .map(|u| json!({"tx_hash": u.txid, "tx_pos": u.vout, "height": u.height, "value": u.value}))
                .collect(),
        )
    }

    /// (confirmed, unconfirmed) balance: confirmed outputs not spent by a
    /// confirmed transaction; the mempool's outputs to the script minus the
    /// script's outputs the mempool spends.
    pub fn balance(&self, script: &Script) -> (u64, i64) {
        if !is_indexed(script) {
            return (0, 0);
        }
        let confirmed_spent: HashSet<OutPoint> = self
            .txs
            .iter()
            .filter(|t| t.height.is_some() && !t.tx.is_coinbase())
            .flat_map(|t| t.tx.input.iter().map(|i| i.previous_output))
            .collect();
        let mut confirmed = 0u64;
        let mut unconfirmed = 0i64;
        for tx in &self.txs {
            for (vout, out) in tx.tx.output.iter().enumerate() {
                if out.script_pubkey.as_script() != script {
                    continue;
                }
                let outpoint = OutPoint {
                    txid: tx.txid,
                    vout: vout as u32,
                };
                if tx.height.is_some() {
                    if !confirmed_spent.contains(&outpoint) {
                        confirmed += out.value.to_sat();
                    }
                } else {
                    unconfirmed += out.value.to_sat() as i64;
                }
            }
            if tx.height.is_none() {
                for input in &tx.tx.input {
                    let prev = &self.outputs[&input.previous_output];
                    if prev.script_pubkey.as_script() == script {
                        unconfirmed -= prev.value.to_sat() as i64;
                    }
                }
            }
        }
        (confirmed, unconfirmed)
    }

    pub fn balance_json(&self, script: &Script) -> Value {
        let (confirmed, unconfirmed) = self.balance(script);
        json!({"confirmed": confirmed, "unconfirmed": unconfirmed})
    }

    /// Every distinct output script of the chain (genesis excluded) and
    /// the mempool, in first-seen order (OP_RETURN scripts included: they
    /// must have no history).
    pub fn scripts(&self) -> Vec<ScriptBuf> {
        let mut seen = HashSet::new();
        let mut scripts = Vec::new();
        for tx in &self.txs {
            for out in &tx.tx.output {
                if seen.insert(out.script_pubkey.clone()) {
                    scripts.push(out.script_pubkey.clone());
                }
            }
        }
        scripts
    }

    /// Concatenated header hex of heights `start..start+count` (clipped at
    /// the tip).
    pub fn headers_hex(&self, start: u32, count: u32) -> String {
        let end = (start as usize + count as usize).min(self.headers.len());
        self.headers[(start as usize).min(end)..end].concat()
    }
}

/// Whether outputs locked by `script` are indexed: provably unspendable
/// OP_RETURN outputs are not (as in ElectrumX and electrs), so such a
/// script has no history.
pub fn is_indexed(script: &Script) -> bool {
    !script.is_op_return()
}

fn history_item_json(item: &HistoryItem) -> Value {
    match item.fee {
        Some(fee) => json!({"tx_hash": item.txid.to_string(), "height": item.height, "fee": fee}),
        None => json!({"tx_hash": item.txid.to_string(), "height": item.height}),
    }
}

/// The status of a history given in protocol order: sha256 of the
/// concatenated `"txid:height:"` strings, as hex; null when empty.
pub fn status_of(history: &[HistoryItem]) -> Value {
    if history.is_empty() {
        return Value::Null;
    }
    let text: String = history
        .iter()
        .map(|i| format!("{}:{}:", i.txid, i.height))
        .collect();
    json!(hex::encode(
        sha256::Hash::hash(text.as_bytes()).to_byte_array()
    ))
}

/// The height of the block holding `txid` according to the node's verbose
/// `getrawtransaction` (its `blockhash`), or `None` in the mempool.
pub fn confirmed_height_by_rpc(node: &dyn Node, txid: &Txid) -> Option<u32> {
    let verbose = node
        .get_raw_transaction_verbose(txid)
        .expect("getrawtransaction txid 1");
    let hash = verbose.get("blockhash").and_then(Value::as_str)?;
    let header: Value = node
        .rpc()
        .call("getblockheader", &[json!(hash), json!(true)])
        .expect("getblockheader");
    Some(header["height"].as_u64().expect("height") as u32)
}
