//! The `blockchain.scripthash.*` family (up to 1.6), which also serves
//! 1.7's `blockchain.scriptpubkey.*` methods (sha256(scriptPubKey) ==
//! scripthash). Asks the backend for history, balance, unspent outputs and
//! status; owns their JSON shapes, 1.7's included, and the status
//! notification. Subscription bookkeeping is in `session` (this session)
//! and the server's notifier (all sessions).
//!
//! 1.7 as merged (spesmilo/electrum-protocol PR #2, with PR #17 reverting
//! its `chaintip` but keeping "the change of return type (array->dict) for
//! get_history, get_mempool, listunspent [...] as that makes it easier and
//! more backwards-compatible to add new fields to the responses"): the
//! lists come as `{"history": [...]}` and `{"utxos": [...]}`, as ElectrumX
//! master and the Electrum client's 1.7 branch send and read them.

use crate::error::RpcError;
use crate::request::ScriptMethod;
use crate::script::{ScriptForm, ScriptKey};
use osprey_answers::Backend;
use osprey_answers::{Balance, Error, HistoryEntry, Utxo};
use osprey_core::StatusHash;
use serde_json::{json, Value};

/// Writes history entries as the JSON text of the answer: `{"height",
/// "tx_hash"}`, plus `fee` for mempool entries (height 0 or -1), members in
/// key order as `serde_json` writes an object. A mempool entry whose fee the
/// backend does not know is sent without `fee` rather than with a made-up
/// one. Written straight to text, not built as a `serde_json::Value`: a
/// history of 26,000 entries is 2 MB of text, and was ten times that as
/// values. `None` once the text passes `max` bytes (it would be refused).
pub fn history_text(entries: &[HistoryEntry], max: usize) -> Option<String> {
    use std::fmt::Write;
    let mut text = String::with_capacity((entries.len() * 90 + 2).min(max.saturating_add(1)));
    text.push('[');
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push('{');
        if e.height <= 0 {
            if let Some(fee) = e.fee {
                // Writing to a String cannot fail.
                let _ = write!(text, "\"fee\":{fee},");
            }
        }
        let _ = write!(text, "\"height\":{},\"tx_hash\":\"{}\"}}", e.height, e.txid);
        if text.len() > max {
            return None;
        }
    }
    text.push(']');
    (text.len() <= max).then_some(text)
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

/// Returns the serialized status notification, `[scripthash, status]`,
/// under the method the client subscribed with. A script subscribed by
/// scriptpubkey is named by its hash too: "Importantly, the notifications
/// use script hash instead of scriptPubKey [...] this way servers do not
/// have to store in memory the scriptpubkey", and the Electrum client
/// matches the notification by that hash.
pub fn notification(key: &ScriptKey, status: Option<StatusHash>) -> String {
    let params = json!([key.scripthash.to_string(), status_json(status)]);
    crate::jsonrpc::notification(key.notification_method(), params).to_string()
}

/// The error a script method answers for `e`: 1.7 standardized "history
/// too large" for the `blockchain.scriptpubkey.*` methods as code 10001
/// (the spec: "it SHOULD send a JSON-RPC error with integer code
/// `10_001`"); the script hash methods keep code 1.
pub fn script_error(form: &ScriptForm, e: Error) -> RpcError {
    match (form, e) {
        (ScriptForm::ScriptPubKey, Error::HistoryTooLarge { limit }) => {
            RpcError::HistoryTooLong { limit }
        }
        (_, e) => e.into(),
    }
}

/// The status a subscription to `key` answers with.
pub fn status(backend: &dyn Backend, key: &ScriptKey) -> Result<Option<StatusHash>, RpcError> {
    backend
        .status(&key.scripthash)
        .map_err(|e| script_error(&key.form, e))
}

/// Wraps a 1.7 list in its object (`{"utxos": ...}`); up to 1.6 the list
/// is the answer.
fn listed(form: &ScriptForm, field: &str, list: Value) -> Value {
    match form {
        ScriptForm::ScriptHash => list,
        ScriptForm::ScriptPubKey => json!({ field: list }),
    }
}

/// The answer text of a history ([`history_text`]) in the form `form`
/// asks: the list up to 1.6, `{"history": [...]}` from 1.7 on (a copy of
/// the shared text, in one allocation); `None` past `max` bytes.
pub fn history_answer(
    form: &ScriptForm,
    text: std::sync::Arc<str>,
    max: usize,
) -> Option<std::sync::Arc<str>> {
    match form {
        ScriptForm::ScriptHash => Some(text),
        ScriptForm::ScriptPubKey => {
            let wrapped = format!("{{\"history\":{text}}}");
            (wrapped.len() <= max).then(|| wrapped.into())
        }
    }
}

