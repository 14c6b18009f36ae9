//! The `mempool.*` family: `get_fee_histogram`, (1.6) `get_info` and (1.7)
//! `recent`. The backend already buckets the histogram and keeps the
//! mempool's order; this module only shapes JSON.

use crate::error::RpcError;
use osprey_answers::{Backend, RecentTx};
use osprey_chain::MempoolFees;
use serde_json::{json, Value};

/// Shapes the histogram as `[[fee_rate, vsize], ...]`, highest rate first.
pub fn fee_histogram_json(histogram: &[(f64, u64)]) -> Value {
    histogram
        .iter()
        .map(|(rate, vsize)| json!([rate, vsize]))
        .collect()
}

/// Shapes `mempool.get_info`: the node's fee rates in BTC/kvB.
pub fn info_json(info: &MempoolFees) -> Value {
    json!({
        "mempoolminfee": info.mempoolminfee,
        "minrelaytxfee": info.minrelaytxfee,
        "incrementalrelayfee": info.incrementalrelayfee,
    })
}

/// How many transactions `mempool.recent` lists ("a few of the latest
/// txs just added to the mempool"; ElectrumX lists 10).
pub const RECENT_COUNT: usize = 10;

/// Shapes `mempool.recent`: `[{"txid", "fee", "vsize"}]`, newest first,
/// the fee in satoshis (ElectrumX master's `phandle_mempool_recent`).
pub fn recent_json(recent: &[RecentTx]) -> Value {
    recent
        .iter()
        .map(|tx| json!({ "txid": tx.txid.to_string(), "fee": tx.fee, "vsize": tx.vsize }))
        .collect()
}

pub fn recent(backend: &dyn Backend) -> Value {
    recent_json(&backend.mempool_recent(RECENT_COUNT))
}

pub fn fee_histogram(backend: &dyn Backend) -> Value {
    fee_histogram_json(&backend.fee_histogram())
}

pub fn info(backend: &dyn Backend) -> Result<Value, RpcError> {
    Ok(info_json(&backend.mempool_fees()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        assert_eq!(
            fee_histogram_json(&[(12.5, 1000), (1.0, 5)]),
            json!([[12.5, 1000], [1.0, 5]])
        );
        assert_eq!(fee_histogram_json(&[]), json!([]));
        let info = MempoolFees {
            mempoolminfee: 0.00001,
            minrelaytxfee: 0.00001,
            incrementalrelayfee: 0.00002,
        };
        assert_eq!(
            info_json(&info),
            json!({"mempoolminfee": 0.00001, "minrelaytxfee": 0.00001, "incrementalrelayfee": 0.00002})
        );
        use bitcoin::hashes::Hash;
        let tx = RecentTx {
            txid: bitcoin::Txid::from_byte_array([3; 32]),
            fee: 2210,
            vsize: 141,
        };
        assert_eq!(
            recent_json(&[tx]),
            json!([{"txid": "03".repeat(32), "fee": 2210, "vsize": 141}])
        );
        assert_eq!(recent_json(&[]), json!([]));
    }
}
