//! A small in-process Electrum server for the bench's tests, answering from a
//! hand-made chain, honestly or with one chosen lie.

#![allow(dead_code)] // Each test file uses part of the helpers.

use bitcoin::block::{Header, Version};
use bitcoin::consensus::encode::serialize_hex;
use bitcoin::hashes::Hash;
use bitcoin::{
    absolute, transaction, Amount, BlockHash, CompactTarget, OutPoint, ScriptBuf, Sequence,
    Transaction, TxIn, TxMerkleNode, TxOut, Txid, Witness,
};
use osprey_chaingen::manifest::{Manifest, WalletAddress, WalletManifest};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// A hand-made chain: headers and transactions a fake server serves, and the
/// manifest of the answers it should give.
pub struct Chain {
    pub manifest: Manifest,
    /// Header hex by height.
    pub headers: Vec<String>,
    /// Raw transaction hex by txid.
    pub txs: HashMap<String, String>,
    /// txids of `tx(1)..=tx(6)`, index 0 unused.
    pub txids: Vec<String>,
}

impl Chain {
    pub fn scripthash(&self, index: usize) -> &str {
        &self.manifest.wallet.addresses[index].scripthash
    }

    /// Saves the manifest into `dir` and returns its path.
    pub fn save_manifest(&self, dir: &Path) -> PathBuf {
        self.manifest.save(dir).expect("temp dir is writable");
        dir.join("manifest.json")
    }
}

fn tx(n: u32) -> Transaction {
    Transaction {
        version: transaction::Version::TWO,
        lock_time: absolute::LockTime::ZERO,
        input: vec![TxIn {
            previous_output: OutPoint {
                txid: Txid::from_byte_array([n as u8; 32]),
                vout: n,
            },
            script_sig: ScriptBuf::new(),
            sequence: Sequence::MAX,
            witness: Witness::new(),
        }],
        output: vec![TxOut {
            value: Amount::from_sat(1000 + u64::from(n)),
            script_pubkey: ScriptBuf::new(),
        }],
    }
}

/// Builds a chain of 8 blocks (tip height 7) and a wallet of 5 addresses:
/// shared transactions, two transactions in one block, and one address with
/// an empty history (status null).
pub fn chain() -> Chain {
    let mut headers = Vec::new();
    let mut block_hashes = Vec::new();
    let mut prev = BlockHash::all_zeros();
    for h in 0u32..8 {
        let header = Header {
            version: Version::TWO,
            prev_blockhash: prev,
            merkle_root: TxMerkleNode::from_byte_array([h as u8; 32]),
            time: 1_600_000_000 + h,
            bits: CompactTarget::from_consensus(0x207f_ffff),
            nonce: h,
        };
        prev = header.block_hash();
        block_hashes.push(prev.to_string());
        headers.push(serialize_hex(&header));
    }
    let mut txs = HashMap::new();
    let mut txids = vec![String::new()];
    for n in 1..=6 {
        let t = tx(n);
        let txid = t.compute_txid().to_string();
        txs.insert(txid.clone(), serialize_hex(&t));
        txids.push(txid);
    }
    let histories: [Vec<(usize, u32)>; 5] = [
        vec![(1, 1), (2, 3)],
        vec![(2, 3), (3, 3), (4, 5)],
        vec![(5, 7)],
        vec![(1, 1), (6, 6)],
        vec![],
    ];
    let addresses = histories
        .iter()
        .enumerate()
        .map(|(i, history)| WalletAddress {
            address: format!("bcrt1qfake{i}"),
            scripthash: bitcoin::hashes::sha256::Hash::hash(format!("script {i}").as_bytes())
                .to_string(),
            chain: 0,
            index: i as u32,
            history: history
                .iter()
                .map(|(n, h)| (txids[*n].clone(), *h))
                .collect(),
            balance: 1000,
            utxo_count: 1,
        })
        .collect();
    let manifest = Manifest {
        network: "regtest".into(),
        preset: "hand-made".into(),
        seed: 7,
        tip_height: 7,
        tip_hash: block_hashes[7].clone(),
        block_hashes,
        tx_count: 6,
        input_count: 6,
        output_count: 6,
        blk_files: vec![],
        wallet: WalletManifest {
            receive_descriptor: "wpkh(fake/0/*)".into(),
            change_descriptor: "wpkh(fake/1/*)".into(),
            addresses,
        },
        placeholder_signatures: None,
        silent_payments: None,
    };
    Chain {
        manifest,
        headers,
        txs,
        txids,
    }
}

