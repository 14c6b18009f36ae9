//! Blocks built by the test instead of the node's miner, so a test decides
//! exactly which transactions a block holds (a reorg's new branch, a
//! double spend): a coinbase paying the subsidy to the harness's mining
//! address, then the given transactions, ground to regtest proof of work
//! and handed to the node with `submitblock`. Blocks below segwit
//! activation only (no witness commitment is written).

use crate::node::{mining_address, Node};
use bitcoin::absolute::LockTime;
use bitcoin::block::{Header, Version};
use bitcoin::hashes::Hash;
use bitcoin::script::Builder;
use bitcoin::transaction::Version as TxVersion;
use bitcoin::{
    Amount, Block, BlockHash, CompactTarget, OutPoint, ScriptBuf, Sequence, Transaction, TxIn,
    TxMerkleNode, TxOut, Witness,
};
use serde_json::{json, Value};

/// Regtest's proof-of-work limit; regtest never retargets.
const REGTEST_BITS: u32 = 0x207f_ffff;

/// Blocks between regtest subsidy halvings.
const HALVING_INTERVAL: u32 = 150;

/// Builds a block on `parent` holding `txs` after its coinbase, submits it
/// to `node` and returns it.
///
/// # Panics
/// When a transaction has witness data (no commitment is written), or the
/// node rejects the block.
pub fn submit_block_on(
    node: &dyn Node,
    parent: BlockHash,
    txs: Vec<Transaction>,
    tag: u32,
) -> Block {
    assert!(
        txs.iter()
            .all(|tx| tx.input.iter().all(|i| i.witness.is_empty())),
        "submit_block_on writes no witness commitment: legacy transactions only"
    );
    let parent_header: Value = node
        .rpc()
        .call("getblockheader", &[json!(parent.to_string()), json!(true)])
        .expect("getblockheader");
    let height = parent_header["height"].as_u64().expect("height") as u32 + 1;
    let parent_time = parent_header["time"].as_u64().expect("time") as u32;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0);
    let subsidy = Amount::from_sat((50 * 100_000_000u64) >> (height / HALVING_INTERVAL).min(63));
    let coinbase = Transaction {
        version: TxVersion::ONE,
        lock_time: LockTime::ZERO,
        input: vec![TxIn {
            previous_output: OutPoint::null(),
            // BIP34 height, then a tag so sibling blocks differ.
            script_sig: Builder::new()
                .push_int(i64::from(height))
                .push_int(i64::from(tag) + 1000)
                .into_script(),
            sequence: Sequence::MAX,
            witness: Witness::new(),
        }],
        output: vec![TxOut {
            value: subsidy,
            script_pubkey: mining_address().script_pubkey(),
        }],
    };
    let mut txdata = vec![coinbase];
    txdata.extend(txs);
    let mut block = Block {
        header: Header {
            version: Version::from_consensus(0x2000_0000),
            prev_blockhash: parent,
            merkle_root: TxMerkleNode::all_zeros(),
            time: parent_time.max(now) + 1,
            bits: CompactTarget::from_consensus(REGTEST_BITS),
            nonce: 0,
        },
        txdata,
    };
    block.header.merkle_root = block
        .compute_merkle_root()
        .expect("a block with a coinbase has a merkle root");
    let target = block.header.target();
    while block.header.validate_pow(target).is_err() {
        block.header.nonce += 1;
    }
    node.submit_block(&block)
        .unwrap_or_else(|e| panic!("node rejected our block at height {height}: {e:#}"));
    block
}

/// A standard P2WPKH script whose key nobody holds, distinct per `n`:
/// somewhere to send coins away from the tracked scripts.
pub fn burn_script(n: u8) -> ScriptBuf {
    ScriptBuf::new_p2wpkh(&bitcoin::WPubkeyHash::from_byte_array([n; 20]))
}
