//! The 1.7 `blockchain.outpoint.*` family: the status of one transaction
//! output, `{}` (unknown), `{"funder_height"}` (funded) or
//! `{"funder_height", "spender_txhash", "spender_height"}` (spent), and its
//! notification `(tx_hash, txout_idx, status)`. Subscription bookkeeping
//! is in `session` (this session) and the server's notifier (all sessions).
//!
//! Sources: spesmilo/electrum-protocol PR #2 as merged (the stored copy of
//! the spec predates the merge, so the shapes are those of ElectrumX
//! master 42e9b38, `_convert_txospendstatus_to_protocol_dict` and
//! `_notify_inner`, and of the Electrum client's 1.7 branch, f7b536b,
//! which they agree with).

use crate::error::RpcError;
use crate::request::OUTPOINT_SUBSCRIBE;
use bitcoin::OutPoint;
use osprey_answers::Backend;
use osprey_answers::OutpointStatus;
use osprey_core::ScriptHash;
use serde_json::{json, Map, Value};

/// Shapes a status: a key is present only when its fact is known ("0, 1,
/// or 3 of the following items"). 1.7 names the funding height
/// `funder_height` (the draft's `height`).
pub fn status_json(status: &OutpointStatus) -> Value {
    let mut object = Map::new();
    if let Some(height) = status.height {
        object.insert("funder_height".into(), json!(height));
        if let Some((txid, height)) = status.spender {
            object.insert("spender_txhash".into(), json!(txid.to_string()));
            object.insert("spender_height".into(), json!(height));
        }
    }
    Value::Object(object)
}

/// Returns the serialized notification of a new status. Its parameters are
/// the request's `tx_hash` and `txout_idx` then the status, flat: the
/// Electrum client finds the subscription a notification belongs to by
/// the parameters it subscribed with (less `spk_hint`), so the draft's
/// nested `[[tx_hash, txout_idx], status]` would never match.
pub fn notification(outpoint: &OutPoint, status: &OutpointStatus) -> String {
    let params = json!([
        outpoint.txid.to_string(),
        outpoint.vout,
        status_json(status)
    ]);
    crate::jsonrpc::notification(OUTPOINT_SUBSCRIBE, params).to_string()
}

/// Answers `blockchain.outpoint.get_status`.
pub fn get_status(
    backend: &dyn Backend,
    outpoint: &OutPoint,
    spk_hint: &ScriptHash,
) -> Result<Value, RpcError> {
    Ok(status_json(
        &backend.outpoint_status(outpoint, Some(spk_hint))?.status,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::hashes::Hash;
    use bitcoin::Txid;

    #[test]
    fn shapes_hold_0_1_or_3_keys() {
        let spender = Txid::from_byte_array([7; 32]);
        assert_eq!(status_json(&OutpointStatus::default()), json!({}));
        let funded = OutpointStatus {
            height: Some(1866594),
            spender: None,
        };
        assert_eq!(status_json(&funded), json!({"funder_height": 1866594}));
        let spent = OutpointStatus {
            height: Some(-1),
            spender: Some((spender, -1)),
        };
        assert_eq!(
            status_json(&spent),
            json!({"funder_height": -1, "spender_txhash": spender.to_string(), "spender_height": -1})
        );
        // A spender without a funding transaction is not a status 1.7
        // allows: nothing is said.
        let orphan = OutpointStatus {
            height: None,
            spender: Some((spender, 0)),
        };
        assert_eq!(status_json(&orphan), json!({}));
    }

    #[test]
    fn notification_names_the_outpoint_as_the_request_did() {
        let outpoint = OutPoint {
            txid: Txid::from_byte_array([1; 32]),
            vout: 4,
        };
        let status = OutpointStatus {
            height: Some(0),
            spender: None,
        };
        let v: Value = serde_json::from_str(&notification(&outpoint, &status)).unwrap();
        assert_eq!(
            v,
            json!({
                "jsonrpc": "2.0",
                "method": "blockchain.outpoint.subscribe",
                "params": [outpoint.txid.to_string(), 4, {"funder_height": 0}]
            })
        );
    }
}