/// How a fake server departs from the truth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lie {
    None,
    /// Address 1's last transaction (tx 4) at height 4 instead of 5, with a
    /// status consistent with the lie.
    WrongHeight,
    /// Address 1's status is garbage; its history is right.
    WrongStatus,
    /// `transaction.get` of tx 3 returns tx 2.
    WrongTx,
    /// `block.header` of height 3 returns the header of height 2.
    WrongHeader,
    /// `scripthash.subscribe` of address 2 returns a JSON-RPC error.
    RpcError,
    /// Address 2's history has an extra mempool transaction.
    MempoolEntry,
    /// Never answers `get_history`.
    Hang,
    /// Closes the connection on the first `scripthash.subscribe`.
    Drop,
    /// Answers `scripthash.subscribe` with lines of about 20 kB.
    HugeLine,
    /// Reports a tip one block behind the manifest's.
    BehindTip,
    /// Reports a tip one block past the manifest's, on the manifest's chain.
    AheadOfTip,
    /// Reports a tip one block past the manifest's, on another chain: its
    /// header at the manifest's tip height is another.
    ForkAheadOfTip,
    /// Sends a status-change notification for address 0 with a wrong status.
    Notify,
}

/// Starts a fake server on 127.0.0.1 on a thread of its own and returns its
/// HOST:PORT. It runs until the test process exits.
pub fn start(chain: Arc<Chain>, lie: Lie, software: &'static str) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("loopback is available");
    listener
        .set_nonblocking(true)
        .expect("socket accepts non-blocking mode");
    let address = listener
        .local_addr()
        .expect("bound socket has an address")
        .to_string();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let listener =
                tokio::net::TcpListener::from_std(listener).expect("tokio adopts the listener");
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&chain), lie, software));
            }
        });
    });
    address
}

/// Returns a HOST:PORT where nothing listens.
pub fn closed_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("loopback is available");
    listener
        .local_addr()
        .expect("bound socket has an address")
        .to_string()
}

