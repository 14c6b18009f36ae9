//! The header methods: `blockchain.headers.subscribe`,
//! `blockchain.block.header` and `blockchain.block.headers`, with their
//! cp_height proofs and the 1.6 list shape. Asks the backend for headers and
//! proofs; owns the checkpoint rules and the JSON shapes.

use crate::error::RpcError;
use crate::request::HEADERS_SUBSCRIBE;
use bitcoin::TxMerkleNode;
use osprey_answers::Backend;
use osprey_core::Height;
use serde_json::{json, Map, Value};

/// Returns the `{"height", "hex"}` object of a header (the result of
/// `blockchain.headers.subscribe` and the parameter of its notification).
pub fn tip_json(height: Height, header: &[u8; 80]) -> Value {
    json!({ "height": height.0, "hex": osprey_core::to_hex(header) })
}

/// Returns the serialized `blockchain.headers.subscribe` notification.
pub fn notification(height: Height, header: &[u8; 80]) -> String {
    crate::jsonrpc::notification(HEADERS_SUBSCRIBE, json!([tip_json(height, header)])).to_string()
}

/// Answers `blockchain.headers.subscribe`: the current tip.
pub fn subscribe(backend: &dyn Backend) -> Result<Value, RpcError> {
    let (height, _) = backend.tip();
    let Some(header) = backend.header(height) else {
        // Before the first sync's first commit there is no tip yet.
        return Err(match backend.indexing() {
            Some(at) => RpcError::Indexing(at),
            None => RpcError::Internal(format!("tip header at height {height} is missing")),
        });
    };
    Ok(tip_json(height, &header))
}

/// Returns the `branch`/`root` members of a checkpoint proof.
pub fn proof_members(branch: &[TxMerkleNode], root: &TxMerkleNode) -> Map<String, Value> {
    let mut members = Map::new();
    members.insert(
        "branch".into(),
        branch.iter().map(|n| n.to_string()).collect(),
    );
    members.insert("root".into(), Value::String(root.to_string()));
    members
}

/// Checks `height <= cp_height <= tip` and returns the proof members.
fn proof(
    backend: &dyn Backend,
    height: Height,
    cp_height: Height,
) -> Result<Map<String, Value>, RpcError> {
    let (tip, _) = backend.tip();
    if !(height <= cp_height && cp_height <= tip) {
        return Err(RpcError::BadRequest(format!(
            "require header height {height} <= cp_height {cp_height} <= chain height {tip}"
        )));
    }
    let (branch, root) = backend.header_proof(height, cp_height)?;
    Ok(proof_members(&branch, &root))
}

/// Answers `blockchain.block.header`: the raw header, or with a non-zero
/// `cp_height` the header with its proof.
pub fn header(backend: &dyn Backend, height: Height, cp_height: Height) -> Result<Value, RpcError> {
    let header = backend
        .header(height)
        .ok_or_else(|| RpcError::BadRequest(format!("block at height {height} not found")))?;
    if cp_height.0 == 0 {
        return Ok(Value::String(osprey_core::to_hex(&header)));
    }
    let mut result = proof(backend, height, cp_height)?;
    result.insert("header".into(), Value::String(osprey_core::to_hex(&header)));
    Ok(Value::Object(result))
}

/// Shapes `blockchain.block.headers`' result: `hex` (concatenated) below
/// 1.6, `headers` (a list) from 1.6, plus the proof members if any.
pub fn headers_json(
    headers: &[[u8; 80]],
    max: usize,
    proof: Option<Map<String, Value>>,
    as_list: bool,
) -> Value {
    let mut result = Map::new();
    result.insert("count".into(), json!(headers.len()));
    if as_list {
        result.insert(
            "headers".into(),
            headers.iter().map(|h| osprey_core::to_hex(h)).collect(),
        );
    } else {
        result.insert(
            "hex".into(),
            Value::String(osprey_core::to_hex(&headers.concat())),
        );
    }
    result.insert("max".into(), json!(max));
    if let Some(proof) = proof {
        result.extend(proof);
    }
    Value::Object(result)
}

/// Answers `blockchain.block.headers`: at most `max` headers from
/// `start_height`, fewer at the tip; the proof is for the last one returned.
pub fn headers(
    backend: &dyn Backend,
    max: usize,
    as_list: bool,
    start_height: Height,
    count: u32,
    cp_height: Height,
) -> Result<Value, RpcError> {
    let count = (count as usize).min(max);
    let headers = if count == 0 {
        Vec::new()
    } else {
        backend.headers(start_height, count)
    };
    let proof = match (headers.len(), cp_height.0) {
        (0, _) | (_, 0) => None,
        (n, _) => {
            let last = start_height.0.saturating_add(n as u32 - 1);
            Some(proof(backend, Height(last), cp_height)?)
        }
    };
    Ok(headers_json(&headers, max, proof, as_list))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::hashes::Hash;

    #[test]
    fn headers_shape_depends_on_version() {
        let h = [[1u8; 80], [2u8; 80]];
        let old = headers_json(&h, 2016, None, false);
        assert_eq!(old["count"], 2);
        assert_eq!(old["max"], 2016);
        assert_eq!(old["hex"].as_str().unwrap().len(), 320);
        assert!(old["hex"].as_str().unwrap().starts_with(&"01".repeat(80)));
        assert!(old.get("headers").is_none() && old.get("root").is_none());
        let new = headers_json(&h, 2016, None, true);
        assert_eq!(
            new["headers"],
            json!([hex::encode([1u8; 80]), hex::encode([2u8; 80])])
        );
        assert!(new.get("hex").is_none());
    }

    #[test]
    fn proof_members_are_reversed_hex() {
        let mut bytes = [0u8; 32];
        bytes[0] = 0xab;
        let node = TxMerkleNode::from_byte_array(bytes);
        let p = proof_members(&[node], &node);
        let want = format!("{}ab", "00".repeat(31));
        assert_eq!(p["branch"], json!([want]));
        assert_eq!(p["root"], json!(want));
        let with = headers_json(&[[0u8; 80]], 10, Some(p), true);
        assert_eq!(with["root"], json!(want));
        assert_eq!(with["branch"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn tip_json_shape() {
        let n = notification(Height(7), &[0u8; 80]);
        let v: Value = serde_json::from_str(&n).unwrap();
        assert_eq!(v["method"], "blockchain.headers.subscribe");
        assert_eq!(v["params"][0]["height"], 7);
        assert_eq!(v["params"][0]["hex"].as_str().unwrap().len(), 160);
        assert!(v.get("id").is_none());
    }
}
