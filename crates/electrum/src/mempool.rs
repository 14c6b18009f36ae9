//! The `mempool.*` family: `get_fee_histogram` and (1.6) `get_info`. The
//! backend already buckets the histogram; this module only shapes JSON.

use crate::error::RpcError;
use osprey_answers::Backend;
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
    }
}
