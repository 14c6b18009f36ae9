//! The node's services besides blocks ([`ChainSource`]): transactions by
//! txid, the mempool, relay and fee estimates, in each node's dialect.

use super::{Daemon, NodeKind};
use crate::source::{ChainSource, MempoolAcceptance, MempoolFees, MempoolTx, TxLocation};
use crate::Error;
use bitcoin::consensus::deserialize;
use bitcoin::{Transaction, Txid};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;

/// JSON-RPC code for "method not found".
const RPC_METHOD_NOT_FOUND: i64 = -32601;

impl ChainSource for Daemon {
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
        let params =
            self.kind
                .getrawtransaction_params(txid, false, location.map(|loc| loc.block_hash));
        let hex: Result<String, Error> = self.rpc.call("getrawtransaction", &params);
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
        let params =
            self.kind
                .getrawtransaction_params(txid, true, location.map(|loc| loc.block_hash));
        self.rpc.call("getrawtransaction", &params)
    }

    fn mempool_txids(&self) -> Result<Vec<Txid>, Error> {
        self.rpc.call("getrawmempool", &[])
    }

    fn mempool_transactions(&self, txids: &[Txid]) -> Result<Vec<MempoolTx>, Error> {
        let mut found = Vec::with_capacity(txids.len());
        for chunk in txids.chunks(500) {
            let params: Vec<Vec<Value>> = chunk
                .iter()
                .map(|t| self.kind.getrawtransaction_params(t, false, None))
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

    fn test_mempool_accept(&self, raw_hexes: &[String]) -> Result<Vec<MempoolAcceptance>, Error> {
        let answer: Value = self.rpc.call("testmempoolaccept", &[json!(raw_hexes)])?;
        let items = answer
            .as_array()
            .ok_or_else(|| Error::persistent(format!("testmempoolaccept: not a list: {answer}")))?;
        items
            .iter()
            .map(|item| {
                acceptance(self.kind, item).ok_or_else(|| {
                    Error::persistent(format!("testmempoolaccept: unreadable verdict {item}"))
                })
            })
            .collect()
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

/// Reads one verdict of `testmempoolaccept`. The nodes differ: Core leaves
/// `allowed` out of a transaction it did not get to (a package stopped at
/// an earlier failure); btcd judges every transaction but leaves `allowed`
/// out when it is false, and always sends `package-error`, empty when
/// there is none. An empty reason is no reason.
fn acceptance(kind: NodeKind, item: &Value) -> Option<MempoolAcceptance> {
    let text = |key: &str| {
        item.get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let allowed = match (kind, item.get("allowed").and_then(Value::as_bool)) {
        (NodeKind::Btcd, allowed) => Some(allowed.unwrap_or(false)),
        (NodeKind::BitcoinCore { .. }, allowed) => allowed,
    };
    let reason = text("package-error")
        .or_else(|| text("reject-details"))
        .or_else(|| text("reject-reason"))
        .map(str::to_string);
    Some(MempoolAcceptance {
        txid: text("txid")?.parse().ok()?,
        wtxid: text("wtxid")?.parse().ok()?,
        allowed,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TXID: &str = "7d7d6f5e1e5fdc0955ac16309636597c5dc9e117950a3aee2203fb60177131fc";
    const WTXID: &str = "3b9d266452396611cc68a9d9a1ad5b2e6b3c8b3a0d1a2cbb8c6c4aef5cb8b4de";

    /// The answers are Core 31's and btcd 0.24.2's, as each node sends them.
    #[test]
    fn verdicts_read_alike_from_both_nodes() {
        let core = NodeKind::BitcoinCore { version: 310100 };
        let accepted = json!({"txid": TXID, "wtxid": WTXID, "allowed": true, "vsize": 110,
            "fees": {"base": 0.0001, "effective-feerate": 0.0009, "effective-includes": [WTXID]}});
        let want = |allowed, reason: Option<&str>| MempoolAcceptance {
            txid: TXID.parse().unwrap(),
            wtxid: WTXID.parse().unwrap(),
            allowed,
            reason: reason.map(str::to_string),
        };
        assert_eq!(acceptance(core, &accepted), Some(want(Some(true), None)));
        let refused = json!({"txid": TXID, "wtxid": WTXID, "allowed": false,
            "reject-reason": "mandatory-script-verify-flag-failed (Witness program hash mismatch)",
            "reject-details": "mandatory-script-verify-flag-failed (Witness program hash mismatch), input 0 of ..."});
        assert_eq!(
            acceptance(core, &refused),
            Some(want(
                Some(false),
                Some("mandatory-script-verify-flag-failed (Witness program hash mismatch), input 0 of ...")
            ))
        );
        let unjudged = json!({"txid": TXID, "wtxid": WTXID, "package-error": "package-not-sorted"});
        assert_eq!(
            acceptance(core, &unjudged),
            Some(want(None, Some("package-not-sorted")))
        );
        let btcd_refused = json!({"txid": TXID, "wtxid": WTXID, "package-error": "",
            "reject-reason": "missing-inputs"});
        assert_eq!(
            acceptance(NodeKind::Btcd, &btcd_refused),
            Some(want(Some(false), Some("missing-inputs")))
        );
        let btcd_accepted = json!({"txid": TXID, "wtxid": WTXID, "package-error": "",
            "allowed": true, "vsize": 110, "fees": {"base": 0.0001}});
        assert_eq!(
            acceptance(NodeKind::Btcd, &btcd_accepted),
            Some(want(Some(true), None))
        );
        assert_eq!(
            acceptance(core, &json!({"txid": "zz", "wtxid": WTXID})),
            None
        );
        assert_eq!(acceptance(core, &json!({"wtxid": WTXID})), None);
    }
}