enum Reply {
    Result(Value),
    Error(i64, &'static str),
    Hang,
    Drop,
}

async fn serve(stream: tokio::net::TcpStream, chain: Arc<Chain>, lie: Lie, software: &'static str) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let mut notified = false;
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(request) = serde_json::from_str::<Value>(&line) else {
            return;
        };
        let (is_batch, requests) = match request {
            Value::Array(items) => (true, items),
            other => (false, vec![other]),
        };
        let mut responses = Vec::new();
        let mut method_seen = "";
        for request in &requests {
            let method = request["method"].as_str().unwrap_or("");
            method_seen = if method == "blockchain.scripthash.subscribe" {
                "subscribe"
            } else {
                method_seen
            };
            let id = request["id"].clone();
            let mut response = match answer(&chain, lie, software, method, &request["params"]) {
                Reply::Result(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                Reply::Error(code, message) => {
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
                }
                Reply::Hang => std::future::pending().await,
                Reply::Drop => return,
            };
            if lie == Lie::HugeLine && method == "blockchain.scripthash.subscribe" {
                response["padding"] = Value::String("x".repeat(20_000));
            }
            responses.push(response);
        }
        if lie == Lie::Notify && method_seen == "subscribe" && !notified {
            notified = true;
            let wrong = json!({"jsonrpc": "2.0", "method": "blockchain.scripthash.subscribe",
                "params": [chain.scripthash(0), "00".repeat(32)]});
            let _ = write.write_all(format!("{wrong}\n").as_bytes()).await;
        }
        // Answer a batch in reverse order: clients must match by id.
        responses.reverse();
        let reply = if is_batch {
            Value::Array(responses)
        } else {
            responses.pop().unwrap_or(Value::Null)
        };
        if write
            .write_all(format!("{reply}\n").as_bytes())
            .await
            .is_err()
        {
            return;
        }
    }
}

fn history(chain: &Chain, lie: Lie, index: usize) -> Vec<(String, i64)> {
    let mut history: Vec<(String, i64)> = chain.manifest.wallet.addresses[index]
        .history
        .iter()
        .map(|(t, h)| (t.clone(), i64::from(*h)))
        .collect();
    if lie == Lie::WrongHeight && index == 1 {
        history[2].1 = 4;
    }
    if lie == Lie::MempoolEntry && index == 2 {
        history.push(("ee".repeat(32), 0));
    }
    history
}

fn answer(chain: &Chain, lie: Lie, software: &str, method: &str, params: &Value) -> Reply {
    let addresses = &chain.manifest.wallet.addresses;
    let find = |p: &Value| {
        let sh = p[0].as_str().unwrap_or("");
        addresses.iter().position(|a| a.scripthash == sh)
    };
    match method {
        "server.version" => Reply::Result(json!([software, "1.4"])),
        // A server keeping no silent-payment index: no "silent_payments".
        "server.features" => Reply::Result(json!({"hash_function": "sha256", "hosts": {}})),
        "blockchain.headers.subscribe" => {
            match lie {
                Lie::BehindTip => Reply::Result(json!({"height": 6, "hex": chain.headers[6]})),
                // The made-up block 8 reuses a header: only its height is read.
                Lie::AheadOfTip | Lie::ForkAheadOfTip => {
                    Reply::Result(json!({"height": 8, "hex": chain.headers[7]}))
                }
                _ => Reply::Result(json!({"height": 7, "hex": chain.headers[7]})),
            }
        }
        "blockchain.scripthash.subscribe" => {
            let Some(index) = find(params) else {
                return Reply::Error(1, "unknown scripthash");
            };
            if lie == Lie::Drop {
                return Reply::Drop;
            }
            if lie == Lie::RpcError && index == 2 {
                return Reply::Error(-32603, "history too large");
            }
            if lie == Lie::WrongStatus && index == 1 {
                return Reply::Result(json!("11".repeat(32)));
            }
            let h = history(chain, lie, index);
            Reply::Result(json!(osprey_bench::status_hash(
                h.iter().map(|(t, h)| (t.as_str(), *h))
            )))
        }
        "blockchain.scripthash.get_history" => {
            if lie == Lie::Hang {
                return Reply::Hang;
            }
            let Some(index) = find(params) else {
                return Reply::Error(1, "unknown scripthash");
            };
            let h = history(chain, lie, index);
            Reply::Result(Value::Array(
                h.iter()
                    .map(|(t, h)| json!({"tx_hash": t, "height": h}))
                    .collect(),
            ))
        }
        "blockchain.transaction.get" => {
            let mut txid = params[0].as_str().unwrap_or("").to_owned();
            if lie == Lie::WrongTx && txid == chain.txids[3] {
                txid = chain.txids[2].clone();
            }
            match chain.txs.get(&txid) {
                Some(hex) => Reply::Result(json!(hex)),
                None => Reply::Error(2, "no such transaction"),
            }
        }
        "blockchain.block.header" => {
            let mut height = params[0].as_u64().unwrap_or(u64::MAX) as usize;
            if (lie == Lie::WrongHeader && height == 3)
                || (lie == Lie::ForkAheadOfTip && height == 7)
            {
                height -= 1;
            }
            match chain.headers.get(height) {
                Some(hex) => Reply::Result(json!(hex)),
                None => Reply::Error(3, "height out of range"),
            }
        }
        _ => Reply::Error(-32601, "unknown method"),
    }
}