/// Answers the read-only methods of the family whose answers are values
/// (not the histories: see [`history_text`]; nor subscribe/unsubscribe,
/// which also touch session state), in the shapes of the form `key` came
/// in.
pub fn query(
    backend: &dyn Backend,
    method: ScriptMethod,
    key: &ScriptKey,
) -> Result<Value, RpcError> {
    let sh = &key.scripthash;
    let form = &key.form;
    let answer = || -> Result<Value, Error> {
        Ok(match method {
            ScriptMethod::GetBalance => balance_json(&backend.balance(sh)?),
            ScriptMethod::ListUnspent => listed(form, "utxos", unspent_json(&backend.unspent(sh)?)),
            ScriptMethod::Subscribe => status_json(backend.status(sh)?),
            ScriptMethod::GetHistory | ScriptMethod::GetMempool | ScriptMethod::Unsubscribe => {
                return Err(Error::Internal(format!(
                    "{method:?} is answered by the dispatcher"
                )))
            }
        })
    };
    answer().map_err(|e| script_error(form, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::Txid;
    use osprey_core::ScriptHash;

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
        let text = history_text(&entries, usize::MAX).expect("no limit");
        let written: Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(
            written,
            json!([
                {"tx_hash": "a6c9c361bd0bc536d6a22648efbf8f9b200e425ef6c3a7a9669dc444c532a347", "height": 2472},
                {"tx_hash": "80b19848aed792565ab7c5a79b7c2a00fbf985741579396ebe0ab6098e607311", "height": 0, "fee": 200},
                {"tx_hash": "bb4c8ab438c13b89ca80d1d5bee25b0b6b7f55673f4d801998ba97db161d9e85", "height": -1, "fee": 200},
            ])
        );
        assert_eq!(text, written.to_string(), "members in serde_json's order");
    }

    /// The text is what a client's JSON parser reads, to the byte as
    /// serde_json writes it; past the limit there is no text.
    #[test]
    fn history_text_is_canonical_json_within_the_limit() {
        let t = txid("9f2c45a12db0144909b5db269415f7319179105982ac70ed80d76ea79d923ebf");
        let entries = [
            HistoryEntry {
                txid: t,
                height: 7,
                fee: Some(9),
            },
            HistoryEntry {
                txid: t,
                height: 0,
                fee: Some(1_000),
            },
            HistoryEntry {
                txid: t,
                height: -1,
                fee: None,
            },
        ];
        let text = history_text(&entries, usize::MAX).unwrap();
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(text, parsed.to_string(), "members in serde_json's order");
        assert_eq!(
            parsed[0],
            json!({"height": 7, "tx_hash": t.to_string()}),
            "no fee when confirmed"
        );
        assert_eq!(parsed[1]["fee"], 1_000);
        assert!(parsed[2].get("fee").is_none(), "an unknown fee is left out");
        assert_eq!(history_text(&entries, text.len()).as_deref(), Some(&*text));
        assert_eq!(history_text(&entries, text.len() - 1), None);
        assert_eq!(history_text(&[], 2).as_deref(), Some("[]"));
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
    fn notification_names_the_script_by_its_hash_in_either_form() {
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
            form: ScriptForm::ScriptPubKey,
        };
        let v: Value =
            serde_json::from_str(&notification(&by_spk, Some(StatusHash([2; 32])))).unwrap();
        assert_eq!(
            v,
            json!({
                "jsonrpc": "2.0",
                "method": "blockchain.scriptpubkey.subscribe",
                "params": [sh.to_string(), "02".repeat(32)]
            })
        );
    }

    #[test]
    fn history_text_is_wrapped_from_1_7_on_within_the_limit() {
        let text: std::sync::Arc<str> = r#"[{"height":1,"tx_hash":"ab"}]"#.into();
        let same = history_answer(&ScriptForm::ScriptHash, text.clone(), 0).unwrap();
        assert!(std::sync::Arc::ptr_eq(&same, &text), "shared, not copied");
        let wrapped = history_answer(&ScriptForm::ScriptPubKey, text.clone(), 100).unwrap();
        let parsed: Value = serde_json::from_str(&wrapped).unwrap();
        assert_eq!(parsed, json!({"history": [{"height": 1, "tx_hash": "ab"}]}));
        assert_eq!(&*wrapped, parsed.to_string(), "as serde_json writes it");
        let fits = wrapped.len();
        assert!(history_answer(&ScriptForm::ScriptPubKey, text.clone(), fits).is_some());
        assert!(history_answer(&ScriptForm::ScriptPubKey, text, fits - 1).is_none());
    }

    #[test]
    fn lists_are_objects_from_1_7_on() {
        let list = json!([{"height": 1}]);
        assert_eq!(
            listed(&ScriptForm::ScriptHash, "history", list.clone()),
            list
        );
        assert_eq!(
            listed(&ScriptForm::ScriptPubKey, "utxos", list.clone()),
            json!({"utxos": list})
        );
    }

    #[test]
    fn history_too_large_is_10001_for_scriptpubkeys_only() {
        let too_large = || Error::HistoryTooLarge { limit: 5 };
        let e = script_error(&ScriptForm::ScriptHash, too_large());
        assert_eq!(
            e.to_json(),
            json!({"code": 1, "message": "history too large: more than 5 transactions"})
        );
        let e = script_error(&ScriptForm::ScriptPubKey, too_large());
        assert_eq!(
            e.to_json(),
            json!({"code": 10001, "message": "history too large: more than 5 transactions"})
        );
        let other = script_error(&ScriptForm::ScriptPubKey, Error::BadRequest("x".into()));
        assert_eq!(other.code(), 1);
    }
}
