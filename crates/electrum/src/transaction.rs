//! The `blockchain.transaction.*` family: broadcast, broadcast_package, get,
//! get_merkle, id_from_pos and (1.7) testmempoolaccept. Asks the backend
//! (which asks the node); owns the result shapes, including the
//! non-verbose form of `submitpackage`'s answer.

use crate::error::RpcError;
use bitcoin::{TxMerkleNode, Txid};
use osprey_answers::Backend;
use osprey_answers::TxMerkle;
use osprey_chain::MempoolAcceptance;
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

/// Shapes `get_merkle`'s result, the same at every version (1.7 as merged
/// left it as 1.6 has it).
pub fn merkle_json(merkle: &TxMerkle) -> Value {
    json!({
        "block_height": merkle.block_height.0,
        "merkle": branch_json(&merkle.branch),
        "pos": merkle.pos,
    })
}

pub fn get_merkle(backend: &dyn Backend, txid: &Txid, height: Height) -> Result<Value, RpcError> {
    Ok(merkle_json(&backend.merkle(txid, height)?))
}

/// Shapes one verdict of `testmempoolaccept`: `txid` and `wtxid`, then
/// `allowed` when the node judged the transaction and `reason` when it
/// gave one. The stored spec predates the merge of 1.7, so this is
/// ElectrumX master's shape (`phandle_transaction_testmempoolaccept`),
/// which strips Bitcoin Core's answer to what does not depend on the node
/// ("the protocol should not depend on bitcoind-implementation details",
/// electrum-protocol issue #11): no fees, no vsize.
pub fn acceptance_json(verdict: &MempoolAcceptance) -> Value {
    let mut item = json!({
        "txid": verdict.txid.to_string(),
        "wtxid": verdict.wtxid.to_string(),
    });
    if let Some(allowed) = verdict.allowed {
        item["allowed"] = Value::Bool(allowed);
    }
    if let Some(reason) = &verdict.reason {
        item["reason"] = Value::String(reason.clone());
    }
    item
}

/// Answers `blockchain.transaction.testmempoolaccept`: one verdict per
/// transaction, in the order given. The node's refusal of the call itself
/// (a transaction it cannot decode, too many of them) is a daemon error.
pub fn test_mempool_accept(backend: &dyn Backend, raw_txs: &[String]) -> Result<Value, RpcError> {
    Ok(backend
        .test_mempool_accept(raw_txs)?
        .iter()
        .map(acceptance_json)
        .collect())
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
    use bitcoin::Wtxid;

    #[test]
    fn merkle_shape() {
        let m = TxMerkle {
            block_height: Height(2473),
            pos: 1,
            branch: vec![TxMerkleNode::from_byte_array([9; 32])],
        };
        assert_eq!(
            merkle_json(&m),
            json!({"block_height": 2473, "merkle": ["09".repeat(32)], "pos": 1})
        );
    }

    #[test]
    fn acceptance_shapes() {
        let verdict = |allowed, reason: Option<&str>| MempoolAcceptance {
            txid: Txid::from_byte_array([1; 32]),
            wtxid: Wtxid::from_byte_array([2; 32]),
            allowed,
            reason: reason.map(str::to_string),
        };
        let ids = json!({"txid": "01".repeat(32), "wtxid": "02".repeat(32)});
        let with = |extra: Value| {
            let mut v = ids.clone();
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            v
        };
        assert_eq!(
            acceptance_json(&verdict(Some(true), None)),
            with(json!({"allowed": true}))
        );
        assert_eq!(
            acceptance_json(&verdict(Some(false), Some("min relay fee not met"))),
            with(json!({"allowed": false, "reason": "min relay fee not met"}))
        );
        assert_eq!(
            acceptance_json(&verdict(None, Some("package-not-sorted"))),
            with(json!({"reason": "package-not-sorted"}))
        );
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
