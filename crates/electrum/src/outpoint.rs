//! The 1.7 draft's `blockchain.outpoint.*` family: the status of one
//! transaction output, `{}` (unknown), `{"height"}` (funded) or
//! `{"height", "spender_txhash", "spender_height"}` (spent), and its
//! notification `[[tx_hash, txout_idx], status]`. Subscription bookkeeping
//! is in `session` (this session) and the server's notifier (all sessions).

use crate::error::RpcError;
use crate::request::OUTPOINT_SUBSCRIBE;
use bitcoin::OutPoint;
use osprey_answers::Backend;
use osprey_answers::OutpointStatus;
use osprey_core::ScriptHash;
use serde_json::{json, Map, Value};

/// Shapes a status: a key is present only when its fact is known (the
/// draft's "0, 1, or 3 of the following items").
pub fn status_json(status: &OutpointStatus) -> Value {
    let mut object = Map::new();
    if let Some(height) = status.height {
        object.insert("height".into(), json!(height));
        if let Some((txid, height)) = status.spender {
            object.insert("spender_txhash".into(), json!(txid.to_string()));
            object.insert("spender_height".into(), json!(height));
        }
    }
    Value::Object(object)
}

/// Returns the serialized notification of a new status.
pub fn notification(outpoint: &OutPoint, status: &OutpointStatus) -> String {
    let params = json!([
        [outpoint.txid.to_string(), outpoint.vout],
        status_json(status)
    ]);
    crate::jsonrpc::notification(OUTPOINT_SUBSCRIBE, params).to_string()
}

/// Answers `blockchain.outpoint.get_status`.
pub fn get_status(
    backend: &dyn Backend,
    outpoint: &OutPoint,
    spk_hint: Option<&ScriptHash>,
) -> Result<Value, RpcError> {
    Ok(status_json(
        &backend.outpoint_status(outpoint, spk_hint)?.status,
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
        assert_eq!(status_json(&funded), json!({"height": 1866594}));
        let spent = OutpointStatus {
            height: Some(-1),
            spender: Some((spender, -1)),
        };
        assert_eq!(
            status_json(&spent),
            json!({"height": -1, "spender_txhash": spender.to_string(), "spender_height": -1})
        );
        // A spender without a funding transaction is not a status the
        // draft allows: nothing is said.
        let orphan = OutpointStatus {
            height: None,
            spender: Some((spender, 0)),
        };
        assert_eq!(status_json(&orphan), json!({}));
    }

    #[test]
    fn notification_names_the_outpoint() {
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
                "params": [[outpoint.txid.to_string(), 4], {"height": 0}]
            })
        );
    }
}
