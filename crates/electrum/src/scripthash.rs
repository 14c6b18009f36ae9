//! The `blockchain.scripthash.*` family, which also serves the 1.6
//! `blockchain.scriptpubkey.*` methods (sha256(scriptPubKey) == scripthash).
//! Asks the backend for history, balance, unspent outputs and status; owns
//! their JSON shapes and the status notification. Subscription bookkeeping
//! is in `session` (this session) and the server's notifier (all sessions).

use crate::error::RpcError;
use crate::request::{ScriptKey, ScriptMethod};
use osprey_answers::Backend;
use osprey_answers::{Balance, HistoryEntry, Utxo};
use osprey_core::{ScriptHash, StatusHash};
use serde_json::{json, Value};

/// Shapes history entries: `{"height", "tx_hash"}`, plus `fee` for mempool
/// entries (height 0 or -1). A mempool entry whose fee the backend does not
/// know is sent without `fee` rather than with a made-up one.
pub fn history_json(entries: &[HistoryEntry]) -> Value {
    entries
        .iter()
        .map(|e| {
            let mut entry = json!({ "height": e.height, "tx_hash": e.txid.to_string() });
            if e.height <= 0 {
                if let Some(fee) = e.fee {
                    entry["fee"] = json!(fee);
                }
            }
            entry
        })
        .collect()
}

pub fn balance_json(balance: &Balance) -> Value {
    json!({ "confirmed": balance.confirmed, "unconfirmed": balance.unconfirmed })
}

pub fn unspent_json(utxos: &[Utxo]) -> Value {
    utxos
        .iter()
        .map(|u| {
            json!({
                "height": u.height,
                "tx_hash": u.txid.to_string(),
                "tx_pos": u.vout,
                "value": u.value,
            })
        })
        .collect()
}

/// A status is a hex string, or null for a script with no history.
pub fn status_json(status: Option<StatusHash>) -> Value {
    status.map_or(Value::Null, |s| Value::String(osprey_core::to_hex(&s.0)))
}

/// Returns the serialized status notification, `[scripthash, status]` (or
/// `[scriptpubkey, status]` for a script subscribed by scriptpubkey).
pub fn notification(key: &ScriptKey, status: Option<StatusHash>) -> String {
    let params = json!([key.notification_key(), status_json(status)]);
    crate::jsonrpc::notification(key.notification_method(), params).to_string()
}

/// Answers the read-only methods of the family (not subscribe/unsubscribe,
/// which also touch session state).
pub fn query(
    backend: &dyn Backend,
    method: ScriptMethod,
    scripthash: &ScriptHash,
) -> Result<Value, RpcError> {
    Ok(match method {
        ScriptMethod::GetBalance => balance_json(&backend.balance(scripthash)?),
        ScriptMethod::GetHistory => history_json(&backend.history(scripthash)?),
        ScriptMethod::GetMempool => history_json(&backend.mempool_history(scripthash)?),
        ScriptMethod::ListUnspent => unspent_json(&backend.unspent(scripthash)?),
        ScriptMethod::Subscribe => status_json(backend.status(scripthash)?),
        ScriptMethod::Unsubscribe => {
            return Err(RpcError::Internal(
                "unsubscribe is answered by the session".into(),
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::ScriptForm;
    use bitcoin::Txid;

    fn txid(s: &str) -> Txid {
        s.parse().unwrap()
    }

    /// The history of the "Status Example" in protocol-basics.
    #[test]
    fn history_matches_spec_example() {
        let entries = [
            (
                "a6c9c361bd0bc536d6a22648efbf8f9b200e425ef6c3a7a9669dc444c532a347",
                2472,
                None,
            ),
            (
                "80b19848aed792565ab7c5a79b7c2a00fbf985741579396ebe0ab6098e607311",
                0,
                Some(200),
            ),
            (
                "bb4c8ab438c13b89ca80d1d5bee25b0b6b7f55673f4d801998ba97db161d9e85",
                -1,
                Some(200),
            ),
        ]
        .map(|(t, height, fee)| HistoryEntry {
            txid: txid(t),
            height,
            fee,
        });
        assert_eq!(
            history_json(&entries),
            json!([
                {"tx_hash": "a6c9c361bd0bc536d6a22648efbf8f9b200e425ef6c3a7a9669dc444c532a347", "height": 2472},
                {"tx_hash": "80b19848aed792565ab7c5a79b7c2a00fbf985741579396ebe0ab6098e607311", "height": 0, "fee": 200},
                {"tx_hash": "bb4c8ab438c13b89ca80d1d5bee25b0b6b7f55673f4d801998ba97db161d9e85", "height": -1, "fee": 200},
            ])
        );
    }

    #[test]
    fn balance_unspent_and_status_shapes() {
        assert_eq!(
            balance_json(&Balance {
                confirmed: 5,
                unconfirmed: -3
            }),
            json!({"confirmed": 5, "unconfirmed": -3})
        );
        let t = txid("9f2c45a12db0144909b5db269415f7319179105982ac70ed80d76ea79d923ebf");
        assert_eq!(
            unspent_json(&[Utxo {
                txid: t,
                vout: 1,
                height: 437146,
                value: 45318048
            }]),
            json!([{"tx_pos": 1, "value": 45318048, "tx_hash": t.to_string(), "height": 437146}])
        );
        assert_eq!(status_json(None), Value::Null);
        assert_eq!(
            status_json(Some(StatusHash([0xab; 32]))),
            json!("ab".repeat(32))
        );
    }

    #[test]
    fn notification_echoes_the_form_used() {
        let sh = ScriptHash([1; 32]);
        let by_hash = ScriptKey {
            scripthash: sh,
            form: ScriptForm::ScriptHash,
        };
        let v: Value = serde_json::from_str(&notification(&by_hash, None)).unwrap();
        assert_eq!(
            v,
            json!({"jsonrpc": "2.0", "method": "blockchain.scripthash.subscribe", "params": [sh.to_string(), null]})
        );
        let by_spk = ScriptKey {
            scripthash: sh,
            form: ScriptForm::ScriptPubKey(vec![0x51].into()),
        };
        let v: Value =
            serde_json::from_str(&notification(&by_spk, Some(StatusHash([2; 32])))).unwrap();
        assert_eq!(v["method"], "blockchain.scriptpubkey.subscribe");
        assert_eq!(v["params"], json!(["51", "02".repeat(32)]));
    }
}
