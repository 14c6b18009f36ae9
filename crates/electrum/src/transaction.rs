//! The `blockchain.transaction.*` family: broadcast, broadcast_package, get,
//! get_merkle and id_from_pos. Asks the backend (which asks the node);
//! owns the result shapes, including the 1.7 draft's `block_hash` in get_merkle and
//! the non-verbose form of `submitpackage`'s answer.

use crate::error::RpcError;
use bitcoin::{TxMerkleNode, Txid};
use osprey_answers::Backend;
use osprey_answers::TxMerkle;
use osprey_core::Height;
use serde_json::{json, Value};

pub fn broadcast(backend: &dyn Backend, raw_tx: &str) -> Result<Value, RpcError> {
    Ok(Value::String(backend.broadcast(raw_tx)?.to_string()))
}

/// Answers `broadcast_package`: the node's answer when `verbose`, else
/// `{"success": bool, "errors"?: [{"txid", "error"}]}` as the spec shows.
pub fn broadcast_package(
    backend: &dyn Backend,
    raw_txs: &[String],
    verbose: bool,
) -> Result<Value, RpcError> {
    let answer = backend.broadcast_package(raw_txs)?;
    Ok(if verbose {
        answer
    } else {
        package_summary(&answer)
    })
}

/// Condenses Bitcoin Core's `submitpackage` answer.
pub fn package_summary(answer: &Value) -> Value {
    let success = answer.get("package_msg").and_then(Value::as_str) == Some("success");
    let errors: Vec<Value> = answer
        .get("tx-results")
        .and_then(Value::as_object)
        .map(|results| {
            results
                .values()
                .filter_map(|tx| {
                    let error = tx.get("error")?;
                    Some(json!({ "txid": tx.get("txid").cloned().unwrap_or(Value::Null), "error": error }))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut summary = json!({ "success": success });
    if !errors.is_empty() {
        summary["errors"] = Value::Array(errors);
    }
    summary
}

/// Answers `blockchain.transaction.get`: hex, or the node's verbose JSON.
pub fn get(backend: &dyn Backend, txid: &Txid, verbose: bool) -> Result<Value, RpcError> {
    if verbose {
        Ok(backend.transaction_verbose(txid)?)
    } else {
        Ok(Value::String(osprey_core::to_hex(
            &backend.transaction(txid)?,
        )))
    }
}

fn branch_json(branch: &[TxMerkleNode]) -> Value {
    branch.iter().map(|n| n.to_string()).collect()
}

/// Shapes `get_merkle`'s result; `block_hash` is part of it in the 1.7 draft.
pub fn merkle_json(merkle: &TxMerkle, with_block_hash: bool) -> Value {
    let mut result = json!({
        "block_height": merkle.block_height.0,
        "merkle": branch_json(&merkle.branch),
        "pos": merkle.pos,
    });
    if with_block_hash {
        result["block_hash"] = Value::String(merkle.block_hash.to_string());
    }
    result
}

pub fn get_merkle(
    backend: &dyn Backend,
    txid: &Txid,
    height: Option<Height>,
    with_block_hash: bool,
) -> Result<Value, RpcError> {
    Ok(merkle_json(&backend.merkle(txid, height)?, with_block_hash))
}

/// Shapes `id_from_pos`' result: the txid, or `{"tx_hash", "merkle"}`.
pub fn id_from_pos_json(txid: &Txid, branch: &[TxMerkleNode], merkle: bool) -> Value {
    if merkle {
        json!({ "tx_hash": txid.to_string(), "merkle": branch_json(branch) })
    } else {
        Value::String(txid.to_string())
    }
}

pub fn id_from_pos(
    backend: &dyn Backend,
    height: Height,
    tx_pos: u32,
    merkle: bool,
) -> Result<Value, RpcError> {
    let (txid, branch) = backend.id_from_pos(height, tx_pos)?;
    Ok(id_from_pos_json(&txid, &branch, merkle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::hashes::Hash;
    use bitcoin::BlockHash;

    #[test]
    fn merkle_shape_gains_block_hash_in_the_1_7_draft() {
        let m = TxMerkle {
            block_height: Height(2473),
            block_hash: BlockHash::from_byte_array([3; 32]),
            pos: 1,
            branch: vec![TxMerkleNode::from_byte_array([9; 32])],
        };
        let old = merkle_json(&m, false);
        assert_eq!(
            old,
            json!({"block_height": 2473, "merkle": ["09".repeat(32)], "pos": 1})
        );
        let new = merkle_json(&m, true);
        assert_eq!(new["block_hash"], json!("03".repeat(32)));
        assert_eq!(new["merkle"], old["merkle"]);
    }

    #[test]
    fn id_from_pos_shapes() {
        let t = Txid::from_byte_array([1; 32]);
        assert_eq!(id_from_pos_json(&t, &[], false), json!("01".repeat(32)));
        let node = TxMerkleNode::from_byte_array([2; 32]);
        assert_eq!(
            id_from_pos_json(&t, &[node], true),
            json!({"tx_hash": "01".repeat(32), "merkle": ["02".repeat(32)]})
        );
    }

    #[test]
    fn package_summary_follows_the_spec() {
        let ok = json!({"package_msg": "success", "tx-results": {"w1": {"txid": "aa"}}});
        assert_eq!(package_summary(&ok), json!({"success": true}));
        let bad = json!({
            "package_msg": "transaction failed",
            "tx-results": {"w1": {"txid": "aa"}, "w2": {"txid": "bb", "error": "bad-txns-inputs-missingorspent"}}
        });
        assert_eq!(
            package_summary(&bad),
            json!({"success": false, "errors": [{"txid": "bb", "error": "bad-txns-inputs-missingorspent"}]})
        );
    }
}
