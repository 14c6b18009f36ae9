//! Fee estimates: `blockchain.estimatefee` (with 1.6's optional `mode`) and
//! `blockchain.relayfee` (dropped by the 1.6 spec in favour of
//! `mempool.get_info`, still served for clients that call it). Rates are BTC
//! per kvB, as the node gives them.

use crate::error::RpcError;
use osprey_answers::Backend;
use serde_json::{json, Value};

/// Bitcoin Core's `estimatesmartfee` accepts confirmation targets 1..=1008;
/// clamping here avoids sending the node a target it would refuse.
pub const TARGET_BLOCKS_MAX: u32 = 1008;

/// An estimate, or the integer -1 when the node has none (per the spec).
pub fn estimate_json(estimate: Option<f64>) -> Value {
    match estimate {
        Some(rate) => json!(rate),
        None => json!(-1),
    }
}

pub fn estimatefee(
    backend: &dyn Backend,
    number: u32,
    mode: Option<&str>,
) -> Result<Value, RpcError> {
    let blocks = number.clamp(1, TARGET_BLOCKS_MAX) as u16;
    Ok(estimate_json(backend.estimate_fee(blocks, mode)?))
}

pub fn relayfee(backend: &dyn Backend) -> Result<Value, RpcError> {
    Ok(json!(backend.relay_fee()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_estimate_is_integer_minus_one() {
        assert_eq!(estimate_json(None).to_string(), "-1");
        assert_eq!(estimate_json(Some(0.00101079)).to_string(), "0.00101079");
    }
}
